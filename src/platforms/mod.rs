//! Every platform the gateway speaks, one folder each (one job per file), behind the traits
//! of [`contract`]; [`of`] is the one place they are listed. Platform folders import the
//! shared files beside this one, never this file.

pub mod contract;
pub mod files;
pub mod inbound;
pub mod live;
pub mod send;
pub mod slack;
#[cfg(test)]
mod split_tests;
pub mod telegram;
pub mod whatsapp;

use reqwest::StatusCode;
use secrecy::ExposeSecret;

use self::contract::PlatformApi;
use self::files::FetchError;
use self::send::{no_token, OutboundPart, SendOutcome};
use crate::domain::{Connector, Platform};
use crate::egress::GuardedClient;
use crate::media::FileSource;

/// Adding a platform: a folder beside `slack/`, one line here, its `domain::Platform` name.
pub fn of(platform: Platform) -> &'static dyn PlatformApi {
    match platform {
        Platform::Slack => &slack::Slack,
        Platform::Whatsapp => &whatsapp::Whatsapp,
        Platform::Telegram => &telegram::Telegram,
    }
}

pub async fn send(client: &GuardedClient, part: &OutboundPart<'_>) -> SendOutcome {
    let Some(token) = part.connector.secrets.outbound_token.as_ref() else {
        return no_token();
    };
    let platform = of(part.connector.profile.platform);
    platform.send(client, part, token.expose_secret()).await
}

/// A file part: uploaded (unless `part.staged` says it was) and posted.
pub async fn send_file(
    client: &GuardedClient,
    part: &OutboundPart<'_>,
    file: &crate::media::outgoing::OutgoingFile,
) -> SendOutcome {
    let Some(token) = part.connector.secrets.outbound_token.as_ref() else {
        return no_token();
    };
    let platform = of(part.connector.profile.platform);
    platform
        .send_file(client, part, token.expose_secret(), file)
        .await
}

/// A reaction part: `part.text` set on the user's message `target`.
pub async fn react(client: &GuardedClient, part: &OutboundPart<'_>, target: &str) -> SendOutcome {
    let Some(token) = part.connector.secrets.outbound_token.as_ref() else {
        return no_token();
    };
    let platform = of(part.connector.profile.platform);
    platform.react(client, part, token.expose_secret(), target).await
}

/// The first part of a streamed answer, delivered into the message its live view left
/// (`live_id`). An edit, so a repeat after an outcome in doubt cannot double the message.
pub async fn adopt(client: &GuardedClient, part: &OutboundPart<'_>, live_id: &str) -> SendOutcome {
    let Some(token) = part.connector.secrets.outbound_token.as_ref() else {
        return no_token();
    };
    let platform = of(part.connector.profile.platform);
    platform.adopt(client, part, token.expose_secret(), live_id).await
}

/// The message `target` of `part` (an answer's last) after a tap made its choice.
pub async fn close_choices(client: &GuardedClient, part: &OutboundPart<'_>, target: &str) -> SendOutcome {
    let Some(token) = part.connector.secrets.outbound_token.as_ref() else {
        return no_token();
    };
    let platform = of(part.connector.profile.platform);
    platform
        .close_choices(client, part, token.expose_secret(), target)
        .await
}

/// The download response, its status checked and its declared length within `max_bytes`.
pub async fn open_file(
    client: &GuardedClient,
    connector: &Connector,
    source: &FileSource,
    max_bytes: u64,
) -> Result<reqwest::Response, FetchError> {
    let token = connector
        .secrets
        .outbound_token
        .as_ref()
        .ok_or(FetchError::Refused(
            "the connector has no token to fetch files with",
        ))?
        .expose_secret();
    let platform = of(connector.profile.platform);
    let request = platform.download(client, connector, token, source).await?;
    let response = files::send(client, request).await?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::markdown::Formatted;

    #[test]
    fn a_part_that_renders_to_nothing_is_not_formatted() {
        assert_eq!(of(Platform::Slack).format("[d]: https://example.com/d"), None);
        assert_eq!(
            of(Platform::Telegram).format("**a**"),
            Some(Formatted {
                text: "<b>a</b>".into(),
                parse_mode: Some("HTML")
            })
        );
        assert_eq!(
            of(Platform::Whatsapp).format("**a**").map(|f| f.parse_mode),
            Some(None)
        );
    }
}
