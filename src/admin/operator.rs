//! Operator endpoints (the `CB_OPERATOR_TOKEN`): tenants and their admin keys. The CLI's
//! `tenant create` and `key issue|revoke` call the same functions. `{tenant}` is an id or a
//! slug, never both: no slug has a UUID's form (docs/admin.md#admin-api-and-cli).

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};
use sqlx::PgPool;
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use super::auth::{issue_key, Operator};
use super::schema;
use crate::db::audit::{Actor, AuditAction, AuditEntry};
use crate::db::tenants::{OperatorChange, TenantRef, TenantSummary};
use crate::db::{self, TenantTx};
use crate::domain::{HistoryScopeSetting, TenantId};
use crate::error::{ApiJsonError, AppError};
use crate::http::extract::{ApiJson, ApiPath, ApiQuery};
use crate::http::state::AppState;
use crate::provision::{self, TenantCreated};

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"slug": "acme", "name": "Acme Support", "agent_url": "https://agent.example.com/v1/turn"}))]
pub struct TenantIn {
    /// Lowercase letters, digits and dashes, starting with a letter or digit; unique (409);
    /// not of UUID form (422: `{tenant}` in a path would read it as an id).
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
        schema::check_optional_text("agent_url", self.agent_url.as_deref(), schema::URL_MAX)?;
        Ok(())
    }
}

/// What the operator changes of a tenant; absent fields stay as they are.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"max_in_flight": 64, "history_scope": "private_aware"}))]
pub struct OperatorTenantPatch {
    /// Not blank.
    #[schema(
        max_length = 200,
        pattern = r"^[^\u0000]*[^\u0000\t-\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000][^\u0000]*$"
    )]
    pub name: Option<String>,
    /// Most of this tenant's jobs one instance keeps in flight; `null` for the instance
    /// default (`CB_TENANT_SHARE_PERCENT` of `CB_MAX_IN_FLIGHT`).
    #[schema(value_type = Option<i32>, minimum = 1, maximum = 2147483647)]
    #[serde(default, deserialize_with = "present_integer")]
    pub max_in_flight: Option<Option<i32>>,
    /// Which earlier turns of a user the agent gets as history
    /// (docs/agent.md#history-scope-what-the-agent-sees-of-earlier-turns); the tenant's
    /// admins can change it too.
    pub history_scope: Option<HistoryScopeSetting>,
}

impl OperatorTenantPatch {
    fn fields(&self) -> Vec<&'static str> {
        [
            ("name", self.name.is_some()),
            ("max_in_flight", self.max_in_flight.is_some()),
            ("history_scope", self.history_scope.is_some()),
        ]
        .into_iter()
        .filter_map(|(name, given)| given.then_some(name))
        .collect()
    }
}

/// A field that may be absent (keep), `null` (back to the default) or a number.
fn present_integer<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Option<i32>>, D::Error> {
    schema::optional_integer(deserializer).map(Some)
}

impl OperatorTenantPatch {
    fn check(&self) -> Result<(), AppError> {
        if self.name.as_deref().is_some_and(|n| n.trim().is_empty()) {
            return Err(AppError::Unprocessable("name must not be empty".into()));
        }
        schema::check_optional_text("name", self.name.as_deref(), schema::NAME_MAX)?;
        if self.max_in_flight.flatten().is_some_and(|n| n < 1) {
            return Err(AppError::Unprocessable(
                "max_in_flight must be at least 1, or null".into(),
            ));
        }
        Ok(())
    }
}

/// A tenant as the operator sees it (no secrets).
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({"id": "0192f0c4-7a6e-7b3a-9c1d-2e4f5a6b7c8d", "slug": "acme", "name": "Acme Support",
    "agent_url": "https://agent.example.com/v1/turn", "max_in_flight": 64, "history_scope": "private_aware",
    "active_keys": 2, "created_at": "2026-11-22T09:30:00Z", "updated_at": "2026-11-22T10:00:00Z"}))]
pub struct OperatorTenantOut {
    pub id: Uuid,
    pub slug: String,
    pub name: String,
    /// The agent proxy; null means the server's CB_AGENT_URL.
    pub agent_url: Option<String>,
    /// The tenant's own in-flight cap; null: the instance default.
    pub max_in_flight: Option<i32>,
    pub history_scope: HistoryScopeSetting,
    /// Admin keys not revoked.
    pub active_keys: i64,
    pub created_at: chrono::DateTime<chrono::Utc>,
    pub updated_at: chrono::DateTime<chrono::Utc>,
}

