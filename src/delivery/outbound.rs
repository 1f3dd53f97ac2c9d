//! The three platforms' send APIs (PLATFORMS.md §1.6, §2.6, §3.6), each answer classified
//! so the delivery loop knows whether the part was posted, refused, or is in doubt; and the
//! one page of a Slack thread that reconciling an interrupted send reads (`super::slack`).
//!
//! A part is stored as the agent wrote it and formatted here, when it is sent, if its
//! connector formats Markdown (`crate::markdown`); a Telegram part refused as formatted is
//! sent again at once as plain text (a 400 means it was not posted), so a formatting mistake
//! never costs a reply.
//!
//! One shared client with timeouts and no retries of its own: a send whose outcome is
//! unknown must be reconciled, never blindly repeated by a library underneath.

use std::time::Duration;

use reqwest::StatusCode;
use secrecy::ExposeSecret;
use serde_json::{json, Value};

use crate::db::messages::MessageRow;
use crate::domain::{Connector, Platform};
use crate::egress::{self, GuardedClient as Client, SendError};

/// Meta Graph API version the WhatsApp send is pinned to.
pub const GRAPH_VERSION: &str = "v25.0";

/// The outcome of one send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SendOutcome {
    /// Posted; the platform's id of the new message.
    Sent(String),
    /// Refused for now, certainly not posted; try again after the platform's delay.
    RateLimited { retry_after: Duration, error: String },
    /// Certainly not posted (no connection); try again later.
    NotSent { error: String },
    /// Maybe posted (timeout, 5xx, the platform's own "internal error"): reconcile first.
    Unknown { error: String },
    /// Refused for good: `<platform code>: <message>`.
    Permanent { error: String },
}

/// One part to post, with everything needed to thread it.
pub struct OutboundPart<'a> {
    pub connector: &'a Connector,
    pub message: &'a MessageRow,
    /// `{message_id}:{part_index}`: sent along where the platform keeps it (Slack message
    /// metadata, WhatsApp `biz_opaque_callback_data`) so an interrupted send can be found.
    pub part_key: &'a str,
    pub text: &'a str,
}

impl OutboundPart<'_> {
    /// The part in its platform's formatting, when its connector formats Markdown.
    fn formatted(&self) -> Option<crate::markdown::Formatted> {
        self.connector
            .format_markdown
            .then(|| crate::markdown::format(self.connector.platform, self.text))
            .flatten()
    }
}

pub async fn send(client: &Client, part: &OutboundPart<'_>) -> SendOutcome {
    let Some(token) = part.connector.outbound_token.as_ref() else {
        return SendOutcome::Permanent {
            error: "connector has no outbound token".into(),
        };
    };
    let token = token.expose_secret();
    match part.connector.platform {
        Platform::Slack => slack_post(client, part, token).await,
        Platform::Telegram => telegram_send(client, part, token).await,
        Platform::Whatsapp => whatsapp_send(client, part, token).await,
    }
}

/// The first part of a streamed answer, delivered into the message its live view left on
/// the platform (`live_id`, `super::live`) instead of a new one: Slack ends the stream
/// (`chat.stopStream`) and puts the part's final text in it (`chat.update`); Telegram edits
/// it (`editMessageText`). Both are edits, so a repeat after an outcome in doubt cannot
/// double the message. When the message is gone (deleted meanwhile), the part is posted as
/// usual.
pub async fn adopt(client: &Client, part: &OutboundPart<'_>, live_id: &str) -> SendOutcome {
    let Some(token) = part.connector.outbound_token.as_ref() else {
        return SendOutcome::Permanent {
            error: "connector has no outbound token".into(),
        };
    };
    let token = token.expose_secret();
    match part.connector.platform {
        Platform::Slack => slack_adopt(client, part, token, live_id).await,
        Platform::Telegram => telegram_adopt(client, part, token, live_id).await,
        Platform::Whatsapp => whatsapp_send(client, part, token).await,
    }
}

pub(crate) fn base_url(connector: &Connector) -> &str {
    let default = match connector.platform {
        Platform::Slack => "https://slack.com",
        Platform::Telegram => "https://api.telegram.org",
        Platform::Whatsapp => "https://graph.facebook.com",
    };
    connector
        .api_base_url
        .as_deref()
        .unwrap_or(default)
        .trim_end_matches('/')
}

