//! The dispatch worker against a real database and a real local agent that verifies every
//! signature: ordering, history, payload, retries, leases.

use std::sync::Arc;

use channel_bridge::dispatch::dispatcher::Dispatcher;
use channel_bridge::dispatch::payload::ChatMessage;
use channel_bridge::dispatch::wakeup::Wakeup;
use channel_bridge::dispatch::{StepOutcome, Worker};
use channel_bridge::domain::{MessageId, Platform};
use channel_bridge::settings::ServeSettings;
use serde_json::json;
use tokio::sync::Semaphore;

use crate::support::fake_agent::{FakeAgent, Reply};
use crate::support::fake_platforms::FakePlatforms;
use crate::support::platforms::*;
use crate::support::{spawn_app, worker, Pipeline, TestApp};

fn user(text: &str) -> ChatMessage {
    ChatMessage::user(text)
}

fn assistant(text: &str) -> ChatMessage {
    ChatMessage::assistant(text)
}

async fn executed(worker: &Worker) -> MessageId {
    match worker.step().await.unwrap() {
        StepOutcome::Executed(id) => id,
        other => panic!("expected an executed dispatch, got {other:?}"),
    }
}

/// (status, attempts, last_error, response) of a message, read as the owner.
async fn message_state(app: &TestApp, id: MessageId) -> (String, i32, Option<String>, Option<String>) {
    let mut owner = app.db.owner_conn().await;
    sqlx::query_as(
        "select status, attempts, last_error, response_content from channel_messages where id = $1",
    )
    .bind(id)
    .fetch_one(&mut owner)
    .await
    .unwrap()
}

async fn queue_len(app: &TestApp) -> i64 {
    let mut owner = app.db.owner_conn().await;
    sqlx::query_scalar("select count(*) from dispatch_queue")
        .fetch_one(&mut owner)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_three_turn_conversation_gives_each_dispatch_exactly_the_earlier_turns_then_the_new_one() {
    let Pipeline {
        app,
        platforms: _platforms,
        tenant,
        agent,
        worker,
        ..
    } = Pipeline::start().await;

    deliver(&app, &tenant, Platform::Telegram, telegram_text(1001, "first")).await;
    let first = executed(&worker).await;
    // The same person on Slack: one history across platforms.
    deliver(
        &app,
        &tenant,
        Platform::Slack,
        slack_text("1718000500.000100", "second"),
    )
    .await;
    executed(&worker).await;
    deliver(&app, &tenant, Platform::Telegram, telegram_text(1002, "third")).await;
    executed(&worker).await;
    assert_eq!(worker.step().await.unwrap(), StepOutcome::Empty);

    let calls = agent.calls();
    assert_eq!(calls.len(), 3);
    assert_eq!(calls[0].payload.messages, [user("first")]);
    assert_eq!(
        calls[1].payload.messages,
        [
            user("first"),
            assistant("answer to first (0 before)"),
            user("second")
        ]
    );
    assert_eq!(
        calls[2].payload.messages,
        [
            user("first"),
            assistant("answer to first (0 before)"),
            user("second"),
            assistant("answer to second (2 before)"),
            user("third"),
        ]
    );

    let call = &calls[0];
    assert_eq!(call.idempotency_key, first.to_string());
    assert_eq!(call.webhook_id, first.to_string());
    assert_eq!(
        (call.payload.role.as_str(), call.payload.content.as_str()),
        ("user", "first")
    );
    assert_eq!(call.payload.tenant_id, tenant.tenant.to_string());
    assert_eq!(call.payload.user_id.as_deref(), Some("alice"));
    assert_eq!(call.raw["channel"]["platform"], "telegram");
    assert_eq!(call.raw["channel"]["connector_id"], tenant.telegram.to_string());
    assert_eq!(call.raw["channel"]["chat_id"], TELEGRAM_USER);
    assert_eq!(call.raw["channel"]["platform_user_id"], TELEGRAM_USER);
    assert_eq!(calls[1].raw["channel"]["platform"], "slack");

    let (status, attempts, _, response) = message_state(&app, first).await;
    assert_eq!((status.as_str(), attempts), ("executed", 1));
    assert_eq!(response.as_deref(), Some("answer to first (0 before)"));
    assert_eq!(queue_len(&app).await, 0);
}

/// Seeds a finished turn of `user_id` directly, `age` seconds old.
async fn seed_turn(
    app: &TestApp,
    tenant: &Provisioned,
    user_id: Option<&str>,
    status: &str,
    text: &str,
    age: i64,
) {
    let mut owner = app.db.owner_conn().await;
    let key = user_id.map_or_else(|| "sender:other".to_owned(), |u| format!("user:{u}"));
    sqlx::query(
        "insert into channel_messages (tenant_id, id, connector_id, platform, idempotency_key,
             platform_message_id, chat_id, platform_user_id, user_id, conversation_key, request_content,
             response_content, status, received_at)
         values ($1, gen_random_uuid(), $2, 'telegram', gen_random_uuid()::text, 'm', 'c', 'u', $3, $4, $5,
             case when $6 = 'executed' then 'reply to ' || $5 end, $6, now() - make_interval(secs => $7))",
    )
    .bind(tenant.tenant)
    .bind(tenant.telegram)
    .bind(user_id)
    .bind(key)
    .bind(text)
    .bind(status)
    .bind(age as f64)
    .execute(&mut owner)
    .await
    .unwrap();
}

