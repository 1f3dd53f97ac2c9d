//! Pictures, voice notes and files reach the agent
//! (docs/agent.md#pictures-voice-notes-and-files): a Telegram photo, a WhatsApp voice note and
//! a Slack file share are each dispatched with an attachment whose gateway URL streams the
//! bytes the platform stand-in serves, fetched with the connector's credentials; a tampered,
//! expired or foreign token is refused; history carries earlier turns' files with fresh URLs;
//! the admin API shows the files without URLs.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use channel_bridge::domain::{MessageId, Platform, TenantId};
use channel_bridge::media::token::MediaToken;
use channel_bridge::secrets::Keyring;
use serde_json::{json, Value};

use crate::support::fake_agent::Reply;
use crate::support::platforms::*;
use crate::support::Pipeline;

const PHOTO_BYTES: &[u8] = b"\xff\xd8\xff\xe0 a JPEG of a lunch receipt";
const VOICE_BYTES: &[u8] = b"OggS a voice note in opus";
const DIAGRAM_BYTES: &[u8] = b"\x89PNG a diagram";

/// The platforms' file APIs: Telegram `getFile` and file URLs, the Graph media lookup and
/// its CDN, Slack's private download URLs. Records the credential each request carried.
#[derive(Default)]
struct FileHostState {
    base_url: String,
    /// (what was asked, the credential it came with)
    requests: Mutex<Vec<(String, String)>>,
}

struct FileHost {
    base_url: String,
    state: Arc<FileHostState>,
}

impl FileHost {
    async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base_url = format!("http://{}", listener.local_addr().unwrap());
        let state = Arc::new(FileHostState {
            base_url: base_url.clone(),
            ..FileHostState::default()
        });
        let app = Router::new()
            .route("/{bot}/getFile", post(telegram_get_file))
            .route("/file/{bot}/{*path}", get(telegram_file))
            .route("/v25.0/{media}", get(whatsapp_media))
            .route("/whatsapp-cdn/{media}", get(whatsapp_cdn))
            .route("/files-pri/{team_file}/download/{name}", get(slack_download))
            .with_state(state.clone());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self { base_url, state }
    }

    fn requests(&self) -> Vec<(String, String)> {
        self.state.requests.lock().unwrap().clone()
    }
}

fn bearer(headers: &HeaderMap) -> String {
    headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}

async fn telegram_get_file(
    State(state): State<Arc<FileHostState>>,
    Path(bot): Path<String>,
    Json(body): Json<Value>,
) -> Response {
    let file_id = body["file_id"].as_str().unwrap_or_default().to_owned();
    state
        .requests
        .lock()
        .unwrap()
        .push((format!("getFile {file_id}"), bot));
    if file_id != "AgACAgIAAxkBAAIBm2Z0ZXN0cGhvdG9sYXJnZQ" {
        let refused = json!({"ok": false, "error_code": 400, "description": "Bad Request: invalid file_id"});
        return (StatusCode::BAD_REQUEST, Json(refused)).into_response();
    }
    Json(
        json!({"ok": true, "result": {"file_id": file_id, "file_unique_id": "AQADlarge",
        "file_size": PHOTO_BYTES.len(), "file_path": "photos/file_12.jpg"}}),
    )
    .into_response()
}

async fn telegram_file(
    State(state): State<Arc<FileHostState>>,
    Path((bot, path)): Path<(String, String)>,
) -> Response {
    state.requests.lock().unwrap().push((format!("file {path}"), bot));
    if path != "photos/file_12.jpg" {
        return StatusCode::NOT_FOUND.into_response();
    }
    ([("content-type", "image/jpeg")], PHOTO_BYTES).into_response()
}

async fn whatsapp_media(
    State(state): State<Arc<FileHostState>>,
    Path(media): Path<String>,
    headers: HeaderMap,
) -> Response {
    state
        .requests
        .lock()
        .unwrap()
        .push((format!("media {media}"), bearer(&headers)));
    Json(
        json!({"messaging_product": "whatsapp", "id": media, "mime_type": "audio/ogg",
        "url": format!("{}/whatsapp-cdn/{media}", state.base_url)}),
    )
    .into_response()
}

