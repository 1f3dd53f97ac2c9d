//! The admin actions `redispatch` and `resend`, the only transitions without a lease
//! (docs/admin.md#failed-turns-seeing-them-and-acting-on-them).

use crate::db::queue::{self, Stage};
use crate::db::TenantTx;
use crate::domain::{ConversationKey, MessageId, PartStatus};
use crate::shapes::MessageSelection;

/// Each field set narrows the choice as in the admin listing; oldest first, at most `limit`.
#[derive(Debug, Clone, Default)]
pub struct Selection {
    pub ids: Option<Vec<MessageId>>,
    pub matching: MessageSelection,
    pub limit: i64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Requeued {
    pub ids: Vec<MessageId>,
    pub more: bool,
}

#[derive(Debug, Clone, Copy)]
enum Action {
    Redispatch,
    Resend { include_unknown: bool },
}

impl Action {
    fn undelivered(self) -> Vec<&'static str> {
        match self {
            Action::Resend {
                include_unknown: true,
            } => vec![PartStatus::Failed.as_str(), PartStatus::Unknown.as_str()],
            _ => vec![PartStatus::Failed.as_str()],
        }
    }
}

/// Turns that have a job are left out by `choose`, not here: on Citus the queue cannot be
/// joined.
fn push_candidates(
    sql: &mut sqlx::QueryBuilder<'_, sqlx::Postgres>,
    tenant: crate::domain::TenantId,
    selection: &Selection,
    action: Action,
) {
    sql.push(" where m.tenant_id = ").push_bind(tenant);
    match action {
        // A turn the agent said it would answer later may be asked again; until the new
        // dispatch is answered 202 too, events for the turn answer 409.
        Action::Redispatch => {
            sql.push(" and m.status in ('dispatch_failed', 'awaiting_agent')");
        }
        Action::Resend { .. } => {
            sql.push(
                " and m.status in ('executed', 'delivery_failed')
                  and exists (select 1 from channel_replies r
                               where r.tenant_id = m.tenant_id and r.message_id = m.id
                                 and r.status = any(",
            )
            .push_bind(action.undelivered())
            .push("))");
        }
    }
    if let Some(ids) = &selection.ids {
        sql.push(" and m.id = any(").push_bind(ids.clone()).push(")");
    }
    let matching = &selection.matching;
    if let Some(user) = &matching.user_id {
        sql.push(" and m.user_id = ").push_bind(user.clone());
    }
    if let Some(platform) = matching.platform {
        sql.push(" and m.platform = ").push_bind(platform.as_str());
    }
    if let Some(connector) = matching.connector_id {
        sql.push(" and m.connector_id = ").push_bind(connector);
    }
    if let Some(status) = matching.status {
        sql.push(" and m.status = ").push_bind(status);
    }
    if let Some(since) = matching.since {
        sql.push(" and m.received_at >= ").push_bind(since);
    }
    if let Some(until) = matching.until {
        sql.push(" and m.received_at < ").push_bind(until);
    }
}

/// The chosen turns, locked until the commit (a second call waits, then finds them no
/// longer candidates), and those skipped for having a job.
async fn choose(
    tx: &mut TenantTx,
    selection: &Selection,
    action: Action,
) -> Result<(Vec<MessageId>, Vec<MessageId>), sqlx::Error> {
    let tenant = tx.tenant();
    queue::without_jobs(tx, selection.limit, |seen, need| {
        let mut sql = sqlx::QueryBuilder::new("select m.id from channel_messages m");
        push_candidates(&mut sql, tenant, selection, action);
        sql.push(" and m.id <> all(")
            .push_bind(seen.to_vec())
            .push(") order by m.received_at, m.id limit ")
            .push_bind(need)
            .push(" for update of m");
        sql
    })
    .await
}

/// Jobs are queued oldest first, so one user's turns go in the order they were written.
pub async fn redispatch(tx: &mut TenantTx, selection: &Selection) -> Result<Requeued, sqlx::Error> {
    let (chosen, skipped) = choose(tx, selection, Action::Redispatch).await?;
    let rows: Vec<(MessageId, ConversationKey, chrono::DateTime<chrono::Utc>)> = sqlx::query_as(
        "update channel_messages
            set status = 'accepted', decision = null, attempts = 0, last_error = null,
                completed_at = null, awaiting_until = null, updated_at = now()
          where tenant_id = $1 and id = any($2) and status in ('dispatch_failed', 'awaiting_agent')
      returning id, conversation_key, received_at",
    )
    .bind(tx.tenant())
    .bind(&chosen)
    .fetch_all(tx.conn())
    .await?;
    requeue(tx, rows, selection, Action::Redispatch, Stage::Dispatch, &skipped).await
}

pub async fn resend(
    tx: &mut TenantTx,
    selection: &Selection,
    include_unknown: bool,
) -> Result<Requeued, sqlx::Error> {
    let action = Action::Resend { include_unknown };
    let (chosen, skipped) = choose(tx, selection, action).await?;
    // The part statuses are checked again by the update itself: a concurrent resend that
    // committed first has made them `pending`, so this one changes (and queues) nothing.
    let mut reopened: Vec<MessageId> = sqlx::query_scalar(
        "update channel_replies
            set status = 'pending', attempts = 0, last_error = null, sending_since = null,
                updated_at = now()
          where tenant_id = $1 and message_id = any($2) and status = any($3)
      returning message_id",
    )
    .bind(tx.tenant())
    .bind(&chosen)
    .bind(action.undelivered())
    .fetch_all(tx.conn())
    .await?;
    reopened.sort();
    reopened.dedup();
    let rows: Vec<(MessageId, ConversationKey, chrono::DateTime<chrono::Utc>)> = sqlx::query_as(
        "update channel_messages set status = 'executed', last_error = null, updated_at = now()
          where tenant_id = $1 and id = any($2)
      returning id, conversation_key, received_at",
    )
    .bind(tx.tenant())
    .bind(&reopened)
    .fetch_all(tx.conn())
    .await?;
    requeue(tx, rows, selection, action, Stage::Reply, &skipped).await
}

async fn requeue(
    tx: &mut TenantTx,
    mut rows: Vec<(MessageId, ConversationKey, chrono::DateTime<chrono::Utc>)>,
    selection: &Selection,
    action: Action,
    stage: Stage,
    skipped: &[MessageId],
) -> Result<Requeued, sqlx::Error> {
    rows.sort_by_key(|(id, _, received_at)| (*received_at, *id));
    let jobs: Vec<(MessageId, &ConversationKey)> = rows.iter().map(|(id, key, _)| (*id, key)).collect();
    queue::enqueue_many(tx, &jobs, stage).await?;
    let mut more = sqlx::QueryBuilder::new("select exists (select 1 from channel_messages m");
    push_candidates(&mut more, tx.tenant(), selection, action);
    more.push(" and m.id <> all(")
        .push_bind(skipped.to_vec())
        .push("))");
    let more: bool = more.build_query_scalar().fetch_one(tx.conn()).await?;
    Ok(Requeued {
        ids: rows.into_iter().map(|(id, ..)| id).collect(),
        more,
    })
}
