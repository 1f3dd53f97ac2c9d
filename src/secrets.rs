//! Secrets at rest (docs/security.md#secrets-at-rest): sealed with AES-256-GCM (a random
//! 96-bit nonce each) under keys the database never sees. The associated data binds a value
//! to its row and purpose, so a value copied elsewhere does not open.

use std::fmt;
use std::sync::Arc;

use base64::Engine;
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, NONCE_LEN};
use ring::hmac;
use ring::rand::{SecureRandom, SystemRandom};
use secrecy::{ExposeSecret, SecretString};

use crate::domain::{ConnectorId, TenantId};

/// A plain value starting with it is refused, so sealed and plain never mix up.
const PREFIX: &str = "cbsealed:v1:";
const KEY_LEN: usize = 32;
const MAX_KEY_ID_LEN: usize = 32;

#[derive(Clone)]
pub struct Keyring(Arc<Keys>);

struct Keys {
    /// The first seals; all open.
    keys: Vec<Key>,
    random: SystemRandom,
}

struct Key {
    id: String,
    cipher: LessSafeKey,
    /// Derived from the same key material, so every instance verifies every instance's URLs.
    url_signer: hmac::Key,
}

/// Why a URL key is derived rather than the AES key reused: one key, one purpose.
const URL_KEY_LABEL: &[u8] = b"channel-bridge url signing v1";

fn url_signer(key_material: &[u8]) -> hmac::Key {
    let derived = hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, key_material), URL_KEY_LABEL);
    hmac::Key::new(hmac::HMAC_SHA256, derived.as_ref())
}

/// Without keys: random, so another instance refuses this one's URLs.
fn process_url_signer() -> &'static hmac::Key {
    static SIGNER: std::sync::OnceLock<hmac::Key> = std::sync::OnceLock::new();
    SIGNER.get_or_init(|| {
        let mut bytes = [0u8; KEY_LEN];
        // A known (zeroed) key would make every URL forgeable: no random source, no start.
        SystemRandom::new()
            .fill(&mut bytes)
            .expect("the system random source works");
        url_signer(&bytes)
    })
}

impl fmt::Debug for Keyring {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ids: Vec<&str> = self.0.keys.iter().map(|k| k.id.as_str()).collect();
        f.debug_struct("Keyring").field("key_ids", &ids).finish()
    }
}

/// The cipher's associated data. A secret and the one a rotation replaced share a binding:
/// rotation moves the current value to the `previous_` column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding(String);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectorSecret {
    Verification,
    VerifyToken,
    OutboundToken,
}

impl Binding {
    pub fn dispatch(tenant: TenantId) -> Self {
        Self(format!("tenant/{tenant}/dispatch_secret"))
    }

    pub fn connector(tenant: TenantId, connector: ConnectorId, secret: ConnectorSecret) -> Self {
        let purpose = match secret {
            ConnectorSecret::Verification => "verification_secret",
            ConnectorSecret::VerifyToken => "verify_token",
            ConnectorSecret::OutboundToken => "outbound_token",
        };
        Self(format!("tenant/{tenant}/connector/{connector}/{purpose}"))
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    #[error("a stored secret is sealed with key `{0}`, which CB_SECRETS_KEY does not list")]
    UnknownKey(String),
    #[error("a stored secret does not open with key `{0}`: damaged, or copied from another row")]
    Damaged(String),
    #[error("a secret may not start with `{PREFIX}`")]
    ReservedPrefix,
}

/// Never echoes key material.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("CB_SECRETS_KEY: {0}")]
pub struct KeyringError(String);

impl Keyring {
    pub fn plain() -> Self {
        Self(Arc::new(Keys {
            keys: Vec::new(),
            random: SystemRandom::new(),
        }))
    }

