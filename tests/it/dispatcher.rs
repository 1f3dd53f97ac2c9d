//! The dispatch engine: batch claims, the bounded in-flight set, per-tenant caps, leases
//! that are renewed and checked, retries by time, and the cost of an idle instance. Driven
//! by gates the test opens (agent answers, platform posts), never by sleeping.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use channel_bridge::db::queue::ClaimRequest;
use channel_bridge::dispatch::dispatcher::Dispatcher;
use channel_bridge::dispatch::wakeup::Wakeup;
use channel_bridge::dispatch::StepOutcome;
use channel_bridge::domain::{MessageId, Platform, TenantId};
use channel_bridge::provision;
use serde_json::json;
use tokio::sync::{watch, Semaphore};

use crate::support::db_proxy::{upstream_addr, DbProxy};
use crate::support::fake_agent::{FakeAgent, Reply};
use crate::support::fake_platforms::{Answer, FakePlatforms};
use crate::support::platforms::*;
use crate::support::{eventually, spawn_app, spawn_app_with, worker, worker_with, TestApp};

/// Telegram sender ids of the extra people `link_people` creates.
fn person(n: usize) -> String {
    (500_000 + n).to_string()
}

/// Links `count` more Telegram senders, each a person of their own (one conversation each).
async fn link_people(app: &TestApp, tenant: TenantId, count: usize) {
    for n in 0..count {
        provision::add_link(
            &app.pool,
            tenant,
            Platform::Telegram,
            &person(n),
            &format!("person{n}"),
        )
        .await
        .unwrap();
    }
}

/// A Telegram private text from `sender`.
fn telegram_from(update_id: i64, sender: &str, text: &str) -> Vec<u8> {
    let mut update: serde_json::Value = serde_json::from_slice(&telegram_text(update_id, text)).unwrap();
    let id: i64 = sender.parse().unwrap();
    update["message"]["from"]["id"] = id.into();
    update["message"]["chat"]["id"] = id.into();
    serde_json::to_vec(&update).unwrap()
}

async fn texts_of(app: &TestApp, ids: &[MessageId]) -> Vec<String> {
    let mut owner = app.db.owner_conn().await;
    sqlx::query_scalar(
        "select request_content from channel_messages where id = any($1) order by request_content",
    )
    .bind(ids)
    .fetch_all(&mut owner)
    .await
    .unwrap()
}

fn request(wanted: usize) -> ClaimRequest {
    ClaimRequest {
        wanted,
        default_room: wanted,
        lease: Duration::from_secs(60),
        ..Default::default()
    }
}

/// Runs a dispatcher (with its lease keeper) until the returned sender says stop.
fn run_dispatcher(dispatcher: &Arc<Dispatcher>) -> watch::Sender<bool> {
    let (stop, stop_rx) = watch::channel(false);
    tokio::spawn(
        dispatcher
            .clone()
            .run(Arc::new(Wakeup::default()), stop_rx.clone()),
    );
    tokio::spawn(dispatcher.clone().keep_leases(stop_rx));
    stop
}

