//! Test harness: a fresh database per test, the real application on port 0, and a TCP proxy
//! in front of PostgreSQL that a test can cut to simulate an outage. A test of the turn's
//! path (webhook, worker, agent, platforms) starts from `Pipeline` and builds any further
//! worker with `worker`.

pub mod api;
pub mod citus;
pub mod db_proxy;
pub mod fake_agent;
pub mod fake_files;
pub mod fake_platforms;
pub mod otlp_collector;
pub mod pipeline;
pub mod platforms;
pub mod private_pg;
pub mod serve;

pub use pipeline::{worker, worker_with, Pipeline};

use std::net::SocketAddr;

use channel_bridge::db::TenantTx;
use channel_bridge::domain::TenantId;
use channel_bridge::settings::{DatabaseSettings, ServeSettings};
use channel_bridge::startup::Application;
use sqlx::{Connection, Executor, PgConnection, PgPool};

/// The server tests create their databases on. README's test command sets DATABASE_URL.
pub fn admin_url() -> String {
    std::env::var("DATABASE_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

/// `admin_url` with another database name (or host:port).
pub fn url_with(db_name: &str, host_port: Option<SocketAddr>) -> String {
    let mut url = reqwest::Url::parse(&admin_url()).expect("DATABASE_URL is a valid URL");
    url.set_path(&format!("/{db_name}"));
    if let Some(addr) = host_port {
        url.set_host(Some(&addr.ip().to_string()))
            .expect("URL has a host");
        url.set_port(Some(addr.port())).expect("URL has a port");
    }
    url.to_string()
}

/// A database created for one test and dropped (with its connections) when the test ends,
/// pass or fail.
pub struct TestDb {
    pub name: String,
}

impl TestDb {
    /// An empty database, not migrated. On Citus (`citus::workers`), on every node with the
    /// extension, the workers added.
    pub async fn empty() -> Self {
        let name = format!("cbt_{}", uuid::Uuid::new_v4().simple());
        match citus::workers() {
            Some(workers) => citus::create_database(&name, &workers).await,
            None => create_database(&admin_url(), &format!("create database {name}")).await,
        }
        Self { name }
    }

    /// A database with every migration applied by the application's own `migrate`. On
    /// Citus a copy, on every node, of a template migrated once per test process.
    pub async fn migrated() -> Self {
        if let Some(workers) = citus::workers() {
            let name = format!("cbt_{}", uuid::Uuid::new_v4().simple());
            citus::copy_template(&name, &workers).await;
            let db = Self { name };
            db.guard_search_path().await;
            return db;
        }
        let db = Self::empty().await;
        channel_bridge::db::migrate(&db.settings())
            .await
            .expect("migrations apply");
        db.forbid_set_config().await;
        db
    }

    /// Makes `set_config('app.tenant_id', …)` fail in this database: Citus
    /// does not propagate it to its workers, so the tenant must be set with `SET LOCAL`.
    /// A `set_config` placed ahead of `pg_catalog` on every session's search path raises for
    /// that setting and passes any other on.
    async fn forbid_set_config(&self) {
        let mut owner = self.owner_conn().await;
        owner
            .execute(SET_CONFIG_GUARD)
            .await
            .expect("the set_config guard installs");
        self.guard_search_path().await;
    }

    /// Puts the guard first on every new session's search path (a database setting, which a
    /// copy from a template does not inherit).
    async fn guard_search_path(&self) {
        let mut owner = self.owner_conn().await;
        owner
            .execute(
                format!(
                    "alter database {} set search_path = test_guard, pg_catalog, public",
                    self.name
                )
                .as_str(),
            )
            .await
            .expect("the guard goes first on the search path");
    }

    pub fn url(&self) -> String {
        url_with(&self.name, None)
    }

    /// The application's database settings: the owner's URL, and on Citus the runtime login
    /// role's (Citus connects to its workers as the session's role, which must log in).
    pub fn settings(&self) -> DatabaseSettings {
        let settings = DatabaseSettings::from_url(self.url());
        match citus::workers() {
            Some(_) => settings.with_app_url(citus::runtime_url(&self.name)),
            None => settings,
        }
    }

    /// Test settings of `serve` on this database (`ServeSettings::for_database`, with the
    /// runtime role on Citus).
    pub fn serve_settings(&self) -> ServeSettings {
        let mut settings = ServeSettings::for_database(self.url());
        settings.database = self.settings().with_secrets(settings.database.secrets.clone());
        settings
    }

    /// Points `settings` at `addr` (a `DbProxy` in front of the server) instead of the
    /// server: the owner's URL and, on Citus, the runtime role's; in clear text, so the
    /// proxy can read the messages.
    pub fn route_via(&self, settings: &mut DatabaseSettings, addr: SocketAddr) {
        settings.url = in_clear(url_with(&self.name, Some(addr))).into();
        if settings.app_url.is_some() {
            settings.app_url = Some(in_clear(citus::runtime_url_at(&self.name, Some(addr))).into());
        }
    }

    /// The environment a `channel-bridge` child process needs for this database.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        let mut env = vec![("DATABASE_URL", self.url())];
        if citus::workers().is_some() {
            env.push(("CB_APP_DATABASE_URL", citus::runtime_url(&self.name)));
        }
        env
    }

    /// The application's own pool (connections run as `channel_bridge_app`).
    pub fn app_pool(&self) -> PgPool {
        channel_bridge::db::connect_pool(&self.settings()).expect("pool settings are valid")
    }

    /// A connection as the owner, for setting up states the app cannot (fault injection).
    pub async fn owner_conn(&self) -> PgConnection {
        PgConnection::connect(&self.url()).await.expect("owner connects")
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let statement = format!("drop database if exists {} with (force)", self.name);
        // Drop runs outside async context; a short-lived runtime on its own thread does it.
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            runtime.block_on(async {
                // Every node, whatever happens on one of them.
                for node in citus::all_nodes() {
                    if let Ok(mut admin) = PgConnection::connect(&node).await {
                        let _ = admin.execute(statement.as_str()).await;
                    }
                }
                Some(())
            })
        })
        .join();
    }
}

