//! Choices the agent offers as buttons, and the taps that come back as turns exactly once
//! (docs/agent.md#offering-choices), against the real pipeline: the fake agent, the
//! platform stand-ins and the worker stepping by hand. Taps are shaped as each platform
//! sends them (Telegram `callback_query`, WhatsApp `interactive`, Slack `block_actions`).

use channel_bridge::dispatch::StepOutcome;
use channel_bridge::domain::{MessageId, Platform};
use reqwest::Method;
use serde_json::{json, Value};

use crate::async_answers::post_event;
use crate::support::fake_agent::Reply;
use crate::support::fake_platforms::Answer;
use crate::support::platforms::*;
use crate::support::Pipeline;

fn approval() -> Value {
    json!({
        "content": "Approve the refund?",
        "choices": [
            {"id": "approve", "label": "Approve", "style": "primary", "value": {"refund": 42}, "toast": "Approved"},
            {"id": "reject", "label": "Reject", "style": "danger"},
            {"label": "Policy", "url": "https://example.com/policy"}
        ]
    })
}

/// A user's Telegram text answered with `answer`: the turn and its last reply part's
/// platform id.
async fn offered(s: &Pipeline, answer: Value) -> (MessageId, String) {
    s.agent.script([Reply::Json(200, answer, None)]);
    let update = 500_000 + s.next_id();
    s.deliver(Platform::Telegram, telegram_text(update, "refund please"))
        .await;
    let id = s.step_executed().await;
    let parts = s.parts(id).await;
    let last = parts.last().expect("a reply part");
    (id, last.platform_message_id.clone().expect("posted"))
}

/// A `callback_query` from the fixture's human on message `on`, carrying `data`.
fn telegram_tap(update_id: i64, chat: i64, on: &str, data: &str) -> Vec<u8> {
    let mut update: Value = serde_json::from_slice(&fixture(Platform::Telegram, "callback_query")).unwrap();
    update["update_id"] = update_id.into();
    update["callback_query"]["id"] = format!("cb{update_id}").into();
    update["callback_query"]["message"]["message_id"] = on.parse::<i64>().unwrap().into();
    update["callback_query"]["message"]["chat"]["id"] = chat.into();
    update["callback_query"]["data"] = data.into();
    serde_json::to_vec(&update).unwrap()
}

const HUMAN: i64 = 408258968;

/// The `callback_data` of each button of the last Telegram send, in order (links: none).
fn callback_data(s: &Pipeline) -> Vec<Option<String>> {
    let sent = s.platforms.sent_to(Platform::Telegram);
    let keyboard = &sent.last().expect("a send").body["reply_markup"]["inline_keyboard"];
    keyboard
        .as_array()
        .expect("an inline keyboard")
        .iter()
        .flat_map(|row| row.as_array().unwrap().clone())
        .map(|button| button["callback_data"].as_str().map(str::to_owned))
        .collect()
}

async fn tap(s: &Pipeline, body: Vec<u8>) -> Value {
    let response = s.post_webhook(Platform::Telegram, body).await;
    assert_eq!(response.status(), 200);
    response.json().await.unwrap()
}

/// (status, decision) of every tap's turn, oldest first.
async fn tap_turns(s: &Pipeline) -> Vec<(String, Option<String>)> {
    let mut owner = s.app.db.owner_conn().await;
    sqlx::query_as(
        "select status, decision from channel_messages where action is not null order by received_at, id",
    )
    .fetch_all(&mut owner)
    .await
    .unwrap()
}

