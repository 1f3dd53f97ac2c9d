//! Files and reactions out (Cloud API). A file's bytes are uploaded to `/{phone-number-id}/media`
//! (<https://developers.facebook.com/documentation/business-messaging/whatsapp/business-phone-numbers/media>)
//! and the media id Meta answers is recorded (`Staged`) before the `/messages` send that shows
//! it; a reaction is a `/messages` send of type `reaction`
//! (<https://developers.facebook.com/documentation/business-messaging/whatsapp/messages/reaction-messages>).
//!
//! Neither call is idempotent, so each is settled apart: an upload in doubt is made again (it
//! shows the user nothing; Meta deletes an unused media id after 30 days), the send that shows
//! it is settled as a text send is, by the status callback that echoes the part key.

use reqwest::multipart::Form;
use reqwest::StatusCode;
use serde_json::{json, Value};

use super::send::{classify, envelope, phone_number_id, post_message, recipient, refusal};
use super::GRAPH_VERSION;
use crate::egress::GuardedClient as Client;
use crate::media::outgoing::{FileBody, OutgoingFile};
use crate::platforms::contract::api_base;
use crate::platforms::send::{emoji_of, open_file, read_json, transport_error, OutboundPart, SendOutcome};

/// How WhatsApp shows a file: the `/messages` type that carries its media id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Image,
    Document,
    Audio,
    Video,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Image => "image",
            Kind::Document => "document",
            Kind::Audio => "audio",
            Kind::Video => "video",
        }
    }

    /// Meta's limits, read as decimal megabytes: the smaller reading, so a file within it is
    /// within Meta's whichever way Meta counts.
    fn max_bytes(self) -> u64 {
        match self {
            Kind::Image => 5_000_000,
            Kind::Document => 100_000_000,
            Kind::Audio | Kind::Video => 16_000_000,
        }
    }

    /// Audio shows no caption.
    fn takes_caption(self) -> bool {
        self != Kind::Audio
    }
}

/// The types Meta's media table lists, by MIME type, as the upload's `type` must name them
/// (a type that does not match the bytes fails later, with error 131053). WebP is left out:
/// WhatsApp takes it only as a sticker, which shows no caption, must meet the sticker rules
/// (a limit of 100 KB static or 500 KB animated that cannot be told apart before the file
/// is fetched), and fails only after the send was accepted; an agent's WebP is a picture,
/// so it is refused up front with the types to convert it to.
const TYPES: [(&str, Kind); 17] = [
    ("image/jpeg", Kind::Image),
    ("image/png", Kind::Image),
    ("text/plain", Kind::Document),
    ("application/pdf", Kind::Document),
    ("application/msword", Kind::Document),
    (
        "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
        Kind::Document,
    ),
    ("application/vnd.ms-excel", Kind::Document),
    (
        "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
        Kind::Document,
    ),
    ("application/vnd.ms-powerpoint", Kind::Document),
    (
        "application/vnd.openxmlformats-officedocument.presentationml.presentation",
        Kind::Document,
    ),
    ("audio/aac", Kind::Audio),
    ("audio/amr", Kind::Audio),
    ("audio/mpeg", Kind::Audio),
    ("audio/mp4", Kind::Audio),
    ("audio/ogg", Kind::Audio),
    ("video/mp4", Kind::Video),
    ("video/3gpp", Kind::Video),
];

/// Other names of those types, as agents and `mime_guess` (`.m4a`) give them; the upload
/// names the type as Meta lists it.
const ALIASES: [(&str, &str); 4] = [
    ("image/jpg", "image/jpeg"),
    ("audio/mp3", "audio/mpeg"),
    ("audio/m4a", "audio/mp4"),
    ("audio/x-m4a", "audio/mp4"),
];

/// A file type WhatsApp takes: its name as Meta lists it, and how it is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Media {
    mime: &'static str,
    kind: Kind,
}

impl Media {
    fn of(mime: &str) -> Result<Self, String> {
        let mime = ALIASES
            .iter()
            .find(|(alias, _)| *alias == mime)
            .map_or(mime, |(_, canonical)| canonical);
        TYPES
            .iter()
            .find(|(listed, _)| *listed == mime)
            .map(|&(mime, kind)| Media { mime, kind })
            .ok_or_else(|| refused_type(mime))
    }
}

