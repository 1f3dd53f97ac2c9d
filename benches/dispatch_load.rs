//! Dispatch load benchmark: how many user turns per second the worker dispatches when the
//! tenant already holds a realistic amount of history, and what each database phase of a
//! dispatch costs.
//!
//! ```text
//! cargo bench --bench dispatch_load -- [--rows 1000000] [--users 1000] [--jobs 5000] [--max-in-flight N | --steps 16]
//! ```
//!
//! What one run does:
//! 1. creates a database `cb_bench_<random>` on DATABASE_URL's server (default
//!    postgres://postgres@127.0.0.1:5432/postgres) and migrates it with the app's `migrate`;
//! 2. provisions one tenant with a Telegram connector and `--users` linked senders;
//! 3. bulk-loads `--rows` terminal turns (mostly `executed` with a response, a few
//!    `dispatch_failed` and `ignored`) spread over those users and over 180 days, with
//!    `insert … select generate_series(…)` as the owner, then VACUUM ANALYZE and CHECKPOINT,
//!    so the measurement starts from a settled table rather than from setup debt;
//! 4. starts a local server on 127.0.0.1:0 playing the agent (verifies each Standard Webhooks
//!    signature, answers `{"content": "ok"}` at once, or `--answer-chars` of text) and the
//!    Telegram Bot API the reply is
//!    posted to (`sendMessage` answers `ok` with a message id at once); the connector's API
//!    base URL points at it;
//! 5. worker throughput: records `--jobs` turns through `ingress::record` (one per
//!    transaction, as one Telegram webhook each, round-robin over the users) and runs
//!    the instance's dispatcher (or, with `--steps N`, `Worker::step` from N tasks sharing
//!    one `Arc<Worker>`, the path the tests drive) until every job is
//!    done; prints dispatches/s (wall clock) and the step latency;
//! 6. phase costs: the worker's own histograms for that run, every sample captured by a
//!    debugging metrics recorder: `channel_bridge_dispatch_phase_seconds{phase}` (claim; prepare = mark
//!    `dispatching` + tenant + history + connector, committed with the claim; agent; reply =
//!    store the answer + post + settle), `channel_bridge_dispatch_history_seconds`, `channel_bridge_reply_send_seconds`
//!    (the platform request) and `channel_bridge_dispatch_own_seconds` (a step minus the agent call and
//!    the platform requests: what the worker itself costs per turn);
//! 7. history alone: `history::load` in a `TenantTx` for `--history-samples` random messages,
//!    one after another with nothing else running;
//! 8. with `--explain`, prints EXPLAIN (ANALYZE, BUFFERS) of the history read (a copy of
//!    the library's SQL, `HISTORY_SQL`) and of the library's own batch claim;
//! 9. drops the database (unless `--keep-db`).
//!
//! The bench process (worker and agent) and PostgreSQL share the machine's cores, so the
//! figures are a floor for a worker on its own hardware. `cargo bench` builds with the
//! bench profile (release).

#[allow(dead_code)] // each bench uses a part of it
mod common;

use channel_bridge::secrets::Keyring;
use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::{Json, Router};
use channel_bridge::db::queue::{ClaimRequest, Queue};
use channel_bridge::db::{self, TenantTx};
use channel_bridge::dispatch::dispatcher::Dispatcher;
use channel_bridge::dispatch::wakeup::Wakeup;
use channel_bridge::dispatch::{history, StepOutcome, Worker};
use channel_bridge::domain::{Address, Connector, MessageId, Platform, TenantId, UnlinkedPolicy};
use channel_bridge::platforms::inbound::{Inbound, InboundKind, InboundMessage};
use channel_bridge::settings::ServeSettings;
use channel_bridge::signature;
use channel_bridge::{ingress, provision};
use clap::Parser;
use common::cpu::{backend_ticks, machine_ticks, own_ticks};
use common::provision::{telegram_connector, BOT_ID};
use common::{filler_text, BenchDb};
use futures::{StreamExt, TryStreamExt};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use serde_json::json;
use sqlx::{Connection, Executor, PgConnection, PgPool, Row};