/// Runs the `channel-bridge` binary with `args` against `db`, its URLs in the environment as
/// an operator gives them (never on the command line).
pub async fn run_cli(db: &TestDb, args: &[&str]) -> std::process::Output {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let env = db.env();
    tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_channel-bridge"))
            .args(&args)
            .envs(env)
            .env("RUST_LOG", "warn")
            .output()
            .expect("the binary runs")
    })
    .await
    .expect("the binary's thread ends")
}

/// `url` with `sslmode=disable`.
fn in_clear(url: String) -> String {
    let mut url = reqwest::Url::parse(&url).expect("a valid URL");
    let kept: Vec<(String, String)> = url
        .query_pairs()
        .filter(|(name, _)| name != "sslmode")
        .map(|(name, value)| (name.into_owned(), value.into_owned()))
        .collect();
    url.query_pairs_mut()
        .clear()
        .extend_pairs(kept)
        .append_pair("sslmode", "disable");
    url.to_string()
}

/// Runs `create database …` on the server at `admin`.
async fn create_database(admin: &str, statement: &str) {
    let mut admin = PgConnection::connect(admin)
        .await
        .expect("test PostgreSQL answers at DATABASE_URL");
    admin.execute(statement).await.expect("create test database");
}

/// Makes `set_config('app.tenant_id', …)` fail (see `TestDb::forbid_set_config`).
const SET_CONFIG_GUARD: &str = r#"create schema test_guard;
   create function test_guard.set_config(setting text, value text, is_local boolean)
   returns text language plpgsql as $$
   begin
       if setting = 'app.tenant_id' then
           raise exception 'set_config(''app.tenant_id'', …) is forbidden: set the tenant with SET LOCAL';
       end if;
       return pg_catalog.set_config(setting, value, is_local);
   end $$;
   grant usage on schema test_guard to channel_bridge_app;"#;

/// Waits until `done` holds, looking every few milliseconds, for at most 20 s.
pub async fn eventually<F, Fut>(what: &str, mut done: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !done().await {
        assert!(std::time::Instant::now() < deadline, "timed out waiting: {what}");
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

/// The running application.
#[allow(dead_code)] // fields and helpers used by some test modules only
pub struct TestApp {
    pub addr: SocketAddr,
    pub pool: PgPool,
    pub client: reqwest::Client,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
    pub db: std::sync::Arc<TestDb>,
}

#[allow(dead_code)]
impl TestApp {
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// Stops the application as SIGTERM would and waits for it to drain.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        match self.task.take() {
            Some(task) => task.await?,
            None => Ok(()),
        }
    }

    pub async fn tenant_tx(&self, tenant: TenantId) -> TenantTx {
        TenantTx::begin(&self.pool, tenant)
            .await
            .expect("tenant transaction begins")
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

/// A fresh migrated database and the application serving it.
pub async fn spawn_app() -> TestApp {
    spawn_app_with(|_, _| {}).await
}

/// Like `spawn_app`, with settings adjusted first (the database URL may be replaced, e.g. to
/// point through a `DbProxy`).
pub async fn spawn_app_with(configure: impl FnOnce(&mut ServeSettings, &TestDb)) -> TestApp {
    let db = TestDb::migrated().await;
    let mut settings = db.serve_settings();
    settings.worker = false;
    configure(&mut settings, &db);
    start(std::sync::Arc::new(db), settings).await
}

/// Another application on an existing test database (e.g. a worker-only instance).
pub async fn spawn_app_on(
    db: &std::sync::Arc<TestDb>,
    configure: impl FnOnce(&mut ServeSettings),
) -> TestApp {
    let mut settings = db.serve_settings();
    settings.worker = false;
    configure(&mut settings);
    start(db.clone(), settings).await
}

async fn start(db: std::sync::Arc<TestDb>, settings: ServeSettings) -> TestApp {
    let pool = channel_bridge::db::connect_pool(&settings.database).expect("pool settings are valid");
    let app = Application::build(settings).await.expect("application builds");
    let addr = app.local_addr().expect("HTTP is enabled");
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(app.run_until(async {
        let _ = rx.await;
    }));
    TestApp {
        addr,
        pool,
        client: reqwest::Client::new(),
        shutdown: Some(tx),
        task: Some(task),
        db,
    }
}
