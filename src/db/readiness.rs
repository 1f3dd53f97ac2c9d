//! What `serve` checks before it starts: the database answers, the runtime role cannot lift
//! RLS, the schema is current, and a Citus cluster is set up as the gateway needs.

use std::str::FromStr;

use secrecy::ExposeSecret;
use sqlx::postgres::PgConnectOptions;
use sqlx::PgPool;

use super::errors::{is_refused, means_no_schema};
use super::version::{schema, Schema};
use super::{citus, connect_pool, within, APP_ROLE};
use crate::settings::DatabaseSettings;

/// Host, port and database of the pool's URL, never the user or password.
pub fn describe(settings: &DatabaseSettings) -> String {
    match PgConnectOptions::from_str(settings.pool_url().expose_secret()) {
        Ok(options) => format!(
            "{}:{}/{}",
            options.get_host(),
            options.get_port(),
            options.get_database().unwrap_or("(default database)")
        ),
        Err(_) => "DATABASE_URL".to_owned(),
    }
}

/// What `serve` checks before it starts; the error is one line that says what to do.
pub async fn check_ready_to_serve(settings: &DatabaseSettings) -> anyhow::Result<Schema> {
    let pool = connect_pool(settings)?;
    let limit = settings.acquire_timeout() + settings.deadline();
    // The runtime role first: a role without the app role's grants cannot read the schema
    // version, and "run migrate" would be the wrong advice.
    let fault = match settings.app_url {
        Some(_) => within(limit, runtime_role_fault(&pool)).await,
        None => Ok(None),
    };
    let schema = match fault {
        Ok(None) => within(limit, schema(&pool)).await,
        Ok(Some(fault)) => {
            pool.close().await;
            anyhow::bail!("{}: CB_APP_DATABASE_URL {fault}", describe(settings));
        }
        Err(err) => Err(err),
    };
    let schema = match schema {
        Ok(schema) if schema.is_current() => match within(limit, citus::serve_fault(&pool, settings)).await {
            Ok(None) => Ok(schema),
            Ok(Some(fault)) => {
                pool.close().await;
                anyhow::bail!("{}: {fault}", describe(settings));
            }
            Err(err) => Err(err),
        },
        other => other,
    };
    pool.close().await;
    match schema {
        Ok(schema) if schema.is_current() => Ok(schema),
        Ok(behind) => anyhow::bail!("{}: {behind}", describe(settings)),
        Err(err) if means_no_schema(&err) => {
            anyhow::bail!("{}: {}", describe(settings), Schema::Behind { database: None })
        }
        Err(err) if is_refused(&err) => anyhow::bail!(
            "PostgreSQL at {} refuses the gateway's role ({err}): check its grants (docs/security.md, \"Security boundary\")",
            describe(settings)
        ),
        Err(err) => anyhow::bail!(
            "cannot reach PostgreSQL at {} ({err}): start it or fix DATABASE_URL",
            describe(settings)
        ),
    }
}

/// The role must have the app role's privileges and nothing that would lift RLS. Names no
/// role: the user name is part of the credentials.
async fn runtime_role_fault(pool: &PgPool) -> Result<Option<&'static str>, sqlx::Error> {
    let (superuser, bypass_rls, app_member, owns): (bool, bool, bool, bool) = sqlx::query_as(
        "select r.rolsuper, r.rolbypassrls, pg_has_role(current_user, $1, 'USAGE'),
                exists (select 1 from pg_class c
                         where c.relowner = r.oid and c.relnamespace = 'public'::regnamespace)
           from pg_roles r where r.rolname = current_user",
    )
    .bind(APP_ROLE)
    .fetch_one(pool)
    .await?;
    let fault = if superuser {
        Some("logs in as a superuser: use a login role that is a member of channel_bridge_app (docs/security.md, \"Security boundary\")")
    } else if bypass_rls {
        Some("logs in as a role with BYPASSRLS: row-level security would not apply")
    } else if owns {
        Some("logs in as a role that owns tables of the schema: it could alter their policies")
    } else if !app_member {
        Some("logs in as a role without the privileges of channel_bridge_app (GRANT channel_bridge_app TO it, with INHERIT)")
    } else {
        None
    };
    Ok(fault)
}
