//! Throttling of bad admin keys without database work per bad attempt, and never against a
//! key's owner (docs/admin.md#admin-api-and-cli). A key is decided by itself: the stored hash
//! of a recently looked-up prefix is kept here, so a wrong secret is refused in memory and
//! the right key passes whoever failed with its public prefix before. Only failures and
//! look-ups spend the source's tokens; behind a balancer all clients share one bucket.

use std::net::IpAddr;
use std::num::NonZeroU32;
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};

/// Failures (and look-ups) one source may make at once, and how fast its bucket refills.
const SOURCE_BURST: u32 = 20;
const SOURCE_PER_SECOND: u32 = 2;
/// How long a prefix's stored hash (or its absence) is trusted, and how many are kept.
const PREFIX_TTL: Duration = Duration::from_secs(30);
const MAX_PREFIXES: u64 = 10_000;

pub struct AuthThrottle {
    by_source: DefaultKeyedRateLimiter<IpAddr>,
    /// Key prefix → the live key's hash (`None`: no live key has it).
    hashes: moka::sync::Cache<String, Option<Vec<u8>>>,
    clock: DefaultClock,
}

impl Default for AuthThrottle {
    fn default() -> Self {
        let per_second = NonZeroU32::new(SOURCE_PER_SECOND).unwrap_or(NonZeroU32::MIN);
        let source_burst = NonZeroU32::new(SOURCE_BURST).unwrap_or(NonZeroU32::MIN);
        Self {
            by_source: RateLimiter::keyed(Quota::per_second(per_second).allow_burst(source_burst)),
            hashes: moka::sync::Cache::builder()
                .max_capacity(MAX_PREFIXES)
                .time_to_live(PREFIX_TTL)
                .build(),
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
    /// For a failure, or a look-up about to be made; `Err(wait)` when the bucket is empty.
    pub fn charge(&self, source: Option<IpAddr>) -> Result<(), Duration> {
        let Some(source) = source else {
            return Ok(());
        };
        self.by_source.check_key(&source).map_err(|not_until| {
            metrics::counter!("channel_bridge_admin_auth_throttled_total").increment(1);
            not_until.wait_time_from(self.clock.now())
        })
    }

    /// `None`: not known here; `Some(None)`: no live key has this prefix.
    pub fn stored_hash(&self, prefix: &str) -> Option<Option<Vec<u8>>> {
        self.hashes.get(prefix)
    }

    pub fn remember(&self, prefix: &str, hash: Option<Vec<u8>>) {
        self.hashes.insert(prefix.to_owned(), hash);
    }

    /// Its key was just refused by the database: revoked.
    pub fn forget(&self, prefix: &str) {
        self.hashes.invalidate(prefix);
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
    fn a_source_runs_out_of_failures_and_other_sources_keep_theirs() {
        let throttle = AuthThrottle::default();
        let source = Some(IpAddr::from([203, 0, 113, 7]));
        let charged = (0..50).filter(|_| throttle.charge(source).is_ok()).count();
        assert_eq!(charged, SOURCE_BURST as usize);
        let wait = throttle.charge(source).unwrap_err();
        assert!(wait > Duration::ZERO && wait <= Duration::from_secs(1));
        assert!(throttle.charge(Some(IpAddr::from([203, 0, 113, 8]))).is_ok());
    }

    #[test]
    fn a_prefix_is_known_until_forgotten() {
        let throttle = AuthThrottle::default();
        assert_eq!(throttle.stored_hash("abc"), None);
        throttle.remember("abc", Some(b"hash".to_vec()));
        throttle.remember("gone", None);
        assert_eq!(throttle.stored_hash("abc"), Some(Some(b"hash".to_vec())));
        assert_eq!(throttle.stored_hash("gone"), Some(None));
        throttle.forget("abc");
        assert_eq!(throttle.stored_hash("abc"), None);
    }
}
