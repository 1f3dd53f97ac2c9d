//! Local stand-ins for the platforms' send APIs (the calls `crate::platforms` makes): each
//! records where a reply went (and the edit that closes an answer's buttons after a tap, and
//! a file Telegram was sent) and answers as the platform does on success.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde::Serialize;
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::sync::Notify;

use super::served::Served;
pub use super::uploads::PostedFile;
use crate::domain::Platform;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PostedReply {
    pub platform: Platform,
    /// Slack channel, Telegram chat id, WhatsApp recipient.
    pub chat: String,
    /// What the reply is threaded to: Slack `thread_ts`, Telegram
    /// `reply_parameters.message_id`, WhatsApp `context.message_id`.
    pub reply_to: String,
    pub text: String,
    /// The id the stand-in gave the posted message.
    pub message_id: String,
    /// A Telegram `inline_keyboard`'s reply buttons, in order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub buttons: Vec<PostedButton>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PostedButton {
    pub label: String,
    /// What a tap sends back: Telegram's `callback_data`.
    pub data: String,
}

/// A message changed after a tap closed its choices: Telegram's keyboard removed
/// (`editMessageReplyMarkup`), Slack's buttons replaced (`chat.update`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PostedEdit {
    pub platform: Platform,
    pub chat: String,
    pub message_id: String,
}

#[derive(Default)]
struct Recorded {
    replies: Mutex<Vec<PostedReply>>,
    edits: Mutex<Vec<PostedEdit>>,
    files: Mutex<Vec<PostedFile>>,
    arrived: Notify,
}

pub struct PlatformStandIns {
    pub base_url: String,
    recorded: Arc<Recorded>,
    served: Served,
}

/// Flags of `channel-bridge platform-stand-in`.
#[derive(Debug, clap::Args)]
pub struct StandInArgs {
    /// Where the stand-ins listen; give connectors `--api-base-url http://<this address>`.
    #[arg(long, env = "CB_STAND_IN_BIND", default_value = "127.0.0.1:9100")]
    pub bind: std::net::SocketAddr,
}

/// Until ctrl-c or SIGTERM; README "First steps" uses it.
pub async fn run_cli(args: StandInArgs) -> anyhow::Result<()> {
    use anyhow::Context;
    let listener = TcpListener::bind(args.bind)
        .await
        .with_context(|| format!("Failed to bind {}", args.bind))?;
    let stand_ins = PlatformStandIns::serve(listener)?;
    eprintln!(
        "platform stand-ins (Slack, Telegram, WhatsApp send APIs) on {}",
        stand_ins.base_url
    );
    tokio::select! {
        result = print_replies(&stand_ins) => result,
        () = crate::startup::shutdown_signal() => {
            stand_ins.stop().await;
            Ok(())
        }
    }
}

async fn print_replies(stand_ins: &PlatformStandIns) -> anyhow::Result<()> {
    use std::io::Write;
    let mut printed = 0;
    loop {
        let replies = stand_ins.replies_reaching(printed + 1).await;
        let mut out = std::io::stdout().lock();
        for reply in &replies[printed..] {
            writeln!(out, "{}", serde_json::to_string(reply)?)?;
        }
        out.flush()?;
        printed = replies.len();
    }
}

impl PlatformStandIns {
    pub async fn start() -> anyhow::Result<Self> {
        Self::serve(TcpListener::bind("127.0.0.1:0").await?)
    }

    fn serve(listener: TcpListener) -> anyhow::Result<Self> {
        let recorded = Arc::new(Recorded::default());
        let app = Router::new()
            .route("/api/chat.postMessage", post(slack_post))
            .route("/api/chat.update", post(slack_update))
            .route("/{bot}/sendMessage", post(telegram_send))
            .route("/{bot}/editMessageReplyMarkup", post(telegram_edit))
            .route("/{bot}/sendPhoto", post(telegram_photo))
            .route("/{bot}/sendDocument", post(telegram_document))
            .route("/{version}/{phone}/messages", post(whatsapp_send))
            .with_state(recorded.clone());
        let base_url = format!("http://{}", listener.local_addr()?);
        Ok(Self {
            base_url,
            recorded,
            served: Served::spawn(listener, app),
        })
    }

