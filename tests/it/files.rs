//! Files and reactions in answers (docs/agent.md#files-and-reactions-in-answers) on Telegram,
//! and what every platform shares: the fetch through the egress rules, its failures, the
//! checks made when an answer arrives, and every way in (a synchronous answer, an event, a
//! message the agent writes first, a person's message). Slack's and WhatsApp's uploads are
//! in `files_slack` and `files_whatsapp`.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use channel_bridge::dispatch::StepOutcome;
use channel_bridge::domain::{MessageId, Platform};
use reqwest::Method;
use serde_json::{json, Value};

use crate::async_answers::{accepted_turn, post_event};
use crate::support::fake_agent::Reply;
use crate::support::fake_files::FileHost;
use crate::support::fake_platforms::Answer;
use crate::support::pipeline::statuses;
use crate::support::platforms::*;
use crate::support::Pipeline;

/// A PNG's signature and a made-up body: the stand-ins compare bytes, they do not decode.
pub(crate) fn png(len: usize) -> Vec<u8> {
    let mut bytes = b"\x89PNG\r\n\x1a\n".to_vec();
    bytes.extend((0..len).map(|i| (i % 251) as u8));
    bytes
}

pub(crate) fn pdf() -> Vec<u8> {
    b"%PDF-1.4\n1 0 obj << /Type /Catalog >> endobj\ntrailer << /Root 1 0 R >>\n%%EOF\n".to_vec()
}

/// A user's Telegram message answered with `answer`; the step's outcome and the turn.
async fn answered(s: &Pipeline, answer: Value) -> (StepOutcome, MessageId) {
    s.agent.script([Reply::Json(200, answer, None)]);
    let update = 800_000 + s.next_id();
    s.deliver(Platform::Telegram, telegram_text(update, "the report, please"))
        .await;
    let outcome = s.worker.step().await.unwrap();
    let id = match &outcome {
        StepOutcome::Executed(id) | StepOutcome::Failed(id) | StepOutcome::Retrying(id) => *id,
        other => panic!("a turn, got {other:?}"),
    };
    (outcome, id)
}

async fn message(s: &Pipeline, id: MessageId) -> Value {
    let (status, body) = s
        .admin(Method::GET, &format!("/v1/admin/messages/{id}"), None)
        .await;
    assert_eq!(status, 200, "{body}");
    body
}

