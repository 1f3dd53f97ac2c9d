//! The dispatch payload checked at the edge (docs/agent.md#the-agent-side-agent-bridge):
//! after this, the bridge holds a non-empty conversation that ends with the user's turn.
//! Every refusal is a 400 with a message the gateway's operator can act on.

use serde_json::{Map, Value};

use crate::choices::TapAction;
use crate::dispatch::payload::ChatMessage;
use crate::domain::Platform;
use crate::media::AttachmentOut;

/// `tool` and `developer` messages need fields the gateway never sends (tool call ids), so
/// they are refused rather than forwarded half-formed.
const ROLES: [&str; 3] = ["system", "user", "assistant"];

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Turn {
    /// Oldest first; the last is the user's current turn.
    pub messages: Vec<ChatMessage>,
    pub message_id: Option<String>,
    pub tenant_id: Option<String>,
    pub user_id: Option<String>,
    /// The gateway's conversation key parts for an unlinked sender.
    pub connector_id: Option<String>,
    pub platform_user_id: Option<String>,
    /// The turn's events URL, for an answer given later (docs/agent.md#answering-later).
    pub reply_url: Option<String>,
    /// Where the answer is shown; `None` for a platform this build does not know.
    pub platform: Option<Platform>,
    /// The current turn is a tap on a choice (its `content` is the choice's label).
    pub action: Option<TapAction>,
}

impl Turn {
    pub fn current(&self) -> &ChatMessage {
        self.messages
            .last()
            .expect("parse never returns a turn without messages")
    }