#[tokio::test]
async fn a_telegram_menu_is_tapped_once_answered_at_once_and_the_agent_gets_the_action() {
    let s = Pipeline::start().await;
    let (asked, on) = offered(&s, approval()).await;
    let sent = s.platforms.sent_to(Platform::Telegram);
    let keyboard = &sent.last().unwrap().body["reply_markup"]["inline_keyboard"];
    assert_eq!(keyboard[0][0]["text"], "Approve");
    assert_eq!(keyboard[0][0]["style"], "primary");
    assert_eq!(keyboard[0][2]["url"], "https://example.com/policy");
    let data = callback_data(&s);
    let approve = data[0].clone().unwrap();
    assert!(approve.len() <= 64, "callback_data fits Telegram's 64 bytes");
    assert!(
        !approve.contains("approve"),
        "the agent's id stays with us: {approve}"
    );
    let part = s.parts(asked).await.pop().unwrap();
    assert_eq!(part.choices.as_ref().unwrap().choices.items.len(), 3);

    s.agent
        .script([Reply::Json(200, json!({"content": "Refund approved."}), None)]);
    let answer = tap(&s, telegram_tap(600_001, HUMAN, &on, &approve)).await;
    assert_eq!(
        answer,
        json!({"method": "answerCallbackQuery", "callback_query_id": "cb600001", "text": "Approved"}),
        "the spinner stops with the webhook's own answer"
    );
    // First the question loses its keyboard, then the agent hears the tap.
    assert!(matches!(s.worker.step().await.unwrap(), StepOutcome::Delivered(id) if id == asked));
    let closed = s.platforms.calls("editMessageReplyMarkup");
    assert_eq!(closed.len(), 1);
    assert_eq!(closed[0].body["message_id"].to_string(), on);
    assert_eq!(closed[0].body["reply_markup"], json!({"inline_keyboard": []}));
    assert_eq!(s.agent.calls().len(), 1, "not yet dispatched");
    let tapped = s.step_executed().await;
    let call = s.agent.calls().pop().unwrap();
    assert_eq!(call.payload.content, "Approve", "the label as the user's words");
    let action = json!({"id": "approve", "label": "Approve", "value": {"refund": 42}, "message_id": asked});
    assert_eq!(call.raw["action"], action);
    assert_eq!(
        call.raw["messages"].as_array().unwrap().last().unwrap()["action"],
        action
    );
    let reply = s.platforms.sent_to(Platform::Telegram).pop().unwrap();
    assert_eq!(reply.text(), "Refund approved.");
    assert_eq!(
        reply.body["reply_parameters"]["message_id"].to_string(),
        on,
        "the answer replies to the question"
    );
    let (status, turn) = s
        .admin(Method::GET, &format!("/v1/admin/messages/{tapped}"), None)
        .await;
    assert_eq!(status, 200, "{turn}");
    assert_eq!(turn["action"]["id"], "approve");

    // The same update again (Telegram retried it), then a second tap on the closed choices.
    let again = tap(&s, telegram_tap(600_001, HUMAN, &on, &approve)).await;
    assert_eq!(again["method"], "answerCallbackQuery");
    let reject = data[1].clone().unwrap();
    let late = tap(&s, telegram_tap(600_002, HUMAN, &on, &reject)).await;
    assert_eq!(late["callback_query_id"], "cb600002");
    assert_eq!(late.get("text"), None);
    assert!(matches!(s.worker.step().await.unwrap(), StepOutcome::Empty));
    assert_eq!(s.agent.calls().len(), 2, "neither reached the agent");
    assert_eq!(
        tap_turns(&s).await,
        [
            ("executed".into(), Some("respond".into())),
            ("ignored".into(), Some("choice_already_made".into()))
        ]
    );
    let parts = s.parts(asked).await;
    let (question, edit) = (&parts[0], &parts[1]);
    assert_eq!(
        question.chosen.as_ref().map(|c| (c.index, c.by.clone())),
        Some((0, HUMAN.to_string()))
    );
    assert_eq!(
        (edit.edit_of, edit.content.as_str(), edit.status.as_str()),
        (Some(0), "✓ Approve", "sent")
    );
    assert_eq!(
        s.platforms.calls("editMessageReplyMarkup").len(),
        1,
        "closed once"
    );

    // In a later turn's history the tap is still a tap.
    s.agent
        .script([Reply::Json(200, json!({"content": "You're welcome."}), None)]);
    s.deliver(Platform::Telegram, telegram_text(600_010, "thanks"))
        .await;
    s.step_executed().await;
    let history = s.agent.calls().pop().unwrap().raw["messages"].clone();
    let entry = history
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["content"] == "Approve")
        .cloned();
    assert_eq!(entry.map(|m| m["action"].clone()), Some(action));
}

