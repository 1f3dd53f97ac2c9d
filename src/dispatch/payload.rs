//! The dispatch sent to the agent and its answer read back into reply parts
//! (docs/agent.md#the-dispatch-what-an-agent-receives-and-answers).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::choices::{is_completion, Choices, InvalidChoices, TapAction};
use crate::db::messages::MessageRow;
use crate::delivery::split::Ask;
use crate::media::outgoing::FileIn;
use crate::media::token::UrlMinter;
use crate::media::AttachmentOut;

/// A user's message with files keeps `content` a string (the caption, or `""`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ChatMessage {
    pub role: String,
    pub content: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attachments: Vec<AttachmentOut>,
    /// On an assistant turn the agent did not answer: who wrote it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<TurnMetadata>,
    /// On a tap's turn (the current one or in the history): the choice it made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<TapAction>,
    /// On a slash command's turn: the command (`/ask`); `content` is what followed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
}

/// `{"from": "person", "author": "…"}` on a person's answer, `{"from": "agent"}` on a
/// message the agent wrote first, `{"awaiting_answer": true}` on a user message the agent
/// has yet to finish answering.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TurnMetadata {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<crate::domain::TurnOrigin>,
    /// The name of the admin key a person wrote with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub author: Option<String>,
    /// On a user message whose answer the agent is still to post (it answered 202): the
    /// answer so far follows it, if any.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub awaiting_answer: bool,
}

impl ChatMessage {
    pub fn user(content: impl Into<String>) -> Self {
        Self {
            role: "user".into(),
            content: content.into(),
            attachments: Vec::new(),
            metadata: None,
            action: None,
            command: None,
        }
    }

    pub fn assistant(content: impl Into<String>) -> Self {
        Self {
            role: "assistant".into(),
            content: content.into(),
            attachments: Vec::new(),
            metadata: None,
            action: None,
            command: None,
        }
    }

