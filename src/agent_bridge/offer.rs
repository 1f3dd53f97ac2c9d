//! The choices the bridge's answers offer (docs/agent.md#the-agent-side-agent-bridge): the
//! echo's fixed Yes/No, and an upstream model's call of the one function tool the bridge
//! declares with `--choices-tool`. Nothing is read from a model's free text: choices come
//! only from that call, and a call that could not be shown is dropped with a warning, so
//! the text still goes out instead of a turn the gateway would refuse.

use serde::Deserialize;
use serde_json::{json, Value};

use crate::choices::{Choice, ChoiceStyle, Choices, InvalidChoices};
use crate::domain::Platform;
use crate::media::outgoing::FileIn;

/// The function the model calls to offer buttons.
pub const TOOL_NAME: &str = "offer_choices";

/// What the bridge answers the gateway: the text parts, the choices offered with the last,
/// and the files posted after them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reply {
    pub parts: Vec<String>,
    pub choices: Option<Choices>,
    pub attachments: Vec<FileIn>,
}

impl Reply {
    pub fn text(text: String) -> Self {
        Self {
            parts: vec![text],
            ..Self::default()
        }
    }

    pub fn of_parts(parts: Vec<String>) -> Self {
        Self {
            parts,
            ..Self::default()
        }
    }
}

/// The echo's question: `--echo --choices` offers it with every answer but a tap's.
pub fn echo_choices() -> Choices {
    let choice = |id: &str, label: &str, style| Choice {
        id: Some(id.to_owned()),
        label: label.to_owned(),
        style,
        url: None,
        value: None,
        toast: None,
    };
    Choices {
        items: vec![
            choice("yes", "Yes", Some(ChoiceStyle::Primary)),
            choice("no", "No", None),
        ],
        reusable: false,
    }
}

/// The tool added to the upstream request's `tools`. A tap comes back as the person's next
/// message, its content the label, so the call needs no result.
pub fn tool() -> Value {
    let choice = json!({
        "type": "object",
        "properties": {
            "id": {"type": "string", "description": "Your name for this choice (not shown)."},
            "label": {"type": "string", "description": "The button's text, short (up to 20 characters shows everywhere)."},
            "style": {"type": "string", "enum": ["primary", "danger"]},
            "url": {"type": "string", "description": "Makes it a link button the person's app opens; no message comes back."}
        },
        "required": ["id", "label"]
    });
    json!({
        "type": "function",
        "function": {
            "name": TOOL_NAME,
            "description": "Offer the person buttons to tap instead of typing, shown with your answer. \
                A tap comes back as the person's next message, whose content is the button's label. \
                Call it at most once, with your answer; it returns nothing.",
            "parameters": {
                "type": "object",
                "properties": {
                    "choices": {"type": "array", "items": choice, "minItems": 1, "maxItems": 10},
                    "reusable": {"type": "boolean", "description": "Keep the buttons after a tap (a menu)."},
                    "text": {"type": "string", "description": "The message the buttons go with, when you write no other text."}
                },
                "required": ["choices"]
            }
        }
    })
}

/// The arguments of an `offer_choices` call, read leniently: an unknown style is dropped, an
/// unknown field ignored; what no platform could show is refused by `Choices::check`.
#[derive(Debug, Deserialize)]
struct OfferIn {
    choices: Vec<ChoiceIn>,
    #[serde(default)]
    reusable: Option<bool>,
    #[serde(default)]
    text: Option<String>,
}

#[derive(Debug, Deserialize)]
struct ChoiceIn {
    #[serde(default)]
    id: Option<String>,
    label: String,
    #[serde(default)]
    style: Option<String>,
    #[serde(default)]
    url: Option<String>,
}

impl ChoiceIn {
    fn into_choice(self) -> Choice {
        let style = match self.style.as_deref() {
            Some("primary") => Some(ChoiceStyle::Primary),
            Some("danger") => Some(ChoiceStyle::Danger),
            _ => None,
        };
        Choice {
            id: self.id,
            label: self.label,
            style,
            url: self.url,
            value: None,
            toast: None,
        }
    }
}

/// The answer of a chat completion whose text is `parts`: with the choices of its
/// `offer_choices` call when they can be shown on `platform` (any platform's common limits
/// when the dispatch names none), else the text alone and a warning.
pub fn reply_of(parts: Vec<String>, completion: &Value, platform: Option<Platform>) -> Reply {
    let offer = match offered(completion, platform) {
        Ok(Some(offer)) => offer,
        Ok(None) => return Reply::of_parts(parts),
        Err(err) => {
            tracing::warn!(error = %err, "the upstream's {TOOL_NAME} call cannot be shown; answering with its text alone");
            return Reply::of_parts(parts);
        }
    };
    // The model may put its question in the call alone (`content` is often null beside a
    // tool call); its own text comes first.
    let parts = if parts.is_empty() {
        offer.text.into_iter().filter(|t| !t.trim().is_empty()).collect()
    } else {
        parts
    };
    if parts.is_empty() {
        tracing::warn!(
            "the upstream called {TOOL_NAME} without any text for the buttons to go with; no answer"
        );
        return Reply::default();
    }
    Reply {
        choices: Some(offer.choices),
        ..Reply::of_parts(parts)
    }
}

