//! Logs, traces and metrics set-up, once per process (docs/operations.md#observability).
//! `METRICS` lists every exported series: a histogram missing from it would be rendered as a
//! summary, which the exposition test refuses; add it here and to docs/operations.md first.

pub mod traces;

use std::io::IsTerminal;
use std::sync::OnceLock;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tracing_subscriber::filter::{filter_fn, FilterExt, Targets};
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::{fmt, EnvFilter, Layer as _};

use crate::settings::LogFormat;

/// `RUST_LOG` overrides the logs' default filter, not the exported spans. A second call is
/// ignored, which tests rely on.
pub fn init_tracing(format: LogFormat, default_filter: &str, traces: Option<&traces::Traces>) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    let ansi = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let subscriber = subscriber_with(format, filter, std::io::stderr, ansi, traces);
    let _ = tracing::subscriber::set_global_default(subscriber);
}

/// For the demo, which keeps the terminal for its walkthrough.
pub fn init_tracing_to_file(
    format: LogFormat,
    default_filter: &str,
    path: &std::path::Path,
) -> std::io::Result<()> {
    let file = std::fs::File::create(path)?;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    let subscriber = subscriber_with(format, filter, std::sync::Mutex::new(file), false, None);
    let _ = tracing::subscriber::set_global_default(subscriber);
    Ok(())
}

/// Tests capture the production format with it.
pub fn subscriber<W>(
    format: LogFormat,
    filter: EnvFilter,
    writer: W,
    ansi: bool,
) -> Box<dyn tracing::Subscriber + Send + Sync>
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    subscriber_with(format, filter, writer, ansi, None)
}

/// Exported spans ignore the log filter (`RUST_LOG=warn` would drop every span of a turn):
/// the sampler decides. Trace-only spans stay out of the logs, so a log line's span is the
/// job's whether traces are on or off.
pub fn subscriber_with<W>(
    format: LogFormat,
    filter: EnvFilter,
    writer: W,
    ansi: bool,
    traces: Option<&traces::Traces>,
) -> Box<dyn tracing::Subscriber + Send + Sync>
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let exported = Targets::new().with_target("channel_bridge", tracing::Level::INFO);
    let spans =
        tracing_subscriber::registry().with(traces.map(|traces| traces.layer().with_filter(exported)));
    let logs = fmt::layer().with_writer(writer).with_ansi(ansi);
    let not_traces_only = filter_fn(|metadata| metadata.target() != traces::TARGET);
    let logged = filter.and(not_traces_only);
    match format {
        LogFormat::Json => Box::new(
            spans.with(
                logs.json()
                    .flatten_event(true)
                    .with_current_span(true)
                    .with_filter(logged),
            ),
        ),
        LogFormat::Pretty => Box::new(spans.with(logs.compact().with_filter(logged))),
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram(&'static [f64]),
}

/// One exported metric, as docs/operations.md's table lists it.
#[derive(Debug)]
pub struct Metric {
    pub name: &'static str,
    pub kind: Kind,
    pub labels: &'static [&'static str],
    pub help: &'static str,
}

/// Up to the admin deadline.
const HTTP_SECONDS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];
/// Up to past the default deadline (2 s).
const DB_SECONDS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
];
const AGENT_SECONDS: &[f64] = &[
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0,
];
/// Up to twice the default platform timeout.
const PLATFORM_SECONDS: &[f64] = &[0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 30.0];
const PHASE_SECONDS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
];
const OWN_SECONDS: &[f64] = &[
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
];
/// A request may wait for its chat's slot, one `CB_TYPING_INTERVAL_MS`.
const TYPING_SECONDS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.5, 1.0, 2.5, 5.0, 10.0,
];
/// The target is under 300 ms at p99.
const STREAM_SHOW_SECONDS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 1.0, 2.5, 5.0, 10.0,
];
/// Counts, up to past the largest default batch (256).
const BATCH_ITEMS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0];

const fn metric(
    name: &'static str,
    kind: Kind,
    labels: &'static [&'static str],
    help: &'static str,
) -> Metric {
    Metric {
        name,
        kind,
        labels,
        help,
    }
}

use Kind::{Counter, Gauge, Histogram};