#[tokio::test]
async fn a_telegram_answer_posts_its_text_then_each_file_with_its_bytes_and_caption_in_order() {
    let s = Pipeline::start().await;
    let host = FileHost::start().await;
    let picture = png(40_000);
    host.put("/charts/q3.png", picture.clone(), Some("image/png"));
    let answer = json!({
        "content": "Here is the **Q3** report.",
        "attachments": [
            {"url": host.url("/charts/q3.png"), "caption": "Revenue by month"},
            {"data": BASE64.encode(pdf()), "name": "q3.pdf", "mime": "application/pdf"}
        ]
    });
    let (outcome, id) = answered(&s, answer).await;
    assert_eq!(outcome, StepOutcome::Executed(id));

    let parts = s.parts(id).await;
    assert_eq!(statuses(&parts), ["sent", "sent", "sent"]);
    let text = s.platforms.sent_to(Platform::Telegram);
    assert_eq!(text.len(), 1, "one text message");
    let files = s.platforms.files().files_to(Platform::Telegram);
    let methods: Vec<&str> = files.iter().map(|c| c.method).collect();
    assert_eq!(methods, ["sendPhoto", "sendDocument"]);
    assert!(
        text[0].at <= files[0].at && files[0].seq < files[1].seq,
        "text, then the files in order"
    );

    let (photo, document) = (&files[0], &files[1]);
    assert_eq!(photo.bytes(), picture.as_slice(), "the bytes as served");
    assert_eq!(photo.field("caption").as_deref(), Some("Revenue by month"));
    let photo_part = photo.file.as_ref().unwrap();
    assert_eq!(
        (photo_part.name.as_str(), photo_part.filename.as_deref()),
        ("photo", Some("q3.png"))
    );
    assert_eq!(photo_part.content_type.as_deref(), Some("image/png"));
    assert_eq!(document.bytes(), pdf().as_slice());
    assert_eq!(document.field("caption"), None, "no caption, none sent");
    assert_eq!(
        document.file.as_ref().unwrap().filename.as_deref(),
        Some("q3.pdf")
    );
    let user_message = text[0].body["reply_parameters"]["message_id"].clone();
    for file in &files {
        assert_eq!(
            file.json_field("reply_parameters")["message_id"],
            user_message,
            "threaded"
        );
        assert_eq!(
            file.field("chat_id"),
            text[0].body["chat_id"].as_i64().map(|c| c.to_string())
        );
    }
    assert_eq!(host.requests("/charts/q3.png"), 1, "fetched once");
    assert_eq!(parts[1].platform_message_id, photo.id, "the message id recorded");

    // Admins see the files, never the inline bytes; the agent's history names them.
    let shown = message(&s, id).await;
    let listed = shown["reply_parts"].as_array().expect("parts");
    assert_eq!(listed[1]["file"]["url"], host.url("/charts/q3.png"));
    assert_eq!(
        listed[2]["file"],
        json!({"name": "q3.pdf", "mime": "application/pdf", "size": pdf().len()})
    );
    assert!(!shown.to_string().contains(&BASE64.encode(pdf())));
    assert_eq!(
        shown["response_content"],
        "Here is the **Q3** report.\n\n[q3.png]\n\n[q3.pdf]"
    );

    // The console's turn page says what each part posted.
    let cookie = crate::console::http_sign_in(&s.app, &s.admin_key().await).await;
    let (status, page) = crate::console::get_page(&s.app, &cookie, &format!("/console/turns/{id}")).await;
    assert_eq!(status, 200);
    assert!(
        page.contains("File <strong>q3.png</strong> (image/png), from http://127.0.0.1:"),
        "{page}"
    );
    assert!(page.contains(&format!(
        "File <strong>q3.pdf</strong> (application/pdf), {} bytes, given inline",
        pdf().len()
    )));
}

#[tokio::test]
async fn a_file_that_cannot_be_had_ends_its_part_failed_saying_why_and_uploads_nothing() {
    let s = Pipeline::start().await;
    let host = FileHost::start().await;
    host.fail("/gone.pdf", 404);
    host.redirect("/moved.png", "http://169.254.169.254/latest/meta-data/");
    host.put("/huge.png", png(10_000_001), Some("image/png"));
    host.put_chunked(
        "/unsized.bin",
        vec![7u8; 9 * 1024 * 1024],
        Some("application/octet-stream"),
    );
    let cases = [
        (host.url("/gone.pdf"), "answered 404"),
        ("http://10.0.0.7/report.pdf".to_owned(), "address is refused"),
        (host.url("/moved.png"), "address is refused"),
        (
            host.url("/huge.png"),
            "larger than the platform takes (10000000 bytes)",
        ),
        (
            host.url("/unsized.bin"),
            "gives no length and the file is larger than 8388608 bytes",
        ),
    ];
    for (url, why) in cases {
        let answer = json!({"content": "Here it is.", "attachments": [{"url": url}]});
        let (outcome, id) = answered(&s, answer).await;
        assert_eq!(outcome, StepOutcome::Executed(id), "{why}");
        let parts = s.parts(id).await;
        assert_eq!(statuses(&parts), ["sent", "failed"], "{why}");
        let error = parts[1].last_error.as_deref().unwrap();
        assert!(error.contains(why), "{why}: {error}");
        assert_eq!(message(&s, id).await["status"], "delivery_failed", "{why}");
    }
    assert!(s.platforms.files().files().is_empty(), "nothing uploaded");
    assert_eq!(host.requests("/huge.png"), 1);
}

