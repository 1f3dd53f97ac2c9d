//! Domain types parsed at the edge, so the rest of the code never holds an unchecked value.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, sqlx::Type)]
        #[serde(transparent)]
        #[sqlx(transparent)]
        pub struct $name(pub Uuid);

        impl $name {
            /// UUIDv7, so ids sort roughly by creation.
            pub fn new() -> Self {
                Self(Uuid::now_v7())
            }
        }

        impl Default for $name {
            fn default() -> Self {
                Self::new()
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }

        impl FromStr for $name {
            type Err = uuid::Error;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Uuid::parse_str(s).map(Self)
            }
        }
    };
}

id_type!(
    /// A tenant: the unit of isolation under row-level security.
    TenantId
);
id_type!(ConnectorId);
id_type!(MessageId);

/// The messaging platforms the bridge speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, clap::ValueEnum, sqlx::Type)]
#[serde(rename_all = "lowercase")]
#[sqlx(type_name = "text", rename_all = "lowercase")]
pub enum Platform {
    Slack,
    Whatsapp,
    Telegram,
}

impl Platform {
    pub const ALL: [Platform; 3] = [Platform::Slack, Platform::Whatsapp, Platform::Telegram];

    pub fn as_str(self) -> &'static str {
        match self {
            Platform::Slack => "slack",
            Platform::Whatsapp => "whatsapp",
            Platform::Telegram => "telegram",
        }
    }

    /// The platform's API, for connectors that name none of their own.
    pub fn default_api_base(self) -> &'static str {
        match self {
            Platform::Slack => "https://slack.com",
            Platform::Whatsapp => "https://graph.facebook.com",
            Platform::Telegram => "https://api.telegram.org",
        }
    }
}

impl fmt::Display for Platform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, thiserror::Error)]
#[error("unknown platform `{0}` (expected slack, whatsapp or telegram)")]
pub struct UnknownPlatform(pub String);

impl FromStr for Platform {
    type Err = UnknownPlatform;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "slack" => Ok(Platform::Slack),
            "whatsapp" => Ok(Platform::Whatsapp),
            "telegram" => Ok(Platform::Telegram),
            other => Err(UnknownPlatform(other.to_owned())),
        }
    }
}

/// Which conversation a turn belongs to, as `conversation_key` holds it: `user:<user id>`
/// for a linked user (every platform they use), `sender:<connector id>:<platform user id>`
/// for an unlinked sender, `chat:<connector id>:<chat id>` for a chat the agent writes to
/// by its id. Turns of one conversation are queued, held and answered in order.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ConversationKey(String);

/// The kind of a conversation, and what names it within its kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConversationOf<'a> {
    User(&'a str),
    Sender(ConnectorId, &'a str),
    Chat(ConnectorId, &'a str),
}

impl ConversationKey {
    /// A linked user's conversation, on every platform.
    pub fn user(user_id: &str) -> Self {
        Self(format!("user:{user_id}"))
    }

    /// An unlinked sender's conversation on one connector (a long id as its `index_key`).
    pub fn sender(connector: ConnectorId, platform_user_id: &str) -> Self {
        Self(format!("sender:{connector}:{}", index_key(platform_user_id)))
    }

    /// A chat the agent writes to by its id.
    pub fn chat(connector: ConnectorId, chat_id: &str) -> Self {
        Self(format!("chat:{connector}:{chat_id}"))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn of(&self) -> ConversationOf<'_> {
        Self::read(&self.0).expect("a ConversationKey is made by its constructors or read back")
    }

    /// The linked user whose conversation it is.
    pub fn user_id(&self) -> Option<&str> {
        match self.of() {
            ConversationOf::User(user) => Some(user),
            ConversationOf::Sender(..) | ConversationOf::Chat(..) => None,
        }
    }

    /// What every constructor makes reads back (an empty id included: the API's paths
    /// refuse those where they come in).
    fn read(key: &str) -> Option<ConversationOf<'_>> {
        ConversationOf::parse(key)
    }
}

impl<'a> ConversationOf<'a> {
    /// A key's kind and id; `None` for text no constructor makes.
    pub fn parse(key: &'a str) -> Option<Self> {
        if let Some(user) = key.strip_prefix("user:") {
            return Some(ConversationOf::User(user));
        }
        let (kind, rest) = key.split_once(':')?;
        let (connector, id) = rest.split_once(':')?;
        let connector = ConnectorId(Uuid::parse_str(connector).ok()?);
        match kind {
            "sender" => Some(ConversationOf::Sender(connector, id)),
            "chat" => Some(ConversationOf::Chat(connector, id)),
            _ => None,
        }
    }
}

impl fmt::Display for ConversationKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[derive(Debug, thiserror::Error)]
#[error("not a conversation (expected user:…, sender:<connector>:… or chat:<connector>:…)")]
pub struct NotAConversation;

impl FromStr for ConversationKey {
    type Err = NotAConversation;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::try_from(s.to_owned())
    }
}

