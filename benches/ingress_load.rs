//! Ingress load generator: how many signed webhooks per second the real gateway accepts
//! (verified, recorded, queued, answered 200), at what latency, and how that compares with
//! what PostgreSQL alone can commit for the same rows.
//!
//! ```text
//! cargo bench --bench ingress_load -- --concurrency 64 --seconds 10            # closed loop
//! cargo bench --bench ingress_load -- --concurrency 64 --seconds 10 --rate 1000 # open loop
//! ```
//!
//! What one run does:
//! 1. creates a database `cb_bench_<random>` on DATABASE_URL's server (default
//!    postgres://postgres@127.0.0.1:5432/postgres) and migrates it with the app's `migrate`;
//! 2. starts the real `Application` on 127.0.0.1:0 with the worker disabled, so the queue
//!    only grows and every CPU cycle goes to ingress;
//! 3. provisions one tenant with a Slack, a WhatsApp and a Telegram connector and links the
//!    fixtures' senders, so every webhook is recorded `accepted` and queued;
//! 4. posts unique (Slack `ts`, WhatsApp `wamid`, Telegram `update_id` vary per request),
//!    correctly signed webhooks, rotating platforms, from `--concurrency` tokio tasks over
//!    loopback HTTP/1.1 keep-alive:
//!    - closed loop (default): each task sends its next request as soon as the previous
//!      answer arrived; measures throughput;
//!    - open loop (`--rate R`): request *i* is due at `start + i/R`, whatever happened to the
//!      earlier ones; latency is counted from the due time, so a stalled gateway cannot
//!      hide its queueing delay (no coordinated omission). `--concurrency` caps requests in
//!      flight; when every task is busy, due requests wait and that wait is in the figures;
//! 5. checks that the database holds exactly one message row and one queue row per accepted
//!    (200) request;
//! 6. stops the gateway and measures the raw PostgreSQL ceiling for the same rows: N
//!    connections, each running one webhook's write transaction in its plainest form
//!    (`TenantTx::begin`, a single-row INSERT … ON CONFLICT of the message, a single-row
//!    INSERT of its job, commit) back to back for `--pg-seconds`, pgbench-style, and prints
//!    commits/s;
//! 7. with `--profile-db`, also runs the gateway's whole database path without HTTP (load
//!    the connector in one tenant transaction, then `ingress::record` in another), to
//!    separate database round trips from HTTP and JSON work;
//! 8. drops the database.
//!
//! The load generator, the gateway and PostgreSQL share the machine's cores, so the
//! figures are a floor for the gateway on its own hardware. Run in release mode (`cargo
//! bench` uses the bench profile).

#[allow(dead_code)] // each bench uses a part of it
mod common;

use channel_bridge::secrets::Keyring;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use channel_bridge::db::{self, TenantTx};
use channel_bridge::domain::{ConnectorId, MessageId, Platform, TenantId, UnlinkedPolicy};
use channel_bridge::platforms::inbound::Parsed;
use channel_bridge::settings::{DatabaseSettings, ServeSettings};
use channel_bridge::shapes::{ConnectorSettings, NewConnector};
use channel_bridge::startup::Application;
use clap::Parser;
use common::cpu::{machine_ticks, own_ticks, postgres_ticks};
use common::webhooks::post_queued;
use common::BenchDb;
use secrecy::SecretString;
use sqlx::{Connection, Executor, PgConnection};

