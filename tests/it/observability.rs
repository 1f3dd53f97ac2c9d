//! Observability as an operator meets it: the `/metrics` exposition parsed as Prometheus
//! would, the metrics listener of a worker-only instance, `channel-bridge healthcheck`'s
//! exit codes, and the log lines of an accepted webhook and a delivered turn (captured in
//! the production JSON format).

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::sync::{Arc, Mutex};

use channel_bridge::dispatch::StepOutcome;
use channel_bridge::domain::Platform;
use channel_bridge::settings::LogFormat;
use channel_bridge::startup::Application;
use serde_json::Value;
use tokio::sync::Semaphore;

use crate::support::fake_agent::{FakeAgent, Reply};
use crate::support::fake_platforms::FakePlatforms;
use crate::support::platforms::*;
use crate::support::{eventually, spawn_app, spawn_app_on, worker, Pipeline, TestDb};

// ---------------------------------------------------------------------------------------
// The exposition

/// One metric family of a Prometheus text exposition.
#[derive(Debug, Default)]
struct Family {
    help: Option<String>,
    kind: Option<String>,
    /// (sample name, labels, value)
    samples: Vec<(String, BTreeMap<String, String>, f64)>,
}

/// Parses the text format (version 0.0.4) into families keyed by name; a histogram's
/// `_bucket`, `_sum` and `_count` samples go to their family.
fn parse_exposition(text: &str) -> BTreeMap<String, Family> {
    let mut families: BTreeMap<String, Family> = BTreeMap::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            families.entry(name.into()).or_default().help = Some(help.into());
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("TYPE names a kind");
            families.entry(name.into()).or_default().kind = Some(kind.into());
        } else {
            assert!(!line.starts_with('#'), "unexpected comment: {line}");
            let (name, labels, value) = parse_sample(line);
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .filter_map(|suffix| name.strip_suffix(suffix))
                .find(|base| families.get(*base).and_then(|f| f.kind.as_deref()) == Some("histogram"))
                .unwrap_or(&name)
                .to_owned();
            families
                .entry(family)
                .or_default()
                .samples
                .push((name, labels, value));
        }
    }
    families
}

fn parse_sample(line: &str) -> (String, BTreeMap<String, String>, f64) {
    let (series, value) = line.rsplit_once(' ').expect("a sample has a value");
    let value: f64 = match value {
        "+Inf" => f64::INFINITY,
        other => other.parse().unwrap_or_else(|_| panic!("sample value: {line}")),
    };
    let Some((name, labels)) = series.split_once('{') else {
        return (series.into(), BTreeMap::new(), value);
    };
    let labels = labels.strip_suffix('}').expect("labels close");
    let mut parsed = BTreeMap::new();
    // Label values in this test's exposition hold no commas or quotes.
    for pair in labels.split(',').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').expect("label is key=value");
        parsed.insert(key.into(), value.trim_matches('"').into());
    }
    (name.into(), parsed, value)
}

async fn scrape(client: &reqwest::Client, url: &str) -> BTreeMap<String, Family> {
    let response = client.get(url).send().await.unwrap();
    assert_eq!(response.status(), 200);
    parse_exposition(&response.text().await.unwrap())
}

/// The pipeline after one webhook through the router (HTTP, ingress batch, webhook
/// metrics) and its turn through the worker (claim batch, agent, reply, turn writer batch);
/// then its `/metrics`.
async fn scraped_after_one_turn() -> (Pipeline, BTreeMap<String, Family>) {
    let p = Pipeline::start().await;
    p.deliver(Platform::Telegram, telegram_text(7001, "hello")).await;
    assert!(matches!(p.worker.step().await.unwrap(), StepOutcome::Executed(_)));
    let families = scrape(&p.app.client, &p.app.url("/metrics")).await;
    (p, families)
}

