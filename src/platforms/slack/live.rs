//! A streamed answer shown live in Slack with its own streaming (`chat.startStream`,
//! `chat.appendStream`, `chat.stopStream`:
//! <https://docs.slack.dev/reference/methods/chat.startStream>; docs/agent.md#streamed-answers).

use futures::future::BoxFuture;
use serde_json::{json, Value};

use super::send::thread_ts;
use super::Slack;
use crate::db::messages::MessageRow;
use crate::domain::Connector;
use crate::egress::GuardedClient;
use crate::platforms::contract::{api_base, LivePreview};
use crate::platforms::live::{clip, LiveStep, LiveTarget, Shown, Surface};

/// Slack's limit on one `markdown_text`, in characters (12,000 per the API reference).
const SLACK_MAX_CHARS: usize = 12_000;

pub(super) async fn show(
    target: &LiveTarget<'_>,
    text: &str,
    shown: &mut Shown,
) -> Result<LiveStep, &'static str> {
    let message = target.message;
    let base = api_base(target.connector);
    let Some(ts) = shown.id.clone() else {
        let mut body = json!({
            "channel": message.address.chat_id,
            "thread_ts": thread_ts(message),
            "markdown_text": clip(text, SLACK_MAX_CHARS),
            "recipient_user_id": message.address.platform_user_id,
        });
        if let Some(team) = message.metadata.get("team_id").and_then(Value::as_str) {
            body["recipient_team_id"] = team.into();
        }
        let request = target
            .client
            .post(format!("{base}/api/chat.startStream"))
            .bearer_auth(target.token())
            .json(&body);
        let answer = target.call(request).await?;
        let ts = answer["ts"].as_str().ok_or("no ts")?;
        shown.text = text.to_owned();
        return Ok(LiveStep::Started(ts.to_owned()));
    };
    let added = text.get(shown.text.len()..).unwrap_or_default();
    if added.is_empty() || shown.text.len() + added.len() > SLACK_MAX_CHARS * 3 {
        return Ok(LiveStep::Shown);
    }
    let request = target
        .client
        .post(format!("{base}/api/chat.appendStream"))
        .bearer_auth(target.token())
        .json(
            &json!({ "channel": message.address.chat_id, "ts": ts, "markdown_text": clip(added, SLACK_MAX_CHARS) }),
        );
    target.call(request).await?;
    shown.text = text.to_owned();
    Ok(LiveStep::Shown)
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
        .json(&json!({ "channel": message.address.chat_id, "ts": live_id }));
    if client.send(request).await.is_err() {
        tracing::debug!("could not stop the stream of an answer that failed");
    }
}

impl LivePreview for Slack {
    fn live_surface(&self, _message: &MessageRow) -> Option<Surface> {
        Some(Surface {
            pace: 1,
            ephemeral: false,
        })
    }

    fn show_live<'a>(
        &'a self,
        target: &'a LiveTarget<'a>,
        _surface: Surface,
        text: &'a str,
        shown: &'a mut Shown,
    ) -> BoxFuture<'a, Result<LiveStep, &'static str>> {
        Box::pin(show(target, text, shown))
    }

    fn end_live<'a>(
        &'a self,
        client: &'a GuardedClient,
        connector: &'a Connector,
        message: &'a MessageRow,
        live_id: &'a str,
        token: &'a str,
    ) -> BoxFuture<'a, ()> {
        Box::pin(end(client, connector, message, live_id, token))
    }
}
