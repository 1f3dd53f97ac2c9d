//! `/healthz` (the process answers), `/readyz` (the database answers), `/metrics`.

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::Json;
use serde_json::json;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::state::AppState;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(healthz))
        .routes(routes!(readyz))
        .routes(routes!(metrics))
}

/// The process answers.
#[utoipa::path(get, path = "/healthz", tag = "meta", responses((status = 200, description = "alive")))]
async fn healthz() -> impl IntoResponse {
    Json(json!({ "status": "ok" }))
}

/// 503 while the database does not answer, so a load balancer routes around the instance.
#[utoipa::path(get, path = "/readyz", tag = "meta",
    responses((status = 200, description = "database reachable"), (status = 503, description = "database unavailable")))]
async fn readyz(State(state): State<AppState>) -> impl IntoResponse {
    if crate::db::is_ready(&state.pool).await {
        (StatusCode::OK, Json(json!({ "status": "ready" })))
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({ "status": "database unavailable" })),
        )
    }
}

/// Prometheus text format.
#[utoipa::path(get, path = "/metrics", tag = "meta", responses((status = 200, description = "metrics", content_type = "text/plain")))]
async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics.render(),
    )
}
