//! `channel_connectors`: one platform endpoint of a tenant (tenant table, RLS). Its secrets
//! are stored sealed (`crate::secrets`) and opened as a row is read.

use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;
use utoipa::ToSchema;

use super::tenants::unopened;
use super::TenantTx;
use crate::api_schema;
use crate::domain::{Connector, ConnectorId, Platform, TelegramDelivery, UnlinkedPolicy};
use crate::secrets::{Binding, ConnectorSecret, Keyring};

// A connector to create: the API's `ConnectorIn` and the flags of `connector add` (a doc
// comment here would become the document's description). Field docs are the document's
// wording, `help` the command line's. Secrets are only ever written, never read back.
#[derive(Debug, Clone, Deserialize, ToSchema, clap::Args)]
#[serde(deny_unknown_fields)]
#[schema(as = ConnectorIn, example = json!({"platform": "telegram", "name": "Support bot", "verification_secret": "tg-secret-token-1234",
    "outbound_token": "123456:ABC-DEF1234ghIkl-zyx57W2v1u123ew11", "external_id": "123456", "bot_user_id": "123456",
    "unlinked_policy": "deny", "telegram_delivery": "at_most_once"}))]
pub struct NewConnector {
    #[schema(schema_with = api_schema::platform)]
    #[arg(long, value_enum)]
    pub platform: Platform,
    #[serde(default)]
    #[schema(max_length = 200, pattern = r"^[^\u0000]*$")]
    #[arg(long, default_value = "")]
    pub name: String,
    /// Slack signing secret, Meta app secret or Telegram secret_token. Not blank.
    #[schema(value_type = String, format = Password, max_length = 1024, pattern = r"^[^\u0000]*[^\u0000\t-\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000][^\u0000]*$")]
    #[arg(long, env = "CB_VERIFICATION_SECRET", hide_env_values = true, value_parser = crate::secret_input::parse,
        help = "Slack signing secret, Meta app secret or Telegram secret_token")]
    pub verification_secret: SecretString,
    /// Meta's `hub.verify_token` (WhatsApp).
    #[schema(value_type = Option<String>, format = Password, max_length = 1024, pattern = r"^[^\u0000]*$")]
    #[arg(long, env = "CB_VERIFY_TOKEN", hide_env_values = true, value_parser = crate::secret_input::parse,
        help = "Meta's hub.verify_token (WhatsApp only)")]
    pub verify_token: Option<SecretString>,
    /// Slack bot token, WhatsApp access token or Telegram bot token.
    #[schema(value_type = Option<String>, format = Password, max_length = 1024, pattern = r"^[^\u0000]*$")]
    #[arg(long, env = "CB_OUTBOUND_TOKEN", hide_env_values = true, value_parser = crate::secret_input::parse)]
    pub outbound_token: Option<SecretString>,
    /// Platform API base URL override (tests, proxies): http or https, every address of its
    /// host public unless the operator's `CB_EGRESS_ALLOW` allows it (else 422).
    #[schema(max_length = 2048, pattern = r"^$|^[hH][tT][tT][pP][sS]?://[^\u0000]+$")]
    #[arg(
        long,
        help = "Platform API base URL override (tests, proxies); checked against the egress policy"
    )]
    pub api_base_url: Option<String>,
    /// Slack team id, WhatsApp phone_number_id or Telegram bot id.
    #[schema(max_length = 256, pattern = r"^[^\u0000]*$")]
    #[arg(long, display_order = AFTER_EGRESS)]
    pub external_id: Option<String>,
    /// Slack `api_app_id`.
    #[schema(max_length = 256, pattern = r"^[^\u0000]*$")]
    #[arg(long, display_order = AFTER_EGRESS + 1, help = "Slack api_app_id")]
    pub app_id: Option<String>,
    /// The bot's own user id: its messages are echoes, never dispatched.
    #[schema(max_length = 256, pattern = r"^[^\u0000]*$")]
    #[arg(long, display_order = AFTER_EGRESS + 2,
        help = "The bot's own user id (Slack U…, Telegram bot id), for echo filtering")]
    pub bot_user_id: Option<String>,
    /// Slack `bot_id` (`B…`) of the app.
    #[schema(max_length = 256, pattern = r"^[^\u0000]*$")]
    #[arg(long, display_order = AFTER_EGRESS + 3, help = "Slack bot_id (B…), for echo filtering")]
    pub bot_id: Option<String>,
    /// Default `deny`.
    #[serde(default, deserialize_with = "api_schema::null_as_default")]
    #[schema(schema_with = api_schema::optional_unlinked_policy)]
    #[arg(long, value_enum, default_value_t = UnlinkedPolicy::Deny, display_order = AFTER_EGRESS + 4,
        help = "What to do with senders that have no link")]
    pub unlinked_policy: UnlinkedPolicy,
    /// Telegram only; default `at_most_once`.
    #[serde(default, deserialize_with = "api_schema::null_as_default")]
    #[schema(schema_with = api_schema::optional_telegram_delivery)]
    #[arg(long, value_enum, default_value_t = TelegramDelivery::AtMostOnce, display_order = AFTER_EGRESS + 5,
        help = "Telegram: resend a reply whose send was interrupted (at-least-once) or not")]
    pub telegram_delivery: TelegramDelivery,
    /// Posted to an unlinked sender under the deny policy, at most once a day each.
    #[schema(max_length = 4096, pattern = r"^[^\u0000]*$")]
    #[arg(long, display_order = AFTER_EGRESS + 6,
        help = "Text posted to unlinked senders (deny policy), at most once a day each")]
    pub unlinked_notice: Option<String>,
    /// Convert the agent's Markdown to the platform's formatting (default); `false` sends
    /// replies as plain text.
    #[serde(default = "api_schema::yes", deserialize_with = "api_schema::null_as_true")]
    #[schema(value_type = Option<bool>)]
    #[arg(long = "plain-text", action = clap::ArgAction::SetFalse, display_order = AFTER_EGRESS + 7,
        help = "Send replies as plain text instead of converting the agent's Markdown to the platform's formatting")]
    pub format_markdown: bool,
    /// Show the platform's typing indicator while the agent works (default); `false` shows
    /// none (on WhatsApp it also comes with the read receipt).
    #[serde(default = "api_schema::yes", deserialize_with = "api_schema::null_as_true")]
    #[schema(value_type = Option<bool>)]
    #[arg(long = "no-typing", action = clap::ArgAction::SetFalse, display_order = AFTER_EGRESS + 8,
        help = "Show no typing indicator while the agent works (on WhatsApp it also marks the user's message read)")]
    pub typing_indicator: bool,
}

