//! `agent-bridge` on port 0 in front of a real local OpenAI-compatible stand-in: what the
//! upstream receives, what the gateway gets back, every error status, and the whole path
//! gateway → bridge → upstream → platform with the history intact.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{OriginalUri, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use channel_bridge::agent_bridge::png::ECHO_PNG;
use channel_bridge::agent_bridge::upstream::{Modality, UpstreamConfig};
use channel_bridge::agent_bridge::{self, BridgeConfig};
use channel_bridge::dispatch::payload::{ChannelOut, ChatMessage, DispatchOut};
use channel_bridge::dispatch::StepOutcome;
use channel_bridge::domain::Platform;
use channel_bridge::media::outgoing::FileIn;
use channel_bridge::signature;
use serde_json::{json, Value};
use tokio::net::TcpListener;

use crate::support::fake_platforms::FakePlatforms;
use crate::support::platforms::*;
use crate::support::{spawn_app, worker};

/// The Standard Webhooks reference secret.
const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

// --- an OpenAI-compatible stand-in ----------------------------------------------------

/// One chat completion request the upstream received.
#[derive(Debug, Clone)]
struct UpstreamCall {
    path: String,
    authorization: Option<String>,
    body: Value,
}

/// How the upstream answers the next request.
#[allow(dead_code)] // not every variant is used by every test
enum UpstreamAnswer {
    Status(u16, Value, Option<u64>),
    Raw(&'static str),
    Hang,
    /// `text/event-stream` with this body, sent as one chunk per element.
    Stream(Vec<String>),
}

#[derive(Default)]
struct UpstreamState {
    calls: Mutex<Vec<UpstreamCall>>,
    script: Mutex<VecDeque<UpstreamAnswer>>,
}

/// A real HTTP server speaking `POST /v1/chat/completions`. Unscripted requests are
/// answered `answer <n> to <last user text> (<messages> messages)`.
struct Upstream {
    base_url: String,
    state: Arc<UpstreamState>,
}

impl Upstream {
    async fn start() -> Self {
        let state = Arc::new(UpstreamState::default());
        let app = Router::new()
            .route("/v1/chat/completions", post(complete))
            .with_state(state.clone());
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base_url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self { base_url, state }
    }

    fn script(&self, answers: impl IntoIterator<Item = UpstreamAnswer>) {
        self.state.script.lock().unwrap().extend(answers);
    }

