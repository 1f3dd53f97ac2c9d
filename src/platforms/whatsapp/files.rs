//! WhatsApp media: `GET /{media-id}` with the access token answers
//! a short-lived `url`, itself fetched with the token.

use super::{Whatsapp, GRAPH_VERSION};
use crate::domain::Connector;
use crate::egress::GuardedClient;
use crate::media::FileSource;
use crate::platforms::contract::{api_base, Files};
use crate::platforms::files::{foreign_file, json, send, FetchError};
use futures::future::BoxFuture;

impl Files for Whatsapp {
    fn download<'a>(
        &'a self,
        client: &'a GuardedClient,
        connector: &'a Connector,
        token: &'a str,
        source: &'a FileSource,
    ) -> BoxFuture<'a, Result<reqwest::RequestBuilder, FetchError>> {
        Box::pin(async move {
            let FileSource::Whatsapp { media_id } = source else {
                return Err(foreign_file());
            };
            let url = whatsapp_media_url(client, connector, token, media_id).await?;
            Ok(client.get(url).bearer_auth(token))
        })
    }
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
        .get(format!("{}/{GRAPH_VERSION}/{media_id}", api_base(connector)))
        .bearer_auth(token);
    let (status, body) = json(send(client, request).await?).await;
    match body["url"].as_str() {
        Some(url) if status.is_success() => Ok(url.to_owned()),
        _ if status.is_client_error() => Err(FetchError::Gone),
        _ => Err(FetchError::Upstream(format!("media lookup answered {status}"))),
    }
}
