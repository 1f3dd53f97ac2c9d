//! Provisioning before (and beneath) the admin API: create a tenant, add a connector, link a
//! sender. The CLI prints these results as JSON; each is one short transaction.

use anyhow::Context;
use serde::Serialize;
use sqlx::PgPool;

use crate::db::{self, links::Link, TenantTx};
use crate::domain::{ConnectorId, Platform, TenantId};
use crate::secrets::Keyring;
use crate::shapes::NewConnector;

/// A new tenant. `dispatch_secret` is shown this once; only the agent should keep it.
#[derive(Debug, Serialize)]
pub struct TenantCreated {
    pub tenant_id: TenantId,
    pub slug: String,
    pub name: String,
    pub agent_url: Option<String>,
    pub dispatch_secret: String,
}

pub async fn create_tenant(
    pool: &PgPool,
    keys: &Keyring,
    slug: &str,
    name: &str,
    agent_url: Option<&str>,
) -> anyhow::Result<TenantCreated> {
    use secrecy::ExposeSecret;
    // The operator API and CLI name a tenant by id or by slug, and a UUID is taken as an id.
    if slug.parse::<TenantId>().is_ok() {
        anyhow::bail!("slug must not have the form of a UUID (it would be read as a tenant id)");
    }
    // The rule of the table's CHECK, checked first: a NUL byte never reaches that CHECK
    // (PostgreSQL refuses the text itself, which would read as a database failure).
    if !db::tenants::is_slug(slug) {
        anyhow::bail!("slug must be lowercase letters, digits and dashes");
    }
    let mut conn = pool.acquire().await.context("Failed to reach the database")?;
    let new = db::tenants::NewTenant {
        slug,
        name,
        agent_url,
    };
    let row = db::tenants::insert(&mut conn, keys, &new)
        .await
        .map_err(|err| match constraint(&err) {
            Some("tenants_slug_key") => anyhow::anyhow!("a tenant with slug `{slug}` already exists"),
            _ => anyhow::Error::new(err).context("Failed to create the tenant"),
        })?;
    Ok(TenantCreated {
        tenant_id: row.id,
        slug: row.slug,
        name: row.name,
        agent_url: row.agent_url,
        dispatch_secret: row.dispatch_secret.0.expose_secret().to_owned(),
    })
}

/// A new connector and the path to register with the platform.
#[derive(Debug, Serialize)]
pub struct ConnectorCreated {
    pub connector_id: ConnectorId,
    pub tenant_id: TenantId,
    pub platform: Platform,
    pub webhook_path: String,
}

pub fn webhook_path(tenant: TenantId, connector: ConnectorId) -> String {
    format!("/v1/hooks/{tenant}/{connector}")
}

pub async fn add_connector(
    pool: &PgPool,
    keys: &Keyring,
    tenant: TenantId,
    new: &NewConnector,
) -> anyhow::Result<ConnectorCreated> {
    let row = new
        .row()
        .context("Failed to add the connector: it needs a verification secret")?;
    let mut tx = TenantTx::begin(pool, tenant)
        .await
        .context("Failed to reach the database")?;
    let connector =
        db::connectors::insert(&mut tx, keys, &row)
            .await
            .map_err(|err| match constraint(&err) {
                Some("channel_connectors_tenant_id_fkey") => anyhow::anyhow!("unknown tenant {tenant}"),
                _ => anyhow::Error::new(err).context("Failed to add the connector"),
            })?;
    tx.commit().await.context("Failed to commit the connector")?;
    Ok(ConnectorCreated {
        connector_id: connector.id,
        tenant_id: tenant,
        platform: connector.profile.platform,
        webhook_path: webhook_path(tenant, connector.id),
    })
}

pub async fn add_link(
    pool: &PgPool,
    tenant: TenantId,
    platform: Platform,
    platform_user_id: &str,
    user_id: &str,
) -> anyhow::Result<Link> {
    add_link_as(pool, tenant, platform, platform_user_id, user_id, None).await
}

/// `add_link`, audited under `actor` when given, in the same transaction.
pub async fn add_link_as(
    pool: &PgPool,
    tenant: TenantId,
    platform: Platform,
    platform_user_id: &str,
    user_id: &str,
    actor: Option<db::audit::Actor>,
) -> anyhow::Result<Link> {
    let mut tx = TenantTx::begin(pool, tenant)
        .await
        .context("Failed to reach the database")?;
    let link = db::links::upsert(&mut tx, platform, platform_user_id, user_id)
        .await
        .map_err(|err| match constraint(&err) {
            Some("channel_links_tenant_id_fkey") => anyhow::anyhow!("unknown tenant {tenant}"),
            Some(c) if c.ends_with("_check") => {
                anyhow::anyhow!("platform user id and user id must not be empty")
            }
            _ => anyhow::Error::new(err).context("Failed to add the link"),
        })?;
    if let Some(actor) = actor {
        let details = serde_json::json!({ "user_id": user_id });
        let entry = db::audit::AuditEntry::new(
            actor,
            db::audit::AuditAction::LinkSet,
            format!("{platform}:{platform_user_id}"),
            details,
        );
        db::audit::record(&mut tx, &entry)
            .await
            .context("Failed to record the link in the audit log")?;
    }
    tx.commit().await.context("Failed to commit the link")?;
    Ok(link)
}

/// On Citus the error comes from a shard (`tenants_slug_key_102008`) and only its message is
/// passed on: the name is read from it and the shard id dropped.
pub fn constraint(err: &sqlx::Error) -> Option<&str> {
    let db = err.as_database_error()?;
    let name = match db.constraint() {
        Some(name) => name,
        None => {
            let (_, rest) = db.message().split_once("constraint \"")?;
            rest.split_once('"')?.0
        }
    };
    Some(match name.rsplit_once('_') {
        Some((base, shard)) if !shard.is_empty() && shard.bytes().all(|b| b.is_ascii_digit()) => base,
        _ => name,
    })
}
