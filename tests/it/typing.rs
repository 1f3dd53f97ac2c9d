//! The typing indicator while the agent works (docs/configuration.md#typing-indicator): what
//! the platform stand-ins receive between the claim and the first reply part, on each
//! platform; that it stops before the reply, never holds the turn up when it fails or hangs,
//! is refreshed while a slow agent thinks but at most once per interval per chat, and is
//! absent where a connector turned it off or Slack has none.

use std::time::Duration;

use channel_bridge::dispatch::StepOutcome;
use channel_bridge::domain::{MessageId, Platform};
use channel_bridge::provision;
use serde_json::{json, Value};
use tokio::task::JoinHandle;

use crate::support::fake_agent::Reply;
use crate::support::fake_platforms::{Answer, Sent};
use crate::support::pipeline::executed;
use crate::support::platforms::*;
use crate::support::Pipeline;

/// Short, so that refreshes show within a test; the code under test paces itself by it.
const INTERVAL: Duration = Duration::from_millis(100);

/// The pipeline with a gated agent (it answers once the test calls `answer`) and a short
/// refresh interval.
async fn setup() -> Pipeline {
    Pipeline::builder()
        .gated_agent()
        .settings(|settings| settings.dispatch.typing_interval_ms = INTERVAL.as_millis() as u64)
        .start()
        .await
}

/// The turn's step ended with its answer delivered; its id.
async fn delivered_turn(s: &Pipeline, step: JoinHandle<StepOutcome>) -> MessageId {
    let id = executed(step).await;
    assert!(s.delivered(id).await, "the answer is delivered");
    id
}

/// After a few refresh intervals: the indicator calls made since `before`.
async fn typing_after_a_while(s: &Pipeline, before: usize) -> Vec<Sent> {
    tokio::time::sleep(INTERVAL * 4).await;
    s.platforms.typing().split_off(before)
}

fn whatsapp_text(id: &str) -> Vec<u8> {
    let mut body: Value = serde_json::from_slice(&fixture(Platform::Whatsapp, "text")).unwrap();
    body["entry"][0]["changes"][0]["value"]["messages"][0]["id"] = id.into();
    serde_json::to_vec(&body).unwrap()
}

/// A Slack DM from the fixture's human inside a thread of the app's DM: an assistant thread.
fn slack_assistant_text(ts: &str, thread_ts: &str) -> Vec<u8> {
    let mut event: Value = serde_json::from_slice(&slack_text(ts, "think about it")).unwrap();
    event["event"]["thread_ts"] = thread_ts.into();
    serde_json::to_vec(&event).unwrap()
}

/// Every indicator call arrived before the first reply part.
fn all_before_the_reply(typing: &[Sent], sends: &[Sent]) {
    let first_send = sends.iter().map(|s| s.seq).min().expect("a reply was posted");
    assert!(
        typing.iter().all(|t| t.seq < first_send),
        "an indicator call came after the reply: {typing:?} / {sends:?}"
    );
}

#[tokio::test]
async fn telegram_typing_starts_before_the_agent_answers_and_stops_before_the_reply() {
    let s = setup().await;
    let step = s
        .turn(Platform::Telegram, telegram_text(31_000, "slow one"))
        .await;
    s.platforms.wait_for_typing(1).await;
    // The agent has the turn and has not answered; nothing was posted yet.
    assert_eq!(s.agent.calls().len(), 1);
    assert!(s.platforms.sent().is_empty());
    let typing = s.platforms.typing_to(Platform::Telegram);
    assert!(typing[0].path.ends_with("/sendChatAction"), "{}", typing[0].path);
    assert!(typing[0].path.contains("telegram-outbound-token"));
    assert_eq!(typing[0].body["action"], "typing");
    assert_eq!(typing[0].body["chat_id"], TELEGRAM_USER.parse::<i64>().unwrap());
    assert!(typing[0].body.get("message_thread_id").is_none());

    s.answer();
    delivered_turn(&s, step).await;
    let sends = s.platforms.sent_to(Platform::Telegram);
    assert_eq!(sends.len(), 1);
    let typing = s.platforms.typing();
    all_before_the_reply(&typing, &sends);
    assert!(
        typing_after_a_while(&s, typing.len()).await.is_empty(),
        "no indicator after the answer"
    );
}

