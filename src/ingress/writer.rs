//! The batching writer: several webhooks per commit (`crate::batch`).
//!
//! Handlers hand their verified, parsed webhook to `Writer::record` and wait for its
//! outcome; `CB_INGRESS_WRITERS` writer tasks each take whatever has queued up meanwhile
//! (up to `CB_INGRESS_BATCH_MAX` webhooks) and record it in one transaction: grouped by
//! tenant, each group under its own tenant's setting
//! (`TenantTx::switch_tenant`), each group's turns in a fixed number of statements
//! (`record_many_in`: one link lookup, one insert of the rows, one of the jobs). At low
//! load a batch is one webhook and nothing waits; under load batches grow by themselves
//! while the other writers' commits are in flight (group commit).
//!
//! A webhook is answered only after the commit that holds it, so a 200 still means
//! "recorded". When a batch fails for a reason other than an outage (a deadlock between
//! two batches holding the same retried keys in opposite orders, a row one webhook cannot
//! write…), its webhooks are recorded again one transaction each, so one webhook's failure
//! is never its neighbours'. An outage fails the whole batch at once: every webhook in it
//! gets its 503 and the platforms retry.

use std::sync::Arc;

use sqlx::PgPool;

use super::{record_many_in, RecordOutcome};
use crate::batch::{BatchError, BatchLimits, BatchWrite, Batcher, WriteFuture};
use crate::db::TenantTx;
use crate::domain::{Connector, TenantId};
use crate::platforms::inbound::Inbound;

/// Why a webhook was not recorded; shared by every webhook of a failed batch.
pub type RecordError = BatchError;

/// The handle handlers record through. Cheap to share; the writer tasks stop when the last
/// handle is dropped, after finishing what was handed to them.
pub struct Writer {
    webhooks: Batcher<IngressWrites>,
}

impl Writer {
    /// Starts `limits.writers` writer tasks on the current runtime, each committing up to
    /// `limits.batch_max` webhooks at a time, each commit bounded by `limits.deadline`.
    pub fn spawn(pool: PgPool, limits: BatchLimits) -> Self {
        Self {
            webhooks: Batcher::spawn(IngressWrites { pool }, limits),
        }
    }

    /// Records one verified webhook; returns once it is committed (or failed: an outage is
    /// answered 503, so the platform retries).
    pub async fn record(
        &self,
        connector: Arc<Connector>,
        mut inbound: Inbound,
    ) -> Result<RecordOutcome, RecordError> {
        if !inbound.has_records() {
            return Ok(RecordOutcome::default());
        }
        inbound.scrub_nul();
        inbound.fit_keys();
        self.webhooks.submit((connector, inbound)).await
    }
}

struct IngressWrites {
    pool: PgPool,
}

impl BatchWrite for IngressWrites {
    type Item = (Arc<Connector>, Inbound);
    type Output = RecordOutcome;
    const NAME: &'static str = "ingress";

    fn tenant(item: &Self::Item) -> TenantId {
        item.0.tenant_id
    }

    /// Each tenant's webhooks recorded together, with a fixed number of statements
    /// (`record_many_in`).
    fn write<'a>(&'a self, items: &'a [Self::Item]) -> WriteFuture<'a, RecordOutcome> {
        Box::pin(async move {
            let Some((first, _)) = items.first() else {
                return Ok(Vec::new());
            };
            let mut tx = TenantTx::begin(&self.pool, first.tenant_id).await?;
            let mut outcomes = Vec::with_capacity(items.len());
            for group in items.chunk_by(|a, b| a.0.tenant_id == b.0.tenant_id) {
                tx.switch_tenant(group[0].0.tenant_id).await?;
                let webhooks: Vec<(&Connector, &Inbound)> = group
                    .iter()
                    .map(|(connector, inbound)| (connector.as_ref(), inbound))
                    .collect();
                outcomes.extend(record_many_in(&mut tx, &webhooks).await?);
            }
            tx.commit().await?;
            Ok(outcomes)
        })
    }
}