#[tokio::test]
async fn history_is_the_newest_12_terminal_turns_of_the_same_tenant_and_user_oldest_first() {
    let Pipeline {
        app,
        platforms: _platforms,
        tenant,
        agent,
        worker,
        ..
    } = Pipeline::start().await;
    let other_tenant = provision_tenant(&app.pool, "other").await;

    for i in 1..=15 {
        let status = match i {
            14 => "dispatch_failed",
            15 => "denied_unlinked",
            _ => "executed",
        };
        seed_turn(
            &app,
            &tenant,
            Some("alice"),
            status,
            &format!("turn {i}"),
            1000 - i,
        )
        .await;
    }
    seed_turn(&app, &tenant, Some("bob"), "executed", "bob's turn", 500).await;
    seed_turn(
        &app,
        &other_tenant,
        Some("alice"),
        "executed",
        "other tenant's alice",
        400,
    )
    .await;
    seed_turn(&app, &tenant, Some("alice"), "executed", "   ", 300).await;
    seed_turn(&app, &tenant, Some("alice"), "ignored", "[photo]", 200).await;
    seed_turn(
        &app,
        &tenant,
        Some("alice"),
        "dispatching",
        "in flight elsewhere",
        100,
    )
    .await;

    deliver(&app, &tenant, Platform::Telegram, telegram_text(2001, "now")).await;
    deliver(&app, &tenant, Platform::Telegram, telegram_text(2002, "newer")).await;
    executed(&worker).await;

    let sent = &agent.calls()[0].payload.messages;
    let mut expected = Vec::new();
    for i in 4..=15 {
        expected.push(user(&format!("turn {i}")));
        if i <= 13 {
            expected.push(assistant(&format!("reply to turn {i}")));
        }
    }
    expected.push(user("now"));
    assert_eq!(sent, &expected);
}

#[tokio::test]
async fn an_unlinked_sender_allowed_by_policy_has_a_history_of_their_own() {
    let Pipeline {
        app,
        platforms: _platforms,
        tenant,
        agent,
        worker,
        ..
    } = Pipeline::start().await;
    let mut owner = app.db.owner_conn().await;
    sqlx::query("delete from channel_links where platform = 'telegram'")
        .execute(&mut owner)
        .await
        .unwrap();
    sqlx::query("update channel_connectors set unlinked_policy = 'allow'")
        .execute(&mut owner)
        .await
        .unwrap();

    deliver(&app, &tenant, Platform::Telegram, telegram_text(3001, "hello")).await;
    executed(&worker).await;
    deliver(
        &app,
        &tenant,
        Platform::Slack,
        slack_text("1718000600.000100", "alice on slack"),
    )
    .await;
    executed(&worker).await;
    deliver(&app, &tenant, Platform::Telegram, telegram_text(3002, "again")).await;
    executed(&worker).await;

    let calls = agent.calls();
    assert_eq!(calls[0].payload.user_id, None);
    assert_eq!(
        calls[1].payload.messages,
        [user("alice on slack")],
        "a linked user's history is their own"
    );
    assert_eq!(
        calls[2].payload.messages,
        [
            user("hello"),
            assistant("answer to hello (0 before)"),
            user("again")
        ]
    );
}

