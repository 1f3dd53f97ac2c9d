//! People's reactions to posted answers as feedback (docs/agent.md#reactions-feedback-on-answers):
//! each platform's reaction, shaped as it sends it, is recorded against the answer it is on,
//! the latest state per person, never a turn; a reaction to anything else is dropped.

use channel_bridge::dispatch::StepOutcome;
use channel_bridge::domain::{MessageId, Platform};
use reqwest::Method;
use serde_json::{json, Value};

use crate::support::fake_agent::Reply;
use crate::support::platforms::*;
use crate::support::Pipeline;

/// A user's message on `platform` answered with one part: the turn and the part's id there.
async fn answered(s: &Pipeline, platform: Platform, body: Vec<u8>) -> (MessageId, String) {
    s.agent
        .script([Reply::Json(200, json!({"content": "Here you go."}), None)]);
    s.deliver(platform, body).await;
    let id = s.step_executed().await;
    let part = s.parts(id).await.pop().expect("a reply part");
    (id, part.platform_message_id.expect("posted"))
}

/// The turn's reactions as the admin API shows them: (by, emoji, value).
async fn reactions(s: &Pipeline, turn: MessageId) -> Vec<(String, Value, i64)> {
    let (status, body) = s
        .admin(Method::GET, &format!("/v1/admin/messages/{turn}"), None)
        .await;
    assert_eq!(status, 200, "{body}");
    body["reactions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let by = r["by"].as_str().unwrap().to_owned();
            (by, r["emoji"].clone(), r["value"].as_i64().unwrap())
        })
        .collect()
}

fn telegram_reaction(update_id: i64, on: &str, date: i64, emoji: Option<&str>) -> Vec<u8> {
    let mut update: Value = serde_json::from_slice(&fixture(Platform::Telegram, "message_reaction")).unwrap();
    update["update_id"] = update_id.into();
    let reaction = &mut update["message_reaction"];
    reaction["chat"] = json!({"id": 408258968, "first_name": "Hirrolot", "type": "private"});
    reaction["message_id"] = on.parse::<i64>().unwrap().into();
    reaction["date"] = date.into();
    reaction["new_reaction"] = match emoji {
        Some(emoji) => json!([{"type": "emoji", "emoji": emoji}]),
        None => json!([]),
    };
    serde_json::to_vec(&update).unwrap()
}

