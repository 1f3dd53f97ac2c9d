//! A platform's rate limit belongs to the bot (Telegram), the workspace and method (Slack:
//! replies are all `chat.postMessage`), the number (WhatsApp): to the connector, not to the
//! turn that met it. A 429 holds every reply send of that connector until its delay has
//! passed; then one send probes (the turn that met the 429, when its job is back), and the
//! rest follow once it went through. The hold is kept here and written to the connector's
//! row (`db::connectors::hold_sends`), which the workers read for every delivery pass: the
//! other instances hold their sends as well, and each probes once.
//! Without this, each waiting turn retried on its own clock and kept the flood control going.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::domain::{ConnectorId, MessageId};

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
    /// The turn that met the last 429 here: its own job waits the delay, and it is the
    /// probe. `None` for a hold learnt from another instance.
    by: Option<MessageId>,
}

/// Whether a reply send through a connector may go now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Clearance {
    Go,
    /// Held: try again after this long, without a request.
    Wait(Duration),
}

impl SendHolds {
    /// Whether `message`'s next part may be sent through `connector` now.
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

    /// The platform answered 429 to `message`'s send: the connector's sends wait `delay`.
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

    /// Another instance met a 429 on `connector`: hold it here until `until` too, unless a
    /// hold of this instance already lasts as long.
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
