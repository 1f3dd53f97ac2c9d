//! HTTP surface: one `router()` per feature, merged here with the cross-cutting layers
//! (request ids, tracing spans named by the matched route, request metrics, body limit).

pub mod health;
pub mod hooks;
pub mod media;

use std::time::{Duration, Instant};

use axum::extract::{MatchedPath, Request};
use axum::http::HeaderName;
use axum::Router;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::trace::TraceLayer;

use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::error::AppError;
use crate::state::AppState;

const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// The largest JSON body the admin and operator API reads (axum's default, made explicit so
/// the 413 can name it). Webhook bodies have their own per-platform limits (`hooks.rs`).
pub const API_BODY_LIMIT: usize = 2 * 1024 * 1024;

/// Every route, documented by the same calls that serve it, so `/v1/openapi.json` cannot
/// drift from the handlers.
pub fn api() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .merge(health::router())
        .merge(hooks::router())
        .merge(media::router())
        .merge(crate::admin::router())
        .routes(routes!(openapi_json))
}

/// The OpenAPI document of `api()`.
pub fn openapi() -> utoipa::openapi::OpenApi {
    let mut doc = api().into_openapi();
    document_shared_answers(&mut doc);
    require_path_parameters(&mut doc);
    doc
}

/// The operations of one path, whatever their method.
fn operations(
    item: &mut utoipa::openapi::PathItem,
) -> impl Iterator<Item = &mut utoipa::openapi::path::Operation> {
    [
        &mut item.get,
        &mut item.post,
        &mut item.put,
        &mut item.patch,
        &mut item.delete,
    ]
    .into_iter()
    .flatten()
}

/// OpenAPI requires every path parameter to be `required`; utoipa leaves it out for a
/// parameter whose schema comes from `schema_with` (the enums of `admin::schema`).
fn require_path_parameters(doc: &mut utoipa::openapi::OpenApi) {
    use utoipa::openapi::path::ParameterIn;
    use utoipa::openapi::Required;
    for item in doc.paths.paths.values_mut() {
        for operation in operations(item) {
            let parameters = operation.parameters.iter_mut().flatten();
            for parameter in parameters.filter(|p| p.parameter_in == ParameterIn::Path) {
                parameter.required = Required::True;
            }
        }
    }
}

/// Answers that do not come from one handler but from the layers every request of a kind
/// passes: 503 from the request deadline (webhooks, admin and operator API) or a database
/// that cannot be reached, and 429 from the throttling of bad admin keys
/// (`crate::admin::throttle`), on every operation that takes a key.
fn document_shared_answers(doc: &mut utoipa::openapi::OpenApi) {
    use utoipa::openapi::{ContentBuilder, Ref, ResponseBuilder};
    let error = |description: &str| {
        ResponseBuilder::new()
            .description(description)
            .content(
                "application/json",
                ContentBuilder::new()
                    .schema(Some(Ref::from_schema_name("ApiJsonError")))
                    .build(),
            )
            .build()
    };
    for (path, item) in doc.paths.paths.iter_mut() {
        let bounded = ["/v1/hooks/", "/v1/admin/", "/v1/operator/"]
            .iter()
            .any(|prefix| path.starts_with(prefix));
        for operation in operations(item) {
            let responses = &mut operation.responses.responses;
            if bounded {
                responses.entry("503".into()).or_insert_with(|| {
                    error("The database is unavailable, or the request passed its deadline: retry later.")
                        .into()
                });
            }
            let takes_key = operation.security.as_ref().is_some_and(|requirements| {
                serde_json::to_value(requirements)
                    .is_ok_and(|value| value.to_string().contains("\"api_key\""))
            });
            if takes_key {
                responses.entry("429".into()).or_insert_with(|| {
                    error("Too many attempts with keys that did not work from this address or with this prefix; see Retry-After.").into()
                });
            }
        }
    }
}

#[derive(utoipa::OpenApi)]
#[openapi(
    info(title = "channel-bridge", description = "Multi-tenant messaging gateway: webhooks, admin and operator API."),
    modifiers(&SecuritySchemes)
)]
struct ApiDoc;

struct SecuritySchemes;

impl utoipa::Modify for SecuritySchemes {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
        let components = openapi.components.get_or_insert_with(Default::default);
        let bearer = |description: &str| {
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(description))
                    .build(),
            )
        };
        components.add_security_scheme("api_key", bearer("A tenant admin key, `cbk_<prefix>_<secret>`."));
        components.add_security_scheme(
            "operator_token",
            bearer("The operator token (CB_OPERATOR_TOKEN)."),
        );
    }
}

/// This document.
#[utoipa::path(get, path = "/v1/openapi.json", tag = "meta", operation_id = "openapi_document", responses((status = 200, description = "OpenAPI 3.1 document")))]
async fn openapi_json() -> axum::Json<utoipa::openapi::OpenApi> {
    static DOC: std::sync::OnceLock<utoipa::openapi::OpenApi> = std::sync::OnceLock::new();
    axum::Json(DOC.get_or_init(openapi).clone())
}

pub fn router(state: AppState) -> Router {
    let (routes, _) = api().split_for_parts();
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
                // 5xx answers are logged where they arise (`AppError`, the deadline, a
                // failed /readyz once per change), not again here at ERROR.
                .on_failure(()),
        )
        .layer(PropagateRequestIdLayer::new(REQUEST_ID))
        .layer(SetRequestIdLayer::new(REQUEST_ID, MakeRequestUuid))
}

/// An unknown path: the JSON 404 every other error has, not axum's empty one.
async fn no_such_route() -> AppError {
    AppError::NotFound("route")
}

/// A known path with a method it does not serve: JSON 405 (axum still adds `Allow`).
async fn method_not_allowed() -> AppError {
    AppError::MethodNotAllowed
}

/// Bounds a request's time (`CB_WEBHOOK_DEADLINE_MS` for webhooks,
/// `CB_ADMIN_DEADLINE_MS` for the admin and operator API and the console): past it the request is answered
/// 503 with `Retry-After: 1`, so a platform retries instead of waiting on a database the
/// network holds. Work already committed stays committed (a webhook's retry is then a
/// duplicate). `/healthz`, `/readyz` (which has its own one-second deadline), `/metrics`
/// and the OpenAPI document are not bounded here.
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
    } else if path.starts_with("/v1/admin/") || path.starts_with("/v1/operator/") || console {
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

/// Counts and times every answer by method, route template and status class. Unmatched
/// paths share the route `unmatched`, so scanners cannot grow the label set.
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

/// One INFO line per accepted webhook (ids, platform and counts come from the request span
/// and `hooks::Accepted`; never message text); every other answer at DEBUG.
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

/// Spans carry the route template (`/v1/hooks/{tenant_id}/{connector_id}`), never the raw
/// path, so ids do not explode span cardinality; ids are recorded as fields instead. With
/// traces exported, the span is a server span named `{method} {route}`
/// (`telemetry::traces`).
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