    fn calls(&self) -> Vec<UpstreamCall> {
        self.state.calls.lock().unwrap().clone()
    }
}

async fn complete(
    State(state): State<Arc<UpstreamState>>,
    OriginalUri(uri): OriginalUri,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    let authorization = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let last = messages
        .last()
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_owned();
    let n = {
        let mut calls = state.calls.lock().unwrap();
        calls.push(UpstreamCall {
            path: uri.path().to_owned(),
            authorization,
            body,
        });
        calls.len()
    };
    let scripted = state.script.lock().unwrap().pop_front();
    match scripted {
        None => Json(json!({
            "id": format!("chatcmpl-{n}"), "object": "chat.completion", "model": "stand-in",
            "choices": [{"index": 0, "finish_reason": "stop", "message": {
                "role": "assistant",
                "content": format!("answer {n} to {last} ({} messages)", messages.len()),
            }}],
        }))
        .into_response(),
        Some(UpstreamAnswer::Status(status, body, retry_after)) => {
            let mut response = (StatusCode::from_u16(status).unwrap(), Json(body)).into_response();
            if let Some(secs) = retry_after {
                response
                    .headers_mut()
                    .insert("retry-after", secs.to_string().parse().unwrap());
            }
            response
        }
        Some(UpstreamAnswer::Raw(body)) => (StatusCode::OK, body).into_response(),
        Some(UpstreamAnswer::Hang) => std::future::pending().await,
        Some(UpstreamAnswer::Stream(chunks)) => {
            let chunks = futures::stream::iter(
                chunks
                    .into_iter()
                    .map(|c| Ok::<_, std::io::Error>(axum::body::Bytes::from(c))),
            );
            (
                [("content-type", "text/event-stream")],
                axum::body::Body::from_stream(chunks),
            )
                .into_response()
        }
    }
}

/// An OpenAI chat completion chunk with `text`, as an SSE event.
fn openai_chunk(text: &str) -> String {
    let chunk =
        json!({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": text}}]});
    format!("data: {chunk}\n\n")
}

// --- helpers --------------------------------------------------------------------------

/// Serves the bridge on a bound port-0 listener; returns the agent URL.
async fn spawn_bridge(config: BridgeConfig) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/agent", listener.local_addr().unwrap());
    tokio::spawn(agent_bridge::serve(listener, config, std::future::pending()));
    url
}

fn upstream_config(upstream: &Upstream) -> UpstreamConfig {
    UpstreamConfig::new(&upstream.base_url).unwrap()
}

/// A dispatch exactly as the gateway shapes it.
fn dispatch_payload(messages: Vec<ChatMessage>) -> Value {
    let current = messages.last().unwrap().content.clone();
    serde_json::to_value(DispatchOut {
        messages,
        role: "user".into(),
        content: current,
        tenant_id: "0190a8e0-0000-7000-8000-000000000001".into(),
        user_id: Some("alice".into()),
        message_id: "0190a8e0-0000-7000-8000-0000000000aa".into(),
        channel: ChannelOut {
            platform: "slack".into(),
            connector_id: "0190a8e0-0000-7000-8000-0000000000cc".into(),
            chat_id: "D0DM00001".into(),
            thread_id: None,
            platform_user_id: "U0USER1".into(),
        },
        reply: None,
        action: None,
        command: None,
    })
    .unwrap()
}

/// The dispatch of a tap on the choice `id` labelled `label`: its content is the label.
fn tap_payload(mut messages: Vec<ChatMessage>, id: &str, label: &str) -> Value {
    messages.push(user(label));
    let mut payload = dispatch_payload(messages);
    let action = json!({"id": id, "label": label, "message_id": "0190a8e0-0000-7000-8000-0000000000ab"});
    payload["action"] = action.clone();
    payload["messages"].as_array_mut().unwrap().last_mut().unwrap()["action"] = action;
    payload
}

/// A chat completion whose message calls `offer_choices` with `arguments` (a JSON string,
/// as OpenAI sends it) beside `content`.
fn offering(content: Value, arguments: Value) -> UpstreamAnswer {
    let completion = json!({"id": "chatcmpl-t", "object": "chat.completion", "choices": [{
        "index": 0, "finish_reason": "tool_calls",
        "message": {"role": "assistant", "content": content, "tool_calls": [{
            "id": "call_1", "type": "function",
            "function": {"name": "offer_choices", "arguments": arguments.to_string()}}]}}]});
    UpstreamAnswer::Status(200, completion, None)
}

/// POSTs `body` signed with `secret` at `timestamp`, as the gateway does.
async fn post_signed(url: &str, secret: &str, timestamp: i64, body: Vec<u8>) -> reqwest::Response {
    let signature = signature::sign(secret, "msg_1", timestamp, &body).unwrap();
    reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("webhook-id", "msg_1")
        .header("webhook-timestamp", timestamp.to_string())
        .header("webhook-signature", signature)
        .body(body)
        .send()
        .await
        .unwrap()
}

async fn dispatch(url: &str, body: &Value) -> reqwest::Response {
    post_signed(url, SECRET, now(), serde_json::to_vec(body).unwrap()).await
}

async fn status_and_json(response: reqwest::Response) -> (u16, Value) {
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

fn user(text: &str) -> ChatMessage {
    ChatMessage::user(text)
}

fn assistant(text: &str) -> ChatMessage {
    ChatMessage::assistant(text)
}

// --- the bridge alone -----------------------------------------------------------------

#[tokio::test]
async fn bridge_forwards_messages_with_the_system_prompt_first_the_model_and_no_user_field() {
    let upstream = Upstream::start().await;
    let mut config = upstream_config(&upstream);
    config.model = Some("test-model".into());
    config.api_key = Some("sk-test-key".to_owned().into());
    let mut bridge = BridgeConfig::upstream(SECRET, config);
    bridge.system_prompt = Some("You are terse.".into());
    let url = spawn_bridge(bridge).await;

    let conversation = vec![user("first"), assistant("one"), user("second")];
    let (status, answer) = status_and_json(dispatch(&url, &dispatch_payload(conversation)).await).await;

    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        answer,
        json!({"messages": [{"role": "assistant", "content": "answer 1 to second (4 messages)"}]})
    );
    let calls = upstream.calls();
    assert_eq!(calls.len(), 1);
    let call = &calls[0];
    assert_eq!(call.path, "/v1/chat/completions");
    assert_eq!(call.authorization.as_deref(), Some("Bearer sk-test-key"));
    assert_eq!(call.body["model"], "test-model");
    assert_eq!(
        call.body["messages"],
        json!([
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "one"},
            {"role": "user", "content": "second"},
        ])
    );
    assert!(
        call.body.get("user").is_none(),
        "the history has one owner: no stable user by default: {}",
        call.body
    );
    assert_eq!(call.body["stream"], false);
    assert!(
        call.body.get("tools").is_none(),
        "no tool unless asked: {}",
        call.body
    );
}

/// Serves `/image` (PNG bytes) and `/voice.mp3`, as the gateway's media URLs would.
async fn media_server() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let app = Router::new()
        .route(
            "/image",
            axum::routing::get(|| async { ([("content-type", "image/png")], &b"PNGDATA"[..]) }),
        )
        .route(
            "/voice.mp3",
            axum::routing::get(|| async { ([("content-type", "audio/mpeg")], &b"ID3MP3"[..]) }),
        );
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    base
}

fn attachment(kind: &str, mime: &str, url: Option<String>) -> Value {
    json!({"type": kind, "mime": mime, "size": 7, "name": null, "url": url})
}

