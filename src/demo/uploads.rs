//! The stand-in's side of a Telegram file upload (`sendPhoto`, `sendDocument`): the
//! multipart/form-data body read into the file and the fields the demo checks. Read by hand
//! because the stand-in needs nothing else of a multipart library; a body that is not a
//! well-formed form is refused as Telegram refuses it, with a 400.

use serde::Serialize;

use crate::domain::Platform;

const PNG_SIGNATURE: &[u8] = b"\x89PNG\r\n\x1a\n";

/// A file a platform stand-in received.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PostedFile {
    pub platform: Platform,
    /// The API method: Telegram `sendPhoto` or `sendDocument`.
    pub method: String,
    pub chat: String,
    /// Telegram `reply_parameters.message_id`; empty when the file replies to nothing.
    pub reply_to: String,
    /// The file part's `filename` and `Content-Type`.
    pub name: String,
    pub mime: String,
    pub size: usize,
    /// The bytes begin with PNG's signature.
    pub png: bool,
    pub caption: String,
    /// The id the stand-in gave the posted message.
    pub message_id: String,
}

/// One field of a form: text, or a file with its name and type.
#[derive(Debug, Default, PartialEq, Eq)]
struct FormPart {
    name: String,
    filename: Option<String>,
    content_type: Option<String>,
    body: Vec<u8>,
}

/// The upload of `method`, whose file is the form's `file_field` (`photo`, `document`).
pub(super) fn telegram_upload(
    method: &str,
    file_field: &str,
    content_type: &str,
    body: &[u8],
    message_id: String,
) -> Option<PostedFile> {
    let parts = form(content_type, body)?;
    let text = |name: &str| {
        let part = parts.iter().find(|p| p.name == name && p.filename.is_none());
        part.map(|p| String::from_utf8_lossy(&p.body).into_owned())
            .unwrap_or_default()
    };
    let file = parts
        .iter()
        .find(|p| p.name == file_field && p.filename.is_some())?;
    // Non-text fields of a multipart request are JSON-serialized, as the Bot API asks.
    let reply = serde_json::from_str::<serde_json::Value>(&text("reply_parameters")).unwrap_or_default();
    Some(PostedFile {
        platform: Platform::Telegram,
        method: method.to_owned(),
        chat: text("chat_id"),
        reply_to: reply["message_id"]
            .as_i64()
            .map(|id| id.to_string())
            .unwrap_or_default(),
        name: file.filename.clone().unwrap_or_default(),
        mime: file.content_type.clone().unwrap_or_default(),
        size: file.body.len(),
        png: file.body.starts_with(PNG_SIGNATURE),
        caption: text("caption"),
        message_id,
    })
}

/// The parts of a `multipart/form-data` body (RFC 7578): each after a `--boundary` line,
/// headers, a blank line, the bytes up to the CRLF before the next boundary.
fn form(content_type: &str, body: &[u8]) -> Option<Vec<FormPart>> {
    let boundary = parameter(content_type, "boundary")?;
    let delimiter = format!("--{boundary}");
    let next_delimiter = format!("\r\n{delimiter}");
    let start = find(body, delimiter.as_bytes())?;
    let mut rest = &body[start + delimiter.len()..];
    let mut parts = Vec::new();
    while !rest.starts_with(b"--") {
        rest = rest.strip_prefix(b"\r\n")?;
        let end = find(rest, next_delimiter.as_bytes())?;
        parts.push(form_part(&rest[..end])?);
        rest = &rest[end + next_delimiter.len()..];
    }
    Some(parts)
}

fn form_part(raw: &[u8]) -> Option<FormPart> {
    let split = find(raw, b"\r\n\r\n")?;
    let headers = std::str::from_utf8(&raw[..split]).ok()?;
    let mut part = FormPart {
        body: raw[split + 4..].to_vec(),
        ..FormPart::default()
    };
    for line in headers.split("\r\n") {
        let (name, value) = line.split_once(':')?;
        match name.trim().to_ascii_lowercase().as_str() {
            "content-disposition" => {
                part.name = parameter(value, "name")?;
                part.filename = parameter(value, "filename");
            }
            "content-type" => part.content_type = Some(value.trim().to_owned()),
            _ => {}
        }
    }
    Some(part)
}

/// `key=value` or `key="value"` among a header's `;`-separated parameters.
fn parameter(header: &str, key: &str) -> Option<String> {
    header.split(';').map(str::trim).find_map(|item| {
        let value = item.strip_prefix(key)?.strip_prefix('=')?;
        Some(value.trim_matches('"').to_owned())
    })
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|window| window == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_form_is_read_into_its_fields_and_its_file() {
        let body = b"--XyZ\r\n\
            Content-Disposition: form-data; name=\"chat_id\"\r\n\r\n\
            454686569\r\n\
            --XyZ\r\n\
            Content-Disposition: form-data; name=\"reply_parameters\"\r\n\r\n\
            {\"message_id\":202}\r\n\
            --XyZ\r\n\
            Content-Disposition: form-data; name=\"caption\"\r\n\r\n\
            echo: hi\r\n\
            --XyZ\r\n\
            Content-Disposition: form-data; name=\"photo\"; filename=\"echo.png\"\r\n\
            Content-Type: image/png\r\n\r\n\
            \x89PNG\r\n\x1a\n\r\n--not-the-boundary\r\n\
            --XyZ--\r\n";

        let file = telegram_upload(
            "sendPhoto",
            "photo",
            "multipart/form-data; boundary=XyZ",
            body,
            "9501".into(),
        )
        .unwrap();

        assert_eq!((file.chat.as_str(), file.reply_to.as_str()), ("454686569", "202"));
        assert_eq!(
            (file.name.as_str(), file.mime.as_str()),
            ("echo.png", "image/png")
        );
        assert_eq!(file.caption, "echo: hi");
        assert!(file.png);
        assert_eq!(
            file.size,
            8 + 2 + 18,
            "the bytes up to the CRLF before the boundary"
        );
    }

    #[test]
    fn a_body_that_is_no_form_or_has_no_file_is_not_an_upload() {
        let upload = |content_type: &str, body: &[u8]| {
            telegram_upload("sendPhoto", "photo", content_type, body, "1".into())
        };
        assert!(upload("application/json", br#"{"photo": "https://x/y.png"}"#).is_none());
        assert!(upload("multipart/form-data; boundary=b", b"--b\r\nno headers").is_none());
        let text_only = b"--b\r\nContent-Disposition: form-data; name=\"photo\"\r\n\r\nx\r\n--b--\r\n";
        assert!(upload("multipart/form-data; boundary=b", text_only).is_none());
    }
}