    /// Parses `id:base64[,id:base64…]` (commas, spaces or new lines between keys).
    pub fn parse(spec: &str) -> Result<Self, KeyringError> {
        let mut keys: Vec<Key> = Vec::new();
        for entry in spec
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|e| !e.is_empty())
        {
            let (id, encoded) = entry
                .split_once(':')
                .ok_or_else(|| KeyringError("each key is `id:base64-of-32-bytes`".into()))?;
            let valid_id = !id.is_empty()
                && id.len() <= MAX_KEY_ID_LEN
                && id
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
            if !valid_id {
                return Err(KeyringError(format!(
                    "a key id is 1 to {MAX_KEY_ID_LEN} letters, digits, `-` or `_`"
                )));
            }
            if keys.iter().any(|k| k.id == id) {
                return Err(KeyringError(format!("key id `{id}` is listed twice")));
            }
            let bytes = base64::engine::general_purpose::STANDARD_NO_PAD
                .decode(encoded.trim_end_matches('='))
                .map_err(|_| KeyringError(format!("key `{id}` is not base64")))?;
            if bytes.len() != KEY_LEN {
                return Err(KeyringError(format!(
                    "key `{id}` is {} bytes; AES-256-GCM needs {KEY_LEN}",
                    bytes.len()
                )));
            }
            let unbound = UnboundKey::new(&AES_256_GCM, &bytes)
                .map_err(|_| KeyringError(format!("key `{id}` is not usable")))?;
            keys.push(Key {
                id: id.to_owned(),
                cipher: LessSafeKey::new(unbound),
                url_signer: url_signer(&bytes),
            });
        }
        if keys.is_empty() {
            return Err(KeyringError("no key given".into()));
        }
        Ok(Self(Arc::new(Keys {
            keys,
            random: SystemRandom::new(),
        })))
    }

    pub fn generate_entry(id: &str) -> Result<SecretString, KeyringError> {
        let mut bytes = [0u8; KEY_LEN];
        SystemRandom::new()
            .fill(&mut bytes)
            .map_err(|_| KeyringError("the system random source failed".into()))?;
        let entry = format!("{id}:{}", base64::engine::general_purpose::STANDARD.encode(bytes));
        // Validates the id the same way a configured key is.
        Self::parse(&entry)?;
        Ok(SecretString::from(entry))
    }

    /// For the demo and tests, whose databases live no longer than the process.
    pub fn ephemeral() -> Self {
        static KEYRING: std::sync::OnceLock<Keyring> = std::sync::OnceLock::new();
        KEYRING
            .get_or_init(|| {
                let entry = Self::generate_entry("ephemeral").expect("the system random source works");
                Self::parse(entry.expose_secret()).expect("a generated key parses")
            })
            .clone()
    }

    pub fn seals(&self) -> bool {
        !self.0.keys.is_empty()
    }

    pub fn current_key(&self) -> Option<&str> {
        self.0.keys.first().map(|k| k.id.as_str())
    }