#[tokio::test]
async fn attachments_become_openai_content_parts_with_the_files_inlined() {
    let upstream = Upstream::start().await;
    let url = spawn_bridge(BridgeConfig::upstream(SECRET, upstream_config(&upstream))).await;
    let media = media_server().await;
    let mut payload = dispatch_payload(vec![user("earlier"), assistant("ok"), user("what is this?")]);
    payload["messages"][0]["attachments"] = json!([attachment(
        "voice",
        "audio/mpeg",
        Some(format!("{media}/voice.mp3"))
    )]);
    payload["messages"][2]["attachments"] = json!([
        attachment("image", "image/png", Some(format!("{media}/image"))),
        attachment("voice", "audio/ogg", Some(format!("{media}/voice.ogg"))),
        attachment("document", "application/pdf", None),
    ]);
    // A photo without a caption: the gateway sends empty text with the file.
    payload["messages"]
        .as_array_mut()
        .unwrap()
        .push(json!({"role": "user", "content": "",
        "attachments": [attachment("image", "image/png", Some(format!("{media}/image")))]}));

    let (status, answer) = status_and_json(dispatch(&url, &payload).await).await;

    assert_eq!(status, 200, "{answer}");
    let messages = upstream.calls()[0].body["messages"].clone();
    assert_eq!(
        messages[0]["content"],
        json!([{"type": "text", "text": "earlier"},
               {"type": "input_audio", "input_audio": {"data": "SUQzTVAz", "format": "mp3"}}])
    );
    assert_eq!(messages[1], json!({"role": "assistant", "content": "ok"}));
    assert_eq!(
        messages[2]["content"],
        json!([
            {"type": "text", "text": "what is this?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,UE5HREFUQQ=="}},
            {"type": "text", "text": "[the user sent a voice note (audio/ogg, 7 bytes): not passed on to the model]"},
            {"type": "text", "text": "[the user sent a file (application/pdf, 7 bytes): not passed on to the model]"},
        ])
    );
    assert_eq!(
        messages[3]["content"],
        json!([{"type": "image_url", "image_url": {"url": "data:image/png;base64,UE5HREFUQQ=="}}])
    );
}

#[tokio::test]
async fn bridge_builds_one_user_message_from_legacy_role_and_content() {
    let upstream = Upstream::start().await;
    let url = spawn_bridge(BridgeConfig::upstream(SECRET, upstream_config(&upstream))).await;

    let legacy = json!({"role": "user", "content": "hello from an old gateway", "message_id": "m1"});
    let (status, answer) = status_and_json(dispatch(&url, &legacy).await).await;

    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        answer["messages"][0]["content"],
        "answer 1 to hello from an old gateway (1 messages)"
    );
    let body = &upstream.calls()[0].body;
    assert_eq!(
        body["messages"],
        json!([{"role": "user", "content": "hello from an old gateway"}])
    );
    assert!(body.get("model").is_none(), "no model configured: {body}");
    assert!(body.get("user").is_none(), "{body}");
    assert!(upstream.calls()[0].authorization.is_none());
}

#[tokio::test]
async fn stable_user_option_sends_tenant_and_user_as_the_upstream_user() {
    let upstream = Upstream::start().await;
    let mut config = upstream_config(&upstream);
    config.stable_user = true;
    let url = spawn_bridge(BridgeConfig::upstream(SECRET, config)).await;

    let response = dispatch(&url, &dispatch_payload(vec![user("hi")])).await;

    assert_eq!(response.status(), 200);
    assert_eq!(
        upstream.calls()[0].body["user"],
        "0190a8e0-0000-7000-8000-000000000001:alice"
    );
}

#[tokio::test]
async fn bad_missing_or_stale_signatures_are_rejected_with_401_before_the_upstream_is_asked() {
    let upstream = Upstream::start().await;
    let url = spawn_bridge(BridgeConfig::upstream(SECRET, upstream_config(&upstream))).await;
    let body = serde_json::to_vec(&dispatch_payload(vec![user("hi")])).unwrap();

    let other_secret = "whsec_c2VjcmV0LW9mLWFub3RoZXItdGVuYW50LTMyYnl0ZXMh";
    let wrong_secret = post_signed(&url, other_secret, now(), body.clone()).await;
    let stale = post_signed(&url, SECRET, now() - 600, body.clone()).await;
    let unsigned = reqwest::Client::new()
        .post(&url)
        .body(body.clone())
        .send()
        .await
        .unwrap();
    let signature = signature::sign(SECRET, "msg_1", now(), &body).unwrap();
    let tampered = reqwest::Client::new()
        .post(&url)
        .header("webhook-id", "msg_1")
        .header("webhook-timestamp", now().to_string())
        .header("webhook-signature", signature)
        .body(serde_json::to_vec(&dispatch_payload(vec![user("changed")])).unwrap())
        .send()
        .await
        .unwrap();

    for (case, response) in [
        ("wrong secret", wrong_secret),
        ("stale timestamp", stale),
        ("no signature headers", unsigned),
        ("tampered body", tampered),
    ] {
        let (status, error) = status_and_json(response).await;
        assert_eq!(status, 401, "{case}: {error}");
        assert_eq!(error["error"], "unauthorized", "{case}");
        assert!(error["message"].as_str().is_some_and(|m| !m.is_empty()), "{case}");
    }
    assert!(upstream.calls().is_empty());
}

