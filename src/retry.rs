//! Retry timing shared by agent calls, reply sends and failed worker steps.

use std::time::Duration;

use rand::Rng;

use crate::settings::DispatchSettings;

/// Delay before attempt `attempt + 1`, after `attempt` failed calls (1-based): exponential
/// from `retry_base_ms`, capped at `retry_max_ms`, with equal jitter (uniform in
/// [cap/2, cap]) so that many jobs failing together do not retry together, yet a job that
/// fails every time is never tried again at once (full jitter could draw zero). An agent's
/// `Retry-After` is honoured as a floor, within the same cap.
pub fn backoff(settings: &DispatchSettings, attempt: u32, retry_after: Option<Duration>) -> Duration {
    let exponent = attempt.saturating_sub(1).min(30);
    let ceiling = settings
        .retry_base_ms
        .saturating_mul(1u64 << exponent)
        .min(settings.retry_max_ms);
    let jittered = if ceiling == 0 {
        0
    } else {
        rand::thread_rng().gen_range(ceiling / 2..=ceiling)
    };
    let floor = retry_after.map_or(0, |d| (d.as_millis() as u64).min(settings.retry_max_ms));
    Duration::from_millis(jittered.max(floor))
}

/// The pause before a reply part's next attempt, after `attempts` of them.
pub fn part_backoff(settings: &DispatchSettings, attempts: i32) -> Duration {
    backoff(settings, u32::try_from(attempts).unwrap_or(1), None)
}

/// What is left of a confirmation `window` (a status callback, a Slack metadata event)
/// after a part's `sending` mark; `None` once it is over.
pub fn window_left(
    window: Duration,
    mark: chrono::DateTime<chrono::Utc>,
    now: chrono::DateTime<chrono::Utc>,
) -> Option<Duration> {
    let waited = (now - mark).to_std().unwrap_or_default();
    window.checked_sub(waited).filter(|left| !left.is_zero())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_exponentially_within_the_cap_and_honours_retry_after() {
        let settings = DispatchSettings {
            retry_base_ms: 100,
            retry_max_ms: 1000,
            ..Default::default()
        };
        for _ in 0..50 {
            let first = backoff(&settings, 1, None);
            assert!(Duration::from_millis(50) <= first && first <= Duration::from_millis(100));
            let third = backoff(&settings, 3, None);
            assert!(Duration::from_millis(200) <= third && third <= Duration::from_millis(400));
            let capped = backoff(&settings, 30, None);
            assert!(Duration::from_millis(500) <= capped && capped <= Duration::from_millis(1000));
            assert!(backoff(&settings, 1, Some(Duration::from_millis(700))) >= Duration::from_millis(700));
            assert_eq!(
                backoff(&settings, 1, Some(Duration::from_secs(3600))),
                Duration::from_millis(1000)
            );
        }
    }
}
