//! What every platform's inbound protocol shares: the [`Channel`] trait (verify, handshake,
//! parse), the turns it produces, and the verification helpers. No database or network here:
//! `crate::http::hooks` drives these steps.

use axum::http::{HeaderMap, HeaderName};
use hmac::{Hmac, Mac};
use secrecy::ExposeSecret;
use serde::de::DeserializeOwned;
use serde_json::Value;
use sha2::Sha256;

use crate::domain::index_key;
use crate::domain::{Address, Connector, MessageId, Platform};

pub struct HookRequest<'a> {
    pub headers: &'a HeaderMap,
    /// The raw query string of a GET (Meta's handshake), without the leading `?`.
    pub query: Option<&'a str>,
    pub body: &'a [u8],
    /// Unix seconds, injected so timestamp checks can be tested.
    pub now: i64,
}

/// Why a request is refused. Each maps to one HTTP answer in `crate::error`.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum HookError {
    #[error("signature header `{0}` is missing")]
    MissingSignature(&'static str),
    #[error("signature does not match")]
    BadSignature,
    #[error("request timestamp is outside the allowed window")]
    StaleTimestamp,
    #[error("malformed body: {0}")]
    Malformed(String),
    #[error("handshake verify token does not match")]
    HandshakeForbidden,
    #[error("method not allowed for this platform")]
    MethodNotAllowed,
}

/// Sent back verbatim with status 200.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandshakeReply {
    pub content_type: &'static str,
    pub body: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct InboundMessage {
    /// Dedupe key, the same across every retry and duplicate (docs/platforms.md#dedupe-keys).
    pub idempotency_key: String,
    pub kind: InboundKind,
    pub platform_message_id: String,
    /// The chat, thread and space, and the sender.
    pub address: Address,
    pub reply_to_id: Option<String>,
    /// User text or caption, or a placeholder such as `[sticker]` for content not forwarded.
    pub text: String,
    pub attachments: Vec<crate::media::Attachment>,
    /// Platform extras kept for admins (display name, channel type…).
    pub metadata: Value,
    /// A tap on one of our buttons (`text` is then what the platform shows as tapped, if
    /// anything); `None` for a message.
    pub tap: Option<Tap>,
    /// A slash command (Slack's `/ask`): `text` is what followed it.
    pub command: Option<String>,
}

/// A tap on a button we posted. Nothing in it is trusted: the button is looked up by its
/// token (`crate::ingress::taps`), and the tap's turn reads the stored choice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tap {
    /// What the button carried back (Telegram `callback_data`, a WhatsApp reply id, a Slack
    /// action `value`).
    pub button: String,
    /// Telegram's `callback_query` id, to be answered so the person's spinner stops.
    pub answer_id: Option<String>,
}

/// How a tap was taken, for the platform's acknowledgement (Telegram's
/// `answerCallbackQuery`): `toast` is the choice's note, when it was a choice of ours.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct TapAnswer {
    pub answer_id: String,
    pub toast: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InboundKind {
    /// Recorded and dispatched to the agent.
    Text,
    /// Content the agent is not given (sticker, poll…): recorded as `ignored`, never dispatched.
    NonText,
}

/// A WhatsApp delivery status callback about one of our own sent messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryStatus {
    pub platform_message_id: String,
    pub status: String,
    /// `biz_opaque_callback_data`: our reply part key, when we sent one.
    pub callback_data: Option<String>,
    pub error: Option<String>,
}

/// Slack's `message_metadata_posted` for one of our reply parts: settles a part left in
/// doubt. Every field is checked when parsed, so nothing in it can fail to store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PostedPart {
    pub message: MessageId,
    pub part_index: i32,
    pub platform_message_id: String,
    /// Where it was posted (Slack `channel_id`): it must be the turn's own chat.
    pub chat_id: String,
}

