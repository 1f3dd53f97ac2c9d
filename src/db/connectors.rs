//! `channel_connectors`: one platform endpoint of a tenant (tenant table, RLS). Its secrets
//! are stored sealed (`crate::secrets`) and opened as a row is read.
//!
//! Read: `domain::Connector` (also the row, its secrets sealed) and `ConnectorSummary`.
//! Written: `NewRow` and `Change`, plain, made from the request's shapes
//! (`shapes::NewConnector`, `shapes::ConnectorPatch`) where they come in.

use secrecy::{ExposeSecret, SecretString};

use super::tenants::unopened;
use super::TenantTx;
use crate::domain::{
    Connector, ConnectorId, ConnectorProfile, ConnectorSecrets, TelegramDelivery, UnlinkedPolicy,
};
use crate::secrets::{Binding, ConnectorSecret, Keyring};

/// A connector to insert: what it is, and its secrets in plain text, sealed here.
#[derive(Debug)]
pub struct NewRow<'a> {
    pub profile: ConnectorProfile,
    pub verification_secret: &'a SecretString,
    pub verify_token: Option<&'a SecretString>,
    pub outbound_token: Option<&'a SecretString>,
}

/// What an update writes: each field given is set. An empty text clears an optional one
/// (`name` is not optional) and an empty token clears it.
#[derive(Debug, Default)]
pub struct Change<'a> {
    pub name: Option<&'a str>,
    pub api_base_url: Option<&'a str>,
    pub external_id: Option<&'a str>,
    pub app_id: Option<&'a str>,
    pub bot_user_id: Option<&'a str>,
    pub bot_id: Option<&'a str>,
    pub unlinked_policy: Option<UnlinkedPolicy>,
    pub telegram_delivery: Option<TelegramDelivery>,
    pub unlinked_notice: Option<&'a str>,
    pub format_markdown: Option<bool>,
    pub typing_indicator: Option<bool>,
    pub edit_after_tap: Option<bool>,
    pub enabled: Option<bool>,
    pub verify_token: Option<&'a SecretString>,
    pub outbound_token: Option<&'a SecretString>,
    pub rotation: Option<Rotation<'a>>,
}

/// A new verification secret; the current one stays valid for `grace_secs`.
#[derive(Debug, Clone, Copy)]
pub struct Rotation<'a> {
    pub verification_secret: &'a SecretString,
    pub grace_secs: u64,
}

/// Opens the sealed secrets of a row, each under its own binding.
fn open(row: Connector<String>, keys: &Keyring) -> Result<Connector, sqlx::Error> {
    let at = |secret| Binding::connector(row.tenant_id, row.id, secret);
    let verification = at(ConnectorSecret::Verification);
    let sealed = &row.secrets;
    let secrets = ConnectorSecrets {
        verification_secret: keys
            .open(&sealed.verification_secret, &verification)
            .map_err(unopened)?,
        previous_verification_secret: keys
            .open_opt(sealed.previous_verification_secret.as_deref(), &verification)
            .map_err(unopened)?,
        verify_token: keys
            .open_opt(sealed.verify_token.as_deref(), &at(ConnectorSecret::VerifyToken))
            .map_err(unopened)?,
        outbound_token: keys
            .open_opt(
                sealed.outbound_token.as_deref(),
                &at(ConnectorSecret::OutboundToken),
            )
            .map_err(unopened)?,
    };
    Ok(Connector {
        tenant_id: row.tenant_id,
        id: row.id,
        profile: row.profile,
        secrets,
        sends_held_until: row.sends_held_until,
    })
}

/// The columns of `ConnectorProfile`, in its order.
macro_rules! profile_columns {
    () => {
        "platform, name, external_id, app_id, bot_user_id, bot_id, api_base_url, enabled,
        unlinked_policy, telegram_delivery, unlinked_notice, format_markdown, typing_indicator,
        edit_after_tap"
    };
}

const SELECT_CONNECTOR: &str = concat!(
    "select tenant_id, id, ",
    profile_columns!(),
    ", verification_secret,
        case when previous_secret_expires_at > now() then previous_verification_secret end
            as previous_verification_secret,
        verify_token, outbound_token, sends_held_until
   from channel_connectors"
);

/// For every instance; a later hold already there stays.
pub async fn hold_sends(
    tx: &mut TenantTx,
    connector: ConnectorId,
    until: chrono::DateTime<chrono::Utc>,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "update channel_connectors set sends_held_until = greatest(sends_held_until, $3)
          where tenant_id = $1 and id = $2",
    )
    .bind(tx.tenant())
    .bind(connector)
    .bind(until)
    .execute(tx.conn())
    .await?;
    Ok(())
}