#[derive(Debug, Parser)]
#[command(about = "Dispatch worker load benchmark on a database with a realistic history")]
struct Args {
    /// Terminal history turns bulk-loaded before measuring.
    #[arg(long, default_value_t = 1_000_000)]
    rows: i64,
    /// Linked users the history and the jobs are spread over.
    #[arg(long, default_value_t = 1000)]
    users: i64,
    /// Jobs in the measured worker run.
    #[arg(long, default_value_t = 5000)]
    jobs: usize,
    /// Drive the worker with `Worker::step` from this many tasks (each claims one job at a
    /// time, as tests do) instead of the instance's dispatcher.
    #[arg(long)]
    steps: Option<usize>,
    /// The dispatcher's in-flight ceiling (CB_MAX_IN_FLIGHT; default: the server default).
    #[arg(long)]
    max_in_flight: Option<usize>,
    /// Turns of one extra user queued ahead of each run's jobs, behind a head put back by
    /// `Queue::retry_later` for an hour (as when the agent keeps failing that user's turn):
    /// they stay queued through the run, and show what blocked jobs cost other claims.
    #[arg(long, default_value_t = 0)]
    stalled_backlog: usize,
    /// Length of the agent's answer (default: `ok`). Real answers are hundreds of
    /// characters; a longer answer makes the stored row grow.
    #[arg(long)]
    answer_chars: Option<usize>,
    /// Sets channel_messages' fillfactor before the load, to compare storage settings
    /// (default: whatever the migrations set).
    #[arg(long)]
    fillfactor: Option<u8>,
    /// Random messages whose history is read alone.
    #[arg(long, default_value_t = 2000)]
    history_samples: i64,
    /// The worker's pool size (default: the server default 16, or --concurrency if larger).
    #[arg(long)]
    pool_size: Option<u32>,
    /// Print EXPLAIN (ANALYZE, BUFFERS) of the history read and the claim on the loaded data.
    #[arg(long)]
    explain: bool,
    /// Keep the database afterwards (for manual EXPLAIN) instead of dropping it.
    #[arg(long)]
    keep_db: bool,
    /// Passed by `cargo bench` to every bench binary; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

/// Telegram sender ids of the bench users start here (a realistic 9-digit id).
const FIRST_SENDER_ID: i64 = 100_000_000;
/// Rows per bulk-load statement, and the owner connections loading in parallel (one per
/// core of the 2-core reference machine).
const LOAD_CHUNK: i64 = 50_000;
const LOAD_CONNECTIONS: usize = 2;
/// Turns recorded through `ingress::record` at the same time while enqueueing.
const ENQUEUE_CONCURRENCY: usize = 8;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    anyhow::ensure!(
        args.rows >= 0 && args.users > 0,
        "--rows must be >= 0 and --users > 0"
    );
    anyhow::ensure!(
        args.jobs > 0 && args.steps != Some(0),
        "--jobs and --steps must be > 0"
    );
    let db = BenchDb::create().await?;
    println!("database {} (migrated)", db.name);
    let outcome = run(&args, &db).await;
    if args.keep_db {
        println!("database {} kept: {}", db.name, db.url);
    } else {
        db.drop_now().await;
    }
    outcome
}

async fn run(args: &Args, db: &BenchDb) -> anyhow::Result<()> {
    let mut settings = ServeSettings::for_database(db.url.clone());
    settings.database.pool_size = args.pool_size.unwrap_or(16.max(args.steps.unwrap_or(0) as u32));
    if let Some(max) = args.max_in_flight {
        settings.max_in_flight = max;
    }
    let answer = args.answer_chars.map_or_else(
        || "ok".to_owned(),
        |n| filler_text().chars().cycle().take(n).collect(),
    );
    let agent = LocalAgent::start(answer).await?;
    settings.agent_url = Some(agent.agent_url());

    let started = Instant::now();
    let pool = db::connect_pool(&settings.database)?;
    let fixture = provision_fixture(&pool, args.users, &agent.telegram_url()).await?;
    close_pool(pool, &db.url).await?;
    agent.set_secret(&fixture.dispatch_secret);
    println!(
        "provisioned 1 tenant, 1 Telegram connector, {} linked users in {}",
        args.users,
        secs(started.elapsed())
    );
    if let Some(fillfactor) = args.fillfactor {
        let mut owner = PgConnection::connect(&db.url).await?;
        owner
            .execute(format!("alter table channel_messages set (fillfactor = {fillfactor})").as_str())
            .await?;
    }
    bulk_load(&db.url, &fixture, args.rows).await?;

    let mut next_update = args.rows + 1;
    let phases = Phases::install()?;
    let throughput = measure_worker(args, db, &settings, &fixture, &mut next_update).await?;
    phases.print();

    let pool = db::connect_pool(&settings.database)?;
    let alone = sample_history(&pool, &db.url, &fixture, args.history_samples).await?;
    alone.print();
    if args.explain {
        explain_history(&pool, &db.url, &fixture).await?;
    }
    agent.check()?;
    print_verdict(&throughput, &alone);
    Ok(())
}

/// Dispatches/s of the real worker. Each stage runs on its own pool, closed when it ends,
/// so that the server's per-table counters (flushed when a backend exits) cover exactly
/// the worker run.
async fn measure_worker(
    args: &Args,
    db: &BenchDb,
    settings: &ServeSettings,
    fixture: &Fixture,
    next_update: &mut i64,
) -> anyhow::Result<WorkerRun> {
    let ingress_pool = db::connect_pool(&settings.database)?;
    enqueue_run(&ingress_pool, fixture, next_update, args).await?;
    if args.explain {
        explain_claim(&ingress_pool).await?;
    }
    close_pool(ingress_pool, &db.url).await?;

    let pool = db::connect_pool(&settings.database)?;
    let worker = Arc::new(Worker::new(pool.clone(), Arc::new(settings.clone()), unix_now)?);
    let meter = Meter::start(&db.url).await?;
    let run = match args.steps {
        Some(tasks) => run_worker(worker, tasks, args.jobs).await?,
        None => run_dispatcher(worker, &db.url, fixture, args.jobs).await?,
    };
    run.print(args);
    meter.print_cpu(&db.url, run.tally.executed).await?;
    close_pool(pool, &db.url).await?;
    meter.print_counters(&db.url, run.tally.executed).await?;
    check_all_dispatched(&db.url, fixture, args.rows, args.jobs).await?;
    clear_stalled(&db.url, fixture).await?;
    Ok(run)
}

