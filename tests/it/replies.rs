//! Replies posted back to the platforms, against real local HTTP servers that play each
//! platform's API and record the exact requests.

use channel_bridge::dispatch::StepOutcome;
use channel_bridge::domain::{MessageId, Platform};
use serde_json::{json, Value};

use crate::support::fake_agent::Reply;
use crate::support::fake_platforms::Answer;
use crate::support::pipeline::statuses;
use crate::support::platforms::*;
use crate::support::Pipeline;

/// The pipeline, with an interrupted Slack send looked for in the thread at once and with no
/// read budget (the confirmation window and the budget have tests of their own,
/// `slack_in_doubt`).
async fn setup() -> Pipeline {
    Pipeline::builder()
        .settings(|settings| {
            settings.dispatch.slack_confirm_secs = 0;
            settings.dispatch.slack_read_interval_ms = 0;
        })
        .start()
        .await
}

/// (messages, queued jobs), counted as the owner.
async fn counts(s: &Pipeline) -> (i64, i64) {
    let messages = s.owner_scalar("select count(*) from channel_messages").await;
    let queued = s.owner_scalar("select count(*) from dispatch_queue").await;
    (messages, queued)
}

/// The turn as the admin API shows it.
async fn admin_message(s: &Pipeline, id: MessageId) -> Value {
    let (status, message) = s
        .admin(reqwest::Method::GET, &format!("/v1/admin/messages/{id}"), None)
        .await;
    assert_eq!(status, 200, "{message}");
    message
}

#[tokio::test]
async fn replies_are_threaded_to_the_triggering_message_on_each_platform() {
    let s = setup().await;
    for (platform, fixture) in [
        (Platform::Slack, "dm_text"),
        (Platform::Slack, "thread_reply"),
        (Platform::Telegram, "group_topic_reply"),
        (Platform::Whatsapp, "text"),
    ] {
        assert_eq!(
            post_fixture(&s.app, &s.tenant, platform, fixture).await.status(),
            200
        );
    }
    let mut ids = Vec::new();
    for _ in 0..4 {
        ids.push(s.step_executed().await);
    }
    let sent = s.platforms.sent();
    assert_eq!(sent.len(), 4);

    let dm = &sent[0];
    assert_eq!(dm.path, "/api/chat.postMessage");
    assert_eq!(dm.authorization.as_deref(), Some("Bearer slack-outbound-token"));
    assert_eq!(dm.body["channel"], "D0DM00001");
    assert_eq!(
        dm.body["thread_ts"], "1718000000.000100",
        "a top-level message starts a thread under itself"
    );
    assert_eq!(
        dm.body["metadata"]["event_payload"]["part_key"],
        format!("{}:0", ids[0])
    );

    let in_thread = &sent[1];
    assert_eq!(
        in_thread.body["thread_ts"], "1718000100.000200",
        "a reply in a thread goes to its parent"
    );

    let telegram = &sent[2];
    assert_eq!(telegram.path, "/bottelegram-outbound-token/sendMessage");
    assert_eq!(telegram.body["message_thread_id"], 42);
    assert!(telegram.body["chat_id"].is_i64());
    assert!(telegram.body["reply_parameters"]["message_id"].is_i64());
    assert_eq!(
        telegram.body["reply_parameters"]["allow_sending_without_reply"],
        true
    );
    assert_eq!(
        telegram.body["parse_mode"], "HTML",
        "connectors format Markdown by default (tests/it/formatting.rs)"
    );

    let whatsapp = &sent[3];
    assert_eq!(whatsapp.path, "/v25.0/106540352242922/messages");
    assert_eq!(
        whatsapp.authorization.as_deref(),
        Some("Bearer whatsapp-outbound-token")
    );
    assert_eq!(whatsapp.body["to"], "+16505551234");
    assert!(whatsapp.body["context"]["message_id"]
        .as_str()
        .unwrap()
        .starts_with("wamid."));
    assert_eq!(whatsapp.body["biz_opaque_callback_data"], format!("{}:0", ids[3]));

    for id in ids {
        assert!(s.delivered(id).await);
    }
    assert_eq!(counts(&s).await.1, 0, "every job finished");
}

