//! The turn writer: many turns' changes share a commit, as webhooks do at ingress
//! (docs/architecture.md#webhook-to-reply). Callers wait for their change's commit before
//! going on, so an answer is stored before any part is sent, and a part is `sending` in a
//! committed row before its request leaves. A batch that fails for any reason but an
//! outage or its deadline is redone one change per transaction, so one turn's failure is
//! never its neighbours'. A change that fails for an outage is written again by its holder
//! until the database returns (for at most a lease): what it carries (an answer, a
//! platform's message id) is never dropped with the error. Every transition is safe to write
//! twice, since a commit whose acknowledgement was lost may have landed: a part's `sending`
//! mark names its lease, and the other writes find their work done.

use std::time::Duration;

use sqlx::PgPool;

use super::{apply, Applied, Change, Transition};
use crate::batch::{BatchError, BatchLimits, BatchWrite, Batcher, WriteFuture};
use crate::db::queue::Job;
use crate::db::TenantTx;
use crate::domain::TenantId;

pub type WriteError = BatchError;

#[derive(Clone)]
pub struct TurnWriter {
    changes: Batcher<TurnWrites>,
    /// How long a change is written again through an outage: a lease, past which another
    /// holder may have the job.
    patience: Duration,
}

impl TurnWriter {
    pub fn spawn(pool: PgPool, limits: BatchLimits, patience: Duration) -> Self {
        Self {
            changes: Batcher::spawn(TurnWrites { pool }, limits),
            patience,
        }
    }

    pub async fn apply(&self, job: &Job, transition: Transition) -> Result<Applied, WriteError> {
        let change = Change {
            message: job.message_id,
            lease: job.lease,
            transition,
        };
        crate::db::outage::through_outage(self.patience, "turn state", || {
            self.changes.submit((job.tenant_id, change.clone()))
        })
        .await
    }

    /// `outcome` when applied, the step's lease-lost outcome when another holder has the job.
    pub async fn conclude<T: Conclusion>(
        &self,
        job: &Job,
        transition: Transition,
        outcome: T,
    ) -> anyhow::Result<T> {
        match self.apply(job, transition).await? {
            Applied::LeaseLost => Ok(T::lease_lost(job)),
            Applied::Done | Applied::Stored { .. } => Ok(outcome),
        }
    }
}

pub trait Conclusion {
    fn lease_lost(job: &Job) -> Self;
}

struct TurnWrites {
    pool: PgPool,
}

impl BatchWrite for TurnWrites {
    type Item = (TenantId, Change);
    type Output = Applied;
    const NAME: &'static str = "turn";

    fn tenant(item: &Self::Item) -> TenantId {
        item.0
    }

    fn write<'a>(&'a self, items: &'a [Self::Item]) -> WriteFuture<'a, Applied> {
        Box::pin(async move {
            let Some((first, _)) = items.first() else {
                return Ok(Vec::new());
            };
            let mut tx = TenantTx::begin_batch(&self.pool, *first).await?;
            let mut applied = Vec::with_capacity(items.len());
            for group in items.chunk_by(|a, b| a.0 == b.0) {
                tx.switch_tenant(group[0].0).await?;
                let changes: Vec<&Change> = group.iter().map(|(_, change)| change).collect();
                applied.extend(apply::apply_many(&mut tx, &changes).await?);
            }
            tx.commit().await?;
            Ok(applied)
        })
    }
}
