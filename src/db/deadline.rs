//! Deadlines on database work: a missed one is counted and makes the pool wary of silent
//! connections for a while (`super::pool`).

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

const SUSPECT_WINDOW: Duration = Duration::from_secs(60);

/// Milliseconds since `EPOCH` of the last missed deadline (0: none yet).
static LAST_MISSED_MS: AtomicU64 = AtomicU64::new(0);
static EPOCH: OnceLock<Instant> = OnceLock::new();

fn since_epoch() -> Duration {
    EPOCH.get_or_init(Instant::now).elapsed()
}

/// Something waited on the database past its deadline: see `super::connect_pool`.
pub fn deadline_missed() {
    let now = u64::try_from(since_epoch().as_millis())
        .unwrap_or(u64::MAX)
        .max(1);
    LAST_MISSED_MS.store(now, Ordering::Relaxed);
    metrics::counter!("channel_bridge_db_deadlines_missed_total").increment(1);
}

pub(super) fn deadline_missed_recently() -> bool {
    let last = LAST_MISSED_MS.load(Ordering::Relaxed);
    last > 0 && since_epoch().saturating_sub(Duration::from_millis(last)) < SUSPECT_WINDOW
}

pub fn deadline_error() -> sqlx::Error {
    sqlx::Error::Io(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        "the database did not answer within the deadline",
    ))
}

/// Past the deadline the work is dropped (a transaction in it rolls back).
pub async fn within<T, E: From<sqlx::Error>>(
    deadline: Duration,
    work: impl Future<Output = Result<T, E>>,
) -> Result<T, E> {
    match tokio::time::timeout(deadline, work).await {
        Ok(result) => result,
        Err(_) => {
            deadline_missed();
            Err(deadline_error().into())
        }
    }
}
