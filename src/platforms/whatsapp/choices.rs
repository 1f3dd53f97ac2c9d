//! Choices as WhatsApp interactive messages
//! (developers.facebook.com/documentation/business-messaging/whatsapp/messages/interactive-reply-buttons-messages,
//! …/interactive-list-messages, …/interactive-cta-url-messages): up to three reply
//! buttons, four to ten as a list, a lone link as a `cta_url` button. WhatsApp cannot mix
//! replies and links in one message, so links beside replies are written into the text.
//! A sent message cannot be edited, so its buttons stay tappable.

use serde_json::{json, Value};

use crate::choices::{Choices, InvalidChoices, Offered};

const MAX_BUTTONS: usize = 3;
const MAX_ROWS: usize = 10;
const BUTTON_TITLE_CHARS: usize = 20;
const ROW_TITLE_CHARS: usize = 24;
const BUTTON_BODY_UNITS: usize = 1024;
const LIST_BODY_UNITS: usize = 4096;
/// The list's button: WhatsApp requires one, the agent's choices do not name it.
const LIST_BUTTON: &str = "Choose";

enum Shape {
    Buttons,
    List,
    Link,
    /// Links only, more than one: they are written into the text.
    Text,
}

fn shape(choices: &Choices) -> Shape {
    match (choices.replies().count(), choices.links().count()) {
        (0, 1) => Shape::Link,
        (0, _) => Shape::Text,
        (replies, _) if replies <= MAX_BUTTONS => Shape::Buttons,
        _ => Shape::List,
    }
}

pub(super) fn check(choices: &Choices) -> Result<(), InvalidChoices> {
    let replies = choices.replies().count();
    if replies > MAX_ROWS {
        return Err(InvalidChoices(format!(
            "WhatsApp shows at most {MAX_ROWS} choices (a list); this answer has {replies}"
        )));
    }
    let (titles, max): (Vec<&str>, usize) = match shape(choices) {
        Shape::Buttons => (
            choices.replies().map(|(_, c)| c.label.trim()).collect(),
            BUTTON_TITLE_CHARS,
        ),
        Shape::List => (
            choices.replies().map(|(_, c)| c.label.trim()).collect(),
            ROW_TITLE_CHARS,
        ),
        Shape::Link => (
            choices.links().map(|c| c.label.trim()).collect(),
            BUTTON_TITLE_CHARS,
        ),
        Shape::Text => (Vec::new(), 0),
    };
    if let Some(long) = titles.iter().find(|t| t.chars().count() > max) {
        return Err(InvalidChoices(format!(
            "WhatsApp cuts labels here at {max} characters: `{long}` is longer"
        )));
    }
    let mut seen = std::collections::HashSet::new();
    if let Some(twice) = titles.iter().find(|t| !seen.insert(**t)) {
        return Err(InvalidChoices(format!(
            "WhatsApp needs labels that differ: `{twice}` is used twice"
        )));
    }
    Ok(())
}

/// The body's limit, less the links written into it.
pub(super) fn text_limit(choices: &Choices) -> Option<usize> {
    let links = links_text(choices).encode_utf16().count();
    match shape(choices) {
        Shape::Buttons | Shape::Link => Some(BUTTON_BODY_UNITS.saturating_sub(links)),
        Shape::List | Shape::Text => Some(LIST_BODY_UNITS.saturating_sub(links)),
    }
}

/// Links beside replies (or several links), one line each after the text.
fn links_text(choices: &Choices) -> String {
    if matches!(shape(choices), Shape::Link) {
        return String::new();
    }
    choices
        .links()
        .map(|link| {
            format!(
                "\n{}: {}",
                link.label.trim(),
                link.url.as_deref().unwrap_or_default()
            )
        })
        .collect()
}

/// The message's `type` and its object: `interactive`, or `text` for links only.
pub(super) fn message(offered: &Offered, text: &str) -> (&'static str, Value) {
    let choices = &offered.choices;
    let body = format!("{text}{}", links_text(choices));
    let replies = || {
        choices
            .replies()
            .map(|(index, choice)| (offered.button(index).to_string(), choice))
    };
    let interactive = match shape(choices) {
        Shape::Text => return ("text", json!({ "preview_url": false, "body": body })),
        Shape::Link => {
            let link = choices.links().next().expect("a link, by its shape");
            json!({
                "type": "cta_url",
                "body": { "text": body },
                "action": { "name": "cta_url", "parameters": {
                    "display_text": link.label.trim(), "url": link.url,
                } },
            })
        }
        Shape::Buttons => {
            let buttons: Vec<Value> = replies()
                .map(|(id, c)| json!({ "type": "reply", "reply": { "id": id, "title": c.label.trim() } }))
                .collect();
            json!({ "type": "button", "body": { "text": body }, "action": { "buttons": buttons } })
        }
        Shape::List => {
            let rows: Vec<Value> = replies()
                .map(|(id, c)| json!({ "id": id, "title": c.label.trim() }))
                .collect();
            json!({
                "type": "list",
                "body": { "text": body },
                "action": { "button": LIST_BUTTON, "sections": [{ "rows": rows }] },
            })
        }
    };
    ("interactive", interactive)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::choices::Choice;

    fn choices(labels: &[&str], links: usize) -> Choices {
        let mut items: Vec<Choice> = labels
            .iter()
            .map(|label| serde_json::from_value(json!({"id": label, "label": label})).unwrap())
            .collect();
        items.extend((0..links).map(|i| {
            serde_json::from_value(json!({"label": format!("Link {i}"), "url": format!("https://e.com/{i}")}))
                .unwrap()
        }));
        Choices {
            items,
            reusable: false,
        }
    }

    #[test]
    fn the_count_chooses_buttons_a_list_or_a_link() {
        let kind = |c: Choices| message(&Offered::new(c), "Pick").1["type"].clone();
        assert_eq!(kind(choices(&["A", "B", "C"], 0)), "button");
        assert_eq!(kind(choices(&["A", "B", "C", "D"], 0)), "list");
        assert_eq!(kind(choices(&[], 1)), "cta_url");
        let (kind, text) = message(&Offered::new(choices(&["Yes"], 1)), "Pick");
        assert_eq!(kind, "interactive");
        assert_eq!(text["body"]["text"], "Pick\nLink 0: https://e.com/0");
        assert_eq!(message(&Offered::new(choices(&[], 2)), "Pick").0, "text");
    }

    #[test]
    fn what_whatsapp_would_refuse_is_refused_first() {
        assert!(check(&choices(&["Approve", "Reject"], 0)).is_ok());
        let eleven: Vec<String> = (0..11).map(|i| format!("o{i}")).collect();
        let eleven: Vec<&str> = eleven.iter().map(String::as_str).collect();
        assert!(check(&choices(&eleven, 0)).unwrap_err().0.contains("at most 10"));
        assert!(check(&choices(&["A label of 21 chars.."], 0))
            .unwrap_err()
            .0
            .contains("20"));
        assert!(check(&choices(&["A", "B", "C", "A row of 22 characters"], 0)).is_ok());
        let twice = Choices {
            items: vec![
                serde_json::from_value(json!({"id": "a", "label": "Same"})).unwrap(),
                serde_json::from_value(json!({"id": "b", "label": "Same"})).unwrap(),
            ],
            reusable: false,
        };
        assert!(check(&twice).unwrap_err().0.contains("differ"));
    }
}