#[derive(Debug, Parser)]
#[command(about = "Ingress load generator and PostgreSQL ceiling for channel-bridge")]
struct Args {
    /// Concurrent client tasks (requests in flight at most).
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// Measured seconds of HTTP load (after a short warm-up).
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Open loop: target requests per second. Without it the loop is closed.
    #[arg(long)]
    rate: Option<f64>,
    /// Warm-up seconds before measuring (connections opened, statements prepared).
    #[arg(long, default_value_t = 1)]
    warmup_seconds: u64,
    /// The gateway's database pool size (CB_DB_POOL_SIZE; the server default is 16).
    #[arg(long, default_value_t = 16)]
    pool_size: u32,
    /// The gateway's ingress writer tasks (CB_INGRESS_WRITERS; the server default is 4).
    #[arg(long, default_value_t = 4)]
    ingress_writers: usize,
    /// Most webhooks per ingress commit (CB_INGRESS_BATCH_MAX; the server default is 64).
    #[arg(long, default_value_t = 64)]
    ingress_batch_max: usize,
    /// Seconds of the raw PostgreSQL measurement (0 skips it).
    #[arg(long, default_value_t = 10)]
    pg_seconds: u64,
    /// Connections of the raw PostgreSQL measurement (default: --concurrency).
    #[arg(long)]
    pg_connections: Option<usize>,
    /// Also measure where the gateway's database time goes, without HTTP: a connector read
    /// transaction + `ingress::record` (one webhook per commit, no cache, no batching), the
    /// record transaction alone, and both ceilings again.
    #[arg(long)]
    profile_db: bool,
    /// Passed by `cargo bench` to every bench binary; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

const SLACK_SECRET: &str = "bench-slack-signing-secret";
const WHATSAPP_SECRET: &str = "bench-meta-app-secret";
const TELEGRAM_SECRET: &str = "bench-telegram-secret_token";

/// Placeholders in the body templates: inside a JSON string, and a whole JSON number.
const SEQ_IN_STRING: &str = "@@SEQ@@";
const SEQ_AS_NUMBER: &str = "\"@@SEQNUM@@\"";

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    anyhow::ensure!(args.concurrency > 0, "--concurrency must be at least 1");
    anyhow::ensure!(args.seconds > 0, "--seconds must be at least 1");
    anyhow::ensure!(args.rate.is_none_or(|r| r > 0.0), "--rate must be positive");
    // Other work on the machine skews every figure below; say how busy it was.
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("load average before the run: {}", load.trim());
    let db = BenchDb::create().await?;
    println!("database {} (migrated)", db.name);
    let outcome = run(&args, &db).await;
    db.drop_now().await;
    outcome
}

async fn run(args: &Args, db: &BenchDb) -> anyhow::Result<()> {
    let mut settings = ServeSettings::for_database(db.url.clone());
    settings.worker = false;
    settings.database.pool_size = args.pool_size;
    settings.ingress_writers = args.ingress_writers;
    settings.ingress_batch_max = args.ingress_batch_max;
    let app = Application::build(settings).await?;
    let addr = app.local_addr().context("HTTP is enabled")?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(app.run_until(async {
        let _ = stopped.await;
    }));

    let owner_pool = db::connect_pool(&DatabaseSettings::from_url(db.url.clone()))?;
    let tenant = provision(&owner_pool).await?;
    let targets = Arc::new(Targets::new(&format!("http://{addr}"), &tenant)?);

    let warmup = load(args, &targets, Duration::from_secs(args.warmup_seconds), None).await?;
    let report = load(args, &targets, Duration::from_secs(args.seconds), args.rate).await?;
    let accepted = warmup.accepted + report.accepted;
    report.print(args);
    let _ = stop.send(());
    server.await.context("server task panicked")??;

    let consistent = check_rows(db, accepted).await?;
    if args.pg_seconds > 0 {
        let connections = args.pg_connections.unwrap_or(args.concurrency);
        let duration = Duration::from_secs(args.pg_seconds);
        pg_ceiling(db, &tenant, connections, duration, Ping::OnAcquire).await?;
        if args.profile_db {
            let paths = [
                (DbPath::Gateway, Ping::OnAcquire),
                (DbPath::RecordOnly, Ping::OnAcquire),
                (DbPath::RecordOnly, Ping::Never),
            ];
            for (path, ping) in paths {
                db_path(db, &tenant, connections, duration, path, ping).await?;
            }
            pg_ceiling(db, &tenant, connections, duration, Ping::Never).await?;
        }
    }
    owner_pool.close().await;
    anyhow::ensure!(consistent, "the database does not match the accepted requests");
    Ok(())
}

/// The tenant and its three connectors.
struct Tenant {
    id: TenantId,
    connectors: [ConnectorId; 3],
}

/// Senders of the fixtures, linked so every message is `accepted` and queued.
const SENDERS: [(Platform, &str, &str); 3] = [
    (Platform::Slack, "U0USER1", "alice"),
    (Platform::Whatsapp, "16505551234", "bob"),
    (Platform::Telegram, "408258968", "alice"),
];

