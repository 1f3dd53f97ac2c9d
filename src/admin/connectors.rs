//! Connectors; the console calls the same functions. Secrets are write-only: accepted on
//! create and update, never returned or logged.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use secrecy::SecretString;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use super::auth::TenantAdmin;
use super::schema;
use crate::db::audit::{Actor, AuditAction, AuditEntry};
use crate::db::connectors::{DeleteOutcome, NewRow};
use crate::db::{self, TenantTx};
use crate::domain::{ConnectorId, ConnectorProfile, TenantId};
use crate::error::{ApiJsonError, AppError};
use crate::http::extract::{ApiJson, ApiPath, ApiQuery};
use crate::http::state::AppState;
use crate::shapes::{ConnectorPatch, ConnectorSettings, NewConnector, SecretsIn, MAX_GRACE_SECS};

impl SecretsIn {
    /// Lengths, then a verification secret given must not be blank.
    fn check(&self) -> Result<(), AppError> {
        check_secret("verification_secret", self.verification_secret.as_ref())?;
        check_secret("verify_token", self.verify_token.as_ref())?;
        check_secret("outbound_token", self.outbound_token.as_ref())?;
        match &self.verification_secret {
            Some(secret) => non_empty_secret(secret, "verification_secret"),
            None => Ok(()),
        }
    }
}

impl ConnectorSettings {
    fn check(&self) -> Result<(), AppError> {
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

impl NewConnector {
    /// The row to insert, once checked.
    fn checked(&self) -> Result<NewRow<'_>, AppError> {
        self.secrets.check()?;
        let row = self
            .row()
            .ok_or_else(|| AppError::Unprocessable("verification_secret must not be empty".into()))?;
        self.settings.check()?;
        Ok(row)
    }
}

impl ConnectorPatch {
    /// The names of the fields and secrets set, never their values.
    fn audit_details(&self) -> serde_json::Value {
        // `name`, `enabled`, then the other settings in their order.
        let mut fields = self.settings.given();
        if self.enabled.is_some() {
            let after_name = usize::from(self.settings.name.is_some());
            fields.insert(after_name, "enabled");
        }
        let secrets = [
            ("verification_secret", self.secrets.verification_secret.is_some()),
            ("verify_token", self.secrets.verify_token.is_some()),
            ("outbound_token", self.secrets.outbound_token.is_some()),
        ];
        let secrets: Vec<&str> = secrets
            .iter()
            .filter(|(_, set)| *set)
            .map(|(name, _)| *name)
            .collect();
        let mut details = serde_json::json!({"fields": fields, "secrets": secrets});
        if self.secrets.verification_secret.is_some() {
            details["previous_secret_grace_secs"] = self.grace_secs().into();
        }
        details
    }

    fn check(&self) -> Result<(), AppError> {
        self.secrets.check()?;
        if self.settings.name.as_deref().is_some_and(str::is_empty) {
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
        self.settings.check()
    }
}

fn check_texts(fields: &[(&str, Option<&str>, usize)]) -> Result<(), AppError> {
    fields
        .iter()
        .try_for_each(|(field, value, max)| schema::check_optional_text(field, *value, *max))
        .map_err(AppError::from)
}

fn check_secret(field: &str, secret: Option<&SecretString>) -> Result<(), AppError> {
    use secrecy::ExposeSecret;
    schema::check_optional_text(field, secret.map(|s| s.expose_secret()), schema::SECRET_MAX)
        .map_err(AppError::from)
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

/// What admins see of a connector: its profile, and of its secrets (which are write-only)
/// only whether they are set.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ConnectorSummary {
    pub id: uuid::Uuid,
    #[serde(flatten)]
    pub profile: ConnectorProfile,
    pub has_verify_token: bool,
    pub has_outbound_token: bool,
    /// Until when the secret replaced by the last rotation is still accepted.
    pub previous_secret_expires_at: Option<chrono::DateTime<chrono::Utc>>,
    pub created_at: chrono::DateTime<chrono::Utc>,
    pub updated_at: chrono::DateTime<chrono::Utc>,
}

impl From<db::connectors::ConnectorSummary> for ConnectorSummary {
    fn from(row: db::connectors::ConnectorSummary) -> Self {
        let db::connectors::ConnectorSummary {
            id,
            profile,
            has_verify_token,
            has_outbound_token,
            previous_secret_expires_at,
            created_at,
            updated_at,
        } = row;
        Self {
            id,
            profile,
            has_verify_token,
            has_outbound_token,
            previous_secret_expires_at,
            created_at,
            updated_at,
        }
    }
}

async fn summary_or_404(tx: &mut TenantTx, id: ConnectorId) -> Result<ConnectorSummary, AppError> {
    db::connectors::summary(tx, id)
        .await?
        .map(ConnectorSummary::from)
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
    Ok(Json(connectors.into_iter().map(ConnectorSummary::from).collect()))
}

/// Add a connector. The answer carries no secret.
#[utoipa::path(post, path = "/v1/admin/connectors", operation_id = "create_connector", tag = "connectors", security(("api_key" = [])), request_body = NewConnector,
    responses((status = 201, body = ConnectorSummary), (status = 400, body = ApiJsonError), (status = 401, body = ApiJsonError), (status = 413, body = ApiJsonError), (status = 422, body = ApiJsonError)))]
pub async fn create(
    State(state): State<AppState>,
    admin: TenantAdmin,
    ApiJson(input): ApiJson<NewConnector>,
) -> Result<(StatusCode, Json<ConnectorSummary>), AppError> {
    let summary = create_connector(&state, admin.tenant, Actor::ApiKey(admin.key_id), input).await?;
    Ok((StatusCode::CREATED, Json(summary)))
}

/// The API's create and the console's: checks, row and audit record in one transaction.
pub async fn create_connector(
    state: &AppState,
    tenant: TenantId,
    actor: Actor,
    new: NewConnector,
) -> Result<ConnectorSummary, AppError> {
    let row = new.checked()?;
    schema::check_egress(state, "api_base_url", new.settings.api_base_url.as_deref()).await?;
    let mut tx = TenantTx::begin(&state.pool, tenant).await?;
    let connector = db::connectors::insert(&mut tx, &state.settings.database.secrets, &row).await?;
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

/// The API's PATCH and the console's rotate and enable.
pub async fn update_connector(
    state: &AppState,
    tenant: TenantId,
    actor: Actor,
    id: ConnectorId,
    patch: ConnectorPatch,
) -> Result<ConnectorSummary, AppError> {
    patch.check()?;
    schema::check_egress(state, "api_base_url", patch.settings.api_base_url.as_deref()).await?;
    let audit = (AuditAction::ConnectorUpdate, patch.audit_details());
    apply(state, tenant, actor, id, &patch, audit).await
}

async fn apply(
    state: &AppState,
    tenant: TenantId,
    actor: Actor,
    id: ConnectorId,
    change: &ConnectorPatch,
    (action, details): (AuditAction, serde_json::Value),
) -> Result<ConnectorSummary, AppError> {
    let mut tx = TenantTx::begin(&state.pool, tenant).await?;
    let keys = &state.settings.database.secrets;
    if !db::connectors::update(&mut tx, keys, id, &change.into()).await? {
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

/// Other instances answer its webhooks 404 once their connector cache expires.
pub async fn disable_connector(
    state: &AppState,
    tenant: TenantId,
    actor: Actor,
    id: ConnectorId,
) -> Result<ConnectorSummary, AppError> {
    let change = ConnectorPatch {
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
