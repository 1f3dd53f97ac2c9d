//! The audit log for tenant admins: who did what, newest first (`db::audit`).

use axum::extract::State;
use axum::Json;
use serde::{Deserialize, Serialize};
use sqlx::PgPool;
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use super::auth::TenantAdmin;
use crate::admin::cursor;
use crate::db::audit::{AuditAction, AuditRow};
use crate::db::{self, TenantTx};
use crate::domain::TenantId;
use crate::error::{ApiJsonError, AppError};
use crate::http::extract::ApiQuery;
use crate::http::state::AppState;

const DEFAULT_LIMIT: i64 = 50;
const MAX_LIMIT: i64 = 200;

#[derive(Debug, Default, Clone, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct AuditQuery {
    /// `next_cursor` of the previous page.
    #[param(
        pattern = r"^-?[0-9]{1,16}_[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
    )]
    pub cursor: Option<String>,
    /// Page size (default 50).
    #[param(minimum = 1, maximum = 200)]
    pub limit: Option<i64>,
}

/// One audit record.
#[derive(Debug, Serialize, ToSchema)]
pub struct AuditOut {
    pub id: Uuid,
    pub at: chrono::DateTime<chrono::Utc>,
    /// The id of the admin API key used, `operator`, `cli`, `agent` (asking for a person)
    /// or `gateway` (a held conversation returned by the tenant's rule).
    pub actor: String,
    #[schema(schema_with = audit_action)]
    pub action: String,
    /// What it acted on: a connector or message id, `telegram:408258968` (a link or an
    /// account), `user:alice`, `tenant`, `messages` (a bulk action).
    pub target: String,
    /// Ids, counts and the names of changed fields; never message text or secrets.
    #[schema(value_type = Object)]
    pub details: serde_json::Value,
}

impl From<AuditRow> for AuditOut {
    fn from(row: AuditRow) -> Self {
        Self {
            id: row.id,
            at: row.at,
            actor: row.actor,
            action: row.action,
            target: row.target,
            details: row.details,
        }
    }
}

fn audit_action() -> utoipa::openapi::Schema {
    utoipa::openapi::schema::ObjectBuilder::new()
        .schema_type(utoipa::openapi::schema::Type::String)
        .enum_values(Some(AuditAction::ALL.map(AuditAction::as_str)))
        .build()
        .into()
}

#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({"items": [{"id": "0192f0c4-7a6e-7b3a-9c1d-2e4f5a6b7c8d", "at": "2026-11-22T09:30:00Z",
    "actor": "0192f0c4-1111-7b3a-9c1d-2e4f5a6b7c8d", "action": "person.erase", "target": "user:alice",
    "details": {"turns": 12, "reply_parts": 14, "jobs": 0, "links": 2, "notices": 0}}],
    "next_cursor": null}))]
pub struct AuditPage {
    pub items: Vec<AuditOut>,
    /// Pass as `cursor` for the next (older) page; absent on the last page.
    pub next_cursor: Option<String>,
}

pub async fn list_audit(pool: &PgPool, tenant: TenantId, query: &AuditQuery) -> Result<AuditPage, AppError> {
    let limit = query.limit.unwrap_or(DEFAULT_LIMIT);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(AppError::Unprocessable(format!(
            "limit must be between 1 and {MAX_LIMIT}"
        )));
    }
    let before = query.cursor.as_deref().map(cursor::decode).transpose()?;
    let mut tx = TenantTx::begin(pool, tenant).await?;
    let mut rows = db::audit::list(&mut tx, before, limit + 1).await?;
    tx.commit().await?;
    let more = rows.len() as i64 > limit;
    rows.truncate(limit as usize);
    let next_cursor = more
        .then(|| rows.last().map(|row| cursor::encode(row.at, row.id)))
        .flatten();
    Ok(AuditPage {
        items: rows.into_iter().map(AuditOut::from).collect(),
        next_cursor,
    })
}

/// The audit log: connector changes and secret rotations, dispatch secret rotations, link
/// changes, tenant settings (retention included), redispatches and resends, erasures;
/// newest first.
#[utoipa::path(get, path = "/v1/admin/audit", operation_id = "list_audit", tag = "lifecycle", params(AuditQuery),
    security(("api_key" = [])),
    responses((status = 200, body = AuditPage), (status = 401, body = ApiJsonError), (status = 422, body = ApiJsonError)))]
pub async fn list(
    State(state): State<AppState>,
    admin: TenantAdmin,
    ApiQuery(query): ApiQuery<AuditQuery>,
) -> Result<Json<AuditPage>, AppError> {
    Ok(Json(list_audit(&state.pool, admin.tenant, &query).await?))
}
