//! The served router: the API's and the console's routes under the layers every request
//! passes (request ids, spans, metrics, the deadline, the body limit).

use std::time::{Duration, Instant};

use axum::extract::{MatchedPath, Request};
use axum::http::HeaderName;
use axum::Router;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::trace::TraceLayer;

use crate::error::AppError;
use crate::http::extract::API_BODY_LIMIT;
use crate::http::hooks;
use crate::http::state::AppState;

const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

pub fn router(state: AppState) -> Router {
    let (routes, _) = super::openapi::api().split_for_parts();
    // The fallbacks come after every route (the 405 one is set on the routes registered so
    // far) and before the layers, so their answers get request ids and spans too.
    routes
        .merge(crate::console::router())
        .fallback(no_such_route)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(axum::extract::DefaultBodyLimit::max(API_BODY_LIMIT))
        .layer(axum::middleware::from_fn_with_state(state.clone(), deadline))
        .layer(axum::middleware::from_fn(observe))
        .with_state(state)
        .layer(
            TraceLayer::new_for_http()
                .make_span_with(request_span)
                .on_response(log_response)
                // 5xx answers are logged where they arise, not again here at ERROR.
                .on_failure(()),
        )
        .layer(PropagateRequestIdLayer::new(REQUEST_ID))
        .layer(SetRequestIdLayer::new(REQUEST_ID, MakeRequestUuid))
}

/// The JSON 404 every other error has, not axum's empty one.
async fn no_such_route() -> AppError {
    AppError::NotFound("route")
}

/// JSON 405; axum still adds `Allow`.
async fn method_not_allowed() -> AppError {
    AppError::MethodNotAllowed
}

/// 503 with `Retry-After: 1` past the deadline, so a platform retries instead of waiting on
/// a database the network holds (docs/delivery.md#when-the-database-is-out-of-reach). Probes,
/// metrics and the OpenAPI document are not bounded here.
async fn deadline(
    axum::extract::State(state): axum::extract::State<AppState>,
    request: Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let path = request.uri().path();
    let console = path == "/console" || path.starts_with("/console/");
    let limit_ms = if path.starts_with("/v1/hooks/") {
        state.settings.webhook_deadline_ms
    } else if ["/v1/admin/", "/v1/operator/", "/v1/agent/"]
        .iter()
        .any(|api| path.starts_with(api))
        || console
    {
        state.settings.admin_deadline_ms
    } else {
        return next.run(request).await;
    };
    match tokio::time::timeout(Duration::from_millis(limit_ms), next.run(request)).await {
        Ok(response) => response,
        Err(_) => {
            crate::db::deadline_missed();
            metrics::counter!("channel_bridge_http_deadlines_missed_total").increment(1);
            tracing::warn!(limit_ms, "request deadline passed; answered 503");
            if console {
                // The console's pages answer as a page, the API as JSON.
                crate::console::deadline_passed(limit_ms)
            } else {
                crate::error::AppError::DeadlinePassed(limit_ms).into_response()
            }
        }
    }
}

/// Unmatched paths share the route `unmatched`, so scanners cannot grow the label set.
async fn observe(request: Request, next: axum::middleware::Next) -> axum::response::Response {
    let started = Instant::now();
    let method = crate::telemetry::method_label(request.method());
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched", MatchedPath::as_str)
        .to_owned();
    let response = next.run(request).await;
    let status_class = crate::telemetry::status_class(response.status());
    metrics::histogram!("channel_bridge_http_request_duration_seconds",
        "method" => method, "route" => route.clone(), "status_class" => status_class)
    .record(started.elapsed().as_secs_f64());
    metrics::counter!("channel_bridge_http_requests_total",
        "method" => method, "route" => route, "status_class" => status_class)
    .increment(1);
    response
}

/// One INFO line per accepted webhook, never with message text; anything else at DEBUG.
fn log_response(response: &axum::response::Response, latency: Duration, span: &tracing::Span) {
    span.record("status", response.status().as_u16());
    crate::telemetry::traces::record_response_status(span, response.status());
    let latency_ms = u64::try_from(latency.as_millis()).unwrap_or(u64::MAX);
    match response.extensions().get::<hooks::Accepted>() {
        Some(accepted) => tracing::info!(
            latency_ms,
            queued = accepted.queued.len(),
            recorded_only = accepted.recorded_only,
            duplicates = accepted.duplicates,
            dropped = accepted.dropped,
            message_ids = %accepted.message_ids(),
            "webhook accepted"
        ),
        None => tracing::debug!(latency_ms, "response"),
    }
}

/// Named by the route template, never the raw path, so ids do not explode span cardinality;
/// ids are recorded as fields instead.
fn request_span(request: &Request) -> tracing::Span {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(MatchedPath::as_str)
        .unwrap_or("unmatched");
    let request_id = request
        .headers()
        .get(&REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let span = tracing::info_span!(
        "http",
        method = %request.method(),
        route,
        request_id,
        status = tracing::field::Empty,
        tenant_id = tracing::field::Empty,
        connector_id = tracing::field::Empty,
        platform = tracing::field::Empty,
        otel.kind = tracing::field::Empty,
        trace_id = tracing::field::Empty,
    );
    crate::telemetry::traces::start_request_span(&span, request.headers(), request.method().as_str(), route);
    span
}