#[tokio::test]
async fn every_metric_family_has_help_and_type_the_prefix_and_its_unit() {
    let (_p, families) = scraped_after_one_turn().await;
    let known: BTreeSet<&str> = channel_bridge::telemetry::METRICS
        .iter()
        .map(|m| m.name)
        .collect();
    for (name, family) in &families {
        assert!(name.starts_with("channel_bridge_"), "{name} lacks the prefix");
        assert!(
            known.contains(name.as_str()),
            "{name} is not in telemetry::METRICS"
        );
        assert!(
            family.help.as_deref().is_some_and(|h| !h.is_empty()),
            "{name} has no HELP"
        );
        let kind = family
            .kind
            .as_deref()
            .unwrap_or_else(|| panic!("{name} has no TYPE"));
        match kind {
            "counter" => assert!(name.ends_with("_total"), "counter {name} does not end in _total"),
            "gauge" => assert!(!name.ends_with("_total"), "gauge {name} ends in _total"),
            "histogram" => assert!(
                name.ends_with("_seconds") || name.ends_with("_size"),
                "histogram {name} is neither a duration in seconds nor a size"
            ),
            other => panic!("{name} is a {other}: a histogram without buckets renders as a summary"),
        }
        // By words: `agent` and `messages` are no ages.
        let words: Vec<&str> = name.split('_').collect();
        if ["duration", "latency", "age"].iter().any(|w| words.contains(w)) {
            assert!(name.ends_with("_seconds"), "{name} is a time not in seconds");
        }
    }

    for expected in [
        "channel_bridge_build_info",
        "channel_bridge_http_requests_total",
        "channel_bridge_http_request_duration_seconds",
        "channel_bridge_webhook_events_total",
        "channel_bridge_batch_size",
        "channel_bridge_dispatch_claim_batch_size",
        "channel_bridge_dispatch_agent_seconds",
        "channel_bridge_replies_sent_total",
        "channel_bridge_db_pool_connections",
        "channel_bridge_db_pool_idle_connections",
        "channel_bridge_db_pool_max_connections",
    ] {
        assert!(families.contains_key(expected), "{expected} is not exposed");
    }
}

#[tokio::test]
async fn batch_sizes_are_counts_and_durations_get_time_buckets() {
    let (_p, families) = scraped_after_one_turn().await;

    // Batch sizes are counted in items: whole-number bounds, and a batch of one lands in
    // the `le="1"` bucket instead of `+Inf` (time buckets would put every batch there).
    for name in [
        "channel_bridge_batch_size",
        "channel_bridge_dispatch_claim_batch_size",
    ] {
        let buckets: Vec<(f64, f64)> = families[name]
            .samples
            .iter()
            .filter(|(sample, ..)| sample.ends_with("_bucket"))
            .map(|(_, labels, count)| (labels["le"].parse::<f64>().unwrap_or(f64::INFINITY), *count))
            .collect();
        assert!(!buckets.is_empty(), "{name} has buckets");
        for (bound, _) in buckets.iter().filter(|(b, _)| b.is_finite()) {
            assert!(
                bound.fract() == 0.0 && *bound >= 1.0,
                "{name}: bound {bound} is not a count"
            );
        }
        let ones = buckets
            .iter()
            .filter(|(b, _)| *b == 1.0)
            .map(|(_, c)| *c)
            .sum::<f64>();
        assert!(
            ones >= 1.0,
            "{name}: a batch of one is in the le=1 bucket: {buckets:?}"
        );
    }
    // Durations get time buckets (sub-second bounds).
    let http = &families["channel_bridge_http_request_duration_seconds"];
    assert!(http
        .samples
        .iter()
        .any(|(_, labels, _)| labels.get("le").is_some_and(|le| le == "0.005")));
}

