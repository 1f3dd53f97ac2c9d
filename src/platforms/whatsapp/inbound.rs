//! WhatsApp Cloud API webhooks
//! (<https://developers.facebook.com/docs/whatsapp/cloud-api/webhooks/overview>; what is
//! forwarded or dropped: docs/platforms.md#what-is-forwarded-recorded-or-dropped). One POST
//! may carry many entries × changes × messages and statuses, and every one is visited. A
//! message of type `reaction` is a [`Reaction`], never a turn.

use secrecy::ExposeSecret;
use serde::Deserialize;
use serde_json::{json, Value};

use super::Whatsapp;
use axum::http::HeaderName;

use crate::domain::{Address, Connector, Platform};
use crate::media::{Attachment, AttachmentKind, FileSource};
use crate::platforms::inbound::{
    hmac_sha256_hex, hmac_sha256_matches, parse_json, required_header, Channel, DeliveryStatus,
    HandshakeReply, HookError, HookRequest, Inbound, InboundKind, InboundMessage, Parsed, Reaction,
    ReactionChange, Tap,
};
use crate::signature::constant_time_eq;

/// Only the SHA-256 header is checked; the legacy `X-Hub-Signature` (sha1) is ignored.
const SIGNATURE_HEADER: &str = "x-hub-signature-256";
pub const SIGNATURE: HeaderName = HeaderName::from_static(SIGNATURE_HEADER);

impl Channel for Whatsapp {
    fn platform(&self) -> Platform {
        Platform::Whatsapp
    }

    fn sign(&self, secret: &str, body: &[u8], _now: i64) -> Vec<(HeaderName, String)> {
        vec![(SIGNATURE, format!("sha256={}", hmac_sha256_hex(secret, &[body])))]
    }

    /// `X-Hub-Signature-256: sha256=hex(HMAC-SHA256(app secret, raw body))`
    /// (<https://developers.facebook.com/docs/graph-api/webhooks/getting-started>). The body is
    /// hashed exactly as received: Meta signs its escaped-unicode wire form.
    fn verify(&self, connector: &Connector, request: &HookRequest<'_>) -> Result<(), HookError> {
        let header = required_header(request.headers, SIGNATURE_HEADER)?;
        let hex = header.strip_prefix("sha256=").ok_or(HookError::BadSignature)?;
        if hmac_sha256_matches(connector, &[request.body], hex) {
            Ok(())
        } else {
            Err(HookError::BadSignature)
        }
    }

    /// The unsigned GET `hub.mode=subscribe&hub.challenge=…`
    /// (<https://developers.facebook.com/docs/graph-api/webhooks/getting-started>).
    fn handshake(
        &self,
        connector: &Connector,
        request: &HookRequest<'_>,
    ) -> Result<HandshakeReply, HookError> {
        let query = request.query.unwrap_or_default();
        let param = |name| query_param(query, name);
        let mode_ok = param("hub.mode").as_deref() == Some("subscribe");
        let token_ok = param("hub.verify_token").is_some_and(|t| verify_token_matches(connector, &t));
        match param("hub.challenge") {
            Some(challenge) if mode_ok && token_ok && !challenge.is_empty() => Ok(HandshakeReply {
                content_type: "text/plain",
                body: challenge,
            }),
            _ => Err(HookError::HandshakeForbidden),
        }
    }

    fn parse(&self, connector: &Connector, body: &[u8]) -> Result<Parsed, HookError> {
        let notification: NotificationIn = parse_json(body)?;
        if notification.object != "whatsapp_business_account" {
            return Ok(Parsed::Events(Inbound::only_dropped("other_object")));
        }
        let mut inbound = Inbound::default();
        for entry in notification.entry {
            for change in entry.changes {
                read_change(connector, &entry.id, change, &mut inbound);
            }
        }
        Ok(Parsed::Events(inbound))
    }
}

/// Refused when no token is configured, so an empty token never matches an empty one.
fn verify_token_matches(connector: &Connector, offered: &str) -> bool {
    let Some(expected) = connector.secrets.verify_token.as_ref().map(|t| t.expose_secret()) else {
        return false;
    };
    !expected.is_empty() && constant_time_eq(expected.as_bytes(), offered.as_bytes())
}

/// The first value of `name` in a query string, percent-decoded (`+` is a space).
fn query_param(query: &str, name: &str) -> Option<String> {
    query.split('&').find_map(|pair| {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        (percent_decode(key)? == name).then(|| percent_decode(value))?
    })
}

fn percent_decode(input: &str) -> Option<String> {
    let mut bytes = Vec::with_capacity(input.len());
    let mut rest = input.as_bytes();
    while let Some((&byte, tail)) = rest.split_first() {
        rest = tail;
        match byte {
            b'+' => bytes.push(b' '),
            b'%' => {
                let (&[high, low], tail) = rest.split_first_chunk::<2>()?;
                bytes.push(hex_digit(high)? << 4 | hex_digit(low)?);
                rest = tail;
            }
            other => bytes.push(other),
        }
    }
    String::from_utf8(bytes).ok()
}

