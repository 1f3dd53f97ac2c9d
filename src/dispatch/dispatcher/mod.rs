//! One claimer per instance feeding a bounded in-flight set
//! (docs/architecture.md#webhook-to-reply): the claim loop (`claim_loop.rs`) claims up to
//! the room the in-flight table (`in_flight.rs`) leaves, and between claims waits
//! (`idle.rs`); beside it run lease renewal, queue rotation and the queue's statistics.

mod claim_loop;
mod failures;
mod idle;
mod in_flight;
mod leases;
mod rotation;
mod stats;

use std::sync::Arc;

use tokio::sync::watch;

use self::claim_loop::ClaimLoop;
use self::in_flight::InFlight;
use crate::dispatch::wakeup::Wakeup;
use crate::dispatch::Worker;

pub struct Dispatcher {
    worker: Arc<Worker>,
    in_flight: Arc<InFlight>,
    claims: ClaimLoop,
}

impl Dispatcher {
    pub fn new(worker: Arc<Worker>) -> Arc<Self> {
        let in_flight = Arc::new(InFlight::new(worker.settings()));
        let claims = ClaimLoop::new(worker.clone(), in_flight.clone());
        Arc::new(Self {
            worker,
            in_flight,
            claims,
        })
    }

    pub fn in_flight(&self) -> usize {
        self.in_flight.total()
    }

    pub fn claims_issued(&self) -> u64 {
        self.claims.issued()
    }

    /// Until `stop`, then until every job it started has ended.
    pub async fn run(self: Arc<Self>, wakeup: Arc<Wakeup>, stop: watch::Receiver<bool>) {
        self.claims.run(&wakeup, stop).await;
    }

    pub async fn keep_leases(self: Arc<Self>, stop: watch::Receiver<bool>) {
        leases::keep(&self.worker, &self.in_flight, stop).await;
    }

    pub async fn keep_queue_fresh(self: Arc<Self>, stop: watch::Receiver<bool>) {
        rotation::keep_fresh(&self.worker, || self.claims_issued(), stop).await;
    }

    pub async fn report_queue_stats(self: Arc<Self>, stop: watch::Receiver<bool>) {
        stats::report(&self.worker, stop).await;
    }
}
