//! The calling tenant's own settings; each change is audited in its own transaction.

use axum::extract::State;
use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use super::auth::TenantAdmin;
use super::schema;
use crate::db;
use crate::db::audit::{Actor, AuditAction, AuditEntry};
use crate::db::tenants::TenantRow;
use crate::db::TenantTx;
use crate::domain::HistoryScopeSetting;
use crate::error::{ApiJsonError, AppError};
use crate::http::extract::ApiJson;
use crate::http::state::AppState;

/// How long the previous dispatch secret keeps signing alongside the new one.
const DISPATCH_SECRET_GRACE_SECS: u64 = 24 * 3600;

#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({"id": "0192f0c4-7a6e-7b3a-9c1d-2e4f5a6b7c8d", "slug": "acme", "name": "Acme Support",
    "agent_url": "https://agent.example.com/v1/turn", "created_at": "2026-11-22T09:30:00Z"}))]
pub struct TenantOut {
    pub id: Uuid,
    pub slug: String,
    pub name: String,
    /// The agent proxy; null means the server's CB_AGENT_URL.
    pub agent_url: Option<String>,
    /// Which earlier turns of a user the agent gets as history
    /// (docs/agent.md#history-scope-what-the-agent-sees-of-earlier-turns).
    pub history_scope: HistoryScopeSetting,
    /// The agent is sent a signed `feedback` event for each change of a person's reaction
    /// to an answer (docs/agent.md#reactions-feedback-on-answers).
    pub feedback_events: bool,
    /// Turns older than this many days are deleted; null keeps them for ever
    /// (docs/admin.md#data-lifecycle-retention-erasure-export-audit).
    pub retention_days: Option<i32>,
    /// A held conversation whose user has waited this many seconds for an answer returns
    /// to the agent; null keeps it held until a person hands it back (docs/admin.md#human-handoff).
    pub handoff_return_secs: Option<i32>,
    pub created_at: chrono::DateTime<chrono::Utc>,
}

impl TenantOut {
    fn with_lifecycle(self, retention_days: Option<i32>, handoff_return_secs: Option<i32>) -> Self {
        Self {
            retention_days,
            handoff_return_secs,
            ..self
        }
    }
}

impl From<TenantRow> for TenantOut {
    fn from(row: TenantRow) -> Self {
        Self {
            id: row.id.0,
            slug: row.slug,
            name: row.name,
            agent_url: row.agent_url,
            history_scope: row.history_scope,
            feedback_events: row.feedback_events,
            retention_days: None,
            handoff_return_secs: None,
            created_at: row.created_at,
        }
    }
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"name": "Acme Support", "agent_url": "https://agent.example.com/v1/turn"}))]
pub struct TenantPatch {
    /// Not blank.
    #[schema(
        max_length = 200,
        pattern = r"^[^\u0000]*[^\u0000\t-\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000][^\u0000]*$"
    )]
    pub name: Option<String>,
    /// The agent proxy: http or https, every address of its host public unless the
    /// operator's `CB_EGRESS_ALLOW` allows it (else 422). An empty string clears it.
    #[schema(max_length = 2048, pattern = r"^$|^[hH][tT][tT][pP][sS]?://[^\u0000]+$")]
    pub agent_url: Option<String>,
    /// `user`: every turn of the user; `private_aware` (default): a turn in a channel or
    /// group sees the user's turns there only, a direct message their direct messages on
    /// every platform; `chat`: the same chat only.
    pub history_scope: Option<HistoryScopeSetting>,
    /// `true`: send the agent a signed `feedback` event for each change of a person's
    /// reaction to an answer (off by default).
    pub feedback_events: Option<bool>,
    /// Delete turns (and their reply parts) older than this many days: 7 (Meta retries a
    /// webhook for up to 7 days, and a turn's row is what drops the retry) to 36500. `null`
    /// keeps them for ever (the default).
    #[schema(value_type = Option<i32>, minimum = 7, maximum = 36500)]
    #[serde(default, deserialize_with = "schema::nullable_integer")]
    pub retention_days: Option<Option<i32>>,
    /// Return a held conversation to the agent once its user has waited this many seconds
    /// (60 to 604800) for an answer; `null` (the default) keeps it held until a person hands
    /// it back: a customer who asked for a person should not be handed to the bot silently.
    #[schema(value_type = Option<i32>, minimum = 60, maximum = 604800)]
    #[serde(default, deserialize_with = "schema::nullable_integer")]
    pub handoff_return_secs: Option<Option<i32>>,
}

impl TenantPatch {
    fn fields(&self) -> Vec<&'static str> {
        [
            ("name", self.name.is_some()),
            ("agent_url", self.agent_url.is_some()),
            ("history_scope", self.history_scope.is_some()),
            ("feedback_events", self.feedback_events.is_some()),
            ("retention_days", self.retention_days.is_some()),
            ("handoff_return_secs", self.handoff_return_secs.is_some()),
        ]
        .into_iter()
        .filter_map(|(field, set)| set.then_some(field))
        .collect()
    }

    fn check(&self) -> Result<(), AppError> {
        use crate::lifecycle::retention::{MAX_DAYS, MIN_DAYS};
        if let Some(Some(days)) = self.retention_days {
            if !(MIN_DAYS..=MAX_DAYS).contains(&days) {
                return Err(AppError::Unprocessable(format!(
                    "retention_days must be between {MIN_DAYS} (platforms retry webhooks for up to 7 \
                     days) and {MAX_DAYS}, or null to keep turns for ever"
                )));
            }
        }
        if let Some(Some(secs)) = self.handoff_return_secs {
            if !(60..=604_800).contains(&secs) {
                return Err(AppError::Unprocessable(
                    "handoff_return_secs must be between 60 and 604800 (7 days), or null to keep held \
                     conversations held"
                        .into(),
                ));
            }
        }
        if self.name.as_deref().is_some_and(|n| n.trim().is_empty()) {
            return Err(AppError::Unprocessable("name must not be empty".into()));
        }
        schema::check_optional_text("name", self.name.as_deref(), schema::NAME_MAX)?;
        schema::check_optional_text("agent_url", self.agent_url.as_deref(), schema::URL_MAX)?;
        Ok(())
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct DispatchSecretOut {
    /// The new `whsec_…` secret, shown this once. The previous one keeps signing alongside
    /// (a second `v1,` signature) until `previous_valid_until`.
    pub dispatch_secret: String,
    pub previous_valid_until: chrono::DateTime<chrono::Utc>,
}

/// The tenant's settings.
#[utoipa::path(get, path = "/v1/admin/tenant", operation_id = "get_tenant", tag = "tenant", security(("api_key" = [])),
    responses((status = 200, body = TenantOut), (status = 401, body = ApiJsonError), (status = 404, body = ApiJsonError)))]