impl From<TenantSummary> for OperatorTenantOut {
    fn from(row: TenantSummary) -> Self {
        Self {
            id: row.id.0,
            slug: row.slug,
            name: row.name,
            agent_url: row.agent_url,
            max_in_flight: row.max_in_flight,
            history_scope: row.history_scope,
            active_keys: row.active_keys,
            created_at: row.created_at,
            updated_at: row.updated_at,
        }
    }
}

const DEFAULT_TENANT_LIMIT: i64 = 50;
const MAX_TENANT_LIMIT: i64 = 200;

/// Paging through tenants by slug.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct TenantsQuery {
    /// `next_cursor` of the previous page (the last slug it held).
    #[param(max_length = 63, pattern = r"^[a-z0-9][a-z0-9-]{0,62}$")]
    pub cursor: Option<String>,
    /// Page size (default 50).
    #[param(minimum = 1, maximum = 200)]
    pub limit: Option<i64>,
}

#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({"items": [{"id": "0192f0c4-7a6e-7b3a-9c1d-2e4f5a6b7c8d", "slug": "acme", "name": "Acme Support",
    "agent_url": null, "max_in_flight": null, "history_scope": "private_aware", "active_keys": 1,
    "created_at": "2026-11-22T09:30:00Z", "updated_at": "2026-11-22T09:30:00Z"}], "next_cursor": "acme"}))]
pub struct TenantPage {
    /// Ordered by slug.
    pub items: Vec<OperatorTenantOut>,
    /// Pass as `cursor` for the next page; absent on the last page.
    pub next_cursor: Option<String>,
}

/// The `{tenant}` of the operator routes' paths. Text the pattern refuses names no tenant
/// (404, as an unknown id or slug).
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct TenantPath {
    /// The tenant's id (text of UUID form is always an id) or its slug.
    #[param(
        max_length = 63,
        pattern = r"^[a-z0-9][a-z0-9-]{0,62}$|^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
    )]
    pub tenant: String,
}

async fn resolve(pool: &PgPool, segment: &str) -> Result<TenantId, AppError> {
    let tenant = TenantRef::parse(segment).ok_or(AppError::NotFound("tenant"))?;
    let mut conn = pool.acquire().await?;
    db::tenants::resolve(&mut conn, &tenant)
        .await?
        .ok_or(AppError::NotFound("tenant"))
}

async fn summary_or_404(pool: &PgPool, tenant: &TenantRef) -> Result<OperatorTenantOut, AppError> {
    let mut conn = pool.acquire().await?;
    let row = db::tenants::summary(&mut conn, tenant)
        .await?
        .ok_or(AppError::NotFound("tenant"))?;
    Ok(row.into())
}

pub async fn list_tenant_page(pool: &PgPool, query: &TenantsQuery) -> Result<TenantPage, AppError> {
    let limit = query.limit.unwrap_or(DEFAULT_TENANT_LIMIT);
    if !(1..=MAX_TENANT_LIMIT).contains(&limit) {
        return Err(AppError::Unprocessable(format!(
            "limit must be between 1 and {MAX_TENANT_LIMIT}"
        )));
    }
    if query.cursor.as_deref().is_some_and(|c| !db::tenants::is_slug(c)) {
        return Err(AppError::Unprocessable("invalid cursor".into()));
    }
    let mut conn = pool.acquire().await?;
    let mut rows = db::tenants::list_summaries(&mut conn, query.cursor.as_deref(), limit + 1).await?;
    let more = rows.len() as i64 > limit;
    rows.truncate(limit as usize);
    let next_cursor = if more {
        rows.last().map(|row| row.slug.clone())
    } else {
        None
    };
    Ok(TenantPage {
        items: rows.into_iter().map(OperatorTenantOut::from).collect(),
        next_cursor,
    })
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

pub async fn issue(pool: &PgPool, tenant: TenantId, name: &str) -> Result<KeyIssuedOut, AppError> {
    issue_as(pool, tenant, name, Actor::Operator).await
}

/// Audited under `actor` in the same transaction.
pub async fn issue_as(
    pool: &PgPool,
    tenant: TenantId,
    name: &str,
    actor: Actor,
) -> Result<KeyIssuedOut, AppError> {
    let issued = issue_key();
    let mut tx = TenantTx::begin(pool, tenant).await?;
    let row = db::api_keys::insert(tx.conn(), tenant, name, &issued.prefix, &issued.hash)
        .await
        .map_err(|err| match provision::constraint(&err) {
            Some("api_keys_tenant_id_fkey") => AppError::NotFound("tenant"),
            _ => err.into(),
        })?;
    let details = serde_json::json!({"name": row.name, "prefix": row.prefix});
    let entry = AuditEntry::new(actor, AuditAction::KeyIssue, row.id.to_string(), details);
    db::audit::record(&mut tx, &entry).await?;
    tx.commit().await?;
    Ok(KeyIssuedOut {
        id: row.id,
        tenant_id: tenant.0,
        name: row.name,
        prefix: row.prefix,
        key: issued.key,
    })
}

// The API's view of `db::api_keys::ApiKeyRow`, under the row's name.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ApiKeyRow {
    pub id: Uuid,
    #[schema(value_type = Uuid)]
    pub tenant_id: TenantId,
    pub name: String,
    /// The visible start of the key (`cbk_<prefix>_…`), to recognise it in listings.
    pub prefix: String,
    pub created_at: chrono::DateTime<chrono::Utc>,
    pub last_used_at: Option<chrono::DateTime<chrono::Utc>>,
    pub revoked_at: Option<chrono::DateTime<chrono::Utc>>,
}

