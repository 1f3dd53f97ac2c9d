//! End-to-end pipeline load: signed Telegram webhooks into the real gateway binary, its
//! dispatch worker calling a slow agent, the replies posted back to a Telegram stand-in;
//! what the whole path sustains, how long a turn waits, and what each turn costs.
//!
//! ```text
//! cargo bench --bench pipeline_load -- --seconds 10 --rate 1200 --agent-latency-ms 2000
//! CB_DB_POOL_SIZE=32 cargo bench --bench pipeline_load -- --rate 0 --concurrency 64
//! CB_AGENT_HTTP2=true cargo bench --bench pipeline_load -- --rate 2100 --agent-latency-ms 2000
//! ```
//!
//! What one run does:
//! 1. creates a database `cb_bench_<random>` on DATABASE_URL's server (default
//!    postgres://postgres@127.0.0.1:5432/postgres), migrated with the app's `migrate`, and
//!    drops it at the end unless `--keep-db`;
//! 2. starts, in this process on 127.0.0.1:0, the agent stand-in (verifies each dispatch's
//!    Standard Webhooks signature, waits `--agent-latency-ms`, answers `--answer-chars` of
//!    text) and the Telegram Bot API stand-in (`sendMessage` and `sendChatAction` answer
//!    `ok` at once);
//! 3. provisions `--tenants` tenants through the library, each with its agent URL and one
//!    Telegram connector whose API base URL is the stand-in and which lets unlinked senders
//!    through, so each of the `--users` senders is a conversation of its own;
//! 4. unless `--history-rows 0`, gives the senders a past: bulk-loads `--history-rows`
//!    terminal turns as the database owner (`insert … select … generate_series` in chunks,
//!    two connections), written as the gateway writes the turns of these unlinked senders
//!    (same conversation keys, ids, chat and sender fields and metadata; Telegram update ids
//!    in a range of their own), round-robin over the users and so over the tenants as the
//!    webhooks are, received over the last `HISTORY_DAYS` days before the run: mostly
//!    `executed` with a response and its posted reply part, a few `dispatch_failed` and
//!    `ignored`. Each live turn then reads real history (the agent gets the newest earlier
//!    turns). Then `VACUUM (ANALYZE)` and `CHECKPOINT`: a deployment has history and
//!    statistics (autovacuum may be off on a bench server), and the gateway's prepared
//!    statements are planned on them; the load's dirty pages are written before measuring;
//! 5. starts the gateway binary (`channel-bridge serve`, HTTP and worker) as a child process
//!    on the bench database with this process's environment, so `CB_*` settings given to
//!    `cargo bench` apply; its log goes to a file under target/; waits for `/readyz`;
//! 6. posts signed webhooks with the text `load <seq>`, round-robin over the users, for
//!    `--seconds`: open loop at `--rate` per second (webhook *i* is due at start + i/rate,
//!    with at most `--concurrency` in flight), or closed loop with `--rate 0`;
//!    With `--stream` the agent answers `text/event-stream`: its first OpenAI chunk at once,
//!    the rest after `--agent-latency-ms`; the Telegram stand-in also answers
//!    `sendMessageDraft` (the gateway's preview in a private chat), and the run reports the
//!    time from the first chunk written to the first draft received (p50/p99);
//! 7. waits, at most `--drain-secs`, until a reply was posted for every accepted webhook;
//! 8. stops the gateway (SIGTERM, then kill), then, unless `--skip-idle`, starts a second,
//!    worker-only gateway (`CB_HTTP=false`) whose database connections pass through a proxy
//!    that counts protocol messages, and counts its statements over `--idle-secs` once it
//!    has settled.
//!
//! Reading the figures:
//! - *accepted/s* is over the posting window: first post to the last webhook answer;
//!   *webhook answer* is each webhook's HTTP round trip, from its send (in open loop a
//!   generator that falls behind shows as *max send lag* instead);
//! - *turns/s steady* counts replies posted from the first reply to the end of the posting
//!   window, i.e. once the agent's latency is filled: what the pipeline sustains at this
//!   load; *overall* is every turn over first post → last reply, ramp and drain included;
//! - *webhook→agent* runs from just before the webhook was sent to the first agent call of
//!   that turn (ingress, queue wait, claim, history): it grows for as long as the worker
//!   cannot keep up with the rate; *webhook→reply* adds the agent's latency and the post;
//! - *webhook→typing* runs to the turn's first `sendChatAction` (the typing indicator starts
//!   beside the agent call, so it tracks *webhook→agent*); *claim→typing* is the gateway's
//!   own `channel_bridge_typing_first_seconds`, scraped from `/metrics` before it stops, as
//!   the upper bounds of the buckets that hold p50 and p99;
//! - *agent in flight* is counted by the agent stand-in; the mean is time-weighted over the
//!   posting window; sustained turns/s ≈ mean in flight / agent latency;
//! - CPU per turn is CPU time from the first post to the end of the drain divided by turns
//!   posted. PostgreSQL is every process named `postgres` on this machine (background
//!   writers, and other databases' work too); the bench database's backends are shown apart
//!   (without those that exited during the run); *others* is the machine's remaining busy
//!   time, which skews everything else: compare runs made back to back on a quiet machine;
//! - idle statements/s are the simple queries ('Q') and extended-protocol executes ('E')
//!   the idle instance sends: its polling and housekeeping cost with nothing to do.
//!
//! `--json` prints the figures as one JSON object on the last line of stdout instead of
//! the text block; progress goes to stderr.
//!
//! Fairness: a quiet tenant's webhook→reply while another floods the instance.
//!
//! ```text
//! cargo bench --bench pipeline_load -- --rate 1200 --seconds 10 --quiet-tenant-turns 50
//! cargo bench --bench pipeline_load -- --rate 1200 --seconds 10 --quiet-tenant-turns 50 --flood-off
//! ```
//!
//! With `--quiet-tenant-turns N` one more tenant, the quiet one, is provisioned after the
//! `--tenants` flood tenants exactly as they are (agent URL, Telegram connector), with N
//! users of its own (sender ids after the flood's), one turn each, and as many history turns
//! per user as the flood's users. Its N webhooks are posted open loop beside the flood,
//! spread evenly over `--seconds` (turn k due at start + (k + ½)·seconds/N, each sent by a
//! task of its own), signed as the flood's; their sequence numbers follow the flood's range.
//! The `quiet tenant` line (`quiet_tenant` in JSON) gives its webhook→reply (and its webhook
//! answer, →agent, →typing). The flood's figures exclude the quiet tenant's turns: webhooks,
//! turns posted, turns/s, the webhook latencies, agent calls and repeats, reply parts and
//! repeats; what is the instance's as a whole counts them: agent in flight, claim→typing
//! (the gateway's histogram), CPU per turn (over every turn posted), tables, idle.
//! `--flood-off` is the unloaded run for comparison: the same tenants, users and history,
//! the same sequence numbers, but the flood's posters send nothing (`--rate` and
//! `--concurrency` then only size the sequence range), so the quiet tenant posts alone.
//! The quiet tenant's p99 of the two runs is the fairness figure (below 100 turns it is
//! the maximum).

