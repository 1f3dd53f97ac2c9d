//! Operator endpoints (the `CB_OPERATOR_TOKEN`): create tenants, issue and revoke tenant
//! admin keys. The CLI's `tenant create` and `key issue|revoke` call the same functions.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};
use sqlx::PgPool;
use utoipa::ToSchema;
use uuid::Uuid;

use super::auth::{issue_key, Operator};
use super::{schema, ApiJson, ApiJsonError, ApiPath};
use crate::db::api_keys::ApiKeyRow;
use crate::db::{self};
use crate::domain::TenantId;
use crate::error::AppError;
use crate::provision::{self, TenantCreated};
use crate::state::AppState;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"slug": "acme", "name": "Acme Support", "agent_url": "https://agent.example.com/v1/turn"}))]
pub struct TenantIn {
    /// Lowercase letters, digits and dashes, starting with a letter or digit; unique (409).
    #[schema(max_length = 63, pattern = r"^[a-z0-9][a-z0-9-]{0,62}$")]
    pub slug: String,
    /// Defaults to the slug.
    #[schema(max_length = 200, pattern = r"^[^\u0000]*$")]
    pub name: Option<String>,
    /// The agent proxy: http or https, every address of its host public unless the
    /// operator's `CB_EGRESS_ALLOW` allows it (else 422). Absent or empty: the server's
    /// CB_AGENT_URL.
    #[schema(max_length = 2048, pattern = r"^$|^[hH][tT][tT][pP][sS]?://[^\u0000]+$")]
    pub agent_url: Option<String>,
}

impl TenantIn {
    fn check(&self) -> Result<(), AppError> {
        schema::check_optional_text("name", self.name.as_deref(), schema::NAME_MAX)?;
        schema::check_optional_text("agent_url", self.agent_url.as_deref(), schema::URL_MAX)
    }
}

/// What the operator sets on a tenant.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"max_in_flight": 64}))]
pub struct TenantLimitsIn {
    /// Most of this tenant's jobs one instance keeps in flight; `null` for the instance
    /// default (`CB_TENANT_SHARE_PERCENT` of `CB_MAX_IN_FLIGHT`).
    #[schema(minimum = 1, maximum = 2147483647)]
    #[serde(default, deserialize_with = "schema::optional_integer")]
    pub max_in_flight: Option<i32>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct TenantLimitsOut {
    pub tenant_id: Uuid,
    pub slug: String,
    pub max_in_flight: Option<i32>,
}

#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"name": "ci"}))]
pub struct KeyIn {
    /// What the key is for, to recognise it in listings.
    #[serde(default)]
    #[schema(max_length = 200, pattern = r"^[^\u0000]*$")]
    pub name: String,
}

/// A new tenant. `dispatch_secret` (the key agents verify dispatches with) is shown this once.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({"tenant_id": "0192f0c4-7a6e-7b3a-9c1d-2e4f5a6b7c8d", "slug": "acme", "name": "Acme Support",
    "agent_url": "https://agent.example.com/v1/turn", "dispatch_secret": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}))]
pub struct TenantCreatedOut {
    pub tenant_id: Uuid,
    pub slug: String,
    pub name: String,
    pub agent_url: Option<String>,
    pub dispatch_secret: String,
}

impl From<TenantCreated> for TenantCreatedOut {
    fn from(created: TenantCreated) -> Self {
        Self {
            tenant_id: created.tenant_id.0,
            slug: created.slug,
            name: created.name,
            agent_url: created.agent_url,
            dispatch_secret: created.dispatch_secret,
        }
    }
}

/// A new key. `key` is shown this once; only its hash is stored.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({"id": "0192f0c4-2222-7b3a-9c1d-2e4f5a6b7c8d", "tenant_id": "0192f0c4-7a6e-7b3a-9c1d-2e4f5a6b7c8d",
    "name": "ci", "prefix": "Xk3p9QaZ", "key": "cbk_Xk3p9QaZ_N2l0aGVyZS1pcy1uby1yZWFsLWtleS1oZXJlLTAwMDAwMA"}))]
pub struct KeyIssuedOut {
    pub id: Uuid,
    pub tenant_id: Uuid,
    pub name: String,
    pub prefix: String,
    pub key: String,
}

/// Issues a tenant admin key. 404 for an unknown tenant.
pub async fn issue(pool: &PgPool, tenant: TenantId, name: &str) -> Result<KeyIssuedOut, AppError> {
    let issued = issue_key();
    let mut conn = pool.acquire().await?;
    let row = db::api_keys::insert(&mut conn, tenant, name, &issued.prefix, &issued.hash)
        .await
        .map_err(|err| match provision::constraint(&err) {
            Some("api_keys_tenant_id_fkey") => AppError::NotFound("tenant"),
            _ => err.into(),
        })?;
    Ok(KeyIssuedOut {
        id: row.id,
        tenant_id: tenant.0,
        name: row.name,
        prefix: row.prefix,
        key: issued.key,
    })
}

/// Revokes a key at once: its next request answers 401.
pub async fn revoke(pool: &PgPool, id: Uuid) -> Result<ApiKeyRow, AppError> {
    let mut conn = pool.acquire().await?;
    db::api_keys::revoke(&mut conn, id)
        .await?
        .ok_or(AppError::NotFound("key"))
}

