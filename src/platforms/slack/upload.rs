//! Files out: Slack's external upload in three steps
//! (<https://docs.slack.dev/reference/methods/files.getUploadURLExternal>, a POST of the
//! bytes to the URL it gives, <https://docs.slack.dev/reference/methods/files.completeUploadExternal>).
//!
//! Only the completion shows anything, and no step takes an idempotency key: so the file id
//! is recorded between (`SendOutcome::Staged`), the completion is made with it on the next
//! call, and a completion in doubt is settled by `super::shares` before it is repeated.
//!
//! The part records the file id, not a message `ts`: Slack shares the file asynchronously
//! and its answer carries no `ts`. A reaction people leave on the file's message therefore
//! names a `ts` no part holds, and is not matched to the answer.

use std::time::Duration;

use reqwest::{header, StatusCode};
use serde_json::{json, Value};

use super::send::{escape, ok_body, thread_ts, Refusal};
use crate::egress::GuardedClient as Client;
use crate::media::outgoing::{FileBody, OutgoingFile};
use crate::platforms::contract::api_base;
use crate::platforms::send::{open_file, read_json, transport_error, OutboundPart, SendOutcome};

/// Slack's method pages state no per-file maximum; its help centre says 1 GB.
pub(super) const FILE_MAX_BYTES: u64 = 1_000_000_000;

const UPLOAD_URL_METHOD: &str = "files.getUploadURLExternal";
const COMPLETE_METHOD: &str = "files.completeUploadExternal";

/// Refusals of the upload methods a repeat cannot fix (beyond `send::SLACK_PERMANENT`).
const FILE_PERMANENT: &[&str] = &[
    "file_type_not_allowed",
    "file_uploads_disabled",
    "file_uploads_except_images_disabled",
    "file_upload_size_restricted",
    "storage_limit_reached",
    "snippet_too_large",
    "missing_argument",
    "alt_txt_too_large",
    "invalid_channel",
    "posting_to_channel_denied",
    "access_denied",
    "not_allowed_token_type",
];

/// Where step 1 says the bytes go, and the file they become.
#[derive(Debug, Clone, PartialEq, Eq)]
struct UploadTarget {
    upload_url: reqwest::Url,
    file_id: String,
}

/// The completion's answer: done (or not), or the upload is no longer there to complete.
#[derive(Debug, PartialEq, Eq)]
enum Completion {
    Done(SendOutcome),
    /// `file_not_found`: the upload expired (or was aborted) before it was completed.
    Expired,
}

/// Uploads `file` (`Staged` with its id), or completes the upload `part.staged` names.
pub(super) async fn send_file(
    client: &Client,
    part: &OutboundPart<'_>,
    token: &str,
    file: &OutgoingFile,
) -> SendOutcome {
    let Some(file_id) = part.staged else {
        return stage(client, part, token, file).await;
    };
    match complete(client, part, token, file, file_id).await {
        Completion::Done(outcome) => outcome,
        Completion::Expired => {
            tracing::info!(
                file_id,
                "slack lost an upload before its completion; uploading again"
            );
            stage(client, part, token, file).await
        }
    }
}

/// Steps 1 and 2. Nothing is shown before the completion, so no failure here is in doubt:
/// what is not refused for good is `NotSent`, and tried again from step 1.
async fn stage(client: &Client, part: &OutboundPart<'_>, token: &str, file: &OutgoingFile) -> SendOutcome {
    let body = match open_file(client, part, file, FILE_MAX_BYTES).await {
        Ok(body) => body,
        Err(outcome) => return outcome,
    };
    // `length: 0` is refused with `missing_argument`.
    if body.len == 0 {
        return SendOutcome::Permanent {
            error: "slack takes no empty file".into(),
        };
    }
    let request = client
        .post(format!("{}/api/{UPLOAD_URL_METHOD}", api_base(part.connector)))
        .bearer_auth(token)
        .form(&upload_url_form(&body.name, body.len));
    let target = match client.send(request).await {
        Ok(response) => {
            let (status, answer, retry_after) = read_json(response).await;
            classify_upload_url(status, answer, retry_after)
        }
        Err(err) => Err(unshared(transport_error(err))),
    };
    match target {
        Ok(target) => match put_bytes(client, target.upload_url, body, part.transfer_timeout).await {
            Ok(()) => SendOutcome::Staged(target.file_id),
            Err(outcome) => outcome,
        },
        Err(outcome) => outcome,
    }
}

