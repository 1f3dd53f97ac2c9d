//! Lease renewal: the leases of the jobs in flight renewed every lease/3 in one statement.
//! A holder whose lease was lost anyway finds out at its next state change.

use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::in_flight::InFlight;
use crate::dispatch::Worker;

pub(super) async fn keep(worker: &Worker, in_flight: &InFlight, mut stop: watch::Receiver<bool>) {
    let lease = Duration::from_secs(worker.settings().dispatch.lease_secs);
    let every = (lease / 3).max(Duration::from_millis(100));
    while !*stop.borrow() {
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            _ = stop.changed() => return,
        }
        let held = in_flight.leases();
        if held.is_empty() {
            continue;
        }
        let started = Instant::now();
        let renewal = worker.queue().renew_leases(&held, lease);
        match crate::db::within(worker.settings().database.deadline(), renewal).await {
            Ok(renewed) if renewed.len() < held.len() => {
                // Finished, or claimed again after an expiry: the holder's next state
                // change finds out.
                tracing::debug!(
                    held = held.len(),
                    renewed = renewed.len(),
                    "some leases were not renewed"
                );
            }
            Ok(_) => {}
            Err(err) => tracing::warn!(%err, "lease renewal failed; retrying next round"),
        }
        metrics::histogram!("channel_bridge_dispatch_lease_renewal_seconds")
            .record(started.elapsed().as_secs_f64());
    }
}