async fn provision(pool: &sqlx::PgPool) -> anyhow::Result<Tenant> {
    use channel_bridge::provision;
    let id = provision::create_tenant(pool, &Keyring::ephemeral(), "bench", "bench", None)
        .await?
        .tenant_id;
    let mut connectors = Vec::new();
    for platform in Platform::ALL {
        connectors.push(
            provision::add_connector(pool, &Keyring::ephemeral(), id, &new_connector(platform))
                .await?
                .connector_id,
        );
    }
    for (platform, sender, user) in SENDERS {
        provision::add_link(pool, id, platform, sender, user).await?;
    }
    let connectors = connectors
        .try_into()
        .map_err(|_| anyhow::anyhow!("three connectors were created"))?;
    Ok(Tenant { id, connectors })
}

/// Connector ids as in fixtures/README.md, so the fixtures' bodies pass the echo filters.
fn new_connector(platform: Platform) -> NewConnector {
    let (external_id, bot_user_id, bot_id) = match platform {
        Platform::Slack => ("T0001", Some("UBOT1"), Some("BBOT1")),
        Platform::Whatsapp => ("106540352242922", None, None),
        Platform::Telegram => ("7000000001", Some("7000000001"), None),
    };
    let mut new = NewConnector::new(platform, SecretString::from(secret(platform).to_owned()));
    new.settings = ConnectorSettings {
        name: Some(format!("bench {platform}")),
        external_id: Some(external_id.into()),
        app_id: (platform == Platform::Slack).then(|| "A0001".into()),
        bot_user_id: bot_user_id.map(Into::into),
        bot_id: bot_id.map(Into::into),
        unlinked_policy: Some(UnlinkedPolicy::Deny),
        ..ConnectorSettings::default()
    };
    new
}

fn secret(platform: Platform) -> &'static str {
    match platform {
        Platform::Slack => SLACK_SECRET,
        Platform::Whatsapp => WHATSAPP_SECRET,
        Platform::Telegram => TELEGRAM_SECRET,
    }
}

/// Per platform: the hook URL and a compact body template with the per-request id left as
/// a placeholder.
struct Targets {
    by_platform: Vec<(Platform, reqwest::Url, String)>,
    /// Next sequence number: unique per request across warm-up and measurement.
    next_seq: AtomicU64,
}

impl Targets {
    fn new(base: &str, tenant: &Tenant) -> anyhow::Result<Self> {
        let mut by_platform = Vec::new();
        for (platform, connector) in Platform::ALL.into_iter().zip(tenant.connectors) {
            let url = format!(
                "{base}{}",
                channel_bridge::provision::webhook_path(tenant.id, connector)
            );
            by_platform.push((platform, url.parse()?, template(platform)?));
        }
        Ok(Self {
            by_platform,
            next_seq: AtomicU64::new(1),
        })
    }

    /// The `seq`-th request: platforms rotate, ids are unique, the signature is fresh.
    fn request(&self, seq: u64) -> (reqwest::Url, Vec<(axum::http::HeaderName, String)>, Vec<u8>) {
        let (platform, url, template) = &self.by_platform[(seq % 3) as usize];
        let body = template
            .replace(SEQ_AS_NUMBER, &seq.to_string())
            .replace(SEQ_IN_STRING, &format!("{seq:010}"))
            .into_bytes();
        let now = chrono::Utc::now().timestamp();
        let headers = channel_bridge::sign::sign_headers(*platform, secret(*platform), &body, now);
        (url.clone(), headers, body)
    }
}

/// The fixture of each platform's plain text message, with its identity made variable:
/// Slack `ts`/`event_ts`/`event_id`, WhatsApp `wamid`, Telegram `update_id`/`message_id`.
fn template(platform: Platform) -> anyhow::Result<String> {
    let (raw, edits): (&str, &[(&[&str], &str)]) = match platform {
        Platform::Slack => (
            include_str!("../fixtures/slack/dm_text.json"),
            &[
                (&["event", "ts"], "1718000000.@@SEQ@@"),
                (&["event", "event_ts"], "1718000000.@@SEQ@@"),
                (&["event_id"], "Ev@@SEQ@@"),
            ],
        ),
        Platform::Whatsapp => (
            include_str!("../fixtures/whatsapp/text.json"),
            &[(
                &["entry", "0", "changes", "0", "value", "messages", "0", "id"],
                "wamid.BENCH@@SEQ@@",
            )],
        ),
        Platform::Telegram => (
            include_str!("../fixtures/telegram/private_text.json"),
            &[
                (&["update_id"], "@@SEQNUM@@"),
                (&["message", "message_id"], "@@SEQNUM@@"),
            ],
        ),
    };
    let mut value: serde_json::Value = serde_json::from_str(raw)?;
    for (path, replacement) in edits {
        let pointer = format!("/{}", path.join("/"));
        let field = value
            .pointer_mut(&pointer)
            .with_context(|| format!("{platform} fixture has {pointer}"))?;
        *field = serde_json::Value::String((*replacement).to_owned());
    }
    Ok(serde_json::to_string(&value)?)
}

