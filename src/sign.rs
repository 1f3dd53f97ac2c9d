//! Signing a webhook body the way each platform does (PLATFORMS.md §1.1, §2.1, §3.1): the
//! client side of what `crate::channels` verifies. `send-fixture` and the ingress load
//! generator use it; the integration tests keep their own independent signer
//! (`tests/it/support/platforms.rs`) so that a bug here cannot hide a bug in verification.

use axum::http::HeaderName;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::domain::Platform;

pub const SLACK_SIGNATURE: HeaderName = HeaderName::from_static("x-slack-signature");
pub const SLACK_TIMESTAMP: HeaderName = HeaderName::from_static("x-slack-request-timestamp");
pub const WHATSAPP_SIGNATURE: HeaderName = HeaderName::from_static("x-hub-signature-256");
pub const TELEGRAM_SECRET_TOKEN: HeaderName = HeaderName::from_static("x-telegram-bot-api-secret-token");

/// The headers `platform` would send with `body`, given the connector's verification secret
/// (Slack signing secret, Meta app secret, Telegram `secret_token`) and, for Slack, the unix
/// time to sign (Slack rejects a timestamp more than 300 s from its receiver's clock).
///
/// - Slack: `X-Slack-Request-Timestamp: {now}` and
///   `X-Slack-Signature: v0=hex(HMAC-SHA256(secret, "v0:{now}:{body}"))`.
/// - WhatsApp: `X-Hub-Signature-256: sha256=hex(HMAC-SHA256(app secret, body))`.
/// - Telegram: `X-Telegram-Bot-Api-Secret-Token: {secret}` (the header is the secret itself).
///
/// All three send JSON, so `content-type: application/json` comes first.
pub fn sign_headers(platform: Platform, secret: &str, body: &[u8], now: i64) -> Vec<(HeaderName, String)> {
    let content_type = (axum::http::header::CONTENT_TYPE, "application/json".to_owned());
    match platform {
        Platform::Slack => {
            let timestamp = now.to_string();
            let signature = hmac_sha256_hex(secret, &[b"v0:", timestamp.as_bytes(), b":", body]);
            vec![
                content_type,
                (SLACK_TIMESTAMP, timestamp),
                (SLACK_SIGNATURE, format!("v0={signature}")),
            ]
        }
        Platform::Whatsapp => vec![
            content_type,
            (
                WHATSAPP_SIGNATURE,
                format!("sha256={}", hmac_sha256_hex(secret, &[body])),
            ),
        ],
        Platform::Telegram => vec![content_type, (TELEGRAM_SECRET_TOKEN, secret.to_owned())],
    }
}

/// The header that carries the secret itself rather than a signature over the body, if the
/// platform has one (Telegram). Anything that prints headers must mask this one.
pub fn secret_header(platform: Platform) -> Option<HeaderName> {
    (platform == Platform::Telegram).then_some(TELEGRAM_SECRET_TOKEN)
}

/// Lowercase hex HMAC-SHA256 of the concatenated `parts`. The key is the secret's UTF-8
/// bytes, never hex- or base64-decoded (PLATFORMS.md §1.1, §2.1).
fn hmac_sha256_hex(secret: &str, parts: &[&[u8]]) -> String {
    let mut mac =
        Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC-SHA256 accepts keys of any length");
    parts.iter().for_each(|part| mac.update(part));
    hex::encode(mac.finalize().into_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platforms::inbound::{channel_for, testing, HookRequest};

    fn header<'a>(headers: &'a [(HeaderName, String)], name: &HeaderName) -> &'a str {
        headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
            .unwrap_or_else(|| panic!("header {name} is present"))
    }

    #[test]
    fn slack_signature_matches_the_json_vector_of_platforms_md() {
        let body = include_bytes!("../fixtures/slack/url_verification.json");
        let headers = sign_headers(
            Platform::Slack,
            "8f742231b10e8888abcd99yyyzzz85a5",
            body,
            1531420618,
        );
        assert_eq!(header(&headers, &SLACK_TIMESTAMP), "1531420618");
        assert_eq!(
            header(&headers, &SLACK_SIGNATURE),
            "v0=f9bd80929259f3f6d5fe3a3186c453c89cd1ad4862815a15837584f31c993652"
        );
    }

    #[test]
    fn whatsapp_signatures_match_both_vectors_of_platforms_md() {
        for (body, expected) in [
            (
                &include_bytes!("../fixtures/whatsapp/vector_49_bytes.json")[..],
                "sha256=dec6a680679a968e7e0319355b23599cbfc54502c0784668e9618baa0c633756",
            ),
            (
                &include_bytes!("../fixtures/whatsapp/vector_403_bytes.json")[..],
                "sha256=070b3a057e48f03d06df6a2aecc4f9b767bd545339b0470cf20afaee82015a73",
            ),
        ] {
            let headers = sign_headers(Platform::Whatsapp, "test_app_secret", body, 0);
            assert_eq!(header(&headers, &WHATSAPP_SIGNATURE), expected);
        }
    }

    #[test]
    fn every_platform_verifies_what_sign_headers_produced() {
        let body = br#"{"any":"bytes"}"#;
        let now = 1_718_000_000;
        for platform in Platform::ALL {
            let secret = "a-connector-secret_1";
            let connector = testing::connector(platform, secret);
            let headers: axum::http::HeaderMap = sign_headers(platform, secret, body, now)
                .into_iter()
                .map(|(name, value)| (name, value.parse().expect("signed header values are ASCII")))
                .collect();
            let request = HookRequest {
                headers: &headers,
                query: None,
                body,
                now,
            };
            assert_eq!(
                channel_for(platform).verify(&connector, &request),
                Ok(()),
                "{platform}"
            );
        }
    }

    #[test]
    fn only_telegram_puts_the_secret_itself_in_a_header() {
        assert_eq!(secret_header(Platform::Telegram), Some(TELEGRAM_SECRET_TOKEN));
        assert_eq!(secret_header(Platform::Slack), None);
        assert_eq!(secret_header(Platform::Whatsapp), None);
    }
}