#[tokio::test]
async fn a_file_host_that_is_away_is_tried_again_and_the_file_posted_once() {
    let s = Pipeline::start().await;
    let host = FileHost::start().await;
    host.fail("/later.pdf", 503);
    let answer = json!({"content": "Soon.", "attachments": [{"url": host.url("/later.pdf")}]});
    let (_, id) = answered(&s, answer).await;
    let parts = s.parts(id).await;
    assert_eq!(statuses(&parts), ["sent", "pending"]);
    assert!(parts[1].last_error.as_deref().unwrap().contains("503"));

    host.put("/later.pdf", pdf(), Some("application/pdf"));
    s.time_passes().await;
    assert_eq!(s.worker.step().await.unwrap(), StepOutcome::Delivered(id));
    let files = s.platforms.files().files_to(Platform::Telegram);
    assert_eq!(files.len(), 1);
    assert_eq!(files[0].bytes(), pdf().as_slice());
}

#[tokio::test]
async fn a_download_broken_off_mid_upload_is_known_not_posted_and_tried_again_even_at_most_once() {
    let s = Pipeline::start().await;
    let host = FileHost::start().await;
    let file = png(200_000);
    host.break_off("/chart.png", &file, Some("image/png"));
    let answer = json!({"content": "Here.", "attachments": [{"url": host.url("/chart.png")}]});
    let (_, id) = answered(&s, answer).await;
    let parts = s.parts(id).await;
    assert_eq!(
        statuses(&parts),
        ["sent", "pending"],
        "the platform got a body cut short: not posted, not in doubt"
    );
    let error = parts[1].last_error.as_deref().unwrap();
    assert!(error.contains("download broke off"), "{error}");
    assert!(
        s.platforms.files().files().is_empty(),
        "no file reached the platform"
    );

    host.put("/chart.png", file.clone(), Some("image/png"));
    s.time_passes().await;
    assert_eq!(s.worker.step().await.unwrap(), StepOutcome::Delivered(id));
    let files = s.platforms.files().files_to(Platform::Telegram);
    assert_eq!(files.len(), 1, "posted once");
    assert_eq!(files[0].bytes(), file.as_slice());
}

#[tokio::test]
async fn an_upload_in_doubt_is_not_sent_again_at_most_once() {
    let s = Pipeline::builder()
        .settings(|settings| settings.dispatch.file_timeout_secs = 1)
        .start()
        .await;
    s.platforms
        .files()
        .script_method("sendDocument", [Answer::HangAfterPosting]);
    let answer =
        json!({"content": "Attached.", "attachments": [{"data": BASE64.encode(pdf()), "name": "a.pdf"}]});
    let (_, id) = answered(&s, answer).await;
    let parts = s.parts(id).await;
    assert_eq!(
        statuses(&parts),
        ["sent", "sending"],
        "the upload's outcome is unknown"
    );
    assert!(parts[1].last_error.is_some());

    s.time_passes().await;
    s.worker.step().await.unwrap();
    let parts = s.parts(id).await;
    assert_eq!(statuses(&parts), ["sent", "unknown"], "settled as a text part is");
    assert_eq!(s.platforms.files().files().len(), 1, "never uploaded twice");
}

#[tokio::test]
async fn a_reaction_is_set_on_the_users_message_by_character_or_name() {
    let s = Pipeline::start().await;
    let (outcome, id) = answered(&s, json!({"content": "Done.", "react": "thumbsup"})).await;
    assert_eq!(outcome, StepOutcome::Executed(id));
    assert_eq!(statuses(&s.parts(id).await), ["sent", "sent"]);
    let reactions = s.platforms.files().reactions();
    assert_eq!(reactions.len(), 1);
    let user_message =
        s.platforms.sent_to(Platform::Telegram)[0].body["reply_parameters"]["message_id"].clone();
    assert_eq!(reactions[0].fields["message_id"], user_message);
    assert_eq!(
        reactions[0].fields["reaction"],
        json!([{"type": "emoji", "emoji": "👍"}])
    );
}

