//! channel-bridge: a multi-tenant messaging gateway between Slack, WhatsApp and Telegram
//! webhooks and an AI agent, with every tenant's data under PostgreSQL row-level security.

pub mod channels;
pub mod domain;