pub async fn get(State(state): State<AppState>, admin: TenantAdmin) -> Result<Json<TenantOut>, AppError> {
    let mut conn = state.pool.acquire().await?;
    let row = db::tenants::get(&mut conn, &state.settings.database.secrets, admin.tenant)
        .await?
        .ok_or(AppError::NotFound("tenant"))?;
    let retention = db::lifecycle::retention_days(&mut conn, admin.tenant).await?;
    let handoff_return = db::holds::return_secs(&mut conn, admin.tenant).await?;
    Ok(Json(
        TenantOut::from(row).with_lifecycle(retention, handoff_return),
    ))
}

/// Change the name, the history scope, the retention (7 to 36500 days, or null: for ever;
/// else 422) or the agent URL (http or https, and every address of its host public unless
/// the operator's `CB_EGRESS_ALLOW` allows it; else 422).
#[utoipa::path(patch, path = "/v1/admin/tenant", operation_id = "update_tenant", tag = "tenant", security(("api_key" = [])), request_body = TenantPatch,
    responses((status = 200, body = TenantOut), (status = 400, body = ApiJsonError), (status = 401, body = ApiJsonError), (status = 404, body = ApiJsonError), (status = 413, body = ApiJsonError), (status = 422, body = ApiJsonError)))]
pub async fn update(
    State(state): State<AppState>,
    admin: TenantAdmin,
    ApiJson(patch): ApiJson<TenantPatch>,
) -> Result<Json<TenantOut>, AppError> {
    patch.check()?;
    schema::check_egress(&state, "agent_url", patch.agent_url.as_deref()).await?;
    let mut tx = TenantTx::begin(&state.pool, admin.tenant).await?;
    let row = db::tenants::update(
        tx.conn(),
        &state.settings.database.secrets,
        admin.tenant,
        db::tenants::TenantChange {
            name: patch.name.as_deref(),
            agent_url: patch.agent_url.as_deref(),
            history_scope: patch.history_scope,
            feedback_events: patch.feedback_events,
        },
    )
    .await?
    .ok_or(AppError::NotFound("tenant"))?;
    if let Some(days) = patch.retention_days {
        db::lifecycle::set_retention_days(tx.conn(), admin.tenant, days).await?;
    }
    if let Some(secs) = patch.handoff_return_secs {
        db::holds::set_return_secs(tx.conn(), admin.tenant, secs).await?;
    }
    let retention = db::lifecycle::retention_days(tx.conn(), admin.tenant).await?;
    let handoff_return = db::holds::return_secs(tx.conn(), admin.tenant).await?;
    let details = serde_json::json!({"fields": patch.fields(), "retention_days": retention});
    let entry = AuditEntry::new(
        Actor::ApiKey(admin.key_id),
        AuditAction::TenantUpdate,
        "tenant",
        details,
    );
    db::audit::record(&mut tx, &entry).await?;
    tx.commit().await?;
    state.cache.forget_tenant(admin.tenant);
    Ok(Json(
        TenantOut::from(row).with_lifecycle(retention, handoff_return),
    ))
}

/// Rotate the dispatch signing secret.
#[utoipa::path(post, path = "/v1/admin/tenant/rotate-dispatch-secret", operation_id = "rotate_dispatch_secret", tag = "tenant", security(("api_key" = [])),
    responses((status = 200, body = DispatchSecretOut), (status = 401, body = ApiJsonError), (status = 404, body = ApiJsonError)))]
pub async fn rotate_dispatch_secret(
    State(state): State<AppState>,
    admin: TenantAdmin,
) -> Result<Json<DispatchSecretOut>, AppError> {
    use secrecy::ExposeSecret;
    let grace = std::time::Duration::from_secs(DISPATCH_SECRET_GRACE_SECS);
    let mut tx = TenantTx::begin(&state.pool, admin.tenant).await?;
    let secret =
        db::tenants::rotate_dispatch_secret(tx.conn(), &state.settings.database.secrets, admin.tenant, grace)
            .await?
            .ok_or(AppError::NotFound("tenant"))?;
    let previous_valid_until =
        chrono::Utc::now() + chrono::Duration::seconds(DISPATCH_SECRET_GRACE_SECS as i64);
    let details = serde_json::json!({"previous_valid_until": previous_valid_until});
    let entry = AuditEntry::new(
        Actor::ApiKey(admin.key_id),
        AuditAction::DispatchSecretRotate,
        "tenant",
        details,
    );
    db::audit::record(&mut tx, &entry).await?;
    tx.commit().await?;
    state.cache.forget_tenant(admin.tenant);
    Ok(Json(DispatchSecretOut {
        dispatch_secret: secret.0.expose_secret().to_owned(),
        previous_valid_until,
    }))
}
