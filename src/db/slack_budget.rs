//! `slack_read_budget` (RLS): one `conversations.replies` slot per Slack workspace, kept in
//! the database so all instances spend the one budget Slack counts; a row lock settles a race,
//! and the database's clock is the only clock (docs/delivery.md#delivery-guarantees).

use std::time::Duration;

use super::TenantTx;

/// `None` when granted, else how long until it is due.
pub async fn take(
    tx: &mut TenantTx,
    workspace: &str,
    interval: Duration,
) -> Result<Option<Duration>, sqlx::Error> {
    let tenant = tx.tenant();
    // An update of a due mark, else an insert of the first: two statements, because Citus
    // allows no `now()` in an `ON CONFLICT … WHERE`. The row lock still settles a race (the
    // second update sees the moved mark; the second insert, the first's row).
    let mut granted: Option<i32> = sqlx::query_scalar(
        "update slack_read_budget set next_at = now() + make_interval(secs => $3)
          where tenant_id = $1 and workspace = $2 and next_at <= now()
         returning 1",
    )
    .bind(tenant)
    .bind(workspace)
    .bind(interval.as_secs_f64())
    .fetch_optional(tx.conn())
    .await?;
    if granted.is_none() {
        granted = sqlx::query_scalar(
            "insert into slack_read_budget (tenant_id, workspace, next_at)
             values ($1, $2, now() + make_interval(secs => $3))
             on conflict (tenant_id, workspace) do nothing
             returning 1",
        )
        .bind(tenant)
        .bind(workspace)
        .bind(interval.as_secs_f64())
        .fetch_optional(tx.conn())
        .await?;
    }
    if granted.is_some() {
        return Ok(None);
    }
    // Refused, yet nothing to wait for: the mark passed between the two statements.
    let wait = wait(tx, workspace).await?;
    Ok(Some(wait.unwrap_or(Duration::from_secs(1))))
}

pub async fn hold_off(tx: &mut TenantTx, workspace: &str, retry_after: Duration) -> Result<(), sqlx::Error> {
    let tenant = tx.tenant();
    sqlx::query(
        "insert into slack_read_budget as b (tenant_id, workspace, next_at)
         values ($1, $2, now() + make_interval(secs => $3))
         on conflict (tenant_id, workspace) do update set next_at = greatest(b.next_at, excluded.next_at)",
    )
    .bind(tenant)
    .bind(workspace)
    .bind(retry_after.as_secs_f64())
    .execute(tx.conn())
    .await?;
    Ok(())
}

async fn wait(tx: &mut TenantTx, workspace: &str) -> Result<Option<Duration>, sqlx::Error> {
    let tenant = tx.tenant();
    let secs: Option<f64> = sqlx::query_scalar(
        "select extract(epoch from next_at - now())::float8 from slack_read_budget
          where tenant_id = $1 and workspace = $2",
    )
    .bind(tenant)
    .bind(workspace)
    .fetch_optional(tx.conn())
    .await?;
    Ok(secs.filter(|s| *s > 0.0).map(Duration::from_secs_f64))
}
