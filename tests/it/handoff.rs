//! A person stepping in (docs/admin.md#human-handoff), through the admin API, against the
//! real pipeline: the fake agent, the fake platforms and the worker stepping by hand.

use channel_bridge::dispatch::StepOutcome;
use channel_bridge::domain::{MessageId, Platform};
use reqwest::Method;
use serde_json::{json, Value};

use crate::support::fake_agent::{Chunk, Reply};
use crate::support::platforms::*;
use crate::support::Pipeline;

/// The path of one conversation action (the fixtures' ids need no escaping).
fn path(conversation: &str, action: &str) -> String {
    format!("/v1/admin/conversations/{conversation}/{action}")
}

async fn message(s: &Pipeline, id: MessageId) -> Value {
    let (status, message) = s
        .admin(Method::GET, &format!("/v1/admin/messages/{id}"), None)
        .await;
    assert_eq!(status, 200, "{message}");
    message
}

/// A Telegram text from the fixture's human, recorded and stepped: the step's outcome.
async fn user_says(s: &Pipeline, text: &str) -> StepOutcome {
    let id = 300_000 + s.next_id();
    s.deliver(Platform::Telegram, telegram_text(id, text)).await;
    s.worker.step().await.unwrap()
}

fn held(outcome: StepOutcome) -> MessageId {
    match outcome {
        StepOutcome::Held(id) => id,
        other => panic!("expected a held turn, got {other:?}"),
    }
}

fn executed(outcome: StepOutcome) -> MessageId {
    match outcome {
        StepOutcome::Executed(id) | StepOutcome::Delivered(id) => id,
        other => panic!("expected an executed turn, got {other:?}"),
    }
}