impl TryFrom<String> for ConversationKey {
    type Error = NotAConversation;
    fn try_from(key: String) -> Result<Self, Self::Error> {
        match Self::read(&key) {
            Some(_) => Ok(Self(key)),
            None => Err(NotAConversation),
        }
    }
}

impl From<ConversationKey> for String {
    fn from(key: ConversationKey) -> Self {
        key.0
    }
}

impl sqlx::Type<sqlx::Postgres> for ConversationKey {
    fn type_info() -> sqlx::postgres::PgTypeInfo {
        <String as sqlx::Type<sqlx::Postgres>>::type_info()
    }
    fn compatible(ty: &sqlx::postgres::PgTypeInfo) -> bool {
        <String as sqlx::Type<sqlx::Postgres>>::compatible(ty)
    }
}

impl sqlx::Encode<'_, sqlx::Postgres> for ConversationKey {
    fn encode_by_ref(
        &self,
        buf: &mut sqlx::postgres::PgArgumentBuffer,
    ) -> Result<sqlx::encode::IsNull, sqlx::error::BoxDynError> {
        <&str as sqlx::Encode<sqlx::Postgres>>::encode(self.as_str(), buf)
    }
}

impl sqlx::Decode<'_, sqlx::Postgres> for ConversationKey {
    fn decode(value: sqlx::postgres::PgValueRef<'_>) -> Result<Self, sqlx::error::BoxDynError> {
        let key = <String as sqlx::Decode<sqlx::Postgres>>::decode(value)?;
        Ok(Self::try_from(key)?)
    }
}

impl sqlx::postgres::PgHasArrayType for ConversationKey {
    fn array_type_info() -> sqlx::postgres::PgTypeInfo {
        <String as sqlx::postgres::PgHasArrayType>::array_type_info()
    }
}

/// Where on its platform a turn was said, and by whom: the one declaration of these fields,
/// flattened into the platform's `InboundMessage`, the row's `NewMessage` and `MessageRow`,
/// the admins' `MessageOut` and an outgoing turn's `Destination`. A reply goes back to it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct Address {
    /// Slack channel, WhatsApp sender number, Telegram chat id.
    pub chat_id: String,
    /// Slack `thread_ts`, Telegram `message_thread_id` (forum topic); null for WhatsApp.
    pub thread_id: Option<String>,
    /// The shared space (channel, group) the turn was asked in, which others read along in;
    /// null for a direct message (it keeps a user's DMs out of a channel's history).
    pub space: Option<String>,
    /// The sender's id on the platform.
    pub platform_user_id: String,
}
/// What happens to a message from a sender with no `channel_links` row.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum, sqlx::Type)]
#[serde(rename_all = "lowercase")]
#[sqlx(type_name = "text", rename_all = "lowercase")]
pub enum UnlinkedPolicy {
    /// Record the turn as `denied_unlinked`; never dispatch it.
    #[default]
    Deny,
    /// Dispatch it under a per-sender conversation key, with no user id.
    Allow,
}