fn refused_type(mime: &str) -> String {
    let listed: Vec<&str> = TYPES.iter().map(|(mime, _)| *mime).collect();
    let webp = match mime {
        "image/webp" => " (it takes WebP only as a sticker: send it as PNG or JPEG)",
        _ => "",
    };
    format!(
        "WhatsApp does not take `{mime}`{webp}; it takes {}",
        listed.join(", ")
    )
}

pub(super) fn file_limit(mime: &str) -> Result<u64, String> {
    Media::of(mime).map(|media| media.kind.max_bytes())
}

/// Audio is shown without a caption; a type WhatsApp does not take is refused by
/// `file_limit`.
pub(super) fn takes_caption(mime: &str) -> bool {
    Media::of(mime).is_ok_and(|media| media.kind.takes_caption())
}

/// WhatsApp takes any one emoji; a name (`eyes`, `:thumbsup:`) becomes its character, in
/// its fully-qualified form.
pub(super) fn reaction_name(emoji: &str) -> Result<String, String> {
    emoji_of(emoji).map(|e| e.as_str().to_owned()).ok_or_else(|| {
        format!(
            "`{}` is not an emoji: WhatsApp takes one emoji, as a character or a name such as `eyes`",
            emoji.trim()
        )
    })
}

/// Uploads the file (`Staged` with its media id) unless an earlier attempt did, then shows
/// it by that id.
pub(super) async fn send_file(
    client: &Client,
    part: &OutboundPart<'_>,
    token: &str,
    file: &OutgoingFile,
) -> SendOutcome {
    let media = match Media::of(&file.mime) {
        Ok(media) => media,
        Err(error) => return SendOutcome::Permanent { error },
    };
    let phone_number_id = match phone_number_id(part) {
        Ok(id) => id,
        Err(outcome) => return outcome,
    };
    let Some(media_id) = part.staged else {
        return upload(client, part, token, phone_number_id, file, media).await;
    };
    let body = media_message(part, file, media.kind, media_id);
    let (status, answer) = match post_message(client, part, token, phone_number_id, &body).await {
        Ok(answered) => answered,
        Err(outcome) => return outcome,
    };
    if !media_id_refused(status, answer.as_ref()) {
        return classify(status, answer);
    }
    // Refused before anything was posted, so uploading again doubles nothing.
    match upload(client, part, token, phone_number_id, file, media).await {
        SendOutcome::Staged(fresh) => SendOutcome::Staged(fresh),
        SendOutcome::Permanent { error } => SendOutcome::Permanent {
            error: format!(
                "WhatsApp no longer knows media id {media_id}, and uploading the file again failed: {error}"
            ),
        },
        other => other,
    }
}

/// The `/messages` send that shows an uploaded file, addressed and threaded as a text part.
fn media_message(part: &OutboundPart<'_>, file: &OutgoingFile, kind: Kind, media_id: &str) -> Value {
    let mut object = json!({ "id": media_id });
    if kind.takes_caption() && !part.text.is_empty() {
        object["caption"] = part.text.into();
    }
    // The extension picks the document's icon.
    if kind == Kind::Document {
        object["filename"] = file.name.as_str().into();
    }
    let mut body = envelope(part, kind.as_str());
    body[kind.as_str()] = object;
    body
}

/// A send by a media id Meta no longer keeps (uploads last 30 days) fails
/// (<https://developers.facebook.com/documentation/business-messaging/whatsapp/messages/image-messages>);
/// Meta's pages do not show the answer, which integrators report as a synchronous error 100,
/// "Param image['id'] is not a valid whatsapp business account media attachment ID". Only
/// that refusal, which certainly posted nothing, is read as an expired id; a repeat of it
/// after a fresh upload ends at the delivery's bound on uploads per pass.
fn media_id_refused(status: StatusCode, answer: Option<&Value>) -> bool {
    let Some(error) = answer.and_then(|a| a.get("error")) else {
        return false;
    };
    let text = |pointer: &str| {
        error
            .pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_ascii_lowercase()
    };
    status.is_client_error()
        && error["code"].as_i64() == Some(100)
        && [text("/message"), text("/error_data/details")]
            .iter()
            .any(|t| t.contains("media attachment id"))
}

