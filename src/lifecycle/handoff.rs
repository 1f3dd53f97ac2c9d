//! Held conversations that return to the agent by themselves
//! (docs/admin.md#human-handoff): for a tenant with a return time, a conversation whose
//! user has waited that long without an answer is handed back, as a person would.

use std::time::Duration;

use sqlx::PgPool;
use tokio::sync::watch;

use crate::db::audit::Actor;
use crate::db::{holds, TenantTx};
use crate::turn::handoff::{self, Conversation};

const EVERY: Duration = Duration::from_secs(30);
/// Held conversations looked at per tenant and pass.
const LOOKED_AT: i64 = 1000;

/// The job's step, which tests call at any instant. Returns the conversations handed back.
pub async fn run_pass(pool: &PgPool, now: chrono::DateTime<chrono::Utc>) -> Result<usize, sqlx::Error> {
    let tenants = {
        let mut conn = pool.acquire().await?;
        holds::tenants_with_return(&mut conn).await?
    };
    let mut returned = 0;
    for (tenant, secs) in tenants {
        let mut tx = TenantTx::begin(pool, tenant).await?;
        let waited_since = now - chrono::Duration::seconds(i64::from(secs));
        for conversation in holds::expired(&mut tx, waited_since, LOOKED_AT).await? {
            let Some(parsed) = Conversation::parse(&conversation) else {
                continue;
            };
            let back = handoff::hand_back(&mut tx, Actor::Gateway, &conversation, parsed).await?;
            if back.released {
                returned += 1;
                tracing::info!(tenant_id = %tenant, conversation, "held conversation returned to the agent");
            }
        }
        tx.commit().await?;
    }
    Ok(returned)
}

/// Every `EVERY`, on instances of the worker role.
pub async fn run(pool: PgPool, stop: watch::Receiver<bool>) {
    super::every("handoff return", EVERY, stop, || {
        run_pass(&pool, chrono::Utc::now())
    })
    .await;
}
