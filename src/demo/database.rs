//! The demo's own database, beside the user's, dropped and re-created on every run: which is
//! why it must never be the one DATABASE_URL itself names.

use anyhow::Context;
use sqlx::migrate::MigrateDatabase;
use sqlx::PgPool;

use crate::db::TenantTx;
use crate::domain::{MessageId, TenantId};
use crate::settings::DatabaseSettings;

pub fn demo_database_url(database_url: &str, name: &str) -> anyhow::Result<String> {
    let valid = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if !valid {
        anyhow::bail!("--database-name must be lowercase letters, digits and underscores");
    }
    let mut url = reqwest::Url::parse(database_url).context("DATABASE_URL is not a URL")?;
    if url.path().trim_start_matches('/') == name {
        anyhow::bail!(
            "DATABASE_URL names `{name}`, which the demo would drop; choose another --database-name"
        );
    }
    url.set_path(&format!("/{name}"));
    Ok(url.to_string())
}

pub(super) async fn recreate_database(url: &str) -> anyhow::Result<()> {
    sqlx::Postgres::force_drop_database(url)
        .await
        .context("Failed to drop the previous demo database (is PostgreSQL up at DATABASE_URL?)")?;
    crate::db::migrate(&DatabaseSettings::from_url(url))
        .await
        .context("Failed to create and migrate the demo database")?;
    Ok(())
}

/// The demo tenant's recorded turns, read back through the tenant transaction (RLS on).
pub(super) async fn count_turns(pool: &PgPool, tenant: TenantId) -> anyhow::Result<usize> {
    let mut tx = TenantTx::begin(pool, tenant).await?;
    let count: i64 = sqlx::query_scalar("select count(*) from channel_messages where tenant_id = $1")
        .bind(tenant)
        .fetch_one(tx.conn())
        .await
        .context("Failed to count the demo's messages")?;
    tx.commit().await?;
    Ok(usize::try_from(count).unwrap_or_default())
}

/// Whether every reply part of `message` is recorded as posted, its platform id known.
pub(super) async fn answer_recorded(
    pool: &PgPool,
    tenant: TenantId,
    message: MessageId,
) -> anyhow::Result<bool> {
    let mut tx = TenantTx::begin(pool, tenant).await?;
    let parts = crate::db::parts::reply_parts(&mut tx, message)
        .await
        .context("Failed to read the demo's reply parts")?;
    tx.commit().await?;
    Ok(!parts.is_empty() && parts.iter().all(|p| p.platform_message_id.is_some()))
}

pub(super) fn shown_url_differs(url: &str) -> bool {
    crate::db::masked_url(url) != url
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_demo_database_is_a_sibling_and_never_the_users_own() {
        assert_eq!(
            demo_database_url(
                "postgres://postgres@127.0.0.1:5432/channel_bridge",
                "channel_bridge_demo"
            )
            .unwrap(),
            "postgres://postgres@127.0.0.1:5432/channel_bridge_demo"
        );
        assert!(demo_database_url("postgres://h/channel_bridge_demo", "channel_bridge_demo").is_err());
        assert!(demo_database_url("postgres://h/x", "Robert'); drop").is_err());
    }

    #[test]
    fn passwords_are_not_printed() {
        assert_eq!(
            crate::db::masked_url("postgres://app:hunter2@db:5432/demo"),
            "postgres://app:****@db:5432/demo"
        );
        assert_eq!(
            crate::db::masked_url("postgres://postgres@db/demo"),
            "postgres://postgres@db/demo"
        );
    }
}
