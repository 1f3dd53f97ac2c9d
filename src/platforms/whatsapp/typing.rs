//! WhatsApp's typing indicator: the read receipt of the user's message with
//! `typing_indicator`, so the message shows as read from then on.

use serde_json::{json, Value};

use super::{Whatsapp, GRAPH_VERSION};
use crate::db::messages::MessageRow;
use crate::domain::Connector;
use crate::egress::GuardedClient;
use crate::platforms::contract::{Place, Show, TypingIndicator};

impl TypingIndicator for Whatsapp {
    fn typing_place(&self, connector: &Connector, message: &MessageRow) -> Option<Place> {
        let phone_number_id = message.metadata["phone_number_id"]
            .as_str()
            .or(connector.profile.external_id.as_deref())?;
        Some(Place {
            chat: phone_number_id.to_owned(),
            within: Some(message.platform_message_id.clone()),
        })
    }

    fn typing_refresh_intervals(&self) -> u32 {
        5
    }

    fn typing_request(
        &self,
        client: &GuardedClient,
        base: &str,
        token: &str,
        place: &Place,
        _show: Show<'_>,
    ) -> reqwest::RequestBuilder {
        let phone_number_id = &place.chat;
        client
            .post(format!("{base}/{GRAPH_VERSION}/{phone_number_id}/messages"))
            .bearer_auth(token)
            .json(&json!({
                "messaging_product": "whatsapp",
                "status": "read",
                "message_id": place.within,
                "typing_indicator": { "type": "text" },
            }))
    }

    fn typing_shown(&self, body: &Value) -> bool {
        body["success"] == true
    }

    /// Meta's rate-limit codes (`super::send::rate_limit`), whatever the HTTP status.
    fn typing_slowed(&self, body: &Value) -> bool {
        body.pointer("/error/code")
            .and_then(Value::as_i64)
            .and_then(super::send::rate_limit)
            .is_some()
    }
}