    /// Sealed under the first key, or `plain` itself without a key.
    pub fn seal(&self, plain: &str, binding: &Binding) -> Result<String, SecretError> {
        let Some(key) = self.0.keys.first() else {
            if plain.starts_with(PREFIX) {
                return Err(SecretError::ReservedPrefix);
            }
            return Ok(plain.to_owned());
        };
        let mut nonce = [0u8; NONCE_LEN];
        self.0
            .random
            .fill(&mut nonce)
            .map_err(|_| SecretError::Damaged(key.id.clone()))?;
        let mut sealed = plain.as_bytes().to_vec();
        key.cipher
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(binding.0.as_bytes()),
                &mut sealed,
            )
            .map_err(|_| SecretError::Damaged(key.id.clone()))?;
        let mut payload = nonce.to_vec();
        payload.extend_from_slice(&sealed);
        let encoded = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(payload);
        Ok(format!("{PREFIX}{}:{encoded}", key.id))
    }

    pub fn seal_opt(
        &self,
        plain: Option<&SecretString>,
        binding: &Binding,
    ) -> Result<Option<String>, SecretError> {
        plain.map(|p| self.seal(p.expose_secret(), binding)).transpose()
    }

    /// A plain value (written before a key was configured) is returned as it is.
    pub fn open(&self, stored: &str, binding: &Binding) -> Result<SecretString, SecretError> {
        let Some(rest) = stored.strip_prefix(PREFIX) else {
            return Ok(SecretString::from(stored.to_owned()));
        };
        let (id, encoded) = rest
            .split_once(':')
            .ok_or_else(|| SecretError::Damaged(String::new()))?;
        let key = self
            .0
            .keys
            .iter()
            .find(|k| k.id == id)
            .ok_or_else(|| SecretError::UnknownKey(id.to_owned()))?;
        let damaged = || SecretError::Damaged(id.to_owned());
        let mut payload = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(encoded)
            .map_err(|_| damaged())?;
        if payload.len() < NONCE_LEN {
            return Err(damaged());
        }
        let mut sealed = payload.split_off(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(&payload).map_err(|_| damaged())?;
        let plain = key
            .cipher
            .open_in_place(nonce, Aad::from(binding.0.as_bytes()), &mut sealed)
            .map_err(|_| damaged())?;
        let text = std::str::from_utf8(plain).map_err(|_| damaged())?;
        Ok(SecretString::from(text.to_owned()))
    }

    pub fn open_opt(
        &self,
        stored: Option<&str>,
        binding: &Binding,
    ) -> Result<Option<SecretString>, SecretError> {
        stored.map(|s| self.open(s, binding)).transpose()
    }

    /// HMAC-SHA256 under the first key, or this process's own without one.
    pub fn sign_url(&self, data: &[u8]) -> Vec<u8> {
        let signer = match self.0.keys.first() {
            Some(key) => &key.url_signer,
            None => process_url_signer(),
        };
        hmac::sign(signer, data).as_ref().to_vec()
    }

    /// Whether `tag` is `data`'s URL tag under any key (constant time per key).
    pub fn verify_url(&self, data: &[u8], tag: &[u8]) -> bool {
        if self.0.keys.is_empty() {
            return hmac::verify(process_url_signer(), data, tag).is_ok();
        }
        self.0
            .keys
            .iter()
            .any(|k| hmac::verify(&k.url_signer, data, tag).is_ok())
    }

    /// Plain while a key is configured, or sealed under a key other than the first.
    pub fn needs_reseal(&self, stored: &str) -> bool {
        match (sealed_with(stored), self.current_key()) {
            (_, None) => false,
            (None, Some(_)) => true,
            (Some(id), Some(current)) => id != current,
        }
    }
}

pub fn sealed_with(stored: &str) -> Option<&str> {
    stored.strip_prefix(PREFIX)?.split_once(':').map(|(id, _)| id)
}

