//! `console_sessions`: the web console's sessions (infrastructure, no RLS; migration 26
//! says why they live in the database). Rows are found by the SHA-256 of the cookie's id.

use sqlx::PgConnection;
use uuid::Uuid;

use crate::domain::TenantId;

/// Expired sessions deleted per sign-in at most: the sweep stays one short statement.
const SWEEP: i64 = 100;

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct SessionRow {
    pub tenant_id: TenantId,
    pub key_id: Uuid,
    pub key_prefix: String,
    pub csrf: String,
}

pub async fn insert(
    conn: &mut PgConnection,
    id_hash: &[u8],
    session: &SessionRow,
    expires_at: chrono::DateTime<chrono::Utc>,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "insert into console_sessions (id_hash, tenant_id, key_id, key_prefix, csrf, expires_at)
         values ($1, $2, $3, $4, $5, $6)",
    )
    .bind(id_hash)
    .bind(session.tenant_id)
    .bind(session.key_id)
    .bind(&session.key_prefix)
    .bind(&session.csrf)
    .bind(expires_at)
    .execute(&mut *conn)
    .await?;
    sqlx::query(
        "delete from console_sessions where id_hash in (
             select id_hash from console_sessions where expires_at < now() order by expires_at limit $1)",
    )
    .bind(SWEEP)
    .execute(conn)
    .await?;
    Ok(())
}

pub async fn live(conn: &mut PgConnection, id_hash: &[u8]) -> Result<Option<SessionRow>, sqlx::Error> {
    sqlx::query_as(
        "select tenant_id, key_id, key_prefix, csrf from console_sessions
          where id_hash = $1 and expires_at > now()",
    )
    .bind(id_hash)
    .fetch_optional(conn)
    .await
}

pub async fn delete(conn: &mut PgConnection, id_hash: &[u8]) -> Result<(), sqlx::Error> {
    sqlx::query("delete from console_sessions where id_hash = $1")
        .bind(id_hash)
        .execute(conn)
        .await?;
    Ok(())
}
