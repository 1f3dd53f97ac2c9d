//! Throttling of bad admin credentials, answered before any database work.
//!
//! Checking an admin key costs a pooled connection and a query, so a flood of made-up keys
//! could hold the pool. Keys that have not authenticated on this instance are *untrusted*:
//! each attempt with one spends a token from two buckets (governor's token buckets), one
//! per source address (the TCP peer) and one per key prefix. An empty bucket answers 429
//! with `Retry-After` before the key is looked up. A key that authenticates is trusted by
//! its hash (the whole key, not its public prefix: knowing a prefix must not let anyone
//! lock the real key out), so working clients are never charged; a key that fails (it was
//! revoked) is untrusted again. A bearer token that is not shaped like a key (`cbk_<prefix>_<secret>`)
//! cannot be valid: it is refused (and charged) without a lookup.
//!
//! Behind a load balancer every client has the balancer's address: untrusted attempts then
//! share one source bucket, while clients with a working key are not affected. The operator
//! token is compared in memory (no database work) and is not throttled here.

use std::collections::HashSet;
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::RwLock;
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};

/// Untrusted attempts one source may make at once, and how fast its bucket refills.
const SOURCE_BURST: u32 = 20;
const SOURCE_PER_SECOND: u32 = 2;
/// Untrusted attempts with one key prefix at once, and one more every this long.
const PREFIX_BURST: u32 = 5;
const PREFIX_REFILL: Duration = Duration::from_secs(10);
/// Trusted keys kept at most; past it the set starts over (keys are re-trusted by their
/// next success).
const MAX_TRUSTED: usize = 10_000;

pub struct AuthThrottle {
    by_source: DefaultKeyedRateLimiter<IpAddr>,
    by_prefix: DefaultKeyedRateLimiter<String>,
    /// Hashes of keys that authenticated (`super::auth::hash_key`).
    trusted: RwLock<HashSet<Vec<u8>>>,
    clock: DefaultClock,
}

impl Default for AuthThrottle {
    fn default() -> Self {
        let per_second = NonZeroU32::new(SOURCE_PER_SECOND).unwrap_or(NonZeroU32::MIN);
        let source_burst = NonZeroU32::new(SOURCE_BURST).unwrap_or(NonZeroU32::MIN);
        let prefix_burst = NonZeroU32::new(PREFIX_BURST).unwrap_or(NonZeroU32::MIN);
        let prefix_quota = Quota::with_period(PREFIX_REFILL)
            .unwrap_or(Quota::per_second(NonZeroU32::MIN))
            .allow_burst(prefix_burst);
        Self {
            by_source: RateLimiter::keyed(Quota::per_second(per_second).allow_burst(source_burst)),
            by_prefix: RateLimiter::keyed(prefix_quota),
            trusted: RwLock::new(HashSet::new()),
            clock: DefaultClock::default(),
        }
    }
}

/// The prefix of a key shaped `cbk_<prefix>_<secret>`, or `None` for any other token.
pub fn key_prefix(token: &str) -> Option<&str> {
    let rest = token.strip_prefix("cbk_")?;
    let (prefix, secret) = rest.split_once('_')?;
    let shaped = !prefix.is_empty()
        && prefix.len() <= 16
        && prefix.bytes().all(|b| b.is_ascii_alphanumeric())
        && !secret.is_empty();
    shaped.then_some(prefix)
}

impl AuthThrottle {
    /// Before a key is looked up: `Err(wait)` when an untrusted attempt (the key whose hash
    /// is `key_hash`) from `source` or with `prefix` (`None`: a token not shaped like a key)
    /// is over its budget.
    pub fn admit(
        &self,
        source: Option<IpAddr>,
        prefix: Option<&str>,
        key_hash: &[u8],
    ) -> Result<(), Duration> {
        if self.is_trusted(key_hash) {
            return Ok(());
        }
        let now = self.clock.now();
        let mut wait = Duration::ZERO;
        if let Some(source) = source {
            if let Err(not_until) = self.by_source.check_key(&source) {
                wait = wait.max(not_until.wait_time_from(now));
            }
        }
        if let Some(prefix) = prefix {
            if let Err(not_until) = self.by_prefix.check_key(&prefix.to_owned()) {
                wait = wait.max(not_until.wait_time_from(now));
            }
        }
        if wait.is_zero() {
            Ok(())
        } else {
            metrics::counter!("channel_bridge_admin_auth_throttled_total").increment(1);
            Err(wait)
        }
    }

    /// After the lookup: a working key is trusted, a failing one is not.
    pub fn record(&self, key_hash: &[u8], authenticated: bool) {
        if authenticated == self.is_trusted(key_hash) {
            return;
        }
        let mut trusted = self
            .trusted
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if authenticated {
            if trusted.len() >= MAX_TRUSTED {
                trusted.clear();
            }
            trusted.insert(key_hash.to_vec());
        } else {
            trusted.remove(key_hash);
        }
    }

    fn is_trusted(&self, key_hash: &[u8]) -> bool {
        self.trusted
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .contains(key_hash)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_key_shaped_tokens_have_a_prefix() {
        assert_eq!(key_prefix("cbk_AbC123_secret"), Some("AbC123"));
        for token in [
            "",
            "cbk_",
            "cbk__x",
            "cbk_abc",
            "cbk_abc_",
            "whsec_x",
            "cbk_a-b_x",
        ] {
            assert_eq!(key_prefix(token), None, "{token}");
        }
    }

    #[test]
    fn untrusted_attempts_run_out_and_a_trusted_prefix_is_never_charged() {
        let throttle = AuthThrottle::default();
        let source = Some(IpAddr::from([203, 0, 113, 7]));
        let admitted = (0..50)
            .filter(|n| throttle.admit(source, Some(&format!("bad{n}")), b"bad").is_ok())
            .count();
        assert_eq!(admitted, SOURCE_BURST as usize);
        let wait = throttle.admit(source, Some("another"), b"another").unwrap_err();
        assert!(wait > Duration::ZERO && wait <= Duration::from_secs(1));

        throttle.record(b"good key", true);
        assert!(throttle.admit(source, Some("good"), b"good key").is_ok());
        // The same prefix with another secret is not the trusted key.
        assert!(throttle.admit(source, Some("good"), b"guessed key").is_err());
        throttle.record(b"good key", false);
        assert!(throttle.admit(source, Some("good"), b"good key").is_err());
    }

    #[test]
    fn one_prefix_is_limited_whatever_the_source() {
        let throttle = AuthThrottle::default();
        let admitted = (0..20u8)
            .filter(|n| {
                throttle
                    .admit(Some(IpAddr::from([198, 51, 100, *n])), Some("target"), b"guess")
                    .is_ok()
            })
            .count();
        assert_eq!(admitted, PREFIX_BURST as usize);
    }
}
