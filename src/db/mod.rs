//! PostgreSQL access: the pool, migrations, the tenant transaction and one file per table
//! family. Every pooled connection has only `channel_bridge_app`'s privileges, so RLS applies
//! (docs/security.md#security-boundary-row-level-security).

pub mod api_keys;
pub mod audit;
pub mod citus;
pub mod connectors;
pub mod console_sessions;
pub mod conversations;
pub mod holds;
pub mod inbox;
pub mod lifecycle;
pub mod links;
pub mod messages;
pub mod outage;
pub mod overview;
pub mod parts;
pub mod queue;
pub mod reactions;
pub mod replies;
pub mod sealing;
pub mod slack_budget;
pub mod tenant_tx;
pub mod tenants;

use std::future::Future;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use anyhow::Context;
use secrecy::{ExposeSecret, SecretString};
use sqlx::migrate::MigrateDatabase;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, Connection, Executor, PgPool, Postgres};

use crate::settings::DatabaseSettings;

pub use outage::is_unavailable;
pub use tenant_tx::TenantTx;

/// Owns nothing, has no BYPASSRLS: `SET ROLE` to it in the single-URL mode, inherited by the
/// login role of `CB_APP_DATABASE_URL`.
pub const APP_ROLE: &str = "channel_bridge_app";

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

/// Lazy, so the process starts (and `/readyz` answers 503) while the database is down. No
/// ping before use: a dead connection fails its first query and is replaced. Within
/// `SUSPECT_WINDOW` of a missed deadline, a silent released connection is closed: a held
/// network would keep its slot for the kernel's 15 minutes (sqlx has no client keepalive).
pub fn connect_pool(settings: &DatabaseSettings) -> anyhow::Result<PgPool> {
    let options = connect_options(settings.pool_url())?.options(session_settings(settings));
    let ping_timeout = settings.deadline().min(Duration::from_secs(1));
    // The single-URL development default connects as the owner and switches to the app role.
    let switch_role: Option<std::sync::Arc<str>> = settings
        .app_url
        .is_none()
        .then(|| format!("SET ROLE {APP_ROLE}").into());
    let pool = PgPoolOptions::new()
        .max_connections(settings.pool_size)
        .acquire_timeout(settings.acquire_timeout())
        .test_before_acquire(false)
        .after_connect(move |conn, _meta| {
            let switch_role = switch_role.clone();
            Box::pin(async move {
                if let Some(statement) = switch_role {
                    conn.execute(&*statement).await?;
                }
                Ok(())
            })
        })
        .after_release(move |conn, _meta| {
            Box::pin(async move {
                if !deadline_missed_recently() {
                    return Ok(true);
                }
                let answered = tokio::time::timeout(ping_timeout, conn.ping()).await;
                Ok(matches!(answered, Ok(Ok(()))))
            })
        })
        .connect_lazy_with(options);
    Ok(pool)
}

/// Opens the turn writer's transaction. On plain PostgreSQL its statements, the same every
/// batch and each finding its rows by key, are planned once per connection instead of once
/// per batch (`force_generic_plan` for this transaction alone; docs/benchmarks.md, "Planned
/// again for every batch"). Where Citus is loaded (`citus.version` defined: migration 36's test)
/// they keep `auto`: Citus cannot plan its distributed statements generically
/// ("could not create distributed plan"). The claim keeps `auto` everywhere: its generic plan
/// ran twice as long as the custom ones.
pub(crate) const BEGIN_BATCH: &str = "begin; select set_config('plan_cache_mode',
    case when current_setting('citus.version', true) is null then 'force_generic_plan'
         else 'auto' end, true)";

fn session_settings(settings: &DatabaseSettings) -> Vec<(&'static str, String)> {
    let mut options = vec![
        ("tcp_keepalives_idle", "10".to_owned()),
        ("tcp_keepalives_interval", "5".to_owned()),
        ("tcp_keepalives_count", "3".to_owned()),
    ];
    if settings.statement_timeout_ms > 0 {
        options.push(("statement_timeout", settings.statement_timeout_ms.to_string()));
    }
    if settings.idle_in_transaction_timeout_ms > 0 {
        options.push((
            "idle_in_transaction_session_timeout",
            settings.idle_in_transaction_timeout_ms.to_string(),
        ));
    }
    options
}

const SUSPECT_WINDOW: Duration = Duration::from_secs(60);

/// Milliseconds since `EPOCH` of the last missed deadline (0: none yet).
static LAST_MISSED_MS: AtomicU64 = AtomicU64::new(0);
static EPOCH: OnceLock<Instant> = OnceLock::new();

fn since_epoch() -> Duration {
    EPOCH.get_or_init(Instant::now).elapsed()
}

/// Something waited on the database past its deadline: see `connect_pool`.
pub fn deadline_missed() {
    let now = u64::try_from(since_epoch().as_millis())
        .unwrap_or(u64::MAX)
        .max(1);
    LAST_MISSED_MS.store(now, Ordering::Relaxed);
    metrics::counter!("channel_bridge_db_deadlines_missed_total").increment(1);
}

