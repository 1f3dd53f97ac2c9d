//! The agent writes first (docs/agent.md#writing-first): `POST /v1/agent/{tenant}/messages`
//! signed with the dispatch secret, against the real gateway and the platforms' stand-ins.

use channel_bridge::dispatch::StepOutcome;
use channel_bridge::domain::{MessageId, Platform};
use reqwest::Method;
use serde_json::{json, Value};

use crate::support::fake_platforms::Answer;
use crate::support::platforms::*;
use crate::support::{Pipeline, TestApp};

/// POSTs `body` to the tenant's send route, signed with `secret`, `id` as `webhook-id`.
async fn send(app: &TestApp, tenant: &str, secret: &str, id: &str, body: Value) -> (u16, Value) {
    let bytes = serde_json::to_vec(&body).unwrap();
    let now = chrono::Utc::now().timestamp();
    let signature = channel_bridge::signature::sign(secret, id, now, &bytes).unwrap();
    let response = app
        .client
        .post(app.url(&format!("/v1/agent/{tenant}/messages")))
        .header("content-type", "application/json")
        .header("webhook-id", id)
        .header("webhook-timestamp", now.to_string())
        .header("webhook-signature", signature)
        .body(bytes)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

async fn agent_sends(s: &Pipeline, id: &str, body: Value) -> (u16, Value) {
    send(
        &s.app,
        &s.tenant.tenant.to_string(),
        &s.tenant.dispatch_secret,
        id,
        body,
    )
    .await
}

async fn link(s: &Pipeline, platform: &str, account: &str, user: &str) {
    let body = json!({"platform": platform, "platform_user_id": account, "user_id": user});
    let (status, out) = s.admin(Method::POST, "/v1/admin/links", Some(body)).await;
    assert_eq!(status, 201, "{out}");
}

fn message_id(out: &Value) -> MessageId {
    out["message_id"].as_str().unwrap().parse().unwrap()
}

fn posted(outcome: StepOutcome) {
    assert!(
        matches!(outcome, StepOutcome::Delivered(_) | StepOutcome::Executed(_)),
        "{outcome:?}"
    );
}

#[tokio::test]
async fn a_dm_slack_will_not_open_is_a_502_and_nothing_is_recorded() {
    let s = Pipeline::start().await;
    link(&s, "slack", "UGONE1", "carol-slack").await;
    let body = json!({"user_id": "carol-slack", "connector_id": s.tenant.slack, "content": "Hello."});
    let (status, out) = agent_sends(&s, "job-43", body).await;
    assert_eq!(status, 502, "{out}");
    assert_eq!(
        out["message"],
        "the platform would not open a direct message with the user"
    );
    let turns: i64 = s.owner_scalar("select count(*) from channel_messages").await;
    assert_eq!(turns, 0, "nothing recorded");
    assert_eq!(s.worker.step().await.unwrap(), StepOutcome::Empty);
}

#[tokio::test]
async fn a_slack_user_with_no_dm_gets_one_opened_and_the_message_once() {
    let s = Pipeline::start().await;
    link(&s, "slack", "U0NEW7", "bob-slack").await;
    let body =
        json!({"user_id": "bob-slack", "connector_id": s.tenant.slack, "content": "Your report is *ready*."});
    let (status, out) = agent_sends(&s, "job-42-done", body.clone()).await;
    assert_eq!(status, 202, "{out}");
    assert_eq!(
        (&out["chat_id"], &out["conversation"]),
        (&json!("D0NEW7"), &json!("user:bob-slack"))
    );
    let (status, again) = agent_sends(&s, "job-42-done", body).await;
    assert_eq!(
        (status, &again["message_id"]),
        (200, &out["message_id"]),
        "the same webhook-id"
    );

    posted(s.worker.step().await.unwrap());
    assert_eq!(s.worker.step().await.unwrap(), StepOutcome::Empty);
    let sent = s.platforms.sent();
    let opened: Vec<_> = sent
        .iter()
        .filter(|x| x.path == "/api/conversations.open")
        .collect();
    assert_eq!(opened[0].body["users"], "U0NEW7");
    // The repeat may ask Slack for the DM again (conversations.open returns the open one);
    // it posts nothing.
    let posts: Vec<_> = sent
        .iter()
        .filter(|x| x.path == "/api/chat.postMessage")
        .collect();
    assert_eq!(posts.len(), 1, "posted once");
    assert_eq!(posts[0].body["channel"], "D0NEW7");
    assert_eq!(posts[0].body["text"], "Your report is _ready_.");
    assert!(
        posts[0].body.get("thread_ts").is_none(),
        "a new message starts no thread"
    );

    let (_, turn) = s
        .admin(
            Method::GET,
            &format!("/v1/admin/messages/{}", message_id(&out)),
            None,
        )
        .await;
    assert_eq!(
        (&turn["origin"], &turn["decision"]),
        (&json!("agent"), &json!("proactive"))
    );
    assert_eq!(turn["reply_parts"][0]["status"], "sent");
}

#[tokio::test]
async fn the_users_next_dispatch_has_the_agents_message_in_its_history() {
    let s = Pipeline::start().await;
    s.deliver(Platform::Telegram, telegram_text(700_001, "remind me tomorrow"))
        .await;
    assert!(matches!(s.worker.step().await.unwrap(), StepOutcome::Executed(_)));
    let (status, out) = agent_sends(
        &s,
        "reminder-1",
        json!({"user_id": "alice", "content": "Reminder: call Bob."}),
    )
    .await;
    assert_eq!(status, 202, "{out}");
    assert_eq!(out["platform"], "telegram", "the connector alice wrote on last");
    posted(s.worker.step().await.unwrap());
    let sent = s.platforms.sent().pop().unwrap();
    assert_eq!(
        sent.body["chat_id"].to_string(),
        TELEGRAM_USER,
        "her private chat"
    );
    assert!(sent.body.get("reply_parameters").is_none());

    s.deliver(Platform::Telegram, telegram_text(700_002, "done, thanks"))
        .await;
    assert!(matches!(s.worker.step().await.unwrap(), StepOutcome::Executed(_)));
    let call = s.agent.calls().pop().unwrap();
    let messages = call.raw["messages"].as_array().unwrap();
    let n = messages.len();
    assert_eq!(
        messages[n - 2],
        json!({"role": "assistant", "content": "Reminder: call Bob.", "metadata": {"from": "agent"}})
    );
}

#[tokio::test]
async fn a_telegram_user_who_blocked_the_bot_is_a_clear_error_on_the_message() {
    let s = Pipeline::start().await;
    link(&s, "telegram", "5550001", "carol").await;
    s.platforms.script(
        Platform::Telegram,
        [Answer::Status(
            403,
            json!({"ok": false, "error_code": 403, "description": "Forbidden: bot was blocked by the user"}),
            None,
        )],
    );
    let body = json!({"user_id": "carol", "connector_id": s.tenant.telegram, "content": "Hello?"});
    let (status, out) = agent_sends(&s, "ping-carol", body).await;
    assert_eq!(status, 202, "{out}");
    s.worker.step().await.unwrap();
    let (_, turn) = s
        .admin(
            Method::GET,
            &format!("/v1/admin/messages/{}", message_id(&out)),
            None,
        )
        .await;
    assert_eq!(turn["status"], "delivery_failed", "{turn}");
    assert!(
        turn["last_error"]
            .as_str()
            .unwrap()
            .contains("bot was blocked by the user"),
        "{turn}"
    );
    // Unblocked, a resend posts it: the agent's turn is recovered like an answer.
    let (status, queued) = s
        .admin(
            Method::POST,
            &format!("/v1/admin/messages/{}/resend", message_id(&out)),
            None,
        )
        .await;
    assert_eq!((status, &queued["queued"]), (200, &json!(1)), "{queued}");
    posted(s.worker.step().await.unwrap());
    assert!(s.delivered(message_id(&out)).await);
}

#[tokio::test]
async fn whatsapp_outside_the_24_hour_window_is_refused_unless_a_template_is_named() {
    let s = Pipeline::start().await;
    link(&s, "whatsapp", "15550002222", "dora").await;
    let plain =
        json!({"user_id": "dora", "connector_id": s.tenant.whatsapp, "content": "Your order shipped."});
    let (status, out) = agent_sends(&s, "ship-1", plain).await;
    assert_eq!(status, 422, "{out}");
    assert!(out["message"].as_str().unwrap().contains("131047"), "{out}");
    assert!(s.platforms.sent().is_empty(), "Meta was never called");

    let template = json!({"user_id": "dora", "connector_id": s.tenant.whatsapp,
                          "template": {"name": "order_shipped", "language": "en_US", "parameters": ["A-1001"]}});
    let (status, out) = agent_sends(&s, "ship-2", template).await;
    assert_eq!(status, 202, "{out}");
    posted(s.worker.step().await.unwrap());
    let sent = s.platforms.sent().pop().unwrap();
    assert_eq!(sent.body["type"], "template");
    assert_eq!(sent.body["to"], "+15550002222");
    assert_eq!(
        sent.body["template"],
        json!({"name": "order_shipped", "language": {"code": "en_US"},
               "components": [{"type": "body", "parameters": [{"type": "text", "text": "A-1001"}]}]})
    );
    assert!(sent.body.get("text").is_none() && sent.body.get("context").is_none());

    // Inside the window a free-form message goes out.
    s.deliver(Platform::Whatsapp, fixture(Platform::Whatsapp, "text"))
        .await;
    assert!(matches!(s.worker.step().await.unwrap(), StepOutcome::Executed(_)));
    let body = json!({"user_id": "bob", "content": "Anything else?"});
    let (status, out) = agent_sends(&s, "ship-3", body).await;
    assert_eq!(status, 202, "{out}");
    posted(s.worker.step().await.unwrap());
    let sent = s.platforms.sent().pop().unwrap();
    assert_eq!(
        (&sent.body["type"], &sent.body["text"]["body"]),
        (&json!("text"), &json!("Anything else?"))
    );
}

#[tokio::test]
async fn another_tenants_credential_cannot_send_into_this_tenant() {
    let s = Pipeline::start().await;
    let other = provision_tenant_at(&s.app.pool, "globex", Some(&s.platforms.base_url)).await;
    let body = json!({"user_id": "alice", "connector_id": s.tenant.telegram, "content": "phish"});
    let (status, _) = send(
        &s.app,
        &s.tenant.tenant.to_string(),
        &other.dispatch_secret,
        "x1",
        body.clone(),
    )
    .await;
    assert_eq!(status, 401, "another tenant's secret");
    let (status, _) = send(
        &s.app,
        &other.tenant.to_string(),
        &other.dispatch_secret,
        "x2",
        body,
    )
    .await;
    assert_eq!(status, 404, "this tenant's connector is not the other's");
    let (status, _) = agent_sends(&s, "x3", json!({"content": "to whom?"})).await;
    assert_eq!(status, 422);
    let turns: i64 = s.owner_scalar("select count(*) from channel_messages").await;
    assert_eq!(turns, 0);
    assert!(s.platforms.sent().is_empty());
}