/// A person's reaction to a message in a chat (docs/agent.md#reactions-feedback-on-answers):
/// never a turn. Recorded against our reply part when `platform_message_id` is one of ours
/// in that chat, else dropped. Nothing in it is trusted beyond being signed by the platform.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reaction {
    /// The message reacted to (Slack `item.ts`, Telegram `message_id`, WhatsApp `wamid`).
    pub platform_message_id: String,
    /// Slack channel, Telegram chat id, WhatsApp sender number: the reacted message's chat.
    pub chat_id: String,
    pub platform_user_id: String,
    pub change: ReactionChange,
    /// When the person reacted, by the platform's clock: a later state wins, and the same
    /// event delivered again changes nothing.
    pub at: chrono::DateTime<chrono::Utc>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReactionChange {
    /// The person's reaction is now this emoji (Unicode, or Slack's name such as `thumbsup`
    /// or `+1::skin-tone-2`).
    Set(String),
    /// Removed: `Some(emoji)` only if it is the one recorded (Slack removes one of several),
    /// `None` whatever it was (WhatsApp's empty emoji, Telegram's empty set).
    Removed(Option<String>),
}

/// The feedback an emoji gives: +1 for 👍 and -1 for 👎 (with any skin tone or variation
/// selector), and Slack's names for them (`+1`, `thumbsup`, `-1`, `thumbsdown`, with any
/// `::skin-tone-N`); 0 for every other emoji.
pub fn feedback_value(emoji: &str) -> i16 {
    let name = emoji.split("::").next().unwrap_or_default();
    let base: String = emoji
        .chars()
        .filter(|c| !matches!(c, '\u{1F3FB}'..='\u{1F3FF}' | '\u{FE0F}'))
        .collect();
    match (name, base.as_str()) {
        ("+1" | "thumbsup", _) | (_, "\u{1F44D}") => 1,
        ("-1" | "thumbsdown", _) | (_, "\u{1F44E}") => -1,
        _ => 0,
    }
}

#[derive(Debug, Default, Clone, PartialEq)]
pub struct Inbound {
    pub messages: Vec<InboundMessage>,
    pub statuses: Vec<DeliveryStatus>,
    pub posted: Vec<PostedPart>,
    /// Reactions to messages, for the reply parts they may be about.
    pub reactions: Vec<Reaction>,
    /// Why things were dropped without a row, for metrics and debug logs.
    pub dropped: Vec<&'static str>,
    /// Taps dropped here that the platform still wants acknowledged (their answer ids).
    pub dropped_taps: Vec<String>,
    /// The body of the webhook's 200 when the platform shows it (a Slack slash command's).
    pub ack: Option<Value>,
}

impl Inbound {
    pub fn has_records(&self) -> bool {
        !(self.messages.is_empty()
            && self.statuses.is_empty()
            && self.posted.is_empty()
            && self.reactions.is_empty())
    }

    /// Hashes an idempotency key too long for its index (`index_key`), so a malformed but
    /// signed update is recorded rather than failing with a 5xx on every retry
    /// (docs/platforms.md#what-is-forwarded-recorded-or-dropped).
    pub fn fit_keys(&mut self) {
        for message in &mut self.messages {
            if let std::borrow::Cow::Owned(key) = index_key(&message.idempotency_key) {
                message.idempotency_key = key;
            }
        }
    }

    /// Replaces U+0000 with U+FFFD: PostgreSQL cannot store NUL, and the platform would retry
    /// the body for days against a 500. Replacing, not dropping, keeps "a\0b" apart from "ab".
    pub fn scrub_nul(&mut self) {
        for message in &mut self.messages {
            for field in [
                &mut message.idempotency_key,
                &mut message.platform_message_id,
                &mut message.address.chat_id,
                &mut message.address.platform_user_id,
                &mut message.text,
            ] {
                scrub(field);
            }
            for field in [
                &mut message.address.thread_id,
                &mut message.address.space,
                &mut message.reply_to_id,
                &mut message.command,
            ]
            .into_iter()
            .flatten()
            {
                scrub(field);
            }
            scrub_json(&mut message.metadata);
            for attachment in &mut message.attachments {
                attachment.text_fields().for_each(scrub);
            }
        }
        for status in &mut self.statuses {
            scrub(&mut status.platform_message_id);
            scrub(&mut status.status);
            for field in [&mut status.callback_data, &mut status.error]
                .into_iter()
                .flatten()
            {
                scrub(field);
            }
        }
        for reaction in &mut self.reactions {
            for field in [
                &mut reaction.platform_message_id,
                &mut reaction.chat_id,
                &mut reaction.platform_user_id,
            ] {
                scrub(field);
            }
            match &mut reaction.change {
                ReactionChange::Set(emoji) | ReactionChange::Removed(Some(emoji)) => scrub(emoji),
                ReactionChange::Removed(None) => {}
            }
        }
    }
}

