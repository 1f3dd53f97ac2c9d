//! Group commit: a commit waits for its WAL flush, so one item per transaction caps a writer at
//! PostgreSQL's per-commit ceiling. A batch is sorted by tenant (stable: a conversation keeps
//! its order); one that fails but for an outage or a missed deadline is redone one item per
//! transaction, so one item's failure is never its neighbours'.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, Mutex};

use crate::domain::TenantId;

/// Shared by every item of a failed batch.
pub type BatchError = Arc<sqlx::Error>;

pub type WriteFuture<'a, T> = Pin<Box<dyn Future<Output = Result<Vec<T>, sqlx::Error>> + Send + 'a>>;

pub trait BatchWrite: Send + Sync + 'static {
    type Item: Send + Sync + 'static;
    type Output: Send + 'static;
    /// Names the writer in logs and labels `batch_size` / `batch_fallbacks_total`.
    const NAME: &'static str;

    fn tenant(item: &Self::Item) -> TenantId;

    /// One transaction for `items` (sorted by tenant); one output per item, in order.
    fn write<'a>(&'a self, items: &'a [Self::Item]) -> WriteFuture<'a, Self::Output>;
}

struct Pending<W: BatchWrite> {
    item: W::Item,
    reply: oneshot::Sender<Result<W::Output, BatchError>>,
}

/// The writer tasks stop when the last handle is dropped, after finishing their work.
pub struct Batcher<W: BatchWrite> {
    items: mpsc::Sender<Pending<W>>,
}

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

    /// Returns once committed. A writer gone without answering (shutdown) is an outage.
    pub async fn submit(&self, item: W::Item) -> Result<W::Output, BatchError> {
        let (reply, written) = oneshot::channel();
        if self.items.send(Pending { item, reply }).await.is_err() {
            return Err(Arc::new(sqlx::Error::PoolClosed));
        }
        written.await.unwrap_or(Err(Arc::new(sqlx::Error::PoolClosed)))
    }
}

/// Restarts a writer that panics; its batch is answered by the dropped reply channels.
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
