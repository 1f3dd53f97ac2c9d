//! Opening a direct message with a Slack user
//! (<https://docs.slack.dev/reference/methods/conversations.open>), for a message the agent
//! writes first to a user with no DM recorded.

use secrecy::ExposeSecret;
use serde_json::{json, Value};

use crate::domain::Connector;
use crate::egress::GuardedClient;
use crate::platforms::contract::api_base;
use crate::platforms::send::read_json;

/// The DM's channel id (`D…`), or Slack's error code (or what went wrong) as text.
pub async fn open(client: &GuardedClient, connector: &Connector, user: &str) -> Result<String, String> {
    let Some(token) = &connector.secrets.outbound_token else {
        return Err("the connector has no bot token".into());
    };
    let request = client
        .post(format!("{}/api/conversations.open", api_base(connector)))
        .bearer_auth(token.expose_secret())
        .json(&json!({ "users": user }));
    let response = client.send(request).await.map_err(|err| match err {
        crate::egress::SendError::Refused(_) => {
            "the connector's API base URL is refused by the egress rules".to_owned()
        }
        crate::egress::SendError::Transport(_) => "slack could not be reached".to_owned(),
    })?;
    let (status, body, _) = read_json(response).await;
    let body = body.unwrap_or(Value::Null);
    match body.pointer("/channel/id").and_then(Value::as_str) {
        Some(channel) if body["ok"] == true => Ok(channel.to_owned()),
        _ => Err(body["error"].as_str().map_or_else(
            || format!("slack answered {status}"),
            |code| format!("slack: {code}"),
        )),
    }
}
