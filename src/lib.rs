//! channel-bridge: a multi-tenant gateway between Slack, Telegram and WhatsApp webhooks and an
//! AI agent, every tenant's rows under PostgreSQL row-level security.
//!
//! The modules stand in layers whose imports only point down: entry points, the
//! application, the HTTP faces, the pipeline, the platforms, infrastructure, the request shapes, the database
//! and the foundation. docs/architecture.md#layers has the table, which
//! `tests/it/layers.rs` holds every module's imports to.

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
pub mod shapes;
pub mod sign;
pub mod signature;
pub mod startup;
pub mod telemetry;
pub mod turn;