pub const METRICS: &[Metric] = &[
    metric(
        "channel_bridge_build_info",
        Gauge,
        &["version", "schema_version"],
        "Always 1; the labels name the running build and the migration version it expects.",
    ),
    metric(
        "channel_bridge_http_requests_total",
        Counter,
        &["method", "route", "status_class"],
        "HTTP requests answered, by method, matched route template and status class.",
    ),
    metric(
        "channel_bridge_http_request_duration_seconds",
        Histogram(HTTP_SECONDS),
        &["method", "route", "status_class"],
        "Time to answer an HTTP request, by method, matched route template and status class.",
    ),
    metric(
        "channel_bridge_http_deadlines_missed_total",
        Counter,
        &[],
        "Requests answered 503 because they passed CB_WEBHOOK_DEADLINE_MS or CB_ADMIN_DEADLINE_MS.",
    ),
    metric(
        "channel_bridge_admin_auth_throttled_total",
        Counter,
        &[],
        "Admin API requests refused with 429 after too many bad keys from one address or prefix.",
    ),
    metric(
        "channel_bridge_webhook_events_total",
        Counter,
        &["platform", "result"],
        "Verified inbound turns, by result: queued, recorded_only or duplicate.",
    ),
    metric(
        "channel_bridge_webhook_events_dropped_total",
        Counter,
        &["platform", "reason"],
        "Verified events dropped without a row (bot echoes, edits, statuses...), by reason.",
    ),
    metric(
        "channel_bridge_webhook_rejected_total",
        Counter,
        &["platform"],
        "Webhooks refused by signature or secret verification.",
    ),
    metric(
        "channel_bridge_connector_cache_lookups_total",
        Counter,
        &["result"],
        "Connector lookups of webhook verification, by result: hit or miss.",
    ),
    metric(
        "channel_bridge_batch_size",
        Histogram(BATCH_ITEMS),
        &["writer"],
        "Items written in one transaction by a batch writer (ingress: webhooks, turn: state changes).",
    ),
    metric(
        "channel_bridge_batch_fallbacks_total",
        Counter,
        &["writer"],
        "Failed batches whose items were then written one transaction each.",
    ),
    metric(
        "channel_bridge_batch_writer_restarts_total",
        Counter,
        &["writer"],
        "Batch writer tasks started again after a panic.",
    ),
    metric(
        "channel_bridge_feedback_total",
        Counter,
        &["platform", "feedback"],
        "Reactions to answers that changed a person's feedback: positive, negative, other, removed.",
    ),
    metric(
        "channel_bridge_feedback_events_total",
        Counter,
        &["result"],
        "Feedback events to the agent, settled: delivered, superseded, failed (given up), refused.",
    ),
    metric(
        "channel_bridge_taps_dropped_total",
        Counter,
        &["reason"],
        "Taps on buttons that made no turn: unknown_choice, choice_of_another_chat.",
    ),
    metric(
        "channel_bridge_db_outages_total",
        Counter,
        &[],
        "Database outages this instance met (out of reach, or unable to write), each counted when it starts.",
    ),
    metric(
        "channel_bridge_db_deadlines_missed_total",
        Counter,
        &[],
        "Database interactions abandoned after CB_DB_DEADLINE_MS.",
    ),
    metric(
        "channel_bridge_db_pool_connections",
        Gauge,
        &[],
        "Connections the pool holds open (idle and in use), read at scrape time.",
    ),
    metric(
        "channel_bridge_db_pool_idle_connections",
        Gauge,
        &[],
        "Open pool connections that are idle, read at scrape time.",
    ),
    metric(
        "channel_bridge_db_pool_max_connections",
        Gauge,
        &[],
        "The pool's ceiling (CB_DB_POOL_SIZE).",
    ),
    metric(
        "channel_bridge_dispatch_queue_depth",
        Gauge,
        &[],
        "Jobs in the dispatch queue (all tenants), every ten seconds.",
    ),
    metric(
        "channel_bridge_dispatch_queue_oldest_age_seconds",
        Gauge,
        &[],
        "Age of the oldest job in the dispatch queue.",
    ),
    metric(
        "channel_bridge_dispatch_queue_rotations_total",
        Counter,
        &["step"],
        "Queue generations truncated once drained (`truncated`) or made current (`switched`).",
    ),
    metric(
        "channel_bridge_dispatch_tenant_queue_depth",
        Gauge,
        &["tenant"],
        "Jobs queued for each of the CB_METRICS_TOP_TENANTS tenants with the deepest queues.",
    ),
    metric(
        "channel_bridge_dispatch_tenant_queue_oldest_age_seconds",
        Gauge,
        &["tenant"],
        "Age of the oldest queued job of each of the CB_METRICS_TOP_TENANTS deepest tenants.",
    ),
    metric(
        "channel_bridge_dispatch_in_flight",
        Gauge,
        &[],
        "Jobs this instance is working on (agent calls and reply posts).",
    ),
    metric(
        "channel_bridge_dispatch_claim_batch_size",
        Histogram(BATCH_ITEMS),
        &[],
        "Jobs taken by one claim statement.",
    ),
    metric(
        "channel_bridge_dispatch_claim_failures_total",
        Counter,
        &[],
        "Claims that failed (database errors); the worker backs off.",
    ),
    metric(
        "channel_bridge_dispatch_leases_lost_total",
        Counter,
        &[],
        "Jobs whose lease another instance took over while this one worked.",
    ),
    metric(
        "channel_bridge_dispatch_lease_renewal_seconds",
        Histogram(DB_SECONDS),
        &[],
        "Time of one lease renewal round.",
    ),
    metric(
        "channel_bridge_dispatch_attempts_total",
        Counter,
        &[],
        "Agent calls made.",
    ),
    metric(
        "channel_bridge_dispatch_failures_total",
        Counter,
        &["reason"],
        "Turns that failed for good (dispatch_failed), by reason.",
    ),
    metric(
        "channel_bridge_dispatch_agent_seconds",
        Histogram(AGENT_SECONDS),
        &[],
        "Time of one agent call, answered or not.",
    ),
    metric(
        "channel_bridge_dispatch_phase_seconds",
        Histogram(PHASE_SECONDS),
        &["phase"],
        "Time of each worker phase: claim, prepare, agent, reply.",
    ),
    metric(
        "channel_bridge_dispatch_own_seconds",
        Histogram(OWN_SECONDS),
        &[],
        "Time of one job minus its waits on the agent and the platform.",
    ),
    metric(
        "channel_bridge_dispatch_history_seconds",
        Histogram(DB_SECONDS),
        &[],
        "Time to read the histories of one claimed batch.",
    ),
    metric(
        "channel_bridge_dispatch_history_failures_total",
        Counter,
        &[],
        "History reads that failed (the turn is dispatched without history).",
    ),
    metric(
        "channel_bridge_reply_send_seconds",
        Histogram(PLATFORM_SECONDS),
        &[],
        "Time of one request to a platform's send API.",
    ),
    metric(
        "channel_bridge_replies_sent_total",
        Counter,
        &["platform"],
        "Reply parts posted.",
    ),
    metric(
        "channel_bridge_replies_rate_limited_total",
        Counter,
        &["platform"],
        "Reply sends the platform answered with a rate limit.",
    ),
    metric(
        "channel_bridge_replies_failed_total",
        Counter,
        &["platform"],
        "Reply parts that failed for good.",
    ),
    metric(
        "channel_bridge_slack_thread_reads_total",
        Counter,
        &["result"],
        "Slack thread reads looking for an in-doubt reply part, by result.",
    ),
    metric(
        "channel_bridge_slack_file_reads_total",
        Counter,
        &["result"],
        "Slack files.info reads settling an in-doubt file share, by result.",
    ),
    metric(
        "channel_bridge_retention_deleted_total",
        Counter,
        &["kind"],
        "Rows the retention job deleted, by kind (turns, reply_parts, notices).",
    ),
    metric(
        "channel_bridge_dispatch_async_total",
        Counter,
        &[],
        "Dispatches the agent answered 202: it posts the answer later.",
    ),
    metric(
        "channel_bridge_agent_events_total",
        Counter,
        &["type"],
        "Events the agent posted for turns it answers later, by type (status, message, done).",
    ),
    metric(
        "channel_bridge_agent_requests_rejected_total",
        Counter,
        &[],
        "Requests to the agent API whose signature did not verify.",
    ),
    metric(
        "channel_bridge_agent_messages_total",
        Counter,
        &["platform"],
        "Messages the agent wrote first (POST /v1/agent/{tenant}/messages), by platform.",
    ),
    metric(
        "channel_bridge_async_expired_total",
        Counter,
        &[],
        "Turns answered 202 that ended at CB_AGENT_ASYNC_HORIZON_SECS without done.",
    ),
    metric(
        "channel_bridge_handoffs_total",
        Counter,
        &["by"],
        "Conversations put on hold for a person, by who asked (person, agent).",
    ),
    metric(
        "channel_bridge_hand_backs_total",
        Counter,
        &[],
        "Held conversations handed back to the agent (by a person or the tenant's return time).",
    ),
    metric(
        "channel_bridge_person_answers_total",
        Counter,
        &[],
        "Messages a person wrote into a conversation from the console or the API.",
    ),
    metric(
        "channel_bridge_turns_held_total",
        Counter,
        &[],
        "User turns recorded held (a person holds the conversation) instead of dispatched.",
    ),
    metric(
        "channel_bridge_retention_passes_total",
        Counter,
        &["outcome"],
        "Retention passes over every tenant with a retention, by outcome (ok, failed).",
    ),
    metric(
        "channel_bridge_typing_requests_total",
        Counter,
        &["platform", "outcome"],
        "Typing indicator requests, by platform and outcome (ok, rate_limited, rejected, failed, timeout, unreachable).",
    ),
    metric(
        "channel_bridge_typing_first_seconds",
        Histogram(TYPING_SECONDS),
        &[],
        "Time from a turn's claim to its first typing indicator request.",
    ),
    metric(
        "channel_bridge_stream_first_show_seconds",
        Histogram(STREAM_SHOW_SECONDS),
        &["platform"],
        "Time from a streamed answer's first text to the answer of the platform call that shows it.",
    ),
    metric(
        "channel_bridge_stream_view_failures_total",
        Counter,
        &["platform"],
        "Live views of streamed answers ended by a failed platform call (the answer is then delivered normally).",
    ),
];