#[tokio::test]
async fn slack_text_is_escaped_and_no_mention_is_ever_added() {
    let s = setup().await;
    s.agent.script([Reply::Json(
        200,
        json!({"content": "a < b & <@U0USER1> <!channel>"}),
        None,
    )]);
    s.deliver(Platform::Slack, slack_text("1718000700.000100", "hi"))
        .await;
    s.step_executed().await;
    assert_eq!(
        s.platforms.sent()[0].body["text"],
        "a &lt; b &amp; &lt;@U0USER1&gt; &lt;!channel&gt;"
    );
}

#[tokio::test]
async fn a_10000_character_answer_is_split_into_chunks_within_each_platform_limit() {
    let s = setup().await;
    let sentence = "Every reply must fit the platform. ";
    let long: String = sentence.repeat(300).chars().take(10_000).collect();
    for (i, platform) in Platform::ALL.into_iter().enumerate() {
        s.agent
            .script([Reply::Json(200, json!({ "content": long }), None)]);
        let body = match platform {
            Platform::Slack => slack_text("1718000800.000100", "long please"),
            Platform::Telegram => telegram_text(11_000, "long please"),
            Platform::Whatsapp => fixture(Platform::Whatsapp, "text"),
        };
        s.deliver(platform, body).await;
        let id = s.step_executed().await;
        let sent = s.platforms.sent_to(platform);
        let limit = if platform == Platform::Slack { 4000 } else { 4096 };
        let texts: Vec<&str> = sent.iter().map(|m| m.text()).collect();
        assert_eq!(texts.len(), 3, "{platform}: 10,000 characters in 3 chunks");
        assert!(
            texts.iter().all(|t| t.encode_utf16().count() <= limit),
            "{platform}"
        );
        let (_, cut) = texts.split_last().unwrap();
        assert!(
            cut.iter().all(|t| t.ends_with('.')),
            "{platform}: cut at sentence ends"
        );
        assert_eq!(texts.join(" "), long.trim(), "{platform}: nothing lost");
        let parts = s.parts(id).await;
        assert_eq!(
            statuses(&parts),
            ["sent", "sent", "sent"],
            "{platform}: one row per chunk (case {i})"
        );
    }
}

#[tokio::test]
async fn rate_limits_are_honoured_then_the_part_is_sent() {
    let s = setup().await;
    s.platforms.script(
        Platform::Slack,
        [Answer::Status(
            429,
            json!({"ok": false, "error": "ratelimited"}),
            Some(20),
        )],
    );
    s.platforms.script(
        Platform::Telegram,
        [Answer::Status(
            429,
            json!({"ok": false, "error_code": 429, "description": "Too Many Requests: retry after 15", "parameters": {"retry_after": 15}}),
            None,
        )],
    );
    s.platforms.script(
        Platform::Whatsapp,
        [Answer::Status(
            400,
            json!({"error": {"message": "pair rate limit", "code": 131056}}),
            None,
        )],
    );
    for platform in Platform::ALL {
        let body = match platform {
            Platform::Slack => slack_text("1718000900.000100", "x"),
            Platform::Telegram => telegram_text(12_000, "x"),
            Platform::Whatsapp => fixture(Platform::Whatsapp, "text"),
        };
        s.deliver(platform, body).await;
        let id = s.step_executed().await;
        assert_eq!(
            statuses(&s.parts(id).await),
            ["pending"],
            "{platform}: not posted, back to pending"
        );
        let mut owner = s.app.db.owner_conn().await;
        let wait: f64 = sqlx::query_scalar(
            "select extract(epoch from available_at - now())::float8 from dispatch_queue where message_id = $1",
        )
        .bind(id)
        .fetch_one(&mut owner)
        .await
        .unwrap();
        let expected = match platform {
            Platform::Slack => 20.0,
            Platform::Telegram => 15.0,
            Platform::Whatsapp => 6.0,
        };
        assert!(
            (expected - 2.0..=expected + 1.0).contains(&wait),
            "{platform}: waits {expected}s, got {wait}"
        );
        assert_eq!(
            s.worker.step().await.unwrap(),
            StepOutcome::Empty,
            "{platform}: not before the delay"
        );
        s.time_passes().await;
        assert_eq!(
            s.worker.step().await.unwrap(),
            StepOutcome::Delivered(id),
            "{platform}"
        );
        assert_eq!(
            s.platforms.sent_to(platform).len(),
            2,
            "{platform}: one refused, one posted"
        );
    }
}