/// Where `connector add` lists the flags that follow `--egress-allow`, which it shows right
/// after `--api-base-url`.
const AFTER_EGRESS: usize = 100;

#[derive(sqlx::FromRow)]
struct ConnectorRow {
    tenant_id: uuid::Uuid,
    id: uuid::Uuid,
    platform: String,
    name: String,
    external_id: Option<String>,
    app_id: Option<String>,
    bot_user_id: Option<String>,
    bot_id: Option<String>,
    verification_secret: String,
    // NULL once the grace period of a rotation is over (computed in SQL).
    live_previous_secret: Option<String>,
    verify_token: Option<String>,
    outbound_token: Option<String>,
    api_base_url: Option<String>,
    enabled: bool,
    unlinked_policy: String,
    telegram_delivery: String,
    unlinked_notice: Option<String>,
    format_markdown: bool,
    typing_indicator: bool,
    sends_held_until: Option<chrono::DateTime<chrono::Utc>>,
}

impl ConnectorRow {
    fn open(self, keys: &Keyring) -> Result<Connector, sqlx::Error> {
        let decode = |e: String| sqlx::Error::Decode(e.into());
        let tenant_id = crate::domain::TenantId(self.tenant_id);
        let id = ConnectorId(self.id);
        let at = |secret| Binding::connector(tenant_id, id, secret);
        let verification = at(ConnectorSecret::Verification);
        Ok(Connector {
            tenant_id,
            id,
            platform: self
                .platform
                .parse()
                .map_err(|e: crate::domain::UnknownPlatform| decode(e.to_string()))?,
            name: self.name,
            external_id: self.external_id,
            app_id: self.app_id,
            bot_user_id: self.bot_user_id,
            bot_id: self.bot_id,
            verification_secret: keys
                .open(&self.verification_secret, &verification)
                .map_err(unopened)?,
            previous_verification_secret: keys
                .open_opt(self.live_previous_secret.as_deref(), &verification)
                .map_err(unopened)?,
            verify_token: keys
                .open_opt(self.verify_token.as_deref(), &at(ConnectorSecret::VerifyToken))
                .map_err(unopened)?,
            outbound_token: keys
                .open_opt(
                    self.outbound_token.as_deref(),
                    &at(ConnectorSecret::OutboundToken),
                )
                .map_err(unopened)?,
            api_base_url: self.api_base_url,
            enabled: self.enabled,
            unlinked_policy: self.unlinked_policy.parse().map_err(decode)?,
            telegram_delivery: self.telegram_delivery.parse().map_err(decode)?,
            unlinked_notice: self.unlinked_notice,
            format_markdown: self.format_markdown,
            typing_indicator: self.typing_indicator,
            sends_held_until: self.sends_held_until,
        })
    }
}