#[tokio::test]
async fn invalid_payloads_are_rejected_with_400_and_a_clear_error() {
    let upstream = Upstream::start().await;
    let url = spawn_bridge(BridgeConfig::upstream(SECRET, upstream_config(&upstream))).await;

    let cases: [(&[u8], &str); 5] = [
        (b"not json at all", "the body is not JSON"),
        (br#"{"tenant_id": "t"}"#, "neither `messages` nor `content`"),
        (
            br#"{"messages": [{"role": "robot", "content": "beep"}]}"#,
            "messages[0].role must be `system`, `user` or `assistant`, not `robot`",
        ),
        (
            br#"{"messages": [{"role": "user", "content": "   "}]}"#,
            "messages[0].content is empty",
        ),
        (
            br#"{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}"#,
            "the last message must be the user's turn",
        ),
    ];
    for (body, expected) in cases {
        let response = post_signed(&url, SECRET, now(), body.to_vec()).await;
        let (status, error) = status_and_json(response).await;
        assert_eq!(status, 400, "{expected}: {error}");
        assert_eq!(error["error"], "bad_request");
        let message = error["message"].as_str().unwrap();
        assert!(message.contains(expected), "{message:?} should say {expected:?}");
    }
    assert!(upstream.calls().is_empty());
}

#[tokio::test]
async fn upstream_500_4xx_and_unreadable_answers_become_502_so_the_gateway_retries() {
    let upstream = Upstream::start().await;
    upstream.script([
        UpstreamAnswer::Status(500, json!({"error": {"message": "model crashed"}}), None),
        UpstreamAnswer::Status(400, json!({"error": {"message": "unknown model"}}), None),
        UpstreamAnswer::Raw("<html>bad gateway</html>"),
    ]);
    let url = spawn_bridge(BridgeConfig::upstream(SECRET, upstream_config(&upstream))).await;
    let payload = dispatch_payload(vec![user("hi")]);

    for expected in ["upstream_error", "upstream_error", "upstream_invalid_answer"] {
        let (status, error) = status_and_json(dispatch(&url, &payload).await).await;
        assert_eq!(status, 502, "{error}");
        assert_eq!(error["error"], expected);
        assert!(
            !error.to_string().contains("model crashed"),
            "the upstream's body is not passed on: {error}"
        );
    }
    assert_eq!(upstream.calls().len(), 3);
}

#[tokio::test]
async fn an_unreachable_upstream_answers_502() {
    // A port that was free a moment ago and has nobody listening now.
    let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = closed.local_addr().unwrap();
    drop(closed);
    let config = UpstreamConfig::new(&format!("http://{address}")).unwrap();
    let url = spawn_bridge(BridgeConfig::upstream(SECRET, config)).await;

    let (status, error) = status_and_json(dispatch(&url, &dispatch_payload(vec![user("hi")])).await).await;

    assert_eq!(status, 502, "{error}");
    assert_eq!(error["error"], "upstream_unreachable");
}

#[tokio::test]
async fn an_upstream_rate_limit_is_passed_on_as_429_with_its_retry_after() {
    let upstream = Upstream::start().await;
    upstream.script([UpstreamAnswer::Status(
        429,
        json!({"error": {"message": "slow down"}}),
        Some(7),
    )]);
    let url = spawn_bridge(BridgeConfig::upstream(SECRET, upstream_config(&upstream))).await;

    let response = dispatch(&url, &dispatch_payload(vec![user("hi")])).await;

    assert_eq!(response.status(), 429);
    assert_eq!(response.headers()["retry-after"], "7");
}

#[tokio::test]
async fn an_upstream_that_hangs_answers_504_after_the_configured_timeout() {
    let upstream = Upstream::start().await;
    upstream.script([UpstreamAnswer::Hang]);
    let mut config = upstream_config(&upstream);
    config.timeout = Duration::from_millis(300);
    let url = spawn_bridge(BridgeConfig::upstream(SECRET, config)).await;

    let started = Instant::now();
    let (status, error) = status_and_json(dispatch(&url, &dispatch_payload(vec![user("hi")])).await).await;

    assert_eq!(status, 504, "{error}");
    assert_eq!(error["error"], "upstream_timeout");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "answered after {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn echo_mode_answers_without_an_upstream_and_names_the_earlier_user_turns() {
    let url = spawn_bridge(BridgeConfig::echo(SECRET)).await;

    let conversation = vec![user("a"), assistant("A"), user("b"), assistant("B"), user("c")];
    let (status, answer) = status_and_json(dispatch(&url, &dispatch_payload(conversation)).await).await;
    let (_, legacy) = status_and_json(dispatch(&url, &json!({"content": "solo"})).await).await;

    assert_eq!(status, 200);
    assert_eq!(
        answer,
        json!({"messages": [{"role": "assistant", "content": "echo: c (history: 2 turns)"}]})
    );
    assert_eq!(legacy["messages"][0]["content"], "echo: solo (history: 0 turns)");
}

#[tokio::test]
async fn echo_with_choices_offers_yes_and_no_and_answers_a_tap_without_new_ones() {
    let url = spawn_bridge(BridgeConfig::echo_offering_choices(SECRET)).await;

    let question = dispatch_payload(vec![user("shall we?")]);
    let (status, answer) = status_and_json(dispatch(&url, &question).await).await;
    let tap = tap_payload(
        vec![user("shall we?"), assistant("echo: shall we?")],
        "yes",
        "Yes",
    );
    let (tap_status, tapped) = status_and_json(dispatch(&url, &tap).await).await;

    assert_eq!((status, tap_status), (200, 200), "{answer} {tapped}");
    assert_eq!(
        answer,
        json!({"messages": [{"role": "assistant", "content": "echo: shall we? (history: 0 turns)"}],
               "choices": [{"id": "yes", "label": "Yes", "style": "primary"}, {"id": "no", "label": "No"}]})
    );
    assert_eq!(
        tapped,
        json!({"messages": [{"role": "assistant", "content": "echo: tapped Yes (history: 1 turn)"}]})
    );
    // Without --choices a tap is echoed as the words it stands for.
    let plain = spawn_bridge(BridgeConfig::echo(SECRET)).await;
    let (_, echoed) = status_and_json(dispatch(&plain, &tap).await).await;
    assert_eq!(echoed["messages"][0]["content"], "echo: Yes (history: 1 turn)");
}

/// The answer's `attachments`, read as the gateway reads them.
fn attachments_of(answer: &Value) -> Vec<FileIn> {
    serde_json::from_value(answer["attachments"].clone()).unwrap_or_else(|e| panic!("{e}: {answer}"))
}

#[tokio::test]
async fn echo_with_file_answers_with_its_png_captioned_with_the_text_and_a_tap_without_it() {
    let url = spawn_bridge(BridgeConfig::echo_sending_a_file(SECRET)).await;

    let (status, answer) =
        status_and_json(dispatch(&url, &dispatch_payload(vec![user("a picture, please")])).await).await;
    let tap = tap_payload(
        vec![user("shall we?"), assistant("echo: shall we?")],
        "yes",
        "Yes",
    );
    let (_, tapped) = status_and_json(dispatch(&url, &tap).await).await;

    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        answer["messages"],
        json!([{"role": "assistant", "content": "echo: a picture, please (history: 0 turns)"}]),
        "the text first; the file is posted after it"
    );
    let [picture] = &attachments_of(&answer)[..] else {
        panic!("one picture: {answer}")
    };
    assert_eq!(picture.name.as_deref(), Some("echo.png"));
    assert_eq!(picture.mime.as_deref(), Some("image/png"));
    assert_eq!(picture.caption.as_deref(), Some("echo: a picture, please"));
    assert!(picture.url.is_none());
    let png = BASE64.decode(picture.data.as_deref().unwrap()).unwrap();
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "a PNG");
    assert_eq!(png, *ECHO_PNG);
    picture.clone().check().expect("the gateway's own check takes it");
    assert!(
        tapped.get("attachments").is_none(),
        "a tap closes a question: {tapped}"
    );
}

