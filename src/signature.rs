//! Comparing secrets, and the Standard Webhooks signatures of what the gateway and the agent
//! send each other (<https://www.standardwebhooks.com>: dispatches, feedback events, the
//! agent's events and messages), keyed with the decoded bytes of a `whsec_<base64>` secret.
//! The verifier is the one agents use (`agent-bridge`, the tests' fake agent). Each
//! platform's own webhook signature is the platform's (`platforms::*::inbound`).

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Constant-time equality of two byte strings (length is not secret): keys, CSRF tokens,
/// signatures.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    use subtle::ConstantTimeEq;
    a.len() == b.len() && bool::from(a.ct_eq(b))
}

/// The specification's suggested clock skew.
pub const TOLERANCE_SECS: i64 = 300;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SignatureError {
    #[error("the secret is not a whsec_<base64> secret")]
    BadSecret,
    #[error("a webhook-id, webhook-timestamp or webhook-signature header is missing")]
    MissingHeader,
    #[error("the timestamp is outside the tolerance")]
    StaleTimestamp,
    #[error("no signature matches")]
    Mismatch,
}

fn key(secret: &str) -> Result<Vec<u8>, SignatureError> {
    let encoded = secret.strip_prefix("whsec_").unwrap_or(secret);
    STANDARD.decode(encoded).map_err(|_| SignatureError::BadSecret)
}

fn mac(key: &[u8], id: &str, timestamp: i64, body: &[u8]) -> Hmac<Sha256> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes keys of any length");
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    mac
}

pub fn sign(secret: &str, id: &str, timestamp: i64, body: &[u8]) -> Result<String, SignatureError> {
    let digest = mac(&key(secret)?, id, timestamp, body).finalize().into_bytes();
    Ok(format!("v1,{}", STANDARD.encode(digest)))
}

/// Space separated, Standard Webhooks' form for a secret rotation.
pub fn sign_all(secrets: &[&str], id: &str, timestamp: i64, body: &[u8]) -> Result<String, SignatureError> {
    let signatures: Result<Vec<String>, _> = secrets.iter().map(|s| sign(s, id, timestamp, body)).collect();
    Ok(signatures?.join(" "))
}

/// One matching signature is enough; comparison is constant-time.
pub fn verify(
    secret: &str,
    id: Option<&str>,
    timestamp: Option<&str>,
    signatures: Option<&str>,
    body: &[u8],
    now: i64,
) -> Result<(), SignatureError> {
    let (Some(id), Some(timestamp), Some(signatures)) = (id, timestamp, signatures) else {
        return Err(SignatureError::MissingHeader);
    };
    let timestamp: i64 = timestamp
        .trim()
        .parse()
        .map_err(|_| SignatureError::StaleTimestamp)?;
    if (now - timestamp).abs() > TOLERANCE_SECS {
        return Err(SignatureError::StaleTimestamp);
    }
    let key = key(secret)?;
    let matches = signatures
        .split(' ')
        .filter_map(|candidate| candidate.strip_prefix("v1,"))
        .filter_map(|encoded| STANDARD.decode(encoded).ok())
        .any(|candidate| mac(&key, id, timestamp, body).verify_slice(&candidate).is_ok());
    if matches {
        Ok(())
    } else {
        Err(SignatureError::Mismatch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The example of the Standard Webhooks reference implementations' test suites.
    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const ID: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
    const TS: i64 = 1614265330;
    const BODY: &[u8] = br#"{"test": 2432232314}"#;
    const SIGNATURE: &str = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";

    #[test]
    fn signs_the_standard_webhooks_reference_example() {
        assert_eq!(sign(SECRET, ID, TS, BODY).unwrap(), SIGNATURE);
    }

    #[test]
    fn verifies_good_and_rejects_tampered_stale_and_missing() {
        assert_eq!(
            verify(SECRET, Some(ID), Some("1614265330"), Some(SIGNATURE), BODY, TS),
            Ok(())
        );
        let rotated = format!("v1,bm90LWl0 {SIGNATURE}");
        assert_eq!(
            verify(SECRET, Some(ID), Some("1614265330"), Some(&rotated), BODY, TS),
            Ok(())
        );
        assert_eq!(
            verify(SECRET, Some(ID), Some("1614265330"), Some(SIGNATURE), b"{}", TS),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            verify(
                SECRET,
                Some(ID),
                Some("1614265330"),
                Some(SIGNATURE),
                BODY,
                TS + 301
            ),
            Err(SignatureError::StaleTimestamp)
        );
        assert_eq!(
            verify(SECRET, None, Some("1"), Some(SIGNATURE), BODY, TS),
            Err(SignatureError::MissingHeader)
        );
    }
}
