//! Claim failures in a row (an outage): each pauses the claimer, the pause doubling up to
//! `OUTAGE_BACKOFF_MAX`, with one log line per failure.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use tokio::sync::watch;

const OUTAGE_BACKOFF_MIN: Duration = Duration::from_millis(250);
/// Short: claims resume within this of the database's return (a refused connection costs
/// nothing, and a held one is bounded by the deadline).
const OUTAGE_BACKOFF_MAX: Duration = Duration::from_secs(4);

#[derive(Default)]
pub(super) struct Failures(AtomicU32);

impl Failures {
    /// The pause before the next try.
    pub(super) fn failed(&self, what: &str, err: &anyhow::Error) -> Duration {
        let failures = self.0.fetch_add(1, Ordering::Relaxed) + 1;
        let pause = OUTAGE_BACKOFF_MIN
            .saturating_mul(1 << failures.saturating_sub(1).min(16))
            .min(OUTAGE_BACKOFF_MAX);
        metrics::counter!("channel_bridge_dispatch_claim_failures_total").increment(1);
        tracing::warn!(
            error = format!("{err:#}"),
            failures,
            retry_in_ms = pause.as_millis() as u64,
            "{what} failed; pausing the dispatcher"
        );
        pause
    }

    pub(super) fn recovered(&self) {
        let failures = self.0.swap(0, Ordering::Relaxed);
        if failures > 0 {
            tracing::info!(failures, "database reachable again; dispatching resumed");
        }
    }
}

/// Cut short when the instance stops.
pub(super) async fn pause(pause: Duration, stop: &mut watch::Receiver<bool>) {
    tokio::select! {
        () = tokio::time::sleep(pause) => {}
        _ = stop.changed() => {}
    }
}