#[tokio::test]
async fn a_batch_claim_takes_one_head_per_conversation_and_two_instances_never_share_one() {
    let app = spawn_app().await;
    let platforms = FakePlatforms::start().await;
    let tenant = provision_tenant_at(&app.pool, "acme", Some(&platforms.base_url)).await;
    let agent = FakeAgent::start(&tenant.dispatch_secret).await;
    link_people(&app, tenant.tenant, 4).await;
    for round in 0..3 {
        for n in 0..4 {
            let body = telegram_from(
                1000 + round * 10 + n as i64,
                &person(n),
                &format!("p{n} m{round}"),
            );
            deliver(&app, &tenant, Platform::Telegram, body).await;
        }
    }
    let (a, b) = (worker(&app, &agent.url, |_| {}), worker(&app, &agent.url, |_| {}));

    // Two instances claim at the same moment, each asking for more than there are heads.
    let ten = request(10);
    let (batch_a, batch_b) = tokio::join!(a.claim(&ten), b.claim(&ten));
    let (batch_a, batch_b) = (batch_a.unwrap(), batch_b.unwrap());
    let claimed: Vec<_> = batch_a.iter().chain(&batch_b).map(|c| c.job.clone()).collect();
    let conversations: HashSet<&str> = claimed.iter().map(|j| j.conversation_key.as_str()).collect();
    assert_eq!(claimed.len(), 4, "one head per conversation, all four taken");
    assert_eq!(conversations.len(), 4, "never two messages of one conversation");
    let ids: Vec<MessageId> = claimed.iter().map(|j| j.message_id).collect();
    assert_eq!(texts_of(&app, &ids).await, ["p0 m0", "p1 m0", "p2 m0", "p3 m0"]);
    assert!(
        a.claim(&request(10)).await.unwrap().is_empty(),
        "while the heads are held, the later messages wait"
    );

    for claimed in batch_a.into_iter().chain(batch_b) {
        let outcome = a.run_job(claimed).await.unwrap();
        assert!(matches!(outcome, StepOutcome::Executed(_)), "{outcome:?}");
    }
    let next = b.claim(&request(10)).await.unwrap();
    let ids: Vec<MessageId> = next.iter().map(|c| c.job.message_id).collect();
    assert_eq!(texts_of(&app, &ids).await, ["p0 m1", "p1 m1", "p2 m1", "p3 m1"]);
}

#[tokio::test]
async fn the_dispatcher_keeps_exactly_its_capacity_of_agent_calls_in_flight() {
    let app = spawn_app().await;
    let platforms = FakePlatforms::start().await;
    let tenant = provision_tenant_at(&app.pool, "acme", Some(&platforms.base_url)).await;
    let gate = Arc::new(Semaphore::new(0));
    let agent = FakeAgent::start_gated(&tenant.dispatch_secret, gate.clone()).await;
    link_people(&app, tenant.tenant, 8).await;
    for n in 0..8 {
        let body = telegram_from(2000 + n as i64, &person(n), &format!("hello {n}"));
        deliver(&app, &tenant, Platform::Telegram, body).await;
    }
    let dispatcher = Dispatcher::new(worker(&app, &agent.url, |s| {
        s.max_in_flight = 3;
        s.tenant_share_percent = 100;
    }));
    let stop = run_dispatcher(&dispatcher);

    agent.wait_for_calls(3).await;
    assert_eq!(dispatcher.in_flight(), 3);
    gate.add_permits(8);
    platforms.wait_for_sends(8).await;
    stop.send_replace(true);

    assert_eq!(agent.calls().len(), 8);
    assert_eq!(
        agent.max_in_flight(),
        3,
        "the capacity is used, and never exceeded"
    );
}

/// Three calls held in flight at once by an agent that speaks both HTTP/1.1 and `h2c`: the
/// versions it saw and the connections it accepted.
async fn three_calls_in_flight(http2: bool) -> (Vec<axum::http::Version>, usize) {
    let app = spawn_app().await;
    let platforms = FakePlatforms::start().await;
    let tenant = provision_tenant_at(&app.pool, "acme", Some(&platforms.base_url)).await;
    let gate = Arc::new(Semaphore::new(0));
    let agent = FakeAgent::start_gated(&tenant.dispatch_secret, gate.clone()).await;
    link_people(&app, tenant.tenant, 3).await;
    for n in 0..3 {
        let body = telegram_from(4000 + n as i64, &person(n), &format!("hello {n}"));
        deliver(&app, &tenant, Platform::Telegram, body).await;
    }
    let dispatcher = Dispatcher::new(worker(&app, &agent.url, |s| {
        s.dispatch.agent_http2 = http2;
        s.tenant_share_percent = 100;
    }));
    let stop = run_dispatcher(&dispatcher);

    agent.wait_for_calls(3).await;
    assert_eq!(dispatcher.in_flight(), 3);
    gate.add_permits(3);
    platforms.wait_for_sends(3).await;
    stop.send_replace(true);
    let mut answers: Vec<String> = platforms.sent().iter().map(|s| s.text().to_owned()).collect();
    answers.sort();
    assert_eq!(
        answers,
        [
            "answer to hello 0 (0 before)",
            "answer to hello 1 (0 before)",
            "answer to hello 2 (0 before)"
        ]
    );
    let versions = agent.calls().iter().map(|call| call.version).collect();
    (versions, agent.connections())
}