impl From<db::api_keys::ApiKeyRow> for ApiKeyRow {
    fn from(row: db::api_keys::ApiKeyRow) -> Self {
        let db::api_keys::ApiKeyRow {
            id,
            tenant_id,
            name,
            prefix,
            created_at,
            last_used_at,
            revoked_at,
        } = row;
        Self {
            id,
            tenant_id,
            name,
            prefix,
            created_at,
            last_used_at,
            revoked_at,
        }
    }
}

pub async fn revoke(pool: &PgPool, id: Uuid) -> Result<db::api_keys::ApiKeyRow, AppError> {
    revoke_as(pool, id, Actor::Operator).await
}

/// The key's next request answers 401.
pub async fn revoke_as(pool: &PgPool, id: Uuid, actor: Actor) -> Result<db::api_keys::ApiKeyRow, AppError> {
    let tenant = {
        let mut conn = pool.acquire().await?;
        db::api_keys::tenant_of(&mut conn, id).await?
    };
    let tenant = tenant.ok_or(AppError::NotFound("key"))?;
    let mut tx = TenantTx::begin(pool, tenant).await?;
    let row = db::api_keys::revoke(tx.conn(), id)
        .await?
        .ok_or(AppError::NotFound("key"))?;
    let details = serde_json::json!({"name": row.name, "prefix": row.prefix});
    let entry = AuditEntry::new(actor, AuditAction::KeyRevoke, row.id.to_string(), details);
    db::audit::record(&mut tx, &entry).await?;
    tx.commit().await?;
    Ok(row)
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
    schema::check_egress(&state, "agent_url", input.agent_url.as_deref()).await?;
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

/// A tenant's keys, oldest first (never the keys themselves).
#[utoipa::path(get, path = "/v1/operator/tenants/{tenant}/keys", operation_id = "list_tenant_keys", tag = "operator", security(("operator_token" = [])),
    params(TenantPath),
    responses((status = 200, body = Vec<ApiKeyRow>), (status = 401, body = ApiJsonError), (status = 403, body = ApiJsonError), (status = 404, body = ApiJsonError)))]
pub async fn list_keys(
    State(state): State<AppState>,
    _operator: Operator,
    ApiPath(TenantPath { tenant }): ApiPath<TenantPath>,
) -> Result<Json<Vec<ApiKeyRow>>, AppError> {
    let tenant = resolve(&state.pool, &tenant).await?;
    let mut conn = state.pool.acquire().await?;
    let keys = db::api_keys::list(&mut conn, tenant).await?;
    Ok(Json(keys.into_iter().map(ApiKeyRow::from).collect()))
}