#[tokio::test]
async fn a_tap_before_the_question_is_recorded_as_posted_still_closes_it_once() {
    let s = Pipeline::start().await;
    // Telegram shows the question, and is slow to tell the gateway it did.
    let posted = std::sync::Arc::new(tokio::sync::Semaphore::new(0));
    s.platforms
        .script(Platform::Telegram, [Answer::OkWhenReleased(posted.clone())]);
    s.agent.script([
        Reply::Json(200, approval(), None),
        Reply::Json(200, json!({"content": "Refund approved."}), None),
    ]);
    s.deliver(Platform::Telegram, telegram_text(630_001, "refund please"))
        .await;
    let step = s.step();
    s.platforms.wait_for_sends(1).await;
    let approve = callback_data(&s)[0].clone().unwrap();
    let answer = tap(&s, telegram_tap(630_010, HUMAN, "1", &approve)).await;
    assert_eq!(answer["method"], "answerCallbackQuery");
    posted.add_permits(1);
    let asked = match step.await.unwrap() {
        StepOutcome::Executed(id) | StepOutcome::Delivered(id) => id,
        other => panic!("the question is answered: {other:?}"),
    };
    // The closing edit, then the tap's turn, each once.
    let mut outcomes = Vec::new();
    loop {
        match s.worker.step().await.unwrap() {
            StepOutcome::Empty => break,
            outcome => outcomes.push(outcome),
        }
    }
    let closed = s.platforms.calls("editMessageReplyMarkup");
    assert_eq!(closed.len(), 1, "{outcomes:?}");
    let question = s.parts(asked).await[0].platform_message_id.clone().unwrap();
    assert_eq!(closed[0].body["message_id"].to_string(), question);
    let parts = s.parts(asked).await;
    assert_eq!(
        parts.iter().map(|p| p.status.as_str()).collect::<Vec<_>>(),
        ["sent", "sent"]
    );
    assert_eq!(s.agent.calls().pop().unwrap().raw["action"]["id"], "approve");
    assert_eq!(tap_turns(&s).await, [("executed".into(), Some("respond".into()))]);
}

#[tokio::test]
async fn a_connector_that_keeps_answers_as_posted_closes_the_choice_without_an_edit() {
    let s = Pipeline::start().await;
    let path = format!("/v1/admin/connectors/{}", s.tenant.telegram);
    let (status, connector) = s
        .admin(Method::PATCH, &path, Some(json!({"edit_after_tap": false})))
        .await;
    assert_eq!((status, &connector["edit_after_tap"]), (200, &json!(false)));
    let (asked, on) = offered(&s, approval()).await;
    let data = callback_data(&s);
    s.agent
        .script([Reply::Json(200, json!({"content": "Refund approved."}), None)]);
    for (update, button) in [(610_001, &data[0]), (610_002, &data[1])] {
        tap(&s, telegram_tap(update, HUMAN, &on, button.as_deref().unwrap())).await;
    }
    // The tap's own dispatch comes first: no edit was queued before it.
    assert_ne!(s.step_executed().await, asked);
    assert!(matches!(s.worker.step().await.unwrap(), StepOutcome::Empty));
    assert!(s.platforms.calls("editMessageReplyMarkup").is_empty());
    let parts = s.parts(asked).await;
    assert_eq!(parts.len(), 1, "no edit part");
    assert_eq!(parts[0].chosen.as_ref().map(|c| c.index), Some(0));
    assert_eq!(
        tap_turns(&s).await,
        [
            ("executed".into(), Some("respond".into())),
            ("ignored".into(), Some("choice_already_made".into()))
        ]
    );
}

