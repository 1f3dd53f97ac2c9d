//! `channel_connectors`: one platform endpoint of a tenant (tenant table, RLS). Its secrets
//! are stored sealed (`crate::secrets`) and opened as a row is read.
//!
//! Each connector field is declared once per direction. Read: `domain::ConnectorProfile`
//! and `domain::ConnectorSecrets`, flattened into `domain::Connector` (also the row, its
//! secrets sealed) and `ConnectorSummary`. Written: `ConnectorSettings` and `SecretsIn`,
//! flattened into `NewConnector` and `ConnectorPatch`, which are the API's bodies and the
//! flags of `connector add` and `admin connectors update`, and which the console's form
//! fills.

use std::sync::LazyLock;

use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Deserializer, Serialize};
use utoipa::openapi::{RefOr, Schema};
use utoipa::{PartialSchema, ToSchema};

use super::tenants::unopened;
use super::TenantTx;
use crate::api_schema::{self, field_names, Body, FromBody};
use crate::domain::{
    Connector, ConnectorId, ConnectorProfile, ConnectorSecrets, Platform, TelegramDelivery, UnlinkedPolicy,
};
use crate::secrets::{Binding, ConnectorSecret, Keyring};

/// The settings a request gives, on creation and on change alike: the fields of
/// `ConnectorProfile` that both may set, each optional. Absent (or `null`), a change keeps the
/// connector's value and a new connector takes the default. Field docs are the document's
/// wording, `help` the command line's.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema, clap::Args)]
pub struct ConnectorSettings {
    /// Display name (a new connector's default: empty). A change takes a non-empty one.
    #[schema(max_length = 200, pattern = r"^[^\u0000]*$")]
    #[arg(long, help = "Display name")]
    pub name: Option<String>,
    /// Platform API base URL override (tests, proxies): http or https, every address of its
    /// host public unless the operator's `CB_EGRESS_ALLOW` allows it (else 422).
    #[schema(max_length = 2048, pattern = r"^$|^[hH][tT][tT][pP][sS]?://[^\u0000]+$")]
    #[arg(
        long,
        help = "Platform API base URL override (tests, proxies), checked against the egress policy; on update, empty clears it"
    )]
    pub api_base_url: Option<String>,
    /// Slack team id, WhatsApp phone_number_id or Telegram bot id.
    #[schema(max_length = 256, pattern = r"^[^\u0000]*$")]
    #[arg(long, help = "Slack team id, WhatsApp phone_number_id or Telegram bot id")]
    pub external_id: Option<String>,
    /// Slack `api_app_id`.
    #[schema(max_length = 256, pattern = r"^[^\u0000]*$")]
    #[arg(long, help = "Slack api_app_id")]
    pub app_id: Option<String>,
    /// The bot's own user id: its messages are echoes, never dispatched.
    #[schema(max_length = 256, pattern = r"^[^\u0000]*$")]
    #[arg(
        long,
        help = "The bot's own user id (Slack U…, Telegram bot id), for echo filtering"
    )]
    pub bot_user_id: Option<String>,
    /// Slack `bot_id` (`B…`) of the app.
    #[schema(max_length = 256, pattern = r"^[^\u0000]*$")]
    #[arg(long, help = "Slack bot_id (B…), for echo filtering")]
    pub bot_id: Option<String>,
    /// What happens to messages of senders with no link (a new connector's default: `deny`).
    #[schema(schema_with = api_schema::optional_unlinked_policy)]
    #[arg(
        long,
        value_enum,
        help = "What to do with senders that have no link (default deny)"
    )]
    pub unlinked_policy: Option<UnlinkedPolicy>,
    /// Telegram only: resend a reply whose send was interrupted (`at_least_once`) or not
    /// (`at_most_once`, a new connector's default).
    #[schema(schema_with = api_schema::optional_telegram_delivery)]
    #[arg(
        long,
        value_enum,
        help = "Telegram: resend a reply whose send was interrupted (at-least-once) or not (default)"
    )]
    pub telegram_delivery: Option<TelegramDelivery>,
    /// Posted to an unlinked sender under the deny policy, at most once a day each.
    #[schema(max_length = 4096, pattern = r"^[^\u0000]*$")]
    #[arg(
        long,
        help = "Text posted to unlinked senders (deny policy), at most once a day each; on update, empty clears it"
    )]
    pub unlinked_notice: Option<String>,
    /// Convert the agent's Markdown to the platform's formatting (a new connector's default);
    /// `false` sends replies as plain text.
    #[arg(
        long,
        help = "false: replies are posted as plain text, not converted from the agent's Markdown (default true)"
    )]
    pub format_markdown: Option<bool>,
    /// Show the platform's typing indicator while the agent works (a new connector's
    /// default); `false` shows none (on WhatsApp it also comes with the read receipt).
    #[arg(
        long,
        help = "false: no typing indicator while the agent works (on WhatsApp it also marks the user's message read; default true)"
    )]
    pub typing_indicator: Option<bool>,
}

