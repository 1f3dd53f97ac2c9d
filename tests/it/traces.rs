//! OpenTelemetry traces (docs/operations.md#traces): one Telegram turn, end to end, is one
//! trace at an OTLP collector stand-in, webhook → dispatch → agent call and delivery →
//! platform send, and the agent receives the `traceparent` of its call; without an exporter
//! nothing is propagated; `serve` takes the standard variables and posts its last spans when
//! it stops.
//!
//! The exporting subscriber is this test's own (thread-local, on the test's single-threaded
//! runtime, which also runs the app), with a tracer provider of its own: tests running in
//! parallel in this process neither see its spans nor change it.

use std::process::{Command, Stdio};
use std::sync::Arc;

use channel_bridge::db::messages;
use channel_bridge::dispatch::StepOutcome;
use channel_bridge::domain::{MessageId, Platform};
use channel_bridge::secrets::Keyring;
use channel_bridge::settings::LogFormat;
use channel_bridge::telemetry::{self, traces};
use secrecy::ExposeSecret;

use crate::support::fake_agent::FakeAgent;
use crate::support::fake_platforms::FakePlatforms;
use crate::support::otlp_collector::{OtlpCollector, ReceivedSpan, KIND_CLIENT, KIND_CONSUMER, KIND_SERVER};
use crate::support::platforms::*;
use crate::support::serve::{listening_addr, KilledOnDrop};
use crate::support::{eventually, spawn_app, worker, Pipeline, TestDb};

/// The process-wide subscriber while tests install their own: it wants nothing but answers
/// "sometimes" for every call site, so that no call site is cached as "never" while a
/// test's subscriber is being registered on another thread (see `observability.rs`).
fn ask_each_time_globally() {
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
    static GLOBAL: std::sync::Once = std::sync::Once::new();
    GLOBAL.call_once(|| {
        let _ = tracing::subscriber::set_global_default(AskEachTime);
    });
}

