//! Slack's slash commands (docs.slack.dev/interactivity/implementing-slash-commands): a
//! form POST to the command's Request URL, signed like every event over its raw bytes.
//! A command is a turn: `command` says which, its text is what followed it. Slack retries
//! no command; its `trigger_id` is unique per invocation, so a replayed request is the
//! same turn. The answer goes to the channel, not threaded (a command has no message to
//! thread under); the 200 shows the command there, so the answer follows what was asked.

use serde::Deserialize;
use serde_json::json;

use crate::domain::{index_key, Address};
use crate::platforms::inbound::{HandshakeReply, HookError, Inbound, InboundKind, InboundMessage, Parsed};

#[derive(Deserialize)]
struct CommandIn {
    team_id: Option<String>,
    channel_id: String,
    user_id: String,
    command: String,
    #[serde(default)]
    text: String,
    trigger_id: String,
    channel_name: Option<String>,
    user_name: Option<String>,
}

#[derive(Deserialize)]
struct FormKind {
    command: Option<String>,
    ssl_check: Option<String>,
}

/// Whether a form to the interactivity URL is a command (or Slack's certificate check for
/// one) rather than a tap's `payload`.
pub(super) fn is_command(body: &[u8]) -> bool {
    serde_urlencoded::from_bytes::<FormKind>(body)
        .is_ok_and(|form| form.command.is_some() || form.ssl_check.is_some())
}

pub(super) fn parse(body: &[u8]) -> Result<Parsed, HookError> {
    let kind: FormKind =
        serde_urlencoded::from_bytes(body).map_err(|e| HookError::Malformed(format!("form body: {e}")))?;
    if kind.command.is_none() && kind.ssl_check.as_deref() == Some("1") {
        return Ok(Parsed::Handshake(HandshakeReply {
            content_type: "text/plain",
            body: String::new(),
        }));
    }
    let form: CommandIn =
        serde_urlencoded::from_bytes(body).map_err(|e| HookError::Malformed(format!("command: {e}")))?;
    Ok(Parsed::Events(Inbound {
        messages: vec![turn(form)],
        // `in_channel` with no text of its own: the channel sees the command as typed.
        ack: Some(json!({ "response_type": "in_channel" })),
        ..Inbound::default()
    }))
}

fn turn(form: CommandIn) -> InboundMessage {
    let team = form.team_id.unwrap_or_default();
    let text = form.text.trim();
    // A bare `/help` reads as itself in the conversation.
    let text = if text.is_empty() {
        form.command.clone()
    } else {
        text.to_owned()
    };
    InboundMessage {
        idempotency_key: index_key(&format!("command:{team}:{}", form.trigger_id)).into_owned(),
        kind: InboundKind::Text,
        // Nothing to reply to: the answer is a message of its own in the channel.
        platform_message_id: String::new(),
        address: Address {
            space: (!form.channel_id.starts_with('D')).then(|| form.channel_id.clone()),
            chat_id: form.channel_id,
            thread_id: None,
            platform_user_id: form.user_id,
        },
        reply_to_id: None,
        text,
        attachments: Vec::new(),
        metadata: json!({
            "team_id": team,
            "channel_name": form.channel_name,
            "user_name": form.user_name,
        }),
        tap: None,
        command: Some(form.command),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const COMMAND: &[u8] = include_bytes!("../../../fixtures/slack/slash_command.form");

    fn events(body: &[u8]) -> Inbound {
        match parse(body) {
            Ok(Parsed::Events(inbound)) => inbound,
            other => panic!("expected events, got {other:?}"),
        }
    }

    #[test]
    fn a_command_is_a_turn_in_its_channel_shown_there_by_the_ack() {
        assert!(is_command(COMMAND));
        let inbound = events(COMMAND);
        let message = &inbound.messages[0];
        assert_eq!(message.command.as_deref(), Some("/ask"));
        assert_eq!(message.text, "where is my order #42?");
        assert_eq!(
            (
                message.address.chat_id.as_str(),
                message.address.thread_id.as_deref()
            ),
            ("C0CHAN001", None)
        );
        assert_eq!(message.address.platform_user_id, "U0USER1");
        assert!(message.platform_message_id.is_empty(), "nothing to thread under");
        assert!(message.idempotency_key.contains("398738663015"));
        assert_eq!(inbound.ack, Some(json!({"response_type": "in_channel"})));
    }

    #[test]
    fn a_bare_command_reads_as_itself_and_the_certificate_check_is_answered_empty() {
        let bare = b"team_id=T1&channel_id=D1&user_id=U1&command=%2Fhelp&text=&trigger_id=t1";
        let message = &events(bare).messages[0];
        assert_eq!(
            (message.text.as_str(), message.address.space.as_deref()),
            ("/help", None)
        );
        let check = b"ssl_check=1&token=x";
        assert!(is_command(check));
        assert!(matches!(parse(check), Ok(Parsed::Handshake(reply)) if reply.body.is_empty()));
        assert!(!is_command(b"payload=%7B%7D"));
        assert!(matches!(parse(b"command=%2Fask"), Err(HookError::Malformed(_))));
    }
}
