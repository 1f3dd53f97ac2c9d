//! Turns whose agent answered `202` and then went quiet (docs/agent.md#answering-later):
//! once `CB_AGENT_ASYNC_HORIZON_SECS` has passed they end with what they got, so the admin
//! listing and the agent's later histories show them for what they are.

use std::time::Duration;

use sqlx::PgPool;
use tokio::sync::watch;

use crate::db::TenantTx;
use crate::domain::TenantId;

const EVERY: Duration = Duration::from_secs(60);
/// Per transaction.
const BATCH: i64 = 500;

/// The job's step, which tests call at any instant. Returns the turns ended.
pub async fn run_pass(pool: &PgPool, now: chrono::DateTime<chrono::Utc>) -> Result<u64, sqlx::Error> {
    let tenants: Vec<TenantId> = {
        let mut conn = pool.acquire().await?;
        sqlx::query_scalar("select id from tenants order by id")
            .fetch_all(&mut *conn)
            .await?
    };
    let mut ended = 0;
    for tenant in tenants {
        loop {
            let mut tx = TenantTx::begin(pool, tenant).await?;
            let batch = crate::turn::later::end_past_horizon(&mut tx, now, BATCH).await?;
            tx.commit().await?;
            ended += batch;
            if batch < BATCH.unsigned_abs() {
                break;
            }
        }
    }
    if ended > 0 {
        metrics::counter!("channel_bridge_async_expired_total").increment(ended);
        tracing::warn!(
            turns = ended,
            "turns answered 202 ended at the async horizon without done"
        );
    }
    Ok(ended)
}

/// Every `EVERY`, on instances of the worker role.
pub async fn run(pool: PgPool, stop: watch::Receiver<bool>) {
    super::every("async horizon", EVERY, stop, || {
        run_pass(&pool, chrono::Utc::now())
    })
    .await;
}
