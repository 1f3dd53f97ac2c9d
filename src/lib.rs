//! channel-bridge: a multi-tenant messaging gateway between Slack, WhatsApp and Telegram
//! webhooks and an AI agent, with every tenant's data under PostgreSQL row-level security.
//!
//! Map of the crate:
//! - `platforms`: one folder per platform (`slack/`, `telegram/`, `whatsapp/`) holding all
//!   the gateway knows of it (inbound webhooks, sends, formatting, typing, live previews,
//!   files), behind traits; `platforms::of` is the one place platforms are listed.
//! - `delivery`: posting reply parts exactly once; `markdown`: parsing, rendering and
//!   splitting the agent's Markdown; `media`: attachment tokens and downloads.
//! - `http`: the HTTP surface, one router per feature; `console`: the tenant admin web console.
//! - `db`: pool, migrations, the tenant transaction (the one door to tenant tables).
//! - `ingress`: recording webhooks (the batching writer); `cache`: connector and tenant
//!   settings reused for a few seconds.
//! - `lifecycle`: retention, erasure of one person, export (README "Data lifecycle").
//! - `provision`, `cli`: provisioning and the command line; `admin_cli`: the HTTP admin
//!   CLI (`channel-bridge admin`).
//! - `egress`: where the worker may send requests (the SSRF guard); `secrets`: sealing the
//!   secrets stored in the database.
//! - `telemetry`: logs, Prometheus metrics, and OpenTelemetry traces (`telemetry::traces`).
//! - `agent_bridge`: the agent side of a dispatch, in front of an OpenAI-compatible server.
//! - `demo`: the whole pipeline on one machine (`channel-bridge demo`).
//! - `sign`, `send_fixture`: signing webhooks as the platforms do, for `send-fixture` and the
//!   ingress load generator (`benches/ingress_load.rs`).

pub mod admin;
pub mod admin_cli;
pub mod agent_bridge;
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
pub mod state;
pub mod telemetry;
pub mod turn;