fn hex_digit(byte: u8) -> Option<u8> {
    char::from(byte).to_digit(16).and_then(|d| u8::try_from(d).ok())
}

#[derive(Deserialize)]
struct NotificationIn {
    object: String,
    #[serde(default)]
    entry: Vec<EntryIn>,
}

#[derive(Deserialize)]
struct EntryIn {
    #[serde(default)]
    id: String,
    #[serde(default)]
    changes: Vec<ChangeIn>,
}

#[derive(Deserialize)]
struct ChangeIn {
    field: String,
    /// Read only once `field` says what it is; each field has its own shape.
    #[serde(default)]
    value: Value,
}

/// The value of a `messages` change. Items stay `Value`s so one odd item is dropped alone
/// instead of failing a batch of up to 1000 updates
/// (<https://developers.facebook.com/docs/graph-api/webhooks/getting-started>).
#[derive(Deserialize)]
struct MessagesValueIn {
    metadata: MetadataIn,
    #[serde(default)]
    contacts: Vec<ContactIn>,
    #[serde(default)]
    messages: Vec<Value>,
    #[serde(default)]
    statuses: Vec<Value>,
}

#[derive(Deserialize)]
struct MetadataIn {
    phone_number_id: String,
    display_phone_number: Option<String>,
}

#[derive(Deserialize)]
struct ContactIn {
    wa_id: Option<String>,
    profile: Option<ProfileIn>,
}

#[derive(Deserialize)]
struct ProfileIn {
    name: Option<String>,
}

#[derive(Deserialize)]
struct MessageIn {
    /// Absent on some `system` messages.
    from: Option<String>,
    id: String,
    timestamp: Option<String>,
    #[serde(rename = "type")]
    kind: String,
    text: Option<TextIn>,
    context: Option<ContextIn>,
    image: Option<MediaIn>,
    audio: Option<MediaIn>,
    video: Option<MediaIn>,
    document: Option<MediaIn>,
    /// A tap on our reply buttons or list (`button_reply`, `list_reply`).
    interactive: Option<InteractiveIn>,
    /// A tap on a template's quick-reply button.
    button: Option<TemplateButtonIn>,
    /// Set on messages of the Groups API (`recipient_type: "group"`).
    group_id: Option<String>,
}

#[derive(Deserialize)]
struct InteractiveIn {
    button_reply: Option<ReplyIn>,
    list_reply: Option<ReplyIn>,
}

/// The row or button tapped: our id, and the title the person saw.
#[derive(Deserialize)]
struct ReplyIn {
    id: String,
    title: Option<String>,
}

/// `payload` is whatever the template's send set; `text` the button's label.
#[derive(Deserialize)]
struct TemplateButtonIn {
    payload: Option<String>,
    text: Option<String>,
}

#[derive(Deserialize)]
struct TextIn {
    body: String,
}

#[derive(Deserialize)]
struct ContextIn {
    /// The quoted message; absent when the context only says `forwarded`.
    id: Option<String>,
}

#[derive(Deserialize)]
struct MediaIn {
    id: Option<String>,
    mime_type: Option<String>,
    caption: Option<String>,
    filename: Option<String>,
    /// On `audio`: recorded in the app as a voice note.
    #[serde(default)]
    voice: bool,
}

#[derive(Deserialize)]
struct StatusIn {
    id: String,
    status: String,
    biz_opaque_callback_data: Option<String>,
    #[serde(default)]
    errors: Vec<StatusErrorIn>,
}

#[derive(Deserialize)]
struct StatusErrorIn {
    code: Option<i64>,
    title: Option<String>,
}

/// The business account and the phone number a change was sent to.
struct ChangeContext<'a> {
    waba_id: &'a str,
    metadata: &'a MetadataIn,
    contacts: &'a [ContactIn],
}

fn read_change(connector: &Connector, waba_id: &str, change: ChangeIn, inbound: &mut Inbound) {
    match change.field.as_str() {
        "messages" => {}
        // The business's own messages, echoed under WhatsApp Business app coexistence.
        "smb_message_echoes" | "message_echoes" => return inbound.dropped.push("message_echoes"),
        _ => return inbound.dropped.push("other_field"),
    }
    let Ok(value) = serde_json::from_value::<MessagesValueIn>(change.value) else {
        return inbound.dropped.push("unreadable_change");
    };
    if let Some(ours) = &connector.profile.external_id {
        if *ours != value.metadata.phone_number_id {
            return inbound.dropped.push("other_phone_number");
        }
    }
    let context = ChangeContext {
        waba_id,
        metadata: &value.metadata,
        contacts: &value.contacts,
    };
    for message in value.messages {
        if message.get("type").and_then(Value::as_str) == Some("reaction") {
            match read_reaction(message) {
                Ok(reaction) => inbound.reactions.push(reaction),
                Err(reason) => inbound.dropped.push(reason),
            }
            continue;
        }
        match read_message(&context, message) {
            Ok(message) => inbound.messages.push(message),
            Err(reason) => inbound.dropped.push(reason),
        }
    }
    for status in value.statuses {
        match read_status(status) {
            Ok(status) => inbound.statuses.push(status),
            Err(reason) => inbound.dropped.push(reason),
        }
    }
}

