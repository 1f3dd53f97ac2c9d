//! PostgreSQL access: the pool (every connection runs as, or as a member of,
//! `channel_bridge_app`, so RLS applies), migrations, the tenant transaction and one file per table family.
//!
//! Queries are runtime-checked `sqlx::query_as` calls; every one of them is exercised by the
//! integration tests against a real database (README, "Checked SQL").

pub mod api_keys;
pub mod audit;
pub mod connectors;
pub mod console_sessions;
pub mod conversations;
pub mod lifecycle;
pub mod links;
pub mod messages;
pub mod queue;
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

pub use tenant_tx::TenantTx;

/// The role whose privileges every pooled connection has: switched to with `SET ROLE` in the
/// single-URL mode, inherited by the login role of `CB_APP_DATABASE_URL`. It owns nothing,
/// has no BYPASSRLS and only the grants the migrations give it.
pub const APP_ROLE: &str = "channel_bridge_app";

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

/// Opens the application pool. Connections are opened lazily, so the process starts (and
/// `/readyz` answers 503) while the database is down.
///
/// Who the sessions are (README, "Security boundary"):
/// - with `CB_APP_DATABASE_URL`, connections log in as that runtime role, which has the app
///   role's privileges by membership and no others: there is no more privileged role for
///   injected SQL to `RESET ROLE` or `SET ROLE` to;
/// - without it (the single-URL development default), connections log in as the
///   `DATABASE_URL` owner and run `SET ROLE channel_bridge_app` before they are handed out.
///   RLS then applies to every query the code sends, but `RESET ROLE` would undo it.
///
/// Connections are not pinged before each use (`test_before_acquire(false)`): the ping was
/// a whole round trip in front of every transaction. A connection that died meanwhile (a
/// database restart) fails its first query instead, which is an outage answer (503, or a
/// retried job) like any other, and the pool replaces it.
///
/// Bounded waiting (a network that holds traffic reports no error for minutes):
/// - the sessions carry a server-side `statement_timeout` and
///   `idle_in_transaction_session_timeout` (`CB_DB_STATEMENT_TIMEOUT_MS`,
///   `CB_DB_IDLE_IN_TRANSACTION_TIMEOUT_MS`), and server-side TCP keepalives, so the server
///   ends the session of a client that vanished and releases its locks;
/// - every interaction is bounded on the client by `within` (`CB_DB_DEADLINE_MS`), and
///   acquiring a connection by `CB_DB_ACQUIRE_TIMEOUT_MS`;
/// - a connection abandoned mid-statement is checked with a ping when it is released, and
///   that ping could hang as long as the statement did. While a deadline was missed
///   recently (`SUSPECT_WINDOW`), the release first pings with a short timeout of its own
///   and closes the connection when it does not answer, so a held network does not keep
///   the pool's slots for the kernel's 15 minutes. sqlx offers no client-side TCP
///   keepalive; these deadlines stand in for it.
pub fn connect_pool(settings: &DatabaseSettings) -> anyhow::Result<PgPool> {
    let options = connect_options(settings.pool_url())?.options(session_settings(settings));
    let ping_timeout = settings.deadline().min(Duration::from_secs(1));
    let switch_role = settings.app_url.is_none();
    let pool = PgPoolOptions::new()
        .max_connections(settings.pool_size)
        .acquire_timeout(settings.acquire_timeout())
        .test_before_acquire(false)
        .after_connect(move |conn, _meta| {
            Box::pin(async move {
                if switch_role {
                    conn.execute("SET ROLE channel_bridge_app").await?;
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

/// Startup parameters of the pool's sessions (`-c name=value`).
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

/// How long after a missed deadline releases check connections with a bounded ping.
const SUSPECT_WINDOW: Duration = Duration::from_secs(60);

/// Milliseconds since `EPOCH` of the last missed deadline (0: none yet).
static LAST_MISSED_MS: AtomicU64 = AtomicU64::new(0);
static EPOCH: OnceLock<Instant> = OnceLock::new();

fn since_epoch() -> Duration {
    EPOCH.get_or_init(Instant::now).elapsed()
}

/// Tells the pool that something waited on the database past its deadline (here, or a
/// request answered 503 by its own deadline): see `connect_pool`.
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

/// The error of an interaction that missed its deadline: an outage (`is_unavailable`).
pub fn deadline_error() -> sqlx::Error {
    sqlx::Error::Io(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        "the database did not answer within the deadline",
    ))
}

/// Runs one database interaction with a client-side deadline. Past it the work is dropped
/// (a transaction in it rolls back) and the caller gets `deadline_error`.
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

/// Whether the database is a Citus cluster; asked once per process. A few hot statements
/// have two shapes, each correct on both servers and the faster on its own: one statement
/// across the tenant tables and the queue on PostgreSQL, statements Citus routes to one
/// shard on Citus (`messages::insert_many`, `turns::store_answers`).
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

/// What `migrate` did.
#[derive(Debug, Clone, serde::Serialize, PartialEq, Eq)]
pub struct MigrateReport {
    pub database_created: bool,
    pub applied: Vec<i64>,
}

/// Creates the database when missing, then applies pending migrations as the owner
/// (the DATABASE_URL user, not the app role). A second run applies nothing.
/// Distributes the tables of a migrated database on Citus, in the order Citus accepts
/// (`channel_bridge_distribute()`, migration 22): for a database that got the `citus`
/// extension after it was migrated. Runs as the schema owner; safe to repeat. Says what it
/// did, or that there is no Citus.
pub async fn distribute_on_citus(settings: &DatabaseSettings) -> anyhow::Result<String> {
    let mut conn = connect_options(&settings.url)?
        .connect()
        .await
        .context("Failed to connect to PostgreSQL as the schema owner")?;
    let schema = schema(&mut conn)
        .await
        .context("Failed to read the schema version")?;
    if !schema.is_current() {
        anyhow::bail!("{schema}: run `channel-bridge migrate` first");
    }
    let mut tx = conn.begin().await.context("Failed to begin")?;
    let done: String = sqlx::query_scalar("select channel_bridge_distribute()")
        .fetch_one(&mut *tx)
        .await
        .context("Failed to distribute the tables")?;
    tx.commit().await.context("Failed to commit the distribution")?;
    Ok(done)
}

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

/// A database URL fit for messages: the password, if any, replaced by `****`.
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

/// What the server said, once: a database error's own message, not sqlx's wrapping of it
/// followed by the same message again.
fn cause(err: &sqlx::Error) -> String {
    match err.as_database_error() {
        Some(db) => db.message().to_owned(),
        None => err.to_string(),
    }
}

/// Where the pool connects (CB_APP_DATABASE_URL or DATABASE_URL), for messages: host, port
/// and database, never the user or password.
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

/// What `serve` checks before it starts: the database answers, as the app role, within
/// the acquire timeout and the deadline, and its schema is at this binary's version. The
/// error is one line that says what to do.
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
        Ok(schema) if schema.is_current() => match within(limit, citus_fault(&pool, settings)).await {
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
            "PostgreSQL at {} refuses the gateway's role ({err}): check its grants (README, \"Security boundary\")",
            describe(settings)
        ),
        Err(err) => anyhow::bail!(
            "cannot reach PostgreSQL at {} ({err}): start it or fix DATABASE_URL",
            describe(settings)
        ),
    }
}

/// What keeps the pool from working on a Citus cluster (`None`: nothing, or no Citus).
/// Citus opens its connections to the workers as the session's role, so the pool must log
/// in as a runtime role (the `SET ROLE` mode's `channel_bridge_app` may not log in), and
/// that role must get into every worker: one statement touching every shard proves it.
async fn citus_fault(pool: &PgPool, settings: &DatabaseSettings) -> Result<Option<String>, sqlx::Error> {
    let citus: bool =
        sqlx::query_scalar("select exists (select 1 from pg_extension where extname = 'citus')")
            .fetch_one(pool)
            .await?;
    if !citus {
        return Ok(None);
    }
    if settings.app_url.is_none() {
        return Ok(Some(
            "this is a Citus cluster, whose workers the gateway's role must log in to: set \
             CB_APP_DATABASE_URL to a runtime login role (README, \"Running on Citus\")"
                .to_owned(),
        ));
    }
    // Row-level security shows no rows without a tenant; the workers are reached all the same.
    let reached = sqlx::query("select count(*) from channel_connectors")
        .execute(pool)
        .await;
    Ok(reached.err().map(|err| {
        format!(
            "the runtime role of CB_APP_DATABASE_URL cannot reach the Citus workers ({err}): give it \
             a login on every node and the coordinator its credentials (README, \"Running on Citus\")"
        )
    }))
}

/// What is wrong with the login role of `CB_APP_DATABASE_URL` (`None`: nothing): it must
/// have the app role's privileges and nothing that would lift RLS. Names no role (the user
/// name is part of the credentials).
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
        Some("logs in as a superuser: use a login role that is a member of channel_bridge_app (README, \"Security boundary\")")
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

/// Whether the database refused a statement of the app role (insufficient_privilege: a
/// missing grant, a role that may not log in on a Citus worker, or a row that row-level
/// security refuses): a deployment fault, not a missing schema and not an outage.
pub fn is_refused(err: &sqlx::Error) -> bool {
    matches!(err, sqlx::Error::Database(db) if db.code().as_deref() == Some("42501"))
}

/// Says "run migrate" when `err` comes from a database without the schema; other errors
/// are returned as they are. For the CLI's errors.
pub fn explain_missing_schema(err: anyhow::Error) -> anyhow::Error {
    let missing = err.chain().find_map(|cause| {
        cause
            .downcast_ref::<sqlx::Error>()
            .or_else(|| {
                cause
                    .downcast_ref::<std::sync::Arc<sqlx::Error>>()
                    .map(AsRef::as_ref)
            })
            .filter(|err| means_no_schema(err))
            .map(ToString::to_string)
    });
    match missing {
        Some(cause) => anyhow::anyhow!("{} ({cause})", Schema::Behind { database: None }),
        None => err,
    }
}

/// The newest migration this binary carries.
pub fn binary_schema_version() -> i64 {
    MIGRATOR.iter().map(|m| m.version).max().unwrap_or(0)
}

/// Where the database's schema stands next to the binary's migrations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Schema {
    /// Every migration of the binary is applied (the database may have newer ones: an
    /// instance of the previous release during a rolling deploy).
    Current { database: i64 },
    /// Migrations are missing (`None`: the schema is absent or older than the version
    /// table's grant).
    Behind { database: Option<i64> },
}

impl Schema {
    pub fn is_current(self) -> bool {
        matches!(self, Self::Current { .. })
    }
}

/// The one line `serve`, `/readyz` and the CLI say when the schema is not there.
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

/// Reads the applied migrations as the app role. An error is the database being
/// unreachable (or a bug), never a missing schema: that is `Schema::Behind`.
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

/// Whether a database error says the schema (or the app role the migrations create) is
/// not there: a missing table, column, function or role.
pub fn means_no_schema(err: &sqlx::Error) -> bool {
    let sqlx::Error::Database(db) = err else {
        return false;
    };
    match db.code().as_deref() {
        // undefined_table, undefined_column, undefined_function, invalid_catalog_name (the
        // database itself is missing: `migrate` creates it)
        Some("42P01" | "42703" | "42883" | "3D000") => true,
        // `SET ROLE channel_bridge_app` when the role does not exist.
        Some("22023") => db.message().contains(APP_ROLE),
        _ => false,
    }
}

/// The secret that could not be sealed or opened, when that is what failed
/// (`db::tenants::unopened`).
pub fn secret_error(err: &sqlx::Error) -> Option<&crate::secrets::SecretError> {
    match err {
        sqlx::Error::Decode(source) => source.downcast_ref(),
        _ => None,
    }
}

/// Whether a database error is about a value that cannot be stored (a NUL byte, an
/// invalid encoding, a value too long for a column or an index): the request's fault, a
/// 4xx, never a 500.
pub fn is_unstorable_value(err: &sqlx::Error) -> bool {
    let sqlx::Error::Database(db) = err else {
        return false;
    };
    // Class 22 is data exceptions; 54000 program_limit_exceeded is "index row size …
    // exceeds maximum".
    db.code()
        .is_some_and(|code| code.starts_with("22") || code == "54000")
        && !means_no_schema(err)
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