async fn upload(
    client: &Client,
    part: &OutboundPart<'_>,
    token: &str,
    phone_number_id: &str,
    file: &OutgoingFile,
    media: Media,
) -> SendOutcome {
    let body = match open_file(client, part, file, media.kind.max_bytes()).await {
        Ok(body) => body,
        Err(outcome) => return outcome,
    };
    let form = upload_form(media, body);
    let url = format!(
        "{}/{GRAPH_VERSION}/{phone_number_id}/media",
        api_base(part.connector)
    );
    let request = client
        .post(url)
        .bearer_auth(token)
        .timeout(part.transfer_timeout)
        .multipart(form);
    match client.send(request).await {
        Ok(response) => {
            let (status, answer, _) = read_json(response).await;
            staged(status, answer)
        }
        Err(err) => transport_error(err),
    }
}

/// Meta's fields: `file` with its name and type, `type` naming the type again.
fn upload_form(media: Media, mut body: FileBody) -> Form {
    body.mime = media.mime.to_owned();
    Form::new()
        .text("messaging_product", "whatsapp")
        .text("type", media.mime)
        .part("file", body.into_part())
}

/// An upload's answer: `{"id": "<media id>"}`, or a Graph error read as a send's is.
fn staged(status: StatusCode, answer: Option<Value>) -> SendOutcome {
    match answer.as_ref().and_then(|a| a["id"].as_str()) {
        Some(id) if status.is_success() => SendOutcome::Staged(id.to_owned()),
        _ => refusal(status, answer.as_ref()),
    }
}

/// `part.text` (as `reaction_name` gave it) on the user's message `target`. Meta takes no
/// `context` with a reaction; setting the same one again changes nothing.
pub(super) async fn react(
    client: &Client,
    part: &OutboundPart<'_>,
    token: &str,
    target: &str,
) -> SendOutcome {
    let phone_number_id = match phone_number_id(part) {
        Ok(id) => id,
        Err(outcome) => return outcome,
    };
    let body = reaction_message(part, target);
    match post_message(client, part, token, phone_number_id, &body).await {
        Ok((status, answer)) => classify(status, answer),
        Err(outcome) => outcome,
    }
}