/// The signed events the echo posts to a turn's events URL, each verified as the gateway does.
async fn events_receiver() -> (String, Arc<Mutex<Vec<Value>>>) {
    let received = Arc::new(Mutex::new(Vec::new()));
    let app = Router::new()
        .route(
            "/events",
            post(
                |State(received): State<Arc<Mutex<Vec<Value>>>>,
                 headers: HeaderMap,
                 body: axum::body::Bytes| async move {
                    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
                    let verified = signature::verify(
                        SECRET,
                        header("webhook-id"),
                        header("webhook-timestamp"),
                        header("webhook-signature"),
                        &body,
                        now(),
                    );
                    if verified.is_err() {
                        return StatusCode::UNAUTHORIZED;
                    }
                    received
                        .lock()
                        .unwrap()
                        .push(serde_json::from_slice(&body).unwrap());
                    StatusCode::OK
                },
            ),
        )
        .with_state(received.clone());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/events", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, received)
}

#[tokio::test]
async fn echo_with_file_and_async_carries_the_picture_on_its_message_event() {
    let (events_url, received) = events_receiver().await;
    let mut config = BridgeConfig::echo_sending_a_file(SECRET);
    config.answer_later = Some(Duration::from_millis(10));
    let url = spawn_bridge(config).await;
    let mut payload = dispatch_payload(vec![user("later, with a picture")]);
    payload["reply"] = json!({ "url": events_url });

    let (status, accepted) = status_and_json(dispatch(&url, &payload).await).await;

    assert_eq!(status, 202, "{accepted}");
    crate::support::eventually("the echo posts status, message and done", || async {
        received.lock().unwrap().len() == 3
    })
    .await;
    let events = received.lock().unwrap().clone();
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["status", "message", "done"]);
    assert_eq!(
        events[1]["content"],
        "echo: later, with a picture (history: 0 turns)"
    );
    let [picture] = &attachments_of(&events[1])[..] else {
        panic!("one picture: {}", events[1])
    };
    assert_eq!(picture.name.as_deref(), Some("echo.png"));
    assert_eq!(picture.caption.as_deref(), Some("echo: later, with a picture"));
}

