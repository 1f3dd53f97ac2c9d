//! PostgreSQL access: the pool (every connection runs as `channel_bridge_app`, so RLS
//! applies), migrations, the tenant transaction and one file per table family.
//!
//! Queries are runtime-checked `sqlx::query_as` calls; every one of them is exercised by the
//! integration tests against a real database (README, "Checked SQL").

pub mod api_keys;
pub mod connectors;
pub mod links;
pub mod messages;
pub mod queue;
pub mod replies;
pub mod slack_budget;
pub mod tenant_tx;
pub mod tenants;
pub mod turns;

use std::str::FromStr;

use anyhow::Context;
use secrecy::ExposeSecret;
use sqlx::migrate::MigrateDatabase;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, Executor, PgPool, Postgres};

use crate::settings::DatabaseSettings;

pub use tenant_tx::TenantTx;

/// The role every pooled connection switches to. It owns nothing, has no BYPASSRLS and only
/// the grants the migrations give it.
pub const APP_ROLE: &str = "channel_bridge_app";

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

/// Opens the application pool. Connections are opened lazily, so the process starts (and
/// `/readyz` answers 503) while the database is down; each new connection runs
/// `SET ROLE channel_bridge_app` before it is handed out.
///
/// Connections are not pinged before each use (`test_before_acquire(false)`): the ping was
/// a whole round trip in front of every transaction. A connection that died meanwhile (a
/// database restart) fails its first query instead, which is an outage answer (503, or a
/// retried job) like any other, and the pool replaces it.
pub fn connect_pool(settings: &DatabaseSettings) -> anyhow::Result<PgPool> {
    let options = connect_options(settings)?;
    let pool = PgPoolOptions::new()
        .max_connections(settings.pool_size)
        .acquire_timeout(settings.acquire_timeout())
        .test_before_acquire(false)
        .after_connect(|conn, _meta| {
            Box::pin(async move {
                conn.execute("SET ROLE channel_bridge_app").await?;
                Ok(())
            })
        })
        .connect_lazy_with(options);
    Ok(pool)
}

fn connect_options(settings: &DatabaseSettings) -> anyhow::Result<PgConnectOptions> {
    let options = PgConnectOptions::from_str(settings.url.expose_secret())
        .context("DATABASE_URL is not a valid PostgreSQL URL")?
        .application_name("channel-bridge")
        // Statement logging would put message text in the server log at debug level.
        .disable_statement_logging();
    Ok(options)
}

/// What `migrate` did.
#[derive(Debug, Clone, serde::Serialize, PartialEq, Eq)]
pub struct MigrateReport {
    pub database_created: bool,
    pub applied: Vec<i64>,
}

/// Creates the database when missing, then applies pending migrations as the owner
/// (the DATABASE_URL user, not the app role). A second run applies nothing.
pub async fn migrate(settings: &DatabaseSettings) -> anyhow::Result<MigrateReport> {
    let url = settings.url.expose_secret();
    let exists = Postgres::database_exists(url)
        .await
        .context("Failed to reach PostgreSQL at DATABASE_URL")?;
    if !exists {
        Postgres::create_database(url)
            .await
            .context("Failed to create the database named in DATABASE_URL")?;
    }
    let mut conn = connect_options(settings)?
        .connect()
        .await
        .context("Failed to connect to PostgreSQL as the schema owner")?;
    let before = applied_versions(&mut conn).await?;
    MIGRATOR
        .run(&mut conn)
        .await
        .context("Failed to apply migrations")?;
    let after = applied_versions(&mut conn).await?;
    let applied = after.into_iter().filter(|v| !before.contains(v)).collect();
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

/// True when the database answers a trivial query within the pool's acquire timeout.
pub async fn is_ready(pool: &PgPool) -> bool {
    sqlx::query("select 1").execute(pool).await.is_ok()
}

/// Whether an error means "the database is unavailable" (answer 503 so the platform
/// retries) rather than a bug or a bad request.
pub fn is_unavailable(err: &sqlx::Error) -> bool {
    match err {
        // A broken wire (including a server that closes the socket during the TLS/startup
        // exchange, as a restarting PostgreSQL does) is an outage too.
        sqlx::Error::Io(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_) => true,
        sqlx::Error::Database(db) => {
            // Class 08 connection exceptions, 57P01..57P03 shutdown / cannot connect now,
            // 53300 too many connections.
            let code = db.code().unwrap_or_default();
            code.starts_with("08") || code.starts_with("57P") || code == "53300"
        }
        _ => false,
    }
}
