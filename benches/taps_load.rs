//! Taps on buttons through the real gateway binary (docs/benchmarks.md#taps): how many taps
//! one `serve` takes per second, and how fast Slack's interactivity requests are acknowledged
//! while the pipeline carries ordinary turns.
//!
//! ```text
//! cargo bench --bench taps_load -- --phases telegram --taps 100000 --tap-seconds 10 --concurrency 64
//! cargo bench --bench taps_load -- --phases slack --rate 1000 --seconds 20 --slack-tap-rate 30
//! cargo bench --bench taps_load                       # both, one after the other
//! ```
//!
//! What one run does:
//! 1. creates a database `cb_bench_<random>` (benches/common), starts in this process the
//!    agent stand-in (answers every dispatch `{"content": "ok"}` after `--agent-latency-ms`;
//!    no signature check) and the Telegram and Slack API stand-ins (every method answers
//!    `ok` at once), and provisions one tenant with a Telegram and a Slack connector (both
//!    letting unlinked senders through, API base URLs on the stand-ins);
//! 2. bulk-loads, as the database owner, answered turns that offered choices, written as the
//!    gateway stores them (src/db/messages.rs `offer_choices`, migrations 38/39): an
//!    `executed` turn per answer and its one `sent` reply part with `choices` (the
//!    `crate::choices::Offered` JSON: token, two reply choices, `reusable: false`) and
//!    `choice_token` (10 alphanumerics, distinct per answer). `--taps` of them on Telegram
//!    (private chats of `--tap-users` senders), enough for the Slack taps on Slack (DMs);
//!    then VACUUM (ANALYZE) and CHECKPOINT;
//! 3. phase `telegram` (taps/s): starts `channel-bridge serve` with the worker off (unless
//!    `--worker-during-taps`) and posts, closed loop with `--concurrency` posters for at most
//!    `--tap-seconds`, one `callback_query` per answer (each its own update id and callback
//!    id; `callback_data` = `<token>.<index>`, index alternating) with the
//!    `X-Telegram-Bot-Api-Secret-Token` header. Counts 200s whose body is the
//!    `answerCallbackQuery`, then checks in the database that every accepted tap is one turn
//!    (`action is not null`), one `chosen` and one closing edit part. Then a full `serve`
//!    (HTTP and worker) drains the backlog: each tap a dispatch to the agent, its answer
//!    posted and the keyboard removed (`editMessageReplyMarkup`); reports how long that took;
//! 4. phase `slack` (ack under load): on a full `serve`, ordinary Telegram texts at `--rate`
//!    per second (open loop, `--text-users` private senders, at most `--max-in-flight`
//!    requests) for `--seconds`, and beside them Slack `block_actions` taps at
//!    `--slack-tap-rate` per second (open loop, each on a different answer), form-encoded
//!    `payload=<JSON>` to the connector's `/interactivity` URL, signed with Slack's v0 HMAC
//!    over the raw body. Reports the taps' ack latency (send → response; Slack wants it
//!    within 3 s), the texts' webhook→reply, what was posted, and checks the taps' turns.
//!
//! Latencies are measured from each request's send; `max lag` is how far a sender fell
//! behind its due time in open loop. The serve logs go to target/taps_load-<db>-<name>.log;
//! their warnings and errors are counted.

#[allow(dead_code)] // each bench uses a part of it
mod common;

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use axum::body::Bytes;
use axum::extract::{Path as UrlPath, State};
use axum::routing::post;
use axum::{Json, Router};
use channel_bridge::domain::{Platform, UnlinkedPolicy};
use channel_bridge::shapes::{ConnectorSettings, NewConnector};
use channel_bridge::{db, provision};
use clap::Parser;
use common::gateway::{free_local_port, log_path, Gateway};
use common::provision::{bench_keys, telegram_connector, BOT_ID, TELEGRAM_SECRET};
use common::BenchDb;
use hmac::{Hmac, Mac};
use secrecy::SecretString;
use serde_json::{json, Value};
use sha2::Sha256;
use sqlx::{Connection, Executor, PgConnection};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Phase {
    Telegram,
    Slack,
}

#[derive(Debug, Clone, Parser)]
#[command(about = "Taps on buttons through the real serve: taps/s, and Slack's ack under load")]
struct Args {
    /// Which phases to run, in order.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "telegram,slack")]
    phases: Vec<Phase>,
    /// Telegram answers offering choices, one tap each at most (the taps phase stops early
    /// when they run out).
    #[arg(long, default_value_t = 100_000)]
    taps: u64,
    /// Telegram senders the answers (and so the taps) are spread over.
    #[arg(long, default_value_t = 5_000)]
    tap_users: u64,
    /// Longest the taps phase posts, in seconds.
    #[arg(long, default_value_t = 10)]
    tap_seconds: u64,
    /// Tap requests in flight in the taps phase (closed loop).
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// Keep the worker on while the taps are posted (default: ingress alone, then drained).
    #[arg(long)]
    worker_during_taps: bool,
    /// Ordinary Telegram texts per second in the Slack phase (open loop).
    #[arg(long, default_value_t = 1000.0)]
    rate: f64,
    /// Seconds of load in the Slack phase.
    #[arg(long, default_value_t = 20)]
    seconds: u64,
    /// Slack taps per second beside the texts (open loop).
    #[arg(long, default_value_t = 30.0)]
    slack_tap_rate: f64,
    /// Telegram senders of the texts, each a conversation of its own.
    #[arg(long, default_value_t = 20_000)]
    text_users: u64,
    /// Open-loop requests in flight at most (texts and taps each).
    #[arg(long, default_value_t = 512)]
    max_in_flight: usize,
    /// How long the agent stand-in takes to answer, in milliseconds.
    #[arg(long, default_value_t = 0)]
    agent_latency_ms: u64,
    /// Longest wait for the worker to finish what was posted, in seconds.
    #[arg(long, default_value_t = 180)]
    drain_secs: u64,
    /// Keep the database afterwards instead of dropping it.
    #[arg(long)]
    keep_db: bool,
    /// Passed by `cargo bench` to every bench binary; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

const SLACK_SECRET: &str = "bench-slack-signing-secret";
const SLACK_TEAM: &str = "T0BENCH";
/// Sender ids: the tapping Telegram users, and the texting ones.
const FIRST_TAP_SENDER: u64 = 100_000_000;
const FIRST_TEXT_SENDER: u64 = 300_000_000;
/// Telegram update ids: texts are seq + 1; the stored answers' questions and the taps
/// have ranges of their own.
const ANSWER_UPDATE_BASE: u64 = 500_000_000;
const TAP_UPDATE_BASE: u64 = 700_000_000;
/// Telegram message id of answer `i`'s message (the one with the keyboard).
const ANSWER_MESSAGE_BASE: u64 = 1_000_000_000;
/// Slack answers at most (six digits in their ts).
const MAX_SLACK_ANSWERS: u64 = 999_999;
const LOAD_CHUNK: u64 = 50_000;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    anyhow::ensure!(args.tap_users > 0 && args.text_users > 0, "users must be > 0");
    anyhow::ensure!(args.rate > 0.0 && args.slack_tap_rate > 0.0, "rates must be > 0");
    let db = BenchDb::create().await?;
    eprintln!("database {} (migrated)", db.name);
    let outcome = run(&args, &db).await;
    if args.keep_db {
        eprintln!("database {} kept: {}", db.name, db.url);
    } else {
        db.drop_now().await;
    }
    outcome
}

