//! Pictures, voice notes and files users send (docs/agent.md#pictures-voice-notes-and-files).
//! Ingress records where the platform keeps a file ([`FileSource`]), never the bytes; the
//! agent gets an expiring gateway URL (`token`), and fetching it streams the file from the
//! platform (`fetch`). Platform file URLs carry or need the bot token, so they never leave.

pub mod outgoing;
pub mod token;

use serde::{Deserialize, Serialize};

use crate::domain::MessageId;

/// One file a user sent with a message, as recorded (the `attachments` column).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attachment {
    #[serde(rename = "type")]
    pub kind: AttachmentKind,
    /// As the platform gave it, or implied by the kind (Telegram photos are JPEG).
    pub mime: Option<String>,
    pub size: Option<i64>,
    pub name: Option<String>,
    /// Where the platform keeps it: never handed out.
    pub source: FileSource,
}

impl Attachment {
    /// Every text the platform gave, for scrubbing NUL.
    pub fn text_fields(&mut self) -> impl Iterator<Item = &mut String> {
        let source: Vec<&mut String> = match &mut self.source {
            FileSource::Telegram { file_id } => vec![file_id],
            FileSource::Whatsapp { media_id } => vec![media_id],
            FileSource::Slack { file_id, url } => std::iter::once(file_id).chain(url.as_mut()).collect(),
        };
        [self.mime.as_mut(), self.name.as_mut()]
            .into_iter()
            .flatten()
            .chain(source)
    }
}

/// What kind of file, in the agent's terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum AttachmentKind {
    Image,
    /// A voice note recorded in the app (Telegram `voice`, WhatsApp audio with `voice: true`).
    Voice,
    Audio,
    Video,
    /// Any other file.
    Document,
}

/// The platform's handle on a file: with the connector's credentials, enough to download it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "platform", rename_all = "snake_case")]
pub enum FileSource {
    /// `getFile` turns it into a path under the bot's file URL.
    Telegram { file_id: String },
    /// `GET /{media-id}` answers a short-lived URL, fetched with the same token.
    Whatsapp { media_id: String },
    /// `url_private_download` from the signed event.
    Slack { file_id: String, url: Option<String> },
}

/// An attachment as the agent sees it in `messages[]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AttachmentOut {
    #[serde(rename = "type")]
    pub kind: AttachmentKind,
    pub mime: Option<String>,
    pub size: Option<i64>,
    pub name: Option<String>,
    /// The gateway URL that streams the file (expiring); `null` when the file is not
    /// offered (type or size outside the gateway's limits) or in the admin API's view.
    pub url: Option<String>,
    /// Which turn and which of its attachments, for the URL; not part of the JSON.
    #[serde(skip)]
    pub of: Option<(MessageId, u16)>,
}

impl AttachmentOut {
    /// Without URLs yet.
    pub fn of_turn(message: MessageId, attachments: &[Attachment]) -> Vec<Self> {
        attachments
            .iter()
            .zip(0u16..)
            .map(|(a, index)| Self {
                kind: a.kind,
                mime: a.mime.clone(),
                size: a.size,
                name: a.name.clone(),
                url: None,
                of: Some((message, index)),
            })
            .collect()
    }
}

/// The media limits and the gateway's public address.
#[derive(Debug, Clone, clap::Args)]
pub struct MediaSettings {
    /// The gateway's address as the agent reaches it, for attachment URLs
    /// (`{public_url}/v1/media/{token}`). Unset: `http://` and the bound address, with
    /// `127.0.0.1` for an unspecified one — right only when the agent runs on the same host.
    #[arg(long, env = "CB_PUBLIC_URL")]
    pub public_url: Option<String>,

    /// Seconds an attachment URL given to the agent stays valid. Each attempt of a dispatch
    /// gets fresh URLs.
    #[arg(long, env = "CB_MEDIA_URL_TTL_SECS", default_value_t = 900)]
    pub media_url_ttl_secs: u64,

