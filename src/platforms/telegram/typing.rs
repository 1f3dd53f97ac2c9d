//! Telegram's typing indicator: `sendChatAction` `typing`, shown for 5 s or until the bot's
//! next message.

use serde_json::{json, Value};

use super::send::json_id;
use super::Telegram;
use crate::db::messages::MessageRow;
use crate::domain::Connector;
use crate::egress::GuardedClient;
use crate::platforms::contract::{Place, Show, TypingIndicator};

impl TypingIndicator for Telegram {
    fn typing_place(&self, _connector: &Connector, message: &MessageRow) -> Option<Place> {
        Some(Place {
            chat: message.address.chat_id.clone(),
            within: message.address.thread_id.clone(),
        })
    }

    fn typing_refresh_intervals(&self) -> u32 {
        1
    }

    fn typing_request(
        &self,
        client: &GuardedClient,
        base: &str,
        token: &str,
        place: &Place,
        _show: Show<'_>,
    ) -> reqwest::RequestBuilder {
        let mut body = json!({ "chat_id": json_id(&place.chat), "action": "typing" });
        if let Some(topic) = &place.within {
            body["message_thread_id"] = json_id(topic);
        }
        client
            .post(format!("{base}/bot{token}/sendChatAction"))
            .json(&body)
    }

    fn typing_shown(&self, body: &Value) -> bool {
        body["ok"] == true
    }
}