/// Runs a step in a task and kills it once the platform received `sends` requests.
async fn kill_worker_after_sends(s: &Pipeline, sends: usize) {
    let worker = s.worker.clone();
    let task = tokio::spawn(async move { worker.step().await });
    s.platforms.wait_for_sends(sends).await;
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());
}

#[tokio::test]
async fn a_crash_between_parts_resumes_with_the_missing_parts_only() {
    let s = setup().await;
    s.agent.script([Reply::Json(
        200,
        json!({"messages": [{"content": "p0"}, {"content": "p1"}, {"content": "p2"}]}),
        None,
    )]);
    s.platforms
        .script(Platform::Slack, [Answer::Ok, Answer::HangBeforePosting]);
    s.deliver(Platform::Slack, slack_text("1718001000.000100", "three parts"))
        .await;
    kill_worker_after_sends(&s, 2).await;

    let (_, queued) = counts(&s).await;
    assert_eq!(queued, 1, "the job survives the crash");
    s.time_passes().await;
    let outcome = s.worker.step().await.unwrap();
    let StepOutcome::Delivered(id) = outcome else {
        panic!("{outcome:?}")
    };

    let texts: Vec<String> = s.platforms.sent().iter().map(|m| m.text().to_owned()).collect();
    assert_eq!(
        texts,
        ["p0", "p1", "p1", "p2"],
        "p1 was looked for, not found, and sent again"
    );
    let keys = s.platforms.slack_thread_keys();
    assert_eq!(
        keys,
        [format!("{id}:0"), format!("{id}:1"), format!("{id}:2")],
        "each part is in the thread once"
    );
    assert!(s.delivered(id).await);
}

#[tokio::test]
async fn an_ambiguous_slack_send_found_in_the_thread_is_not_posted_again() {
    let s = setup().await;
    s.agent.script([Reply::Json(
        200,
        json!({"messages": [{"content": "first"}, {"content": "second"}]}),
        None,
    )]);
    s.platforms.script(Platform::Slack, [Answer::HangAfterPosting]);
    s.deliver(Platform::Slack, slack_text("1718001100.000100", "two parts"))
        .await;
    kill_worker_after_sends(&s, 1).await;

    s.time_passes().await;
    let outcome = s.worker.step().await.unwrap();
    let StepOutcome::Delivered(id) = outcome else {
        panic!("{outcome:?}")
    };
    let texts: Vec<String> = s.platforms.sent().iter().map(|m| m.text().to_owned()).collect();
    assert_eq!(
        texts,
        ["first", "second"],
        "the first part was found in the thread, not resent"
    );
    let parts = s.parts(id).await;
    assert_eq!(statuses(&parts), ["sent", "sent"]);
    assert_eq!(
        parts[0].platform_message_id,
        s.platforms.slack_ts_of(&format!("{id}:0")),
        "recorded with the ts Slack gave it"
    );
}

#[tokio::test]
async fn telegram_interrupted_sends_follow_the_connectors_delivery_choice() {
    let s = setup().await;
    s.platforms
        .script(Platform::Telegram, [Answer::HangBeforePosting]);
    s.deliver(Platform::Telegram, telegram_text(13_001, "at most once"))
        .await;
    kill_worker_after_sends(&s, 1).await;
    s.time_passes().await;
    let outcome = s.worker.step().await.unwrap();
    let StepOutcome::Failed(id) = outcome else {
        panic!("{outcome:?}")
    };
    let parts = s.parts(id).await;
    assert_eq!(statuses(&parts), ["unknown"], "in doubt, not failed");
    assert!(parts[0].last_error.as_deref().unwrap().contains("at-most-once"));
    assert_eq!(s.platforms.sent().len(), 1, "never resent");

    s.owner_exec(
        "update channel_connectors set telegram_delivery = 'at_least_once' where platform = 'telegram'",
    )
    .await;
    s.platforms
        .script(Platform::Telegram, [Answer::HangBeforePosting]);
    s.deliver(Platform::Telegram, telegram_text(13_002, "at least once"))
        .await;
    kill_worker_after_sends(&s, 2).await;
    s.time_passes().await;
    let outcome = s.worker.step().await.unwrap();
    assert!(matches!(outcome, StepOutcome::Delivered(_)), "{outcome:?}");
    assert_eq!(s.platforms.sent().len(), 3, "resent once");
}

