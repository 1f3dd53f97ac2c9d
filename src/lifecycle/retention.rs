//! The retention job (docs/admin.md#data-lifecycle-retention-erasure-export-audit): small
//! batches inside each tenant's `TenantTx`, never a turn in flight. Several instances may run
//! it at once: locked rows are skipped, and deleting what is gone deletes nothing.

use std::time::Duration;

use sqlx::PgPool;
use tokio::sync::watch;

use crate::db::lifecycle::{self, Purged};
use crate::db::TenantTx;
use crate::domain::TenantId;

/// Meta's 7-day retry horizon: a retry must still find its idempotency key.
pub const MIN_DAYS: i32 = 7;
pub const MAX_DAYS: i32 = 36_500;
/// Per transaction: no transaction holds many locks or much WAL.
pub const BATCH: i64 = 500;
const EVERY: Duration = Duration::from_secs(15 * 60);

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct PassReport {
    /// Tenants with a retention, looked at.
    pub tenants: usize,
    pub turns: u64,
    pub reply_parts: u64,
    pub notices: u64,
}

pub fn cutoff(now: chrono::DateTime<chrono::Utc>, days: i32) -> chrono::DateTime<chrono::Utc> {
    now - chrono::Duration::days(i64::from(days))
}

/// The job's step, which tests call at any instant: the cutoff is bound, never `now()`.
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

/// A batch per transaction until one comes back short.
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

/// A failed pass is tried again at the next; a database without the schema is no error.
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
