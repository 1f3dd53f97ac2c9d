//! The OpenAI-compatible upstream, its outcome classified into a status the gateway retries.
//! No `user` field by default: the gateway sends the whole history, and an upstream keeping
//! a transcript per `user` would feed every turn to the model twice.

use std::time::Duration;

use axum::body::{Body, Bytes};
use eventsource_stream::Eventsource;
use futures::StreamExt;
use reqwest::{StatusCode, Url};
use secrecy::{ExposeSecret, SecretString};
use serde::Serialize;
use serde_json::{json, Value};

use super::offer::{self, Reply};
use super::outputs;
use crate::dispatch::payload::parse_answer;
use crate::dispatch::stream::{body_chunks, is_event_stream};
use crate::domain::Platform;

#[derive(Debug, Clone)]
pub struct UpstreamConfig {
    pub endpoint: Url,
    /// Sent as `model` when set; most servers need one, llama.cpp's ignores it.
    pub model: Option<String>,
    pub api_key: Option<SecretString>,
    /// Below the gateway's `CB_AGENT_TIMEOUT_SECS`, so it hears our 504, not its own timeout.
    pub timeout: Duration,
    /// Doubles the history with an upstream that keeps a transcript per `user`.
    pub stable_user: bool,
    pub stream: bool,
    /// Declare the `offer_choices` tool; its call becomes the answer's choices.
    pub choices_tool: bool,
    /// Sent as `modalities` when not empty; image and audio outputs become files.
    pub modalities: Vec<Modality>,
    /// The voice of an audio output.
    pub audio_voice: String,
}

/// An output kind the upstream is asked for (`modalities`): `image` for OpenRouter's and
/// LiteLLM's image models, `audio` for OpenAI's audio models.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Modality {
    Text,
    Image,
    Audio,
}

/// Audio is asked for as MP3: every platform posts it, and it is a tenth of WAV's size, so
/// minutes rather than seconds of speech fit the gateway's 1 MiB of inline data.
const AUDIO_FORMAT: &str = "mp3";

impl UpstreamConfig {
    pub fn new(upstream: &str) -> Result<Self, String> {
        Ok(Self {
            endpoint: endpoint(upstream)?,
            model: None,
            api_key: None,
            timeout: Duration::from_secs(25),
            stable_user: false,
            stream: false,
            choices_tool: false,
            modalities: Vec::new(),
            audio_voice: "alloy".into(),
        })
    }
}

/// As is when it ends with `/chat/completions`; a `/v1` base (the OpenAI SDKs' `base_url`)
/// gets `/chat/completions`, any other `/v1/chat/completions`.
pub fn endpoint(upstream: &str) -> Result<Url, String> {
    let url = Url::parse(upstream).map_err(|e| format!("--upstream is not a URL ({e})"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err("--upstream must be an http:// or https:// URL".into());
    }
    let path = url.path().trim_end_matches('/');
    let path = if path.ends_with("/chat/completions") {
        path.to_owned()
    } else if path.ends_with("/v1") {
        format!("{path}/chat/completions")
    } else {
        format!("{path}/v1/chat/completions")
    };
    let mut url = url;
    url.set_path(&path);
    Ok(url)
}

#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    #[error("the upstream did not answer within {0:?}")]
    Timeout(Duration),
    #[error("the upstream could not be reached: {0}")]
    Unreachable(String),
    #[error("the upstream is rate limited (429)")]
    RateLimited { retry_after: Option<u64> },
    #[error("the upstream answered {0}")]
    Status(StatusCode),
    #[error("the upstream's answer is not a chat completion: {0}")]
    InvalidAnswer(String),
}

#[derive(Debug, Serialize)]
pub struct ChatRequestOut<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<&'a str>,
    pub messages: &'a [serde_json::Value],
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<&'a str>,
    pub stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tools: Option<Value>,
    #[serde(skip_serializing_if = "<[Modality]>::is_empty")]
    pub modalities: &'a [Modality],
    /// `{voice, format}`, which OpenAI requires when `modalities` holds `audio`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub audio: Option<Value>,
}

