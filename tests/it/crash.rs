//! A real database crash, and the commit whose acknowledgement it loses: no reply lost,
//! none posted twice, none recorded `unknown` whose send the platform answered, and jobs
//! that resume within seconds of the database's return, not after a lease
//! (docs/delivery.md#when-the-database-is-out-of-reach).
//!
//! The crashes are real (`support::private_pg`: a cluster of the test's own, stopped with
//! `pg_ctl stop -m immediate`); a lost acknowledgement is made deterministic by a proxy that
//! lets the server commit and drops its answer. `CB_CRASH_RUNS` and `CB_CRASH_UPDATES` make
//! the load runs longer (docs/benchmarks.md gives the counts of 20 runs).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use channel_bridge::db::parts::ReplyPart;
use channel_bridge::dispatch::{StepOutcome, Worker};
use channel_bridge::domain::{MessageId, Platform, TenantId};
use channel_bridge::settings::ServeSettings;
use channel_bridge::startup::Application;
use sqlx::PgPool;
use tokio::sync::Semaphore;

use crate::support::db_proxy::{upstream_addr, DbProxy};
use crate::support::fake_agent::FakeAgent;
use crate::support::fake_platforms::{Answer, FakePlatforms};
use crate::support::pipeline::statuses;
use crate::support::platforms::{provision_tenant_at, signed_headers, telegram_text, Provisioned};
use crate::support::private_pg::PrivateCluster;
use crate::support::{eventually, Pipeline};

/// In the statement that stores an answer and creates its parts (`turn::apply`).
const STORES_THE_ANSWER: &str = "with stored as";

const RETRY_PACE: Duration = Duration::from_millis(20);

const DELIVERY_MODES: [&str; 2] = ["at_most_once", "at_least_once"];

fn unix_now() -> i64 {
    chrono::Utc::now().timestamp()
}

