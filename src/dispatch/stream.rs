//! Streamed answers (docs/agent.md#streamed-answers): OpenAI chat completion chunks or the
//! gateway's own `delta`/`done` events. A stream without its final event was cut off and
//! fails the call, which is retried; nothing of it is stored. The final `done` event may
//! replace the deltas with parts and ask for a person, as a JSON answer does.

use eventsource_stream::Eventsource;
use futures::StreamExt;
use serde_json::Value;

use super::payload::{handoff_of, parse_answer, Answer, HandoffAsk, InvalidAnswer};
use crate::choices::{is_completion, Choices, InvalidChoices};
use crate::delivery::live::TextSink;

pub fn is_event_stream(headers: &reqwest::header::HeaderMap) -> bool {
    headers
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.trim_start()
                .to_ascii_lowercase()
                .starts_with("text/event-stream")
        })
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum StreamError {
    #[error("stream cut off before its final event{0}")]
    CutOff(String),
    #[error("{0}")]
    Invalid(#[from] InvalidAnswer),
    #[error("the agent ended its stream with an error event")]
    AgentError,
    /// Choices no platform could show: the same answer would be refused again.
    #[error("the agent's choices cannot be shown: {0}")]
    Choices(#[from] InvalidChoices),
}

#[derive(Debug, PartialEq, Eq)]
enum Event {
    Delta(String),
    Done(Done),
    Skip,
}

/// The final event: the parts when it names them (else the deltas joined), its `handoff`
/// and its `choices`.
#[derive(Debug, Default, PartialEq, Eq)]
struct Done {
    parts: Option<Vec<String>>,
    handoff: Option<HandoffAsk>,
    choices: Option<Choices>,
    files: Vec<crate::media::outgoing::FileIn>,
    react: Option<String>,
}

pub async fn read(
    response: reqwest::Response,
    mut live: Option<&mut (dyn TextSink + Send)>,
) -> Result<Answer, StreamError> {
    let mut events = std::pin::pin!(body_chunks(response).eventsource());
    let mut text = String::new();
    while let Some(event) = events.next().await {
        let event = event.map_err(|err| StreamError::CutOff(format!(": {}", cut_cause(&err))))?;
        match parse_event(&event.event, &event.data)? {
            Event::Delta(delta) if !delta.is_empty() => {
                text.push_str(&delta);
                if let Some(live) = live.as_mut() {
                    live.push(&delta);
                }
            }
            Event::Delta(_) | Event::Skip => {}
            Event::Done(done) => return finished(done, text),
        }
    }
    Err(StreamError::CutOff(String::new()))
}

fn finished(done: Done, text: String) -> Result<Answer, StreamError> {
    let parts = done.parts.unwrap_or_else(|| vec![text]);
    let parts: Vec<String> = parts.into_iter().filter(|p| !p.trim().is_empty()).collect();
    if done.choices.is_some() && parts.is_empty() {
        return Err(InvalidChoices("choices need text to go with: the answer is empty".into()).into());
    }
    Ok(Answer {
        parts,
        handoff: done.handoff,
        choices: done.choices,
        files: done.files,
        react: done.react,
    })
}

/// reqwest's `chunk()` as a stream, without its `stream` feature.
pub fn body_chunks(
    response: reqwest::Response,
) -> impl futures::Stream<Item = Result<axum::body::Bytes, reqwest::Error>> {
    futures::stream::unfold(Some(response), |response| async move {
        let mut response = response?;
        match response.chunk().await {
            Ok(Some(chunk)) => Some((Ok(chunk), Some(response))),
            Ok(None) => None,
            Err(err) => Some((Err(err), None)),
        }
    })
}

/// Without the URL reqwest would print.
fn cut_cause<E: std::fmt::Display>(err: &eventsource_stream::EventStreamError<E>) -> String {
    match err {
        eventsource_stream::EventStreamError::Transport(_) => "the connection broke".into(),
        other => other.to_string(),
    }
}

fn parse_event(name: &str, data: &str) -> Result<Event, StreamError> {
    let data = data.trim();
    match name {
        "delta" => {
            let value = json(data)?;
            match value.get("content") {
                Some(Value::String(text)) => Ok(Event::Delta(text.clone())),
                Some(Value::Null) | None => Ok(Event::Skip),
                Some(_) => Err(StreamError::Invalid(InvalidAnswer(
                    "a delta's `content` must be a string".into(),
                ))),
            }
        }
        "done" if data.is_empty() => Ok(Event::Done(Done::default())),
        "done" => final_event(data).map(Event::Done),
        "error" => Err(StreamError::AgentError),
        "" | "message" if data == "[DONE]" => Ok(Event::Done(Done::default())),
        "" | "message" => Ok(openai_chunk(&json(data)?)?),
        _ => Ok(Event::Skip),
    }
}

/// `choices` is a list of buttons, unless it is a completion's (which names parts).
fn final_event(data: &str) -> Result<Done, StreamError> {
    let value = json(data)?;
    let completion = value.get("choices").is_some_and(is_completion);
    let names_parts = completion
        || ["content", "messages", "output"]
            .iter()
            .any(|key| value.get(key).is_some());
    let parts = names_parts.then(|| parse_answer(data.as_bytes())).transpose()?;
    let handoff = handoff_of(&value)?;
    let choices = Choices::from_answer(&value)?;
    let files = super::payload::files_of(&value).map_err(InvalidAnswer)?;
    let react = super::payload::react_of(&value).map_err(InvalidAnswer)?;
    Ok(Done {
        parts,
        handoff,
        choices,
        files,
        react,
    })
}

/// `delta.content` is absent or null in the role-only first chunk and the `finish_reason` one.
fn openai_chunk(value: &Value) -> Result<Event, InvalidAnswer> {
    if value.get("error").is_some() {
        return Err(InvalidAnswer("the stream carried an error object".into()));
    }
    let Some(choices) = value.get("choices").and_then(Value::as_array) else {
        return Err(InvalidAnswer("a stream chunk without `choices`".into()));
    };
    match choices.first().and_then(|c| c.pointer("/delta/content")) {
        Some(Value::String(text)) => Ok(Event::Delta(text.clone())),
        Some(Value::Null) | None => Ok(Event::Skip),
        Some(_) => Err(InvalidAnswer("`delta.content` must be a string".into())),
    }
}

fn json(data: &str) -> Result<Value, InvalidAnswer> {
    serde_json::from_str(data).map_err(|e| InvalidAnswer(format!("a stream event is not JSON ({e})")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_openai_chunks_and_the_gateway_events() {
        let chunk = r#"{"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"Hel"}}]}"#;
        assert_eq!(parse_event("", chunk).unwrap(), Event::Delta("Hel".into()));
        let role = r#"{"choices":[{"index":0,"delta":{"role":"assistant"}}]}"#;
        assert_eq!(parse_event("", role).unwrap(), Event::Skip);
        let finish = r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#;
        assert_eq!(parse_event("", finish).unwrap(), Event::Skip);
        assert_eq!(parse_event("", "[DONE]").unwrap(), Event::Done(Done::default()));
        assert_eq!(
            parse_event("delta", r#"{"content":"lo"}"#).unwrap(),
            Event::Delta("lo".into())
        );
        assert_eq!(parse_event("done", "").unwrap(), Event::Done(Done::default()));
        assert_eq!(parse_event("done", "{}").unwrap(), Event::Done(Done::default()));
        assert_eq!(
            parse_event(
                "done",
                r#"{"messages":[{"role":"assistant","content":"a"},{"role":"assistant","content":"b"}]}"#
            )
            .unwrap(),
            Event::Done(Done {
                parts: Some(vec!["a".into(), "b".into()]),
                ..Done::default()
            })
        );
        assert_eq!(parse_event("ping", "whatever").unwrap(), Event::Skip);
    }

    #[test]
    fn the_final_event_may_ask_for_a_person_with_or_without_parts() {
        let asks = |reason: Option<&str>| HandoffAsk {
            reason: reason.map(str::to_owned),
        };
        assert_eq!(
            parse_event("done", r#"{"handoff": {"reason": "refund over the limit"}}"#).unwrap(),
            Event::Done(Done {
                handoff: Some(asks(Some("refund over the limit"))),
                ..Done::default()
            })
        );
        assert_eq!(
            parse_event(
                "done",
                r#"{"content": "A colleague takes over.", "handoff": true}"#
            )
            .unwrap(),
            Event::Done(Done {
                parts: Some(vec!["A colleague takes over.".into()]),
                handoff: Some(asks(None)),
                ..Done::default()
            })
        );
        assert_eq!(
            parse_event("done", r#"{"handoff": false}"#).unwrap(),
            Event::Done(Done::default())
        );
        assert!(parse_event("done", r#"{"handoff": "yes"}"#).is_err());
    }

    #[test]
    fn the_final_event_may_offer_choices_for_the_deltas_or_its_own_parts() {
        let done = parse_event("done", r#"{"choices": [{"id": "y", "label": "Yes"}]}"#).unwrap();
        let Event::Done(done) = done else {
            panic!("a final event")
        };
        assert_eq!(done.parts, None, "the deltas are the text");
        assert_eq!(done.choices.map(|c| c.items.len()), Some(1));
        let answer = finished(
            Done {
                choices: Choices::from_answer(&serde_json::json!({"choices": [{"id": "y", "label": "Yes"}]}))
                    .unwrap(),
                ..Done::default()
            },
            "  ".into(),
        );
        assert!(
            matches!(answer, Err(StreamError::Choices(_))),
            "no text to go with"
        );
        assert!(matches!(
            parse_event("done", r#"{"choices": [{"label": "no id or url"}]}"#),
            Err(StreamError::Choices(_))
        ));
    }

    #[test]
    fn unreadable_events_and_error_events_fail_the_stream() {
        assert!(parse_event("", "not json").is_err());
        assert!(parse_event("", r#"{"error":{"message":"overloaded"}}"#).is_err());
        assert!(parse_event("delta", r#"{"content":42}"#).is_err());
        assert!(parse_event("error", r#"{"message":"boom"}"#).is_err());
    }

    #[test]
    fn the_content_type_decides() {
        let mut headers = reqwest::header::HeaderMap::new();
        assert!(!is_event_stream(&headers));
        headers.insert(
            "content-type",
            "text/event-stream; charset=utf-8".parse().unwrap(),
        );
        assert!(is_event_stream(&headers));
        headers.insert("content-type", "application/json".parse().unwrap());
        assert!(!is_event_stream(&headers));
    }
}