impl ConnectorSettings {
    /// The names of the settings given, in their order, never their values.
    pub fn given(&self) -> Vec<&'static str> {
        let Ok(serde_json::Value::Object(values)) = serde_json::to_value(self) else {
            return Vec::new();
        };
        let given = |name: &&str| values.get(*name).is_some_and(|value| !value.is_null());
        field_names::<Self>().iter().copied().filter(given).collect()
    }
}

/// The secrets a request gives, write-only: never read back. Not read from the environment
/// here, so a variable left over cannot rotate one; `connector add` adds its variables.
#[derive(Debug, Clone, Default, Deserialize, ToSchema, clap::Args)]
pub struct SecretsIn {
    /// Slack signing secret, Meta app secret or Telegram secret_token. Not blank. A new one
    /// rotates it: the current one stays valid for `previous_secret_grace_secs` (default 24 h).
    #[schema(value_type = Option<String>, format = Password, max_length = 1024, pattern = r"^[^\u0000]*[^\u0000\t-\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000][^\u0000]*$")]
    #[arg(long, value_parser = crate::secret_input::parse,
        help = "Slack signing secret, Meta app secret or Telegram secret_token (`@file` or `@-` reads it)")]
    pub verification_secret: Option<SecretString>,
    /// Meta's `hub.verify_token` (WhatsApp). On a change, an empty one clears it.
    #[schema(value_type = Option<String>, format = Password, max_length = 1024, pattern = r"^[^\u0000]*$")]
    #[arg(long, value_parser = crate::secret_input::parse,
        help = "Meta's hub.verify_token (WhatsApp only; `@file` or `@-`)")]
    pub verify_token: Option<SecretString>,
    /// Slack bot token, WhatsApp access token or Telegram bot token. On a change, an empty one
    /// clears it.
    #[schema(value_type = Option<String>, format = Password, max_length = 1024, pattern = r"^[^\u0000]*$")]
    #[arg(long, value_parser = crate::secret_input::parse,
        help = "Slack bot token, WhatsApp access token or Telegram bot token (`@file` or `@-`)")]
    pub outbound_token: Option<SecretString>,
}

/// A connector to create: the API's `ConnectorIn` and the flags of `connector add`. It needs
/// a verification secret (the body's and the flag's `required`, the check's "not empty").
#[derive(Debug, Clone, clap::Args)]
pub struct NewConnector {
    #[arg(long, value_enum)]
    pub platform: Platform,
    #[command(flatten)]
    pub secrets: SecretsIn,
    #[command(flatten)]
    pub settings: ConnectorSettings,
}

impl NewConnector {
    pub fn new(platform: Platform, verification_secret: SecretString) -> Self {
        Self {
            platform,
            secrets: SecretsIn {
                verification_secret: Some(verification_secret),
                ..SecretsIn::default()
            },
            settings: ConnectorSettings::default(),
        }
    }

    /// What the connector will be: the settings given, the defaults for the others.
    pub fn profile(&self) -> ConnectorProfile {
        let s = self.settings.clone();
        ConnectorProfile {
            platform: self.platform,
            name: s.name.unwrap_or_default(),
            external_id: s.external_id,
            app_id: s.app_id,
            bot_user_id: s.bot_user_id,
            bot_id: s.bot_id,
            api_base_url: s.api_base_url,
            enabled: true,
            unlinked_policy: s.unlinked_policy.unwrap_or_default(),
            telegram_delivery: s.telegram_delivery.unwrap_or_default(),
            unlinked_notice: s.unlinked_notice,
            format_markdown: s.format_markdown.unwrap_or(true),
            typing_indicator: s.typing_indicator.unwrap_or(true),
        }
    }
}