/// Form-encoded: the method's JSON input has been seen to fail with `invalid_arguments`.
fn upload_url_form(name: &str, len: u64) -> [(&'static str, String); 2] {
    [("filename", name.to_owned()), ("length", len.to_string())]
}

fn classify_upload_url(
    status: StatusCode,
    body: Option<Value>,
    retry_after: Option<Duration>,
) -> Result<UploadTarget, SendOutcome> {
    let body = ok_body(UPLOAD_URL_METHOD, FILE_PERMANENT, status, body, retry_after).map_err(unshared)?;
    let upload_url = body["upload_url"]
        .as_str()
        .and_then(|url| reqwest::Url::parse(url).ok())
        .filter(|url| matches!(url.scheme(), "http" | "https"));
    let file_id = body["file_id"].as_str().filter(|id| valid_file_id(id));
    match (upload_url, file_id) {
        (Some(upload_url), Some(file_id)) => Ok(UploadTarget {
            upload_url,
            file_id: file_id.to_owned(),
        }),
        _ => Err(SendOutcome::NotSent {
            error: format!("slack {UPLOAD_URL_METHOD}: ok without an upload_url and file_id"),
        }),
    }
}

/// Slack's file ids (`F0…`): kept, and sent back, only in that form.
fn valid_file_id(id: &str) -> bool {
    (1..=64).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_alphanumeric())
}

/// Step 2: the raw bytes, without the token (Slack's SDK sends none to the upload URL).
/// "A non-200 response indicates a failure"; nothing is shared before the completion, so
/// any failure here is safe to retry with a fresh upload.
async fn put_bytes(
    client: &Client,
    url: reqwest::Url,
    body: FileBody,
    timeout: Duration,
) -> Result<(), SendOutcome> {
    let request = client
        .post(url)
        .timeout(timeout)
        .header(header::CONTENT_TYPE, body.mime)
        .header(header::CONTENT_LENGTH, body.len)
        .body(body.body);
    let response = client
        .send(request)
        .await
        .map_err(|err| unshared(transport_error(err)))?;
    let status = response.status();
    let retry_after = read_json(response).await.2;
    classify_put(status, retry_after)
}

fn classify_put(status: StatusCode, retry_after: Option<Duration>) -> Result<(), SendOutcome> {
    match status {
        StatusCode::OK => Ok(()),
        StatusCode::TOO_MANY_REQUESTS => Err(SendOutcome::RateLimited {
            retry_after: retry_after.unwrap_or(Duration::from_secs(1)),
            error: "slack upload: rate limited".into(),
        }),
        status => Err(SendOutcome::NotSent {
            error: format!("slack's upload URL answered {status}"),
        }),
    }
}

/// Step 3: the file shared into the part's channel, threaded as its text parts are, its
/// caption as the message's text.
async fn complete(
    client: &Client,
    part: &OutboundPart<'_>,
    token: &str,
    file: &OutgoingFile,
    file_id: &str,
) -> Completion {
    let body = completion_body(
        &part.message.address.chat_id,
        thread_ts(part.message),
        part.text,
        &file.name,
        file_id,
    );
    let request = client
        .post(format!("{}/api/{COMPLETE_METHOD}", api_base(part.connector)))
        .bearer_auth(token)
        .json(&body);
    match client.send(request).await {
        Ok(response) => {
            let (status, answer, retry_after) = read_json(response).await;
            classify_completion(status, answer, retry_after, file_id)
        }
        Err(err) => Completion::Done(transport_error(err)),
    }
}

/// The caption is plain text: escaped, as a text part's is, so it forms no mention.
fn completion_body(channel: &str, thread: Option<&str>, caption: &str, title: &str, file_id: &str) -> Value {
    let mut body = json!({
        "files": [{ "id": file_id, "title": title }],
        "channel_id": channel,
    });
    if let Some(thread) = thread {
        body["thread_ts"] = thread.into();
    }
    if !caption.trim().is_empty() {
        body["initial_comment"] = escape(caption).into();
    }
    body
}

/// `Sent` with the file id: the message's `ts` is not in the answer (see the module doc).
fn classify_completion(
    status: StatusCode,
    body: Option<Value>,
    retry_after: Option<Duration>,
    file_id: &str,
) -> Completion {
    match ok_body(COMPLETE_METHOD, FILE_PERMANENT, status, body, retry_after) {
        Ok(_) => Completion::Done(SendOutcome::Sent(file_id.to_owned())),
        Err(Refusal::Code { code, .. }) if code == "file_not_found" => Completion::Expired,
        Err(refusal) => Completion::Done(refusal.outcome()),
    }
}

