//! A file part left in doubt, settled by reading the file's shares with `files.info`
//! (<https://docs.slack.dev/reference/methods/files.info>; `files:read`, Tier 4) before its
//! completion is ever repeated: no upload step takes an idempotency key.
//!
//! What a reader would get wrong: Slack shares a completed file asynchronously, so right
//! after an interrupted completion its share may not show yet, and completing it again
//! would post it twice. So a file not seen in its channel is resent only once the
//! confirmation window (`CB_SLACK_CONFIRM_SECS`, counted from the part's `sending` mark)
//! is over; within it the part waits. A share that takes longer than the window still
//! leaves that risk.

use std::time::Duration;

use chrono::Utc;
use reqwest::StatusCode;
use secrecy::ExposeSecret;
use serde_json::Value;

use super::send::{error_code, rate_limited};
use crate::db::parts::ReplyPart;
use crate::egress::{self, SendError};
use crate::platforms::contract::{api_base, Pending, Reconciled};
use crate::platforms::send::read_json;
use crate::retry::{part_backoff, window_left};
use crate::settings::DispatchSettings;

/// Longest wait inside the window before `files.info` is read again.
const WINDOW_RECHECK: Duration = Duration::from_secs(15);
const MIN_WAIT: Duration = Duration::from_millis(200);

const AWAITING_SHARE: &str = "file upload interrupted; waiting for Slack to show the file's share";

/// `files.info` refusals a repeat cannot fix: the shares cannot be read at all.
const INFO_PERMANENT: &[&str] = &[
    "missing_scope",
    "not_authed",
    "invalid_auth",
    "token_revoked",
    "token_expired",
    "account_inactive",
    "not_allowed_token_type",
    "file_deleted",
];

/// What `files.info` tells of the file in the part's channel.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    Shared,
    /// The file exists, shared elsewhere or nowhere.
    NotShared,
    /// `file_not_found`: never completed, or its upload expired.
    Unknown,
    RateLimited(Option<Duration>),
    /// The shares cannot be read, and a repeat will not change that.
    Refused(String),
    /// Transport, 5xx, another code: look again later.
    Failed(String),
}

/// Whether the file part in doubt was shared into its channel.
pub(super) async fn reconcile(pending: &Pending<'_>, part: &ReplyPart) -> anyhow::Result<Reconciled> {
    // Only a completion shows a file, and a completion needs the recorded id: an upload
    // never completed is aborted by Slack.
    let Some(file_id) = part.upload_ref.as_deref() else {
        return Ok(Reconciled::Absent);
    };
    let seen = read_shares(pending, file_id).await;
    metrics::counter!("channel_bridge_slack_file_reads_total", "result" => seen_result(&seen)).increment(1);
    let mark = part.sending_since.unwrap_or_else(Utc::now);
    let window = Duration::from_secs(pending.settings.slack_confirm_secs);
    let left = window_left(window, mark, Utc::now());
    Ok(settle(seen, file_id, left, pending.settings, part.attempts))
}

async fn read_shares(pending: &Pending<'_>, file_id: &str) -> Seen {
    let Some(token) = pending.connector.secrets.outbound_token.as_ref() else {
        return Seen::Refused("connector has no outbound token".into());
    };
    let request = pending
        .client
        .get(format!("{}/api/files.info", api_base(pending.connector)))
        .bearer_auth(token.expose_secret())
        .query(&[("file", file_id)]);
    match pending.client.send(request).await {
        Ok(response) => {
            let (status, body, retry_after) = read_json(response).await;
            classify_info(status, body, retry_after, &pending.message.address.chat_id)
        }
        Err(SendError::Refused(_)) => Seen::Refused(egress::PLATFORM_REFUSED.into()),
        Err(SendError::Transport(err)) => Seen::Failed(err.without_url().to_string()),
    }
}

fn classify_info(
    status: StatusCode,
    body: Option<Value>,
    retry_after: Option<Duration>,
    channel: &str,
) -> Seen {
    let code = error_code(body.as_ref());
    if rate_limited(status, &code) {
        return Seen::RateLimited(retry_after);
    }
    if status.is_server_error() {
        return Seen::Failed(format!("slack files.info answered {status}"));
    }
    match body {
        Some(body) if body["ok"] == true => match shared_in(&body["file"], channel) {
            true => Seen::Shared,
            false => Seen::NotShared,
        },
        Some(_) if code == "file_not_found" => Seen::Unknown,
        Some(_) if INFO_PERMANENT.contains(&code.as_str()) => {
            Seen::Refused(format!("slack files.info: {code}"))
        }
        Some(_) => Seen::Failed(format!("slack files.info: {code}")),
        None => Seen::Failed(format!("slack files.info answered {status} without JSON")),
    }
}

/// A share in `shares.public|private[channel]`, or `channel` among the ids the file object
/// lists it in (`channels`, `groups`, `ims`): either is proof enough.
fn shared_in(file: &Value, channel: &str) -> bool {
    let shares = ["public", "private"].iter().any(|kind| {
        file["shares"][kind][channel]
            .as_array()
            .is_some_and(|s| !s.is_empty())
    });
    let listed = ["channels", "groups", "ims"].iter().any(|list| {
        file[list]
            .as_array()
            .is_some_and(|ids| ids.iter().any(|id| id == channel))
    });
    shares || listed
}