fn deadline_missed_recently() -> bool {
    let last = LAST_MISSED_MS.load(Ordering::Relaxed);
    last > 0 && since_epoch().saturating_sub(Duration::from_millis(last)) < SUSPECT_WINDOW
}

pub fn deadline_error() -> sqlx::Error {
    sqlx::Error::Io(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        "the database did not answer within the deadline",
    ))
}

/// Past the deadline the work is dropped (a transaction in it rolls back).
pub async fn within<T, E: From<sqlx::Error>>(
    deadline: Duration,
    work: impl Future<Output = Result<T, E>>,
) -> Result<T, E> {
    match tokio::time::timeout(deadline, work).await {
        Ok(result) => result,
        Err(_) => {
            deadline_missed();
            Err(deadline_error().into())
        }
    }
}

fn connect_options(url: &SecretString) -> anyhow::Result<PgConnectOptions> {
    // The error names no URL: it would carry the password.
    let options = PgConnectOptions::from_str(url.expose_secret())
        .context("DATABASE_URL or CB_APP_DATABASE_URL is not a valid PostgreSQL URL")?
        .application_name("channel-bridge")
        // Statement logging would put message text in the server log at debug level.
        .disable_statement_logging();
    Ok(options)
}

/// Asked once per process. A few hot statements have two shapes: one statement across the
/// tenant tables and the queue on PostgreSQL, statements routed to one shard on Citus.
pub(crate) async fn on_citus(conn: &mut sqlx::PgConnection) -> Result<bool, sqlx::Error> {
    static CITUS: OnceLock<bool> = OnceLock::new();
    if let Some(known) = CITUS.get() {
        return Ok(*known);
    }
    let citus: bool =
        sqlx::query_scalar("select exists (select 1 from pg_extension where extname = 'citus')")
            .fetch_one(conn)
            .await?;
    Ok(*CITUS.get_or_init(|| citus))
}

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

/// Host, port and database of the pool's URL, never the user or password.
pub fn describe(settings: &DatabaseSettings) -> String {
    match PgConnectOptions::from_str(settings.pool_url().expose_secret()) {
        Ok(options) => format!(
            "{}:{}/{}",
            options.get_host(),
            options.get_port(),
            options.get_database().unwrap_or("(default database)")
        ),
        Err(_) => "DATABASE_URL".to_owned(),
    }
}

/// What `serve` checks before it starts; the error is one line that says what to do.
pub async fn check_ready_to_serve(settings: &DatabaseSettings) -> anyhow::Result<Schema> {
    let pool = connect_pool(settings)?;
    let limit = settings.acquire_timeout() + settings.deadline();
    // The runtime role first: a role without the app role's grants cannot read the schema
    // version, and "run migrate" would be the wrong advice.
    let fault = match settings.app_url {
        Some(_) => within(limit, runtime_role_fault(&pool)).await,
        None => Ok(None),
    };
    let schema = match fault {
        Ok(None) => within(limit, schema(&pool)).await,
        Ok(Some(fault)) => {
            pool.close().await;
            anyhow::bail!("{}: CB_APP_DATABASE_URL {fault}", describe(settings));
        }
        Err(err) => Err(err),
    };
    let schema = match schema {
        Ok(schema) if schema.is_current() => match within(limit, citus::serve_fault(&pool, settings)).await {
            Ok(None) => Ok(schema),
            Ok(Some(fault)) => {
                pool.close().await;
                anyhow::bail!("{}: {fault}", describe(settings));
            }
            Err(err) => Err(err),
        },
        other => other,
    };
    pool.close().await;
    match schema {
        Ok(schema) if schema.is_current() => Ok(schema),
        Ok(behind) => anyhow::bail!("{}: {behind}", describe(settings)),
        Err(err) if means_no_schema(&err) => {
            anyhow::bail!("{}: {}", describe(settings), Schema::Behind { database: None })
        }
        Err(err) if is_refused(&err) => anyhow::bail!(
            "PostgreSQL at {} refuses the gateway's role ({err}): check its grants (docs/security.md, \"Security boundary\")",
            describe(settings)
        ),
        Err(err) => anyhow::bail!(
            "cannot reach PostgreSQL at {} ({err}): start it or fix DATABASE_URL",
            describe(settings)
        ),
    }
}