const SELECT_CONNECTOR: &str =
    "select tenant_id, id, platform, name, external_id, app_id, bot_user_id, bot_id,
        verification_secret,
        case when previous_secret_expires_at > now() then previous_verification_secret end
            as live_previous_secret,
        verify_token, outbound_token, api_base_url, enabled, unlinked_policy,
        telegram_delivery, unlinked_notice, format_markdown, typing_indicator, sends_held_until
   from channel_connectors";

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

pub async fn insert(tx: &mut TenantTx, keys: &Keyring, new: &NewConnector) -> Result<Connector, sqlx::Error> {
    let tenant = tx.tenant();
    let id = ConnectorId::new();
    let at = |secret| Binding::connector(tenant, id, secret);
    let seal = |plain: Option<&SecretString>, secret| keys.seal_opt(plain, &at(secret)).map_err(unopened);
    sqlx::query(
        "insert into channel_connectors (tenant_id, id, platform, name, external_id, app_id,
             bot_user_id, bot_id, verification_secret, verify_token, outbound_token,
             api_base_url, unlinked_policy, telegram_delivery, unlinked_notice, format_markdown,
             typing_indicator)
         values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17)",
    )
    .bind(tenant)
    .bind(id)
    .bind(new.platform.as_str())
    .bind(&new.name)
    .bind(&new.external_id)
    .bind(&new.app_id)
    .bind(&new.bot_user_id)
    .bind(&new.bot_id)
    .bind(seal(
        Some(&new.verification_secret),
        ConnectorSecret::Verification,
    )?)
    .bind(seal(new.verify_token.as_ref(), ConnectorSecret::VerifyToken)?)
    .bind(seal(new.outbound_token.as_ref(), ConnectorSecret::OutboundToken)?)
    .bind(&new.api_base_url)
    .bind(new.unlinked_policy.as_str())
    .bind(new.telegram_delivery.as_str())
    .bind(&new.unlinked_notice)
    .bind(new.format_markdown)
    .bind(new.typing_indicator)
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
    let row: Option<ConnectorRow> =
        sqlx::query_as(&format!("{SELECT_CONNECTOR} where tenant_id = $1 and id = $2"))
            .bind(tenant)
            .bind(id)
            .fetch_optional(tx.conn())
            .await?;
    row.map(|row| row.open(keys)).transpose()
}

