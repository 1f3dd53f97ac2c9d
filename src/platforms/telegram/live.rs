//! A streamed answer shown live in Telegram (docs/agent.md#streamed-answers): an ephemeral
//! draft in a private chat, elsewhere a message edited as the text grows.

use futures::future::BoxFuture;
use serde_json::{json, Value};

use super::send::{json_id, reply_body};
use super::Telegram;
use crate::db::messages::MessageRow;
use crate::platforms::contract::{api_base, LivePreview};
use crate::platforms::live::{clip, LiveStep, LiveTarget, Shown, Surface};

/// Telegram's limit on a message's (and a draft's) text, in characters.
const TELEGRAM_MAX_CHARS: usize = 4096;

/// A non-zero draft id of the turn (Telegram animates changes of one draft).
fn draft_id(message: &MessageRow) -> i64 {
    let bits = message.id.0.as_u128() as u32 & 0x7fff_ffff;
    i64::from(bits.max(1))
}

pub(super) async fn draft(
    target: &LiveTarget<'_>,
    text: &str,
    shown: &mut Shown,
) -> Result<LiveStep, &'static str> {
    let text = clip(text, TELEGRAM_MAX_CHARS);
    if text == shown.text {
        return Ok(LiveStep::Shown);
    }
    let message = target.message;
    let mut body = json!({
        "chat_id": json_id(&message.address.chat_id),
        "draft_id": draft_id(message),
        "text": text,
    });
    if let Some(topic) = &message.address.thread_id {
        body["message_thread_id"] = json_id(topic);
    }
    let request = target
        .client
        .post(format!(
            "{}/bot{}/sendMessageDraft",
            api_base(target.connector),
            target.token()
        ))
        .json(&body);
    target.call(request).await?;
    shown.text = text.to_owned();
    Ok(LiveStep::Shown)
}

pub(super) async fn show(
    target: &LiveTarget<'_>,
    text: &str,
    shown: &mut Shown,
) -> Result<LiveStep, &'static str> {
    let text = clip(text, TELEGRAM_MAX_CHARS);
    if text == shown.text {
        return Ok(LiveStep::Shown);
    }
    let message = target.message;
    let base = format!("{}/bot{}", api_base(target.connector), target.token());
    let Some(id) = shown.id.clone() else {
        let body = reply_body(message, text);
        let request = target.client.post(format!("{base}/sendMessage")).json(&body);
        let answer = target.call(request).await?;
        let id = answer
            .pointer("/result/message_id")
            .map(Value::to_string)
            .ok_or("no message_id")?;
        shown.text = text.to_owned();
        return Ok(LiveStep::Started(id));
    };
    let body = json!({
        "chat_id": json_id(&message.address.chat_id),
        "message_id": json_id(&id),
        "text": text,
        "link_preview_options": { "is_disabled": true },
    });
    let request = target.client.post(format!("{base}/editMessageText")).json(&body);
    target.call(request).await?;
    shown.text = text.to_owned();
    Ok(LiveStep::Shown)
}

impl LivePreview for Telegram {
    /// A draft in a private chat; elsewhere a message, edited at a third of the pace (a bot
    /// may send about 20 messages a minute to a group, edits included).
    fn live_surface(&self, message: &MessageRow) -> Option<Surface> {
        let private = message.address.space.is_none();
        Some(Surface {
            pace: if private { 1 } else { 3 },
            ephemeral: private,
        })
    }

    fn show_live<'a>(
        &'a self,
        target: &'a LiveTarget<'a>,
        surface: Surface,
        text: &'a str,
        shown: &'a mut Shown,
    ) -> BoxFuture<'a, Result<LiveStep, &'static str>> {
        if surface.ephemeral {
            Box::pin(draft(target, text, shown))
        } else {
            Box::pin(show(target, text, shown))
        }
    }
}
