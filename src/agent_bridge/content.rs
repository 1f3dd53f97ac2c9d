//! The conversation in OpenAI's chat form. Files are fetched from the gateway and inlined
//! (the upstream may not reach the gateway, and the URLs expire); what cannot be inlined
//! becomes a text part naming it, so the model knows something was sent.

use base64::Engine;
use serde_json::{json, Value};

use crate::dispatch::payload::ChatMessage;
use crate::media::{AttachmentKind, AttachmentOut};

/// Largest file inlined into an upstream request.
const MAX_INLINE_BYTES: usize = 20 * 1024 * 1024;

pub async fn upstream_messages(client: &reqwest::Client, messages: &[ChatMessage]) -> Vec<Value> {
    let mut out = Vec::with_capacity(messages.len());
    for message in messages {
        out.push(upstream_message(client, message).await);
    }
    out
}

async fn upstream_message(client: &reqwest::Client, message: &ChatMessage) -> Value {
    if message.attachments.is_empty() {
        return json!({ "role": message.role, "content": message.content });
    }
    let mut parts = Vec::with_capacity(message.attachments.len() + 1);
    if !message.content.trim().is_empty() {
        parts.push(text_part(&message.content));
    }
    for attachment in &message.attachments {
        parts.push(attachment_part(client, attachment).await);
    }
    json!({ "role": message.role, "content": parts })
}

fn text_part(text: &str) -> Value {
    json!({ "type": "text", "text": text })
}

fn audio_format(mime: &str) -> Option<&'static str> {
    match mime.split(';').next().unwrap_or_default().trim() {
        "audio/wav" | "audio/x-wav" | "audio/wave" => Some("wav"),
        "audio/mpeg" | "audio/mp3" => Some("mp3"),
        _ => None,
    }
}

async fn attachment_part(client: &reqwest::Client, attachment: &AttachmentOut) -> Value {
    let mime = attachment.mime.as_deref().unwrap_or("application/octet-stream");
    let inlined = match attachment.kind {
        AttachmentKind::Image => Some(Inline::Image),
        AttachmentKind::Voice | AttachmentKind::Audio => audio_format(mime).map(Inline::Audio),
        AttachmentKind::Video | AttachmentKind::Document => None,
    };
    let (Some(inline), Some(url)) = (inlined, attachment.url.as_deref()) else {
        return text_part(&note(attachment, "not passed on to the model"));
    };
    let Some(bytes) = fetch(client, url).await else {
        return text_part(&note(attachment, "could not be fetched"));
    };
    let data = base64::engine::general_purpose::STANDARD.encode(bytes);
    match inline {
        Inline::Image => json!({
            "type": "image_url",
            "image_url": { "url": format!("data:{mime};base64,{data}") },
        }),
        Inline::Audio(format) => json!({
            "type": "input_audio",
            "input_audio": { "data": data, "format": format },
        }),
    }
}

enum Inline {
    Image,
    Audio(&'static str),
}

/// `[the user sent a voice note (audio/ogg, 9120 bytes): not passed on to the model]`
fn note(attachment: &AttachmentOut, why: &str) -> String {
    let kind = match attachment.kind {
        AttachmentKind::Image => "an image",
        AttachmentKind::Voice => "a voice note",
        AttachmentKind::Audio => "an audio file",
        AttachmentKind::Video => "a video",
        AttachmentKind::Document => "a file",
    };
    let mut details: Vec<String> = Vec::new();
    if let Some(name) = &attachment.name {
        details.push(name.clone());
    }
    if let Some(mime) = &attachment.mime {
        details.push(mime.clone());
    }
    if let Some(size) = attachment.size {
        details.push(format!("{size} bytes"));
    }
    let details = if details.is_empty() {
        String::new()
    } else {
        format!(" ({})", details.join(", "))
    };
    format!("[the user sent {kind}{details}: {why}]")
}

async fn fetch(client: &reqwest::Client, url: &str) -> Option<Vec<u8>> {
    let mut response = client.get(url).send().await.ok()?.error_for_status().ok()?;
    let mut bytes = Vec::new();
    while let Some(chunk) = response.chunk().await.ok()? {
        if bytes.len() + chunk.len() > MAX_INLINE_BYTES {
            tracing::warn!("an attachment is larger than the bridge inlines");
            return None;
        }
        bytes.extend_from_slice(&chunk);
    }
    Some(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attachment(kind: AttachmentKind, mime: &str, url: Option<&str>) -> AttachmentOut {
        AttachmentOut {
            kind,
            mime: Some(mime.into()),
            size: Some(9120),
            name: None,
            url: url.map(str::to_owned),
            of: None,
        }
    }

    #[tokio::test]
    async fn a_message_without_files_keeps_string_content_and_unusable_files_become_notes() {
        let client = reqwest::Client::new();
        let plain = ChatMessage::user("hi");
        assert_eq!(
            upstream_message(&client, &plain).await,
            json!({"role": "user", "content": "hi"})
        );
        let voice = ChatMessage {
            attachments: vec![attachment(
                AttachmentKind::Voice,
                "audio/ogg",
                Some("http://127.0.0.1:9/x"),
            )],
            ..ChatMessage::user("")
        };
        assert_eq!(
            upstream_message(&client, &voice).await,
            json!({"role": "user", "content": [{"type": "text",
                "text": "[the user sent a voice note (audio/ogg, 9120 bytes): not passed on to the model]"}]})
        );
        let unoffered = ChatMessage {
            attachments: vec![attachment(AttachmentKind::Image, "image/png", None)],
            ..ChatMessage::user("look")
        };
        let value = upstream_message(&client, &unoffered).await;
        assert_eq!(value["content"][0], json!({"type": "text", "text": "look"}));
        assert!(value["content"][1]["text"].as_str().unwrap().contains("an image"));
    }

    #[test]
    fn only_wav_and_mp3_are_audio_input() {
        assert_eq!(audio_format("audio/mpeg"), Some("mp3"));
        assert_eq!(audio_format("audio/wav; codecs=1"), Some("wav"));
        assert_eq!(audio_format("audio/ogg; codecs=opus"), None);
    }
}