pub async fn insert(tx: &mut TenantTx, keys: &Keyring, new: &NewRow<'_>) -> Result<Connector, sqlx::Error> {
    let tenant = tx.tenant();
    let id = ConnectorId::new();
    let at = |secret| Binding::connector(tenant, id, secret);
    let seal = |plain: Option<&SecretString>, secret| keys.seal_opt(plain, &at(secret)).map_err(unopened);
    let p = new.profile.clone();
    sqlx::query(concat!(
        "insert into channel_connectors (tenant_id, id, ",
        profile_columns!(),
        ", verification_secret, verify_token, outbound_token)
         values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19)"
    ))
    .bind(tenant)
    .bind(id)
    .bind(p.platform)
    .bind(p.name)
    .bind(p.external_id)
    .bind(p.app_id)
    .bind(p.bot_user_id)
    .bind(p.bot_id)
    .bind(p.api_base_url)
    .bind(p.enabled)
    .bind(p.unlinked_policy)
    .bind(p.telegram_delivery)
    .bind(p.unlinked_notice)
    .bind(p.format_markdown)
    .bind(p.typing_indicator)
    .bind(p.edit_after_tap)
    .bind(seal(
        Some(new.verification_secret),
        ConnectorSecret::Verification,
    )?)
    .bind(seal(new.verify_token, ConnectorSecret::VerifyToken)?)
    .bind(seal(new.outbound_token, ConnectorSecret::OutboundToken)?)
    .execute(tx.conn())
    .await?;
    get(tx, keys, id).await?.ok_or(sqlx::Error::RowNotFound)
}

/// Enabled or not.
pub async fn get(
    tx: &mut TenantTx,
    keys: &Keyring,
    id: ConnectorId,
) -> Result<Option<Connector>, sqlx::Error> {
    let tenant = tx.tenant();
    let row: Option<Connector<String>> =
        sqlx::query_as(&format!("{SELECT_CONNECTOR} where tenant_id = $1 and id = $2"))
            .bind(tenant)
            .bind(id)
            .fetch_optional(tx.conn())
            .await?;
    row.map(|row| open(row, keys)).transpose()
}

pub async fn get_many(
    tx: &mut TenantTx,
    keys: &Keyring,
    ids: &[ConnectorId],
) -> Result<Vec<Connector>, sqlx::Error> {
    let tenant = tx.tenant();
    let rows: Vec<Connector<String>> = sqlx::query_as(&format!(
        "{SELECT_CONNECTOR} where tenant_id = $1 and id = any($2)"
    ))
    .bind(tenant)
    .bind(ids)
    .fetch_all(tx.conn())
    .await?;
    rows.into_iter().map(|row| open(row, keys)).collect()
}

pub async fn list(tx: &mut TenantTx, keys: &Keyring) -> Result<Vec<Connector>, sqlx::Error> {
    let tenant = tx.tenant();
    let rows: Vec<Connector<String>> = sqlx::query_as(&format!(
        "{SELECT_CONNECTOR} where tenant_id = $1 order by created_at, id"
    ))
    .bind(tenant)
    .fetch_all(tx.conn())
    .await?;
    rows.into_iter().map(|row| open(row, keys)).collect()
}

/// A connector as admins see it: its profile, and of its secrets only whether they are set.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ConnectorSummary {
    pub id: uuid::Uuid,
    #[sqlx(flatten)]
    pub profile: ConnectorProfile,
    pub has_verify_token: bool,
    pub has_outbound_token: bool,
    /// Until when the secret replaced by the last rotation is still accepted.
    pub previous_secret_expires_at: Option<chrono::DateTime<chrono::Utc>>,
    pub created_at: chrono::DateTime<chrono::Utc>,
    pub updated_at: chrono::DateTime<chrono::Utc>,
}

const SELECT_SUMMARY: &str = concat!(
    "select id, ",
    profile_columns!(),
    ",
        verify_token is not null as has_verify_token, outbound_token is not null as has_outbound_token,
        case when previous_secret_expires_at > now() then previous_secret_expires_at end
            as previous_secret_expires_at,
        created_at, updated_at
   from channel_connectors"
);

pub async fn summaries(tx: &mut TenantTx) -> Result<Vec<ConnectorSummary>, sqlx::Error> {
    let tenant = tx.tenant();
    sqlx::query_as(&format!(
        "{SELECT_SUMMARY} where tenant_id = $1 order by created_at, id"
    ))
    .bind(tenant)
    .fetch_all(tx.conn())
    .await
}

pub async fn summary(tx: &mut TenantTx, id: ConnectorId) -> Result<Option<ConnectorSummary>, sqlx::Error> {
    let tenant = tx.tenant();
    sqlx::query_as(&format!("{SELECT_SUMMARY} where tenant_id = $1 and id = $2"))
        .bind(tenant)
        .bind(id)
        .fetch_optional(tx.conn())
        .await
}