fn read_message(context: &ChangeContext<'_>, message: Value) -> Result<InboundMessage, &'static str> {
    let message: MessageIn = serde_json::from_value(message).map_err(|_| "unreadable_message")?;
    let (kind, text, attachments) = content(&message)?;
    let from = message.from.clone().ok_or("no_from")?;
    Ok(InboundMessage {
        // The wamid is the same in every retry and re-batched duplicate
        // (docs/platforms.md#dedupe-keys).
        idempotency_key: message.id.clone(),
        kind,
        platform_message_id: message.id.clone(),
        address: Address {
            chat_id: from.clone(),
            thread_id: None,
            space: message.group_id.as_ref().map(|group| format!("group:{group}")),
            platform_user_id: from,
        },
        reply_to_id: message.context.as_ref().and_then(|c| c.id.clone()),
        text,
        attachments,
        metadata: metadata(context, &message),
        tap: tapped(&message).map(|reply| Tap {
            button: reply.id.clone(),
            answer_id: None,
        }),
        command: None,
    })
}

#[derive(Deserialize)]
struct ReactionMessageIn {
    from: Option<String>,
    timestamp: Option<String>,
    reaction: ReactionIn,
}

#[derive(Deserialize)]
struct ReactionIn {
    /// The wamid reacted to.
    message_id: String,
    /// Absent (or empty) when the person took the reaction away
    /// (developers.facebook.com/docs/whatsapp/cloud-api/webhooks/reference/messages/reaction).
    emoji: Option<String>,
}

/// A person's reaction (or its removal) to a message in their chat with the business.
fn read_reaction(message: Value) -> Result<Reaction, &'static str> {
    let message: ReactionMessageIn = serde_json::from_value(message).map_err(|_| "unreadable_reaction")?;
    let from = message.from.filter(|from| !from.is_empty()).ok_or("no_from")?;
    let reacted_to = message.reaction.message_id;
    if reacted_to.is_empty() {
        return Err("unreadable_reaction");
    }
    let at = message
        .timestamp
        .and_then(|secs| secs.parse().ok())
        .and_then(|secs| chrono::DateTime::from_timestamp(secs, 0))
        .ok_or("unreadable_reaction")?;
    let change = match message.reaction.emoji.filter(|emoji| !emoji.is_empty()) {
        Some(emoji) => ReactionChange::Set(emoji),
        None => ReactionChange::Removed(None),
    };
    Ok(Reaction {
        platform_message_id: reacted_to,
        // A reply goes to the sender, so the chat is theirs, as for a text.
        chat_id: from.clone(),
        platform_user_id: from,
        change,
        at,
    })
}

/// The reply button or list row an `interactive` message tapped.
fn tapped(message: &MessageIn) -> Option<&ReplyIn> {
    let interactive = message.interactive.as_ref()?;
    interactive
        .button_reply
        .as_ref()
        .or(interactive.list_reply.as_ref())
}

/// A user's text, a file with its caption, or a placeholder
/// (docs/platforms.md#what-is-forwarded-recorded-or-dropped).
fn content(message: &MessageIn) -> Result<(InboundKind, String, Vec<Attachment>), &'static str> {
    match message.kind.as_str() {
        "text" => {
            let body = message.text.as_ref().map(|t| t.body.as_str()).unwrap_or_default();
            if body.trim().is_empty() {
                return Err("empty_text");
            }
            Ok((InboundKind::Text, body.to_owned(), Vec::new()))
        }
        "interactive" => {
            let reply = tapped(message).ok_or("interactive_not_a_reply")?;
            Ok((
                InboundKind::Text,
                reply.title.clone().unwrap_or_default(),
                Vec::new(),
            ))
        }
        // A template's quick reply is the button's text, as if typed (its payload is kept in
        // metadata): the template was not ours to offer choices with.
        "button" => {
            let text = message
                .button
                .as_ref()
                .and_then(|b| b.text.as_deref())
                .unwrap_or_default();
            if text.trim().is_empty() {
                return Err("empty_text");
            }
            Ok((InboundKind::Text, text.to_owned(), Vec::new()))
        }
        "system" => Err("system"),
        "edit" => Err("edit"),
        "revoke" => Err("revoke"),
        "unsupported" => Err("unsupported"),
        other => match attachment(message) {
            Some((caption, attachment)) => Ok((InboundKind::Text, caption, vec![attachment])),
            None => Ok((InboundKind::NonText, placeholder(other, message), Vec::new())),
        },
    }
}

