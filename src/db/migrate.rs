//! Migrations, applied as the owner, the database created first when missing.

use anyhow::Context;
use secrecy::ExposeSecret;
use sqlx::migrate::MigrateDatabase;
use sqlx::{ConnectOptions, Executor, Postgres};

use super::pool::connect_options;
use crate::settings::DatabaseSettings;

pub(super) static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

#[derive(Debug, Clone, serde::Serialize, PartialEq, Eq)]
pub struct MigrateReport {
    pub database_created: bool,
    pub applied: Vec<i64>,
}

/// Creates the database when missing, then applies pending migrations as the owner.
pub async fn migrate(settings: &DatabaseSettings) -> anyhow::Result<MigrateReport> {
    let url = settings.url.expose_secret();
    let masked = masked_url(url);
    let exists = Postgres::database_exists(url).await.map_err(|err| {
        anyhow::anyhow!(
            "cannot reach PostgreSQL at DATABASE_URL={masked}: {}",
            cause(&err)
        )
    })?;
    if !exists {
        Postgres::create_database(url).await.map_err(|err| {
            anyhow::anyhow!(
                "cannot create the database of DATABASE_URL={masked}: {}",
                cause(&err)
            )
        })?;
    }
    let mut conn = connect_options(&settings.url)?
        .connect()
        .await
        .map_err(|err| anyhow::anyhow!("cannot connect to DATABASE_URL={masked}: {}", cause(&err)))?;
    let before = applied_versions(&mut conn).await?;
    MIGRATOR
        .run(&mut conn)
        .await
        .context("Failed to apply migrations")?;
    let after = applied_versions(&mut conn).await?;
    let applied: Vec<i64> = after.into_iter().filter(|v| !before.contains(v)).collect();
    if !applied.is_empty() {
        // Statistics now, rather than whenever autovacuum comes (it may be off or late):
        // plans made before them are kept by the gateway's prepared statements.
        conn.execute("analyze")
            .await
            .context("Failed to analyze the migrated tables")?;
    }
    Ok(MigrateReport {
        database_created: !exists,
        applied,
    })
}

async fn applied_versions(conn: &mut sqlx::PgConnection) -> anyhow::Result<Vec<i64>> {
    let table: Option<String> = sqlx::query_scalar("select to_regclass('_sqlx_migrations')::text")
        .fetch_one(&mut *conn)
        .await?;
    if table.is_none() {
        return Ok(Vec::new());
    }
    let versions = sqlx::query_scalar("select version from _sqlx_migrations where success order by version")
        .fetch_all(&mut *conn)
        .await?;
    Ok(versions)
}

pub fn masked_url(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut parsed) if parsed.password().is_some() => {
            let _ = parsed.set_password(Some("****"));
            parsed.to_string()
        }
        Ok(parsed) => parsed.to_string(),
        Err(_) => "(not a valid URL)".to_owned(),
    }
}

/// A database error's own message, without sqlx's wrapping.
fn cause(err: &sqlx::Error) -> String {
    match err.as_database_error() {
        Some(db) => db.message().to_owned(),
        None => err.to_string(),
    }
}