async fn run(args: &Args, db: &BenchDb) -> anyhow::Result<()> {
    let slack_taps = (args.slack_tap_rate * args.seconds as f64).ceil() as u64;
    anyhow::ensure!(slack_taps <= MAX_SLACK_ANSWERS, "too many Slack taps");
    let text_turns = (args.rate * args.seconds as f64).ceil() as u64;
    let shared = Arc::new(Shared::new(text_turns, slack_taps, args));
    let stand_ins = start_stand_ins(shared.clone()).await?;
    let place = provision(db, &stand_ins).await?;
    let telegram_answers = if args.phases.contains(&Phase::Telegram) {
        args.taps
    } else {
        0
    };
    let slack_answers = if args.phases.contains(&Phase::Slack) {
        slack_taps
    } else {
        0
    };
    load_answers(db, &place, args, telegram_answers, slack_answers).await?;

    let mut full: Option<(Gateway, SocketAddr)> = None;
    for phase in &args.phases {
        match phase {
            Phase::Telegram => {
                full = Some(telegram_phase(args, db, &place, &shared).await?);
            }
            Phase::Slack => {
                let (gateway, addr) = match full.take() {
                    Some(running) => running,
                    None => start_gateway(db, "serve", true).await?,
                };
                full = Some(slack_phase(args, db, &place, &shared, gateway, addr, slack_taps).await?);
            }
        }
    }
    if let Some((mut gateway, _)) = full {
        gateway.stop().await?;
        print_log("serve (full)", &gateway.log);
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Stand-ins

struct Shared {
    started: Instant,
    agent_latency: Duration,
    agent_calls: AtomicU64,
    agent_tap_calls: AtomicU64,
    agent_repeats: AtomicU64,
    agent_seen: Mutex<HashSet<String>>,
    telegram_sends: AtomicU64,
    telegram_message_ids: AtomicU64,
    telegram_edits: AtomicU64,
    telegram_edit_repeats: AtomicU64,
    telegram_edited: Mutex<HashSet<String>>,
    telegram_other: AtomicU64,
    slack_posts: AtomicU64,
    slack_updates: AtomicU64,
    slack_update_repeats: AtomicU64,
    slack_other: AtomicU64,
    slack_ts: AtomicU64,
    /// Micros since `started` (+1, 0: not yet) by text seq / Slack tap index.
    text_sent: Vec<AtomicU64>,
    text_replied: Vec<AtomicU64>,
    tap_sent: Vec<AtomicU64>,
    tap_updated: Vec<AtomicU64>,
}

impl Shared {
    fn new(texts: u64, slack_taps: u64, args: &Args) -> Self {
        let table = |n: u64| (0..n).map(|_| AtomicU64::new(0)).collect();
        Self {
            started: Instant::now(),
            agent_latency: Duration::from_millis(args.agent_latency_ms),
            agent_calls: AtomicU64::new(0),
            agent_tap_calls: AtomicU64::new(0),
            agent_repeats: AtomicU64::new(0),
            agent_seen: Mutex::new(HashSet::new()),
            telegram_sends: AtomicU64::new(0),
            telegram_message_ids: AtomicU64::new(2_000_000_000),
            telegram_edits: AtomicU64::new(0),
            telegram_edit_repeats: AtomicU64::new(0),
            telegram_edited: Mutex::new(HashSet::new()),
            telegram_other: AtomicU64::new(0),
            slack_posts: AtomicU64::new(0),
            slack_updates: AtomicU64::new(0),
            slack_update_repeats: AtomicU64::new(0),
            slack_other: AtomicU64::new(0),
            slack_ts: AtomicU64::new(0),
            text_sent: table(texts),
            text_replied: table(texts),
            tap_sent: table(slack_taps),
            tap_updated: table(slack_taps),
        }
    }

    fn now(&self) -> u64 {
        self.started.elapsed().as_micros() as u64 + 1
    }

    /// Stamps `table[at]` unless stamped; false when it was.
    fn stamp(&self, table: &[AtomicU64], at: u64) -> bool {
        table
            .get(at as usize)
            .is_some_and(|slot| slot.compare_exchange(0, self.now(), Relaxed, Relaxed).is_ok())
    }
}

async fn start_stand_ins(shared: Arc<Shared>) -> anyhow::Result<String> {
    let app = Router::new()
        .route("/agent", post(agent_call))
        .route("/telegram/{bot}/{method}", post(telegram_api))
        .route("/slack/api/{method}", post(slack_api))
        .with_state(shared);
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(base)
}

async fn agent_call(State(shared): State<Arc<Shared>>, body: Bytes) -> Json<Value> {
    shared.agent_calls.fetch_add(1, Relaxed);
    if let Ok(payload) = serde_json::from_slice::<Value>(&body) {
        if payload.get("action").is_some_and(|a| !a.is_null()) {
            shared.agent_tap_calls.fetch_add(1, Relaxed);
        }
        if let Some(id) = payload["message_id"].as_str() {
            let first = shared.agent_seen.lock().unwrap().insert(id.to_owned());
            if !first {
                shared.agent_repeats.fetch_add(1, Relaxed);
            }
        }
    }
    if !shared.agent_latency.is_zero() {
        tokio::time::sleep(shared.agent_latency).await;
    }
    Json(json!({ "content": "ok" }))
}

async fn telegram_api(
    State(shared): State<Arc<Shared>>,
    UrlPath((_bot, method)): UrlPath<(String, String)>,
    body: Bytes,
) -> Json<Value> {
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    match method.as_str() {
        "sendMessage" => {
            shared.telegram_sends.fetch_add(1, Relaxed);
            // A text's reply replies to its message, seq + 1.
            if let Some(id) = request
                .pointer("/reply_parameters/message_id")
                .and_then(Value::as_u64)
            {
                if (1..ANSWER_UPDATE_BASE).contains(&id) {
                    shared.stamp(&shared.text_replied, id - 1);
                }
            }
            let message_id = shared.telegram_message_ids.fetch_add(1, Relaxed);
            let result = json!({
                "message_id": message_id,
                "date": chrono::Utc::now().timestamp(),
                "chat": { "id": request["chat_id"], "type": "private" },
                "text": request["text"],
            });
            Json(json!({ "ok": true, "result": result }))
        }
        "editMessageReplyMarkup" => {
            shared.telegram_edits.fetch_add(1, Relaxed);
            let key = format!("{}:{}", request["chat_id"], request["message_id"]);
            if !shared.telegram_edited.lock().unwrap().insert(key) {
                shared.telegram_edit_repeats.fetch_add(1, Relaxed);
            }
            // A message that is not inline: the edited message comes back.
            let result = json!({
                "message_id": request["message_id"],
                "date": chrono::Utc::now().timestamp(),
                "chat": { "id": request["chat_id"], "type": "private" },
                "text": "Approve the refund?",
            });
            Json(json!({ "ok": true, "result": result }))
        }
        _ => {
            shared.telegram_other.fetch_add(1, Relaxed);
            Json(json!({ "ok": true, "result": true }))
        }
    }
}

async fn slack_api(
    State(shared): State<Arc<Shared>>,
    UrlPath(method): UrlPath<String>,
    body: Bytes,
) -> Json<Value> {
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let ts = format!("1800000000.{:06}", shared.slack_ts.fetch_add(1, Relaxed));
    match method.as_str() {
        "chat.postMessage" => {
            shared.slack_posts.fetch_add(1, Relaxed);
            Json(json!({ "ok": true, "channel": request["channel"], "ts": ts }))
        }
        "chat.update" => {
            shared.slack_updates.fetch_add(1, Relaxed);
            // Answer i's message is `1718100000.<i>`.
            let target = request["ts"].as_str().unwrap_or_default().to_owned();
            let index = target
                .strip_prefix("1718100000.")
                .and_then(|i| i.parse::<u64>().ok());
            if let Some(index) = index {
                if !shared.stamp(&shared.tap_updated, index) {
                    shared.slack_update_repeats.fetch_add(1, Relaxed);
                }
            }
            Json(json!({ "ok": true, "channel": request["channel"], "ts": target }))
        }
        _ => {
            shared.slack_other.fetch_add(1, Relaxed);
            Json(json!({ "ok": true, "channel": request["channel"], "ts": ts }))
        }
    }
}

// ---------------------------------------------------------------------------------------
// Provisioning and the stored answers

struct Place {
    tenant: uuid::Uuid,
    telegram: uuid::Uuid,
    slack: uuid::Uuid,
    telegram_hook: String,
    slack_hook: String,
}

async fn provision(db: &BenchDb, stand_ins: &str) -> anyhow::Result<Place> {
    let pool = db::connect_pool(&db.settings())?;
    let keys = &bench_keys().0;
    let agent = format!("{stand_ins}/agent");
    let created = provision::create_tenant(&pool, keys, "taps", "Taps", Some(&agent)).await?;
    let api = format!("{stand_ins}/telegram");
    let telegram = telegram_connector(BOT_ID, "bench bot".into(), api, UnlinkedPolicy::Allow);
    let mut slack = NewConnector::new(Platform::Slack, SecretString::from(SLACK_SECRET));
    slack.secrets.outbound_token = Some(SecretString::from("xoxb-bench"));
    slack.settings = ConnectorSettings {
        name: Some("bench slack".into()),
        external_id: Some(SLACK_TEAM.into()),
        app_id: Some("A0BENCH".into()),
        bot_user_id: Some("UBOT1".into()),
        bot_id: Some("BBOT1".into()),
        api_base_url: Some(format!("{stand_ins}/slack")),
        unlinked_policy: Some(UnlinkedPolicy::Allow),
        ..ConnectorSettings::default()
    };
    let telegram = provision::add_connector(&pool, keys, created.tenant_id, &telegram).await?;
    let slack = provision::add_connector(&pool, keys, created.tenant_id, &slack).await?;
    pool.close().await;
    Ok(Place {
        tenant: created.tenant_id.0,
        telegram: telegram.connector_id.0,
        slack: slack.connector_id.0,
        telegram_hook: telegram.webhook_path,
        slack_hook: slack.webhook_path,
    })
}

/// Answers `$3..=$4` of one connector (`$1` tenant, `$2` connector): the question turn,
/// `executed` and delivered, as the gateway writes it for an unlinked sender (conversation
/// `sender:<connector>:<sender>`) of user `i % $5`. Telegram: sender `$6 + user` in a
/// private chat, update id `$7 + i`; Slack: `UB<user>` in the DM `DB<user>`, the question's
/// ts `1718000000.<i>`.
fn answers_sql(platform: Platform) -> String {
    let (sender, key, question, metadata) = match platform {
        Platform::Telegram => (
            "($6 + i % $5)::text",
            "($7 + i)::text",
            "(2 * (i / $5) + 1)::text",
            "jsonb_build_object('chat_type', 'private', 'chat_title', null, 'username', null,
                 'first_name', 'User ' || (i % $5), 'date', floor(extract(epoch from ts))::int8,
                 'message_thread_id', null, 'caption', null)",
        ),
        _ => (
            "'UB' || lpad((i % $5)::text, 7, '0')",
            "'T0BENCH:DB' || lpad((i % $5)::text, 7, '0') || ':1718000000.' || lpad(i::text, 6, '0')",
            "'1718000000.' || lpad(i::text, 6, '0')",
            "jsonb_build_object('team_id', 'T0BENCH', 'api_app_id', 'A0BENCH')",
        ),
    };
    let chat = match platform {
        Platform::Telegram => "sender",
        _ => "'DB' || lpad((i % $5)::text, 7, '0')",
    };
    format!(
        "with g as (
             select i, {sender} as sender, md5('{platform}' || i) as m,
                    now() - interval '2 hours' + i * interval '10 milliseconds' as ts
               from generate_series($3::int8, $4::int8) as i
              where $6::int8 >= 0 and $7::int8 >= 0)
         insert into channel_messages (tenant_id, id, connector_id, platform, idempotency_key,
             platform_message_id, chat_id, platform_user_id, user_id, conversation_key,
             request_content, response_content, decision, status, attempts, received_at,
             completed_at, delivered_at, updated_at, metadata)
         select $1, (lpad(to_hex((extract(epoch from ts) * 1000)::int8), 12, '0') || '7'
                     || substr(m, 1, 3) || '8' || substr(m, 4, 15))::uuid,
                $2, '{platform}', {key}, {question}, {chat}, sender, null,
                'sender:' || $2 || ':' || sender, 'Can I get a refund?', 'Approve the refund?',
                'respond', 'executed', 1, ts, ts + interval '1 second',
                ts + interval '1200 milliseconds', ts + interval '1200 milliseconds', {metadata}
           from g",
    )
}