/// A media message's file and caption. WhatsApp webhooks give no size.
fn attachment(message: &MessageIn) -> Option<(String, Attachment)> {
    let (media, kind) = match message.kind.as_str() {
        "image" => (message.image.as_ref()?, AttachmentKind::Image),
        "audio" => {
            let audio = message.audio.as_ref()?;
            let kind = if audio.voice {
                AttachmentKind::Voice
            } else {
                AttachmentKind::Audio
            };
            (audio, kind)
        }
        "video" => (message.video.as_ref()?, AttachmentKind::Video),
        "document" => (message.document.as_ref()?, AttachmentKind::Document),
        _ => return None,
    };
    let attachment = Attachment {
        kind,
        mime: media.mime_type.clone(),
        size: None,
        name: media.filename.clone(),
        source: FileSource::Whatsapp {
            media_id: media.id.clone()?,
        },
    };
    Some((media.caption.clone().unwrap_or_default(), attachment))
}

/// `[image]`, `[voice]`… The type comes from the wire, so only a plain word is echoed.
fn placeholder(kind: &str, message: &MessageIn) -> String {
    if kind == "audio" && message.audio.as_ref().is_some_and(|a| a.voice) {
        return "[voice]".to_owned();
    }
    let plain =
        !kind.is_empty() && kind.len() <= 32 && kind.bytes().all(|b| b.is_ascii_lowercase() || b == b'_');
    if plain {
        format!("[{kind}]")
    } else {
        "[non-text message]".to_owned()
    }
}

fn metadata(context: &ChangeContext<'_>, message: &MessageIn) -> Value {
    let profile_name = context
        .contacts
        .iter()
        .find(|c| c.wa_id.is_some() && c.wa_id == message.from)
        .and_then(|c| c.profile.as_ref()?.name.clone());
    json!({
        "phone_number_id": context.metadata.phone_number_id,
        "display_phone_number": context.metadata.display_phone_number,
        "waba_id": context.waba_id,
        "profile_name": profile_name,
        "timestamp": message.timestamp,
        "message_type": message.kind,
        "button_payload": message.button.as_ref().and_then(|b| b.payload.as_deref()),
    })
}

/// A callback about one of our own sent messages: never a turn, so a reply cannot start
/// another (docs/platforms.md#what-is-forwarded-recorded-or-dropped).
fn read_status(status: Value) -> Result<DeliveryStatus, &'static str> {
    let status: StatusIn = serde_json::from_value(status).map_err(|_| "unreadable_status")?;
    let error = status.errors.first().map(|e| match (e.code, &e.title) {
        (Some(code), Some(title)) => format!("{code}: {title}"),
        (Some(code), None) => code.to_string(),
        (None, title) => title.clone().unwrap_or_else(|| "unknown error".to_owned()),
    });
    Ok(DeliveryStatus {
        platform_message_id: status.id,
        status: status.status,
        callback_data: status.biz_opaque_callback_data,
        error,
    })
}

#[cfg(test)]
mod tests {
    use hmac::{Hmac, Mac};
    use sha2::Sha256;

    use super::*;
    use crate::platforms::inbound::testing;

    const SECRET: &str = "test_app_secret";
    const PHONE_NUMBER_ID: &str = "106540352242922";
    const VECTOR_49: &[u8] = include_bytes!("../../../fixtures/whatsapp/vector_49_bytes.json");
    const VECTOR_49_SIGNATURE: &str =
        "sha256=dec6a680679a968e7e0319355b23599cbfc54502c0784668e9618baa0c633756";
    const VECTOR_403: &[u8] = include_bytes!("../../../fixtures/whatsapp/vector_403_bytes.json");
    const VECTOR_403_SIGNATURE: &str =
        "sha256=070b3a057e48f03d06df6a2aecc4f9b767bd545339b0470cf20afaee82015a73";

