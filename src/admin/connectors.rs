//! Connectors: create, list, get, update (including secret rotation), disable, delete.
//! Secrets are write-only: accepted on create and update, never returned or logged.

use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use secrecy::SecretString;
use serde::Deserialize;
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use super::auth::TenantAdmin;
use super::{ApiJson, ApiJsonError, ApiPath, ApiQuery};
use crate::db::connectors::{ConnectorChange, ConnectorSummary, DeleteOutcome, NewConnector};
use crate::db::{self, TenantTx};
use crate::domain::{ConnectorId, Platform, TelegramDelivery, UnlinkedPolicy};
use crate::error::AppError;
use crate::state::AppState;

/// How long a rotated-out verification secret stays valid by default: Slack keeps the
/// previous signing secret valid for 24 hours.
const DEFAULT_GRACE_SECS: u64 = 24 * 3600;
/// The longest a rotated-out secret may stay valid: 30 days. A platform moves to a new
/// secret within minutes; a longer grace only keeps a possibly leaked secret alive.
const MAX_GRACE_SECS: u64 = 30 * 24 * 3600;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ConnectorIn {
    #[schema(value_type = String, example = "slack")]
    pub platform: Platform,
    #[serde(default)]
    pub name: String,
    /// Slack signing secret, Meta app secret or Telegram secret_token.
    #[schema(value_type = String, format = Password)]
    pub verification_secret: SecretString,
    #[schema(value_type = Option<String>, format = Password)]
    pub verify_token: Option<SecretString>,
    #[schema(value_type = Option<String>, format = Password)]
    pub outbound_token: Option<SecretString>,
    /// Platform API base URL override (tests, proxies): http or https, every address of its
    /// host public unless the operator's `CB_EGRESS_ALLOW` allows it. An empty string clears it.
    pub api_base_url: Option<String>,
    pub external_id: Option<String>,
    pub app_id: Option<String>,
    pub bot_user_id: Option<String>,
    pub bot_id: Option<String>,
    #[schema(value_type = Option<String>, example = "deny")]
    pub unlinked_policy: Option<UnlinkedPolicy>,
    #[schema(value_type = Option<String>, example = "at_most_once")]
    pub telegram_delivery: Option<TelegramDelivery>,
    pub unlinked_notice: Option<String>,
    /// Convert the agent's Markdown to the platform's formatting (default); `false` sends
    /// replies as plain text.
    pub format_markdown: Option<bool>,
}

/// Fields to change; absent fields stay. An empty string clears an optional text field.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ConnectorPatch {
    pub name: Option<String>,
    pub enabled: Option<bool>,
    /// A new verification secret; the current one stays valid for
    /// `previous_secret_grace_secs` (default 24 h).
    #[schema(value_type = Option<String>, format = Password)]
    pub verification_secret: Option<SecretString>,
    /// Seconds the replaced secret stays valid: 0 to 2592000 (30 days).
    #[schema(maximum = 2592000)]
    pub previous_secret_grace_secs: Option<u64>,
    #[schema(value_type = Option<String>, format = Password)]
    pub verify_token: Option<SecretString>,
    #[schema(value_type = Option<String>, format = Password)]
    pub outbound_token: Option<SecretString>,
    /// Platform API base URL override (tests, proxies): http or https, every address of its
    /// host public unless the operator's `CB_EGRESS_ALLOW` allows it. An empty string clears it.
    pub api_base_url: Option<String>,
    pub external_id: Option<String>,
    pub app_id: Option<String>,
    pub bot_user_id: Option<String>,
    pub bot_id: Option<String>,
    #[schema(value_type = Option<String>)]
    pub unlinked_policy: Option<UnlinkedPolicy>,
    #[schema(value_type = Option<String>)]
    pub telegram_delivery: Option<TelegramDelivery>,
    pub unlinked_notice: Option<String>,
    /// Convert the agent's Markdown to the platform's formatting, or send plain text.
    pub format_markdown: Option<bool>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct DeleteQuery {
    /// Also delete the connector's message history (otherwise a connector with history is
    /// kept and the answer is 409).
    #[serde(default)]
    pub purge: bool,
}

fn non_empty_secret(secret: &SecretString, what: &str) -> Result<(), AppError> {
    use secrecy::ExposeSecret;
    if secret.expose_secret().trim().is_empty() {
        return Err(AppError::Unprocessable(format!("{what} must not be empty")));
    }
    Ok(())
}