#[tokio::test]
async fn forged_taps_are_answered_and_dropped_never_dispatched() {
    let s = Pipeline::start().await;
    let (_, on) = offered(&s, approval()).await;
    let approve = callback_data(&s)[0].clone().unwrap();
    let other = provision_tenant_at(&s.app.pool, "other", Some(&s.platforms.base_url)).await;
    let forged = [
        telegram_tap(700_001, HUMAN, &on, "zzzzzzzzzz.0"),
        telegram_tap(700_002, HUMAN, &on, "approve"),
        telegram_tap(700_003, -100_555, &on, &approve),
        telegram_tap(700_004, HUMAN, &on, &format!("{}.9", &approve[..10])),
    ];
    for body in forged {
        let answer = tap(&s, body).await;
        assert_eq!(
            answer["method"], "answerCallbackQuery",
            "the spinner stops all the same"
        );
    }
    // The right token through another tenant's connector: not found under its RLS.
    let body = telegram_tap(700_005, HUMAN, &on, &approve);
    let response = post(
        &s.app,
        &other.hook_path(Platform::Telegram),
        &signed_headers(Platform::Telegram, &body),
        body,
    )
    .await;
    assert_eq!(response.status(), 200);
    assert!(matches!(s.worker.step().await.unwrap(), StepOutcome::Empty));
    assert_eq!(s.agent.calls().len(), 1);
    assert!(tap_turns(&s).await.is_empty(), "no turn recorded");
}

#[tokio::test]
async fn a_tap_while_a_person_holds_the_conversation_is_held() {
    let s = Pipeline::start().await;
    let (asked, on) = offered(&s, approval()).await;
    let approve = callback_data(&s)[0].clone().unwrap();
    let (_, turn) = s
        .admin(Method::GET, &format!("/v1/admin/messages/{asked}"), None)
        .await;
    let conversation = turn["conversation"].as_str().unwrap().to_owned();
    let path = format!("/v1/admin/conversations/{conversation}/take-over");
    let (status, _) = s.admin(Method::POST, &path, Some(json!({}))).await;
    assert_eq!(status, 200);
    tap(&s, telegram_tap(800_001, HUMAN, &on, &approve)).await;
    let closed = s.worker.step().await.unwrap();
    assert!(
        matches!(closed, StepOutcome::Delivered(_)),
        "the keyboard goes all the same: {closed:?}"
    );
    assert!(matches!(s.worker.step().await.unwrap(), StepOutcome::Held(_)));
    assert_eq!(s.agent.calls().len(), 1);
    assert_eq!(tap_turns(&s).await, [("held".into(), Some("held".into()))]);
}

#[tokio::test]
async fn choices_no_platform_could_show_fail_the_turn_with_the_reason() {
    let s = Pipeline::start().await;
    let many: Vec<Value> = (0..26)
        .map(|i| json!({"id": format!("o{i}"), "label": "Option"}))
        .collect();
    s.agent.script([Reply::Json(
        200,
        json!({"content": "Pick one", "choices": many}),
        None,
    )]);
    s.deliver(Platform::Telegram, telegram_text(900_001, "menu"))
        .await;
    let outcome = s.worker.step().await.unwrap();
    let StepOutcome::Failed(id) = outcome else {
        panic!("expected a failed turn, got {outcome:?}");
    };
    let (_, turn) = s
        .admin(Method::GET, &format!("/v1/admin/messages/{id}"), None)
        .await;
    assert_eq!(turn["status"], "dispatch_failed");
    let error = turn["last_error"].as_str().unwrap();
    assert!(error.contains("at most 25 choices"), "{error}");
    assert!(
        s.platforms.sent_to(Platform::Telegram).is_empty(),
        "nothing posted"
    );
}

fn menu(count: usize) -> Value {
    let choices: Vec<Value> = (0..count)
        .map(|i| json!({"id": format!("topic-{i}"), "label": format!("Topic {i}")}))
        .collect();
    json!({"content": "What is it about?", "choices": choices})
}