#[tokio::test]
async fn an_upstreams_images_and_audio_come_back_as_inline_attachments_after_the_text() {
    let upstream = Upstream::start().await;
    let png = BASE64.encode(&*ECHO_PNG);
    let mp3 = BASE64.encode(b"ID3\x04\x00\x00frames");
    // OpenRouter's image answer, then OpenAI's audio answer (`content` null beside `audio`).
    let completion = |message: Value| {
        json!({"id": "chatcmpl-1", "object": "chat.completion",
               "choices": [{"index": 0, "finish_reason": "stop", "message": message}]})
    };
    let image = json!({"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{png}")}});
    let image_answer =
        completion(json!({"role": "assistant", "content": "A ring, as asked.", "images": [image]}));
    let audio =
        json!({"id": "audio_1", "expires_at": 1_729_018_505, "data": mp3, "transcript": "Hello there."});
    let audio_answer =
        completion(json!({"role": "assistant", "content": null, "refusal": null, "audio": audio}));
    upstream.script([
        UpstreamAnswer::Status(200, image_answer, None),
        UpstreamAnswer::Status(200, audio_answer, None),
    ]);
    let mut config = upstream_config(&upstream);
    config.modalities = vec![Modality::Text, Modality::Audio];
    config.audio_voice = "coral".into();
    let url = spawn_bridge(BridgeConfig::upstream(SECRET, config)).await;

    let (status, drawn) = status_and_json(dispatch(&url, &dispatch_payload(vec![user("draw")])).await).await;
    let (_, spoken) = status_and_json(dispatch(&url, &dispatch_payload(vec![user("say hi")])).await).await;

    assert_eq!(status, 200, "{drawn}");
    assert_eq!(drawn["messages"][0]["content"], "A ring, as asked.");
    let [image] = &attachments_of(&drawn)[..] else {
        panic!("one image: {drawn}")
    };
    assert_eq!(
        (
            image.name.as_deref(),
            image.mime.as_deref(),
            image.data.as_deref()
        ),
        (Some("image-1.png"), Some("image/png"), Some(png.as_str()))
    );
    assert_eq!(
        spoken["messages"],
        json!([{"role": "assistant", "content": "Hello there."}]),
        "the transcript is the text"
    );
    let [audio] = &attachments_of(&spoken)[..] else {
        panic!("one audio file: {spoken}")
    };
    assert_eq!(
        (
            audio.name.as_deref(),
            audio.mime.as_deref(),
            audio.data.as_deref()
        ),
        (Some("answer.mp3"), Some("audio/mpeg"), Some(mp3.as_str()))
    );
    let asked = &upstream.calls()[0].body;
    assert_eq!(asked["modalities"], json!(["text", "audio"]));
    assert_eq!(asked["audio"], json!({"voice": "coral", "format": "mp3"}));
}

fn choices_tool_bridge(upstream: &Upstream) -> BridgeConfig {
    let mut config = upstream_config(upstream);
    config.choices_tool = true;
    BridgeConfig::upstream(SECRET, config)
}

#[tokio::test]
async fn with_the_choices_tool_the_upstream_gets_one_tool_and_its_call_becomes_the_choices() {
    let upstream = Upstream::start().await;
    upstream.script([
        offering(
            json!("Book the 10:00 slot?"),
            json!({"choices": [{"id": "book", "label": "Book it", "style": "primary"},
                               {"id": "later", "label": "Not now", "style": "muted"}]}),
        ),
        offering(
            Value::Null,
            json!({"text": "Which team?", "reusable": true,
                   "choices": [{"id": "billing", "label": "Billing"}, {"id": "tech", "label": "Technical"}]}),
        ),
    ]);
    let url = spawn_bridge(choices_tool_bridge(&upstream)).await;

    let (status, booked) =
        status_and_json(dispatch(&url, &dispatch_payload(vec![user("slots?")])).await).await;
    let (_, menu) = status_and_json(dispatch(&url, &dispatch_payload(vec![user("help")])).await).await;

    assert_eq!(status, 200, "{booked}");
    assert_eq!(
        booked,
        json!({"messages": [{"role": "assistant", "content": "Book the 10:00 slot?"}],
               "choices": [{"id": "book", "label": "Book it", "style": "primary"},
                           {"id": "later", "label": "Not now"}]}),
        "an unknown style is left out"
    );
    assert_eq!(
        menu,
        json!({"messages": [{"role": "assistant", "content": "Which team?"}],
               "choices": [{"id": "billing", "label": "Billing"}, {"id": "tech", "label": "Technical"}],
               "choices_reusable": true}),
        "the call's text when the model wrote none"
    );
    let tools = &upstream.calls()[0].body["tools"];
    assert_eq!(tools.as_array().map(Vec::len), Some(1), "{tools}");
    assert_eq!(tools[0]["type"], "function");
    assert_eq!(tools[0]["function"]["name"], "offer_choices");
    assert_eq!(tools[0]["function"]["parameters"]["required"], json!(["choices"]));
}