/// What one load phase saw.
#[derive(Default)]
struct Report {
    elapsed: Duration,
    sent: u64,
    accepted: u64,
    /// Answers by status (or transport error kind), for everything but an accepted 200.
    errors: BTreeMap<String, u64>,
    /// Microseconds from the request's due time (open loop) or send time (closed loop).
    latencies: Vec<u64>,
    /// Microseconds from the actual send, open loop only (without client-side queueing).
    service: Vec<u64>,
    /// Where the machine's CPU went during the phase.
    cpu: Option<String>,
}

impl Report {
    fn merge(&mut self, other: Report) {
        self.sent += other.sent;
        self.accepted += other.accepted;
        for (key, n) in other.errors {
            *self.errors.entry(key).or_default() += n;
        }
        self.latencies.extend(other.latencies);
        self.service.extend(other.service);
    }

    fn print(mut self, args: &Args) {
        let secs = self.elapsed.as_secs_f64();
        match args.rate {
            None => println!("\nclosed loop: concurrency {}, {secs:.1} s", args.concurrency),
            Some(rate) => println!(
                "\nopen loop: target {rate}/s, at most {} in flight, {secs:.1} s",
                args.concurrency
            ),
        }
        println!(
            "  sent          {:>8}  ({:.0}/s)",
            self.sent,
            self.sent as f64 / secs
        );
        println!(
            "  accepted      {:>8}  ({:.0}/s)",
            self.accepted,
            self.accepted as f64 / secs
        );
        let label = if args.rate.is_some() {
            "from due time"
        } else {
            "latency"
        };
        println!("  {label:<13} {}", percentiles(&mut self.latencies));
        if args.rate.is_some() {
            println!("  service time  {}", percentiles(&mut self.service));
        }
        if let Some(cpu) = &self.cpu {
            println!("  cpu (cores)   {cpu}");
        }
        if self.errors.is_empty() {
            println!("  errors        none");
        }
        for (kind, n) in &self.errors {
            println!("  error {kind:<7} {n:>8}");
        }
    }
}

fn percentiles(micros: &mut [u64]) -> String {
    if micros.is_empty() {
        return "no samples".into();
    }
    micros.sort_unstable();
    let at = |q: f64| micros[((micros.len() - 1) as f64 * q).round() as usize] as f64 / 1000.0;
    format!(
        "p50 {:.2} ms  p90 {:.2} ms  p99 {:.2} ms  max {:.2} ms",
        at(0.50),
        at(0.90),
        at(0.99),
        at(1.0)
    )
}

/// Runs `concurrency` client tasks for `duration`, closed loop or at `rate`.
async fn load(
    args: &Args,
    targets: &Arc<Targets>,
    duration: Duration,
    rate: Option<f64>,
) -> anyhow::Result<Report> {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(args.concurrency)
        .tcp_nodelay(true)
        .timeout(Duration::from_secs(10))
        .build()?;
    let cpu = CpuSample::take();
    let start = Instant::now();
    let deadline = start + duration;
    let slots = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..args.concurrency {
        let (client, targets, slots) = (client.clone(), targets.clone(), slots.clone());
        tasks.push(tokio::spawn(async move {
            let mut report = Report::default();
            loop {
                let due = match rate {
                    None => Instant::now(),
                    Some(rate) => {
                        let slot = slots.fetch_add(1, Ordering::Relaxed);
                        start + Duration::from_secs_f64(slot as f64 / rate)
                    }
                };
                if due >= deadline || Instant::now() >= deadline {
                    break;
                }
                tokio::time::sleep_until(due.into()).await;
                let seq = targets.next_seq.fetch_add(1, Ordering::Relaxed);
                let sent_at = Instant::now();
                let outcome = post(&client, &targets, seq).await;
                let done = Instant::now();
                report.sent += 1;
                report.latencies.push((done - due).as_micros() as u64);
                if rate.is_some() {
                    report.service.push((done - sent_at).as_micros() as u64);
                }
                match outcome {
                    Ok(()) => report.accepted += 1,
                    Err(kind) => *report.errors.entry(kind).or_default() += 1,
                }
            }
            report
        }));
    }
    let mut report = Report::default();
    for task in tasks {
        report.merge(task.await.context("client task panicked")?);
    }
    // Until the last answer: the in-flight tail after the deadline counts against us.
    report.elapsed = start.elapsed();
    report.cpu = CpuSample::usage_since(cpu, report.elapsed);
    Ok(report)
}

