//! Links: which tenant user a platform sender is.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};
use sqlx::PgPool;
use utoipa::{IntoParams, ToSchema};

use super::auth::TenantAdmin;
use super::schema;
use crate::db::audit::{Actor, AuditAction, AuditEntry};
use crate::db::{self, TenantTx};
use crate::domain::{Platform, TenantId};
use crate::error::{ApiJsonError, AppError};
use crate::http::extract::{ApiJson, ApiPath};
use crate::http::state::AppState;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"platform": "telegram", "platform_user_id": "408258968", "user_id": "alice"}))]
pub struct LinkIn {
    #[schema(schema_with = schema::platform)]
    pub platform: Platform,
    /// The sender's id on the platform (Slack `U…`, WhatsApp phone number, Telegram user id).
    #[schema(
        min_length = 1,
        max_length = 256,
        pattern = r"^[^\u0000]*[^\u0000\t-\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000][^\u0000]*$"
    )]
    pub platform_user_id: String,
    /// The tenant's own id for the person.
    #[schema(
        min_length = 1,
        max_length = 256,
        pattern = r"^[^\u0000]*[^\u0000\t-\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000][^\u0000]*$"
    )]
    pub user_id: String,
}

impl LinkIn {
    fn check(&self) -> Result<(), AppError> {
        if self.platform_user_id.trim().is_empty() || self.user_id.trim().is_empty() {
            return Err(AppError::Unprocessable(
                "platform_user_id and user_id must not be empty".into(),
            ));
        }
        schema::check_text("platform_user_id", &self.platform_user_id, schema::ID_MAX)?;
        schema::check_text("user_id", &self.user_id, schema::ID_MAX)?;
        Ok(())
    }
}

/// The link a delete names. A platform the document does not list, or an id it does not
/// allow, names no link: 404.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct LinkPath {
    #[param(schema_with = schema::platform)]
    pub platform: String,
    #[param(max_length = 256, pattern = r"^[^\u0000]*$")]
    pub platform_user_id: String,
}

// The API's view of `db::links::Link`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Link {
    pub platform: String,
    pub platform_user_id: String,
    pub user_id: String,
    pub created_at: chrono::DateTime<chrono::Utc>,
}

impl From<db::links::Link> for Link {
    fn from(row: db::links::Link) -> Self {
        let db::links::Link {
            platform,
            platform_user_id,
            user_id,
            created_at,
        } = row;
        Self {
            platform,
            platform_user_id,
            user_id,
            created_at,
        }
    }
}

/// The tenant's links.
#[utoipa::path(get, path = "/v1/admin/links", operation_id = "list_links", tag = "links", security(("api_key" = [])),
    responses((status = 200, body = Vec<Link>), (status = 401, body = ApiJsonError)))]
pub async fn list(State(state): State<AppState>, admin: TenantAdmin) -> Result<Json<Vec<Link>>, AppError> {
    let mut tx = TenantTx::begin(&state.pool, admin.tenant).await?;
    let links = db::links::list(&mut tx).await?;
    tx.commit().await?;
    Ok(Json(links.into_iter().map(Link::from).collect()))
}

/// Link a sender to a user (re-points an existing link).
#[utoipa::path(post, path = "/v1/admin/links", operation_id = "create_link", tag = "links", security(("api_key" = [])), request_body = LinkIn,
    responses((status = 201, body = Link), (status = 400, body = ApiJsonError), (status = 401, body = ApiJsonError), (status = 413, body = ApiJsonError), (status = 422, body = ApiJsonError)))]
pub async fn create(
    State(state): State<AppState>,
    admin: TenantAdmin,
    ApiJson(input): ApiJson<LinkIn>,
) -> Result<(StatusCode, Json<Link>), AppError> {
    let link = set_link(&state.pool, admin.tenant, Actor::ApiKey(admin.key_id), &input).await?;
    Ok((StatusCode::CREATED, Json(link.into())))
}

/// The API's create and the console's: checks, link and audit record in one transaction.
pub async fn set_link(
    pool: &PgPool,
    tenant: TenantId,
    actor: Actor,
    input: &LinkIn,
) -> Result<db::links::Link, AppError> {
    input.check()?;
    let mut tx = TenantTx::begin(pool, tenant).await?;
    let link = db::links::upsert(&mut tx, input.platform, &input.platform_user_id, &input.user_id).await?;
    let target = format!("{}:{}", input.platform, input.platform_user_id);
    let details = serde_json::json!({"user_id": input.user_id});
    let entry = AuditEntry::new(actor, AuditAction::LinkSet, target, details);
    db::audit::record(&mut tx, &entry).await?;
    tx.commit().await?;
    Ok(link)
}

/// Unlink a sender.
#[utoipa::path(delete, path = "/v1/admin/links/{platform}/{platform_user_id}", operation_id = "delete_link", tag = "links", security(("api_key" = [])),
    params(LinkPath),
    responses((status = 204), (status = 401, body = ApiJsonError), (status = 404, body = ApiJsonError)))]
pub async fn delete(
    State(state): State<AppState>,
    admin: TenantAdmin,
    ApiPath(LinkPath {
        platform,
        platform_user_id,
    }): ApiPath<LinkPath>,
) -> Result<StatusCode, AppError> {
    delete_link(
        &state.pool,
        admin.tenant,
        Actor::ApiKey(admin.key_id),
        &platform,
        &platform_user_id,
    )
    .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The API's delete and the console's; whatever names no link is 404.
pub async fn delete_link(
    pool: &PgPool,
    tenant: TenantId,
    actor: Actor,
    platform: &str,
    platform_user_id: &str,
) -> Result<(), AppError> {
    let platform: Platform = platform.parse().map_err(|_| AppError::NotFound("link"))?;
    if !schema::names_something(platform_user_id, schema::ID_MAX) {
        return Err(AppError::NotFound("link"));
    }
    let mut tx = TenantTx::begin(pool, tenant).await?;
    let deleted = db::links::delete(&mut tx, platform, platform_user_id).await?;
    if !deleted {
        return Err(AppError::NotFound("link"));
    }
    let target = format!("{platform}:{platform_user_id}");
    let entry = AuditEntry::new(actor, AuditAction::LinkDelete, target, serde_json::json!({}));
    db::audit::record(&mut tx, &entry).await?;
    tx.commit().await?;
    Ok(())
}
