//! The turn writer: many turns' state changes per commit.
//!
//! The worker's tasks hand each change of a turn (`db::turns::Change`: an answer to store,
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
//! batch: each task gets the error and its job is retried when its lease runs out.

use std::sync::Arc;

use sqlx::PgPool;
use tokio::sync::oneshot;

use crate::batch::Batcher;
use crate::db::queue::Job;
use crate::db::turns::{self, Applied, Change, Transition};
use crate::db::TenantTx;
use crate::domain::TenantId;

/// Why a change was not applied; shared by every change of a failed batch.
pub type WriteError = Arc<sqlx::Error>;

struct Request {
    tenant: TenantId,
    change: Change,
    reply: oneshot::Sender<Result<Applied, WriteError>>,
}

/// The handle tasks write through.
#[derive(Clone)]
pub struct TurnWriter {
    requests: Batcher<Request>,
}

impl TurnWriter {
    /// Starts `writers` writer tasks on the current runtime.
    pub fn spawn(pool: PgPool, writers: usize, batch_max: usize) -> Self {
        let requests = Batcher::spawn("turn", writers, batch_max, move |batch| {
            let pool = pool.clone();
            async move { write(&pool, batch).await }
        });
        Self { requests }
    }

    /// Applies one transition of a claimed job's turn; returns once it is committed (or
    /// failed).
    pub async fn apply(&self, job: &Job, transition: Transition) -> Result<Applied, WriteError> {
        let (reply, applied) = oneshot::channel();
        let change = Change {
            message: job.message_id,
            lease: job.lease,
            transition,
        };
        let request = Request {
            tenant: job.tenant_id,
            change,
            reply,
        };
        if self.requests.send(request).await.is_err() {
            return Err(Arc::new(sqlx::Error::PoolClosed));
        }
        applied.await.unwrap_or(Err(Arc::new(sqlx::Error::PoolClosed)))
    }
}

async fn write(pool: &PgPool, mut batch: Vec<Request>) {
    metrics::histogram!("turn_writer_batch_size").record(batch.len() as f64);
    batch.sort_by_key(|request| request.tenant);
    match write_batch(pool, &batch).await {
        Ok(applied) => {
            for (request, applied) in batch.into_iter().zip(applied) {
                let _ = request.reply.send(Ok(applied));
            }
        }
        Err(err) if batch.len() == 1 || crate::db::is_unavailable(&err) => {
            let err = Arc::new(err);
            for request in batch {
                let _ = request.reply.send(Err(err.clone()));
            }
        }
        Err(err) => {
            tracing::warn!(error = %err, changes = batch.len(), "turn batch failed; applying its changes one by one");
            metrics::counter!("turn_writer_fallbacks_total").increment(1);
            for request in batch {
                let applied = write_batch(pool, std::slice::from_ref(&request))
                    .await
                    .map(|mut applied| applied.pop().unwrap_or(Applied::Done))
                    .map_err(Arc::new);
                let _ = request.reply.send(applied);
            }
        }
    }
}

async fn write_batch(pool: &PgPool, batch: &[Request]) -> Result<Vec<Applied>, sqlx::Error> {
    let Some(first) = batch.first() else {
        return Ok(Vec::new());
    };
    let mut tx = TenantTx::begin(pool, first.tenant).await?;
    let mut applied = Vec::with_capacity(batch.len());
    // The batch is sorted by tenant: each tenant's changes are applied together, the
    // frequent ones in a fixed number of statements (`turns::apply_many`).
    for group in batch.chunk_by(|a, b| a.tenant == b.tenant) {
        tx.switch_tenant(group[0].tenant).await?;
        let changes: Vec<&Change> = group.iter().map(|request| &request.change).collect();
        applied.extend(turns::apply_many(&mut tx, &changes).await?);
    }
    tx.commit().await?;
    Ok(applied)
}