#[tokio::test]
async fn three_quick_messages_with_a_slow_agent_and_two_workers_are_dispatched_strictly_in_order() {
    let app = spawn_app().await;
    let platforms = FakePlatforms::start().await;
    let tenant = provision_tenant_at(&app.pool, "acme", Some(&platforms.base_url)).await;
    let gate = Arc::new(Semaphore::new(0));
    let agent = FakeAgent::start_gated(&tenant.dispatch_secret, gate.clone()).await;
    let tweak = |s: &mut ServeSettings| s.dispatch.poll_interval_ms = 20;
    let workers = [worker(&app, &agent.url, tweak), worker(&app, &agent.url, tweak)];

    for (i, text) in ["one", "two", "three"].into_iter().enumerate() {
        deliver(
            &app,
            &tenant,
            Platform::Telegram,
            telegram_text(4001 + i as i64, text),
        )
        .await;
    }
    let wakeup = Arc::new(Wakeup::default());
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let mut tasks = Vec::new();
    for worker in &workers {
        let dispatcher = Dispatcher::new(worker.clone());
        tasks.push(tokio::spawn(dispatcher.run(wakeup.clone(), stop_rx.clone())));
    }

    // Let the agent answer one call at a time; each time, no second call may have started.
    for n in 1..=3 {
        agent.wait_for_calls(n).await;
        assert_eq!(
            agent.calls().len(),
            n,
            "only the head of the conversation is in flight"
        );
        gate.add_permits(1);
    }
    let _ = stop.send(true);
    for task in tasks {
        task.await.unwrap();
    }

    let calls = agent.calls();
    let contents: Vec<&str> = calls.iter().map(|c| c.payload.content.as_str()).collect();
    assert_eq!(contents, ["one", "two", "three"]);
    assert_eq!(agent.max_in_flight(), 1);
    assert_eq!(
        calls[1].payload.messages[1],
        assistant("answer to one (0 before)")
    );
    assert_eq!(
        calls[2].payload.messages[3],
        assistant("answer to two (2 before)")
    );
    assert_eq!(queue_len(&app).await, 0);
}

#[tokio::test]
async fn agent_500_twice_then_200_is_executed_after_3_attempts() {
    let Pipeline {
        app,
        platforms: _platforms,
        tenant,
        agent,
        worker,
        ..
    } = Pipeline::start().await;
    agent.script([
        Reply::Json(500, json!({"error": "boom"}), None),
        Reply::Json(503, json!({"error": "busy"}), None),
    ]);
    deliver(&app, &tenant, Platform::Telegram, telegram_text(5001, "retry me")).await;

    let first = worker.step().await.unwrap();
    let StepOutcome::Retrying(id) = first else {
        panic!("{first:?}")
    };
    let (status, attempts, last_error, _) = message_state(&app, id).await;
    assert_eq!((status.as_str(), attempts), ("dispatching", 1));
    assert!(last_error.unwrap().contains("500"));
    assert_eq!(worker.step().await.unwrap(), StepOutcome::Retrying(id));
    assert_eq!(worker.step().await.unwrap(), StepOutcome::Executed(id));

    let (status, attempts, last_error, _) = message_state(&app, id).await;
    assert_eq!((status.as_str(), attempts, last_error), ("executed", 3, None));
    let keys: Vec<String> = agent.calls().into_iter().map(|c| c.idempotency_key).collect();
    assert_eq!(keys, [id.to_string(), id.to_string(), id.to_string()]);
}