#[tokio::test]
async fn with_agent_http2_the_calls_in_flight_share_one_connection_as_streams() {
    let (versions, connections) = three_calls_in_flight(true).await;
    assert_eq!(versions, [axum::http::Version::HTTP_2; 3]);
    assert_eq!(connections, 1, "three calls in flight, one connection");
}

#[tokio::test]
async fn by_default_each_agent_call_in_flight_has_an_http1_connection_of_its_own() {
    let (versions, connections) = three_calls_in_flight(false).await;
    assert_eq!(versions, [axum::http::Version::HTTP_11; 3]);
    assert_eq!(connections, 3);
}

#[tokio::test]
async fn a_tenant_at_its_cap_does_not_block_another_tenants_fresh_message() {
    let app = spawn_app().await;
    let platforms = FakePlatforms::start().await;
    let busy = provision_tenant_at(&app.pool, "busy", Some(&platforms.base_url)).await;
    let quiet = provision_tenant_at(&app.pool, "quiet", Some(&platforms.base_url)).await;
    let gate = Arc::new(Semaphore::new(0));
    let busy_agent = FakeAgent::start_gated(&busy.dispatch_secret, gate.clone()).await;
    let quiet_agent = FakeAgent::start(&quiet.dispatch_secret).await;
    let mut owner = app.db.owner_conn().await;
    for (tenant, url, cap) in [
        (busy.tenant, &busy_agent.url, Some(2)),
        (quiet.tenant, &quiet_agent.url, None),
    ] {
        sqlx::query("update tenants set agent_url = $2, max_in_flight = $3 where id = $1")
            .bind(tenant)
            .bind(url)
            .bind(cap)
            .execute(&mut owner)
            .await
            .unwrap();
    }
    link_people(&app, busy.tenant, 6).await;
    for n in 0..6 {
        let body = telegram_from(3000 + n as i64, &person(n), &format!("busy {n}"));
        deliver(&app, &busy, Platform::Telegram, body).await;
    }
    deliver(&app, &quiet, Platform::Telegram, telegram_text(3100, "quiet one")).await;
    let dispatcher = Dispatcher::new(worker_with(&app, |s| s.max_in_flight = 10));
    let stop = run_dispatcher(&dispatcher);

    // The busy tenant's agent holds its two calls; the quiet tenant is answered meanwhile.
    busy_agent.wait_for_calls(2).await;
    platforms.wait_for_sends(1).await;
    assert_eq!(platforms.sent()[0].text(), "answer to quiet one (0 before)");
    assert_eq!(
        busy_agent.calls().len(),
        2,
        "the busy tenant stays at its cap of 2"
    );

    gate.add_permits(6);
    platforms.wait_for_sends(7).await;
    stop.send_replace(true);
    assert_eq!(busy_agent.max_in_flight(), 2);
}

/// Three parts from the agent, posted to Slack (where an interrupted send can be looked up).
async fn three_part_slack_turn(app: &TestApp, tenant: &Provisioned, agent: &FakeAgent) {
    let parts = json!({"messages": [
        {"role": "assistant", "content": "part one"},
        {"role": "assistant", "content": "part two"},
        {"role": "assistant", "content": "part three"}]});
    agent.script([Reply::Json(200, parts, None)]);
    deliver(
        app,
        tenant,
        Platform::Slack,
        slack_text("1700000000.000100", "tell me"),
    )
    .await;
}