/// Sends one webhook. `Ok` means 200 with the message queued; anything else is named.
async fn post(client: &reqwest::Client, targets: &Targets, seq: u64) -> Result<(), String> {
    let (url, headers, body) = targets.request(seq);
    let mut request = client.post(url).body(body);
    for (name, value) in headers {
        request = request.header(name, value);
    }
    post_queued(request).await
}

/// One message row and one queue row per accepted request, no more, no less.
async fn check_rows(db: &BenchDb, accepted: u64) -> anyhow::Result<bool> {
    let mut owner = PgConnection::connect(&db.url).await?;
    let messages: i64 = sqlx::query_scalar("select count(*) from channel_messages")
        .fetch_one(&mut owner)
        .await?;
    let queued: i64 = sqlx::query_scalar("select count(*) from dispatch_queue")
        .fetch_one(&mut owner)
        .await?;
    owner.close().await?;
    let ok = messages as u64 == accepted && queued as u64 == accepted;
    println!(
        "  db check      {messages} message rows, {queued} queue rows for {accepted} accepted \
         requests (warm-up included): {}",
        if ok { "OK" } else { "MISMATCH" }
    );
    Ok(ok)
}

/// The raw PostgreSQL ceiling: `connections` tasks, each committing the ingress write
/// transaction (set tenant, insert message ON CONFLICT DO NOTHING, insert queue row) back to
/// back on its own pooled connection (the app role, so RLS applies as in the gateway).
async fn pg_ceiling(
    db: &BenchDb,
    tenant: &Tenant,
    connections: usize,
    duration: Duration,
    ping: Ping,
) -> anyhow::Result<()> {
    let pool = bench_pool(db, connections, ping)?;
    let closer = pool.clone();
    // Each run of this phase takes its own range of keys, so no row is a duplicate.
    static RUN: AtomicU64 = AtomicU64::new(0);
    let seq = Arc::new(AtomicU64::new(RUN.fetch_add(1, Ordering::Relaxed) << 32));
    let (tenant_id, connector) = (tenant.id, tenant.connectors[0]);
    let stats = run_for(connections, duration, move |_| {
        let (pool, seq) = (pool.clone(), seq.clone());
        async move {
            let n = seq.fetch_add(1, Ordering::Relaxed);
            // Another `ts` range than the HTTP phase's.
            let ts = format!("1900000000.{n:014}");
            let key = format!("T0001:D0DM00001:{ts}");
            let metadata = serde_json::json!({"event_id": format!("Ev{n}"), "channel_type": "im"});
            // Plain single-row statements, the cheapest form of the ingress rows: this is
            // PostgreSQL's ceiling, not the gateway's code.
            let mut tx = TenantTx::begin(&pool, tenant_id).await?;
            let id: MessageId = sqlx::query_scalar(
                "insert into channel_messages (tenant_id, id, connector_id, platform, idempotency_key,
                     platform_message_id, chat_id, platform_user_id, user_id, conversation_key,
                     request_content, status, metadata)
                 values ($1, $2, $3, 'slack', $4, $5, 'D0DM00001', 'U0USER1', 'alice', 'user:alice',
                         'Hello bridge, what can you do?', 'accepted', $6)
                 on conflict (tenant_id, connector_id, idempotency_key) do nothing
                 returning id",
            )
            .bind(tenant_id)
            .bind(MessageId::new())
            .bind(connector)
            .bind(&key)
            .bind(&ts)
            .bind(&metadata)
            .fetch_one(tx.conn())
            .await?;
            sqlx::query(
                "insert into dispatch_queue (message_id, tenant_id, conversation_key) values ($1, $2, 'user:alice')",
            )
            .bind(id)
            .bind(tenant_id)
            .execute(tx.conn())
            .await?;
            tx.commit().await?;
            Ok(())
        }
    })
    .await?;
    closer.close().await;
    stats.print(&format!(
        "raw PostgreSQL ceiling: {connections} connections, ingress write transaction \
         (BEGIN, set tenant, INSERT message ON CONFLICT, INSERT queue, COMMIT){}",
        ping.label()
    ));
    Ok(())
}

