//! The dispatch worker: queued user turns become agent calls, in order per conversation,
//! each with the user's recent history. A claim prepares its batch in one transaction
//! (`prepare`); each job then runs with no connection held while it waits on the agent or
//! the platform (`answer`, `deliver`), its state changes going through `crate::turn`. A
//! crash leaves the job leased: claimed again, the agent sees the same `Idempotency-Key`.
//! `dispatcher` runs the worker; `Worker::step` drives it deterministically in tests.

pub mod agent;
mod answer;
mod claimed;
mod deliver;
pub mod dispatcher;
pub mod history;
pub mod payload;
mod prepare;
pub mod signature;
pub mod stream;
pub mod wakeup;
mod worker;

pub use claimed::{Claimed, StepOutcome};
pub use worker::Worker;
