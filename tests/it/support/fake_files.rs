//! The platforms' file and reaction APIs, beside the send APIs of `fake_platforms` (merged
//! into the same server by `routes`), and `FileHost`, a small server playing the agent's file
//! host.
//!
//! Each platform's side is shaped as the real one:
//! - Telegram `sendPhoto`, `sendDocument`, `sendVideo`, `sendVoice`, `sendAudio`: multipart
//!   (the file part named after the parameter, or `attach://name`), or JSON/form with a URL or
//!   a `file_id` instead of the bytes; answered with the message and its file object.
//!   `setMessageReaction` refuses an emoji outside Telegram's set with `REACTION_INVALID`.
//! - WhatsApp `POST /{version}/{phone}/media`: multipart `messaging_product`, `type`, `file`;
//!   answered `{"id": …}`, the bytes kept by media id (the media messages themselves go to
//!   `fake_platforms`' `/messages`).
//! - Slack's external upload: `files.getUploadURLExternal` (form), a POST of the bytes to the
//!   upload URL (raw or multipart; on this same server, from the request's `Host`),
//!   `files.completeUploadExternal` (every completion recorded, twice is two shares),
//!   `files.info` with the shares, `reactions.add` (`already_reacted` the second time).
//!
//! Every call is recorded (`Call`) and answered from a per-method script of
//! `fake_platforms::Answer`s, then with success. An answer that posts (`Ok`, `HangAfterPosting`,
//! `OkAfter`, `OkWhenReleased`) has the call's effect (a message, a media id, the bytes, a
//! share, a reaction); `Status` and `HangBeforePosting` have none.

// The tests of files and reactions use parts of this API each.
#![allow(dead_code)]

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, FromRequest, Multipart, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, MethodRouter};
use axum::{Json, Router};
use channel_bridge::domain::Platform;
use futures::StreamExt;
use serde_json::{json, Map, Value};
use tokio::sync::Notify;

use super::fake_platforms::Answer;

/// How long a `wait_for…` waits before failing the test.
const WAIT: Duration = Duration::from_secs(20);
/// The largest request body the stand-in reads (axum's default is 2 MB).
const BODY_LIMIT: usize = 100 << 20;
/// Telegram's limit on a file a bot uploads.
const TELEGRAM_UPLOAD_LIMIT: usize = 50 << 20;
/// Telegram's message ids for files start here: `fake_platforms` numbers sendMessage answers
/// 5000 + n with a counter of its own, so the two never collide below 4000 sends.
const TELEGRAM_FIRST_FILE_MESSAGE: u64 = 9000;

/// Telegram's reactions for bots (<https://core.telegram.org/bots/api#reactiontypeemoji>), as
/// the API names them: without the emoji variation selector (U+FE0F), ZWJ sequences whole;
/// separated by spaces.
const TELEGRAM_REACTIONS: &str = "👍 👎 ❤ 🔥 🥰 👏 😁 🤔 🤯 😱 🤬 😢 🎉 🤩 🤮 💩 🙏 👌 🕊 🤡 🥱 🥴 😍 🐳 ❤\u{200D}🔥 🌚 🌭 💯 🤣 ⚡ 🍌 🏆 💔 🤨 😐 🍓 🍾 💋 🖕 😈 😴 😭 🤓 👻 👨\u{200D}💻 👀 🎃 🙈 😇 😨 🤝 ✍ 🤗 🫡 🎅 🎄 ☃ 💅 🤪 🗿 🆒 💘 🙉 🦄 😘 💊 🙊 😎 👾 🤷\u{200D}♂ 🤷 🤷\u{200D}♀ 😡";

/// One file part of a request (or a raw body: `name` empty).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilePart {
    /// The part's name (`photo`, `file`…); empty for a raw body.
    pub name: String,
    pub filename: Option<String>,
    pub content_type: Option<String>,
    pub bytes: Vec<u8>,
}

/// One request to the files and reactions APIs.
#[derive(Debug, Clone)]
pub struct Call {
    /// Arrival order among this stand-in's calls (`at` orders them with `fake_platforms`' sends).
    pub seq: u64,
    pub at: Instant,
    pub platform: Platform,
    /// `sendPhoto`…, `setMessageReaction`, `media` (WhatsApp), `files.getUploadURLExternal`,
    /// `upload` (the POST to Slack's upload URL), `files.completeUploadExternal`, `files.info`,
    /// `reactions.add`.
    pub method: &'static str,
    pub path: String,
    pub authorization: Option<String>,
    /// The request's Content-Type header.
    pub content_type: Option<String>,
    /// Every field but the file, as sent: a JSON body's values as they are, form, multipart
    /// and query fields as strings (JSON-valued fields such as `reply_parameters` too: see
    /// `json_field`).
    pub fields: Value,
    /// The file the call carried: the part named after the parameter (or by `attach://`), the
    /// WhatsApp `file` part, the bytes posted to Slack's upload URL.
    pub file: Option<FilePart>,
    /// Any other file parts.
    pub other_parts: Vec<FilePart>,
    /// Whether the call had its effect on the platform (answered or not).
    pub posted: bool,
    /// What it made: the Telegram message id, the WhatsApp media id, the Slack file id.
    pub id: Option<String>,
}

impl Call {
    /// A field as text: a string as it is, a number or any other JSON value as JSON.
    pub fn field(&self, name: &str) -> Option<String> {
        match self.fields.get(name)? {
            Value::String(s) => Some(s.clone()),
            other => Some(other.to_string()),
        }
    }

    /// A field that holds JSON (`reply_parameters`, `reply_markup`, Slack's `files` in a
    /// form): parsed if it is a string of JSON, else the value as sent; `Null` if absent.
    pub fn json_field(&self, name: &str) -> Value {
        match self.fields.get(name) {
            Some(Value::String(s)) => serde_json::from_str(s).unwrap_or_else(|_| Value::String(s.clone())),
            Some(other) => other.clone(),
            None => Value::Null,
        }
    }

    /// The file's bytes (empty without a file).
    pub fn bytes(&self) -> &[u8] {
        self.file.as_ref().map_or(&[], |f| f.bytes.as_slice())
    }
}

