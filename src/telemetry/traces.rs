//! OpenTelemetry traces over OTLP/HTTP (protobuf), exported only when the standard
//! variables name a collector (`OTEL_EXPORTER_OTLP_ENDPOINT` or
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`).
//!
//! The `tracing` spans the code already has become OpenTelemetry spans through one extra
//! subscriber layer; a turn's trace is:
//! - the webhook's request span (`http`, named `POST /v1/hooks/{tenant_id}/{connector_id}`),
//!   a child of the caller's `traceparent` when a proxy in front sent one;
//! - the job span that works the turn (`dispatch`, or `reply` for a later delivery pass),
//!   a child of the webhook span. The worker runs later, in another task, maybe on another
//!   instance: the webhook span's W3C `traceparent` is kept in the turn's
//!   `metadata.traceparent` and read back when the job is claimed;
//! - under it, `agent call` (which sends `traceparent`/`tracestate` to the agent so that its
//!   spans join the trace) and `deliver` with one `send reply part` per platform send;
//!   these three are made for traces only (target `TARGET`) and stay out of the logs.
//!
//! Span attributes are the spans' ids, route templates and fixed outcome words: never
//! message text, answers or secrets.
//!
//! Everything here asks the current subscriber whether it exports traces (`traced`), so
//! a process (or a test) without the layer pays a few thread-local look-ups per webhook
//! and allocates nothing. The exporter and its batch thread exist only when the layer does.

use std::borrow::Cow;
use std::collections::HashMap;

use anyhow::Context as _;
use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::{Status, TraceContextExt, TracerProvider as _};
use opentelemetry::KeyValue;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use opentelemetry_sdk::Resource;
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The target of spans made for traces only (`info_span!(target: TARGET, …)`): the log
/// output leaves them out (`telemetry::subscriber_with`).
pub const TARGET: &str = "channel_bridge::traces";

/// The `service.name` when neither `OTEL_SERVICE_NAME` nor `OTEL_RESOURCE_ATTRIBUTES`
/// names one (the SDK would say `unknown_service`).
pub const DEFAULT_SERVICE_NAME: &str = "channel-bridge";

/// Where spans go. Read from the standard variables by `from_env`; tests name their
/// collector stand-in with `to`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceExport {
    /// The full URL spans are posted to; `None` leaves it to the exporter, which reads
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` as is, or `OTEL_EXPORTER_OTLP_ENDPOINT` with
    /// `/v1/traces` appended, as the OTLP specification says.
    endpoint: Option<String>,
}

impl TraceExport {
    /// Traces are on when an OTLP endpoint is set and `OTEL_SDK_DISABLED` is not `true`.
    /// Headers (`OTEL_EXPORTER_OTLP_HEADERS`), timeout, sampler (`OTEL_TRACES_SAMPLER`,
    /// `OTEL_TRACES_SAMPLER_ARG`), batching (`OTEL_BSP_*`) and the resource
    /// (`OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`) are read by the SDK itself.
    /// An endpoint that is not an http(s) URL stops the start with a message naming the
    /// variable (the exporter would quietly post to `localhost:4318` instead).
    pub fn from_env() -> anyhow::Result<Option<Self>> {
        Self::from_vars(|name| std::env::var(name).ok())
    }

    fn from_vars(var: impl Fn(&str) -> Option<String>) -> anyhow::Result<Option<Self>> {
        const ENDPOINTS: [&str; 2] = [
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "OTEL_EXPORTER_OTLP_ENDPOINT",
        ];
        let disabled = var("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
        let mut configured = false;
        for name in ENDPOINTS {
            let Some(value) = var(name).filter(|value| !value.trim().is_empty()) else {
                continue;
            };
            let url = reqwest::Url::parse(value.trim()).ok();
            if !url.is_some_and(|url| matches!(url.scheme(), "http" | "https")) {
                anyhow::bail!("{name} must be an http(s) URL, such as http://otel-collector:4318");
            }
            configured = true;
        }
        Ok((configured && !disabled).then_some(Self { endpoint: None }))
    }

    /// Spans posted to exactly this URL (`http://host:port/v1/traces`).
    pub fn to(endpoint: impl Into<String>) -> Self {
        Self {
            endpoint: Some(endpoint.into()),
        }
    }

    /// Builds the exporter and the batch processor (its own thread, which posts a batch
    /// every `OTEL_BSP_SCHEDULE_DELAY`, 5 s by default, so no request waits on the collector).
    pub fn start(self) -> anyhow::Result<Traces> {
        use opentelemetry_otlp::WithExportConfig;
        let mut builder = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(opentelemetry_otlp::Protocol::HttpBinary);
        if let Some(endpoint) = self.endpoint {
            builder = builder.with_endpoint(endpoint);
        }
        let exporter = builder
            .build()
            .context("Failed to set up the OTLP trace exporter (OTEL_EXPORTER_OTLP_* variables)")?;
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource())
            .build();
        Ok(Traces { provider })
    }
}

