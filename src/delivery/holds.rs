//! A platform's rate limit belongs to the bot (Telegram), the workspace and method (Slack:
//! replies are all `chat.postMessage`), the number (WhatsApp): to the connector, not to the
//! turn that met it. A 429 holds every reply send of that connector on this instance until
//! its delay has passed; then one send probes, and the rest follow once it went through.
//! Without this, each waiting turn retried on its own clock and kept the flood control going.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::domain::ConnectorId;

/// How long the other sends wait for a probe's answer before looking again, and how long a
/// probe that never reports back (its task died) holds them at most.
const PROBE_WAIT: Duration = Duration::from_secs(1);
const PROBE_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Default)]
pub struct SendHolds {
    held: Mutex<HashMap<ConnectorId, Hold>>,
}

struct Hold {
    until: Instant,
    /// A send is out to find whether the limit has passed.
    probing: bool,
}

/// Whether a reply send through a connector may go now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Clearance {
    Go,
    /// Held: try again after this long, without a request.
    Wait(Duration),
}

impl SendHolds {
    pub fn clearance(&self, connector: ConnectorId) -> Clearance {
        let mut held = self.held.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let Some(hold) = held.get_mut(&connector) else {
            return Clearance::Go;
        };
        let now = Instant::now();
        if now < hold.until {
            let left = hold.until - now;
            return Clearance::Wait(if hold.probing { left.min(PROBE_WAIT) } else { left });
        }
        // This send is the probe; the others wait for its answer.
        hold.probing = true;
        hold.until = now + PROBE_TIMEOUT;
        Clearance::Go
    }

    /// The platform answered 429: the connector's sends wait `delay`.
    pub fn rate_limited(&self, connector: ConnectorId, delay: Duration) {
        let until = Instant::now() + delay;
        let mut held = self.held.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let hold = held.entry(connector).or_insert(Hold {
            until,
            probing: false,
        });
        if hold.probing || hold.until < until {
            hold.until = until;
        }
        hold.probing = false;
    }

    /// A send got any other answer: the connector is not held.
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
        assert_eq!(holds.clearance(bot), Clearance::Go);
        holds.rate_limited(bot, Duration::from_secs(60));
        assert!(matches!(holds.clearance(bot), Clearance::Wait(d) if d > Duration::from_secs(59)));
        assert_eq!(
            holds.clearance(other),
            Clearance::Go,
            "another connector is not held"
        );

        holds.rate_limited(bot, Duration::from_secs(1));
        assert!(
            matches!(holds.clearance(bot), Clearance::Wait(d) if d > Duration::from_secs(58)),
            "a shorter delay does not shorten the hold"
        );

        let passed = ConnectorId::new();
        holds.rate_limited(passed, Duration::ZERO);
        assert_eq!(holds.clearance(passed), Clearance::Go, "the probe");
        assert!(
            matches!(holds.clearance(passed), Clearance::Wait(d) if d <= PROBE_WAIT),
            "the rest wait for the probe"
        );
        holds.passed(passed);
        assert_eq!(holds.clearance(passed), Clearance::Go);
        assert_eq!(holds.clearance(passed), Clearance::Go);
    }
}