/// The one reply part of each answer `$3..=$4` just inserted, `sent`, offering two choices
/// under the token `$5 || lpad(i, 9, '0')` (crate::choices::Offered). Telegram: answer `i`
/// is the turn with update id `$6 + i`, its message id `$7 + i`; Slack: the question's ts
/// ends in `i`, the answer's ts is `1718100000.<i>`.
fn parts_sql(platform: Platform) -> String {
    let (index, answer) = match platform {
        Platform::Telegram => (
            "(m.idempotency_key::int8 - $6)",
            "($7 + (m.idempotency_key::int8 - $6))::text",
        ),
        _ => (
            "split_part(m.platform_message_id, '.', 2)::int8",
            "'1718100000.' || split_part(m.platform_message_id, '.', 2)",
        ),
    };
    format!(
        "insert into channel_replies (tenant_id, message_id, part_index, content, status,
             platform_message_id, attempts, created_at, updated_at, sent_at, sending_since,
             choices, choice_token)
         select m.tenant_id, m.id, 0, m.response_content, 'sent', {answer}, 1, m.completed_at,
                m.delivered_at, m.delivered_at, m.completed_at,
                jsonb_build_object('token', $5 || lpad({index}::text, 9, '0'),
                    'items', jsonb_build_array(
                        jsonb_build_object('id', 'approve', 'label', 'Approve', 'style', 'primary',
                                           'value', jsonb_build_object('refund', {index}), 'toast', 'Approved'),
                        jsonb_build_object('id', 'reject', 'label', 'Reject', 'style', 'danger')),
                    'reusable', false),
                $5 || lpad({index}::text, 9, '0')
           from channel_messages m
          where m.tenant_id = $1 and m.connector_id = $2 and {index} between $3 and $4
            and $6::int8 >= 0 and $7::int8 >= 0",
    )
}

