//! Waking workers: in-process at once, other instances by `LISTEN/NOTIFY`, the polling
//! interval as the fallback. Ingress does not `NOTIFY` in its own transaction: a notifying
//! commit takes a cluster-wide lock, which would serialize every webhook's commit.

use std::sync::atomic::{AtomicBool, Ordering};

use sqlx::postgres::PgListener;
use sqlx::PgPool;
use tokio::sync::{futures::Notified, watch, Notify};

pub const CHANNEL: &str = "channel_bridge_dispatch";

#[derive(Default)]
pub struct Wakeup {
    local: Notify,
    remote: Notify,
    remote_pending: AtomicBool,
    /// Feedback recorded in this process; other instances' is found by polling.
    feedback: Notify,
}

/// For work queued outside a gateway (the CLI).
pub async fn notify(pool: &PgPool) -> Result<(), sqlx::Error> {
    sqlx::query("select pg_notify($1, '')")
        .bind(CHANNEL)
        .execute(pool)
        .await?;
    Ok(())
}

impl Wakeup {
    pub fn wake(&self) {
        self.local.notify_waiters();
        if !self.remote_pending.swap(true, Ordering::AcqRel) {
            self.remote.notify_one();
        }
    }

    pub fn notified(&self) -> Notified<'_> {
        self.local.notified()
    }

    /// Feedback events were queued (`crate::dispatch::feedback`).
    pub fn wake_feedback(&self) {
        self.feedback.notify_one();
    }

    pub fn feedback_notified(&self) -> Notified<'_> {
        self.feedback.notified()
    }

    /// At most one `NOTIFY` in flight: one per burst of wake-ups.
    pub async fn run_notifier(&self, pool: PgPool, mut stop: watch::Receiver<bool>) {
        loop {
            tokio::select! {
                () = self.remote.notified() => {}
                _ = stop.changed() => return,
            }
            self.remote_pending.store(false, Ordering::Release);
            if let Err(err) = notify(&pool).await {
                tracing::debug!(%err, "NOTIFY failed; other instances will poll");
            }
        }
    }

    /// `PgListener` reconnects by itself after a connection loss.
    pub async fn run_listener(&self, pool: PgPool, mut stop: watch::Receiver<bool>) {
        let mut listener = loop {
            match listen(&pool).await {
                Ok(listener) => break listener,
                Err(err) => {
                    tracing::warn!(%err, "cannot LISTEN yet; polling meanwhile");
                    tokio::select! {
                        () = tokio::time::sleep(std::time::Duration::from_secs(5)) => {}
                        _ = stop.changed() => return,
                    }
                }
            }
        };
        loop {
            tokio::select! {
                received = listener.recv() => match received {
                    Ok(_) => self.local.notify_waiters(),
                    Err(err) => {
                        tracing::debug!(%err, "LISTEN connection lost; reconnecting");
                        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                    }
                },
                _ = stop.changed() => return,
            }
        }
    }
}

async fn listen(pool: &PgPool) -> Result<PgListener, sqlx::Error> {
    let mut listener = PgListener::connect_with(pool).await?;
    listener.listen(CHANNEL).await?;
    Ok(listener)
}
