//! The queue's two generations (docs/operations.md#the-queue-without-vacuum): new jobs go
//! into the current one, a drained one is truncated, conversations keep their order across
//! a switch, and a job still being written keeps its generation from being truncated.

use std::sync::Arc;
use std::time::Duration;

use channel_bridge::db::queue::{ClaimRequest, Queue, Rotation};
use channel_bridge::dispatch::dispatcher::Dispatcher;
use channel_bridge::dispatch::wakeup::Wakeup;
use channel_bridge::dispatch::StepOutcome;
use channel_bridge::domain::{MessageId, Platform};
use sqlx::PgConnection;
use tokio::sync::watch;

use crate::support::fake_agent::FakeAgent;
use crate::support::fake_platforms::FakePlatforms;
use crate::support::platforms::*;
use crate::support::{eventually, spawn_app, worker, TestApp};

/// One rotation step, taken again while it is `Busy` (another step holds the generations'
/// row, or a lock was not granted in time: both pass).
async fn step(queue: &Queue, switch_after: i64) -> Rotation {
    for _ in 0..100 {
        match queue.rotate(switch_after).await.unwrap() {
            Rotation::Busy => tokio::task::yield_now().await,
            step => return step,
        }
    }
    Rotation::Busy
}

fn one() -> ClaimRequest {
    ClaimRequest {
        wanted: 1,
        default_room: 1,
        lease: Duration::from_secs(60),
        ..Default::default()
    }
}

/// Each queued job's text and generation, oldest first (two statements: on Citus the queue
/// is the coordinator's own table, which cannot be joined with the sharded ones).
async fn queued(app: &TestApp) -> Vec<(String, i16)> {
    let mut owner = app.db.owner_conn().await;
    let jobs: Vec<(MessageId, i16)> =
        sqlx::query_as("select message_id, generation from dispatch_queue order by seq")
            .fetch_all(&mut owner)
            .await
            .unwrap();
    let ids: Vec<MessageId> = jobs.iter().map(|(id, _)| *id).collect();
    let texts = texts(app, &ids).await;
    texts
        .into_iter()
        .zip(jobs)
        .map(|(text, (_, generation))| (text, generation))
        .collect()
}

/// Pages of a generation's heap and indexes beyond their metapages: 0 once truncated.
async fn pages(owner: &mut PgConnection, generation: i16) -> i64 {
    sqlx::query_scalar(
        "select sum(pg_relation_size(c.oid) / 8192 - case when c.relkind = 'i' then 1 else 0 end)::int8
           from pg_class c
          where c.oid = format('dispatch_queue_%s', $1::int)::regclass
             or c.oid in (select indexrelid from pg_index
                           where indrelid = format('dispatch_queue_%s', $1::int)::regclass)",
    )
    .bind(generation)
    .fetch_one(owner)
    .await
    .unwrap()
}

#[tokio::test]
async fn a_conversation_keeps_its_order_across_a_switch_and_a_drained_generation_is_truncated() {
    let app = spawn_app().await;
    let platforms = FakePlatforms::start().await;
    let tenant = provision_tenant_at(&app.pool, "acme", Some(&platforms.base_url)).await;
    let agent = FakeAgent::start(&tenant.dispatch_secret).await;
    let worker = worker(&app, &agent.url, |_| {});
    let queue = worker.queue();
    for (update, text) in [(1, "first"), (2, "second")] {
        deliver(&app, &tenant, Platform::Telegram, telegram_text(update, text)).await;
    }
    assert_eq!(step(queue, 100).await, Rotation::Idle, "two jobs are not 100");
    assert_eq!(step(queue, 2).await, Rotation::Switched);
    deliver(&app, &tenant, Platform::Telegram, telegram_text(3, "third")).await;
    assert_eq!(
        queued(&app).await,
        [("first".into(), 0), ("second".into(), 0), ("third".into(), 1)]
    );
    assert_eq!(step(queue, 1).await, Rotation::Draining);

    let mut order = Vec::new();
    for _ in 0..3 {
        let mut claimed = worker.claim(&one()).await.unwrap();
        assert_eq!(claimed.len(), 1, "one head of the conversation at a time");
        let claimed = claimed.remove(0);
        order.push(claimed.job.message_id);
        assert!(
            worker.claim(&one()).await.unwrap().is_empty(),
            "the next waits for it"
        );
        let outcome = worker.run_job(claimed).await.unwrap();
        assert!(matches!(outcome, StepOutcome::Executed(_)), "{outcome:?}");
        if order.len() == 2 {
            let mut owner = app.db.owner_conn().await;
            assert!(pages(&mut owner, 0).await > 0, "generation 0 has its dead rows");
        }
    }
    assert_eq!(texts(&app, &order).await, ["first", "second", "third"]);
    assert_eq!(step(queue, 1).await, Rotation::Truncated);
    let mut owner = app.db.owner_conn().await;
    assert_eq!(pages(&mut owner, 0).await, 0, "truncated: no dead row is left");
    assert_eq!(step(queue, 1).await, Rotation::Switched, "one job taken since");
    deliver(&app, &tenant, Platform::Telegram, telegram_text(4, "fourth")).await;
    assert_eq!(queued(&app).await, [("fourth".into(), 0)]);
}

