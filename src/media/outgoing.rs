//! Files an answer carries to the user (docs/agent.md#files-and-reactions-in-answers): what
//! the agent declares (`FileIn`), what a reply part keeps of it (`OutgoingFile`), and the
//! bytes opened for one post (`open`): fetched through the egress rules, each redirect
//! checked again, their length known and within the platform's limit, and streamed into the
//! upload rather than held (only a body served without a length is read first, up to
//! `UNSIZED_MAX_BYTES`).

use std::time::Duration;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use futures::StreamExt;
use serde::{Deserialize, Serialize};

use crate::egress::{GuardedClient, SendError};

/// Inline `data` is stored with the answer, so it stays small (and its base64 fits the agent
/// API's 2 MiB body); anything larger goes by URL.
pub const INLINE_MAX_BYTES: usize = 1024 * 1024;
/// Telegram's and WhatsApp's caption limit; Slack takes more, but one rule is easier to meet.
pub const CAPTION_MAX_CHARS: usize = 1024;
pub const NAME_MAX_CHARS: usize = 255;
/// Files in one answer.
pub const FILES_MAX: usize = 10;
/// A file served without a `Content-Length` is read into memory before its upload (Slack
/// needs the length first, and an upload's limit is checked before it starts), up to this.
pub const UNSIZED_MAX_BYTES: u64 = 8 * 1024 * 1024;
const REDIRECTS_MAX: usize = 5;

/// A file as an answer declares it (`attachments[]`): exactly one of `url` and `data`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FileIn {
    /// An `http(s)` URL the gateway fetches, through the same egress rules as every URL a
    /// tenant configures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 4096)]
    pub url: Option<String>,
    /// The file itself, base64, up to 1 MiB decoded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 1398104)]
    pub data: Option<String>,
    /// The file's name as people see it (a document's extension picks its icon); taken from
    /// the URL's path when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 255)]
    pub name: Option<String>,
    /// Guessed from the name when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 255)]
    pub mime: Option<String>,
    /// Shown with the file, up to 1,024 characters, as plain text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 1024)]
    pub caption: Option<String>,
}

/// A file a reply part posts (the part's `attachment`); its caption is the part's text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutgoingFile {
    pub name: String,
    pub mime: String,
    #[serde(flatten)]
    pub origin: FileOrigin,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileOrigin {
    Url(String),
    /// Base64, as the agent sent it.
    Data(String),
}

/// A checked file and the caption that goes with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilePart {
    pub file: OutgoingFile,
    pub caption: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidFile(pub String);

impl OutgoingFile {
    /// The inline file's size; `None` for one behind a URL.
    pub fn inline_len(&self) -> Option<u64> {
        match &self.origin {
            FileOrigin::Data(data) => Some(decoded_len(data)),
            FileOrigin::Url(_) => None,
        }
    }

    /// What admins see of it: never the inline bytes.
    pub fn summary(&self) -> FileOut {
        let (url, size) = match &self.origin {
            FileOrigin::Url(url) => (Some(url.clone()), None),
            FileOrigin::Data(data) => (None, Some(decoded_len(data))),
        };
        FileOut {
            name: self.name.clone(),
            mime: self.mime.clone(),
            url,
            size,
        }
    }
}

/// A file a reply part posts, as the admin API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct FileOut {
    pub name: String,
    pub mime: String,
    /// Where it is fetched from; absent for a file given inline.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// An inline file's size in bytes (its bytes are never shown).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
}

impl FileIn {
    /// The name people will see (as `check` picks it), for history's line about the file.
    pub fn shown_name(&self) -> String {
        match (&self.name, &self.url) {
            (Some(name), _) => name.trim().to_owned(),
            (None, Some(url)) => name_of_url(url),
            (None, None) => "file".into(),
        }
    }

    /// Checks what needs no network: the source, its size when inline, the name, the type
    /// and the caption. Platform limits are the platform's (`PlatformApi::check_file`).
    pub fn check(self) -> Result<FilePart, InvalidFile> {
        let origin = match (self.url, self.data) {
            (Some(url), None) => FileOrigin::Url(checked_url(&url)?),
            (None, Some(data)) => FileOrigin::Data(checked_data(data)?),
            _ => return Err(InvalidFile("a file needs exactly one of `url` and `data`".into())),
        };
        let name = match (self.name, &origin) {
            (Some(name), _) => checked_name(&name)?,
            (None, FileOrigin::Url(url)) => name_of_url(url),
            (None, FileOrigin::Data(_)) => return Err(InvalidFile("an inline file needs a `name`".into())),
        };
        let mime = match self.mime {
            Some(mime) => checked_mime(&mime)?,
            None => guess_mime(&name),
        };
        let caption = self.caption.unwrap_or_default();
        if caption.chars().count() > CAPTION_MAX_CHARS {
            return Err(InvalidFile(format!(
                "a file's caption is longer than {CAPTION_MAX_CHARS} characters"
            )));
        }
        Ok(FilePart {
            file: OutgoingFile { name, mime, origin },
            caption: caption.trim().to_owned(),
        })
    }
}