/// A new verification secret rotates it (the current one stays valid for the grace);
/// `false` when there is no such connector for this tenant.
pub async fn update(
    tx: &mut TenantTx,
    keys: &Keyring,
    id: ConnectorId,
    change: &Change<'_>,
) -> Result<bool, sqlx::Error> {
    let tenant = tx.tenant();
    let at = |secret| Binding::connector(tenant, id, secret);
    let mut sql =
        sqlx::QueryBuilder::<sqlx::Postgres>::new("update channel_connectors set updated_at = now()");
    set_texts(&mut sql, change, |token, secret| {
        seal_token(keys, &at(secret), token)
    })?;
    set_flags(&mut sql, change);
    if let Some(rotation) = change.rotation {
        let sealed = keys
            .seal(
                rotation.verification_secret.expose_secret(),
                &at(ConnectorSecret::Verification),
            )
            .map_err(unopened)?;
        rotate_verification(&mut sql, sealed, rotation.grace_secs);
    }
    sql.push(" where tenant_id = ")
        .push_bind(tenant)
        .push(" and id = ")
        .push_bind(id);
    Ok(sql.build().execute(tx.conn()).await?.rows_affected() == 1)
}

/// An empty token clears it (`set_texts`), so only a non-empty one is sealed.
fn seal_token(
    keys: &Keyring,
    binding: &Binding,
    token: Option<&SecretString>,
) -> Result<Option<String>, sqlx::Error> {
    token
        .map(|t| match t.expose_secret() {
            "" => Ok(String::new()),
            plain => keys.seal(plain, binding).map_err(unopened),
        })
        .transpose()
}

/// The text columns the change names, its tokens sealed by `seal`.
fn set_texts(
    sql: &mut sqlx::QueryBuilder<'_, sqlx::Postgres>,
    change: &Change<'_>,
    seal: impl Fn(Option<&SecretString>, ConnectorSecret) -> Result<Option<String>, sqlx::Error>,
) -> Result<(), sqlx::Error> {
    let text = |value: Option<&str>| value.map(str::to_owned);
    let texts = [
        ("name", text(change.name)),
        ("external_id", text(change.external_id)),
        ("app_id", text(change.app_id)),
        ("bot_user_id", text(change.bot_user_id)),
        ("bot_id", text(change.bot_id)),
        ("api_base_url", text(change.api_base_url)),
        ("unlinked_notice", text(change.unlinked_notice)),
        (
            "verify_token",
            seal(change.verify_token, ConnectorSecret::VerifyToken)?,
        ),
        (
            "outbound_token",
            seal(change.outbound_token, ConnectorSecret::OutboundToken)?,
        ),
        (
            "unlinked_policy",
            change.unlinked_policy.map(|p| p.as_str().to_owned()),
        ),
        (
            "telegram_delivery",
            change.telegram_delivery.map(|d| d.as_str().to_owned()),
        ),
    ];
    for (column, value) in texts {
        if let Some(value) = value {
            // `name` is not nullable; for the others an empty string clears the field.
            let value = (column == "name" || !value.is_empty()).then_some(value);
            sql.push(format!(", {column} = ")).push_bind(value);
        }
    }
    Ok(())
}

fn set_flags(sql: &mut sqlx::QueryBuilder<'_, sqlx::Postgres>, change: &Change<'_>) {
    let flags = [
        ("enabled", change.enabled),
        ("format_markdown", change.format_markdown),
        ("typing_indicator", change.typing_indicator),
        ("edit_after_tap", change.edit_after_tap),
    ];
    for (column, value) in flags {
        if let Some(value) = value {
            sql.push(format!(", {column} = ")).push_bind(value);
        }
    }
}

/// The new secret becomes current; the current one stays valid for the grace.
fn rotate_verification(sql: &mut sqlx::QueryBuilder<'_, sqlx::Postgres>, sealed: String, grace_secs: u64) {
    // Right-hand sides read the old row: the current secret becomes the previous one.
    sql.push(", previous_verification_secret = verification_secret");
    sql.push(", previous_secret_expires_at = now() + make_interval(secs => ")
        .push_bind(grace_secs as f64)
        .push(")");
    sql.push(", verification_secret = ").push_bind(sealed);
}

/// Its messages go with it (cascade) only when `purge`; else one with history is kept.
pub async fn delete(tx: &mut TenantTx, id: ConnectorId, purge: bool) -> Result<DeleteOutcome, sqlx::Error> {
    let tenant = tx.tenant();
    if !purge {
        let history: bool = sqlx::query_scalar(
            "select exists (select 1 from channel_messages where tenant_id = $1 and connector_id = $2)",
        )
        .bind(tenant)
        .bind(id)
        .fetch_one(tx.conn())
        .await?;
        if history {
            return Ok(DeleteOutcome::HasHistory);
        }
    }
    let deleted = sqlx::query("delete from channel_connectors where tenant_id = $1 and id = $2")
        .bind(tenant)
        .bind(id)
        .execute(tx.conn())
        .await?
        .rows_affected();
    Ok(if deleted == 1 {
        DeleteOutcome::Deleted
    } else {
        DeleteOutcome::NotFound
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeleteOutcome {
    Deleted,
    NotFound,
    HasHistory,
}