#[tokio::test]
async fn agent_400_fails_at_once_and_releases_the_conversation() {
    let Pipeline {
        app,
        platforms: _platforms,
        tenant,
        agent,
        worker,
        ..
    } = Pipeline::start().await;
    agent.script([Reply::Json(400, json!({"error": "bad payload"}), None)]);
    deliver(&app, &tenant, Platform::Telegram, telegram_text(6001, "refused")).await;
    deliver(&app, &tenant, Platform::Telegram, telegram_text(6002, "next")).await;

    let outcome = worker.step().await.unwrap();
    let StepOutcome::Failed(id) = outcome else {
        panic!("{outcome:?}")
    };
    let (status, attempts, last_error, response) = message_state(&app, id).await;
    assert_eq!(
        (status.as_str(), attempts, response),
        ("dispatch_failed", 1, None)
    );
    assert!(last_error.unwrap().contains("400 Bad Request"));

    executed(&worker).await;
    let calls = agent.calls();
    assert_eq!(
        calls[1].payload.messages,
        [user("refused"), user("next")],
        "a failed turn is in history, unanswered"
    );
}

#[tokio::test]
async fn retries_stop_at_the_attempt_limit_with_the_last_error_kept() {
    let Pipeline {
        app,
        platforms: _platforms,
        tenant,
        agent,
        worker,
        ..
    } = Pipeline::builder()
        .settings(|s| s.dispatch.max_attempts = 2)
        .start()
        .await;
    agent.script([
        Reply::Json(502, json!({}), None),
        Reply::Raw("<html>not an answer</html>"),
    ]);
    deliver(&app, &tenant, Platform::Telegram, telegram_text(7001, "doomed")).await;

    assert!(matches!(worker.step().await.unwrap(), StepOutcome::Retrying(_)));
    let outcome = worker.step().await.unwrap();
    let StepOutcome::Failed(id) = outcome else {
        panic!("{outcome:?}")
    };
    let (status, attempts, last_error, _) = message_state(&app, id).await;
    assert_eq!((status.as_str(), attempts), ("dispatch_failed", 2));
    assert!(
        last_error.unwrap().contains("not a supported shape"),
        "a 2xx with an unreadable body is a failure"
    );
    assert_eq!(queue_len(&app).await, 0);
}

#[tokio::test]
async fn a_429_is_retried_no_sooner_than_its_retry_after() {
    let Pipeline {
        app,
        platforms: _platforms,
        tenant,
        agent,
        worker,
        ..
    } = Pipeline::start().await;
    agent.script([Reply::Json(429, json!({"error": "slow down"}), Some(30))]);
    deliver(&app, &tenant, Platform::Telegram, telegram_text(8001, "patience")).await;

    let outcome = worker.step().await.unwrap();
    let StepOutcome::Retrying(id) = outcome else {
        panic!("{outcome:?}")
    };
    let mut owner = app.db.owner_conn().await;
    let wait: f64 =
        sqlx::query_scalar("select extract(epoch from available_at - now())::float8 from dispatch_queue")
            .fetch_one(&mut owner)
            .await
            .unwrap();
    assert!((28.0..=31.0).contains(&wait), "waits about 30 s, got {wait}");
    assert_eq!(
        worker.step().await.unwrap(),
        StepOutcome::Empty,
        "not before Retry-After"
    );

    // Time passes.
    sqlx::query("update dispatch_queue set available_at = now()")
        .execute(&mut owner)
        .await
        .unwrap();
    assert_eq!(worker.step().await.unwrap(), StepOutcome::Executed(id));
}