    pub fn user_turn(message: &MessageRow) -> Self {
        let attachments = message
            .attachments
            .as_deref()
            .map(|files| AttachmentOut::of_turn(message.id, files))
            .unwrap_or_default();
        Self {
            attachments,
            action: message.action.clone(),
            command: message.command.clone(),
            ..Self::user(message.request_content.clone())
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChannelOut {
    pub platform: String,
    pub connector_id: String,
    pub chat_id: String,
    pub thread_id: Option<String>,
    pub platform_user_id: String,
}

/// `role`/`content` repeat the current turn for agents that predate `messages[]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DispatchOut {
    pub messages: Vec<ChatMessage>,
    pub role: String,
    pub content: String,
    pub tenant_id: String,
    pub user_id: Option<String>,
    pub message_id: String,
    pub channel: ChannelOut,
    /// Where to post the answer instead, after answering `202 Accepted`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply: Option<ReplyTo>,
    /// The current turn is a tap on a choice: which (also on its `messages[]` entry).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<TapAction>,
    /// The current turn is a slash command: which (also on its `messages[]` entry).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
}

/// The turn's events URL (docs/agent.md#answering-later): signed POSTs of `status`,
/// `message` and `done` events, until `expires_at` (the async horizon, counted from the
/// dispatch; the 202 sets the turn's own).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplyTo {
    pub url: String,
    pub expires_at: chrono::DateTime<chrono::Utc>,
}

impl ReplyTo {
    pub fn of(base_url: &str, message: &MessageRow, expires_at: chrono::DateTime<chrono::Utc>) -> Self {
        Self {
            url: format!(
                "{base_url}/v1/agent/{}/turns/{}/events",
                message.tenant_id, message.id
            ),
            expires_at,
        }
    }
}

pub fn build(message: &MessageRow, history: Vec<ChatMessage>, urls: &UrlMinter, now: i64) -> DispatchOut {
    let mut messages = history;
    messages.push(ChatMessage::user_turn(message));
    let tenant = message.tenant_id;
    for attachment in messages.iter_mut().flat_map(|m| m.attachments.iter_mut()) {
        attachment.url = urls.url_for(tenant, attachment, now);
    }
    DispatchOut {
        messages,
        role: "user".into(),
        content: message.request_content.clone(),
        tenant_id: message.tenant_id.to_string(),
        user_id: message.user_id.clone(),
        message_id: message.id.to_string(),
        channel: ChannelOut {
            platform: message.platform.to_string(),
            connector_id: message.connector_id.to_string(),
            chat_id: message.address.chat_id.clone(),
            thread_id: message.address.thread_id.clone(),
            platform_user_id: message.address.platform_user_id.clone(),
        },
        reply: None,
        action: message.action.clone(),
        command: message.command.clone(),
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("the agent's answer is not a supported shape: {0}")]
pub struct InvalidAnswer(pub String);

/// What the agent answered: the reply parts, the choices offered with the last, the files
/// and reaction that follow them, and whether it asks for a person.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Answer {
    pub parts: Vec<String>,
    pub handoff: Option<HandoffAsk>,
    pub choices: Option<Choices>,
    pub files: Vec<FileIn>,
    pub react: Option<String>,
}

impl Answer {
    /// What it asks to post, for `delivery::split::reply`.
    pub fn ask(&self) -> Ask {
        Ask {
            texts: self.parts.clone(),
            choices: self.choices.clone(),
            files: self.files.clone(),
            react: self.react.clone(),
        }
    }
}

/// Why an answer cannot be used: its shape (perhaps a passing fault of the agent), or
/// choices no platform could show (the same answer would be refused again).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AnswerError {
    #[error(transparent)]
    Shape(#[from] InvalidAnswer),
    #[error("the agent's choices cannot be shown: {0}")]
    Choices(#[from] InvalidChoices),
    /// `attachments` or `react` malformed.
    #[error("the agent's files or reaction cannot be read: {0}")]
    Extras(String),
}

/// `"handoff": {"reason": "…"}` (or `true`) on an answer: post it, then hold the
/// conversation for a person (docs/agent.md#asking-for-a-person).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HandoffAsk {
    pub reason: Option<String>,
}

/// Longer reasons are cut: the reason is shown in lists, not read as a message.
pub const HANDOFF_REASON_MAX: usize = 500;

/// A JSON answer with its `handoff` flag and its choices.
pub fn parse_reply(body: &[u8]) -> Result<Answer, AnswerError> {
    let value: Value = serde_json::from_slice(body).map_err(|e| InvalidAnswer(format!("not JSON ({e})")))?;
    let handoff = handoff_of(&value)?;
    let parts = answer_parts(&value)?;
    let choices = Choices::from_answer(&value)?;
    if choices.is_some() && parts.is_empty() {
        return Err(InvalidChoices("choices need text to go with: `content` is empty".into()).into());
    }
    Ok(Answer {
        parts,
        handoff,
        choices,
        files: files_of(&value).map_err(AnswerError::Extras)?,
        react: react_of(&value).map_err(AnswerError::Extras)?,
    })
}

/// `attachments` beside the answer's text, and on each assistant message of a `messages`
/// answer, in order (docs/agent.md#files-and-reactions-in-answers).
pub fn files_of(value: &Value) -> Result<Vec<FileIn>, String> {
    let on_messages = value
        .get("messages")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|m| m.get("role").and_then(Value::as_str).unwrap_or("assistant") == "assistant")
        .filter_map(|m| m.get("attachments"));
    let mut files = Vec::new();
    for list in value.get("attachments").into_iter().chain(on_messages) {
        if list.is_null() {
            continue;
        }
        let more: Vec<FileIn> =
            serde_json::from_value(list.clone()).map_err(|e| format!("`attachments`: {e}"))?;
        files.extend(more);
    }
    Ok(files)
}