struct Offer {
    choices: Choices,
    text: Option<String>,
}

fn offered(completion: &Value, platform: Option<Platform>) -> Result<Option<Offer>, InvalidChoices> {
    let Some(call) = tool_call(completion) else {
        return Ok(None);
    };
    let offer = arguments(call)?;
    let choices = Choices {
        items: offer.choices.into_iter().map(ChoiceIn::into_choice).collect(),
        reusable: offer.reusable.unwrap_or(false),
    };
    choices.check()?;
    if let Some(platform) = platform {
        crate::platforms::of(platform).check_choices(&choices)?;
    }
    Ok(Some(Offer {
        choices,
        text: offer.text,
    }))
}

/// The first `offer_choices` call of the completion's message; calls of other names are
/// not ours to answer and are ignored.
fn tool_call(completion: &Value) -> Option<&Value> {
    let calls = completion.pointer("/choices/0/message/tool_calls")?.as_array()?;
    calls
        .iter()
        .find(|call| call.pointer("/function/name").and_then(Value::as_str) == Some(TOOL_NAME))
}

/// OpenAI sends the arguments as a JSON string; some compatible servers as an object.
fn arguments(call: &Value) -> Result<OfferIn, InvalidChoices> {
    let parsed = match call.pointer("/function/arguments") {
        Some(Value::String(text)) => serde_json::from_str(text),
        Some(object) => serde_json::from_value(object.clone()),
        None => return Err(InvalidChoices(format!("the {TOOL_NAME} call has no arguments"))),
    };
    parsed.map_err(|e| InvalidChoices(format!("the arguments of {TOOL_NAME}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn completion(content: Value, arguments: Value) -> Value {
        json!({"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": content,
            "tool_calls": [{"id": "call_1", "type": "function",
                            "function": {"name": TOOL_NAME, "arguments": arguments}}]}}]})
    }

    fn labels(reply: &Reply) -> Vec<&str> {
        let items = reply
            .choices
            .as_ref()
            .map(|c| c.items.as_slice())
            .unwrap_or_default();
        items.iter().map(|c| c.label.as_str()).collect()
    }

    #[test]
    fn a_call_as_a_string_or_an_object_offers_its_choices_with_the_text() {
        let arguments = r#"{"choices": [{"id": "y", "label": "Yes", "style": "primary"},
                                        {"id": "n", "label": "No", "style": "secondary"}], "reusable": true}"#;
        let reply = reply_of(
            vec!["Book it?".into()],
            &completion(json!("Book it?"), json!(arguments)),
            Some(Platform::Telegram),
        );
        assert_eq!(reply.parts, ["Book it?"]);
        assert_eq!(labels(&reply), ["Yes", "No"]);
        let choices = reply.choices.unwrap();
        assert!(choices.reusable);
        assert_eq!(choices.items[1].style, None, "an unknown style is dropped");

        let object = json!({"choices": [{"id": "a", "label": "A"}], "text": "Pick one"});
        let reply = reply_of(Vec::new(), &completion(Value::Null, object), None);
        assert_eq!(
            reply.parts,
            ["Pick one"],
            "the call's text when the message has none"
        );
        assert_eq!(labels(&reply), ["A"]);
    }

    #[test]
    fn a_call_that_could_not_be_shown_leaves_the_text_alone() {
        let text = || vec!["Which one?".to_owned()];
        let not_json = completion(json!("x"), json!("{not json"));
        let no_id = completion(json!("x"), json!({"choices": [{"label": "A"}]}));
        let many: Vec<Value> = (0..4)
            .map(|i| json!({"id": i.to_string(), "label": format!("a much longer label, number {i}")}))
            .collect();
        let too_long_for_whatsapp = completion(json!("x"), json!({ "choices": many }));
        for (case, body, platform) in [
            ("unreadable", not_json, None),
            ("neither id nor url", no_id, None),
            (
                "labels over WhatsApp's 20",
                too_long_for_whatsapp,
                Some(Platform::Whatsapp),
            ),
        ] {
            let reply = reply_of(text(), &body, platform);
            assert_eq!(reply, Reply::text("Which one?".into()), "{case}");
        }
        let no_text = completion(Value::Null, json!({"choices": [{"id": "a", "label": "A"}]}));
        assert_eq!(reply_of(Vec::new(), &no_text, None), Reply::default());
    }

    #[test]
    fn only_our_tool_is_read() {
        let mut other = completion(json!("hi"), json!({"choices": [{"id": "a", "label": "A"}]}));
        other["choices"][0]["message"]["tool_calls"][0]["function"]["name"] = "search".into();
        assert_eq!(reply_of(vec!["hi".into()], &other, None).choices, None);
        let plain = json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}}]});
        assert_eq!(reply_of(vec!["hi".into()], &plain, None).choices, None);
    }
}
