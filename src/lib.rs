//! channel-bridge: a multi-tenant gateway between Slack, Telegram and WhatsApp webhooks and an
//! AI agent, every tenant's rows under PostgreSQL row-level security.
//!
//! The layers, top to bottom; imports only point down (docs/architecture.md):
//! - entry points: `cli` (with `admin_cli`, `send_fixture`), `demo`, `agent_bridge`,
//!   `startup` (the application, its router and OpenAPI document)
//! - HTTP faces: `admin` and `console` over `http` (the state every handler shares,
//!   extractors, the key throttle, readiness; webhooks, media links, health), with `error`
//!   below every handler
//! - pipeline: `ingress`, `dispatch` over `delivery` over `turn`; `lifecycle`, `provision`
//! - platforms: `of` and entry points over platform folders over `contract`/`send`/`live`/`files`/`inbound`
//! - helpers: `markdown`, `media`, `retry`, `egress`, `cache`, `batch`, `telemetry`, `sign`
//! - `db`: the pool, migrations, the tenant transaction, one file per table family
//! - `domain`, `api_schema` (what the API document says of values), `settings`, `secrets`,
//!   `secret_input`

pub mod admin;
pub mod admin_cli;
pub mod agent_bridge;
pub mod api_schema;
pub mod batch;
pub mod cache;
pub mod cli;
pub mod console;
pub mod db;
pub mod delivery;
pub mod demo;
pub mod dispatch;
pub mod domain;
pub mod egress;
pub mod error;
pub mod http;
pub mod ingress;
pub mod lifecycle;
pub mod markdown;
pub mod media;
pub mod platforms;
pub mod provision;
pub mod retry;
pub mod secret_input;
pub mod secrets;
pub mod send_fixture;
pub mod settings;
pub mod sign;
pub mod startup;
pub mod telemetry;
pub mod turn;