    /// `<tenant_id>:<user_id>`, or `<tenant_id>:<connector_id>:<platform_user_id>` for an
    /// unlinked sender.
    pub fn stable_user(&self) -> Option<String> {
        let tenant = self.tenant_id.as_deref()?;
        match (&self.user_id, &self.connector_id, &self.platform_user_id) {
            (Some(user), _, _) => Some(format!("{tenant}:{user}")),
            (None, Some(connector), Some(sender)) => Some(format!("{tenant}:{connector}:{sender}")),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidDispatch(pub String);

fn invalid(message: impl Into<String>) -> InvalidDispatch {
    InvalidDispatch(message.into())
}

pub fn parse(body: &[u8]) -> Result<Turn, InvalidDispatch> {
    let value: Value =
        serde_json::from_slice(body).map_err(|e| invalid(format!("the body is not JSON ({e})")))?;
    let object = value
        .as_object()
        .ok_or_else(|| invalid("the body must be a JSON object"))?;
    let messages = match object.get("messages") {
        None | Some(Value::Null) => vec![legacy_message(object)?],
        Some(Value::Array(items)) if items.is_empty() => vec![legacy_message(object)?],
        Some(Value::Array(items)) => conversation(items)?,
        Some(_) => return Err(invalid("`messages` must be an array")),
    };
    let text = |pointer: &str| value.pointer(pointer).and_then(Value::as_str).map(str::to_owned);
    Ok(Turn {
        messages,
        message_id: text("/message_id"),
        tenant_id: text("/tenant_id"),
        user_id: text("/user_id"),
        connector_id: text("/channel/connector_id"),
        platform_user_id: text("/channel/platform_user_id"),
        reply_url: text("/reply/url"),
        platform: text("/channel/platform").and_then(|p| p.parse().ok()),
        action: action(object.get("action"))?,
    })
}

/// The dispatch's `action`: absent or null, or the tap's `{id, label, value?, message_id}`.
fn action(value: Option<&Value>) -> Result<Option<TapAction>, InvalidDispatch> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(value) => serde_json::from_value(value.clone())
            .map(Some)
            .map_err(|e| invalid(format!("`action` must be {{id, label, value, message_id}} ({e})"))),
    }
}

/// The legacy top-level `role`/`content`: one user message.
fn legacy_message(object: &Map<String, Value>) -> Result<ChatMessage, InvalidDispatch> {
    let Some(content) = object.get("content") else {
        return Err(invalid("the payload has neither `messages` nor `content`"));
    };
    match object.get("role") {
        None | Some(Value::Null) => {}
        Some(Value::String(role)) if role == "user" => {}
        Some(other) => {
            return Err(invalid(format!(
                "`role` must be `user` when `messages` is absent, not {other}"
            )))
        }
    }
    Ok(ChatMessage::user(non_blank(content, "`content`")?))
}

fn conversation(items: &[Value]) -> Result<Vec<ChatMessage>, InvalidDispatch> {
    let messages = items
        .iter()
        .enumerate()
        .map(|(index, item)| chat_message(index, item))
        .collect::<Result<Vec<_>, _>>()?;
    let last = messages.last().expect("the caller passes a non-empty list");
    if last.role != "user" {
        return Err(invalid(format!(
            "the last message must be the user's turn (role `user`), not `{}`",
            last.role
        )));
    }
    Ok(messages)
}

fn chat_message(index: usize, item: &Value) -> Result<ChatMessage, InvalidDispatch> {
    let object = item
        .as_object()
        .ok_or_else(|| invalid(format!("messages[{index}] must be an object")))?;
    let role = object.get("role").and_then(Value::as_str).unwrap_or_default();
    if !ROLES.contains(&role) {
        return Err(invalid(format!(
            "messages[{index}].role must be `system`, `user` or `assistant`, not `{role}`"
        )));
    }
    let content = object
        .get("content")
        .ok_or_else(|| invalid(format!("messages[{index}] has no `content`")))?;
    let attachments = attachments(index, object.get("attachments"))?;
    let content = match (content.as_str(), attachments.is_empty()) {
        (Some(text), false) if role == "user" => text.to_owned(),
        _ => non_blank(content, &format!("messages[{index}].content"))?,
    };
    // Who wrote an assistant turn is the gateway's to say, not the upstream model's to read.
    Ok(ChatMessage {
        role: role.to_owned(),
        content,
        attachments,
        metadata: None,
        action: None,
        command: None,
    })
}

/// `attachments` of a message: absent, null or a list of `{type, mime, size, name, url}`.
fn attachments(index: usize, value: Option<&Value>) -> Result<Vec<AttachmentOut>, InvalidDispatch> {
    match value {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(value) => serde_json::from_value(value.clone()).map_err(|e| {
            invalid(format!(
                "messages[{index}].attachments must be a list of {{type, mime, size, name, url}} ({e})"
            ))
        }),
    }
}

fn non_blank(content: &Value, name: &str) -> Result<String, InvalidDispatch> {
    match content.as_str() {
        Some(text) if !text.trim().is_empty() => Ok(text.to_owned()),
        Some(_) => Err(invalid(format!("{name} is empty"))),
        None => Err(invalid(format!("{name} must be a string"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(body: &str) -> String {
        parse(body.as_bytes()).unwrap_err().0
    }

    #[test]
    fn messages_are_taken_as_sent_with_the_identity_fields() {
        let turn = parse(
            br#"{"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
                              {"role": "user", "content": "c"}],
                 "role": "user", "content": "c", "tenant_id": "t1", "user_id": "alice",
                 "message_id": "m1", "channel": {"connector_id": "c1", "platform_user_id": "U1"}}"#,
        )
        .unwrap();
        assert_eq!(
            turn.messages,
            [
                ChatMessage::user("a"),
                ChatMessage::assistant("b"),
                ChatMessage::user("c")
            ]
        );
        assert_eq!(turn.current().content, "c");
        assert_eq!(turn.message_id.as_deref(), Some("m1"));
        assert_eq!(turn.stable_user().as_deref(), Some("t1:alice"));
        assert_eq!((turn.platform, turn.action), (None, None));
    }

    #[test]
    fn a_tap_carries_its_action_and_the_platform_is_known() {
        let turn = parse(
            br#"{"content": "Yes", "channel": {"platform": "telegram"},
                 "action": {"id": "yes", "label": "Yes", "message_id": "0190a8e0-0000-7000-8000-0000000000aa"}}"#,
        )
        .unwrap();
        assert_eq!(turn.platform, Some(Platform::Telegram));
        assert_eq!(
            turn.action.map(|a| (a.id, a.label)),
            Some(("yes".into(), "Yes".into()))
        );
        assert!(error(r#"{"content": "Yes", "action": {"id": "yes"}}"#).starts_with("`action` must be"));
    }

    #[test]
    fn legacy_role_and_content_make_one_user_message() {
        let turn = parse(br#"{"role": "user", "content": "hello"}"#).unwrap();
        assert_eq!(turn.messages, [ChatMessage::user("hello")]);
        let turn = parse(br#"{"content": "no role", "messages": []}"#).unwrap();
        assert_eq!(turn.messages, [ChatMessage::user("no role")]);
        assert_eq!(turn.stable_user(), None);
    }

    #[test]
    fn an_unlinked_sender_is_keyed_by_connector_and_platform_user() {
        let turn = parse(
            br#"{"content": "x", "tenant_id": "t1", "user_id": null,
                 "channel": {"connector_id": "c1", "platform_user_id": "U9"}}"#,
        )
        .unwrap();
        assert_eq!(turn.stable_user().as_deref(), Some("t1:c1:U9"));
    }

    #[test]
    fn invalid_payloads_say_what_is_wrong() {
        assert!(error("not json").starts_with("the body is not JSON"));
        assert_eq!(error("[1]"), "the body must be a JSON object");
        assert_eq!(
            error(r#"{"tenant_id": "t"}"#),
            "the payload has neither `messages` nor `content`"
        );
        assert_eq!(error(r#"{"messages": "hi"}"#), "`messages` must be an array");
        assert_eq!(
            error(r#"{"messages": [{"role": "tool", "content": "x"}]}"#),
            "messages[0].role must be `system`, `user` or `assistant`, not `tool`"
        );
        assert_eq!(
            error(r#"{"messages": [{"role": "user", "content": "  "}]}"#),
            "messages[0].content is empty"
        );
        assert_eq!(
            error(r#"{"messages": [{"role": "user", "content": 3}]}"#),
            "messages[0].content must be a string"
        );
        assert_eq!(
            error(
                r#"{"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}"#
            ),
            "the last message must be the user's turn (role `user`), not `assistant`"
        );
        assert_eq!(
            error(r#"{"role": "assistant", "content": "x"}"#),
            "`role` must be `user` when `messages` is absent, not \"assistant\""
        );
        assert_eq!(error(r#"{"content": ""}"#), "`content` is empty");
    }
}
