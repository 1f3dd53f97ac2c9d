//! Telegram Bot API webhooks (<https://core.telegram.org/bots/api#getting-updates>; what is
//! forwarded or dropped: docs/platforms.md#what-is-forwarded-recorded-or-dropped). Only
//! `message` updates from people (and taps) are turns; a person's `message_reaction` is a
//! [`Reaction`]. An unknown update kind is dropped, never an error: Telegram adds kinds, and
//! a 4xx would only make it redeliver.

use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::Telegram;
use axum::http::HeaderName;

use crate::domain::{Address, Connector, Platform};
use crate::media::{Attachment, AttachmentKind, FileSource};
use crate::platforms::inbound::{
    parse_json, required_header, verification_secrets, Channel, HookError, HookRequest, Inbound, InboundKind,
    InboundMessage, Parsed, Reaction, ReactionChange, Tap, TapAnswer,
};
use crate::signature::constant_time_eq;

const SECRET_HEADER: &str = "x-telegram-bot-api-secret-token";
pub const SECRET_TOKEN: HeaderName = HeaderName::from_static(SECRET_HEADER);

/// Update kinds the Bot API documents besides `message`, each with its own drop reason.
const OTHER_UPDATE_KINDS: &[&str] = &[
    "edited_message",
    "channel_post",
    "edited_channel_post",
    "business_connection",
    "business_message",
    "edited_business_message",
    "deleted_business_messages",
    // Anonymous counts, with no person to attribute them to.
    "message_reaction_count",
    "inline_query",
    "chosen_inline_result",
    "shipping_query",
    "pre_checkout_query",
    "purchased_paid_media",
    "poll",
    "poll_answer",
    "my_chat_member",
    "chat_member",
    "chat_join_request",
    "chat_boost",
    "removed_chat_boost",
];

/// `animation` comes before `document`: an animation message carries both fields.
const NON_TEXT_CONTENT: &[(&str, &str)] = &[
    ("animation", "[animation]"),
    ("photo", "[photo]"),
    ("video", "[video]"),
    ("video_note", "[video_note]"),
    ("voice", "[voice]"),
    ("audio", "[audio]"),
    ("document", "[document]"),
    ("sticker", "[sticker]"),
    ("paid_media", "[paid_media]"),
    ("story", "[story]"),
    ("contact", "[contact]"),
    ("location", "[location]"),
    ("venue", "[venue]"),
    ("poll", "[poll]"),
    ("dice", "[dice]"),
    ("game", "[game]"),
    ("checklist", "[checklist]"),
];

impl Channel for Telegram {
    fn platform(&self) -> Platform {
        Platform::Telegram
    }

    /// `answerCallbackQuery` in the webhook's answer (core.telegram.org/bots/api#making-requests-when-getting-updates): Telegram runs it at once, so
    /// the spinner stops without a request of ours; its outcome is not reported, and a
    /// spinner left by a lost answer stops by itself.
    fn tap_reply(&self, taps: &[TapAnswer]) -> Option<Value> {
        let tap = taps.first()?;
        let mut reply = json!({"method": "answerCallbackQuery", "callback_query_id": tap.answer_id});
        if let Some(toast) = &tap.toast {
            reply["text"] = toast.as_str().into();
        }
        Some(reply)
    }

    fn sign(&self, secret: &str, _body: &[u8], _now: i64) -> Vec<(HeaderName, String)> {
        vec![(SECRET_TOKEN, secret.to_owned())]
    }

    fn secret_header(&self) -> Option<HeaderName> {
        Some(SECRET_TOKEN)
    }

    fn signing_note(&self, _now: i64, secret_env: &str) -> Option<String> {
        Some(format!(
            "the Telegram header is the secret itself, so the command reads it from ${}: \
             export it in the shell that runs the command",
            secret_env
        ))
    }

