//! The worker: queued turns become agent calls, in order per conversation
//! (docs/architecture.md#webhook-to-reply). A claim prepares its batch in one transaction;
//! each job then holds no connection while it waits on the agent or the platform. A crash
//! leaves the job leased: claimed again, the agent sees the same `Idempotency-Key`.

pub mod agent;
mod answer;
mod claimed;
mod deliver;
pub mod dispatcher;
pub mod feedback;
mod feedback_sender;
pub mod history;
pub mod payload;
mod prepare;
pub mod stream;
pub mod wakeup;
mod worker;

pub use claimed::{Claimed, StepOutcome};
pub use worker::{Services, Worker};