#[allow(dead_code)] // each bench uses a part of it
mod common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use anyhow::Context;
use axum::body::Bytes;
use axum::extract::{Path as UrlPath, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::post;
use axum::{Json, Router};
use channel_bridge::domain::{Platform, UnlinkedPolicy};
use channel_bridge::signature;
use channel_bridge::{db, provision};
use clap::Parser;
use common::cpu::CpuSnapshot;
use common::gateway::{free_local_port, log_path, scan_log, Gateway, LogSummary, Stopped};
use common::memory::vm_rss_kb;
use common::provision::{bench_keys, telegram_connector, BOT_ID, BOT_SECRET, TELEGRAM_SECRET};
use common::webhooks::post_queued;
use common::{filler_text, BenchDb};
use serde::Serialize;
use serde_json::{json, Value};
use sqlx::{Connection, Executor, PgConnection};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

#[derive(Debug, Clone, Parser, Serialize)]
#[command(about = "End-to-end load: webhooks → gateway → slow agent → replies, with costs")]
struct Args {
    /// Seconds of posting webhooks.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Webhooks per second (open loop); 0: as fast as --concurrency posters go (closed loop).
    #[arg(long, default_value_t = 1200.0)]
    rate: f64,
    /// Posters: webhook requests in flight at most.
    #[arg(long, default_value_t = 128)]
    concurrency: usize,
    /// Telegram senders, each a conversation of its own (one turn in flight at a time).
    #[arg(long, default_value_t = 20_000)]
    users: u64,
    /// Tenants, each with its agent URL and one Telegram connector; users are spread over them.
    #[arg(long, default_value_t = 1)]
    tenants: u64,
    /// How long the agent stand-in takes to answer, in milliseconds.
    #[arg(long, default_value_t = 2000)]
    agent_latency_ms: u64,
    /// Length of the agent's answer (1 to 4096: one Telegram message).
    #[arg(long, default_value_t = 40)]
    answer_chars: usize,
    /// Terminal turns bulk-loaded as the users' history before the gateway starts; 0: none.
    #[arg(long, default_value_t = 200_000)]
    history_rows: u64,
    /// Longest wait after posting for the replies of every accepted webhook, in seconds.
    #[arg(long, default_value_t = 60)]
    drain_secs: u64,
    /// Seconds over which the idle instance's statements are counted.
    #[arg(long, default_value_t = 10)]
    idle_secs: u64,
    /// Skip the idle-instance measurement.
    #[arg(long)]
    skip_idle: bool,
    /// Keep the database afterwards instead of dropping it.
    #[arg(long)]
    keep_db: bool,
    /// The agent streams its answer (SSE): the first chunk at once, the rest after
    /// `--agent-latency-ms`; reports first chunk → first draft shown.
    #[arg(long)]
    stream: bool,
    /// The agent answers every dispatch 202 and posts its answer (`done` with the text) to
    /// the turn's events URL after a delay drawn evenly from this range of seconds, e.g.
    /// `30-120` (docs/agent.md#answering-later). Give --drain-secs above its end.
    #[arg(long, value_parser = parse_range)]
    answer_later_secs: Option<(u64, u64)>,
    /// One more tenant, the quiet one, posts this many turns (one per user of its own) spread
    /// over --seconds beside the flood; its webhook→reply is reported apart. 0: none.
    #[arg(long, default_value_t = 0)]
    #[serde(skip_serializing_if = "is_zero")]
    quiet_tenant_turns: u64,
    /// The flood tenants are provisioned (and given history) but post nothing: the quiet
    /// tenant's unloaded figure. Needs --quiet-tenant-turns.
    #[arg(long)]
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    flood_off: bool,
    /// Print the figures as one JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// Passed by `cargo bench` to every bench binary; ignored.
    #[arg(long, hide = true)]
    #[serde(skip)]
    bench: bool,
}

impl Args {
    fn check(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.seconds > 0 && self.concurrency > 0,
            "--seconds and --concurrency must be > 0"
        );
        anyhow::ensure!(self.users > 0, "--users must be > 0");
        anyhow::ensure!(
            (1..=self.users).contains(&self.tenants),
            "--tenants must be 1 to --users"
        );
        anyhow::ensure!(
            (1..=4096).contains(&self.answer_chars),
            "--answer-chars must be 1 to 4096"
        );
        anyhow::ensure!(
            (0.0..=100_000.0).contains(&self.rate),
            "--rate must be 0 to 100000"
        );
        anyhow::ensure!(
            self.quiet_tenant_turns <= MAX_QUIET_TURNS,
            "--quiet-tenant-turns must be 0 to {MAX_QUIET_TURNS}"
        );
        anyhow::ensure!(
            !self.flood_off || self.quiet_tenant_turns > 0,
            "--flood-off needs --quiet-tenant-turns"
        );
        anyhow::ensure!(
            (self.capacity() as u64 + self.quiet_tenant_turns) < FIRST_HISTORY_UPDATE_ID,
            "--seconds is too long: the live update ids would reach the history's"
        );
        anyhow::ensure!(
            self.history_rows.saturating_add(self.quiet_history_rows()) <= MAX_HISTORY_ROWS,
            "--history-rows must be 0 to {MAX_HISTORY_ROWS}"
        );
        Ok(())
    }

    /// The quiet tenant's history: as many turns per user as the flood's users have.
    fn quiet_history_rows(&self) -> u64 {
        (self.history_rows as f64 * self.quiet_tenant_turns as f64 / self.users.max(1) as f64).round() as u64
    }

    /// Sequence numbers the run may use: the size of the per-turn timestamp tables.
    fn capacity(&self) -> usize {
        if self.rate > 0.0 {
            (self.rate * self.seconds as f64).ceil() as usize + 1
        } else {
            CLOSED_LOOP_MAX_RATE * self.seconds as usize
        }
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Closed loop: more webhooks per second than ingress has ever accepted on the reference
/// machine; a run that reaches it stops posting early and says so.
const CLOSED_LOOP_MAX_RATE: usize = 30_000;
/// Telegram sender ids of the bench users start here (a realistic 9-digit id).
const FIRST_SENDER_ID: u64 = 100_000_000;
/// Telegram update ids (idempotency keys) of the history turns start here, far above the
/// live webhooks' (sequence number + 1), so that no live webhook is taken for a duplicate.
const FIRST_HISTORY_UPDATE_ID: u64 = 1_000_000_000;
/// Keeps the history's update ids within Telegram's (32-bit) range.
const MAX_HISTORY_ROWS: u64 = 1_000_000_000;
/// The quiet tenant's turns at most (a user and a task each).
const MAX_QUIET_TURNS: u64 = 100_000;
/// The history is received over this many days, ending an hour before the load.
const HISTORY_DAYS: i64 = 30;
/// History rows per bulk-load statement, and the owner connections loading in parallel.
const LOAD_CHUNK: i64 = 50_000;
const LOAD_CONNECTIONS: usize = 2;
/// The idle instance connects lazily; statements are counted only after this.
const IDLE_SETTLE: Duration = Duration::from_secs(3);

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    args.check()?;
    let db = BenchDb::create().await?;
    eprintln!("database {} (migrated)", db.name);
    let outcome = run(&args, &db).await;
    if args.keep_db {
        eprintln!("database {} kept: {}", db.name, db.url);
    } else {
        db.drop_now().await;
    }
    let results = outcome?;
    if args.json {
        println!("{}", serde_json::to_string(&results)?);
    } else {
        results.print();
    }
    Ok(())
}

async fn run(args: &Args, db: &BenchDb) -> anyhow::Result<Results> {
    let shared = Arc::new(Shared::new(args));
    let stand_ins = start_stand_ins(shared.clone()).await?;
    let quiet_tenants = u64::from(args.quiet_tenant_turns > 0);
    let mut tenants = provision_tenants(db, args.tenants + quiet_tenants, &stand_ins).await?;
    // The agent URL names the index among all tenants, the quiet one last.
    let _ = shared.secrets.set(tenants.secrets.clone());
    let quiet = (quiet_tenants > 0).then(|| tenants.split_off(args.tenants as usize));
    let history = if args.history_rows > 0 {
        Some(load_history(args, db, &tenants, quiet.as_ref(), &stand_ins).await?)
    } else {
        None
    };

    let addr = free_local_port()?;
    let log = log_path(db, "gateway");
    let mut gateway = Gateway::start("the gateway instance", &db.url, Some(addr), true, log)?;
    eprintln!(
        "gateway pid {} on {addr}, log {}",
        gateway.pid(),
        gateway.log.display()
    );
    let ready = gateway.wait_ready(addr).await?;
    let targets = Arc::new(Targets::new(addr, &tenants.hook_paths, args)?);
    let quiet = match &quiet {
        Some(quiet) => Some(Arc::new(QuietTarget::new(addr, &quiet.hook_paths, args)?)),
        None => None,
    };
    let load = run_load(args, &shared, targets, quiet, gateway.pid(), &db.url).await?;
    let claim_to_typing_ms = scrape_typing_histogram(addr).await;
    let stopped = gateway.stop_timed().await?;
    let churn = table_churn(&db.url).await?;
    let run = GatewayRun {
        ready_secs: ready.as_secs_f64(),
        rss_max_mb: load.rss_max_mb,
        stopped,
        log: scan_log(&gateway.log),
    };
    let idle = if args.skip_idle {
        None
    } else {
        Some(measure_idle(args, db).await?)
    };
    let mut results = Results::new(args, &shared, history, load, run, idle);
    results.claim_to_typing_ms = claim_to_typing_ms;
    results.tables = churn;
    Ok(results)
}

/// Row versions the run left in the tables a turn writes: what vacuum (or the queue's
/// truncates) would have to clear, read once the gateway has stopped.
async fn table_churn(url: &str) -> anyhow::Result<Vec<TableChurn>> {
    let mut conn = PgConnection::connect(url).await?;
    // The statistics of the gateway's last transactions reach the view within a second.
    conn.execute("select pg_sleep(1.1)").await?;
    conn.execute("select pg_stat_clear_snapshot()").await?;
    Ok(sqlx::query_as(
        "select relname::text as table, n_live_tup as live, n_dead_tup as dead,
                n_tup_upd as updates, n_tup_hot_upd as hot_updates,
                (pg_total_relation_size(relid) / 8192)::int8 as pages
           from pg_stat_user_tables
          where relname like 'dispatch_queue%' or relname in ('channel_messages', 'channel_replies')
          order by relname",
    )
    .fetch_all(&mut conn)
    .await?)
}

#[derive(Serialize, sqlx::FromRow)]
struct TableChurn {
    table: String,
    live: i64,
    dead: i64,
    updates: i64,
    hot_updates: i64,
    /// Heap and indexes.
    pages: i64,
}

/// The gateway's claim→first typing histogram: the upper bounds (ms) of the buckets holding
/// p50 and p99, and the count; `None` when it cannot be read.
async fn scrape_typing_histogram(addr: SocketAddr) -> Option<BucketPercentiles> {
    let text = reqwest::get(format!("http://{addr}/metrics"))
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    let buckets: Vec<(f64, f64)> = text
        .lines()
        .filter_map(|line| line.strip_prefix("channel_bridge_typing_first_seconds_bucket{le=\""))
        .filter_map(|rest| {
            let (le, count) = rest.split_once("\"} ")?;
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().ok()?
            };
            Some((le, count.trim().parse().ok()?))
        })
        .collect();
    let total = buckets.last()?.1;
    let bound = |q: f64| {
        buckets
            .iter()
            .find(|(_, count)| *count >= q * total)
            .map_or(f64::INFINITY, |(le, _)| le * 1e3)
    };
    (total > 0.0).then(|| BucketPercentiles {
        n: total as u64,
        p50_at_most: bound(0.5),
        p99_at_most: bound(0.99),
    })
}

// ---------------------------------------------------------------------------------------
// What the stand-ins and the posters record

/// Shared by the posters and the stand-ins. Per turn (index = sequence number): when its
/// webhook was sent and answered, its first agent call, its first reply; µs since `epoch`
/// + 1, 0 = not yet.
///
/// The flood's turns come first, then the quiet tenant's (from `quiet_first`).
struct Shared {
    epoch: Instant,
    posted: Vec<AtomicU64>,
    answered: Vec<AtomicU64>,
    called: Vec<AtomicU64>,
    /// The turn's first typing indicator (`sendChatAction`).
    typed: Vec<AtomicU64>,
    /// `--stream`: the agent wrote the turn's first chunk; the first draft showed it.
    chunked: Vec<AtomicU64>,
    drafted: Vec<AtomicU64>,
    stream: bool,
    /// `--answer-later-secs`, and the client the agent posts its answers with.
    answer_later: Option<(u64, u64)>,
    events: reqwest::Client,
    replied: Vec<AtomicU64>,
    users: u64,
    answer: String,
    agent_latency: Duration,
    /// Dispatch secrets by tenant index (the agent URL path names the index).
    secrets: OnceLock<Vec<String>>,
    /// The flood's, and what cannot be told apart.
    counts: Counts,
    /// `--quiet-tenant-turns`: the quiet tenant's index, its first sequence number (the
    /// flood's capacity) and turns, and its counts.
    quiet_tenant: Option<usize>,
    quiet_first: u64,
    quiet_turns: u64,
    quiet_counts: Counts,
    /// Telegram message ids of the replies, over all chats.
    message_ids: AtomicU64,
    in_flight: Mutex<InFlight>,
}

#[derive(Default)]
struct Counts {
    agent_calls: AtomicU64,
    bad_signatures: AtomicU64,
    /// Agent calls of a turn that had been called before.
    repeat_calls: AtomicU64,
    /// Agent calls or replies whose turn could not be identified.
    unknown_turns: AtomicU64,
    turns_posted: AtomicU64,
    reply_parts: AtomicU64,
    /// Replies to a turn that already had one (answers fit one part, so: duplicates).
    repeat_replies: AtomicU64,
    /// `--answer-later-secs`: answers posted to the events URL, and those given up.
    events_posted: AtomicU64,
    events_failed: AtomicU64,
}

impl Shared {
    fn new(args: &Args) -> Self {
        let turns = args.capacity() + args.quiet_tenant_turns as usize;
        let table = || (0..turns).map(|_| AtomicU64::new(0)).collect();
        Self {
            epoch: Instant::now(),
            posted: table(),
            answered: table(),
            called: table(),
            typed: table(),
            chunked: table(),
            drafted: table(),
            stream: args.stream,
            answer_later: args.answer_later_secs,
            events: reqwest::Client::new(),
            replied: table(),
            users: args.users,
            answer: "lorem ipsum dolor sit amet "
                .chars()
                .cycle()
                .take(args.answer_chars)
                .collect(),
            agent_latency: Duration::from_millis(args.agent_latency_ms),
            secrets: OnceLock::new(),
            counts: Counts::default(),
            quiet_tenant: (args.quiet_tenant_turns > 0).then_some(args.tenants as usize),
            quiet_first: args.capacity() as u64,
            quiet_turns: args.quiet_tenant_turns,
            quiet_counts: Counts::default(),
            message_ids: AtomicU64::new(0),
            in_flight: Mutex::new(InFlight::default()),
        }
    }