/// A file created by `files.getUploadURLExternal`.
#[derive(Debug, Clone)]
pub struct SlackFile {
    pub id: String,
    pub filename: String,
    /// The `length` announced (the bytes posted may differ).
    pub length: u64,
    pub alt_txt: Option<String>,
    pub upload_url: String,
    /// The last bytes posted to the upload URL.
    pub upload: Option<FilePart>,
    /// How many times bytes were posted to the upload URL.
    pub uploads: usize,
    /// The title of the last completion that gave one.
    pub title: Option<String>,
    /// One per completion and channel, in order; `channel` is `None` for a completion
    /// without one (the file then exists, shared nowhere).
    pub shares: Vec<SlackShare>,
    opaque: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlackShare {
    pub channel: Option<String>,
    pub thread_ts: Option<String>,
    pub initial_comment: Option<String>,
    /// The message's ts (`None` without a channel).
    pub ts: Option<String>,
    pub at: Instant,
}

#[derive(Default)]
struct Inner {
    calls: Vec<Call>,
    scripts: Vec<(&'static str, VecDeque<Answer>)>,
    slack_files: Vec<SlackFile>,
    /// (channel, timestamp, name) of every reaction added.
    slack_reactions: HashSet<(String, String, String)>,
    /// `files.info` lists a share only once it is this old.
    share_lag: Duration,
    telegram_messages: u64,
    telegram_files: u64,
    whatsapp_media: u64,
    slack_seq: u64,
}

impl Inner {
    /// A fresh Slack `ts`: now, with microseconds from 900000 up (`fake_platforms` counts
    /// its own from 1).
    fn slack_ts(&mut self) -> String {
        self.slack_seq += 1;
        format!(
            "{}.{:06}",
            chrono::Utc::now().timestamp(),
            900_000 + self.slack_seq
        )
    }

    fn slack_file(&mut self, id: &str) -> Option<&mut SlackFile> {
        self.slack_files.iter_mut().find(|f| f.id == id)
    }
}

/// The recorded calls, the scripts and the platforms' state; shared with the routes.
#[derive(Default)]
pub struct FilesState {
    inner: Mutex<Inner>,
    arrived: Notify,
}

impl FilesState {
    /// Answers for the next calls of `method` (as in `Call::method`), then success.
    pub fn script_method(&self, method: &'static str, answers: impl IntoIterator<Item = Answer>) {
        let mut inner = self.inner.lock().unwrap();
        match inner.scripts.iter_mut().find(|(m, _)| *m == method) {
            Some((_, queue)) => queue.extend(answers),
            None => inner.scripts.push((method, answers.into_iter().collect())),
        }
    }

    /// Every call so far, in arrival order.
    pub fn all_calls(&self) -> Vec<Call> {
        self.inner.lock().unwrap().calls.clone()
    }

    /// The calls of `method` (`"sendPhoto"`, `"media"`, `"files.completeUploadExternal"`…).
    pub fn calls(&self, method: &str) -> Vec<Call> {
        self.filtered(|c| c.method == method)
    }

    /// Every call that carried a file (Telegram sends with bytes, WhatsApp media uploads,
    /// posts to Slack's upload URL), whether or not it was answered with success.
    pub fn files(&self) -> Vec<Call> {
        self.filtered(|c| c.file.is_some())
    }

    pub fn files_to(&self, platform: Platform) -> Vec<Call> {
        self.filtered(|c| c.file.is_some() && c.platform == platform)
    }

    /// Telegram setMessageReaction and Slack reactions.add calls (`posted` when accepted).
    pub fn reactions(&self) -> Vec<Call> {
        self.filtered(|c| is_reaction(c.method))
    }

    /// The file WhatsApp keeps under `media_id`.
    pub fn whatsapp_media(&self, media_id: &str) -> Option<FilePart> {
        let inner = self.inner.lock().unwrap();
        let upload = inner
            .calls
            .iter()
            .find(|c| c.method == "media" && c.posted && c.id.as_deref() == Some(media_id));
        upload.and_then(|c| c.file.clone())
    }

    pub fn slack_file(&self, id: &str) -> Option<SlackFile> {
        self.inner.lock().unwrap().slack_file(id).cloned()
    }

    /// Every Slack file, in creation order.
    pub fn slack_files(&self) -> Vec<SlackFile> {
        self.inner.lock().unwrap().slack_files.clone()
    }

    /// Every Slack completion, with its file id, in order (shares in no channel included).
    pub fn slack_shares(&self) -> Vec<(String, SlackShare)> {
        let inner = self.inner.lock().unwrap();
        let mut shares: Vec<(String, SlackShare)> = inner
            .slack_files
            .iter()
            .flat_map(|f| f.shares.iter().map(|s| (f.id.clone(), s.clone())))
            .collect();
        shares.sort_by_key(|(_, s)| s.at);
        shares
    }

    /// `files.info` shows a share only once it is `lag` old (Slack shares a completed file
    /// asynchronously).
    pub fn slack_shares_visible_after(&self, lag: Duration) {
        self.inner.lock().unwrap().share_lag = lag;
    }

    /// Waits until at least `n` calls of `method` arrived.
    pub async fn wait_for(&self, method: &str, n: usize) {
        self.wait_until(&format!("{n} calls of {method}"), |c| c.method == method, n)
            .await
    }

    /// Waits until at least `n` calls carrying a file arrived.
    pub async fn wait_for_files(&self, n: usize) {
        self.wait_until(&format!("{n} files"), |c| c.file.is_some(), n)
            .await
    }

    /// Waits until at least `n` reaction calls arrived.
    pub async fn wait_for_reactions(&self, n: usize) {
        self.wait_until(&format!("{n} reactions"), |c| is_reaction(c.method), n)
            .await
    }

    async fn wait_until(&self, what: &str, matches: impl Fn(&Call) -> bool, n: usize) {
        loop {
            let notified = self.arrived.notified();
            let count = self
                .inner
                .lock()
                .unwrap()
                .calls
                .iter()
                .filter(|c| matches(c))
                .count();
            if count >= n {
                return;
            }
            tokio::time::timeout(WAIT, notified)
                .await
                .unwrap_or_else(|_| panic!("timed out waiting for {what} (got {count})"));
        }
    }

    fn filtered(&self, keep: impl Fn(&Call) -> bool) -> Vec<Call> {
        self.inner
            .lock()
            .unwrap()
            .calls
            .iter()
            .filter(|c| keep(c))
            .cloned()
            .collect()
    }