pub async fn get_many(
    tx: &mut TenantTx,
    keys: &Keyring,
    ids: &[ConnectorId],
) -> Result<Vec<Connector>, sqlx::Error> {
    let tenant = tx.tenant();
    let rows: Vec<ConnectorRow> = sqlx::query_as(&format!(
        "{SELECT_CONNECTOR} where tenant_id = $1 and id = any($2)"
    ))
    .bind(tenant)
    .bind(ids)
    .fetch_all(tx.conn())
    .await?;
    rows.into_iter().map(|row| row.open(keys)).collect()
}

pub async fn list(tx: &mut TenantTx, keys: &Keyring) -> Result<Vec<Connector>, sqlx::Error> {
    let tenant = tx.tenant();
    let rows: Vec<ConnectorRow> = sqlx::query_as(&format!(
        "{SELECT_CONNECTOR} where tenant_id = $1 order by created_at, id"
    ))
    .bind(tenant)
    .fetch_all(tx.conn())
    .await?;
    rows.into_iter().map(|row| row.open(keys)).collect()
}

/// What admins see of a connector: everything but the secrets, which are write-only.
#[derive(Debug, Clone, serde::Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct ConnectorSummary {
    pub id: uuid::Uuid,
    pub platform: String,
    pub name: String,
    pub external_id: Option<String>,
    pub app_id: Option<String>,
    pub bot_user_id: Option<String>,
    pub bot_id: Option<String>,
    pub api_base_url: Option<String>,
    pub enabled: bool,
    pub unlinked_policy: String,
    pub telegram_delivery: String,
    pub unlinked_notice: Option<String>,
    /// Replies are converted from the agent's Markdown to the platform's formatting.
    pub format_markdown: bool,
    /// The platform's typing indicator is shown while the agent works.
    pub typing_indicator: bool,
    pub has_verify_token: bool,
    pub has_outbound_token: bool,
    /// Until when the secret replaced by the last rotation is still accepted.
    pub previous_secret_expires_at: Option<chrono::DateTime<chrono::Utc>>,
    pub created_at: chrono::DateTime<chrono::Utc>,
    pub updated_at: chrono::DateTime<chrono::Utc>,
}

const SELECT_SUMMARY: &str = "select id, platform, name, external_id, app_id, bot_user_id, bot_id,
        api_base_url, enabled, unlinked_policy, telegram_delivery, unlinked_notice, format_markdown,
        typing_indicator,
        verify_token is not null as has_verify_token, outbound_token is not null as has_outbound_token,
        case when previous_secret_expires_at > now() then previous_secret_expires_at end
            as previous_secret_expires_at,
        created_at, updated_at
   from channel_connectors";

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

