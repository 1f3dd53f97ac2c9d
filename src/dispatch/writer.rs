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
use tokio::sync::{mpsc, oneshot, Mutex};

use crate::db::turns::{self, Applied, Change};
use crate::db::TenantTx;
use crate::domain::TenantId;

/// Why a change was not applied; shared by every change of a failed batch.
pub type WriteError = Arc<sqlx::Error>;

struct Request {
    tenant: TenantId,
    change: Change,
    reply: oneshot::Sender<Result<Applied, WriteError>>,
}

/// The handle tasks write through. The writer tasks stop when the last handle is dropped,
/// after finishing what was handed to them.
#[derive(Clone)]
pub struct TurnWriter {
    requests: mpsc::Sender<Request>,
}

impl TurnWriter {
    /// Starts `writers` writer tasks on the current runtime.
    pub fn spawn(pool: PgPool, writers: usize, batch_max: usize) -> Self {
        let batch_max = batch_max.max(1);
        let (requests, receiver) = mpsc::channel(writers.max(1) * batch_max * 4);
        let receiver = Arc::new(Mutex::new(receiver));
        for _ in 0..writers.max(1) {
            tokio::spawn(supervise(pool.clone(), receiver.clone(), batch_max));
        }
        Self { requests }
    }

    /// Applies one change of a turn of `tenant`; returns once it is committed (or failed).
    pub async fn apply(&self, tenant: TenantId, change: Change) -> Result<Applied, WriteError> {
        let (reply, applied) = oneshot::channel();
        let request = Request {
            tenant,
            change,
            reply,
        };
        self.requests
            .send(request)
            .await
            .map_err(|_| Arc::new(sqlx::Error::PoolClosed))?;
        applied.await.unwrap_or(Err(Arc::new(sqlx::Error::PoolClosed)))
    }
}

/// Runs a writer, and starts it again if it panics; the batch it was writing gets errors
/// from the dropped replies, and those jobs are retried after their leases.
async fn supervise(pool: PgPool, receiver: Arc<Mutex<mpsc::Receiver<Request>>>, batch_max: usize) {
    loop {
        match tokio::spawn(run(pool.clone(), receiver.clone(), batch_max)).await {
            Err(err) if err.is_panic() => {
                tracing::error!("turn writer panicked; starting it again");
                metrics::counter!("turn_writer_restarts_total").increment(1);
            }
            _ => return,
        }
    }
}

async fn run(pool: PgPool, receiver: Arc<Mutex<mpsc::Receiver<Request>>>, batch_max: usize) {
    loop {
        let batch = {
            let mut receiver = receiver.lock().await;
            let Some(first) = receiver.recv().await else {
                return;
            };
            let mut batch = vec![first];
            while batch.len() < batch_max {
                match receiver.try_recv() {
                    Ok(request) => batch.push(request),
                    Err(_) => break,
                }
            }
            batch
        };
        write(&pool, batch).await;
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
