//! Sealing stored secrets again: plain values at start with a key, values under an older key
//! after a rotation (docs/security.md#secrets-at-rest). Rows are read `FOR UPDATE`, so an
//! admin change running at the same time waits rather than being overwritten.

use serde::Serialize;
use sqlx::PgPool;

use super::tenants::unopened;
use super::TenantTx;
use crate::domain::{ConnectorId, ConnectorSecrets, TenantId};
use crate::secrets::{sealed_with, Binding, ConnectorSecret, Keyring};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reseal {
    /// At start: instances still on the old key list keep opening everything else.
    Plain,
    /// Also values under any key but the first, once every instance knows it.
    NotUnderCurrentKey,
}

#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize)]
pub struct Resealed {
    pub key: Option<String>,
    pub tenants_seen: u64,
    pub tenants_resealed: u64,
    pub connectors_resealed: u64,
}

/// A connector's secrets as stored, the previous one even past its grace.
#[derive(sqlx::FromRow)]
struct StoredConnector {
    id: ConnectorId,
    #[sqlx(flatten)]
    secrets: ConnectorSecrets<String>,
}

pub async fn reseal(pool: &PgPool, keys: &Keyring, which: Reseal) -> Result<Resealed, sqlx::Error> {
    let mut report = Resealed {
        key: keys.current_key().map(str::to_owned),
        ..Resealed::default()
    };
    if !keys.seals() {
        return Ok(report);
    }
    let wanted = |stored: &str| match which {
        Reseal::Plain => sealed_with(stored).is_none(),
        Reseal::NotUnderCurrentKey => keys.needs_reseal(stored),
    };
    let tenants: Vec<TenantId> = sqlx::query_scalar("select id from tenants order by id")
        .fetch_all(pool)
        .await?;
    for tenant in tenants {
        let mut tx = TenantTx::begin(pool, tenant).await?;
        let tenant_changed = reseal_tenant(&mut tx, keys, &wanted).await?;
        let connectors_changed = reseal_connectors(&mut tx, keys, &wanted).await?;
        tx.commit().await?;
        report.tenants_seen += 1;
        report.tenants_resealed += u64::from(tenant_changed);
        report.connectors_resealed += connectors_changed;
    }
    Ok(report)
}

/// `None` when the value stays as it is.
fn resealed(
    keys: &Keyring,
    stored: &str,
    binding: &Binding,
    wanted: &impl Fn(&str) -> bool,
) -> Result<Option<String>, sqlx::Error> {
    if !wanted(stored) {
        return Ok(None);
    }
    let plain = keys.open(stored, binding).map_err(unopened)?;
    use secrecy::ExposeSecret;
    keys.seal(plain.expose_secret(), binding)
        .map(Some)
        .map_err(unopened)
}

fn either(resealed: Option<String>, stored: Option<String>) -> (bool, Option<String>) {
    match resealed {
        Some(value) => (true, Some(value)),
        None => (false, stored),
    }
}

async fn reseal_tenant(
    tx: &mut TenantTx,
    keys: &Keyring,
    wanted: &impl Fn(&str) -> bool,
) -> Result<bool, sqlx::Error> {
    let tenant = tx.tenant();
    let row: Option<(String, Option<String>)> = sqlx::query_as(
        "select dispatch_secret, previous_dispatch_secret from tenants where id = $1 for update",
    )
    .bind(tenant)
    .fetch_optional(tx.conn())
    .await?;
    let Some((current, previous)) = row else {
        return Ok(false);
    };
    let binding = Binding::dispatch(tenant);
    let new_current = resealed(keys, &current, &binding, wanted)?;
    let new_previous = match &previous {
        Some(stored) => resealed(keys, stored, &binding, wanted)?,
        None => None,
    };
    let (changed_current, current) = either(new_current, Some(current));
    let (changed_previous, previous) = either(new_previous, previous);
    if !(changed_current || changed_previous) {
        return Ok(false);
    }
    sqlx::query("update tenants set dispatch_secret = $2, previous_dispatch_secret = $3 where id = $1")
        .bind(tenant)
        .bind(current)
        .bind(previous)
        .execute(tx.conn())
        .await?;
    Ok(true)
}

async fn reseal_connectors(
    tx: &mut TenantTx,
    keys: &Keyring,
    wanted: &impl Fn(&str) -> bool,
) -> Result<u64, sqlx::Error> {
    let tenant = tx.tenant();
    let rows: Vec<StoredConnector> = sqlx::query_as(
        "select id, verification_secret, previous_verification_secret, verify_token, outbound_token
           from channel_connectors where tenant_id = $1 order by id for update",
    )
    .bind(tenant)
    .fetch_all(tx.conn())
    .await?;
    let mut changed = 0;
    for StoredConnector { id, secrets: row } in rows {
        let at = |secret| Binding::connector(tenant, id, secret);
        let verification = at(ConnectorSecret::Verification);
        let reseal_opt = |stored: &Option<String>, binding: &Binding| match stored {
            Some(stored) => resealed(keys, stored, binding, wanted),
            None => Ok(None),
        };
        let columns = [
            either(
                resealed(keys, &row.verification_secret, &verification, wanted)?,
                Some(row.verification_secret.clone()),
            ),
            either(
                reseal_opt(&row.previous_verification_secret, &verification)?,
                row.previous_verification_secret.clone(),
            ),
            either(
                reseal_opt(&row.verify_token, &at(ConnectorSecret::VerifyToken))?,
                row.verify_token.clone(),
            ),
            either(
                reseal_opt(&row.outbound_token, &at(ConnectorSecret::OutboundToken))?,
                row.outbound_token.clone(),
            ),
        ];
        if !columns.iter().any(|(changed, _)| *changed) {
            continue;
        }
        let [verification_secret, previous, verify_token, outbound_token] = columns.map(|(_, value)| value);
        sqlx::query(
            "update channel_connectors set verification_secret = $3, previous_verification_secret = $4,
                    verify_token = $5, outbound_token = $6
              where tenant_id = $1 and id = $2",
        )
        .bind(tenant)
        .bind(id)
        .bind(verification_secret)
        .bind(previous)
        .bind(verify_token)
        .bind(outbound_token)
        .execute(tx.conn())
        .await?;
        changed += 1;
    }
    Ok(changed)
}