/// Before the completion nothing is shown: what would be in doubt after a post is simply
/// not sent here.
fn unshared(refusal: impl Into<SendOutcome>) -> SendOutcome {
    match refusal.into() {
        SendOutcome::Unknown { error } => SendOutcome::NotSent { error },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(body: Value) -> Option<Value> {
        Some(body)
    }

    #[test]
    fn the_upload_url_is_asked_for_by_form_with_the_opened_files_length() {
        assert_eq!(
            upload_url_form("report.pdf", 2048),
            [
                ("filename", "report.pdf".to_owned()),
                ("length", "2048".to_owned())
            ]
        );
    }

    #[test]
    fn the_completion_shares_into_the_thread_with_the_escaped_caption() {
        let body = completion_body(
            "C1",
            Some("1718000000.000100"),
            "Q3 <!channel> & more",
            "report.pdf",
            "F1",
        );
        assert_eq!(
            body,
            json!({
                "files": [{"id": "F1", "title": "report.pdf"}],
                "channel_id": "C1",
                "thread_ts": "1718000000.000100",
                "initial_comment": "Q3 &lt;!channel&gt; &amp; more",
            })
        );
        let bare = completion_body("D1", None, "  ", "chart.png", "F2");
        assert_eq!(
            bare,
            json!({"files": [{"id": "F2", "title": "chart.png"}], "channel_id": "D1"})
        );
    }

    #[test]
    fn step_one_gives_the_target_or_a_failure_that_shared_nothing() {
        let target = classify_upload_url(
            StatusCode::OK,
            ok(json!({"ok": true, "upload_url": "https://files.slack.com/upload/v1/abc", "file_id": "F07ABC"})),
            None,
        )
        .unwrap();
        assert_eq!(target.file_id, "F07ABC");
        assert_eq!(
            target.upload_url.as_str(),
            "https://files.slack.com/upload/v1/abc"
        );
        let refused = |error: &str| {
            classify_upload_url(StatusCode::OK, ok(json!({"ok": false, "error": error})), None).unwrap_err()
        };
        assert_eq!(
            refused("file_uploads_disabled"),
            SendOutcome::Permanent {
                error: "slack files.getUploadURLExternal: file_uploads_disabled".into()
            }
        );
        assert!(matches!(refused("missing_scope"), SendOutcome::Permanent { .. }));
        assert!(matches!(refused("internal_error"), SendOutcome::NotSent { .. }));
        let limited = classify_upload_url(StatusCode::TOO_MANY_REQUESTS, None, Some(Duration::from_secs(7)));
        assert!(
            matches!(limited, Err(SendOutcome::RateLimited { retry_after, .. }) if retry_after.as_secs() == 7)
        );
        assert!(matches!(
            classify_upload_url(StatusCode::BAD_GATEWAY, None, None),
            Err(SendOutcome::NotSent { .. })
        ));
        for odd in [
            json!({"ok": true, "file_id": "F1"}),
            json!({"ok": true, "upload_url": "file:///etc/passwd", "file_id": "F1"}),
            json!({"ok": true, "upload_url": "https://files.slack.com/u", "file_id": "F1/../x"}),
        ] {
            let outcome = classify_upload_url(StatusCode::OK, ok(odd.clone()), None);
            assert!(matches!(outcome, Err(SendOutcome::NotSent { .. })), "{odd}");
        }
    }

    #[test]
    fn the_upload_url_answers_200_or_nothing_was_shared() {
        assert_eq!(classify_put(StatusCode::OK, None), Ok(()));
        for status in [
            StatusCode::NOT_FOUND,
            StatusCode::PAYLOAD_TOO_LARGE,
            StatusCode::BAD_GATEWAY,
        ] {
            assert!(
                matches!(classify_put(status, None), Err(SendOutcome::NotSent { .. })),
                "{status}"
            );
        }
        let limited = classify_put(StatusCode::TOO_MANY_REQUESTS, Some(Duration::from_secs(3)));
        assert!(
            matches!(limited, Err(SendOutcome::RateLimited { retry_after, .. }) if retry_after.as_secs() == 3)
        );
    }

    #[test]
    fn the_completion_is_sent_with_the_file_id_refused_in_doubt_or_expired() {
        let completed = |status, body| classify_completion(status, body, None, "F1");
        assert_eq!(
            completed(StatusCode::OK, ok(json!({"ok": true, "files": [{"id": "F1"}]}))),
            Completion::Done(SendOutcome::Sent("F1".into()))
        );
        assert_eq!(
            completed(
                StatusCode::OK,
                ok(json!({"ok": false, "error": "file_not_found"}))
            ),
            Completion::Expired
        );
        for code in [
            "not_in_channel",
            "channel_not_found",
            "file_type_not_allowed",
            "invalid_auth",
        ] {
            let outcome = completed(StatusCode::OK, ok(json!({"ok": false, "error": code})));
            let error = format!("slack files.completeUploadExternal: {code}");
            assert_eq!(outcome, Completion::Done(SendOutcome::Permanent { error }));
        }
        for (status, body) in [
            (
                StatusCode::OK,
                ok(json!({"ok": false, "error": "internal_error"})),
            ),
            (StatusCode::SERVICE_UNAVAILABLE, None),
            (StatusCode::OK, None),
        ] {
            let outcome = completed(status, body);
            assert!(
                matches!(outcome, Completion::Done(SendOutcome::Unknown { .. })),
                "{outcome:?}"
            );
        }
        let limited = completed(StatusCode::OK, ok(json!({"ok": false, "error": "ratelimited"})));
        assert!(matches!(
            limited,
            Completion::Done(SendOutcome::RateLimited { .. })
        ));
    }
}
