//! Buttons as the console shows them: a tap's turn as a tap, an answer's choices as plain
//! labels (never buttons: tapping is the user's, on their platform), and the person's
//! "Choices" field read into choices (docs/console.md#choices-and-taps).

use askama::filters::HtmlSafe;
use askama::Template;

use super::html::{excerpt, when};
use crate::admin::messages::ReplyPartOut;
use crate::choices::{Choice, Choices, TapAction, MAX_CHOICES};
use crate::error::AppError;

/// "Tapped ‹Approve› on the answer to ‹turn›", with the answer's opening words when the page
/// has them.
#[derive(Template)]
#[template(path = "console/tap.html")]
pub struct Tap {
    id: String,
    label: String,
    turn: String,
    short: String,
    words: Option<String>,
    value: Option<String>,
}

/// Rendered by its own template, which escapes every value.
impl HtmlSafe for Tap {}

pub fn tap(action: &TapAction, answer: Option<&str>) -> Tap {
    let turn = action.message_id.0.to_string();
    Tap {
        id: action.id.clone(),
        label: action.label.clone(),
        short: turn.get(..8).unwrap_or(&turn).to_owned(),
        turn,
        words: answer.map(|a| excerpt(a, 80)),
        value: action.value.as_ref().map(|v| excerpt(&v.to_string(), 200)),
    }
}

/// The choices posted with a part, the chosen one marked; `None` for a part without. Each
/// label is styled like the button it was, but no control; a link shows its URL as text.
#[derive(Template)]
#[template(path = "console/offered.html")]
pub struct Offered {
    after: &'static str,
    items: Vec<OfferedItem>,
}

impl HtmlSafe for Offered {}

struct OfferedItem {
    index: usize,
    style: &'static str,
    label: String,
    url: Option<String>,
    /// Who chose it, and when.
    chosen: Option<(String, String)>,
}

pub fn offered(part: &ReplyPartOut) -> Option<Offered> {
    let offered = part.choices.as_ref()?;
    let items = offered
        .choices
        .items
        .iter()
        .enumerate()
        .map(|(index, choice)| OfferedItem {
            index,
            style: choice.style.map(|s| s.as_str()).unwrap_or("plain"),
            label: choice.label.trim().to_owned(),
            url: choice.url.clone(),
            chosen: part
                .chosen
                .as_ref()
                .filter(|c| c.index == index)
                .map(|c| (c.by.clone(), when(c.at))),
        })
        .collect();
    let after = if offered.choices.reusable {
        "stay open after a tap"
    } else {
        "close after the first tap"
    };
    Some(Offered { after, items })
}

/// An edit part's note: it changed part `edit_of`'s message rather than posting one.
#[derive(Template)]
#[template(source = r#"<span class="edit">edits part #{{ of }}</span>"#, ext = "html")]
pub struct EditNote {
    of: i32,
}

impl HtmlSafe for EditNote {}

pub fn edit_note(part: &ReplyPartOut) -> Option<EditNote> {
    part.edit_of.map(|of| EditNote { of })
}

/// The person's "Choices" field: one label per line, each a reply whose id is its label;
/// `Label | https://…` is a link. Blank: no choices. The platform's own limits are checked
/// where the API checks an agent's.
pub fn from_field(field: &str) -> Result<Option<Vec<Choice>>, AppError> {
    let items: Vec<Choice> = field
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .map(choice_of_line)
        .collect();
    if items.is_empty() {
        return Ok(None);
    }
    if items.len() > MAX_CHOICES {
        let message = format!("Choices: at most {MAX_CHOICES}, one per line");
        return Err(AppError::Unprocessable(message));
    }
    let choices = Choices {
        items,
        reusable: false,
    };
    choices
        .check()
        .map_err(|e| AppError::Unprocessable(format!("Choices: {e}")))?;
    Ok(Some(choices.items))
}

fn choice_of_line(line: &str) -> Choice {
    let link = line
        .rsplit_once('|')
        .map(|(label, url)| (label.trim(), url.trim()))
        .filter(|(_, url)| url.starts_with("https://") || url.starts_with("http://"));
    let (id, label, url) = match link {
        Some((label, url)) => (None, label, Some(url.to_owned())),
        None => (Some(line.to_owned()), line, None),
    };
    Choice {
        id,
        label: label.to_owned(),
        style: None,
        url,
        value: None,
        toast: None,
    }
}

/// The answer text of the turn `action` answered, when `turns` has it.
pub fn answer_in<'a>(
    action: &TapAction,
    turns: impl IntoIterator<Item = (uuid::Uuid, Option<&'a str>)>,
) -> Option<&'a str> {
    turns
        .into_iter()
        .find(|(id, _)| *id == action.message_id.0)
        .and_then(|(_, answer)| answer)
}

#[cfg(test)]
mod tests {
    use super::super::html::RenderPage;
    use super::*;

    #[test]
    fn each_line_is_a_choice_and_a_trailing_url_makes_a_link() {
        let items = from_field("Approve\r\n\n  Reject  \nPolicy | https://example.com/p\n")
            .map_err(|e| e.to_string())
            .expect("three good lines");
        let items = items.expect("choices");
        assert_eq!(items.len(), 3);
        assert_eq!(
            (items[0].id.as_deref(), items[0].label.as_str()),
            (Some("Approve"), "Approve")
        );
        assert_eq!(items[1].label, "Reject");
        assert_eq!(
            (items[2].id.as_deref(), items[2].url.as_deref()),
            (None, Some("https://example.com/p"))
        );
        assert!(matches!(from_field(" \n "), Ok(None)));
    }

    #[test]
    fn too_many_long_or_repeated_labels_are_refused_with_a_reason() {
        let refused = |field: &str| from_field(field).err().map(|e| e.to_string()).unwrap_or_default();
        let many = (0..26).map(|i| format!("L{i}\n")).collect::<String>();
        assert!(refused(&many).contains("at most 25"));
        assert!(refused(&"x".repeat(76)).contains("over 75"));
        assert!(refused("Yes\nYes").contains("used twice"));
    }

    #[test]
    fn labels_urls_and_values_are_escaped() {
        let action = TapAction {
            id: "<b>".into(),
            label: "<script>".into(),
            value: Some(serde_json::json!({"x": "</code>"})),
            message_id: crate::domain::MessageId::new(),
        };
        let html = tap(&action, Some("\"quoted\" <i>")).render_page();
        assert!(!html.contains("<script>") && !html.contains("<b>") && !html.contains("<i>"));
        assert!(
            html.contains("&#60;script&#62;") && html.contains("&#60;/code&#62;"),
            "{html}"
        );
    }
}