/// The field names of a body: its own, then its parts'.
fn body_fields(own: &[&'static str]) -> Vec<&'static str> {
    [
        own,
        field_names::<SecretsIn>(),
        field_names::<ConnectorSettings>(),
    ]
    .concat()
}

impl FromBody for NewConnector {
    fn fields() -> &'static [&'static str] {
        static FIELDS: LazyLock<Vec<&'static str>> = LazyLock::new(|| body_fields(&["platform"]));
        &FIELDS
    }

    fn from_body<E: serde::de::Error>(body: &Body) -> Result<Self, E> {
        let new = Self {
            platform: body.required("platform")?,
            secrets: body.part()?,
            settings: body.part()?,
        };
        match new.secrets.verification_secret {
            Some(_) => Ok(new),
            None => Err(E::missing_field("verification_secret")),
        }
    }
}

impl<'de> Deserialize<'de> for NewConnector {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        api_schema::read_body(deserializer)
    }
}

impl PartialSchema for NewConnector {
    fn schema() -> RefOr<Schema> {
        let mut body = api_schema::body_schema([SecretsIn::schema(), ConnectorSettings::schema()]);
        body.properties
            .insert("platform".into(), api_schema::platform().into());
        api_schema::require(&mut body, "platform");
        api_schema::require(&mut body, "verification_secret");
        body.example = Some(serde_json::json!({"platform": "telegram", "name": "Support bot",
            "verification_secret": "tg-secret-token-1234", "outbound_token": "123456:ABC-DEF1234ghIkl-zyx57W2v1u123ew11",
            "external_id": "123456", "bot_user_id": "123456", "unlinked_policy": "deny",
            "telegram_delivery": "at_most_once"}));
        Schema::Object(body).into()
    }
}

impl ToSchema for NewConnector {
    fn name() -> std::borrow::Cow<'static, str> {
        "ConnectorIn".into()
    }
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
        unlinked_policy, telegram_delivery, unlinked_notice, format_markdown, typing_indicator"
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

/// Fails (and inserts nothing) without a verification secret.
pub async fn insert(tx: &mut TenantTx, keys: &Keyring, new: &NewConnector) -> Result<Connector, sqlx::Error> {
    let tenant = tx.tenant();
    let id = ConnectorId::new();
    let at = |secret| Binding::connector(tenant, id, secret);
    let seal = |plain: Option<&SecretString>, secret| keys.seal_opt(plain, &at(secret)).map_err(unopened);
    let Some(verification_secret) = &new.secrets.verification_secret else {
        return Err(sqlx::Error::InvalidArgument(
            "a new connector needs a verification secret".into(),
        ));
    };
    let p = new.profile();
    sqlx::query(concat!(
        "insert into channel_connectors (tenant_id, id, ",
        profile_columns!(),
        ", verification_secret, verify_token, outbound_token)
         values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18)"
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
    .bind(seal(Some(verification_secret), ConnectorSecret::Verification)?)
    .bind(seal(
        new.secrets.verify_token.as_ref(),
        ConnectorSecret::VerifyToken,
    )?)
    .bind(seal(
        new.secrets.outbound_token.as_ref(),
        ConnectorSecret::OutboundToken,
    )?)
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

/// What admins see of a connector: its profile, and of its secrets (which are write-only)
/// only whether they are set.
#[derive(Debug, Clone, serde::Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct ConnectorSummary {
    pub id: uuid::Uuid,
    #[serde(flatten)]
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

/// How long a rotated-out verification secret stays valid by default: Slack keeps the
/// previous signing secret valid for 24 hours.
pub const DEFAULT_GRACE_SECS: u64 = 24 * 3600;

/// A platform moves to a new secret within minutes; longer only keeps a leaked one alive.
pub const MAX_GRACE_SECS: u64 = 30 * 24 * 3600;

/// Fields to change; absent (or null) fields stay. An empty string clears an optional text
/// field. Also the flags of `admin connectors update`.
#[derive(Debug, Default, clap::Args)]
pub struct ConnectorPatch {
    #[command(flatten)]
    pub settings: ConnectorSettings,
    #[arg(long, help = "false: webhooks answer 404 (history is kept)")]
    pub enabled: Option<bool>,
    #[command(flatten)]
    pub secrets: SecretsIn,
    /// Seconds the replaced secret stays valid: 0 to 2592000 (30 days).
    #[arg(
        long,
        help = "Seconds the current verification secret stays valid once --verification-secret replaces it (server default 24 h)"
    )]
    pub previous_secret_grace_secs: Option<u64>,
}