/// `attachments` as an answer or a request carries them: checked, in order.
pub fn check_all(files: Vec<FileIn>) -> Result<Vec<FilePart>, InvalidFile> {
    if files.len() > FILES_MAX {
        return Err(InvalidFile(format!(
            "at most {FILES_MAX} files go with one answer"
        )));
    }
    files
        .into_iter()
        .enumerate()
        .map(|(i, file)| {
            file.check()
                .map_err(|e| InvalidFile(format!("attachments[{i}]: {e}")))
        })
        .collect()
}

fn checked_url(url: &str) -> Result<String, InvalidFile> {
    let parsed = reqwest::Url::parse(url).map_err(|_| InvalidFile("a file's `url` is not a URL".into()))?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
        return Err(InvalidFile("a file's `url` must be http(s) with a host".into()));
    }
    Ok(parsed.into())
}

fn checked_data(data: String) -> Result<String, InvalidFile> {
    let bad = || InvalidFile("a file's `data` is not base64".into());
    if decoded_len(&data) > INLINE_MAX_BYTES as u64 {
        return Err(InvalidFile(format!(
            "inline `data` is larger than {} bytes: give a `url` instead",
            INLINE_MAX_BYTES
        )));
    }
    BASE64.decode(data.as_bytes()).map_err(|_| bad())?;
    Ok(data)
}

fn decoded_len(data: &str) -> u64 {
    let padding = data.bytes().rev().take_while(|b| *b == b'=').count();
    ((data.len() / 4 * 3).saturating_sub(padding)) as u64
}

/// A name is shown, never a path: no separators, no control characters.
fn checked_name(name: &str) -> Result<String, InvalidFile> {
    let name = name.trim();
    if name.is_empty() || name.chars().count() > NAME_MAX_CHARS {
        return Err(InvalidFile(format!(
            "a file's `name` must be 1–{NAME_MAX_CHARS} characters"
        )));
    }
    if name.chars().any(|c| c.is_control() || c == '/' || c == '\\') {
        return Err(InvalidFile(
            "a file's `name` may not hold a path or control characters".into(),
        ));
    }
    Ok(name.to_owned())
}

fn name_of_url(url: &str) -> String {
    reqwest::Url::parse(url)
        .ok()
        .and_then(|url| url.path_segments()?.next_back().map(str::to_owned))
        .and_then(|last| checked_name(&last).ok())
        .unwrap_or_else(|| "file".into())
}

fn checked_mime(mime: &str) -> Result<String, InvalidFile> {
    let parsed: mime_guess::Mime = mime
        .trim()
        .parse()
        .map_err(|_| InvalidFile(format!("`{mime}` is not a MIME type")))?;
    Ok(parsed.essence_str().to_ascii_lowercase())
}

fn guess_mime(name: &str) -> String {
    mime_guess::from_path(name)
        .first_raw()
        .unwrap_or("application/octet-stream")
        .to_owned()
}

/// The bytes of a file, ready to stream into one upload.
pub struct FileBody {
    pub name: String,
    pub mime: String,
    pub len: u64,
    pub body: reqwest::Body,
}

impl FileBody {
    /// The file as a multipart part (Telegram's and WhatsApp's uploads).
    pub fn into_part(self) -> reqwest::multipart::Part {
        let part = reqwest::multipart::Part::stream_with_length(self.body, self.len).file_name(self.name);
        match part.mime_str(&self.mime) {
            Ok(part) => part,
            // Checked when the answer came in; cannot happen.
            Err(_) => reqwest::multipart::Part::bytes(Vec::new()),
        }
    }
}

/// Why a file could not be opened; the message is the part's `last_error`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpenError {
    /// The same request would fail the same way.
    #[error("{0}")]
    Refused(String),
    /// Worth trying again later.
    #[error("{0}")]
    Unavailable(String),
}

