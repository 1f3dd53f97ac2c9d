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

/// 2,400 characters of chat-like prose that the load cuts requests and responses from.
#[allow(dead_code)] // used by the benches that write text, not by all
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
