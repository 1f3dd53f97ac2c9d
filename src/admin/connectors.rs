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
use super::schema;
use crate::db::audit::{Actor, AuditAction, AuditEntry};
use crate::db::connectors::{ConnectorChange, ConnectorSummary, DeleteOutcome, NewConnector};
use crate::db::{self, TenantTx};
use crate::domain::{ConnectorId, Platform, TelegramDelivery, TenantId, UnlinkedPolicy};
use crate::error::{ApiJsonError, AppError};
use crate::http::extract::{ApiJson, ApiPath, ApiQuery};
use crate::http::state::AppState;

/// How long a rotated-out verification secret stays valid by default: Slack keeps the
/// previous signing secret valid for 24 hours.
pub const DEFAULT_GRACE_SECS: u64 = 24 * 3600;
/// The longest a rotated-out secret may stay valid: 30 days. A platform moves to a new
/// secret within minutes; a longer grace only keeps a possibly leaked secret alive.
pub const MAX_GRACE_SECS: u64 = 30 * 24 * 3600;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"platform": "telegram", "name": "Support bot", "verification_secret": "tg-secret-token-1234",
    "outbound_token": "123456:ABC-DEF1234ghIkl-zyx57W2v1u123ew11", "external_id": "123456", "bot_user_id": "123456",
    "unlinked_policy": "deny", "telegram_delivery": "at_most_once"}))]
pub struct ConnectorIn {
    #[schema(schema_with = schema::platform)]
    pub platform: Platform,
    #[serde(default)]
    #[schema(max_length = 200, pattern = r"^[^\u0000]*$")]
    pub name: String,
    /// Slack signing secret, Meta app secret or Telegram secret_token. Not blank.
    #[schema(value_type = String, format = Password, max_length = 1024, pattern = r"^[^\u0000]*[^\u0000\t-\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000][^\u0000]*$")]
    pub verification_secret: SecretString,
    /// Meta's `hub.verify_token` (WhatsApp).
    #[schema(value_type = Option<String>, format = Password, max_length = 1024, pattern = r"^[^\u0000]*$")]
    pub verify_token: Option<SecretString>,
    /// Slack bot token, WhatsApp access token or Telegram bot token.
    #[schema(value_type = Option<String>, format = Password, max_length = 1024, pattern = r"^[^\u0000]*$")]
    pub outbound_token: Option<SecretString>,
    /// Platform API base URL override (tests, proxies): http or https, every address of its
    /// host public unless the operator's `CB_EGRESS_ALLOW` allows it (else 422).
    #[schema(max_length = 2048, pattern = r"^$|^[hH][tT][tT][pP][sS]?://[^\u0000]+$")]
    pub api_base_url: Option<String>,
    /// Slack team id, WhatsApp phone_number_id or Telegram bot id.
    #[schema(max_length = 256, pattern = r"^[^\u0000]*$")]
    pub external_id: Option<String>,
    /// Slack `api_app_id`.
    #[schema(max_length = 256, pattern = r"^[^\u0000]*$")]
    pub app_id: Option<String>,
    /// The bot's own user id: its messages are echoes, never dispatched.
    #[schema(max_length = 256, pattern = r"^[^\u0000]*$")]
    pub bot_user_id: Option<String>,
    /// Slack `bot_id` (`B…`) of the app.
    #[schema(max_length = 256, pattern = r"^[^\u0000]*$")]
    pub bot_id: Option<String>,
    /// Default `deny`.
    #[schema(schema_with = schema::optional_unlinked_policy)]
    pub unlinked_policy: Option<UnlinkedPolicy>,
    /// Telegram only; default `at_most_once`.
    #[schema(schema_with = schema::optional_telegram_delivery)]
    pub telegram_delivery: Option<TelegramDelivery>,
    /// Posted to an unlinked sender under the deny policy, at most once a day each.
    #[schema(max_length = 4096, pattern = r"^[^\u0000]*$")]
    pub unlinked_notice: Option<String>,
    /// Convert the agent's Markdown to the platform's formatting (default); `false` sends
    /// replies as plain text.
    pub format_markdown: Option<bool>,
    /// Show the platform's typing indicator while the agent works (default); `false` shows
    /// none (on WhatsApp it also comes with the read receipt).
    pub typing_indicator: Option<bool>,
}