fn reaction_message(part: &OutboundPart<'_>, target: &str) -> Value {
    json!({
        "messaging_product": "whatsapp",
        "recipient_type": "individual",
        "to": recipient(part.message),
        "type": "reaction",
        "reaction": { "message_id": target, "emoji": part.text },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::messages::MessageRow;
    use crate::domain::{Address, Connector, Platform};
    use crate::media::outgoing::FileOrigin;
    use crate::platforms::inbound::testing;

    fn message(platform_message_id: &str) -> MessageRow {
        MessageRow {
            id: crate::domain::MessageId::new(),
            tenant_id: crate::domain::TenantId(uuid::Uuid::nil()),
            connector_id: crate::domain::ConnectorId::new(),
            platform: crate::domain::Platform::Whatsapp,
            idempotency_key: "wamid.IN".into(),
            platform_message_id: platform_message_id.into(),
            address: Address {
                chat_id: "16505551234".into(),
                thread_id: None,
                space: None,
                platform_user_id: "16505551234".into(),
            },
            reply_to_id: None,
            user_id: None,
            conversation_key: crate::domain::ConversationKey::user("c"),
            request_content: "report?".into(),
            response_content: None,
            decision: None,
            status: crate::domain::MessageStatus::Accepted,
            attempts: 0,
            last_error: None,
            received_at: chrono::Utc::now(),
            completed_at: None,
            delivered_at: None,
            attachments: None,
            metadata: json!({"phone_number_id": "106540352242922"}),
            live_message_id: None,
            origin: Default::default(),
            author: None,
            action: None,
            command: None,
        }
    }

    fn file(name: &str, mime: &str) -> OutgoingFile {
        OutgoingFile {
            name: name.into(),
            mime: mime.into(),
            origin: FileOrigin::Url(format!("https://files.example/{name}")),
        }
    }

    fn part<'a>(connector: &'a Connector, message: &'a MessageRow, text: &'a str) -> OutboundPart<'a> {
        OutboundPart {
            connector,
            message,
            part_key: "m:1",
            text,
            choices: None,
            chosen: None,
            file: None,
            staged: Some("1400000000000001"),
            transfer_timeout: std::time::Duration::from_secs(120),
        }
    }

    #[test]
    fn whatsapp_takes_the_types_in_metas_table_up_to_their_limits() {
        for (mime, limit) in [
            ("image/jpeg", 5_000_000),
            ("image/png", 5_000_000),
            ("image/jpg", 5_000_000),
            ("application/pdf", 100_000_000),
            ("text/plain", 100_000_000),
            (
                "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
                100_000_000,
            ),
            ("audio/ogg", 16_000_000),
            ("audio/m4a", 16_000_000),
            ("video/mp4", 16_000_000),
            ("video/3gpp", 16_000_000),
        ] {
            assert_eq!(file_limit(mime), Ok(limit), "{mime}");
        }
        for mime in [
            "image/gif",
            "application/zip",
            "video/quicktime",
            "application/octet-stream",
        ] {
            let error = file_limit(mime).unwrap_err();
            assert!(error.contains(&format!("`{mime}`")), "{error}");
            assert!(
                error.contains("image/png") && error.contains("application/pdf"),
                "{error}"
            );
        }
        assert!(file_limit("image/webp")
            .unwrap_err()
            .contains("only as a sticker"));
    }

    #[test]
    fn a_reaction_is_any_one_emoji_by_character_or_name() {
        assert_eq!(reaction_name("👍").unwrap(), "👍");
        assert_eq!(reaction_name(" :thumbsup: ").unwrap(), "👍");
        assert_eq!(reaction_name("eyes").unwrap(), "👀");
        assert_eq!(reaction_name("white_check_mark").unwrap(), "✅");
        assert_eq!(reaction_name("❤").unwrap(), "❤️", "the fully-qualified form");
        assert_eq!(reaction_name("👍🏽").unwrap(), "👍🏽", "skin tones stay");
        for not in ["", "thanks!", "👍👍", ":no_such_emoji:"] {
            assert!(reaction_name(not).unwrap_err().contains("not an emoji"), "{not}");
        }
    }

    #[test]
    fn a_file_is_shown_by_its_media_id_addressed_and_threaded_as_text_is() {
        let connector = testing::connector(Platform::Whatsapp, "s");
        let asked = message("wamid.IN");
        let part = part(&connector, &asked, "Q3 figures");
        let image = media_message(&part, &file("chart.png", "image/png"), Kind::Image, "77");
        assert_eq!(
            image,
            json!({"messaging_product": "whatsapp", "recipient_type": "individual", "to": "+16505551234",
                   "type": "image", "image": {"id": "77", "caption": "Q3 figures"},
                   "context": {"message_id": "wamid.IN"}, "biz_opaque_callback_data": "m:1"})
        );
        let document = media_message(&part, &file("q3.pdf", "application/pdf"), Kind::Document, "78");
        assert_eq!(document["type"], "document");
        assert_eq!(
            document["document"],
            json!({"id": "78", "caption": "Q3 figures", "filename": "q3.pdf"})
        );
        let audio = media_message(&part, &file("memo.ogg", "audio/ogg"), Kind::Audio, "79");
        assert_eq!(audio["audio"], json!({"id": "79"}), "audio takes no caption");
        let video = media_message(&part, &file("clip.mp4", "video/mp4"), Kind::Video, "80");
        assert_eq!(video["video"]["caption"], "Q3 figures");
        let bare = OutboundPart { text: "", ..part };
        let image = media_message(&bare, &file("chart.png", "image/png"), Kind::Image, "81");
        assert_eq!(image["image"], json!({"id": "81"}), "no empty caption");
    }

    #[test]
    fn a_first_message_quotes_nothing_and_a_reaction_never_quotes() {
        let connector = testing::connector(Platform::Whatsapp, "s");
        let first = message("");
        let part = part(&connector, &first, "👍");
        let body = media_message(&part, &file("a.png", "image/png"), Kind::Image, "1");
        assert!(body.get("context").is_none());
        assert_eq!(
            reaction_message(&part, "wamid.IN"),
            json!({"messaging_product": "whatsapp", "recipient_type": "individual", "to": "+16505551234",
                   "type": "reaction", "reaction": {"message_id": "wamid.IN", "emoji": "👍"}})
        );
    }

    #[tokio::test]
    async fn the_upload_names_metas_fields_and_the_listed_type() {
        let bytes = b"\x89PNG-bytes".to_vec();
        let body = FileBody {
            name: "chart.m4a".into(),
            mime: "audio/m4a".into(),
            len: bytes.len() as u64,
            body: reqwest::Body::from(bytes),
        };
        let media = Media::of("audio/m4a").unwrap();
        let mut request = reqwest::Client::new()
            .post("http://media.invalid/")
            .multipart(upload_form(media, body))
            .build()
            .unwrap();
        let sent = request.body_mut().take().unwrap();
        let sent = axum::body::to_bytes(axum::body::Body::new(sent), usize::MAX)
            .await
            .unwrap();
        let sent = String::from_utf8_lossy(&sent);
        assert!(
            sent.contains("name=\"messaging_product\"\r\n\r\nwhatsapp\r\n"),
            "{sent}"
        );
        assert!(sent.contains("name=\"type\"\r\n\r\naudio/mp4\r\n"), "{sent}");
        let file =
            "name=\"file\"; filename=\"chart.m4a\"\r\nContent-Type: audio/mp4\r\n\r\n\u{fffd}PNG-bytes\r\n";
        assert!(sent.contains(file), "{sent}");
    }

    #[test]
    fn an_upload_answers_its_media_id_or_a_graph_error_read_as_a_sends() {
        assert_eq!(
            staged(StatusCode::OK, Some(json!({"id": "1400000000000009"}))),
            SendOutcome::Staged("1400000000000009".into())
        );
        let throughput = json!({"error": {"message": "throughput", "code": 130429}});
        assert!(matches!(
            staged(StatusCode::BAD_REQUEST, Some(throughput)),
            SendOutcome::RateLimited { .. }
        ));
        let token = json!({"error": {"message": "Session has expired", "code": 190}});
        assert!(matches!(
            staged(StatusCode::UNAUTHORIZED, Some(token)),
            SendOutcome::Permanent { .. }
        ));
        assert!(matches!(
            staged(StatusCode::BAD_GATEWAY, None),
            SendOutcome::Unknown { .. }
        ));
    }

    #[test]
    fn only_metas_refusal_of_the_media_id_reads_as_an_expired_upload() {
        let expired = json!({"error": {"message": "(#100) Param image['id'] is not a valid whatsapp business account media attachment ID",
                                       "type": "OAuthException", "code": 100}});
        assert!(media_id_refused(StatusCode::BAD_REQUEST, Some(&expired)));
        let in_details = json!({"error": {"message": "(#100) Invalid parameter", "code": 100,
            "error_data": {"details": "Param document['id'] is not a valid WhatsApp Business Account Media Attachment ID"}}});
        assert!(media_id_refused(StatusCode::BAD_REQUEST, Some(&in_details)));
        let other = json!({"error": {"message": "(#100) Invalid parameter", "code": 100}});
        assert!(!media_id_refused(StatusCode::BAD_REQUEST, Some(&other)));
        let window = json!({"error": {"message": "media attachment id", "code": 131047}});
        assert!(!media_id_refused(StatusCode::BAD_REQUEST, Some(&window)));
        assert!(!media_id_refused(
            StatusCode::INTERNAL_SERVER_ERROR,
            Some(&expired)
        ));
        assert!(!media_id_refused(StatusCode::OK, None));
    }
}
