//! A reply's delivery pass run from the worker.

use std::time::Instant;

use tracing::Instrument;

use super::claimed::{phase, StepOutcome, Waited};
use super::worker::Worker;
use crate::db::queue::Job;
use crate::db::TenantTx;
use crate::delivery::{Delivery, DeliveryOutcome, Outgoing};
use crate::telemetry::traces;

impl Worker {
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
        let outgoing = crate::db::outage::through_outage(self.lease(), "reply parts", || {
            crate::db::within(deadline, read())
        })
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
            client: &self.platform_client,
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
