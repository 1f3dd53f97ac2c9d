//! Rate-limit holds per connector: a platform's limit is the bot's, workspace's or number's,
//! not the turn's, so a 429 holds every reply send of the connector, then one send probes
//! and the rest follow it (docs/delivery.md#delivery-guarantees). Turns retrying each on
//! its own clock kept the flood control going.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::domain::{ConnectorId, MessageId};

/// How long the others wait for a probe before looking again, and at most for a probe
/// that never reports back (its task died).
const PROBE_WAIT: Duration = Duration::from_secs(1);
const PROBE_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Default)]
pub struct SendHolds {
    held: Mutex<HashMap<ConnectorId, Hold>>,
}

struct Hold {
    until: Instant,
    probing: bool,
    /// The turn that met the 429 here is the probe; `None` for a hold learnt from another
    /// instance.
    by: Option<MessageId>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Clearance {
    Go,
    Wait(Duration),
}

impl SendHolds {
    pub fn clearance(&self, connector: ConnectorId, message: MessageId) -> Clearance {
        let mut held = self.held.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let Some(hold) = held.get_mut(&connector) else {
            return Clearance::Go;
        };
        let now = Instant::now();
        let its_own = hold.by == Some(message) && !hold.probing;
        if now < hold.until && !its_own {
            let left = hold.until - now;
            return Clearance::Wait(if hold.probing { left.min(PROBE_WAIT) } else { left });
        }
        // This send is the probe; the others wait for its answer.
        hold.probing = true;
        hold.until = now + PROBE_TIMEOUT;
        Clearance::Go
    }

    pub fn rate_limited(&self, connector: ConnectorId, message: MessageId, delay: Duration) {
        let until = Instant::now() + delay;
        let mut held = self.held.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let hold = held.entry(connector).or_insert(Hold {
            until,
            probing: false,
            by: None,
        });
        if hold.probing || hold.until < until {
            hold.until = until;
        }
        hold.probing = false;
        hold.by = Some(message);
    }

    /// A hold another instance wrote to the connector's row.
    pub fn learn(&self, connector: ConnectorId, until: Instant) {
        if until <= Instant::now() {
            return;
        }
        let mut held = self.held.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        match held.get_mut(&connector) {
            Some(hold) if hold.until >= until || hold.probing => {}
            Some(hold) => hold.until = until,
            None => {
                held.insert(
                    connector,
                    Hold {
                        until,
                        probing: false,
                        by: None,
                    },
                );
            }
        }
    }

    pub fn passed(&self, connector: ConnectorId) {
        let mut held = self.held.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        held.remove(&connector);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_429_holds_the_connector_then_one_probe_goes_and_the_rest_wait_for_it() {
        let holds = SendHolds::default();
        let (bot, other) = (ConnectorId::new(), ConnectorId::new());
        let (met, waiting) = (MessageId::new(), MessageId::new());
        let held = |connector, message, longer_than: u64| {
            matches!(holds.clearance(connector, message),
                     Clearance::Wait(d) if d > Duration::from_secs(longer_than))
        };
        assert_eq!(holds.clearance(bot, waiting), Clearance::Go);
        holds.rate_limited(bot, met, Duration::from_secs(60));
        assert!(held(bot, waiting, 59));
        assert_eq!(
            holds.clearance(other, waiting),
            Clearance::Go,
            "another connector"
        );
        holds.rate_limited(bot, met, Duration::from_secs(1));
        assert!(
            held(bot, waiting, 58),
            "a shorter delay does not shorten the hold"
        );
        // The turn that met the 429 is back when its own job's delay is over: the probe.
        assert_eq!(holds.clearance(bot, met), Clearance::Go);
        let probing = holds.clearance(bot, waiting);
        assert!(
            matches!(probing, Clearance::Wait(d) if d <= PROBE_WAIT),
            "{probing:?}"
        );
        holds.passed(bot);
        assert_eq!(holds.clearance(bot, waiting), Clearance::Go);

        let learnt = ConnectorId::new();
        holds.learn(learnt, Instant::now() + Duration::from_secs(30));
        assert!(
            held(learnt, met, 29),
            "a hold met by another instance holds every turn here"
        );

        let over = ConnectorId::new();
        holds.rate_limited(over, met, Duration::ZERO);
        assert_eq!(
            holds.clearance(over, waiting),
            Clearance::Go,
            "a probe once the delay is over"
        );
        let probing = holds.clearance(over, met);
        assert!(
            matches!(probing, Clearance::Wait(d) if d <= PROBE_WAIT),
            "{probing:?}"
        );
    }
}
