//! `api_keys`: tenant admin keys (infrastructure, no RLS). Only a SHA-256 of each key is
//! stored; the key itself is shown once, when issued.

use sqlx::PgConnection;
use uuid::Uuid;

use crate::domain::TenantId;

#[derive(Debug, Clone, serde::Serialize, sqlx::FromRow)]
pub struct ApiKeyRow {
    pub id: Uuid,
    pub tenant_id: TenantId,
    pub name: String,
    /// The visible start of the key (`cbk_<prefix>_…`), to recognise it in listings.
    pub prefix: String,
    pub created_at: chrono::DateTime<chrono::Utc>,
    pub last_used_at: Option<chrono::DateTime<chrono::Utc>>,
    pub revoked_at: Option<chrono::DateTime<chrono::Utc>>,
}

const COLUMNS: &str = "id, tenant_id, name, prefix, created_at, last_used_at, revoked_at";

pub async fn insert(
    conn: &mut PgConnection,
    tenant: TenantId,
    name: &str,
    prefix: &str,
    hash: &[u8],
) -> Result<ApiKeyRow, sqlx::Error> {
    sqlx::query_as(&format!(
        "insert into api_keys (id, tenant_id, name, prefix, key_hash) values ($1, $2, $3, $4, $5)
         returning {COLUMNS}"
    ))
    .bind(Uuid::now_v7())
    .bind(tenant)
    .bind(name)
    .bind(prefix)
    .bind(hash)
    .fetch_one(conn)
    .await
}

pub async fn live_hash(conn: &mut PgConnection, prefix: &str) -> Result<Option<Vec<u8>>, sqlx::Error> {
    sqlx::query_scalar("select key_hash from api_keys where prefix = $1 and revoked_at is null")
        .bind(prefix)
        .fetch_optional(conn)
        .await
}

/// Records the use at most once a minute, so reads do not become a write per request.
pub async fn authenticate(
    conn: &mut PgConnection,
    hash: &[u8],
) -> Result<Option<(Uuid, TenantId)>, sqlx::Error> {
    sqlx::query_as(
        "with key as (
             select id, tenant_id, last_used_at from api_keys where key_hash = $1 and revoked_at is null),
         touch as (
             update api_keys set last_used_at = now() from key
              where api_keys.id = key.id
                and (key.last_used_at is null or key.last_used_at < now() - interval '60 seconds'))
         select id, tenant_id from key",
    )
    .bind(hash)
    .fetch_optional(conn)
    .await
}

/// A console session's key; records its use as `authenticate` does.
pub async fn live_by_id(conn: &mut PgConnection, id: Uuid) -> Result<Option<TenantId>, sqlx::Error> {
    sqlx::query_scalar(
        "with key as (
             select id, tenant_id, last_used_at from api_keys where id = $1 and revoked_at is null),
         touch as (
             update api_keys set last_used_at = now() from key
              where api_keys.id = key.id
                and (key.last_used_at is null or key.last_used_at < now() - interval '60 seconds'))
         select tenant_id from key",
    )
    .bind(id)
    .fetch_optional(conn)
    .await
}

pub async fn list(conn: &mut PgConnection, tenant: TenantId) -> Result<Vec<ApiKeyRow>, sqlx::Error> {
    sqlx::query_as(&format!(
        "select {COLUMNS} from api_keys where tenant_id = $1 order by created_at"
    ))
    .bind(tenant)
    .fetch_all(conn)
    .await
}

pub async fn tenant_of(conn: &mut PgConnection, id: Uuid) -> Result<Option<TenantId>, sqlx::Error> {
    sqlx::query_scalar("select tenant_id from api_keys where id = $1")
        .bind(id)
        .fetch_optional(conn)
        .await
}

/// Revoking twice keeps the first time.
pub async fn revoke(conn: &mut PgConnection, id: Uuid) -> Result<Option<ApiKeyRow>, sqlx::Error> {
    sqlx::query_as(&format!(
        "update api_keys set revoked_at = coalesce(revoked_at, $2) where id = $1 returning {COLUMNS}"
    ))
    .bind(id)
    // The clock is read here: Citus refuses `now()` inside COALESCE of a modification.
    .bind(chrono::Utc::now())
    .fetch_optional(conn)
    .await
}

/// How a key signs what a person writes with it: its name, or its prefix when it has none.
pub async fn signature_of(conn: &mut PgConnection, id: Uuid) -> Result<Option<String>, sqlx::Error> {
    sqlx::query_scalar("select case when name = '' then prefix else name end from api_keys where id = $1")
        .bind(id)
        .fetch_optional(conn)
        .await
}
