//! What every handler stands on (state, extractors, the admin-key throttle, readiness) and
//! the gateway's own endpoints: webhooks, media links, health.

pub mod extract;
pub mod health;
pub mod hooks;
pub mod media;
pub mod readiness;
pub mod state;
pub mod throttle;

pub use extract::API_BODY_LIMIT;
