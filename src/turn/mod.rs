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
//! job      dispatch ─Answered with parts─▶ reply ─Delivered / Concluded / PartFailed / Abandoned─▶ gone
//!             └─ Answered without parts / AgentFailed / Skipped ─▶ gone
//!          gone ─redispatch─▶ dispatch;  gone ─resend─▶ reply
//! ```
//!
//! Every transition is made by the holder of the job's lease and first checks it (and locks
//! the job's row until the commit, which holds off any claim), in the same transaction: a
//! holder whose lease ran out and whose job was claimed again gets `Applied::LeaseLost`
//! and nothing is written, except that a
//! part it did post is still recorded as `sent` (a fact, whoever holds the job now). In
//! particular a part is only ever marked `sending` (the mark that precedes its request)
//! under a lease that was still held when the mark committed.
//!
//! `Answered` creates part 0 already `sending` (attempt 1) and `PartPosted` marks the next
//! part `sending` with the settling of the one just posted, so each commit carries every
//! mark the next request needs and a one-part answer costs three commits in all (claim,
//! answer, delivery), each shared with other turns ([`writer`]).
//!
//! `LiveShown` changes no state: while a streamed answer runs (`dispatching`), it records the
//! platform message its live view left (`live_message_id`), which the first part then
//! adopts instead of posting a second message (`crate::delivery::live`).
//!
//! The two admin actions (`redispatch`, `resend`) are the only transitions made without a
//! lease: they apply only to turns that have no job, and they create one. Each takes the
//! turns it changes by a row lock on their message and re-checks their state under it, so
//! two calls at the same time (or a repeated call) queue a turn at most once.
//!
//! A turn whose reply has a part in doubt (`unknown`: Telegram at-most-once) and none
//! failed stays `executed` with `delivered_at` unset and the part's error in `last_error`:
//! distinguishable from a delivered turn, and not `delivery_failed`, because resending it
//! may post a second copy, which is what the connector's at-most-once choice forbids. A
//! resend re-posts such a part only when asked to explicitly (`include_unknown`).

pub mod apply;
pub mod requeue;
pub mod settle;
pub mod writer;

use std::time::Duration;

use crate::db::queue::LeaseToken;
use crate::domain::MessageId;

/// One change of a turn's state.
#[derive(Debug, Clone)]
pub enum Transition {
    /// The agent answered. With parts: `executed`, the parts created (part 0 `sending`),
    /// the job moved to its reply stage. Without: `executed`, delivered, the job gone.
    Answered { response: String, parts: Vec<String> },
    /// A failed agent call worth another attempt after `delay`.
    AgentRetry { error: String, delay: Duration },
    /// The agent refused, or retries are over: `dispatch_failed`, the job gone.
    AgentFailed { error: String },
    /// The message is gone or already finished: the job is dropped.
    Skipped,
    /// The next part's request is about to leave.
    MarkSending { part: i32 },
    /// A part was posted (not the last); `next` is marked `sending` with it.
    PartPosted {
        part: i32,
        platform_id: String,
        next: Option<i32>,
    },
    /// Every part is posted (the last one, when given, just now): delivered, job gone.
    Delivered { last: Option<(i32, String)> },
    /// A part must wait `delay` (rate limit, no answer yet): `in_doubt` when its request
    /// may have gone through (it stays `sending`), else it is back to `pending`.
    PartWait {
        part: i32,
        error: String,
        in_doubt: bool,
        delay: Duration,
    },
    /// A part failed for good: it and every later part fail, the turn is `delivery_failed`
    /// with the part's error, the job is gone.
    PartFailed { part: i32, error: String },
    /// A part's outcome cannot be known and it will not be resent (Telegram at-most-once):
    /// it is `unknown` (its error kept on the turn too), and the parts after it are still
    /// sent.
    PartUnknown { part: i32, error: String },
    /// Nothing is left to send but not every part is known to be posted (some are
    /// `unknown`): the last one posted (when given) is recorded, the job is gone, and the
    /// turn is not marked delivered.
    Concluded { last: Option<(i32, String)> },
    /// Nothing can be posted (the connector is gone): unsent parts fail, the turn is
    /// `delivery_failed`, the job is gone.
    Abandoned { error: String },
    /// A streamed answer's live view left this message on the platform (a Slack stream's
    /// `ts`, a Telegram group message id): the first reply part adopts it
    /// (`crate::delivery::live`).
    LiveShown { platform_id: String },
}

/// What applying a transition came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    Done,
    /// `Answered`: whether this was the turn's first stored answer.
    Stored {
        first: bool,
    },
    /// The lease was no longer the caller's: nothing was written.
    LeaseLost,
}

/// One holder's transition of one turn.
#[derive(Debug, Clone)]
pub struct Change {
    pub message: MessageId,
    pub lease: LeaseToken,
    pub transition: Transition,
}
