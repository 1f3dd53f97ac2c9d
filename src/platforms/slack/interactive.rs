//! Slack's taps on the buttons of an answer (posted by `send.rs`), which come back to the
//! app's Interactivity Request URL as `block_actions`
//! (docs.slack.dev/reference/interaction-payloads/block_actions-payload): a form POST
//! whose one field, `payload`, is JSON, signed like every event over its raw bytes.
//! Slack retries no interaction, so each tap is acknowledged with a 200 at once.

use serde::Deserialize;
use serde_json::json;

use crate::domain::{index_key, Address};
use crate::platforms::inbound::{HookError, Inbound, InboundKind, InboundMessage, Parsed, Tap};

#[derive(Deserialize)]
struct FormIn {
    payload: String,
}

#[derive(Deserialize)]
struct PayloadIn {
    #[serde(rename = "type")]
    kind: String,
    team: Option<IdIn>,
    user: IdIn,
    container: Option<ContainerIn>,
    message: Option<MessageIn>,
    #[serde(default)]
    actions: Vec<ActionIn>,
}

#[derive(Deserialize)]
struct IdIn {
    id: String,
}

#[derive(Deserialize)]
struct ContainerIn {
    message_ts: Option<String>,
    channel_id: Option<String>,
    thread_ts: Option<String>,
}

#[derive(Deserialize)]
struct MessageIn {
    thread_ts: Option<String>,
}

#[derive(Deserialize)]
struct ActionIn {
    action_id: String,
    value: Option<String>,
    action_ts: Option<String>,
}

/// A request to the Interactivity URL: a `block_actions` tap on one of our buttons is a
/// turn; anything else (a modal's submission, a shortcut, a link button's notice) is
/// acknowledged and dropped.
pub(super) fn parse(body: &[u8]) -> Result<Parsed, HookError> {
    let form: FormIn =
        serde_urlencoded::from_bytes(body).map_err(|e| HookError::Malformed(format!("form body: {e}")))?;
    let payload: PayloadIn =
        serde_json::from_str(&form.payload).map_err(|e| HookError::Malformed(format!("payload: {e}")))?;
    if payload.kind != "block_actions" {
        return Ok(Parsed::Events(Inbound::only_dropped("other_interaction")));
    }
    let inbound = match tap(&payload) {
        Ok(message) => Inbound {
            messages: vec![message],
            ..Inbound::default()
        },
        Err(reason) => Inbound::only_dropped(reason),
    };
    Ok(Parsed::Events(inbound))
}

fn tap(payload: &PayloadIn) -> Result<InboundMessage, &'static str> {
    let container = payload.container.as_ref().ok_or("no_container")?;
    let (Some(channel), Some(on)) = (&container.channel_id, &container.message_ts) else {
        return Err("not_on_a_message");
    };
    let action = payload.actions.first().ok_or("no_action")?;
    // A link button also reports its click; it carries no value of ours.
    let button = action.value.clone().ok_or("link_opened")?;
    let team = payload.team.as_ref().map_or("", |team| team.id.as_str());
    let user = &payload.user.id;
    let action_ts = action.action_ts.as_deref().unwrap_or_default();
    let thread = container
        .thread_ts
        .clone()
        .or_else(|| payload.message.as_ref()?.thread_ts.clone());
    Ok(InboundMessage {
        // One click is one `action_ts`; the same payload again is the same tap.
        idempotency_key: index_key(&format!(
            "tap:{team}:{channel}:{on}:{}:{action_ts}:{user}",
            action.action_id
        ))
        .into_owned(),
        kind: InboundKind::Text,
        platform_message_id: on.clone(),
        address: Address {
            chat_id: channel.clone(),
            // The answer goes under the question: in its thread, or starting one.
            thread_id: thread.or_else(|| Some(on.clone())),
            space: (!channel.starts_with('D')).then(|| channel.clone()),
            platform_user_id: user.clone(),
        },
        reply_to_id: None,
        text: String::new(),
        attachments: Vec::new(),
        metadata: json!({ "team_id": team, "interaction": "block_actions" }),
        tap: Some(Tap {
            button,
            answer_id: None,
        }),
        command: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TAP: &[u8] = include_bytes!("../../../fixtures/slack/block_actions.json");

    fn form(payload: &[u8]) -> Vec<u8> {
        let payload = std::str::from_utf8(payload).unwrap();
        serde_urlencoded::to_string([("payload", payload)])
            .unwrap()
            .into_bytes()
    }

    fn events(body: &[u8]) -> Inbound {
        match parse(body) {
            Ok(Parsed::Events(inbound)) => inbound,
            other => panic!("expected events, got {other:?}"),
        }
    }

    #[test]
    fn a_button_tap_is_a_turn_under_the_question() {
        let inbound = events(&form(TAP));
        let message = &inbound.messages[0];
        assert_eq!(message.address.chat_id, "C0CHAN001");
        assert_eq!(message.address.platform_user_id, "U0USER1");
        assert_eq!(message.address.thread_id.as_deref(), Some("1718003300.000200"));
        assert_eq!(message.tap.as_ref().unwrap().button, "k3J9xQ2mZa.0");
        assert!(message.idempotency_key.contains("1718003310.840180"));
    }

    #[test]
    fn other_interactions_are_dropped_and_a_bad_form_is_malformed() {
        assert_eq!(
            events(&form(br#"{"type":"view_submission","user":{"id":"U1"}}"#)).dropped,
            ["other_interaction"]
        );
        let link = br#"{"type":"block_actions","user":{"id":"U1"},"container":{"message_ts":"1.2","channel_id":"C1"},"actions":[{"action_id":"x","action_ts":"3.4"}]}"#;
        assert_eq!(events(&form(link)).dropped, ["link_opened"]);
        assert!(matches!(parse(b"payload=%7Bnot"), Err(HookError::Malformed(_))));
        assert!(matches!(parse(b"nothing=1"), Err(HookError::Malformed(_))));
    }
}