    /// The `secret_token` given to `setWebhook` comes back verbatim in every request: no HMAC,
    /// no timestamp (<https://core.telegram.org/bots/api#setwebhook>).
    fn verify(&self, connector: &Connector, request: &HookRequest<'_>) -> Result<(), HookError> {
        let offered = required_header(request.headers, SECRET_HEADER)?;
        let matches = verification_secrets(connector)
            .any(|secret| constant_time_eq(secret.as_bytes(), offered.as_bytes()));
        if matches {
            Ok(())
        } else {
            Err(HookError::BadSignature)
        }
    }

    fn parse(&self, _connector: &Connector, body: &[u8]) -> Result<Parsed, HookError> {
        let update: UpdateIn = parse_json(body)?;
        if let Some(callback) = update.callback_query {
            return Ok(Parsed::Events(read_tap(update.update_id, callback)));
        }
        if let Some(reaction) = update.message_reaction {
            return Ok(Parsed::Events(match read_reaction(reaction) {
                Ok(reaction) => Inbound {
                    reactions: vec![reaction],
                    ..Inbound::default()
                },
                Err(reason) => Inbound::only_dropped(reason),
            }));
        }
        let Some(message) = update.message else {
            return Ok(Parsed::Events(Inbound::only_dropped(other_kind_reason(
                &update.other,
            ))));
        };
        let inbound = match read_message(update.update_id, message) {
            Ok(message) => Inbound {
                messages: vec![message],
                ..Inbound::default()
            },
            Err(reason) => Inbound::only_dropped(reason),
        };
        Ok(Parsed::Events(inbound))
    }
}

#[derive(Deserialize)]
struct UpdateIn {
    /// Required: without it there is no idempotency key, so the body is malformed.
    update_id: i64,
    /// Kept as a `Value` so an odd message is dropped, not refused.
    message: Option<Value>,
    callback_query: Option<Value>,
    message_reaction: Option<Value>,
    #[serde(flatten)]
    other: Map<String, Value>,
}

#[derive(Deserialize)]
struct MessageIn {
    message_id: i64,
    message_thread_id: Option<i64>,
    #[serde(default)]
    is_topic_message: bool,
    /// Absent for messages sent on behalf of a channel.
    from: Option<UserIn>,
    chat: ChatIn,
    date: Option<i64>,
    text: Option<String>,
    caption: Option<String>,
    reply_to_message: Option<ReplyIn>,
    /// The remaining fields, to tell media from service messages.
    #[serde(flatten)]
    other: Map<String, Value>,
}

#[derive(Deserialize)]
struct UserIn {
    id: i64,
    #[serde(default)]
    is_bot: bool,
    username: Option<String>,
    first_name: Option<String>,
}

#[derive(Deserialize)]
struct ChatIn {
    id: i64,
    #[serde(rename = "type")]
    kind: String,
    title: Option<String>,
}

#[derive(Deserialize)]
struct ReplyIn {
    message_id: i64,
}

fn other_kind_reason(fields: &Map<String, Value>) -> &'static str {
    OTHER_UPDATE_KINDS
        .iter()
        .find(|kind| fields.contains_key(**kind))
        .copied()
        .unwrap_or("unknown_update_kind")
}

fn read_message(update_id: i64, message: Value) -> Result<InboundMessage, &'static str> {
    let message: MessageIn = serde_json::from_value(message).map_err(|_| "unreadable_message")?;
    let from = message.from.as_ref().ok_or("no_sender")?;
    // Other bots' posts never reach the agent: two bots answering each other would loop.
    if from.is_bot {
        return Err("bot_sender");
    }
    let (kind, text, attachments) = content(&message)?;
    Ok(InboundMessage {
        // `update_id` is unique per bot; the connector scopes the key
        // (docs/platforms.md#dedupe-keys).
        idempotency_key: update_id.to_string(),
        kind,
        platform_message_id: message.message_id.to_string(),
        address: Address {
            chat_id: message.chat.id.to_string(),
            // Groups, supergroups and channels are read by others; a private chat is not.
            space: (message.chat.kind != "private").then(|| message.chat.id.to_string()),
            thread_id: topic_id(&message).map(|id| id.to_string()),
            platform_user_id: from.id.to_string(),
        },
        reply_to_id: reply_to_id(&message).map(|id| id.to_string()),
        text,
        attachments,
        metadata: metadata(&message, from),
        tap: None,
        command: None,
    })
}

