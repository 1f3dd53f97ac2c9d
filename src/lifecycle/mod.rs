//! The data lifecycle, one tenant transaction at a time:
//! docs/admin.md#data-lifecycle-retention-erasure-export-audit.

pub mod erasure;
pub mod export;
pub mod retention;

pub use crate::db::lifecycle::{Erased, Person};
