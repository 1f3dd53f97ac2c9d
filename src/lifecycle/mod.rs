//! The data lifecycle (README "Data lifecycle"): what is kept and for how long, and what a
//! person can have erased or exported.
//!
//! - `retention`: the background job that deletes each tenant's turns (with their reply
//!   parts) older than the tenant's `retention_days`, in small batches, never a turn in
//!   flight.
//! - `erasure`: every row of one person in the tenant's tables, in one tenant transaction,
//!   with an audit record of the counts.
//! - `export`: a person's or the whole tenant's turns as JSON Lines, page by page, so a
//!   large tenant is never held in memory.
//!
//! Everything here works inside tenant transactions (`db::TenantTx`), one tenant at a time;
//! only the list of tenants with a retention is read across tenants (`tenants` has no RLS).

pub mod erasure;
pub mod export;
pub mod retention;

pub use crate::db::lifecycle::{Erased, Person};