/// One question to the upstream: the conversation, and what the dispatch says about it.
pub struct Ask<'a> {
    pub messages: &'a [Value],
    pub stable_user: Option<&'a str>,
    /// Where the answer is shown: the choices the model offers must fit it.
    pub platform: Option<Platform>,
}

pub enum Completion {
    /// No part when the completion is empty.
    Reply(Reply),
    Stream(reqwest::Response),
    /// Answered `202`: the answer goes to the turn's events URL later.
    Later,
}

pub async fn complete(
    client: &reqwest::Client,
    config: &UpstreamConfig,
    ask: &Ask<'_>,
) -> Result<Completion, UpstreamError> {
    let mut request = client
        .post(config.endpoint.clone())
        .timeout(config.timeout)
        .json(&request_body(config, ask));
    if let Some(key) = &config.api_key {
        request = request.bearer_auth(key.expose_secret());
    }
    let response = request
        .send()
        .await
        .map_err(|err| transport_error(err, config.timeout))?;
    let status = response.status();
    if status == StatusCode::TOO_MANY_REQUESTS {
        return Err(UpstreamError::RateLimited {
            retry_after: retry_after(response.headers()),
        });
    }
    if !status.is_success() {
        return Err(UpstreamError::Status(status));
    }
    if is_event_stream(response.headers()) {
        return Ok(Completion::Stream(response));
    }
    let body = response
        .bytes()
        .await
        .map_err(|err| transport_error(err, config.timeout))?;
    read_reply(&body, config, ask).map(Completion::Reply)
}

fn request_body<'a>(config: &'a UpstreamConfig, ask: &'a Ask<'_>) -> ChatRequestOut<'a> {
    let audio = config.modalities.contains(&Modality::Audio);
    ChatRequestOut {
        model: config.model.as_deref(),
        messages: ask.messages,
        user: ask.stable_user.filter(|_| config.stable_user),
        stream: config.stream,
        tools: config.choices_tool.then(|| json!([offer::tool()])),
        modalities: &config.modalities,
        audio: audio.then(|| json!({"voice": config.audio_voice, "format": AUDIO_FORMAT})),
    }
}

/// The completion's text, its `offer_choices` call and its image and audio outputs (those
/// the dispatch's platform takes). A spoken answer's text is its transcript: OpenAI's
/// `content` is null beside `audio`.
fn read_reply(body: &[u8], config: &UpstreamConfig, ask: &Ask<'_>) -> Result<Reply, UpstreamError> {
    let mut parts = parse_answer(body).map_err(|err| UpstreamError::InvalidAnswer(err.0))?;
    let completion: Value =
        serde_json::from_slice(body).map_err(|err| UpstreamError::InvalidAnswer(err.to_string()))?;
    let outputs = outputs::of_completion(&completion);
    if parts.is_empty() {
        parts.extend(outputs.transcript);
    }
    let reply = match config.choices_tool {
        true => offer::reply_of(parts, &completion, ask.platform),
        false => Reply::of_parts(parts),
    };
    Ok(Reply {
        attachments: outputs::fit_for(outputs.files, ask.platform),
        ..reply
    })
}