/// The log lines a test's subscriber writes, in the production JSON format.
#[derive(Clone, Default)]
struct Logs(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Logs {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Logs {
    type Writer = Logs;

    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

impl Logs {
    fn lines(&self) -> Vec<serde_json::Value> {
        let text = String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned();
        text.lines()
            .map(|line| serde_json::from_str(line).unwrap_or_else(|_| panic!("JSON log line: {line}")))
            .collect()
    }
}

/// Exports what the batch processor holds (on a blocking thread: the collector answers on
/// this test's runtime) and returns every span the collector has.
async fn flushed(traces: &traces::Traces, collector: &OtlpCollector) -> Vec<ReceivedSpan> {
    let traces = traces.clone();
    tokio::task::spawn_blocking(move || traces.flush()).await.unwrap();
    collector.spans()
}

fn named<'a>(spans: &'a [ReceivedSpan], name: &str) -> &'a ReceivedSpan {
    let matching: Vec<&ReceivedSpan> = spans.iter().filter(|span| span.name == name).collect();
    assert_eq!(matching.len(), 1, "one span named {name:?} in {spans:#?}");
    matching[0]
}

const WEBHOOK: &str = "POST /v1/hooks/{tenant_id}/{connector_id}";
const SPANS_OF_A_TURN: [&str; 5] = [WEBHOOK, "dispatch", "agent call", "deliver", "send reply part"];

/// One Telegram turn answered under this test's exporting subscriber (JSON logs into
/// `logs`), with every span of it received by the collector.
/// (Fields drop in this order: the pipeline before the subscriber it logs to.)
struct TracedTurn {
    pipeline: Pipeline,
    message_id: MessageId,
    spans: Vec<ReceivedSpan>,
    _subscriber: tracing::subscriber::DefaultGuard,
    logs: Logs,
    traces: traces::Traces,
    _collector: OtlpCollector,
}

impl TracedTurn {
    async fn start() -> Self {
        ask_each_time_globally();
        let collector = OtlpCollector::start().await;
        let traces = traces::TraceExport::to(&collector.traces_url).start().unwrap();
        let logs = Logs::default();
        let subscriber = telemetry::subscriber_with(
            LogFormat::Json,
            tracing_subscriber::EnvFilter::new("info"),
            logs.clone(),
            false,
            Some(&traces),
        );
        let guard = tracing::subscriber::set_default(subscriber);

        let pipeline = Pipeline::start().await;
        let body = telegram_text(7401, "my locker code is tangerine-5520");
        pipeline.deliver(Platform::Telegram, body).await;
        let StepOutcome::Executed(message_id) = pipeline.worker.step().await.unwrap() else {
            panic!("the agent answered");
        };
        assert_eq!(pipeline.platforms.sent().len(), 1, "the reply was posted");

        eventually("the collector receives every span of the turn", || async {
            let spans = flushed(&traces, &collector).await;
            SPANS_OF_A_TURN
                .iter()
                .all(|name| spans.iter().any(|span| span.name == *name))
        })
        .await;
        let spans = collector.spans();
        Self {
            pipeline,
            message_id,
            spans,
            _subscriber: guard,
            logs,
            traces,
            _collector: collector,
        }
    }

    /// Stops the exporter off this runtime, rather than when the subscriber drops on it.
    async fn stop(&self) {
        let traces = self.traces.clone();
        tokio::task::spawn_blocking(move || traces.shutdown())
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn a_telegram_turn_is_one_trace_from_webhook_to_reply_and_the_agent_joins_it_by_traceparent() {
    let t = TracedTurn::start().await;
    let (spans, message_id) = (&t.spans, t.message_id);

    let webhook = named(spans, WEBHOOK);
    let dispatch = named(spans, "dispatch");
    let agent_call = named(spans, "agent call");
    let deliver_pass = named(spans, "deliver");
    let send = named(spans, "send reply part");
    // One trace, and each span the child of the step that led to it: the dispatch, in
    // another task after the queue, continues the webhook's span.
    for span in [dispatch, agent_call, deliver_pass, send] {
        assert_eq!(span.trace_id, webhook.trace_id, "{span:#?}");
    }
    assert_eq!(dispatch.parent_span_id, webhook.span_id);
    assert_eq!(agent_call.parent_span_id, dispatch.span_id);
    assert_eq!(deliver_pass.parent_span_id, dispatch.span_id);
    assert_eq!(send.parent_span_id, deliver_pass.span_id);
    assert_eq!(
        (webhook.kind, dispatch.kind, agent_call.kind, send.kind),
        (KIND_SERVER, KIND_CONSUMER, KIND_CLIENT, KIND_CLIENT)
    );
    assert_eq!(
        webhook.attributes["http.route"],
        "/v1/hooks/{tenant_id}/{connector_id}"
    );
    assert_eq!(webhook.attributes["http.response.status_code"], "200");
    assert_eq!(dispatch.attributes["message_id"], message_id.to_string());
    assert_eq!(send.attributes["platform"], "telegram");
    let named_by_env = ["OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES"]
        .iter()
        .any(|name| std::env::var_os(name).is_some());
    if !named_by_env {
        assert_eq!(webhook.service, traces::DEFAULT_SERVICE_NAME);
    }

    // The agent's spans join the trace as children of the call.
    let calls = t.pipeline.agent.calls();
    assert_eq!(calls.len(), 1);
    assert_eq!(
        calls[0].traceparent.as_deref(),
        Some(format!("00-{}-{}-01", webhook.trace_id, agent_call.span_id).as_str())
    );

    // The turn keeps the webhook's traceparent, which is what carried the trace across the queue.
    let mut tx = t.pipeline.app.tenant_tx(t.pipeline.tenant.tenant).await;
    let message = messages::get(&mut tx, message_id).await.unwrap().unwrap();
    assert_eq!(
        message.metadata["traceparent"],
        format!("00-{}-{}-01", webhook.trace_id, webhook.span_id)
    );

    // Neither the text nor the answer quoting it is in any span.
    for span in spans {
        let everything = format!("{:?} {}", span.attributes, span.rest);
        assert!(!everything.contains("tangerine"), "{span:#?}");
    }
    t.stop().await;
}

#[tokio::test]
async fn a_traced_turn_logs_as_without_traces_and_its_lines_lead_to_the_trace() {
    let t = TracedTurn::start().await;
    let message_id = t.message_id;
    let webhook = named(&t.spans, WEBHOOK);

    // The logs are as without traces: the spans made for traces only are not in them, and
    // the delivered turn's line has the job's span with its ids.
    let lines = t.logs.lines();
    let delivered: Vec<&serde_json::Value> = lines
        .iter()
        .filter(|line| line["message"] == "turn delivered")
        .collect();
    assert_eq!(delivered.len(), 1, "{lines:#?}");
    assert_eq!(delivered[0]["span"]["message_id"], message_id.to_string());
    // Each line of the turn's job and webhook leads to the trace.
    assert_eq!(delivered[0]["span"]["trace_id"], webhook.trace_id);
    let accepted: Vec<&serde_json::Value> = lines
        .iter()
        .filter(|line| line["message"] == "webhook accepted")
        .collect();
    assert_eq!(accepted.len(), 1, "{lines:#?}");
    assert_eq!(accepted[0]["span"]["trace_id"], webhook.trace_id);
    for line in &lines {
        let spans = line["spans"].as_array().cloned().unwrap_or_default();
        let names: Vec<&str> = spans.iter().filter_map(|span| span["name"].as_str()).collect();
        assert!(names.iter().all(|name| ["http", "job"].contains(name)), "{line}");
    }

    t.stop().await;
}

#[tokio::test]
async fn without_an_exporter_no_traceparent_is_stored_or_sent() {
    let app = spawn_app().await;
    let platforms = FakePlatforms::start().await;
    let tenant = provision_tenant_at(&app.pool, "acme", Some(&platforms.base_url)).await;
    let agent = FakeAgent::start(&tenant.dispatch_secret).await;
    let worker = worker(&app, &agent.url, |_| {});
    deliver(&app, &tenant, Platform::Telegram, telegram_text(7402, "hello")).await;
    let StepOutcome::Executed(message_id) = worker.step().await.unwrap() else {
        panic!("the agent answered");
    };

    assert_eq!(agent.calls()[0].traceparent, None);
    let mut tx = app.tenant_tx(tenant.tenant).await;
    let message = messages::get(&mut tx, message_id).await.unwrap().unwrap();
    assert_eq!(message.metadata.get("traceparent"), None, "{}", message.metadata);
}

/// `serve` as an operator runs it: traces on by the standard variables alone, and the
/// spans still buffered when SIGTERM arrives are posted before the process exits (the
/// batch delay is set past the test's length, so only that last flush can deliver them).
#[tokio::test]
async fn serve_exports_to_the_endpoint_its_environment_names_at_any_log_level_and_flushes_when_it_stops() {
    let db = TestDb::migrated().await;
    let key = Keyring::generate_entry("traces")
        .unwrap()
        .expose_secret()
        .to_owned();
    let keys = Keyring::parse(&key).unwrap();
    let collector = OtlpCollector::start().await;
    let platforms = FakePlatforms::start().await;
    let tenant = provision_tenant_sealed(&db.app_pool(), "acme", Some(&platforms.base_url), &keys).await;
    let agent = FakeAgent::start(&tenant.dispatch_secret).await;
    let child = Command::new(env!("CARGO_BIN_EXE_channel-bridge"))
        .args(["serve", "--bind", "127.0.0.1:0"])
        .env("DATABASE_URL", db.url())
        .env("CB_SECRETS_KEY", &key)
        .env("CB_AGENT_URL", &agent.url)
        .env("CB_EGRESS_ALLOW", "127.0.0.1")
        .env("CB_LOG_FORMAT", "json")
        // A production log level: the turn's spans are exported all the same;
        // the start-up line says where serve listens.
        .env("RUST_LOG", "warn,channel_bridge::cli=info")
        .env("CB_SHUTDOWN_GRACE_SECS", "5")
        .env(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            collector.traces_url.trim_end_matches("/v1/traces"),
        )
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .env_remove("OTEL_SDK_DISABLED")
        .env_remove("OTEL_TRACES_SAMPLER")
        .env("OTEL_SERVICE_NAME", "bridge-under-test")
        .env("OTEL_BSP_SCHEDULE_DELAY", "600000")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut serve = KilledOnDrop(Some(child));
    let addr = listening_addr(serve.child().stderr.take().unwrap()).await;

    let body = telegram_text(7403, "hello");
    let mut request = reqwest::Client::new()
        .post(format!("http://{addr}{}", tenant.hook_path(Platform::Telegram)))
        .body(body.clone());
    for (name, value) in signed_headers(Platform::Telegram, &body) {
        request = request.header(name, value);
    }
    assert_eq!(request.send().await.unwrap().status(), 200);
    agent.wait_for_calls(1).await;
    eventually("the reply is posted", || async { platforms.sent().len() == 1 }).await;
    assert!(
        collector.spans().is_empty(),
        "nothing is posted before the batch delay"
    );

    // The shell's own `kill`: a minimal image may have no kill binary.
    let terminated = Command::new("sh")
        .args(["-c", &format!("kill -TERM {}", serve.child().id())])
        .status()
        .unwrap();
    assert!(terminated.success());
    let mut exited = None;
    eventually("serve exits after SIGTERM", || {
        exited = serve.child().try_wait().unwrap();
        let done = exited.is_some();
        async move { done }
    })
    .await;
    let exited = exited.unwrap();
    assert!(exited.success(), "{exited}");

    let spans = collector.spans();
    let webhook = named(&spans, WEBHOOK);
    let dispatch = named(&spans, "dispatch");
    assert_eq!(dispatch.trace_id, webhook.trace_id);
    assert_eq!(dispatch.parent_span_id, webhook.span_id);
    assert!(
        spans.iter().all(|span| span.service == "bridge-under-test"),
        "{spans:#?}"
    );
    let traceparent = agent.calls()[0].traceparent.clone().unwrap_or_default();
    assert!(
        traceparent.starts_with(&format!("00-{}-", webhook.trace_id)),
        "{traceparent}"
    );
}
