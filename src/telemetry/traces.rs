//! OpenTelemetry traces over OTLP/HTTP, exported only when the standard variables name a
//! collector (docs/operations.md#traces). Every function asks `traced()` first, so without
//! the layer a webhook pays a few thread-local look-ups and allocates nothing.

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

/// Spans made for traces only; the log output leaves them out.
pub const TARGET: &str = "channel_bridge::traces";

pub const DEFAULT_SERVICE_NAME: &str = "channel-bridge";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceExport {
    /// `None`: the exporter reads the OTLP variables itself.
    endpoint: Option<String>,
}

impl TraceExport {
    /// An endpoint that is not an http(s) URL stops the start: the exporter would quietly
    /// post to `localhost:4318` instead.
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

    pub fn to(endpoint: impl Into<String>) -> Self {
        Self {
            endpoint: Some(endpoint.into()),
        }
    }

    /// The batch processor has its own thread, so no request waits on the collector.
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

/// Only http/protobuf is built in. A warning, not a failure: the collector may take it anyway.
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

#[derive(Clone)]
pub struct Traces {
    provider: SdkTracerProvider,
}

impl Traces {
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

    /// Blocks like `shutdown`.
    pub fn flush(&self) {
        if let Err(err) = self.provider.force_flush() {
            tracing::warn!(%err, "exporting spans failed");
        }
    }

    /// Blocks up to 5 s: call it off the async workers.
    pub fn shutdown(self) {
        if let Err(err) = self.provider.shutdown() {
            tracing::warn!(%err, "exporting the last spans failed");
        }
    }
}

struct Traced;

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Traced {}

pub fn traced() -> bool {
    tracing::dispatcher::get_default(|dispatch| dispatch.is::<Traced>())
}

fn propagator() -> TraceContextPropagator {
    TraceContextPropagator::new()
}

/// To carry the current trace across the queue.
pub fn current_traceparent() -> Option<String> {
    if !traced() {
        return None;
    }
    trace_headers_of(&Span::current()).remove("traceparent")
}

/// For a request the current span makes (the agent call).
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

/// Makes `span` (not yet entered) a child of the webhook's span; a malformed value leaves
/// it a root.
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

struct Traceparent<'a>(&'a str);

impl Extractor for Traceparent<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        (key == "traceparent").then_some(self.0)
    }

    fn keys(&self) -> Vec<&str> {
        vec!["traceparent"]
    }
}

struct Headers<'a>(&'a axum::http::HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|value| value.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(axum::http::HeaderName::as_str).collect()
    }
}

/// `span` must declare `otel.kind` and not be entered yet.
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

/// Name and kind in exported traces; `span` must declare `otel.kind`. Recorded only when
/// traces are on, so log lines do not change otherwise.
pub fn describe(span: &Span, kind: &'static str, name: impl Into<Cow<'static, str>>) {
    if !traced() {
        return;
    }
    span.record("otel.kind", kind);
    let context = span.context();
    // So a log line leads to its trace.
    let trace_id = context.span().span_context().trace_id();
    if trace_id != opentelemetry::trace::TraceId::INVALID {
        span.record("trace_id", tracing::field::display(trace_id));
    }
    context.span().update_name(name);
}

/// A 5xx marks the span as failed.
pub fn record_response_status(span: &Span, status: axum::http::StatusCode) {
    if !traced() {
        return;
    }
    span.set_attribute("http.response.status_code", i64::from(status.as_u16()));
    if status.is_server_error() {
        span.set_status(Status::error(status.to_string()));
    }
}

/// `reason` is a fixed word, never a peer's text.
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