/// Issue a tenant admin key; the answer holds the key, shown this once.
#[utoipa::path(post, path = "/v1/operator/tenants/{tenant}/keys", operation_id = "issue_tenant_key", tag = "operator", security(("operator_token" = [])),
    params(TenantPath), request_body = KeyIn,
    responses((status = 201, body = KeyIssuedOut), (status = 400, body = ApiJsonError), (status = 401, body = ApiJsonError), (status = 403, body = ApiJsonError), (status = 404, body = ApiJsonError), (status = 413, body = ApiJsonError), (status = 422, body = ApiJsonError)))]
pub async fn issue_key_route(
    State(state): State<AppState>,
    _operator: Operator,
    ApiPath(TenantPath { tenant }): ApiPath<TenantPath>,
    ApiJson(input): ApiJson<KeyIn>,
) -> Result<(StatusCode, Json<KeyIssuedOut>), AppError> {
    schema::check_text("name", &input.name, schema::NAME_MAX)?;
    let tenant = resolve(&state.pool, &tenant).await?;
    Ok((
        StatusCode::CREATED,
        Json(issue(&state.pool, tenant, &input.name).await?),
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
    Ok(Json(revoke(&state.pool, id).await?.into()))
}

/// Tenants, ordered by slug, a page at a time.
#[utoipa::path(get, path = "/v1/operator/tenants", operation_id = "list_tenants", tag = "operator", security(("operator_token" = [])),
    params(TenantsQuery),
    responses((status = 200, body = TenantPage), (status = 401, body = ApiJsonError), (status = 403, body = ApiJsonError), (status = 422, body = ApiJsonError)))]
pub async fn list_tenants(
    State(state): State<AppState>,
    _operator: Operator,
    ApiQuery(query): ApiQuery<TenantsQuery>,
) -> Result<Json<TenantPage>, AppError> {
    Ok(Json(list_tenant_page(&state.pool, &query).await?))
}

/// One tenant, by id or slug.
#[utoipa::path(get, path = "/v1/operator/tenants/{tenant}", operation_id = "operator_get_tenant", tag = "operator", security(("operator_token" = [])),
    params(TenantPath),
    responses((status = 200, body = OperatorTenantOut), (status = 401, body = ApiJsonError), (status = 403, body = ApiJsonError), (status = 404, body = ApiJsonError)))]
pub async fn get_tenant(
    State(state): State<AppState>,
    _operator: Operator,
    ApiPath(TenantPath { tenant }): ApiPath<TenantPath>,
) -> Result<Json<OperatorTenantOut>, AppError> {
    let tenant = TenantRef::parse(&tenant).ok_or(AppError::NotFound("tenant"))?;
    Ok(Json(summary_or_404(&state.pool, &tenant).await?))
}

/// Change a tenant's name, history scope or limits (its share of each instance's in-flight
/// dispatches); absent fields stay. Instances apply it within `CB_CONFIG_CACHE_SECS`.
#[utoipa::path(patch, path = "/v1/operator/tenants/{tenant}", operation_id = "update_tenant_settings", tag = "operator", security(("operator_token" = [])),
    params(TenantPath), request_body = OperatorTenantPatch,
    responses((status = 200, body = OperatorTenantOut), (status = 400, body = ApiJsonError), (status = 401, body = ApiJsonError), (status = 403, body = ApiJsonError), (status = 404, body = ApiJsonError), (status = 413, body = ApiJsonError), (status = 422, body = ApiJsonError)))]
pub async fn update_tenant(
    State(state): State<AppState>,
    _operator: Operator,
    ApiPath(TenantPath { tenant }): ApiPath<TenantPath>,
    ApiJson(patch): ApiJson<OperatorTenantPatch>,
) -> Result<Json<OperatorTenantOut>, AppError> {
    patch.check()?;
    let id = resolve(&state.pool, &tenant).await?;
    let change = OperatorChange {
        name: patch.name.as_deref(),
        history_scope: patch.history_scope,
        max_in_flight: patch.max_in_flight,
    };
    let mut tx = TenantTx::begin(&state.pool, id).await?;
    if !db::tenants::operator_update(tx.conn(), id, change).await? {
        return Err(AppError::NotFound("tenant"));
    }
    let details = serde_json::json!({"fields": patch.fields()});
    let entry = AuditEntry::new(Actor::Operator, AuditAction::TenantUpdate, "tenant", details);
    db::audit::record(&mut tx, &entry).await?;
    tx.commit().await?;
    state.cache.forget_tenant(id);
    Ok(Json(summary_or_404(&state.pool, &TenantRef::Id(id)).await?))
}