#[tokio::test]
async fn telegram_at_most_once_loses_only_the_part_in_doubt_and_posts_the_later_ones_once() {
    let s = setup().await;
    s.agent.script([Reply::Json(
        200,
        json!({"messages": [
            {"role": "assistant", "content": "one"},
            {"role": "assistant", "content": "two"},
            {"role": "assistant", "content": "three"}]}),
        None,
    )]);
    s.platforms
        .script(Platform::Telegram, [Answer::Ok, Answer::HangBeforePosting]);
    s.deliver(Platform::Telegram, telegram_text(13_101, "three parts"))
        .await;
    // The worker dies while the second part's request is out.
    kill_worker_after_sends(&s, 2).await;
    s.time_passes().await;

    let outcome = s.worker.step().await.unwrap();
    let StepOutcome::Failed(id) = outcome else {
        panic!("{outcome:?}")
    };
    let parts = s.parts(id).await;
    assert_eq!(statuses(&parts), ["sent", "unknown", "sent"]);
    let texts: Vec<String> = s.platforms.sent().iter().map(|p| p.text().to_owned()).collect();
    assert_eq!(
        texts,
        ["one", "two", "three"],
        "the in-doubt part is not resent, the last one is sent once"
    );
    assert_eq!(counts(&s).await.1, 0, "the job is finished");
    let mut owner = s.app.db.owner_conn().await;
    let delivered: bool =
        sqlx::query_scalar("select delivered_at is not null from channel_messages where id = $1")
            .bind(id)
            .fetch_one(&mut owner)
            .await
            .unwrap();
    assert!(
        !delivered,
        "a turn with a part in doubt does not count as delivered"
    );
}

#[tokio::test]
async fn a_permanent_error_fails_the_part_and_the_rest_and_releases_the_conversation() {
    let s = setup().await;
    s.agent.script([Reply::Json(
        200,
        json!({"messages": [{"content": "a"}, {"content": "b"}]}),
        None,
    )]);
    s.platforms.script(
        Platform::Slack,
        [Answer::Status(
            200,
            json!({"ok": false, "error": "channel_not_found"}),
            None,
        )],
    );
    s.deliver(Platform::Slack, slack_text("1718001200.000100", "doomed"))
        .await;
    s.deliver(Platform::Slack, slack_text("1718001201.000100", "next"))
        .await;

    let first = s.step_executed().await;
    let parts = s.parts(first).await;
    assert_eq!(statuses(&parts), ["failed", "failed"]);
    assert_eq!(parts[0].last_error.as_deref(), Some("slack: channel_not_found"));
    assert_eq!(
        parts[1].last_error.as_deref(),
        Some("not sent: an earlier part failed")
    );
    assert!(!s.delivered(first).await);

    let second = s.step_executed().await;
    assert!(s.delivered(second).await, "the conversation moved on");
}

#[tokio::test]
async fn our_own_reply_echoed_back_creates_no_dispatch() {
    let s = setup().await;
    s.deliver(Platform::Slack, slack_text("1718001300.000100", "echo test"))
        .await;
    s.step_executed().await;
    let posted = s.platforms.sent()[0].clone();

    // What Slack sends us about our own post: a message with our bot_id and bot user.
    let mut echo: Value = serde_json::from_slice(&fixture(Platform::Slack, "bot_echo")).unwrap();
    echo["event"]["text"] = posted.body["text"].clone();
    echo["event"]["ts"] = "1800000000.000001".into();
    echo["event"]["thread_ts"] = posted.body["thread_ts"].clone();
    echo["event_id"] = "EvECHO".into();
    s.deliver(Platform::Slack, serde_json::to_vec(&echo).unwrap())
        .await;

    assert_eq!(counts(&s).await, (1, 0), "no new message, no new job");
    assert_eq!(s.worker.step().await.unwrap(), StepOutcome::Empty);
    assert_eq!(s.agent.calls().len(), 1);
}

fn whatsapp_status(wamid: &str, status: &str, part_key: Option<&str>) -> Vec<u8> {
    let mut entry = json!({
        "id": wamid, "status": status, "timestamp": "1749416400", "recipient_id": WHATSAPP_USER,
        "conversation": {"id": "CONV1", "origin": {"type": "service"}},
        "pricing": {"billable": true, "pricing_model": "PMP", "category": "service"}
    });
    if let Some(key) = part_key {
        entry["biz_opaque_callback_data"] = key.into();
    }
    serde_json::to_vec(&json!({
        "object": "whatsapp_business_account",
        "entry": [{"id": "102290129340398", "changes": [{"field": "messages", "value": {
            "messaging_product": "whatsapp",
            "metadata": {"display_phone_number": "15550783881", "phone_number_id": "106540352242922"},
            "statuses": [entry]
        }}]}]
    }))
    .unwrap()
}