impl UnlinkedPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            UnlinkedPolicy::Deny => "deny",
            UnlinkedPolicy::Allow => "allow",
        }
    }
}

impl FromStr for UnlinkedPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "deny" => Ok(Self::Deny),
            "allow" => Ok(Self::Allow),
            other => Err(format!("unknown unlinked policy `{other}`")),
        }
    }
}

/// Lifecycle of a `channel_messages` row; the worker's transitions are drawn in
/// `crate::db::turns`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, sqlx::Type)]
#[serde(rename_all = "snake_case")]
#[sqlx(type_name = "text", rename_all = "snake_case")]
pub enum MessageStatus {
    Accepted,
    Dispatching,
    /// The agent answered; `delivered_at` says when every part was posted.
    Executed,
    /// A reply part failed for good; resending the undelivered parts makes it `executed`.
    DeliveryFailed,
    DispatchFailed,
    DeniedUnlinked,
    /// Not forwarded (a sticker, a location…): kept for admins, never dispatched nor history.
    Ignored,
    /// Recorded while a person holds the conversation; not dispatched (docs/console.md#human-handoff).
    Held,
    /// The agent answered the dispatch 202: it posts the answer later (docs/agent.md#answering-later).
    AwaitingAgent,
}

impl MessageStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Accepted => "accepted",
            Self::Dispatching => "dispatching",
            Self::Executed => "executed",
            Self::DeliveryFailed => "delivery_failed",
            Self::DispatchFailed => "dispatch_failed",
            Self::DeniedUnlinked => "denied_unlinked",
            Self::Ignored => "ignored",
            Self::Held => "held",
            Self::AwaitingAgent => "awaiting_agent",
        }
    }
}

impl FromStr for MessageStatus {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "accepted" => Self::Accepted,
            "dispatching" => Self::Dispatching,
            "executed" => Self::Executed,
            "delivery_failed" => Self::DeliveryFailed,
            "dispatch_failed" => Self::DispatchFailed,
            "denied_unlinked" => Self::DeniedUnlinked,
            "ignored" => Self::Ignored,
            "held" => Self::Held,
            "awaiting_agent" => Self::AwaitingAgent,
            other => return Err(format!("unknown message status `{other}`")),
        })
    }
}

/// Who wrote a turn: the platform's user (answered by the agent), a person of the tenant
/// answering in the agent's place, or the agent writing first. A turn not from the user has
/// an empty request and its text as the response.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, sqlx::Type, utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
#[sqlx(type_name = "text", rename_all = "snake_case")]
pub enum TurnOrigin {
    #[default]
    User,
    Person,
    Agent,
}

impl TurnOrigin {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::User => "user",
            Self::Person => "person",
            Self::Agent => "agent",
        }
    }
}

impl fmt::Display for MessageStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A connector as the ingress and delivery code use it, its secrets opened (`S` is
/// `SecretString`), or as its row holds it, sealed (`S` is `String`, `db::connectors`).
/// `Debug` never prints the secrets.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct Connector<S = secrecy::SecretString> {
    pub tenant_id: TenantId,
    pub id: ConnectorId,
    #[sqlx(flatten)]
    pub profile: ConnectorProfile,
    #[sqlx(flatten)]
    pub secrets: ConnectorSecrets<S>,
    /// A 429 met by any instance holds its reply sends until then.
    pub sends_held_until: Option<chrono::DateTime<chrono::Utc>>,
}