/// The role must have the app role's privileges and nothing that would lift RLS. Names no
/// role: the user name is part of the credentials.
async fn runtime_role_fault(pool: &PgPool) -> Result<Option<&'static str>, sqlx::Error> {
    let (superuser, bypass_rls, app_member, owns): (bool, bool, bool, bool) = sqlx::query_as(
        "select r.rolsuper, r.rolbypassrls, pg_has_role(current_user, $1, 'USAGE'),
                exists (select 1 from pg_class c
                         where c.relowner = r.oid and c.relnamespace = 'public'::regnamespace)
           from pg_roles r where r.rolname = current_user",
    )
    .bind(APP_ROLE)
    .fetch_one(pool)
    .await?;
    let fault = if superuser {
        Some("logs in as a superuser: use a login role that is a member of channel_bridge_app (docs/security.md, \"Security boundary\")")
    } else if bypass_rls {
        Some("logs in as a role with BYPASSRLS: row-level security would not apply")
    } else if owns {
        Some("logs in as a role that owns tables of the schema: it could alter their policies")
    } else if !app_member {
        Some("logs in as a role without the privileges of channel_bridge_app (GRANT channel_bridge_app TO it, with INHERIT)")
    } else {
        None
    };
    Ok(fault)
}

/// insufficient_privilege (a missing grant, a Citus worker login, a row RLS refuses): a
/// deployment fault, neither a missing schema nor an outage.
pub fn is_refused(err: &sqlx::Error) -> bool {
    matches!(err, sqlx::Error::Database(db) if db.code().as_deref() == Some("42501"))
}

/// Says "run migrate" when `err` comes from a database without the schema.
pub fn explain_missing_schema(err: anyhow::Error) -> anyhow::Error {
    let missing = err.chain().find_map(|cause| {
        sqlx_error(cause)
            .filter(|err| means_no_schema(err))
            .map(ToString::to_string)
    });
    match missing {
        Some(cause) => anyhow::anyhow!("{} ({cause})", Schema::Behind { database: None }),
        None => err,
    }
}

/// One cause of an error chain as the database error it is, shared (`Arc`) or not.
fn sqlx_error<'a>(cause: &'a (dyn std::error::Error + 'static)) -> Option<&'a sqlx::Error> {
    cause.downcast_ref::<sqlx::Error>().or_else(|| {
        cause
            .downcast_ref::<std::sync::Arc<sqlx::Error>>()
            .map(AsRef::as_ref)
    })
}

pub fn binary_schema_version() -> i64 {
    MIGRATOR.iter().map(|m| m.version).max().unwrap_or(0)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Schema {
    /// The database may have newer migrations: an older instance during a rolling deploy.
    Current { database: i64 },
    /// `None`: the schema is absent or older than the version table's grant.
    Behind { database: Option<i64> },
}

impl Schema {
    pub fn is_current(self) -> bool {
        matches!(self, Self::Current { .. })
    }
}

pub const RUN_MIGRATE: &str =
    "run `channel-bridge migrate` (or `scripts/run migrate`), or start `serve --migrate`";

impl std::fmt::Display for Schema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let binary = binary_schema_version();
        match self {
            Self::Current { database } => write!(f, "schema at {database} (binary {binary})"),
            Self::Behind {
                database: Some(database),
            } => write!(
                f,
                "the database schema is at migration {database}, this binary needs {binary}: {RUN_MIGRATE}"
            ),
            Self::Behind { database: None } => write!(
                f,
                "the database has no channel-bridge schema (or an old one): {RUN_MIGRATE}"
            ),
        }
    }
}

/// As the app role. A missing schema is `Schema::Behind`, never an error.
pub async fn schema<'e>(db: impl sqlx::PgExecutor<'e>) -> Result<Schema, sqlx::Error> {
    let version: Result<Option<i64>, sqlx::Error> =
        sqlx::query_scalar("select max(version) from _sqlx_migrations where success")
            .fetch_one(db)
            .await;
    match version {
        Ok(Some(database)) if database >= binary_schema_version() => Ok(Schema::Current { database }),
        Ok(database) => Ok(Schema::Behind { database }),
        // Before migration 15 the app role may not read the version table.
        Err(err) if means_no_schema(&err) || is_refused(&err) => Ok(Schema::Behind { database: None }),
        Err(err) => Err(err),
    }
}

/// A missing table, column, function, database or app role.
pub fn means_no_schema(err: &sqlx::Error) -> bool {
    let sqlx::Error::Database(db) = err else {
        return false;
    };
    match db.code().as_deref() {
        // undefined_table, undefined_column, undefined_function, invalid_catalog_name
        Some("42P01" | "42703" | "42883" | "3D000") => true,
        Some("22023") => db.message().contains(APP_ROLE),
        _ => false,
    }
}

pub fn secret_error(err: &sqlx::Error) -> Option<&crate::secrets::SecretError> {
    match err {
        sqlx::Error::Decode(source) => source.downcast_ref(),
        _ => None,
    }
}

/// A value that cannot be stored (NUL byte, bad encoding, too long): a 4xx, never a 500.
pub fn is_unstorable_value(err: &sqlx::Error) -> bool {
    let sqlx::Error::Database(db) = err else {
        return false;
    };
    // Class 22: data exceptions; 54000: index row size exceeds maximum.
    db.code()
        .is_some_and(|code| code.starts_with("22") || code == "54000")
        && !means_no_schema(err)
}
