//! Slack files: `url_private_download` (from the signed event, or `files.info` when it had
//! none), fetched with the bot token.

use serde_json::Value;

use super::Slack;
use crate::domain::Connector;
use crate::egress::GuardedClient;
use crate::media::FileSource;
use crate::platforms::contract::{api_base, Files};
use crate::platforms::files::{foreign_file, json, send, FetchError};
use futures::future::BoxFuture;

/// Slack's host for `url_private_download`.
const SLACK_FILES_HOST: &str = "files.slack.com";

impl Files for Slack {
    fn download<'a>(
        &'a self,
        client: &'a GuardedClient,
        connector: &'a Connector,
        token: &'a str,
        source: &'a FileSource,
    ) -> BoxFuture<'a, Result<reqwest::RequestBuilder, FetchError>> {
        Box::pin(async move {
            let FileSource::Slack { file_id, url } = source else {
                return Err(foreign_file());
            };
            let url = match url {
                Some(url) => url.clone(),
                None => slack_download_url(client, connector, token, file_id).await?,
            };
            check_slack_host(connector, &url)?;
            Ok(client.get(url).bearer_auth(token))
        })
    }

    fn check_download(&self, response: &reqwest::Response) -> Result<(), FetchError> {
        if is_html(response) {
            // Slack's answer to a request it does not authorise is a sign-in page with 200.
            return Err(FetchError::Upstream(
                "Slack answered a sign-in page (does the app have files:read?)".into(),
            ));
        }
        Ok(())
    }
}

async fn slack_download_url(
    client: &GuardedClient,
    connector: &Connector,
    token: &str,
    file_id: &str,
) -> Result<String, FetchError> {
    let request = client
        .get(format!("{}/api/files.info", api_base(connector)))
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
        || target.is_some() && target == host(api_base(connector));
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
    fn the_slack_token_goes_to_slack_or_the_connectors_own_host_only() {
        let mut connector =
            crate::platforms::inbound::testing::connector(crate::domain::Platform::Slack, "s");
        assert!(check_slack_host(
            &connector,
            "https://files.slack.com/files-pri/T1-F1/download/a.png"
        )
        .is_ok());
        assert!(check_slack_host(&connector, "https://evil.example/a.png").is_err());
        assert!(check_slack_host(&connector, "http://127.0.0.1:9/a.png").is_err());
        connector.profile.api_base_url = Some("http://127.0.0.1:9".into());
        assert!(check_slack_host(&connector, "http://127.0.0.1:9/files/a.png").is_ok());
        assert!(check_slack_host(&connector, "not a url").is_err());
    }
}
