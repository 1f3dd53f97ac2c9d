//! The claimer's wait between claims: a wake-up or a finished job ends it (gathered for a
//! few milliseconds, so a busy instance claims in batches), and so does the polling tick,
//! which first asks whether anything is ready, so an idle instance costs one statement a
//! tick.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::futures::Notified;
use tokio::sync::watch;
use tokio::time::{Interval, MissedTickBehavior};

use super::failures::{self, Failures};
use super::in_flight::InFlight;
use crate::dispatch::Worker;

/// Under load many wake-ups arrive per millisecond, and one claim serves them all.
const GATHER: Duration = Duration::from_millis(10);

pub(super) struct Idle {
    poll: Interval,
    worker: Arc<Worker>,
    in_flight: Arc<InFlight>,
}

impl Idle {
    pub(super) fn new(worker: Arc<Worker>, in_flight: Arc<InFlight>) -> Self {
        let every = Duration::from_millis(worker.settings().dispatch.poll_interval_ms.max(1));
        let mut poll = tokio::time::interval(every);
        poll.set_missed_tick_behavior(MissedTickBehavior::Delay);
        Self {
            poll,
            worker,
            in_flight,
        }
    }

    /// Whether to claim now; `false` also when the instance stops.
    pub(super) async fn wait(
        &mut self,
        woken: Pin<&mut Notified<'_>>,
        failures: &Failures,
        stop: &mut watch::Receiver<bool>,
    ) -> bool {
        tokio::select! {
            () = woken => {
                tokio::time::sleep(GATHER).await;
                true
            }
            () = self.in_flight.freed() => {
                tokio::time::sleep(GATHER).await;
                true
            }
            _ = self.poll.tick() => match self.anything_ready(failures).await {
                Ok(found) => found,
                Err(pause) => {
                    failures::pause(pause, stop).await;
                    true
                }
            },
            _ = stop.changed() => false,
        }
    }

    async fn anything_ready(&self, failures: &Failures) -> Result<bool, Duration> {
        if self.in_flight.is_full() {
            return Ok(false);
        }
        let deadline = self.worker.settings().database.deadline();
        match crate::db::within(deadline, self.worker.queue().any_ready()).await {
            Ok(ready) => {
                failures.recovered();
                Ok(ready)
            }
            Err(err) => Err(failures.failed("a look at the queue", &err.into())),
        }
    }
}
