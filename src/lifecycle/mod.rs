//! The data lifecycle, one tenant transaction at a time:
//! docs/admin.md#data-lifecycle-retention-erasure-export-audit.

pub mod awaiting;
pub mod erasure;
pub mod export;
pub mod handoff;
pub mod retention;

pub use crate::db::lifecycle::{Erased, Person};

/// Runs `pass` now and then every `every` until `stop`: a failed pass is logged and tried
/// again at the next, a database without the schema (not migrated yet) is no error.
pub(crate) async fn every<F, Fut, T>(
    name: &'static str,
    every: std::time::Duration,
    mut stop: tokio::sync::watch::Receiver<bool>,
    mut pass: F,
) where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, sqlx::Error>>,
{
    loop {
        match pass().await {
            Ok(_) => {}
            Err(err) if crate::db::means_no_schema(&err) => {}
            Err(err) => {
                tracing::warn!(error = %err, pass = name, "a periodic pass failed; trying again at the next one")
            }
        }
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            _ = stop.changed() => return,
        }
        if *stop.borrow() {
            return;
        }
    }
}
