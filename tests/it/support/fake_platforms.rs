//! One real HTTP server playing the three platforms' send APIs (Slack chat.postMessage and
//! conversations.replies, Telegram sendMessage, WhatsApp /{phone}/messages). It records the
//! exact requests and answers from a per-platform script, then with success.
//!
//! Slack's threads are kept as Slack keeps them: each posted message gets a `ts` from the
//! current time (seconds and a unique sequence as microseconds), and `conversations.replies`
//! answers like a Tier 1 non-Marketplace app sees it
//! (<https://docs.slack.dev/apis/web-api/rate-limits>): at most 15 messages
//! a page, from `oldest` on (`inclusive` or not), with `has_more` and an opaque
//! `response_metadata.next_cursor`, and message metadata only with `include_all_metadata`.
//! Every call is recorded with its parameters; a script can answer one with a 429.
//!
//! Typing indicators (Telegram sendChatAction, the WhatsApp read receipt with
//! `typing_indicator`, Slack assistant.threads.setStatus) are recorded apart from the sends,
//! answered from a script of their own (then with success), and numbered in one sequence
//! with the sends, so a test can tell which came first.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use channel_bridge::domain::Platform;
use serde_json::{json, Value};
use tokio::sync::Notify;

/// One request a platform received.
#[derive(Debug, Clone)]
pub struct Sent {
    /// Arrival order among every send and indicator call this server received.
    pub seq: u64,
    /// When it arrived.
    pub at: std::time::Instant,
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
    /// Our metadata's part key; `None` for a person's message.
    part_key: Option<String>,
}

/// Slack's page size limit for non-Marketplace apps
/// (<https://docs.slack.dev/reference/methods/conversations.replies>).
const SLACK_MAX_PAGE: usize = 15;

#[derive(Default)]
struct PlatformState {
    sent: Mutex<Vec<Sent>>,
    scripts: Mutex<Vec<(Platform, VecDeque<Answer>)>>,
    /// Slack messages "in the thread".
    slack_thread: Mutex<Vec<ThreadMessage>>,
    /// The sequence that makes each Slack `ts` unique.
    slack_seq: Mutex<u64>,
    /// Every conversations.replies call, with its query parameters.
    replies_calls: Mutex<Vec<Vec<(String, String)>>>,
    /// Answers to conversations.replies before the default (reading the thread).
    replies_script: Mutex<VecDeque<Answer>>,
    /// Typing indicator calls, and answers for the next ones (then success).
    typing: Mutex<Vec<Sent>>,
    typing_script: Mutex<VecDeque<Answer>>,
    /// Answers for the next calls of a streaming method, by method name.
    method_scripts: Mutex<Vec<(&'static str, VecDeque<Answer>)>>,
    /// Flood control: until then, every send of that platform answers 429 with this
    /// `retry_after` (seconds), as Telegram does per bot.
    flood: Mutex<Option<(Platform, std::time::Instant, u64)>>,
    /// The arrival sequence shared by sends and indicator calls.
    seq: std::sync::atomic::AtomicU64,
    arrived: Notify,
}

impl PlatformState {
    /// A fresh Slack `ts` at `secs` (unix seconds), unique by its microseconds.
    fn slack_ts(&self, secs: i64) -> String {
        let mut seq = self.slack_seq.lock().unwrap();
        *seq += 1;
        format!("{secs}.{:06}", *seq)
    }
}

pub struct FakePlatforms {
    pub base_url: String,
    state: Arc<PlatformState>,
    /// The files and reactions APIs (`fake_files`), on the same server.
    files: Arc<super::fake_files::FilesState>,
}

impl FakePlatforms {
    pub async fn start() -> Self {
        let state = Arc::new(PlatformState::default());
        let files = Arc::new(super::fake_files::FilesState::default());
        let app = Router::new()
            .route("/api/chat.postMessage", post(slack_post))
            .route("/api/conversations.replies", get(slack_replies))
            .route("/api/assistant.threads.setStatus", post(slack_set_status))
            .route("/api/conversations.open", post(slack_open))
            .route("/{bot}/sendMessage", post(telegram_send))
            .route("/{bot}/sendChatAction", post(telegram_chat_action))
            .route("/{version}/{phone}/messages", post(whatsapp_send))
            .route("/api/chat.startStream", post(slack_start_stream))
            .route("/api/chat.appendStream", post(slack_append_stream))
            .route("/api/chat.stopStream", post(slack_stop_stream))
            .route("/api/chat.update", post(slack_update))
            .route("/{bot}/sendMessageDraft", post(telegram_draft))
            .route("/{bot}/editMessageText", post(telegram_edit))
            .route("/{bot}/editMessageReplyMarkup", post(telegram_edit_markup))
            .with_state(state.clone())
            .merge(super::fake_files::routes(files.clone()));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base_url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self {
            base_url,
            state,
            files,
        }
    }