impl ConnectorIn {
    fn check(&self) -> Result<(), AppError> {
        check_secret("verification_secret", Some(&self.verification_secret))?;
        check_secret("verify_token", self.verify_token.as_ref())?;
        check_secret("outbound_token", self.outbound_token.as_ref())?;
        non_empty_secret(&self.verification_secret, "verification_secret")?;
        schema::check_text("name", &self.name, schema::NAME_MAX)?;
        check_texts(&[
            ("api_base_url", self.api_base_url.as_deref(), schema::URL_MAX),
            ("external_id", self.external_id.as_deref(), schema::ID_MAX),
            ("app_id", self.app_id.as_deref(), schema::ID_MAX),
            ("bot_user_id", self.bot_user_id.as_deref(), schema::ID_MAX),
            ("bot_id", self.bot_id.as_deref(), schema::ID_MAX),
            (
                "unlinked_notice",
                self.unlinked_notice.as_deref(),
                schema::NOTICE_MAX,
            ),
        ])
    }
}

/// Fields to change; absent (or null) fields stay. An empty string clears an optional text
/// field.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"verification_secret": "new-signing-secret-5678", "previous_secret_grace_secs": 3600}))]
pub struct ConnectorPatch {
    /// Not empty.
    #[schema(min_length = 1, max_length = 200, pattern = r"^[^\u0000]*$")]
    pub name: Option<String>,
    pub enabled: Option<bool>,
    /// A new verification secret; the current one stays valid for
    /// `previous_secret_grace_secs` (default 24 h). Not blank.
    #[schema(value_type = Option<String>, format = Password, max_length = 1024, pattern = r"^[^\u0000]*[^\u0000\t-\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000][^\u0000]*$")]
    pub verification_secret: Option<SecretString>,
    /// Seconds the replaced secret stays valid: 0 to 2592000 (30 days).
    #[schema(minimum = 0, maximum = 2592000)]
    #[serde(default, deserialize_with = "schema::optional_integer")]
    pub previous_secret_grace_secs: Option<u64>,
    #[schema(value_type = Option<String>, format = Password, max_length = 1024, pattern = r"^[^\u0000]*$")]
    pub verify_token: Option<SecretString>,
    #[schema(value_type = Option<String>, format = Password, max_length = 1024, pattern = r"^[^\u0000]*$")]
    pub outbound_token: Option<SecretString>,
    /// Platform API base URL override (tests, proxies): http or https, every address of its
    /// host public unless the operator's `CB_EGRESS_ALLOW` allows it (else 422). An empty
    /// string clears it.
    #[schema(max_length = 2048, pattern = r"^$|^[hH][tT][tT][pP][sS]?://[^\u0000]+$")]
    pub api_base_url: Option<String>,
    #[schema(max_length = 256, pattern = r"^[^\u0000]*$")]
    pub external_id: Option<String>,
    #[schema(max_length = 256, pattern = r"^[^\u0000]*$")]
    pub app_id: Option<String>,
    #[schema(max_length = 256, pattern = r"^[^\u0000]*$")]
    pub bot_user_id: Option<String>,
    #[schema(max_length = 256, pattern = r"^[^\u0000]*$")]
    pub bot_id: Option<String>,
    #[schema(schema_with = schema::optional_unlinked_policy)]
    pub unlinked_policy: Option<UnlinkedPolicy>,
    #[schema(schema_with = schema::optional_telegram_delivery)]
    pub telegram_delivery: Option<TelegramDelivery>,
    #[schema(max_length = 4096, pattern = r"^[^\u0000]*$")]
    pub unlinked_notice: Option<String>,
    /// Convert the agent's Markdown to the platform's formatting, or send plain text.
    pub format_markdown: Option<bool>,
    /// Show the platform's typing indicator while the agent works, or not.
    pub typing_indicator: Option<bool>,
}

