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

use reqwest::StatusCode;
use secrecy::ExposeSecret;
use serde_json::Value;

use super::FileSource;
use crate::delivery::outbound::{base_url, GRAPH_VERSION};
use crate::domain::Connector;
use crate::egress::{GuardedClient, SendError};

/// Slack's host for `url_private_download`.
const SLACK_FILES_HOST: &str = "files.slack.com";

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
    let request = match source {
        FileSource::Telegram { file_id } => {
            let path = telegram_file_path(client, connector, token, file_id).await?;
            client.get(format!("{}/file/bot{token}/{path}", base_url(connector)))
        }
        FileSource::Whatsapp { media_id } => {
            let url = whatsapp_media_url(client, connector, token, media_id).await?;
            client.get(url).bearer_auth(token)
        }
        FileSource::Slack { file_id, url } => {
            let url = match url {
                Some(url) => url.clone(),
                None => slack_download_url(client, connector, token, file_id).await?,
            };
            check_slack_host(connector, &url)?;
            client.get(url).bearer_auth(token)
        }
    };
    let response = send(client, request).await?;
    match response.status() {
        status if status.is_success() => {}
        StatusCode::NOT_FOUND | StatusCode::GONE => return Err(FetchError::Gone),
        status => return Err(FetchError::Upstream(format!("download answered {status}"))),
    }
    if response.content_length().is_some_and(|len| len > max_bytes) {
        return Err(FetchError::TooLarge);
    }
    if matches!(source, FileSource::Slack { .. }) && is_html(&response) {
        // Slack's answer to a request it does not authorise is a sign-in page with 200.
        return Err(FetchError::Upstream(
            "Slack answered a sign-in page (does the app have files:read?)".into(),
        ));
    }
    Ok(response)
}

async fn send(
    client: &GuardedClient,
    request: reqwest::RequestBuilder,
) -> Result<reqwest::Response, FetchError> {
    client.send(request).await.map_err(|err| match err {
        SendError::Refused(_) => FetchError::Refused("the egress policy refuses the file's address"),
        SendError::Transport(err) => FetchError::Upstream(err.without_url().to_string()),
    })
}

async fn json(response: reqwest::Response) -> (StatusCode, Value) {
    let status = response.status();
    (status, response.json().await.unwrap_or(Value::Null))
}

async fn telegram_file_path(
    client: &GuardedClient,
    connector: &Connector,
    token: &str,
    file_id: &str,
) -> Result<String, FetchError> {
    let request = client
        .post(format!("{}/bot{token}/getFile", base_url(connector)))
        .json(&serde_json::json!({ "file_id": file_id }));
    let (status, body) = json(send(client, request).await?).await;
    if let Some(path) = body.pointer("/result/file_path").and_then(Value::as_str) {
        return safe_path(path).ok_or(FetchError::Gone);
    }
    let description = body["description"].as_str().unwrap_or_default();
    if description.contains("file is too big") {
        return Err(FetchError::TooLarge);
    }
    if status == StatusCode::BAD_REQUEST || status == StatusCode::NOT_FOUND {
        return Err(FetchError::Gone);
    }
    Err(FetchError::Upstream(format!("getFile answered {status}")))
}

/// A Telegram `file_path` as a URL path: relative, no `..`, only URL-safe characters.
fn safe_path(path: &str) -> Option<String> {
    let ok = !path.is_empty()
        && !path.starts_with('/')
        && path
            .split('/')
            .all(|segment| !segment.is_empty() && segment != "..")
        && path
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'/' | b'_' | b'-' | b'.'));
    ok.then(|| path.to_owned())
}

async fn whatsapp_media_url(
    client: &GuardedClient,
    connector: &Connector,
    token: &str,
    media_id: &str,
) -> Result<String, FetchError> {
    if !media_id.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return Err(FetchError::Gone);
    }
    let request = client
        .get(format!("{}/{GRAPH_VERSION}/{media_id}", base_url(connector)))
        .bearer_auth(token);
    let (status, body) = json(send(client, request).await?).await;
    match body["url"].as_str() {
        Some(url) if status.is_success() => Ok(url.to_owned()),
        _ if status.is_client_error() => Err(FetchError::Gone),
        _ => Err(FetchError::Upstream(format!("media lookup answered {status}"))),
    }
}

async fn slack_download_url(
    client: &GuardedClient,
    connector: &Connector,
    token: &str,
    file_id: &str,
) -> Result<String, FetchError> {
    let request = client
        .get(format!("{}/api/files.info", base_url(connector)))
        .query(&[("file", file_id)])
        .bearer_auth(token);
    let (status, body) = json(send(client, request).await?).await;
    if let Some(url) = body.pointer("/file/url_private_download").and_then(Value::as_str) {
        return Ok(url.to_owned());
    }
    match body["error"].as_str() {
        Some("file_not_found" | "file_deleted") => Err(FetchError::Gone),
        _ => Err(FetchError::Upstream(format!("files.info answered {status}"))),
    }
}

/// The bot token goes only to Slack's file host or the connector's own API host.
fn check_slack_host(connector: &Connector, url: &str) -> Result<(), FetchError> {
    let host = |u: &str| reqwest::Url::parse(u).ok()?.host_str().map(str::to_owned);
    let target = host(url);
    let allowed = target.as_deref() == Some(SLACK_FILES_HOST)
        || target.is_some() && target == host(base_url(connector));
    if allowed {
        Ok(())
    } else {
        Err(FetchError::Refused("a Slack file URL outside Slack's file host"))
    }
}

fn is_html(response: &reqwest::Response) -> bool {
    response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/html"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn telegram_paths_stay_under_the_file_url() {
        assert_eq!(
            safe_path("photos/file_12.jpg").as_deref(),
            Some("photos/file_12.jpg")
        );
        for bad in ["", "/etc/passwd", "a/../b", "a//b", "a?b", "a b", "voice/x%2F"] {
            assert_eq!(safe_path(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_slack_token_goes_to_slack_or_the_connectors_own_host_only() {
        let mut connector = crate::channels::testing::connector(crate::domain::Platform::Slack, "s");
        assert!(check_slack_host(
            &connector,
            "https://files.slack.com/files-pri/T1-F1/download/a.png"
        )
        .is_ok());
        assert!(check_slack_host(&connector, "https://evil.example/a.png").is_err());
        assert!(check_slack_host(&connector, "http://127.0.0.1:9/a.png").is_err());
        connector.api_base_url = Some("http://127.0.0.1:9".into());
        assert!(check_slack_host(&connector, "http://127.0.0.1:9/files/a.png").is_ok());
        assert!(check_slack_host(&connector, "not a url").is_err());
    }
}
