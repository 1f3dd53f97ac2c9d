//! A turn's transitions across its message row, its reply parts and its job: the one place
//! that answers "where does a job end?".
//!
//! ```text
//! message  accepted ─claim─▶ dispatching ─Answered─▶ executed ─Delivered─▶ (delivered_at)
//!             ▲                │    ▲                   │  ▲
//!             │                │    └─ AgentRetry       │  └─ resend ─┐
//!             │                │      (error kept; the  ├─ PartFailed / Abandoned ─▶ delivery_failed
//!             │                │       job waits)       └─ Concluded (a part unknown): stays
//!             │                └─ AgentFailed ─▶ dispatch_failed      executed, not delivered
//!             └──────────── redispatch ─────────────────┘
//! part     pending ─MarkSending─▶ sending ─PartPosted / Delivered─▶ sent
//!             ▲                     │  ├─ PartWait (not sent) ─▶ pending
//!             │                     │  ├─ PartWait (in doubt) ─▶ sending (reconciled first)
//!             │                     ├──┴─ PartFailed ─▶ failed (and every later part) ─┐
//!             │                     └─ PartUnknown (Telegram at-most-once) ─▶ unknown ─┤
//!             └──────── resend (failed; unknown only when asked) ───────────────────────┘
//! message  accepted ─claim, conversation held─▶ held ─hand back (the last one)─▶ accepted
//!          dispatching ─AgentAccepted (202)─▶ awaiting_agent ─done event─▶ executed / delivery_failed
//!                                                  │                      (by its parts, `later`)
//!                                                  └─ past the horizon ─▶ the same, or dispatch_failed
//! job      dispatch ─Answered with parts─▶ reply ─Delivered / Concluded / PartFailed / Abandoned─▶ gone
//!             └─ Answered without parts / AgentFailed / AgentAccepted / Skipped ─▶ gone
//!          gone ─redispatch─▶ dispatch;  gone ─resend─▶ reply
//!          gone ─a late answer's message event, a person's or the agent's own turn─▶ reply
//!          reply ─PartsPosted (answer still awaited)─▶ gone, or again when parts came meanwhile
//! ```
//!
//! Every transition checks the job's lease in the transaction that writes it, and locks the
//! job's row until the commit (a claim skips locked rows): a lost lease writes nothing
//! (`Applied::LeaseLost`), except that a part already posted is still recorded `sent`. So a
//! part is marked `sending` only under a lease still held when the mark commits. `Answered`
//! creates part 0 already `sending`, and `PartPosted` carries the next part's mark, so each
//! commit holds every mark the next request needs. A mark names its lease, so the holder
//! whose commit lost its acknowledgement knows its own mark from one left by an interrupted
//! send (`delivery::Delivery::load`); every transition is safe to write twice
//! (`writer`).
//!
//! The admin actions (`requeue`) are the only transitions without a lease: they apply only
//! to turns with no job and create one, under a row lock that queues a turn at most once.
//!
//! A part `unknown` (and none failed) leaves the turn `executed`, not delivered and not
//! `delivery_failed`: resending it may post a second copy, so a resend takes it only when
//! asked (`include_unknown`). See docs/delivery.md#delivery-guarantees.

pub mod apply;
pub mod handoff;
pub mod later;
pub mod outgoing;
pub mod requeue;
pub mod settle;
pub mod writer;

use std::time::Duration;

use crate::db::queue::LeaseToken;
use crate::domain::MessageId;

/// One change of a turn's state.
#[derive(Debug, Clone)]
pub enum Transition {
    /// With parts: the job moves to its reply stage; without: delivered, the job gone.
    /// `agent_ms`: how long the agent took; `handoff`: it asked for a person.
    Answered {
        response: String,
        /// Boxed: the other transitions, written far more often, stay small.
        reply: Box<crate::db::parts::Reply>,
        agent_ms: Option<i32>,
        handoff: Option<HandoffRequest>,
    },
    AgentRetry {
        error: String,
        delay: Duration,
    },
    AgentFailed {
        error: String,
    },
    /// The agent answered 202: the turn waits for its events until `until`; the job ends.
    AgentAccepted {
        until: chrono::DateTime<chrono::Utc>,
    },
    Skipped,
    MarkSending {
        part: i32,
    },
    /// A part was posted (not the last); `next` is marked `sending` in the same commit.
    PartPosted {
        part: i32,
        platform_id: String,
        next: Option<i32>,
    },
    /// `last`: the part posted just now, if any. `offered`: the answer offered choices, so
    /// a tap may have added the part that closes them while this pass posted: the job then
    /// stays for it.
    Delivered {
        last: Option<(i32, String)>,
        offered: bool,
    },
    /// `in_doubt`: the request may have gone through, so the part stays `sending`.
    PartWait {
        part: i32,
        error: String,
        in_doubt: bool,
        delay: Duration,
    },
    PartFailed {
        part: i32,
        error: String,
    },
    /// A file part's bytes are uploaded under `upload_ref`; the part stays `sending` until
    /// the post that shows them (never uploaded again: `Outbound::send_file`).
    PartStaged {
        part: i32,
        upload_ref: String,
    },
    /// Not knowable and not to be resent; the parts after it are still sent.
    PartUnknown {
        part: i32,
        error: String,
    },
    /// Every part of an answer still awaited was posted: the job ends unless the agent
    /// added parts meanwhile; the turn is delivered if the agent said `done` meanwhile.
    PartsPosted {
        last: Option<(i32, String)>,
    },
    /// Nothing is left to send but some part is `unknown`: the job ends, not delivered.
    Concluded {
        last: Option<(i32, String)>,
    },
    /// Nothing can be posted (the connector is gone).
    Abandoned {
        error: String,
    },
    /// A streamed answer's live view left this message, which the first part adopts.
    LiveShown {
        platform_id: String,
    },
}

/// The agent's answer asked for a person: its conversation is held in the commit that
/// stores the answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandoffRequest {
    pub conversation: crate::domain::ConversationKey,
    pub user_id: Option<String>,
    pub reason: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    Done,
    /// `Answered`: whether this was the turn's first stored answer.
    Stored {
        first: bool,
    },
    LeaseLost,
}

#[derive(Debug, Clone)]
pub struct Change {
    pub message: MessageId,
    pub lease: LeaseToken,
    pub transition: Transition,
}