#[tokio::test]
async fn whatsapp_status_callbacks_update_the_part_and_are_never_dispatched() {
    let s = setup().await;
    assert_eq!(
        post_fixture(&s.app, &s.tenant, Platform::Whatsapp, "text")
            .await
            .status(),
        200
    );
    let id = s.step_executed().await;
    assert_eq!(
        s.parts(id).await[0].platform_message_id.as_deref(),
        Some("wamid.OUT1")
    );

    s.deliver(
        Platform::Whatsapp,
        whatsapp_status("wamid.OUT1", "delivered", None),
    )
    .await;
    assert_eq!(s.parts(id).await[0].delivery_status.as_deref(), Some("delivered"));
    s.deliver(
        Platform::Whatsapp,
        whatsapp_status("wamid.OUT1", "read", Some(&format!("{id}:0"))),
    )
    .await;
    let part = &s.parts(id).await[0];
    assert_eq!(
        (part.status.as_str(), part.delivery_status.as_deref()),
        ("sent", Some("read"))
    );
    assert_eq!(counts(&s).await, (1, 0), "statuses are never dispatched");
}

#[tokio::test]
async fn a_failed_status_for_a_part_meta_accepted_makes_the_turn_delivery_failed_and_resendable() {
    let s = setup().await;
    s.deliver(Platform::Whatsapp, fixture(Platform::Whatsapp, "text"))
        .await;
    let id = s.step_executed().await;
    assert_eq!(statuses(&s.parts(id).await), ["sent"]);

    let mut failed: Value = serde_json::from_slice(&whatsapp_status("wamid.OUT1", "failed", None)).unwrap();
    failed["entry"][0]["changes"][0]["value"]["statuses"][0]["errors"] = json!([{
        "code": 131047, "title": "Re-engagement message",
        "message": "Re-engagement message", "error_data": {"details": "More than 24 hours have passed"}
    }]);
    s.deliver(Platform::Whatsapp, serde_json::to_vec(&failed).unwrap())
        .await;

    let part = &s.parts(id).await[0];
    assert_eq!(
        (part.status.as_str(), part.delivery_status.as_deref()),
        ("failed", Some("failed"))
    );
    let (status, message) = s
        .admin(reqwest::Method::GET, &format!("/v1/admin/messages/{id}"), None)
        .await;
    assert_eq!(status, 200);
    assert_eq!(message["status"], "delivery_failed", "{message}");
    assert!(
        message["last_error"].as_str().unwrap().contains("131047"),
        "{message}"
    );
    let (status, queued) = s
        .admin(
            reqwest::Method::POST,
            &format!("/v1/admin/messages/{id}/resend"),
            None,
        )
        .await;
    assert_eq!((status, &queued["queued"]), (200, &json!(1)), "{queued}");
}

#[tokio::test]
async fn an_interrupted_whatsapp_send_is_settled_by_its_status_callback_without_a_resend() {
    let s = setup().await;
    s.platforms.script(Platform::Whatsapp, [Answer::HangAfterPosting]);
    assert_eq!(
        post_fixture(&s.app, &s.tenant, Platform::Whatsapp, "text")
            .await
            .status(),
        200
    );
    kill_worker_after_sends(&s, 1).await;
    s.time_passes().await;
    let outcome = s.worker.step().await.unwrap();
    let StepOutcome::Retrying(id) = outcome else {
        panic!("waits for the callback, got {outcome:?}")
    };
    assert_eq!(statuses(&s.parts(id).await), ["sending"]);

    // Meta reports our message, echoing the part key we sent.
    s.deliver(
        Platform::Whatsapp,
        whatsapp_status("wamid.LATE", "sent", Some(&format!("{id}:0"))),
    )
    .await;
    assert_eq!(
        s.worker.step().await.unwrap(),
        StepOutcome::Delivered(id),
        "the callback woke the job"
    );
    let part = &s.parts(id).await[0];
    assert_eq!(
        (part.status.as_str(), part.platform_message_id.as_deref()),
        ("sent", Some("wamid.LATE"))
    );
    assert_eq!(s.platforms.sent().len(), 1, "never resent");
}

