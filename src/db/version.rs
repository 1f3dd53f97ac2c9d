//! The schema version the binary needs, and the one the database holds.

use super::errors::{is_refused, means_no_schema, sqlx_error};
use super::migrate::MIGRATOR;

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
