//! A streamed answer shown live in Telegram (`crate::delivery::live`): in a private chat,
//! `sendMessageDraft` with the text so far (an ephemeral preview; nothing to record: the
//! answer is then sent with `sendMessage` like any reply); in a group or channel,
//! `sendMessage` with the text so far, replying to the user's message (its id recorded at
//! once), then `editMessageText`.

use serde_json::{json, Value};

use super::send::json_id;
use crate::db::messages::MessageRow;
use crate::delivery::live::{call, clip, record, token, LiveContext, Shown};
use crate::platforms::api_base;

/// Telegram's limit on a message's (and a draft's) text, in characters.
const TELEGRAM_MAX_CHARS: usize = 4096;

/// A non-zero draft id of the turn (Telegram animates changes of one draft).
fn draft_id(message: &MessageRow) -> i64 {
    let bits = message.id.0.as_u128() as u32 & 0x7fff_ffff;
    i64::from(bits.max(1))
}

pub(super) async fn draft(
    context: &LiveContext,
    text: &str,
    shown: &mut Shown,
) -> Result<bool, &'static str> {
    let text = clip(text, TELEGRAM_MAX_CHARS);
    if text == shown.text {
        return Ok(true);
    }
    let message = &context.message;
    let mut body = json!({
        "chat_id": json_id(&message.chat_id),
        "draft_id": draft_id(message),
        "text": text,
    });
    if let Some(topic) = &message.thread_id {
        body["message_thread_id"] = json_id(topic);
    }
    let request = context
        .client
        .post(format!(
            "{}/bot{}/sendMessageDraft",
            api_base(&context.connector),
            token(context)
        ))
        .json(&body);
    call(context, request).await?;
    shown.text = text.to_owned();
    Ok(true)
}

pub(super) async fn show(context: &LiveContext, text: &str, shown: &mut Shown) -> Result<bool, &'static str> {
    let text = clip(text, TELEGRAM_MAX_CHARS);
    if text == shown.text {
        return Ok(true);
    }
    let message = &context.message;
    let base = format!("{}/bot{}", api_base(&context.connector), token(context));
    let Some(id) = shown.id.clone() else {
        let mut body = json!({
            "chat_id": json_id(&message.chat_id),
            "text": text,
            "reply_parameters": {
                "message_id": json_id(&message.platform_message_id),
                "allow_sending_without_reply": true,
            },
            "link_preview_options": { "is_disabled": true },
        });
        if let Some(topic) = &message.thread_id {
            body["message_thread_id"] = json_id(topic);
        }
        let request = context.client.post(format!("{base}/sendMessage")).json(&body);
        let answer = call(context, request).await?;
        let id = answer
            .pointer("/result/message_id")
            .map(Value::to_string)
            .ok_or("no message_id")?;
        shown.text = text.to_owned();
        return record(context, &id, shown).await;
    };
    let body = json!({
        "chat_id": json_id(&message.chat_id),
        "message_id": json_id(&id),
        "text": text,
        "link_preview_options": { "is_disabled": true },
    });
    let request = context.client.post(format!("{base}/editMessageText")).json(&body);
    call(context, request).await?;
    shown.text = text.to_owned();
    Ok(true)
}
