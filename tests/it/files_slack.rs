//! Files and reactions an answer sends on Slack, through the real pipeline: each file
//! uploaded in Slack's three steps (`files.getUploadURLExternal`, the bytes to the upload URL,
//! `files.completeUploadExternal` into the turn's thread), the file id recorded between the
//! upload and the completion so that a completion in doubt is settled by the file's shares
//! (`files.info`) and never made twice; a reaction set by its Slack name.

use std::time::Duration;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use channel_bridge::domain::{MessageId, Platform};
use serde_json::{json, Value};

use crate::support::fake_agent::Reply;
use crate::support::fake_files::{Call, FileHost};
use crate::support::fake_platforms::Answer;
use crate::support::pipeline::statuses;
use crate::support::platforms::*;
use crate::support::Pipeline;

/// The DM channel of the Slack fixtures, where every turn below is asked.
const DM: &str = "D0DM00001";
const COMPLETE: &str = "files.completeUploadExternal";

/// The pipeline, its interrupted Slack sends waiting `confirm_secs` before they are resent,
/// and the agent's file host.
async fn setup(confirm_secs: u64) -> (Pipeline, FileHost) {
    let s = Pipeline::builder()
        .settings(move |settings| settings.dispatch.slack_confirm_secs = confirm_secs)
        .start()
        .await;
    (s, FileHost::start().await)
}

/// A PDF of a few hundred kilobytes, so that its bytes stream.
fn report_pdf() -> Vec<u8> {
    let mut pdf = b"%PDF-1.4\n".to_vec();
    pdf.extend((0..300_000u32).map(|i| (i % 251) as u8));
    pdf.extend(b"\n%%EOF\n");
    pdf
}

fn chart_png() -> Vec<u8> {
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    png.extend(b"\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01\x08\x06\0\0\0\x1f\x15\xc4\x89");
    png
}

/// An answer with one file, `url`, captioned `Q3`, after a line of text.
fn report_answer(url: &str) -> Value {
    json!({"content": "Report attached", "attachments": [{"url": url, "caption": "Q3"}]})
}

/// The user's message `ts` in the DM answered with `answer`, the step run to its end.
async fn answered(s: &Pipeline, ts: &str, answer: Value) -> MessageId {
    s.agent.script([Reply::Json(200, answer, None)]);
    s.deliver(Platform::Slack, slack_text(ts, "the report?")).await;
    s.step_executed().await
}

/// Like `answered`, but the worker dies while `files.completeUploadExternal` is answered
/// with `cut` (after or before it shares the file); the job is then due again.
async fn interrupted(s: &Pipeline, ts: &str, url: &str, cut: Answer) -> MessageId {
    s.agent.script([Reply::Json(200, report_answer(url), None)]);
    s.platforms.files().script_method(COMPLETE, [cut]);
    s.deliver(Platform::Slack, slack_text(ts, "the report?")).await;
    let step = s.step();
    s.platforms.files().wait_for(COMPLETE, 1).await;
    step.abort();
    assert!(step.await.unwrap_err().is_cancelled());
    s.time_passes().await;
    s.owner_scalar("select message_id from channel_replies where part_index = 1 and status = 'sending'")
        .await
}

fn calls(s: &Pipeline, method: &str) -> Vec<Call> {
    s.platforms.files().calls(method)
}

