//! HTTP surface: one `router()` per feature, merged here with the cross-cutting layers
//! (request ids, tracing spans named by the matched route, body limit).

pub mod health;
pub mod hooks;

use std::time::Duration;

use axum::extract::{MatchedPath, Request};
use axum::http::HeaderName;
use axum::Router;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::trace::TraceLayer;

use crate::state::AppState;

const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

pub fn router(state: AppState) -> Router {
    Router::new()
        .merge(health::router())
        .merge(hooks::router())
        .with_state(state)
        .layer(
            TraceLayer::new_for_http()
                .make_span_with(request_span)
                .on_response(
                    |response: &axum::response::Response, latency: Duration, span: &tracing::Span| {
                        span.record("status", response.status().as_u16());
                        tracing::debug!(latency_ms = latency.as_millis() as u64, "response");
                    },
                ),
        )
        .layer(PropagateRequestIdLayer::new(REQUEST_ID))
        .layer(SetRequestIdLayer::new(REQUEST_ID, MakeRequestUuid))
}

/// Spans carry the route template (`/v1/hooks/{tenant_id}/{connector_id}`), never the raw
/// path, so ids do not explode span cardinality; ids are recorded as fields instead.
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
    tracing::info_span!(
        "http",
        method = %request.method(),
        route,
        request_id,
        status = tracing::field::Empty,
        tenant_id = tracing::field::Empty,
        connector_id = tracing::field::Empty,
        platform = tracing::field::Empty,
    )
}