impl ConnectorPatch {
    /// What the audit record says of a PATCH: the names of the fields it sets, and of the
    /// secrets among them (never their values).
    fn audit_details(&self) -> serde_json::Value {
        let fields = [
            ("name", self.name.is_some()),
            ("enabled", self.enabled.is_some()),
            ("api_base_url", self.api_base_url.is_some()),
            ("external_id", self.external_id.is_some()),
            ("app_id", self.app_id.is_some()),
            ("bot_user_id", self.bot_user_id.is_some()),
            ("bot_id", self.bot_id.is_some()),
            ("unlinked_policy", self.unlinked_policy.is_some()),
            ("telegram_delivery", self.telegram_delivery.is_some()),
            ("unlinked_notice", self.unlinked_notice.is_some()),
            ("format_markdown", self.format_markdown.is_some()),
        ];
        let secrets = [
            ("verification_secret", self.verification_secret.is_some()),
            ("verify_token", self.verify_token.is_some()),
            ("outbound_token", self.outbound_token.is_some()),
        ];
        let named = |list: &[(&'static str, bool)]| -> Vec<&'static str> {
            list.iter()
                .filter(|(_, set)| *set)
                .map(|(name, _)| *name)
                .collect()
        };
        let mut details = serde_json::json!({"fields": named(&fields), "secrets": named(&secrets)});
        if self.verification_secret.is_some() {
            details["previous_secret_grace_secs"] = self
                .previous_secret_grace_secs
                .unwrap_or(DEFAULT_GRACE_SECS)
                .into();
        }
        details
    }

    fn check(&self) -> Result<(), AppError> {
        check_secret("verification_secret", self.verification_secret.as_ref())?;
        check_secret("verify_token", self.verify_token.as_ref())?;
        check_secret("outbound_token", self.outbound_token.as_ref())?;
        if let Some(secret) = &self.verification_secret {
            non_empty_secret(secret, "verification_secret")?;
        }
        if self.name.as_deref().is_some_and(str::is_empty) {
            return Err(AppError::Unprocessable("name must not be empty".into()));
        }
        if self
            .previous_secret_grace_secs
            .is_some_and(|grace| grace > MAX_GRACE_SECS)
        {
            return Err(AppError::Unprocessable(format!(
                "previous_secret_grace_secs must be at most {MAX_GRACE_SECS} (30 days)"
            )));
        }
        check_texts(&[
            ("name", self.name.as_deref(), schema::NAME_MAX),
            ("api_base_url", self.api_base_url.as_deref(), schema::URL_MAX),
            ("external_id", self.external_id.as_deref(), schema::ID_MAX),
            ("app_id", self.app_id.as_deref(), schema::ID_MAX),
            ("bot_user_id", self.bot_user_id.as_deref(), schema::ID_MAX),
            ("bot_id", self.bot_id.as_deref(), schema::ID_MAX),
            (
                "unlinked_notice",
                self.unlinked_notice.as_deref(),
                schema::NOTICE_MAX,
            ),
        ])
    }
}

fn check_texts(fields: &[(&str, Option<&str>, usize)]) -> Result<(), AppError> {
    fields
        .iter()
        .try_for_each(|(field, value, max)| schema::check_optional_text(field, *value, *max))
}

fn check_secret(field: &str, secret: Option<&SecretString>) -> Result<(), AppError> {
    use secrecy::ExposeSecret;
    schema::check_optional_text(field, secret.map(|s| s.expose_secret()), schema::SECRET_MAX)
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
    let summary = create_connector(&state, admin.tenant, Actor::ApiKey(admin.key_id), input).await?;
    Ok((StatusCode::CREATED, Json(summary)))
}

/// Checks and adds a connector with its audit record, in the tenant's transaction: the
/// API's create, and the console's.
pub async fn create_connector(
    state: &AppState,
    tenant: TenantId,
    actor: Actor,
    input: ConnectorIn,
) -> Result<ConnectorSummary, AppError> {
    input.check()?;
    schema::check_egress(state, "api_base_url", input.api_base_url.as_deref()).await?;
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
        typing_indicator: input.typing_indicator.unwrap_or(true),
    };
    let mut tx = TenantTx::begin(&state.pool, tenant).await?;
    let connector = db::connectors::insert(&mut tx, &state.settings.database.secrets, &new).await?;
    let summary = summary_or_404(&mut tx, connector.id).await?;
    let details = serde_json::json!({"platform": new.platform.as_str()});
    let entry = AuditEntry::new(
        actor,
        AuditAction::ConnectorCreate,
        connector.id.0.to_string(),
        details,
    );
    db::audit::record(&mut tx, &entry).await?;
    tx.commit().await?;
    Ok(summary)
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
    let actor = Actor::ApiKey(admin.key_id);
    let summary = update_connector(&state, admin.tenant, actor, ConnectorId(id), patch).await?;
    Ok(Json(summary))
}

/// Checks and applies a change (a new `verification_secret` rotates it with its grace
/// period) with its audit record: the API's PATCH, and the console's rotate and enable.
pub async fn update_connector(
    state: &AppState,
    tenant: TenantId,
    actor: Actor,
    id: ConnectorId,
    patch: ConnectorPatch,
) -> Result<ConnectorSummary, AppError> {
    patch.check()?;
    schema::check_egress(state, "api_base_url", patch.api_base_url.as_deref()).await?;
    let grace = Duration::from_secs(patch.previous_secret_grace_secs.unwrap_or(DEFAULT_GRACE_SECS));
    let audit = (AuditAction::ConnectorUpdate, patch.audit_details());
    let change = ConnectorChange {
        name: patch.name,
        external_id: patch.external_id,
        app_id: patch.app_id,
        bot_user_id: patch.bot_user_id,
        bot_id: patch.bot_id,
        api_base_url: patch.api_base_url,
        enabled: patch.enabled,
        format_markdown: patch.format_markdown,
        typing_indicator: patch.typing_indicator,
        unlinked_policy: patch.unlinked_policy,
        telegram_delivery: patch.telegram_delivery,
        unlinked_notice: patch.unlinked_notice,
        verify_token: patch.verify_token,
        outbound_token: patch.outbound_token,
        rotate_secret: patch.verification_secret.map(|secret| (secret, grace)),
    };
    apply(state, tenant, actor, id, &change, audit).await
}

/// Applies `change` and records `audit` (its action and details) with it.
async fn apply(
    state: &AppState,
    tenant: TenantId,
    actor: Actor,
    id: ConnectorId,
    change: &ConnectorChange,
    (action, details): (AuditAction, serde_json::Value),
) -> Result<ConnectorSummary, AppError> {
    let mut tx = TenantTx::begin(&state.pool, tenant).await?;
    if !db::connectors::update(&mut tx, &state.settings.database.secrets, id, change).await? {
        return Err(AppError::NotFound("connector"));
    }
    let summary = summary_or_404(&mut tx, id).await?;
    let entry = AuditEntry::new(actor, action, id.0.to_string(), details);
    db::audit::record(&mut tx, &entry).await?;
    tx.commit().await?;
    state.cache.forget_connector(tenant, id);
    Ok(summary)
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
    let actor = Actor::ApiKey(admin.key_id);
    let summary = disable_connector(&state, admin.tenant, actor, ConnectorId(id)).await?;
    Ok(Json(summary))
}

/// Disables a connector (its webhooks answer 404 from now on, on this instance at once and
/// on the others when their connector cache expires), with its audit record.
pub async fn disable_connector(
    state: &AppState,
    tenant: TenantId,
    actor: Actor,
    id: ConnectorId,
) -> Result<ConnectorSummary, AppError> {
    let change = ConnectorChange {
        enabled: Some(false),
        ..Default::default()
    };
    let audit = (AuditAction::ConnectorDisable, serde_json::json!({}));
    apply(state, tenant, actor, id, &change, audit).await
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
    if outcome == DeleteOutcome::Deleted {
        let details = serde_json::json!({"purge": query.purge});
        let entry = AuditEntry::new(
            Actor::ApiKey(admin.key_id),
            AuditAction::ConnectorDelete,
            id.to_string(),
            details,
        );
        db::audit::record(&mut tx, &entry).await?;
    }
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