async fn summary_or_404(tx: &mut TenantTx, id: ConnectorId) -> Result<ConnectorSummary, AppError> {
    db::connectors::summary(tx, id)
        .await?
        .ok_or(AppError::NotFound("connector"))
}

/// The tenant's connectors.
#[utoipa::path(get, path = "/v1/admin/connectors", operation_id = "list_connectors", tag = "connectors", security(("api_key" = [])),
    responses((status = 200, body = Vec<ConnectorSummary>), (status = 401, body = ApiJsonError)))]
pub async fn list(
    State(state): State<AppState>,
    admin: TenantAdmin,
) -> Result<Json<Vec<ConnectorSummary>>, AppError> {
    let mut tx = TenantTx::begin(&state.pool, admin.tenant).await?;
    let connectors = db::connectors::summaries(&mut tx).await?;
    tx.commit().await?;
    Ok(Json(connectors))
}

/// Add a connector. The answer carries no secret.
#[utoipa::path(post, path = "/v1/admin/connectors", operation_id = "create_connector", tag = "connectors", security(("api_key" = [])), request_body = ConnectorIn,
    responses((status = 201, body = ConnectorSummary), (status = 400, body = ApiJsonError), (status = 401, body = ApiJsonError), (status = 413, body = ApiJsonError), (status = 422, body = ApiJsonError)))]
pub async fn create(
    State(state): State<AppState>,
    admin: TenantAdmin,
    ApiJson(input): ApiJson<ConnectorIn>,
) -> Result<(StatusCode, Json<ConnectorSummary>), AppError> {
    non_empty_secret(&input.verification_secret, "verification_secret")?;
    super::check_egress(&state, "api_base_url", input.api_base_url.as_deref()).await?;
    let new = NewConnector {
        platform: input.platform,
        name: input.name,
        external_id: input.external_id,
        app_id: input.app_id,
        bot_user_id: input.bot_user_id,
        bot_id: input.bot_id,
        verification_secret: input.verification_secret,
        verify_token: input.verify_token,
        outbound_token: input.outbound_token,
        api_base_url: input.api_base_url,
        unlinked_policy: input.unlinked_policy.unwrap_or_default(),
        telegram_delivery: input.telegram_delivery.unwrap_or_default(),
        unlinked_notice: input.unlinked_notice,
        format_markdown: input.format_markdown.unwrap_or(true),
    };
    let mut tx = TenantTx::begin(&state.pool, admin.tenant).await?;
    let connector = db::connectors::insert(&mut tx, &new).await?;
    let summary = summary_or_404(&mut tx, connector.id).await?;
    tx.commit().await?;
    Ok((StatusCode::CREATED, Json(summary)))
}

/// One connector.
#[utoipa::path(get, path = "/v1/admin/connectors/{id}", operation_id = "get_connector", tag = "connectors", security(("api_key" = [])),
    params(("id" = Uuid, Path)),
    responses((status = 200, body = ConnectorSummary), (status = 401, body = ApiJsonError), (status = 404, body = ApiJsonError)))]
pub async fn get(
    State(state): State<AppState>,
    admin: TenantAdmin,
    ApiPath(id): ApiPath<Uuid>,
) -> Result<Json<ConnectorSummary>, AppError> {
    let mut tx = TenantTx::begin(&state.pool, admin.tenant).await?;
    let summary = summary_or_404(&mut tx, ConnectorId(id)).await?;
    tx.commit().await?;
    Ok(Json(summary))
}

/// Change a connector; a new `verification_secret` rotates it with a grace period.
#[utoipa::path(patch, path = "/v1/admin/connectors/{id}", operation_id = "update_connector", tag = "connectors", security(("api_key" = [])),
    params(("id" = Uuid, Path)), request_body = ConnectorPatch,
    responses((status = 200, body = ConnectorSummary), (status = 400, body = ApiJsonError), (status = 401, body = ApiJsonError), (status = 404, body = ApiJsonError), (status = 413, body = ApiJsonError), (status = 422, body = ApiJsonError)))]