async fn audit_actions(s: &Pipeline) -> Vec<(String, String)> {
    let (status, audit) = s.admin(Method::GET, "/v1/admin/audit", None).await;
    assert_eq!(status, 200, "{audit}");
    let entries = audit["items"].as_array().cloned().unwrap_or_default();
    entries
        .iter()
        .map(|e| {
            (
                e["actor"].as_str().unwrap().to_owned(),
                e["action"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[tokio::test]
async fn a_person_takes_over_answers_threaded_and_hands_back_with_the_answer_in_history() {
    let s = Pipeline::start().await;
    let first = executed(user_says(&s, "hello").await);
    let conversation = message(&s, first).await["conversation"]
        .as_str()
        .unwrap()
        .to_owned();

    let (status, hold) = s
        .admin(
            Method::POST,
            &path(&conversation, "take-over"),
            Some(json!({"reason": "VIP"})),
        )
        .await;
    assert_eq!(status, 200, "{hold}");
    assert_eq!(hold["taken"], true);
    assert_eq!(hold["held_by"], "ci", "the key's name");
    assert_eq!(hold["conversation"], conversation.as_str());

    let calls_before = s.agent.calls().len();
    let waiting = held(user_says(&s, "I want a human").await);
    assert_eq!(
        s.agent.calls().len(),
        calls_before,
        "a held turn is not dispatched"
    );
    let turn = message(&s, waiting).await;
    assert_eq!(
        (turn["status"].as_str(), turn["decision"].as_str()),
        (Some("held"), Some("held"))
    );

    let (status, list) = s.admin(Method::GET, "/v1/admin/conversations/held", None).await;
    assert_eq!(status, 200, "{list}");
    assert_eq!(list["conversations"][0]["conversation"], conversation.as_str());
    assert_eq!(
        list["conversations"][0]["waiting"], true,
        "the user waits for an answer"
    );
    assert_eq!(list["conversations"][0]["reason"], "VIP");

    let body = json!({"content": "Hi, this is **Dana**: on it.", "idempotency_key": "k1"});
    let (status, posted) = s
        .admin(Method::POST, &path(&conversation, "messages"), Some(body.clone()))
        .await;
    assert_eq!(status, 201, "{posted}");
    assert_eq!(posted["created"], true);
    assert_eq!(
        posted["reply_to"],
        waiting.to_string(),
        "threaded to the user's latest message"
    );
    let (status, again) = s
        .admin(Method::POST, &path(&conversation, "messages"), Some(body))
        .await;
    assert_eq!(
        (status, &again["message_id"]),
        (200, &posted["message_id"]),
        "{again}"
    );

    let sends_before = s.platforms.sent().len();
    let person_turn = s.worker.step().await.unwrap();
    assert!(
        matches!(person_turn, StepOutcome::Delivered(_) | StepOutcome::Executed(_)),
        "{person_turn:?}"
    );
    assert_eq!(
        s.worker.step().await.unwrap(),
        StepOutcome::Empty,
        "the repeat queued nothing"
    );
    let sent = s.platforms.sent();
    assert_eq!(sent.len(), sends_before + 1, "posted once");
    let post = &sent[sends_before];
    assert_eq!(post.path, "/bottelegram-outbound-token/sendMessage");
    assert_eq!(
        post.body["text"], "Hi, this is <b>Dana</b>: on it.",
        "rendered like an answer"
    );
    let waiting_row = message(&s, waiting).await;
    assert_eq!(
        post.body["reply_parameters"]["message_id"].to_string(),
        waiting_row["platform_message_id"].as_str().unwrap()
    );
    let id: MessageId = posted["message_id"].as_str().unwrap().parse().unwrap();
    let recorded = message(&s, id).await;
    assert_eq!(recorded["origin"], "person");
    assert_eq!(recorded["author"], "ci");
    assert_eq!(recorded["reply_parts"][0]["status"], "sent");
    assert!(s.delivered(id).await);

    let (status, list) = s.admin(Method::GET, "/v1/admin/conversations/held", None).await;
    assert_eq!(
        (status, &list["conversations"][0]["waiting"]),
        (200, &json!(false)),
        "answered"
    );

    let (status, back) = s
        .admin(Method::POST, &path(&conversation, "hand-back"), None)
        .await;
    assert_eq!(status, 200, "{back}");
    assert_eq!(
        (&back["released"], &back["dispatched"]),
        (&json!(true), &Value::Null)
    );
    let (_, again) = s
        .admin(Method::POST, &path(&conversation, "hand-back"), None)
        .await;
    assert_eq!(again["released"], false, "handing back twice changes nothing");

    executed(user_says(&s, "thanks").await);
    let call = s.agent.calls().pop().unwrap();
    let messages = call.raw["messages"].as_array().unwrap().clone();
    let n = messages.len();
    assert_eq!(messages[n - 1]["content"], "thanks");
    assert_eq!(
        messages[n - 2],
        json!({"role": "assistant", "content": "Hi, this is **Dana**: on it.",
               "metadata": {"from": "person", "author": "ci"}}),
        "the person's answer, marked as a person's"
    );
    assert_eq!(
        messages[n - 3],
        json!({"role": "user", "content": "I want a human"})
    );

    let actions = audit_actions(&s).await;
    for action in [
        "conversation.take_over",
        "conversation.message",
        "conversation.hand_back",
    ] {
        assert_eq!(
            actions.iter().filter(|(_, a)| a == action).count(),
            1,
            "{action}: {actions:?}"
        );
    }
}

#[tokio::test]
async fn handing_back_sends_the_unanswered_turn_to_the_agent() {
    let s = Pipeline::start().await;
    let first = executed(user_says(&s, "hello").await);
    let conversation = message(&s, first).await["conversation"]
        .as_str()
        .unwrap()
        .to_owned();
    let (status, _) = s
        .admin(Method::POST, &path(&conversation, "take-over"), None)
        .await;
    assert_eq!(status, 200);
    held(user_says(&s, "first while held").await);
    let last = held(user_says(&s, "anyone there?").await);

    let (status, back) = s
        .admin(Method::POST, &path(&conversation, "hand-back"), None)
        .await;
    assert_eq!(status, 200, "{back}");
    assert_eq!(back["dispatched"], last.to_string());
    assert_eq!(executed(s.worker.step().await.unwrap()), last);
    let call = s.agent.calls().pop().unwrap();
    assert_eq!(call.payload.content, "anyone there?");
    let contents: Vec<&str> = call.payload.messages.iter().map(|m| m.content.as_str()).collect();
    assert!(
        contents.ends_with(&["first while held", "anyone there?"]),
        "the earlier held turn is history: {contents:?}"
    );
    assert_eq!(message(&s, last).await["status"], "executed");
}

#[tokio::test]
async fn the_agent_asks_for_a_person_and_the_conversation_is_held() {
    let s = Pipeline::start().await;
    s.agent.script([Reply::Json(
        200,
        json!({"content": "Let me get a colleague.", "handoff": {"reason": "refund over the limit"}}),
        None,
    )]);
    let first = executed(user_says(&s, "refund 900 EUR").await);
    let sent = s.platforms.sent();
    assert_eq!(
        sent.last().unwrap().body["text"],
        "Let me get a colleague.",
        "its text is posted"
    );
    let conversation = message(&s, first).await["conversation"]
        .as_str()
        .unwrap()
        .to_owned();

    let (_, list) = s.admin(Method::GET, "/v1/admin/conversations/held", None).await;
    let hold = &list["conversations"][0];
    assert_eq!(hold["conversation"], conversation.as_str());
    assert_eq!(
        (&hold["by_agent"], &hold["held_by"]),
        (&json!(true), &json!("agent"))
    );
    assert_eq!(hold["reason"], "refund over the limit");
    assert!(audit_actions(&s)
        .await
        .contains(&("agent".to_owned(), "conversation.take_over".to_owned())));

    let calls = s.agent.calls().len();
    held(user_says(&s, "hello?").await);
    assert_eq!(s.agent.calls().len(), calls);
}

#[tokio::test]
async fn an_agent_answering_later_asks_for_a_person_in_done_and_the_conversation_is_held() {
    use crate::async_answers::{accepted_turn, post_event};
    let s = Pipeline::start().await;
    let secret = s.tenant.dispatch_secret.clone();
    let (id, events) = accepted_turn(&s, "refund 900 EUR").await;
    let refused = [
        json!({"type": "message", "content": "x", "handoff": true}),
        json!({"type": "done", "handoff": "yes"}),
        json!({"type": "done", "handoff": {"reason": "x", "urgent": true}}),
    ];
    for (n, event) in refused.into_iter().enumerate() {
        let (status, out) = post_event(&s.app, &events, &secret, &format!("bad-{n}"), event).await;
        assert_eq!(status, 422, "{out}");
    }
    let long = json!({"type": "done", "handoff": {"reason": "x".repeat(501)}});
    let (status, out) = post_event(&s.app, &events, &secret, "long", long).await;
    assert_eq!(status, 400, "a reason past 500 characters: {out}");

    let done = json!({"type": "done", "content": "Let me get a colleague.",
                      "handoff": {"reason": "refund over the limit"}});
    let (status, out) = post_event(&s.app, &events, &secret, "done", done).await;
    assert_eq!(status, 202, "{out}");
    executed(s.worker.step().await.unwrap());
    assert_eq!(
        s.platforms.sent().last().unwrap().body["text"],
        "Let me get a colleague.",
        "its text is posted"
    );
    let conversation = message(&s, id).await["conversation"].as_str().unwrap().to_owned();
    let (_, list) = s.admin(Method::GET, "/v1/admin/conversations/held", None).await;
    let hold = &list["conversations"][0];
    assert_eq!(hold["conversation"], conversation.as_str());
    assert_eq!(
        (&hold["by_agent"], &hold["held_by"], &hold["reason"]),
        (&json!(true), &json!("agent"), &json!("refund over the limit"))
    );
    assert!(audit_actions(&s)
        .await
        .contains(&("agent".to_owned(), "conversation.take_over".to_owned())));

    let calls = s.agent.calls().len();
    let next = held(user_says(&s, "hello?").await);
    assert_eq!(message(&s, next).await["status"], "held");
    assert_eq!(s.agent.calls().len(), calls, "not sent to the agent");
    let (_, list) = s.admin(Method::GET, "/v1/admin/conversations/held", None).await;
    assert_eq!(list["conversations"][0]["waiting"], true, "{list}");
}

#[tokio::test]
async fn a_streamed_answer_asks_for_a_person_in_its_final_event_and_the_conversation_is_held() {
    let s = Pipeline::start().await;
    let asks = |handoff: Value| {
        Reply::Stream(vec![
            Chunk::delta("Let me get "),
            Chunk::delta("a colleague."),
            Chunk::done(json!({ "handoff": handoff })),
        ])
    };
    // A `handoff` of another shape makes the answer unreadable: retried, as a JSON answer's.
    s.agent.script([
        asks(json!("yes")),
        asks(json!({"reason": "refund over the limit"})),
    ]);
    let retried = user_says(&s, "refund 900 EUR").await;
    assert!(matches!(retried, StepOutcome::Retrying(_)), "{retried:?}");
    let first = executed(s.worker.step().await.unwrap());
    assert_eq!(
        s.platforms.calls("sendMessage").last().unwrap().body["text"],
        "Let me get a colleague.",
        "the deltas are posted as the answer"
    );

    let conversation = message(&s, first).await["conversation"]
        .as_str()
        .unwrap()
        .to_owned();
    let (_, list) = s.admin(Method::GET, "/v1/admin/conversations/held", None).await;
    let hold = &list["conversations"][0];
    assert_eq!(hold["conversation"], conversation.as_str());
    assert_eq!(
        (&hold["by_agent"], &hold["held_by"], &hold["reason"]),
        (&json!(true), &json!("agent"), &json!("refund over the limit"))
    );
    assert!(audit_actions(&s)
        .await
        .contains(&("agent".to_owned(), "conversation.take_over".to_owned())));
    let calls = s.agent.calls().len();
    held(user_says(&s, "hello?").await);
    assert_eq!(s.agent.calls().len(), calls, "not sent to the agent");
}

#[tokio::test]
async fn handing_back_a_conversation_the_tenant_does_not_have_is_404() {
    let s = Pipeline::start().await;
    let first = executed(user_says(&s, "hello").await);
    let conversation = message(&s, first).await["conversation"]
        .as_str()
        .unwrap()
        .to_owned();
    let (status, _) = s
        .admin(Method::POST, &path(&conversation, "take-over"), None)
        .await;
    assert_eq!(status, 200);
    let other = provision_tenant_at(&s.app.pool, "globex", Some(&s.platforms.base_url)).await;
    let key = channel_bridge::admin::operator::issue(&s.app.pool, other.tenant, "intruder")
        .await
        .unwrap()
        .key;
    let intruder = s
        .app
        .client
        .post(s.app.url(&path(&conversation, "hand-back")))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    assert_eq!(intruder.status(), 404, "another tenant's conversation");
    let holds: i64 = s.owner_scalar("select count(*) from conversation_holds").await;
    assert_eq!(holds, 1, "still held");

    for unknown in ["user:nobody", "alice"] {
        let (status, body) = s.admin(Method::POST, &path(unknown, "hand-back"), None).await;
        assert_eq!(status, 404, "{unknown}: {body}");
    }
    let (status, back) = s
        .admin(Method::POST, &path(&conversation, "hand-back"), None)
        .await;
    assert_eq!((status, &back["released"]), (200, &json!(true)), "{back}");
    let (status, again) = s
        .admin(Method::POST, &path(&conversation, "hand-back"), None)
        .await;
    assert_eq!(
        (status, &again["released"]),
        (200, &json!(false)),
        "its own conversation, no longer held: {again}"
    );
}

#[tokio::test]
async fn another_tenants_key_cannot_take_over_or_write() {
    let s = Pipeline::start().await;
    let first = executed(user_says(&s, "hello").await);
    let conversation = message(&s, first).await["conversation"]
        .as_str()
        .unwrap()
        .to_owned();
    let other = provision_tenant_at(&s.app.pool, "globex", Some(&s.platforms.base_url)).await;
    let key = channel_bridge::admin::operator::issue(&s.app.pool, other.tenant, "intruder")
        .await
        .unwrap()
        .key;
    let send = |method: Method, p: String, body: Option<Value>| {
        let mut request = s.app.client.request(method, s.app.url(&p)).bearer_auth(&key);
        if let Some(body) = body {
            request = request.json(&body);
        }
        request.send()
    };
    let take = send(Method::POST, path(&conversation, "take-over"), None)
        .await
        .unwrap();
    assert_eq!(take.status(), 404);
    let write = send(
        Method::POST,
        path(&conversation, "messages"),
        Some(json!({"content": "hi"})),
    )
    .await
    .unwrap();
    assert_eq!(write.status(), 404);
    let list: Value = send(Method::GET, "/v1/admin/conversations/held".into(), None)
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(list["conversations"], json!([]));
    let holds: i64 = s.owner_scalar("select count(*) from conversation_holds").await;
    let turns: i64 = s
        .owner_scalar("select count(*) from channel_messages where origin = 'person'")
        .await;
    assert_eq!((holds, turns), (0, 0));
    executed(user_says(&s, "still the agent's").await);
}

#[tokio::test]
async fn two_people_answering_at_once_post_both_in_order_once_each() {
    let s = Pipeline::start().await;
    let first = executed(user_says(&s, "hello").await);
    let conversation = message(&s, first).await["conversation"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut keys = Vec::new();
    for name in ["dana", "eli"] {
        let issued = channel_bridge::admin::operator::issue(&s.app.pool, s.tenant.tenant, name)
            .await
            .unwrap();
        keys.push(issued.key);
    }
    let post = |key: &str, text: &str| {
        s.app
            .client
            .post(s.app.url(&path(&conversation, "messages")))
            .bearer_auth(key)
            .json(&json!({"content": text, "idempotency_key": text}))
            .send()
    };
    let (a, b) = tokio::join!(post(&keys[0], "from dana"), post(&keys[1], "from eli"));
    assert_eq!(
        (a.unwrap().status().as_u16(), b.unwrap().status().as_u16()),
        (201, 201)
    );
    let sends_before = s.platforms.sent().len();
    for _ in 0..2 {
        let outcome = s.worker.step().await.unwrap();
        assert!(
            matches!(outcome, StepOutcome::Delivered(_) | StepOutcome::Executed(_)),
            "{outcome:?}"
        );
    }
    assert_eq!(s.worker.step().await.unwrap(), StepOutcome::Empty);
    let posted: Vec<String> = s.platforms.sent()[sends_before..]
        .iter()
        .map(|sent| sent.body["text"].as_str().unwrap().to_owned())
        .collect();
    let (_, listing) = s.admin(Method::GET, "/v1/admin/messages?limit=10", None).await;
    let recorded: Vec<String> = listing["items"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .filter(|m| m["origin"] == "person")
        .map(|m| m["response_content"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(posted.len(), 2, "once each: {posted:?}");
    assert_eq!(
        posted, recorded,
        "the platform shows them in the order history has them"
    );
    let authors: i64 = s
        .owner_scalar("select count(distinct author) from channel_messages where origin = 'person'")
        .await;
    assert_eq!(authors, 2);
}

#[tokio::test]
async fn a_tenant_can_have_held_conversations_return_to_the_agent() {
    let s = Pipeline::start().await;
    let (status, tenant) = s
        .admin(
            Method::PATCH,
            "/v1/admin/tenant",
            Some(json!({"handoff_return_secs": 600})),
        )
        .await;
    assert_eq!(
        (status, &tenant["handoff_return_secs"]),
        (200, &json!(600)),
        "{tenant}"
    );
    let (status, _) = s
        .admin(
            Method::PATCH,
            "/v1/admin/tenant",
            Some(json!({"handoff_return_secs": 5})),
        )
        .await;
    assert_eq!(status, 422);

    let first = executed(user_says(&s, "hello").await);
    let conversation = message(&s, first).await["conversation"]
        .as_str()
        .unwrap()
        .to_owned();
    s.admin(Method::POST, &path(&conversation, "take-over"), None)
        .await;
    let waiting = held(user_says(&s, "hello?").await);

    let now = chrono::Utc::now();
    let early = channel_bridge::lifecycle::handoff::run_pass(&s.app.pool, now)
        .await
        .unwrap();
    assert_eq!(early, 0, "not yet");
    let later = now + chrono::Duration::seconds(601);
    let returned = channel_bridge::lifecycle::handoff::run_pass(&s.app.pool, later)
        .await
        .unwrap();
    assert_eq!(returned, 1);
    assert_eq!(executed(s.worker.step().await.unwrap()), waiting);
    assert!(audit_actions(&s)
        .await
        .contains(&("gateway".to_owned(), "conversation.hand_back".to_owned())));
}

#[tokio::test]
async fn conversation_ids_that_name_nothing_are_404() {
    let s = Pipeline::start().await;
    for conversation in ["user:nobody", "alice", "sender:not-a-uuid:1"] {
        let (status, body) = s
            .admin(Method::POST, &path(conversation, "take-over"), None)
            .await;
        assert_eq!(status, 404, "{conversation}: {body}");
    }
    let first = executed(user_says(&s, "hello").await);
    let conversation = message(&s, first).await["conversation"]
        .as_str()
        .unwrap()
        .to_owned();
    let (status, body) = s
        .admin(
            Method::POST,
            &path(&conversation, "messages"),
            Some(json!({"content": "  "})),
        )
        .await;
    assert_eq!(status, 422, "{body}");
}
