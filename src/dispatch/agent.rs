//! Calling the agent proxy: one signed POST, its outcome classified for the retry policy.
//!
//! Retried: timeouts, connection errors, 5xx, 429 (its `Retry-After` honoured within the
//! configured maximum) and a 2xx whose body is not a supported answer. Failed at once: any
//! other 4xx, which a repeat would only reproduce. No retries happen inside the client: the
//! worker reschedules the job durably, so a crash between attempts loses nothing.

use std::time::Duration;

use axum::http::HeaderMap;
use rand::Rng;
use reqwest::StatusCode;

use super::payload::{parse_answer, DispatchOut};
use super::signature;
use crate::settings::DispatchSettings;

/// What one agent call came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallOutcome {
    /// The reply parts, in order (possibly none).
    Answered(Vec<String>),
    /// Worth another attempt; `retry_after` is the agent's own wish, if it said one.
    Retryable {
        reason: &'static str,
        error: String,
        retry_after: Option<Duration>,
    },
    /// A repeat would fail the same way.
    Permanent { reason: &'static str, error: String },
}

/// Signs (with every live dispatch secret: two during a rotation) and posts one dispatch. `Idempotency-Key` and `webhook-id` are the message id, the
/// same on every attempt, so an agent can drop a repeat after a lost answer.
pub async fn call(
    client: &reqwest::Client,
    url: &str,
    secrets: &[&str],
    payload: &DispatchOut,
    now: i64,
) -> CallOutcome {
    let body = match serde_json::to_vec(payload) {
        Ok(body) => body,
        Err(err) => {
            return CallOutcome::Permanent {
                reason: "encode",
                error: err.to_string(),
            }
        }
    };
    let signature = match signature::sign_all(secrets, &payload.message_id, now, &body) {
        Ok(signature) => signature,
        Err(err) => {
            return CallOutcome::Permanent {
                reason: "dispatch_secret",
                error: err.to_string(),
            }
        }
    };
    let response = client
        .post(url)
        .header("content-type", "application/json")
        .header("idempotency-key", &payload.message_id)
        .header("webhook-id", &payload.message_id)
        .header("webhook-timestamp", now.to_string())
        .header("webhook-signature", signature)
        .body(body)
        .send()
        .await;
    match response {
        Ok(response) => classify(response).await,
        Err(err) if err.is_timeout() => retryable("timeout", err.to_string(), None),
        Err(err) => retryable("connect", without_url(err).to_string(), None),
    }
}

async fn classify(response: reqwest::Response) -> CallOutcome {
    let status = response.status();
    let retry_after = retry_after(response.headers());
    let body = match response.bytes().await {
        Ok(body) => body,
        Err(err) => return retryable("read_body", without_url(err).to_string(), None),
    };
    if status.is_success() {
        return match parse_answer(&body) {
            Ok(parts) => CallOutcome::Answered(parts),
            Err(err) => retryable("invalid_answer", err.to_string(), None),
        };
    }
    let error = format!("agent answered {status}: {}", snippet(&body));
    if status == StatusCode::TOO_MANY_REQUESTS {
        retryable("rate_limited", error, retry_after)
    } else if status.is_server_error() {
        retryable("server_error", error, retry_after)
    } else {
        CallOutcome::Permanent {
            reason: "client_error",
            error,
        }
    }
}

fn retryable(reason: &'static str, error: String, retry_after: Option<Duration>) -> CallOutcome {
    CallOutcome::Retryable {
        reason,
        error,
        retry_after,
    }
}

/// reqwest errors print the URL, which may hold a token in its query string.
fn without_url(err: reqwest::Error) -> reqwest::Error {
    err.without_url()
}

/// The start of an error body, enough to diagnose, too short to flood `last_error`.
fn snippet(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    text.chars().take(300).collect()
}

/// `Retry-After` in delta-seconds (the form agents and proxies send; an HTTP date is
/// treated as absent and the normal backoff applies).
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let value = headers.get(reqwest::header::RETRY_AFTER)?.to_str().ok()?;
    value.trim().parse::<u64>().ok().map(Duration::from_secs)
}

/// Delay before attempt `attempt + 1`, after `attempt` failed calls (1-based): exponential
/// from `retry_base_ms`, capped at `retry_max_ms`, with full jitter (uniform in [0, cap]) so
/// that many jobs failing together do not retry together. An agent's `Retry-After` is
/// honoured as a floor, within the same cap.
pub fn backoff(settings: &DispatchSettings, attempt: u32, retry_after: Option<Duration>) -> Duration {
    let exponent = attempt.saturating_sub(1).min(30);
    let ceiling = settings
        .retry_base_ms
        .saturating_mul(1u64 << exponent)
        .min(settings.retry_max_ms);
    let jittered = if ceiling == 0 {
        0
    } else {
        rand::thread_rng().gen_range(0..=ceiling)
    };
    let floor = retry_after.map_or(0, |d| (d.as_millis() as u64).min(settings.retry_max_ms));
    Duration::from_millis(jittered.max(floor))
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
            assert!(backoff(&settings, 1, None) <= Duration::from_millis(100));
            assert!(backoff(&settings, 3, None) <= Duration::from_millis(400));
            assert!(backoff(&settings, 30, None) <= Duration::from_millis(1000));
            assert!(backoff(&settings, 1, Some(Duration::from_millis(700))) >= Duration::from_millis(700));
            assert_eq!(
                backoff(&settings, 1, Some(Duration::from_secs(3600))),
                Duration::from_millis(1000)
            );
        }
    }

    #[test]
    fn retry_after_reads_delta_seconds_only() {
        let mut headers = HeaderMap::new();
        headers.insert("retry-after", "7".parse().unwrap());
        assert_eq!(retry_after(&headers), Some(Duration::from_secs(7)));
        headers.insert("retry-after", "Wed, 21 Oct 2015 07:28:00 GMT".parse().unwrap());
        assert_eq!(retry_after(&headers), None);
    }
}
