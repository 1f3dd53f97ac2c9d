//! Readiness is logged when it changes, not at every probe.

use std::sync::atomic::{AtomicBool, Ordering};

/// WARN, not ERROR: an outage is not this process's fault, and failed requests log their own.
#[derive(Debug, Default)]
pub struct Readiness {
    unready: AtomicBool,
}

impl Readiness {
    pub fn note(&self, failure: Option<&str>) {
        let was_unready = self.unready.swap(failure.is_some(), Ordering::Relaxed);
        match (was_unready, failure) {
            (false, Some(reason)) => {
                tracing::warn!(reason, "not ready: /readyz answers 503 until this clears")
            }
            (true, None) => tracing::info!("ready again: /readyz answers 200"),
            (true, Some(reason)) => tracing::debug!(reason, "still not ready"),
            (false, None) => {}
        }
    }
}
