//! The retention job: deletes each tenant's turns older than its `retention_days`, with
//! their reply parts, and its unlinked-notice marks of days past it.
//!
//! - Small batches (`BATCH` turns per transaction), tenant by tenant, each inside that
//!   tenant's `TenantTx`: no transaction holds many locks or much WAL, and RLS applies to
//!   every delete as to any other tenant work.
//! - Never a turn in flight (`db::lifecycle::purge_turns`): not `accepted` or
//!   `dispatching`, no job in the queue, no reply part `pending` or `sending`. Such a turn
//!   is taken by a later pass, once it has settled.
//! - Dedupe stays correct: the retention is at least `MIN_DAYS`, and a turn's idempotency
//!   key lives as long as its row, so every platform retry (Meta retries for up to 7 days,
//!   Slack and Telegram for far less) still finds the key and is dropped.
//! - The cutoff is computed here from the caller's clock (bound as a parameter, never
//!   `now()` inside the statement), so tests drive a pass at any instant.
//! - Several instances may run it at once: rows another transaction holds are skipped, and
//!   deleting what is already gone deletes nothing.

use std::time::Duration;

use sqlx::PgPool;
use tokio::sync::watch;

use crate::db::lifecycle::{self, Purged};
use crate::db::TenantTx;
use crate::domain::TenantId;

/// The shortest retention a tenant may set: Meta's 7-day retry horizon (README "Data
/// lifecycle").
pub const MIN_DAYS: i32 = 7;
/// The longest: 100 years (beyond that, keep for ever with `null`).
pub const MAX_DAYS: i32 = 36_500;
/// Turns (or notice marks) deleted per transaction.
pub const BATCH: i64 = 500;
/// Time between passes.
const EVERY: Duration = Duration::from_secs(15 * 60);

/// What one pass deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct PassReport {
    /// Tenants with a retention, looked at.
    pub tenants: usize,
    pub turns: u64,
    pub reply_parts: u64,
    pub notices: u64,
}

/// The instant before which `days` of retention delete, as of `now`.
pub fn cutoff(now: chrono::DateTime<chrono::Utc>, days: i32) -> chrono::DateTime<chrono::Utc> {
    now - chrono::Duration::days(i64::from(days))
}

/// One pass over every tenant with a retention, as of `now`: the job's step, which tests
/// call directly.
pub async fn run_pass(pool: &PgPool, now: chrono::DateTime<chrono::Utc>) -> Result<PassReport, sqlx::Error> {
    pass(pool, now, || false).await
}

async fn pass(
    pool: &PgPool,
    now: chrono::DateTime<chrono::Utc>,
    stopping: impl Fn() -> bool,
) -> Result<PassReport, sqlx::Error> {
    let tenants = {
        let mut conn = pool.acquire().await?;
        lifecycle::tenants_with_retention(&mut conn).await?
    };
    let mut report = PassReport {
        tenants: tenants.len(),
        ..PassReport::default()
    };
    for (tenant, days) in tenants {
        if stopping() {
            break;
        }
        let purged = purge_tenant(pool, tenant, cutoff(now, days), &stopping).await?;
        report.turns += purged.turns;
        report.reply_parts += purged.reply_parts;
        let notices = purge_notices(pool, tenant, cutoff(now, days).date_naive(), &stopping).await?;
        report.notices += notices;
        for (kind, count) in [
            ("turns", purged.turns),
            ("reply_parts", purged.reply_parts),
            ("notices", notices),
        ] {
            metrics::counter!("channel_bridge_retention_deleted_total", "kind" => kind).increment(count);
        }
        if purged.turns + notices > 0 {
            tracing::info!(
                tenant_id = %tenant,
                retention_days = days,
                turns = purged.turns,
                reply_parts = purged.reply_parts,
                notices,
                "retention deleted old turns"
            );
        }
    }
    Ok(report)
}

/// Deletes one tenant's turns before `cutoff`, a batch per transaction, until a batch
/// comes back short.
async fn purge_tenant(
    pool: &PgPool,
    tenant: TenantId,
    cutoff: chrono::DateTime<chrono::Utc>,
    stopping: &impl Fn() -> bool,
) -> Result<Purged, sqlx::Error> {
    let mut total = Purged::default();
    while !stopping() {
        let mut tx = TenantTx::begin(pool, tenant).await?;
        let batch = lifecycle::purge_turns(&mut tx, cutoff, BATCH).await?;
        tx.commit().await?;
        total.turns += batch.turns;
        total.reply_parts += batch.reply_parts;
        if batch.turns < BATCH.unsigned_abs() {
            break;
        }
    }
    Ok(total)
}

async fn purge_notices(
    pool: &PgPool,
    tenant: TenantId,
    cutoff: chrono::NaiveDate,
    stopping: &impl Fn() -> bool,
) -> Result<u64, sqlx::Error> {
    let mut total = 0;
    while !stopping() {
        let mut tx = TenantTx::begin(pool, tenant).await?;
        let deleted = lifecycle::purge_notices(&mut tx, cutoff, BATCH).await?;
        tx.commit().await?;
        total += deleted;
        if deleted < BATCH.unsigned_abs() {
            break;
        }
    }
    Ok(total)
}

/// The job: a pass now and every `EVERY` after, until `stop`. A failed pass is logged and
/// tried again at the next one; a database without the schema yet is not an error.
pub async fn run(pool: PgPool, mut stop: watch::Receiver<bool>) {
    loop {
        let stopping = {
            let stop = stop.clone();
            move || *stop.borrow()
        };
        match pass(&pool, chrono::Utc::now(), stopping).await {
            Ok(_) => {
                metrics::counter!("channel_bridge_retention_passes_total", "outcome" => "ok").increment(1)
            }
            Err(err) if crate::db::means_no_schema(&err) => {}
            Err(err) => {
                metrics::counter!("channel_bridge_retention_passes_total", "outcome" => "failed")
                    .increment(1);
                tracing::warn!(error = %err, "retention pass failed; trying again at the next one");
            }
        }
        tokio::select! {
            () = tokio::time::sleep(EVERY) => {}
            _ = stop.changed() => return,
        }
        if *stop.borrow() {
            return;
        }
    }
}
