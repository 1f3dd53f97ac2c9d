//! The claim loop: it claims again after a claim that filled its batch, and when the idle
//! wait ends. Each claim takes every tenant's oldest head before any tenant's second, each
//! tenant within its cap, and each claimed job runs in a task of its own.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinSet;

use super::failures::{self, Failures};
use super::idle::Idle;
use super::in_flight::InFlight;
use crate::dispatch::wakeup::Wakeup;
use crate::dispatch::{Claimed, StepOutcome, Worker};

enum ClaimResult {
    Full,
    Partial,
    Failed(Duration),
}

pub(super) struct ClaimLoop {
    worker: Arc<Worker>,
    in_flight: Arc<InFlight>,
    issued: AtomicU64,
    failures: Failures,
}

impl ClaimLoop {
    pub(super) fn new(worker: Arc<Worker>, in_flight: Arc<InFlight>) -> Self {
        Self {
            worker,
            in_flight,
            issued: AtomicU64::new(0),
            failures: Failures::default(),
        }
    }

    pub(super) fn issued(&self) -> u64 {
        self.issued.load(Ordering::Relaxed)
    }

    pub(super) async fn run(&self, wakeup: &Wakeup, mut stop: watch::Receiver<bool>) {
        let mut idle = Idle::new(self.worker.clone(), self.in_flight.clone());
        let mut tasks = JoinSet::new();
        let mut ready = true;
        while !*stop.borrow() {
            // A finished job's task keeps its memory (its whole future) until it is joined,
            // and under load thousands finish between two turns of this loop.
            while tasks.try_join_next().is_some() {}
            // Registered before the claim, so a wake-up during it is not lost.
            let notified = wakeup.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if ready {
                match self.claim_once(&mut tasks).await {
                    ClaimResult::Full => continue,
                    ClaimResult::Failed(pause) => {
                        failures::pause(pause, &mut stop).await;
                        continue;
                    }
                    ClaimResult::Partial => {}
                }
            }
            ready = idle.wait(notified, &self.failures, &mut stop).await;
        }
        while tasks.join_next().await.is_some() {}
    }

    async fn claim_once(&self, tasks: &mut JoinSet<()>) -> ClaimResult {
        let settings = self.worker.settings();
        self.in_flight.refresh_caps(self.worker.queue(), settings).await;
        let lease = Duration::from_secs(settings.dispatch.lease_secs);
        let Some(request) = self.in_flight.claim_request(lease) else {
            return ClaimResult::Partial;
        };
        self.issued.fetch_add(1, Ordering::Relaxed);
        let deadline = settings.database.deadline();
        let claimed = match crate::db::within(deadline, self.worker.claim(&request)).await {
            Ok(claimed) => claimed,
            Err(err) => return ClaimResult::Failed(self.failures.failed("claim", &err)),
        };
        self.failures.recovered();
        let full = claimed.len() == request.wanted;
        for job in claimed {
            self.start(job, tasks);
        }
        metrics::gauge!("channel_bridge_dispatch_in_flight").set(self.in_flight.total() as f64);
        if full {
            ClaimResult::Full
        } else {
            ClaimResult::Partial
        }
    }

    fn start(&self, claimed: Claimed, tasks: &mut JoinSet<()>) {
        let slot = self.in_flight.take(&claimed.job);
        let message = claimed.job.message_id;
        let worker = self.worker.clone();
        tasks.spawn(async move {
            match worker.run_job(claimed).await {
                Ok(StepOutcome::LeaseLost(_)) => {
                    tracing::warn!(%message, "lease lost; another holder has the job");
                    metrics::counter!("channel_bridge_dispatch_leases_lost_total").increment(1);
                }
                Ok(_) => {}
                Err(err) => tracing::error!(error = ?err, %message, "dispatch job failed"),
            }
            drop(slot);
        });
    }
}
