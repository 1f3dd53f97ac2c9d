//! Group commit: a commit waits for its WAL flush, so one item per transaction caps a writer at
//! PostgreSQL's per-commit ceiling. A batch is sorted by tenant (stable: a conversation keeps
//! its order); one that fails but for an outage or a missed deadline is redone one item per
//! transaction, so one item's failure is never its neighbours'.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
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
        let writes = Arc::new(Writes::default());
        for _ in 0..limits.writers {
            tokio::spawn(supervise(
                writer.clone(),
                receiver.clone(),
                writes.clone(),
                limits,
            ));
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
    writes: Arc<Writes>,
    limits: BatchLimits,
) {
    loop {
        match tokio::spawn(run(writer.clone(), receiver.clone(), writes.clone(), limits)).await {
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

/// The writes in flight. A batch short of `batch_max` waits while another write is in
/// flight, gathering what arrives meanwhile: the writers run side by side only when full
/// batches are waiting. Concurrent small batches cost more than they save: on a 2-core
/// machine four writers' single-row transactions contended for the same index pages and WAL
/// (docs/benchmarks.md, "Group commit that waits for company").
#[derive(Default)]
struct Writes {
    in_flight: AtomicUsize,
    ended: tokio::sync::Notify,
}

/// Ends its write when dropped, also if the write panics.
struct Writing<'a>(&'a Writes);

impl Writes {
    fn start(&self) -> Writing<'_> {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        Writing(self)
    }

    fn busy(&self) -> bool {
        self.in_flight.load(Ordering::SeqCst) > 0
    }
}

impl Drop for Writing<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
        // One waiter at most (the receiver's holder); a permit left over only wakes it once
        // more to look again.
        self.0.ended.notify_one();
    }
}

async fn run<W: BatchWrite>(
    writer: Arc<W>,
    receiver: Arc<Mutex<mpsc::Receiver<Pending<W>>>>,
    writes: Arc<Writes>,
    limits: BatchLimits,
) {
    loop {
        let batch = {
            let mut receiver = receiver.lock().await;
            let Some(first) = receiver.recv().await else {
                return;
            };
            let mut batch = vec![first];
            take_ready(&mut receiver, &mut batch, limits.batch_max);
            while batch.len() < limits.batch_max && writes.busy() {
                tokio::select! {
                    () = writes.ended.notified() => {}
                    pending = receiver.recv() => match pending {
                        Some(pending) => {
                            batch.push(pending);
                            take_ready(&mut receiver, &mut batch, limits.batch_max);
                        }
                        None => break,
                    },
                }
            }
            batch
        };
        let _writing = writes.start();
        commit(writer.as_ref(), batch, limits.deadline).await;
    }
}

fn take_ready<T>(receiver: &mut mpsc::Receiver<T>, batch: &mut Vec<T>, max: usize) {
    while batch.len() < max {
        match receiver.try_recv() {
            Ok(pending) => batch.push(pending),
            Err(_) => break,
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Records each batch; the first write waits until the test lets it go.
    struct Held {
        batches: std::sync::Mutex<Vec<Vec<u32>>>,
        started: mpsc::UnboundedSender<()>,
        release: Mutex<Option<oneshot::Receiver<()>>>,
    }

    /// The writer, what tells each write's start, and what lets the first write end.
    fn held() -> (Arc<Held>, mpsc::UnboundedReceiver<()>, oneshot::Sender<()>) {
        let (started, writes_started) = mpsc::unbounded_channel();
        let (release, held) = oneshot::channel();
        let writer = Arc::new(Held {
            batches: Default::default(),
            started,
            release: Mutex::new(Some(held)),
        });
        (writer, writes_started, release)
    }

    impl BatchWrite for Arc<Held> {
        type Item = u32;
        type Output = ();
        const NAME: &'static str = "test";

        fn tenant(_: &u32) -> TenantId {
            TenantId(uuid::Uuid::nil())
        }

        fn write<'a>(&'a self, items: &'a [u32]) -> WriteFuture<'a, ()> {
            Box::pin(async move {
                let _ = self.started.send(());
                let release = self.release.lock().await.take();
                if let Some(release) = release {
                    let _ = release.await;
                }
                self.batches.lock().unwrap().push(items.to_vec());
                Ok(vec![(); items.len()])
            })
        }
    }

    fn limits(writers: usize, batch_max: usize) -> BatchLimits {
        BatchLimits {
            writers,
            batch_max,
            deadline: Duration::from_secs(30),
        }
    }

    /// A guard against a hang, not a speed limit.
    async fn within<T>(what: &str, future: impl Future<Output = T>) -> T {
        tokio::time::timeout(Duration::from_secs(20), future)
            .await
            .unwrap_or_else(|_| panic!("{what}"))
    }

    #[tokio::test]
    async fn items_arriving_during_a_write_wait_for_it_and_go_together() {
        let (writer, mut writes_started, release) = held();
        let batcher = Batcher::spawn(writer.clone(), limits(4, 8));
        let first = tokio::spawn({
            let batcher = batcher.clone();
            async move { batcher.submit(1).await }
        });
        within("the first write starts", writes_started.recv()).await;
        // One at a time: three idle writers could each take one at once; none may while 1 is
        // written.
        let mut later = Vec::new();
        for item in [2, 3] {
            let batcher = batcher.clone();
            later.push(tokio::spawn(async move { batcher.submit(item).await }));
            for _ in 0..50 {
                tokio::task::yield_now().await;
            }
        }
        release.send(()).expect("the first write waits");
        first.await.unwrap().unwrap();
        for submitted in later {
            submitted.await.unwrap().unwrap();
        }
        assert_eq!(*writer.batches.lock().unwrap(), vec![vec![1], vec![2, 3]]);
    }

    #[tokio::test]
    async fn full_batches_are_written_side_by_side() {
        let (writer, mut writes_started, release) = held();
        let batcher = Batcher::spawn(writer.clone(), limits(2, 2));
        let submitted: Vec<_> = [1, 2, 3, 4]
            .into_iter()
            .map(|item| {
                let batcher = batcher.clone();
                tokio::spawn(async move { batcher.submit(item).await })
            })
            .collect();
        within("a write starts", writes_started.recv()).await;
        // The second full batch is written while the first is still held.
        within("a second write starts beside the first", writes_started.recv()).await;
        release.send(()).expect("the first write waits");
        for submitted in submitted {
            submitted.await.unwrap().unwrap();
        }
        let mut batches = writer.batches.lock().unwrap().clone();
        batches.sort();
        assert_eq!(batches, vec![vec![1, 2], vec![3, 4]]);
    }
}