/// A transport error: a refused connection certainly posted nothing; anything after the
/// request left (timeout, reset) may have. reqwest's error text loses the URL, which can
/// hold a Telegram token. A URL the egress policy refuses fails the part for good: nothing
/// was sent, and a retry would be refused the same way.
fn transport_error(err: SendError) -> SendOutcome {
    let err = match err {
        SendError::Refused(_) => {
            return SendOutcome::Permanent {
                error: egress::PLATFORM_REFUSED.into(),
            }
        }
        SendError::Transport(err) => err,
    };
    let connect = err.is_connect();
    let error = err.without_url().to_string();
    if connect {
        SendOutcome::NotSent { error }
    } else {
        SendOutcome::Unknown { error }
    }
}

async fn read_json(response: reqwest::Response) -> (StatusCode, Option<Value>, Option<Duration>) {
    let status = response.status();
    let retry_after = response
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Duration::from_secs);
    let body = response.json::<Value>().await.ok();
    (status, body, retry_after)
}

// --- Slack -----------------------------------------------------------------------------

/// Slack's control characters; nothing else is escaped (Slack formatting reference). This
/// also keeps agent text from forming `<@U…>` mentions or `<!channel>` pings.
pub fn slack_escape(text: &str) -> String {
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
/// the user's own message starts one (PLATFORMS.md §1.6).
pub fn slack_thread_ts(message: &MessageRow) -> &str {
    message
        .thread_id
        .as_deref()
        .unwrap_or(&message.platform_message_id)
}

async fn slack_post(client: &Client, part: &OutboundPart<'_>, token: &str) -> SendOutcome {
    // Rendered mrkdwn is escaped by its renderer; plain text is escaped here.
    let text = match part.formatted() {
        Some(formatted) => formatted.text,
        None => slack_escape(part.text),
    };
    let body = json!({
        "channel": part.message.chat_id,
        "text": text,
        "thread_ts": slack_thread_ts(part.message),
        "metadata": {
            "event_type": crate::channels::slack::REPLY_METADATA_EVENT_TYPE,
            "event_payload": { "part_key": part.part_key },
        },
    });
    let request = client
        .post(format!("{}/api/chat.postMessage", base_url(part.connector)))
        .bearer_auth(token)
        .json(&body);
    let response = client.send(request).await;
    let (status, body, retry_after) = match response {
        Ok(response) => read_json(response).await,
        Err(err) => return transport_error(err),
    };
    classify_slack(status, body, retry_after)
}

fn classify_slack(status: StatusCode, body: Option<Value>, retry_after: Option<Duration>) -> SendOutcome {
    // Only a well-formed Slack error code is kept: the base URL may be the tenant's.
    let error = body
        .as_ref()
        .and_then(|b| b["error"].as_str())
        .map_or("", egress::slack_code)
        .to_owned();
    // Both spellings exist in Slack's docs (PLATFORMS.md §5.10).
    if status == StatusCode::TOO_MANY_REQUESTS || error == "ratelimited" || error == "rate_limited" {
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

/// Slack errors of `chat.update` that mean the adopted message is no longer there to edit.
const SLACK_MESSAGE_GONE: &[&str] = &["message_not_found", "cant_update_message", "edit_window_closed"];

async fn slack_adopt(client: &Client, part: &OutboundPart<'_>, token: &str, ts: &str) -> SendOutcome {
    let base = base_url(part.connector);
    let channel = &part.message.chat_id;
    // Ends the stream if it still runs. Its own refusals (already stopped, e.g. by the
    // holder before a crash, or by Slack after a while) do not matter: the update below
    // sets the final text either way.
    let stop = client
        .post(format!("{base}/api/chat.stopStream"))
        .bearer_auth(token)
        .json(&json!({ "channel": channel, "ts": ts }));
    match client.send(stop).await {
        Ok(response) => {
            let (status, body, retry_after) = read_json(response).await;
            if let outcome @ SendOutcome::RateLimited { .. } = classify_slack(status, body, retry_after) {
                return outcome;
            }
        }
        Err(err) => return transport_error(err),
    }
    let text = match part.formatted() {
        Some(formatted) => formatted.text,
        None => slack_escape(part.text),
    };
    // `blocks: []` drops the stream's markdown block, so the message shows the part exactly
    // as a posted part would.
    let body = json!({
        "channel": channel,
        "ts": ts,
        "text": text,
        "blocks": [],
        "metadata": {
            "event_type": crate::channels::slack::REPLY_METADATA_EVENT_TYPE,
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
        return slack_post(client, part, token).await;
    }
    match classify_slack(status, body, retry_after) {
        // chat.update answers with the message's ts; it is the adopted one.
        SendOutcome::Sent(_) => SendOutcome::Sent(ts.to_owned()),
        other => other,
    }
}

/// Slack errors of `conversations.replies` that a repeat cannot fix: the thread cannot be
/// read at all (scope, token, channel or thread gone).
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

/// Most messages per `conversations.replies` page for apps outside the Slack Marketplace
/// (PLATFORMS.md §6).
pub const SLACK_PAGE_LIMIT: &str = "15";

/// One page of a thread to look through for a part key.
pub struct ThreadPageQuery<'a> {
    pub connector: &'a Connector,
    pub message: &'a MessageRow,
    pub part_key: &'a str,
    /// Slack `ts` form: only messages from then on (inclusive) are listed.
    pub oldest: &'a str,
    /// The page after the first: `response_metadata.next_cursor` of the page before.
    pub cursor: Option<&'a str>,
}

/// What reading one page of a thread came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ThreadPage {
    /// The page holds our part: its `ts`.
    Found(String),
    /// Not on this page; the cursor of the next one, if the thread has more.
    NotHere { next_cursor: Option<String> },
    /// 429 / `ratelimited`: not before the platform's delay (when it gave one).
    RateLimited(Option<Duration>),
    /// Slack no longer accepts the cursor (`invalid_cursor`): start from the first page.
    CursorInvalid,
    /// The thread cannot be read, and a repeat will not change that.
    Refused(String),
    /// No usable answer this time (transport, 5xx, unreadable body): try again later.
    Failed(String),
}

/// Reads one page of the thread `query.message` was answered in, looking for our part key
/// in each message's metadata (`include_all_metadata`), 15 messages a page from `oldest` on.
pub async fn slack_thread_page(client: &Client, query: &ThreadPageQuery<'_>) -> ThreadPage {
    let Some(token) = query.connector.outbound_token.as_ref() else {
        return ThreadPage::Refused("connector has no outbound token".into());
    };
    let message = query.message;
    let mut params = vec![
        ("channel", message.chat_id.as_str()),
        ("ts", slack_thread_ts(message)),
        ("limit", SLACK_PAGE_LIMIT),
        ("oldest", query.oldest),
        ("inclusive", "true"),
        ("include_all_metadata", "true"),
    ];
    params.extend(query.cursor.map(|cursor| ("cursor", cursor)));
    let request = client
        .get(format!("{}/api/conversations.replies", base_url(query.connector)))
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
    // Only a well-formed Slack error code is kept: the base URL may be the tenant's.
    let error = body
        .as_ref()
        .and_then(|b| b["error"].as_str())
        .map_or("", egress::slack_code)
        .to_owned();
    if status == StatusCode::TOO_MANY_REQUESTS || error == "ratelimited" || error == "rate_limited" {
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
        m.pointer("/metadata/event_type").and_then(Value::as_str)
            == Some(crate::channels::slack::REPLY_METADATA_EVENT_TYPE)
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

// --- Telegram --------------------------------------------------------------------------

/// Telegram chat and message ids are integers; the JSON must carry numbers.
pub(super) fn telegram_int(value: &str) -> Value {
    value
        .parse::<i64>()
        .map_or_else(|_| Value::String(value.to_owned()), Value::from)
}

async fn telegram_send(client: &Client, part: &OutboundPart<'_>, token: &str) -> SendOutcome {
    let Some(formatted) = part.formatted() else {
        return telegram_post(client, part, token, part.text, None).await.1;
    };
    let (status, outcome) = telegram_post(client, part, token, &formatted.text, formatted.parse_mode).await;
    if status != Some(StatusCode::BAD_REQUEST) {
        return outcome;
    }
    // "can't parse entities" or the like: certainly not posted, so sending the same part as
    // plain text cannot double it.
    // Only the status: Telegram's description may quote the text, which is never logged.
    tracing::warn!("telegram refused a formatted part (400); sending it as plain text");
    telegram_post(client, part, token, part.text, None).await.1
}

/// One `sendMessage`: without `parse_mode`, `text` is plain, so nothing needs escaping and
/// nothing in it can turn into markup or a mention. The answer's status comes with the
/// outcome (none when no answer came).
async fn telegram_post(
    client: &Client,
    part: &OutboundPart<'_>,
    token: &str,
    text: &str,
    parse_mode: Option<&str>,
) -> (Option<StatusCode>, SendOutcome) {
    let message = part.message;
    let mut body = json!({
        "chat_id": telegram_int(&message.chat_id),
        "text": text,
        "reply_parameters": {
            "message_id": telegram_int(&message.platform_message_id),
            "allow_sending_without_reply": true,
        },
        "link_preview_options": { "is_disabled": true },
    });
    if let Some(topic) = &message.thread_id {
        body["message_thread_id"] = telegram_int(topic);
    }
    if let Some(mode) = parse_mode {
        body["parse_mode"] = mode.into();
    }
    let request = client
        .post(format!("{}/bot{token}/sendMessage", base_url(part.connector)))
        .json(&body);
    let response = client.send(request).await;
    match response {
        Ok(response) => {
            let (status, body, _) = read_json(response).await;
            (Some(status), classify_telegram(status, body))
        }
        Err(err) => (None, transport_error(err)),
    }
}

/// The adopted message edited to the part's final text (formatted, then plain when the
/// formatting is refused). "message is not modified" means it already shows it (an edit
/// repeated after a crash); "message to edit not found" that it is gone: posted anew.
async fn telegram_adopt(client: &Client, part: &OutboundPart<'_>, token: &str, id: &str) -> SendOutcome {
    let formatted = part.formatted();
    let first = formatted
        .as_ref()
        .map_or((part.text, None), |f| (f.text.as_str(), f.parse_mode));
    let mut answer = telegram_edit(client, part, token, id, first.0, first.1).await;
    if first.1.is_some()
        && matches!(&answer, Edited::Refused(400, d) if !d.contains("not modified") && !d.contains("not found"))
    {
        tracing::warn!("telegram refused a formatted edit (400); editing as plain text");
        answer = telegram_edit(client, part, token, id, part.text, None).await;
    }
    match answer {
        Edited::Outcome(outcome) => outcome,
        Edited::Refused(400, description) if description.contains("message is not modified") => {
            SendOutcome::Sent(id.to_owned())
        }
        Edited::Refused(400, description) if description.contains("message to edit not found") => {
            telegram_send(client, part, token).await
        }
        Edited::Refused(status, description) => SendOutcome::Permanent {
            error: format!("telegram {status}: {}", egress::short_reason(&description)),
        },
    }
}

enum Edited {
    Outcome(SendOutcome),
    /// A 400 (status and Telegram's description, for the caller to tell apart).
    Refused(u16, String),
}

async fn telegram_edit(
    client: &Client,
    part: &OutboundPart<'_>,
    token: &str,
    id: &str,
    text: &str,
    parse_mode: Option<&str>,
) -> Edited {
    let mut body = json!({
        "chat_id": telegram_int(&part.message.chat_id),
        "message_id": telegram_int(id),
        "text": text,
        "link_preview_options": { "is_disabled": true },
    });
    if let Some(mode) = parse_mode {
        body["parse_mode"] = mode.into();
    }
    let request = client
        .post(format!("{}/bot{token}/editMessageText", base_url(part.connector)))
        .json(&body);
    let (status, body) = match client.send(request).await {
        Ok(response) => {
            let (status, body, _) = read_json(response).await;
            (status, body)
        }
        Err(err) => return Edited::Outcome(transport_error(err)),
    };
    if status == StatusCode::BAD_REQUEST {
        let description = body
            .as_ref()
            .and_then(|b| b["description"].as_str())
            .unwrap_or_default()
            .to_owned();
        return Edited::Refused(400, description);
    }
    match classify_telegram(status, body) {
        SendOutcome::Sent(_) => Edited::Outcome(SendOutcome::Sent(id.to_owned())),
        other => Edited::Outcome(other),
    }
}

fn classify_telegram(status: StatusCode, body: Option<Value>) -> SendOutcome {
    // Shortened and cleaned: the base URL may be the tenant's, and its answer is not trusted.
    let description = body
        .as_ref()
        .and_then(|b| b["description"].as_str())
        .map(egress::short_reason)
        .unwrap_or_default();
    let error = format!("telegram {}: {description}", status.as_u16());
    if let Some(id) = body
        .as_ref()
        .filter(|b| b["ok"] == true)
        .and_then(|b| b.pointer("/result/message_id"))
    {
        return SendOutcome::Sent(id.to_string());
    }
    match status.as_u16() {
        429 => {
            let secs = body
                .as_ref()
                .and_then(|b| b.pointer("/parameters/retry_after"))
                .and_then(Value::as_u64);
            SendOutcome::RateLimited {
                retry_after: Duration::from_secs(secs.unwrap_or(1)),
                error,
            }
        }
        // 403: blocked by the user or kicked from the chat; 400/401/404: a request that
        // will never succeed as it is.
        400..=499 => SendOutcome::Permanent { error },
        _ => SendOutcome::Unknown { error },
    }
}

// --- WhatsApp --------------------------------------------------------------------------

/// Meta error codes that mean "slow down" (PLATFORMS.md §2.6): throughput 130429, pair
/// rate 131056 (one message per 6 s to the same user), app/WABA limits 4 and 80007.
pub(super) fn whatsapp_rate_limit(code: i64) -> Option<Duration> {
    match code {
        131056 => Some(Duration::from_secs(6)),
        130429 | 4 | 80007 => Some(Duration::from_secs(2)),
        _ => None,
    }
}

async fn whatsapp_send(client: &Client, part: &OutboundPart<'_>, token: &str) -> SendOutcome {
    let message = part.message;
    let phone_number_id = message.metadata["phone_number_id"]
        .as_str()
        .or(part.connector.external_id.as_deref());
    let Some(phone_number_id) = phone_number_id else {
        return SendOutcome::Permanent {
            error: "connector has no phone_number_id (external id)".into(),
        };
    };
    let formatted = part.formatted();
    let text = formatted.as_ref().map_or(part.text, |f| f.text.as_str());
    let body = json!({
        "messaging_product": "whatsapp",
        "recipient_type": "individual",
        "to": format!("+{}", message.chat_id.trim_start_matches('+')),
        "type": "text",
        "context": { "message_id": message.platform_message_id },
        "text": { "preview_url": false, "body": text },
        "biz_opaque_callback_data": part.part_key,
    });
    let request = client
        .post(format!(
            "{}/{GRAPH_VERSION}/{phone_number_id}/messages",
            base_url(part.connector)
        ))
        .bearer_auth(token)
        .json(&body);
    let response = client.send(request).await;
    match response {
        Ok(response) => {
            let (status, body, _) = read_json(response).await;
            classify_whatsapp(status, body)
        }
        Err(err) => transport_error(err),
    }
}

fn classify_whatsapp(status: StatusCode, body: Option<Value>) -> SendOutcome {
    if let Some(id) = body
        .as_ref()
        .and_then(|b| b.pointer("/messages/0/id"))
        .and_then(Value::as_str)
    {
        return SendOutcome::Sent(id.to_owned());
    }
    let code = body
        .as_ref()
        .and_then(|b| b.pointer("/error/code"))
        .and_then(Value::as_i64);
    let text = body
        .as_ref()
        .and_then(|b| b.pointer("/error/message"))
        .and_then(Value::as_str)
        .map(egress::short_reason)
        .unwrap_or_default();
    // The HTTP status varies: match on error.code (PLATFORMS.md §2.6).
    match code {
        Some(code) => {
            let error = format!("whatsapp {code}: {text}");
            match whatsapp_rate_limit(code) {
                Some(retry_after) => SendOutcome::RateLimited { retry_after, error },
                None if status.is_server_error() || code == 1 || code == 2 => SendOutcome::Unknown { error },
                None => SendOutcome::Permanent { error },
            }
        }
        None => SendOutcome::Unknown {
            error: format!("whatsapp answered {status} without an error code"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slack_escapes_only_its_three_control_characters() {
        assert_eq!(
            slack_escape("a < b && c > d <@U123> *bold*"),
            "a &lt; b &amp;&amp; c &gt; d &lt;@U123&gt; *bold*"
        );
    }

    #[test]
    fn slack_answers_are_classified() {
        let ok = json!({"ok": true, "channel": "C1", "ts": "1.2"});
        assert_eq!(
            classify_slack(StatusCode::OK, Some(ok), None),
            SendOutcome::Sent("1.2".into())
        );
        let limited = classify_slack(StatusCode::TOO_MANY_REQUESTS, None, Some(Duration::from_secs(30)));
        assert!(
            matches!(limited, SendOutcome::RateLimited { retry_after, .. } if retry_after == Duration::from_secs(30))
        );
        let spelled = classify_slack(
            StatusCode::OK,
            Some(json!({"ok": false, "error": "ratelimited"})),
            None,
        );
        assert!(matches!(spelled, SendOutcome::RateLimited { .. }));
        let gone = classify_slack(
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
        let doubt = classify_slack(
            StatusCode::OK,
            Some(json!({"ok": false, "error": "internal_error"})),
            None,
        );
        assert!(matches!(doubt, SendOutcome::Unknown { .. }));
        assert!(matches!(
            classify_slack(StatusCode::BAD_GATEWAY, None, None),
            SendOutcome::Unknown { .. }
        ));
    }

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

    #[test]
    fn telegram_answers_are_classified() {
        let ok = json!({"ok": true, "result": {"message_id": 321, "chat": {"id": 1}}});
        assert_eq!(
            classify_telegram(StatusCode::OK, Some(ok)),
            SendOutcome::Sent("321".into())
        );
        let limited = json!({"ok": false, "error_code": 429, "description": "Too Many Requests: retry after 15", "parameters": {"retry_after": 15}});
        let outcome = classify_telegram(StatusCode::TOO_MANY_REQUESTS, Some(limited));
        assert!(
            matches!(outcome, SendOutcome::RateLimited { retry_after, .. } if retry_after == Duration::from_secs(15))
        );
        let blocked =
            json!({"ok": false, "error_code": 403, "description": "Forbidden: bot was blocked by the user"});
        assert!(matches!(
            classify_telegram(StatusCode::FORBIDDEN, Some(blocked)),
            SendOutcome::Permanent { .. }
        ));
        assert!(matches!(
            classify_telegram(StatusCode::BAD_GATEWAY, None),
            SendOutcome::Unknown { .. }
        ));
    }

    #[test]
    fn whatsapp_answers_are_classified_by_error_code() {
        let ok = json!({"messaging_product": "whatsapp", "contacts": [{"input": "+1", "wa_id": "1"}], "messages": [{"id": "wamid.OUT"}]});
        assert_eq!(
            classify_whatsapp(StatusCode::OK, Some(ok)),
            SendOutcome::Sent("wamid.OUT".into())
        );
        let pair = json!({"error": {"message": "pair rate limit", "code": 131056}});
        assert!(matches!(
            classify_whatsapp(StatusCode::BAD_REQUEST, Some(pair)),
            SendOutcome::RateLimited { .. }
        ));
        let window = json!({"error": {"message": "Re-engagement message", "code": 131047}});
        assert_eq!(
            classify_whatsapp(StatusCode::BAD_REQUEST, Some(window)),
            SendOutcome::Permanent {
                error: "whatsapp 131047: Re-engagement message".into()
            }
        );
        let expired = json!({"error": {"message": "Session has expired", "code": 190}});
        assert!(matches!(
            classify_whatsapp(StatusCode::UNAUTHORIZED, Some(expired)),
            SendOutcome::Permanent { .. }
        ));
        assert!(matches!(
            classify_whatsapp(StatusCode::INTERNAL_SERVER_ERROR, None),
            SendOutcome::Unknown { .. }
        ));
    }
}
