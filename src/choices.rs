//! Choices an answer offers as buttons, and the tap that comes back
//! (docs/agent.md#offering-choices).
//!
//! One declaration for every platform: each platform checks its own limits
//! (`PlatformApi::check_choices`) and renders the buttons when it sends. What travels to the
//! platform is a [`ButtonId`], a short random token of ours and the choice's place in the
//! list, so the agent's ids and values can be long, stay here, and nothing the platform
//! sends back is trusted: a tap is looked up by its token, under the tenant's row-level
//! security, and must come from the chat the answer was posted in.

use std::fmt;
use std::str::FromStr;

use rand::distributions::Alphanumeric;
use rand::Rng;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::domain::MessageId;

/// Longest agent id of a choice; it never travels to the platform.
pub const MAX_ID_CHARS: usize = 1000;
/// Slack's `text` of a button; the other platforms check shorter labels themselves.
pub const MAX_LABEL_CHARS: usize = 75;
/// A choice's `value`, as JSON.
pub const MAX_VALUE_BYTES: usize = 2000;
/// Telegram's `answerCallbackQuery` text.
pub const MAX_TOAST_CHARS: usize = 200;
pub const MAX_URL_CHARS: usize = 2000;
/// Slack's actions block; Telegram and WhatsApp allow fewer, and say so.
pub const MAX_CHOICES: usize = 25;

const TOKEN_CHARS: usize = 10;

/// One button: a reply (`id`, the tap comes back as a turn) or a link (`url`, opened by the
/// person's app; no turn).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Choice {
    /// The agent's own id, given back with the tap. Required unless `url` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    pub label: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub style: Option<ChoiceStyle>,
    /// A link button: the platform opens it, nothing comes back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Any JSON the agent wants back with the tap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub value: Option<Value>,
    /// A short note the person sees when they tap (Telegram shows it; the others do not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub toast: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ChoiceStyle {
    Primary,
    Danger,
}

impl ChoiceStyle {
    /// The name Slack's buttons and Telegram's both use.
    pub fn as_str(self) -> &'static str {
        match self {
            ChoiceStyle::Primary => "primary",
            ChoiceStyle::Danger => "danger",
        }
    }
}

impl Choice {
    pub fn is_link(&self) -> bool {
        self.url.is_some()
    }
}

/// The choices of one answer. Once one is tapped the others close (a later tap is dropped
/// as `choice_already_made`) unless they are `reusable`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Choices {
    pub items: Vec<Choice>,
    #[serde(default)]
    pub reusable: bool,
}

#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
#[error("{0}")]
pub struct InvalidChoices(pub String);

fn invalid(message: impl Into<String>) -> InvalidChoices {
    InvalidChoices(message.into())
}

impl Choices {
    /// `"choices": [...]` and `"choices_reusable"` of an answer object. A `choices` list whose
    /// items carry `message` is an OpenAI completion, not buttons: `None`.
    pub fn from_answer(answer: &Value) -> Result<Option<Choices>, InvalidChoices> {
        let Some(list) = answer.get("choices") else {
            return Ok(None);
        };
        if is_completion(list) {
            return Ok(None);
        }
        let items: Vec<Choice> =
            serde_json::from_value(list.clone()).map_err(|e| invalid(format!("`choices`: {e}")))?;
        let reusable = match answer.get("choices_reusable") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(reusable)) => *reusable,
            Some(_) => return Err(invalid("`choices_reusable` must be a boolean")),
        };
        let choices = Choices { items, reusable };
        choices.check()?;
        Ok(Some(choices))
    }

    /// What holds on every platform; each platform then checks its own limits.
    pub fn check(&self) -> Result<(), InvalidChoices> {
        if self.items.is_empty() {
            return Err(invalid("`choices` is empty: leave it out instead"));
        }
        if self.items.len() > MAX_CHOICES {
            return Err(invalid(format!("at most {MAX_CHOICES} choices")));
        }
        let mut ids = std::collections::HashSet::new();
        for (at, choice) in self.items.iter().enumerate() {
            check_one(choice).map_err(|e| invalid(format!("choice {at}: {}", e.0)))?;
            if let Some(id) = &choice.id {
                if !ids.insert(id.as_str()) {
                    return Err(invalid(format!("choice {at}: the id `{id}` is used twice")));
                }
            }
        }
        Ok(())
    }

    /// The reply choices (not links), with their place in `items`.
    pub fn replies(&self) -> impl Iterator<Item = (usize, &Choice)> {
        self.items.iter().enumerate().filter(|(_, c)| !c.is_link())
    }

    pub fn links(&self) -> impl Iterator<Item = &Choice> {
        self.items.iter().filter(|c| c.is_link())
    }
}