async fn whatsapp_cdn(
    State(state): State<Arc<FileHostState>>,
    Path(media): Path<String>,
    headers: HeaderMap,
) -> Response {
    state
        .requests
        .lock()
        .unwrap()
        .push((format!("cdn {media}"), bearer(&headers)));
    ([("content-type", "audio/ogg")], VOICE_BYTES).into_response()
}

async fn slack_download(
    State(state): State<Arc<FileHostState>>,
    Path((team_file, name)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    state
        .requests
        .lock()
        .unwrap()
        .push((format!("slack {team_file}/{name}"), bearer(&headers)));
    if bearer(&headers).is_empty() {
        // What Slack answers without the token: a sign-in page, with 200.
        return ([("content-type", "text/html")], "<html>sign in</html>").into_response();
    }
    ([("content-type", "image/png")], DIAGRAM_BYTES).into_response()
}

/// The pipeline with `FileHost` as every platform's API, the attachments offered at the
/// gateway's own media URLs.
async fn setup() -> (Pipeline, FileHost) {
    let files = FileHost::start().await;
    let s = Pipeline::builder()
        .platform_api(&files.base_url)
        .media_from_the_app()
        .start()
        .await;
    (s, files)
}

/// Records `body`, dispatches it (the agent answers nothing) and returns what the agent got.
async fn dispatch(s: &Pipeline, platform: Platform, body: Vec<u8>) -> Value {
    s.agent
        .script([Reply::Json(200, json!({ "content": null }), None)]);
    s.deliver(platform, body).await;
    s.worker.step().await.unwrap();
    s.agent.calls().last().expect("the agent was called").raw.clone()
}

fn attachment_url(payload: &Value) -> String {
    let current = payload["messages"].as_array().unwrap().last().unwrap();
    current["attachments"][0]["url"]
        .as_str()
        .expect("an offered attachment has a URL")
        .to_owned()
}

async fn fetch(url: &str) -> reqwest::Response {
    reqwest::get(url).await.expect("the gateway answers")
}

#[tokio::test]
async fn a_telegram_photo_reaches_the_agent_as_a_url_that_streams_the_platforms_bytes() {
    let (s, files) = setup().await;
    let payload = dispatch(&s, Platform::Telegram, fixture(Platform::Telegram, "photo")).await;

    let current = payload["messages"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(
        current["content"], "Receipt from lunch",
        "the caption is the text"
    );
    let attachment = &current["attachments"][0];
    assert_eq!(attachment["type"], "image");
    assert_eq!(attachment["mime"], "image/jpeg");
    assert_eq!(attachment["size"], 48213);
    let url = attachment["url"].as_str().unwrap();
    assert!(url.starts_with(&s.app.url("/v1/media/")), "{url}");
    assert!(
        !url.contains("telegram-outbound-token"),
        "no platform credential in the URL"
    );

    let response = fetch(url).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "image/jpeg");
    assert_eq!(response.headers()["cache-control"], "private, no-store");
    assert_eq!(response.bytes().await.unwrap(), PHOTO_BYTES);
    assert_eq!(
        files.requests(),
        vec![
            (
                "getFile AgACAgIAAxkBAAIBm2Z0ZXN0cGhvdG9sYXJnZQ".to_owned(),
                "bottelegram-outbound-token".to_owned()
            ),
            (
                "file photos/file_12.jpg".to_owned(),
                "bottelegram-outbound-token".to_owned()
            ),
        ]
    );
}

#[tokio::test]
async fn a_whatsapp_voice_note_reaches_the_agent_and_is_fetched_with_the_access_token() {
    let (s, files) = setup().await;
    let voice = String::from_utf8(fixture(Platform::Whatsapp, "image"))
        .unwrap()
        .replace(r#""type": "image""#, r#""type": "audio""#)
        .replace(r#""image": {"#, r#""audio": {"voice": true, "#)
        .replace(r#""caption": "this one","#, "")
        .replace("image/jpeg", "audio/ogg; codecs=opus");
    let payload = dispatch(&s, Platform::Whatsapp, voice.into_bytes()).await;

    let current = payload["messages"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(current["content"], "", "no caption: empty text");
    assert_eq!(current["attachments"][0]["type"], "voice");
    assert_eq!(
        current["attachments"][0]["size"],
        Value::Null,
        "WhatsApp gives no size"
    );
    let response = fetch(&attachment_url(&payload)).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "audio/ogg; codecs=opus");
    assert_eq!(response.bytes().await.unwrap(), VOICE_BYTES);
    let token = "Bearer whatsapp-outbound-token".to_owned();
    assert_eq!(
        files.requests(),
        vec![
            ("media 1003383421387256".to_owned(), token.clone()),
            ("cdn 1003383421387256".to_owned(), token),
        ]
    );
}

#[tokio::test]
async fn a_slack_file_share_reaches_the_agent_and_is_fetched_with_the_bot_token() {
    let (s, files) = setup().await;
    let share = String::from_utf8(fixture(Platform::Slack, "file_share_no_text"))
        .unwrap()
        .replace("https://files.slack.com", &files.base_url);
    let payload = dispatch(&s, Platform::Slack, share.into_bytes()).await;

    let current = payload["messages"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(current["attachments"][0]["name"], "diagram.png");
    let response = fetch(&attachment_url(&payload)).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.bytes().await.unwrap(), DIAGRAM_BYTES);
    assert_eq!(
        files.requests(),
        vec![(
            "slack T0001-F0FILE001/diagram.png".to_owned(),
            "Bearer slack-outbound-token".to_owned()
        )]
    );
}

#[tokio::test]
async fn a_tampered_expired_or_foreign_token_is_refused_before_the_platform_is_asked() {
    let (s, files) = setup().await;
    let payload = dispatch(&s, Platform::Telegram, fixture(Platform::Telegram, "photo")).await;
    let url = attachment_url(&payload);
    let (base, token) = url.rsplit_once('/').unwrap();

    // One character of the signature changed.
    let mut tampered = token.to_owned();
    let last = tampered.pop().unwrap();
    tampered.push(if last == 'A' { 'B' } else { 'A' });
    let response = fetch(&format!("{base}/{tampered}")).await;
    assert_eq!(response.status(), 404);
    assert_eq!(response.json::<Value>().await.unwrap()["error"], "not_found");

    // The same claims, signed by the gateway's key, but past their time.
    let keys = Keyring::ephemeral();
    let mut claims = MediaToken::decode(token, &keys, 0).unwrap();
    claims.expires = chrono::Utc::now().timestamp() - 1;
    let response = fetch(&format!("{base}/{}", claims.encode(&keys))).await;
    assert_eq!(response.status(), 410);
    assert_eq!(response.json::<Value>().await.unwrap()["error"], "gone");

    // Genuine, but naming the turn under another tenant: that tenant has no such turn.
    claims.expires = chrono::Utc::now().timestamp() + 60;
    claims.tenant = TenantId::new();
    let response = fetch(&format!("{base}/{}", claims.encode(&keys))).await;
    assert_eq!(response.status(), 404);

    // Another attachment index of the same turn, and a turn that does not exist.
    let other_index = MediaToken {
        tenant: s.tenant.tenant,
        index: 1,
        ..claims
    };
    assert_eq!(
        fetch(&format!("{base}/{}", other_index.encode(&keys)))
            .await
            .status(),
        404
    );
    let no_turn = MediaToken {
        tenant: s.tenant.tenant,
        message: MessageId::new(),
        index: 0,
        ..claims
    };
    assert_eq!(
        fetch(&format!("{base}/{}", no_turn.encode(&keys))).await.status(),
        404
    );

    assert!(
        files.requests().is_empty(),
        "nothing was fetched for a refused token"
    );
}

#[tokio::test]
async fn history_carries_earlier_files_with_fresh_urls_and_admins_see_them_without() {
    let (s, _files) = setup().await;
    dispatch(&s, Platform::Telegram, fixture(Platform::Telegram, "photo")).await;
    let payload = dispatch(
        &s,
        Platform::Telegram,
        telegram_text(306197405, "what did I send you?"),
    )
    .await;
    let messages = payload["messages"].as_array().unwrap();
    let earlier: Vec<&Value> = messages
        .iter()
        .filter(|m| m.get("attachments").is_some())
        .collect();
    assert_eq!(earlier.len(), 1, "{messages:?}");
    assert_eq!(earlier[0]["content"], "Receipt from lunch");
    let url = earlier[0]["attachments"][0]["url"].as_str().unwrap();
    assert_eq!(fetch(url).await.bytes().await.unwrap(), PHOTO_BYTES);

    let key = channel_bridge::admin::operator::issue(&s.app.pool, s.tenant.tenant, "admin")
        .await
        .unwrap()
        .key;
    let page: Value = s
        .app
        .client
        .get(s.app.url("/v1/admin/messages?platform=telegram"))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let with_files: HashMap<&str, &Value> = page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["request_content"].as_str().unwrap(), &m["attachments"]))
        .collect();
    let photo = with_files["Receipt from lunch"];
    assert_eq!(photo[0]["type"], "image");
    assert_eq!(photo[0]["url"], Value::Null);
    assert_eq!(photo[0].get("source"), None, "the platform's handle stays inside");
    assert_eq!(with_files["what did I send you?"], &json!([]));
}

#[tokio::test]
async fn a_file_type_outside_the_list_is_described_to_the_agent_without_a_url() {
    let (s, _files) = setup().await;
    let mut update: Value = serde_json::from_slice(&fixture(Platform::Telegram, "photo")).unwrap();
    let message = update["message"].as_object_mut().unwrap();
    message.remove("photo");
    message.insert(
        "document".into(),
        json!({"file_id": "BQACAgIAAxkBAAIBnmZ0ZXN0ZG9j", "file_unique_id": "AgADdoc",
               "file_name": "setup.exe", "mime_type": "application/x-msdownload", "file_size": 120000}),
    );
    let payload = dispatch(&s, Platform::Telegram, serde_json::to_vec(&update).unwrap()).await;
    let current = payload["messages"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(current["attachments"][0]["name"], "setup.exe");
    assert_eq!(current["attachments"][0]["url"], Value::Null);
}

#[tokio::test]
async fn a_media_link_answers_503_when_the_database_does_not_answer_within_the_admin_deadline() {
    use crate::support::db_proxy::{upstream_addr, DbProxy};
    let proxy = DbProxy::start(upstream_addr()).await;
    let app = crate::support::spawn_app_with(|settings, db| {
        db.route_via(&mut settings.database, proxy.addr);
        settings.database.acquire_timeout_ms = 20_000;
        settings.database.deadline_ms = 20_000;
        settings.admin_deadline_ms = 700;
    })
    .await;
    let tenant = provision_tenant(&app.pool, "acme").await;
    let token = MediaToken {
        tenant: tenant.tenant,
        message: MessageId::new(),
        index: 0,
        expires: chrono::Utc::now().timestamp() + 60,
    };
    let url = app.url(&format!("/v1/media/{}", token.encode(&Keyring::ephemeral())));

    proxy.hold();
    let response = fetch(&url).await;
    proxy.release();
    assert_eq!(response.status(), 503);
    assert_eq!(response.headers()["retry-after"], "1");
    assert_eq!(response.json::<Value>().await.unwrap()["error"], "unavailable");
    assert_eq!(
        fetch(&url).await.status(),
        404,
        "with the database back: no such turn"
    );
}
