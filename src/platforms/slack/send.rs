//! Posting a reply part to Slack (<https://docs.slack.dev/reference/methods/chat.postMessage>),
//! and adopting a live view's message (`chat.stopStream` + `chat.update`).

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};

use super::inbound::REPLY_METADATA_EVENT_TYPE;
use super::Slack;
use crate::choices::Offered;
use crate::db::messages::MessageRow;
use crate::egress::{self, GuardedClient as Client};
use crate::platforms::contract::api_base;
use crate::platforms::send::{read_json, transport_error, OutboundPart, SendOutcome};

/// Slack's control characters; escaping them keeps agent text from forming `<@U…>` mentions
/// or `<!channel>` pings.
pub fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Slack errors that a repeat cannot fix.
const SLACK_PERMANENT: &[&str] = &[
    "channel_not_found",
    "not_in_channel",
    "is_archived",
    "invalid_auth",
    "not_authed",
    "token_revoked",
    "token_expired",
    "account_inactive",
    "missing_scope",
    "msg_too_long",
    "no_text",
    "restricted_action",
    "restricted_action_thread_only_channel",
    "invalid_arguments",
    "cannot_reply_to_message",
];

/// Replies go under the thread's parent: `thread_ts` if the user wrote in a thread, else
/// the user's own message starts one (`thread_ts` takes a parent's ts, never a reply's); a
/// message the agent writes first starts none.
pub fn thread_ts(message: &MessageRow) -> Option<&str> {
    message.address.thread_id.as_deref().or(message.reply_target())
}

pub(super) async fn post(client: &Client, part: &OutboundPart<'_>, token: &str) -> SendOutcome {
    // Rendered mrkdwn is escaped by its renderer; plain text is escaped here.
    let text = match part.formatted(&Slack) {
        Some(formatted) => formatted.text,
        None => escape(part.text),
    };
    let mut body = json!({
        "channel": part.message.address.chat_id,
        "text": text,
        "metadata": {
            "event_type": REPLY_METADATA_EVENT_TYPE,
            "event_payload": { "part_key": part.part_key },
        },
    });
    if let Some(thread) = thread_ts(part.message) {
        body["thread_ts"] = thread.into();
    }
    if let Some(offered) = part.choices {
        body["blocks"] = blocks(offered, &text);
    }
    let request = client
        .post(format!("{}/api/chat.postMessage", api_base(part.connector)))
        .bearer_auth(token)
        .json(&body);
    let response = client.send(request).await;
    let (status, body, retry_after) = match response {
        Ok(response) => read_json(response).await,
        Err(err) => return transport_error(err),
    };
    classify(status, body, retry_after)
}

/// The answer's Slack error code; only a well-formed one is kept: the base URL may be the
/// tenant's.
pub(super) fn error_code(body: Option<&Value>) -> String {
    body.and_then(|b| b["error"].as_str())
        .map_or("", egress::slack_code)
        .to_owned()
}

/// A 429, or either spelling of the error in Slack's docs: `ratelimited` in the rate-limit
/// guide, `rate_limited` in the methods' error lists.
pub(super) fn rate_limited(status: StatusCode, error: &str) -> bool {
    status == StatusCode::TOO_MANY_REQUESTS || error == "ratelimited" || error == "rate_limited"
}

pub(super) fn classify(
    status: StatusCode,
    body: Option<Value>,
    retry_after: Option<Duration>,
) -> SendOutcome {
    let error = error_code(body.as_ref());
    if rate_limited(status, &error) {
        let retry_after = retry_after.unwrap_or(Duration::from_secs(1));
        return SendOutcome::RateLimited {
            retry_after,
            error: format!("slack {status}: rate limited"),
        };
    }
    if status.is_server_error() {
        return SendOutcome::Unknown {
            error: format!("slack answered {status}"),
        };
    }
    match body {
        Some(body) if body["ok"] == true => match body["ts"].as_str() {
            Some(ts) => SendOutcome::Sent(ts.to_owned()),
            None => SendOutcome::Unknown {
                error: "slack ok without ts".into(),
            },
        },
        Some(_) if SLACK_PERMANENT.contains(&error.as_str()) => SendOutcome::Permanent {
            error: format!("slack: {error}"),
        },
        // internal_error, fatal_error, request_timeout…: "some aspect may have succeeded".
        Some(_) => SendOutcome::Unknown {
            error: format!("slack: {error}"),
        },
        None => SendOutcome::Unknown {
            error: format!("slack answered {status} without JSON"),
        },
    }
}