#[tokio::test]
async fn what_the_platform_cannot_post_is_refused_when_the_answer_arrives() {
    let s = Pipeline::start().await;
    let refused = [
        (
            json!({"content": "ok", "react": "✅"}),
            "not one of the 73 reactions",
        ),
        (
            json!({"content": "ok", "attachments": [{"url": "ftp://files.example/a.pdf"}]}),
            "http(s)",
        ),
        (
            json!({"content": "ok", "attachments": [{"data": "aGk=", "name": "hi.txt"}], "react": 7}),
            "`react`",
        ),
    ];
    for (answer, why) in refused {
        let (outcome, id) = answered(&s, answer).await;
        assert_eq!(outcome, StepOutcome::Failed(id), "{why}");
        let turn = message(&s, id).await;
        assert_eq!(turn["status"], "dispatch_failed");
        assert!(
            turn["last_error"].as_str().unwrap().contains(why),
            "{why}: {turn}"
        );
    }
    assert_eq!(
        s.agent.calls().len(),
        3,
        "not retried: the same answer would be refused again"
    );
    assert!(s.platforms.sent().is_empty() && s.platforms.files().all_calls().is_empty());
}

#[tokio::test]
async fn events_the_agents_own_messages_and_a_persons_carry_files_too() {
    let s = Pipeline::start().await;
    let secret = s.tenant.dispatch_secret.clone();
    let (id, path) = accepted_turn(&s, "make me a chart").await;
    let chart = json!([{"data": BASE64.encode(png(100)), "name": "chart.png", "caption": "Your chart"}]);
    let bad = json!({"type": "message", "content": "x", "attachments": [{"data": BASE64.encode(png(10)), "name": "a.gif", "mime": "image/gif"}], "react": "✅"});
    let (status, out) = post_event(&s.app, &path, &secret, "ev-bad", bad).await;
    assert_eq!(status, 422, "{out}");
    assert!(
        out.to_string().contains("the reaction cannot be set on telegram"),
        "{out}"
    );
    let event = json!({"type": "done", "content": "Here.", "attachments": chart, "react": "👌"});
    let (status, out) = post_event(&s.app, &path, &secret, "ev-1", event).await;
    assert_eq!((status, &out["parts"]), (202, &json!(3)), "{out}");
    assert!(matches!(
        s.worker.step().await.unwrap(),
        StepOutcome::Delivered(_) | StepOutcome::Executed(_)
    ));
    assert_eq!(statuses(&s.parts(id).await), ["sent", "sent", "sent"]);
    let files = s.platforms.files().files_to(Platform::Telegram);
    assert_eq!(files[0].field("caption").as_deref(), Some("Your chart"));
    assert_eq!(s.platforms.files().reactions().len(), 1);

    // A person answers with a file.
    let conversation = message(&s, id).await["conversation"].as_str().unwrap().to_owned();
    let person = json!({"content": "From Dana, with the form.", "attachments": [{"data": BASE64.encode(pdf()), "name": "form.pdf"}]});
    let (status, out) = s
        .admin(
            Method::POST,
            &format!("/v1/admin/conversations/{conversation}/messages"),
            Some(person),
        )
        .await;
    assert_eq!((status, &out["parts"]), (201, &json!(2)), "{out}");
    assert!(matches!(
        s.worker.step().await.unwrap(),
        StepOutcome::Delivered(_) | StepOutcome::Executed(_)
    ));
    let files = s.platforms.files().files_to(Platform::Telegram);
    assert_eq!(files.len(), 2);
    assert_eq!(
        files[1].file.as_ref().unwrap().filename.as_deref(),
        Some("form.pdf")
    );
}
