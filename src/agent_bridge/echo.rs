//! `agent-bridge --echo`: an agent without a model, for demos and tests. Its answers say
//! what it received (`echo: <text> (history: N turns)`), so a reader can check the history
//! the gateway sent; `--choices` and `--file` add the buttons and the picture an agent may
//! answer with, to show them without a model that makes them.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;

use super::inbound::Turn;
use super::offer::{self, Reply};
use super::png::ECHO_PNG;
use crate::dispatch::payload::ChatMessage;
use crate::media::outgoing::{FileIn, CAPTION_MAX_CHARS};

/// What the echo adds to its text.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EchoOptions {
    /// `--choices`: Yes/No with every answer but a tap's.
    pub choices: bool,
    /// `--file`: its picture with every answer but a tap's.
    pub file: bool,
}

pub fn echo_reply(messages: &[ChatMessage]) -> String {
    let Some((current, earlier)) = messages.split_last() else {
        return "echo: (nothing)".into();
    };
    format!("echo: {} {}", current.content, history_note(earlier))
}

/// The echo of `turn`. A tap is answered `echo: tapped <label> …` (with `choices`) or as the
/// words it stands for, and never with new choices or a picture: it closes a question.
pub fn echo_answer(turn: &Turn, options: EchoOptions) -> Reply {
    let earlier = &turn.messages[..turn.messages.len().saturating_sub(1)];
    if turn.action.is_some() {
        return match (&turn.action, options.choices) {
            (Some(tap), true) => Reply::text(format!("echo: tapped {} {}", tap.label, history_note(earlier))),
            _ => Reply::text(echo_reply(&turn.messages)),
        };
    }
    Reply {
        choices: options.choices.then(offer::echo_choices),
        attachments: options
            .file
            .then(|| echo_picture(&turn.current().content))
            .into_iter()
            .collect(),
        ..Reply::text(echo_reply(&turn.messages))
    }
}

/// `echo.png`, its caption `echo: <text>` cut to the gateway's 1,024 characters.
pub fn echo_picture(text: &str) -> FileIn {
    let caption: String = format!("echo: {text}").chars().take(CAPTION_MAX_CHARS).collect();
    FileIn {
        data: Some(STANDARD.encode(&*ECHO_PNG)),
        name: Some("echo.png".into()),
        mime: Some("image/png".into()),
        caption: Some(caption),
        ..FileIn::default()
    }
}

/// `(history: N turns)`: the user messages before the current one.
fn history_note(earlier: &[ChatMessage]) -> String {
    let n = earlier.iter().filter(|m| m.role == "user").count();
    let unit = if n == 1 { "turn" } else { "turns" };
    format!("(history: {n} {unit})")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turn(messages: Vec<ChatMessage>) -> Turn {
        let body = serde_json::json!({ "messages": messages });
        super::super::inbound::parse(body.to_string().as_bytes()).unwrap()
    }

    #[test]
    fn echo_names_the_earlier_user_turns() {
        let one = [ChatMessage::user("hi")];
        assert_eq!(echo_reply(&one), "echo: hi (history: 0 turns)");
        let three = [
            ChatMessage::user("a"),
            ChatMessage::assistant("b"),
            ChatMessage::user("c"),
        ];
        assert_eq!(echo_reply(&three), "echo: c (history: 1 turn)");
        let failed_turn_without_answer = [
            ChatMessage::user("a"),
            ChatMessage::user("b"),
            ChatMessage::assistant("B"),
            ChatMessage::user("c"),
        ];
        assert_eq!(
            echo_reply(&failed_turn_without_answer),
            "echo: c (history: 2 turns)"
        );
    }

    #[test]
    fn with_file_every_answer_but_a_taps_carries_the_picture_captioned_with_the_text() {
        let file = EchoOptions {
            file: true,
            ..EchoOptions::default()
        };
        let answer = echo_answer(&turn(vec![ChatMessage::user("look")]), file);
        assert_eq!(answer.parts, ["echo: look (history: 0 turns)"]);
        let [picture] = &answer.attachments[..] else {
            panic!("one picture: {:?}", answer.attachments)
        };
        assert_eq!(picture.name.as_deref(), Some("echo.png"));
        assert_eq!(picture.mime.as_deref(), Some("image/png"));
        assert_eq!(picture.caption.as_deref(), Some("echo: look"));
        assert_eq!(
            STANDARD.decode(picture.data.as_deref().unwrap()).unwrap(),
            *ECHO_PNG
        );
        assert!(picture.url.is_none());
        picture.clone().check().expect("the gateway takes it as it is");

        let mut tap = turn(vec![
            ChatMessage::user("look"),
            ChatMessage::assistant("x"),
            ChatMessage::user("Yes"),
        ]);
        let action = serde_json::json!({"id": "yes", "label": "Yes",
                                        "message_id": "0190a8e0-0000-7000-8000-0000000000ab"});
        tap.action = serde_json::from_value(action).unwrap();
        assert!(echo_answer(&tap, file).attachments.is_empty());
        assert!(
            echo_answer(&turn(vec![ChatMessage::user("x")]), EchoOptions::default())
                .attachments
                .is_empty()
        );
    }

    #[test]
    fn a_long_caption_is_cut_to_1024_characters_not_bytes() {
        let caption = echo_picture(&"é".repeat(2000)).caption.unwrap();
        assert_eq!(caption.chars().count(), 1024);
        assert!(caption.starts_with("echo: éé"));
    }
}