impl FromBody for ConnectorPatch {
    fn fields() -> &'static [&'static str] {
        static FIELDS: LazyLock<Vec<&'static str>> =
            LazyLock::new(|| body_fields(&["enabled", "previous_secret_grace_secs"]));
        &FIELDS
    }

    fn from_body<E: serde::de::Error>(body: &Body) -> Result<Self, E> {
        Ok(Self {
            settings: body.part()?,
            enabled: body.field("enabled", Option::deserialize)?,
            secrets: body.part()?,
            previous_secret_grace_secs: body
                .field("previous_secret_grace_secs", api_schema::optional_integer)?,
        })
    }
}

impl<'de> Deserialize<'de> for ConnectorPatch {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        api_schema::read_body(deserializer)
    }
}

impl PartialSchema for ConnectorPatch {
    fn schema() -> RefOr<Schema> {
        use utoipa::openapi::schema::{KnownFormat, ObjectBuilder, SchemaFormat, SchemaType, Type};
        let mut body = api_schema::body_schema([SecretsIn::schema(), ConnectorSettings::schema()]);
        body.description = Some(
            "Fields to change; absent (or null) fields stay. An empty string clears an optional text field."
                .into(),
        );
        if let Some(RefOr::T(Schema::Object(name))) = body.properties.get_mut("name") {
            name.min_length = Some(1);
        }
        body.properties
            .insert("enabled".into(), api_schema::optional_bool().into());
        let grace = ObjectBuilder::new()
            .schema_type(SchemaType::from_iter([Type::Integer, Type::Null]))
            .format(Some(SchemaFormat::KnownFormat(KnownFormat::Int64)))
            .minimum(Some(0u64))
            .maximum(Some(MAX_GRACE_SECS))
            .description(Some(
                "Seconds the replaced secret stays valid: 0 to 2592000 (30 days).",
            ));
        body.properties.insert(
            "previous_secret_grace_secs".into(),
            Schema::Object(grace.build()).into(),
        );
        body.example = Some(serde_json::json!(
            {"verification_secret": "new-signing-secret-5678", "previous_secret_grace_secs": 3600}));
        Schema::Object(body).into()
    }
}

impl ToSchema for ConnectorPatch {
    fn name() -> std::borrow::Cow<'static, str> {
        "ConnectorPatch".into()
    }
}

