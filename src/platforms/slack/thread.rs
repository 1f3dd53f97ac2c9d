//! Reading one page of a turn's thread (`conversations.replies`) for a reply part's key:
//! the fallback of `super::reconcile`.

use std::time::Duration;

use reqwest::StatusCode;
use secrecy::ExposeSecret;
use serde_json::Value;

use super::inbound::REPLY_METADATA_EVENT_TYPE;
use super::send::{error_code, rate_limited, thread_ts};
use crate::db::messages::MessageRow;
use crate::domain::Connector;
use crate::egress::{self, GuardedClient as Client, SendError};
use crate::platforms::contract::api_base;
use crate::platforms::send::read_json;

/// `conversations.replies` errors a repeat cannot fix: the thread cannot be read at all.
const SLACK_READ_PERMANENT: &[&str] = &[
    "channel_not_found",
    "thread_not_found",
    "not_in_channel",
    "missing_scope",
    "not_authed",
    "invalid_auth",
    "token_revoked",
    "token_expired",
    "account_inactive",
    "not_allowed_token_type",
];

/// Most messages a page for apps outside the Slack Marketplace
/// (<https://docs.slack.dev/reference/methods/conversations.replies>).
pub const PAGE_LIMIT: &str = "15";

pub struct ThreadPageQuery<'a> {
    pub connector: &'a Connector,
    pub message: &'a MessageRow,
    pub part_key: &'a str,
    /// Slack `ts` form: only messages from then on (inclusive) are listed.
    pub oldest: &'a str,
    /// `response_metadata.next_cursor` of the page before.
    pub cursor: Option<&'a str>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ThreadPage {
    /// The page holds our part: its `ts`.
    Found(String),
    /// Not on this page; the cursor of the next one, if the thread has more.
    NotHere { next_cursor: Option<String> },
    /// 429 / `ratelimited`, with the platform's delay when it gave one.
    RateLimited(Option<Duration>),
    /// `invalid_cursor`: start from the first page.
    CursorInvalid,
    /// The thread cannot be read, and a repeat will not change that.
    Refused(String),
    /// Transport, 5xx, unreadable body: try again later.
    Failed(String),
}

/// One page, looking for our part key in each message's metadata (`include_all_metadata`).
pub async fn thread_page(client: &Client, query: &ThreadPageQuery<'_>) -> ThreadPage {
    let Some(token) = query.connector.secrets.outbound_token.as_ref() else {
        return ThreadPage::Refused("connector has no outbound token".into());
    };
    let message = query.message;
    let mut params = vec![
        ("channel", message.address.chat_id.as_str()),
        // A message that starts no thread has none to read: Slack answers an empty `ts`
        // with an error, and the part stays in doubt.
        ("ts", thread_ts(message).unwrap_or_default()),
        ("limit", PAGE_LIMIT),
        ("oldest", query.oldest),
        ("inclusive", "true"),
        ("include_all_metadata", "true"),
    ];
    params.extend(query.cursor.map(|cursor| ("cursor", cursor)));
    let request = client
        .get(format!("{}/api/conversations.replies", api_base(query.connector)))
        .bearer_auth(token.expose_secret())
        .query(&params);
    let response = client.send(request).await;
    match response {
        Ok(response) => {
            let (status, body, retry_after) = read_json(response).await;
            classify_thread_page(status, body, retry_after, query.part_key)
        }
        Err(SendError::Refused(_)) => ThreadPage::Refused(egress::PLATFORM_REFUSED.into()),
        Err(SendError::Transport(err)) => ThreadPage::Failed(err.without_url().to_string()),
    }
}

