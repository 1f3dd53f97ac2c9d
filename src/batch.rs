//! Group commit: work items handed in one by one, written several to a transaction.
//!
//! A commit waits for its WAL flush, so one item per transaction caps a writer at
//! PostgreSQL's per-commit ceiling. `Batcher::spawn` starts `writers` tasks; each takes
//! whatever items have queued up meanwhile (up to `batch_max`) and hands them to `write` as
//! one batch. At low load a batch is one item and nothing waits; under load batches grow by
//! themselves while the other writers' commits are in flight. The ingress writer (webhooks)
//! and the turn writer (dispatch state changes) are the two users; each item carries its
//! own reply channel, so `write` answers every item of its batch.

use std::future::Future;
use std::sync::Arc;

use tokio::sync::{mpsc, Mutex};

/// The handle items are sent through. The writer tasks stop when the last handle is
/// dropped, after finishing what was handed to them.
pub struct Batcher<T> {
    items: mpsc::Sender<T>,
}

impl<T> Clone for Batcher<T> {
    fn clone(&self) -> Self {
        Self {
            items: self.items.clone(),
        }
    }
}

impl<T: Send + 'static> Batcher<T> {
    /// Starts `writers` writer tasks on the current runtime. `name` labels the restart
    /// counter (`batch_writer_restarts_total{writer}`).
    pub fn spawn<F, Fut>(name: &'static str, writers: usize, batch_max: usize, write: F) -> Self
    where
        F: Fn(Vec<T>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let batch_max = batch_max.max(1);
        let (items, receiver) = mpsc::channel(writers.max(1) * batch_max * 4);
        let receiver = Arc::new(Mutex::new(receiver));
        let write = Arc::new(write);
        for _ in 0..writers.max(1) {
            tokio::spawn(supervise(name, receiver.clone(), batch_max, write.clone()));
        }
        Self { items }
    }

    /// Queues one item; gives it back when the writers are gone.
    pub async fn send(&self, item: T) -> Result<(), T> {
        self.items.send(item).await.map_err(|rejected| rejected.0)
    }
}

/// Runs a writer, and starts it again if it panics (a bug in one batch must not stop the
/// writer for good). The batch it was writing is answered by its dropped reply channels.
async fn supervise<T, F, Fut>(
    name: &'static str,
    receiver: Arc<Mutex<mpsc::Receiver<T>>>,
    batch_max: usize,
    write: Arc<F>,
) where
    T: Send + 'static,
    F: Fn(Vec<T>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    loop {
        match tokio::spawn(run(receiver.clone(), batch_max, write.clone())).await {
            Err(err) if err.is_panic() => {
                tracing::error!(writer = name, "batch writer panicked; starting it again");
                metrics::counter!("batch_writer_restarts_total", "writer" => name).increment(1);
            }
            // The last handle was dropped (or the runtime is shutting down).
            _ => return,
        }
    }
}

async fn run<T, F, Fut>(receiver: Arc<Mutex<mpsc::Receiver<T>>>, batch_max: usize, write: Arc<F>)
where
    F: Fn(Vec<T>) -> Fut,
    Fut: Future<Output = ()>,
{
    loop {
        let batch = {
            let mut receiver = receiver.lock().await;
            let Some(first) = receiver.recv().await else {
                return;
            };
            let mut batch = vec![first];
            while batch.len() < batch_max {
                match receiver.try_recv() {
                    Ok(item) => batch.push(item),
                    Err(_) => break,
                }
            }
            batch
        };
        write(batch).await;
    }
}