    const TEXT: &[u8] = include_bytes!("../../../fixtures/whatsapp/text.json");
    const BATCH: &[u8] = include_bytes!("../../../fixtures/whatsapp/batch_two_messages_two_statuses.json");
    const IMAGE: &[u8] = include_bytes!("../../../fixtures/whatsapp/image.json");
    const IMAGE_TEXT: &str = include_str!("../../../fixtures/whatsapp/image.json");
    const SYSTEM_WITHOUT_FROM: &[u8] = include_bytes!("../../../fixtures/whatsapp/system_without_from.json");
    const REPLY_WITH_CONTEXT: &[u8] = include_bytes!("../../../fixtures/whatsapp/reply_with_context.json");
    const STATUS_FAILED: &[u8] = include_bytes!("../../../fixtures/whatsapp/status_failed.json");
    const MESSAGE_ECHOES: &[u8] = include_bytes!("../../../fixtures/whatsapp/message_echoes.json");
    const REACTION: &[u8] = include_bytes!("../../../fixtures/whatsapp/reaction.json");
    const REACTION_REMOVED: &[u8] = include_bytes!("../../../fixtures/whatsapp/reaction_removed.json");
    /// Our reply the fixtures' reactions are on (quoted in `reply_with_context.json`).
    const OUR_REPLY: &str = "wamid.HBgLMTY1MDU1NTEyMzQVAgARGBJCUklER0VSRVBMWTAwMQA=";

    fn connector() -> Connector {
        let mut connector = testing::connector(Platform::Whatsapp, SECRET);
        connector.profile.external_id = Some(PHONE_NUMBER_ID.into());
        connector.secrets.verify_token = Some("meatyhamhock".into());
        connector
    }

    fn verify(connector: &Connector, signature: Option<&str>, body: &[u8]) -> Result<(), HookError> {
        let pairs: Vec<_> = signature.map(|s| (SIGNATURE_HEADER, s)).into_iter().collect();
        let headers = testing::headers(&pairs);
        let request = HookRequest {
            headers: &headers,
            query: None,
            body,
            now: 0,
        };
        Whatsapp.verify(connector, &request)
    }

    fn handshake(connector: &Connector, query: Option<&str>) -> Result<HandshakeReply, HookError> {
        let headers = testing::headers(&[]);
        let request = HookRequest {
            headers: &headers,
            query,
            body: b"",
            now: 0,
        };
        Whatsapp.handshake(connector, &request)
    }

    fn events(body: &[u8]) -> Inbound {
        testing::events(&Whatsapp, &connector(), body)
    }

    fn single_message(body: &[u8]) -> InboundMessage {
        testing::single_message(events(body))
    }

    #[test]
    fn the_49_byte_vector_verifies() {
        assert_eq!(VECTOR_49.len(), 49);
        assert_eq!(verify(&connector(), Some(VECTOR_49_SIGNATURE), VECTOR_49), Ok(()));
    }

    #[test]
    fn the_403_byte_vector_verifies_and_parses() {
        assert_eq!(VECTOR_403.len(), 403);
        assert_eq!(
            verify(&connector(), Some(VECTOR_403_SIGNATURE), VECTOR_403),
            Ok(())
        );
        let message = single_message(VECTOR_403);
        assert_eq!(message.idempotency_key, "wamid.TEST1");
        assert_eq!(message.text, "hi");
        assert_eq!(message.metadata["profile_name"], "Sheena");
        assert_eq!(message.metadata["waba_id"], "WABA1");
    }

    #[test]
    fn tampered_body_is_refused() {
        let tampered = String::from_utf8_lossy(VECTOR_403).replace("\"hi\"", "\"ho\"");
        let result = verify(&connector(), Some(VECTOR_403_SIGNATURE), tampered.as_bytes());
        assert_eq!(result, Err(HookError::BadSignature));
    }

    #[test]
    fn missing_or_legacy_only_signature_is_refused() {
        assert_eq!(
            verify(&connector(), None, VECTOR_49),
            Err(HookError::MissingSignature(SIGNATURE_HEADER))
        );
        let headers =
            testing::headers(&[("x-hub-signature", "sha1=fc5983fdf1a4e15c8949b8af05322fede4063d27")]);
        let request = HookRequest {
            headers: &headers,
            query: None,
            body: VECTOR_49,
            now: 0,
        };
        assert_eq!(
            Whatsapp.verify(&connector(), &request),
            Err(HookError::MissingSignature(SIGNATURE_HEADER))
        );
    }

    #[test]
    fn signature_without_sha256_prefix_is_refused() {
        let bare = VECTOR_49_SIGNATURE.trim_start_matches("sha256=");
        assert_eq!(
            verify(&connector(), Some(bare), VECTOR_49),
            Err(HookError::BadSignature)
        );
    }

    #[test]
    fn previous_app_secret_is_accepted_during_rotation() {
        let mut rotated = connector();
        rotated.secrets.verification_secret = "new_app_secret".into();
        assert_eq!(
            verify(&rotated, Some(VECTOR_49_SIGNATURE), VECTOR_49),
            Err(HookError::BadSignature)
        );
        rotated.secrets.previous_verification_secret = Some(SECRET.into());
        assert_eq!(verify(&rotated, Some(VECTOR_49_SIGNATURE), VECTOR_49), Ok(()));
    }

    #[test]
    fn fixture_signed_at_test_time_verifies() {
        let mut mac = Hmac::<Sha256>::new_from_slice(SECRET.as_bytes()).expect("any key length");
        mac.update(BATCH);
        let signature = format!("sha256={}", hex::encode(mac.finalize().into_bytes()));
        assert_eq!(verify(&connector(), Some(&signature), BATCH), Ok(()));
    }