fn classify_thread_page(
    status: StatusCode,
    body: Option<Value>,
    retry_after: Option<Duration>,
    part_key: &str,
) -> ThreadPage {
    let error = error_code(body.as_ref());
    if rate_limited(status, &error) {
        return ThreadPage::RateLimited(retry_after);
    }
    let Some(body) = body.filter(|b| b["ok"] == true) else {
        return match error.as_str() {
            "invalid_cursor" => ThreadPage::CursorInvalid,
            "" => ThreadPage::Failed(format!("slack conversations.replies answered {status}")),
            error if SLACK_READ_PERMANENT.contains(&error) => {
                ThreadPage::Refused(format!("slack conversations.replies: {error}"))
            }
            error => ThreadPage::Failed(format!("slack conversations.replies: {error}")),
        };
    };
    let ours = |m: &&Value| {
        m.pointer("/metadata/event_type").and_then(Value::as_str) == Some(REPLY_METADATA_EVENT_TYPE)
            && m.pointer("/metadata/event_payload/part_key")
                .and_then(Value::as_str)
                == Some(part_key)
    };
    let messages = body["messages"].as_array().into_iter().flatten();
    if let Some(ts) = messages.filter(ours).find_map(|m| m["ts"].as_str()) {
        return ThreadPage::Found(ts.to_owned());
    }
    if body["has_more"] != true {
        return ThreadPage::NotHere { next_cursor: None };
    }
    // More pages, but no way to ask for them: not "absent".
    match body
        .pointer("/response_metadata/next_cursor")
        .and_then(Value::as_str)
    {
        Some(cursor) if !cursor.is_empty() => ThreadPage::NotHere {
            next_cursor: Some(cursor.to_owned()),
        },
        _ => ThreadPage::Failed("slack conversations.replies: has_more without a next_cursor".into()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn thread_pages_are_classified() {
        let key = "m:1";
        let ours = |key: &str, ts: &str| {
            json!({"type": "message", "ts": ts, "bot_id": "B1",
            "metadata": {"event_type": "channel_bridge_reply", "event_payload": {"part_key": key}}})
        };
        let page = |messages: Value, more: bool, cursor: &str| {
            Some(json!({"ok": true, "messages": messages, "has_more": more,
                        "response_metadata": {"next_cursor": cursor}}))
        };
        let found = page(json!([ours("m:0", "1.1"), ours(key, "1.2")]), true, "c2");
        assert_eq!(
            classify_thread_page(StatusCode::OK, found, None, key),
            ThreadPage::Found("1.2".into())
        );
        let more = page(json!([ours("m:0", "1.1")]), true, "c2");
        assert_eq!(
            classify_thread_page(StatusCode::OK, more, None, key),
            ThreadPage::NotHere {
                next_cursor: Some("c2".into())
            }
        );
        let last = page(json!([ours("m:0", "1.1")]), false, "");
        assert_eq!(
            classify_thread_page(StatusCode::OK, last, None, key),
            ThreadPage::NotHere { next_cursor: None }
        );
        let lost = page(json!([]), true, "");
        assert!(matches!(
            classify_thread_page(StatusCode::OK, lost, None, key),
            ThreadPage::Failed(_)
        ));
        let other_type =
            json!([{"ts": "1.3", "metadata": {"event_type": "task", "event_payload": {"part_key": key}}}]);
        assert_eq!(
            classify_thread_page(StatusCode::OK, page(other_type, false, ""), None, key),
            ThreadPage::NotHere { next_cursor: None }
        );
        let limited = classify_thread_page(
            StatusCode::TOO_MANY_REQUESTS,
            Some(json!({"ok": false, "error": "ratelimited"})),
            Some(Duration::from_secs(30)),
            key,
        );
        assert_eq!(limited, ThreadPage::RateLimited(Some(Duration::from_secs(30))));
        let scope = Some(json!({"ok": false, "error": "missing_scope"}));
        assert_eq!(
            classify_thread_page(StatusCode::OK, scope, None, key),
            ThreadPage::Refused("slack conversations.replies: missing_scope".into())
        );
        let internal = Some(json!({"ok": false, "error": "internal_error"}));
        assert!(matches!(
            classify_thread_page(StatusCode::OK, internal, None, key),
            ThreadPage::Failed(_)
        ));
        assert!(matches!(
            classify_thread_page(StatusCode::BAD_GATEWAY, None, None, key),
            ThreadPage::Failed(_)
        ));
    }
}