async fn load_answers(
    db: &BenchDb,
    place: &Place,
    args: &Args,
    telegram: u64,
    slack: u64,
) -> anyhow::Result<()> {
    let started = Instant::now();
    let mut owner = PgConnection::connect(&db.url).await?;
    owner.execute("set synchronous_commit = off").await?;
    let plans = [
        (
            Platform::Telegram,
            place.telegram,
            telegram,
            args.tap_users,
            "t",
            FIRST_TAP_SENDER,
        ),
        (
            Platform::Slack,
            place.slack,
            slack,
            args.tap_users.min(slack.max(1)),
            "s",
            0,
        ),
    ];
    for (platform, connector, count, users, prefix, first_sender) in plans {
        let (messages, parts) = (answers_sql(platform), parts_sql(platform));
        let mut from = 0;
        while from < count {
            let to = (from + LOAD_CHUNK).min(count) - 1;
            sqlx::query(&messages)
                .bind(place.tenant)
                .bind(connector)
                .bind(from as i64)
                .bind(to as i64)
                .bind(users as i64)
                .bind(first_sender as i64)
                .bind(ANSWER_UPDATE_BASE as i64)
                .execute(&mut owner)
                .await
                .context("Failed to load the answers")?;
            sqlx::query(&parts)
                .bind(place.tenant)
                .bind(connector)
                .bind(from as i64)
                .bind(to as i64)
                .bind(prefix)
                .bind(ANSWER_UPDATE_BASE as i64)
                .bind(ANSWER_MESSAGE_BASE as i64)
                .execute(&mut owner)
                .await
                .context("Failed to load the answers' parts")?;
            from = to + 1;
        }
    }
    let offered: i64 =
        sqlx::query_scalar("select count(*) from channel_replies where choice_token is not null")
            .fetch_one(&mut owner)
            .await?;
    owner.execute("vacuum (analyze)").await?;
    owner.execute("checkpoint").await?;
    owner.close().await?;
    eprintln!(
        "answers offering choices: {offered} ({telegram} Telegram, {slack} Slack) loaded in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    anyhow::ensure!(offered as u64 == telegram + slack, "the answers did not all load");
    Ok(())
}

// ---------------------------------------------------------------------------------------
// The gateway as a child process

async fn start_gateway(db: &BenchDb, name: &str, worker: bool) -> anyhow::Result<(Gateway, SocketAddr)> {
    let addr = free_local_port()?;
    let mut gateway = Gateway::start("serve", &db.url, Some(addr), worker, log_path(db, name))?;
    gateway.wait_ready(addr).await?;
    Ok((gateway, addr))
}

/// Warnings and errors of a serve log, and the first few distinct messages.
fn print_log(label: &str, path: &Path) {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let warn = text.lines().filter(|l| l.contains("\"level\":\"WARN\"")).count();
    let error = text
        .lines()
        .filter(|l| l.contains("\"level\":\"ERROR\"") || l.starts_with("error"))
        .count();
    println!(
        "{label} log: {warn} warnings, {error} errors ({})",
        path.display()
    );
    let mut seen = HashSet::new();
    for line in text
        .lines()
        .filter(|l| l.contains("\"level\":\"WARN\"") || l.contains("\"level\":\"ERROR\""))
    {
        let message = serde_json::from_str::<Value>(line)
            .ok()
            .and_then(|v| {
                v.pointer("/fields/message")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            })
            .unwrap_or_else(|| line.chars().take(200).collect());
        if seen.insert(message.clone()) && seen.len() <= 5 {
            println!("  {}", message.chars().take(300).collect::<String>());
        }
    }
}

/// The gateway's counters of dropped taps, from /metrics.
async fn dropped_taps(addr: SocketAddr) -> Vec<String> {
    let Ok(response) = reqwest::get(format!("http://{addr}/metrics")).await else {
        return vec![];
    };
    let text = response.text().await.unwrap_or_default();
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.contains("dropped_total"))
        .map(str::to_owned)
        .collect()
}