#[tokio::test]
async fn a_worker_killed_mid_call_is_replaced_after_the_lease_with_the_same_idempotency_key() {
    let Pipeline {
        app,
        platforms: _platforms,
        tenant,
        agent,
        worker: doomed,
        ..
    } = Pipeline::start().await;
    agent.script([Reply::Hang]);
    let survivor = worker(&app, &agent.url, |_| {});
    deliver(&app, &tenant, Platform::Telegram, telegram_text(9001, "survive")).await;

    let killed = tokio::spawn({
        let doomed = doomed.clone();
        async move { doomed.step().await }
    });
    agent.wait_for_calls(1).await;
    killed.abort();
    assert!(killed.await.unwrap_err().is_cancelled());

    assert_eq!(
        survivor.step().await.unwrap(),
        StepOutcome::Empty,
        "the lease still holds the job"
    );
    let mut owner = app.db.owner_conn().await;
    sqlx::query("update dispatch_queue set available_at = now() - interval '1 second'")
        .execute(&mut owner)
        .await
        .unwrap();
    let id = executed(&survivor).await;

    let calls = agent.calls();
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0].idempotency_key, id.to_string());
    assert_eq!(calls[1].idempotency_key, id.to_string());
    let (status, attempts, ..) = message_state(&app, id).await;
    assert_eq!((status.as_str(), attempts), ("executed", 2));
}

#[tokio::test]
async fn a_failed_history_read_still_dispatches_with_empty_history() {
    let Pipeline {
        app,
        platforms: _platforms,
        tenant,
        agent,
        worker,
        ..
    } = Pipeline::start().await;
    if crate::support::citus::enabled() {
        eprintln!(
            "skipped on Citus: a policy added while the gateway runs does not make Citus's history read fail"
        );
        return;
    }
    seed_turn(&app, &tenant, Some("alice"), "executed", "poison-history", 60).await;
    // Fault injection: any read that touches the poisoned row fails (division by zero),
    // while the turn being dispatched can still be read and written.
    let mut owner = app.db.owner_conn().await;
    sqlx::query(
        "create policy poison on channel_messages as restrictive for select
           using (request_content <> 'poison-history' or 1 / (length(request_content) - 14) = 1)",
    )
    .execute(&mut owner)
    .await
    .unwrap();

    deliver(
        &app,
        &tenant,
        Platform::Telegram,
        telegram_text(9101, "still answered"),
    )
    .await;
    let id = executed(&worker).await;
    assert_eq!(agent.calls()[0].payload.messages, [user("still answered")]);
    assert_eq!(message_state(&app, id).await.0, "executed");
}

#[tokio::test]
async fn a_multi_part_answer_gives_one_reply_part_row_per_part_in_order() {
    let Pipeline {
        app,
        platforms,
        tenant,
        agent,
        worker,
        ..
    } = Pipeline::start().await;
    agent.script([Reply::Json(
        200,
        json!({"messages": [
            {"role": "assistant", "content": "part one"},
            {"role": "assistant", "content": "  "},
            {"role": "assistant", "content": "part two"},
            {"role": "assistant", "content": "part three"}
        ]}),
        None,
    )]);
    deliver(
        &app,
        &tenant,
        Platform::Telegram,
        telegram_text(9201, "tell me in parts"),
    )
    .await;
    let id = executed(&worker).await;

    let mut tx = app.tenant_tx(tenant.tenant).await;
    let parts = channel_bridge::db::parts::reply_parts(&mut tx, id).await.unwrap();
    let parts: Vec<(i32, &str, &str)> = parts
        .iter()
        .map(|p| (p.part_index, p.content.as_str(), p.status.as_str()))
        .collect();
    assert_eq!(
        parts,
        [
            (0, "part one", "sent"),
            (1, "part two", "sent"),
            (2, "part three", "sent")
        ]
    );
    let posted: Vec<String> = platforms.sent().iter().map(|s| s.text().to_owned()).collect();
    assert_eq!(posted, ["part one", "part two", "part three"]);
    let (_, _, _, response) = message_state(&app, id).await;
    assert_eq!(response.as_deref(), Some("part one\n\npart two\n\npart three"));
}