#[tokio::test]
async fn a_slow_agent_gets_telegram_typing_refreshed_once_per_interval() {
    let s = setup().await;
    let step = s
        .turn(Platform::Telegram, telegram_text(31_100, "think hard"))
        .await;
    s.platforms.wait_for_typing(4).await;
    s.answer();
    delivered_turn(&s, step).await;
    let typing = s.platforms.typing_to(Platform::Telegram);
    assert!(typing.len() >= 4);
    // Refreshed, not flooded: no two requests for the chat close together (arrival times
    // at the stand-in carry the machine's jitter, hence half an interval).
    for pair in typing.windows(2) {
        let gap = pair[1].at - pair[0].at;
        assert!(gap >= INTERVAL / 2, "{gap:?}");
    }
    all_before_the_reply(&typing, &s.platforms.sent_to(Platform::Telegram));
}

#[tokio::test]
async fn telegram_typing_in_a_forum_topic_names_the_topic() {
    let s = setup().await;
    let step = s
        .turn(
            Platform::Telegram,
            fixture(Platform::Telegram, "group_topic_reply"),
        )
        .await;
    s.platforms.wait_for_typing(1).await;
    let typing = &s.platforms.typing_to(Platform::Telegram)[0];
    assert_eq!(typing.body["chat_id"], -1001276785818_i64);
    assert_eq!(typing.body["message_thread_id"], 42);
    s.answer();
    delivered_turn(&s, step).await;
}

#[tokio::test]
async fn whatsapp_typing_comes_with_the_read_receipt_of_the_users_message() {
    let s = setup().await;
    let step = s.turn(Platform::Whatsapp, whatsapp_text("wamid.typing1")).await;
    s.platforms.wait_for_typing(1).await;
    assert!(s.platforms.sent().is_empty());
    let typing = &s.platforms.typing_to(Platform::Whatsapp)[0];
    assert_eq!(typing.path, "/v25.0/106540352242922/messages");
    assert_eq!(
        typing.authorization.as_deref(),
        Some("Bearer whatsapp-outbound-token")
    );
    assert_eq!(
        typing.body,
        json!({"messaging_product": "whatsapp", "status": "read", "message_id": "wamid.typing1",
               "typing_indicator": {"type": "text"}})
    );
    s.answer();
    delivered_turn(&s, step).await;
    // The reply is a send of its own, not a read receipt; nothing after it.
    let sends = s.platforms.sent_to(Platform::Whatsapp);
    assert_eq!(sends.len(), 1);
    assert_eq!(sends[0].body["type"], "text");
    all_before_the_reply(&s.platforms.typing(), &sends);
}

#[tokio::test]
async fn slack_shows_a_status_in_an_assistant_thread_and_nothing_elsewhere() {
    let s = setup().await;
    let step = s
        .turn(
            Platform::Slack,
            slack_assistant_text("1718000100.000200", "1718000100.000100"),
        )
        .await;
    s.platforms.wait_for_typing(1).await;
    let typing = &s.platforms.typing_to(Platform::Slack)[0];
    assert_eq!(typing.path, "/api/assistant.threads.setStatus");
    assert_eq!(
        typing.authorization.as_deref(),
        Some("Bearer slack-outbound-token")
    );
    assert_eq!(
        typing.body,
        json!({"channel_id": "D0DM00001", "thread_ts": "1718000100.000100", "status": "is thinking…"})
    );
    s.answer();
    delivered_turn(&s, step).await;
    let sends = s.platforms.sent_to(Platform::Slack);
    all_before_the_reply(&s.platforms.typing(), &sends);
    // The reply clears the status: no clearing call after it.
    let seen = s.platforms.typing().len();
    assert!(typing_after_a_while(&s, seen).await.is_empty());

    // A DM outside a thread: Slack has no indicator there, and none is sent.
    let step = s
        .turn(Platform::Slack, slack_text("1718000200.000100", "no thread"))
        .await;
    s.agent.wait_for_calls(2).await;
    assert!(typing_after_a_while(&s, seen).await.is_empty());
    s.answer();
    delivered_turn(&s, step).await;
}