#[derive(Deserialize)]
struct CallbackIn {
    id: String,
    from: UserIn,
    /// A full message, or an inaccessible one (`chat`, `message_id`, `date: 0`); absent for
    /// a button under an inline-mode message, which we never post.
    message: Option<TappedIn>,
    /// Absent for a game's button.
    data: Option<String>,
}

#[derive(Deserialize)]
struct TappedIn {
    message_id: i64,
    chat: ChatIn,
    message_thread_id: Option<i64>,
    #[serde(default)]
    is_topic_message: bool,
}

/// A `callback_query` (core.telegram.org/bots/api#callbackquery): a tap on the buttons of the message it names. One that
/// cannot be ours is dropped here, and still answered so the person's spinner stops.
fn read_tap(update_id: i64, callback: Value) -> Inbound {
    let answer_only = |id: Option<String>, reason| Inbound {
        dropped: vec![reason],
        dropped_taps: id.into_iter().collect(),
        ..Inbound::default()
    };
    let callback: CallbackIn = match serde_json::from_value(callback) {
        Ok(callback) => callback,
        Err(_) => return answer_only(None, "unreadable_callback_query"),
    };
    let (Some(data), Some(tapped)) = (callback.data, callback.message) else {
        return answer_only(Some(callback.id), "callback_not_ours");
    };
    if callback.from.is_bot {
        return answer_only(Some(callback.id), "bot_sender");
    }
    let topic = tapped.message_thread_id.filter(|_| tapped.is_topic_message);
    let message = InboundMessage {
        idempotency_key: update_id.to_string(),
        kind: InboundKind::Text,
        // The answer to a tap replies to the message whose button was tapped.
        platform_message_id: tapped.message_id.to_string(),
        address: Address {
            chat_id: tapped.chat.id.to_string(),
            space: (tapped.chat.kind != "private").then(|| tapped.chat.id.to_string()),
            thread_id: topic.map(|id| id.to_string()),
            platform_user_id: callback.from.id.to_string(),
        },
        reply_to_id: None,
        text: String::new(),
        attachments: Vec::new(),
        metadata: json!({
            "chat_type": tapped.chat.kind,
            "chat_title": tapped.chat.title,
            "username": callback.from.username,
            "first_name": callback.from.first_name,
        }),
        tap: Some(Tap {
            button: data,
            answer_id: Some(callback.id),
        }),
        command: None,
    };
    Inbound {
        messages: vec![message],
        ..Inbound::default()
    }
}

/// `MessageReactionUpdated` (core.telegram.org/bots/api#messagereactionupdated). Telegram
/// sends none for reactions set by bots, and `actor_chat` instead of `user` for a reaction
/// made on behalf of a chat, which no person can be held to.
#[derive(Deserialize)]
struct MessageReactionIn {
    chat: ChatIn,
    message_id: i64,
    user: Option<UserIn>,
    date: i64,
    new_reaction: Vec<ReactionTypeIn>,
}

/// `ReactionType`: `emoji`, `custom_emoji` or `paid` (core.telegram.org/bots/api#reactiontype).
#[derive(Deserialize)]
struct ReactionTypeIn {
    #[serde(rename = "type")]
    kind: String,
    emoji: Option<String>,
    custom_emoji_id: Option<String>,
}

fn read_reaction(reaction: Value) -> Result<Reaction, &'static str> {
    let reaction: MessageReactionIn =
        serde_json::from_value(reaction).map_err(|_| "unreadable_message_reaction")?;
    let user = reaction.user.as_ref().ok_or("anonymous_reaction")?;
    if user.is_bot {
        return Err("bot_sender");
    }
    let at = chrono::DateTime::from_timestamp(reaction.date, 0).ok_or("unreadable_message_reaction")?;
    Ok(Reaction {
        platform_message_id: reaction.message_id.to_string(),
        chat_id: reaction.chat.id.to_string(),
        platform_user_id: user.id.to_string(),
        change: reaction_change(&reaction.new_reaction)?,
        at,
    })
}

