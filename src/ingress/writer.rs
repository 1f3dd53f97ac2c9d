//! The batching writer of webhooks (`crate::batch`): each tenant's group under its own
//! tenant setting (`TenantTx::switch_tenant`). A webhook is answered only after the commit
//! that holds it, so a 200 still means "recorded"; a batch that fails but for an outage is
//! redone one webhook per transaction, so one webhook never fails its neighbours.

use std::sync::Arc;

use sqlx::PgPool;

use super::{record_many_in, RecordOutcome};
use crate::batch::{BatchError, BatchLimits, BatchWrite, Batcher, WriteFuture};
use crate::db::TenantTx;
use crate::domain::{Connector, TenantId};
use crate::platforms::inbound::Inbound;

pub type RecordError = BatchError;

/// The writer tasks stop when the last handle is dropped, after finishing their work.
pub struct Writer {
    webhooks: Batcher<IngressWrites>,
}

impl Writer {
    pub fn spawn(pool: PgPool, limits: BatchLimits) -> Self {
        Self {
            webhooks: Batcher::spawn(IngressWrites { pool }, limits),
        }
    }

    /// Returns once the webhook is committed.
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
