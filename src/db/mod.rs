//! PostgreSQL access: the pool (`pool.rs`) and its deadlines (`deadline.rs`), migrations
//! (`migrate.rs`) and the schema version (`version.rs`), what `serve` checks first
//! (`readiness.rs`), what an error means (`errors.rs`, `outage.rs`), Citus (`citus.rs`), the
//! tenant transaction and one file per table family. Every pooled connection has only
//! `channel_bridge_app`'s privileges, so RLS applies
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

mod deadline;
mod errors;
mod migrate;
mod pool;
mod readiness;
mod version;

pub(crate) use citus::on_citus;
pub use deadline::{deadline_error, deadline_missed, within};
pub use errors::{is_refused, is_unstorable_value, means_no_schema, secret_error};
pub use migrate::{masked_url, migrate, MigrateReport};
pub use outage::is_unavailable;
pub use pool::connect_pool;
pub(crate) use pool::BEGIN_BATCH;
pub use readiness::{check_ready_to_serve, describe};
pub use tenant_tx::TenantTx;
pub use version::{binary_schema_version, explain_missing_schema, schema, Schema, RUN_MIGRATE};

/// Owns nothing, has no BYPASSRLS: `SET ROLE` to it in the single-URL mode, inherited by the
/// login role of `CB_APP_DATABASE_URL`.
pub const APP_ROLE: &str = "channel_bridge_app";
