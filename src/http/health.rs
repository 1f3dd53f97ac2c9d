//! `/healthz`, `/readyz`, `/metrics` (also on `CB_METRICS_BIND`) and the client side of
//! `channel-bridge healthcheck` (docs/operations.md#observability).

use std::time::Duration;

use anyhow::Context;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::Json;
use serde_json::json;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::state::AppState;

/// Not counted in the HTTP request metrics.
pub fn metrics_listener_router(state: AppState) -> axum::Router {
    use axum::routing::get;
    axum::Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(state)
}

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(healthz))
        .routes(routes!(readyz))
        .routes(routes!(metrics))
}

/// The process answers.
#[utoipa::path(get, path = "/healthz", tag = "meta", operation_id = "healthz", responses((status = 200, description = "alive")))]
async fn healthz() -> impl IntoResponse {
    Json(json!({ "status": "ok" }))
}

/// A balancer's probe must get an answer even while the network holds PostgreSQL's traffic.
const READY_DEADLINE: Duration = Duration::from_secs(1);

/// 503 while the database does not answer within a second, or its schema is behind this
/// binary, so a load balancer routes around the instance.
#[utoipa::path(get, path = "/readyz", tag = "meta", operation_id = "readyz",
    responses((status = 200, description = "database reachable, schema current"),
        (status = 503, description = "database unavailable, or its schema is behind the binary")))]
async fn readyz(State(state): State<AppState>) -> impl IntoResponse {
    let binary = crate::db::binary_schema_version();
    let warnings = warnings(&state);
    let unavailable = |status: String| {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({ "status": status, "schema_version": binary, "warnings": warnings })),
        )
    };
    let probed = crate::db::within(READY_DEADLINE, crate::db::schema(&state.pool)).await;
    if probed.is_ok() {
        state.db_health.reached();
    }
    if let (Ok(_), Some(fault)) = (&probed, state.db_health.fault()) {
        // Answers reads but cannot write (read-only, a full disk): webhooks would be 503.
        state.readiness.note(Some(&fault));
        return unavailable(fault);
    }
    match probed {
        Ok(crate::db::Schema::Current { database }) => {
            state.readiness.note(None);
            (
                StatusCode::OK,
                Json(json!({
                    "status": "ready",
                    "schema_version": binary,
                    "database_schema_version": database,
                    "warnings": warnings,
                })),
            )
        }
        Ok(behind) => {
            let status = behind.to_string();
            state.readiness.note(Some(&status));
            unavailable(status)
        }
        Err(err) => {
            state
                .readiness
                .note(Some(&format!("database unavailable: {err}")));
            unavailable("database unavailable".into())
        }
    }
}

/// What the operator should fix although the instance can serve.
fn warnings(state: &AppState) -> Vec<&'static str> {
    let mut warnings = Vec::new();
    if !state.settings.database.secrets.seals() {
        warnings.push("CB_SECRETS_KEY is not set: stored secrets are in plain text");
    }
    warnings
}

/// Prometheus text format.
#[utoipa::path(get, path = "/metrics", tag = "meta", operation_id = "metrics", responses((status = 200, description = "metrics", content_type = "text/plain")))]
async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    crate::telemetry::observe_pool(&state.pool);
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics.render(),
    )
}

/// For the container's HEALTHCHECK: the image has no curl.
pub async fn probe(url: &reqwest::Url, timeout: Duration) -> anyhow::Result<()> {
    let client = reqwest::Client::builder()
        .timeout(timeout)
        .build()
        .context("Failed to build the HTTP client")?;
    let response = client
        .get(url.clone())
        .send()
        .await
        .with_context(|| format!("{url} did not answer"))?;
    anyhow::ensure!(
        response.status().as_u16() == 200,
        "{url} answered {}",
        response.status()
    );
    Ok(())
}
