//! One real HTTP server playing the three platforms' send APIs (Slack chat.postMessage and
//! conversations.replies, Telegram sendMessage, WhatsApp /{phone}/messages). It records the
//! exact requests and answers from a per-platform script, then with success.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use channel_bridge::domain::Platform;
use serde_json::{json, Value};
use tokio::sync::Notify;

/// One request a platform received.
#[derive(Debug, Clone)]
pub struct Sent {
    pub platform: Platform,
    pub path: String,
    pub authorization: Option<String>,
    pub body: Value,
}

impl Sent {
    /// The posted text, whatever the platform calls it.
    pub fn text(&self) -> &str {
        match self.platform {
            Platform::Slack | Platform::Telegram => self.body["text"].as_str().unwrap_or_default(),
            Platform::Whatsapp => self.body["text"]["body"].as_str().unwrap_or_default(),
        }
    }
}

#[derive(Debug, Clone)]
pub enum Answer {
    /// Success with a fresh platform id.
    Ok,
    /// This status and body, with an optional Retry-After header.
    Status(u16, Value, Option<u64>),
    /// Keep the message (Slack: visible in the thread) but never answer: the sender's
    /// process dies while waiting.
    HangAfterPosting,
    /// Never answer and keep nothing.
    HangBeforePosting,
    /// Post, then answer with success only once the test adds a permit (a slow platform
    /// the test paces).
    OkWhenReleased(Arc<tokio::sync::Semaphore>),
    /// Post, then answer with success after this long (a platform that is slow for real).
    OkAfter(std::time::Duration),
}

struct ThreadMessage {
    channel: String,
    thread_ts: String,
    ts: String,
    part_key: Option<String>,
}

#[derive(Default)]
struct PlatformState {
    sent: Mutex<Vec<Sent>>,
    scripts: Mutex<Vec<(Platform, VecDeque<Answer>)>>,
    /// Slack messages "in the thread".
    slack_thread: Mutex<Vec<ThreadMessage>>,
    arrived: Notify,
}

pub struct FakePlatforms {
    pub base_url: String,
    state: Arc<PlatformState>,
}

impl FakePlatforms {
    pub async fn start() -> Self {
        let state = Arc::new(PlatformState::default());
        let app = Router::new()
            .route("/api/chat.postMessage", post(slack_post))
            .route("/api/conversations.replies", get(slack_replies))
            .route("/{bot}/sendMessage", post(telegram_send))
            .route("/{version}/{phone}/messages", post(whatsapp_send))
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base_url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self { base_url, state }
    }

    pub fn script(&self, platform: Platform, answers: impl IntoIterator<Item = Answer>) {
        let mut scripts = self.state.scripts.lock().unwrap();
        match scripts.iter_mut().find(|(p, _)| *p == platform) {
            Some((_, queue)) => queue.extend(answers),
            None => scripts.push((platform, answers.into_iter().collect())),
        }
    }

    pub fn sent(&self) -> Vec<Sent> {
        self.state.sent.lock().unwrap().clone()
    }

    pub fn sent_to(&self, platform: Platform) -> Vec<Sent> {
        self.sent()
            .into_iter()
            .filter(|s| s.platform == platform)
            .collect()
    }

    /// The part keys of the Slack messages that exist in threads, in posting order.
    pub fn slack_thread_keys(&self) -> Vec<String> {
        self.state
            .slack_thread
            .lock()
            .unwrap()
            .iter()
            .filter_map(|m| m.part_key.clone())
            .collect()
    }

    /// Waits until at least `n` send requests arrived.
    pub async fn wait_for_sends(&self, n: usize) {
        loop {
            let notified = self.state.arrived.notified();
            if self.state.sent.lock().unwrap().len() >= n {
                return;
            }
            tokio::time::timeout(std::time::Duration::from_secs(20), notified)
                .await
                .expect("the platform receives the expected sends");
        }
    }
}

fn next_answer(state: &PlatformState, platform: Platform) -> Answer {
    let mut scripts = state.scripts.lock().unwrap();
    scripts
        .iter_mut()
        .find(|(p, _)| *p == platform)
        .and_then(|(_, queue)| queue.pop_front())
        .unwrap_or(Answer::Ok)
}