pub async fn update(
    State(state): State<AppState>,
    admin: TenantAdmin,
    ApiPath(id): ApiPath<Uuid>,
    ApiJson(patch): ApiJson<ConnectorPatch>,
) -> Result<Json<ConnectorSummary>, AppError> {
    if let Some(secret) = &patch.verification_secret {
        non_empty_secret(secret, "verification_secret")?;
    }
    super::check_egress(&state, "api_base_url", patch.api_base_url.as_deref()).await?;
    if patch.name.as_deref().is_some_and(str::is_empty) {
        return Err(AppError::Unprocessable("name must not be empty".into()));
    }
    let grace = patch.previous_secret_grace_secs.unwrap_or(DEFAULT_GRACE_SECS);
    if grace > MAX_GRACE_SECS {
        return Err(AppError::Unprocessable(format!(
            "previous_secret_grace_secs must be at most {MAX_GRACE_SECS} (30 days)"
        )));
    }
    let grace = Duration::from_secs(grace);
    let change = ConnectorChange {
        name: patch.name,
        external_id: patch.external_id,
        app_id: patch.app_id,
        bot_user_id: patch.bot_user_id,
        bot_id: patch.bot_id,
        api_base_url: patch.api_base_url,
        enabled: patch.enabled,
        format_markdown: patch.format_markdown,
        unlinked_policy: patch.unlinked_policy,
        telegram_delivery: patch.telegram_delivery,
        unlinked_notice: patch.unlinked_notice,
        verify_token: patch.verify_token,
        outbound_token: patch.outbound_token,
        rotate_secret: patch.verification_secret.map(|secret| (secret, grace)),
    };
    apply(&state, admin, ConnectorId(id), &change).await
}

async fn apply(
    state: &AppState,
    admin: TenantAdmin,
    id: ConnectorId,
    change: &ConnectorChange,
) -> Result<Json<ConnectorSummary>, AppError> {
    let mut tx = TenantTx::begin(&state.pool, admin.tenant).await?;
    if !db::connectors::update(&mut tx, id, change).await? {
        return Err(AppError::NotFound("connector"));
    }
    let summary = summary_or_404(&mut tx, id).await?;
    tx.commit().await?;
    state.cache.forget_connector(admin.tenant, id);
    Ok(Json(summary))
}

/// Stop accepting webhooks for a connector (they answer 404); history is kept.
#[utoipa::path(post, path = "/v1/admin/connectors/{id}/disable", operation_id = "disable_connector", tag = "connectors", security(("api_key" = [])),
    params(("id" = Uuid, Path)),
    responses((status = 200, body = ConnectorSummary), (status = 401, body = ApiJsonError), (status = 404, body = ApiJsonError)))]
pub async fn disable(
    State(state): State<AppState>,
    admin: TenantAdmin,
    ApiPath(id): ApiPath<Uuid>,
) -> Result<Json<ConnectorSummary>, AppError> {
    let change = ConnectorChange {
        enabled: Some(false),
        ..Default::default()
    };
    apply(&state, admin, ConnectorId(id), &change).await
}

/// Delete a connector (with `purge=true`, its message history too).
#[utoipa::path(delete, path = "/v1/admin/connectors/{id}", operation_id = "delete_connector", tag = "connectors", security(("api_key" = [])),
    params(("id" = Uuid, Path), DeleteQuery),
    responses((status = 204), (status = 401, body = ApiJsonError), (status = 404, body = ApiJsonError), (status = 409, body = ApiJsonError), (status = 422, body = ApiJsonError)))]
pub async fn delete(
    State(state): State<AppState>,
    admin: TenantAdmin,
    ApiPath(id): ApiPath<Uuid>,
    ApiQuery(query): ApiQuery<DeleteQuery>,
) -> Result<StatusCode, AppError> {
    let mut tx = TenantTx::begin(&state.pool, admin.tenant).await?;
    let outcome = db::connectors::delete(&mut tx, ConnectorId(id), query.purge).await?;
    tx.commit().await?;
    state.cache.forget_connector(admin.tenant, ConnectorId(id));
    match outcome {
        DeleteOutcome::Deleted => Ok(StatusCode::NO_CONTENT),
        DeleteOutcome::NotFound => Err(AppError::NotFound("connector")),
        DeleteOutcome::HasHistory => Err(AppError::Conflict(
            "the connector has message history; disable it, or delete with purge=true",
        )),
    }
}