    #[test]
    fn handshake_with_the_right_token_echoes_the_challenge() {
        let query = "hub.mode=subscribe&hub.challenge=1158201444&hub.verify_token=meatyhamhock";
        let reply = handshake(&connector(), Some(query)).expect("token matches");
        assert_eq!(
            reply,
            HandshakeReply {
                content_type: "text/plain",
                body: "1158201444".into()
            }
        );
    }

    #[test]
    fn handshake_parameters_are_percent_decoded() {
        let mut spaced = connector();
        spaced.secrets.verify_token = Some("meaty ham/hock".into());
        let query = "hub.verify_token=meaty+ham%2Fhock&hub.challenge=a%3Db&hub.mode=subscribe";
        assert_eq!(handshake(&spaced, Some(query)).map(|r| r.body), Ok("a=b".into()));
    }

    #[test]
    fn handshake_with_a_wrong_or_missing_token_is_forbidden() {
        let wrong = "hub.mode=subscribe&hub.challenge=1&hub.verify_token=nope";
        let missing = "hub.mode=subscribe&hub.challenge=1";
        let bad_mode = "hub.mode=unsubscribe&hub.challenge=1&hub.verify_token=meatyhamhock";
        let bad_escape = "hub.mode=subscribe&hub.challenge=1&hub.verify_token=meatyhamhock%G";
        for query in [Some(wrong), Some(missing), Some(bad_mode), Some(bad_escape), None] {
            assert_eq!(
                handshake(&connector(), query),
                Err(HookError::HandshakeForbidden),
                "{query:?}"
            );
        }
    }

    #[test]
    fn handshake_is_always_forbidden_without_a_configured_token() {
        let mut unset = connector();
        unset.secrets.verify_token = None;
        let query = "hub.mode=subscribe&hub.challenge=1&hub.verify_token=";
        assert_eq!(handshake(&unset, Some(query)), Err(HookError::HandshakeForbidden));
        unset.secrets.verify_token = Some("".into());
        assert_eq!(handshake(&unset, Some(query)), Err(HookError::HandshakeForbidden));
    }

    #[test]
    fn a_groups_api_message_is_in_the_groups_space() {
        let mut body: serde_json::Value = serde_json::from_slice(TEXT).unwrap();
        let message = &mut body["entry"][0]["changes"][0]["value"]["messages"][0];
        message["recipient_type"] = "group".into();
        message["group_id"] = "120363025555555555".into();
        let message = single_message(&serde_json::to_vec(&body).unwrap());
        assert_eq!(message.address.space.as_deref(), Some("group:120363025555555555"));
        assert_eq!(
            message.address.chat_id, "16505551234",
            "replies still go to the sender"
        );
    }

    #[test]
    fn text_is_forwarded_with_the_wamid_as_key() {
        let message = single_message(TEXT);
        assert_eq!(message.kind, InboundKind::Text);
        assert_eq!(message.idempotency_key, message.platform_message_id);
        assert!(message.idempotency_key.starts_with("wamid."));
        assert_eq!(message.address.chat_id, "16505551234");
        assert_eq!(message.address.platform_user_id, "16505551234");
        assert_eq!(message.address.thread_id, None);
        assert_eq!(message.address.space, None, "a 1:1 chat");
        assert_eq!(message.reply_to_id, None);
        assert_eq!(message.text, "Does it come in another color?");
        assert_eq!(message.metadata["phone_number_id"], PHONE_NUMBER_ID);
        assert_eq!(message.metadata["display_phone_number"], "15550783881");
        assert_eq!(message.metadata["waba_id"], "102290129340398");
        assert_eq!(message.metadata["profile_name"], "Sheena Nelson");
        assert_eq!(message.metadata["timestamp"], "1749416383");
    }

    #[test]
    fn every_entry_and_change_of_a_batch_is_read() {
        let inbound = events(BATCH);
        assert!(inbound.dropped.is_empty(), "dropped: {:?}", inbound.dropped);
        let senders: Vec<_> = inbound
            .messages
            .iter()
            .map(|m| m.address.platform_user_id.as_str())
            .collect();
        assert_eq!(senders, ["16505551234", "16505550000"]);
        assert_eq!(inbound.messages[1].metadata["profile_name"], "Ana Souza");
        let statuses: Vec<_> = inbound.statuses.iter().map(|s| s.status.as_str()).collect();
        assert_eq!(statuses, ["delivered", "read"]);
        assert_eq!(inbound.statuses[0].callback_data.as_deref(), Some("part:0"));
    }

