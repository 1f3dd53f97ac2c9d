//! The turn writer: many turns' state changes per commit.
//!
//! The worker's tasks hand each change of a turn (`super::Change`: an answer to store,
//! a part posted, a delivery, a retry…) to `TurnWriter::apply` and wait for its commit
//! before they go on, so every rule of `db::turns` still holds (an answer is stored before
//! any part is sent; a part is `sending` in a committed row before its request leaves).
//! `CB_STATE_WRITERS` writer tasks each take whatever changes have queued meanwhile, up to
//! `CB_STATE_BATCH_MAX`, and apply them in one transaction, grouped by tenant, each group
//! under its own tenant's setting. At low load a batch is one change and nothing waits;
//! under load batches grow by themselves while the other writers' commits are in flight,
//! as ingress does with webhooks (`crate::ingress::writer`).
//!
//! A batch that fails for a reason other than an outage is applied again one change per
//! transaction, so one turn's failure is never its neighbours'. An outage fails the whole
//! batch, as does a batch past its deadline (`CB_DB_DEADLINE_MS`): each task gets the error
//! and its job is retried when its lease runs out.

use sqlx::PgPool;

use super::{apply, Applied, Change, Transition};
use crate::batch::{BatchError, BatchLimits, BatchWrite, Batcher, WriteFuture};
use crate::db::queue::Job;
use crate::db::TenantTx;
use crate::domain::TenantId;

/// Why a change was not applied; shared by every change of a failed batch.
pub type WriteError = BatchError;

/// The handle tasks write through.
#[derive(Clone)]
pub struct TurnWriter {
    changes: Batcher<TurnWrites>,
}

impl TurnWriter {
    /// Starts `limits.writers` writer tasks on the current runtime.
    pub fn spawn(pool: PgPool, limits: BatchLimits) -> Self {
        Self {
            changes: Batcher::spawn(TurnWrites { pool }, limits),
        }
    }

    /// Applies one transition of a claimed job's turn; returns once it is committed (or
    /// failed).
    pub async fn apply(&self, job: &Job, transition: Transition) -> Result<Applied, WriteError> {
        let change = Change {
            message: job.message_id,
            lease: job.lease,
            transition,
        };
        self.changes.submit((job.tenant_id, change)).await
    }

    /// Applies a transition that ends a step: `outcome` when it was applied, the step's
    /// lease-lost outcome when another holder has the job now.
    pub async fn conclude<T: Concluded>(
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

/// A step's outcome, which has a value for "the lease was gone".
pub trait Concluded {
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

    /// Each tenant's changes applied together, the frequent ones in a fixed number of
    /// statements (`turns::apply_many`).
    fn write<'a>(&'a self, items: &'a [Self::Item]) -> WriteFuture<'a, Applied> {
        Box::pin(async move {
            let Some((first, _)) = items.first() else {
                return Ok(Vec::new());
            };
            let mut tx = TenantTx::begin(&self.pool, *first).await?;
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
