//! Telegram files: `getFile` answers a `file_path`; the bytes are
//! at `{api}/file/bot<token>/<path>`.

use reqwest::StatusCode;
use serde_json::Value;

use super::Telegram;
use crate::domain::Connector;
use crate::egress::GuardedClient;
use crate::media::FileSource;
use crate::platforms::contract::{api_base, Files};
use crate::platforms::files::{foreign_file, json, send, FetchError};
use futures::future::BoxFuture;

impl Files for Telegram {
    fn download<'a>(
        &'a self,
        client: &'a GuardedClient,
        connector: &'a Connector,
        token: &'a str,
        source: &'a FileSource,
    ) -> BoxFuture<'a, Result<reqwest::RequestBuilder, FetchError>> {
        Box::pin(async move {
            let FileSource::Telegram { file_id } = source else {
                return Err(foreign_file());
            };
            let path = telegram_file_path(client, connector, token, file_id).await?;
            Ok(client.get(format!("{}/file/bot{token}/{path}", api_base(connector))))
        })
    }
}

async fn telegram_file_path(
    client: &GuardedClient,
    connector: &Connector,
    token: &str,
    file_id: &str,
) -> Result<String, FetchError> {
    let request = client
        .post(format!("{}/bot{token}/getFile", api_base(connector)))
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
}
