//! Private history stays private
//! (docs/agent.md#history-scope-what-the-agent-sees-of-earlier-turns): under the default
//! `private_aware` scope a turn in a channel or group is answered with the user's turns there
//! only, and a direct message with their direct messages on every platform; `user` and `chat`
//! are the tenant's other choices. The admin API shows the same history the worker sends.

use channel_bridge::dispatch::payload::ChatMessage;
use channel_bridge::domain::Platform;
use serde_json::{json, Value};

use crate::support::platforms::*;
use crate::support::Pipeline;

/// The pipeline, the worker reading each tenant's settings afresh (no config cache).
async fn setup() -> Pipeline {
    Pipeline::builder()
        .settings(|settings| settings.config_cache_secs = 0)
        .start()
        .await
}

/// Records `body` on `platform`, dispatches it, and returns the user texts the agent got as
/// history (the new turn last).
async fn ask(s: &Pipeline, platform: Platform, body: Vec<u8>) -> Vec<String> {
    s.deliver(platform, body).await;
    s.step_executed().await;
    let call = s.agent.calls().pop().unwrap();
    user_texts(&call.payload.messages)
}

async fn set_scope(s: &Pipeline, scope: &str) {
    let body = json!({ "history_scope": scope });
    let (status, tenant) = s
        .admin(reqwest::Method::PATCH, "/v1/admin/tenant", Some(body))
        .await;
    assert_eq!(status, 200);
    assert_eq!(tenant["history_scope"], scope);
}

async fn admin_history(s: &Pipeline, query: &str) -> (u16, Value) {
    let response = s
        .app
        .client
        .get(s.app.url(&format!("/v1/admin/users/alice/history{query}")))
        .bearer_auth(s.admin_key().await)
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.json().await.unwrap())
}

fn user_texts(messages: &[ChatMessage]) -> Vec<String> {
    messages
        .iter()
        .filter(|m| m.role == "user")
        .map(|m| m.content.clone())
        .collect()
}

/// A message of the fixture's human in the public channel `C0CHAN001`.
fn slack_channel_text(ts: &str, text: &str) -> Vec<u8> {
    let mut event: Value = serde_json::from_slice(&fixture(Platform::Slack, "channel_text")).unwrap();
    event["event"]["ts"] = ts.into();
    event["event"]["event_ts"] = ts.into();
    event["event"]["text"] = text.into();
    serde_json::to_vec(&event).unwrap()
}

/// A message of the fixture's human (the same person) in a Telegram supergroup.
fn telegram_group_text(update_id: i64, text: &str) -> Vec<u8> {
    let mut update: Value =
        serde_json::from_slice(&fixture(Platform::Telegram, "group_topic_reply")).unwrap();
    update["update_id"] = update_id.into();
    update["message"]["message_id"] = (update_id % 100_000).into();
    update["message"]["text"] = text.into();
    serde_json::to_vec(&update).unwrap()
}

fn texts(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

#[tokio::test]
async fn by_default_a_channel_sees_only_its_own_turns_and_a_dm_sees_every_platforms_dms() {
    let s = setup().await;
    assert_eq!(
        ask(&s, Platform::Telegram, telegram_text(2001, "my salary is 5k")).await,
        texts(&["my salary is 5k"])
    );
    assert_eq!(
        ask(
            &s,
            Platform::Slack,
            slack_channel_text("1718000600.000100", "standup notes?")
        )
        .await,
        texts(&["standup notes?"]),
        "the DM stays out of the channel's history"
    );
    assert_eq!(
        ask(
            &s,
            Platform::Telegram,
            telegram_group_text(2002, "group question")
        )
        .await,
        texts(&["group question"]),
        "a Telegram group is a space of its own"
    );
    assert_eq!(
        ask(
            &s,
            Platform::Slack,
            slack_text("1718000700.000100", "and in a DM")
        )
        .await,
        texts(&["my salary is 5k", "and in a DM"]),
        "direct messages span platforms"
    );
    assert_eq!(
        ask(
            &s,
            Platform::Slack,
            slack_channel_text("1718000800.000100", "more standup")
        )
        .await,
        texts(&["standup notes?", "more standup"])
    );

    // The admin API shows what the next turn would get: a DM by default, or the chat named.
    let (status, dm) = admin_history(&s, "").await;
    assert_eq!(status, 200);
    assert_eq!(dm["history_scope"], "private_aware");
    let dm: Vec<ChatMessage> = serde_json::from_value(dm["messages"].clone()).unwrap();
    assert_eq!(user_texts(&dm), texts(&["my salary is 5k", "and in a DM"]));
    let (status, channel) =
        admin_history(&s, &format!("?connector_id={}&chat_id=C0CHAN001", s.tenant.slack)).await;
    assert_eq!(status, 200);
    let channel: Vec<ChatMessage> = serde_json::from_value(channel["messages"].clone()).unwrap();
    assert_eq!(user_texts(&channel), texts(&["standup notes?", "more standup"]));
    // Either alone names the chat they wrote in last among those it matches.
    for query in [
        "?chat_id=C0CHAN001".to_owned(),
        format!("?connector_id={}", s.tenant.slack),
    ] {
        let (status, alone) = admin_history(&s, &query).await;
        assert_eq!(status, 200, "{query}");
        let alone: Vec<ChatMessage> = serde_json::from_value(alone["messages"].clone()).unwrap();
        assert_eq!(user_texts(&alone), user_texts(&channel), "{query}");
    }
}

#[tokio::test]
async fn the_user_scope_shares_everything_and_the_chat_scope_keeps_one_chat() {
    let s = setup().await;
    set_scope(&s, "user").await;
    ask(&s, Platform::Telegram, telegram_text(3001, "telegram dm")).await;
    assert_eq!(
        ask(
            &s,
            Platform::Slack,
            slack_channel_text("1718000600.000100", "channel question")
        )
        .await,
        texts(&["telegram dm", "channel question"]),
        "`user`: everything, as before"
    );

    set_scope(&s, "chat").await;
    assert_eq!(
        ask(&s, Platform::Slack, slack_text("1718000700.000100", "slack dm")).await,
        texts(&["slack dm"]),
        "`chat`: not even the same person's DMs elsewhere"
    );
    assert_eq!(
        ask(&s, Platform::Telegram, telegram_text(3002, "telegram again")).await,
        texts(&["telegram dm", "telegram again"])
    );
    // Without a chat named, the admin sees the next turn in the direct chat written in last.
    let (status, body) = admin_history(&s, "").await;
    assert_eq!(status, 200, "{body}");
    let last: Vec<ChatMessage> = serde_json::from_value(body["messages"].clone()).unwrap();
    assert_eq!(user_texts(&last), texts(&["telegram dm", "telegram again"]));

    let response = s
        .app
        .client
        .patch(s.app.url("/v1/admin/tenant"))
        .bearer_auth(s.admin_key().await)
        .json(&json!({ "history_scope": "everyone" }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 422);
}