/// Through a new pool: the connections of one from before a crash are gone.
async fn parts_of(url: &str, tenant: TenantId, message: MessageId) -> Vec<ReplyPart> {
    let settings = channel_bridge::settings::DatabaseSettings::from_url(url.to_owned());
    let pool = channel_bridge::db::connect_pool(&settings).unwrap();
    let mut tx = channel_bridge::db::TenantTx::begin(&pool, tenant).await.unwrap();
    channel_bridge::db::parts::reply_parts(&mut tx, message)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_lost_acknowledgement_of_the_stored_answer_still_posts_the_reply_once() {
    for (n, mode) in (0..).zip(DELIVERY_MODES) {
        let p = Pipeline::start().await;
        p.owner_exec(&format!(
            "update channel_connectors set telegram_delivery = '{mode}' where platform = 'telegram'"
        ))
        .await;
        let proxy = DbProxy::start(upstream_addr()).await;
        let mut settings = p.app.db.serve_settings();
        settings.agent_url = Some(p.agent.url.clone());
        settings.dispatch.retry_base_ms = 0;
        p.app.db.route_via(&mut settings.database, proxy.addr);
        let pool = channel_bridge::db::connect_pool(&settings.database).unwrap();
        let worker = Worker::new(pool, Arc::new(settings), unix_now).unwrap();
        p.deliver(Platform::Telegram, telegram_text(41_000 + n, "hello"))
            .await;

        proxy.lose_commit_ack_after(STORES_THE_ANSWER);
        let outcome = worker.step().await.unwrap();

        assert_eq!(
            proxy.acks_lost(),
            1,
            "{mode}: the answer's commit lost its acknowledgement"
        );
        let StepOutcome::Executed(id) = outcome else {
            panic!("{mode}: {outcome:?}")
        };
        assert_eq!(
            p.platforms.sent_to(Platform::Telegram).len(),
            1,
            "{mode}: posted once"
        );
        let parts = p.parts(id).await;
        assert_eq!(statuses(&parts), ["sent"], "{mode}");
        assert!(parts[0].platform_message_id.is_some(), "{mode}");
        assert_eq!(parts[0].attempts, 1, "{mode}: one send attempt");
        assert!(p.delivered(id).await, "{mode}");
        let jobs: i64 = p.owner_scalar("select count(*) from dispatch_queue").await;
        assert_eq!(jobs, 0, "{mode}: the job ended with the turn");
    }
}

/// An application and a hand-driven worker on a private cluster the test can crash.
struct CrashRig {
    cluster: PrivateCluster,
    /// Webhooks answered 200 so far.
    accepted: std::sync::atomic::AtomicI64,
    platforms: FakePlatforms,
    agent: FakeAgent,
    tenant: Provisioned,
    web: std::net::SocketAddr,
    client: reqwest::Client,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl CrashRig {
    /// `None` where the server binaries are missing. `worker`: the application runs its
    /// own dispatcher (as `serve` does); otherwise the test drives `worker()`.
    async fn start(worker: bool) -> Option<Self> {
        let cluster = PrivateCluster::start().await?;
        let database = cluster.migrated("crash").await;
        let pool = channel_bridge::db::connect_pool(&database).unwrap();
        let platforms = FakePlatforms::start().await;
        let tenant = provision_tenant_at(&pool, "acme", Some(&platforms.base_url)).await;
        let agent = FakeAgent::start(&tenant.dispatch_secret).await;
        let mut settings = ServeSettings::for_database(cluster.url("crash"));
        settings.agent_url = Some(agent.url.clone());
        settings.worker = worker;
        let app = Application::build(settings)
            .await
            .expect("the application builds");
        let web = app.local_addr().expect("HTTP is on");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(app.run_until(async {
            let _ = stopped.await;
        }));
        Some(Self {
            cluster,
            accepted: Default::default(),
            platforms,
            agent,
            tenant,
            web,
            client: reqwest::Client::new(),
            stop: Some(stop),
        })
    }

    fn worker(&self) -> Arc<Worker> {
        let mut settings = ServeSettings::for_database(self.cluster.url("crash"));
        settings.agent_url = Some(self.agent.url.clone());
        settings.dispatch.retry_base_ms = 0;
        let pool = channel_bridge::db::connect_pool(&settings.database).unwrap();
        Arc::new(Worker::new(pool, Arc::new(settings), unix_now).unwrap())
    }

    async fn post(&self, body: Vec<u8>) -> reqwest::Response {
        let url = format!("http://{}{}", self.web, self.tenant.hook_path(Platform::Telegram));
        let mut request = self.client.post(url).body(body.clone());
        for (name, value) in signed_headers(Platform::Telegram, &body) {
            request = request.header(name, value);
        }
        request.send().await.expect("the gateway answers")
    }

    /// As a platform does: again until it gets its 200.
    async fn post_until_accepted(&self, body: Vec<u8>) -> usize {
        let mut refused = 0;
        loop {
            match self.post(body.clone()).await.status().as_u16() {
                200 => {
                    self.accepted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    return refused;
                }
                503 => refused += 1,
                other => panic!("a webhook was answered {other}"),
            }
            // A platform's pace between retries (they wait seconds; this is quicker).
            tokio::time::sleep(RETRY_PACE).await;
        }
    }

    /// What holds the turns not yet delivered, for a failure's message.
    async fn stuck(&self) -> String {
        type Turn = (
            String,
            i32,
            Option<String>,
            Option<String>,
            Option<String>,
            Option<String>,
        );
        let owner = self.owner().await;
        let turns: Vec<Turn> = sqlx::query_as(
            "select m.status, m.attempts, m.last_error, q.stage,
                    (q.available_at - now())::text, q.lease_owner::text
               from channel_messages m left join dispatch_queue q on q.message_id = m.id
              where m.delivered_at is null order by m.received_at limit 20",
        )
        .fetch_all(&owner)
        .await
        .unwrap_or_default();
        let parts: Vec<(String, i32, Option<String>)> = sqlx::query_as(
            "select status, attempts, last_error from channel_replies where status <> 'sent' limit 20",
        )
        .fetch_all(&owner)
        .await
        .unwrap_or_default();
        let sent = self.platforms.sent().len();
        format!("{sent} sent; undelivered turns {turns:?}; unsent parts {parts:?}")
    }

    async fn scalar(&self, sql: &str) -> i64 {
        sqlx::query_scalar(sql)
            .fetch_one(&self.owner().await)
            .await
            .unwrap()
    }

    async fn owner(&self) -> PgPool {
        // The owner's own connection: the application's pool runs as the app role.
        PgPool::connect(&self.cluster.url("crash")).await.unwrap()
    }

    async fn owner_exec(&self, sql: &str) {
        let owner = self.owner().await;
        for statement in sql.split(';').filter(|s| !s.trim().is_empty()) {
            sqlx::query(statement).execute(&owner).await.unwrap();
        }
    }
}

impl Drop for CrashRig {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_between_a_send_and_its_state_write_records_the_part_sent_and_posts_it_once() {
    for (n, mode) in (0..).zip(DELIVERY_MODES) {
        let Some(rig) = CrashRig::start(false).await else {
            return;
        };
        rig.owner_exec(&format!(
            "update channel_connectors set telegram_delivery = '{mode}' where platform = 'telegram'"
        ))
        .await;
        let answered = Arc::new(Semaphore::new(0));
        rig.platforms
            .script(Platform::Telegram, [Answer::OkWhenReleased(answered.clone())]);
        assert_eq!(rig.post(telegram_text(41_100 + n, "hello")).await.status(), 200);
        let worker = rig.worker();
        let step = tokio::spawn(async move { worker.step().await.unwrap() });
        rig.platforms.wait_for_sends(1).await;

        rig.cluster.crash().await;
        answered.add_permits(1);
        eventually("the platform's answer was taken", || async {
            answered.available_permits() == 0
        })
        .await;
        rig.cluster.start_again().await;
        let outcome = step.await.unwrap();

        let StepOutcome::Executed(id) = outcome else {
            panic!("{mode}: {outcome:?}")
        };
        assert_eq!(
            rig.platforms.sent_to(Platform::Telegram).len(),
            1,
            "{mode}: posted once"
        );
        let parts = parts_of(&rig.cluster.url("crash"), rig.tenant.tenant, id).await;
        assert_eq!(statuses(&parts), ["sent"], "{mode}: the platform's id was kept");
        assert!(parts[0].platform_message_id.is_some(), "{mode}");
        let delivered = rig
            .scalar("select count(*) from channel_messages where delivered_at is not null")
            .await;
        assert_eq!(delivered, 1, "{mode}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_database_answers_webhooks_503_and_takes_each_once_it_writes_again() {
    let Some(rig) = CrashRig::start(false).await else {
        return;
    };
    rig.owner_exec("alter system set default_transaction_read_only = on; select pg_reload_conf()")
        .await;
    let mut posted = 0;
    let refused = loop {
        posted += 1;
        let response = rig.post(telegram_text(41_200 + posted, "hello")).await;
        if response.status() == 503 {
            break response;
        }
        assert_eq!(response.status(), 200, "a webhook is 200 or 503, never 500");
    };
    assert_eq!(refused.headers()["retry-after"], "1");
    let ready = rig
        .client
        .get(format!("http://{}/readyz", rig.web))
        .send()
        .await
        .unwrap();
    assert_eq!(ready.status(), 503);
    let why: serde_json::Value = ready.json().await.unwrap();
    assert!(why["status"].as_str().unwrap().contains("cannot write"), "{why}");

    rig.owner_exec("alter system reset default_transaction_read_only; select pg_reload_conf()")
        .await;
    rig.post_until_accepted(telegram_text(41_200 + posted, "hello"))
        .await;
    let recorded = rig.scalar("select count(*) from channel_messages").await;
    assert_eq!(recorded, posted, "each webhook recorded once");
    eventually("ready again once a write succeeded", || async {
        let ready = rig.client.get(format!("http://{}/readyz", rig.web)).send().await;
        ready.is_ok_and(|r| r.status() == 200)
    })
    .await;
}

/// One Telegram user's update: `poster` is the chat, so conversations run side by side.
fn update_from(poster: i64, n: i64) -> Vec<u8> {
    let mut update: serde_json::Value = serde_json::from_slice(&telegram_text(0, "")).unwrap();
    let user = 500_000_000 + poster;
    update["update_id"] = (poster * 1_000_000 + n).into();
    update["message"]["message_id"] = (n + 1).into();
    update["message"]["from"]["id"] = user.into();
    update["message"]["chat"]["id"] = user.into();
    update["message"]["text"] = format!("turn {poster}/{n}").into();
    serde_json::to_vec(&update).unwrap()
}

/// What one crash run saw.
struct RunCounts {
    updates: i64,
    refused: usize,
    drained_after_restart: Duration,
    /// The turns recorded at the last restart, and when as many were answered.
    backlog: (i64, Duration),
}

/// `posters` platforms post `per_poster` updates each while the database crashes `crashes`
/// times (each restart as soon as the crash completes); then every turn must be recorded
/// once and answered once, and none recorded `unknown`.
async fn crash_run(posters: i64, per_poster: i64, crashes: usize) -> Option<RunCounts> {
    let rig = Arc::new(CrashRig::start(true).await?);
    // Each poster is a sender of its own, dispatched without a link.
    rig.owner_exec("update channel_connectors set unlinked_policy = 'allow'")
        .await;
    let posting: Vec<_> = (0..posters)
        .map(|poster| {
            let rig = rig.clone();
            tokio::spawn(async move {
                let mut refused = 0;
                for n in 0..per_poster {
                    refused += rig.post_until_accepted(update_from(poster, n)).await;
                }
                refused
            })
        })
        .collect();
    let updates = posters * per_poster;
    let mut restarted = Instant::now();
    let mut backlog = None;
    let shares = i64::try_from(crashes).unwrap_or(1) + 1;
    for crash in 1..shares {
        // Spread over the posting: crash `k` once k/(crashes+1) of the webhooks are in.
        let accepted = updates * crash / shares;
        eventually("a share of the webhooks is accepted before the crash", || async {
            rig.accepted.load(std::sync::atomic::Ordering::Relaxed) >= accepted
        })
        .await;
        rig.cluster.crash().await;
        rig.cluster.start_again().await;
        restarted = Instant::now();
        backlog = Some(tokio::spawn(backlog_answered(rig.clone(), restarted)));
    }
    let mut refused = 0;
    for poster in posting {
        refused += poster.await.unwrap();
    }
    // The posting goes on after the last restart: the wait grows with the updates.
    let deadline = Instant::now() + Duration::from_secs(20 + u64::try_from(updates / 40).unwrap_or(0));
    while (rig.platforms.sent().len() as i64) < updates {
        assert!(
            Instant::now() < deadline,
            "not every turn is answered: {}",
            rig.stuck().await
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let drained_after_restart = restarted.elapsed();
    let backlog = match backlog {
        Some(watch) => watch.await.unwrap(),
        None => (0, Duration::ZERO),
    };
    assert_answered_once(&rig, updates).await;
    Some(RunCounts {
        updates,
        refused,
        drained_after_restart,
        backlog,
    })
}

/// The turns recorded when the database came back, and how long after `restarted` as many
/// answers had been sent: how soon the work the crash interrupted was done, apart from the
/// webhooks still to come.
async fn backlog_answered(rig: Arc<CrashRig>, restarted: Instant) -> (i64, Duration) {
    let recorded = rig.scalar("select count(*) from channel_messages").await;
    while (rig.platforms.sent().len() as i64) < recorded {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    (recorded, restarted.elapsed())
}

async fn assert_answered_once(rig: &CrashRig, updates: i64) {
    eventually("every turn is delivered", || async {
        rig.scalar("select count(*) from channel_messages where delivered_at is not null")
            .await
            == updates
    })
    .await;
    assert_eq!(rig.scalar("select count(*) from channel_messages").await, updates);
    let unknown = rig
        .scalar("select count(*) from channel_replies where status <> 'sent'")
        .await;
    assert_eq!(unknown, 0, "every part is sent, none unknown or failed");
    let mut posts: HashMap<String, usize> = HashMap::new();
    for sent in rig.platforms.sent_to(Platform::Telegram) {
        *posts.entry(sent.text().to_owned()).or_default() += 1;
    }
    assert_eq!(posts.len() as i64, updates, "one answer per turn");
    let doubled: Vec<_> = posts.iter().filter(|(_, n)| **n > 1).collect();
    assert!(doubled.is_empty(), "posted twice: {doubled:?}");
}

fn knob(name: &str, default: i64) -> i64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `runs` runs (the knob `runs_knob`, 1 by default) of `crash_run` with `crashes` crashes.
async fn crash_runs(name: &str, runs_knob: &str, crashes: usize) {
    for run in 0..knob(runs_knob, 1) {
        let updates = knob("CB_CRASH_UPDATES", 160);
        let Some(counts) = crash_run(8, updates / 8, crashes).await else {
            return;
        };
        let (backlog, answered) = counts.backlog;
        eprintln!(
            "{name} {run}: {} turns, {} webhooks answered 503 then retried; the {backlog} turns \
             recorded at the last restart answered {answered:?} after it, all {:?} after it",
            counts.updates, counts.refused, counts.drained_after_restart
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_under_webhook_load_loses_no_turn_and_answers_each_once() {
    crash_runs("crash run", "CB_CRASH_RUNS", 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_loop_loses_no_turn_and_answers_each_once() {
    crash_runs("crash loop run", "CB_CRASH_LOOP_RUNS", 3).await;
}