/// Which part of the gateway's database work `db_path` repeats.
#[derive(Clone, Copy, PartialEq, Eq)]
enum DbPath {
    /// What the webhook handler does: the connector read in one tenant transaction, then
    /// `ingress::record` (link lookup, insert, enqueue) in another.
    Gateway,
    /// `ingress::record` alone, the connector read once: what a connector cache would leave.
    RecordOnly,
}

/// Whether the pool checks a connection with a round trip (`Sync`) before handing it out:
/// sqlx's default `test_before_acquire(true)`, which the application's pool keeps.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Ping {
    OnAcquire,
    Never,
}

impl Ping {
    fn label(self) -> &'static str {
        match self {
            Ping::OnAcquire => "",
            Ping::Never => ", no ping on acquire",
        }
    }
}

/// The gateway's database work for one webhook, without HTTP, signature or answer.
async fn db_path(
    db: &BenchDb,
    tenant: &Tenant,
    connections: usize,
    duration: Duration,
    path: DbPath,
    ping: Ping,
) -> anyhow::Result<()> {
    let pool = bench_pool(db, connections, ping)?;
    let closer = pool.clone();
    let targets = Arc::new(Targets::new("http://unused", tenant)?);
    static RUN: AtomicU64 = AtomicU64::new(1);
    targets
        .next_seq
        .store(RUN.fetch_add(1, Ordering::Relaxed) << 40, Ordering::Relaxed);
    let mut cached = Vec::new();
    for id in tenant.connectors {
        let mut tx = TenantTx::begin(&pool, tenant.id).await?;
        cached.push(
            db::connectors::get(&mut tx, &Keyring::ephemeral(), id)
                .await?
                .context("connector exists")?,
        );
        tx.commit().await?;
    }
    let cached = Arc::new(cached);
    let tenant_id = tenant.id;
    let connectors = tenant.connectors;
    let stats = run_for(connections, duration, move |_| {
        let (pool, targets, cached) = (pool.clone(), targets.clone(), cached.clone());
        async move {
            let seq = targets.next_seq.fetch_add(1, Ordering::Relaxed);
            let (_, _, body) = targets.request(seq);
            let index = (seq % 3) as usize;
            let connector = match path {
                DbPath::RecordOnly => cached[index].clone(),
                DbPath::Gateway => {
                    let mut tx = TenantTx::begin(&pool, tenant_id).await?;
                    let connector =
                        db::connectors::get(&mut tx, &Keyring::ephemeral(), connectors[index]).await?;
                    tx.commit().await?;
                    connector.context("connector exists")?
                }
            };
            let inbound =
                match channel_bridge::platforms::of(connector.profile.platform).parse(&connector, &body) {
                    Ok(Parsed::Events(inbound)) => inbound,
                    _ => anyhow::bail!("the bench body did not parse into events"),
                };
            let outcome = channel_bridge::ingress::record(&pool, &connector, &inbound).await?;
            anyhow::ensure!(outcome.queued.len() == 1, "the message was queued");
            Ok(())
        }
    })
    .await?;
    closer.close().await;
    let what = match path {
        DbPath::Gateway => "connector read transaction + ingress::record transaction",
        DbPath::RecordOnly => "ingress::record transaction only (connector cached)",
    };
    stats.print(&format!(
        "gateway database path without HTTP: {connections} connections, {what}{}",
        ping.label()
    ));
    Ok(())
}

/// A pool like the application's (`SET ROLE channel_bridge_app` on connect, so RLS applies),
/// with `connections` connections and the chosen acquire check.
fn bench_pool(db: &BenchDb, connections: usize, ping: Ping) -> anyhow::Result<sqlx::PgPool> {
    let mut settings = DatabaseSettings::from_url(db.url.clone());
    settings.pool_size = u32::try_from(connections)?;
    if ping == Ping::OnAcquire {
        return db::connect_pool(&settings);
    }
    let options: sqlx::postgres::PgConnectOptions = db.url.parse()?;
    Ok(sqlx::postgres::PgPoolOptions::new()
        .max_connections(settings.pool_size)
        .acquire_timeout(settings.acquire_timeout())
        .test_before_acquire(false)
        .after_connect(|conn, _meta| {
            Box::pin(async move {
                conn.execute(format!("SET ROLE {}", db::APP_ROLE).as_str())
                    .await?;
                Ok(())
            })
        })
        .connect_lazy_with(options))
}

