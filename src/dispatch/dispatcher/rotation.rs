//! Truncates drained queue generations, so the claim never walks what finished jobs leave
//! behind and nothing waits for VACUUM (`Queue::rotate`). An instance that has claimed
//! nothing since its last step skips it: an idle one sends no statement for this, and a
//! generation drains only as jobs finish.

use std::time::Duration;

use tokio::sync::watch;

use crate::db::queue::Rotation;
use crate::dispatch::Worker;

const ROTATE_EVERY: Duration = Duration::from_secs(1);

pub(super) async fn keep_fresh(
    worker: &Worker,
    claims_issued: impl Fn() -> u64,
    mut stop: watch::Receiver<bool>,
) {
    let (mut claims_seen, mut pending) = (claims_issued(), true);
    while !*stop.borrow() {
        let claims = claims_issued();
        if pending || claims != claims_seen {
            claims_seen = claims;
            pending = rotate(worker).await;
        }
        tokio::select! {
            () = tokio::time::sleep(ROTATE_EVERY) => {}
            _ = stop.changed() => {}
        }
    }
}

/// One step; whether another is pending.
async fn rotate(worker: &Worker) -> bool {
    let settings = worker.settings();
    let switch_after = settings.dispatch.queue_generation_jobs;
    let step = worker.queue().rotate(switch_after);
    match crate::db::within(settings.database.deadline(), step).await {
        Ok(step @ (Rotation::Truncated | Rotation::Switched)) => {
            let step = if step == Rotation::Truncated {
                "truncated"
            } else {
                "switched"
            };
            tracing::debug!(step, "queue generation rotated");
            metrics::counter!("channel_bridge_dispatch_queue_rotations_total", "step" => step).increment(1);
            true
        }
        Ok(Rotation::Busy) => true,
        Ok(Rotation::Draining | Rotation::Idle) => false,
        Err(err) => {
            tracing::debug!(%err, "queue rotation failed; trying again");
            true
        }
    }
}
