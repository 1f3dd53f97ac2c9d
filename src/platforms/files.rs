//! What the platforms' file downloads share (PLATFORMS.md §6, "Files"): why a file cannot
//! be streamed, and the request helpers. Every request goes through the egress policy; no
//! URL with a token in it is logged or returned.

use reqwest::StatusCode;
use serde_json::Value;

use crate::egress::{GuardedClient, SendError};

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

/// The source of another platform's file, which a connector's token cannot fetch (media
/// tokens name the connector whose turn holds the file, so this does not happen).
pub(crate) fn foreign_file() -> FetchError {
    FetchError::Refused("the file belongs to another platform")
}