fn record(
    state: &PlatformState,
    platform: Platform,
    path: String,
    headers: &HeaderMap,
    body: Value,
) -> usize {
    let authorization = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let mut sent = state.sent.lock().unwrap();
    sent.push(Sent {
        platform,
        path,
        authorization,
        body,
    });
    state.arrived.notify_waiters();
    sent.len()
}

async fn answer(answer: Answer, success: Value) -> Response {
    match answer {
        Answer::Ok => Json(success).into_response(),
        Answer::Status(status, body, retry_after) => {
            let mut response = (StatusCode::from_u16(status).unwrap(), Json(body)).into_response();
            if let Some(secs) = retry_after {
                response
                    .headers_mut()
                    .insert("retry-after", secs.to_string().parse().unwrap());
            }
            response
        }
        Answer::HangAfterPosting | Answer::HangBeforePosting => std::future::pending().await,
        Answer::OkAfter(delay) => {
            tokio::time::sleep(delay).await;
            Json(success).into_response()
        }
        Answer::OkWhenReleased(gate) => {
            gate.acquire().await.expect("gate stays open").forget();
            Json(success).into_response()
        }
    }
}

async fn slack_post(
    State(state): State<Arc<PlatformState>>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    let n = record(
        &state,
        Platform::Slack,
        "/api/chat.postMessage".into(),
        &headers,
        body.clone(),
    );
    let reply = next_answer(&state, Platform::Slack);
    let ts = format!("1800000000.{n:06}");
    if matches!(
        reply,
        Answer::Ok | Answer::HangAfterPosting | Answer::OkWhenReleased(_)
    ) {
        let key = body
            .pointer("/metadata/event_payload/part_key")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let channel = body["channel"].as_str().unwrap_or_default().to_owned();
        let thread = body["thread_ts"].as_str().unwrap_or_default().to_owned();
        state.slack_thread.lock().unwrap().push(ThreadMessage {
            channel,
            thread_ts: thread,
            ts: ts.clone(),
            part_key: key,
        });
    }
    answer(
        reply,
        json!({"ok": true, "channel": body["channel"], "ts": ts, "message": {"text": body["text"]}}),
    )
    .await
}

async fn slack_replies(
    State(state): State<Arc<PlatformState>>,
    Query(query): Query<Vec<(String, String)>>,
) -> Response {
    let param = |name: &str| {
        query
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    };
    let (channel, thread) = (param("channel"), param("ts"));
    let messages: Vec<Value> = state
        .slack_thread
        .lock()
        .unwrap()
        .iter()
        .filter(|m| m.channel == channel && m.thread_ts == thread)
        .map(|m| {
            json!({"type": "message", "ts": m.ts, "bot_id": "BBOT1",
                   "metadata": {"event_type": "channel_bridge_reply", "event_payload": {"part_key": m.part_key}}})
        })
        .collect();
    Json(json!({"ok": true, "messages": messages, "has_more": false})).into_response()
}

async fn telegram_send(
    State(state): State<Arc<PlatformState>>,
    Path(bot): Path<String>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    let n = record(
        &state,
        Platform::Telegram,
        format!("/{bot}/sendMessage"),
        &headers,
        body.clone(),
    );
    let reply = next_answer(&state, Platform::Telegram);
    answer(reply, json!({"ok": true, "result": {"message_id": 5000 + n, "chat": {"id": body["chat_id"]}, "text": body["text"]}})).await
}

async fn whatsapp_send(
    State(state): State<Arc<PlatformState>>,
    Path((version, phone)): Path<(String, String)>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    let n = record(
        &state,
        Platform::Whatsapp,
        format!("/{version}/{phone}/messages"),
        &headers,
        body.clone(),
    );
    let reply = next_answer(&state, Platform::Whatsapp);
    let to = body["to"].clone();
    answer(reply, json!({"messaging_product": "whatsapp", "contacts": [{"input": to, "wa_id": "16505551234"}], "messages": [{"id": format!("wamid.OUT{n}")}]})).await
}