#[tokio::test]
async fn a_slack_status_is_cleared_when_the_turn_ends_without_a_reply() {
    let s = setup().await;
    s.agent
        .script([Reply::Json(400, json!({"error": "bad request"}), None)]);
    let step = s
        .turn(
            Platform::Slack,
            slack_assistant_text("1718000300.000200", "1718000300.000100"),
        )
        .await;
    s.platforms.wait_for_typing(1).await;
    s.answer();
    assert!(matches!(step.await.unwrap(), StepOutcome::Failed(_)));
    s.platforms.wait_for_typing(2).await;
    let typing = s.platforms.typing_to(Platform::Slack);
    let last = typing.last().unwrap();
    assert_eq!(last.body["status"], "");
    assert_eq!(last.body["thread_ts"], "1718000300.000100");
    assert!(s.platforms.sent().is_empty());
}

#[tokio::test]
async fn a_failing_indicator_still_gives_a_delivered_answer() {
    let s = setup().await;
    let failure = Answer::Status(500, json!({"ok": false, "description": "Internal"}), None);
    s.platforms.script_typing(std::iter::repeat_n(failure, 50));
    let step = s
        .turn(Platform::Telegram, telegram_text(31_200, "fail typing"))
        .await;
    // Failures are not refusals: the indicator keeps trying at its interval.
    s.platforms.wait_for_typing(2).await;
    s.answer();
    delivered_turn(&s, step).await;
    assert_eq!(s.platforms.sent_to(Platform::Telegram).len(), 1);
}

#[tokio::test]
async fn a_hanging_indicator_does_not_hold_up_the_answer() {
    let s = setup().await;
    s.platforms
        .script_typing(std::iter::repeat_n(Answer::HangBeforePosting, 50));
    let step = s
        .turn(Platform::Telegram, telegram_text(31_300, "hang typing"))
        .await;
    s.platforms.wait_for_typing(1).await;
    s.answer();
    let started = std::time::Instant::now();
    delivered_turn(&s, step).await;
    // The first part waits at most the reply grace for a request under way.
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(s.platforms.sent_to(Platform::Telegram).len(), 1);
}

#[tokio::test]
async fn a_connector_with_typing_off_gets_no_indicator() {
    let s = setup().await;
    let key = channel_bridge::admin::operator::issue(&s.app.pool, s.tenant.tenant, "ci")
        .await
        .unwrap()
        .key;
    let path = format!("/v1/admin/connectors/{}", s.tenant.telegram);
    let response = s
        .app
        .client
        .patch(s.app.url(&path))
        .bearer_auth(&key)
        .json(&json!({"typing_indicator": false}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let connector: Value = response.json().await.unwrap();
    assert_eq!(connector["typing_indicator"], false);

    let step = s.turn(Platform::Telegram, telegram_text(31_400, "quietly")).await;
    s.agent.wait_for_calls(1).await;
    assert!(typing_after_a_while(&s, 0).await.is_empty());
    s.answer();
    delivered_turn(&s, step).await;
    assert!(s.platforms.typing().is_empty());
    assert_eq!(s.platforms.sent_to(Platform::Telegram).len(), 1);
}

#[tokio::test]
async fn concurrent_turns_of_one_chat_share_one_indicator_per_interval() {
    let s = setup().await;
    // A second person in the same forum topic: a conversation of their own, so both turns
    // are in flight at once.
    provision::add_link(
        &s.app.pool,
        s.tenant.tenant,
        Platform::Telegram,
        "408250001",
        "dave",
    )
    .await
    .unwrap();
    let mut second: Value =
        serde_json::from_slice(&fixture(Platform::Telegram, "group_topic_reply")).unwrap();
    second["update_id"] = 306197400.into();
    second["message"]["message_id"] = 59.into();
    second["message"]["from"]["id"] = 408250001.into();
    let first = s
        .turn(
            Platform::Telegram,
            fixture(Platform::Telegram, "group_topic_reply"),
        )
        .await;
    let second = s
        .turn(Platform::Telegram, serde_json::to_vec(&second).unwrap())
        .await;
    s.agent.wait_for_calls(2).await;
    s.platforms.wait_for_typing(5).await;
    s.answer();
    s.answer();
    delivered_turn(&s, first).await;
    delivered_turn(&s, second).await;
    let typing = s.platforms.typing_to(Platform::Telegram);
    // Two turns, each refreshing every interval, yet one request per interval for the chat.
    for pair in typing.windows(2) {
        let gap = pair[1].at - pair[0].at;
        assert!(gap >= INTERVAL / 2, "{gap:?}");
    }
}
