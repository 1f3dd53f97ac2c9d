//! One signed POST to the agent, its outcome classified for the retry policy
//! (docs/agent.md#the-dispatch-what-an-agent-receives-and-answers). No retries happen
//! inside the client: the worker reschedules the job durably, so a crash between attempts
//! loses nothing.

use std::time::Duration;

use axum::http::HeaderMap;
use reqwest::StatusCode;

use super::payload::{parse_reply, Answer, AnswerError, DispatchOut};
use super::stream::{self, StreamError};
use crate::db::tenants::TenantRow;
use crate::delivery::live::TextSink;
use crate::egress::{GuardedClient, SendError, AGENT_REFUSED};
use crate::settings::ServeSettings;
use crate::signature;

pub(super) const NO_AGENT_URL: &str = "neither the tenant nor CB_AGENT_URL names an agent";

/// The tenant's agent URL, else the instance's `CB_AGENT_URL`.
pub(super) fn url_of<'a>(tenant: &'a TenantRow, settings: &'a ServeSettings) -> Option<&'a str> {
    tenant.agent_url.as_deref().or(settings.agent_url.as_deref())
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallOutcome {
    /// Possibly no parts.
    Answered(Answer),
    /// `202 Accepted`: the agent answers later, through the turn's events URL.
    Accepted,
    Retryable {
        reason: &'static str,
        error: String,
        retry_after: Option<Duration>,
    },
    Permanent {
        reason: &'static str,
        error: String,
    },
}

/// `Idempotency-Key` and `webhook-id` are the message id on every attempt, so an agent can
/// drop a repeat after a lost answer.
pub async fn call(
    client: &GuardedClient,
    url: &str,
    secrets: &[&str],
    payload: DispatchOut,
    now: i64,
    live: Option<&mut (dyn TextSink + Send)>,
) -> CallOutcome {
    // Thousands of calls wait at once: only the encoded body lives on.
    let message_id = payload.message_id.clone();
    let body = match serde_json::to_vec(&payload) {
        Ok(body) => body,
        Err(err) => {
            return CallOutcome::Permanent {
                reason: "encode",
                error: err.to_string(),
            }
        }
    };
    drop(payload);
    let signature = match signature::sign_all(secrets, &message_id, now, &body) {
        Ok(signature) => signature,
        Err(err) => {
            return CallOutcome::Permanent {
                reason: "dispatch_secret",
                error: err.to_string(),
            }
        }
    };
    let request = client
        .post(url)
        .header("content-type", "application/json")
        .header("idempotency-key", &message_id)
        .header("webhook-id", &message_id)
        .header("webhook-timestamp", now.to_string())
        .header("webhook-signature", signature)
        .body(body);
    let response = client.send(with_trace_context(request)).await;
    let host = host_of(url);
    match response {
        Ok(response) if response.status().is_success() && stream::is_event_stream(response.headers()) => {
            read_stream(response, &host, live).await
        }
        Ok(response) => classify(response, &host).await,
        // A verdict on the URL, not an outage: a retry would be refused the same way.
        Err(SendError::Refused(_)) => CallOutcome::Permanent {
            reason: "egress_refused",
            error: AGENT_REFUSED.to_owned(),
        },
        Err(SendError::Transport(err)) if err.is_timeout() => {
            retryable("timeout", format!("agent {host}: no answer in time"), None)
        }
        Err(SendError::Transport(err)) => {
            retryable("connect", format!("agent {host}: {}", cause(&err)), None)
        }
    }
}

/// Outside the signature: they describe the call, not the turn.
fn with_trace_context(request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
    crate::telemetry::traces::trace_headers()
        .into_iter()
        .fold(request, |request, (name, value)| request.header(name, value))
}

/// Without the path or query, which may hold a token.
pub(super) fn host_of(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(url) => match (url.host_str(), url.port_or_known_default()) {
            (Some(host), Some(port)) => format!("{host}:{port}"),
            (Some(host), None) => host.to_owned(),
            _ => "(no host)".to_owned(),
        },
        Err(_) => "(invalid URL)".to_owned(),
    }
}

/// The innermost cause, without the URL reqwest would print.
pub(super) fn cause(err: &reqwest::Error) -> String {
    let mut source: &dyn std::error::Error = err;
    while let Some(inner) = source.source() {
        source = inner;
    }
    let kind = if err.is_connect() { "cannot connect: " } else { "" };
    format!("{kind}{source}")
}

async fn classify(response: reqwest::Response, host: &str) -> CallOutcome {
    let status = response.status();
    let retry_after = retry_after(response.headers());
    let body = match response.bytes().await {
        Ok(body) => body,
        Err(err) => {
            return retryable(
                "read_body",
                format!("agent {host}: answer cut off: {}", cause(&err)),
                None,
            )
        }
    };
    if status == StatusCode::ACCEPTED {
        return CallOutcome::Accepted;
    }
    if status.is_success() {
        return match parse_reply(&body) {
            Ok(answer) => CallOutcome::Answered(answer),
            Err(err @ AnswerError::Choices(_)) => CallOutcome::Permanent {
                reason: "invalid_choices",
                error: format!("agent {host}: {err}"),
            },
            Err(err @ AnswerError::Extras(_)) => CallOutcome::Permanent {
                reason: "invalid_files",
                error: format!("agent {host}: {err}"),
            },
            Err(err) => retryable("invalid_answer", format!("agent {host}: {err}"), None),
        };
    }
    // The body is not kept: the agent URL is the tenant's to set, and what a server the
    // tenant chose answers must not come back through the admin API.
    let error = format!("agent {host} answered {status}");
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

async fn read_stream(
    response: reqwest::Response,
    host: &str,
    live: Option<&mut (dyn TextSink + Send)>,
) -> CallOutcome {
    match stream::read(response, live).await {
        Ok(answer) => CallOutcome::Answered(answer),
        Err(err @ StreamError::CutOff(_)) => {
            retryable("stream_cut_off", format!("agent {host}: {err}"), None)
        }
        Err(err @ StreamError::Invalid(_)) => {
            retryable("invalid_answer", format!("agent {host}: {err}"), None)
        }
        Err(err @ StreamError::AgentError) => retryable("stream_error", format!("agent {host}: {err}"), None),
        Err(err @ StreamError::Choices(_)) => CallOutcome::Permanent {
            reason: "invalid_choices",
            error: format!("agent {host}: {err}"),
        },
    }
}

fn retryable(reason: &'static str, error: String, retry_after: Option<Duration>) -> CallOutcome {
    CallOutcome::Retryable {
        reason,
        error,
        retry_after,
    }
}

/// Delta-seconds only (what agents and proxies send); an HTTP date counts as absent.
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let value = headers.get(reqwest::header::RETRY_AFTER)?.to_str().ok()?;
    value.trim().parse::<u64>().ok().map(Duration::from_secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_reads_delta_seconds_only() {
        let mut headers = HeaderMap::new();
        headers.insert("retry-after", "7".parse().unwrap());
        assert_eq!(retry_after(&headers), Some(Duration::from_secs(7)));
        headers.insert("retry-after", "Wed, 21 Oct 2015 07:28:00 GMT".parse().unwrap());
        assert_eq!(retry_after(&headers), None);
    }
}