/// An OpenAI chat completion's `choices`: objects with a `message`.
pub fn is_completion(list: &Value) -> bool {
    list.as_array()
        .and_then(|items| items.first())
        .is_some_and(|first| first.get("message").is_some())
}

fn check_one(choice: &Choice) -> Result<(), InvalidChoices> {
    let label = choice.label.trim();
    if label.is_empty() {
        return Err(invalid("`label` is empty"));
    }
    if label.chars().count() > MAX_LABEL_CHARS {
        return Err(invalid(format!("`label` is over {MAX_LABEL_CHARS} characters")));
    }
    match (&choice.id, &choice.url) {
        (None, None) => return Err(invalid("needs an `id` (a reply) or a `url` (a link)")),
        (Some(id), _) if id.is_empty() || id.chars().count() > MAX_ID_CHARS => {
            return Err(invalid(format!("`id` must be 1 to {MAX_ID_CHARS} characters")))
        }
        _ => {}
    }
    if let Some(url) = &choice.url {
        check_url(url)?;
    }
    if let Some(value) = &choice.value {
        if value.to_string().len() > MAX_VALUE_BYTES {
            return Err(invalid(format!(
                "`value` is over {MAX_VALUE_BYTES} bytes of JSON"
            )));
        }
    }
    if choice
        .toast
        .as_ref()
        .is_some_and(|t| t.chars().count() > MAX_TOAST_CHARS)
    {
        return Err(invalid(format!("`toast` is over {MAX_TOAST_CHARS} characters")));
    }
    Ok(())
}

/// The person's app opens it: an absolute `https` (or `http`) URL, nothing else.
fn check_url(url: &str) -> Result<(), InvalidChoices> {
    if url.chars().count() > MAX_URL_CHARS {
        return Err(invalid(format!("`url` is over {MAX_URL_CHARS} characters")));
    }
    match reqwest::Url::parse(url) {
        Ok(parsed) if matches!(parsed.scheme(), "https" | "http") && parsed.host().is_some() => Ok(()),
        _ => Err(invalid("`url` must be an absolute http(s) URL")),
    }
}

/// A random token naming one answer's choices; its buttons carry it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ChoiceToken(String);

impl ChoiceToken {
    pub fn new() -> Self {
        let token = rand::thread_rng()
            .sample_iter(&Alphanumeric)
            .take(TOKEN_CHARS)
            .map(char::from)
            .collect();
        Self(token)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Default for ChoiceToken {
    fn default() -> Self {
        Self::new()
    }
}

/// What a button carries to the platform and back: `<token>.<index>`, at most 13 bytes,
/// within every platform's limit (Telegram's `callback_data` is 64).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ButtonId {
    pub token: ChoiceToken,
    pub index: usize,
}

impl fmt::Display for ButtonId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.token.0, self.index)
    }
}

impl FromStr for ButtonId {
    type Err = ();

    /// Anything not shaped like ours is no button of ours.
    fn from_str(s: &str) -> Result<Self, ()> {
        let (token, index) = s.split_once('.').ok_or(())?;
        if token.len() != TOKEN_CHARS || !token.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return Err(());
        }
        let index: usize = index.parse().map_err(|_| ())?;
        if index >= MAX_CHOICES || index.to_string().len() != s.len() - TOKEN_CHARS - 1 {
            return Err(());
        }
        Ok(ButtonId {
            token: ChoiceToken(token.to_owned()),
            index,
        })
    }
}

/// The choices as posted with a reply part: the agent's declaration under its token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Offered {
    #[schema(value_type = String)]
    pub token: ChoiceToken,
    #[serde(flatten)]
    pub choices: Choices,
}