/// Only OTLP over HTTP with protobuf bodies is built in (no gRPC stack in the binary); a
/// collector's OTLP/HTTP port (4318) takes it. Said once at start (once the subscriber
/// is installed) rather than failing: the collector may well take it anyway.
pub fn warn_if_protocol_unsupported() {
    let protocol = std::env::var("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        .or_else(|_| std::env::var("OTEL_EXPORTER_OTLP_PROTOCOL"));
    if let Ok(protocol) = protocol {
        if protocol.trim() != "http/protobuf" {
            tracing::warn!(
                %protocol,
                "OTEL_EXPORTER_OTLP_PROTOCOL is not supported; traces are sent as http/protobuf"
            );
        }
    }
}

/// The SDK's resource (`OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`) with this build's
/// version, named `channel-bridge` when nothing else names it.
fn resource() -> Resource {
    let service_name = opentelemetry::Key::from_static_str("service.name");
    let named = Resource::builder()
        .build()
        .get(&service_name)
        .is_some_and(|name| name.as_str() != "unknown_service");
    let builder =
        Resource::builder().with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")));
    if named {
        builder.build()
    } else {
        builder.with_service_name(DEFAULT_SERVICE_NAME).build()
    }
}

/// The running exporter: the subscriber layer that feeds it, and its shutdown. Clones
/// share the one exporter.
#[derive(Clone)]
pub struct Traces {
    provider: SdkTracerProvider,
}

impl Traces {
    /// The layer that turns `tracing` spans into exported spans, with the marker `traced`
    /// looks for.
    pub fn layer<S>(&self) -> impl tracing_subscriber::Layer<S> + Send + Sync
    where
        S: tracing::Subscriber + for<'span> tracing_subscriber::registry::LookupSpan<'span> + Send + Sync,
    {
        use tracing_subscriber::Layer as _;
        let tracer: SdkTracer = self.provider.tracer("channel-bridge");
        tracing_opentelemetry::layer()
            .with_tracer(tracer)
            .with_threads(false)
            .and_then(Traced)
    }

    /// Exports what is buffered now. Blocks like `shutdown`.
    pub fn flush(&self) {
        if let Err(err) = self.provider.force_flush() {
            tracing::warn!(%err, "exporting spans failed");
        }
    }

    /// Exports what is still buffered and stops the batch thread. Blocks (5 s at most,
    /// the SDK's bound): call it off the async workers (`spawn_blocking`) or after them.
    pub fn shutdown(self) {
        if let Err(err) = self.provider.shutdown() {
            tracing::warn!(%err, "exporting the last spans failed");
        }
    }
}

/// Marks a subscriber that exports traces (a layer that does nothing else).
struct Traced;

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Traced {}

/// Whether the current subscriber exports traces: one thread-local look-up, no allocation.
pub fn traced() -> bool {
    tracing::dispatcher::get_default(|dispatch| dispatch.is::<Traced>())
}

/// The W3C propagator (`traceparent`, `tracestate`); stateless, so made where used.
fn propagator() -> TraceContextPropagator {
    TraceContextPropagator::new()
}

/// The W3C `traceparent` of the current span, to carry its trace across the queue. `None`
/// (before even looking up the span) when traces are off.
pub fn current_traceparent() -> Option<String> {
    if !traced() {
        return None;
    }
    trace_headers_of(&Span::current()).remove("traceparent")
}

/// `traceparent` (and `tracestate` when there is one) of the current span, for a request
/// the current span makes (the agent call); empty when traces are off.
pub fn trace_headers() -> HashMap<String, String> {
    if !traced() {
        return HashMap::new();
    }
    trace_headers_of(&Span::current())
}

fn trace_headers_of(span: &Span) -> HashMap<String, String> {
    let mut headers = HashMap::new();
    propagator().inject_context(&span.context(), &mut headers);
    headers
}

/// Makes `span` (just created, not yet entered) a child of the span `traceparent` names:
/// the webhook's span, for the job that works its turn. A missing or malformed value
/// leaves the span where it is (a root of its own).
pub fn continue_trace(span: &Span, traceparent: Option<&str>) {
    let Some(traceparent) = traceparent else { return };
    if !traced() {
        return;
    }
    let parent = propagator().extract(&Traceparent(traceparent));
    if parent.span().span_context().is_valid() {
        // Fails only when the span was started already, which the caller rules out.
        let _ = span.set_parent(parent);
    }
}

/// One value read as the `traceparent` header.
struct Traceparent<'a>(&'a str);