/// `left`: what is left of the confirmation window, if any.
fn settle(
    seen: Seen,
    file_id: &str,
    left: Option<Duration>,
    settings: &DispatchSettings,
    attempts: i32,
) -> Reconciled {
    match seen {
        Seen::Shared => Reconciled::Found(file_id.to_owned()),
        Seen::NotShared | Seen::Unknown => match left {
            Some(left) => Reconciled::Later(left.min(WINDOW_RECHECK).max(MIN_WAIT), AWAITING_SHARE.into()),
            // Completed again with the recorded id, or, if Slack lost the upload, uploaded anew.
            None => Reconciled::Absent,
        },
        Seen::RateLimited(retry_after) => {
            let delay = retry_after
                .unwrap_or(Duration::from_secs(1))
                .min(Duration::from_millis(settings.retry_max_ms))
                .max(MIN_WAIT);
            Reconciled::Later(delay, "slack files.info: rate limited".into())
        }
        Seen::Refused(error) => Reconciled::Unknowable(format!(
            "file upload interrupted and its shares cannot be read ({error}); not resent"
        )),
        Seen::Failed(error) => Reconciled::Later(part_backoff(settings, attempts.max(1)), error),
    }
}

fn seen_result(seen: &Seen) -> &'static str {
    match seen {
        Seen::Shared => "shared",
        Seen::NotShared => "not_shared",
        Seen::Unknown => "file_not_found",
        Seen::RateLimited(_) => "rate_limited",
        Seen::Refused(_) => "refused",
        Seen::Failed(_) => "failed",
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn info(file: Value) -> Option<Value> {
        Some(json!({"ok": true, "file": file}))
    }

    #[test]
    fn a_share_in_the_parts_channel_is_found_and_nothing_else_is() {
        let classify = |body| classify_info(StatusCode::OK, body, None, "D1");
        let public = json!({"id": "F1", "shares": {"public": {"D1": [{"ts": "1.2"}]}}});
        assert_eq!(classify(info(public)), Seen::Shared);
        let private = json!({"id": "F1", "shares": {"private": {"D1": [{"ts": "1.2"}]}}});
        assert_eq!(classify(info(private)), Seen::Shared);
        assert_eq!(classify(info(json!({"id": "F1", "ims": ["D1"]}))), Seen::Shared);
        let elsewhere =
            json!({"id": "F1", "shares": {"public": {"C9": [{"ts": "1.2"}]}}, "channels": ["C9"]});
        assert_eq!(classify(info(elsewhere)), Seen::NotShared);
        assert_eq!(classify(info(json!({"id": "F1"}))), Seen::NotShared);
        let empty = json!({"id": "F1", "shares": {"public": {"D1": []}}});
        assert_eq!(classify(info(empty)), Seen::NotShared);
    }

    #[test]
    fn files_info_failures_are_classified() {
        let classify = |status, body| classify_info(status, body, Some(Duration::from_secs(9)), "D1");
        let refused = |code: &str| Some(json!({"ok": false, "error": code}));
        assert_eq!(classify(StatusCode::OK, refused("file_not_found")), Seen::Unknown);
        assert!(matches!(
            classify(StatusCode::OK, refused("missing_scope")),
            Seen::Refused(_)
        ));
        assert!(matches!(
            classify(StatusCode::OK, refused("file_deleted")),
            Seen::Refused(_)
        ));
        assert!(matches!(
            classify(StatusCode::OK, refused("internal_error")),
            Seen::Failed(_)
        ));
        assert_eq!(
            classify(StatusCode::TOO_MANY_REQUESTS, None),
            Seen::RateLimited(Some(Duration::from_secs(9)))
        );
        assert!(matches!(classify(StatusCode::BAD_GATEWAY, None), Seen::Failed(_)));
        assert!(matches!(classify(StatusCode::OK, None), Seen::Failed(_)));
    }

    #[test]
    fn a_file_not_seen_waits_out_the_window_before_it_is_completed_again() {
        let settings = DispatchSettings::default();
        let left = Some(Duration::from_secs(40));
        let settled = |seen, left| settle(seen, "F1", left, &settings, 1);
        assert!(matches!(settled(Seen::Shared, left), Reconciled::Found(id) if id == "F1"));
        for seen in [Seen::NotShared, Seen::Unknown] {
            let waits = settled(seen.clone(), left);
            assert!(
                matches!(waits, Reconciled::Later(delay, _) if delay == WINDOW_RECHECK),
                "{seen:?}"
            );
            assert!(matches!(settled(seen, None), Reconciled::Absent));
        }
        let limited = settled(Seen::RateLimited(Some(Duration::from_secs(30))), None);
        assert!(matches!(limited, Reconciled::Later(delay, _) if delay == Duration::from_secs(30)));
        assert!(matches!(
            settled(Seen::Refused("x".into()), None),
            Reconciled::Unknowable(_)
        ));
        assert!(matches!(
            settled(Seen::Failed("x".into()), left),
            Reconciled::Later(..)
        ));
    }
}