#[tokio::test]
async fn an_answers_text_then_each_file_is_uploaded_and_shared_into_the_thread_in_order() {
    let (s, host) = setup(60).await;
    host.put("/q3/report.pdf", report_pdf(), Some("application/pdf"));
    let answer = json!({"content": "Here is the report", "attachments": [
        {"url": host.url("/q3/report.pdf"), "caption": "Q3"},
        {"data": BASE64.encode(chart_png()), "name": "chart.png"},
    ]});
    let ts = "1718100000.000100";
    let id = answered(&s, ts, answer).await;

    let text = s.platforms.sent_to(Platform::Slack);
    assert_eq!(text.len(), 1);
    assert_eq!(text[0].text(), "Here is the report");
    let asked = calls(&s, "files.getUploadURLExternal");
    let uploads = calls(&s, "upload");
    let completed = calls(&s, COMPLETE);
    assert_eq!((asked.len(), uploads.len(), completed.len()), (2, 2, 2));
    for (i, (name, bytes, mime)) in [
        ("report.pdf", report_pdf(), "application/pdf"),
        ("chart.png", chart_png(), "image/png"),
    ]
    .into_iter()
    .enumerate()
    {
        assert_eq!(asked[i].field("filename").as_deref(), Some(name));
        assert_eq!(asked[i].field("length"), Some(bytes.len().to_string()));
        assert!(asked[i]
            .content_type
            .as_deref()
            .unwrap()
            .starts_with("application/x-www-form-urlencoded"));
        assert_eq!(
            uploads[i].bytes(),
            bytes.as_slice(),
            "{name}: the bytes arrive whole"
        );
        assert_eq!(uploads[i].content_type.as_deref(), Some(mime));
        assert_eq!(uploads[i].authorization, None, "no token goes to the upload URL");
        let file_id = asked[i].id.clone().unwrap();
        assert_eq!(
            completed[i].json_field("files"),
            json!([{"id": file_id, "title": name}])
        );
        assert_eq!(completed[i].field("channel_id").as_deref(), Some(DM));
        assert_eq!(
            completed[i].field("thread_ts"),
            text[0].body["thread_ts"].as_str().map(str::to_owned)
        );
    }
    assert_eq!(completed[0].field("initial_comment").as_deref(), Some("Q3"));
    assert_eq!(
        completed[1].field("initial_comment"),
        None,
        "no caption, no comment"
    );
    // The text first, then each file asked for, uploaded and shared before the next.
    assert!(text[0].at <= asked[0].at);
    assert!(asked[0].at <= uploads[0].at && uploads[0].at <= completed[0].at);
    assert!(completed[0].at <= asked[1].at);

    let parts = s.parts(id).await;
    assert_eq!(statuses(&parts), ["sent", "sent", "sent"]);
    for (part, call) in parts[1..].iter().zip(&asked) {
        assert_eq!(part.platform_message_id, call.id, "the part records the file id");
        assert_eq!(part.upload_ref, call.id);
    }
    let shares = s.platforms.files().slack_shares();
    assert_eq!(shares.len(), 2, "each file shared once");
    assert!(shares
        .iter()
        .all(|(_, share)| share.channel.as_deref() == Some(DM)));
}

#[tokio::test]
async fn a_reaction_is_set_by_its_slack_name_on_the_users_message() {
    let (s, _host) = setup(60).await;
    let ts = "1718100100.000100";
    let id = answered(&s, ts, json!({"content": "Looking into it", "react": "👀"})).await;
    let reactions = s.platforms.files().reactions();
    assert_eq!(reactions.len(), 1);
    let added = &reactions[0];
    assert_eq!(added.method, "reactions.add");
    assert_eq!(added.field("channel").as_deref(), Some(DM));
    assert_eq!(added.field("timestamp").as_deref(), Some(ts));
    assert_eq!(added.field("name").as_deref(), Some("eyes"));
    assert!(added.posted);
    let parts = s.parts(id).await;
    assert_eq!(statuses(&parts), ["sent", "sent"]);
    assert!(parts[1].reaction);
    assert_eq!(parts[1].content, "eyes");
    assert_eq!(parts[1].platform_message_id.as_deref(), Some(ts));
}

#[tokio::test]
async fn a_completion_cut_off_after_slack_shared_the_file_is_found_by_its_share_and_not_made_again() {
    let (s, host) = setup(0).await;
    host.put("/report.pdf", report_pdf(), Some("application/pdf"));
    let id = interrupted(
        &s,
        "1718100200.000100",
        &host.url("/report.pdf"),
        Answer::HangAfterPosting,
    )
    .await;
    let file_id = s.parts(id).await[1]
        .upload_ref
        .clone()
        .expect("the upload was recorded");

    s.worker.step().await.unwrap();
    let parts = s.parts(id).await;
    assert_eq!(statuses(&parts), ["sent", "sent"]);
    assert_eq!(parts[1].platform_message_id.as_deref(), Some(file_id.as_str()));
    assert_eq!(calls(&s, "files.info").len(), 1);
    assert_eq!(
        calls(&s, "files.info")[0].field("file").as_deref(),
        Some(file_id.as_str())
    );
    assert_eq!(calls(&s, COMPLETE).len(), 1, "never completed twice");
    assert_eq!(s.platforms.files().slack_shares().len(), 1, "exactly one share");
    assert_eq!(calls(&s, "upload").len(), 1, "nor uploaded twice");
}

