//! The pool every tenant transaction and claim draws from, and its sessions' settings.

use std::str::FromStr;
use std::time::Duration;

use anyhow::Context;
use secrecy::{ExposeSecret, SecretString};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, Connection, Executor, PgPool};

use super::deadline::deadline_missed_recently;
use super::APP_ROLE;
use crate::settings::DatabaseSettings;

/// Lazy, so the process starts (and `/readyz` answers 503) while the database is down. No
/// ping before use: a dead connection fails its first query and is replaced. Within
/// `SUSPECT_WINDOW` of a missed deadline, a silent released connection is closed: a held
/// network would keep its slot for the kernel's 15 minutes (sqlx has no client keepalive).
pub fn connect_pool(settings: &DatabaseSettings) -> anyhow::Result<PgPool> {
    let options = connect_options(settings.pool_url())?.options(session_settings(settings));
    let ping_timeout = settings.deadline().min(Duration::from_secs(1));
    // The single-URL development default connects as the owner and switches to the app role.
    let switch_role: Option<std::sync::Arc<str>> = settings
        .app_url
        .is_none()
        .then(|| format!("SET ROLE {APP_ROLE}").into());
    let pool = PgPoolOptions::new()
        .max_connections(settings.pool_size)
        .acquire_timeout(settings.acquire_timeout())
        .test_before_acquire(false)
        .after_connect(move |conn, _meta| {
            let switch_role = switch_role.clone();
            Box::pin(async move {
                if let Some(statement) = switch_role {
                    conn.execute(&*statement).await?;
                }
                Ok(())
            })
        })
        .after_release(move |conn, _meta| {
            Box::pin(async move {
                if !deadline_missed_recently() {
                    return Ok(true);
                }
                let answered = tokio::time::timeout(ping_timeout, conn.ping()).await;
                Ok(matches!(answered, Ok(Ok(()))))
            })
        })
        .connect_lazy_with(options);
    Ok(pool)
}

/// Opens the turn writer's transaction. On plain PostgreSQL its statements, the same every
/// batch and each finding its rows by key, are planned once per connection instead of once
/// per batch (`force_generic_plan` for this transaction alone; docs/benchmarks.md, "Planned
/// again for every batch"). Where Citus is loaded (`citus.version` defined: migration 36's test)
/// they keep `auto`: Citus cannot plan its distributed statements generically
/// ("could not create distributed plan"). The claim keeps `auto` everywhere: its generic plan
/// ran twice as long as the custom ones.
pub(crate) const BEGIN_BATCH: &str = "begin; select set_config('plan_cache_mode',
    case when current_setting('citus.version', true) is null then 'force_generic_plan'
         else 'auto' end, true)";

fn session_settings(settings: &DatabaseSettings) -> Vec<(&'static str, String)> {
    let mut options = vec![
        ("tcp_keepalives_idle", "10".to_owned()),
        ("tcp_keepalives_interval", "5".to_owned()),
        ("tcp_keepalives_count", "3".to_owned()),
    ];
    if settings.statement_timeout_ms > 0 {
        options.push(("statement_timeout", settings.statement_timeout_ms.to_string()));
    }
    if settings.idle_in_transaction_timeout_ms > 0 {
        options.push((
            "idle_in_transaction_session_timeout",
            settings.idle_in_transaction_timeout_ms.to_string(),
        ));
    }
    options
}

pub(super) fn connect_options(url: &SecretString) -> anyhow::Result<PgConnectOptions> {
    // The error names no URL: it would carry the password.
    let options = PgConnectOptions::from_str(url.expose_secret())
        .context("DATABASE_URL or CB_APP_DATABASE_URL is not a valid PostgreSQL URL")?
        .application_name("channel-bridge")
        // Statement logging would put message text in the server log at debug level.
        .disable_statement_logging();
    Ok(options)
}