async fn texts(app: &TestApp, ids: &[MessageId]) -> Vec<String> {
    let mut owner = app.db.owner_conn().await;
    let mut texts = Vec::new();
    for id in ids {
        let text: String = sqlx::query_scalar("select request_content from channel_messages where id = $1")
            .bind(id)
            .fetch_one(&mut owner)
            .await
            .unwrap();
        texts.push(text);
    }
    texts
}

#[tokio::test]
async fn a_job_still_being_written_keeps_its_generation_from_being_truncated() {
    let app = spawn_app().await;
    let tenant = provision_tenant_at(&app.pool, "acme", None).await;
    let agent = FakeAgent::start(&tenant.dispatch_secret).await;
    let worker = worker(&app, &agent.url, |_| {});
    let queue = worker.queue();
    assert_eq!(
        step(queue, 0).await,
        Rotation::Switched,
        "generation 1 is current"
    );

    // A writer whose statement read the generation before the switch, not yet committed.
    let mut writer = app.db.owner_conn().await;
    sqlx::query("begin").execute(&mut writer).await.unwrap();
    sqlx::query(
        "insert into dispatch_queue (message_id, tenant_id, conversation_key, generation)
         values (gen_random_uuid(), $1, 'late', 0)",
    )
    .bind(tenant.tenant)
    .execute(&mut writer)
    .await
    .unwrap();
    assert_eq!(
        queue.rotate(1).await.unwrap(),
        Rotation::Busy,
        "generation 0 looks empty, but its lock is not granted while the write is open"
    );
    sqlx::query("commit").execute(&mut writer).await.unwrap();
    assert_eq!(step(queue, 1).await, Rotation::Draining, "the late job is kept");

    sqlx::query("delete from dispatch_queue where conversation_key = 'late'")
        .execute(&mut writer)
        .await
        .unwrap();
    assert_eq!(step(queue, 1).await, Rotation::Truncated);
}

#[tokio::test]
async fn a_running_dispatcher_switches_generations_and_truncates_the_drained_one() {
    let app = spawn_app().await;
    let platforms = FakePlatforms::start().await;
    let tenant = provision_tenant_at(&app.pool, "acme", Some(&platforms.base_url)).await;
    let agent = FakeAgent::start(&tenant.dispatch_secret).await;
    let dispatcher = Dispatcher::new(worker(&app, &agent.url, |settings| {
        settings.dispatch.queue_generation_jobs = 1;
    }));
    let (stop, stop_rx) = watch::channel(false);
    tokio::spawn(
        dispatcher
            .clone()
            .run(Arc::new(Wakeup::default()), stop_rx.clone()),
    );
    tokio::spawn(dispatcher.clone().keep_queue_fresh(stop_rx));

    let generation = || async {
        let mut owner = app.db.owner_conn().await;
        sqlx::query_as::<_, (i16, bool)>("select current, other_fresh from dispatch_queue_generation")
            .fetch_one(&mut owner)
            .await
            .unwrap()
    };
    deliver(&app, &tenant, Platform::Telegram, telegram_text(1, "one")).await;
    platforms.wait_for_sends(1).await;
    eventually("a switch to generation 1", || async { generation().await.0 == 1 }).await;
    deliver(&app, &tenant, Platform::Telegram, telegram_text(2, "two")).await;
    platforms.wait_for_sends(2).await;
    eventually("generation 0 truncated once drained", || async {
        let mut owner = app.db.owner_conn().await;
        generation().await.1 && pages(&mut owner, 0).await == 0
    })
    .await;
    // The platform got the second reply before the worker committed its end.
    eventually("the queue drained", || async { queued(&app).await.is_empty() }).await;
    stop.send_replace(true);
}