#[tokio::test]
async fn requests_are_counted_by_route_template_and_status_class_beside_build_and_pool_facts() {
    let (p, families) = scraped_after_one_turn().await;

    // Requests by route template (never the raw path, which holds ids) and status class.
    let hook_route = "/v1/hooks/{tenant_id}/{connector_id}";
    let requests = &families["channel_bridge_http_requests_total"].samples;
    assert!(requests.iter().any(|(_, labels, value)| {
        labels["route"] == hook_route
            && labels["method"] == "POST"
            && labels["status_class"] == "2xx"
            && *value >= 1.0
    }));
    assert!(!requests
        .iter()
        .any(|(_, labels, _)| labels["route"].contains(&p.tenant.tenant.to_string())));

    let build = &families["channel_bridge_build_info"].samples[0];
    assert_eq!(build.1["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(build.2, 1.0);
    let max = &families["channel_bridge_db_pool_max_connections"].samples[0];
    assert_eq!(max.2, 16.0, "CB_DB_POOL_SIZE's default");
}

#[tokio::test]
async fn an_unknown_path_is_counted_under_one_unmatched_route() {
    let app = spawn_app().await;
    let path = format!("/scanner/{}", uuid::Uuid::new_v4());
    let response = app.client.get(app.url(&path)).send().await.unwrap();
    assert_eq!(response.status(), 404);

    let families = scrape(&app.client, &app.url("/metrics")).await;
    let requests = &families["channel_bridge_http_requests_total"].samples;
    assert!(requests
        .iter()
        .any(|(_, labels, _)| labels["route"] == "unmatched" && labels["status_class"] == "4xx"));
    assert!(!requests
        .iter()
        .any(|(_, labels, _)| labels["route"].contains("scanner")));
}

// ---------------------------------------------------------------------------------------
// The metrics listener

#[tokio::test]
async fn a_worker_only_instance_serves_metrics_and_probes_on_its_metrics_listener() {
    let web = spawn_app().await;
    let platforms = FakePlatforms::start().await;
    let tenant = provision_tenant_at(&web.pool, "acme", Some(&platforms.base_url)).await;
    let gate = Arc::new(Semaphore::new(0));
    let agent = FakeAgent::start_gated(&tenant.dispatch_secret, gate.clone()).await;
    // Queued before the worker starts, and held by the agent: its queue stays non-empty.
    deliver(&web, &tenant, Platform::Telegram, telegram_text(7101, "hello")).await;

    let mut settings = web.db.serve_settings();
    settings.http = false;
    settings.worker = true;
    settings.metrics_bind = Some("127.0.0.1:0".parse().unwrap());
    settings.agent_url = Some(agent.url.clone());
    let worker = Application::build(settings).await.unwrap();
    assert_eq!(worker.local_addr(), None, "no main listener");
    let metrics_addr = worker.metrics_addr().expect("the metrics listener is bound");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(worker.run_until(async {
        let _ = stopped.await;
    }));

    let client = reqwest::Client::new();
    let url = |path: &str| format!("http://{metrics_addr}{path}");
    assert_eq!(client.get(url("/healthz")).send().await.unwrap().status(), 200);
    assert_eq!(client.get(url("/readyz")).send().await.unwrap().status(), 200);
    // This instance's queue report names our tenant (the only one with a queued job).
    let tenant_series = format!(
        "channel_bridge_dispatch_tenant_queue_depth{{tenant=\"{}\"}} 1",
        tenant.tenant
    );
    agent.wait_for_calls(1).await;
    eventually("the worker publishes the tenant's queue depth", || async {
        let text = client
            .get(url("/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        text.contains(&tenant_series)
    })
    .await;
    let families = scrape(&client, &url("/metrics")).await;
    for name in [
        "channel_bridge_dispatch_in_flight",
        "channel_bridge_dispatch_queue_depth",
        "channel_bridge_dispatch_attempts_total",
        "channel_bridge_dispatch_claim_batch_size",
    ] {
        assert!(families.contains_key(name), "{name} is served");
    }
    assert_eq!(
        client.get(url("/v1/openapi.json")).send().await.unwrap().status(),
        404,
        "only metrics and probes are served there"
    );

    gate.add_permits(1);
    let _ = stop.send(());
    running.await.unwrap().unwrap();
}

// ---------------------------------------------------------------------------------------
// `channel-bridge healthcheck`

/// Runs `channel-bridge healthcheck --url <url>` off the runtime's thread (the app under
/// probe runs on it); (exit code, stderr).
async fn healthcheck(url: String) -> (Option<i32>, String) {
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_channel-bridge"))
            .args(["healthcheck", "--url", &url, "--timeout-secs", "1"])
            .env_remove("CB_HEALTHCHECK_URL")
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test]
async fn healthcheck_exits_0_when_readyz_answers_200_and_1_when_it_does_not() {
    let ready = spawn_app().await;
    let (code, stderr) = healthcheck(ready.url("")).await;
    assert_eq!(code, Some(0), "{stderr}");

    // A database without the schema: /readyz answers 503.
    let unmigrated = spawn_app_on(&Arc::new(TestDb::empty().await), |_| {}).await;
    let (code, stderr) = healthcheck(unmigrated.url("/readyz")).await;
    assert_eq!(code, Some(1));
    assert!(stderr.contains("503"), "{stderr}");

    // A listener that never answers: the probe gives up after its timeout.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (code, stderr) = healthcheck(format!("http://{}/readyz", silent.local_addr().unwrap())).await;
    assert_eq!(code, Some(1));
    assert!(stderr.contains("did not answer"), "{stderr}");
}

// ---------------------------------------------------------------------------------------
// Logs

/// A log sink for one test: the production subscriber (JSON) writing into memory.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
    type Writer = Captured;

    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

/// The process-wide subscriber while tests capture logs: it wants nothing, but answers
/// "sometimes" for every call site. tracing caches per call site whether any subscriber
/// may want its events; with no global subscriber, a call site first reached on another
/// test's thread while the first capturing subscriber is being registered can be cached
/// as "never" (tracing-core's single-dispatcher fast path), and its events would then be
/// lost to every capture. With this one installed a call site is at least "sometimes",
/// and each event asks the thread's current subscriber.
struct AskEachTime;

impl tracing::Subscriber for AskEachTime {
    fn register_callsite(&self, _: &tracing::Metadata<'_>) -> tracing::subscriber::Interest {
        tracing::subscriber::Interest::sometimes()
    }

    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        false
    }

    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }

    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}

    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}

    fn event(&self, _: &tracing::Event<'_>) {}

    fn enter(&self, _: &tracing::span::Id) {}

    fn exit(&self, _: &tracing::span::Id) {}
}

impl Captured {
    /// Starts capturing this thread's events (the test's runtime, hence the app it spawns)
    /// at `filter`, until the guard is dropped.
    fn start(filter: &str) -> (Self, tracing::subscriber::DefaultGuard) {
        static GLOBAL: std::sync::Once = std::sync::Once::new();
        GLOBAL.call_once(|| {
            let _ = tracing::subscriber::set_global_default(AskEachTime);
        });
        let sink = Self::default();
        let subscriber = channel_bridge::telemetry::subscriber(
            LogFormat::Json,
            tracing_subscriber::EnvFilter::new(filter),
            sink.clone(),
            false,
        );
        (sink, tracing::subscriber::set_default(subscriber))
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }

    fn lines(&self) -> Vec<Value> {
        self.text()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap_or_else(|_| panic!("JSON log line: {line}")))
            .collect()
    }

    fn with_message(&self, message: &str) -> Vec<Value> {
        self.lines()
            .into_iter()
            .filter(|line| line["message"] == message)
            .collect()
    }
}