/// Closes a pool and waits until its server backends are gone (they flush their
/// statistics as they exit).
async fn close_pool(pool: PgPool, url: &str) -> anyhow::Result<()> {
    pool.close().await;
    let mut owner = PgConnection::connect(url).await?;
    for _ in 0..3000 {
        let left: i64 = sqlx::query_scalar(
            "select count(*) from pg_stat_activity
              where datname = current_database() and application_name = 'channel-bridge'",
        )
        .fetch_one(&mut owner)
        .await?;
        if left == 0 {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    anyhow::bail!("the pool's connections did not close within 30 s")
}

// ---------------------------------------------------------------------------------------
// Database and fixture

/// The tenant, its Telegram connector and how many users are linked.
struct Fixture {
    tenant: TenantId,
    connector: Connector,
    dispatch_secret: String,
    users: i64,
}

fn sender_id(user: i64) -> String {
    (FIRST_SENDER_ID + user).to_string()
}

/// The tenant's own user id of bench user `user` (the SQL load builds the same: 'u' || u).
fn user_id(user: i64) -> String {
    format!("u{user}")
}

async fn provision_fixture(pool: &PgPool, users: i64, telegram_url: &str) -> anyhow::Result<Fixture> {
    let created =
        provision::create_tenant(pool, &Keyring::ephemeral(), "bench", "Bench tenant", None).await?;
    let tenant = created.tenant_id;
    let added = provision::add_connector(
        pool,
        &Keyring::ephemeral(),
        tenant,
        &telegram_connector(
            BOT_ID,
            "bench bot".into(),
            telegram_url.to_owned(),
            UnlinkedPolicy::Deny,
        ),
    )
    .await?;
    // One more user than the history has: the `--stalled-backlog` user.
    futures::stream::iter(0..=users)
        .map(|u| async move {
            provision::add_link(pool, tenant, Platform::Telegram, &sender_id(u), &user_id(u)).await
        })
        .buffer_unordered(ENQUEUE_CONCURRENCY)
        .try_for_each(|_| async { Ok(()) })
        .await?;
    let mut tx = TenantTx::begin(pool, tenant).await?;
    let connector = db::connectors::get(&mut tx, &Keyring::ephemeral(), added.connector_id)
        .await?
        .context("the connector just added is readable")?;
    tx.commit().await?;
    Ok(Fixture {
        tenant,
        connector,
        dispatch_secret: created.dispatch_secret,
        users,
    })
}

// ---------------------------------------------------------------------------------------
// Bulk load

/// One chunk of terminal turns. Per row `i`: the user is a hash of `i` (spread evenly, not
/// in runs), `h` is 32 further hash bits that pick status and text; `received_at` climbs
/// from `$8` over 180 days; the id is a UUIDv7 of `received_at`, like `MessageId::new`.
/// 98 % `executed` and delivered with a 40–900 character response, 1 % `dispatch_failed` (no response,
/// counts in history), 1 % `ignored` (a `[image]` placeholder, not in history). Requests are
/// 8–247 characters. Idempotency keys are Telegram update ids `i`, unique.
const LOAD_SQL: &str = "
insert into channel_messages (tenant_id, id, connector_id, platform, idempotency_key,
    platform_message_id, chat_id, platform_user_id, user_id, conversation_key,
    request_content, response_content, decision, status, attempts, last_error,
    received_at, completed_at, delivered_at, updated_at, metadata)
select $1,
       (lpad(to_hex((extract(epoch from ts) * 1000)::int8), 12, '0') || '7' || substr(m, 1, 3)
            || '8' || substr(m, 4, 15))::uuid,
       $2, 'telegram', i::text, (i / $6 + 1)::text, (100000000 + u)::text,
       (100000000 + u)::text, 'u' || u, 'user:u' || u,
       case when kind = 'ignored' then '[image]' else substr($7, (1 + h % 997)::int, (8 + (h / 1000) % 240)::int) end,
       case when kind = 'executed' then substr($7, (1 + (h / 7) % 991)::int, (40 + (h / 300000) % 861)::int) end,
       case kind when 'executed' then 'respond' when 'ignored' then 'ignore_non_text'
                 else 'dispatch_failed' end,
       kind,
       case kind when 'executed' then 1 when 'ignored' then 0 else 5 end,
       case when kind = 'dispatch_failed' then 'agent answered 503 Service Unavailable' end,
       ts, ts + interval '2 seconds',
       case when kind = 'executed' then ts + interval '3 seconds' end, ts + interval '3 seconds',
       jsonb_build_object('chat_type', 'private', 'first_name', 'User ' || u)
  from (select i, u, h, ts, md5(i::text) as m,
               case h % 100 when 0 then 'dispatch_failed' when 1 then 'ignored'
                    else 'executed' end as kind
          from (select i,
                       (hashint8(i)::int8 + 2147483648) % $6 as u,
                       hashint8(i + 4294967296)::int8 + 2147483648 as h,
                       $8::timestamptz + (i::float8 / $5) * interval '180 days' as ts
                  from generate_series($3::int8, $4::int8) as i) raw) g";

async fn bulk_load(url: &str, fixture: &Fixture, rows: i64) -> anyhow::Result<()> {
    let started = Instant::now();
    let next = Arc::new(AtomicI64::new(1));
    let loaders = (0..LOAD_CONNECTIONS).map(|_| load_chunks(url, fixture, rows, next.clone()));
    futures::future::try_join_all(loaders).await?;
    let inserted = started.elapsed();

    let mut owner = PgConnection::connect(url).await?;
    let settle = Instant::now();
    owner.execute("vacuum (analyze)").await?;
    let vacuumed = settle.elapsed();
    // The load's dirty pages are setup debt: write them now, not during the measurement.
    owner.execute("checkpoint").await?;
    let size: String =
        sqlx::query_scalar("select pg_size_pretty(pg_total_relation_size('channel_messages'))")
            .fetch_one(&mut owner)
            .await?;
    println!(
        "bulk load: {rows} rows in {} ({:.0} rows/s, {size} with indexes); vacuum analyze {}, \
         checkpoint {}; total load {}",
        secs(inserted),
        rows as f64 / inserted.as_secs_f64(),
        secs(vacuumed),
        secs(settle.elapsed() - vacuumed),
        secs(started.elapsed()),
    );
    Ok(())
}

/// Loads chunks until none is left. Owner connection: bulk setup is not app traffic.
async fn load_chunks(url: &str, fixture: &Fixture, rows: i64, next: Arc<AtomicI64>) -> anyhow::Result<()> {
    let mut conn = PgConnection::connect(url).await?;
    // Setup, not the system under test: no need to wait for each chunk's WAL flush.
    conn.execute("set synchronous_commit = off").await?;
    let text = filler_text();
    let start = chrono::Utc::now() - chrono::Duration::days(181);
    loop {
        let from = next.fetch_add(LOAD_CHUNK, Ordering::Relaxed);
        if from > rows {
            return Ok(());
        }
        let to = (from + LOAD_CHUNK - 1).min(rows);
        sqlx::query(LOAD_SQL)
            .bind(fixture.tenant)
            .bind(fixture.connector.id)
            .bind(from)
            .bind(to)
            .bind(rows.max(1))
            .bind(fixture.users)
            .bind(&text)
            .bind(start)
            .execute(&mut conn)
            .await
            .context("Failed to bulk-load history")?;
    }
}

// ---------------------------------------------------------------------------------------
// Enqueueing, as ingress does

/// Records `jobs` new turns, one Telegram update per `ingress::record` call (one webhook,
/// one transaction), from the users `user_of(update)` picks.
async fn enqueue(
    pool: &PgPool,
    fixture: &Fixture,
    next_update: &mut i64,
    jobs: usize,
    user_of: impl Fn(i64) -> i64 + Copy,
) -> anyhow::Result<()> {
    let started = Instant::now();
    let first = *next_update;
    *next_update += jobs as i64;
    futures::stream::iter(first..first + jobs as i64)
        .map(|update| async move {
            let outcome = ingress::record(
                pool,
                &fixture.connector,
                &telegram_turn(fixture, update, user_of(update)),
            )
            .await?;
            anyhow::ensure!(
                outcome.queued.len() == 1,
                "update {update} was not queued: {outcome:?}"
            );
            Ok(())
        })
        .buffer_unordered(ENQUEUE_CONCURRENCY)
        .try_for_each(|()| async { Ok(()) })
        .await?;
    println!(
        "enqueued {jobs} turns through ingress::record in {}",
        secs(started.elapsed())
    );
    Ok(())
}

/// The turns of one measured run: the stalled user's backlog first (so it is at the front
/// of the queue, its head parked an hour ahead), then `--jobs` turns round-robin over the
/// users.
async fn enqueue_run(
    pool: &PgPool,
    fixture: &Fixture,
    next_update: &mut i64,
    args: &Args,
) -> anyhow::Result<()> {
    if args.stalled_backlog > 0 {
        let stalled = fixture.users;
        enqueue(pool, fixture, next_update, args.stalled_backlog, |_| stalled).await?;
        park_stalled_head(pool, fixture).await?;
    }
    let users = fixture.users;
    enqueue(pool, fixture, next_update, args.jobs, |update| update % users).await
}

/// Puts the stalled user's first turn back the way the worker does after an agent error:
/// claimed, then put back an hour later with `Queue::retry_later`.
async fn park_stalled_head(pool: &PgPool, fixture: &Fixture) -> anyhow::Result<()> {
    let queue = Queue::new(pool.clone());
    let request = ClaimRequest {
        wanted: 1,
        default_room: 1,
        lease: Duration::from_secs(120),
        ..Default::default()
    };
    let (mut jobs, tx) = queue
        .claim(&request)
        .await?
        .context("the stalled backlog is queued")?;
    let job = jobs.pop().context("a claim returns its job")?;
    let stalled = format!("user:{}", user_id(fixture.users));
    anyhow::ensure!(
        job.conversation_key == stalled,
        "claimed {} instead of the stalled head",
        job.conversation_key
    );
    tx.commit().await?;
    queue
        .retry_later(job.message_id, job.lease, Duration::from_secs(3600))
        .await?;
    Ok(())
}

/// Drops the stalled backlog's jobs, so the next run starts from the same queue.
async fn clear_stalled(url: &str, fixture: &Fixture) -> anyhow::Result<()> {
    let mut owner = PgConnection::connect(url).await?;
    sqlx::query("delete from dispatch_queue where tenant_id = $1 and conversation_key = $2")
        .bind(fixture.tenant)
        .bind(format!("user:{}", user_id(fixture.users)))
        .execute(&mut owner)
        .await?;
    Ok(())
}

fn telegram_turn(fixture: &Fixture, update: i64, user: i64) -> Inbound {
    let text = format!(
        "Hi, this is message {update}: could you check order #{} for me?",
        update * 7
    );
    Inbound {
        messages: vec![InboundMessage {
            idempotency_key: update.to_string(),
            kind: InboundKind::Text,
            platform_message_id: (update / fixture.users + 1).to_string(),
            address: Address {
                chat_id: sender_id(user),
                thread_id: None,
                space: None,
                platform_user_id: sender_id(user),
            },
            reply_to_id: None,
            text,
            attachments: Vec::new(),
            metadata: json!({ "chat_type": "private", "first_name": format!("User {user}") }),
            tap: None,
            command: None,
        }],
        ..Inbound::default()
    }
}

// ---------------------------------------------------------------------------------------
// The local agent

struct AgentState {
    answer: String,
    secret: std::sync::OnceLock<String>,
    calls: AtomicU64,
    bad_signatures: AtomicU64,
    sends: AtomicU64,
}

/// The agent and the Telegram Bot API, on one local server.
struct LocalAgent {
    base: String,
    state: Arc<AgentState>,
}

impl LocalAgent {
    async fn start(answer: String) -> anyhow::Result<Self> {
        let state = Arc::new(AgentState {
            answer,
            secret: std::sync::OnceLock::new(),
            calls: AtomicU64::new(0),
            bad_signatures: AtomicU64::new(0),
            sends: AtomicU64::new(0),
        });
        let app = Router::new()
            .route("/agent", post(agent_answer))
            .route("/telegram/{bot}/sendMessage", post(telegram_send))
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let base = format!("http://{}", listener.local_addr()?);
        tokio::spawn(async move { axum::serve(listener, app).await });
        Ok(Self { base, state })
    }

    fn agent_url(&self) -> String {
        format!("{}/agent", self.base)
    }

    fn telegram_url(&self) -> String {
        format!("{}/telegram", self.base)
    }

    /// The tenant's dispatch secret, known once the tenant exists.
    fn set_secret(&self, secret: &str) {
        let _ = self.state.secret.set(secret.to_owned());
    }

    fn check(&self) -> anyhow::Result<()> {
        let bad = self.state.bad_signatures.load(Ordering::Relaxed);
        let calls = self.state.calls.load(Ordering::Relaxed);
        let sends = self.state.sends.load(Ordering::Relaxed);
        println!("agent: {calls} calls, {bad} with a bad signature; Telegram: {sends} replies posted");
        anyhow::ensure!(bad == 0, "{bad} dispatches failed signature verification");
        Ok(())
    }
}

/// Verifies the Standard Webhooks signature as a real agent would, then answers at once
/// (`ok`, or `--answer-chars` of text).
async fn agent_answer(
    State(state): State<Arc<AgentState>>,
    headers: HeaderMap,
    body: Bytes,
) -> (StatusCode, Json<serde_json::Value>) {
    state.calls.fetch_add(1, Ordering::Relaxed);
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let verified = signature::verify(
        state.secret.get().map_or("", String::as_str),
        header("webhook-id"),
        header("webhook-timestamp"),
        header("webhook-signature"),
        &body,
        unix_now(),
    );
    if verified.is_err() {
        state.bad_signatures.fetch_add(1, Ordering::Relaxed);
        return (
            StatusCode::UNAUTHORIZED,
            Json(json!({ "error": "bad signature" })),
        );
    }
    (StatusCode::OK, Json(json!({ "content": state.answer })))
}

/// Telegram's `sendMessage` answer: the posted message with a fresh id.
async fn telegram_send(State(state): State<Arc<AgentState>>) -> Json<serde_json::Value> {
    let id = state.sends.fetch_add(1, Ordering::Relaxed) + 1;
    Json(json!({ "ok": true, "result": { "message_id": id } }))
}

fn unix_now() -> i64 {
    chrono::Utc::now().timestamp()
}

// ---------------------------------------------------------------------------------------
// Worker throughput

#[derive(Default)]
struct WorkerTally {
    steps: Vec<Duration>,
    executed: usize,
    failed: usize,
    skipped: usize,
    retried: usize,
    empty: usize,
}

impl WorkerTally {
    fn merge(&mut self, other: WorkerTally) {
        self.steps.extend(other.steps);
        self.executed += other.executed;
        self.failed += other.failed;
        self.skipped += other.skipped;
        self.retried += other.retried;
        self.empty += other.empty;
    }
}

struct WorkerRun {
    elapsed: Duration,
    tally: WorkerTally,
}

impl WorkerRun {
    fn dispatches_per_sec(&self) -> f64 {
        self.tally.executed as f64 / self.elapsed.as_secs_f64()
    }

    fn print(&self, args: &Args) {
        let t = &self.tally;
        let Some(tasks) = args.steps else {
            println!(
                "worker (the instance's dispatcher): {} dispatches in {} = {:.0} dispatches/s",
                t.executed,
                secs(self.elapsed),
                self.dispatches_per_sec(),
            );
            return;
        };
        println!(
            "worker: {} dispatches in {} = {:.0} dispatches/s (Worker::step from {tasks} tasks; failed {}, \
             skipped {}, retried {}, empty claims {})",
            t.executed,
            secs(self.elapsed),
            self.dispatches_per_sec(),
            t.failed,
            t.skipped,
            t.retried,
            t.empty
        );
        println!("  Worker::step (agent call included) {}", Summary::of(&t.steps));
    }
}

/// Runs the instance's dispatcher (one claimer feeding the in-flight set, the turn writer,
/// the lease keeper) until every job of the run is finished: the queue holds nothing but
/// the stalled backlog (looked at every 5 ms by an owner connection).
async fn run_dispatcher(
    worker: Arc<Worker>,
    url: &str,
    fixture: &Fixture,
    jobs: usize,
) -> anyhow::Result<WorkerRun> {
    let stalled = format!("user:{}", user_id(fixture.users));
    let dispatcher = Dispatcher::new(worker);
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let mut owner = PgConnection::connect(url).await?;
    let started = Instant::now();
    let claimer = tokio::spawn(
        dispatcher
            .clone()
            .run(Arc::new(Wakeup::default()), stop_rx.clone()),
    );
    let keeper = tokio::spawn(dispatcher.keep_leases(stop_rx));
    loop {
        let left: i64 =
            sqlx::query_scalar("select count(*) from dispatch_queue where conversation_key <> $1")
                .bind(&stalled)
                .fetch_one(&mut owner)
                .await?;
        if left == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let elapsed = started.elapsed();
    stop.send_replace(true);
    claimer.await?;
    keeper.await?;
    let tally = WorkerTally {
        executed: jobs,
        ..Default::default()
    };
    Ok(WorkerRun { elapsed, tally })
}

/// Runs `Worker::step` from `concurrency` tasks until `jobs` turns are finished.
async fn run_worker(worker: Arc<Worker>, concurrency: usize, jobs: usize) -> anyhow::Result<WorkerRun> {
    let finished = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let tasks: Vec<_> = (0..concurrency)
        .map(|_| tokio::spawn(worker_task(worker.clone(), finished.clone(), jobs)))
        .collect();
    let mut tally = WorkerTally::default();
    for task in tasks {
        tally.merge(task.await??);
    }
    Ok(WorkerRun {
        elapsed: started.elapsed(),
        tally,
    })
}

async fn worker_task(
    worker: Arc<Worker>,
    finished: Arc<AtomicUsize>,
    jobs: usize,
) -> anyhow::Result<WorkerTally> {
    let mut tally = WorkerTally::default();
    while finished.load(Ordering::Relaxed) < jobs {
        let started = Instant::now();
        let outcome = worker.step().await?;
        let done = match outcome {
            StepOutcome::Executed(_) => {
                tally.steps.push(started.elapsed());
                tally.executed += 1;
                true
            }
            // A reply job claimed on its own: its turn was counted when it was executed.
            StepOutcome::Delivered(_) => false,
            StepOutcome::Failed(_) => fail_fast(&mut tally.failed),
            StepOutcome::Skipped(_) | StepOutcome::Held(_) | StepOutcome::Awaiting(_) => {
                fail_fast(&mut tally.skipped)
            }
            StepOutcome::Retrying(_) | StepOutcome::LeaseLost(_) => fail_fast(&mut tally.retried),
            StepOutcome::Empty => {
                // Every remaining job waits behind a head another task holds.
                tally.empty += 1;
                tokio::time::sleep(Duration::from_millis(1)).await;
                false
            }
        };
        if done {
            finished.fetch_add(1, Ordering::Relaxed);
        }
    }
    Ok(tally)
}

/// The agent always answers, so anything but `Executed` is counted and ends that job.
fn fail_fast(counter: &mut usize) -> bool {
    *counter += 1;
    true
}

/// Every measured turn is `executed` and delivered, and only the stalled backlog is still
/// queued.
async fn check_all_dispatched(url: &str, fixture: &Fixture, rows: i64, jobs: usize) -> anyhow::Result<()> {
    let mut owner = PgConnection::connect(url).await?;
    let row = sqlx::query(
        "select (select count(*) from dispatch_queue where conversation_key <> $3) as queued,
                (select count(*) from channel_messages
                  where tenant_id = $1 and idempotency_key::int8 > $2 and status = 'executed'
                    and delivered_at is not null) as executed",
    )
    .bind(fixture.tenant)
    .bind(rows)
    .bind(format!("user:{}", user_id(fixture.users)))
    .fetch_one(&mut owner)
    .await?;
    let (queued, executed): (i64, i64) = (row.get("queued"), row.get("executed"));
    anyhow::ensure!(
        queued == 0 && executed == jobs as i64,
        "after the run: {queued} jobs still queued, {executed} of {jobs} turns executed and delivered"
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Where the CPU goes

/// What a run cost: CPU time of this process and of the PostgreSQL backends serving the
/// bench database, from /proc (Linux, with the server on this machine; otherwise nothing
/// is printed), and the server's transaction and row-update counters. On a small machine
/// the worker, the agent and PostgreSQL share the cores, so CPU per dispatch is what bounds
/// dispatches/s. Background processes (WAL writer, checkpointer) are not counted.
struct Meter {
    started: Instant,
    machine: Option<(u64, u64)>,
    own: Option<u64>,
    backends: HashMap<u32, u64>,
    counters: Counters,
}

/// Linux USER_HZ: /proc reports CPU time in 1/100 s on every mainstream configuration.
const TICKS_PER_SEC: f64 = 100.0;

impl Meter {
    async fn start(url: &str) -> anyhow::Result<Self> {
        let backends = backend_ticks(url).await?;
        Ok(Self {
            counters: Counters::read(url).await?,
            started: Instant::now(),
            machine: machine_ticks(),
            own: own_ticks(),
            backends,
        })
    }

    async fn print_cpu(&self, url: &str, dispatches: usize) -> anyhow::Result<()> {
        let elapsed = self.started.elapsed().as_secs_f64();
        let (Some(own_before), Some(own_after)) = (self.own, own_ticks()) else {
            return Ok(());
        };
        let backends: u64 = backend_ticks(url)
            .await?
            .iter()
            .map(|(pid, &after)| after.saturating_sub(self.backends.get(pid).copied().unwrap_or(0)))
            .sum();
        let per_dispatch = |ticks: u64| ticks as f64 / TICKS_PER_SEC / dispatches.max(1) as f64 * 1e6;
        let machine = match (self.machine, machine_ticks()) {
            (Some((busy0, all0)), Some((busy1, all1))) => {
                format!(
                    "; the whole machine was {:.0} % busy",
                    100.0 * (busy1 - busy0) as f64 / (all1 - all0).max(1) as f64
                )
            }
            _ => String::new(),
        };
        println!(
            "  CPU per dispatch: bench process (worker + agent) {:.0} µs, PostgreSQL backends {:.0} µs; \
             {:.2} cores in use on average{machine}",
            per_dispatch(own_after - own_before),
            per_dispatch(backends),
            (own_after - own_before + backends) as f64 / TICKS_PER_SEC / elapsed,
        );
        Ok(())
    }
}

impl Meter {
    /// Commits per dispatch, and how many row updates were HOT (no new index entries).
    async fn print_counters(&self, url: &str, dispatches: usize) -> anyhow::Result<()> {
        let now = Counters::read(url).await?;
        let before = &self.counters;
        let per = |n: i64| n as f64 / dispatches.max(1) as f64;
        let hot = |upd: i64, hot: i64| 100.0 * hot as f64 / upd.max(1) as f64;
        let (mu, mh) = (
            now.messages.0 - before.messages.0,
            now.messages.1 - before.messages.1,
        );
        let (ru, rh) = (now.replies.0 - before.replies.0, now.replies.1 - before.replies.1);
        println!(
            "  per dispatch: {:.1} commits; channel_messages {:.1} row updates ({:.0} % HOT), \
             channel_replies {:.1} ({:.0} % HOT)",
            per(now.commits - before.commits),
            per(mu),
            hot(mu, mh),
            per(ru),
            hot(ru, rh)
        );
        Ok(())
    }
}

/// The server's cumulative counters for the bench database: commits, and (updates, HOT
/// updates) of the two tables a dispatch updates.
struct Counters {
    commits: i64,
    messages: (i64, i64),
    replies: (i64, i64),
}

impl Counters {
    async fn read(url: &str) -> anyhow::Result<Self> {
        let mut owner = PgConnection::connect(url).await?;
        let row = sqlx::query(
            "select (select xact_commit from pg_stat_database where datname = current_database()) as commits,
                    m.n_tup_upd as m_upd, m.n_tup_hot_upd as m_hot, r.n_tup_upd as r_upd, r.n_tup_hot_upd as r_hot
               from pg_stat_user_tables m, pg_stat_user_tables r
              where m.relname = 'channel_messages' and r.relname = 'channel_replies'",
        )
        .fetch_one(&mut owner)
        .await?;
        Ok(Self {
            commits: row.get("commits"),
            messages: (row.get("m_upd"), row.get("m_hot")),
            replies: (row.get("r_upd"), row.get("r_hot")),
        })
    }
}

// ---------------------------------------------------------------------------------------
// Phases: the worker's own histograms

/// The worker's histograms (`channel_bridge_dispatch_phase_seconds{phase}`, `channel_bridge_dispatch_history_seconds`,
/// `channel_bridge_dispatch_own_seconds`, `channel_bridge_reply_send_seconds`), captured with every sample by a
/// debugging recorder installed for this process.
struct Phases {
    snapshotter: Snapshotter,
}

impl Phases {
    fn install() -> anyhow::Result<Self> {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder
            .install()
            .map_err(|err| anyhow::anyhow!("cannot install the metrics recorder: {err}"))?;
        Ok(Self { snapshotter })
    }

    /// Prints and clears what the worker recorded since the last call.
    fn print(&self) {
        let mut rows: Vec<(String, Vec<Duration>)> = Vec::new();
        let mut counts: Vec<(String, String)> = Vec::new();
        for (key, _, _, value) in self.snapshotter.snapshot().into_vec() {
            let DebugValue::Histogram(samples) = value else {
                continue;
            };
            let key = key.key();
            let label = key
                .labels()
                .map(|l| format!("{{{}}}", l.value()))
                .collect::<String>();
            let name = format!("{}{label}", key.name());
            if key.name().ends_with("_size") {
                // A count, not a time.
                let mut sizes: Vec<f64> = samples.iter().map(|s| s.into_inner()).collect();
                sizes.sort_by(f64::total_cmp);
                if let Some(max) = sizes.last() {
                    let at = |q: f64| sizes[((sizes.len() - 1) as f64 * q) as usize];
                    let summary = format!("p50 {} p99 {} max {max} (n={})", at(0.5), at(0.99), sizes.len());
                    counts.push((name, summary));
                }
                continue;
            }
            let times = samples
                .iter()
                .map(|s| Duration::from_secs_f64(s.into_inner()))
                .collect();
            rows.push((name, times));
        }
        rows.sort_by(|a, b| a.0.cmp(&b.0));
        println!("  worker histograms (claim + prepare + store/settle commits = the worker's own cost):");
        for (name, times) in rows {
            println!("    {name:<42} {}", Summary::of(&times));
        }
        counts.sort();
        for (name, summary) in counts {
            println!("    {name:<42} {summary}");
        }
    }
}

// ---------------------------------------------------------------------------------------
// History alone

struct HistoryAlone {
    times: Vec<Duration>,
    turns: usize,
}

impl HistoryAlone {
    fn print(&self) {
        println!(
            "history::load alone ({} random messages, one at a time): {}; {:.1} messages[] entries on average",
            self.times.len(),
            Summary::of(&self.times),
            self.turns as f64 / self.times.len().max(1) as f64
        );
    }

    fn p99(&self) -> Duration {
        Summary::of(&self.times).p99
    }
}

/// Reads the history of `samples` random messages, each in its own tenant transaction,
/// timing `history::load` alone (the message itself is read first, untimed).
async fn sample_history(
    pool: &PgPool,
    url: &str,
    fixture: &Fixture,
    samples: i64,
) -> anyhow::Result<HistoryAlone> {
    let ids = random_messages(url, fixture.tenant, samples).await?;
    let mut alone = HistoryAlone {
        times: Vec::with_capacity(ids.len()),
        turns: 0,
    };
    for id in ids {
        let mut tx = TenantTx::begin(pool, fixture.tenant).await?;
        let message = db::messages::get(&mut tx, id)
            .await?
            .context("a sampled message exists")?;
        let started = Instant::now();
        let history = history::load(&mut tx, &message, Default::default()).await?;
        alone.times.push(started.elapsed());
        alone.turns += history.len();
        tx.rollback().await?;
    }
    Ok(alone)
}

async fn random_messages(url: &str, tenant: TenantId, samples: i64) -> anyhow::Result<Vec<MessageId>> {
    let mut owner = PgConnection::connect(url).await?;
    let ids =
        sqlx::query_scalar("select id from channel_messages where tenant_id = $1 order by random() limit $2")
            .bind(tenant)
            .bind(samples)
            .fetch_all(&mut owner)
            .await?;
    Ok(ids)
}

// ---------------------------------------------------------------------------------------
// EXPLAIN (copies of the library's SQL; keep them in step with src/dispatch/history.rs and
// src/db/queue.rs)

const HISTORY_SQL: &str = "select request_content, response_content
   from channel_messages
  where tenant_id = $1 and user_id = $2
    and (status in ('executed', 'dispatch_failed') or status like 'denied\\_%')
    and btrim(request_content) <> ''
    and (received_at, id) < ($3, $4)
  order by received_at desc, id desc
  limit 12";

/// The newest turn of a random user, as the app role in a tenant transaction.
async fn explain_history(pool: &PgPool, url: &str, fixture: &Fixture) -> anyhow::Result<()> {
    let id = random_messages(url, fixture.tenant, 1).await?;
    let mut tx = TenantTx::begin(pool, fixture.tenant).await?;
    let message = db::messages::get(&mut tx, id[0])
        .await?
        .context("a sampled message exists")?;
    let plan: Vec<String> = sqlx::query_scalar(&format!("explain (analyze, buffers) {HISTORY_SQL}"))
        .bind(fixture.tenant)
        .bind(&message.user_id)
        .bind(message.received_at)
        .bind(message.id)
        .fetch_all(tx.conn())
        .await?;
    tx.rollback().await?;
    println!("EXPLAIN history read:\n  {}", plan.join("\n  "));
    Ok(())
}

/// The library's own claim on the full queue (the dispatcher's first batch), rolled back so
/// the run still sees every job.
async fn explain_claim(pool: &PgPool) -> anyhow::Result<()> {
    let request = ClaimRequest {
        wanted: 256,
        default_room: 256,
        lease: Duration::from_secs(120),
        ..Default::default()
    };
    let plan = Queue::new(pool.clone()).explain_claim(&request).await?;
    println!("EXPLAIN claim:\n  {}", plan.join("\n  "));
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Figures

struct Summary {
    n: usize,
    p50: Duration,
    p99: Duration,
    max: Duration,
}

impl Summary {
    fn of(times: &[Duration]) -> Self {
        let mut sorted = times.to_vec();
        sorted.sort_unstable();
        let at = |q: f64| {
            let index = ((sorted.len().saturating_sub(1)) as f64 * q).round() as usize;
            sorted.get(index).copied().unwrap_or_default()
        };
        Self {
            n: sorted.len(),
            p50: at(0.50),
            p99: at(0.99),
            max: sorted.last().copied().unwrap_or_default(),
        }
    }
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "p50 {} p99 {} max {} (n={})",
            ms(self.p50),
            ms(self.p99),
            ms(self.max),
            self.n
        )
    }
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

fn secs(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

fn print_verdict(throughput: &WorkerRun, alone: &HistoryAlone) {
    let verdict = |ok: bool| if ok { "met" } else { "MISSED" };
    let rate = throughput.dispatches_per_sec();
    let p99 = alone.p99();
    println!(
        "targets: history p99 < 5 ms: {} ({}); >= 1000 dispatches/s: {} ({rate:.0}/s)",
        verdict(p99 < Duration::from_millis(5)),
        ms(p99),
        verdict(rate >= 1000.0)
    );
}
