//! Links: which tenant user a platform sender is.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;
use utoipa::ToSchema;

use super::auth::TenantAdmin;
use super::{ApiJson, ApiJsonError, ApiPath};
use crate::db::links::Link;
use crate::db::{self, TenantTx};
use crate::domain::Platform;
use crate::error::AppError;
use crate::state::AppState;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LinkIn {
    #[schema(value_type = String, example = "telegram")]
    pub platform: Platform,
    pub platform_user_id: String,
    pub user_id: String,
}

/// The tenant's links.
#[utoipa::path(get, path = "/v1/admin/links", operation_id = "list_links", tag = "links", security(("api_key" = [])),
    responses((status = 200, body = Vec<Link>), (status = 401, body = ApiJsonError)))]
pub async fn list(State(state): State<AppState>, admin: TenantAdmin) -> Result<Json<Vec<Link>>, AppError> {
    let mut tx = TenantTx::begin(&state.pool, admin.tenant).await?;
    let links = db::links::list(&mut tx).await?;
    tx.commit().await?;
    Ok(Json(links))
}

/// Link a sender to a user (re-points an existing link).
#[utoipa::path(post, path = "/v1/admin/links", operation_id = "create_link", tag = "links", security(("api_key" = [])), request_body = LinkIn,
    responses((status = 201, body = Link), (status = 400, body = ApiJsonError), (status = 401, body = ApiJsonError), (status = 413, body = ApiJsonError), (status = 422, body = ApiJsonError)))]
pub async fn create(
    State(state): State<AppState>,
    admin: TenantAdmin,
    ApiJson(input): ApiJson<LinkIn>,
) -> Result<(StatusCode, Json<Link>), AppError> {
    if input.platform_user_id.trim().is_empty() || input.user_id.trim().is_empty() {
        return Err(AppError::Unprocessable(
            "platform_user_id and user_id must not be empty".into(),
        ));
    }
    let mut tx = TenantTx::begin(&state.pool, admin.tenant).await?;
    let link = db::links::upsert(&mut tx, input.platform, &input.platform_user_id, &input.user_id).await?;
    tx.commit().await?;
    Ok((StatusCode::CREATED, Json(link)))
}

/// Unlink a sender.
#[utoipa::path(delete, path = "/v1/admin/links/{platform}/{platform_user_id}", operation_id = "delete_link", tag = "links", security(("api_key" = [])),
    params(("platform" = String, Path), ("platform_user_id" = String, Path)),
    responses((status = 204), (status = 400, body = ApiJsonError), (status = 401, body = ApiJsonError), (status = 404, body = ApiJsonError)))]
pub async fn delete(
    State(state): State<AppState>,
    admin: TenantAdmin,
    ApiPath((platform, platform_user_id)): ApiPath<(String, String)>,
) -> Result<StatusCode, AppError> {
    let platform: Platform = platform.parse().map_err(|_| AppError::NotFound("link"))?;
    let mut tx = TenantTx::begin(&state.pool, admin.tenant).await?;
    let deleted = db::links::delete(&mut tx, platform, &platform_user_id).await?;
    tx.commit().await?;
    if deleted {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(AppError::NotFound("link"))
    }
}