// ---------------------------------------------------------------------------------------
// Phase 1: Telegram taps/s

fn telegram_tap(i: u64, users: u64) -> String {
    let sender = FIRST_TAP_SENDER + i % users;
    let update = TAP_UPDATE_BASE + i;
    let on = ANSWER_MESSAGE_BASE + i;
    let data = format!("t{i:09}.{}", i % 2);
    format!(
        r#"{{"update_id":{update},"callback_query":{{"id":"cb{update}","from":{{"id":{sender},"is_bot":false,"first_name":"User","language_code":"en"}},"message":{{"message_id":{on},"from":{{"id":7000000001,"is_bot":true,"first_name":"Bench bot","username":"bench_bot"}},"chat":{{"id":{sender},"first_name":"User","type":"private"}},"date":1718000003,"text":"Approve the refund?","reply_markup":{{"inline_keyboard":[[{{"text":"Approve","callback_data":"t{i:09}.0"}},{{"text":"Reject","callback_data":"t{i:09}.1"}}]]}}}},"chat_instance":"-5358271390871234567","data":"{data}"}}}}"#
    )
}

#[derive(Default)]
struct Posted {
    ok: u64,
    answered: u64,
    failed: u64,
    first_failure: Option<String>,
    latencies: Vec<u64>,
}

impl Posted {
    fn merge(&mut self, other: Posted) {
        self.ok += other.ok;
        self.answered += other.answered;
        self.failed += other.failed;
        self.first_failure = self.first_failure.take().or(other.first_failure);
        self.latencies.extend(other.latencies);
    }
}

async fn telegram_phase(
    args: &Args,
    db: &BenchDb,
    place: &Place,
    shared: &Arc<Shared>,
) -> anyhow::Result<(Gateway, SocketAddr)> {
    let (mut gateway, addr) = start_gateway(db, "taps", args.worker_during_taps).await?;
    let url: reqwest::Url = format!("http://{addr}{}", place.telegram_hook).parse()?;
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(args.concurrency)
        .build()?;
    let next = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs(args.tap_seconds);
    let cpu_before = gateway.cpu_secs();
    eprintln!(
        "phase telegram: {} posters, at most {} taps for at most {} s, worker {}",
        args.concurrency,
        args.taps,
        args.tap_seconds,
        if args.worker_during_taps { "on" } else { "off" }
    );
    let started = Instant::now();
    let posters = (0..args.concurrency).map(|_| {
        let (client, url, next, users, total) = (
            client.clone(),
            url.clone(),
            next.clone(),
            args.tap_users,
            args.taps,
        );
        tokio::spawn(async move {
            let mut posted = Posted::default();
            loop {
                let i = next.fetch_add(1, Relaxed);
                if i >= total || Instant::now() >= deadline {
                    return posted;
                }
                let sent = Instant::now();
                let response = client
                    .post(url.clone())
                    .header("content-type", "application/json")
                    .header("x-telegram-bot-api-secret-token", TELEGRAM_SECRET)
                    .body(telegram_tap(i, users))
                    .send()
                    .await;
                let outcome = match response {
                    Ok(r) if r.status().is_success() => Ok(r.text().await.unwrap_or_default()),
                    Ok(r) => Err(format!("{}: {}", r.status(), r.text().await.unwrap_or_default())),
                    Err(e) => Err(e.to_string()),
                };
                posted.latencies.push(sent.elapsed().as_micros() as u64);
                match outcome {
                    Ok(body) => {
                        posted.ok += 1;
                        if body.contains("answerCallbackQuery") {
                            posted.answered += 1;
                        }
                    }
                    Err(e) => {
                        posted.failed += 1;
                        posted.first_failure.get_or_insert(e);
                    }
                }
            }
        })
    });
    let mut posted = Posted::default();
    for poster in futures::future::join_all(posters).await {
        posted.merge(poster?);
    }
    let secs = started.elapsed().as_secs_f64();
    let cpu = gateway.cpu_secs() - cpu_before;
    let total = posted.ok + posted.failed;
    let p = percentiles(std::mem::take(&mut posted.latencies));
    println!(
        "== Telegram taps through serve (worker {}) ==",
        if args.worker_during_taps { "on" } else { "off" }
    );
    println!(
        "taps posted {total} in {secs:.2} s: {:.0} accepted/s ({} × 200, {} answered with answerCallbackQuery, {} failed{})",
        posted.ok as f64 / secs,
        posted.ok,
        posted.answered,
        posted.failed,
        posted.first_failure.as_deref().map(|f| format!(": first {f}")).unwrap_or_default()
    );
    println!("webhook latency {p}");
    println!(
        "gateway CPU {cpu:.1} s ({:.0} µs a tap), RSS {:.0} MB",
        cpu * 1e6 / posted.ok.max(1) as f64,
        gateway.rss_mb()
    );
    for line in dropped_taps(addr).await {
        println!("  metric {line}");
    }
    let recorded = tap_records(db, place.telegram).await?;
    println!("recorded: {recorded}");
    let exactly = recorded.turns == posted.ok && recorded.doubles == 0 && recorded.chosen == posted.ok;
    println!(
        "each accepted tap one turn, one choice made, one closing edit: {}",
        if exactly && recorded.edits == posted.ok {
            "yes"
        } else {
            "NO"
        }
    );

    // The worker's share: a full serve (the same one when it ran during the taps).
    let (gateway, addr) = if args.worker_during_taps {
        (gateway, addr)
    } else {
        gateway.stop().await?;
        print_log("serve (taps, worker off)", &gateway.log);
        start_gateway(db, "serve", true).await?
    };
    let drain_cpu = gateway.cpu_secs();
    let drain_started = Instant::now();
    let limit = Duration::from_secs(args.drain_secs);
    let mut done = tap_records(db, place.telegram).await?;
    while (done.executed < posted.ok || done.edits_sent < posted.ok) && drain_started.elapsed() < limit {
        tokio::time::sleep(Duration::from_millis(500)).await;
        done = tap_records(db, place.telegram).await?;
    }
    let drained = drain_started.elapsed().as_secs_f64();
    // With the worker on during the taps, its rate is over the posting and what followed.
    let span = if args.worker_during_taps {
        secs + drained
    } else {
        drained
    };
    println!(
        "worker: {} tap turns executed, {} closing edits sent, all done {:.1} s after {} \
         ({:.0} taps/s over {:.1} s), gateway CPU {:.1} s after the posting",
        done.executed,
        done.edits_sent,
        drained,
        if args.worker_during_taps {
            "the posting ended"
        } else {
            "it started"
        },
        done.executed as f64 / span.max(1e-9),
        span,
        gateway.cpu_secs() - drain_cpu
    );
    println!("recorded after the worker: {done}");
    println!(
        "stand-ins: agent calls {} (with an action {}, repeated turns {}); Telegram sendMessage {}, \
         editMessageReplyMarkup {} (repeated {}), other methods {}",
        shared.agent_calls.load(Relaxed),
        shared.agent_tap_calls.load(Relaxed),
        shared.agent_repeats.load(Relaxed),
        shared.telegram_sends.load(Relaxed),
        shared.telegram_edits.load(Relaxed),
        shared.telegram_edit_repeats.load(Relaxed),
        shared.telegram_other.load(Relaxed),
    );
    Ok((gateway, addr))
}