/// The person's reactions after the change, as one state: the last plain emoji. A premium
/// user's custom emoji counts only when no plain one is left, as `:custom_emoji:<id>` (it
/// replaces an earlier 👍, so the earlier state is not left standing). A star (`paid`)
/// reaction or a type Telegram adds later is no feedback on an answer: dropped.
fn reaction_change(new_reaction: &[ReactionTypeIn]) -> Result<ReactionChange, &'static str> {
    if new_reaction.is_empty() {
        return Ok(ReactionChange::Removed(None));
    }
    let emoji = new_reaction
        .iter()
        .rev()
        .filter(|r| r.kind == "emoji")
        .find_map(|r| r.emoji.as_deref().filter(|emoji| !emoji.is_empty()));
    let custom = new_reaction
        .iter()
        .rev()
        .filter(|r| r.kind == "custom_emoji")
        .find_map(|r| r.custom_emoji_id.as_deref().filter(|id| !id.is_empty()));
    match (emoji, custom) {
        (Some(emoji), _) => Ok(ReactionChange::Set(emoji.to_owned())),
        (None, Some(id)) => Ok(ReactionChange::Set(format!(":custom_emoji:{id}"))),
        (None, None) => Err("no_emoji_reaction"),
    }
}

/// Text, a caption with its file, or a placeholder; anything else is a service message.
fn content(message: &MessageIn) -> Result<(InboundKind, String, Vec<Attachment>), &'static str> {
    if let Some(text) = &message.text {
        if text.trim().is_empty() {
            return Err("empty_text");
        }
        return Ok((InboundKind::Text, text.clone(), Vec::new()));
    }
    if let Some(attachment) = attachment(&message.other) {
        let caption = message.caption.clone().unwrap_or_default();
        return Ok((InboundKind::Text, caption, vec![attachment]));
    }
    NON_TEXT_CONTENT
        .iter()
        .find(|(field, _)| message.other.contains_key(*field))
        .map(|(_, placeholder)| (InboundKind::NonText, (*placeholder).to_owned(), Vec::new()))
        .ok_or("service_message")
}

/// The fields every Telegram file object shares (`Voice`, `Document`, `PhotoSize`…).
#[derive(Deserialize)]
struct FileIn {
    file_id: String,
    file_size: Option<i64>,
    file_name: Option<String>,
    mime_type: Option<String>,
}

/// Of a photo's sizes, the largest (the last).
fn attachment(fields: &Map<String, Value>) -> Option<Attachment> {
    const KINDS: &[(&str, AttachmentKind, Option<&str>)] = &[
        ("animation", AttachmentKind::Video, Some("video/mp4")),
        ("photo", AttachmentKind::Image, Some("image/jpeg")),
        ("video", AttachmentKind::Video, Some("video/mp4")),
        ("video_note", AttachmentKind::Video, Some("video/mp4")),
        ("voice", AttachmentKind::Voice, Some("audio/ogg")),
        ("audio", AttachmentKind::Audio, None),
        ("document", AttachmentKind::Document, None),
    ];
    let (field, kind, implied_mime) = KINDS.iter().find(|(field, _, _)| fields.contains_key(*field))?;
    let value = match &fields[*field] {
        Value::Array(sizes) => sizes.last()?.clone(),
        other => other.clone(),
    };
    let file: FileIn = serde_json::from_value(value).ok()?;
    Some(Attachment {
        kind: *kind,
        mime: file.mime_type.or_else(|| implied_mime.map(str::to_owned)),
        size: file.file_size,
        name: file.file_name,
        source: FileSource::Telegram {
            file_id: file.file_id,
        },
    })
}

/// A forum topic. Outside forums `message_thread_id` also appears on replies, but it is
/// no topic a reply could be posted to, so it stays in metadata only.
fn topic_id(message: &MessageIn) -> Option<i64> {
    message.message_thread_id.filter(|_| message.is_topic_message)
}