/// Process-wide: several applications in one process (tests, the demo) share it.
pub fn metrics_handle() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(install_recorder).clone()
}

fn install_recorder() -> PrometheusHandle {
    let mut builder = PrometheusBuilder::new();
    for metric in METRICS {
        if let Kind::Histogram(buckets) = metric.kind {
            builder = builder
                .set_buckets_for_metric(Matcher::Full(metric.name.into()), buckets)
                .expect("every bucket list in METRICS is non-empty");
        }
    }
    let recorder = builder.build_recorder();
    let handle = recorder.handle();
    // Fails only beside the benchmarks' debugging recorder; the handle still renders.
    let _ = metrics::set_global_recorder(recorder);
    describe_all();
    metrics::gauge!(
        "channel_bridge_build_info",
        "version" => env!("CARGO_PKG_VERSION"),
        "schema_version" => crate::db::binary_schema_version().to_string(),
    )
    .set(1.0);
    handle
}

fn describe_all() {
    for metric in METRICS {
        match metric.kind {
            Kind::Counter => metrics::describe_counter!(metric.name, metric.help),
            Kind::Gauge => metrics::describe_gauge!(metric.name, metric.help),
            Kind::Histogram(_) => metrics::describe_histogram!(metric.name, metric.help),
        }
    }
}

