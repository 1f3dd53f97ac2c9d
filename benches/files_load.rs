//! Files in answers through the real gateway binary (docs/benchmarks.md#files): how many file
//! parts one `serve` posts a second, and whether its memory stays bounded as files grow (a
//! file is streamed from its URL into the platform's upload, never held whole).
//!
//! ```text
//! cargo bench --bench files_load -- --turns 1000                     # 1 MiB files
//! cargo bench --bench files_load -- --turns 1000 --file-bytes 0,65536,1048576,8388608
//! # A slow platform (128 KiB/s an upload), so that every turn's file is in flight at once:
//! CB_FILE_TIMEOUT_SECS=100 cargo bench --bench files_load -- --turns 1000 \
//!     --file-bytes 65536,1048576,8388608 --upload-bytes-per-sec 131072
//! cargo bench --bench files_load -- --turns 200 --break-every 10  # downloads that break off
//! ```
//!
//! One run for each `--file-bytes` (0: the agent names no file, the text-only baseline), each
//! on a database of its own (benches/common) and a fresh `serve`:
//! 1. starts in this process the agent stand-in (every dispatch answered with a text and one
//!    attachment `{"url": "<file host>/files/<n>/report.pdf", "mime": "application/pdf"}`),
//!    the file host (every GET served from one shared in-memory buffer, with its
//!    `Content-Length`) and the Telegram API stand-in (`sendMessage` answers at once;
//!    `sendDocument` reads the multipart body as a stream, compares the file's bytes with the
//!    buffer and keeps none, at `--upload-bytes-per-sec` per upload when given);
//! 2. provisions one tenant with a Telegram connector on the stand-in (unlinked senders let
//!    through) and starts `channel-bridge serve` with `CB_EGRESS_ALLOW=127.0.0.1`;
//! 3. posts `--turns` private Telegram texts, each from a sender of its own (so the turns run
//!    in parallel), `--concurrency` posters in closed loop, or at `--rate` a second;
//! 4. waits until the stand-in has received every file (without files: every text), sampling
//!    the gateway's VmRSS and the requests open at the stand-ins every `--sample-ms`; then
//!    checks in the database, as its owner, that every file part is `sent`.
//!
//! Reading the figures: *files/s* is over first file received → last, *overall* over first
//! post → last file; RSS mean and max are over the *uploading* window, first upload started →
//! last file received; *in flight* counts the `sendDocument` requests open at the stand-in,
//! and the file GETs whose body is still being written. CPU is
//! from the first post to the last file, divided by the turns: it holds each turn's webhook,
//! dispatch and text part too, so the `--file-bytes 0` run is the baseline to subtract.
//! PostgreSQL is every `postgres` process, with the bench database's backends apart, as in
//! pipeline_load. `--json` prints the figures as one JSON object on the last line of stdout.