/// In a topic, a message that answers nothing still "replies" to the topic's first message
/// (whose id is the thread id); that is not a quote of anything the user chose.
fn reply_to_id(message: &MessageIn) -> Option<i64> {
    let replied = message.reply_to_message.as_ref()?.message_id;
    (topic_id(message) != Some(replied)).then_some(replied)
}

fn metadata(message: &MessageIn, from: &UserIn) -> Value {
    json!({
        "chat_type": message.chat.kind,
        "chat_title": message.chat.title,
        "username": from.username,
        "first_name": from.first_name,
        "date": message.date,
        "message_thread_id": message.message_thread_id,
        "caption": message.caption,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platforms::inbound::testing;

    const SECRET: &str = "tg_secret-Token_0123";

    const PRIVATE_TEXT: &[u8] = include_bytes!("../../../fixtures/telegram/private_text.json");
    const GROUP_TOPIC_REPLY: &[u8] = include_bytes!("../../../fixtures/telegram/group_topic_reply.json");
    const EDITED_MESSAGE: &[u8] = include_bytes!("../../../fixtures/telegram/edited_message.json");
    const CHANNEL_POST: &[u8] = include_bytes!("../../../fixtures/telegram/channel_post.json");
    const MY_CHAT_MEMBER: &[u8] = include_bytes!("../../../fixtures/telegram/my_chat_member.json");
    const BOT_SENDER: &[u8] = include_bytes!("../../../fixtures/telegram/bot_sender.json");
    const PHOTO: &[u8] = include_bytes!("../../../fixtures/telegram/photo.json");
    const NEW_CHAT_MEMBERS: &[u8] = include_bytes!("../../../fixtures/telegram/new_chat_members.json");
    const UNKNOWN_UPDATE_KIND: &[u8] = include_bytes!("../../../fixtures/telegram/unknown_update_kind.json");
    const CALLBACK_QUERY: &[u8] = include_bytes!("../../../fixtures/telegram/callback_query.json");
    const MESSAGE_REACTION: &[u8] = include_bytes!("../../../fixtures/telegram/message_reaction.json");
    const MESSAGE_REACTION_REMOVED: &[u8] =
        include_bytes!("../../../fixtures/telegram/message_reaction_removed.json");

    fn connector() -> Connector {
        let mut connector = testing::connector(Platform::Telegram, SECRET);
        connector.profile.external_id = Some("7000000001".into());
        connector.profile.bot_user_id = Some("7000000001".into());
        connector
    }

    fn verify(connector: &Connector, token: Option<&str>) -> Result<(), HookError> {
        let pairs: Vec<_> = token.map(|t| (SECRET_HEADER, t)).into_iter().collect();
        let headers = testing::headers(&pairs);
        let request = HookRequest {
            headers: &headers,
            query: None,
            body: PRIVATE_TEXT,
            now: 0,
        };
        Telegram.verify(connector, &request)
    }

    fn events(body: &[u8]) -> Inbound {
        testing::events(&Telegram, &connector(), body)
    }

    fn single_message(body: &[u8]) -> InboundMessage {
        testing::single_message(events(body))
    }

    fn dropped_reason(body: &[u8]) -> &'static str {
        testing::dropped_reason(events(body))
    }

    #[test]
    fn the_configured_secret_token_is_accepted() {
        assert_eq!(verify(&connector(), Some(SECRET)), Ok(()));
    }

    #[test]
    fn a_wrong_secret_token_is_refused() {
        assert_eq!(
            verify(&connector(), Some("tg_secret-Token_0124")),
            Err(HookError::BadSignature)
        );
        assert_eq!(verify(&connector(), Some("")), Err(HookError::BadSignature));
    }

    #[test]
    fn a_missing_secret_token_is_reported() {
        assert_eq!(
            verify(&connector(), None),
            Err(HookError::MissingSignature(SECRET_HEADER))
        );
    }

    #[test]
    fn the_previous_secret_token_is_accepted_during_rotation() {
        let mut rotated = connector();
        rotated.secrets.verification_secret = "new-token".into();
        rotated.secrets.previous_verification_secret = Some(SECRET.into());
        assert_eq!(verify(&rotated, Some(SECRET)), Ok(()));
        assert_eq!(verify(&rotated, Some("new-token")), Ok(()));
    }

    #[test]
    fn an_empty_configured_secret_matches_nothing() {
        let mut empty = connector();
        empty.secrets.verification_secret = "".into();
        assert_eq!(verify(&empty, Some("")), Err(HookError::BadSignature));
    }

    #[test]
    fn private_text_is_forwarded_keyed_by_update_id() {
        let message = single_message(PRIVATE_TEXT);
        assert_eq!(message.kind, InboundKind::Text);
        assert_eq!(message.idempotency_key, "306197398");
        assert_eq!(message.platform_message_id, "154");
        assert_eq!(message.address.chat_id, "408258968");
        assert_eq!(message.address.platform_user_id, "408258968");
        assert_eq!(message.address.thread_id, None);
        assert_eq!(message.reply_to_id, None);
        assert_eq!(message.text, "What is on my calendar today?");
        assert_eq!(message.metadata["chat_type"], "private");
        assert_eq!(message.address.space, None);
        assert_eq!(message.metadata["username"], "hirrolot");
        assert_eq!(message.metadata["first_name"], "Hirrolot");
        assert_eq!(message.metadata["date"], 1_718_000_000);
    }

    #[test]
    fn forum_topic_reply_carries_topic_and_replied_message() {
        let message = single_message(GROUP_TOPIC_REPLY);
        assert_eq!(message.address.chat_id, "-1001276785818");
        assert_eq!(message.address.thread_id.as_deref(), Some("42"));
        assert_eq!(message.reply_to_id.as_deref(), Some("57"));
        assert_eq!(message.text, "/ask@channel_bridge_bot and tomorrow?");
        assert_eq!(message.metadata["chat_type"], "supergroup");
        assert_eq!(message.address.space.as_deref(), Some("-1001276785818"));
    }

    #[test]
    fn implicit_reply_to_the_topic_root_is_not_a_reply() {
        let body = br#"{"update_id":9,"message":{"message_id":60,"message_thread_id":42,"is_topic_message":true,"from":{"id":408258968,"is_bot":false,"first_name":"H"},"chat":{"id":-100,"type":"supergroup","is_forum":true},"date":1,"text":"hi","reply_to_message":{"message_id":42,"date":1,"chat":{"id":-100,"type":"supergroup"},"forum_topic_created":{"name":"t","icon_color":1}}}}"#;
        let message = single_message(body);
        assert_eq!(message.address.thread_id.as_deref(), Some("42"));
        assert_eq!(message.reply_to_id, None);
    }

    #[test]
    fn other_update_kinds_are_dropped_by_name() {
        assert_eq!(dropped_reason(EDITED_MESSAGE), "edited_message");
        assert_eq!(dropped_reason(CHANNEL_POST), "channel_post");
        assert_eq!(dropped_reason(MY_CHAT_MEMBER), "my_chat_member");
    }

    #[test]
    fn a_tap_is_a_turn_on_the_tapped_message_and_any_other_callback_is_still_answered() {
        let tap = single_message(CALLBACK_QUERY);
        assert_eq!(tap.idempotency_key, "306197420");
        assert_eq!(
            (tap.address.chat_id.as_str(), tap.platform_message_id.as_str()),
            ("408258968", "155")
        );
        assert_eq!(tap.address.platform_user_id, "408258968");
        let tap = tap.tap.unwrap();
        assert_eq!(
            (tap.button.as_str(), tap.answer_id.as_deref()),
            ("k3J9xQ2mZa.0", Some("4382713890173521344"))
        );
        let game = br#"{"update_id":5,"callback_query":{"id":"1","from":{"id":1,"is_bot":false,"first_name":"a"},"chat_instance":"x"}}"#;
        let inbound = events(game);
        assert_eq!(
            (inbound.dropped, inbound.dropped_taps),
            (vec!["callback_not_ours"], vec!["1".to_owned()])
        );
    }

    #[test]
    fn an_unknown_update_kind_is_dropped_not_refused() {
        assert_eq!(dropped_reason(UNKNOWN_UPDATE_KIND), "unknown_update_kind");
    }

    #[test]
    fn a_bot_sender_is_dropped() {
        assert_eq!(dropped_reason(BOT_SENDER), "bot_sender");
    }

    #[test]
    fn a_photo_is_a_turn_with_its_caption_and_the_largest_size_attached() {
        let message = single_message(PHOTO);
        assert_eq!(message.kind, InboundKind::Text);
        assert_eq!(message.text, "Receipt from lunch");
        assert_eq!(
            message.attachments,
            vec![Attachment {
                kind: AttachmentKind::Image,
                mime: Some("image/jpeg".into()),
                size: Some(48213),
                name: None,
                source: FileSource::Telegram {
                    file_id: "AgACAgIAAxkBAAIBm2Z0ZXN0cGhvdG9sYXJnZQ".into()
                },
            }]
        );
    }

    #[test]
    fn a_voice_note_without_caption_is_a_turn_with_empty_text() {
        let body = json!({"update_id": 7, "message": {
            "message_id": 9, "date": 1718000500,
            "from": {"id": 5, "is_bot": false, "first_name": "A"},
            "chat": {"id": 5, "type": "private", "first_name": "A"},
            "voice": {"file_id": "AwACAgIAAxkBAAIBnGZ0ZXN0dm9pY2U", "file_unique_id": "AgADvoice",
                      "duration": 3, "mime_type": "audio/ogg", "file_size": 9120}
        }});
        let message = single_message(body.to_string().as_bytes());
        assert_eq!(message.kind, InboundKind::Text);
        assert_eq!(message.text, "");
        assert_eq!(message.attachments[0].kind, AttachmentKind::Voice);
        assert_eq!(message.attachments[0].size, Some(9120));
    }

    #[test]
    fn a_sticker_keeps_its_placeholder_and_is_not_dispatched() {
        let body = json!({"update_id": 8, "message": {
            "message_id": 10, "date": 1718000500,
            "from": {"id": 5, "is_bot": false, "first_name": "A"},
            "chat": {"id": 5, "type": "private", "first_name": "A"},
            "sticker": {"file_id": "CAACAgIAAxkBAAIBnWZ0", "file_unique_id": "AgADst", "width": 512,
                        "height": 512, "is_animated": false, "is_video": false, "type": "regular"}
        }});
        let message = single_message(body.to_string().as_bytes());
        assert_eq!(message.kind, InboundKind::NonText);
        assert_eq!(message.text, "[sticker]");
        assert!(message.attachments.is_empty());
    }

    #[test]
    fn a_service_message_is_dropped() {
        assert_eq!(dropped_reason(NEW_CHAT_MEMBERS), "service_message");
    }

    #[test]
    fn a_message_without_sender_is_dropped() {
        let body = br#"{"update_id":7,"message":{"message_id":1,"sender_chat":{"id":-100,"type":"channel"},"chat":{"id":-100,"type":"supergroup"},"date":1,"text":"hi"}}"#;
        assert_eq!(dropped_reason(body), "no_sender");
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

    /// The reaction fixture with `change` applied to its `message_reaction`.
    fn reaction_update(change: impl FnOnce(&mut Value)) -> Vec<u8> {
        let mut body: Value = serde_json::from_slice(MESSAGE_REACTION).expect("fixture is JSON");
        change(&mut body["message_reaction"]);
        serde_json::to_vec(&body).expect("serializes")
    }

    fn with_new_reaction(new_reaction: Value) -> Vec<u8> {
        reaction_update(|r| r["new_reaction"] = new_reaction)
    }

    #[test]
    fn a_persons_reaction_is_a_reaction_set_in_the_chat_of_the_message() {
        let expected = Reaction {
            platform_message_id: "57".into(),
            chat_id: "-1001276785818".into(),
            platform_user_id: "408258968".into(),
            change: ReactionChange::Set("👍".into()),
            at: chrono::DateTime::from_timestamp(1_718_000_400, 0).expect("in range"),
        };
        assert_eq!(single_reaction(MESSAGE_REACTION), expected);
    }

    #[test]
    fn an_empty_new_reaction_is_a_removal_of_whatever_it_was() {
        let reaction = single_reaction(MESSAGE_REACTION_REMOVED);
        assert_eq!(reaction.change, ReactionChange::Removed(None));
        let later = chrono::DateTime::from_timestamp(1_718_000_460, 0).expect("in range");
        assert_eq!(reaction.at, later);
    }

    #[test]
    fn the_newest_state_is_the_last_plain_emoji_then_a_custom_one() {
        let cases = [
            (
                json!([{"type": "emoji", "emoji": "👍"}, {"type": "emoji", "emoji": "👎"}]),
                "👎",
            ),
            (
                json!([{"type": "emoji", "emoji": "👎"}, {"type": "custom_emoji", "custom_emoji_id": "5368324170671202286"}]),
                "👎",
            ),
            (
                json!([{"type": "paid"}, {"type": "custom_emoji", "custom_emoji_id": "5368324170671202286"}]),
                ":custom_emoji:5368324170671202286",
            ),
        ];
        for (new_reaction, expected) in cases {
            let body = with_new_reaction(new_reaction);
            assert_eq!(
                single_reaction(&body).change,
                ReactionChange::Set(expected.into())
            );
        }
    }

    #[test]
    fn a_star_only_anonymous_or_bot_reaction_is_dropped() {
        let paid = with_new_reaction(json!([{"type": "paid"}]));
        assert_eq!(dropped_reason(&paid), "no_emoji_reaction");
        let anonymous = reaction_update(|r| {
            r.as_object_mut().expect("an object").remove("user");
            r["actor_chat"] = json!({"id": -1001276785818_i64, "title": "Bridge team", "type": "supergroup"});
        });
        assert_eq!(dropped_reason(&anonymous), "anonymous_reaction");
        let bot = reaction_update(|r| r["user"]["is_bot"] = true.into());
        assert_eq!(dropped_reason(&bot), "bot_sender");
    }

    #[test]
    fn reaction_counts_stay_dropped() {
        let body = br#"{"update_id":11,"message_reaction_count":{"chat":{"id":-100,"type":"channel"},"message_id":3,"date":1,"reactions":[{"type":{"type":"emoji","emoji":"\ud83d\udc4d"},"total_count":5}]}}"#;
        assert_eq!(dropped_reason(body), "message_reaction_count");
    }

    #[test]
    fn a_reaction_with_odd_fields_is_dropped_not_refused() {
        let odd: [(&str, Value); 5] = [
            ("message_id", json!("57")),
            ("chat", Value::Null),
            ("date", json!(i64::MAX)),
            ("new_reaction", json!("👍")),
            ("new_reaction", json!([{"emoji": "👍"}])),
        ];
        for (field, value) in odd {
            let body = reaction_update(|r| r[field] = value.clone());
            assert_eq!(
                dropped_reason(&body),
                "unreadable_message_reaction",
                "{field} = {value}"
            );
        }
        let empty_emoji = with_new_reaction(json!([{"type": "emoji", "emoji": ""}]));
        assert_eq!(dropped_reason(&empty_emoji), "no_emoji_reaction");
        let not_an_object = br#"{"update_id":12,"message_reaction":[1]}"#;
        assert_eq!(dropped_reason(not_an_object), "unreadable_message_reaction");
    }

    #[test]
    fn invalid_json_or_missing_update_id_is_malformed() {
        for body in [&b"{"[..], br#"{"message":{}}"#, br#"{"update_id":"1"}"#] {
            let result = Telegram.parse(&connector(), body);
            assert!(matches!(result, Err(HookError::Malformed(_))), "{result:?}");
        }
    }
}