/// A WhatsApp `interactive` tap from the fixture's human on our message `on`.
fn whatsapp_tap(wamid: &str, on: &str, kind: &str, id: &str, title: &str) -> Vec<u8> {
    let mut update: Value = serde_json::from_slice(&fixture(Platform::Whatsapp, "text")).unwrap();
    let message = &mut update["entry"][0]["changes"][0]["value"]["messages"][0];
    *message = json!({
        "context": {"from": "15550783881", "id": on},
        "from": "16505551234",
        "id": wamid,
        "timestamp": "1749416400",
        "type": "interactive",
        "interactive": {"type": kind, kind: {"id": id, "title": title}},
    });
    serde_json::to_vec(&update).unwrap()
}

/// The last WhatsApp send's `interactive` object and our message id for it.
async fn whatsapp_offer(s: &Pipeline, asked: MessageId) -> (Value, String) {
    let sent = s.platforms.sent_to(Platform::Whatsapp).pop().unwrap();
    assert_eq!(sent.body["type"], "interactive", "{}", sent.body);
    let on = s.parts(asked).await.pop().unwrap().platform_message_id.unwrap();
    (sent.body["interactive"].clone(), on)
}

#[tokio::test]
async fn whatsapp_shows_three_buttons_or_a_list_and_each_tap_is_one_turn() {
    let s = Pipeline::start().await;
    s.agent
        .script([Reply::Json(200, menu(3), None), Reply::Json(200, menu(7), None)]);
    s.deliver(Platform::Whatsapp, fixture(Platform::Whatsapp, "text"))
        .await;
    let asked = s.step_executed().await;
    let (buttons, on) = whatsapp_offer(&s, asked).await;
    assert_eq!(buttons["type"], "button");
    assert_eq!(buttons["body"]["text"], "What is it about?");
    let button = &buttons["action"]["buttons"][1]["reply"];
    assert_eq!(button["title"], "Topic 1");

    let id = button["id"].as_str().unwrap();
    let body = whatsapp_tap("wamid.TAP1", &on, "button_reply", id, "Topic 1");
    s.deliver(Platform::Whatsapp, body.clone()).await;
    let tapped = s.step_executed().await;
    let call = s.agent.calls().pop().unwrap();
    assert_eq!(
        call.raw["action"],
        json!({"id": "topic-1", "label": "Topic 1", "message_id": asked})
    );
    s.deliver(Platform::Whatsapp, body).await;
    assert!(
        matches!(s.worker.step().await.unwrap(), StepOutcome::Empty),
        "a redelivered tap is one turn"
    );

    let (list, on) = whatsapp_offer(&s, tapped).await;
    assert_eq!(list["type"], "list");
    let rows = list["action"]["sections"][0]["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 7);
    let row = rows[5]["id"].as_str().unwrap();
    s.agent
        .script([Reply::Json(200, json!({"content": "Topic 5 it is."}), None)]);
    s.deliver(
        Platform::Whatsapp,
        whatsapp_tap("wamid.TAP2", &on, "list_reply", row, "Topic 5"),
    )
    .await;
    s.step_executed().await;
    assert_eq!(s.agent.calls().pop().unwrap().raw["action"]["id"], "topic-5");
    let reply = s.platforms.sent_to(Platform::Whatsapp).pop().unwrap();
    assert_eq!(
        reply.body["context"]["message_id"], "wamid.TAP2",
        "the answer quotes the tap"
    );
}

#[tokio::test]
async fn whatsapp_refuses_what_it_cannot_show_when_the_answer_arrives() {
    let s = Pipeline::start().await;
    let long = json!({"content": "Sure?", "choices": [{"id": "y", "label": "Yes, book the later slot"}]});
    s.agent
        .script([Reply::Json(200, menu(11), None), Reply::Json(200, long, None)]);
    for wamid in ["wamid.M1", "wamid.M2"] {
        let mut body: Value = serde_json::from_slice(&fixture(Platform::Whatsapp, "text")).unwrap();
        body["entry"][0]["changes"][0]["value"]["messages"][0]["id"] = wamid.into();
        s.deliver(Platform::Whatsapp, serde_json::to_vec(&body).unwrap())
            .await;
        let outcome = s.worker.step().await.unwrap();
        let StepOutcome::Failed(id) = outcome else {
            panic!("expected a failed turn, got {outcome:?}");
        };
        let (_, turn) = s
            .admin(Method::GET, &format!("/v1/admin/messages/{id}"), None)
            .await;
        let error = turn["last_error"].as_str().unwrap();
        assert!(error.contains("on whatsapp"), "{error}");
    }
    assert!(s.platforms.sent_to(Platform::Whatsapp).is_empty());
}

/// Slack's interactivity request for a click on `button` of our message `on` in the DM.
fn slack_click(on: &str, thread: &str, button: &str, action_ts: &str) -> Vec<u8> {
    let mut payload: Value = serde_json::from_slice(&fixture(Platform::Slack, "block_actions")).unwrap();
    payload["container"]["channel_id"] = "D0DM00001".into();
    payload["channel"]["id"] = "D0DM00001".into();
    payload["container"]["message_ts"] = on.into();
    payload["container"]["thread_ts"] = thread.into();
    payload["message"]["ts"] = on.into();
    payload["actions"][0]["action_id"] = button.into();
    payload["actions"][0]["value"] = button.into();
    payload["actions"][0]["action_ts"] = action_ts.into();
    let payload = serde_json::to_string(&payload).unwrap();
    serde_urlencoded::to_string([("payload", payload)])
        .unwrap()
        .into_bytes()
}

#[tokio::test]
async fn a_slack_approval_is_tapped_through_the_interactivity_url_and_answered_in_thread() {
    let s = Pipeline::start().await;
    s.agent.script([
        Reply::Json(200, approval(), None),
        Reply::Json(200, json!({"content": "Refund approved."}), None),
    ]);
    let asked_ts = "1718009000.000100";
    s.deliver(Platform::Slack, slack_text(asked_ts, "refund please"))
        .await;
    let asked = s.step_executed().await;
    let sent = s.platforms.sent_to(Platform::Slack).pop().unwrap();
    assert_eq!(
        sent.body["text"], "Approve the refund?",
        "the notification's fallback"
    );
    assert_eq!(sent.body["blocks"][0]["text"]["text"], "Approve the refund?");
    let buttons = &sent.body["blocks"][1]["elements"];
    assert_eq!(buttons[0]["style"], "primary");
    assert_eq!(buttons[2]["url"], "https://example.com/policy");
    let approve = buttons[0]["value"].as_str().unwrap().to_owned();
    let on = s.parts(asked).await.pop().unwrap().platform_message_id.unwrap();

    let path = format!("{}/interactivity", s.tenant.hook_path(Platform::Slack));
    let click = slack_click(&on, asked_ts, &approve, "1718009010.840180");
    let headers = signed_headers(Platform::Slack, &click);
    let response = post(&s.app, &path, &headers, click.clone()).await;
    assert_eq!(response.status(), 200);
    assert!(matches!(s.worker.step().await.unwrap(), StepOutcome::Delivered(id) if id == asked));
    let update = s
        .platforms
        .calls("chat.update")
        .pop()
        .expect("the question is updated");
    assert_eq!(update.body["ts"], on.as_str());
    assert_eq!(update.body["blocks"][0]["text"]["text"], "Approve the refund?");
    assert_eq!(
        update.body["blocks"][1]["elements"][0]["text"],
        "✓ Approve — chosen by <@U0USER1>"
    );
    assert_eq!(
        update.body["blocks"].as_array().unwrap().len(),
        2,
        "the buttons are gone"
    );
    s.step_executed().await;
    assert_eq!(s.agent.calls().pop().unwrap().raw["action"]["id"], "approve");
    let reply = s.platforms.sent_to(Platform::Slack).pop().unwrap();
    assert_eq!(reply.text(), "Refund approved.");
    assert_eq!(reply.body["thread_ts"], asked_ts, "in the question's thread");

    let replayed = post(&s.app, &path, &headers, click.clone()).await;
    assert_eq!(replayed.status(), 200);
    let forged = post(
        &s.app,
        &path,
        &[("x-slack-signature", "v0=00".into()), headers[1].clone()],
        click,
    )
    .await;
    assert_eq!(forged.status(), 401);
    assert!(matches!(s.worker.step().await.unwrap(), StepOutcome::Empty));
    assert_eq!(s.agent.calls().len(), 2);
}

/// The keyboard of the last Telegram send, as (label, callback_data) pairs.
fn keyboard(s: &Pipeline) -> Vec<(String, String)> {
    let sent = s.platforms.sent_to(Platform::Telegram).pop().expect("a send");
    let rows = sent.body["reply_markup"]["inline_keyboard"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    rows.iter()
        .flat_map(|row| row.as_array().unwrap().clone())
        .map(|b| {
            (
                b["text"].as_str().unwrap().to_owned(),
                b["callback_data"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[tokio::test]
async fn an_answer_given_later_a_message_written_first_and_a_persons_answer_offer_choices_too() {
    let s = Pipeline::start().await;
    let secret = s.tenant.dispatch_secret.clone();
    let (later, path) = crate::async_answers::accepted_turn(&s, "book a table").await;
    let times = json!([{"id": "19", "label": "19:00"}, {"id": "21", "label": "21:00"}]);
    let blank = json!({"type": "message", "content": "Which time?", "choices": [{"id": "a", "label": " "}]});
    let (status, out) = post_event(&s.app, &path, &secret, "e0", blank).await;
    assert_eq!(status, 422, "{out}");
    assert!(
        out["message"].as_str().unwrap().contains("`label` is empty"),
        "{out}"
    );
    let event = json!({"type": "message", "content": "Which time?", "choices": times});
    let (status, out) = post_event(&s.app, &path, &secret, "e1", event).await;
    assert_eq!(status, 202, "{out}");
    s.worker.step().await.unwrap();
    let offered = keyboard(&s);
    assert_eq!(offered[1].0, "21:00");
    let on = s.parts(later).await.pop().unwrap().platform_message_id.unwrap();
    s.agent
        .script([Reply::Json(200, json!({"content": "Booked for 21:00."}), None)]);
    tap(&s, telegram_tap(910_001, HUMAN, &on, &offered[1].1)).await;
    assert!(
        matches!(s.worker.step().await.unwrap(), StepOutcome::Delivered(_)),
        "the keyboard goes"
    );
    s.step_executed().await;
    let action = &s.agent.calls().pop().unwrap().raw["action"];
    assert_eq!(
        (action["id"].as_str(), action["message_id"].as_str()),
        (Some("21"), Some(later.to_string().as_str()))
    );

    let sent =
        json!({"user_id": "alice", "content": "Still coming?", "choices": [{"id": "yes", "label": "Yes"}]});
    let (status, out) = post_event(
        &s.app,
        &format!("/v1/agent/{}/messages", s.tenant.tenant),
        &secret,
        "p1",
        sent,
    )
    .await;
    assert_eq!(status, 202, "{out}");
    s.worker.step().await.unwrap();
    assert_eq!(keyboard(&s)[0].0, "Yes");

    let person = json!({"content": "Shall I cancel it?", "choices": [{"id": "cancel", "label": "Cancel it", "style": "danger"}]});
    let (status, out) = s
        .admin(
            Method::POST,
            "/v1/admin/conversations/user:alice/messages",
            Some(person),
        )
        .await;
    assert_eq!(status, 201, "{out}");
    s.worker.step().await.unwrap();
    assert_eq!(keyboard(&s)[0].0, "Cancel it");
}