async fn lease_end(app: &TestApp) -> chrono::DateTime<chrono::Utc> {
    let mut owner = app.db.owner_conn().await;
    sqlx::query_scalar("select available_at from dispatch_queue")
        .fetch_one(&mut owner)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_lease_is_renewed_while_a_slow_platform_posts_and_every_part_is_posted_once() {
    let app = spawn_app().await;
    let platforms = FakePlatforms::start().await;
    let tenant = provision_tenant_at(&app.pool, "acme", Some(&platforms.base_url)).await;
    let agent = FakeAgent::start(&tenant.dispatch_secret).await;
    three_part_slack_turn(&app, &tenant, &agent).await;
    let slow = Arc::new(Semaphore::new(0));
    platforms.script(Platform::Slack, [Answer::OkWhenReleased(slow.clone())]);
    // A short lease, renewed every 2 s; the platform may take up to 5 s.
    let dispatcher = Dispatcher::new(worker(&app, &agent.url, |s| {
        s.dispatch.lease_secs = 6;
        s.dispatch.agent_timeout_secs = 1;
        s.dispatch.platform_timeout_secs = 5;
    }));
    let stop = run_dispatcher(&dispatcher);

    platforms.wait_for_sends(1).await;
    let first_end = lease_end(&app).await;
    // The platform is still answering the first part; the lease keeper extends the lease.
    eventually("the lease is renewed while the part is being posted", || async {
        lease_end(&app).await > first_end
    })
    .await;
    let other = worker(&app, &agent.url, |_| {});
    assert_eq!(
        other.step().await.unwrap(),
        StepOutcome::Empty,
        "nobody else can take the job"
    );

    slow.add_permits(1);
    platforms.wait_for_sends(3).await;
    let texts: Vec<String> = platforms.sent().iter().map(|s| s.text().to_owned()).collect();
    assert_eq!(texts, ["part one", "part two", "part three"]);
    eventually("the job ends", || async { dispatcher.in_flight() == 0 }).await;
    stop.send_replace(true);
    let mut owner = app.db.owner_conn().await;
    let queued: i64 = sqlx::query_scalar("select count(*) from dispatch_queue")
        .fetch_one(&mut owner)
        .await
        .unwrap();
    assert_eq!(queued, 0);
}

#[tokio::test]
async fn a_holder_that_lost_its_lease_stops_before_its_next_part() {
    let app = spawn_app().await;
    let platforms = FakePlatforms::start().await;
    let tenant = provision_tenant_at(&app.pool, "acme", Some(&platforms.base_url)).await;
    let agent = FakeAgent::start(&tenant.dispatch_secret).await;
    three_part_slack_turn(&app, &tenant, &agent).await;
    let slow = Arc::new(Semaphore::new(0));
    platforms.script(Platform::Slack, [Answer::OkWhenReleased(slow.clone())]);
    let stale = worker(&app, &agent.url, |_| {});
    let holder = tokio::spawn({
        let stale = stale.clone();
        async move { stale.step().await }
    });

    // Part one is on its way when the lease runs out (no keeper here) and another
    // instance takes the job: it finds part one in the thread and posts the rest.
    platforms.wait_for_sends(1).await;
    let mut owner = app.db.owner_conn().await;
    sqlx::query("update dispatch_queue set available_at = now() - interval '1 second'")
        .execute(&mut owner)
        .await
        .unwrap();
    // (It looks in the thread at once rather than waiting for Slack's confirmation event.)
    let successor = worker(&app, &agent.url, |s| s.dispatch.slack_confirm_secs = 0);
    let outcome = successor.step().await.unwrap();
    assert!(matches!(outcome, StepOutcome::Delivered(_)), "{outcome:?}");

    // The first holder hears back about part one now: it records it, and sends nothing more.
    slow.add_permits(1);
    let outcome = holder.await.unwrap().unwrap();
    assert!(matches!(outcome, StepOutcome::LeaseLost(_)), "{outcome:?}");
    let texts: Vec<String> = platforms.sent().iter().map(|s| s.text().to_owned()).collect();
    assert_eq!(
        texts,
        ["part one", "part two", "part three"],
        "each part posted once"
    );
    let statuses: Vec<String> = sqlx::query_scalar("select status from channel_replies order by part_index")
        .fetch_all(&mut owner)
        .await
        .unwrap();
    assert_eq!(statuses, ["sent", "sent", "sent"]);
}

#[tokio::test]
async fn an_agent_down_for_many_attempts_still_answers_every_turn_in_order_once_it_is_back() {
    let app = spawn_app().await;
    let platforms = FakePlatforms::start().await;
    let tenant = provision_tenant_at(&app.pool, "acme", Some(&platforms.base_url)).await;
    let agent = FakeAgent::start(&tenant.dispatch_secret).await;
    // More failures than the old limit of 5 attempts (about 12 s of backoff).
    agent.script((0..8).map(|_| Reply::Json(503, json!({"error": "restarting"}), None)));
    let worker = worker(&app, &agent.url, |_| {});
    deliver(&app, &tenant, Platform::Telegram, telegram_text(4001, "first")).await;
    deliver(&app, &tenant, Platform::Telegram, telegram_text(4002, "second")).await;

    let mut outcomes = Vec::new();
    for _ in 0..20 {
        match worker.step().await.unwrap() {
            StepOutcome::Empty => break,
            outcome => outcomes.push(outcome),
        }
        if outcomes.len() == 8 {
            let mut owner = app.db.owner_conn().await;
            let error: String =
                sqlx::query_scalar("select last_error from channel_messages where request_content = 'first'")
                    .fetch_one(&mut owner)
                    .await
                    .unwrap();
            let host = agent
                .url
                .trim_start_matches("http://")
                .split('/')
                .next()
                .unwrap()
                .to_owned();
            assert_eq!(error, format!("agent {host} answered 503 Service Unavailable"));
        }
    }

    assert!(
        outcomes[..8]
            .iter()
            .all(|o| matches!(o, StepOutcome::Retrying(_))),
        "{outcomes:?}"
    );
    assert!(matches!(outcomes[8], StepOutcome::Executed(_)), "{outcomes:?}");
    assert!(matches!(outcomes[9], StepOutcome::Executed(_)), "{outcomes:?}");
    let contents: Vec<String> = agent.calls().iter().map(|c| c.payload.content.clone()).collect();
    assert_eq!(
        contents[..9].iter().filter(|c| *c == "first").count(),
        9,
        "the second waited"
    );
    assert_eq!(contents[9], "second");
    let texts: Vec<String> = platforms.sent().iter().map(|s| s.text().to_owned()).collect();
    assert_eq!(
        texts,
        ["answer to first (0 before)", "answer to second (2 before)"]
    );
}

#[tokio::test]
async fn a_turn_fails_for_good_once_its_retry_horizon_has_passed() {
    let app = spawn_app().await;
    let platforms = FakePlatforms::start().await;
    let tenant = provision_tenant_at(&app.pool, "acme", Some(&platforms.base_url)).await;
    let agent = FakeAgent::start(&tenant.dispatch_secret).await;
    agent.script([Reply::Json(503, json!({}), None)]);
    let worker = worker(&app, &agent.url, |s| s.dispatch.retry_horizon_secs = 3600);
    deliver(&app, &tenant, Platform::Telegram, telegram_text(4101, "too late")).await;
    let mut owner = app.db.owner_conn().await;
    sqlx::query("update dispatch_queue set enqueued_at = now() - interval '2 hours'")
        .execute(&mut owner)
        .await
        .unwrap();

    let outcome = worker.step().await.unwrap();
    assert!(matches!(outcome, StepOutcome::Failed(_)), "{outcome:?}");
    let status: String = sqlx::query_scalar("select status from channel_messages")
        .fetch_one(&mut owner)
        .await
        .unwrap();
    assert_eq!(status, "dispatch_failed");
}

#[tokio::test]
async fn an_idle_instance_sends_at_most_one_statement_per_polling_tick() {
    let proxy = DbProxy::start(upstream_addr()).await;
    let poll = Duration::from_millis(50);
    let app = spawn_app_with(|settings, db| {
        db.route_via(&mut settings.database, proxy.addr);
        settings.worker = true;
        settings.dispatch.poll_interval_ms = poll.as_millis() as u64;
    })
    .await;
    assert_eq!(
        app.client.get(app.url("/readyz")).send().await.unwrap().status(),
        200
    );

    // Ten statements, counted once start-up is behind: with one per tick they take at least
    // seven ticks even if the queue metrics (two statements) land in the window. A
    // poller per task would send them in a few milliseconds.
    let target = proxy.statements() + 10;
    eventually("start-up statements", || async { proxy.statements() >= target }).await;
    let (start, started) = (proxy.statements(), Instant::now());
    eventually("ten polling statements", || async {
        proxy.statements() >= start + 10
    })
    .await;
    let elapsed = started.elapsed();
    assert!(
        elapsed >= poll * 7,
        "10 statements in {elapsed:?}, polling every {poll:?}"
    );
}

#[tokio::test]
async fn changes_of_several_turns_applied_together_each_get_their_own_outcome() {
    use channel_bridge::db::queue::LeaseToken;
    use channel_bridge::turn::{apply, Applied, Change, Transition};

    let app = spawn_app().await;
    let tenant = provision_tenant(&app.pool, "acme").await;
    link_people(&app, tenant.tenant, 3).await;
    for n in 0..3 {
        let body = telegram_from(5000 + n as i64, &person(n), &format!("turn {n}"));
        deliver(&app, &tenant, Platform::Telegram, body).await;
    }
    let worker = worker_with(&app, |_| {});
    let mut jobs: Vec<_> = worker
        .claim(&request(3))
        .await
        .unwrap()
        .into_iter()
        .map(|c| c.job)
        .collect();
    jobs.sort_by_key(|job| job.conversation_key.clone());
    let change = |i: usize, lease: LeaseToken, transition: Transition| Change {
        message: jobs[i].message_id,
        lease,
        transition,
    };
    let answered = |text: &str| Transition::Answered {
        response: text.into(),
        reply: Box::new(channel_bridge::db::parts::Reply::text(vec![text.into()])),
        agent_ms: None,
        handoff: None,
    };
    let changes = [
        change(0, jobs[0].lease, answered("for 0")),
        change(1, LeaseToken(uuid::Uuid::new_v4()), answered("not the holder")),
        change(
            2,
            jobs[2].lease,
            Transition::AgentRetry {
                error: "agent down".into(),
                delay: Duration::from_secs(60),
            },
        ),
        // A stale holder of job 0 in the same batch as its real holder.
        change(0, LeaseToken(uuid::Uuid::new_v4()), answered("stale")),
    ];

    let mut tx = app.tenant_tx(tenant.tenant).await;
    let refs: Vec<&Change> = changes.iter().collect();
    let applied = apply::apply_many(&mut tx, &refs).await.unwrap();
    tx.commit().await.unwrap();

    assert_eq!(
        applied,
        [
            Applied::Stored { first: true },
            Applied::LeaseLost,
            Applied::Done,
            Applied::LeaseLost
        ]
    );
    let mut owner = app.db.owner_conn().await;
    /// status, response, last error, job stage, leased.
    type Row = (String, Option<String>, Option<String>, Option<String>, bool);
    let rows: Vec<Row> = sqlx::query_as(
        "select m.status, m.response_content, m.last_error, q.stage, q.lease_owner is not null
           from channel_messages m join dispatch_queue q on q.message_id = m.id
          order by m.conversation_key",
    )
    .fetch_all(&mut owner)
    .await
    .unwrap();
    assert_eq!(
        rows,
        [
            (
                "executed".into(),
                Some("for 0".into()),
                None,
                Some("reply".into()),
                true
            ),
            ("dispatching".into(), None, None, Some("dispatch".into()), true),
            (
                "dispatching".into(),
                None,
                Some("agent down".into()),
                Some("dispatch".into()),
                false
            ),
        ]
    );
    let part: (String, i32) = sqlx::query_as("select status, attempts from channel_replies")
        .fetch_one(&mut owner)
        .await
        .unwrap();
    assert_eq!(
        part,
        ("sending".into(), 1),
        "the first part is marked with the stored answer"
    );
}

/// The reproduction from the issue, in real time: lease 6 s, agent timeout 4 s, the agent
/// answering 3 parts after 3.5 s, the platform taking 3 s per post; two instances. The
/// reply takes 12.5 s, twice the lease: without renewal the second instance would take the
/// job over and post again.
#[tokio::test]
async fn a_reply_that_outlasts_the_lease_is_posted_once_across_two_instances() {
    let app = spawn_app().await;
    let platforms = FakePlatforms::start().await;
    let tenant = provision_tenant_at(&app.pool, "acme", Some(&platforms.base_url)).await;
    let agent = FakeAgent::start(&tenant.dispatch_secret).await;
    let parts = json!({"messages": [
        {"role": "assistant", "content": "part one"},
        {"role": "assistant", "content": "part two"},
        {"role": "assistant", "content": "part three"}]});
    agent.script([Reply::JsonAfter(Duration::from_millis(3500), parts)]);
    let slow = Duration::from_secs(3);
    platforms.script(
        Platform::Telegram,
        [
            Answer::OkAfter(slow),
            Answer::OkAfter(slow),
            Answer::OkAfter(slow),
        ],
    );
    let instance = || {
        Dispatcher::new(worker(&app, &agent.url, |s| {
            s.dispatch.lease_secs = 6;
            s.dispatch.agent_timeout_secs = 4;
            s.dispatch.platform_timeout_secs = 5;
            s.dispatch.poll_interval_ms = 100;
        }))
    };
    let (first, second) = (instance(), instance());
    let stops = [run_dispatcher(&first), run_dispatcher(&second)];
    deliver(
        &app,
        &tenant,
        Platform::Telegram,
        telegram_text(6001, "long answer please"),
    )
    .await;

    platforms.wait_for_sends(3).await;
    eventually("the job ends", || async {
        first.in_flight() + second.in_flight() == 0
    })
    .await;
    for stop in stops {
        stop.send_replace(true);
    }

    let texts: Vec<String> = platforms.sent().iter().map(|s| s.text().to_owned()).collect();
    assert_eq!(
        texts,
        ["part one", "part two", "part three"],
        "each part posted once"
    );
    assert_eq!(agent.calls().len(), 1, "the agent was called once");
    let mut owner = app.db.owner_conn().await;
    let delivered: bool = sqlx::query_scalar("select delivered_at is not null from channel_messages")
        .fetch_one(&mut owner)
        .await
        .unwrap();
    assert!(delivered);
}

#[tokio::test]
async fn a_bots_flood_control_holds_all_its_sends_not_each_turn_on_its_own_clock() {
    let app = spawn_app().await;
    let platforms = FakePlatforms::start().await;
    let tenant = provision_tenant_at(&app.pool, "acme", Some(&platforms.base_url)).await;
    let agent = FakeAgent::start(&tenant.dispatch_secret).await;
    let people = 10;
    link_people(&app, tenant.tenant, people).await;
    let parts = json!({"messages": [{"role": "assistant", "content": "one"},
                                    {"role": "assistant", "content": "two"},
                                    {"role": "assistant", "content": "three"}]});
    agent.script((0..people).map(|_| Reply::Json(200, parts.clone(), None)));
    // Telegram answers every sendMessage of the bot with 429, retry after 1 s, for 3 s.
    let window = Duration::from_secs(3);
    let flood_ends = Instant::now() + window;
    platforms.flood_control(Platform::Telegram, flood_ends, 1);
    for n in 0..people {
        let body = telegram_from(6000 + n as i64, &person(n), &format!("hello {n}"));
        deliver(&app, &tenant, Platform::Telegram, body).await;
    }
    let dispatcher = Dispatcher::new(worker(&app, &agent.url, |s| {
        s.max_in_flight = 16;
        s.tenant_share_percent = 100;
    }));
    let stop = run_dispatcher(&dispatcher);
    let posted = |sent: &[crate::support::fake_platforms::Sent]| {
        sent.iter()
            .filter(|s| s.path.ends_with("/sendMessage") && s.at >= flood_ends)
            .count()
    };
    eventually("every part is posted once the flood control ends", || async {
        posted(&platforms.sent_to(Platform::Telegram)) >= people * 3
    })
    .await;
    stop.send_replace(true);

    let sent = platforms.sent_to(Platform::Telegram);
    let into_the_window = sent.iter().filter(|s| s.at < flood_ends).count();
    eprintln!("{into_the_window} requests into the flood control");
    // Each turn's first send may have left before the first 429 came back; after it, one
    // probe a second. Each turn retrying on its own clock sent about people × 3.
    assert!(
        into_the_window <= people + 4,
        "{into_the_window} requests into a {window:?} flood control"
    );
    assert_eq!(posted(&sent), people * 3, "each part once, nothing doubled");
    for n in 0..people {
        let chat = person(n);
        let texts: Vec<&str> = sent
            .iter()
            .filter(|s| s.at >= flood_ends && s.body["chat_id"].to_string().trim_matches('"') == chat)
            .map(|s| s.text())
            .collect();
        assert_eq!(texts, ["one", "two", "three"], "person {n}: in order");
    }
}

#[tokio::test]
async fn a_429_met_by_one_instance_holds_the_connectors_sends_on_another() {
    let app = spawn_app().await;
    let platforms = FakePlatforms::start().await;
    let tenant = provision_tenant_at(&app.pool, "acme", Some(&platforms.base_url)).await;
    let agent = FakeAgent::start(&tenant.dispatch_secret).await;
    link_people(&app, tenant.tenant, 2).await;
    platforms.flood_control(Platform::Telegram, Instant::now() + Duration::from_secs(60), 30);
    let (first, second) = (worker(&app, &agent.url, |_| {}), worker(&app, &agent.url, |_| {}));

    deliver(
        &app,
        &tenant,
        Platform::Telegram,
        telegram_from(7001, &person(0), "one"),
    )
    .await;
    assert!(matches!(first.step().await.unwrap(), StepOutcome::Executed(_)));
    assert_eq!(
        platforms.sent_to(Platform::Telegram).len(),
        1,
        "the send that met the 429"
    );
    let mut owner = app.db.owner_conn().await;
    let held: f64 = sqlx::query_scalar(
        "select extract(epoch from sends_held_until - now())::float8 from channel_connectors where id = $1",
    )
    .bind(tenant.telegram)
    .fetch_one(&mut owner)
    .await
    .unwrap();
    assert!(
        (28.0..=31.0).contains(&held),
        "held for the platform's delay: {held}"
    );

    // Another instance, which never met the 429, sends nothing for the held bot.
    deliver(
        &app,
        &tenant,
        Platform::Telegram,
        telegram_from(7002, &person(1), "two"),
    )
    .await;
    let StepOutcome::Executed(id) = second.step().await.unwrap() else {
        panic!("the second turn is answered");
    };
    assert_eq!(
        platforms.sent_to(Platform::Telegram).len(),
        1,
        "no request while held"
    );
    let status: String =
        sqlx::query_scalar("select status from channel_replies where message_id = $1 and part_index = 0")
            .bind(id)
            .fetch_one(&mut owner)
            .await
            .unwrap();
    assert_eq!(status, "pending", "the part waits for the hold");
}
