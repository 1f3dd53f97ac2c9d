//! Slack slash commands (docs/platforms.md#slash-commands): a signed form to the
//! connector's commands URL is a turn with its `command`, answered in its channel, once.

use channel_bridge::dispatch::StepOutcome;
use channel_bridge::domain::Platform;
use reqwest::Method;
use serde_json::{json, Value};

use crate::support::fake_agent::Reply;
use crate::support::platforms::*;
use crate::support::Pipeline;

fn command_form() -> Vec<u8> {
    let path = format!("{}/fixtures/slack/slash_command.form", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("fixture {path}: {e}"))
}

#[tokio::test]
async fn a_slash_command_is_a_turn_answered_in_its_channel_once() {
    let s = Pipeline::start().await;
    s.agent.script([Reply::Json(
        200,
        json!({"content": "Order #42 ships today."}),
        None,
    )]);
    let path = format!("{}/commands", s.tenant.hook_path(Platform::Slack));
    let form = command_form();
    let headers = signed_headers(Platform::Slack, &form);
    let response = post(&s.app, &path, &headers, form.clone()).await;
    assert_eq!(response.status(), 200);
    let ack: Value = response.json().await.unwrap();
    assert_eq!(
        ack,
        json!({"response_type": "in_channel"}),
        "the channel sees the command"
    );

    let turn = s.step_executed().await;
    let call = s.agent.calls().pop().unwrap();
    assert_eq!(call.raw["command"], "/ask");
    assert_eq!(call.payload.content, "where is my order #42?");
    let current = call.raw["messages"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(
        (&current["command"], &current["content"]),
        (&json!("/ask"), &json!("where is my order #42?"))
    );
    let reply = s.platforms.sent_to(Platform::Slack).pop().unwrap();
    assert_eq!(reply.text(), "Order #42 ships today.");
    assert_eq!(reply.body["channel"], "C0CHAN001");
    assert_eq!(
        reply.body.get("thread_ts"),
        None,
        "a message of its own in the channel"
    );

    // Replayed (a retry by a proxy, or an attacker within the signature's five minutes).
    let replayed = post(&s.app, &path, &signed_headers(Platform::Slack, &form), form).await;
    assert_eq!(replayed.status(), 200);
    assert!(matches!(s.worker.step().await.unwrap(), StepOutcome::Empty));
    assert_eq!(s.agent.calls().len(), 1);
    let (status, row) = s
        .admin(Method::GET, &format!("/v1/admin/messages/{turn}"), None)
        .await;
    assert_eq!(status, 200, "{row}");
    assert_eq!(
        (&row["command"], &row["request_content"]),
        (&json!("/ask"), &json!("where is my order #42?"))
    );
}

#[tokio::test]
async fn slacks_certificate_check_is_answered_and_an_unsigned_command_refused() {
    let s = Pipeline::start().await;
    let path = format!("{}/commands", s.tenant.hook_path(Platform::Slack));
    let check = b"ssl_check=1&token=XXYYZZverificationtoken".to_vec();
    let response = post(&s.app, &path, &signed_headers(Platform::Slack, &check), check).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.text().await.unwrap(), "");
    let forged = post(
        &s.app,
        &path,
        &[
            ("x-slack-signature", "v0=00".into()),
            ("x-slack-request-timestamp", "1".into()),
        ],
        command_form(),
    )
    .await;
    assert_eq!(forged.status(), 401);
    assert!(matches!(s.worker.step().await.unwrap(), StepOutcome::Empty));
}
