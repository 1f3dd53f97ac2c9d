//! Slack's side of choices: the `actions` block posted with an answer
//! (docs.slack.dev/reference/block-kit/blocks/actions-block), and the taps that come back
//! to the app's Interactivity Request URL as `block_actions`
//! (docs.slack.dev/reference/interaction-payloads/block_actions-payload): a form POST
//! whose one field, `payload`, is JSON, signed like every event over its raw bytes.
//! Slack retries no interaction, so each tap is acknowledged with a 200 at once.

use serde::Deserialize;
use serde_json::{json, Value};

use super::send::escape;
use super::Slack;
use crate::choices::{ChoiceStyle, Offered};
use crate::domain::index_key;
use crate::egress::GuardedClient as Client;
use crate::platforms::contract::api_base;
use crate::platforms::inbound::{HookError, Inbound, InboundKind, InboundMessage, Parsed, Tap};
use crate::platforms::send::{read_json, transport_error, OutboundPart, SendOutcome};

/// A section's text (docs.slack.dev/reference/block-kit/blocks/section-block).
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
                button["style"] = match style {
                    ChoiceStyle::Primary => "primary",
                    ChoiceStyle::Danger => "danger",
                }
                .into();
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
    let body = json!({ "channel": part.message.chat_id, "ts": target, "text": text, "blocks": blocks });
    let request = client
        .post(format!("{}/api/chat.update", api_base(part.connector)))
        .bearer_auth(token)
        .json(&body);
    let (status, body, retry_after) = match client.send(request).await {
        Ok(response) => read_json(response).await,
        Err(err) => return transport_error(err),
    };
    let error = super::send::error_code(body.as_ref());
    if ["message_not_found", "cant_update_message", "edit_window_closed"].contains(&error.as_str()) {
        tracing::info!(
            error,
            "slack kept the buttons of a closed choice; nothing more to do"
        );
        return SendOutcome::Sent(target.to_owned());
    }
    match super::send::classify(status, body, retry_after) {
        SendOutcome::Sent(_) => SendOutcome::Sent(target.to_owned()),
        other => other,
    }
}

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
        chat_id: channel.clone(),
        // The answer goes under the question: in its thread, or starting one.
        thread_id: thread.or_else(|| Some(on.clone())),
        space: (!channel.starts_with('D')).then(|| channel.clone()),
        platform_user_id: user.clone(),
        reply_to_id: None,
        text: String::new(),
        attachments: Vec::new(),
        metadata: json!({ "team_id": team, "interaction": "block_actions" }),
        tap: Some(Tap {
            button,
            answer_id: None,
        }),
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
        assert_eq!(message.chat_id, "C0CHAN001");
        assert_eq!(message.platform_user_id, "U0USER1");
        assert_eq!(message.thread_id.as_deref(), Some("1718003300.000200"));
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