#[tokio::test]
async fn an_accepted_webhook_and_its_delivered_turn_log_one_info_line_each_with_ids_and_never_the_text() {
    let (logs, _guard) = Captured::start("info");
    let app = spawn_app().await;
    let platforms = FakePlatforms::start().await;
    let tenant = provision_tenant_at(&app.pool, "acme", Some(&platforms.base_url)).await;
    let agent = FakeAgent::start(&tenant.dispatch_secret).await;
    let worker = worker(&app, &agent.url, |_| {});
    let secret_text = "the vault code is pineapple-4417";

    let body = telegram_text(7201, secret_text);
    let response = post(
        &app,
        &tenant.hook_path(Platform::Telegram),
        &signed_headers(Platform::Telegram, &body),
        body,
    )
    .await;
    assert_eq!(response.status(), 200);
    let request_id = response.headers()["x-request-id"].to_str().unwrap().to_owned();

    let accepted = logs.with_message("webhook accepted");
    assert_eq!(accepted.len(), 1, "{}", logs.text());
    let line = &accepted[0];
    assert_eq!(line["level"], "INFO");
    assert!(line["latency_ms"].is_u64(), "{line}");
    assert_eq!(line["queued"], 1);
    assert_eq!(line["span"]["tenant_id"], tenant.tenant.to_string());
    assert_eq!(line["span"]["connector_id"], tenant.telegram.to_string());
    assert_eq!(line["span"]["platform"], "telegram");
    assert_eq!(line["span"]["request_id"], request_id);
    assert_eq!(line["span"]["route"], "/v1/hooks/{tenant_id}/{connector_id}");

    // The turn: the agent's answer quotes the text; neither may reach the logs.
    let StepOutcome::Executed(message_id) = worker.step().await.unwrap() else {
        panic!("the agent answered");
    };
    assert_eq!(line["message_ids"], message_id.to_string());
    assert_eq!(platforms.sent().len(), 1, "the reply was posted");
    let delivered = logs.with_message("turn delivered");
    assert_eq!(delivered.len(), 1, "{}", logs.text());
    let line = &delivered[0];
    assert_eq!(line["level"], "INFO");
    assert_eq!(line["platform"], "telegram");
    assert_eq!(line["parts"], 1);
    assert!(
        line["latency_ms"].is_i64() || line["latency_ms"].is_u64(),
        "{line}"
    );
    assert_eq!(line["span"]["message_id"], message_id.to_string());
    assert_eq!(line["span"]["tenant_id"], tenant.tenant.to_string());
    // The webhook's request id follows the turn into the worker's logs.
    assert_eq!(line["span"]["request_id"], request_id);

    assert!(!logs.text().contains("pineapple"), "{}", logs.text());
}

