//! Waking workers when work arrives: in-process at once, other instances through Postgres
//! `LISTEN/NOTIFY`, and the polling interval as the fallback when both are missed.
//!
//! Ingress does not `NOTIFY` inside its own transaction: a notifying commit takes a
//! cluster-wide lock, which would serialize every webhook's commit. A background task sends
//! one `NOTIFY` per burst instead.

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
}

/// Wakes every instance's workers (`NOTIFY`), e.g. after work was queued outside a
/// gateway (the CLI).
pub async fn notify(pool: &PgPool) -> Result<(), sqlx::Error> {
    sqlx::query("select pg_notify($1, '')")
        .bind(CHANNEL)
        .execute(pool)
        .await?;
    Ok(())
}

impl Wakeup {
    /// New jobs were committed: wake local workers now and other instances soon.
    pub fn wake(&self) {
        self.local.notify_waiters();
        if !self.remote_pending.swap(true, Ordering::AcqRel) {
            self.remote.notify_one();
        }
    }

    pub fn notified(&self) -> Notified<'_> {
        self.local.notified()
    }

    /// Sends `NOTIFY` for wake-ups raised in this process, at most one in flight at a time.
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

    /// Wakes local workers on `NOTIFY` from any instance. `PgListener` reconnects by itself
    /// after a connection loss.
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
