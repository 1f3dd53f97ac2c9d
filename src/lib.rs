//! channel-bridge: a multi-tenant gateway between Slack, Telegram and WhatsApp webhooks and an
//! AI agent, every tenant's rows under PostgreSQL row-level security.
//!
//! The layers, top to bottom; imports only point down (docs/architecture.md#layers):
//! - entry points: `cli` (with `admin_cli`), `demo`, `agent_bridge`; the application: `startup`
//! - HTTP faces: `console` over `admin` over `http` (shared state, extractors, throttle,
//!   webhooks, media links, health)
//! - pipeline: `dispatch` over `delivery` and `ingress` over `turn`; `lifecycle`, `provision`
//! - `platforms`: `of` and its entry points over the platform folders over `contract`
//! - infrastructure: `telemetry`, `cache`, `batch`, `sign`, `send_fixture`, `error`
//! - `db` (the pool, migrations, the tenant transaction), `retry`
//! - foundation: `settings`, `media`, `secrets`, `api_schema`, `markdown`, `egress`,
//!   `domain`, `secret_input`

pub mod admin;
pub mod admin_cli;
pub mod agent_api;
pub mod agent_bridge;
pub mod api_schema;
pub mod batch;
pub mod cache;
pub mod choices;
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
