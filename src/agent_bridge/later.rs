//! The echo's asynchronous mode (`agent-bridge --echo --async`): it answers a dispatch 202,
//! then posts to the turn's events URL what an agent that takes its time would: a status,
//! the answer (with its buttons and picture when asked), `done`
//! (docs/agent.md#answering-later), each signed with the dispatch secret.

use std::time::Duration;

use secrecy::{ExposeSecret, SecretString};
use serde_json::{json, Value};

use super::offer::Reply;
use crate::signature;

pub struct Events {
    pub client: reqwest::Client,
    pub url: String,
    pub secret: SecretString,
}

impl Events {
    /// Each event has an id of its own; a failed post is retried a few times with the same
    /// id, so the gateway applies it once.
    async fn post(&self, id: &str, event: Value) -> bool {
        let body = event.to_string();
        for attempt in 0..3u32 {
            let now = chrono::Utc::now().timestamp();
            let Ok(signature) = signature::sign(self.secret.expose_secret(), id, now, body.as_bytes()) else {
                return false;
            };
            let sent = self
                .client
                .post(&self.url)
                .header("content-type", "application/json")
                .header("webhook-id", id)
                .header("webhook-timestamp", now.to_string())
                .header("webhook-signature", signature)
                .body(body.clone())
                .timeout(Duration::from_secs(10))
                .send()
                .await;
            match sent {
                Ok(response) if response.status().is_success() => return true,
                // A refusal (401, 409, 410) does not change with a retry.
                Ok(response) if response.status().is_client_error() => {
                    tracing::warn!(status = %response.status(), "the gateway refused an event");
                    return false;
                }
                _ => tokio::time::sleep(Duration::from_millis(200 * 2u64.pow(attempt))).await,
            }
        }
        false
    }
}

/// The answer's parts are one `message` event; its choices and files ride on it.
pub async fn echo_later(events: Events, delay: Duration, answer: Reply) {
    let turn = uuid::Uuid::now_v7();
    events
        .post(
            &format!("{turn}-status"),
            json!({"type": "status", "text": "Working on it…"}),
        )
        .await;
    tokio::time::sleep(delay).await;
    let mut message = json!({"type": "message", "content": answer.parts.concat()});
    if let Some(choices) = answer.choices {
        message["choices"] = json!(choices.items);
        message["choices_reusable"] = choices.reusable.into();
    }
    if !answer.attachments.is_empty() {
        message["attachments"] = json!(answer.attachments);
    }
    if events.post(&format!("{turn}-answer"), message).await {
        events
            .post(&format!("{turn}-done"), json!({"type": "done"}))
            .await;
    }
}