/// clap's parser of `CB_SECRETS_KEY`: the value or `@file` / `@-`; empty is no key.
pub fn parse_setting(value: &str) -> Result<Keyring, String> {
    if value.is_empty() {
        return Ok(Keyring::plain());
    }
    let spec = crate::secret_input::parse(value)?;
    Keyring::parse(spec.expose_secret()).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keyring(spec: &str) -> Keyring {
        Keyring::parse(spec).unwrap()
    }

    fn entry(id: &str) -> String {
        Keyring::generate_entry(id).unwrap().expose_secret().to_owned()
    }

    fn binding() -> Binding {
        Binding::connector(
            TenantId::new(),
            ConnectorId::new(),
            ConnectorSecret::OutboundToken,
        )
    }

    #[test]
    fn a_sealed_value_opens_to_the_original_and_hides_it() {
        let keys = keyring(&entry("k1"));
        let at = binding();
        let sealed = keys.seal("xoxb-1234-secret", &at).unwrap();
        assert!(sealed.starts_with("cbsealed:v1:k1:"), "{sealed}");
        assert!(!sealed.contains("xoxb"));
        assert_eq!(
            keys.open(&sealed, &at).unwrap().expose_secret(),
            "xoxb-1234-secret"
        );
        assert_ne!(
            keys.seal("xoxb-1234-secret", &at).unwrap(),
            sealed,
            "a fresh nonce each time"
        );
        assert_eq!(sealed_with(&sealed), Some("k1"));
    }

    #[test]
    fn a_value_moved_to_another_row_or_purpose_does_not_open() {
        let keys = keyring(&entry("k1"));
        let (tenant, connector) = (TenantId::new(), ConnectorId::new());
        let token = Binding::connector(tenant, connector, ConnectorSecret::OutboundToken);
        let sealed = keys.seal("bot-token", &token).unwrap();
        let elsewhere = [
            Binding::connector(tenant, connector, ConnectorSecret::Verification),
            Binding::connector(tenant, ConnectorId::new(), ConnectorSecret::OutboundToken),
            Binding::connector(TenantId::new(), connector, ConnectorSecret::OutboundToken),
            Binding::dispatch(tenant),
        ];
        for other in elsewhere {
            assert_eq!(
                keys.open(&sealed, &other).unwrap_err(),
                SecretError::Damaged("k1".into())
            );
        }
        let mut tampered = sealed.clone();
        let last = tampered.pop().unwrap();
        tampered.push(if last == 'A' { 'B' } else { 'A' });
        assert!(matches!(
            keys.open(&tampered, &token),
            Err(SecretError::Damaged(_))
        ));
    }

    #[test]
    fn rotation_opens_with_any_listed_key_and_seals_with_the_first() {
        let (old, new) = (entry("old"), entry("new"));
        let at = binding();
        let sealed_old = keyring(&old).seal("s3cret", &at).unwrap();
        let both = keyring(&format!("{new},\n{old}"));
        assert_eq!(both.open(&sealed_old, &at).unwrap().expose_secret(), "s3cret");
        assert!(both.needs_reseal(&sealed_old));
        let sealed_new = both.seal("s3cret", &at).unwrap();
        assert_eq!(sealed_with(&sealed_new), Some("new"));
        assert!(!both.needs_reseal(&sealed_new));
        assert!(
            both.needs_reseal("s3cret"),
            "a plain value is sealed once a key exists"
        );
        assert_eq!(
            keyring(&new).open(&sealed_old, &at).unwrap_err(),
            SecretError::UnknownKey("old".into())
        );
        assert_eq!(
            Keyring::plain().open(&sealed_old, &at).unwrap_err(),
            SecretError::UnknownKey("old".into())
        );
    }

    #[test]
    fn without_a_key_values_stay_plain_and_the_prefix_is_refused() {
        let plain = Keyring::plain();
        let at = binding();
        assert!(!plain.seals());
        assert_eq!(plain.seal("whsec_abc", &at).unwrap(), "whsec_abc");
        assert_eq!(plain.open("whsec_abc", &at).unwrap().expose_secret(), "whsec_abc");
        assert!(!plain.needs_reseal("whsec_abc"));
        assert_eq!(
            plain.seal("cbsealed:v1:x:y", &at),
            Err(SecretError::ReservedPrefix)
        );
    }

    #[test]
    fn bad_key_settings_are_refused_without_echoing_the_key() {
        let cases = [
            ("", "no key given"),
            ("nocolon", "id:base64"),
            (":AAAA", "key id"),
            ("bad!:AAAA", "key id"),
            ("k:not base64!", "not base64"),
            ("k:AAAA", "3 bytes"),
        ];
        for (spec, expected) in cases {
            let err = Keyring::parse(spec).unwrap_err().to_string();
            assert!(err.contains(expected), "{spec:?}: {err}");
        }
        let key = entry("k");
        let twice = Keyring::parse(&format!("{key},{key}")).unwrap_err().to_string();
        assert!(twice.contains("twice"), "{twice}");
        let (_, material) = key.split_once(':').unwrap();
        let short = format!("k:{}", &material[..20]);
        assert!(!Keyring::parse(&short)
            .unwrap_err()
            .to_string()
            .contains(&material[..20]));
        assert!(format!("{:?}", keyring(&key)).contains("\"k\""));
        assert!(!format!("{:?}", keyring(&key)).contains(material));
    }
}
