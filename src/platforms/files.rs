//! What the platforms' file downloads share. Each needs the connector's token (Slack's
//! `url_private` as a bearer token, WhatsApp's media URL likewise, Telegram's in the URL
//! itself), so no URL with a token in it is logged or returned.

use reqwest::StatusCode;
use serde_json::Value;

use crate::egress::{GuardedClient, SendError};

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FetchError {
    #[error("the platform no longer has this file")]
    Gone,
    #[error("the file is larger than this gateway streams")]
    TooLarge,
    /// Worth trying later.
    #[error("the platform did not serve the file: {0}")]
    Upstream(String),
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

/// Cannot happen: media tokens name the connector whose turn holds the file.
pub(crate) fn foreign_file() -> FetchError {
    FetchError::Refused("the file belongs to another platform")
}
