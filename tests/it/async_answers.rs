//! The agent answers later (docs/agent.md#answering-later): a dispatch answered 202, then
//! signed events posted to the turn's events URL, against the real gateway, the fake
//! platforms and the worker stepped by hand.

use channel_bridge::dispatch::StepOutcome;
use channel_bridge::domain::{MessageId, Platform};
use reqwest::Method;
use serde_json::{json, Value};

use crate::support::fake_agent::Reply;
use crate::support::fake_platforms::Answer;
use crate::support::platforms::*;
use crate::support::{Pipeline, TestApp};

/// A Telegram text from the fixture's human, recorded and stepped.
async fn user_says(s: &Pipeline, text: &str) -> StepOutcome {
    s.deliver(Platform::Telegram, telegram_text(600_000 + s.next_id(), text))
        .await;
    s.worker.step().await.unwrap()
}

/// The user's turn, answered 202 by the agent: its id and events path.
pub(crate) async fn accepted_turn(s: &Pipeline, text: &str) -> (MessageId, String) {
    s.agent
        .script([Reply::Json(202, json!({"status": "pending"}), None)]);
    let StepOutcome::Awaiting(id) = user_says(s, text).await else {
        panic!("the turn awaits the agent")
    };
    let call = s.agent.calls().pop().unwrap();
    let url = call.raw["reply"]["url"].as_str().unwrap().to_owned();
    let path = url[url.find("/v1/agent/").unwrap()..].to_owned();
    assert_eq!(path, format!("/v1/agent/{}/turns/{id}/events", s.tenant.tenant));
    assert!(call.raw["reply"]["expires_at"].is_string());
    (id, path)
}