/// Opens `file` for an upload whose limit is `max_bytes`; each request of the fetch may take
/// `timeout`, the body's stream included.
pub async fn open(
    client: &GuardedClient,
    file: &OutgoingFile,
    max_bytes: u64,
    timeout: Duration,
) -> Result<FileBody, OpenError> {
    let (len, body) = match &file.origin {
        FileOrigin::Data(data) => {
            let bytes = BASE64
                .decode(data.as_bytes())
                .map_err(|_| OpenError::Refused("the file's data is not base64".into()))?;
            (bytes.len() as u64, reqwest::Body::from(bytes))
        }
        FileOrigin::Url(url) => fetch(client, url, max_bytes, timeout).await?,
    };
    if len > max_bytes {
        return Err(too_large(max_bytes));
    }
    Ok(FileBody {
        name: file.name.clone(),
        mime: file.mime.clone(),
        len,
        body,
    })
}

fn too_large(max_bytes: u64) -> OpenError {
    OpenError::Refused(format!(
        "the file is larger than the platform takes ({max_bytes} bytes)"
    ))
}

/// The response's body, streamed when its length is declared; each redirect is a new
/// request through the guard, so a redirect to a refused address is refused.
async fn fetch(
    client: &GuardedClient,
    url: &str,
    max_bytes: u64,
    timeout: Duration,
) -> Result<(u64, reqwest::Body), OpenError> {
    let mut url =
        reqwest::Url::parse(url).map_err(|_| OpenError::Refused("the file's URL is not a URL".into()))?;
    for _ in 0..=REDIRECTS_MAX {
        let response = get(client, url.clone(), timeout).await?;
        let status = response.status();
        if status.is_redirection() {
            url = redirect_target(&url, &response)?;
            continue;
        }
        if !status.is_success() {
            let why = format!("the file's URL answered {status}");
            return Err(match status.is_server_error() || status.as_u16() == 429 {
                true => OpenError::Unavailable(why),
                false => OpenError::Refused(why),
            });
        }
        return body_of(response, max_bytes).await;
    }
    Err(OpenError::Refused(format!(
        "the file's URL redirects more than {REDIRECTS_MAX} times"
    )))
}

async fn get(
    client: &GuardedClient,
    url: reqwest::Url,
    timeout: Duration,
) -> Result<reqwest::Response, OpenError> {
    let request = client.get(url).timeout(timeout);
    client.send(request).await.map_err(|err| match err {
        SendError::Refused(refusal) => {
            OpenError::Refused(format!("the file's address is refused: {refusal}"))
        }
        SendError::Transport(err) => OpenError::Unavailable(format!("the file could not be fetched: {err}")),
    })
}

fn redirect_target(from: &reqwest::Url, response: &reqwest::Response) -> Result<reqwest::Url, OpenError> {
    let location = response
        .headers()
        .get(reqwest::header::LOCATION)
        .and_then(|value| value.to_str().ok())
        .ok_or_else(|| OpenError::Refused("the file's URL redirects nowhere".into()))?;
    let next = from
        .join(location)
        .map_err(|_| OpenError::Refused("the file's URL redirects to no URL".into()))?;
    if !matches!(next.scheme(), "http" | "https") {
        return Err(OpenError::Refused(
            "the file's URL redirects out of http(s)".into(),
        ));
    }
    Ok(next)
}

async fn body_of(response: reqwest::Response, max_bytes: u64) -> Result<(u64, reqwest::Body), OpenError> {
    if let Some(len) = response.content_length() {
        if len > max_bytes {
            return Err(too_large(max_bytes));
        }
        return Ok((len, exactly(response, len)));
    }
    let cap = max_bytes.min(UNSIZED_MAX_BYTES);
    let mut bytes = Vec::new();
    let mut stream = response.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let chunk =
            chunk.map_err(|err| OpenError::Unavailable(format!("the file's download broke off: {err}")))?;
        bytes.extend_from_slice(&chunk);
        if bytes.len() as u64 > cap {
            return Err(match cap < max_bytes {
                true => OpenError::Refused(format!(
                    "the file's URL gives no length and the file is larger than {cap} bytes"
                )),
                false => too_large(max_bytes),
            });
        }
    }
    Ok((bytes.len() as u64, reqwest::Body::from(bytes)))
}

/// The body as it streams, failing the upload if it runs past its declared length (the
/// upload announced that length, and the platform's limit was checked against it).
fn exactly(response: reqwest::Response, len: u64) -> reqwest::Body {
    let mut seen = 0u64;
    reqwest::Body::wrap_stream(response.bytes_stream().map(move |chunk| {
        let chunk = chunk.map_err(|err| DownloadBroke(format!("the file's download broke off: {err}")))?;
        seen += chunk.len() as u64;
        match seen > len {
            true => Err(DownloadBroke("the file is longer than its Content-Length".into())),
            false => Ok(chunk),
        }
    }))
}