/// `"react": "👀"` (or `null`).
pub fn react_of(value: &Value) -> Result<Option<String>, String> {
    match value.get("react") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(emoji)) if !emoji.trim().is_empty() && emoji.chars().count() <= 64 => {
            Ok(Some(emoji.trim().to_owned()))
        }
        Some(_) => Err("`react` must be an emoji or its name (1–64 characters)".into()),
    }
}

/// The `handoff` of an answer (a JSON body, or a stream's final event): `None` when absent,
/// `null` or `false`.
pub fn handoff_of(value: &Value) -> Result<Option<HandoffAsk>, InvalidAnswer> {
    match value.get("handoff") {
        None | Some(Value::Null) | Some(Value::Bool(false)) => Ok(None),
        Some(Value::Bool(true)) => Ok(Some(HandoffAsk::default())),
        Some(Value::Object(ask)) => {
            let reason = match ask.get("reason") {
                None | Some(Value::Null) => None,
                Some(Value::String(reason)) => Some(reason.chars().take(HANDOFF_REASON_MAX).collect()),
                Some(_) => return Err(InvalidAnswer("`handoff.reason` must be a string".into())),
            };
            Ok(Some(HandoffAsk { reason }))
        }
        Some(_) => Err(InvalidAnswer(
            "`handoff` must be an object (`{\"reason\": \"…\"}`) or a boolean".into(),
        )),
    }
}

/// Anything but an accepted shape is an error, never an empty answer.
pub fn parse_answer(body: &[u8]) -> Result<Vec<String>, InvalidAnswer> {
    let value: Value = serde_json::from_slice(body).map_err(|e| InvalidAnswer(format!("not JSON ({e})")))?;
    answer_parts(&value)
}

fn answer_parts(value: &Value) -> Result<Vec<String>, InvalidAnswer> {
    let parts = if let Some(content) = value.get("content") {
        content_parts(content)?
    } else if let Some(messages) = value.get("messages").and_then(Value::as_array) {
        assistant_parts(messages)?
    } else if let Some(choices) = value
        .get("choices")
        .filter(|list| is_completion(list))
        .and_then(Value::as_array)
    {
        let first = choices
            .first()
            .ok_or_else(|| InvalidAnswer("`choices` is empty".into()))?;
        let content = first
            .pointer("/message/content")
            .ok_or_else(|| InvalidAnswer("no choices[0].message.content".into()))?;
        content_parts(content)?
    } else if let Some(output) = value.get("output").and_then(Value::as_array) {
        output_parts(output)?
    } else {
        return Err(InvalidAnswer(
            "expected `content`, `messages`, `choices` (a completion's) or `output`".into(),
        ));
    };
    Ok(parts.into_iter().filter(|part| !part.trim().is_empty()).collect())
}

/// A list of text blocks makes one part.
fn content_parts(content: &Value) -> Result<Vec<String>, InvalidAnswer> {
    match content {
        Value::Null => Ok(Vec::new()),
        Value::String(text) => Ok(vec![text.clone()]),
        Value::Array(blocks) => {
            let texts: Vec<&str> = blocks
                .iter()
                .filter_map(|b| b.get("text").and_then(Value::as_str))
                .collect();
            if texts.is_empty() && !blocks.is_empty() {
                return Err(InvalidAnswer("content blocks carry no `text`".into()));
            }
            Ok(vec![texts.concat()])
        }
        _ => Err(InvalidAnswer(
            "`content` must be a string or a list of text blocks".into(),
        )),
    }
}

/// Other roles are skipped: an agent may echo the conversation back.
fn assistant_parts(messages: &[Value]) -> Result<Vec<String>, InvalidAnswer> {
    let mut parts = Vec::new();
    for message in messages {
        let role = message.get("role").and_then(Value::as_str).unwrap_or("assistant");
        if role != "assistant" {
            continue;
        }
        let content = message
            .get("content")
            .ok_or_else(|| InvalidAnswer("a message has no `content`".into()))?;
        parts.extend(content_parts(content)?);
    }
    Ok(parts)
}