/// Create a tenant; the answer holds its dispatch secret, shown this once.
#[utoipa::path(post, path = "/v1/operator/tenants", operation_id = "create_tenant", tag = "operator", security(("operator_token" = [])), request_body = TenantIn,
    responses((status = 201, body = TenantCreatedOut), (status = 400, body = ApiJsonError), (status = 401, body = ApiJsonError), (status = 403, body = ApiJsonError), (status = 409, body = ApiJsonError), (status = 413, body = ApiJsonError), (status = 422, body = ApiJsonError)))]
pub async fn create_tenant(
    State(state): State<AppState>,
    _operator: Operator,
    ApiJson(input): ApiJson<TenantIn>,
) -> Result<(StatusCode, Json<TenantCreatedOut>), AppError> {
    input.check()?;
    super::check_egress(&state, "agent_url", input.agent_url.as_deref()).await?;
    let name = input.name.clone().unwrap_or_else(|| input.slug.clone());
    let created = provision::create_tenant(
        &state.pool,
        &state.settings.database.secrets,
        &input.slug,
        &name,
        input.agent_url.as_deref(),
    )
    .await
    .map_err(|err| match err.to_string() {
        m if m.contains("already exists") => AppError::Conflict("a tenant with this slug already exists"),
        m if m.contains("slug must") => AppError::Unprocessable(m),
        _ => AppError::Internal(err),
    })?;
    Ok((StatusCode::CREATED, Json(created.into())))
}

/// A tenant's keys (never the keys themselves).
#[utoipa::path(get, path = "/v1/operator/tenants/{tenant_id}/keys", operation_id = "list_tenant_keys", tag = "operator", security(("operator_token" = [])),
    params(("tenant_id" = Uuid, Path)),
    responses((status = 200, body = Vec<ApiKeyRow>), (status = 401, body = ApiJsonError), (status = 403, body = ApiJsonError), (status = 404, body = ApiJsonError)))]
pub async fn list_keys(
    State(state): State<AppState>,
    _operator: Operator,
    ApiPath(tenant): ApiPath<Uuid>,
) -> Result<Json<Vec<ApiKeyRow>>, AppError> {
    let mut conn = state.pool.acquire().await?;
    Ok(Json(db::api_keys::list(&mut conn, TenantId(tenant)).await?))
}

/// Issue a tenant admin key.
#[utoipa::path(post, path = "/v1/operator/tenants/{tenant_id}/keys", operation_id = "issue_tenant_key", tag = "operator", security(("operator_token" = [])),
    params(("tenant_id" = Uuid, Path)), request_body = KeyIn,
    responses((status = 201, body = KeyIssuedOut), (status = 400, body = ApiJsonError), (status = 401, body = ApiJsonError), (status = 403, body = ApiJsonError), (status = 404, body = ApiJsonError), (status = 413, body = ApiJsonError), (status = 422, body = ApiJsonError)))]
pub async fn issue_key_route(
    State(state): State<AppState>,
    _operator: Operator,
    ApiPath(tenant): ApiPath<Uuid>,
    ApiJson(input): ApiJson<KeyIn>,
) -> Result<(StatusCode, Json<KeyIssuedOut>), AppError> {
    schema::check_text("name", &input.name, schema::NAME_MAX)?;
    Ok((
        StatusCode::CREATED,
        Json(issue(&state.pool, TenantId(tenant), &input.name).await?),
    ))
}

/// Revoke a key.
#[utoipa::path(delete, path = "/v1/operator/keys/{key_id}", operation_id = "revoke_key", tag = "operator", security(("operator_token" = [])),
    params(("key_id" = Uuid, Path)),
    responses((status = 200, body = ApiKeyRow), (status = 401, body = ApiJsonError), (status = 403, body = ApiJsonError), (status = 404, body = ApiJsonError)))]
pub async fn revoke_key(
    State(state): State<AppState>,
    _operator: Operator,
    ApiPath(id): ApiPath<Uuid>,
) -> Result<Json<ApiKeyRow>, AppError> {
    Ok(Json(revoke(&state.pool, id).await?))
}

/// Set a tenant's limits (its share of each instance's in-flight dispatches). Instances
/// apply it within `CB_CONFIG_CACHE_SECS`.
#[utoipa::path(patch, path = "/v1/operator/tenants/{tenant_id}", operation_id = "update_tenant_limits", tag = "operator", security(("operator_token" = [])),
    params(("tenant_id" = Uuid, Path)), request_body = TenantLimitsIn,
    responses((status = 200, body = TenantLimitsOut), (status = 401, body = ApiJsonError), (status = 403, body = ApiJsonError), (status = 404, body = ApiJsonError), (status = 413, body = ApiJsonError), (status = 422, body = ApiJsonError)))]
pub async fn update_tenant(
    State(state): State<AppState>,
    _operator: Operator,
    ApiPath(tenant): ApiPath<Uuid>,
    ApiJson(input): ApiJson<TenantLimitsIn>,
) -> Result<Json<TenantLimitsOut>, AppError> {
    if input.max_in_flight.is_some_and(|n| n < 1) {
        return Err(AppError::Unprocessable(
            "max_in_flight must be at least 1, or null".into(),
        ));
    }
    let mut conn = state.pool.acquire().await?;
    let row = db::tenants::set_max_in_flight(
        &mut conn,
        &state.settings.database.secrets,
        TenantId(tenant),
        input.max_in_flight,
    )
    .await?
    .ok_or(AppError::NotFound("tenant"))?;
    state.cache.forget_tenant(row.id);
    Ok(Json(TenantLimitsOut {
        tenant_id: row.id.0,
        slug: row.slug,
        max_in_flight: row.max_in_flight,
    }))
}