/// What the database holds of one connector's taps and the answers they closed.
struct TapRecords {
    turns: u64,
    doubles: u64,
    executed: u64,
    statuses: String,
    chosen: u64,
    edits: u64,
    edits_sent: u64,
}

impl std::fmt::Display for TapRecords {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} tap turns ({}), {} on an answer already tapped; {} answers chosen, {} closing edits ({} sent)",
            self.turns, self.statuses, self.doubles, self.chosen, self.edits, self.edits_sent
        )
    }
}

async fn tap_records(db: &BenchDb, connector: uuid::Uuid) -> anyhow::Result<TapRecords> {
    let mut owner = PgConnection::connect(&db.url).await?;
    let (turns, answers): (i64, i64) = sqlx::query_as(
        "select count(*), count(distinct action->>'message_id')
           from channel_messages where connector_id = $1 and action is not null",
    )
    .bind(connector)
    .fetch_one(&mut owner)
    .await?;
    let statuses: Vec<(String, i64)> = sqlx::query_as(
        "select status, count(*) from channel_messages
          where connector_id = $1 and action is not null group by status order by status",
    )
    .bind(connector)
    .fetch_all(&mut owner)
    .await?;
    let (chosen, edits, edits_sent): (i64, i64, i64) = sqlx::query_as(
        "select count(*) filter (where r.chosen is not null),
                count(*) filter (where r.edit_of is not null),
                count(*) filter (where r.edit_of is not null and r.status = 'sent')
           from channel_replies r
           join channel_messages m on m.tenant_id = r.tenant_id and m.id = r.message_id
          where m.connector_id = $1 and m.action is null",
    )
    .bind(connector)
    .fetch_one(&mut owner)
    .await?;
    owner.close().await?;
    let executed = statuses
        .iter()
        .find(|(s, _)| s == "executed")
        .map_or(0, |(_, n)| *n);
    Ok(TapRecords {
        turns: turns as u64,
        doubles: (turns - answers) as u64,
        executed: executed as u64,
        statuses: statuses
            .iter()
            .map(|(s, n)| format!("{s} {n}"))
            .collect::<Vec<_>>()
            .join(", "),
        chosen: chosen as u64,
        edits: edits as u64,
        edits_sent: edits_sent as u64,
    })
}

// ---------------------------------------------------------------------------------------
// Phase 2: Slack's ack under 1,000 turns/s

fn telegram_text(seq: u64, users: u64) -> String {
    let (id, sender, date) = (
        seq + 1,
        FIRST_TEXT_SENDER + seq % users,
        chrono::Utc::now().timestamp(),
    );
    format!(
        r#"{{"update_id":{id},"message":{{"message_id":{id},"from":{{"id":{sender},"is_bot":false,"first_name":"Texter"}},"chat":{{"id":{sender},"first_name":"Texter","type":"private"}},"date":{date},"text":"load {seq}"}}}}"#
    )
}

/// Slack's interactivity request for a click on answer `i`'s first button, form-encoded.
fn slack_tap(i: u64, users: u64) -> String {
    let user = i % users;
    let (on, token) = (format!("1718100000.{i:06}"), format!("s{i:09}"));
    let channel = format!("DB{user:07}");
    let button = |index: u64, label: &str| {
        json!({"type": "button", "action_id": format!("{token}.{index}"), "value": format!("{token}.{index}"),
               "text": {"type": "plain_text", "text": label, "emoji": true}})
    };
    let payload = json!({
        "type": "block_actions",
        "user": {"id": format!("UB{user:07}"), "username": "bench", "name": "bench", "team_id": SLACK_TEAM},
        "api_app_id": "A0BENCH",
        "token": "unused-verification-token",
        "container": {"type": "message", "message_ts": on, "channel_id": channel, "is_ephemeral": false},
        "trigger_id": format!("1232113.{i}.d2b5e1f8c5d1a3b6"),
        "team": {"id": SLACK_TEAM, "domain": "bench"},
        "enterprise": null,
        "is_enterprise_install": false,
        "channel": {"id": channel, "name": "directmessage"},
        "message": {"type": "message", "subtype": "bot_message", "text": "Approve the refund?", "ts": on,
                    "bot_id": "BBOT1", "blocks": [
                        {"type": "section", "block_id": "s1", "text": {"type": "mrkdwn", "text": "Approve the refund?"}},
                        {"type": "actions", "block_id": token, "elements": [button(0, "Approve"), button(1, "Reject")]}]},
        "state": {"values": {}},
        "response_url": format!("https://hooks.slack.com/actions/{SLACK_TEAM}/{i}/bench"),
        "actions": [{"action_id": format!("{token}.0"), "block_id": token,
                     "text": {"type": "plain_text", "text": "Approve", "emoji": true},
                     "value": format!("{token}.0"), "style": "primary", "type": "button",
                     "action_ts": format!("1718200000.{i:06}")}]
    });
    serde_urlencoded::to_string([("payload", payload.to_string())]).expect("a form encodes")
}

