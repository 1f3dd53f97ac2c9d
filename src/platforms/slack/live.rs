//! A streamed answer shown live in Slack (`crate::delivery::live`): the platform's own
//! streaming in the reply thread, `chat.startStream` with the text so far (its `ts` recorded
//! at once), then `chat.appendStream` with what was added since (PLATFORMS.md §6); a
//! preview no part will adopt is ended with `chat.stopStream`.

use serde_json::{json, Value};

use super::send::thread_ts;
use crate::db::messages::MessageRow;
use crate::delivery::live::{call, clip, record, token, LiveContext, Shown};
use crate::domain::Connector;
use crate::egress::GuardedClient;
use crate::platforms::api_base;

/// Slack's limit on one `markdown_text`, in characters (12,000 per the API reference).
const SLACK_MAX_CHARS: usize = 12_000;

pub(super) async fn show(context: &LiveContext, text: &str, shown: &mut Shown) -> Result<bool, &'static str> {
    let message = &context.message;
    let base = api_base(&context.connector);
    let Some(ts) = shown.id.clone() else {
        let mut body = json!({
            "channel": message.chat_id,
            "thread_ts": thread_ts(message),
            "markdown_text": clip(text, SLACK_MAX_CHARS),
            "recipient_user_id": message.platform_user_id,
        });
        if let Some(team) = message.metadata.get("team_id").and_then(Value::as_str) {
            body["recipient_team_id"] = team.into();
        }
        let request = context
            .client
            .post(format!("{base}/api/chat.startStream"))
            .bearer_auth(token(context))
            .json(&body);
        let answer = call(context, request).await?;
        let ts = answer["ts"].as_str().ok_or("no ts")?;
        shown.text = text.to_owned();
        return record(context, ts, shown).await;
    };
    let added = text.get(shown.text.len()..).unwrap_or_default();
    if added.is_empty() || shown.text.len() + added.len() > SLACK_MAX_CHARS * 3 {
        return Ok(true);
    }
    let request = context
        .client
        .post(format!("{base}/api/chat.appendStream"))
        .bearer_auth(token(context))
        .json(
            &json!({ "channel": message.chat_id, "ts": ts, "markdown_text": clip(added, SLACK_MAX_CHARS) }),
        );
    call(context, request).await?;
    shown.text = text.to_owned();
    Ok(true)
}

/// Stops the stream `live_id` with the text it shows (best effort).
pub(super) async fn end(
    client: &GuardedClient,
    connector: &Connector,
    message: &MessageRow,
    live_id: &str,
    token: &str,
) {
    let request = client
        .post(format!("{}/api/chat.stopStream", api_base(connector)))
        .bearer_auth(token)
        .json(&json!({ "channel": message.chat_id, "ts": live_id }));
    if client.send(request).await.is_err() {
        tracing::debug!("could not stop the stream of an answer that failed");
    }
}