#[tokio::test]
async fn an_agent_retry_is_logged_at_debug_not_info() {
    let (logs, _guard) = Captured::start("info");
    let app = spawn_app().await;
    let tenant = provision_tenant(&app.pool, "acme").await;
    let agent = FakeAgent::start(&tenant.dispatch_secret).await;
    agent.script([Reply::Json(503, serde_json::json!({}), None)]);
    let worker = worker(&app, &agent.url, |_| {});
    deliver(&app, &tenant, Platform::Telegram, telegram_text(7301, "hi")).await;

    assert!(matches!(worker.step().await.unwrap(), StepOutcome::Retrying(_)));
    assert!(
        logs.with_message("agent call failed; will retry").is_empty(),
        "{}",
        logs.text()
    );
}

#[tokio::test]
async fn a_failing_readyz_warns_once_not_at_every_probe_never_errors_and_says_when_it_recovers() {
    let (logs, _guard) = Captured::start("info");
    let db = Arc::new(TestDb::empty().await);
    let app = spawn_app_on(&db, |_| {}).await;
    for _ in 0..3 {
        let response = app.client.get(app.url("/readyz")).send().await.unwrap();
        assert_eq!(response.status(), 503);
    }
    channel_bridge::db::migrate(&db.settings()).await.unwrap();
    let response = app.client.get(app.url("/readyz")).send().await.unwrap();
    assert_eq!(response.status(), 200);

    let lines = logs.lines();
    assert!(!lines.iter().any(|l| l["level"] == "ERROR"), "{}", logs.text());
    let warnings: Vec<&Value> = lines.iter().filter(|l| l["level"] == "WARN").collect();
    assert_eq!(warnings.len(), 1, "{}", logs.text());
    assert!(
        warnings[0]["reason"].as_str().unwrap().contains("migrate"),
        "{}",
        logs.text()
    );
    assert_eq!(logs.with_message("ready again: /readyz answers 200").len(), 1);
}