#[tokio::test]
async fn an_unlinked_sender_gets_the_connectors_notice_at_most_once_a_day() {
    let s = setup().await;
    s.owner_exec("delete from channel_links where platform = 'telegram'")
        .await;
    s.owner_exec("update channel_connectors set unlinked_notice = 'Please link your account first.' where platform = 'telegram'").await;
    s.deliver(Platform::Telegram, telegram_text(14_001, "hello?"))
        .await;
    s.deliver(Platform::Telegram, telegram_text(14_002, "anyone?"))
        .await;

    let outcome = s.worker.step().await.unwrap();
    assert!(matches!(outcome, StepOutcome::Delivered(_)), "{outcome:?}");
    assert_eq!(s.worker.step().await.unwrap(), StepOutcome::Empty);
    let sent = s.platforms.sent();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].text(), "Please link your account first.");
    assert!(s.agent.calls().is_empty(), "denied turns never reach the agent");
}

/// A two-part answer to a Slack turn whose second part Slack refuses; the turn.
async fn second_part_refused(s: &Pipeline) -> MessageId {
    s.agent.script([Reply::Json(
        200,
        json!({"messages": [{"content": "part one"}, {"content": "part two"}]}),
        None,
    )]);
    s.platforms.script(
        Platform::Slack,
        [
            Answer::Ok,
            Answer::Status(200, json!({"ok": false, "error": "channel_not_found"}), None),
        ],
    );
    s.deliver(
        Platform::Slack,
        slack_text("1718001400.000100", "two parts please"),
    )
    .await;
    let id = s.step_executed().await;
    assert_eq!(statuses(&s.parts(id).await), ["sent", "failed"]);
    id
}

#[tokio::test]
async fn a_reply_slack_refuses_is_delivery_failed_in_the_admin_api_and_its_answer_stays_in_history() {
    let s = setup().await;
    let id = second_part_refused(&s).await;

    // Visible: its own status, the part's error, and a filter that finds it.
    let (status, page) = s
        .admin(
            reqwest::Method::GET,
            "/v1/admin/messages?status=delivery_failed",
            None,
        )
        .await;
    assert_eq!(status, 200);
    let items = page["items"].as_array().unwrap();
    assert_eq!(items.len(), 1);
    assert_eq!(items[0]["id"], id.to_string());
    assert_eq!(items[0]["status"], "delivery_failed");
    assert_eq!(items[0]["last_error"], "slack: channel_not_found");
    assert!(items[0]["delivered_at"].is_null());
    let (_, executed_page) = s
        .admin(reqwest::Method::GET, "/v1/admin/messages?status=executed", None)
        .await;
    assert!(executed_page["items"].as_array().unwrap().is_empty());
    // The agent did answer: its history keeps the turn with the answer.
    let (_, history) = s
        .admin(reqwest::Method::GET, "/v1/admin/users/alice/history", None)
        .await;
    assert_eq!(
        history["messages"],
        json!([{"role": "user", "content": "two parts please"},
               {"role": "assistant", "content": "part one\n\npart two"}])
    );
}