#[allow(dead_code)] // each bench uses a part of it
mod common;

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use axum::body::{Body, Bytes};
use axum::extract::multipart::Field;
use axum::extract::{DefaultBodyLimit, FromRequest, Multipart, Path as UrlPath, Request, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use channel_bridge::domain::UnlinkedPolicy;
use channel_bridge::{db, provision};
use clap::Parser;
use common::cpu::CpuSnapshot;
use common::gateway::{free_local_port, log_path, scan_log, Gateway, LogSummary};
use common::memory::vm_rss_kb;
use common::provision::{bench_keys, telegram_connector, BOT_ID, TELEGRAM_SECRET};
use common::BenchDb;
use futures::StreamExt;
use serde::Serialize;
use serde_json::{json, Value};
use sqlx::{Connection, PgConnection};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

#[derive(Debug, Clone, Parser)]
#[command(about = "Files in answers through the real serve: files/s, RSS against file size")]
struct Args {
    /// Turns to post, each answered with one file.
    #[arg(long, default_value_t = 1_000)]
    turns: u64,
    /// The file's size in bytes; a list runs once for each (0: no file, the text-only baseline).
    #[arg(long, value_delimiter = ',', default_value = "1048576")]
    file_bytes: Vec<u64>,
    /// Webhooks in flight (closed loop, or the cap of the open loop with `--rate`).
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// Webhooks a second (open loop); 0: closed loop.
    #[arg(long, default_value_t = 0.0)]
    rate: f64,
    /// How fast the Telegram stand-in reads each upload, in bytes a second (0: at once).
    #[arg(long, default_value_t = 0)]
    upload_bytes_per_sec: u64,
    /// Fault injection: every n-th file GET breaks off halfway through its body (0: none), to
    /// see what a download that fails mid-stream becomes.
    #[arg(long, default_value_t = 0)]
    break_every: u64,
    /// How long the agent stand-in takes to answer, in milliseconds.
    #[arg(long, default_value_t = 0)]
    agent_latency_ms: u64,
    /// How often the gateway's RSS and the requests in flight are sampled, in milliseconds.
    #[arg(long, default_value_t = 50)]
    sample_ms: u64,
    /// Longest wait for the last file once the posting is done, in seconds.
    #[arg(long, default_value_t = 300)]
    drain_secs: u64,
    /// Keep the databases afterwards instead of dropping them.
    #[arg(long)]
    keep_db: bool,
    /// The figures as one JSON object on the last line of stdout.
    #[arg(long)]
    json: bool,
    /// Passed by `cargo bench` to every bench binary; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

/// Turn `seq` comes from sender `FIRST_SENDER + seq`, with update and message id `seq + 1`.
const FIRST_SENDER: u64 = 300_000_000;
/// The file host writes its body in slices of this size (views of the shared buffer).
const HOST_CHUNK: usize = 64 * 1024;
const RECORDS_LIMIT: Duration = Duration::from_secs(15);
/// How long without a file received before the database is asked whether work is left.
const STALL_CHECK: Duration = Duration::from_secs(3);

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    anyhow::ensure!(
        args.turns > 0 && args.concurrency > 0,
        "--turns and --concurrency must be > 0"
    );
    anyhow::ensure!(!args.file_bytes.is_empty(), "--file-bytes names no size");
    let mut runs = Vec::new();
    for &file_bytes in &args.file_bytes {
        let db = BenchDb::create().await?;
        eprintln!("database {} (migrated); files of {file_bytes} bytes", db.name);
        let outcome = measure(&args, &db, file_bytes).await;
        if args.keep_db {
            eprintln!("database {} kept: {}", db.name, db.url);
        } else {
            db.drop_now().await;
        }
        let run = outcome?;
        if !args.json {
            run.print();
        }
        runs.push(run);
    }
    if args.json {
        println!("{}", json!({ "args": args_json(&args), "runs": runs }));
    } else if runs.len() > 1 {
        print_comparison(&runs);
    }
    Ok(())
}

fn args_json(args: &Args) -> Value {
    json!({
        "turns": args.turns, "file_bytes": args.file_bytes, "concurrency": args.concurrency,
        "rate": args.rate, "upload_bytes_per_sec": args.upload_bytes_per_sec,
        "break_every": args.break_every, "agent_latency_ms": args.agent_latency_ms,
        "sample_ms": args.sample_ms,
    })
}

/// One run: stand-ins, tenant, `serve`, the turns posted and drained, the records checked.
async fn measure(args: &Args, db: &BenchDb, file_bytes: u64) -> anyhow::Result<Run> {
    let shared = start_stand_ins(args, file_bytes).await?;
    let hook = provision(db, &shared.base).await?;
    let addr = free_local_port()?;
    let log = log_path(db, "serve");
    let mut gateway = Gateway::start("serve", &db.url, Some(addr), true, log)?;
    gateway.wait_ready(addr).await?;
    let url: reqwest::Url = format!("http://{addr}{hook}").parse()?;
    let idle_kb = vm_rss_kb(gateway.pid()).unwrap_or(0);
    let sampler = Sampler::start(gateway.pid(), shared.clone(), args.sample_ms);
    let cpu_before = CpuSnapshot::take(gateway.pid(), &db.url).await?;
    let started = Instant::now();
    let posting = post_turns(args, url, &shared).await?;
    let drained = wait_for_done(&shared, &mut gateway, db, posting.ok, args.drain_secs).await?;
    let elapsed = started.elapsed();
    let cpu_after = CpuSnapshot::take(gateway.pid(), &db.url).await?;
    let samples = sampler.finish().await;
    let after_kb = vm_rss_kb(gateway.pid()).unwrap_or(0);
    let records = check_records(db, posting.ok, file_bytes > 0).await?;
    gateway.stop().await?;
    let cpu = cpu_figures(&cpu_before, &cpu_after, elapsed, posting.ok);
    let memory = Memory::of(&samples, &shared, idle_kb, after_kb);
    Ok(Run::new(
        args,
        &shared,
        posting,
        drained,
        memory,
        cpu,
        records,
        &gateway.log,
    ))
}

// ---------------------------------------------------------------------------------------
// Stand-ins: the agent, the file host and Telegram's API, on one server in this process

/// Requests open at a stand-in, now and at most.
#[derive(Default)]
struct Gauge {
    now: AtomicU64,
    max: AtomicU64,
}

impl Gauge {
    fn enter(self: &Arc<Self>) -> Held {
        let now = self.now.fetch_add(1, Relaxed) + 1;
        self.max.fetch_max(now, Relaxed);
        Held(self.clone())
    }
}

/// One request counted in a `Gauge` until dropped.
struct Held(Arc<Gauge>);

impl Drop for Held {
    fn drop(&mut self) {
        self.0.now.fetch_sub(1, Relaxed);
    }
}

struct Shared {
    started: Instant,
    /// The stand-ins' base URL.
    base: String,
    /// The file every answer names (empty: answers name no file).
    file: Bytes,
    agent_latency: Duration,
    upload_rate: u64,
    break_every: u64,
    agent_calls: AtomicU64,
    gets: AtomicU64,
    /// File GETs broken off on purpose (`--break-every`).
    cuts: AtomicU64,
    /// `sendDocument` requests whose body could not be read whole, and the first reason.
    upload_errors: AtomicU64,
    upload_error: std::sync::Mutex<Option<String>>,
    texts: AtomicU64,
    other_calls: AtomicU64,
    message_ids: AtomicU64,
    uploads: Arc<Gauge>,
    downloads: Arc<Gauge>,
    files: AtomicU64,
    bytes: AtomicU64,
    /// Uploads whose bytes were not the file's, or not all of it.
    corrupted: AtomicU64,
    /// Turns whose last part (the file, or the text without files) came twice.
    repeated: AtomicU64,
    /// Micros since `started` + 1 (0: not yet).
    first_upload: AtomicU64,
    first_done: AtomicU64,
    last_done: AtomicU64,
    sent_at: Vec<AtomicU64>,
    done_at: Vec<AtomicU64>,
}

impl Shared {
    fn new(args: &Args, file_bytes: u64, base: String) -> Self {
        let table = || (0..args.turns).map(|_| AtomicU64::new(0)).collect();
        // A pattern, so that bytes moved or dropped are seen.
        let file: Vec<u8> = (0..file_bytes).map(|i| (i % 251) as u8).collect();
        Self {
            started: Instant::now(),
            base,
            file: Bytes::from(file),
            agent_latency: Duration::from_millis(args.agent_latency_ms),
            upload_rate: args.upload_bytes_per_sec,
            break_every: args.break_every,
            agent_calls: AtomicU64::new(0),
            gets: AtomicU64::new(0),
            cuts: AtomicU64::new(0),
            upload_errors: AtomicU64::new(0),
            upload_error: std::sync::Mutex::new(None),
            texts: AtomicU64::new(0),
            other_calls: AtomicU64::new(0),
            message_ids: AtomicU64::new(2_000_000_000),
            uploads: Arc::default(),
            downloads: Arc::default(),
            files: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            corrupted: AtomicU64::new(0),
            repeated: AtomicU64::new(0),
            first_upload: AtomicU64::new(0),
            first_done: AtomicU64::new(0),
            last_done: AtomicU64::new(0),
            sent_at: table(),
            done_at: table(),
        }
    }

    fn now(&self) -> u64 {
        self.started.elapsed().as_micros() as u64 + 1
    }

    /// Stamps `slot` unless stamped; false when it was.
    fn stamp(&self, slot: &AtomicU64) -> bool {
        slot.compare_exchange(0, self.now(), Relaxed, Relaxed).is_ok()
    }

    /// Turn `seq`'s last part arrived.
    fn finish(&self, seq: u64) {
        let Some(slot) = self.done_at.get(seq as usize) else {
            return;
        };
        if !self.stamp(slot) {
            self.repeated.fetch_add(1, Relaxed);
        }
        self.stamp(&self.first_done);
        self.last_done.fetch_max(self.now(), Relaxed);
    }

    fn done(&self) -> u64 {
        match self.file.is_empty() {
            true => self.texts.load(Relaxed),
            false => self.files.load(Relaxed),
        }
    }
}

async fn start_stand_ins(args: &Args, file_bytes: u64) -> anyhow::Result<Arc<Shared>> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    let shared = Arc::new(Shared::new(args, file_bytes, base));
    let app = Router::new()
        .route("/agent", post(agent_call))
        .route("/files/{n}/{name}", get(file_get))
        .route("/telegram/{bot}/{method}", post(telegram_api))
        // Uploads are read as a stream, whatever their size.
        .layer(DefaultBodyLimit::disable())
        .with_state(shared.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(shared)
}

async fn agent_call(State(shared): State<Arc<Shared>>, _dispatch: Bytes) -> Json<Value> {
    let n = shared.agent_calls.fetch_add(1, Relaxed);
    if !shared.agent_latency.is_zero() {
        tokio::time::sleep(shared.agent_latency).await;
    }
    let content = "Here is your report.";
    if shared.file.is_empty() {
        return Json(json!({ "content": content }));
    }
    let url = format!("{}/files/{n}/report.pdf", shared.base);
    let file = json!({ "url": url, "name": "report.pdf", "mime": "application/pdf" });
    Json(json!({ "content": content, "attachments": [file] }))
}

/// The shared buffer in `HOST_CHUNK` slices (no copy), counted in flight until the last is
/// taken; every `--break-every`-th GET breaks off halfway.
async fn file_get(State(shared): State<Arc<Shared>>) -> Response {
    let held = shared.downloads.enter();
    let n = shared.gets.fetch_add(1, Relaxed) + 1;
    let len = shared.file.len();
    let cut = shared.break_every > 0 && n % shared.break_every == 0;
    let file = match cut {
        true => shared.file.slice(..len / 2),
        false => shared.file.clone(),
    };
    let body = futures::stream::unfold((held, file, 0), |(held, file, at)| async move {
        let end = (at + HOST_CHUNK).min(file.len());
        (at < end).then(|| (Ok(file.slice(at..end)), (held, file, end)))
    });
    // A body that breaks off: hyper drops the connection before `Content-Length` is met.
    let broken = cut.then(|| {
        shared.cuts.fetch_add(1, Relaxed);
        Err(std::io::Error::other("broken off by the bench"))
    });
    let response = Response::builder()
        .header(header::CONTENT_TYPE, "application/pdf")
        .header(header::CONTENT_LENGTH, len)
        .body(Body::from_stream(body.chain(futures::stream::iter(broken))));
    response.unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

async fn telegram_api(
    State(shared): State<Arc<Shared>>,
    UrlPath((_bot, method)): UrlPath<(String, String)>,
    request: Request,
) -> Response {
    match method.as_str() {
        "sendDocument" => send_document(shared, request).await,
        "sendMessage" => {
            let body = Bytes::from_request(request, &()).await.unwrap_or_default();
            send_message(&shared, &body).into_response()
        }
        _ => {
            shared.other_calls.fetch_add(1, Relaxed);
            Json(json!({ "ok": true, "result": true })).into_response()
        }
    }
}

fn send_message(shared: &Shared, body: &[u8]) -> Json<Value> {
    shared.texts.fetch_add(1, Relaxed);
    let request: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let reply_to = request
        .pointer("/reply_parameters/message_id")
        .and_then(Value::as_u64);
    if let (true, Some(seq)) = (shared.file.is_empty(), reply_to.and_then(|id| id.checked_sub(1))) {
        shared.finish(seq);
    }
    let result = json!({
        "message_id": shared.message_ids.fetch_add(1, Relaxed),
        "date": 0,
        "chat": { "id": request["chat_id"], "type": "private" },
        "text": request["text"],
    });
    Json(json!({ "ok": true, "result": result }))
}

/// What one `sendDocument` carried.
#[derive(Default)]
struct Upload {
    chat_id: i64,
    reply_to: Option<u64>,
    bytes: u64,
    /// The document was there, and its bytes were exactly the file's.
    intact: bool,
}

async fn send_document(shared: Arc<Shared>, request: Request) -> Response {
    let _open = shared.uploads.enter();
    shared.stamp(&shared.first_upload);
    let upload = match read_upload(&shared, request).await {
        Ok(upload) => upload,
        Err(why) => {
            shared.upload_errors.fetch_add(1, Relaxed);
            let mut first = shared.upload_error.lock().unwrap_or_else(|e| e.into_inner());
            first.get_or_insert_with(|| why.clone());
            drop(first);
            let body = json!({ "ok": false, "error_code": 400, "description": why });
            return (StatusCode::BAD_REQUEST, Json(body)).into_response();
        }
    };
    shared.files.fetch_add(1, Relaxed);
    shared.bytes.fetch_add(upload.bytes, Relaxed);
    if !upload.intact {
        shared.corrupted.fetch_add(1, Relaxed);
    }
    if let Some(seq) = upload.reply_to.and_then(|id| id.checked_sub(1)) {
        shared.finish(seq);
    }
    let id = shared.message_ids.fetch_add(1, Relaxed);
    let document = json!({
        "file_id": format!("BQACAgbench{id}"), "file_unique_id": format!("AgADbench{id}"),
        "file_name": "report.pdf", "mime_type": "application/pdf", "file_size": upload.bytes,
    });
    let result = json!({
        "message_id": id, "chat": { "id": upload.chat_id, "type": "private" }, "date": 0,
        "document": document,
    });
    Json(json!({ "ok": true, "result": result })).into_response()
}

async fn read_upload(shared: &Shared, request: Request) -> Result<Upload, String> {
    let mut form = Multipart::from_request(request, &())
        .await
        .map_err(|e| e.body_text())?;
    let mut upload = Upload::default();
    while let Some(field) = form.next_field().await.map_err(reason)? {
        let name = field.name().unwrap_or_default().to_owned();
        match name.as_str() {
            "document" => (upload.bytes, upload.intact) = read_document(shared, field).await?,
            "chat_id" => upload.chat_id = field.text().await.ok().and_then(|t| t.parse().ok()).unwrap_or(0),
            "reply_parameters" => {
                let text = field.text().await.unwrap_or_default();
                let reply: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
                upload.reply_to = reply["message_id"].as_u64();
            }
            // The caption and anything else: skipped by the next `next_field`.
            _ => {}
        }
    }
    Ok(upload)
}

/// A multipart error with its causes (the body's own error, when the connection broke).
fn reason(err: axum::extract::multipart::MultipartError) -> String {
    let mut text = err.body_text();
    let mut source = std::error::Error::source(&err);
    while let Some(cause) = source {
        text.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    text
}

/// Counts the document's bytes and compares them with the file as they stream, keeping
/// none; at `upload_rate` bytes a second when set.
async fn read_document(shared: &Shared, mut field: Field<'_>) -> Result<(u64, bool), String> {
    let (started, mut seen, mut intact) = (Instant::now(), 0usize, true);
    while let Some(chunk) = field.chunk().await.map_err(reason)? {
        let end = seen + chunk.len();
        intact &= shared
            .file
            .get(seen..end)
            .is_some_and(|expected| expected == &chunk[..]);
        seen = end;
        if shared.upload_rate > 0 {
            let due = started + Duration::from_secs_f64(seen as f64 / shared.upload_rate as f64);
            tokio::time::sleep_until(due.into()).await;
        }
    }
    Ok((seen as u64, intact && seen == shared.file.len()))
}

// ---------------------------------------------------------------------------------------
// Provisioning and the gateway as a child process

/// One tenant whose agent is the stand-in, with one Telegram connector on the stand-in's
/// API; returns its webhook path.
async fn provision(db: &BenchDb, stand_ins: &str) -> anyhow::Result<String> {
    let pool = db::connect_pool(&db.settings())?;
    let keys = &bench_keys().0;
    let agent = format!("{stand_ins}/agent");
    let created = provision::create_tenant(&pool, keys, "files", "Files", Some(&agent)).await?;
    let api = format!("{stand_ins}/telegram");
    let telegram = telegram_connector(BOT_ID, "bench bot".into(), api, UnlinkedPolicy::Allow);
    let telegram = provision::add_connector(&pool, keys, created.tenant_id, &telegram).await?;
    pool.close().await;
    Ok(telegram.webhook_path)
}

// ---------------------------------------------------------------------------------------
// Load

/// Turn `seq` as a Telegram update: a private text from a sender of its own.
fn telegram_text(seq: u64) -> String {
    let (id, sender, date) = (seq + 1, FIRST_SENDER + seq, chrono::Utc::now().timestamp());
    format!(
        r#"{{"update_id":{id},"message":{{"message_id":{id},"from":{{"id":{sender},"is_bot":false,"first_name":"Reader"}},"chat":{{"id":{sender},"first_name":"Reader","type":"private"}},"date":{date},"text":"send me the report {seq}"}}}}"#
    )
}

#[derive(Default, Serialize)]
struct Posting {
    ok: u64,
    failed: u64,
    first_failure: Option<String>,
    secs: f64,
    /// `Shared::now` at the first post.
    #[serde(skip)]
    started_at: u64,
}

/// Every turn's webhook, at most `--concurrency` in flight, each due at `seq / rate` when a
/// rate is given.
async fn post_turns(args: &Args, url: reqwest::Url, shared: &Arc<Shared>) -> anyhow::Result<Posting> {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(args.concurrency)
        .build()?;
    let limit = Arc::new(Semaphore::new(args.concurrency));
    let started = Instant::now();
    let started_at = shared.now();
    let mut tasks = Vec::with_capacity(args.turns as usize);
    for seq in 0..args.turns {
        if args.rate > 0.0 {
            let due = started + Duration::from_secs_f64(seq as f64 / args.rate);
            tokio::time::sleep_until(due.into()).await;
        }
        let permit = limit.clone().acquire_owned().await?;
        let (client, url, shared) = (client.clone(), url.clone(), shared.clone());
        tasks.push(tokio::spawn(async move {
            shared.stamp(&shared.sent_at[seq as usize]);
            let outcome = post_webhook(&client, url, telegram_text(seq)).await;
            drop(permit);
            outcome
        }));
    }
    let mut posting = Posting {
        started_at,
        ..Posting::default()
    };
    for task in tasks {
        match task.await? {
            Ok(()) => posting.ok += 1,
            Err(err) => {
                posting.failed += 1;
                posting.first_failure.get_or_insert(err);
            }
        }
    }
    posting.secs = started.elapsed().as_secs_f64();
    Ok(posting)
}

async fn post_webhook(client: &reqwest::Client, url: reqwest::Url, body: String) -> Result<(), String> {
    let response = client
        .post(url)
        .header("content-type", "application/json")
        .header("x-telegram-bot-api-secret-token", TELEGRAM_SECRET)
        .body(body)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let status = response.status();
    let text = response.text().await.unwrap_or_default();
    match status.is_success() {
        true => Ok(()),
        false => Err(format!(
            "{status}: {}",
            text.chars().take(200).collect::<String>()
        )),
    }
}

/// Until the stand-in has every turn's last part, the gateway has nothing left to do (some
/// parts did not come), or `drain_secs` passed; the seconds waited after the posting, and
/// whether all came.
async fn wait_for_done(
    shared: &Shared,
    gateway: &mut Gateway,
    db: &BenchDb,
    accepted: u64,
    drain_secs: u64,
) -> anyhow::Result<(f64, bool)> {
    let started = Instant::now();
    let limit = Duration::from_secs(drain_secs);
    let (mut seen, mut moved) = (shared.done(), Instant::now());
    while shared.done() < accepted && started.elapsed() < limit {
        gateway.ensure_running()?;
        tokio::time::sleep(Duration::from_millis(20)).await;
        if shared.done() > seen {
            (seen, moved) = (shared.done(), Instant::now());
        } else if moved.elapsed() >= STALL_CHECK {
            if work_left(db).await? == 0 {
                break;
            }
            moved = Instant::now();
        }
    }
    Ok((started.elapsed().as_secs_f64(), shared.done() >= accepted))
}

/// Jobs queued and parts not settled (a job ends when its parts are sent, failed or unknown).
async fn work_left(db: &BenchDb) -> anyhow::Result<i64> {
    let mut owner = PgConnection::connect(&db.url).await?;
    let left: i64 = sqlx::query_scalar(
        "select (select count(*) from dispatch_queue)
              + (select count(*) from channel_replies where status in ('pending', 'sending'))",
    )
    .fetch_one(&mut owner)
    .await
    .context("Failed to count the work left")?;
    owner.close().await?;
    Ok(left)
}

/// What the database holds of the turns and their file parts.
#[derive(Default, Serialize)]
struct Records {
    file_parts: i64,
    sent: i64,
    /// Sent, failed or unknown (in doubt and, Telegram at most once, never resent).
    settled: i64,
    /// File parts by status.
    statuses: String,
    /// One `last_error` of a file part not sent.
    error: Option<String>,
    /// Turns by status.
    turns: String,
}

/// Read as the owner once the stand-in has them all; the gateway records each part's
/// outcome a moment after the platform answered, so this waits for it a little.
async fn check_records(db: &BenchDb, expected: u64, files: bool) -> anyhow::Result<Records> {
    let mut owner = PgConnection::connect(&db.url).await?;
    let started = Instant::now();
    loop {
        let records = read_records(&mut owner).await?;
        let settled = !files || records.settled as u64 >= expected;
        if settled || started.elapsed() >= RECORDS_LIMIT {
            owner.close().await?;
            return Ok(records);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn read_records(owner: &mut PgConnection) -> anyhow::Result<Records> {
    let error: Option<String> = sqlx::query_scalar(
        "select min(last_error) from channel_replies where attachment is not null and status <> 'sent'",
    )
    .fetch_one(&mut *owner)
    .await
    .context("Failed to read the file parts")?;
    let parts = by_status(owner, "channel_replies where attachment is not null").await?;
    let count = |wanted: &[&str]| {
        parts
            .iter()
            .filter(|(s, _)| wanted.contains(&s.as_str()))
            .map(|(_, n)| n)
            .sum::<i64>()
    };
    Ok(Records {
        file_parts: parts.iter().map(|(_, n)| n).sum(),
        sent: count(&["sent"]),
        settled: count(&["sent", "failed", "unknown"]),
        statuses: joined(&parts),
        error,
        turns: joined(&by_status(owner, "channel_messages").await?),
    })
}

/// `(status, rows)` of `from` (a table and its condition).
async fn by_status(owner: &mut PgConnection, from: &str) -> anyhow::Result<Vec<(String, i64)>> {
    let sql = format!("select status::text, count(*) from {from} group by 1 order by 1");
    Ok(sqlx::query_as(&sql).fetch_all(&mut *owner).await?)
}

fn joined(counts: &[(String, i64)]) -> String {
    let parts: Vec<String> = counts.iter().map(|(s, n)| format!("{s} {n}")).collect();
    parts.join(", ")
}

// ---------------------------------------------------------------------------------------
// Memory and CPU, from /proc

/// One look at the gateway and the stand-ins: micros since `Shared::started` + 1.
struct Sample {
    at: u64,
    rss_kb: u64,
    uploads: u64,
    downloads: u64,
}

/// The gateway's VmRSS and the stand-ins' requests in flight every `every_ms`.
struct Sampler {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Vec<Sample>>,
}

impl Sampler {
    fn start(pid: u32, shared: Arc<Shared>, every_ms: u64) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let task = tokio::spawn(async move {
            let mut samples = Vec::new();
            let mut tick = tokio::time::interval(Duration::from_millis(every_ms.max(1)));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            while !stopped.load(Relaxed) {
                tick.tick().await;
                let Some(rss_kb) = vm_rss_kb(pid) else { continue };
                samples.push(Sample {
                    at: shared.now(),
                    rss_kb,
                    uploads: shared.uploads.now.load(Relaxed),
                    downloads: shared.downloads.now.load(Relaxed),
                });
            }
            samples
        });
        Self { stop, task }
    }

    async fn finish(self) -> Vec<Sample> {
        self.stop.store(true, Relaxed);
        self.task.await.unwrap_or_default()
    }
}

#[derive(Serialize)]
struct Memory {
    /// Ready, before the first webhook.
    idle_mb: f64,
    /// Over the uploading window (first upload started → last file received; without files,
    /// first text → last).
    max_mb: f64,
    mean_mb: f64,
    /// Once the last file was received.
    after_mb: f64,
    samples: usize,
    uploads_in_flight_max: u64,
    /// Over the samples of the uploading window.
    uploads_in_flight_mean: f64,
    downloads_in_flight_max: u64,
    downloads_in_flight_mean: f64,
    /// (max − idle) ÷ uploads in flight at most, in KiB: an upper bound of what one file in
    /// flight holds (it also holds the turns' own growth).
    above_idle_per_upload_kib: Option<f64>,
}

impl Memory {
    fn of(samples: &[Sample], shared: &Shared, idle_kb: u64, after_kb: u64) -> Self {
        let from = match shared.first_upload.load(Relaxed) {
            0 => shared.first_done.load(Relaxed),
            first => first,
        };
        let to = shared.last_done.load(Relaxed);
        let window: Vec<&Sample> = samples.iter().filter(|s| s.at >= from && s.at <= to).collect();
        let n = window.len().max(1) as f64;
        let max_kb = window.iter().map(|s| s.rss_kb).max().unwrap_or(0);
        let uploads_max = shared.uploads.max.load(Relaxed);
        let mb = |kb: u64| kb as f64 / 1024.0;
        Self {
            idle_mb: mb(idle_kb),
            max_mb: mb(max_kb),
            mean_mb: window.iter().map(|s| s.rss_kb as f64).sum::<f64>() / n / 1024.0,
            after_mb: mb(after_kb),
            samples: window.len(),
            uploads_in_flight_max: uploads_max,
            uploads_in_flight_mean: window.iter().map(|s| s.uploads as f64).sum::<f64>() / n,
            downloads_in_flight_max: shared.downloads.max.load(Relaxed),
            downloads_in_flight_mean: window.iter().map(|s| s.downloads as f64).sum::<f64>() / n,
            above_idle_per_upload_kib: (uploads_max > 0)
                .then(|| max_kb.saturating_sub(idle_kb) as f64 / uploads_max as f64),
        }
    }
}

#[derive(Serialize)]
struct CpuFigures {
    window_secs: f64,
    postgres_ms_per_file: f64,
    /// The part of it spent in the bench database's backends (a backend that exited during
    /// the run is missing).
    backends_ms_per_file: f64,
    gateway_ms_per_file: f64,
    bench_ms_per_file: f64,
    machine_busy_pct: f64,
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
        postgres_ms_per_file: postgres,
        backends_ms_per_file: backends,
        gateway_ms_per_file: gateway,
        bench_ms_per_file: bench,
        machine_busy_pct: spent.machine_busy_pct,
        other_cores: spent.other_cores(window),
    })
}

// ---------------------------------------------------------------------------------------
// Figures

#[derive(Serialize)]
struct Percentiles {
    count: usize,
    p50_ms: f64,
    p99_ms: f64,
    max_ms: f64,
}

fn percentiles(mut micros: Vec<u64>) -> Percentiles {
    micros.sort_unstable();
    let at = |q: f64| {
        let i = ((micros.len() as f64 * q).ceil() as usize).saturating_sub(1);
        micros.get(i).copied().unwrap_or(0) as f64 / 1000.0
    };
    Percentiles {
        count: micros.len(),
        p50_ms: at(0.50),
        p99_ms: at(0.99),
        max_ms: micros.last().copied().unwrap_or(0) as f64 / 1000.0,
    }
}

#[derive(Serialize)]
struct Run {
    file_bytes: u64,
    posting: Posting,
    /// Seconds from the end of the posting to the last file, and whether every file came.
    drain_secs: f64,
    all_done: bool,
    files: u64,
    /// Over first file received → last (the uploading window).
    files_per_sec: f64,
    uploading_secs: f64,
    /// Over the first post → the last file received: what a throttled platform allows.
    overall_files_per_sec: f64,
    overall_secs: f64,
    /// File bytes received over the first upload's start → the last file received.
    mib_per_sec: f64,
    bytes_received: u64,
    bytes_expected: u64,
    corrupted: u64,
    repeated: u64,
    texts: u64,
    documents: u64,
    agent_calls: u64,
    /// Other Telegram methods: the typing indicator's `sendChatAction`.
    other_calls: u64,
    /// File GETs, those broken off on purpose, and uploads the stand-in could not read whole.
    gets: u64,
    cuts: u64,
    upload_errors: u64,
    upload_error: Option<String>,
    /// Webhook sent → its turn's file received (without files: its text).
    webhook_to_done: Percentiles,
    memory: Memory,
    cpu: Option<CpuFigures>,
    records: Records,
    log: LogSummary,
}

impl Run {
    #[allow(clippy::too_many_arguments)] // the parts of one run, each measured apart
    fn new(
        args: &Args,
        shared: &Shared,
        posting: Posting,
        (drain_secs, all_done): (f64, bool),
        memory: Memory,
        cpu: Option<CpuFigures>,
        records: Records,
        log: &Path,
    ) -> Self {
        let (first, last) = (shared.first_done.load(Relaxed), shared.last_done.load(Relaxed));
        let uploading_secs = last.saturating_sub(first) as f64 / 1e6;
        let overall_secs = last.saturating_sub(posting.started_at) as f64 / 1e6;
        let upload_secs = last.saturating_sub(shared.first_upload.load(Relaxed)) as f64 / 1e6;
        let bytes = shared.bytes.load(Relaxed);
        let latencies = shared.sent_at.iter().zip(&shared.done_at).filter_map(|(a, b)| {
            let (a, b) = (a.load(Relaxed), b.load(Relaxed));
            (a > 0 && b >= a).then(|| b - a)
        });
        let files = shared.done();
        Self {
            file_bytes: shared.file.len() as u64,
            bytes_expected: posting.ok * shared.file.len() as u64,
            posting,
            drain_secs,
            all_done,
            files,
            files_per_sec: files as f64 / uploading_secs.max(1e-9),
            uploading_secs,
            overall_files_per_sec: files as f64 / overall_secs.max(1e-9),
            overall_secs,
            mib_per_sec: bytes as f64 / 1048576.0 / upload_secs.max(1e-9),
            bytes_received: bytes,
            corrupted: shared.corrupted.load(Relaxed),
            repeated: shared.repeated.load(Relaxed),
            texts: shared.texts.load(Relaxed),
            documents: shared.files.load(Relaxed),
            agent_calls: shared.agent_calls.load(Relaxed),
            other_calls: shared.other_calls.load(Relaxed),
            gets: shared.gets.load(Relaxed),
            cuts: shared.cuts.load(Relaxed),
            upload_errors: shared.upload_errors.load(Relaxed),
            upload_error: shared
                .upload_error
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
            webhook_to_done: percentiles(latencies.collect()),
            memory,
            cpu,
            records,
            log: scan_log(log),
        }
        .checked(args)
    }

    /// Warns on stderr about anything that did not add up.
    fn checked(self, args: &Args) -> Self {
        let files_on = self.file_bytes > 0;
        if self.posting.ok != args.turns || !self.all_done {
            eprintln!(
                "WARNING: {} of {} turns accepted, all done: {}",
                self.posting.ok, args.turns, self.all_done
            );
        }
        if files_on && (self.bytes_received != self.bytes_expected || self.corrupted > 0) {
            eprintln!(
                "WARNING: bytes received {} ≠ expected {}",
                self.bytes_received, self.bytes_expected
            );
        }
        if files_on && self.records.sent as u64 != self.posting.ok {
            eprintln!(
                "WARNING: {} file parts sent of {}",
                self.records.sent, self.posting.ok
            );
        }
        self
    }

    fn print(&self) {
        let mib = self.file_bytes as f64 / 1048576.0;
        println!(
            "== {} turns, files of {} bytes ({mib:.3} MiB) ==",
            self.posting.ok, self.file_bytes
        );
        let failure = self
            .posting
            .first_failure
            .as_deref()
            .map(|f| format!(": first {f}"));
        println!(
            "webhooks: {} accepted, {} failed{} in {:.2} s; all parts received: {} ({:.2} s after the posting)",
            self.posting.ok,
            self.posting.failed,
            failure.unwrap_or_default(),
            self.posting.secs,
            if self.all_done { "yes" } else { "NO" },
            self.drain_secs
        );
        let what = if self.file_bytes > 0 {
            "files"
        } else {
            "texts (no files)"
        };
        println!(
            "{what}: {} in {:.2} s (first → last received) = {:.1}/s sustained; {:.1}/s over first post → \
             last ({:.2} s); {:.1} MiB/s of file bytes (first upload → last)",
            self.files,
            self.uploading_secs,
            self.files_per_sec,
            self.overall_files_per_sec,
            self.overall_secs,
            self.mib_per_sec
        );
        println!(
            "webhook→{what} received p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
            self.webhook_to_done.p50_ms, self.webhook_to_done.p99_ms, self.webhook_to_done.max_ms
        );
        self.print_checks();
        self.print_memory();
        self.print_cpu();
    }

    fn print_checks(&self) {
        println!(
            "bytes received {} = turns × file bytes {}: {}; corrupted {}, repeated {}",
            self.bytes_received,
            self.bytes_expected,
            if self.bytes_received == self.bytes_expected {
                "yes"
            } else {
                "NO"
            },
            self.corrupted,
            self.repeated
        );
        println!(
            "stand-ins: agent calls {}, sendMessage {}, sendDocument {}, other methods (typing) {}",
            self.agent_calls, self.texts, self.documents, self.other_calls
        );
        let why = self.upload_error.as_deref().map(|e| format!(" (first: {e})"));
        println!(
            "file GETs {} ({} broken off on purpose); uploads not read whole {}{}",
            self.gets,
            self.cuts,
            self.upload_errors,
            why.unwrap_or_default()
        );
        let records = &self.records;
        println!(
            "recorded: {} file parts ({}{}); turns: {}",
            records.file_parts,
            records.statuses,
            records
                .error
                .as_deref()
                .map(|e| format!("; not sent: {e}"))
                .unwrap_or_default(),
            records.turns
        );
        let log = &self.log;
        let first = log
            .first
            .as_deref()
            .map(|f| format!("; first: {f}"))
            .unwrap_or_default();
        println!(
            "serve log: {} warnings, {} errors ({}){first}",
            log.warnings, log.errors, log.path
        );
    }

    fn print_memory(&self) {
        let m = &self.memory;
        println!(
            "gateway RSS: idle {:.1} MB; uploading max {:.1} MB, mean {:.1} MB ({} samples); after {:.1} MB",
            m.idle_mb, m.max_mb, m.mean_mb, m.samples, m.after_mb
        );
        let per = m
            .above_idle_per_upload_kib
            .map(|k| format!("{k:.0} KiB"))
            .unwrap_or_else(|| "-".into());
        println!(
            "in flight at the stand-ins: uploads max {}, mean {:.1}; file GETs max {}, mean {:.1}; \
             RSS above idle per upload in flight (upper bound) {per}",
            m.uploads_in_flight_max,
            m.uploads_in_flight_mean,
            m.downloads_in_flight_max,
            m.downloads_in_flight_mean
        );
    }

    fn print_cpu(&self) {
        let Some(cpu) = &self.cpu else {
            println!("CPU: not measured (no /proc)");
            return;
        };
        println!(
            "CPU per turn (each one file, if any) over {:.2} s: PostgreSQL {:.3} ms (bench database's backends \
             {:.3} ms), gateway {:.3} ms, bench process {:.3} ms; machine {:.0} % busy, other work {:.2} cores",
            cpu.window_secs,
            cpu.postgres_ms_per_file,
            cpu.backends_ms_per_file,
            cpu.gateway_ms_per_file,
            cpu.bench_ms_per_file,
            cpu.machine_busy_pct,
            cpu.other_cores
        );
    }
}

fn print_comparison(runs: &[Run]) {
    println!("== by file size ==");
    println!(
        "file bytes | files/s (first → last file) | overall | MiB/s | uploads in flight max/mean \
         | RSS idle/mean/max MB | gateway ms | PostgreSQL ms (bench db backends)"
    );
    for run in runs {
        let m = &run.memory;
        let (gateway, postgres, backends) = run.cpu.as_ref().map_or((0.0, 0.0, 0.0), |c| {
            (
                c.gateway_ms_per_file,
                c.postgres_ms_per_file,
                c.backends_ms_per_file,
            )
        });
        println!(
            "{} | {:.1} | {:.1} | {:.1} | {} / {:.1} | {:.1} / {:.1} / {:.1} | {gateway:.3} | {postgres:.3} \
             ({backends:.3})",
            run.file_bytes,
            run.files_per_sec,
            run.overall_files_per_sec,
            run.mib_per_sec,
            m.uploads_in_flight_max,
            m.uploads_in_flight_mean,
            m.idle_mb,
            m.mean_mb,
            m.max_mb
        );
    }
}