// Read into `Connector` and shown to admins in `admin::connectors::ConnectorSummary`; requests
// set it through `shapes::ConnectorSettings`, the same fields each optional. The doc comment
// is also the OpenAPI document's description.
/// What a connector is, its secrets aside.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct ConnectorProfile {
    #[schema(value_type = String)]
    pub platform: Platform,
    pub name: String,
    /// Slack team id, WhatsApp phone_number_id or Telegram bot id.
    pub external_id: Option<String>,
    /// Slack `api_app_id` (informational).
    pub app_id: Option<String>,
    /// The bot's own user id: its messages are echoes, never dispatched.
    pub bot_user_id: Option<String>,
    /// Slack `bot_id` (`B…`) of the app.
    pub bot_id: Option<String>,
    /// The platform API's base URL when not the platform's own.
    pub api_base_url: Option<String>,
    /// Webhooks of a disabled connector answer 404.
    pub enabled: bool,
    #[schema(value_type = String)]
    pub unlinked_policy: UnlinkedPolicy,
    #[schema(value_type = String)]
    pub telegram_delivery: TelegramDelivery,
    /// Posted to an unlinked sender under the deny policy, at most once a day each.
    pub unlinked_notice: Option<String>,
    /// Replies are converted from the agent's Markdown to the platform's formatting.
    pub format_markdown: bool,
    /// The platform's typing indicator is shown while the agent works.
    pub typing_indicator: bool,
    /// After a tap closes an answer's choices, its message shows what was chosen (Slack) or
    /// loses its buttons (Telegram).
    pub edit_after_tap: bool,
}

/// A connector's secrets: sealed (`S` is `String`) in its row, opened (`SecretString`) once
/// read. Requests write them through `shapes::SecretsIn`.
#[derive(Clone, sqlx::FromRow)]
pub struct ConnectorSecrets<S> {
    /// Slack signing secret, Meta app secret or Telegram `secret_token`.
    pub verification_secret: S,
    /// Valid for a grace period after a rotation (Slack keeps the old one for 24 h).
    pub previous_verification_secret: Option<S>,
    /// Meta's `hub.verify_token` for the GET handshake.
    pub verify_token: Option<S>,
    /// Slack bot token, WhatsApp access token or Telegram bot token.
    pub outbound_token: Option<S>,
}

/// Which secrets are set, never their values (sealed ones included: without a key they are
/// the plain text).
impl<S> fmt::Debug for ConnectorSecrets<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnectorSecrets")
            .field(
                "previous_verification_secret",
                &self.previous_verification_secret.is_some(),
            )
            .field("verify_token", &self.verify_token.is_some())
            .field("outbound_token", &self.outbound_token.is_some())
            .finish_non_exhaustive()
    }
}

/// Telegram offers no way to find out whether an interrupted `sendMessage` went through.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum, sqlx::Type)]
#[serde(rename_all = "snake_case")]
#[sqlx(type_name = "text", rename_all = "snake_case")]
pub enum TelegramDelivery {
    /// Never resend a part whose outcome is unknown (it is marked `unknown`): no duplicates.
    #[default]
    // One spelling in the API, the CLI and README; the dashed form is still accepted.
    #[value(name = "at_most_once", alias = "at-most-once")]
    AtMostOnce,
    /// Resend it: no lost replies, an occasional duplicate.
    #[value(name = "at_least_once", alias = "at-least-once")]
    AtLeastOnce,
}

impl TelegramDelivery {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::AtMostOnce => "at_most_once",
            Self::AtLeastOnce => "at_least_once",
        }
    }
}

impl FromStr for TelegramDelivery {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "at_most_once" => Ok(Self::AtMostOnce),
            "at_least_once" => Ok(Self::AtLeastOnce),
            other => Err(format!("unknown telegram delivery `{other}`")),
        }
    }
}

/// Which of a user's earlier turns the agent gets as history with a new one: a tenant's
/// choice (`tenants.history_scope`), read by the worker with the tenant's other settings.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum HistoryScopeSetting {
    /// Every turn of the user, wherever it was asked: a channel's question sees their DMs.
    User,
    /// A turn in a shared space (Slack channel, Telegram group, WhatsApp group) sees the
    /// user's turns in that space only; a direct-message turn sees their direct messages on
    /// every platform (the cross-platform continuity of linked users).
    #[default]
    PrivateAware,
    /// The user's turns in the same chat only (no cross-platform continuity).
    Chat,
}