    fn is_quiet_turn(&self, seq: u64) -> bool {
        seq.checked_sub(self.quiet_first)
            .is_some_and(|k| k < self.quiet_turns)
    }

    /// The counts a turn's events go to: the quiet tenant's or the flood's (also for a turn
    /// not identified).
    fn counts_of_turn(&self, seq: Option<u64>) -> &Counts {
        if seq.is_some_and(|seq| self.is_quiet_turn(seq)) {
            &self.quiet_counts
        } else {
            &self.counts
        }
    }

    /// The counts of a tenant (by agent URL index).
    fn counts_of_tenant(&self, tenant: usize) -> &Counts {
        if self.quiet_tenant == Some(tenant) {
            &self.quiet_counts
        } else {
            &self.counts
        }
    }

    /// Turns with a reply, every tenant's.
    fn turns_posted(&self) -> u64 {
        self.counts.turns_posted.load(Relaxed) + self.quiet_counts.turns_posted.load(Relaxed)
    }

    /// A per-turn table's flood part and the quiet tenant's.
    fn split<'a>(&self, table: &'a [AtomicU64]) -> (&'a [AtomicU64], &'a [AtomicU64]) {
        table.split_at((self.quiet_first as usize).min(table.len()))
    }

    fn now(&self) -> u64 {
        self.epoch.elapsed().as_micros() as u64 + 1
    }

    /// Stamps `table[seq]` now unless it is stamped: `Some(false)` for a repeat, `None` for
    /// a sequence number out of range.
    fn stamp_first(&self, table: &[AtomicU64], seq: u64) -> Option<bool> {
        let slot = table.get(usize::try_from(seq).ok()?)?;
        Some(slot.compare_exchange(0, self.now(), Relaxed, Relaxed).is_ok())
    }

    fn in_flight(&self) -> MutexGuard<'_, InFlight> {
        self.in_flight
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn signature_ok(&self, tenant: usize, headers: &HeaderMap, body: &[u8]) -> bool {
        let Some(secret) = self.secrets.get().and_then(|s| s.get(tenant)) else {
            return false;
        };
        let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
        signature::verify(
            secret,
            header("webhook-id"),
            header("webhook-timestamp"),
            header("webhook-signature"),
            body,
            chrono::Utc::now().timestamp(),
        )
        .is_ok()
    }
}

/// Nonzero stamps of a table.
fn stamps(table: &[AtomicU64]) -> impl Iterator<Item = u64> + '_ {
    table.iter().map(|t| t.load(Relaxed)).filter(|&t| t > 0)
}

/// `to - from` in µs for every turn stamped in both tables.
fn intervals(from: &[AtomicU64], to: &[AtomicU64]) -> Vec<u64> {
    from.iter()
        .zip(to)
        .map(|(a, b)| (a.load(Relaxed), b.load(Relaxed)))
        .filter(|&(a, b)| a > 0 && b > 0)
        .map(|(a, b)| b.saturating_sub(a))
        .collect()
}

/// Agent calls in flight: current, maxima, and the integral over time (call·seconds), from
/// which `close_window` gives the time-weighted mean.
#[derive(Default)]
struct InFlight {
    current: u64,
    max: u64,
    window_max: u64,
    call_secs: f64,
    since: Option<Instant>,
}

impl InFlight {
    fn advance(&mut self) {
        let now = Instant::now();
        if let Some(since) = self.since {
            self.call_secs += self.current as f64 * (now - since).as_secs_f64();
        }
        self.since = Some(now);
    }

    fn enter(&mut self) {
        self.advance();
        self.current += 1;
        self.max = self.max.max(self.current);
        self.window_max = self.window_max.max(self.current);
    }

    fn leave(&mut self) {
        self.advance();
        self.current = self.current.saturating_sub(1);
    }

    /// Starts a window; returns the integral so far.
    fn open_window(&mut self) -> f64 {
        self.advance();
        self.window_max = self.current;
        self.call_secs
    }

    /// (integral so far, max since `open_window`).
    fn close_window(&mut self) -> (f64, u64) {
        self.advance();
        (self.call_secs, self.window_max)
    }
}

/// One agent call in flight, for as long as it lives (a dropped request included).
struct AgentCall<'a>(&'a Shared);

impl<'a> AgentCall<'a> {
    fn enter(shared: &'a Shared) -> Self {
        shared.in_flight().enter();
        Self(shared)
    }
}

impl Drop for AgentCall<'_> {
    fn drop(&mut self) {
        self.0.in_flight().leave();
    }
}

// ---------------------------------------------------------------------------------------
// The agent and Telegram stand-ins

/// Serves both stand-ins; returns their base URL.
async fn start_stand_ins(shared: Arc<Shared>) -> anyhow::Result<String> {
    let app = Router::new()
        .route("/agent/{tenant}", post(agent_call))
        .route("/telegram/{bot}/sendMessage", post(telegram_send))
        .route("/telegram/{bot}/sendChatAction", post(telegram_chat_action))
        .route("/telegram/{bot}/sendMessageDraft", post(telegram_draft))
        .with_state(shared);
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .context("Failed to bind the stand-ins")?;
    let base = format!("http://{}", listener.local_addr()?);
    tokio::spawn(serve_http1_and_h2c(listener, app));
    Ok(base)
}

/// HTTP/1.1 or HTTP/2 with prior knowledge, as each connection's preface says: the gateway
/// calls the agent over `h2c` when run with `CB_AGENT_HTTP2=true`. No stream limit, as an
/// agent server for thousands of calls in flight would be configured.
async fn serve_http1_and_h2c(listener: TcpListener, app: Router) {
    use hyper_util::rt::{TokioExecutor, TokioIo};
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let service = hyper_util::service::TowerToHyperService::new(app.clone());
        tokio::spawn(async move {
            let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            builder.http2().max_concurrent_streams(None);
            let _ = builder.serve_connection(TokioIo::new(stream), service).await;
        });
    }
}

/// Verifies the signature as a real agent would, waits the agent's latency, answers.
async fn agent_call(
    State(shared): State<Arc<Shared>>,
    UrlPath(tenant): UrlPath<usize>,
    headers: HeaderMap,
    body: Bytes,
) -> axum::response::Response {
    let counts = shared.counts_of_tenant(tenant);
    counts.agent_calls.fetch_add(1, Relaxed);
    if !shared.signature_ok(tenant, &headers, &body) {
        counts.bad_signatures.fetch_add(1, Relaxed);
        let refused = (
            StatusCode::UNAUTHORIZED,
            Json(json!({ "error": "bad signature" })),
        );
        return refused.into_response();
    }
    let call = AgentCall::enter(&shared);
    let turn = turn_of_dispatch(&body);
    match turn.and_then(|seq| shared.stamp_first(&shared.called, seq)) {
        Some(true) => {}
        Some(false) => _ = counts.repeat_calls.fetch_add(1, Relaxed),
        None => _ = counts.unknown_turns.fetch_add(1, Relaxed),
    }
    if shared.stream {
        // The in-flight count covers the call up to its first chunk only.
        drop(call);
        return stream_answer(shared.clone(), turn);
    }
    if let Some((from, to)) = shared.answer_later {
        // The call ends now; the answer goes to the turn's events URL later.
        drop(call);
        let url = serde_json::from_slice::<Value>(&body)
            .ok()
            .and_then(|p| p.pointer("/reply/url").and_then(Value::as_str).map(str::to_owned));
        if let Some(url) = url {
            let spread = (to - from) * 1000;
            let jitter = turn.map_or(0, |seq| seq.wrapping_mul(2_654_435_761) % spread.max(1));
            let delay = Duration::from_millis(from * 1000 + jitter);
            tokio::spawn(answer_later(shared.clone(), tenant, url, delay));
        }
        return (StatusCode::ACCEPTED, Json(json!({ "status": "pending" }))).into_response();
    }
    tokio::time::sleep(shared.agent_latency).await;
    drop(call);
    (StatusCode::OK, Json(json!({ "content": shared.answer }))).into_response()
}