    pub fn replies(&self) -> Vec<PostedReply> {
        self.recorded
            .replies
            .lock()
            .expect("lock holders never panic")
            .clone()
    }

    pub fn edits(&self) -> Vec<PostedEdit> {
        self.recorded
            .edits
            .lock()
            .expect("lock holders never panic")
            .clone()
    }

    pub fn files(&self) -> Vec<PostedFile> {
        self.recorded
            .files
            .lock()
            .expect("lock holders never panic")
            .clone()
    }

    async fn replies_reaching(&self, n: usize) -> Vec<PostedReply> {
        self.reaching(n, Self::replies).await
    }

    /// Registered before the check, so an arrival in between is not missed.
    async fn reaching<T>(&self, n: usize, read: fn(&Self) -> Vec<T>) -> Vec<T> {
        loop {
            let notified = self.recorded.arrived.notified();
            let seen = read(self);
            if seen.len() >= n {
                return seen;
            }
            notified.await;
        }
    }

    /// Waits (without polling) until at least `n` replies arrived, or `timeout` passes.
    pub async fn wait_for_replies(&self, n: usize, timeout: Duration) -> anyhow::Result<Vec<PostedReply>> {
        tokio::time::timeout(timeout, self.replies_reaching(n))
            .await
            .map_err(|_| anyhow::anyhow!("no reply reached the platform stand-ins within {timeout:?}"))
    }

    /// As `wait_for_replies`, for edits.
    pub async fn wait_for_edits(&self, n: usize, timeout: Duration) -> anyhow::Result<Vec<PostedEdit>> {
        tokio::time::timeout(timeout, self.reaching(n, Self::edits))
            .await
            .map_err(|_| anyhow::anyhow!("no edit reached the platform stand-ins within {timeout:?}"))
    }

    /// As `wait_for_replies`, for files.
    pub async fn wait_for_files(&self, n: usize, timeout: Duration) -> anyhow::Result<Vec<PostedFile>> {
        tokio::time::timeout(timeout, self.reaching(n, Self::files))
            .await
            .map_err(|_| anyhow::anyhow!("no file reached the platform stand-ins within {timeout:?}"))
    }

    pub async fn stop(self) {
        self.served.stop().await;
    }
}

/// The reply's place among all replies (1 for the first) names the message it makes.
fn record(recorded: &Recorded, reply: impl FnOnce(usize) -> PostedReply) -> usize {
    let mut replies = recorded.replies.lock().expect("lock holders never panic");
    let n = replies.len() + 1;
    replies.push(reply(n));
    recorded.arrived.notify_waiters();
    n
}

fn record_edit(recorded: &Recorded, edit: PostedEdit) {
    recorded
        .edits
        .lock()
        .expect("lock holders never panic")
        .push(edit);
    recorded.arrived.notify_waiters();
}

fn text_of(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn slack_ts(n: usize) -> String {
    format!("1900000000.{n:06}")
}

async fn slack_post(State(recorded): State<Arc<Recorded>>, Json(body): Json<Value>) -> Json<Value> {
    let n = record(&recorded, |n| PostedReply {
        platform: Platform::Slack,
        chat: text_of(&body["channel"]),
        reply_to: text_of(&body["thread_ts"]),
        text: text_of(&body["text"]),
        message_id: slack_ts(n),
        buttons: Vec::new(),
    });
    Json(json!({"ok": true, "channel": body["channel"], "ts": slack_ts(n)}))
}

async fn slack_update(State(recorded): State<Arc<Recorded>>, Json(body): Json<Value>) -> Json<Value> {
    record_edit(
        &recorded,
        PostedEdit {
            platform: Platform::Slack,
            chat: text_of(&body["channel"]),
            message_id: text_of(&body["ts"]),
        },
    );
    Json(json!({"ok": true, "channel": body["channel"], "ts": body["ts"]}))
}

fn telegram_id(n: usize) -> usize {
    9000 + n
}

async fn telegram_send(State(recorded): State<Arc<Recorded>>, Json(body): Json<Value>) -> Json<Value> {
    let n = record(&recorded, |n| PostedReply {
        platform: Platform::Telegram,
        chat: text_of(&body["chat_id"]),
        reply_to: text_of(&body["reply_parameters"]["message_id"]),
        text: text_of(&body["text"]),
        message_id: telegram_id(n).to_string(),
        buttons: keyboard(&body["reply_markup"]["inline_keyboard"]),
    });
    Json(json!({"ok": true, "result": {"message_id": telegram_id(n), "chat": {"id": body["chat_id"]}}}))
}

/// The reply buttons of an `inline_keyboard` (rows of buttons); link buttons have no data.
fn keyboard(rows: &Value) -> Vec<PostedButton> {
    let buttons = rows
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|row| row.as_array().into_iter().flatten());
    buttons
        .filter_map(|button| {
            Some(PostedButton {
                label: text_of(&button["text"]),
                data: button["callback_data"].as_str()?.to_owned(),
            })
        })
        .collect()
}