impl Extractor for Traceparent<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        (key == "traceparent").then_some(self.0)
    }

    fn keys(&self) -> Vec<&str> {
        vec!["traceparent"]
    }
}

/// A request's headers read by the propagator.
struct Headers<'a>(&'a axum::http::HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|value| value.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(axum::http::HeaderName::as_str).collect()
    }
}

/// Names a request's span after its method and route template and marks it as a server
/// span, under the caller's trace when the request carries a `traceparent` (a proxy or
/// load balancer that traces). `span` must declare `otel.kind` and not be entered yet.
pub fn start_request_span(span: &Span, headers: &axum::http::HeaderMap, method: &str, route: &str) {
    if !traced() {
        return;
    }
    if headers.contains_key("traceparent") {
        let parent = propagator().extract(&Headers(headers));
        if parent.span().span_context().is_valid() {
            let _ = span.set_parent(parent);
        }
    }
    describe(span, "server", format!("{method} {route}"));
    span.set_attribute("http.request.method", method.to_owned());
    span.set_attribute("http.route", route.to_owned());
}

/// The name (and kind: `server`, `client`, `internal`…) a span has in exported traces.
/// `span` must declare `otel.kind`; recorded only when traces are on, so log lines do
/// not change otherwise.
pub fn describe(span: &Span, kind: &'static str, name: impl Into<Cow<'static, str>>) {
    if !traced() {
        return;
    }
    span.record("otel.kind", kind);
    let context = span.context();
    // The trace id on the log lines of the span (when it declares `trace_id`), so a log
    // line leads to its trace.
    let trace_id = context.span().span_context().trace_id();
    if trace_id != opentelemetry::trace::TraceId::INVALID {
        span.record("trace_id", tracing::field::display(trace_id));
    }
    context.span().update_name(name);
}

/// The answer's status on the request span; a 5xx marks the span as failed.
pub fn record_response_status(span: &Span, status: axum::http::StatusCode) {
    if !traced() {
        return;
    }
    span.set_attribute("http.response.status_code", i64::from(status.as_u16()));
    if status.is_server_error() {
        span.set_status(Status::error(status.to_string()));
    }
}

/// Marks `span` as failed for `reason` (a fixed word, never a peer's text).
pub fn record_failure(span: &Span, reason: &'static str) {
    if traced() {
        span.set_status(Status::error(reason));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            pairs
                .iter()
                .find(|(key, _)| *key == name)
                .map(|(_, value)| (*value).to_owned())
        }
    }

    fn configured(pairs: &[(&str, &str)]) -> bool {
        TraceExport::from_vars(vars(pairs)).unwrap().is_some()
    }

    #[test]
    fn traces_are_on_only_when_an_otlp_endpoint_is_set_and_the_sdk_is_not_disabled() {
        assert!(!configured(&[]));
        assert!(!configured(&[("OTEL_EXPORTER_OTLP_ENDPOINT", " ")]));
        assert!(configured(&[(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "http://collector:4318"
        )]));
        assert!(configured(&[(
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "https://collector.example/v1/traces"
        )]));
        assert!(!configured(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"),
            ("OTEL_SDK_DISABLED", "TRUE"),
        ]));
    }

    #[test]
    fn an_endpoint_that_is_no_http_url_is_refused_naming_its_variable() {
        for value in ["collector:4318", "grpc://collector:4317", "not a url"] {
            let err = TraceExport::from_vars(vars(&[("OTEL_EXPORTER_OTLP_ENDPOINT", value)])).unwrap_err();
            assert!(
                err.to_string().starts_with("OTEL_EXPORTER_OTLP_ENDPOINT "),
                "{err}"
            );
        }
    }

    #[test]
    fn nothing_is_propagated_without_the_layer() {
        let span = tracing::info_span!("job", otel.kind = tracing::field::Empty);
        assert!(!traced());
        let _entered = span.enter();
        assert_eq!(current_traceparent(), None);
        assert!(trace_headers().is_empty());
    }
}
