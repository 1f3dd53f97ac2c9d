//! Group commit: work items handed in one by one, written several to a transaction.
//!
//! A commit waits for its WAL flush, so one item per transaction caps a writer at
//! PostgreSQL's per-commit ceiling. `Batcher::spawn` starts `writers` tasks; each takes
//! whatever items have queued up meanwhile (up to `batch_max`), sorts them by tenant (a
//! stable sort: one conversation's items keep their order) and writes them in one
//! transaction (`BatchWrite::write`). At low load a batch is one item and nothing waits;
//! under load batches grow by themselves while the other writers' commits are in flight.
//! Each item's submitter waits for the commit that holds it.
//!
//! When a batch fails for a reason other than an outage (a deadlock between two batches, a
//! row one item cannot write…), its items are written again one transaction each, so one
//! item's failure is never its neighbours'. An outage fails the whole batch at once, and so
//! does a batch that misses its deadline (`CB_DB_DEADLINE_MS`, `crate::db::within`): the
//! writer goes on with the next batch instead of waiting on a network that holds traffic. The
//! ingress writer (webhooks) and the turn writer (dispatch state changes) are the two users.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, Mutex};

use crate::domain::TenantId;

/// Why an item was not written; shared by every item of a failed batch.
pub type BatchError = Arc<sqlx::Error>;

/// The future `BatchWrite::write` returns.
pub type WriteFuture<'a, T> = Pin<Box<dyn Future<Output = Result<Vec<T>, sqlx::Error>> + Send + 'a>>;

/// What a writer commits.
pub trait BatchWrite: Send + Sync + 'static {
    type Item: Send + Sync + 'static;
    type Output: Send + 'static;
    /// Names the writer in logs and labels `batch_size` / `batch_fallbacks_total`.
    const NAME: &'static str;

    /// The tenant an item belongs to: a batch is grouped by it.
    fn tenant(item: &Self::Item) -> TenantId;

    /// Writes `items` (sorted by tenant) in one transaction and commits; one output per
    /// item, in order.
    fn write<'a>(&'a self, items: &'a [Self::Item]) -> WriteFuture<'a, Self::Output>;
}

struct Pending<W: BatchWrite> {
    item: W::Item,
    reply: oneshot::Sender<Result<W::Output, BatchError>>,
}

/// The handle items are submitted through. The writer tasks stop when the last handle is
/// dropped, after finishing what was handed to them.
pub struct Batcher<W: BatchWrite> {
    items: mpsc::Sender<Pending<W>>,
}

/// How many writer tasks, how many items one transaction takes, and how long one write may
/// take.
#[derive(Debug, Clone, Copy)]
pub struct BatchLimits {
    pub writers: usize,
    pub batch_max: usize,
    pub deadline: Duration,
}

impl<W: BatchWrite> Clone for Batcher<W> {
    fn clone(&self) -> Self {
        Self {
            items: self.items.clone(),
        }
    }
}

impl<W: BatchWrite> Batcher<W> {
    /// Starts `limits.writers` writer tasks on the current runtime.
    pub fn spawn(writer: W, limits: BatchLimits) -> Self {
        let limits = BatchLimits {
            writers: limits.writers.max(1),
            batch_max: limits.batch_max.max(1),
            deadline: limits.deadline,
        };
        let (items, receiver) = mpsc::channel(limits.writers * limits.batch_max * 4);
        let receiver = Arc::new(Mutex::new(receiver));
        let writer = Arc::new(writer);
        for _ in 0..limits.writers {
            tokio::spawn(supervise(writer.clone(), receiver.clone(), limits));
        }
        Self { items }
    }

    /// Writes one item; returns once it is committed (or failed). A writer that is gone,
    /// or ended without answering (the runtime is shutting down), is an outage.
    pub async fn submit(&self, item: W::Item) -> Result<W::Output, BatchError> {
        let (reply, written) = oneshot::channel();
        if self.items.send(Pending { item, reply }).await.is_err() {
            return Err(Arc::new(sqlx::Error::PoolClosed));
        }
        written.await.unwrap_or(Err(Arc::new(sqlx::Error::PoolClosed)))
    }
}

/// Runs a writer, and starts it again if it panics (a bug in one batch must not stop the
/// writer for good). The batch it was writing is answered by its dropped reply channels.
async fn supervise<W: BatchWrite>(
    writer: Arc<W>,
    receiver: Arc<Mutex<mpsc::Receiver<Pending<W>>>>,
    limits: BatchLimits,
) {
    loop {
        match tokio::spawn(run(writer.clone(), receiver.clone(), limits)).await {
            Err(err) if err.is_panic() => {
                tracing::error!(writer = W::NAME, "batch writer panicked; starting it again");
                metrics::counter!("channel_bridge_batch_writer_restarts_total", "writer" => W::NAME)
                    .increment(1);
            }
            // The last handle was dropped (or the runtime is shutting down).
            _ => return,
        }
    }
}

async fn run<W: BatchWrite>(
    writer: Arc<W>,
    receiver: Arc<Mutex<mpsc::Receiver<Pending<W>>>>,
    limits: BatchLimits,
) {
    loop {
        let batch = {
            let mut receiver = receiver.lock().await;
            let Some(first) = receiver.recv().await else {
                return;
            };
            let mut batch = vec![first];
            while batch.len() < limits.batch_max {
                match receiver.try_recv() {
                    Ok(pending) => batch.push(pending),
                    Err(_) => break,
                }
            }
            batch
        };
        commit(writer.as_ref(), batch, limits.deadline).await;
    }
}

/// Writes one batch and answers each of its items.
async fn commit<W: BatchWrite>(writer: &W, mut batch: Vec<Pending<W>>, deadline: Duration) {
    metrics::histogram!("channel_bridge_batch_size", "writer" => W::NAME).record(batch.len() as f64);
    batch.sort_by_key(|pending| W::tenant(&pending.item));
    let (items, replies): (Vec<W::Item>, Vec<_>) = batch.into_iter().map(|p| (p.item, p.reply)).unzip();
    match crate::db::within(deadline, writer.write(&items)).await {
        Ok(outputs) => {
            for (reply, output) in replies.into_iter().zip(outputs) {
                let _ = reply.send(Ok(output));
            }
        }
        Err(err) if items.len() == 1 || crate::db::is_unavailable(&err) => {
            let err = Arc::new(err);
            for reply in replies {
                let _ = reply.send(Err(err.clone()));
            }
        }
        Err(err) => {
            tracing::warn!(writer = W::NAME, error = %err, items = items.len(), "batch failed; writing its items one by one");
            metrics::counter!("channel_bridge_batch_fallbacks_total", "writer" => W::NAME).increment(1);
            for (item, reply) in items.iter().zip(replies) {
                let output = crate::db::within(deadline, writer.write(std::slice::from_ref(item)))
                    .await
                    .and_then(|mut outputs| {
                        outputs
                            .pop()
                            .ok_or_else(|| sqlx::Error::Protocol("a batch writer answered no output".into()))
                    });
                let _ = reply.send(output.map_err(Arc::new));
            }
        }
    }
}