    /// The files and reactions APIs' calls, scripts and state.
    pub fn files(&self) -> &super::fake_files::FilesState {
        &self.files
    }

    pub fn script(&self, platform: Platform, answers: impl IntoIterator<Item = Answer>) {
        let mut scripts = self.state.scripts.lock().unwrap();
        match scripts.iter_mut().find(|(p, _)| *p == platform) {
            Some((_, queue)) => queue.extend(answers),
            None => scripts.push((platform, answers.into_iter().collect())),
        }
    }

    /// Every send of `platform` answers 429 (`retry_after` seconds) until `until`.
    pub fn flood_control(&self, platform: Platform, until: std::time::Instant, retry_after: u64) {
        *self.state.flood.lock().unwrap() = Some((platform, until, retry_after));
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

    /// Answers for the next calls of a streaming method (`"chat.update"`,
    /// `"editMessageText"`…), then success.
    pub fn script_method(&self, method: &'static str, answers: impl IntoIterator<Item = Answer>) {
        let mut scripts = self.state.method_scripts.lock().unwrap();
        match scripts.iter_mut().find(|(m, _)| *m == method) {
            Some((_, queue)) => queue.extend(answers),
            None => scripts.push((method, answers.into_iter().collect())),
        }
    }

    /// The requests whose path ends with `/{method}` (`"chat.postMessage"`, `"sendMessage"`…).
    pub fn calls(&self, method: &str) -> Vec<Sent> {
        let suffix = format!("/{method}");
        self.sent()
            .into_iter()
            .filter(|s| s.path.ends_with(&suffix))
            .collect()
    }

    /// Waits until at least `n` requests of `method` arrived.
    pub async fn wait_for_calls(&self, method: &str, n: usize) {
        loop {
            let notified = self.state.arrived.notified();
            if self.calls(method).len() >= n {
                return;
            }
            tokio::time::timeout(std::time::Duration::from_secs(20), notified)
                .await
                .expect("the platform receives the expected calls");
        }
    }

    /// Adds `count` messages of a person to a Slack thread, at `secs` (unix seconds).
    pub fn slack_thread_add(&self, channel: &str, thread_ts: &str, count: usize, secs: i64) {
        for _ in 0..count {
            let ts = self.state.slack_ts(secs);
            self.state.slack_thread.lock().unwrap().push(ThreadMessage {
                channel: channel.into(),
                thread_ts: thread_ts.into(),
                ts,
                part_key: None,
            });
        }
    }

    /// The `ts` of the Slack message that carries `part_key`, if one was posted.
    pub fn slack_ts_of(&self, part_key: &str) -> Option<String> {
        self.state
            .slack_thread
            .lock()
            .unwrap()
            .iter()
            .find(|m| m.part_key.as_deref() == Some(part_key))
            .map(|m| m.ts.clone())
    }

    /// Every conversations.replies call so far, with its query parameters.
    pub fn replies_calls(&self) -> Vec<Vec<(String, String)>> {
        self.state.replies_calls.lock().unwrap().clone()
    }

    /// Answers for the next conversations.replies calls (then the thread as it is).
    pub fn script_replies(&self, answers: impl IntoIterator<Item = Answer>) {
        self.state.replies_script.lock().unwrap().extend(answers);
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

    /// Every typing indicator call so far, in arrival order.
    pub fn typing(&self) -> Vec<Sent> {
        self.state.typing.lock().unwrap().clone()
    }

    pub fn typing_to(&self, platform: Platform) -> Vec<Sent> {
        self.typing()
            .into_iter()
            .filter(|s| s.platform == platform)
            .collect()
    }

    /// Answers for the next typing indicator calls (then success).
    pub fn script_typing(&self, answers: impl IntoIterator<Item = Answer>) {
        self.state.typing_script.lock().unwrap().extend(answers);
    }

    /// Waits until at least `n` typing indicator calls arrived.
    pub async fn wait_for_typing(&self, n: usize) {
        loop {
            let notified = self.state.arrived.notified();
            if self.state.typing.lock().unwrap().len() >= n {
                return;
            }
            tokio::time::timeout(std::time::Duration::from_secs(20), notified)
                .await
                .expect("the platform receives the expected typing calls");
        }
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
    if let Some((flooded, until, secs)) = *state.flood.lock().unwrap() {
        if flooded == platform && std::time::Instant::now() < until {
            let body = json!({"ok": false, "error_code": 429,
                              "description": format!("Too Many Requests: retry after {secs}"),
                              "parameters": {"retry_after": secs}});
            return Answer::Status(429, body, Some(secs));
        }
    }
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
        seq: state.seq.fetch_add(1, std::sync::atomic::Ordering::SeqCst),
        at: std::time::Instant::now(),
        platform,
        path,
        authorization,
        body,
    });
    state.arrived.notify_waiters();
    sent.len()
}

/// Records a typing indicator call and answers it from the typing script.
async fn typing_call(
    state: &PlatformState,
    (platform, path): (Platform, String),
    headers: &HeaderMap,
    body: Value,
    success: Value,
) -> Response {
    {
        let mut typing = state.typing.lock().unwrap();
        typing.push(Sent {
            seq: state.seq.fetch_add(1, std::sync::atomic::Ordering::SeqCst),
            at: std::time::Instant::now(),
            platform,
            path,
            authorization: headers
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned),
            body,
        });
        state.arrived.notify_waiters();
    }
    let reply = state.typing_script.lock().unwrap().pop_front();
    answer(reply.unwrap_or(Answer::Ok), success).await
}

async fn slack_set_status(
    State(state): State<Arc<PlatformState>>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    let call = (Platform::Slack, "/api/assistant.threads.setStatus".to_owned());
    typing_call(&state, call, &headers, body, json!({"ok": true})).await
}

async fn telegram_chat_action(
    State(state): State<Arc<PlatformState>>,
    Path(bot): Path<String>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    let call = (Platform::Telegram, format!("/{bot}/sendChatAction"));
    typing_call(&state, call, &headers, body, json!({"ok": true, "result": true})).await
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

/// `conversations.open`: recorded among the sends; the DM of `U…` is `D` and its id, and
/// `UGONE…` is a user Slack no longer has (`user_not_found`).
async fn slack_open(
    State(state): State<Arc<PlatformState>>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    record(
        &state,
        Platform::Slack,
        "/api/conversations.open".into(),
        &headers,
        body.clone(),
    );
    let user = body["users"].as_str().unwrap_or_default();
    if user.starts_with("UGONE") {
        return Json(json!({"ok": false, "error": "user_not_found"})).into_response();
    }
    let user = user.trim_start_matches('U');
    Json(json!({"ok": true, "channel": {"id": format!("D{user}")}})).into_response()
}

async fn slack_post(
    State(state): State<Arc<PlatformState>>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    record(
        &state,
        Platform::Slack,
        "/api/chat.postMessage".into(),
        &headers,
        body.clone(),
    );
    let reply = next_answer(&state, Platform::Slack);
    let ts = state.slack_ts(chrono::Utc::now().timestamp());
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

/// A Slack `ts` as a number that sorts like time: (seconds, microseconds).
fn ts_order(ts: &str) -> (u64, u64) {
    let (secs, micros) = ts.split_once('.').unwrap_or((ts, "0"));
    (secs.parse().unwrap_or(0), micros.parse().unwrap_or(0))
}

async fn slack_replies(
    State(state): State<Arc<PlatformState>>,
    Query(query): Query<Vec<(String, String)>>,
) -> Response {
    state.replies_calls.lock().unwrap().push(query.clone());
    let scripted = state.replies_script.lock().unwrap().pop_front();
    if let Some(scripted) = scripted {
        return answer(scripted, json!({})).await;
    }
    let param = |name: &str| {
        query
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    };
    let (channel, thread) = (param("channel"), param("ts"));
    let limit = param("limit")
        .parse()
        .unwrap_or(SLACK_MAX_PAGE)
        .clamp(1, SLACK_MAX_PAGE);
    let oldest = ts_order(&param("oldest"));
    let inclusive = param("inclusive") == "true";
    let with_metadata = param("include_all_metadata") == "true";
    // The cursor names the first ts of the next page, as Slack's do ("next_ts:…", base64).
    let after = match param("cursor").as_str() {
        "" => None,
        cursor => {
            let decoded = BASE64.decode(cursor).ok().and_then(|b| String::from_utf8(b).ok());
            match decoded.as_deref().and_then(|c| c.strip_prefix("next_ts:")) {
                Some(ts) => Some(ts_order(ts)),
                None => return Json(json!({"ok": false, "error": "invalid_cursor"})).into_response(),
            }
        }
    };
    let mut listed: Vec<(String, Option<String>)> = state
        .slack_thread
        .lock()
        .unwrap()
        .iter()
        .filter(|m| m.channel == channel && m.thread_ts == thread)
        .filter(|m| {
            let at = ts_order(&m.ts);
            (at > oldest || (inclusive && at == oldest)) && after.is_none_or(|first| at >= first)
        })
        .map(|m| (m.ts.clone(), m.part_key.clone()))
        .collect();
    listed.sort_by_key(|(ts, _)| ts_order(ts));
    let has_more = listed.len() > limit;
    let next_cursor = match listed.get(limit) {
        Some((ts, _)) => BASE64.encode(format!("next_ts:{ts}")),
        None => String::new(),
    };
    let messages: Vec<Value> = listed
        .into_iter()
        .take(limit)
        .map(|(ts, key)| match key {
            Some(key) => {
                let mut message = json!({"type": "message", "ts": ts, "thread_ts": thread, "bot_id": "BBOT1",
                    "user": "UBOT1", "text": "a reply"});
                if with_metadata {
                    message["metadata"] = json!({"event_type": "channel_bridge_reply",
                        "event_payload": {"part_key": key}});
                }
                message
            }
            None => json!({"type": "message", "ts": ts, "thread_ts": thread, "user": "U0USER2",
                           "text": "someone else in the thread"}),
        })
        .collect();
    Json(json!({"ok": true, "messages": messages, "has_more": has_more,
                "response_metadata": {"next_cursor": next_cursor}}))
    .into_response()
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
    // A read receipt (with or without a typing indicator) shares the send endpoint.
    if body["status"] == "read" {
        let call = (Platform::Whatsapp, format!("/{version}/{phone}/messages"));
        return typing_call(&state, call, &headers, body, json!({"success": true})).await;
    }
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

fn method_answer(state: &PlatformState, method: &str) -> Answer {
    let mut scripts = state.method_scripts.lock().unwrap();
    scripts
        .iter_mut()
        .find(|(m, _)| *m == method)
        .and_then(|(_, queue)| queue.pop_front())
        .unwrap_or(Answer::Ok)
}

/// Records a streaming method's call and answers it from its script.
async fn method_call(
    state: &PlatformState,
    (platform, path, method): (Platform, String, &str),
    headers: &HeaderMap,
    body: Value,
    success: Value,
) -> Response {
    record(state, platform, path, headers, body);
    answer(method_answer(state, method), success).await
}

async fn slack_start_stream(
    State(state): State<Arc<PlatformState>>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    // The stream is a message in the thread from its start.
    let ts = state.slack_ts(chrono::Utc::now().timestamp());
    state.slack_thread.lock().unwrap().push(ThreadMessage {
        channel: body["channel"].as_str().unwrap_or_default().to_owned(),
        thread_ts: body["thread_ts"].as_str().unwrap_or_default().to_owned(),
        ts: ts.clone(),
        part_key: None,
    });
    let call = (
        Platform::Slack,
        "/api/chat.startStream".to_owned(),
        "chat.startStream",
    );
    let success = json!({"ok": true, "channel": body["channel"], "ts": ts});
    method_call(&state, call, &headers, body, success).await
}

async fn slack_append_stream(
    State(state): State<Arc<PlatformState>>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    let success = json!({"ok": true, "channel": body["channel"], "ts": body["ts"]});
    let call = (
        Platform::Slack,
        "/api/chat.appendStream".to_owned(),
        "chat.appendStream",
    );
    method_call(&state, call, &headers, body, success).await
}

async fn slack_stop_stream(
    State(state): State<Arc<PlatformState>>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    let success = json!({"ok": true, "channel": body["channel"], "ts": body["ts"]});
    let call = (
        Platform::Slack,
        "/api/chat.stopStream".to_owned(),
        "chat.stopStream",
    );
    method_call(&state, call, &headers, body, success).await
}

async fn slack_update(
    State(state): State<Arc<PlatformState>>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    let key = body
        .pointer("/metadata/event_payload/part_key")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let ts = body["ts"].as_str().unwrap_or_default().to_owned();
    let call = (Platform::Slack, "/api/chat.update".to_owned(), "chat.update");
    let reply = {
        record(&state, call.0, call.1, &headers, body.clone());
        method_answer(&state, call.2)
    };
    if matches!(
        reply,
        Answer::Ok | Answer::HangAfterPosting | Answer::OkWhenReleased(_)
    ) {
        let found = {
            let mut thread = state.slack_thread.lock().unwrap();
            let message = thread.iter_mut().find(|m| m.ts == ts);
            message.map(|message| message.part_key = key).is_some()
        };
        if !found {
            let gone = json!({"ok": false, "error": "message_not_found"});
            return Json(gone).into_response();
        }
    }
    answer(
        reply,
        json!({"ok": true, "channel": body["channel"], "ts": ts, "text": body["text"]}),
    )
    .await
}

async fn telegram_draft(
    State(state): State<Arc<PlatformState>>,
    Path(bot): Path<String>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    let call = (
        Platform::Telegram,
        format!("/{bot}/sendMessageDraft"),
        "sendMessageDraft",
    );
    method_call(&state, call, &headers, body, json!({"ok": true, "result": true})).await
}

async fn telegram_edit_markup(
    State(state): State<Arc<PlatformState>>,
    Path(bot): Path<String>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    let success =
        json!({"ok": true, "result": {"message_id": body["message_id"], "chat": {"id": body["chat_id"]}}});
    let call = (
        Platform::Telegram,
        format!("/{bot}/editMessageReplyMarkup"),
        "editMessageReplyMarkup",
    );
    method_call(&state, call, &headers, body, success).await
}

async fn telegram_edit(
    State(state): State<Arc<PlatformState>>,
    Path(bot): Path<String>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    let success = json!({"ok": true, "result": {"message_id": body["message_id"], "chat": {"id": body["chat_id"]}, "text": body["text"]}});
    let call = (
        Platform::Telegram,
        format!("/{bot}/editMessageText"),
        "editMessageText",
    );
    method_call(&state, call, &headers, body, success).await
}