impl HistoryScopeSetting {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::User => "user",
            Self::PrivateAware => "private_aware",
            Self::Chat => "chat",
        }
    }
}

impl FromStr for HistoryScopeSetting {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "user" => Ok(Self::User),
            "private_aware" => Ok(Self::PrivateAware),
            "chat" => Ok(Self::Chat),
            other => Err(format!("unknown history scope `{other}`")),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, sqlx::Type)]
#[sqlx(type_name = "text", rename_all = "snake_case")]
#[serde(rename_all = "snake_case")]
pub enum PartStatus {
    Pending,
    /// Its request may have left: reconciled before any resend.
    Sending,
    Sent,
    Failed,
    /// Posted or not, the platform cannot tell (Telegram, at-most-once): never resent.
    Unknown,
}

impl PartStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Sending => "sending",
            Self::Sent => "sent",
            Self::Failed => "failed",
            Self::Unknown => "unknown",
        }
    }
}

/// The longest identifier an index holds as it is (PostgreSQL's btree refuses ~2.7 kB).
pub const MAX_KEY_BYTES: usize = 256;

/// `value` when it fits `MAX_KEY_BYTES`, else `sha256:` and its hex digest (exact for dedupe).
pub fn index_key(value: &str) -> std::borrow::Cow<'_, str> {
    use sha2::Digest;
    if value.len() <= MAX_KEY_BYTES {
        return std::borrow::Cow::Borrowed(value);
    }
    let digest = sha2::Sha256::digest(value.as_bytes());
    std::borrow::Cow::Owned(format!("sha256:{}", hex::encode(digest)))
}

#[cfg(test)]
mod spelling_tests {
    use clap::ValueEnum;

    use super::TelegramDelivery;

    #[test]
    fn the_cli_takes_the_apis_spelling_and_the_dashed_one() {
        for (given, expected) in [
            ("at_least_once", TelegramDelivery::AtLeastOnce),
            ("at-least-once", TelegramDelivery::AtLeastOnce),
            ("at_most_once", TelegramDelivery::AtMostOnce),
        ] {
            assert_eq!(TelegramDelivery::from_str(given, false), Ok(expected));
        }
        let shown = TelegramDelivery::AtLeastOnce.to_possible_value().unwrap();
        assert_eq!(shown.get_name(), TelegramDelivery::AtLeastOnce.as_str());
    }
}

#[cfg(test)]
mod conversation_tests {
    use super::{ConnectorId, ConversationKey, ConversationOf};

    #[test]
    fn a_key_reads_back_as_it_was_made_and_a_malformed_one_is_refused() {
        let connector: ConnectorId = "0190c8a4-8b1e-7bb8-9a55-5c4e0c1a2b3c".parse().unwrap();
        let sender = ConversationKey::sender(connector, "U1:2");
        assert_eq!(
            sender.as_str(),
            "sender:0190c8a4-8b1e-7bb8-9a55-5c4e0c1a2b3c:U1:2"
        );
        assert_eq!(sender.of(), ConversationOf::Sender(connector, "U1:2"));
        assert_eq!(ConversationKey::user("a:b").of(), ConversationOf::User("a:b"));
        let chat = ConversationKey::chat(connector, "-100");
        assert_eq!(chat.as_str().parse::<ConversationKey>().ok(), Some(chat));
        for bad in [
            "",
            "alice",
            "sender:",
            "sender:nope:U1",
            "chat:x:1",
            "other:0190c8a4-8b1e-7bb8-9a55-5c4e0c1a2b3c:1",
        ] {
            assert!(bad.parse::<ConversationKey>().is_err(), "{bad}");
        }
        let long = "x".repeat(300);
        assert!(ConversationKey::sender(connector, &long)
            .as_str()
            .contains(":sha256:"));
    }
}
