//! Whether an application's last `/readyz` answer was 503, so that readiness is logged
//! when it changes, not at every probe (a load balancer probes every few seconds).

use std::sync::atomic::{AtomicBool, Ordering};

/// One WARN when `/readyz` starts answering 503, one INFO when it recovers. An outage is
/// not this process's error, and the requests it fails log their own lines.
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