    fn next_answer(&self, method: &str) -> Answer {
        let mut inner = self.inner.lock().unwrap();
        let queue = inner.scripts.iter_mut().find(|(m, _)| *m == method);
        queue.and_then(|(_, q)| q.pop_front()).unwrap_or(Answer::Ok)
    }
}

fn is_reaction(method: &str) -> bool {
    matches!(method, "setMessageReaction" | "reactions.add")
}

/// The routes of the files and reactions APIs, to merge into `fake_platforms`' router (or to
/// serve alone).
pub fn routes(files: Arc<FilesState>) -> Router {
    Router::new()
        .route("/{bot}/sendPhoto", telegram_route("sendPhoto", "photo"))
        .route("/{bot}/sendDocument", telegram_route("sendDocument", "document"))
        .route("/{bot}/sendVideo", telegram_route("sendVideo", "video"))
        .route("/{bot}/sendVoice", telegram_route("sendVoice", "voice"))
        .route("/{bot}/sendAudio", telegram_route("sendAudio", "audio"))
        .route("/{bot}/setMessageReaction", post(telegram_reaction))
        .route("/{version}/{phone}/media", post(whatsapp_media))
        .route("/api/files.getUploadURLExternal", post(slack_upload_url))
        .route("/upload/v1/{opaque}", post(slack_upload))
        .route("/api/files.completeUploadExternal", post(slack_complete))
        .route("/api/files.info", get(slack_info).post(slack_info))
        .route("/api/reactions.add", post(slack_reaction))
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .with_state(files)
}

fn telegram_route(method: &'static str, param: &'static str) -> MethodRouter<Arc<FilesState>> {
    post(move |State(files): State<Arc<FilesState>>, req: Request| telegram_file(files, req, method, param))
}

/// A request as read: its fields (query string first, then the body's) and file parts.
struct Incoming {
    path: String,
    authorization: Option<String>,
    host: Option<String>,
    content_type: Option<String>,
    /// The body was JSON (fields read from it).
    json: bool,
    fields: Map<String, Value>,
    parts: Vec<FilePart>,
}

impl Incoming {
    fn into_call(self, platform: Platform, method: &'static str, file: Option<FilePart>) -> Call {
        Call {
            seq: 0,
            at: Instant::now(),
            platform,
            method,
            path: self.path,
            authorization: self.authorization,
            content_type: self.content_type,
            fields: Value::Object(self.fields),
            file,
            other_parts: self.parts,
            posted: false,
            id: None,
        }
    }
}

/// Reads a request: multipart (a part with a filename or a content type, or not UTF-8, is a
/// file), JSON, a form; with `raw`, any other body is one file part named "".
async fn read(req: Request, raw: bool) -> Result<Incoming, Refusal> {
    let (head, body) = req.into_parts();
    let header = |name: header::HeaderName| {
        head.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let content_type = header(header::CONTENT_TYPE);
    let mut incoming = Incoming {
        path: head.uri.path().to_owned(),
        authorization: header(header::AUTHORIZATION),
        host: header(header::HOST),
        content_type: content_type.clone(),
        json: false,
        fields: Map::new(),
        parts: Vec::new(),
    };
    if let Some(query) = head.uri.query() {
        let pairs: Vec<(String, String)> = serde_urlencoded::from_str(query).unwrap_or_default();
        incoming
            .fields
            .extend(pairs.into_iter().map(|(k, v)| (k, Value::String(v))));
    }
    let mime = content_type
        .as_deref()
        .unwrap_or_default()
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    if mime == "multipart/form-data" {
        let bad = |e: axum::extract::multipart::MultipartError| Box::new(e.into_response());
        let req = Request::from_parts(head, body);
        let mut multipart = Multipart::from_request(req, &())
            .await
            .map_err(|e| Box::new(e.into_response()))?;
        while let Some(field) = multipart.next_field().await.map_err(bad)? {
            let name = field.name().unwrap_or_default().to_owned();
            let filename = field.file_name().map(str::to_owned);
            let part_type = field.content_type().map(str::to_owned);
            let bytes = field.bytes().await.map_err(bad)?.to_vec();
            if filename.is_none() && part_type.is_none() {
                match String::from_utf8(bytes) {
                    Ok(text) => {
                        incoming.fields.insert(name, Value::String(text));
                        continue;
                    }
                    Err(e) => {
                        let bytes = e.into_bytes();
                        incoming.parts.push(FilePart {
                            name,
                            filename,
                            content_type: part_type,
                            bytes,
                        });
                        continue;
                    }
                }
            }
            incoming.parts.push(FilePart {
                name,
                filename,
                content_type: part_type,
                bytes,
            });
        }
        return Ok(incoming);
    }
    let bytes = axum::body::to_bytes(body, BODY_LIMIT)
        .await
        .map_err(|e| Box::new((StatusCode::PAYLOAD_TOO_LARGE, e.to_string()).into_response()))?;
    if raw {
        incoming.parts.push(FilePart {
            name: String::new(),
            filename: None,
            content_type,
            bytes: bytes.to_vec(),
        });
    } else if mime == "application/json" {
        incoming.json = true;
        match serde_json::from_slice::<Value>(&bytes) {
            Ok(Value::Object(map)) => incoming.fields.extend(map),
            _ => {
                let text = String::from_utf8_lossy(&bytes).into_owned();
                incoming
                    .fields
                    .insert("_invalid_json".into(), Value::String(text));
            }
        }
    } else if mime == "application/x-www-form-urlencoded" {
        let pairs: Vec<(String, String)> = serde_urlencoded::from_bytes(&bytes).unwrap_or_default();
        incoming
            .fields
            .extend(pairs.into_iter().map(|(k, v)| (k, Value::String(v))));
    } else if !bytes.is_empty() {
        let text = String::from_utf8_lossy(&bytes).into_owned();
        incoming.fields.insert("_body".into(), Value::String(text));
    }
    Ok(incoming)
}

/// A refusal as the platform answers it (boxed: a `Response` is large).
type Refusal = Box<Response>;

/// What a call that posts made: its id and the success answer.
type Effect = Result<(Option<String>, Response), Refusal>;

/// Takes the next scripted answer; if it posts, applies `effect` (which may refuse the call as
/// the platform would); records the call; answers.
async fn handle<F>(files: &FilesState, mut call: Call, effect: F) -> Response
where
    F: FnOnce(&mut Inner, &Call) -> Effect + Send,
{
    let reply = files.next_answer(call.method);
    let outcome = {
        let mut inner = files.inner.lock().unwrap();
        let outcome = match posts(&reply) {
            true => match effect(&mut inner, &call) {
                Ok((id, success)) => {
                    call.posted = true;
                    call.id = id;
                    Ok(success)
                }
                Err(refusal) => Err(refusal),
            },
            false => Ok(StatusCode::INTERNAL_SERVER_ERROR.into_response()),
        };
        call.seq = inner.calls.len() as u64;
        inner.calls.push(call);
        outcome
    };
    files.arrived.notify_waiters();
    match outcome {
        Ok(success) => respond(reply, success).await,
        Err(refusal) => *refusal,
    }
}

/// Whether a scripted answer lets the call have its effect.
fn posts(answer: &Answer) -> bool {
    !matches!(answer, Answer::Status(..) | Answer::HangBeforePosting)
}

async fn respond(answer: Answer, success: Response) -> Response {
    match answer {
        Answer::Ok => success,
        Answer::Status(status, body, retry_after) => {
            let mut response = (StatusCode::from_u16(status).unwrap(), Json(body)).into_response();
            if let Some(secs) = retry_after {
                let value = secs.to_string().parse().unwrap();
                response.headers_mut().insert(header::RETRY_AFTER, value);
            }
            response
        }
        Answer::HangAfterPosting | Answer::HangBeforePosting => std::future::pending().await,
        Answer::OkAfter(delay) => {
            tokio::time::sleep(delay).await;
            success
        }
        Answer::OkWhenReleased(gate) => {
            gate.acquire().await.expect("gate stays open").forget();
            success
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Telegram

fn telegram_error(code: u16, description: &str) -> Refusal {
    let body = json!({"ok": false, "error_code": code, "description": description});
    Box::new((StatusCode::from_u16(code).unwrap(), Json(body)).into_response())
}

/// The chat as Telegram answers it: a numeric id as a number.
fn telegram_chat(chat_id: &Value) -> Value {
    match chat_id {
        Value::String(s) => s.parse::<i64>().map_or_else(|_| chat_id.clone(), Value::from),
        other => other.clone(),
    }
}

/// The file part `param` names: its value `attach://name`, or the part called `param`.
fn take_part(incoming: &mut Incoming, param: &str) -> Option<FilePart> {
    let name = match incoming.fields.get(param).and_then(Value::as_str) {
        Some(value) if value.starts_with("attach://") => value["attach://".len()..].to_owned(),
        _ => param.to_owned(),
    };
    let at = incoming.parts.iter().position(|p| p.name == name)?;
    Some(incoming.parts.remove(at))
}

async fn telegram_file(
    files: Arc<FilesState>,
    req: Request,
    method: &'static str,
    param: &'static str,
) -> Response {
    let mut incoming = match read(req, false).await {
        Ok(incoming) => incoming,
        Err(refusal) => return *refusal,
    };
    let file = take_part(&mut incoming, param);
    let call = incoming.into_call(Platform::Telegram, method, file);
    handle(&files, call, |inner, call| {
        let chat = match call.fields.get("chat_id") {
            Some(Value::String(s)) if s.is_empty() => None,
            chat => chat,
        };
        let Some(chat) = chat else {
            return Err(telegram_error(400, "Bad Request: chat_id is empty"));
        };
        for (field, what) in [
            ("reply_parameters", "reply parameters"),
            ("reply_markup", "reply keyboard markup"),
        ] {
            if let Some(Value::String(s)) = call.fields.get(field) {
                if serde_json::from_str::<Map<String, Value>>(s).is_err() {
                    return Err(telegram_error(
                        400,
                        &format!("Bad Request: can't parse {what} JSON object"),
                    ));
                }
            }
        }
        inner.telegram_files += 1;
        let n = inner.telegram_files;
        let file_object = match (&call.file, call.fields.get(param)) {
            (Some(part), _) => {
                if part.bytes.is_empty() {
                    return Err(telegram_error(400, "Bad Request: file must be non-empty"));
                }
                if part.bytes.len() > TELEGRAM_UPLOAD_LIMIT {
                    return Err(telegram_error(413, "Request Entity Too Large"));
                }
                let mime = part
                    .content_type
                    .clone()
                    .or_else(|| part.filename.as_deref().map(guess_mime).map(str::to_owned));
                telegram_file_object(param, n, part.filename.as_deref(), mime, Some(part.bytes.len()))
            }
            // A file_id or an HTTP URL for Telegram to fetch.
            (None, Some(Value::String(s))) if !s.is_empty() && !s.starts_with("attach://") => {
                let mut object = telegram_file_object(param, n, None, None, None);
                if !s.starts_with("http://") && !s.starts_with("https://") {
                    object_set(&mut object, "file_id", json!(s));
                }
                object
            }
            _ => {
                return Err(telegram_error(
                    400,
                    &format!("Bad Request: there is no {param} in the request"),
                ))
            }
        };
        inner.telegram_messages += 1;
        let message_id = TELEGRAM_FIRST_FILE_MESSAGE + inner.telegram_messages;
        let mut result = json!({"message_id": message_id, "chat": {"id": telegram_chat(chat)},
                                "date": chrono::Utc::now().timestamp()});
        result[param] = file_object;
        for field in ["caption", "message_thread_id"] {
            if let Some(value) = call.fields.get(field) {
                result[field] = value.clone();
            }
        }
        Ok((
            Some(message_id.to_string()),
            Json(json!({"ok": true, "result": result})).into_response(),
        ))
    })
    .await
}

fn object_set(object: &mut Value, key: &str, value: Value) {
    match object {
        Value::Array(sizes) => sizes.iter_mut().for_each(|s| s[key] = value.clone()),
        other => other[key] = value,
    }
}

/// The file object of Telegram's answer: an array of sizes for a photo.
fn telegram_file_object(
    param: &str,
    n: u64,
    filename: Option<&str>,
    mime: Option<String>,
    size: Option<usize>,
) -> Value {
    let mut object =
        json!({"file_id": format!("FAKE-{param}-{n}"), "file_unique_id": format!("U{param}{n}")});
    if let Some(size) = size {
        object["file_size"] = json!(size);
    }
    match param {
        "photo" => {
            object["width"] = json!(1280);
            object["height"] = json!(960);
            return json!([object]);
        }
        "video" => {
            object["width"] = json!(1280);
            object["height"] = json!(720);
            object["duration"] = json!(1);
        }
        "voice" | "audio" => object["duration"] = json!(1),
        _ => {}
    }
    if let (Some(name), true) = (filename, param != "voice") {
        object["file_name"] = json!(name);
    }
    if let Some(mime) = mime {
        object["mime_type"] = json!(mime);
    }
    object
}

async fn telegram_reaction(State(files): State<Arc<FilesState>>, req: Request) -> Response {
    let incoming = match read(req, false).await {
        Ok(incoming) => incoming,
        Err(refusal) => return *refusal,
    };
    let call = incoming.into_call(Platform::Telegram, "setMessageReaction", None);
    handle(&files, call, |_, call| {
        if call.fields.get("chat_id").is_none() {
            return Err(telegram_error(400, "Bad Request: chat_id is empty"));
        }
        if call.fields.get("message_id").is_none() {
            return Err(telegram_error(400, "Bad Request: message_id is empty"));
        }
        let reactions = match call.json_field("reaction") {
            Value::Null => Vec::new(),
            Value::Array(reactions) => reactions,
            _ => {
                return Err(telegram_error(
                    400,
                    "Bad Request: can't parse reaction types JSON object",
                ))
            }
        };
        if reactions.len() > 1 {
            return Err(telegram_error(400, "Bad Request: REACTIONS_TOO_MANY"));
        }
        for reaction in &reactions {
            let valid = reaction["type"] == "emoji"
                && reaction["emoji"]
                    .as_str()
                    .is_some_and(|e| TELEGRAM_REACTIONS.split(' ').any(|r| r == e));
            if !valid {
                return Err(telegram_error(400, "Bad Request: REACTION_INVALID"));
            }
        }
        Ok((None, Json(json!({"ok": true, "result": true})).into_response()))
    })
    .await
}

// ---------------------------------------------------------------------------------------------
// WhatsApp

fn graph_error(status: u16, code: u32, message: &str) -> Refusal {
    let body = json!({"error": {"message": message, "type": "OAuthException", "code": code,
                                "fbtrace_id": "AFakeTrace"}});
    Box::new((StatusCode::from_u16(status).unwrap(), Json(body)).into_response())
}

async fn whatsapp_media(State(files): State<Arc<FilesState>>, req: Request) -> Response {
    let mut incoming = match read(req, false).await {
        Ok(incoming) => incoming,
        Err(refusal) => return *refusal,
    };
    let file = take_part(&mut incoming, "file");
    let call = incoming.into_call(Platform::Whatsapp, "media", file);
    handle(&files, call, |inner, call| {
        if call.authorization.is_none() {
            let message = "An active access token must be used to query information about the current user.";
            return Err(graph_error(401, 2500, message));
        }
        match call.field("messaging_product").as_deref() {
            Some("whatsapp") => {}
            None => {
                return Err(graph_error(
                    400,
                    100,
                    "(#100) The parameter messaging_product is required.",
                ))
            }
            Some(other) => {
                let message =
                    format!("(#100) Param messaging_product must be one of {{WHATSAPP}} - got \"{other}\".");
                return Err(graph_error(400, 100, &message));
            }
        }
        if call.field("type").is_none() {
            return Err(graph_error(400, 100, "(#100) The parameter type is required."));
        }
        if call.file.is_none() {
            return Err(graph_error(400, 100, "(#100) The parameter file is required."));
        }
        inner.whatsapp_media += 1;
        let id = (1_400_000_000_000_000 + inner.whatsapp_media).to_string();
        Ok((Some(id.clone()), Json(json!({"id": id})).into_response()))
    })
    .await
}

// ---------------------------------------------------------------------------------------------
// Slack

fn slack_error(error: &str) -> Refusal {
    Box::new(Json(json!({"ok": false, "error": error})).into_response())
}

fn slack_authed(call: &Call) -> Result<(), Refusal> {
    let bearer = call
        .authorization
        .as_deref()
        .is_some_and(|a| a.starts_with("Bearer "));
    match bearer || call.field("token").is_some() {
        true => Ok(()),
        false => Err(slack_error("not_authed")),
    }
}

async fn slack_call(req: Request, method: &'static str) -> Result<Call, Refusal> {
    let incoming = read(req, false).await?;
    Ok(incoming.into_call(Platform::Slack, method, None))
}

async fn slack_upload_url(State(files): State<Arc<FilesState>>, req: Request) -> Response {
    let incoming = match read(req, false).await {
        Ok(incoming) => incoming,
        Err(refusal) => return *refusal,
    };
    // The method takes form arguments (or a query string), not JSON.
    let json = incoming.json;
    let host = incoming.host.clone().unwrap_or_else(|| "127.0.0.1".into());
    let call = incoming.into_call(Platform::Slack, "files.getUploadURLExternal", None);
    handle(&files, call, |inner, call| {
        slack_authed(call)?;
        let arg = |name| if json { None } else { call.field(name) };
        let filename = arg("filename").filter(|f| !f.is_empty());
        let length = match arg("length") {
            None => 0,
            Some(length) => length
                .parse::<u64>()
                .map_err(|_| slack_error("invalid_arguments"))?,
        };
        let Some(filename) = filename.filter(|_| length > 0) else {
            return Err(slack_error("missing_argument"));
        };
        let id = format!("F{:010}", inner.slack_files.len() + 1);
        let opaque = uuid::Uuid::new_v4().simple().to_string();
        let upload_url = format!("http://{host}/upload/v1/{opaque}");
        inner.slack_files.push(SlackFile {
            id: id.clone(),
            filename,
            length,
            alt_txt: arg("alt_txt"),
            upload_url: upload_url.clone(),
            upload: None,
            uploads: 0,
            title: None,
            shares: Vec::new(),
            opaque,
        });
        let success = json!({"ok": true, "upload_url": upload_url, "file_id": id});
        Ok((Some(id), Json(success).into_response()))
    })
    .await
}

async fn slack_upload(State(files): State<Arc<FilesState>>, req: Request) -> Response {
    let mut incoming = match read(req, true).await {
        Ok(incoming) => incoming,
        Err(refusal) => return *refusal,
    };
    let opaque = incoming.path.rsplit('/').next().unwrap_or_default().to_owned();
    let file = (!incoming.parts.is_empty()).then(|| incoming.parts.remove(0));
    let call = incoming.into_call(Platform::Slack, "upload", file);
    handle(&files, call, |inner, call| {
        let Some(file) = inner.slack_files.iter_mut().find(|f| f.opaque == opaque) else {
            return Err(Box::new((StatusCode::NOT_FOUND, "Not Found").into_response()));
        };
        let part = call.file.clone().unwrap_or_else(|| FilePart {
            name: String::new(),
            filename: None,
            content_type: call.content_type.clone(),
            bytes: Vec::new(),
        });
        let length = part.bytes.len();
        file.upload = Some(part);
        file.uploads += 1;
        Ok((Some(file.id.clone()), format!("OK - {length}").into_response()))
    })
    .await
}

async fn slack_complete(State(files): State<Arc<FilesState>>, req: Request) -> Response {
    let call = match slack_call(req, "files.completeUploadExternal").await {
        Ok(call) => call,
        Err(refusal) => return *refusal,
    };
    handle(&files, call, |inner, call| {
        slack_authed(call)?;
        let Value::Array(listed) = call.json_field("files") else {
            return Err(slack_error("invalid_arguments"));
        };
        let mut completed = Vec::new();
        for entry in &listed {
            let Some(id) = entry["id"].as_str() else {
                return Err(slack_error("invalid_arguments"));
            };
            let Some(file) = inner.slack_file(id) else {
                return Err(slack_error("file_not_found"));
            };
            let title = entry["title"].as_str().map(str::to_owned);
            completed.push((
                id.to_owned(),
                title.clone().unwrap_or_else(|| file.filename.clone()),
            ));
            if title.is_some() {
                file.title = title;
            }
        }
        if completed.is_empty() {
            return Err(slack_error("invalid_arguments"));
        }
        let mut channels: Vec<String> = call.field("channel_id").into_iter().collect();
        if let Some(list) = call.field("channels") {
            channels.extend(
                list.split(',')
                    .map(str::trim)
                    .filter(|c| !c.is_empty())
                    .map(str::to_owned),
            );
        }
        let now = Instant::now();
        let share = |channel: Option<String>, ts: Option<String>| SlackShare {
            channel,
            thread_ts: call.field("thread_ts"),
            initial_comment: call.field("initial_comment"),
            ts,
            at: now,
        };
        // One message per channel, with every file of the call.
        let mut shares = Vec::new();
        for channel in &channels {
            let ts = inner.slack_ts();
            shares.push(share(Some(channel.clone()), Some(ts)));
        }
        if channels.is_empty() {
            shares.push(share(None, None));
        }
        for (id, _) in &completed {
            let file = inner.slack_file(id).expect("checked above");
            file.shares.extend(shares.iter().cloned());
        }
        let listed: Vec<Value> = completed
            .iter()
            .map(|(id, title)| json!({"id": id, "title": title}))
            .collect();
        Ok((None, Json(json!({"ok": true, "files": listed})).into_response()))
    })
    .await
}

async fn slack_info(State(files): State<Arc<FilesState>>, req: Request) -> Response {
    let call = match slack_call(req, "files.info").await {
        Ok(call) => call,
        Err(refusal) => return *refusal,
    };
    handle(&files, call, |inner, call| {
        slack_authed(call)?;
        let lag = inner.share_lag;
        let id = call.field("file").unwrap_or_default();
        // A file exists once completed.
        let Some(file) = inner.slack_file(&id).filter(|f| !f.shares.is_empty()) else {
            return Err(slack_error("file_not_found"));
        };
        let (mimetype, size) = match &file.upload {
            Some(part) => {
                let given = part.content_type.as_deref().filter(|t| *t != "application/octet-stream");
                let mimetype = given.unwrap_or_else(|| guess_mime(&file.filename));
                (mimetype.to_owned(), part.bytes.len() as u64)
            }
            None => (guess_mime(&file.filename).to_owned(), 0),
        };
        let mut object = json!({"id": file.id, "name": file.filename, "title": file.title.as_ref().unwrap_or(&file.filename),
                                "mimetype": mimetype, "size": size});
        let mut shares = json!({});
        for share in file.shares.iter().filter(|s| s.at.elapsed() >= lag) {
            let Some(channel) = &share.channel else { continue };
            let kind = match channel.starts_with('D') || channel.starts_with('G') {
                true => "private",
                false => "public",
            };
            let mut entry = json!({"ts": share.ts, "channel_name": channel, "reply_count": 0});
            if let Some(thread_ts) = &share.thread_ts {
                entry["thread_ts"] = json!(thread_ts);
            }
            let listed = shares[kind][channel.as_str()].as_array().cloned().unwrap_or_default();
            shares[kind][channel.as_str()] = Value::Array(listed.into_iter().chain([entry]).collect());
        }
        if shares.as_object().is_some_and(|s| !s.is_empty()) {
            object["shares"] = shares;
        }
        Ok((Some(id), Json(json!({"ok": true, "file": object})).into_response()))
    })
    .await
}

async fn slack_reaction(State(files): State<Arc<FilesState>>, req: Request) -> Response {
    let call = match slack_call(req, "reactions.add").await {
        Ok(call) => call,
        Err(refusal) => return *refusal,
    };
    handle(&files, call, |inner, call| {
        slack_authed(call)?;
        let (Some(channel), Some(timestamp)) = (call.field("channel"), call.field("timestamp")) else {
            return Err(slack_error("no_item_specified"));
        };
        let name = call.field("name").unwrap_or_default();
        // A name, never an emoji nor `:name:`.
        if name.is_empty() || !name.is_ascii() || name.starts_with(':') || name.ends_with(':') {
            return Err(slack_error("invalid_name"));
        }
        if !inner.slack_reactions.insert((channel, timestamp, name)) {
            return Err(slack_error("already_reacted"));
        }
        Ok((None, Json(json!({"ok": true})).into_response()))
    })
    .await
}

/// A MIME type from a filename's extension, as the platforms guess it.
fn guess_mime(filename: &str) -> &'static str {
    let extension = filename.rsplit_once('.').map(|(_, e)| e.to_ascii_lowercase());
    match extension.as_deref() {
        Some("png") => "image/png",
        Some("jpg" | "jpeg") => "image/jpeg",
        Some("gif") => "image/gif",
        Some("webp") => "image/webp",
        Some("pdf") => "application/pdf",
        Some("txt") => "text/plain",
        Some("csv") => "text/csv",
        Some("mp4") => "video/mp4",
        Some("mp3") => "audio/mpeg",
        Some("ogg" | "oga" | "opus") => "audio/ogg",
        _ => "application/octet-stream",
    }
}

// ---------------------------------------------------------------------------------------------
// The agent's file host

#[derive(Debug, Clone)]
enum Hosted {
    /// The bytes with a Content-Length.
    Whole {
        bytes: Vec<u8>,
        content_type: Option<String>,
    },
    /// The bytes chunked, without a Content-Length.
    Chunked {
        bytes: Vec<u8>,
        content_type: Option<String>,
    },
    /// These first bytes (chunked), then nothing ever again.
    Stall {
        first: Vec<u8>,
        content_type: Option<String>,
    },
    /// A Content-Length of `len`, these first bytes, then the connection broken off.
    BreakOff {
        first: Vec<u8>,
        len: usize,
        content_type: Option<String>,
    },
    Redirect(String),
    Status(u16),
}

/// One request the file host received.
#[derive(Debug, Clone)]
pub struct HostRequest {
    pub method: String,
    pub path: String,
    pub query: Option<String>,
    pub headers: HeaderMap,
}

#[derive(Default)]
struct HostState {
    hosted: Mutex<HashMap<String, Hosted>>,
    requests: Mutex<Vec<HostRequest>>,
    arrived: Notify,
}

/// The agent's file host: serves the registered paths, 404 for any other; counts requests
/// per path (the query string aside).
pub struct FileHost {
    pub base_url: String,
    state: Arc<HostState>,
}

impl FileHost {
    pub async fn start() -> Self {
        let state = Arc::new(HostState::default());
        let app = Router::new().fallback(host_serve).with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base_url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self { base_url, state }
    }

    /// The URL of `path` (`"/a.png"` or `"a.png"`).
    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base_url, rooted(path))
    }

    /// Serves `bytes` at `path`, with a Content-Length.
    pub fn put(&self, path: &str, bytes: impl Into<Vec<u8>>, content_type: Option<&str>) {
        let content_type = content_type.map(str::to_owned);
        self.host(
            path,
            Hosted::Whole {
                bytes: bytes.into(),
                content_type,
            },
        );
    }

    /// Serves `bytes` at `path` chunked, without a Content-Length.
    pub fn put_chunked(&self, path: &str, bytes: impl Into<Vec<u8>>, content_type: Option<&str>) {
        let content_type = content_type.map(str::to_owned);
        self.host(
            path,
            Hosted::Chunked {
                bytes: bytes.into(),
                content_type,
            },
        );
    }

    /// Answers `path` with its headers and `first` bytes, then never sends the rest.
    pub fn stall(&self, path: &str, first: impl Into<Vec<u8>>, content_type: Option<&str>) {
        let content_type = content_type.map(str::to_owned);
        self.host(
            path,
            Hosted::Stall {
                first: first.into(),
                content_type,
            },
        );
    }

    /// Announces `bytes` with their Content-Length, sends the first half, then breaks the
    /// connection off.
    pub fn break_off(&self, path: &str, bytes: &[u8], content_type: Option<&str>) {
        let content_type = content_type.map(str::to_owned);
        let first = bytes[..bytes.len() / 2].to_vec();
        let len = bytes.len();
        self.host(
            path,
            Hosted::BreakOff {
                first,
                len,
                content_type,
            },
        );
    }

    /// Answers `path` with a 302 to `location`.
    pub fn redirect(&self, path: &str, location: &str) {
        self.host(path, Hosted::Redirect(location.to_owned()));
    }

    /// Answers `path` with `status` and no body.
    pub fn fail(&self, path: &str, status: u16) {
        self.host(path, Hosted::Status(status));
    }

    /// How many requests `path` received.
    pub fn requests(&self, path: &str) -> usize {
        self.requests_to(path).len()
    }

    /// The requests `path` received, in order.
    pub fn requests_to(&self, path: &str) -> Vec<HostRequest> {
        let path = rooted(path);
        let requests = self.state.requests.lock().unwrap();
        requests.iter().filter(|r| r.path == path).cloned().collect()
    }

    /// Every request, in order.
    pub fn all_requests(&self) -> Vec<HostRequest> {
        self.state.requests.lock().unwrap().clone()
    }

    /// Waits until `path` received at least `n` requests.
    pub async fn wait_for_requests(&self, path: &str, n: usize) {
        loop {
            let notified = self.state.arrived.notified();
            let count = self.requests(path);
            if count >= n {
                return;
            }
            tokio::time::timeout(WAIT, notified)
                .await
                .unwrap_or_else(|_| panic!("timed out waiting for {n} requests of {path} (got {count})"));
        }
    }

    fn host(&self, path: &str, hosted: Hosted) {
        self.state.hosted.lock().unwrap().insert(rooted(path), hosted);
    }
}

fn rooted(path: &str) -> String {
    match path.starts_with('/') {
        true => path.to_owned(),
        false => format!("/{path}"),
    }
}

async fn host_serve(State(state): State<Arc<HostState>>, req: Request) -> Response {
    let path = req.uri().path().to_owned();
    state.requests.lock().unwrap().push(HostRequest {
        method: req.method().to_string(),
        path: path.clone(),
        query: req.uri().query().map(str::to_owned),
        headers: req.headers().clone(),
    });
    state.arrived.notify_waiters();
    let hosted = state.hosted.lock().unwrap().get(&path).cloned();
    let with_type = |body: Body, content_type: Option<String>| {
        let mut response = Response::new(body);
        if let Some(content_type) = content_type {
            response
                .headers_mut()
                .insert(header::CONTENT_TYPE, content_type.parse().unwrap());
        }
        response
    };
    match hosted {
        None => StatusCode::NOT_FOUND.into_response(),
        Some(Hosted::Whole { bytes, content_type }) => with_type(Body::from(bytes), content_type),
        Some(Hosted::Chunked { bytes, content_type }) => {
            let chunks: Vec<Result<Bytes, std::io::Error>> = bytes
                .chunks(1024)
                .map(|c| Ok(Bytes::copy_from_slice(c)))
                .collect();
            with_type(Body::from_stream(futures::stream::iter(chunks)), content_type)
        }
        Some(Hosted::Stall { first, content_type }) => {
            let first = futures::stream::iter([Ok::<_, std::io::Error>(Bytes::from(first))]);
            let body = Body::from_stream(first.chain(futures::stream::pending()));
            with_type(body, content_type)
        }
        Some(Hosted::BreakOff {
            first,
            len,
            content_type,
        }) => {
            // The break waits one turn of the runtime, so that hyper writes out the
            // headers and the first bytes before it drops the connection.
            let broken =
                futures::stream::iter([Ok(Bytes::from(first))]).chain(futures::stream::once(async {
                    tokio::task::yield_now().await;
                    Err(std::io::Error::other("broken off by the file host"))
                }));
            let mut response = with_type(Body::from_stream(broken), content_type);
            response.headers_mut().insert(header::CONTENT_LENGTH, len.into());
            response
        }
        Some(Hosted::Redirect(location)) => {
            (StatusCode::FOUND, [(header::LOCATION, location)]).into_response()
        }
        Some(Hosted::Status(status)) => StatusCode::from_u16(status).unwrap().into_response(),
    }
}

#[cfg(test)]
mod tests {
    //! The stand-in itself, served alone (no database).

    use super::*;

    async fn serve_alone() -> (String, Arc<FilesState>) {
        let files = Arc::new(FilesState::default());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base_url = format!("http://{}", listener.local_addr().unwrap());
        let app = routes(files.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        (base_url, files)
    }

    /// A multipart body: text fields, then one file part. Returns (content type, body).
    fn multipart(fields: &[(&str, &str)], file: (&str, &str, &str, &[u8])) -> (String, Vec<u8>) {
        let boundary = "fakefilesboundary";
        let mut body = Vec::new();
        for (name, value) in fields {
            body.extend(
                format!("--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n")
                    .bytes(),
            );
        }
        let (name, filename, content_type, bytes) = file;
        body.extend(
            format!("--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"; filename=\"{filename}\"\r\nContent-Type: {content_type}\r\n\r\n")
                .bytes(),
        );
        body.extend(bytes);
        body.extend(format!("\r\n--{boundary}--\r\n").bytes());
        (format!("multipart/form-data; boundary={boundary}"), body)
    }

    async fn post_multipart(url: &str, (content_type, body): (String, Vec<u8>)) -> Value {
        let response = reqwest::Client::new()
            .post(url)
            .bearer_auth("xoxb-test")
            .header("content-type", content_type)
            .body(body)
            .send()
            .await
            .unwrap();
        response.json().await.unwrap()
    }

    #[tokio::test]
    async fn telegram_photo_and_reactions() {
        let (base, files) = serve_alone().await;
        let photo = b"\xff\xd8\xff\xe0 a photo".to_vec();
        let fields = [
            ("chat_id", "42"),
            ("caption", "Lunch"),
            ("reply_parameters", r#"{"message_id":7}"#),
        ];
        let body = multipart(&fields, ("photo", "lunch.jpg", "image/jpeg", &photo));
        let answer = post_multipart(&format!("{base}/bot123:abc/sendPhoto"), body).await;
        assert_eq!(answer["ok"], true, "{answer}");
        assert_eq!(answer["result"]["chat"]["id"], 42);
        assert_eq!(answer["result"]["message_id"], 9001);
        assert_eq!(answer["result"]["photo"][0]["file_size"], photo.len());
        let sent = &files.files_to(Platform::Telegram)[0];
        assert_eq!(
            (sent.method, sent.path.as_str()),
            ("sendPhoto", "/bot123:abc/sendPhoto")
        );
        let file = sent.file.as_ref().unwrap();
        assert_eq!(
            (file.filename.as_deref(), file.content_type.as_deref()),
            (Some("lunch.jpg"), Some("image/jpeg"))
        );
        assert_eq!(sent.bytes(), photo);
        assert_eq!(sent.field("caption").as_deref(), Some("Lunch"));
        assert_eq!(sent.json_field("reply_parameters"), json!({"message_id": 7}));

        // No file part: refused as Telegram does, recorded, no message.
        let body = multipart(
            &[("chat_id", "42")],
            ("document", "a.pdf", "application/pdf", b"%PDF"),
        );
        let refused = post_multipart(&format!("{base}/bot123:abc/sendPhoto"), body).await;
        assert_eq!(
            refused["description"],
            "Bad Request: there is no photo in the request"
        );
        assert!(!files.calls("sendPhoto")[1].posted);

        let client = reqwest::Client::new();
        let url = format!("{base}/bot123:abc/setMessageReaction");
        let react = |emoji: &str| json!({"chat_id": 42, "message_id": 9001, "reaction": [{"type": "emoji", "emoji": emoji}]});
        let ok: Value = client
            .post(&url)
            .json(&react("👀"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(ok, json!({"ok": true, "result": true}));
        let refused = client.post(&url).json(&react("✅")).send().await.unwrap();
        assert_eq!(refused.status(), 400);
        let refused: Value = refused.json().await.unwrap();
        assert_eq!(refused["description"], "Bad Request: REACTION_INVALID");
        files.wait_for_reactions(2).await;
        let posted: Vec<bool> = files.reactions().iter().map(|r| r.posted).collect();
        assert_eq!(posted, [true, false]);
    }

    #[tokio::test]
    async fn merged_into_fake_platforms() {
        let platforms = super::super::fake_platforms::FakePlatforms::start().await;
        let base = &platforms.base_url;
        let fields = [("chat_id", "42")];
        let body = multipart(&fields, ("document", "a.pdf", "application/pdf", b"%PDF"));
        let answer = post_multipart(&format!("{base}/bot1:x/sendDocument"), body).await;
        assert_eq!(answer["result"]["document"]["file_name"], "a.pdf", "{answer}");
        let text = json!({"chat_id": 42, "text": "hello"});
        let sent = reqwest::Client::new()
            .post(format!("{base}/bot1:x/sendMessage"))
            .json(&text)
            .send();
        assert_eq!(sent.await.unwrap().status(), 200);
        assert_eq!(platforms.files().files()[0].bytes(), b"%PDF");
        assert_eq!(platforms.calls("sendMessage").len(), 1);
    }

    #[tokio::test]
    async fn whatsapp_media_is_kept_by_id() {
        let (base, files) = serve_alone().await;
        let fields = [("messaging_product", "whatsapp"), ("type", "image/png")];
        let body = multipart(&fields, ("file", "chart.png", "image/png", b"\x89PNG chart"));
        let answer = post_multipart(&format!("{base}/v21.0/1234/media"), body).await;
        let id = answer["id"].as_str().expect("a media id");
        let kept = files.whatsapp_media(id).expect("the bytes are kept");
        assert_eq!(
            (kept.bytes.as_slice(), kept.filename.as_deref()),
            (&b"\x89PNG chart"[..], Some("chart.png"))
        );
        assert!(files.whatsapp_media("999").is_none());
    }

    #[tokio::test]
    async fn slack_upload_share_twice_and_react() {
        let (base, files) = serve_alone().await;
        let client = reqwest::Client::new();
        let api = |method: &str| format!("{base}/api/{method}");
        let form = |method: &str, form: &[(&str, &str)]| {
            client
                .post(api(method))
                .bearer_auth("xoxb-test")
                .form(form)
                .send()
        };
        let missing: Value = form(
            "files.getUploadURLExternal",
            &[("filename", "a.pdf"), ("length", "0")],
        )
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
        assert_eq!(missing["error"], "missing_argument");
        let got: Value = form(
            "files.getUploadURLExternal",
            &[("filename", "a.pdf"), ("length", "4")],
        )
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
        let (url, id) = (
            got["upload_url"].as_str().unwrap(),
            got["file_id"].as_str().unwrap(),
        );
        assert!(url.starts_with(&format!("{base}/upload/v1/")), "{url}");
        let uploaded = client.post(url).body(&b"%PDF"[..]).send().await.unwrap();
        assert_eq!(uploaded.text().await.unwrap(), "OK - 4");

        let complete = json!({"files": [{"id": id, "title": "A report"}], "channel_id": "D123",
                              "thread_ts": "1700000000.000100", "initial_comment": "Here"});
        for _ in 0..2 {
            let done: Value = client
                .post(api("files.completeUploadExternal"))
                .bearer_auth("xoxb-test")
                .json(&complete)
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            assert_eq!(
                done,
                json!({"ok": true, "files": [{"id": id, "title": "A report"}]})
            );
        }
        let file = files.slack_file(id).unwrap();
        assert_eq!(file.upload.unwrap().bytes, b"%PDF");
        assert_eq!(file.shares.len(), 2, "completing twice is two shares");
        let info: Value = form("files.info", &[("file", id)])
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let in_dm = &info["file"]["shares"]["private"]["D123"];
        assert_eq!(in_dm.as_array().unwrap().len(), 2, "{info}");
        assert_eq!(in_dm[0]["thread_ts"], "1700000000.000100");
        let unknown = json!({"files": [{"id": "F404"}], "channel_id": "C1"});
        let unknown: Value = client
            .post(api("files.completeUploadExternal"))
            .bearer_auth("xoxb-test")
            .json(&unknown)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(unknown["error"], "file_not_found");

        let reaction = [
            ("channel", "C1"),
            ("timestamp", "1700000000.000200"),
            ("name", "eyes"),
        ];
        let first: Value = form("reactions.add", &reaction)
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let again: Value = form("reactions.add", &reaction)
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(
            (first["ok"].clone(), again["error"].clone()),
            (json!(true), json!("already_reacted"))
        );
    }

    #[tokio::test]
    async fn hang_after_posting_keeps_the_share() {
        let (base, files) = serve_alone().await;
        files.script_method("files.completeUploadExternal", [Answer::HangAfterPosting]);
        let client = reqwest::Client::new();
        let got: Value = client
            .post(format!(
                "{base}/api/files.getUploadURLExternal?filename=a.txt&length=2"
            ))
            .bearer_auth("xoxb-test")
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let id = got["file_id"].as_str().unwrap().to_owned();
        let complete = json!({"files": [{"id": id}], "channel_id": "C1"});
        let hung = client
            .post(format!("{base}/api/files.completeUploadExternal"))
            .bearer_auth("xoxb-test")
            .json(&complete)
            .timeout(Duration::from_millis(300))
            .send()
            .await;
        assert!(hung.unwrap_err().is_timeout());
        files.wait_for("files.completeUploadExternal", 1).await;
        assert_eq!(files.slack_shares()[0].1.channel.as_deref(), Some("C1"));
    }

    #[tokio::test]
    async fn file_host_serves_counts_and_redirects() {
        let host = FileHost::start().await;
        host.put("/a.png", b"png bytes".to_vec(), Some("image/png"));
        host.put_chunked("b.pdf", vec![7u8; 5000], Some("application/pdf"));
        host.redirect("/old.png", "/a.png");
        let client = reqwest::Client::new();

        let whole = client.get(host.url("/a.png")).send().await.unwrap();
        assert_eq!(whole.content_length(), Some(9));
        assert_eq!(whole.headers()["content-type"], "image/png");
        let chunked = client.get(host.url("/b.pdf")).send().await.unwrap();
        assert_eq!(chunked.headers()["transfer-encoding"], "chunked");
        assert!(chunked.headers().get("content-length").is_none());
        assert_eq!(chunked.bytes().await.unwrap().len(), 5000);
        let redirected = client.get(host.url("/old.png")).send().await.unwrap();
        assert_eq!(redirected.bytes().await.unwrap().as_ref(), b"png bytes");
        let missing = client.get(host.url("/nothing")).send().await.unwrap();
        assert_eq!(missing.status(), 404);

        assert_eq!(
            (
                host.requests("/a.png"),
                host.requests("/old.png"),
                host.requests("/b.pdf")
            ),
            (2, 1, 1)
        );
        assert_eq!(host.requests("/never"), 0);
    }
}