#[tokio::test]
async fn the_serving_application_dispatches_on_its_own_after_a_webhook() {
    let probe = spawn_app().await;
    let platforms = FakePlatforms::start().await;
    let tenant = provision_tenant_at(&probe.pool, "acme", Some(&platforms.base_url)).await;
    let agent = FakeAgent::start(&tenant.dispatch_secret).await;
    // A second application on the same database runs the worker role, woken by NOTIFY.
    let worker_app = crate::support::spawn_app_on(&probe.db, |s| {
        s.worker = true;
        s.agent_url = Some(agent.url.clone());
    })
    .await;
    deliver(
        &probe,
        &tenant,
        Platform::Telegram,
        telegram_text(9301, "hands free"),
    )
    .await;
    platforms.wait_for_sends(1).await;
    worker_app.stop().await.unwrap();
    assert_eq!(agent.calls()[0].payload.content, "hands free");
    assert_eq!(platforms.sent()[0].text(), "answer to hands free (0 before)");
}

#[tokio::test]
async fn a_job_whose_preparation_fails_backs_off_instead_of_being_claimed_again_at_once() {
    let Pipeline {
        app,
        platforms: _platforms,
        tenant,
        agent,
        worker,
        ..
    } = Pipeline::builder()
        .settings(|s| s.dispatch.retry_base_ms = 60_000)
        .start()
        .await;
    deliver(&app, &tenant, Platform::Telegram, telegram_text(9401, "hello")).await;

    // The tenant row cannot be read: preparing fails after the claim, in its transaction.
    let mut owner = app.db.owner_conn().await;
    sqlx::query("revoke select on tenants from channel_bridge_app")
        .execute(&mut owner)
        .await
        .unwrap();
    assert!(worker.step().await.is_err());
    assert_eq!(
        worker.step().await.unwrap(),
        StepOutcome::Empty,
        "the job waits its backoff"
    );
    let (leased, waits): (bool, bool) = sqlx::query_as(
        "select lease_owner is not null, available_at > now() + interval '1 second' from dispatch_queue",
    )
    .fetch_one(&mut owner)
    .await
    .unwrap();
    assert!(!leased && waits);
    assert!(agent.calls().is_empty());

    // Fixed, and its time come: dispatched as usual.
    sqlx::query("grant select on tenants to channel_bridge_app")
        .execute(&mut owner)
        .await
        .unwrap();
    sqlx::query("update dispatch_queue set available_at = now()")
        .execute(&mut owner)
        .await
        .unwrap();
    assert!(matches!(worker.step().await.unwrap(), StepOutcome::Executed(_)));
    assert_eq!(agent.calls().len(), 1);
}

#[tokio::test]
async fn a_lease_is_renewed_only_by_its_owner() {
    use channel_bridge::db::queue::{self, Queue};
    use std::time::Duration;

    let app = spawn_app().await;
    let tenant = provision_tenant(&app.pool, "acme").await;
    deliver(
        &app,
        &tenant,
        Platform::Telegram,
        telegram_text(9501, "long answer"),
    )
    .await;
    let request = queue::ClaimRequest {
        wanted: 1,
        default_room: 1,
        lease: Duration::from_secs(60),
        ..Default::default()
    };
    let (mut jobs, tx) = Queue::new(app.pool.clone())
        .claim(&request)
        .await
        .unwrap()
        .expect("a job is ready");
    tx.commit().await.unwrap();
    let job = jobs.pop().unwrap();
    let lease_left = |app: &TestApp| {
        let db = app.db.clone();
        async move {
            let mut owner = db.owner_conn().await;
            let secs: f64 = sqlx::query_scalar(
                "select extract(epoch from available_at - now())::float8 from dispatch_queue",
            )
            .fetch_one(&mut owner)
            .await
            .unwrap();
            secs
        }
    };

    let queue = Queue::new(app.pool.clone());
    let stranger = queue::LeaseToken(uuid::Uuid::new_v4());
    let renewed = queue
        .renew_leases(&[(job.message_id, stranger)], Duration::from_secs(3600))
        .await
        .unwrap();
    assert!(
        renewed.is_empty(),
        "the renewal reports that the lease is not the caller's"
    );
    assert!(lease_left(&app).await < 61.0, "another owner cannot extend it");

    let renewed = queue
        .renew_leases(&[(job.message_id, job.lease)], Duration::from_secs(3600))
        .await
        .unwrap();
    assert_eq!(renewed, [job.message_id]);
    assert!(lease_left(&app).await > 3500.0);
}