/// Reasoning and tool items are not for the user.
fn output_parts(output: &[Value]) -> Result<Vec<String>, InvalidAnswer> {
    let mut parts = Vec::new();
    for item in output
        .iter()
        .filter(|i| i.get("type").and_then(Value::as_str) == Some("message"))
    {
        let content = item
            .get("content")
            .ok_or_else(|| InvalidAnswer("an output message has no `content`".into()))?;
        parts.extend(content_parts(content)?);
    }
    Ok(parts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(body: &str) -> Result<Vec<String>, InvalidAnswer> {
        parse_answer(body.as_bytes())
    }

    #[test]
    fn reads_every_accepted_answer_shape() {
        assert_eq!(parts(r#"{"content": "hi"}"#).unwrap(), ["hi"]);
        assert_eq!(
            parts(r#"{"messages": [{"role": "assistant", "content": "one"}, {"role": "assistant", "content": "two"}]}"#)
                .unwrap(),
            ["one", "two"]
        );
        assert_eq!(
            parts(r#"{"id": "chatcmpl-1", "object": "chat.completion", "choices": [{"index": 0, "message": {"role": "assistant", "content": "from openai"}, "finish_reason": "stop"}]}"#).unwrap(),
            ["from openai"]
        );
        assert_eq!(
            parts(r#"{"output": [{"type": "reasoning", "summary": []}, {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "from ", "annotations": []}, {"type": "output_text", "text": "responses"}]}]}"#).unwrap(),
            ["from responses"]
        );
    }

    #[test]
    fn drops_whitespace_parts_and_skips_non_assistant_messages() {
        assert_eq!(
            parts(r#"{"messages": [{"role": "user", "content": "echo"}, {"role": "assistant", "content": "  \n"}, {"role": "assistant", "content": "kept"}]}"#).unwrap(),
            ["kept"]
        );
        assert_eq!(parts(r#"{"content": null}"#).unwrap(), Vec::<String>::new());
    }

    #[test]
    fn an_answer_may_ask_for_a_person() {
        let ask = |body: &str| parse_reply(body.as_bytes()).map(|a| (a.parts, a.handoff));
        assert_eq!(ask(r#"{"content": "hi"}"#).unwrap(), (vec!["hi".into()], None));
        assert_eq!(
            ask(r#"{"content": "A colleague will take over.", "handoff": {"reason": "refund over limit"}}"#)
                .unwrap(),
            (
                vec!["A colleague will take over.".into()],
                Some(HandoffAsk {
                    reason: Some("refund over limit".into())
                })
            )
        );
        assert_eq!(
            ask(r#"{"content": null, "handoff": true}"#).unwrap().1,
            Some(HandoffAsk::default())
        );
        assert_eq!(ask(r#"{"content": "x", "handoff": false}"#).unwrap().1, None);
        let long = format!(
            r#"{{"content": "x", "handoff": {{"reason": "{}"}}}}"#,
            "é".repeat(900)
        );
        let reason = ask(&long).unwrap().1.and_then(|h| h.reason).unwrap();
        assert_eq!(reason.chars().count(), HANDOFF_REASON_MAX);
        assert!(ask(r#"{"content": "x", "handoff": "yes"}"#).is_err());
        assert!(ask(r#"{"content": "x", "handoff": {"reason": 3}}"#).is_err());
    }

    #[test]
    fn unreadable_answers_are_errors_not_empty_replies() {
        assert!(parts("").is_err());
        assert!(parts("<html>502</html>").is_err());
        assert!(parts(r#"{"reply": "wrong field"}"#).is_err());
        assert!(parts(r#"{"content": 42}"#).is_err());
        assert!(parts(r#"{"choices": []}"#).is_err());
    }
}