fn slack_signature(timestamp: i64, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(SLACK_SECRET.as_bytes()).expect("any key length");
    mac.update(format!("v0:{timestamp}:").as_bytes());
    mac.update(body);
    format!("v0={}", hex::encode(mac.finalize().into_bytes()))
}

#[derive(Clone, Copy)]
enum Kind {
    Text,
    SlackTap,
}

/// One open-loop stream: request k due at start + k/rate, at most `cap` in flight.
struct Stream {
    kind: Kind,
    url: reqwest::Url,
    rate: f64,
    count: u64,
    users: u64,
}

#[derive(Default)]
struct OpenLoop {
    ok: u64,
    failed: u64,
    first_failure: Option<String>,
    latencies: Vec<u64>,
    max_lag_us: u64,
    last_answer: Option<Instant>,
}

async fn open_loop(
    stream: Stream,
    client: reqwest::Client,
    shared: Arc<Shared>,
    start: Instant,
    cap: usize,
) -> anyhow::Result<OpenLoop> {
    let stream = Arc::new(stream);
    let limit = Arc::new(Semaphore::new(cap));
    let mut tasks = Vec::with_capacity(stream.count as usize);
    for k in 0..stream.count {
        let due = start + Duration::from_secs_f64(k as f64 / stream.rate);
        tokio::time::sleep_until(due.into()).await;
        let permit = limit.clone().acquire_owned().await?;
        let (stream, client, shared) = (stream.clone(), client.clone(), shared.clone());
        tasks.push(tokio::spawn(async move {
            let request = client.post(stream.url.clone());
            let request = match stream.kind {
                Kind::Text => request
                    .header("content-type", "application/json")
                    .header("x-telegram-bot-api-secret-token", TELEGRAM_SECRET)
                    .body(telegram_text(k, stream.users)),
                Kind::SlackTap => {
                    let body = slack_tap(k, stream.users);
                    let now = chrono::Utc::now().timestamp();
                    request
                        .header("content-type", "application/x-www-form-urlencoded")
                        .header("x-slack-request-timestamp", now.to_string())
                        .header("x-slack-signature", slack_signature(now, body.as_bytes()))
                        .body(body)
                }
            };
            let sent = Instant::now();
            match stream.kind {
                Kind::Text => shared.stamp(&shared.text_sent, k),
                Kind::SlackTap => shared.stamp(&shared.tap_sent, k),
            };
            let outcome = match request.send().await {
                Ok(r) if r.status().is_success() => {
                    let _ = r.bytes().await;
                    Ok(())
                }
                Ok(r) => Err(format!("{}: {}", r.status(), r.text().await.unwrap_or_default())),
                Err(e) => Err(e.to_string()),
            };
            drop(permit);
            let lag = sent.saturating_duration_since(due).as_micros() as u64;
            (outcome, sent.elapsed().as_micros() as u64, lag, Instant::now())
        }));
    }
    let mut result = OpenLoop::default();
    for task in tasks {
        let (outcome, latency, lag, answered) = task.await?;
        result.latencies.push(latency);
        result.max_lag_us = result.max_lag_us.max(lag);
        result.last_answer = Some(result.last_answer.map_or(answered, |last| last.max(answered)));
        match outcome {
            Ok(()) => result.ok += 1,
            Err(e) => {
                result.failed += 1;
                result.first_failure.get_or_insert(e);
            }
        }
    }
    Ok(result)
}

