//! What a request writes to a connector: `ConnectorSettings` and `SecretsIn`, flattened into
//! `NewConnector` and `ConnectorPatch` (the API's bodies, the flags of `connector add` and
//! `admin connectors update`, the console form's target), made into the database's plain
//! `NewRow` and `Change`.

use std::sync::LazyLock;

use secrecy::SecretString;
use serde::{Deserialize, Deserializer, Serialize};
use utoipa::openapi::{RefOr, Schema};
use utoipa::{PartialSchema, ToSchema};

use crate::api_schema::{self, field_names, Body, FromBody};
use crate::db::connectors::{Change, NewRow, Rotation};
use crate::domain::{ConnectorProfile, Platform, TelegramDelivery, UnlinkedPolicy};

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
    /// After a tap closes an answer's choices, change the answer's message (a new
    /// connector's default): Slack shows what was chosen, Telegram removes the buttons.
    /// `false` leaves it as posted; the choice closes all the same.
    #[arg(
        long,
        help = "false: an answer's message stays as posted after a tap closes its choices (default true: Slack shows what was chosen, Telegram removes the buttons)"
    )]
    pub edit_after_tap: Option<bool>,
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
            edit_after_tap: s.edit_after_tap.unwrap_or(true),
        }
    }

    /// The row to insert: the profile and the secrets given; `None` without a verification
    /// secret.
    pub fn row(&self) -> Option<NewRow<'_>> {
        Some(NewRow {
            profile: self.profile(),
            verification_secret: self.secrets.verification_secret.as_ref()?,
            verify_token: self.secrets.verify_token.as_ref(),
            outbound_token: self.secrets.outbound_token.as_ref(),
        })
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

impl ConnectorPatch {
    /// How long the replaced verification secret stays valid, when this rotates it.
    pub fn grace_secs(&self) -> u64 {
        self.previous_secret_grace_secs.unwrap_or(DEFAULT_GRACE_SECS)
    }
}

impl<'a> From<&'a ConnectorPatch> for Change<'a> {
    fn from(patch: &'a ConnectorPatch) -> Self {
        let ConnectorSettings {
            name,
            api_base_url,
            external_id,
            app_id,
            bot_user_id,
            bot_id,
            unlinked_policy,
            telegram_delivery,
            unlinked_notice,
            format_markdown,
            typing_indicator,
            edit_after_tap,
        } = &patch.settings;
        let rotation = patch.secrets.verification_secret.as_ref().map(|secret| Rotation {
            verification_secret: secret,
            grace_secs: patch.grace_secs(),
        });
        Self {
            name: name.as_deref(),
            api_base_url: api_base_url.as_deref(),
            external_id: external_id.as_deref(),
            app_id: app_id.as_deref(),
            bot_user_id: bot_user_id.as_deref(),
            bot_id: bot_id.as_deref(),
            unlinked_policy: *unlinked_policy,
            telegram_delivery: *telegram_delivery,
            unlinked_notice: unlinked_notice.as_deref(),
            format_markdown: *format_markdown,
            typing_indicator: *typing_indicator,
            edit_after_tap: *edit_after_tap,
            enabled: patch.enabled,
            verify_token: patch.secrets.verify_token.as_ref(),
            outbound_token: patch.secrets.outbound_token.as_ref(),
            rotation,
        }
    }
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