#[tokio::test]
async fn a_reply_slack_refuses_is_delivery_failed_and_a_resend_posts_only_the_missing_part_once() {
    let s = setup().await;
    let id = second_part_refused(&s).await;

    // The channel is back (the fake platform answers ok again): resend, four times at once
    // (one click and its impatient repeats, one bulk call): the turn is queued once.
    let resend = format!("/v1/admin/messages/{id}/resend");
    let bulk = json!({"connector_id": s.tenant.slack, "status": "delivery_failed"});
    let calls = futures::future::join_all([
        s.admin(reqwest::Method::POST, &resend, None),
        s.admin(reqwest::Method::POST, &resend, None),
        s.admin(reqwest::Method::POST, &resend, None),
        s.admin(reqwest::Method::POST, "/v1/admin/messages/resend", Some(bulk)),
    ])
    .await;
    let mut answers: Vec<Value> = calls
        .into_iter()
        .map(|(status, queued)| {
            assert_eq!(status, 200, "{queued}");
            queued
        })
        .collect();
    answers.sort_by_key(|queued| queued["queued"].as_u64());
    let nothing = json!({"queued": 0, "ids": [], "more": false});
    assert_eq!(
        answers,
        [
            nothing.clone(),
            nothing.clone(),
            nothing,
            json!({"queued": 1, "ids": [id.to_string()], "more": false})
        ]
    );
    let message = admin_message(&s, id).await;
    assert_eq!(
        (message["status"].as_str(), &message["last_error"]),
        (Some("executed"), &Value::Null)
    );
    assert_eq!(statuses(&s.parts(id).await), ["sent", "pending"]);
    let (status, again) = s.admin(reqwest::Method::POST, &resend, None).await;
    assert_eq!(
        (status, again),
        (200, json!({"queued": 0, "ids": [], "more": false})),
        "already queued: nothing is queued twice"
    );

    assert_eq!(s.worker.step().await.unwrap(), StepOutcome::Delivered(id));
    let texts: Vec<String> = s.platforms.sent().iter().map(|m| m.text().to_owned()).collect();
    assert_eq!(
        texts,
        ["part one", "part two", "part two"],
        "the refused part is posted once more, the sent one never again"
    );
    assert_eq!(
        s.platforms.slack_thread_keys(),
        [format!("{id}:0"), format!("{id}:1")],
        "each part is in the thread once"
    );
    assert_eq!(statuses(&s.parts(id).await), ["sent", "sent"]);
    let message = admin_message(&s, id).await;
    assert_eq!(message["status"], "executed");
    assert!(message["delivered_at"].is_string());

    let (status, after) = s.admin(reqwest::Method::POST, &resend, None).await;
    assert_eq!(
        (status, after),
        (200, json!({"queued": 0, "ids": [], "more": false})),
        "delivered: nothing to resend"
    );
    assert_eq!(s.worker.step().await.unwrap(), StepOutcome::Empty);
    assert_eq!(s.platforms.sent().len(), 3);
}

#[tokio::test]
async fn a_telegram_part_in_doubt_shows_on_the_turn_and_is_resent_only_when_asked() {
    let s = setup().await;
    s.agent.script([Reply::Json(
        200,
        json!({"messages": [{"content": "one"}, {"content": "two"}]}),
        None,
    )]);
    s.platforms
        .script(Platform::Telegram, [Answer::HangBeforePosting]);
    s.deliver(Platform::Telegram, telegram_text(13_201, "two parts"))
        .await;
    kill_worker_after_sends(&s, 1).await;
    s.time_passes().await;
    let outcome = s.worker.step().await.unwrap();
    let StepOutcome::Failed(id) = outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(statuses(&s.parts(id).await), ["unknown", "sent"]);

    // Not delivered and saying why, but not delivery_failed: a resend may double it.
    let message = admin_message(&s, id).await;
    assert_eq!(message["status"], "executed");
    assert!(message["delivered_at"].is_null());
    assert!(
        message["last_error"]
            .as_str()
            .unwrap()
            .contains("outcome unknown"),
        "{message}"
    );
    let resend = format!("/v1/admin/messages/{id}/resend");
    let nothing = json!({"queued": 0, "ids": [], "more": false});
    let (status, queued) = s.admin(reqwest::Method::POST, &resend, None).await;
    assert_eq!((status, queued), (200, nothing.clone()));
    let (status, queued) = s
        .admin(
            reqwest::Method::POST,
            "/v1/admin/messages/resend",
            Some(json!({})),
        )
        .await;
    assert_eq!(
        (status, queued),
        (200, nothing),
        "a bulk resend leaves parts in doubt alone"
    );
    assert_eq!(s.worker.step().await.unwrap(), StepOutcome::Empty);

    let (status, queued) = s
        .admin(
            reqwest::Method::POST,
            &format!("{resend}?include_unknown=true"),
            None,
        )
        .await;
    assert_eq!(
        (status, queued),
        (200, json!({"queued": 1, "ids": [id.to_string()], "more": false}))
    );
    assert_eq!(s.worker.step().await.unwrap(), StepOutcome::Delivered(id));
    let texts: Vec<String> = s.platforms.sent().iter().map(|m| m.text().to_owned()).collect();
    assert_eq!(
        texts,
        ["one", "two", "one"],
        "only the part in doubt is posted again"
    );
    assert_eq!(statuses(&s.parts(id).await), ["sent", "sent"]);
    assert!(s.delivered(id).await);

    let (status, error) = s
        .admin(
            reqwest::Method::POST,
            &format!("{resend}?include_unknwon=true"),
            None,
        )
        .await;
    assert_eq!((status, error["error"].as_str()), (422, Some("unprocessable")));
}
