//! Files and reactions in answers on WhatsApp (docs/agent.md#files-and-reactions-in-answers),
//! end to end: the agent's answer, the file fetched from its host or taken inline, uploaded
//! to the `/media` stand-in, then shown by its media id on `/messages`; the reaction set on
//! the user's wamid. What WhatsApp would refuse is refused before anything is posted.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use channel_bridge::dispatch::StepOutcome;
use channel_bridge::domain::{MessageId, Platform};
use reqwest::Method;
use serde_json::{json, Value};

use crate::async_answers::post_event;
use crate::support::fake_agent::Reply;
use crate::support::fake_files::FileHost;
use crate::support::fake_platforms::{Answer, Sent};
use crate::support::pipeline::statuses;
use crate::support::platforms::*;
use crate::support::Pipeline;

/// The wamid of the fixture's user message, which replies quote and reactions target.
const ASKED: &str = "wamid.HBgLMTY1MDM4Nzk0MzkVAgASGBQzQTRBNjU5OUFFRTAzODEwMTQ0RgA=";
const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR chart bytes";
const PDF: &[u8] = b"%PDF-1.7\n1 0 obj << /Type /Catalog >> endobj\n%%EOF\n";

/// The fixture's user message answered with `answer`: the turn and how the step ended.
async fn answered(s: &Pipeline, answer: Value) -> (MessageId, StepOutcome) {
    s.agent.script([Reply::Json(200, answer, None)]);
    s.deliver(Platform::Whatsapp, fixture(Platform::Whatsapp, "text"))
        .await;
    let outcome = s.worker.step().await.unwrap();
    let id = match outcome {
        StepOutcome::Executed(id) | StepOutcome::Failed(id) => id,
        other => panic!("expected a turn to end its step, got {other:?}"),
    };
    (id, outcome)
}

/// A chart by URL and a report inline, after the answer's text.
fn report_answer(host: &FileHost) -> Value {
    json!({
        "content": "Here is the Q3 report.",
        "attachments": [
            {"url": host.url("/charts/q3.png"), "caption": "Revenue by month"},
            {"data": BASE64.encode(PDF), "name": "q3-report.pdf", "caption": "The full report"},
        ],
    })
}

/// The `/messages` sends, in order.
fn messages(s: &Pipeline) -> Vec<Sent> {
    s.platforms.sent_to(Platform::Whatsapp)
}

async fn turn(s: &Pipeline, id: MessageId) -> Value {
    let (status, turn) = s
        .admin(Method::GET, &format!("/v1/admin/messages/{id}"), None)
        .await;
    assert_eq!(status, 200, "{turn}");
    turn
}