async fn turns(s: &Pipeline) -> i64 {
    let mut owner = s.app.db.owner_conn().await;
    sqlx::query_scalar("select count(*) from channel_messages")
        .fetch_one(&mut owner)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_telegram_thumbs_up_then_down_then_removed_is_one_current_reaction_never_a_turn() {
    let s = Pipeline::start().await;
    let (turn, on) = answered(&s, Platform::Telegram, telegram_text(700_001, "invoice?")).await;
    let before = turns(&s).await;
    let user = TELEGRAM_USER.to_owned();

    s.post_webhook(
        Platform::Telegram,
        telegram_reaction(700_010, &on, 1_718_000_400, Some("👍")),
    )
    .await;
    assert_eq!(reactions(&s, turn).await, [(user.clone(), json!("👍"), 1)]);
    s.post_webhook(
        Platform::Telegram,
        telegram_reaction(700_011, &on, 1_718_000_401, Some("👎")),
    )
    .await;
    // The first update again, late: older than the state recorded, it changes nothing.
    s.post_webhook(
        Platform::Telegram,
        telegram_reaction(700_010, &on, 1_718_000_400, Some("👍")),
    )
    .await;
    assert_eq!(reactions(&s, turn).await, [(user.clone(), json!("👎"), -1)]);
    s.post_webhook(
        Platform::Telegram,
        telegram_reaction(700_012, &on, 1_718_000_402, None),
    )
    .await;
    assert_eq!(reactions(&s, turn).await, [(user, Value::Null, 0)]);

    assert_eq!(turns(&s).await, before, "no reaction is a turn");
    let mut owner = s.app.db.owner_conn().await;
    let queued: i64 = sqlx::query_scalar("select count(*) from feedback_queue")
        .fetch_one(&mut owner)
        .await
        .unwrap();
    assert_eq!(queued, 0, "no feedback events unless the tenant asks");
    assert!(matches!(s.worker.step().await.unwrap(), StepOutcome::Empty));
    assert_eq!(s.agent.calls().len(), 1);
}

#[tokio::test]
async fn a_reaction_to_anything_but_an_answer_in_its_chat_is_dropped() {
    let s = Pipeline::start().await;
    let (turn, on) = answered(&s, Platform::Telegram, telegram_text(710_001, "hello")).await;
    // The user's own message (its Telegram id is the update's, modulo 100 000).
    let own = telegram_reaction(710_010, "10001", 1_718_000_400, Some("👍"));
    let response = s.post_webhook(Platform::Telegram, own).await;
    assert_eq!(response.status(), 200);
    // Our answer's id, but in another chat.
    let mut elsewhere: Value =
        serde_json::from_slice(&telegram_reaction(710_011, &on, 1_718_000_401, Some("👍"))).unwrap();
    elsewhere["message_reaction"]["chat"]["id"] = 777.into();
    s.post_webhook(Platform::Telegram, serde_json::to_vec(&elsewhere).unwrap())
        .await;
    assert!(reactions(&s, turn).await.is_empty());
    let mut owner = s.app.db.owner_conn().await;
    let rows: i64 = sqlx::query_scalar("select count(*) from channel_reactions")
        .fetch_one(&mut owner)
        .await
        .unwrap();
    assert_eq!(rows, 0);
}

fn slack_reaction(kind: &str, channel: &str, on: &str, emoji: &str, event_ts: &str) -> Vec<u8> {
    let mut event: Value = serde_json::from_slice(&fixture(Platform::Slack, "reaction_added")).unwrap();
    event["event"]["type"] = kind.into();
    event["event"]["reaction"] = emoji.into();
    event["event"]["item"]["channel"] = channel.into();
    event["event"]["item"]["ts"] = on.into();
    event["event"]["event_ts"] = event_ts.into();
    event["event_id"] = format!("Ev{}", event_ts.replace('.', "")).into();
    serde_json::to_vec(&event).unwrap()
}

#[tokio::test]
async fn slack_and_whatsapp_reactions_are_recorded_on_the_answer_and_exported() {
    let s = Pipeline::start().await;
    let (turn, ts) = answered(&s, Platform::Slack, slack_text("1718005000.000100", "report?")).await;
    let added = slack_reaction(
        "reaction_added",
        "D0DM00001",
        &ts,
        "+1::skin-tone-2",
        "1718005010.000100",
    );
    s.post_webhook(Platform::Slack, added).await;
    assert_eq!(
        reactions(&s, turn).await,
        [(SLACK_USER.to_owned(), json!("+1::skin-tone-2"), 1)]
    );
    // Removing another emoji leaves the recorded one; removing it clears it.
    let other = slack_reaction("reaction_removed", "D0DM00001", &ts, "tada", "1718005011.000100");
    s.post_webhook(Platform::Slack, other).await;
    assert_eq!(reactions(&s, turn).await[0].2, 1);
    let removed = slack_reaction(
        "reaction_removed",
        "D0DM00001",
        &ts,
        "+1::skin-tone-2",
        "1718005012.000100",
    );
    s.post_webhook(Platform::Slack, removed).await;
    assert_eq!(reactions(&s, turn).await[0].1, Value::Null);

    let (asked, wamid) = answered(&s, Platform::Whatsapp, fixture(Platform::Whatsapp, "text")).await;
    let mut reaction: Value = serde_json::from_slice(&fixture(Platform::Whatsapp, "reaction")).unwrap();
    let message = &mut reaction["entry"][0]["changes"][0]["value"]["messages"][0];
    message["reaction"]["message_id"] = wamid.clone().into();
    message["timestamp"] = "1918000000".into();
    s.post_webhook(Platform::Whatsapp, serde_json::to_vec(&reaction).unwrap())
        .await;
    assert_eq!(
        reactions(&s, asked).await,
        [(WHATSAPP_USER.to_owned(), json!("👍"), 1)]
    );

    let response = s
        .app
        .client
        .get(s.app.url("/v1/admin/export"))
        .bearer_auth(s.admin_key().await)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let export = response.text().await.unwrap();
    let lines: Vec<Value> = export
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let exported = lines
        .iter()
        .find(|line| line["id"] == asked.to_string())
        .expect("the answered turn is exported");
    assert_eq!(exported["reactions"][0]["value"], 1);
}

#[tokio::test]
async fn a_tenant_that_opts_in_gets_one_signed_feedback_event_per_change_retried_until_taken() {
    let s = Pipeline::start().await;
    let (status, tenant) = s
        .admin(
            Method::PATCH,
            "/v1/admin/tenant",
            Some(json!({"feedback_events": true})),
        )
        .await;
    assert_eq!((status, &tenant["feedback_events"]), (200, &json!(true)));
    let (turn, on) = answered(&s, Platform::Telegram, telegram_text(720_001, "invoice?")).await;
    let up = telegram_reaction(720_010, &on, 1_718_000_400, Some("👍"));
    s.post_webhook(Platform::Telegram, up.clone()).await;
    // Telegram delivers the update again: nothing changes, nothing more is queued.
    s.post_webhook(Platform::Telegram, up).await;
    s.agent.fail_feedback(1);
    assert_eq!(
        s.worker.deliver_feedback().await.unwrap(),
        0,
        "a 503 keeps it queued"
    );
    s.owner_exec("update feedback_queue set due_at = now() - interval '1 second'")
        .await;
    assert_eq!(s.worker.deliver_feedback().await.unwrap(), 1);
    let events = s.agent.feedback();
    assert_eq!(events.len(), 2, "the refused attempt and the delivered one");
    assert_eq!(events[0].0, events[1].0, "one webhook-id for every attempt");
    let event = &events[1].1;
    assert_eq!(
        (&event["type"], &event["message_id"]),
        (&json!("feedback"), &json!(turn.to_string()))
    );
    assert_eq!(
        (&event["reaction"]["emoji"], &event["reaction"]["value"]),
        (&json!("👍"), &json!(1))
    );
    assert_eq!(event["channel"]["platform_user_id"], TELEGRAM_USER);

    let down = telegram_reaction(720_011, &on, 1_718_000_401, Some("👎"));
    s.post_webhook(Platform::Telegram, down).await;
    assert_eq!(s.worker.deliver_feedback().await.unwrap(), 1);
    let events = s.agent.feedback();
    assert_eq!(events.len(), 3);
    assert_ne!(events[2].0, events[1].0, "another change, another event");
    assert_eq!(events[2].1["reaction"]["value"], -1);
    assert_eq!(s.worker.deliver_feedback().await.unwrap(), 0, "nothing left");
    assert_eq!(s.agent.calls().len(), 1, "feedback is no dispatch");
}

#[tokio::test]
async fn erasing_a_person_erases_the_reactions_they_left_on_answers_to_others() {
    let s = Pipeline::start().await;
    let (turn, on) = answered(&s, Platform::Telegram, telegram_text(730_001, "status?")).await;
    let mut other: Value =
        serde_json::from_slice(&telegram_reaction(730_010, &on, 1_718_000_400, Some("👎"))).unwrap();
    other["message_reaction"]["user"]["id"] = 999_001.into();
    s.post_webhook(Platform::Telegram, serde_json::to_vec(&other).unwrap())
        .await;
    assert_eq!(
        reactions(&s, turn).await,
        [("999001".to_owned(), json!("👎"), -1)]
    );
    let (status, erased) = s
        .admin(Method::POST, "/v1/admin/senders/telegram/999001/erase", None)
        .await;
    assert_eq!(status, 200, "{erased}");
    assert_eq!(erased["reactions"], 1);
    assert!(reactions(&s, turn).await.is_empty());
    assert_eq!(s.parts(turn).await.len(), 1, "the answer itself stays");
}
