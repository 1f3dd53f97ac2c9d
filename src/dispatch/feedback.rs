//! Feedback events to the agent (docs/agent.md#reactions-feedback-on-answers): for a tenant
//! that opts in, each change a person makes to their reaction on an answer is POSTed to the
//! agent URL, signed like a dispatch (Standard Webhooks), and retried with backoff. They
//! come from a queue of their own, so an agent that refuses them never holds a turn up.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::wakeup::Wakeup;
use super::worker::Worker;

/// How often queued events are looked for besides this instance's own wake-ups (events
/// another instance queued, retries that came due).
const EVERY: Duration = Duration::from_secs(30);

/// On instances of the worker role: a pass when this instance queued feedback, and every
/// `EVERY`.
pub async fn run(worker: Arc<Worker>, wakeup: Arc<Wakeup>, mut stop: watch::Receiver<bool>) {
    loop {
        if let Err(err) = worker.deliver_feedback().await {
            tracing::warn!(%err, "feedback events: a pass failed; the next one retries");
        }
        tokio::select! {
            () = wakeup.feedback_notified() => {}
            () = tokio::time::sleep(EVERY) => {}
            _ = stop.changed() => return,
        }
    }
}