/// Called when metrics are scraped. sqlx 0.8 does not count waiting tasks
/// (docs/operations.md#metrics says how saturation shows).
pub fn observe_pool(pool: &sqlx::PgPool) {
    metrics::gauge!("channel_bridge_db_pool_connections").set(f64::from(pool.size()));
    metrics::gauge!("channel_bridge_db_pool_idle_connections").set(pool.num_idle() as f64);
    metrics::gauge!("channel_bridge_db_pool_max_connections")
        .set(f64::from(pool.options().get_max_connections()));
}

/// Bounded, unlike the code itself.
pub fn status_class(status: axum::http::StatusCode) -> &'static str {
    match status.as_u16() {
        100..=199 => "1xx",
        200..=299 => "2xx",
        300..=399 => "3xx",
        400..=499 => "4xx",
        _ => "5xx",
    }
}

/// Anything unusual folded into `other` (bounded cardinality).
pub fn method_label(method: &axum::http::Method) -> &'static str {
    use axum::http::Method;
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_metric_follows_the_naming_rules() {
        for metric in METRICS {
            let name = metric.name;
            assert!(name.starts_with("channel_bridge_"), "{name}");
            match metric.kind {
                Kind::Counter => assert!(name.ends_with("_total"), "{name}"),
                Kind::Gauge | Kind::Histogram(_) => assert!(!name.ends_with("_total"), "{name}"),
            }
            if let Kind::Histogram(buckets) = metric.kind {
                assert!(buckets.windows(2).all(|w| w[0] < w[1]), "{name}: buckets ascend");
                let counts = buckets.iter().all(|b| b.fract() == 0.0 && *b >= 1.0);
                assert_eq!(name.ends_with("_seconds"), !counts, "{name}: seconds or counts");
            }
        }
    }

    #[test]
    fn readme_lists_every_metric() {
        let readme = include_str!("../docs/operations.md");
        for metric in METRICS {
            assert!(
                readme.contains(&format!("`{}`", metric.name)),
                "docs/operations.md's metric table misses {}",
                metric.name
            );
        }
    }
}