/// OpenAI chunks as the gateway's `delta`/`done` events. A break, an unreadable chunk or an
/// end without `[DONE]` ends the relay without `done`, so the gateway retries the turn.
pub fn relay(response: reqwest::Response) -> Body {
    let events = Box::pin(body_chunks(response).eventsource());
    let relayed = futures::stream::unfold(Some(events), |events| async move {
        let mut events = events?;
        loop {
            let event = match events.next().await? {
                Ok(event) => event,
                Err(_) => {
                    tracing::warn!(
                        "upstream stream broke; ending the relayed stream without its final event"
                    );
                    return None;
                }
            };
            let data = event.data.trim();
            if data == "[DONE]" {
                let done = Bytes::from_static(b"event: done\ndata: {}\n\n");
                return Some((Ok::<_, std::convert::Infallible>(done), None));
            }
            let Ok(chunk) = serde_json::from_str::<Value>(data) else {
                tracing::warn!(
                    "unreadable upstream chunk; ending the relayed stream without its final event"
                );
                return None;
            };
            if let Some(text) = chunk.pointer("/choices/0/delta/content").and_then(Value::as_str) {
                if !text.is_empty() {
                    let delta = format!("event: delta\ndata: {}\n\n", json!({ "content": text }));
                    return Some((Ok(Bytes::from(delta)), Some(events)));
                }
            }
        }
    });
    Body::from_stream(relayed)
}

/// reqwest's error text can carry the URL (credentials in it, for some deployments).
fn transport_error(err: reqwest::Error, timeout: Duration) -> UpstreamError {
    if err.is_timeout() {
        UpstreamError::Timeout(timeout)
    } else {
        UpstreamError::Unreachable(err.without_url().to_string())
    }
}

fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<u64> {
    let value = headers.get(reqwest::header::RETRY_AFTER)?.to_str().ok()?;
    value.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_endpoint_is_derived_from_a_base_url_or_taken_as_given() {
        let cases = [
            (
                "http://127.0.0.1:8000",
                "http://127.0.0.1:8000/v1/chat/completions",
            ),
            (
                "http://127.0.0.1:8000/",
                "http://127.0.0.1:8000/v1/chat/completions",
            ),
            ("http://llm:4000/v1", "http://llm:4000/v1/chat/completions"),
            ("http://llm:4000/v1/", "http://llm:4000/v1/chat/completions"),
            (
                "https://gw.example/openai",
                "https://gw.example/openai/v1/chat/completions",
            ),
            (
                "http://gw:18789/v1/chat/completions",
                "http://gw:18789/v1/chat/completions",
            ),
            (
                "http://gw/api/chat/completions?x=1",
                "http://gw/api/chat/completions?x=1",
            ),
        ];
        for (given, expected) in cases {
            assert_eq!(endpoint(given).unwrap().as_str(), expected, "{given}");
        }
        assert!(endpoint("localhost:8000").is_err());
        assert!(endpoint("not a url").is_err());
    }

    #[test]
    fn modalities_are_sent_when_asked_and_audio_with_its_voice_as_mp3() {
        let messages = [json!({"role": "user", "content": "hi"})];
        let ask = Ask {
            messages: &messages,
            stable_user: None,
            platform: None,
        };
        let mut config = UpstreamConfig::new("http://llm").unwrap();
        let plain = serde_json::to_value(request_body(&config, &ask)).unwrap();
        assert!(
            plain.get("modalities").is_none() && plain.get("audio").is_none(),
            "{plain}"
        );

        config.modalities = vec![Modality::Text, Modality::Image];
        let images = serde_json::to_value(request_body(&config, &ask)).unwrap();
        assert_eq!(images["modalities"], json!(["text", "image"]));
        assert!(images.get("audio").is_none(), "{images}");

        config.modalities = vec![Modality::Text, Modality::Audio];
        config.audio_voice = "coral".into();
        let audio = serde_json::to_value(request_body(&config, &ask)).unwrap();
        assert_eq!(audio["modalities"], json!(["text", "audio"]));
        assert_eq!(audio["audio"], json!({"voice": "coral", "format": "mp3"}));
    }

    #[test]
    fn the_request_carries_no_user_unless_asked() {
        let messages = [serde_json::json!({"role": "user", "content": "hi"})];
        let body = ChatRequestOut {
            model: Some("m"),
            messages: &messages,
            user: None,
            stream: false,
            tools: None,
            modalities: &[],
            audio: None,
        };
        let json = serde_json::to_value(&body).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": false})
        );
    }
}