#[tokio::test]
async fn an_offer_the_platform_could_not_show_goes_out_as_text_alone_never_as_an_error() {
    let upstream = Upstream::start().await;
    let long_labels: Vec<Value> = (1..=4)
        .map(|i| json!({"id": format!("o{i}"), "label": format!("Option number {i} of the four")}))
        .collect();
    upstream.script([
        offering(json!("Pick one"), json!("{not json")),
        offering(json!("Pick one"), json!({"choices": [{"label": "no id"}]})),
        offering(json!("Pick one"), json!({ "choices": long_labels })),
    ]);
    let url = spawn_bridge(choices_tool_bridge(&upstream)).await;
    let mut on_whatsapp = dispatch_payload(vec![user("options?")]);
    on_whatsapp["channel"]["platform"] = "whatsapp".into();

    for (case, payload) in [
        ("unreadable arguments", dispatch_payload(vec![user("options?")])),
        (
            "a choice with neither id nor url",
            dispatch_payload(vec![user("options?")]),
        ),
        ("labels over WhatsApp's 24 characters", on_whatsapp),
    ] {
        let (status, answer) = status_and_json(dispatch(&url, &payload).await).await;
        assert_eq!(status, 200, "{case}: {answer}");
        assert_eq!(
            answer,
            json!({"messages": [{"role": "assistant", "content": "Pick one"}]}),
            "{case}"
        );
    }
}

#[tokio::test]
async fn a_tap_reaches_the_upstream_as_the_users_words_its_label() {
    let upstream = Upstream::start().await;
    let url = spawn_bridge(choices_tool_bridge(&upstream)).await;

    let tap = tap_payload(
        vec![user("slots?"), assistant("Book the 10:00 slot?")],
        "book",
        "Book it",
    );
    let (status, answer) = status_and_json(dispatch(&url, &tap).await).await;

    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        upstream.calls()[0].body["messages"],
        json!([
            {"role": "user", "content": "slots?"},
            {"role": "assistant", "content": "Book the 10:00 slot?"},
            {"role": "user", "content": "Book it"},
        ]),
        "no `action` field an OpenAI server would refuse"
    );
}

// --- gateway → bridge → upstream → platform -------------------------------------------

#[tokio::test]
async fn gateway_to_bridge_to_upstream_keeps_the_history_intact_over_three_turns() {
    let app = spawn_app().await;
    let platforms = FakePlatforms::start().await;
    let tenant = provision_tenant_at(&app.pool, "acme", Some(&platforms.base_url)).await;
    let upstream = Upstream::start().await;
    let mut bridge = BridgeConfig::upstream(&tenant.dispatch_secret, upstream_config(&upstream));
    bridge.system_prompt = Some("You are the acme assistant.".into());
    let agent_url = spawn_bridge(bridge).await;
    let worker = worker(&app, &agent_url, |_| {});

    // Alice on Telegram, then on Slack (one linked person), then Telegram again.
    deliver(&app, &tenant, Platform::Telegram, telegram_text(2001, "first")).await;
    assert!(matches!(worker.step().await.unwrap(), StepOutcome::Executed(_)));
    deliver(
        &app,
        &tenant,
        Platform::Slack,
        slack_text("1718000600.000100", "second"),
    )
    .await;
    assert!(matches!(worker.step().await.unwrap(), StepOutcome::Executed(_)));
    deliver(&app, &tenant, Platform::Telegram, telegram_text(2002, "third")).await;
    assert!(matches!(worker.step().await.unwrap(), StepOutcome::Executed(_)));
    assert_eq!(worker.step().await.unwrap(), StepOutcome::Empty);

    let calls = upstream.calls();
    assert_eq!(calls.len(), 3);
    assert_eq!(
        calls[2].body["messages"],
        json!([
            {"role": "system", "content": "You are the acme assistant."},
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "answer 1 to first (2 messages)"},
            {"role": "user", "content": "second"},
            {"role": "assistant", "content": "answer 2 to second (4 messages)"},
            {"role": "user", "content": "third"},
        ]),
        "the third turn carries the two earlier turns and their answers, once"
    );
    assert!(calls.iter().all(|c| c.body.get("user").is_none()));

    platforms.wait_for_sends(3).await;
    let sent: Vec<(Platform, String)> = platforms
        .sent()
        .iter()
        .map(|s| (s.platform, s.text().to_owned()))
        .collect();
    assert_eq!(
        sent,
        [
            (Platform::Telegram, "answer 1 to first (2 messages)".into()),
            (Platform::Slack, "answer 2 to second (4 messages)".into()),
            (Platform::Telegram, "answer 3 to third (6 messages)".into()),
        ]
    );
}

/// Telegram's `callback_query` from the fixture's person: a tap on message `on`.
fn telegram_tap(update_id: i64, on: &str, data: &str) -> Vec<u8> {
    let mut update: Value = serde_json::from_slice(&fixture(Platform::Telegram, "callback_query")).unwrap();
    update["update_id"] = update_id.into();
    update["callback_query"]["id"] = format!("cb{update_id}").into();
    update["callback_query"]["message"]["message_id"] = on.parse::<i64>().unwrap().into();
    update["callback_query"]["data"] = data.into();
    serde_json::to_vec(&update).unwrap()
}

