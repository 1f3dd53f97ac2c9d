//! What a claim hands the worker: each job with the work prepared for it, and what a job
//! came to.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::payload::ChatMessage;
use crate::db::messages::MessageRow;
use crate::db::queue::Job;
use crate::db::tenants::TenantRow;
use crate::delivery::Outgoing;
use crate::domain::{Connector, MessageId};
use crate::turn::writer::Concluded;

/// What one job came to; tests drive the worker with it instead of sleeping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepOutcome {
    /// Nothing was ready.
    Empty,
    /// The agent answered; the turn is `executed`.
    Executed(MessageId),
    /// The call (or a reply part) failed and will be retried later.
    Retrying(MessageId),
    /// The turn is `dispatch_failed`, or a reply part failed for good.
    Failed(MessageId),
    /// Every reply part is posted.
    Delivered(MessageId),
    /// The job's message was gone or already finished; the job was dropped.
    Skipped(MessageId),
    /// The job's lease was lost (it was claimed again): this holder stopped.
    LeaseLost(MessageId),
}

impl Concluded for StepOutcome {
    fn lease_lost(job: &Job) -> Self {
        StepOutcome::LeaseLost(job.message_id)
    }
}

/// A claimed job and what its claim prepared for it.
pub struct Claimed {
    pub job: Job,
    pub(super) work: Work,
}

pub(super) enum Work {
    Dispatch(Box<Prepared>),
    Deliver(Box<Outgoing>),
    /// The message is gone or already finished.
    Skip,
    /// A reply whose message or connector is gone: nothing can be posted.
    Abandon,
}

/// Everything a dispatch needs after the claim's transaction.
pub(super) struct Prepared {
    pub(super) message: MessageRow,
    pub(super) history: Vec<ChatMessage>,
    /// Agent URL and dispatch secrets.
    pub(super) tenant: Arc<TenantRow>,
    /// Where the answer goes (`None`: the connector was deleted meanwhile).
    pub(super) connector: Option<Arc<Connector>>,
    /// When the claim statement returned (the typing indicator's latency counts from it).
    pub(super) claimed_at: Instant,
}

/// Time a job spent waiting on others (the agent, the platform), to tell the worker's own
/// cost apart.
#[derive(Default)]
pub(super) struct Waited(pub(super) Duration);

/// Why a reply stays unposted when its message or connector is gone.
pub(super) const NOTHING_TO_POST: &str = "not posted: the message or its connector was deleted";

pub(super) fn phase(name: &'static str, started: Instant) {
    metrics::histogram!("channel_bridge_dispatch_phase_seconds", "phase" => name)
        .record(started.elapsed().as_secs_f64());
}

impl Claimed {
    /// The id of the webhook request that recorded the turn (`metadata.request_id`, set by
    /// `http::hooks`), so a job's logs can be joined to its request's.
    pub(super) fn request_id(&self) -> Option<&str> {
        self.metadata_str("request_id")
    }

    /// The W3C `traceparent` of the webhook request that recorded the turn
    /// (`metadata.traceparent`, set by `http::hooks` when traces are exported).
    pub(super) fn traceparent(&self) -> Option<&str> {
        self.metadata_str("traceparent")
    }

    pub(super) fn metadata_str(&self, key: &str) -> Option<&str> {
        let message = match &self.work {
            Work::Dispatch(prepared) => &prepared.message,
            Work::Deliver(outgoing) => &outgoing.message,
            Work::Skip | Work::Abandon => return None,
        };
        message.metadata.get(key).and_then(serde_json::Value::as_str)
    }
}