/// `--answer-later-secs`: the answer as a signed `done` event, after `delay`; retried (with
/// the same event id) while the gateway does not answer 2xx.
async fn answer_later(shared: Arc<Shared>, tenant: usize, url: String, delay: Duration) {
    tokio::time::sleep(delay).await;
    let Some(secret) = shared.secrets.get().and_then(|s| s.get(tenant)).cloned() else {
        return;
    };
    let body = json!({"type": "done", "content": shared.answer}).to_string();
    let id = format!("done-{}", url.len() as u64 ^ shared.now());
    for _ in 0..5 {
        let now = chrono::Utc::now().timestamp();
        let Ok(signature) = signature::sign(&secret, &id, now, body.as_bytes()) else {
            return;
        };
        let sent = shared
            .events
            .post(&url)
            .header("content-type", "application/json")
            .header("webhook-id", &id)
            .header("webhook-timestamp", now.to_string())
            .header("webhook-signature", signature)
            .body(body.clone())
            .send()
            .await;
        if sent.is_ok_and(|r| r.status().is_success()) {
            shared
                .counts_of_tenant(tenant)
                .events_posted
                .fetch_add(1, Relaxed);
            return;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    shared
        .counts_of_tenant(tenant)
        .events_failed
        .fetch_add(1, Relaxed);
}

fn parse_range(text: &str) -> Result<(u64, u64), String> {
    let (from, to) = text
        .split_once('-')
        .ok_or("expected FROM-TO seconds, e.g. 30-120")?;
    let from: u64 = from.trim().parse().map_err(|e| format!("{e}"))?;
    let to: u64 = to.trim().parse().map_err(|e| format!("{e}"))?;
    if from > to {
        return Err("FROM must not exceed TO".into());
    }
    Ok((from, to))
}

/// `--stream`: the first half of the answer as an OpenAI chunk at once (stamped as it is
/// handed to the connection), the rest and `[DONE]` after the agent's latency.
fn stream_answer(shared: Arc<Shared>, turn: Option<u64>) -> axum::response::Response {
    let chunk = |text: &str| {
        let chunk =
            json!({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": text}}]});
        Bytes::from(format!("data: {chunk}\n\n"))
    };
    let half = shared.answer.len() / 2;
    let (first, rest) = (chunk(&shared.answer[..half]), chunk(&shared.answer[half..]));
    let steps = futures::stream::unfold(0u8, move |step| {
        let shared = shared.clone();
        let (first, rest) = (first.clone(), rest.clone());
        async move {
            match step {
                0 => {
                    if let Some(seq) = turn {
                        shared.stamp_first(&shared.chunked, seq);
                    }
                    Some((Ok::<_, std::convert::Infallible>(first), 1))
                }
                1 => {
                    tokio::time::sleep(shared.agent_latency).await;
                    Some((Ok(rest), 2))
                }
                2 => Some((Ok(Bytes::from_static(b"data: [DONE]\n\n")), 3)),
                _ => None,
            }
        }
    });
    (
        [("content-type", "text/event-stream")],
        axum::body::Body::from_stream(steps),
    )
        .into_response()
}

/// `sendMessageDraft` (`--stream`): stamps the first draft of the sender's turn in flight.
async fn telegram_draft(State(shared): State<Arc<Shared>>, body: Bytes) -> Json<Value> {
    if let Some(seq) = turn_in_flight(&shared, &body) {
        shared.stamp_first(&shared.drafted, seq);
    }
    Json(json!({ "ok": true, "result": true }))
}

/// The sender's turn in flight, by the request's `chat_id`: the oldest posted turn of that
/// user without a reply (a user has one turn in flight at a time). The quiet tenant's user
/// k (after the flood's users) has one turn, `quiet_first + k`.
fn turn_in_flight(shared: &Shared, body: &[u8]) -> Option<u64> {
    let chat = serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|request| request["chat_id"].as_u64());
    let user = chat.and_then(|chat| chat.checked_sub(FIRST_SENDER_ID))?;
    let in_flight = |&seq: &u64| {
        let posted = shared
            .posted
            .get(seq as usize)
            .is_some_and(|t| t.load(Relaxed) > 0);
        posted
            && shared
                .replied
                .get(seq as usize)
                .is_some_and(|t| t.load(Relaxed) == 0)
    };
    match user.checked_sub(shared.users) {
        None => (user..shared.quiet_first)
            .step_by(shared.users.max(1) as usize)
            .find(in_flight),
        Some(k) => Some(shared.quiet_first + k).filter(|&seq| shared.is_quiet_turn(seq) && in_flight(&seq)),
    }
}

/// The sequence number in the dispatched turn's text (`load <seq>`).
fn turn_of_dispatch(body: &[u8]) -> Option<u64> {
    let payload: Value = serde_json::from_slice(body).ok()?;
    payload
        .get("content")?
        .as_str()?
        .strip_prefix("load ")?
        .parse()
        .ok()
}

/// `sendMessage`: the reply threads to the webhook's message id, which is seq + 1.
async fn telegram_send(
    State(shared): State<Arc<Shared>>,
    UrlPath(bot): UrlPath<String>,
    body: Bytes,
) -> (StatusCode, Json<Value>) {
    let token_ok = bot
        .strip_prefix("bot")
        .and_then(|token| token.split_once(':'))
        .is_some_and(|(_, secret)| secret == BOT_SECRET);
    let request = serde_json::from_slice::<Value>(&body).ok();
    let (Some(request), true) = (request, token_ok) else {
        let answer = json!({ "ok": false, "error_code": 400, "description": "Bad Request" });
        return (StatusCode::BAD_REQUEST, Json(answer));
    };
    let message_id = shared.message_ids.fetch_add(1, Relaxed) + 1;
    let turn = request
        .pointer("/reply_parameters/message_id")
        .and_then(Value::as_u64)
        .and_then(|id| id.checked_sub(1));
    let counts = shared.counts_of_turn(turn);
    counts.reply_parts.fetch_add(1, Relaxed);
    match turn.and_then(|seq| shared.stamp_first(&shared.replied, seq)) {
        Some(true) => _ = counts.turns_posted.fetch_add(1, Relaxed),
        Some(false) => _ = counts.repeat_replies.fetch_add(1, Relaxed),
        None => _ = counts.unknown_turns.fetch_add(1, Relaxed),
    }
    let result = json!({
        "message_id": message_id,
        "date": chrono::Utc::now().timestamp(),
        "chat": { "id": request["chat_id"], "type": "private" },
        "text": request["text"],
    });
    (StatusCode::OK, Json(json!({ "ok": true, "result": result })))
}

/// `sendChatAction`: stamps the first indicator of the sender's turn in flight, the oldest
/// posted turn of that user without a reply (a user has one turn in flight at a time).
async fn telegram_chat_action(State(shared): State<Arc<Shared>>, body: Bytes) -> Json<Value> {
    if let Some(seq) = turn_in_flight(&shared, &body) {
        shared.stamp_first(&shared.typed, seq);
    }
    Json(json!({ "ok": true, "result": true }))
}

// ---------------------------------------------------------------------------------------
// Provisioning

/// By tenant index.
struct Tenants {
    ids: Vec<uuid::Uuid>,
    /// Each tenant's Telegram connector.
    connectors: Vec<uuid::Uuid>,
    /// Webhook path of each tenant's connector.
    hook_paths: Vec<String>,
    secrets: Vec<String>,
}

impl Tenants {
    /// Removes the tenants from index `at` on and returns them.
    fn split_off(&mut self, at: usize) -> Tenants {
        let at = at.min(self.ids.len());
        Tenants {
            ids: self.ids.split_off(at),
            connectors: self.connectors.split_off(at),
            hook_paths: self.hook_paths.split_off(at),
            secrets: self.secrets.split_off(at),
        }
    }
}

async fn provision_tenants(db: &BenchDb, count: u64, stand_ins: &str) -> anyhow::Result<Tenants> {
    let pool = db::connect_pool(&db.settings())?;
    let mut tenants = Tenants {
        ids: Vec::new(),
        connectors: Vec::new(),
        hook_paths: Vec::new(),
        secrets: Vec::new(),
    };
    for t in 0..count {
        let agent_url = format!("{stand_ins}/agent/{t}");
        let created = provision::create_tenant(
            &pool,
            &bench_keys().0,
            &format!("bench-{t}"),
            "Bench",
            Some(&agent_url),
        )
        .await
        .context("Failed to create a tenant")?;
        // A bot of its own per tenant; unlinked senders are dispatched (one conversation each).
        let (name, api) = (format!("bench bot {t}"), format!("{stand_ins}/telegram"));
        let connector = telegram_connector(BOT_ID + t, name, api, UnlinkedPolicy::Allow);
        let added = provision::add_connector(&pool, &bench_keys().0, created.tenant_id, &connector)
            .await
            .context("Failed to add a connector")?;
        tenants.ids.push(created.tenant_id.0);
        tenants.connectors.push(added.connector_id.0);
        tenants.hook_paths.push(added.webhook_path);
        tenants.secrets.push(created.dispatch_secret);
    }
    pool.close().await;
    eprintln!("provisioned {count} tenant(s), one Telegram connector each");
    Ok(tenants)
}

// ---------------------------------------------------------------------------------------
// History

/// One chunk of history turns, written as the gateway writes an unlinked Telegram sender's
/// turn and its reply. Per row `i` (from 0): user `i % users` (round-robin, as the webhooks
/// go), whose sender id is `$10 + user`, of tenant `user % tenants` (`$1`/`$2` by index, as
/// `Targets::webhook` picks the connector); the update id (idempotency key) is `$9 + i`;
/// the Telegram message id is the user's `k`-th message in the chat, `2k + 1`, the bot's
/// reply to it `2k + 2`; `received_at` climbs from `$8` over `HISTORY_DAYS` days; the id is
/// a UUIDv7 of `received_at`, like `MessageId::new`; `h` (a hash of `i`) picks status and
/// text. 98 % `executed` and delivered (decision `respond`, one attempt) with a 40–900
/// character response and its one reply part `sent`; 1 % `dispatch_failed` (the agent
/// refused the call: one attempt, no response; counts in history); 1 % `ignored` (a
/// `[image]` placeholder decided at ingress, not in history). Requests are 8–247
/// characters. Metadata is what the Telegram parser keeps of the bench's webhooks. Rows
/// affected: the reply parts.
const HISTORY_SQL: &str = "
with g as (
    select i, u, h, ts, $10 + u as sender, 1 + (u % cardinality($1::uuid[]))::int as t,
           md5(i::text) as m,
           case h % 100 when 0 then 'dispatch_failed' when 1 then 'ignored' else 'executed' end as kind
      from (select i, i % $6 as u, hashint8(i)::int8 + 2147483648 as h,
                   $8::timestamptz + (i::float8 / $5) * interval '1 day' * $12 as ts
              from generate_series($3::int8, $4::int8) as i) raw),
messages as (
    insert into channel_messages (tenant_id, id, connector_id, platform, idempotency_key,
        platform_message_id, chat_id, platform_user_id, user_id, conversation_key,
        request_content, response_content, decision, status, attempts, last_error,
        received_at, completed_at, delivered_at, updated_at, metadata)
    select ($1::uuid[])[t],
           (lpad(to_hex((extract(epoch from ts) * 1000)::int8), 12, '0') || '7' || substr(m, 1, 3)
                || '8' || substr(m, 4, 15))::uuid,
           ($2::uuid[])[t], 'telegram', ($9 + i)::text, (2 * (i / $6) + 1)::text,
           sender::text, sender::text, null, 'sender:' || ($2::uuid[])[t] || ':' || sender,
           case when kind = 'ignored' then '[image]'
                else substr($7, (1 + h % 997)::int, (8 + (h / 1000) % 240)::int) end,
           case when kind = 'executed' then substr($7, (1 + (h / 7) % 991)::int, (40 + (h / 300000) % 861)::int) end,
           case kind when 'executed' then 'respond' when 'ignored' then 'ignore_non_text'
                     else 'dispatch_failed' end,
           kind,
           case when kind = 'ignored' then 0 else 1 end,
           case when kind = 'dispatch_failed' then $11 end,
           ts,
           case when kind = 'ignored' then ts else ts + interval '2 seconds' end,
           case when kind = 'executed' then ts + interval '2300 milliseconds' end,
           case kind when 'executed' then ts + interval '2300 milliseconds'
                     when 'ignored' then ts else ts + interval '2 seconds' end,
           jsonb_build_object('chat_type', 'private', 'chat_title', null, 'username', null,
                              'first_name', 'User ' || u, 'date', floor(extract(epoch from ts))::int8,
                              'message_thread_id', null, 'caption', null)
      from g
 returning tenant_id, id, platform_message_id, status, response_content, completed_at, delivered_at)
insert into channel_replies (tenant_id, message_id, part_index, content, status, platform_message_id,
    attempts, created_at, updated_at, sent_at, sending_since)
select tenant_id, id, 0, response_content, 'sent', (platform_message_id::int8 + 1)::text, 1,
       completed_at, delivered_at, delivered_at, completed_at
  from messages
 where status = 'executed'";

#[derive(Serialize)]
struct HistoryLoad {
    rows: u64,
    /// Of which `executed`, each with one reply part.
    replies: u64,
    per_user: f64,
    /// `--quiet-tenant-turns`: the quiet tenant's users' history, loaded the same way after
    /// the flood's (update ids after theirs); not in the figures above.
    #[serde(skip_serializing_if = "Option::is_none")]
    quiet: Option<QuietHistory>,
    days: i64,
    insert_secs: f64,
    vacuum_analyze_secs: f64,
    checkpoint_secs: f64,
    /// With indexes and TOAST.
    messages_mb: f64,
    replies_mb: f64,
}

#[derive(Serialize)]
struct QuietHistory {
    rows: u64,
    replies: u64,
}

/// Bulk-loads `--history-rows` turns (and the quiet tenant's users' share), then VACUUM
/// (ANALYZE) and CHECKPOINT, as the owner.
async fn load_history(
    args: &Args,
    db: &BenchDb,
    tenants: &Tenants,
    quiet: Option<&Tenants>,
    stand_ins: &str,
) -> anyhow::Result<HistoryLoad> {
    let started = Instant::now();
    // The newest history turn is an hour before now: older than any live turn.
    let first_at = chrono::Utc::now() - chrono::Duration::days(HISTORY_DAYS) - chrono::Duration::hours(1);
    let stand_ins = reqwest::Url::parse(stand_ins).context("the stand-ins' URL")?;
    // What `dispatch::agent` records when the agent refuses a call.
    let error = format!(
        "agent {}:{} answered 400 Bad Request",
        stand_ins.host_str().unwrap_or("127.0.0.1"),
        stand_ins.port_or_known_default().unwrap_or(80)
    );
    let plan = HistoryPlan {
        url: &db.url,
        tenants,
        rows: i64::try_from(args.history_rows)?,
        users: i64::try_from(args.users)?,
        first_at,
        error,
        text: filler_text(),
        first_update_id: FIRST_HISTORY_UPDATE_ID as i64,
        first_sender: FIRST_SENDER_ID as i64,
        next: AtomicI64::new(0),
    };
    let loaders = (0..LOAD_CONNECTIONS).map(|_| load_history_chunks(&plan));
    let replies: u64 = futures::future::try_join_all(loaders).await?.into_iter().sum();
    let quiet = match quiet {
        Some(quiet_tenants) if args.quiet_history_rows() > 0 => {
            // The quiet users follow the flood's; so do their update ids.
            let rows = args.quiet_history_rows();
            let plan = HistoryPlan {
                tenants: quiet_tenants,
                rows: i64::try_from(rows)?,
                users: i64::try_from(args.quiet_tenant_turns)?,
                first_update_id: plan.first_update_id + plan.rows,
                first_sender: plan.first_sender + plan.users,
                next: AtomicI64::new(0),
                ..plan
            };
            let loaders = (0..LOAD_CONNECTIONS).map(|_| load_history_chunks(&plan));
            let replies = futures::future::try_join_all(loaders).await?.into_iter().sum();
            Some(QuietHistory { rows, replies })
        }
        _ => None,
    };
    let inserted = started.elapsed();

    let mut owner = PgConnection::connect(&db.url).await?;
    let vacuum = Instant::now();
    owner.execute("vacuum (analyze)").await?;
    let vacuumed = vacuum.elapsed();
    let checkpoint = Instant::now();
    owner.execute("checkpoint").await?;
    let checkpointed = checkpoint.elapsed();
    let (messages, reply_parts): (i64, i64) = sqlx::query_as(
        "select pg_total_relation_size('channel_messages'), pg_total_relation_size('channel_replies')",
    )
    .fetch_one(&mut owner)
    .await?;
    owner.close().await?;
    let mb = |bytes: i64| bytes as f64 / (1024.0 * 1024.0);
    let load = HistoryLoad {
        rows: args.history_rows,
        replies,
        per_user: args.history_rows as f64 / args.users as f64,
        quiet,
        days: HISTORY_DAYS,
        insert_secs: inserted.as_secs_f64(),
        vacuum_analyze_secs: vacuumed.as_secs_f64(),
        checkpoint_secs: checkpointed.as_secs_f64(),
        messages_mb: mb(messages),
        replies_mb: mb(reply_parts),
    };
    eprintln!(
        "history: {} turns ({} with a reply) in {:.1} s ({:.0} rows/s); vacuum analyze {:.1} s, \
         checkpoint {:.1} s; channel_messages {:.1} MB, channel_replies {:.1} MB; total {:.1} s",
        load.rows,
        load.replies,
        load.insert_secs,
        load.rows as f64 / load.insert_secs.max(1e-9),
        load.vacuum_analyze_secs,
        load.checkpoint_secs,
        load.messages_mb,
        load.replies_mb,
        started.elapsed().as_secs_f64()
    );
    if let Some(q) = &load.quiet {
        eprintln!(
            "history: the quiet tenant's {} users {} turns ({} with a reply)",
            args.quiet_tenant_turns, q.rows, q.replies
        );
    }
    Ok(load)
}

/// What the loaders share; `next` is the first row of the next chunk to take.
struct HistoryPlan<'a> {
    url: &'a str,
    tenants: &'a Tenants,
    rows: i64,
    users: i64,
    first_at: chrono::DateTime<chrono::Utc>,
    error: String,
    text: String,
    /// The update id of row 0, and the sender id of user 0.
    first_update_id: i64,
    first_sender: i64,
    next: AtomicI64,
}

/// Loads chunks until none is left; returns the reply parts inserted. Owner connection:
/// bulk setup is not app traffic.
async fn load_history_chunks(plan: &HistoryPlan<'_>) -> anyhow::Result<u64> {
    let mut conn = PgConnection::connect(plan.url).await?;
    // Setup, not the system under test: no need to wait for each chunk's WAL flush.
    conn.execute("set synchronous_commit = off").await?;
    let mut replies = 0;
    loop {
        let from = plan.next.fetch_add(LOAD_CHUNK, Relaxed);
        if from >= plan.rows {
            conn.close().await?;
            return Ok(replies);
        }
        let to = (from + LOAD_CHUNK).min(plan.rows) - 1;
        let done = sqlx::query(HISTORY_SQL)
            .bind(&plan.tenants.ids)
            .bind(&plan.tenants.connectors)
            .bind(from)
            .bind(to)
            .bind(plan.rows)
            .bind(plan.users)
            .bind(&plan.text)
            .bind(plan.first_at)
            .bind(plan.first_update_id)
            .bind(plan.first_sender)
            .bind(&plan.error)
            .bind(HISTORY_DAYS as f64)
            .execute(&mut conn)
            .await
            .context("Failed to bulk-load history")?;
        replies += done.rows_affected();
    }
}

// ---------------------------------------------------------------------------------------
// Load

/// Webhook URLs by tenant; users are spread round-robin over the tenants.
struct Targets {
    hooks: Vec<reqwest::Url>,
    users: u64,
    rate: f64,
    capacity: u64,
}

impl Targets {
    fn new(addr: SocketAddr, hook_paths: &[String], args: &Args) -> anyhow::Result<Self> {
        let hooks = hook_paths
            .iter()
            .map(|path| format!("http://{addr}{path}").parse())
            .collect::<Result<Vec<_>, _>>()
            .context("a webhook URL")?;
        anyhow::ensure!(!hooks.is_empty(), "no tenant was provisioned");
        Ok(Self {
            hooks,
            users: args.users,
            rate: args.rate,
            capacity: args.capacity() as u64,
        })
    }

    /// Turn `seq`: a private text message from user `seq % users`, ids seq + 1.
    fn webhook(&self, seq: u64) -> (reqwest::Url, String) {
        let user = seq % self.users;
        let body = telegram_update(seq, FIRST_SENDER_ID + user, user);
        let hook = &self.hooks[(user % self.hooks.len() as u64) as usize];
        (hook.clone(), body)
    }
}

/// Turn `seq` as a Telegram update: a private text message `load <seq>` from `sender`
/// (first name `User <name>`), update and message id seq + 1.
fn telegram_update(seq: u64, sender: u64, name: u64) -> String {
    let (id, date) = (seq + 1, chrono::Utc::now().timestamp());
    format!(
        r#"{{"update_id":{id},"message":{{"message_id":{id},"from":{{"id":{sender},"is_bot":false,"first_name":"User {name}"}},"chat":{{"id":{sender},"first_name":"User {name}","type":"private"}},"date":{date},"text":"load {seq}"}}}}"#
    )
}

/// The quiet tenant's webhooks: its turn k (0 to N - 1) is sequence number `first_seq + k`,
/// from its user k (sender id after the flood's users; named as in its history), due at
/// start + (k + ½)·window/N.
struct QuietTarget {
    hook: reqwest::Url,
    first_seq: u64,
    first_sender: u64,
    turns: u64,
    window: Duration,
}

impl QuietTarget {
    fn new(addr: SocketAddr, hook_paths: &[String], args: &Args) -> anyhow::Result<Self> {
        let path = hook_paths
            .first()
            .context("the quiet tenant was not provisioned")?;
        Ok(Self {
            hook: format!("http://{addr}{path}")
                .parse()
                .context("the quiet tenant's webhook URL")?,
            first_seq: args.capacity() as u64,
            first_sender: FIRST_SENDER_ID + args.users,
            turns: args.quiet_tenant_turns,
            window: Duration::from_secs(args.seconds),
        })
    }

    fn due(&self, start: Instant, k: u64) -> Instant {
        start + self.window.mul_f64((k as f64 + 0.5) / self.turns.max(1) as f64)
    }

    /// (sequence number, URL, body) of turn k.
    fn webhook(&self, k: u64) -> (u64, reqwest::Url, String) {
        let seq = self.first_seq + k;
        (
            seq,
            self.hook.clone(),
            telegram_update(seq, self.first_sender + k, k),
        )
    }
}

/// What the posters saw; `started`/`ended` are stamps (µs since the epoch).
#[derive(Default)]
struct Posting {
    started: u64,
    ended: u64,
    sent: u64,
    accepted: u64,
    errors: BTreeMap<String, u64>,
    /// Open loop: the longest a webhook was sent after its due time.
    max_lag: Duration,
    capacity_reached: bool,
}

impl Posting {
    fn merge(&mut self, other: Posting) {
        self.sent += other.sent;
        self.accepted += other.accepted;
        for (kind, n) in other.errors {
            *self.errors.entry(kind).or_default() += n;
        }
        self.max_lag = self.max_lag.max(other.max_lag);
        self.capacity_reached |= other.capacity_reached;
    }

    fn secs(&self) -> f64 {
        self.ended.saturating_sub(self.started) as f64 / 1e6
    }
}

struct LoadRun {
    /// The flood's (empty with `--flood-off`).
    posting: Posting,
    /// `--quiet-tenant-turns`.
    quiet: Option<Posting>,
    in_flight_max: u64,
    in_flight_mean: f64,
    drained: bool,
    drain_wait: Duration,
    cpu: Option<CpuFigures>,
    rss_max_mb: Option<f64>,
}

/// Posting, then the drain, with the gateway's RSS and everyone's CPU measured throughout.
async fn run_load(
    args: &Args,
    shared: &Arc<Shared>,
    targets: Arc<Targets>,
    quiet: Option<Arc<QuietTarget>>,
    gateway: u32,
    db_url: &str,
) -> anyhow::Result<LoadRun> {
    let rss = RssSampler::start(gateway);
    let (cpu_before, cpu_started) = (CpuSnapshot::take(gateway, db_url).await?, Instant::now());
    let before = shared.in_flight().open_window();
    let start = Instant::now();
    let flood = async {
        if args.flood_off {
            Ok(Posting::default())
        } else {
            post_webhooks(args, targets, shared.clone(), start).await
        }
    };
    let quiet = async {
        match quiet {
            Some(quiet) => post_quiet(quiet, shared.clone(), start).await.map(Some),
            None => Ok(None),
        }
    };
    let (posting, quiet) = tokio::try_join!(flood, quiet)?;
    let (after, in_flight_max) = shared.in_flight().close_window();
    let mut accepted = posting.accepted;
    match &quiet {
        Some(q) => {
            accepted += q.accepted;
            eprintln!(
                "posted {} webhooks, {} accepted, and the quiet tenant's {}, {} accepted; draining",
                posting.sent, posting.accepted, q.sent, q.accepted
            );
        }
        None => eprintln!(
            "posted {} webhooks, {} accepted; draining",
            posting.sent, posting.accepted
        ),
    }
    let drain_limit = Duration::from_secs(args.drain_secs);
    let (drained, drain_wait) = wait_for_replies(shared, accepted, drain_limit).await;
    let turns = shared.turns_posted();
    let cpu_after = CpuSnapshot::take(gateway, db_url).await?;
    let cpu = cpu_figures(&cpu_before, &cpu_after, cpu_started.elapsed(), turns);
    // The posting window: the flood's, or with the flood off the quiet tenant's.
    let window = match &quiet {
        Some(q) if args.flood_off => q.secs(),
        _ => posting.secs(),
    };
    Ok(LoadRun {
        in_flight_mean: (after - before) / window.max(1e-9),
        posting,
        quiet,
        in_flight_max,
        drained,
        drain_wait,
        cpu,
        rss_max_mb: rss.finish().await,
    })
}

/// `--concurrency` posters from `start` for `--seconds`, open loop at `--rate` or closed
/// loop.
async fn post_webhooks(
    args: &Args,
    targets: Arc<Targets>,
    shared: Arc<Shared>,
    start: Instant,
) -> anyhow::Result<Posting> {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(args.concurrency)
        .tcp_nodelay(true)
        .timeout(Duration::from_secs(10))
        .build()?;
    let next = Arc::new(AtomicU64::new(0));
    let deadline = start + Duration::from_secs(args.seconds);
    let mut total = Posting {
        started: shared.now(),
        ..Posting::default()
    };
    let tasks: Vec<_> = (0..args.concurrency)
        .map(|_| {
            let (client, targets, shared, next) =
                (client.clone(), targets.clone(), shared.clone(), next.clone());
            tokio::spawn(async move { poster(client, targets, shared, next, start, deadline).await })
        })
        .collect();
    for task in tasks {
        total.merge(task.await.context("a poster panicked")?);
    }
    total.ended = shared.now();
    Ok(total)
}

async fn poster(
    client: reqwest::Client,
    targets: Arc<Targets>,
    shared: Arc<Shared>,
    next: Arc<AtomicU64>,
    start: Instant,
    deadline: Instant,
) -> Posting {
    let mut report = Posting::default();
    loop {
        let seq = next.fetch_add(1, Relaxed);
        if seq >= targets.capacity {
            report.capacity_reached = targets.rate == 0.0;
            break;
        }
        let due = if targets.rate > 0.0 {
            start + Duration::from_secs_f64(seq as f64 / targets.rate)
        } else {
            Instant::now()
        };
        // Open loop: every webhook due before the deadline is sent, late or not.
        if due >= deadline {
            break;
        }
        tokio::time::sleep_until(due.into()).await;
        report.max_lag = report.max_lag.max(due.elapsed());
        let (url, body) = targets.webhook(seq);
        shared.posted[seq as usize].store(shared.now(), Relaxed);
        report.sent += 1;
        let outcome = post_webhook(&client, url, body).await;
        shared.answered[seq as usize].store(shared.now(), Relaxed);
        match outcome {
            Ok(()) => report.accepted += 1,
            Err(kind) => *report.errors.entry(kind).or_default() += 1,
        }
    }
    report
}

/// The quiet tenant's webhooks, open loop: each sent at its due time by a task of its own
/// (on a client of its own), stamped as the flood's.
async fn post_quiet(quiet: Arc<QuietTarget>, shared: Arc<Shared>, start: Instant) -> anyhow::Result<Posting> {
    let client = reqwest::Client::builder()
        .tcp_nodelay(true)
        .timeout(Duration::from_secs(10))
        .build()?;
    let mut report = Posting {
        started: shared.now(),
        ..Posting::default()
    };
    let mut sends = tokio::task::JoinSet::new();
    for k in 0..quiet.turns {
        let due = quiet.due(start, k);
        tokio::time::sleep_until(due.into()).await;
        report.max_lag = report.max_lag.max(due.elapsed());
        let (seq, url, body) = quiet.webhook(k);
        let (client, shared) = (client.clone(), shared.clone());
        report.sent += 1;
        sends.spawn(async move {
            shared.posted[seq as usize].store(shared.now(), Relaxed);
            let outcome = post_webhook(&client, url, body).await;
            shared.answered[seq as usize].store(shared.now(), Relaxed);
            outcome
        });
    }
    while let Some(sent) = sends.join_next().await {
        match sent.context("a quiet tenant's webhook panicked")? {
            Ok(()) => report.accepted += 1,
            Err(kind) => *report.errors.entry(kind).or_default() += 1,
        }
    }
    report.ended = shared.now();
    Ok(report)
}

/// One signed webhook. `Ok` means 200 with the turn queued; anything else is named.
async fn post_webhook(client: &reqwest::Client, url: reqwest::Url, body: String) -> Result<(), String> {
    let now = chrono::Utc::now().timestamp();
    let headers =
        channel_bridge::sign::sign_headers(Platform::Telegram, TELEGRAM_SECRET, body.as_bytes(), now);
    let mut request = client
        .post(url)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(body);
    for (name, value) in headers {
        request = request.header(name, value);
    }
    post_queued(request).await
}

/// Polls until `accepted` turns have a reply, or `limit` passed: (all there, waited).
async fn wait_for_replies(shared: &Shared, accepted: u64, limit: Duration) -> (bool, Duration) {
    let started = Instant::now();
    loop {
        if shared.turns_posted() >= accepted {
            return (true, started.elapsed());
        }
        if started.elapsed() >= limit {
            return (false, started.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

// ---------------------------------------------------------------------------------------
// Memory and CPU, from /proc

/// The child's VmRSS every 100 ms, keeping the maximum.
struct RssSampler {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Option<u64>>,
}

impl RssSampler {
    fn start(pid: u32) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let task = tokio::spawn(async move {
            let mut max: Option<u64> = None;
            while !stopped.load(Relaxed) {
                if let Some(kb) = vm_rss_kb(pid) {
                    max = Some(max.map_or(kb, |m| m.max(kb)));
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            max
        });
        Self { stop, task }
    }

    /// The maximum in MB.
    async fn finish(self) -> Option<f64> {
        self.stop.store(true, Relaxed);
        let kb = self.task.await.ok()??;
        Some(kb as f64 / 1024.0)
    }
}

#[derive(Serialize)]
struct CpuFigures {
    window_secs: f64,
    postgres_ms_per_turn: f64,
    /// The part of it spent in the bench database's backends (a backend that exited during
    /// the run is missing).
    backends_ms_per_turn: f64,
    gateway_ms_per_turn: f64,
    bench_ms_per_turn: f64,
    machine_busy_pct: f64,
    cores: usize,
    /// Busy cores outside the gateway, this process and PostgreSQL.
    other_cores: f64,
}

fn cpu_figures(
    before: &CpuSnapshot,
    after: &CpuSnapshot,
    elapsed: Duration,
    turns: u64,
) -> Option<CpuFigures> {
    let spent = after.since(before)?;
    let [postgres, backends, gateway, bench] = spent.ms_per(turns);
    let window = elapsed.as_secs_f64();
    Some(CpuFigures {
        window_secs: window,
        postgres_ms_per_turn: postgres,
        backends_ms_per_turn: backends,
        gateway_ms_per_turn: gateway,
        bench_ms_per_turn: bench,
        machine_busy_pct: spent.machine_busy_pct,
        cores: std::thread::available_parallelism().map_or(0, |n| n.get()),
        other_cores: spent.other_cores(window),
    })
}

// ---------------------------------------------------------------------------------------
// Idle cost: a worker-only instance behind a counting PostgreSQL proxy

/// Frontend messages seen by the proxy.
#[derive(Default)]
struct ProtocolCounts {
    connections: AtomicU64,
    queries: AtomicU64,
    executes: AtomicU64,
    syncs: AtomicU64,
}

impl ProtocolCounts {
    fn count(&self, kind: u8) {
        match kind {
            b'Q' => _ = self.queries.fetch_add(1, Relaxed),
            b'E' => _ = self.executes.fetch_add(1, Relaxed),
            b'S' => _ = self.syncs.fetch_add(1, Relaxed),
            _ => {}
        }
    }

    fn snapshot(&self) -> [u64; 3] {
        [&self.queries, &self.executes, &self.syncs].map(|n| n.load(Relaxed))
    }
}

const SSL_REQUEST: u32 = 80_877_103;
const GSSENC_REQUEST: u32 = 80_877_104;

struct Proxy {
    addr: SocketAddr,
    counts: Arc<ProtocolCounts>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    async fn start(upstream: String) -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .context("Failed to bind the proxy")?;
        let addr = listener.local_addr()?;
        let counts = Arc::new(ProtocolCounts::default());
        let shared = counts.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                shared.connections.fetch_add(1, Relaxed);
                tokio::spawn(proxy_connection(client, upstream.clone(), shared.clone()));
            }
        });
        Ok(Self { addr, counts, task })
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Server to client copied as is; client to server parsed and counted.
async fn proxy_connection(client: TcpStream, upstream: String, counts: Arc<ProtocolCounts>) {
    let Ok(server) = TcpStream::connect(&upstream).await else {
        return;
    };
    let _ = (client.set_nodelay(true), server.set_nodelay(true));
    let (client_read, mut client_write) = client.into_split();
    let (mut server_read, server_write) = server.into_split();
    let backend = tokio::spawn(async move { tokio::io::copy(&mut server_read, &mut client_write).await });
    let _ = forward_frontend(client_read, server_write, &counts).await;
    let _ = backend.await;
}

/// The frontend protocol: untyped startup messages (an optional SSLRequest or
/// GSSENCRequest, whose one-byte answer the backend copy forwards, then the StartupMessage),
/// then typed messages: one type byte and an int32 length that counts itself.
async fn forward_frontend(
    from: impl AsyncRead + Unpin,
    mut to: impl AsyncWrite + Unpin,
    counts: &ProtocolCounts,
) -> std::io::Result<()> {
    let mut from = BufReader::new(from);
    loop {
        let message = read_message(&mut from, 0).await?;
        to.write_all(&message).await?;
        let code = message
            .get(4..8)
            .and_then(|c| c.try_into().ok())
            .map(u32::from_be_bytes);
        if code != Some(SSL_REQUEST) && code != Some(GSSENC_REQUEST) {
            break;
        }
    }
    loop {
        let message = match read_message(&mut from, 1).await {
            Err(err) if err.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            other => other?,
        };
        counts.count(message[0]);
        to.write_all(&message).await?;
    }
}

/// One whole message: `type_bytes` (0 or 1), an int32 length that counts itself, the rest.
async fn read_message(from: &mut (impl AsyncRead + Unpin), type_bytes: usize) -> std::io::Result<Vec<u8>> {
    let mut message = vec![0; type_bytes + 4];
    from.read_exact(&mut message).await?;
    let mut len = [0; 4];
    len.copy_from_slice(&message[type_bytes..]);
    message.resize(type_bytes + (u32::from_be_bytes(len) as usize).max(4), 0);
    from.read_exact(&mut message[type_bytes + 4..]).await?;
    Ok(message)
}

#[derive(Serialize)]
struct IdleFigures {
    window_secs: f64,
    statements_per_sec: f64,
    queries_per_sec: f64,
    executes_per_sec: f64,
    syncs_per_sec: f64,
    connections: u64,
    stopped: Stopped,
    log: LogSummary,
}

/// A worker-only instance through the proxy: statements/s over `--idle-secs` once settled.
async fn measure_idle(args: &Args, db: &BenchDb) -> anyhow::Result<IdleFigures> {
    let url = reqwest::Url::parse(&db.url).context("the bench database URL")?;
    let host = url.host_str().context("the database URL names no host")?;
    let proxy = Proxy::start(format!("{host}:{}", url.port().unwrap_or(5432))).await?;
    let mut gateway = Gateway::start(
        "the idle instance",
        &through_proxy(&url, proxy.addr)?,
        None,
        true,
        log_path(db, "idle"),
    )?;
    eprintln!(
        "idle instance pid {}, log {}",
        gateway.pid(),
        gateway.log.display()
    );
    tokio::time::sleep(IDLE_SETTLE).await;
    gateway.ensure_running()?;
    let (before, started) = (proxy.counts.snapshot(), Instant::now());
    tokio::time::sleep(Duration::from_secs(args.idle_secs)).await;
    let (after, secs) = (proxy.counts.snapshot(), started.elapsed().as_secs_f64());
    gateway.ensure_running()?;
    let stopped = gateway.stop_timed().await?;
    let [queries, executes, syncs] = [0, 1, 2].map(|i| after[i].saturating_sub(before[i]) as f64 / secs);
    Ok(IdleFigures {
        window_secs: secs,
        statements_per_sec: queries + executes,
        queries_per_sec: queries,
        executes_per_sec: executes,
        syncs_per_sec: syncs,
        connections: proxy.counts.connections.load(Relaxed),
        stopped,
        log: scan_log(&gateway.log),
    })
}

/// The same database through the proxy, in clear text (TLS would hide the messages).
fn through_proxy(url: &reqwest::Url, proxy: SocketAddr) -> anyhow::Result<String> {
    let mut url = url.clone();
    url.set_ip_host(proxy.ip())
        .and_then(|()| url.set_port(Some(proxy.port())))
        .map_err(|()| anyhow::anyhow!("cannot point the database URL at the proxy"))?;
    let kept: Vec<(String, String)> = url
        .query_pairs()
        .filter(|(key, _)| key != "sslmode")
        .map(|(key, value)| (key.into_owned(), value.into_owned()))
        .collect();
    url.query_pairs_mut()
        .clear()
        .extend_pairs(kept)
        .append_pair("sslmode", "disable");
    Ok(url.to_string())
}

// ---------------------------------------------------------------------------------------
// Figures

#[derive(Serialize)]
struct Results {
    /// Closed loop: `rate` 0.
    setup: Args,
    /// The `CB_*` settings the gateway inherited.
    settings: BTreeMap<String, String>,
    /// The history loaded before the gateway started; null with `--history-rows 0`.
    history: Option<HistoryLoad>,
    webhooks: WebhookFigures,
    turns: TurnFigures,
    /// The webhook's HTTP answer, from the send (not from the due time).
    webhook_answer_ms: Percentiles,
    webhook_to_agent_ms: Percentiles,
    webhook_to_reply_ms: Percentiles,
    webhook_to_typing_ms: Percentiles,
    /// `--stream`: the agent's first chunk to the first draft showing it.
    first_chunk_to_draft_ms: Percentiles,
    /// From the gateway's histogram; null when it could not be scraped.
    claim_to_typing_ms: Option<BucketPercentiles>,
    agent: AgentFigures,
    gateway: GatewayRun,
    cpu: Option<CpuFigures>,
    idle: Option<IdleFigures>,
    tables: Vec<TableChurn>,
    /// `--quiet-tenant-turns`; its turns are not in the flood's figures above.
    #[serde(skip_serializing_if = "Option::is_none")]
    quiet_tenant: Option<QuietFigures>,
}

/// The quiet tenant's turns, from its own webhooks and the stand-ins' stamps.
#[derive(Serialize)]
struct QuietFigures {
    turns: u64,
    /// With `--flood-off`: the unloaded figure.
    flood_off: bool,
    sent: u64,
    accepted: u64,
    errors: BTreeMap<String, u64>,
    max_send_lag_ms: f64,
    /// Turns with a reply, and replies to a turn that had one.
    replied: u64,
    repeat_replies: u64,
    reply_parts: u64,
    agent_calls: u64,
    repeat_calls: u64,
    bad_signatures: u64,
    webhook_answer_ms: Percentiles,
    webhook_to_agent_ms: Percentiles,
    webhook_to_reply_ms: Percentiles,
    webhook_to_typing_ms: Percentiles,
}

#[derive(Serialize)]
struct WebhookFigures {
    window_secs: f64,
    sent: u64,
    accepted: u64,
    accepted_per_sec: f64,
    errors: BTreeMap<String, u64>,
    max_send_lag_ms: f64,
    capacity_reached: bool,
}

#[derive(Serialize)]
struct TurnFigures {
    posted: u64,
    drained: bool,
    drain_wait_secs: f64,
    steady_per_sec: Option<f64>,
    steady_window_secs: Option<f64>,
    overall_per_sec: Option<f64>,
    overall_window_secs: Option<f64>,
    reply_parts: u64,
    repeat_replies: u64,
    /// `--answer-later-secs`: answers the agent posted to events URLs, and gave up on.
    events_posted: u64,
    events_failed: u64,
}

#[derive(Serialize)]
struct AgentFigures {
    calls: u64,
    repeat_calls: u64,
    bad_signatures: u64,
    unknown_turns: u64,
    in_flight_max: u64,
    in_flight_mean: f64,
}

#[derive(Serialize)]
struct GatewayRun {
    ready_secs: f64,
    rss_max_mb: Option<f64>,
    stopped: Stopped,
    log: LogSummary,
}

/// Percentiles known only as the upper bound of their histogram bucket.
#[derive(Serialize)]
struct BucketPercentiles {
    n: u64,
    p50_at_most: f64,
    p99_at_most: f64,
}

#[derive(Serialize)]
struct Percentiles {
    n: usize,
    p50: f64,
    p99: f64,
    max: f64,
}

fn percentiles(mut micros: Vec<u64>) -> Percentiles {
    micros.sort_unstable();
    let at = |q: f64| micros.get(((micros.len().saturating_sub(1)) as f64 * q).round() as usize);
    let ms = |v: Option<&u64>| v.map_or(0.0, |&v| v as f64 / 1e3);
    Percentiles {
        n: micros.len(),
        p50: ms(at(0.5)),
        p99: ms(at(0.99)),
        max: ms(micros.last()),
    }
}

impl Results {
    fn new(
        args: &Args,
        shared: &Shared,
        history: Option<HistoryLoad>,
        load: LoadRun,
        gateway: GatewayRun,
        idle: Option<IdleFigures>,
    ) -> Self {
        let posting = &load.posting;
        let counts = &shared.counts;
        let get = |n: &AtomicU64| n.load(Relaxed);
        // The flood's turns only; the quiet tenant's are in `quiet_tenant`.
        let flood = |from: &[AtomicU64], to: &[AtomicU64]| {
            percentiles(intervals(shared.split(from).0, shared.split(to).0))
        };
        Self {
            setup: args.clone(),
            settings: std::env::vars().filter(|(k, _)| k.starts_with("CB_")).collect(),
            history,
            webhooks: WebhookFigures {
                window_secs: posting.secs(),
                sent: posting.sent,
                accepted: posting.accepted,
                accepted_per_sec: posting.accepted as f64 / posting.secs().max(1e-9),
                errors: posting.errors.clone(),
                max_send_lag_ms: posting.max_lag.as_secs_f64() * 1e3,
                capacity_reached: posting.capacity_reached,
            },
            turns: turn_figures(shared, &load),
            webhook_answer_ms: flood(&shared.posted, &shared.answered),
            webhook_to_agent_ms: flood(&shared.posted, &shared.called),
            webhook_to_reply_ms: flood(&shared.posted, &shared.replied),
            webhook_to_typing_ms: flood(&shared.posted, &shared.typed),
            first_chunk_to_draft_ms: flood(&shared.chunked, &shared.drafted),
            claim_to_typing_ms: None,
            agent: AgentFigures {
                calls: get(&counts.agent_calls),
                repeat_calls: get(&counts.repeat_calls),
                bad_signatures: get(&counts.bad_signatures),
                unknown_turns: get(&counts.unknown_turns),
                in_flight_max: load.in_flight_max,
                in_flight_mean: load.in_flight_mean,
            },
            gateway,
            quiet_tenant: load.quiet.as_ref().map(|q| quiet_figures(args, shared, q)),
            cpu: load.cpu,
            idle,
            tables: Vec::new(),
        }
    }

    fn print(&self) {
        let s = &self.setup;
        let mode = if s.flood_off {
            "flood off (--flood-off)".into()
        } else if s.rate > 0.0 {
            format!("open loop at {}/s", s.rate)
        } else {
            "closed loop".into()
        };
        let quiet = if s.quiet_tenant_turns > 0 {
            format!(" + 1 quiet ({} turns)", s.quiet_tenant_turns)
        } else {
            String::new()
        };
        let settings: Vec<String> = self.settings.iter().map(|(k, v)| format!("{k}={v}")).collect();
        println!(
            "\npipeline_load: {mode} for {} s, {} posters, {} users, {} tenant(s){quiet}, agent {} ms, \
             answers {} chars; {}",
            s.seconds,
            s.concurrency,
            s.users,
            s.tenants,
            s.agent_latency_ms,
            s.answer_chars,
            if settings.is_empty() {
                "server defaults".into()
            } else {
                settings.join(" ")
            }
        );
        self.print_history();
        if s.flood_off {
            println!(
                "  flood          off (--flood-off): the flood tenants, users and history are there, \
                 their posters send nothing"
            );
        } else {
            self.print_flood();
        }
        self.print_quiet();
        match &self.claim_to_typing_ms {
            Some(c) => println!(
                "  claim→typing   p50 ≤ {} ms  p99 ≤ {} ms  (gateway histogram buckets, n={})",
                c.p50_at_most, c.p99_at_most, c.n
            ),
            None => println!("  claim→typing   n/a (the gateway's /metrics could not be read)"),
        }
        let a = &self.agent;
        println!(
            "  agent          {} calls ({} repeats, {} bad signatures, {} unknown turns); in flight \
             during posting max {}, mean {:.1}",
            a.calls, a.repeat_calls, a.bad_signatures, a.unknown_turns, a.in_flight_max, a.in_flight_mean
        );
        self.print_gateway();
        self.print_cpu();
        self.print_idle();
        self.print_tables();
    }

    /// The flood's webhooks, turns and latencies.
    fn print_flood(&self) {
        let (s, w, t) = (&self.setup, &self.webhooks, &self.turns);
        let errors: Vec<String> = w.errors.iter().map(|(k, n)| format!("{k}: {n}")).collect();
        println!(
            "  webhooks       {} sent, {} accepted in {:.2} s = {:.0}/s; errors {}; max send lag {:.1} ms{}",
            w.sent,
            w.accepted,
            w.window_secs,
            w.accepted_per_sec,
            if errors.is_empty() {
                "none".into()
            } else {
                errors.join(", ")
            },
            w.max_send_lag_ms,
            if w.capacity_reached {
                " (stopped early: capacity reached)"
            } else {
                ""
            }
        );
        println!(
            "  turns posted   {} of {} accepted, {} {:.1} s after posting; {} reply parts, {} repeats",
            t.posted,
            w.accepted,
            if t.drained {
                "all posted"
            } else {
                "NOT DRAINED, gave up"
            },
            t.drain_wait_secs,
            t.reply_parts,
            t.repeat_replies
        );
        if s.answer_later_secs.is_some() {
            println!(
                "  answered later {} answers posted to events URLs, {} given up",
                t.events_posted, t.events_failed
            );
        }
        let rate = |r: Option<f64>, secs: Option<f64>| match (r, secs) {
            (Some(r), Some(secs)) => format!("{r:.0}/s over {secs:.1} s"),
            _ => "n/a".into(),
        };
        println!(
            "  turns/s        steady {} (first reply → end of posting); overall {} (first post → last reply)",
            rate(t.steady_per_sec, t.steady_window_secs),
            rate(t.overall_per_sec, t.overall_window_secs)
        );
        print_percentiles("webhook answer", &self.webhook_answer_ms);
        print_percentiles("webhook→agent", &self.webhook_to_agent_ms);
        print_percentiles("webhook→reply", &self.webhook_to_reply_ms);
        print_percentiles("webhook→typing", &self.webhook_to_typing_ms);
        if s.stream {
            print_percentiles("chunk→draft", &self.first_chunk_to_draft_ms);
        }
    }

    /// `--quiet-tenant-turns`: its webhook→reply, then what else it saw.
    fn print_quiet(&self) {
        let Some(q) = &self.quiet_tenant else {
            return;
        };
        let r = &q.webhook_to_reply_ms;
        println!(
            "  quiet tenant   {} turns  webhook→reply p50 {:.1} ms  p99 {:.1} ms  max {:.1} ms  (n={}, {})",
            q.turns,
            r.p50,
            r.p99,
            r.max,
            r.n,
            if q.flood_off {
                "alone: the unloaded figure"
            } else {
                "beside the flood"
            }
        );
        let errors: Vec<String> = q.errors.iter().map(|(k, n)| format!("{k}: {n}")).collect();
        println!(
            "  quiet turns    {} sent, {} accepted, {} replied; errors {}; max send lag {:.1} ms; \
             {} agent calls ({} repeats, {} bad signatures), {} reply parts, {} repeats",
            q.sent,
            q.accepted,
            q.replied,
            if errors.is_empty() {
                "none".into()
            } else {
                errors.join(", ")
            },
            q.max_send_lag_ms,
            q.agent_calls,
            q.repeat_calls,
            q.bad_signatures,
            q.reply_parts,
            q.repeat_replies
        );
        print_percentiles("quiet answer", &q.webhook_answer_ms);
        print_percentiles("quiet →agent", &q.webhook_to_agent_ms);
        print_percentiles("quiet →typing", &q.webhook_to_typing_ms);
    }

    fn print_history(&self) {
        let Some(h) = &self.history else {
            println!("  history        none (--history-rows 0): every sender starts with no past");
            return;
        };
        println!(
            "  history        {} turns loaded ({:.1} per user over {} days, {} with a reply) in {:.1} s; \
             vacuum analyze {:.1} s, checkpoint {:.1} s; channel_messages {:.1} MB, channel_replies {:.1} MB",
            h.rows,
            h.per_user,
            h.days,
            h.replies,
            h.insert_secs,
            h.vacuum_analyze_secs,
            h.checkpoint_secs,
            h.messages_mb,
            h.replies_mb
        );
    }

    fn print_gateway(&self) {
        let g = &self.gateway;
        let rss = g.rss_max_mb.map_or("n/a".into(), |mb| format!("{mb:.1} MB"));
        println!(
            "  gateway        RSS max {rss}; ready in {:.2} s; {}",
            g.ready_secs,
            stopped_text(&g.stopped)
        );
        print_log("gateway log", &g.log);
    }

    fn print_cpu(&self) {
        let Some(c) = &self.cpu else {
            println!("  cpu            n/a (no /proc)");
            return;
        };
        println!(
            "  cpu per turn   PostgreSQL {:.3} ms (bench database's backends {:.3} ms), gateway {:.3} ms, \
             bench (posters + stand-ins) {:.3} ms; machine {:.0} % busy of {} cores over {:.1} s \
             (others {:.2} cores)",
            c.postgres_ms_per_turn,
            c.backends_ms_per_turn,
            c.gateway_ms_per_turn,
            c.bench_ms_per_turn,
            c.machine_busy_pct,
            c.cores,
            c.window_secs,
            c.other_cores
        );
    }

    fn print_tables(&self) {
        for t in &self.tables {
            println!(
                "  table          {:<18} {} live, {} dead row versions, {} updates ({} HOT), {} pages",
                t.table, t.live, t.dead, t.updates, t.hot_updates, t.pages
            );
        }
    }

    fn print_idle(&self) {
        let Some(i) = &self.idle else {
            println!("  idle instance  skipped");
            return;
        };
        println!(
            "  idle instance  {:.2} statements/s (Q {:.2}/s, E {:.2}/s; Sync {:.2}/s) over {:.1} s, \
             {} connections; {}",
            i.statements_per_sec,
            i.queries_per_sec,
            i.executes_per_sec,
            i.syncs_per_sec,
            i.window_secs,
            i.connections,
            stopped_text(&i.stopped)
        );
        print_log("idle log", &i.log);
    }
}

fn quiet_figures(args: &Args, shared: &Shared, posting: &Posting) -> QuietFigures {
    let counts = &shared.quiet_counts;
    let get = |n: &AtomicU64| n.load(Relaxed);
    let quiet = |from: &[AtomicU64], to: &[AtomicU64]| {
        percentiles(intervals(shared.split(from).1, shared.split(to).1))
    };
    QuietFigures {
        turns: args.quiet_tenant_turns,
        flood_off: args.flood_off,
        sent: posting.sent,
        accepted: posting.accepted,
        errors: posting.errors.clone(),
        max_send_lag_ms: posting.max_lag.as_secs_f64() * 1e3,
        replied: stamps(shared.split(&shared.replied).1).count() as u64,
        repeat_replies: get(&counts.repeat_replies),
        reply_parts: get(&counts.reply_parts),
        agent_calls: get(&counts.agent_calls),
        repeat_calls: get(&counts.repeat_calls),
        bad_signatures: get(&counts.bad_signatures),
        webhook_answer_ms: quiet(&shared.posted, &shared.answered),
        webhook_to_agent_ms: quiet(&shared.posted, &shared.called),
        webhook_to_reply_ms: quiet(&shared.posted, &shared.replied),
        webhook_to_typing_ms: quiet(&shared.posted, &shared.typed),
    }
}

fn turn_figures(shared: &Shared, load: &LoadRun) -> TurnFigures {
    let posting = &load.posting;
    let replies: Vec<u64> = stamps(shared.split(&shared.replied).0).collect();
    let first_reply = replies.iter().min().copied();
    let last_reply = replies.iter().max().copied();
    let steady_window = first_reply
        .filter(|&first| first < posting.ended)
        .map(|first| (posting.ended - first) as f64 / 1e6);
    let steady_turns = replies.iter().filter(|&&t| t <= posting.ended).count();
    let overall_window = last_reply.map(|last| last.saturating_sub(posting.started) as f64 / 1e6);
    TurnFigures {
        posted: replies.len() as u64,
        drained: load.drained,
        drain_wait_secs: load.drain_wait.as_secs_f64(),
        steady_per_sec: steady_window.map(|secs| steady_turns as f64 / secs),
        steady_window_secs: steady_window,
        overall_per_sec: overall_window.map(|secs| replies.len() as f64 / secs.max(1e-9)),
        overall_window_secs: overall_window,
        reply_parts: shared.counts.reply_parts.load(Relaxed),
        repeat_replies: shared.counts.repeat_replies.load(Relaxed),
        events_posted: shared.counts.events_posted.load(Relaxed),
        events_failed: shared.counts.events_failed.load(Relaxed),
    }
}

fn print_percentiles(label: &str, p: &Percentiles) {
    println!(
        "  {label:<14} p50 {:.1} ms  p99 {:.1} ms  max {:.1} ms  (n={})",
        p.p50, p.p99, p.max, p.n
    );
}

fn stopped_text(s: &Stopped) -> String {
    let how = if s.killed {
        "KILLED after SIGTERM was ignored"
    } else {
        "stopped on SIGTERM"
    };
    format!("{how} in {:.2} s ({})", s.secs, s.status)
}

fn print_log(label: &str, log: &LogSummary) {
    println!(
        "  {label:<14} {} warnings, {} errors: {}",
        log.warnings, log.errors, log.path
    );
    if let Some(first) = &log.first {
        println!("                 first: {first}");
    }
}