/// POSTs `event` signed with `secret` (Standard Webhooks, `event_id` as `webhook-id`).
pub(crate) async fn post_event(
    app: &TestApp,
    path: &str,
    secret: &str,
    event_id: &str,
    event: Value,
) -> (u16, Value) {
    let body = serde_json::to_vec(&event).unwrap();
    let now = chrono::Utc::now().timestamp();
    let signature = channel_bridge::signature::sign(secret, event_id, now, &body).unwrap();
    let response = app
        .client
        .post(app.url(path))
        .header("content-type", "application/json")
        .header("webhook-id", event_id)
        .header("webhook-timestamp", now.to_string())
        .header("webhook-signature", signature)
        .body(body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

async fn turn(s: &Pipeline, id: MessageId) -> Value {
    let (status, message) = s
        .admin(Method::GET, &format!("/v1/admin/messages/{id}"), None)
        .await;
    assert_eq!(status, 200, "{message}");
    message
}

fn delivered(outcome: StepOutcome) {
    assert!(
        matches!(outcome, StepOutcome::Delivered(_) | StepOutcome::Executed(_)),
        "{outcome:?}"
    );
}

#[tokio::test]
async fn an_agent_answers_202_then_posts_status_parts_and_done_each_once_threaded() {
    let s = Pipeline::start().await;
    let secret = s.tenant.dispatch_secret.clone();
    let (id, path) = accepted_turn(&s, "book me a flight").await;
    let waiting = turn(&s, id).await;
    assert_eq!(
        (waiting["status"].as_str(), waiting["decision"].as_str()),
        (Some("awaiting_agent"), Some("async"))
    );
    assert_eq!(
        s.worker.step().await.unwrap(),
        StepOutcome::Empty,
        "a waiting turn holds no job"
    );

    let before = s.platforms.sent().len();
    let typing = s.platforms.typing().len();
    let (status, out) = post_event(
        &s.app,
        &path,
        &secret,
        "ev-1",
        json!({"type": "status", "text": "Searching flights…"}),
    )
    .await;
    assert_eq!((status, &out["status"]), (202, &json!("accepted")), "{out}");
    assert_eq!(out["shown"], true, "{out}");
    let indicator = &s.platforms.typing()[typing];
    assert_eq!(
        indicator.path, "/bottelegram-outbound-token/sendChatAction",
        "shown as typing"
    );

    let first = json!({"type": "message", "content": "Found **3** flights."});
    let (status, out) = post_event(&s.app, &path, &secret, "ev-2", first.clone()).await;
    assert_eq!((status, &out["parts"]), (202, &json!(1)), "{out}");
    let (status, out) = post_event(&s.app, &path, &secret, "ev-2", first).await;
    assert_eq!(
        (status, &out["status"]),
        (200, &json!("duplicate")),
        "the same webhook-id again"
    );
    delivered(s.worker.step().await.unwrap());
    assert_eq!(s.worker.step().await.unwrap(), StepOutcome::Empty, "posted once");

    let second = json!({"type": "message", "content": "The cheapest leaves at 7:05."});
    assert_eq!(post_event(&s.app, &path, &secret, "ev-3", second).await.0, 202);
    delivered(s.worker.step().await.unwrap());
    let (status, _) = post_event(&s.app, &path, &secret, "ev-4", json!({"type": "done"})).await;
    assert_eq!(status, 202);

    let sent: Vec<Value> = s.platforms.sent()[before..]
        .iter()
        .filter(|sent| sent.path.ends_with("/sendMessage"))
        .map(|sent| sent.body.clone())
        .collect();
    let texts: Vec<&str> = sent.iter().map(|b| b["text"].as_str().unwrap()).collect();
    assert_eq!(texts, ["Found <b>3</b> flights.", "The cheapest leaves at 7:05."]);
    let done = turn(&s, id).await;
    for body in &sent {
        assert_eq!(
            body["reply_parameters"]["message_id"].to_string(),
            done["platform_message_id"].as_str().unwrap(),
            "threaded to the user's message"
        );
    }
    assert_eq!(done["status"], "executed");
    assert_eq!(done["decision"], "respond");
    assert!(done["delivered_at"].is_string(), "{done}");
    assert_eq!(
        done["response_content"],
        "Found **3** flights.\n\nThe cheapest leaves at 7:05."
    );

    let (status, out) = post_event(
        &s.app,
        &path,
        &secret,
        "ev-5",
        json!({"type": "message", "content": "late"}),
    )
    .await;
    assert_eq!(status, 409, "{out}");
    let (status, _) = post_event(&s.app, &path, &secret, "ev-4", json!({"type": "done"})).await;
    assert_eq!(status, 200, "a repeat of done is still a repeat");

    // The next dispatch sees the whole answer.
    assert!(matches!(user_says(&s, "thanks").await, StepOutcome::Executed(_)));
    let call = s.agent.calls().pop().unwrap();
    let messages = call.raw["messages"].as_array().unwrap();
    let n = messages.len();
    assert_eq!(
        messages[n - 3],
        json!({"role": "user", "content": "book me a flight"})
    );
    assert_eq!(
        messages[n - 2]["content"],
        "Found **3** flights.\n\nThe cheapest leaves at 7:05."
    );
}

#[tokio::test]
async fn the_next_turn_is_dispatched_meanwhile_with_the_waiting_one_marked() {
    let s = Pipeline::start().await;
    let (id, path) = accepted_turn(&s, "book me a flight").await;
    assert!(matches!(
        user_says(&s, "and a hotel").await,
        StepOutcome::Executed(_)
    ));
    let call = s.agent.calls().pop().unwrap();
    let messages = call.raw["messages"].as_array().unwrap();
    let n = messages.len();
    assert_eq!(
        messages[n - 2],
        json!({"role": "user", "content": "book me a flight", "metadata": {"awaiting_answer": true}})
    );
    // The late answer still arrives, after the hotel's.
    let secret = s.tenant.dispatch_secret.clone();
    let (status, _) = post_event(
        &s.app,
        &path,
        &secret,
        "e1",
        json!({"type": "done", "content": "Flight booked."}),
    )
    .await;
    assert_eq!(status, 202);
    delivered(s.worker.step().await.unwrap());
    let last = s.platforms.sent().pop().unwrap();
    assert_eq!(last.body["text"], "Flight booked.");
    assert!(turn(&s, id).await["delivered_at"].is_string());
}

#[tokio::test]
async fn an_event_posted_before_the_gateway_recorded_its_202_waits_for_it_and_is_applied() {
    let s = Pipeline::builder().gated_agent().start().await;
    s.agent
        .script([Reply::Json(202, json!({"status": "pending"}), None)]);
    s.deliver(
        Platform::Telegram,
        telegram_text(600_000 + s.next_id(), "later please"),
    )
    .await;
    let step = s.step();
    s.agent.wait_for_calls(1).await;
    let call = s.agent.calls().pop().unwrap();
    let url = call.raw["reply"]["url"].as_str().unwrap().to_owned();
    let path = url[url.find("/v1/agent/").unwrap()..].to_owned();
    // The agent answers through its events URL while its 202 is still held back.
    let secret = s.tenant.dispatch_secret.clone();
    let done = json!({"type": "done", "content": "Here it is."});
    let mut event = std::pin::pin!(post_event(&s.app, &path, &secret, "evt-early", done));
    let held = tokio::time::timeout(std::time::Duration::from_millis(300), &mut event).await;
    assert!(held.is_err(), "the event waits for the dispatch: {held:?}");
    s.answer();
    let (status, body) = event.await;
    assert_eq!(status, 202, "{body}");
    let StepOutcome::Awaiting(id) = step.await.unwrap() else {
        panic!("the turn awaits the agent")
    };
    assert!(matches!(s.worker.step().await.unwrap(), StepOutcome::Delivered(done) if done == id));
    let sent = s.platforms.sent_to(Platform::Telegram);
    assert_eq!(sent.iter().filter(|m| m.text() == "Here it is.").count(), 1);
}

#[tokio::test]
async fn an_agent_request_past_the_deadline_answers_503_to_be_retried() {
    let proxy = crate::support::db_proxy::DbProxy::start(crate::support::db_proxy::upstream_addr()).await;
    let app = crate::support::spawn_app_with(|settings, db| {
        db.route_via(&mut settings.database, proxy.addr);
        settings.database.acquire_timeout_ms = 20_000;
        settings.database.deadline_ms = 20_000;
        settings.admin_deadline_ms = 700;
    })
    .await;
    let acme = provision_tenant(&app.pool, "acme").await;
    let path = format!("/v1/agent/{}/turns/{}/events", acme.tenant, uuid::Uuid::now_v7());
    proxy.hold();
    let started = std::time::Instant::now();
    let event = json!({"type": "done", "content": "late"});
    let (status, body) = post_event(&app, &path, &acme.dispatch_secret, "evt-held", event).await;
    let took = started.elapsed();
    proxy.release();
    assert_eq!(status, 503, "{body}");
    assert!(
        took < std::time::Duration::from_secs(5),
        "answered after {took:?}"
    );
}

#[tokio::test]
async fn events_that_do_not_verify_or_come_too_late_are_refused() {
    let s = Pipeline::start().await;
    let (id, path) = accepted_turn(&s, "hello").await;
    let other = provision_tenant_at(&s.app.pool, "globex", Some(&s.platforms.base_url)).await;
    let event = json!({"type": "message", "content": "from the wrong tenant"});
    let (status, _) = post_event(&s.app, &path, &other.dispatch_secret, "x1", event.clone()).await;
    assert_eq!(status, 401, "another tenant's secret");
    let other_path = path.replace(&s.tenant.tenant.to_string(), &other.tenant.to_string());
    let (status, _) = post_event(&s.app, &other_path, &other.dispatch_secret, "x2", event.clone()).await;
    assert_eq!(status, 404, "this turn is not the other tenant's");
    let unsigned = s
        .app
        .client
        .post(s.app.url(&path))
        .json(&event)
        .send()
        .await
        .unwrap();
    assert_eq!(unsigned.status(), 401);
    let secret = s.tenant.dispatch_secret.clone();
    let (status, _) = post_event(&s.app, &path, &secret, "x3", json!({"type": "shout"})).await;
    assert_eq!(status, 422);
    let parts: i64 = s.owner_scalar("select count(*) from channel_replies").await;
    assert_eq!(parts, 0, "none of these added a part");

    s.owner_exec(&format!(
        "update channel_messages set awaiting_until = now() - interval '1 minute' where id = '{id}'"
    ))
    .await;
    let (status, out) = post_event(&s.app, &path, &secret, "x4", event.clone()).await;
    assert_eq!(status, 410, "{out}");
    let ended = channel_bridge::lifecycle::awaiting::run_pass(&s.app.pool, chrono::Utc::now())
        .await
        .unwrap();
    assert_eq!(ended, 1);
    let row = turn(&s, id).await;
    assert_eq!(row["status"], "dispatch_failed", "nothing came: {row}");
    let (status, _) = post_event(&s.app, &path, &secret, "x5", event).await;
    assert_eq!(status, 410, "still past the horizon");
}

/// Runs the horizon's sweep at the turn's horizon, a second past it.
async fn sweep_past_horizon_of(s: &Pipeline, id: MessageId) {
    let horizon: chrono::DateTime<chrono::Utc> = s
        .owner_scalar(&format!(
            "select awaiting_until from channel_messages where id = '{id}'"
        ))
        .await;
    let now = horizon + chrono::Duration::seconds(1);
    let ended = channel_bridge::lifecycle::awaiting::run_pass(&s.app.pool, now)
        .await
        .unwrap();
    assert_eq!(ended, 1);
}

/// The turn's status, decision, last error, whether it is delivered, and its parts' statuses.
async fn outcome(s: &Pipeline, id: MessageId) -> (Value, Value, Value, bool, Vec<Value>) {
    let row = turn(s, id).await;
    let parts = row["reply_parts"].as_array().unwrap();
    (
        row["status"].clone(),
        row["decision"].clone(),
        row["last_error"].clone(),
        row["delivered_at"].is_string(),
        parts.iter().map(|part| part["status"].clone()).collect(),
    )
}

#[tokio::test]
async fn a_turn_the_horizon_ends_after_its_part_was_posted_reads_delivered() {
    let s = Pipeline::start().await;
    let secret = s.tenant.dispatch_secret.clone();
    let (id, path) = accepted_turn(&s, "long job please").await;
    let part = json!({"type": "message", "content": "Here is what I found."});
    assert_eq!(post_event(&s.app, &path, &secret, "m1", part).await.0, 202);
    delivered(s.worker.step().await.unwrap());
    let posted = s.platforms.sent().pop().unwrap();
    assert_eq!(posted.body["text"], "Here is what I found.");
    assert!(
        !turn(&s, id).await["delivered_at"].is_string(),
        "done is still awaited"
    );

    sweep_past_horizon_of(&s, id).await;
    assert_eq!(
        outcome(&s, id).await,
        (
            json!("executed"),
            json!("respond"),
            Value::Null,
            true,
            vec![json!("sent")]
        ),
        "read as a delivered answer, as a done would have left it"
    );
    let late = json!({"type": "message", "content": "late"});
    let (status, out) = post_event(&s.app, &path, &secret, "m2", late).await;
    assert_eq!(status, 410, "{out}");
    assert_eq!(s.worker.step().await.unwrap(), StepOutcome::Empty);
}

#[tokio::test]
async fn a_turn_the_horizon_ends_before_its_part_was_posted_is_delivered_by_its_job() {
    let s = Pipeline::start().await;
    let secret = s.tenant.dispatch_secret.clone();
    let (id, path) = accepted_turn(&s, "long job please").await;
    let part = json!({"type": "message", "content": "Here is what I found."});
    assert_eq!(post_event(&s.app, &path, &secret, "m1", part).await.0, 202);

    sweep_past_horizon_of(&s, id).await;
    let (status, _, error, delivered_now, _) = outcome(&s, id).await;
    assert_eq!(
        (status, error, delivered_now),
        (json!("executed"), Value::Null, false)
    );
    delivered(s.worker.step().await.unwrap());
    assert_eq!(
        outcome(&s, id).await,
        (
            json!("executed"),
            json!("respond"),
            Value::Null,
            true,
            vec![json!("sent")]
        )
    );
}

#[tokio::test]
async fn an_answer_whose_part_the_platform_refused_ends_delivery_failed_not_delivered() {
    let s = Pipeline::start().await;
    let secret = s.tenant.dispatch_secret.clone();
    let blocked = "Forbidden: bot was blocked by the user";
    for (event, end) in [("done", true), ("horizon", false)] {
        let (id, path) = accepted_turn(&s, &format!("ended by {event}")).await;
        s.platforms.script(
            Platform::Telegram,
            [Answer::Status(
                403,
                json!({"ok": false, "error_code": 403, "description": blocked}),
                None,
            )],
        );
        let part = json!({"type": "message", "content": "Here is what I found."});
        assert_eq!(
            post_event(&s.app, &path, &secret, &format!("{event}-1"), part)
                .await
                .0,
            202
        );
        s.worker.step().await.unwrap();
        if end {
            let done = json!({"type": "done"});
            assert_eq!(
                post_event(&s.app, &path, &secret, &format!("{event}-2"), done)
                    .await
                    .0,
                202
            );
        } else {
            sweep_past_horizon_of(&s, id).await;
        }
        let (status, decision, error, delivered_now, parts) = outcome(&s, id).await;
        assert_eq!(
            (status, decision, delivered_now, parts),
            (
                json!("delivery_failed"),
                json!("respond"),
                false,
                vec![json!("failed")]
            ),
            "ended by {event}"
        );
        assert!(error.as_str().unwrap().contains(blocked), "{event}: {error}");
    }
}

#[tokio::test]
async fn a_gateway_restarted_between_the_agents_posts_loses_nothing() {
    let s = Pipeline::start().await;
    let secret = s.tenant.dispatch_secret.clone();
    let (id, path) = accepted_turn(&s, "long job please").await;
    let (status, _) = post_event(
        &s.app,
        &path,
        &secret,
        "p1",
        json!({"type": "message", "content": "part one"}),
    )
    .await;
    assert_eq!(status, 202);

    // Another instance takes over: the first one's worker never runs again.
    let second = crate::support::spawn_app_on(&s.app.db, |_| {}).await;
    let worker = crate::support::pipeline::worker(&second, &s.agent.url, |_| {});
    let (status, _) = post_event(
        &second,
        &path,
        &secret,
        "p2",
        json!({"type": "message", "content": "part two"}),
    )
    .await;
    assert_eq!(status, 202);
    let (status, _) = post_event(
        &second,
        &path,
        &secret,
        "p1",
        json!({"type": "message", "content": "part one"}),
    )
    .await;
    assert_eq!(
        status, 200,
        "a retry of the first post, to the new instance, is a repeat"
    );
    assert_eq!(
        post_event(&second, &path, &secret, "p3", json!({"type": "done"}))
            .await
            .0,
        202
    );
    delivered(worker.step().await.unwrap());
    assert_eq!(worker.step().await.unwrap(), StepOutcome::Empty);
    let texts: Vec<String> = s
        .platforms
        .sent()
        .iter()
        .filter(|sent| sent.path.ends_with("/sendMessage"))
        .map(|sent| sent.body["text"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(texts, ["part one", "part two"], "each once, in order");
    let row = turn(&s, id).await;
    assert!(row["delivered_at"].is_string(), "{row}");
}

#[tokio::test]
async fn the_echo_agent_in_async_mode_answers_202_then_through_the_events_url() {
    use channel_bridge::agent_bridge::{self, BridgeConfig};
    let s = Pipeline::start().await;
    let mut config = BridgeConfig::echo(&s.tenant.dispatch_secret);
    config.answer_later = Some(std::time::Duration::from_millis(20));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let bridge = format!("http://{}/", listener.local_addr().unwrap());
    tokio::spawn(agent_bridge::serve(listener, config, std::future::pending()));
    let app_url = s.app.url("");
    let worker = crate::support::pipeline::worker(&s.app, &bridge, move |settings| {
        settings.media.public_url = Some(app_url);
    });
    s.deliver(Platform::Telegram, telegram_text(650_001, "ping later"))
        .await;
    let StepOutcome::Awaiting(id) = worker.step().await.unwrap() else {
        panic!("the echo answers 202")
    };
    crate::support::eventually("the echo posts its answer and done", || async {
        turn(&s, id).await["status"] == "executed"
    })
    .await;
    delivered(worker.step().await.unwrap());
    let last = s.platforms.sent().pop().unwrap();
    assert_eq!(last.body["text"], "echo: ping later (history: 0 turns)");
    assert!(turn(&s, id).await["delivered_at"].is_string());
}