/// Why a Slack method did not answer `ok: true`.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Refusal {
    /// Settled already: rate limited, or refused for good.
    Settled(SendOutcome),
    /// A code a repeat may get past (`internal_error`, `fatal_error`…): maybe done.
    Code { code: String, error: String },
    /// 5xx or no JSON: maybe done.
    Unclear(String),
}

impl Refusal {
    /// As a request that may have had its effect.
    pub(super) fn outcome(self) -> SendOutcome {
        match self {
            Refusal::Settled(outcome) => outcome,
            Refusal::Code { error, .. } | Refusal::Unclear(error) => SendOutcome::Unknown { error },
        }
    }
}

impl From<Refusal> for SendOutcome {
    fn from(refusal: Refusal) -> Self {
        refusal.outcome()
    }
}

/// A Slack answer's body when `ok`; otherwise why not, the error named after `method`
/// (`slack files.completeUploadExternal: not_in_channel`). `permanent`: the method's own
/// refusals that a repeat cannot fix, beyond `SLACK_PERMANENT`.
pub(super) fn ok_body(
    method: &str,
    permanent: &[&str],
    status: StatusCode,
    body: Option<Value>,
    retry_after: Option<Duration>,
) -> Result<Value, Refusal> {
    let code = error_code(body.as_ref());
    if rate_limited(status, &code) {
        return Err(Refusal::Settled(SendOutcome::RateLimited {
            retry_after: retry_after.unwrap_or(Duration::from_secs(1)),
            error: format!("slack {method}: rate limited"),
        }));
    }
    if status.is_server_error() {
        return Err(Refusal::Unclear(format!("slack {method} answered {status}")));
    }
    match body {
        Some(body) if body["ok"] == true => Ok(body),
        Some(_) if SLACK_PERMANENT.contains(&code.as_str()) || permanent.contains(&code.as_str()) => {
            Err(Refusal::Settled(SendOutcome::Permanent {
                error: format!("slack {method}: {code}"),
            }))
        }
        Some(_) if code.is_empty() => Err(Refusal::Unclear(format!("slack {method} answered {status}"))),
        Some(_) => Err(Refusal::Code {
            error: format!("slack {method}: {code}"),
            code,
        }),
        None => Err(Refusal::Unclear(format!(
            "slack {method} answered {status} without JSON"
        ))),
    }
}

/// Slack errors of `chat.update` that mean the adopted message is no longer there to edit.
const SLACK_MESSAGE_GONE: &[&str] = &["message_not_found", "cant_update_message", "edit_window_closed"];

pub(super) async fn adopt(client: &Client, part: &OutboundPart<'_>, token: &str, ts: &str) -> SendOutcome {
    let base = api_base(part.connector);
    let channel = &part.message.address.chat_id;
    // Its refusals (already stopped before a crash, or by Slack) do not matter: the update
    // below sets the final text either way.
    let stop = client
        .post(format!("{base}/api/chat.stopStream"))
        .bearer_auth(token)
        .json(&json!({ "channel": channel, "ts": ts }));
    match client.send(stop).await {
        Ok(response) => {
            let (status, body, retry_after) = read_json(response).await;
            if let outcome @ SendOutcome::RateLimited { .. } = classify(status, body, retry_after) {
                return outcome;
            }
        }
        Err(err) => return transport_error(err),
    }
    let text = match part.formatted(&Slack) {
        Some(formatted) => formatted.text,
        None => escape(part.text),
    };
    // `blocks: []` drops the stream's markdown block, so the message shows the part exactly
    // as a posted part would (with its buttons, if it offers choices).
    let blocks = part.choices.map_or(json!([]), |offered| blocks(offered, &text));
    let body = json!({
        "channel": channel,
        "ts": ts,
        "text": text,
        "blocks": blocks,
        "metadata": {
            "event_type": REPLY_METADATA_EVENT_TYPE,
            "event_payload": { "part_key": part.part_key },
        },
    });
    let request = client
        .post(format!("{base}/api/chat.update"))
        .bearer_auth(token)
        .json(&body);
    let (status, body, retry_after) = match client.send(request).await {
        Ok(response) => read_json(response).await,
        Err(err) => return transport_error(err),
    };
    let gone = body
        .as_ref()
        .and_then(|b| b["error"].as_str())
        .is_some_and(|e| SLACK_MESSAGE_GONE.contains(&e));
    if gone {
        return post(client, part, token).await;
    }
    match classify(status, body, retry_after) {
        // chat.update answers with the message's ts; it is the adopted one.
        SendOutcome::Sent(_) => SendOutcome::Sent(ts.to_owned()),
        other => other,
    }
}