#[tokio::test]
async fn gateway_to_bridge_with_the_choices_tool_posts_buttons_and_the_model_hears_the_tap() {
    let app = spawn_app().await;
    let platforms = FakePlatforms::start().await;
    let tenant = provision_tenant_at(&app.pool, "acme", Some(&platforms.base_url)).await;
    let upstream = Upstream::start().await;
    upstream.script([offering(
        json!("Book the 10:00 slot?"),
        json!({"choices": [{"id": "book", "label": "Book it"}, {"id": "later", "label": "Not now"}]}),
    )]);
    let mut config = upstream_config(&upstream);
    config.choices_tool = true;
    let agent_url = spawn_bridge(BridgeConfig::upstream(&tenant.dispatch_secret, config)).await;
    let worker = worker(&app, &agent_url, |_| {});

    deliver(&app, &tenant, Platform::Telegram, telegram_text(2201, "slots?")).await;
    let StepOutcome::Executed(asked) = worker.step().await.unwrap() else {
        panic!("the question is answered");
    };
    let question = platforms.sent_to(Platform::Telegram).pop().unwrap();
    assert_eq!(question.text(), "Book the 10:00 slot?");
    let keyboard = &question.body["reply_markup"]["inline_keyboard"][0];
    assert_eq!(
        (&keyboard[0]["text"], &keyboard[1]["text"]),
        (&json!("Book it"), &json!("Not now"))
    );
    let on = {
        let mut tx = app.tenant_tx(tenant.tenant).await;
        let parts = channel_bridge::db::parts::reply_parts(&mut tx, asked)
            .await
            .unwrap();
        parts.last().and_then(|p| p.platform_message_id.clone()).unwrap()
    };

    let book = keyboard[0]["callback_data"].as_str().unwrap();
    deliver(&app, &tenant, Platform::Telegram, telegram_tap(2202, &on, book)).await;
    while worker.step().await.unwrap() != StepOutcome::Empty {}

    let calls = upstream.calls();
    assert_eq!(calls.len(), 2);
    assert_eq!(
        calls[1].body["messages"],
        json!([
            {"role": "user", "content": "slots?"},
            {"role": "assistant", "content": "Book the 10:00 slot?"},
            {"role": "user", "content": "Book it"},
        ]),
        "the tap is the person's words, the offer its answer's text"
    );
    let answer = platforms.sent_to(Platform::Telegram).pop().unwrap();
    assert_eq!(answer.text(), "answer 2 to Book it (3 messages)");
    assert_eq!(answer.body["reply_parameters"]["message_id"].to_string(), on);
}

// --- streaming ------------------------------------------------------------------------

#[tokio::test]
async fn with_stream_the_bridge_asks_for_a_stream_and_relays_it_in_the_gateway_format() {
    let upstream = Upstream::start().await;
    upstream.script([UpstreamAnswer::Stream(vec![
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\"}}]}\n\n".into(),
        openai_chunk("Hel"),
        openai_chunk("lo"),
        "data: [DONE]\n\n".into(),
    ])]);
    let mut config = upstream_config(&upstream);
    config.stream = true;
    let url = spawn_bridge(BridgeConfig::upstream(SECRET, config)).await;
    let response = dispatch(&url, &dispatch_payload(vec![user("hi")])).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let body = response.text().await.unwrap();
    assert_eq!(
        body,
        "event: delta\ndata: {\"content\":\"Hel\"}\n\n\
         event: delta\ndata: {\"content\":\"lo\"}\n\n\
         event: done\ndata: {}\n\n"
    );
    assert_eq!(upstream.calls()[0].body["stream"], true);

    // An upstream that ignores `stream` and answers JSON is read as before.
    let (status, json) = status_and_json(dispatch(&url, &dispatch_payload(vec![user("again")])).await).await;
    assert_eq!(status, 200);
    assert_eq!(json["messages"][0]["content"], "answer 2 to again (1 messages)");
}

#[tokio::test]
async fn an_upstream_stream_without_done_is_relayed_without_the_final_event() {
    let upstream = Upstream::start().await;
    upstream.script([UpstreamAnswer::Stream(vec![openai_chunk("cut")])]);
    let mut config = upstream_config(&upstream);
    config.stream = true;
    let url = spawn_bridge(BridgeConfig::upstream(SECRET, config)).await;
    let body = dispatch(&url, &dispatch_payload(vec![user("hi")]))
        .await
        .text()
        .await
        .unwrap();
    assert_eq!(body, "event: delta\ndata: {\"content\":\"cut\"}\n\n");
}

#[tokio::test]
async fn gateway_to_streaming_bridge_shows_a_telegram_draft_and_delivers_the_answer_once() {
    let app = spawn_app().await;
    let platforms = FakePlatforms::start().await;
    let tenant = provision_tenant_at(&app.pool, "acme", Some(&platforms.base_url)).await;
    let upstream = Upstream::start().await;
    upstream.script([UpstreamAnswer::Stream(vec![
        openai_chunk("streamed "),
        openai_chunk("answer"),
        "data: [DONE]\n\n".into(),
    ])]);
    let mut config = upstream_config(&upstream);
    config.stream = true;
    let agent_url = spawn_bridge(BridgeConfig::upstream(&tenant.dispatch_secret, config)).await;
    let worker = worker(&app, &agent_url, |_| {});
    deliver(&app, &tenant, Platform::Telegram, telegram_text(2101, "stream")).await;
    assert!(matches!(worker.step().await.unwrap(), StepOutcome::Executed(_)));
    let finals = platforms.calls("sendMessage");
    assert_eq!(finals.len(), 1);
    assert_eq!(finals[0].text(), "streamed answer");
}