impl Offered {
    pub fn new(choices: Choices) -> Self {
        Self {
            token: ChoiceToken::new(),
            choices,
        }
    }

    pub fn button(&self, index: usize) -> ButtonId {
        ButtonId {
            token: self.token.clone(),
            index,
        }
    }
}

/// Which choice was made, by whom, with which tap (`key`, the tap's idempotency key, so the
/// same tap delivered again is recognised as itself and not as a second tap).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Chosen {
    pub index: usize,
    /// The platform user who tapped.
    pub by: String,
    pub key: String,
    pub at: chrono::DateTime<chrono::Utc>,
}

/// A tap as the agent receives it: its own id and value, the label, and the turn whose
/// answer offered the choice.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TapAction {
    pub id: String,
    pub label: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub value: Option<Value>,
    #[schema(value_type = String, format = Uuid)]
    pub message_id: MessageId,
}

impl TapAction {
    /// `None` for a link, which is no reply.
    pub fn of(offered: &Offered, index: usize, answered: MessageId) -> Option<Self> {
        let choice = offered.choices.items.get(index)?;
        Some(Self {
            id: choice.id.clone()?,
            label: choice.label.trim().to_owned(),
            value: choice.value.clone(),
            message_id: answered,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn read(answer: Value) -> Result<Option<Choices>, InvalidChoices> {
        Choices::from_answer(&answer)
    }

    #[test]
    fn an_answer_offers_replies_and_links() {
        let choices = read(json!({"content": "Book it?", "choices": [
            {"id": "yes", "label": "Yes", "style": "primary", "value": {"slot": 3}, "toast": "Booked"},
            {"label": "See times", "url": "https://example.com/times"}
        ]}))
        .unwrap()
        .unwrap();
        assert_eq!(choices.replies().count(), 1);
        assert_eq!(choices.links().count(), 1);
        assert!(!choices.reusable);
        let reusable =
            read(json!({"content": "x", "choices": [{"id": "a", "label": "A"}], "choices_reusable": true}));
        assert!(reusable.unwrap().unwrap().reusable);
    }

    #[test]
    fn an_openai_completion_is_no_choices() {
        let completion =
            json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}}]});
        assert_eq!(read(completion).unwrap(), None);
        assert_eq!(read(json!({"content": "x"})).unwrap(), None);
    }

    #[test]
    fn what_no_platform_could_show_is_refused_with_its_reason() {
        let refused = |choices: Value| read(json!({"content": "x", "choices": choices})).unwrap_err().0;
        assert!(refused(json!([])).contains("empty"));
        assert!(refused(json!([{"label": "A"}])).contains("needs an `id`"));
        assert!(refused(json!([{"id": "a", "label": " "}])).contains("`label` is empty"));
        assert!(refused(json!([{"id": "a", "label": "x".repeat(76)}])).contains("over 75"));
        assert!(
            refused(json!([{"id": "a", "label": "A"}, {"id": "a", "label": "B"}])).contains("used twice")
        );
        assert!(refused(json!([{"label": "A", "url": "javascript:alert(1)"}])).contains("http(s)"));
        assert!(refused(json!([{"id": "a", "label": "A", "value": "v".repeat(2100)}])).contains("`value`"));
        assert!(refused(json!([{"id": "a", "label": "A", "colour": "red"}])).contains("unknown field"));
        let many: Vec<Value> = (0..26)
            .map(|i| json!({"id": i.to_string(), "label": "L"}))
            .collect();
        assert!(refused(Value::Array(many)).contains("at most 25"));
    }

    #[test]
    fn a_button_id_is_ours_only_when_it_has_our_shape() {
        let offered = Offered::new(Choices {
            items: vec![],
            reusable: false,
        });
        let id = offered.button(7);
        assert_eq!(id.to_string().len(), 12);
        assert_eq!(id.to_string().parse::<ButtonId>(), Ok(id.clone()));
        for foreign in [
            "",
            "approve",
            "abc.1",
            "abcdefghij.x",
            "abcdefghij.07",
            "abcdefghij.25",
            "abcdefgh-j.1",
        ] {
            assert!(foreign.parse::<ButtonId>().is_err(), "{foreign}");
        }
    }
}