fn scrub(text: &mut String) {
    if text.contains('\0') {
        *text = text.replace('\0', "\u{FFFD}");
    }
}

fn scrub_json(value: &mut Value) {
    match value {
        Value::String(text) => scrub(text),
        Value::Array(items) => items.iter_mut().for_each(scrub_json),
        Value::Object(map) => {
            if map.keys().any(|key| key.contains('\0')) {
                let entries = std::mem::take(map);
                for (mut key, value) in entries {
                    scrub(&mut key);
                    map.insert(key, value);
                }
            }
            map.values_mut().for_each(scrub_json);
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Parsed {
    Handshake(HandshakeReply),
    Events(Inbound),
}

pub trait Channel: Send + Sync {
    fn platform(&self) -> Platform;

    /// Checks the request's signature or secret over the raw body. Constant-time comparisons.
    fn verify(&self, connector: &Connector, request: &HookRequest<'_>) -> Result<(), HookError>;

    /// Answers an unsigned GET handshake (Meta's `hub.challenge`).
    fn handshake(
        &self,
        connector: &Connector,
        request: &HookRequest<'_>,
    ) -> Result<HandshakeReply, HookError> {
        let _ = (connector, request);
        Err(HookError::MethodNotAllowed)
    }

    /// Never called before `verify` succeeded.
    fn parse(&self, connector: &Connector, body: &[u8]) -> Result<Parsed, HookError>;

    /// A request to the connector's interactivity or commands URL (Slack's taps on buttons
    /// and slash commands); platforms whose taps come with their other updates have none.
    fn parse_interaction(&self, connector: &Connector, body: &[u8]) -> Result<Parsed, HookError> {
        let _ = (connector, body);
        Err(HookError::MethodNotAllowed)
    }

    /// The headers the platform would sign `body` with at `now`: the client side of `verify`.
    fn sign(&self, secret: &str, body: &[u8], now: i64) -> Vec<(HeaderName, String)>;

    /// The header that carries the secret itself (Telegram): anything that prints headers
    /// must mask it.
    fn secret_header(&self) -> Option<HeaderName> {
        None
    }

    /// The body of the webhook's 200 when it carried taps, if the platform takes an
    /// acknowledgement there (Telegram runs a method named in the response).
    fn tap_reply(&self, taps: &[TapAnswer]) -> Option<Value> {
        let _ = taps;
        None
    }

    /// A note for an operator replaying a request signed at `now` (`send-fixture --curl`).
    /// `secret_env` names the variable a printed command reads the secret from.
    fn signing_note(&self, now: i64, secret_env: &str) -> Option<String> {
        let _ = (now, secret_env);
        None
    }
}

impl Inbound {
    pub fn only_dropped(reason: &'static str) -> Self {
        Self {
            dropped: vec![reason],
            ..Self::default()
        }
    }
}

/// The current secret, then the previous one during a rotation (the platform keeps the
/// previous one valid for a while: docs/platforms.md#registering-the-webhook-with-each-platform).
/// Never an empty one: an HMAC under an empty key is something anyone can produce.
pub(crate) fn verification_secrets(connector: &Connector) -> impl Iterator<Item = &str> {
    std::iter::once(&connector.secrets.verification_secret)
        .chain(connector.secrets.previous_verification_secret.as_ref())
        .map(|secret| secret.expose_secret())
        .filter(|secret| !secret.is_empty())
}

/// Whether `hex_signature` is HMAC-SHA256 over `parts` under any of the connector's secrets.
pub(crate) fn hmac_sha256_matches(connector: &Connector, parts: &[&[u8]], hex_signature: &str) -> bool {
    let Ok(signature) = hex::decode(hex_signature) else {
        return false;
    };
    verification_secrets(connector).any(|secret| {
        let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes())
            .expect("HMAC-SHA256 accepts keys of any length");
        parts.iter().for_each(|part| mac.update(part));
        mac.verify_slice(&signature).is_ok()
    })
}

/// Lowercase hex HMAC-SHA256 of `parts`. The key is the secret's UTF-8 bytes, never hex- or
/// base64-decoded, as Slack and Meta both sign.
pub(crate) fn hmac_sha256_hex(secret: &str, parts: &[&[u8]]) -> String {
    let mut mac =
        Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC-SHA256 accepts keys of any length");
    parts.iter().for_each(|part| mac.update(part));
    hex::encode(mac.finalize().into_bytes())
}

/// A required header as text; a value that is not visible ASCII cannot be a valid signature.
pub(crate) fn required_header<'a>(headers: &'a HeaderMap, name: &'static str) -> Result<&'a str, HookError> {
    let value = headers.get(name).ok_or(HookError::MissingSignature(name))?;
    value.to_str().map_err(|_| HookError::BadSignature)
}

/// Anything that is not the platform's JSON is a 400.
pub(crate) fn parse_json<T: DeserializeOwned>(body: &[u8]) -> Result<T, HookError> {
    serde_json::from_slice(body).map_err(|e| HookError::Malformed(e.to_string()))
}

#[cfg(test)]
pub(crate) mod testing {
    //! A unit-test connector (`fixtures/README.md` ids) and the assertions platforms share.

    use super::{Channel, Inbound, InboundMessage, Parsed};

    /// The events of a body that must parse as events (not a handshake, not an error).
    pub(crate) fn events(channel: &dyn Channel, connector: &Connector, body: &[u8]) -> Inbound {
        match channel.parse(connector, body) {
            Ok(Parsed::Events(inbound)) => inbound,
            other => panic!("expected events, got {other:?}"),
        }
    }

    /// The one forwarded message of `inbound`, nothing dropped beside it.
    pub(crate) fn single_message(inbound: Inbound) -> InboundMessage {
        assert!(inbound.dropped.is_empty(), "dropped: {:?}", inbound.dropped);
        assert!(inbound.statuses.is_empty(), "statuses: {:?}", inbound.statuses);
        assert_eq!(inbound.messages.len(), 1);
        inbound
            .messages
            .into_iter()
            .next()
            .expect("one message, asserted above")
    }

    /// The one drop reason of `inbound`, nothing forwarded.
    pub(crate) fn dropped_reason(inbound: Inbound) -> &'static str {
        assert!(inbound.messages.is_empty(), "forwarded: {:?}", inbound.messages);
        assert_eq!(inbound.dropped.len(), 1);
        inbound.dropped[0]
    }

    use crate::domain::{
        Connector, ConnectorId, ConnectorProfile, ConnectorSecrets, Platform, TenantId, UnlinkedPolicy,
    };

    pub(crate) fn connector(platform: Platform, secret: &str) -> Connector {
        Connector {
            tenant_id: TenantId::new(),
            id: ConnectorId::new(),
            profile: ConnectorProfile {
                platform,
                name: format!("test {platform}"),
                external_id: None,
                app_id: None,
                bot_user_id: None,
                bot_id: None,
                api_base_url: None,
                enabled: true,
                unlinked_policy: UnlinkedPolicy::Deny,
                telegram_delivery: Default::default(),
                unlinked_notice: None,
                format_markdown: true,
                typing_indicator: true,
                edit_after_tap: true,
            },
            secrets: ConnectorSecrets {
                verification_secret: secret.into(),
                previous_verification_secret: None,
                verify_token: None,
                outbound_token: None,
            },
            sends_held_until: None,
        }
    }

    pub(crate) fn headers(pairs: &[(&'static str, &str)]) -> axum::http::HeaderMap {
        pairs
            .iter()
            .map(|(name, value)| {
                let value = value.parse().expect("test header values are ASCII");
                (axum::http::HeaderName::from_static(name), value)
            })
            .collect()
    }
}

#[cfg(test)]
mod scrub_tests {
    use super::*;

    #[test]
    fn an_oversize_key_becomes_its_digest_and_a_short_one_stays() {
        assert_eq!(index_key("slack:T1:1.2"), "slack:T1:1.2");
        let long = "x".repeat(5000);
        let other = format!("{}y", "x".repeat(4999));
        let hashed = index_key(&long);
        assert!(hashed.starts_with("sha256:") && hashed.len() == 7 + 64);
        assert_eq!(hashed, index_key(&long));
        assert_ne!(hashed, index_key(&other));
    }

    #[test]
    fn every_nul_that_would_be_stored_becomes_a_replacement_character() {
        let mut inbound = Inbound {
            messages: vec![InboundMessage {
                idempotency_key: "k\0".into(),
                kind: InboundKind::Text,
                platform_message_id: "m\0".into(),
                address: Address {
                    chat_id: "c".into(),
                    thread_id: Some("t\0".into()),
                    space: Some("s\0".into()),
                    platform_user_id: "u".into(),
                },
                reply_to_id: None,
                text: "a\0b".into(),
                attachments: vec![crate::media::Attachment {
                    kind: crate::media::AttachmentKind::Document,
                    mime: Some("text/plain\0".into()),
                    size: None,
                    name: Some("n\0".into()),
                    source: crate::media::FileSource::Slack {
                        file_id: "F\0".into(),
                        url: Some("u\0".into()),
                    },
                }],
                metadata: serde_json::json!({"na\u{0}me": ["x\u{0}", 1, {"deep": "\u{0}"}]}),
                tap: None,
                command: Some("/a\0".into()),
            }],
            statuses: vec![DeliveryStatus {
                platform_message_id: "w\0".into(),
                status: "sent".into(),
                callback_data: Some("p\0".into()),
                error: None,
            }],
            posted: Vec::new(),
            reactions: Vec::new(),
            dropped: Vec::new(),
            dropped_taps: Vec::new(),
            ack: None,
        };
        inbound.scrub_nul();
        let message = &inbound.messages[0];
        assert_eq!(
            (
                message.idempotency_key.as_str(),
                message.platform_message_id.as_str(),
                message.text.as_str()
            ),
            ("k\u{FFFD}", "m\u{FFFD}", "a\u{FFFD}b")
        );
        assert_eq!(message.address.thread_id.as_deref(), Some("t\u{FFFD}"));
        assert_eq!(message.command.as_deref(), Some("/a\u{FFFD}"));
        let mut attachment = message.attachments[0].clone();
        assert!(attachment.text_fields().all(|field| !field.contains('\0')));
        assert_eq!(
            message.metadata,
            serde_json::json!({"na\u{FFFD}me": ["x\u{FFFD}", 1, {"deep": "\u{FFFD}"}]})
        );
        let status = &inbound.statuses[0];
        assert_eq!(
            (
                status.platform_message_id.as_str(),
                status.callback_data.as_deref()
            ),
            ("w\u{FFFD}", Some("p\u{FFFD}"))
        );
    }
}

#[cfg(test)]
mod feedback_tests {
    use super::feedback_value;

    #[test]
    fn thumbs_up_and_down_are_feedback_in_every_spelling() {
        for up in [
            "👍",
            "👍🏽",
            "\u{1F44D}\u{FE0F}",
            "+1",
            "thumbsup",
            "+1::skin-tone-3",
        ] {
            assert_eq!(feedback_value(up), 1, "{up}");
        }
        for down in ["👎", "👎🏿", "-1", "thumbsdown", "thumbsdown::skin-tone-6"] {
            assert_eq!(feedback_value(down), -1, "{down}");
        }
        for other in ["😮", "tada", "❤", "", "+1a", "👍👍"] {
            assert_eq!(feedback_value(other), 0, "{other}");
        }
    }
}
