//! What the benchmarks share: a database of their own on DATABASE_URL's server (default
//! postgres://postgres@127.0.0.1:5432/postgres), migrated by the app's own `migrate`, and
//! dropped at the end.

use anyhow::Context;
use channel_bridge::db;
use channel_bridge::settings::DatabaseSettings;
use sqlx::{Connection, Executor, PgConnection};

pub struct BenchDb {
    pub name: String,
    pub url: String,
    admin_url: String,
}

impl BenchDb {
    /// Creates and migrates `cb_bench_<random>`.
    pub async fn create() -> anyhow::Result<Self> {
        let admin_url = std::env::var("DATABASE_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
        let name = format!("cb_bench_{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
        let mut url = reqwest::Url::parse(&admin_url).context("DATABASE_URL is not a URL")?;
        url.set_path(&format!("/{name}"));
        let db = Self {
            name,
            url: url.to_string(),
            admin_url,
        };
        let report = db::migrate(&db.settings()).await?;
        anyhow::ensure!(report.database_created, "database {} already existed", db.name);
        Ok(db)
    }

    pub fn settings(&self) -> DatabaseSettings {
        DatabaseSettings::from_url(self.url.clone())
    }

    /// Drops the database, its connections included; says so, or why it could not.
    pub async fn drop_now(&self) {
        let statement = format!("drop database if exists {} with (force)", self.name);
        let dropped = async {
            let mut admin = PgConnection::connect(&self.admin_url).await?;
            admin.execute(statement.as_str()).await?;
            admin.close().await
        };
        match dropped.await {
            Ok(()) => println!("database {} dropped", self.name),
            Err(err) => eprintln!("could not drop database {}: {err}", self.name),
        }
    }
}