/// A new verification secret rotates it (the current one stays valid for the grace);
/// `false` when there is no such connector for this tenant.
pub async fn update(
    tx: &mut TenantTx,
    keys: &Keyring,
    id: ConnectorId,
    change: &ConnectorPatch,
) -> Result<bool, sqlx::Error> {
    let tenant = tx.tenant();
    let at = |secret| Binding::connector(tenant, id, secret);
    // An empty token clears it (below), so only a non-empty one is sealed.
    let seal = |token: Option<&SecretString>, secret| {
        token
            .map(|t| match t.expose_secret() {
                "" => Ok(String::new()),
                plain => keys.seal(plain, &at(secret)).map_err(unopened),
            })
            .transpose()
    };
    let mut sql =
        sqlx::QueryBuilder::<sqlx::Postgres>::new("update channel_connectors set updated_at = now()");
    let settings = &change.settings;
    let secrets = &change.secrets;
    let texts = [
        ("name", settings.name.clone()),
        ("external_id", settings.external_id.clone()),
        ("app_id", settings.app_id.clone()),
        ("bot_user_id", settings.bot_user_id.clone()),
        ("bot_id", settings.bot_id.clone()),
        ("api_base_url", settings.api_base_url.clone()),
        ("unlinked_notice", settings.unlinked_notice.clone()),
        (
            "verify_token",
            seal(secrets.verify_token.as_ref(), ConnectorSecret::VerifyToken)?,
        ),
        (
            "outbound_token",
            seal(secrets.outbound_token.as_ref(), ConnectorSecret::OutboundToken)?,
        ),
        (
            "unlinked_policy",
            settings.unlinked_policy.map(|p| p.as_str().to_owned()),
        ),
        (
            "telegram_delivery",
            settings.telegram_delivery.map(|d| d.as_str().to_owned()),
        ),
    ];
    for (column, value) in texts {
        if let Some(value) = value {
            // `name` is not nullable; for the others an empty string clears the field.
            let value = (column == "name" || !value.is_empty()).then_some(value);
            sql.push(format!(", {column} = ")).push_bind(value);
        }
    }
    let flags = [
        ("enabled", change.enabled),
        ("format_markdown", settings.format_markdown),
        ("typing_indicator", settings.typing_indicator),
    ];
    for (column, value) in flags {
        if let Some(value) = value {
            sql.push(format!(", {column} = ")).push_bind(value);
        }
    }
    if let Some(secret) = &secrets.verification_secret {
        let grace = change.previous_secret_grace_secs.unwrap_or(DEFAULT_GRACE_SECS);
        // Right-hand sides read the old row: the current secret becomes the previous one.
        sql.push(", previous_verification_secret = verification_secret");
        sql.push(", previous_secret_expires_at = now() + make_interval(secs => ")
            .push_bind(grace as f64)
            .push(")");
        let sealed = keys
            .seal(secret.expose_secret(), &at(ConnectorSecret::Verification))
            .map_err(unopened)?;
        sql.push(", verification_secret = ").push_bind(sealed);
    }
    sql.push(" where tenant_id = ")
        .push_bind(tenant)
        .push(" and id = ")
        .push_bind(id);
    Ok(sql.build().execute(tx.conn()).await?.rows_affected() == 1)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn property_names<T: PartialSchema>() -> Vec<String> {
        match T::schema() {
            RefOr::T(Schema::Object(body)) => body.properties.keys().cloned().collect(),
            _ => Vec::new(),
        }
    }

    #[test]
    fn each_body_documents_exactly_the_fields_it_reads() {
        let sorted = |names: &[&str]| {
            let mut names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
            names.sort();
            names
        };
        assert_eq!(property_names::<NewConnector>(), sorted(NewConnector::fields()));
        assert_eq!(
            property_names::<ConnectorPatch>(),
            sorted(ConnectorPatch::fields())
        );
        assert!(NewConnector::fields().contains(&"typing_indicator"));
        assert!(ConnectorPatch::fields().contains(&"outbound_token"));
    }

    #[test]
    fn an_unknown_field_is_refused_and_a_bad_value_named() {
        let unknown = serde_json::from_str::<ConnectorPatch>(r#"{"name": "x", "nmae": "y"}"#)
            .unwrap_err()
            .to_string();
        assert!(
            unknown.starts_with("unknown field `nmae`, expected one of `enabled`"),
            "{unknown}"
        );
        let bad = serde_json::from_str::<ConnectorPatch>(r#"{"format_markdown": "no"}"#)
            .unwrap_err()
            .to_string();
        assert!(
            bad.starts_with("format_markdown: invalid type: string \"no\""),
            "{bad}"
        );
        let missing = serde_json::from_str::<NewConnector>(r#"{"platform": "slack"}"#)
            .unwrap_err()
            .to_string();
        assert!(
            missing.starts_with("missing field `verification_secret`"),
            "{missing}"
        );
    }

    #[test]
    fn a_new_connector_takes_the_defaults_for_what_it_is_not_given() {
        let grace = serde_json::from_str::<NewConnector>(
            r#"{"platform": "telegram", "verification_secret": "s", "previous_secret_grace_secs": 1}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(
            grace.contains("unknown field `previous_secret_grace_secs`"),
            "{grace}"
        );
        let new: NewConnector = serde_json::from_str(
            r#"{"platform": "telegram", "verification_secret": "s", "unlinked_policy": null,
                "format_markdown": false}"#,
        )
        .expect("a valid body");
        let profile = new.profile();
        assert_eq!(
            (
                profile.name.as_str(),
                profile.unlinked_policy,
                profile.telegram_delivery
            ),
            ("", UnlinkedPolicy::Deny, TelegramDelivery::AtMostOnce)
        );
        assert_eq!(
            (profile.format_markdown, profile.typing_indicator, profile.enabled),
            (false, true, true)
        );
    }

    #[test]
    fn a_change_lists_the_settings_it_gives_in_their_order() {
        let patch: ConnectorPatch =
            serde_json::from_str(r#"{"typing_indicator": false, "name": "n", "unlinked_notice": ""}"#)
                .expect("a valid body");
        assert_eq!(
            patch.settings.given(),
            ["name", "unlinked_notice", "typing_indicator"]
        );
    }
}