async fn telegram_edit(State(recorded): State<Arc<Recorded>>, Json(body): Json<Value>) -> Json<Value> {
    record_edit(
        &recorded,
        PostedEdit {
            platform: Platform::Telegram,
            chat: text_of(&body["chat_id"]),
            message_id: text_of(&body["message_id"]),
        },
    );
    Json(json!({"ok": true, "result": {"message_id": body["message_id"], "chat": {"id": body["chat_id"]}}}))
}

/// Telegram numbers a chat's messages with one counter; the stand-in keeps files in a range
/// of their own, clear of its text messages' 9000 + n.
fn telegram_file_id(n: usize) -> usize {
    9500 + n
}

async fn telegram_photo(State(recorded): State<Arc<Recorded>>, headers: HeaderMap, body: Bytes) -> Response {
    telegram_file(&recorded, "sendPhoto", "photo", &headers, &body)
}

async fn telegram_document(
    State(recorded): State<Arc<Recorded>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    telegram_file(&recorded, "sendDocument", "document", &headers, &body)
}

/// A multipart upload, answered with the message Telegram makes of it; anything else (a URL
/// or a `file_id` instead of the bytes) is refused: the demo's echo sends its bytes.
fn telegram_file(
    recorded: &Recorded,
    method: &str,
    field: &str,
    headers: &HeaderMap,
    body: &[u8],
) -> Response {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let mut files = recorded.files.lock().expect("lock holders never panic");
    let id = telegram_file_id(files.len() + 1);
    let Some(file) = super::uploads::telegram_upload(method, field, content_type, body, id.to_string())
    else {
        let description = format!("Bad Request: the demo stand-in takes `{field}` as an upload only");
        let refusal = json!({"ok": false, "error_code": 400, "description": description});
        return (StatusCode::BAD_REQUEST, Json(refusal)).into_response();
    };
    let sent = json!({"file_id": format!("demo-file-{id}"), "file_unique_id": format!("demo-{id}"),
                      "file_size": file.size});
    let chat = file
        .chat
        .parse::<i64>()
        .map_or_else(|_| json!(file.chat), |id| json!(id));
    let mut message = json!({"message_id": id, "chat": {"id": chat}, "caption": file.caption});
    message[field] = if field == "photo" { json!([sent]) } else { sent };
    files.push(file);
    drop(files);
    recorded.arrived.notify_waiters();
    Json(json!({"ok": true, "result": message})).into_response()
}

async fn whatsapp_send(State(recorded): State<Arc<Recorded>>, Json(body): Json<Value>) -> Json<Value> {
    // The read receipt with the typing indicator shares the endpoint; it is not a reply.
    if body["status"] == "read" {
        return Json(json!({"success": true}));
    }
    // A message with buttons is `interactive`, its text the body's.
    let text = match body["type"].as_str() {
        Some("interactive") => text_of(&body["interactive"]["body"]["text"]),
        _ => text_of(&body["text"]["body"]),
    };
    let n = record(&recorded, |n| PostedReply {
        platform: Platform::Whatsapp,
        chat: text_of(&body["to"]),
        reply_to: text_of(&body["context"]["message_id"]),
        text,
        message_id: format!("wamid.DEMO{n}"),
        buttons: Vec::new(),
    });
    Json(
        json!({"messaging_product": "whatsapp", "contacts": [{"input": body["to"]}],
                "messages": [{"id": format!("wamid.DEMO{n}")}]}),
    )
}
