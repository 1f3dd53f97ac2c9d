//! Downloading an attachment from its platform with the connector's credentials
//! (PLATFORMS.md §6, "Files"). Every request goes through the egress policy; no URL with a
//! token in it is logged or returned.
//!
//! - Telegram: `getFile` answers a `file_path`; the bytes are at `{api}/file/bot<token>/<path>`.
//! - WhatsApp: `GET /{media-id}` with the access token answers a short-lived `url`, itself
//!   fetched with the token.
//! - Slack: the file's `url_private_download` (from the signed event, or `files.info` when
//!   the event had none), fetched with the bot token. The token is only ever sent to Slack's
//!   file host or the connector's own API host.
//!
//! Each platform's lookups are its `files.rs` (`crate::platforms::slack::files`…) behind
//! `crate::platforms::Files`; this file holds what they share.

use reqwest::StatusCode;
use secrecy::ExposeSecret;
use serde_json::Value;

use super::FileSource;
use crate::domain::Connector;
use crate::egress::{GuardedClient, SendError};

/// The client of the media route: the egress policy, a connect timeout and a read
/// timeout between chunks, no total timeout (a large file on a slow link is not an error).
pub fn client(egress: &crate::settings::EgressSettings) -> anyhow::Result<GuardedClient> {
    let builder = reqwest::Client::builder()
        .connect_timeout(std::time::Duration::from_secs(5))
        .read_timeout(std::time::Duration::from_secs(30))
        .user_agent(concat!("channel-bridge/", env!("CARGO_PKG_VERSION")));
    let policy = std::sync::Arc::new(egress.allow.clone());
    GuardedClient::build(builder, policy)
        .map_err(|e| anyhow::anyhow!("Failed to build the media HTTP client: {e}"))
}

/// Why a file cannot be streamed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FetchError {
    /// The platform no longer has it (deleted, expired, unknown id).
    #[error("the platform no longer has this file")]
    Gone,
    /// Larger than the gateway streams.
    #[error("the file is larger than this gateway streams")]
    TooLarge,
    /// The platform failed or could not be reached; worth trying later.
    #[error("the platform did not serve the file: {0}")]
    Upstream(String),
    /// The connector cannot fetch files (no token), or the URL is not one it may use.
    #[error("{0}")]
    Refused(&'static str),
}

/// The download response, its status checked and its declared length within `max_bytes`.
pub async fn open(
    client: &GuardedClient,
    connector: &Connector,
    source: &FileSource,
    max_bytes: u64,
) -> Result<reqwest::Response, FetchError> {
    let token = connector
        .outbound_token
        .as_ref()
        .ok_or(FetchError::Refused(
            "the connector has no token to fetch files with",
        ))?
        .expose_secret();
    let platform = crate::platforms::of(connector.platform);
    let request = platform.download(client, connector, token, source).await?;
    let response = send(client, request).await?;
    match response.status() {
        status if status.is_success() => {}
        StatusCode::NOT_FOUND | StatusCode::GONE => return Err(FetchError::Gone),
        status => return Err(FetchError::Upstream(format!("download answered {status}"))),
    }
    if response.content_length().is_some_and(|len| len > max_bytes) {
        return Err(FetchError::TooLarge);
    }
    platform.check_download(&response)?;
    Ok(response)
}

pub(crate) async fn send(
    client: &GuardedClient,
    request: reqwest::RequestBuilder,
) -> Result<reqwest::Response, FetchError> {
    client.send(request).await.map_err(|err| match err {
        SendError::Refused(_) => FetchError::Refused("the egress policy refuses the file's address"),
        SendError::Transport(err) => FetchError::Upstream(err.without_url().to_string()),
    })
}

pub(crate) async fn json(response: reqwest::Response) -> (StatusCode, Value) {
    let status = response.status();
    (status, response.json().await.unwrap_or(Value::Null))
}