#[tokio::test]
async fn a_chart_by_url_and_an_inline_pdf_are_uploaded_then_shown_by_media_id_after_the_text() {
    let s = Pipeline::start().await;
    let host = FileHost::start().await;
    host.put("/charts/q3.png", PNG, Some("image/png"));
    let (id, _) = answered(&s, report_answer(&host)).await;
    assert!(s.delivered(id).await);

    let uploads = s.platforms.files().calls("media");
    assert_eq!(uploads.len(), 2);
    for (upload, (bytes, mime, name)) in uploads.iter().zip([
        (PNG, "image/png", "q3.png"),
        (PDF, "application/pdf", "q3-report.pdf"),
    ]) {
        assert_eq!(upload.path, "/v25.0/106540352242922/media");
        assert_eq!(upload.field("messaging_product").as_deref(), Some("whatsapp"));
        assert_eq!(upload.field("type").as_deref(), Some(mime));
        let file = upload.file.as_ref().expect("the file part");
        assert_eq!((file.name.as_str(), file.bytes.as_slice()), ("file", bytes));
        assert_eq!(file.content_type.as_deref(), Some(mime));
        assert_eq!(file.filename.as_deref(), Some(name));
    }
    let media_ids: Vec<String> = uploads.iter().map(|u| u.id.clone().unwrap()).collect();

    let sent = messages(&s);
    let kinds: Vec<&str> = sent.iter().map(|m| m.body["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["text", "image", "document"]);
    assert_eq!(
        sent[1].body["image"],
        json!({"id": media_ids[0], "caption": "Revenue by month"})
    );
    assert_eq!(
        sent[2].body["document"],
        json!({"id": media_ids[1], "caption": "The full report", "filename": "q3-report.pdf"})
    );
    for (index, message) in sent.iter().enumerate() {
        assert_eq!(message.body["to"], "+16505551234");
        assert_eq!(message.body["context"], json!({"message_id": ASKED}));
        assert_eq!(message.body["biz_opaque_callback_data"], format!("{id}:{index}"));
    }
    // Each file is uploaded after the part before it was posted, and shown after its upload.
    assert!(sent[0].at < uploads[0].at && uploads[0].at < sent[1].at);
    assert!(sent[1].at < uploads[1].at && uploads[1].at < sent[2].at);
    let parts = s.parts(id).await;
    assert_eq!(statuses(&parts), ["sent", "sent", "sent"]);
    assert_eq!(parts[1].upload_ref.as_deref(), Some(media_ids[0].as_str()));
    assert_eq!(parts[2].upload_ref.as_deref(), Some(media_ids[1].as_str()));
}

#[tokio::test]
async fn an_answers_reaction_is_set_on_the_users_wamid_without_quoting_it() {
    let s = Pipeline::start().await;
    let (id, _) = answered(&s, json!({"content": "Done.", "react": ":+1:"})).await;
    assert!(s.delivered(id).await);
    let sent = messages(&s);
    assert_eq!(sent.len(), 2);
    assert_eq!(
        sent[1].body,
        json!({"messaging_product": "whatsapp", "recipient_type": "individual", "to": "+16505551234",
               "type": "reaction", "reaction": {"message_id": ASKED, "emoji": "👍"}})
    );
    let parts = s.parts(id).await;
    assert!(parts[1].reaction);
    assert_eq!(parts[1].platform_message_id.as_deref(), Some("wamid.OUT2"));
}

#[tokio::test]
async fn a_gif_fails_the_turn_with_the_types_whatsapp_takes_and_nothing_is_posted() {
    let s = Pipeline::start().await;
    let gif = json!({"content": "Look!", "attachments": [{"url": "https://files.example/dance.gif"}]});
    let (id, outcome) = answered(&s, gif).await;
    assert!(matches!(outcome, StepOutcome::Failed(_)), "{outcome:?}");
    let turn = turn(&s, id).await;
    assert_eq!(turn["status"], "dispatch_failed");
    let error = turn["last_error"].as_str().unwrap();
    assert!(
        error.contains("`image/gif`") && error.contains("image/png"),
        "{error}"
    );
    assert!(messages(&s).is_empty(), "nothing posted");
    assert!(s.platforms.files().calls("media").is_empty(), "nothing uploaded");
}

#[tokio::test]
async fn the_agent_api_refuses_a_gif_or_a_non_emoji_reaction_with_422_before_recording_it() {
    let s = Pipeline::start().await;
    s.agent
        .script([Reply::Json(202, json!({"status": "pending"}), None)]);
    s.deliver(Platform::Whatsapp, fixture(Platform::Whatsapp, "text"))
        .await;
    let outcome = s.worker.step().await.unwrap();
    assert!(matches!(outcome, StepOutcome::Awaiting(_)), "{outcome:?}");
    let call = s.agent.calls().pop().unwrap();
    let url = call.raw["reply"]["url"].as_str().unwrap();
    let path = &url[url.find("/v1/agent/").unwrap()..];
    let secret = &s.tenant.dispatch_secret;
    let gif = json!({"type": "done", "content": "Look!",
                     "attachments": [{"data": BASE64.encode(b"GIF89a"), "name": "dance.gif"}]});
    let (status, out) = post_event(&s.app, path, secret, "ev-gif", gif).await;
    assert_eq!(status, 422, "{out}");
    assert!(out["message"].as_str().unwrap().contains("image/gif"), "{out}");
    let react = json!({"type": "done", "content": "Done.", "react": "thanks"});
    let (status, out) = post_event(&s.app, path, secret, "ev-react", react).await;
    assert_eq!(status, 422, "{out}");
    assert!(out["message"].as_str().unwrap().contains("not an emoji"), "{out}");
    assert!(messages(&s).is_empty());
}

#[tokio::test]
async fn an_image_over_5_mb_fails_its_part_without_being_uploaded() {
    let s = Pipeline::start().await;
    let host = FileHost::start().await;
    host.put("/big.png", vec![0u8; 5_000_001], Some("image/png"));
    let big = json!({"content": "The poster:", "attachments": [{"url": host.url("/big.png")}]});
    let (id, _) = answered(&s, big).await;
    let parts = s.parts(id).await;
    assert_eq!(statuses(&parts), ["sent", "failed"]);
    let error = parts[1].last_error.as_deref().unwrap();
    assert!(
        error.contains("larger than") && error.contains("5000000"),
        "{error}"
    );
    assert_eq!(
        host.requests("/big.png"),
        1,
        "one fetch, stopped at its Content-Length"
    );
    assert!(s.platforms.files().calls("media").is_empty(), "nothing uploaded");
    assert_eq!(messages(&s).len(), 1, "only the text");
}

#[tokio::test]
async fn a_media_id_whatsapp_no_longer_knows_is_uploaded_again_and_the_file_shown_once() {
    let s = Pipeline::start().await;
    let host = FileHost::start().await;
    host.put("/charts/q3.png", PNG, Some("image/png"));
    let unknown = json!({"error": {"message": "(#100) Param image['id'] is not a valid whatsapp business account media attachment ID",
                                   "type": "OAuthException", "code": 100, "fbtrace_id": "AFake"}});
    s.platforms.script(
        Platform::Whatsapp,
        [Answer::Ok, Answer::Status(400, unknown, None)],
    );
    let chart = json!({"content": "The chart:", "attachments": [{"url": host.url("/charts/q3.png")}]});
    let (id, _) = answered(&s, chart).await;
    assert!(s.delivered(id).await);
    let uploads = s.platforms.files().calls("media");
    assert_eq!(uploads.len(), 2);
    assert_eq!(uploads[1].bytes(), PNG);
    let sent = messages(&s);
    let shown: Vec<&Value> = sent.iter().skip(1).map(|m| &m.body["image"]["id"]).collect();
    assert_eq!(shown, [&json!(uploads[0].id), &json!(uploads[1].id)]);
    let part = s.parts(id).await.pop().unwrap();
    assert_eq!(part.upload_ref, uploads[1].id, "the fresh id is recorded");
    assert_eq!(part.status.as_str(), "sent");
}

#[tokio::test]
async fn an_upload_in_doubt_is_made_again_on_the_next_pass_and_the_file_posted_once() {
    let s = Pipeline::start().await;
    let host = FileHost::start().await;
    host.put("/charts/q3.png", PNG, Some("image/png"));
    let busy = json!({"error": {"message": "An unexpected error has occurred.", "code": 2}});
    s.platforms
        .files()
        .script_method("media", [Answer::Status(503, busy, None)]);
    let chart = json!({"content": "The chart:", "attachments": [{"url": host.url("/charts/q3.png")}]});
    let (id, _) = answered(&s, chart).await;
    assert!(!s.delivered(id).await);
    assert_eq!(s.parts(id).await[1].upload_ref, None);

    s.time_passes().await;
    let outcome = s.worker.step().await.unwrap();
    assert!(matches!(outcome, StepOutcome::Delivered(_)), "{outcome:?}");
    let uploads = s.platforms.files().calls("media");
    assert_eq!(uploads.len(), 2, "the upload in doubt, then a fresh one");
    let sent = messages(&s);
    assert_eq!(sent.len(), 2, "the text and the image, once each");
    assert_eq!(sent[1].body["image"]["id"], json!(uploads[1].id));
}
