//! `channel_links`: platform sender → tenant user (tenant table, RLS).

use serde::Serialize;

use super::TenantTx;
use crate::domain::Platform;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct Link {
    pub platform: String,
    pub platform_user_id: String,
    pub user_id: String,
    pub created_at: chrono::DateTime<chrono::Utc>,
}

/// Setting a link twice, or re-pointing it, is not an error.
pub async fn upsert(
    tx: &mut TenantTx,
    platform: Platform,
    platform_user_id: &str,
    user_id: &str,
) -> Result<Link, sqlx::Error> {
    let tenant = tx.tenant();
    sqlx::query_as(
        "insert into channel_links (tenant_id, platform, platform_user_id, user_id)
         values ($1, $2, $3, $4)
         on conflict (tenant_id, platform, platform_user_id) do update set user_id = excluded.user_id
         returning platform, platform_user_id, user_id, created_at",
    )
    .bind(tenant)
    .bind(platform.as_str())
    .bind(platform_user_id)
    .bind(user_id)
    .fetch_one(tx.conn())
    .await
}

pub async fn resolve(
    tx: &mut TenantTx,
    platform: Platform,
    platform_user_id: &str,
) -> Result<Option<String>, sqlx::Error> {
    let mut linked = resolve_many(tx, &[(platform, platform_user_id)]).await?;
    Ok(linked.remove(&(platform.as_str().to_owned(), platform_user_id.to_owned())))
}

/// `(platform, platform_user_id) → user_id` for those that are linked.
pub async fn resolve_many(
    tx: &mut TenantTx,
    senders: &[(Platform, &str)],
) -> Result<std::collections::HashMap<(String, String), String>, sqlx::Error> {
    let tenant = tx.tenant();
    let platforms: Vec<&str> = senders.iter().map(|(p, _)| p.as_str()).collect();
    let ids: Vec<&str> = senders.iter().map(|(_, id)| *id).collect();
    let rows: Vec<(String, String, String)> = sqlx::query_as(
        "select l.platform, l.platform_user_id, l.user_id
           from channel_links l
           join unnest($2::text[], $3::text[]) as s(platform, platform_user_id)
             on l.platform = s.platform and l.platform_user_id = s.platform_user_id
          where l.tenant_id = $1",
    )
    .bind(tenant)
    .bind(&platforms)
    .bind(&ids)
    .fetch_all(tx.conn())
    .await?;
    Ok(rows
        .into_iter()
        .map(|(platform, sender, user)| ((platform, sender), user))
        .collect())
}

pub async fn list(tx: &mut TenantTx) -> Result<Vec<Link>, sqlx::Error> {
    let tenant = tx.tenant();
    sqlx::query_as(
        "select platform, platform_user_id, user_id, created_at from channel_links
          where tenant_id = $1 order by platform, platform_user_id",
    )
    .bind(tenant)
    .fetch_all(tx.conn())
    .await
}

pub async fn of_user(tx: &mut TenantTx, user_id: &str) -> Result<Vec<Link>, sqlx::Error> {
    let tenant = tx.tenant();
    sqlx::query_as(
        "select platform, platform_user_id, user_id, created_at from channel_links
          where tenant_id = $1 and user_id = $2 order by platform, platform_user_id",
    )
    .bind(tenant)
    .bind(user_id)
    .fetch_all(tx.conn())
    .await
}

pub async fn delete(
    tx: &mut TenantTx,
    platform: Platform,
    platform_user_id: &str,
) -> Result<bool, sqlx::Error> {
    let tenant = tx.tenant();
    let deleted = sqlx::query(
        "delete from channel_links where tenant_id = $1 and platform = $2 and platform_user_id = $3",
    )
    .bind(tenant)
    .bind(platform.as_str())
    .bind(platform_user_id)
    .execute(tx.conn())
    .await?
    .rows_affected();
    Ok(deleted == 1)
}