/// CPU time of the whole machine, of this process (gateway + load generator) and of the
/// PostgreSQL processes, from /proc (Linux; elsewhere nothing is reported).
#[derive(Clone, Copy)]
struct CpuSample {
    busy: u64,
    ours: u64,
    postgres: u64,
}

impl CpuSample {
    /// Kernel clock ticks per second (USER_HZ): 100 on every mainstream Linux build.
    const TICKS: f64 = 100.0;

    fn take() -> Option<Self> {
        let (busy, _) = machine_ticks()?;
        let ours = own_ticks()?;
        let postgres = postgres_ticks();
        Some(Self { busy, ours, postgres })
    }

    /// "busy 1.93 of 2: this process 0.95, postgres 0.90, others 0.08", averaged over the
    /// phase. Others are whatever else ran on the machine and skewed the figures.
    fn usage_since(before: Option<Self>, elapsed: Duration) -> Option<String> {
        let (before, after) = (before?, Self::take()?);
        let cores = |ticks: u64| ticks as f64 / Self::TICKS / elapsed.as_secs_f64();
        let busy = cores(after.busy.saturating_sub(before.busy));
        let ours = cores(after.ours.saturating_sub(before.ours));
        let postgres = cores(after.postgres.saturating_sub(before.postgres));
        let total = std::thread::available_parallelism().map_or(0, |n| n.get());
        Some(format!(
            "busy {busy:.2} of {total}: this process {ours:.2}, postgres {postgres:.2}, others {:.2}",
            (busy - ours - postgres).max(0.0)
        ))
    }
}

struct Throughput {
    elapsed: Duration,
    cpu: Option<String>,
    commits: u64,
    errors: BTreeMap<String, u64>,
    latencies: Vec<u64>,
}

impl Throughput {
    fn print(mut self, title: &str) {
        let secs = self.elapsed.as_secs_f64();
        println!("\n{title}, {secs:.1} s");
        println!(
            "  commits       {:>8}  ({:.0}/s)",
            self.commits,
            self.commits as f64 / secs
        );
        println!("  latency       {}", percentiles(&mut self.latencies));
        if let Some(cpu) = &self.cpu {
            println!("  cpu (cores)   {cpu}");
        }
        for (kind, n) in &self.errors {
            println!("  error {kind:<7} {n:>8}");
        }
    }
}

/// Runs `step` back to back in `tasks` tasks for `duration` (after each task's first step,
/// which opens its connection and is not counted).
async fn run_for<F, Fut>(tasks: usize, duration: Duration, step: F) -> anyhow::Result<Throughput>
where
    F: Fn(usize) -> Fut + Send + Sync + Clone + 'static,
    Fut: std::future::Future<Output = anyhow::Result<()>> + Send,
{
    let barrier = Arc::new(tokio::sync::Barrier::new(tasks + 1));
    let mut handles = Vec::new();
    for task in 0..tasks {
        let (step, barrier) = (step.clone(), barrier.clone());
        handles.push(tokio::spawn(async move {
            let warmed = step(task).await;
            barrier.wait().await;
            let deadline = Instant::now() + duration;
            let (mut commits, mut errors, mut latencies) = (0u64, BTreeMap::new(), Vec::new());
            if let Err(err) = warmed {
                *errors.entry(format!("warm-up: {err}")).or_insert(0u64) += 1;
            }
            while Instant::now() < deadline {
                let started = Instant::now();
                match step(task).await {
                    Ok(()) => {
                        commits += 1;
                        latencies.push(started.elapsed().as_micros() as u64);
                    }
                    Err(err) => *errors.entry(err.to_string()).or_insert(0) += 1,
                }
            }
            (commits, errors, latencies)
        }));
    }
    barrier.wait().await;
    let cpu = CpuSample::take();
    let start = Instant::now();
    let mut total = Throughput {
        elapsed: Duration::ZERO,
        cpu: None,
        commits: 0,
        errors: BTreeMap::new(),
        latencies: Vec::new(),
    };
    for handle in handles {
        let (commits, errors, latencies) = handle.await.context("bench task panicked")?;
        total.commits += commits;
        for (kind, n) in errors {
            *total.errors.entry(kind).or_default() += n;
        }
        total.latencies.extend(latencies);
    }
    total.elapsed = start.elapsed();
    total.cpu = CpuSample::usage_since(cpu, total.elapsed);
    Ok(total)
}
