//! The token of an attachment URL: `base64url(tenant ‖ message ‖ index ‖ expiry) "."
//! base64url(HMAC-SHA256)` under a key derived from `CB_SECRETS_KEY` (`Keyring::sign_url`).
//! The tenant is in it because the media route has no other way to know whose transaction
//! to open.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use uuid::Uuid;

use super::{AttachmentOut, MediaSettings};
use crate::domain::{MessageId, TenantId};
use crate::secrets::Keyring;

const CLAIMS_LEN: usize = 16 + 16 + 2 + 8;

/// What a token grants: one attachment of one turn, until `expires` (Unix seconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MediaToken {
    pub tenant: TenantId,
    pub message: MessageId,
    pub index: u16,
    pub expires: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// Not a token, or not one this gateway signed (tampered, other key).
    #[error("unknown media link")]
    Invalid,
    /// Genuine but past its time.
    #[error("this media link has expired")]
    Expired,
}

impl MediaToken {
    fn claims(&self) -> [u8; CLAIMS_LEN] {
        let mut claims = [0u8; CLAIMS_LEN];
        claims[..16].copy_from_slice(self.tenant.0.as_bytes());
        claims[16..32].copy_from_slice(self.message.0.as_bytes());
        claims[32..34].copy_from_slice(&self.index.to_be_bytes());
        claims[34..].copy_from_slice(&self.expires.to_be_bytes());
        claims
    }

    /// Signed with the keyring's current key.
    pub fn encode(&self, keys: &Keyring) -> String {
        let claims = self.claims();
        let tag = keys.sign_url(&claims);
        format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(claims),
            URL_SAFE_NO_PAD.encode(tag)
        )
    }

    /// The signature is checked before the expiry, so a forged token is never told apart
    /// from a genuine expired one.
    pub fn decode(text: &str, keys: &Keyring, now: i64) -> Result<Self, TokenError> {
        let (claims, tag) = text.split_once('.').ok_or(TokenError::Invalid)?;
        let claims = URL_SAFE_NO_PAD.decode(claims).map_err(|_| TokenError::Invalid)?;
        let tag = URL_SAFE_NO_PAD.decode(tag).map_err(|_| TokenError::Invalid)?;
        let claims: [u8; CLAIMS_LEN] = claims.try_into().map_err(|_| TokenError::Invalid)?;
        if !keys.verify_url(&claims, &tag) {
            return Err(TokenError::Invalid);
        }
        let uuid =
            |range: std::ops::Range<usize>| Uuid::from_slice(&claims[range]).map_err(|_| TokenError::Invalid);
        let mut index = [0u8; 2];
        index.copy_from_slice(&claims[32..34]);
        let mut expires = [0u8; 8];
        expires.copy_from_slice(&claims[34..]);
        let token = Self {
            tenant: TenantId(uuid(0..16)?),
            message: MessageId(uuid(16..32)?),
            index: u16::from_be_bytes(index),
            expires: i64::from_be_bytes(expires),
        };
        if token.expires < now {
            return Err(TokenError::Expired);
        }
        Ok(token)
    }
}

#[derive(Debug, Clone)]
pub struct UrlMinter {
    pub keys: Keyring,
    /// No trailing slash.
    pub base_url: String,
    pub settings: MediaSettings,
}

impl UrlMinter {
    pub fn new(keys: Keyring, settings: &MediaSettings) -> Self {
        Self {
            keys,
            base_url: settings.base_url(None),
            settings: settings.clone(),
        }
    }

    /// `None` unless it is offered (`MediaSettings::offers`).
    pub fn url_for(&self, tenant: TenantId, attachment: &AttachmentOut, now: i64) -> Option<String> {
        let (message, index) = attachment.of?;
        self.settings
            .offers(attachment.kind, attachment.mime.as_deref(), attachment.size)
            .then(|| self.url(tenant, message, index, now))
    }

    pub fn url(&self, tenant: TenantId, message: MessageId, index: u16, now: i64) -> String {
        let ttl = i64::try_from(self.settings.media_url_ttl_secs).unwrap_or(i64::MAX);
        let token = MediaToken {
            tenant,
            message,
            index,
            expires: now.saturating_add(ttl),
        };
        format!("{}/v1/media/{}", self.base_url, token.encode(&self.keys))
    }
}

#[cfg(test)]
mod tests {
    use secrecy::ExposeSecret;

    use super::*;

    fn token() -> MediaToken {
        MediaToken {
            tenant: TenantId::new(),
            message: MessageId::new(),
            index: 3,
            expires: 1_000,
        }
    }

    #[test]
    fn a_token_round_trips_until_it_expires() {
        let keys = Keyring::ephemeral();
        let token = token();
        let text = token.encode(&keys);
        assert_eq!(MediaToken::decode(&text, &keys, 1_000), Ok(token));
        assert_eq!(MediaToken::decode(&text, &keys, 1_001), Err(TokenError::Expired));
    }

    #[test]
    fn a_changed_claim_or_another_key_is_refused() {
        let keys = Keyring::ephemeral();
        let text = token().encode(&keys);
        let (claims, tag) = text.split_once('.').unwrap();
        let mut bytes = URL_SAFE_NO_PAD.decode(claims).unwrap();
        bytes[33] ^= 1; // another attachment of the same turn
        let forged = format!("{}.{tag}", URL_SAFE_NO_PAD.encode(bytes));
        assert_eq!(MediaToken::decode(&forged, &keys, 0), Err(TokenError::Invalid));
        let other = Keyring::parse(Keyring::generate_entry("other").unwrap().expose_secret()).unwrap();
        assert_eq!(MediaToken::decode(&text, &other, 0), Err(TokenError::Invalid));
        for junk in ["", ".", "abc", "a.b.c", &text[..text.len() - 2]] {
            assert_eq!(
                MediaToken::decode(junk, &keys, 0),
                Err(TokenError::Invalid),
                "{junk}"
            );
        }
    }

    #[test]
    fn a_rotated_keyring_still_opens_the_old_keys_tokens() {
        let old = Keyring::generate_entry("old").unwrap();
        let new = Keyring::generate_entry("new").unwrap();
        let before = Keyring::parse(old.expose_secret()).unwrap();
        let after = Keyring::parse(&format!("{},{}", new.expose_secret(), old.expose_secret())).unwrap();
        let text = token().encode(&before);
        assert!(MediaToken::decode(&text, &after, 0).is_ok());
    }
}
