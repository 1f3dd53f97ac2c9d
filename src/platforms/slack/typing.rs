//! Slack's typing indicator, `assistant.threads.setStatus` (docs/configuration.md#typing-indicator):
//! only assistant threads have one, and the status stays until a reply, so a turn that ends
//! without one clears it.

use serde_json::{json, Value};

use super::Slack;
use crate::db::messages::MessageRow;
use crate::domain::Connector;
use crate::egress::GuardedClient;
use crate::platforms::contract::{Place, Show, TypingIndicator};

/// The Slack status shown while the agent works.
const SLACK_STATUS: &str = "is thinking…";

impl TypingIndicator for Slack {
    fn typing_place(&self, _connector: &Connector, message: &MessageRow) -> Option<Place> {
        Some(Place {
            chat: message.address.chat_id.clone(),
            within: Some(assistant_thread(message)?.to_owned()),
        })
    }

    fn typing_refresh_intervals(&self) -> u32 {
        25
    }

    fn typing_request(
        &self,
        client: &GuardedClient,
        base: &str,
        token: &str,
        place: &Place,
        show: Show<'_>,
    ) -> reqwest::RequestBuilder {
        let status = match show {
            Show::Working => SLACK_STATUS,
            Show::Status(text) => text,
            Show::Nothing => "",
        };
        client
            .post(format!("{base}/api/assistant.threads.setStatus"))
            .bearer_auth(token)
            .json(&json!({ "channel_id": place.chat, "thread_ts": place.within, "status": status }))
    }

    fn typing_shown(&self, body: &Value) -> bool {
        body["ok"] == true
    }

    fn typing_refused(&self, body: &Value) -> bool {
        body["error"].as_str().is_some()
    }

    fn typing_stays(&self) -> bool {
        true
    }
}

/// The assistant thread a turn was asked in, as Bolt's `Assistant` middleware decides it:
/// a `message` in the app's DM, in a thread, with no subtype but `file_share`.
pub fn assistant_thread(message: &MessageRow) -> Option<&str> {
    let metadata = &message.metadata;
    let field = |name: &str| metadata.get(name).and_then(Value::as_str);
    let in_dm_thread = field("event_type") == Some("message") && field("channel_type") == Some("im");
    let plain = matches!(field("subtype"), None | Some("file_share"));
    (in_dm_thread && plain)
        .then_some(message.address.thread_id.as_deref())
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{Address, ConnectorId};

    fn slack_message(metadata: Value, thread: Option<&str>) -> MessageRow {
        MessageRow {
            id: crate::domain::MessageId::new(),
            tenant_id: crate::domain::TenantId(uuid::Uuid::nil()),
            connector_id: ConnectorId::new(),
            platform: crate::domain::Platform::Slack,
            idempotency_key: "T1:D1:1.1".into(),
            platform_message_id: "1718000000.000200".into(),
            address: Address {
                chat_id: "D0DM".into(),
                thread_id: thread.map(str::to_owned),
                space: None,
                platform_user_id: "U1".into(),
            },
            reply_to_id: thread.map(str::to_owned),
            user_id: None,
            conversation_key: crate::domain::ConversationKey::user("c"),
            request_content: "hi".into(),
            response_content: None,
            decision: None,
            status: crate::domain::MessageStatus::Accepted,
            attempts: 0,
            last_error: None,
            received_at: chrono::Utc::now(),
            completed_at: None,
            delivered_at: None,
            attachments: None,
            metadata,
            live_message_id: None,
            origin: Default::default(),
            author: None,
            action: None,
            command: None,
        }
    }

    #[test]
    fn a_slack_dm_thread_message_is_an_assistant_thread_and_nothing_else_is() {
        let dm = json!({"event_type": "message", "channel_type": "im", "subtype": null});
        let thread = Some("1718000000.000100");
        assert_eq!(assistant_thread(&slack_message(dm.clone(), thread)), thread);
        let file = json!({"event_type": "message", "channel_type": "im", "subtype": "file_share"});
        assert_eq!(assistant_thread(&slack_message(file, thread)), thread);
        // A DM outside a thread, a channel thread, a mention, a broadcast: no indicator.
        assert_eq!(assistant_thread(&slack_message(dm, None)), None);
        let channel = json!({"event_type": "message", "channel_type": "channel"});
        assert_eq!(assistant_thread(&slack_message(channel, thread)), None);
        let mention = json!({"event_type": "app_mention", "channel_type": null});
        assert_eq!(assistant_thread(&slack_message(mention, thread)), None);
        let broadcast = json!({"event_type": "message", "channel_type": "im", "subtype": "thread_broadcast"});
        assert_eq!(assistant_thread(&slack_message(broadcast, thread)), None);
    }
}
