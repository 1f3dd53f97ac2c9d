//! What a claim hands the worker, and what a job came to.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::payload::ChatMessage;
use crate::db::messages::MessageRow;
use crate::db::queue::Job;
use crate::db::tenants::TenantRow;
use crate::delivery::Outgoing;
use crate::domain::{Connector, MessageId};
use crate::turn::writer::Conclusion;

/// Tests drive the worker with it instead of sleeping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepOutcome {
    Empty,
    Executed(MessageId),
    Retrying(MessageId),
    Failed(MessageId),
    Delivered(MessageId),
    Skipped(MessageId),
    /// Recorded `held`: a person holds the conversation.
    Held(MessageId),
    /// The agent answered 202: it posts the answer later.
    Awaiting(MessageId),
    LeaseLost(MessageId),
}

impl Conclusion for StepOutcome {
    fn lease_lost(job: &Job) -> Self {
        StepOutcome::LeaseLost(job.message_id)
    }
}

pub struct Claimed {
    pub job: Job,
    pub(super) work: Work,
}

pub(super) enum Work {
    Dispatch(Box<Prepared>),
    Deliver(Box<Outgoing>),
    Skip,
    /// Recorded `held` by the claim; the job ends.
    Hold,
    Abandon,
}

pub(super) struct Prepared {
    pub(super) message: MessageRow,
    pub(super) history: Vec<ChatMessage>,
    pub(super) tenant: Arc<TenantRow>,
    /// `None`: the connector was deleted meanwhile.
    pub(super) connector: Option<Arc<Connector>>,
    pub(super) claimed_at: Instant,
}

/// Time spent on the agent and the platform, to tell the worker's own cost apart.
#[derive(Default)]
pub(super) struct Waited(pub(super) Duration);

pub(super) const NOTHING_TO_POST: &str = "not posted: the message or its connector was deleted";

pub(super) fn phase(name: &'static str, started: Instant) {
    metrics::histogram!("channel_bridge_dispatch_phase_seconds", "phase" => name)
        .record(started.elapsed().as_secs_f64());
}

impl Claimed {
    /// Joins a job's logs to its webhook request's.
    pub(super) fn request_id(&self) -> Option<&str> {
        self.metadata_str("request_id")
    }

    pub(super) fn traceparent(&self) -> Option<&str> {
        self.metadata_str("traceparent")
    }

    pub(super) fn metadata_str(&self, key: &str) -> Option<&str> {
        let message = match &self.work {
            Work::Dispatch(prepared) => &prepared.message,
            Work::Deliver(outgoing) => &outgoing.message,
            Work::Skip | Work::Hold | Work::Abandon => return None,
        };
        message.metadata.get(key).and_then(serde_json::Value::as_str)
    }
}