async fn slack_phase(
    args: &Args,
    db: &BenchDb,
    place: &Place,
    shared: &Arc<Shared>,
    gateway: Gateway,
    addr: SocketAddr,
    slack_taps: u64,
) -> anyhow::Result<(Gateway, SocketAddr)> {
    let texts = Stream {
        kind: Kind::Text,
        url: format!("http://{addr}{}", place.telegram_hook).parse()?,
        rate: args.rate,
        count: shared.text_sent.len() as u64,
        users: args.text_users,
    };
    let taps = Stream {
        kind: Kind::SlackTap,
        url: format!("http://{addr}{}/interactivity", place.slack_hook).parse()?,
        rate: args.slack_tap_rate,
        count: slack_taps,
        users: args.tap_users.min(slack_taps.max(1)),
    };
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(args.max_in_flight)
        .build()?;
    let before = Counters::take(shared);
    let cpu_before = gateway.cpu_secs();
    eprintln!(
        "phase slack: {} texts/s and {} Slack taps/s for {} s",
        args.rate, args.slack_tap_rate, args.seconds
    );
    let start = Instant::now() + Duration::from_millis(100);
    let start_micros = (start - shared.started).as_micros() as u64;
    let (texts, taps) = tokio::join!(
        open_loop(texts, client.clone(), shared.clone(), start, args.max_in_flight),
        open_loop(taps, client, shared.clone(), start, args.max_in_flight),
    );
    let (mut texts, mut taps) = (texts?, taps?);
    let posting_end = texts
        .last_answer
        .unwrap_or_else(Instant::now)
        .max(taps.last_answer.unwrap_or(start));
    let window = posting_end.saturating_duration_since(start).as_secs_f64();
    let end_micros = (posting_end - shared.started).as_micros() as u64;

    let drain = Instant::now();
    let limit = Duration::from_secs(args.drain_secs);
    let mut done = tap_records(db, place.slack).await?;
    loop {
        let replied = shared.text_replied.iter().filter(|t| t.load(Relaxed) > 0).count() as u64;
        let settled = replied >= texts.ok && done.executed >= taps.ok && done.edits_sent >= taps.ok;
        if settled || drain.elapsed() >= limit {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        done = tap_records(db, place.slack).await?;
    }
    let cpu = gateway.cpu_secs() - cpu_before;
    let after = Counters::take(shared);

    let replies: Vec<u64> = shared
        .text_replied
        .iter()
        .map(|t| t.load(Relaxed))
        .filter(|&t| t > 0)
        .collect();
    let first_reply = replies.iter().copied().min().unwrap_or(0);
    let in_window = replies
        .iter()
        .filter(|&&t| t >= first_reply && t <= end_micros)
        .count();
    let steady = in_window as f64 / ((end_micros.saturating_sub(first_reply)) as f64 / 1e6).max(1e-9);
    let reply_latency = intervals(&shared.text_sent, &shared.text_replied);
    let update_latency = intervals(&shared.tap_sent, &shared.tap_updated);

    println!(
        "== Slack taps under {} Telegram texts/s (agent {} ms) ==",
        args.rate, args.agent_latency_ms
    );
    println!(
        "texts: {} posted in {window:.2} s ({:.0}/s accepted, {} failed{}), webhook {}, max lag {:.1} ms",
        texts.ok + texts.failed,
        texts.ok as f64 / window.max(1e-9),
        texts.failed,
        texts
            .first_failure
            .as_deref()
            .map(|f| format!(": first {f}"))
            .unwrap_or_default(),
        percentiles(std::mem::take(&mut texts.latencies)),
        texts.max_lag_us as f64 / 1000.0
    );
    println!(
        "texts answered: {} of {} ({steady:.0} turns/s steady, first reply {:.2} s after the start); \
         webhook→reply {}; drained {:.1} s after posting",
        replies.len(),
        texts.ok,
        first_reply.saturating_sub(start_micros) as f64 / 1e6,
        percentiles(reply_latency),
        drain.elapsed().as_secs_f64()
    );
    let ack = percentiles(std::mem::take(&mut taps.latencies));
    println!(
        "Slack taps: {} posted, {} × 200, {} failed{}; ack {ack}, max lag {:.1} ms",
        taps.ok + taps.failed,
        taps.ok,
        taps.failed,
        taps.first_failure
            .as_deref()
            .map(|f| format!(": first {f}"))
            .unwrap_or_default(),
        taps.max_lag_us as f64 / 1000.0
    );
    println!(
        "Slack ack p99 {:.1} ms against Slack's 3 s: {}",
        ack.p99 as f64 / 1000.0,
        if ack.max < 300_000 {
            "far below (max under 10 % of it)"
        } else if ack.max < 3_000_000 {
            "below"
        } else {
            "NOT below"
        }
    );
    println!(
        "tap→chat.update (buttons replaced) {}",
        percentiles(update_latency)
    );
    println!("recorded: {done}");
    let exact = done.turns == taps.ok && done.doubles == 0 && done.chosen == taps.ok && done.edits == taps.ok;
    println!(
        "each accepted Slack tap one turn, one choice made, one closing edit: {}",
        if exact { "yes" } else { "NO" }
    );
    for line in dropped_taps(addr).await {
        println!("  metric {line}");
    }
    println!(
        "stand-ins during the phase: agent calls {} (with an action {}, repeated turns {}); Telegram \
         sendMessage {}, other {}; Slack chat.postMessage {}, chat.update {} (repeated {}), other {}",
        after.agent_calls - before.agent_calls,
        after.agent_tap_calls - before.agent_tap_calls,
        after.agent_repeats - before.agent_repeats,
        after.telegram_sends - before.telegram_sends,
        after.telegram_other - before.telegram_other,
        after.slack_posts - before.slack_posts,
        after.slack_updates - before.slack_updates,
        shared.slack_update_repeats.load(Relaxed),
        after.slack_other - before.slack_other,
    );
    let turns = texts.ok + taps.ok;
    println!(
        "gateway CPU {cpu:.1} s over posting and drain ({:.0} µs a turn), RSS {:.0} MB",
        cpu * 1e6 / turns.max(1) as f64,
        gateway.rss_mb()
    );
    Ok((gateway, addr))
}

struct Counters {
    agent_calls: u64,
    agent_tap_calls: u64,
    agent_repeats: u64,
    telegram_sends: u64,
    telegram_other: u64,
    slack_posts: u64,
    slack_updates: u64,
    slack_other: u64,
}

impl Counters {
    fn take(shared: &Shared) -> Self {
        Self {
            agent_calls: shared.agent_calls.load(Relaxed),
            agent_tap_calls: shared.agent_tap_calls.load(Relaxed),
            agent_repeats: shared.agent_repeats.load(Relaxed),
            telegram_sends: shared.telegram_sends.load(Relaxed),
            telegram_other: shared.telegram_other.load(Relaxed),
            slack_posts: shared.slack_posts.load(Relaxed),
            slack_updates: shared.slack_updates.load(Relaxed),
            slack_other: shared.slack_other.load(Relaxed),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Figures

fn intervals(from: &[AtomicU64], to: &[AtomicU64]) -> Vec<u64> {
    from.iter()
        .zip(to)
        .filter_map(|(a, b)| {
            let (a, b) = (a.load(Relaxed), b.load(Relaxed));
            (a > 0 && b >= a).then(|| b - a)
        })
        .collect()
}

struct Percentiles {
    count: usize,
    p50: u64,
    p99: u64,
    max: u64,
}

fn percentiles(mut micros: Vec<u64>) -> Percentiles {
    micros.sort_unstable();
    let at = |q: f64| {
        micros
            .get(((micros.len() as f64 * q).ceil() as usize).saturating_sub(1))
            .copied()
            .unwrap_or(0)
    };
    Percentiles {
        count: micros.len(),
        p50: at(0.50),
        p99: at(0.99),
        max: micros.last().copied().unwrap_or(0),
    }
}

impl std::fmt::Display for Percentiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ms = |us: u64| us as f64 / 1000.0;
        write!(
            f,
            "p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms (n {})",
            ms(self.p50),
            ms(self.p99),
            ms(self.max),
            self.count
        )
    }
}