/// A section's text (docs.slack.dev/reference/block-kit/blocks/section-block).
/// (docs.slack.dev/reference/block-kit/blocks/actions-block for the buttons.)
pub(super) const SECTION_TEXT_CHARS: usize = 3000;

/// The text as a section, then the buttons; `text` stays the notification's fallback.
pub(super) fn blocks(offered: &Offered, mrkdwn: &str) -> Value {
    let buttons: Vec<Value> = offered
        .choices
        .items
        .iter()
        .enumerate()
        .map(|(index, choice)| {
            let id = offered.button(index).to_string();
            let mut button = json!({
                "type": "button",
                "action_id": id,
                "text": { "type": "plain_text", "text": choice.label.trim() },
            });
            match &choice.url {
                Some(url) => button["url"] = url.as_str().into(),
                None => button["value"] = id.into(),
            }
            if let Some(style) = choice.style {
                button["style"] = style.as_str().into();
            }
            button
        })
        .collect();
    json!([
        { "type": "section", "text": { "type": "mrkdwn", "text": mrkdwn } },
        { "type": "actions", "block_id": offered.token.as_str(), "elements": buttons },
    ])
}

/// The message `target` again, its buttons replaced by the choice made and who made it
/// (`chat.update`, docs.slack.dev/reference/methods/chat.update, with new blocks: an update
/// without `blocks` would keep the buttons). A message gone, or no longer this app's to
/// edit, leaves nothing to do.
pub(super) async fn close(
    client: &Client,
    part: &OutboundPart<'_>,
    token: &str,
    target: &str,
) -> SendOutcome {
    let text = match part.formatted(&Slack) {
        Some(formatted) => formatted.text,
        None => escape(part.text),
    };
    let mut blocks = vec![json!({ "type": "section", "text": { "type": "mrkdwn", "text": text } })];
    if let (Some(offered), Some(chosen)) = (part.choices, part.chosen) {
        let label = offered
            .choices
            .items
            .get(chosen.index)
            .map_or("", |c| c.label.trim());
        let note = format!("✓ {} — chosen by <@{}>", escape(label), escape(&chosen.by));
        blocks.push(json!({ "type": "context", "elements": [{ "type": "mrkdwn", "text": note }] }));
    }
    let body =
        json!({ "channel": part.message.address.chat_id, "ts": target, "text": text, "blocks": blocks });
    let request = client
        .post(format!("{}/api/chat.update", api_base(part.connector)))
        .bearer_auth(token)
        .json(&body);
    let (status, body, retry_after) = match client.send(request).await {
        Ok(response) => read_json(response).await,
        Err(err) => return transport_error(err),
    };
    let error = error_code(body.as_ref());
    if ["message_not_found", "cant_update_message", "edit_window_closed"].contains(&error.as_str()) {
        tracing::info!(
            error,
            "slack kept the buttons of a closed choice; nothing more to do"
        );
        return SendOutcome::Sent(target.to_owned());
    }
    match classify(status, body, retry_after) {
        SendOutcome::Sent(_) => SendOutcome::Sent(target.to_owned()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slack_escapes_only_its_three_control_characters() {
        assert_eq!(
            escape("a < b && c > d <@U123> *bold*"),
            "a &lt; b &amp;&amp; c &gt; d &lt;@U123&gt; *bold*"
        );
    }

    #[test]
    fn slack_answers_are_classified() {
        let ok = json!({"ok": true, "channel": "C1", "ts": "1.2"});
        assert_eq!(
            classify(StatusCode::OK, Some(ok), None),
            SendOutcome::Sent("1.2".into())
        );
        let limited = classify(StatusCode::TOO_MANY_REQUESTS, None, Some(Duration::from_secs(30)));
        assert!(
            matches!(limited, SendOutcome::RateLimited { retry_after, .. } if retry_after == Duration::from_secs(30))
        );
        let spelled = classify(
            StatusCode::OK,
            Some(json!({"ok": false, "error": "ratelimited"})),
            None,
        );
        assert!(matches!(spelled, SendOutcome::RateLimited { .. }));
        let gone = classify(
            StatusCode::OK,
            Some(json!({"ok": false, "error": "channel_not_found"})),
            None,
        );
        assert_eq!(
            gone,
            SendOutcome::Permanent {
                error: "slack: channel_not_found".into()
            }
        );
        let doubt = classify(
            StatusCode::OK,
            Some(json!({"ok": false, "error": "internal_error"})),
            None,
        );
        assert!(matches!(doubt, SendOutcome::Unknown { .. }));
        assert!(matches!(
            classify(StatusCode::BAD_GATEWAY, None, None),
            SendOutcome::Unknown { .. }
        ));
    }
}
