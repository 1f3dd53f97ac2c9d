//! What the benchmarks share: a database of their own on DATABASE_URL's server (default
//! postgres://postgres@127.0.0.1:5432/postgres), migrated by the app's own `migrate`, and
//! dropped at the end.
//!
//! On Citus: `CB_BENCH_CITUS_WORKERS=host:port,…` names the workers of the coordinator
//! DATABASE_URL points at; the database is made on every node with the extension, the
//! workers added, and the gateway's pool logs in as the login role `cb_bench_runtime`
//! (created when missing; trust authentication assumed, as on `scripts/test-citus`'s
//! cluster), given to child processes as `CB_APP_DATABASE_URL`.
//!
//! The modules hold the rest of what several benches do alike: `provision` (the run's
//! secrets key, the Telegram bot connector), `gateway` (`serve` as a child process and its
//! log), `cpu` and `memory` (/proc readings) and `webhooks` (posting and naming failures).

pub mod cpu;
pub mod gateway;
pub mod memory;
pub mod provision;
pub mod webhooks;

use anyhow::Context;
use channel_bridge::db;
use channel_bridge::settings::DatabaseSettings;
use sqlx::{Connection, Executor, PgConnection};

pub struct BenchDb {
    pub name: String,
    pub url: String,
    admin_url: String,
    /// Admin URLs of the Citus workers (database `postgres`), when on Citus.
    workers: Vec<String>,
    app_url: Option<String>,
}

const CITUS_RUNTIME_ROLE: &str = "cb_bench_runtime";

impl BenchDb {
    /// Creates and migrates `cb_bench_<random>`.
    pub async fn create() -> anyhow::Result<Self> {
        let admin_url = std::env::var("DATABASE_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
        let name = format!("cb_bench_{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
        let mut url = reqwest::Url::parse(&admin_url).context("DATABASE_URL is not a URL")?;
        url.set_path(&format!("/{name}"));
        let workers: Vec<String> = std::env::var("CB_BENCH_CITUS_WORKERS")
            .unwrap_or_default()
            .split(',')
            .filter(|w| !w.trim().is_empty())
            .map(|w| {
                let mut worker = url.clone();
                worker.set_path("/postgres");
                let (host, port) = w
                    .trim()
                    .rsplit_once(':')
                    .context("CB_BENCH_CITUS_WORKERS: host:port")?;
                worker.set_host(Some(host))?;
                worker
                    .set_port(Some(port.parse()?))
                    .map_err(|()| anyhow::anyhow!("a worker port"))?;
                Ok(worker.to_string())
            })
            .collect::<anyhow::Result<_>>()?;
        let mut db = Self {
            name,
            url: url.to_string(),
            admin_url,
            workers,
            app_url: None,
        };
        if !db.workers.is_empty() {
            db.make_on_citus().await?;
        }
        let report = db::migrate(&DatabaseSettings::from_url(db.url.clone())).await?;
        anyhow::ensure!(
            report.database_created || !db.workers.is_empty(),
            "database {} already existed",
            db.name
        );
        if let Some(app_url) = &db.app_url {
            let mut owner = PgConnection::connect(&db.url).await?;
            let exists: bool =
                sqlx::query_scalar("select exists (select 1 from pg_roles where rolname = $1)")
                    .bind(CITUS_RUNTIME_ROLE)
                    .fetch_one(&mut owner)
                    .await?;
            if !exists {
                owner
                    .execute(
                        format!("create role {CITUS_RUNTIME_ROLE} login; grant channel_bridge_app to {CITUS_RUNTIME_ROLE}")
                            .as_str(),
                    )
                    .await?;
            }
            // The gateway child processes inherit it.
            std::env::set_var("CB_APP_DATABASE_URL", app_url);
        }
        Ok(db)
    }

    /// The database on every node with the citus extension, the workers added.
    async fn make_on_citus(&mut self) -> anyhow::Result<()> {
        let statement = format!("create database {}", self.name);
        let mut urls = vec![(self.admin_url.clone(), self.url.clone())];
        for worker in &self.workers {
            let mut url = reqwest::Url::parse(worker)?;
            url.set_path(&format!("/{}", self.name));
            urls.push((worker.clone(), url.to_string()));
        }
        for (admin, url) in &urls {
            PgConnection::connect(admin)
                .await?
                .execute(statement.as_str())
                .await?;
            PgConnection::connect(url)
                .await?
                .execute("create extension citus")
                .await?;
        }
        let coordinator = reqwest::Url::parse(&self.url)?;
        let mut conn = PgConnection::connect(&self.url).await?;
        sqlx::query("select citus_set_coordinator_host($1, $2)")
            .bind(coordinator.host_str().context("a host")?)
            .bind(i32::from(coordinator.port().unwrap_or(5432)))
            .execute(&mut conn)
            .await?;
        for worker in &self.workers {
            let worker = reqwest::Url::parse(worker)?;
            sqlx::query("select citus_add_node($1, $2)")
                .bind(worker.host_str().context("a host")?)
                .bind(i32::from(worker.port().unwrap_or(5432)))
                .execute(&mut conn)
                .await?;
        }
        let mut app_url = coordinator;
        app_url
            .set_username(CITUS_RUNTIME_ROLE)
            .map_err(|()| anyhow::anyhow!("a user"))?;
        app_url
            .set_password(None)
            .map_err(|()| anyhow::anyhow!("a password"))?;
        self.app_url = Some(app_url.to_string());
        Ok(())
    }

    /// The gateway's database settings (the runtime role's pool on Citus).
    pub fn settings(&self) -> DatabaseSettings {
        let settings = DatabaseSettings::from_url(self.url.clone());
        match &self.app_url {
            Some(app_url) => settings.with_app_url(app_url.clone()),
            None => settings,
        }
    }

    /// Drops the database, its connections included; says so, or why it could not.
    pub async fn drop_now(&self) {
        let statement = format!("drop database if exists {} with (force)", self.name);
        let dropped = async {
            for node in std::iter::once(&self.admin_url).chain(&self.workers) {
                let mut admin = PgConnection::connect(node).await?;
                admin.execute(statement.as_str()).await?;
                admin.close().await?;
            }
            Ok::<(), sqlx::Error>(())
        };
        match dropped.await {
            Ok(()) => println!("database {} dropped", self.name),
            Err(err) => eprintln!("could not drop database {}: {err}", self.name),
        }
    }
}

/// 2,400 characters of chat-like prose that the load cuts requests and responses from.
pub fn filler_text() -> String {
    const WORDS: [&str; 24] = [
        "the",
        "order",
        "arrived",
        "yesterday",
        "but",
        "could",
        "you",
        "check",
        "my",
        "invoice",
        "please",
        "thanks",
        "for",
        "the",
        "quick",
        "answer",
        "when",
        "does",
        "the",
        "store",
        "open",
        "tomorrow",
        "morning",
        "again",
    ];
    let mut text = String::with_capacity(2500);
    let mut state: u32 = 12345;
    while text.len() < 2400 {
        // A small LCG: varied but reproducible text.
        state = state.wrapping_mul(1_103_515_245).wrapping_add(12345);
        text.push_str(WORDS[(state >> 16) as usize % WORDS.len()]);
        text.push(if state % 11 == 0 { '.' } else { ' ' });
    }
    text
}
