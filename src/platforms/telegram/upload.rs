//! Files and reactions out: a file posted by multipart upload with the method its type
//! calls for (core.telegram.org/bots/api#sending-files: `sendPhoto` up to 10 MB, the others
//! up to 50 MB), its caption beside it; a reaction set with `setMessageReaction`
//! (core.telegram.org/bots/api#setmessagereaction), one of Telegram's fixed set.
//!
//! An upload is one request, as a text post is, so a file in doubt is settled as text is:
//! by the connector's `telegram_delivery` (at most once by default).

use reqwest::multipart::Form;
use serde_json::json;

use super::send::{classify, classify_edit, json_id};
use crate::egress::GuardedClient as Client;
use crate::media::outgoing::OutgoingFile;
use crate::platforms::contract::api_base;
use crate::platforms::send::{emoji_of, open_file, read_json, transport_error, OutboundPart, SendOutcome};

const PHOTO_MAX_BYTES: u64 = 10_000_000;
const FILE_MAX_BYTES: u64 = 50_000_000;

/// The send method and its file field for a MIME type.
fn method_of(mime: &str) -> (&'static str, &'static str) {
    match mime {
        "image/jpeg" | "image/png" => ("sendPhoto", "photo"),
        "video/mp4" => ("sendVideo", "video"),
        "audio/ogg" => ("sendVoice", "voice"),
        "audio/mpeg" | "audio/mp4" | "audio/x-m4a" => ("sendAudio", "audio"),
        _ => ("sendDocument", "document"),
    }
}

pub(super) fn file_limit(mime: &str) -> u64 {
    match method_of(mime).0 {
        "sendPhoto" => PHOTO_MAX_BYTES,
        _ => FILE_MAX_BYTES,
    }
}

pub(super) async fn send_file(
    client: &Client,
    part: &OutboundPart<'_>,
    token: &str,
    file: &OutgoingFile,
) -> SendOutcome {
    let (method, field) = method_of(&file.mime);
    let body = match open_file(client, part, file, file_limit(&file.mime)).await {
        Ok(body) => body,
        Err(outcome) => return outcome,
    };
    let form = fields(part).part(field, body.into_part());
    let request = client
        .post(format!("{}/bot{token}/{method}", api_base(part.connector)))
        .timeout(part.transfer_timeout)
        .multipart(form);
    match client.send(request).await {
        Ok(response) => {
            let (status, body, _) = read_json(response).await;
            classify(status, body)
        }
        Err(err) => transport_error(err),
    }
}

/// What a text reply sets, as form fields: the chat, the topic, the message replied to;
/// and the caption, plain.
fn fields(part: &OutboundPart<'_>) -> Form {
    let message = part.message;
    let mut form = Form::new().text("chat_id", message.address.chat_id.clone());
    if let Some(topic) = &message.address.thread_id {
        form = form.text("message_thread_id", topic.clone());
    }
    if let Some(target) = message.reply_target() {
        let reply = json!({"message_id": json_id(target), "allow_sending_without_reply": true});
        form = form.text("reply_parameters", reply.to_string());
    }
    if !part.text.is_empty() {
        form = form.text("caption", part.text.to_owned());
    }
    form
}

/// The reactions a bot may set (core.telegram.org/bots/api#reactiontypeemoji), without
/// variation selectors, as Telegram lists them.
const REACTIONS: [&str; 73] = [
    "👍",
    "👎",
    "❤",
    "🔥",
    "🥰",
    "👏",
    "😁",
    "🤔",
    "🤯",
    "😱",
    "🤬",
    "😢",
    "🎉",
    "🤩",
    "🤮",
    "💩",
    "🙏",
    "👌",
    "🕊",
    "🤡",
    "🥱",
    "🥴",
    "😍",
    "🐳",
    "❤\u{200d}🔥",
    "🌚",
    "🌭",
    "💯",
    "🤣",
    "⚡",
    "🍌",
    "🏆",
    "💔",
    "🤨",
    "😐",
    "🍓",
    "🍾",
    "💋",
    "🖕",
    "😈",
    "😴",
    "😭",
    "🤓",
    "👻",
    "👨\u{200d}💻",
    "👀",
    "🎃",
    "🙈",
    "😇",
    "😨",
    "🤝",
    "✍",
    "🤗",
    "🫡",
    "🎅",
    "🎄",
    "☃",
    "💅",
    "🤪",
    "🗿",
    "🆒",
    "💘",
    "🙉",
    "🦄",
    "😘",
    "💊",
    "🙊",
    "😎",
    "👾",
    "🤷\u{200d}♂",
    "🤷",
    "🤷\u{200d}♀",
    "😡",
];

pub(super) fn reaction_name(emoji: &str) -> Result<String, String> {
    let character = emoji_of(emoji).map_or(emoji.trim(), |e| e.as_str());
    let bare = character.replace('\u{fe0f}', "");
    match REACTIONS.contains(&bare.as_str()) {
        true => Ok(bare),
        false => Err(format!(
            "`{}` is not one of the 73 reactions Telegram lets a bot set (such as 👍 👀 🔥 🎉 👌)",
            emoji.trim()
        )),
    }
}

/// The bot's one reaction on `target`, replacing any it set before.
pub(super) async fn react(
    client: &Client,
    part: &OutboundPart<'_>,
    token: &str,
    target: &str,
) -> SendOutcome {
    let body = json!({
        "chat_id": json_id(&part.message.address.chat_id),
        "message_id": json_id(target),
        "reaction": [{"type": "emoji", "emoji": part.text}],
    });
    let url = format!("{}/bot{token}/setMessageReaction", api_base(part.connector));
    match client.send(client.post(url).json(&body)).await {
        Ok(response) => {
            let (status, body, _) = read_json(response).await;
            match classify_edit(status, body) {
                SendOutcome::Sent(_) => SendOutcome::Sent(target.to_owned()),
                other => other,
            }
        }
        Err(err) => transport_error(err),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_go_by_the_method_their_type_calls_for() {
        assert_eq!(method_of("image/png"), ("sendPhoto", "photo"));
        assert_eq!(method_of("application/pdf"), ("sendDocument", "document"));
        assert_eq!(method_of("image/gif"), ("sendDocument", "document"));
        assert_eq!(method_of("audio/ogg"), ("sendVoice", "voice"));
        assert_eq!(file_limit("image/jpeg"), 10_000_000);
        assert_eq!(file_limit("application/zip"), 50_000_000);
    }

    #[test]
    fn reactions_are_telegrams_by_character_or_name() {
        assert_eq!(reaction_name("👀").unwrap(), "👀");
        assert_eq!(reaction_name("eyes").unwrap(), "👀");
        assert_eq!(reaction_name(":+1:").unwrap(), "👍");
        assert_eq!(reaction_name("❤️").unwrap(), "❤");
        assert_eq!(reaction_name("heart").unwrap(), "❤");
        assert!(reaction_name("✅").unwrap_err().contains("not one of the 73"));
        assert!(reaction_name("white_check_mark").is_err());
        assert_eq!(
            REACTIONS.iter().collect::<std::collections::HashSet<_>>().len(),
            73
        );
    }
}