    #[test]
    fn an_image_is_a_turn_with_its_caption_and_the_media_id_attached() {
        let message = single_message(IMAGE);
        assert_eq!(message.kind, InboundKind::Text);
        assert_eq!(message.text, "this one");
        assert_eq!(message.metadata["message_type"], "image");
        assert_eq!(
            message.attachments,
            vec![Attachment {
                kind: AttachmentKind::Image,
                mime: Some("image/jpeg".into()),
                size: None,
                name: None,
                source: FileSource::Whatsapp {
                    media_id: "1003383421387256".into()
                },
            }]
        );
    }

    #[test]
    fn a_voice_note_is_a_voice_attachment_and_a_sticker_keeps_its_placeholder() {
        let voice = IMAGE_TEXT
            .replace(r#""type": "image""#, r#""type": "audio""#)
            .replace(r#""image": {"#, r#""audio": {"voice": true, "#)
            .replace("image/jpeg", "audio/ogg; codecs=opus");
        let message = single_message(voice.as_bytes());
        assert_eq!(message.attachments[0].kind, AttachmentKind::Voice);
        assert_eq!(
            message.attachments[0].mime.as_deref(),
            Some("audio/ogg; codecs=opus")
        );
        let sticker = IMAGE_TEXT
            .replace(r#""type": "image""#, r#""type": "sticker""#)
            .replace(r#""image": {"#, r#""sticker": {"#);
        let message = single_message(sticker.as_bytes());
        assert_eq!(message.kind, InboundKind::NonText);
        assert_eq!(message.text, "[sticker]");
        assert!(message.attachments.is_empty());
    }

    #[test]
    fn system_message_without_from_is_dropped() {
        let inbound = events(SYSTEM_WITHOUT_FROM);
        assert!(inbound.messages.is_empty());
        assert_eq!(inbound.dropped, vec!["system"]);
    }

    #[test]
    fn quoted_reply_carries_the_context_id() {
        let message = single_message(REPLY_WITH_CONTEXT);
        assert_eq!(
            message.reply_to_id.as_deref(),
            Some("wamid.HBgLMTY1MDU1NTEyMzQVAgARGBJCUklER0VSRVBMWTAwMQA=")
        );
    }

    #[test]
    fn failed_status_keeps_the_first_error_and_callback_data() {
        let inbound = events(STATUS_FAILED);
        assert!(inbound.messages.is_empty() && inbound.dropped.is_empty());
        let expected = DeliveryStatus {
            platform_message_id: "wamid.HBgLMTY1MDU1NTEyMzQVAgARGBJCUklER0VSRVBMWTAwMgA=".into(),
            status: "failed".into(),
            callback_data: Some("part:1".into()),
            error: Some("131047: Re-engagement message".into()),
        };
        assert_eq!(inbound.statuses, vec![expected]);
    }

    #[test]
    fn business_echoes_are_dropped() {
        let inbound = events(MESSAGE_ECHOES);
        assert!(inbound.messages.is_empty());
        assert_eq!(inbound.dropped, vec!["message_echoes"]);
    }

    #[test]
    fn messages_for_another_phone_number_are_dropped() {
        let mut other = connector();
        other.profile.external_id = Some("999999999999999".into());
        let Ok(Parsed::Events(inbound)) = Whatsapp.parse(&other, BATCH) else {
            panic!("expected events");
        };
        assert!(inbound.messages.is_empty() && inbound.statuses.is_empty());
        assert_eq!(inbound.dropped, vec!["other_phone_number"; 3], "one per change");
    }

    #[test]
    fn other_objects_and_fields_are_dropped() {
        assert_eq!(
            events(br#"{"object":"page","entry":[]}"#).dropped,
            vec!["other_object"]
        );
        let template = br#"{"object":"whatsapp_business_account","entry":[{"id":"1","changes":[{"field":"message_template_status_update","value":{"event":"APPROVED"}}]}]}"#;
        assert_eq!(events(template).dropped, vec!["other_field"]);
    }

    #[test]
    fn edits_revokes_and_unsupported_are_dropped() {
        for kind in ["edit", "revoke", "unsupported"] {
            let body = format!(
                r#"{{"object":"whatsapp_business_account","entry":[{{"id":"1","changes":[{{"field":"messages","value":{{"metadata":{{"phone_number_id":"{PHONE_NUMBER_ID}"}},"messages":[{{"from":"16505551234","id":"wamid.X","type":"{kind}"}}]}}}}]}}]}}"#
            );
            assert_eq!(events(body.as_bytes()).dropped, vec![kind]);
        }
    }

    #[test]
    fn one_unreadable_item_does_not_sink_the_batch() {
        let body = format!(
            r#"{{"object":"whatsapp_business_account","entry":[{{"id":"1","changes":[{{"field":"messages","value":{{"metadata":{{"phone_number_id":"{PHONE_NUMBER_ID}"}},"messages":[{{"from":"1","type":"text"}},{{"from":"2","id":"wamid.OK","type":"text","text":{{"body":"ok"}}}}]}}}}]}}]}}"#
        );
        let inbound = events(body.as_bytes());
        assert_eq!(inbound.dropped, vec!["unreadable_message"]);
        assert_eq!(inbound.messages.len(), 1);
    }

    /// The one reaction of `body`, nothing else in it.
    fn single_reaction(body: &[u8]) -> Reaction {
        let inbound = events(body);
        assert!(
            inbound.messages.is_empty(),
            "never a turn: {:?}",
            inbound.messages
        );
        assert!(inbound.dropped.is_empty(), "dropped: {:?}", inbound.dropped);
        assert_eq!(inbound.reactions.len(), 1);
        inbound
            .reactions
            .into_iter()
            .next()
            .expect("one reaction, asserted above")
    }

    /// The reaction fixture with `change` applied to its message.
    fn reaction_message(change: impl FnOnce(&mut Value)) -> Vec<u8> {
        let mut body: Value = serde_json::from_slice(REACTION).expect("fixture is JSON");
        change(&mut body["entry"][0]["changes"][0]["value"]["messages"][0]);
        serde_json::to_vec(&body).expect("serializes")
    }

    #[test]
    fn a_reaction_is_a_reaction_on_the_message_it_names_never_a_turn() {
        let expected = Reaction {
            platform_message_id: OUR_REPLY.into(),
            chat_id: "16505551234".into(),
            platform_user_id: "16505551234".into(),
            change: ReactionChange::Set("👍".into()),
            at: chrono::DateTime::from_timestamp(1_749_416_760, 0).expect("in range"),
        };
        assert_eq!(single_reaction(REACTION), expected);
        let changed = reaction_message(|m| m["reaction"]["emoji"] = "👎".into());
        assert_eq!(single_reaction(&changed).change, ReactionChange::Set("👎".into()));
    }

    #[test]
    fn a_reaction_without_or_with_an_empty_emoji_is_a_removal() {
        let reaction = single_reaction(REACTION_REMOVED);
        assert_eq!(reaction.change, ReactionChange::Removed(None));
        assert_eq!(reaction.platform_message_id, OUR_REPLY);
        let empty = reaction_message(|m| m["reaction"]["emoji"] = "".into());
        assert_eq!(single_reaction(&empty).change, ReactionChange::Removed(None));
    }

    #[test]
    fn a_reaction_in_a_batch_leaves_the_messages_around_it_in_their_places() {
        let mut body: Value = serde_json::from_slice(TEXT).expect("fixture is JSON");
        let reaction: Value = serde_json::from_slice(REACTION).expect("fixture is JSON");
        let reaction = &reaction["entry"][0]["changes"][0]["value"]["messages"][0];
        let messages = &mut body["entry"][0]["changes"][0]["value"]["messages"];
        let mut second = messages[0].clone();
        second["id"] = "wamid.SECOND".into();
        let items = messages.as_array_mut().expect("an array");
        items.extend([reaction.clone(), second]);
        let inbound = events(&serde_json::to_vec(&body).expect("serializes"));
        assert!(inbound.dropped.is_empty(), "dropped: {:?}", inbound.dropped);
        let ids: Vec<_> = inbound
            .messages
            .iter()
            .map(|m| m.platform_message_id.as_str())
            .collect();
        let first = "wamid.HBgLMTY1MDM4Nzk0MzkVAgASGBQzQTRBNjU5OUFFRTAzODEwMTQ0RgA=";
        assert_eq!(
            ids,
            [first, "wamid.SECOND"],
            "the reaction is no turn, not even `[reaction]`"
        );
        assert_eq!(inbound.reactions.len(), 1);
    }

    #[test]
    fn a_reaction_with_missing_or_odd_fields_is_dropped_not_refused() {
        let odd: [(&str, Value, &str); 6] = [
            ("from", Value::Null, "no_from"),
            ("reaction", Value::Null, "unreadable_reaction"),
            ("reaction", json!({"emoji": "👍"}), "unreadable_reaction"),
            (
                "reaction",
                json!({"message_id": "", "emoji": "👍"}),
                "unreadable_reaction",
            ),
            ("timestamp", json!("soon"), "unreadable_reaction"),
            ("timestamp", json!(1749416760), "unreadable_reaction"),
        ];
        for (field, value, reason) in odd {
            let body = reaction_message(|m| m[field] = value.clone());
            let inbound = events(&body);
            assert!(inbound.messages.is_empty() && inbound.reactions.is_empty());
            assert_eq!(inbound.dropped, vec![reason], "{field} = {value}");
        }
    }

    #[test]
    fn invalid_json_is_malformed() {
        assert!(matches!(
            Whatsapp.parse(&connector(), b"nope"),
            Err(HookError::Malformed(_))
        ));
    }
}