// Also the flags of `admin connectors update`: `help` is its wording, `display_order` its
// order of flags (the declaration's order is the API's, which its 422 answers list).
/// Fields to change; absent (or null) fields stay. An empty string clears an optional text
/// field.
#[derive(Debug, Default, Deserialize, ToSchema, clap::Args)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"verification_secret": "new-signing-secret-5678", "previous_secret_grace_secs": 3600}))]
pub struct ConnectorPatch {
    /// Not empty.
    #[schema(min_length = 1, max_length = 200, pattern = r"^[^\u0000]*$")]
    #[arg(long, display_order = 0, help = None::<&str>)]
    pub name: Option<String>,
    #[arg(
        long,
        display_order = 1,
        help = "false: webhooks answer 404 (history is kept)"
    )]
    pub enabled: Option<bool>,
    /// A new verification secret; the current one stays valid for
    /// `previous_secret_grace_secs` (default 24 h). Not blank.
    #[schema(value_type = Option<String>, format = Password, max_length = 1024, pattern = r"^[^\u0000]*[^\u0000\t-\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000][^\u0000]*$")]
    #[arg(long, display_order = 11, value_parser = crate::secret_input::parse,
        help = "A new verification secret (`@file` or `@-`); the current one stays valid for --previous-secret-grace-secs (server default 24 h)")]
    pub verification_secret: Option<SecretString>,
    /// Seconds the replaced secret stays valid: 0 to 2592000 (30 days).
    #[schema(minimum = 0, maximum = 2592000)]
    #[serde(default, deserialize_with = "api_schema::optional_integer")]
    #[arg(long, display_order = 12, help = None::<&str>)]
    pub previous_secret_grace_secs: Option<u64>,
    #[schema(value_type = Option<String>, format = Password, max_length = 1024, pattern = r"^[^\u0000]*$")]
    #[arg(long, display_order = 13, value_parser = crate::secret_input::parse,
        help = "A new WhatsApp verify token (`@file` or `@-`)")]
    pub verify_token: Option<SecretString>,
    #[schema(value_type = Option<String>, format = Password, max_length = 1024, pattern = r"^[^\u0000]*$")]
    #[arg(long, display_order = 14, value_parser = crate::secret_input::parse,
        help = "A new bot or access token (`@file` or `@-`)")]
    pub outbound_token: Option<SecretString>,
    /// Platform API base URL override (tests, proxies): http or https, every address of its
    /// host public unless the operator's `CB_EGRESS_ALLOW` allows it (else 422). An empty
    /// string clears it.
    #[schema(max_length = 2048, pattern = r"^$|^[hH][tT][tT][pP][sS]?://[^\u0000]+$")]
    #[arg(
        long,
        display_order = 6,
        help = "Platform API base URL override; empty clears it"
    )]
    pub api_base_url: Option<String>,
    #[schema(max_length = 256, pattern = r"^[^\u0000]*$")]
    #[arg(long, display_order = 7)]
    pub external_id: Option<String>,
    #[schema(max_length = 256, pattern = r"^[^\u0000]*$")]
    #[arg(long, display_order = 8)]
    pub app_id: Option<String>,
    #[schema(max_length = 256, pattern = r"^[^\u0000]*$")]
    #[arg(long, display_order = 9)]
    pub bot_user_id: Option<String>,
    #[schema(max_length = 256, pattern = r"^[^\u0000]*$")]
    #[arg(long, display_order = 10)]
    pub bot_id: Option<String>,
    #[schema(schema_with = api_schema::optional_unlinked_policy)]
    #[arg(long, value_enum, display_order = 3)]
    pub unlinked_policy: Option<UnlinkedPolicy>,
    #[schema(schema_with = api_schema::optional_telegram_delivery)]
    #[arg(long, value_enum, display_order = 4)]
    pub telegram_delivery: Option<TelegramDelivery>,
    #[schema(max_length = 4096, pattern = r"^[^\u0000]*$")]
    #[arg(
        long,
        display_order = 5,
        help = "Posted to unlinked senders (deny policy); empty clears it"
    )]
    pub unlinked_notice: Option<String>,
    /// Convert the agent's Markdown to the platform's formatting, or send plain text.
    #[arg(long, display_order = 2, help = "false: replies are posted as plain text")]
    pub format_markdown: Option<bool>,
    /// Show the platform's typing indicator while the agent works, or not.
    #[arg(skip)]
    pub typing_indicator: Option<bool>,
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
    let texts = [
        ("name", change.name.clone()),
        ("external_id", change.external_id.clone()),
        ("app_id", change.app_id.clone()),
        ("bot_user_id", change.bot_user_id.clone()),
        ("bot_id", change.bot_id.clone()),
        ("api_base_url", change.api_base_url.clone()),
        ("unlinked_notice", change.unlinked_notice.clone()),
        (
            "verify_token",
            seal(change.verify_token.as_ref(), ConnectorSecret::VerifyToken)?,
        ),
        (
            "outbound_token",
            seal(change.outbound_token.as_ref(), ConnectorSecret::OutboundToken)?,
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
    if let Some(enabled) = change.enabled {
        sql.push(", enabled = ").push_bind(enabled);
    }
    if let Some(format) = change.format_markdown {
        sql.push(", format_markdown = ").push_bind(format);
    }
    if let Some(typing) = change.typing_indicator {
        sql.push(", typing_indicator = ").push_bind(typing);
    }
    if let Some(secret) = &change.verification_secret {
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
