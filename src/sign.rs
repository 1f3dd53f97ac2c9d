//! Signing a webhook body the way each platform does
//! (docs/platforms.md#registering-the-webhook-with-each-platform), for `send-fixture` and
//! the load generator. The integration tests keep their own signer, so a
//! bug here cannot hide a bug in verification.

use axum::http::HeaderName;

use crate::domain::Platform;

pub use crate::platforms::slack::inbound::{SIGNATURE as SLACK_SIGNATURE, TIMESTAMP as SLACK_TIMESTAMP};
pub use crate::platforms::telegram::inbound::SECRET_TOKEN as TELEGRAM_SECRET_TOKEN;
pub use crate::platforms::whatsapp::inbound::SIGNATURE as WHATSAPP_SIGNATURE;

/// The headers `platform` would send with `body`, `content-type` first, signed with the
/// connector's verification secret (Slack's signature also covers `now`).
pub fn sign_headers(platform: Platform, secret: &str, body: &[u8], now: i64) -> Vec<(HeaderName, String)> {
    let content_type = (axum::http::header::CONTENT_TYPE, "application/json".to_owned());
    let mut headers = vec![content_type];
    headers.extend(crate::platforms::of(platform).sign(secret, body, now));
    headers
}

/// The header that carries the secret itself (Telegram): anything that prints headers must
/// mask it.
pub fn secret_header(platform: Platform) -> Option<HeaderName> {
    crate::platforms::of(platform).secret_header()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platforms::inbound::{testing, HookRequest};

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
                crate::platforms::of(platform).verify(&connector, &request),
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