#[tokio::test]
async fn a_share_slack_has_not_shown_yet_is_waited_for_within_the_window_never_completed_twice() {
    let (s, host) = setup(60).await;
    host.put("/report.pdf", report_pdf(), Some("application/pdf"));
    // Slack shares asynchronously: files.info does not list the share for a while.
    s.platforms
        .files()
        .slack_shares_visible_after(Duration::from_secs(3600));
    let id = interrupted(
        &s,
        "1718100300.000100",
        &host.url("/report.pdf"),
        Answer::HangAfterPosting,
    )
    .await;

    s.worker.step().await.unwrap();
    let part = &s.parts(id).await[1];
    assert_eq!(
        part.status.as_str(),
        "sending",
        "in doubt: neither resent nor given up"
    );
    assert!(part
        .last_error
        .as_deref()
        .unwrap()
        .contains("waiting for Slack to show"));
    assert_eq!(calls(&s, COMPLETE).len(), 1);

    s.platforms.files().slack_shares_visible_after(Duration::ZERO);
    s.time_passes().await;
    s.worker.step().await.unwrap();
    assert_eq!(statuses(&s.parts(id).await), ["sent", "sent"]);
    assert_eq!(calls(&s, COMPLETE).len(), 1, "never completed twice");
    assert_eq!(s.platforms.files().slack_shares().len(), 1);
}

#[tokio::test]
async fn a_completion_cut_off_before_it_took_effect_is_made_once_the_window_is_over_without_a_new_upload() {
    let (s, host) = setup(60).await;
    host.put("/report.pdf", report_pdf(), Some("application/pdf"));
    let id = interrupted(
        &s,
        "1718100400.000100",
        &host.url("/report.pdf"),
        Answer::HangBeforePosting,
    )
    .await;
    s.worker.step().await.unwrap();
    assert_eq!(
        s.parts(id).await[1].status.as_str(),
        "sending",
        "inside the window it waits"
    );
    assert_eq!(calls(&s, COMPLETE).len(), 1);

    s.owner_exec("update channel_replies set sending_since = now() - interval '61 seconds' where sending_since is not null")
        .await;
    s.time_passes().await;
    s.worker.step().await.unwrap();
    let parts = s.parts(id).await;
    assert_eq!(statuses(&parts), ["sent", "sent"]);
    let file_id = calls(&s, "files.getUploadURLExternal")[0].id.clone();
    assert_eq!(
        parts[1].platform_message_id, file_id,
        "the recorded upload, completed"
    );
    assert_eq!(calls(&s, "upload").len(), 1, "the bytes went once");
    assert_eq!(calls(&s, COMPLETE).len(), 2);
    assert_eq!(s.platforms.files().slack_shares().len(), 1, "exactly one share");
}

#[tokio::test]
async fn an_upload_slack_lost_before_its_completion_is_uploaded_anew_and_shared_once() {
    let (s, host) = setup(60).await;
    host.put("/report.pdf", report_pdf(), Some("application/pdf"));
    let lost = json!({"ok": false, "error": "file_not_found"});
    s.platforms
        .files()
        .script_method(COMPLETE, [Answer::Status(200, lost, None)]);
    let id = answered(&s, "1718100500.000100", report_answer(&host.url("/report.pdf"))).await;

    let parts = s.parts(id).await;
    assert_eq!(statuses(&parts), ["sent", "sent"]);
    let files = s.platforms.files().slack_files();
    assert_eq!(files.len(), 2, "a fresh upload");
    assert_eq!(
        parts[1].platform_message_id.as_deref(),
        Some(files[1].id.as_str())
    );
    assert_eq!(files[1].upload.as_ref().unwrap().bytes, report_pdf());
    let shares = s.platforms.files().slack_shares();
    assert_eq!(shares.len(), 1);
    assert_eq!(shares[0].0, files[1].id);
}

#[tokio::test]
async fn a_file_url_answering_404_fails_its_part_saying_so_and_uploads_nothing() {
    let (s, host) = setup(60).await;
    let id = answered(&s, "1718100600.000100", report_answer(&host.url("/gone.pdf"))).await;
    let parts = s.parts(id).await;
    assert_eq!(statuses(&parts), ["sent", "failed"]);
    let error = parts[1].last_error.as_deref().unwrap();
    assert!(error.contains("the file's URL answered 404"), "{error}");
    assert_eq!(host.requests("/gone.pdf"), 1);
    assert!(calls(&s, "files.getUploadURLExternal").is_empty());
    assert!(s.platforms.files().slack_shares().is_empty());
}