    /// Largest attachment offered to the agent and streamed, in bytes (Telegram's Bot API
    /// serves at most 20 MB).
    #[arg(long, env = "CB_MEDIA_MAX_BYTES", default_value_t = 20 * 1024 * 1024)]
    pub media_max_bytes: u64,

    /// MIME types offered to the agent: exact types or `type/*`, comma-separated.
    #[arg(
        long,
        env = "CB_MEDIA_TYPES",
        default_value = "image/*,audio/*,video/*,application/pdf,text/plain,text/csv,text/markdown,application/json"
    )]
    pub media_types: String,
}

impl Default for MediaSettings {
    fn default() -> Self {
        Self {
            public_url: None,
            media_url_ttl_secs: 900,
            media_max_bytes: 20 * 1024 * 1024,
            media_types:
                "image/*,audio/*,video/*,application/pdf,text/plain,text/csv,text/markdown,application/json"
                    .to_owned(),
        }
    }
}

impl MediaSettings {
    pub fn offers(&self, kind: AttachmentKind, mime: Option<&str>, size: Option<i64>) -> bool {
        let small_enough =
            size.is_none_or(|size| u64::try_from(size).is_ok_and(|s| s <= self.media_max_bytes));
        small_enough && self.type_allowed(kind, mime)
    }

    /// Without a MIME type, by its kind: a document of unknown type is not offered.
    fn type_allowed(&self, kind: AttachmentKind, mime: Option<&str>) -> bool {
        let Some(mime) = mime else {
            return kind != AttachmentKind::Document;
        };
        let mime = mime
            .split(';')
            .next()
            .unwrap_or_default()
            .trim()
            .to_ascii_lowercase();
        self.media_types
            .split(',')
            .map(str::trim)
            .filter(|entry| !entry.is_empty())
            .any(|entry| match entry.strip_suffix("/*") {
                Some(major) => mime.split('/').next() == Some(major),
                None => entry.eq_ignore_ascii_case(&mime),
            })
    }

    pub fn base_url(&self, bound: Option<std::net::SocketAddr>) -> String {
        if let Some(url) = &self.public_url {
            return url.trim_end_matches('/').to_owned();
        }
        match bound {
            Some(addr) if addr.ip().is_unspecified() => format!("http://127.0.0.1:{}", addr.port()),
            Some(addr) => format!("http://{addr}"),
            None => "http://127.0.0.1:8080".to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offers_by_type_list_and_size() {
        let settings = MediaSettings {
            media_max_bytes: 1000,
            media_types: "image/*, application/pdf".into(),
            ..MediaSettings::default()
        };
        assert!(settings.offers(AttachmentKind::Image, Some("image/png"), Some(1000)));
        assert!(settings.offers(AttachmentKind::Image, Some("IMAGE/JPEG; q=1"), None));
        assert!(!settings.offers(AttachmentKind::Image, Some("image/png"), Some(1001)));
        assert!(settings.offers(AttachmentKind::Document, Some("application/pdf"), Some(5)));
        assert!(!settings.offers(AttachmentKind::Document, Some("application/zip"), Some(5)));
        assert!(!settings.offers(AttachmentKind::Audio, Some("audio/ogg"), Some(5)));
        assert!(!settings.offers(AttachmentKind::Document, None, Some(5)));
        assert!(settings.offers(AttachmentKind::Image, None, Some(5)));
        assert!(!settings.offers(AttachmentKind::Image, Some("image/png"), Some(-1)));
    }

    #[test]
    fn base_url_prefers_the_setting_and_names_a_reachable_host() {
        let mut settings = MediaSettings::default();
        let any: std::net::SocketAddr = "0.0.0.0:8080".parse().unwrap();
        assert_eq!(settings.base_url(Some(any)), "http://127.0.0.1:8080");
        settings.public_url = Some("https://bridge.example.com/".into());
        assert_eq!(settings.base_url(Some(any)), "https://bridge.example.com");
    }
}