/// Why an upload's body ended before its declared length: the file's download failed while
/// the upload streamed it. The platform then got a request cut short, which it cannot have
/// acted on, so the upload is known not to have posted anything.
#[derive(Debug)]
pub struct DownloadBroke(pub String);

impl std::fmt::Display for DownloadBroke {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for DownloadBroke {}

/// The download failure behind a failed upload, if that is why it failed.
pub fn download_broke<'a>(err: &'a (dyn std::error::Error + 'static)) -> Option<&'a DownloadBroke> {
    let mut cause = Some(err);
    while let Some(err) = cause {
        if let Some(broke) = err.downcast_ref::<DownloadBroke>() {
            return Some(broke);
        }
        // io::Error's source() skips the error it wraps: look inside it too.
        let inner = err.downcast_ref::<std::io::Error>().and_then(|io| io.get_ref());
        if let Some(broke) = inner.and_then(|inner| inner.downcast_ref::<DownloadBroke>()) {
            return Some(broke);
        }
        cause = err.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(json: &str) -> Result<FilePart, InvalidFile> {
        serde_json::from_str::<FileIn>(json).unwrap().check()
    }

    #[test]
    fn a_url_file_takes_its_name_and_type_from_the_url_when_not_given() {
        let part = file(r#"{"url": "https://files.example/r/q3/report.pdf?sig=1"}"#).unwrap();
        assert_eq!(part.file.name, "report.pdf");
        assert_eq!(part.file.mime, "application/pdf");
        assert_eq!(part.caption, "");
        let part = file(r#"{"url": "https://files.example/", "mime": "Image/PNG; q=1"}"#).unwrap();
        assert_eq!(
            (part.file.name.as_str(), part.file.mime.as_str()),
            ("file", "image/png")
        );
    }

    #[test]
    fn inline_data_is_measured_and_needs_a_name() {
        let part = file(r#"{"data": "aGVsbG8=", "name": "hi.txt", "caption": " hello "}"#).unwrap();
        assert_eq!(part.file.inline_len(), Some(5));
        assert_eq!(part.file.mime, "text/plain");
        assert_eq!(part.caption, "hello");
        assert_eq!(part.file.summary().size, Some(5));
        assert!(file(r#"{"data": "aGVsbG8="}"#)
            .unwrap_err()
            .0
            .contains("needs a `name`"));
        assert!(file(r#"{"data": "!!!", "name": "a"}"#)
            .unwrap_err()
            .0
            .contains("not base64"));
        let big = BASE64.encode(vec![0u8; INLINE_MAX_BYTES + 1]);
        let json = serde_json::json!({"data": big, "name": "big.bin"}).to_string();
        assert!(file(&json).unwrap_err().0.contains("give a `url`"));
    }

    #[test]
    fn malformed_files_are_refused_saying_why() {
        for (json, why) in [
            (r#"{"name": "a.png"}"#, "exactly one"),
            (
                r#"{"url": "https://a.example/x", "data": "aGk=", "name": "a"}"#,
                "exactly one",
            ),
            (r#"{"url": "ftp://a.example/x"}"#, "http(s)"),
            (r#"{"url": "not a url"}"#, "not a URL"),
            (
                r#"{"url": "https://a.example/x", "name": "../etc/passwd"}"#,
                "path",
            ),
            (
                r#"{"url": "https://a.example/x", "mime": "pdf"}"#,
                "not a MIME type",
            ),
        ] {
            assert!(file(json).unwrap_err().0.contains(why), "{json}");
        }
        let caption = "c".repeat(CAPTION_MAX_CHARS + 1);
        let json = serde_json::json!({"url": "https://a.example/x", "caption": caption}).to_string();
        assert!(file(&json).unwrap_err().0.contains("caption"));
        assert!(serde_json::from_str::<FileIn>(r#"{"url": "https://a.example/x", "size": 1}"#).is_err());
        let many = vec![FileIn::default(); FILES_MAX + 1];
        assert!(check_all(many).unwrap_err().0.contains("at most"));
    }

    #[test]
    fn a_stored_file_reads_back_with_its_origin() {
        let part = file(r#"{"url": "https://a.example/c.png"}"#).unwrap();
        let json = serde_json::to_value(&part.file).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"name": "c.png", "mime": "image/png", "url": "https://a.example/c.png"})
        );
        assert_eq!(serde_json::from_value::<OutgoingFile>(json).unwrap(), part.file);
    }
}
