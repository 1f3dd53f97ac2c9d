//! The reply stage: a turn's stored parts posted to its platform.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sqlx::PgPool;
use tracing::Instrument;

use super::claimed::{phase, StepOutcome, Waited};
use crate::db::queue::Job;
use crate::db::TenantTx;
use crate::delivery::holds::SendHolds;
use crate::delivery::{Delivery, DeliveryOutcome, Outgoing};
use crate::egress::GuardedClient;
use crate::settings::ServeSettings;
use crate::telemetry::traces;
use crate::turn::writer::TurnWriter;

pub(super) struct Deliverer {
    pool: PgPool,
    writer: TurnWriter,
    /// The platforms' client: shorter timeouts than an agent call.
    client: GuardedClient,
    settings: Arc<ServeSettings>,
    /// One per worker, so a 429 met by one turn holds its connector's other turns too.
    holds: SendHolds,
}

impl Deliverer {
    pub(super) fn new(
        pool: PgPool,
        writer: TurnWriter,
        client: GuardedClient,
        settings: Arc<ServeSettings>,
    ) -> Self {
        Self {
            pool,
            writer,
            client,
            settings,
            holds: SendHolds::default(),
        }
    }

    /// Read through an outage, for at most a lease: the answer it follows is stored.
    pub(super) async fn load_outgoing(&self, job: &Job) -> anyhow::Result<Option<Outgoing>> {
        let read = || async {
            let mut tx = TenantTx::begin(&self.pool, job.tenant_id).await?;
            let keys = &self.settings.database.secrets;
            let outgoing = Delivery::load(&mut tx, keys, job.message_id, job.lease).await?;
            tx.commit().await?;
            Ok::<_, sqlx::Error>(outgoing)
        };
        let deadline = self.settings.database.deadline();
        let lease = Duration::from_secs(self.settings.dispatch.lease_secs);
        let outgoing =
            crate::db::outage::through_outage(lease, "reply parts", || crate::db::within(deadline, read()))
                .await?;
        Ok(outgoing)
    }

    pub(super) async fn deliver(
        &self,
        job: &Job,
        outgoing: &Outgoing,
        waited: &mut Waited,
    ) -> anyhow::Result<StepOutcome> {
        let started = Instant::now();
        let outcome = self.run_delivery(job, outgoing, waited).await?;
        phase("reply", started);
        Ok(outcome)
    }

    pub(super) async fn run_delivery(
        &self,
        job: &Job,
        outgoing: &Outgoing,
        waited: &mut Waited,
    ) -> anyhow::Result<StepOutcome> {
        let delivery = Delivery {
            writer: &self.writer,
            pool: &self.pool,
            client: &self.client,
            settings: &self.settings.dispatch,
            holds: &self.holds,
        };
        let span = tracing::info_span!(target: traces::TARGET, "deliver", parts = outgoing.parts.len());
        let pass = delivery.run(job, outgoing).instrument(span).await?;
        waited.0 += pass.platform_time;
        let id = job.message_id;
        Ok(match pass.outcome {
            DeliveryOutcome::Wait => StepOutcome::Retrying(id),
            DeliveryOutcome::Delivered => {
                log_delivered(outgoing);
                StepOutcome::Delivered(id)
            }
            DeliveryOutcome::Stopped => StepOutcome::Failed(id),
            DeliveryOutcome::LeaseLost => StepOutcome::LeaseLost(id),
        })
    }
}

/// The job span adds tenant, message and request ids. Never text.
fn log_delivered(outgoing: &Outgoing) {
    let message = &outgoing.message;
    let latency_ms = (chrono::Utc::now() - message.received_at).num_milliseconds();
    tracing::info!(
        connector_id = %message.connector_id,
        platform = %message.platform,
        parts = outgoing.parts.len(),
        latency_ms,
        "turn delivered"
    );
}
