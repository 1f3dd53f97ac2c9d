//! Who is calling the admin API: a tenant admin key `cbk_<prefix>_<secret>` (stored as its
//! SHA-256 only; the prefix is a public handle) or the operator token, compared in constant
//! time. Bad keys are throttled before any database work (`crate::http::throttle`).

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use base64::Engine;
use rand::distributions::Alphanumeric;
use rand::{Rng, RngCore};
use secrecy::ExposeSecret;
use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::domain::TenantId;
use crate::error::AppError;
use crate::http::state::AppState;
use crate::http::throttle::key_prefix;

/// A freshly issued key: the secret text and what is stored of it.
pub struct IssuedKey {
    pub key: String,
    pub prefix: String,
    pub hash: Vec<u8>,
}

pub fn issue_key() -> IssuedKey {
    let prefix: String = rand::rngs::OsRng
        .sample_iter(&Alphanumeric)
        .take(8)
        .map(char::from)
        .collect();
    let mut secret = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut secret);
    let secret = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(secret);
    let key = format!("cbk_{prefix}_{secret}");
    let hash = hash_key(&key);
    IssuedKey { key, prefix, hash }
}

pub fn hash_key(key: &str) -> Vec<u8> {
    Sha256::digest(key.as_bytes()).to_vec()
}

fn bearer(parts: &Parts) -> Option<&str> {
    let value = parts
        .headers
        .get(axum::http::header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// A wrong key costs no database work when its prefix is known here, and spends a token of
/// `source`'s bucket (429 once it is empty).
pub async fn verify_key(
    state: &AppState,
    source: Option<std::net::IpAddr>,
    key: &str,
) -> Result<Option<(Uuid, TenantId)>, AppError> {
    let throttle = &state.auth_throttle;
    let Some(prefix) = key_prefix(key) else {
        throttle.charge(source).map_err(AppError::TooManyRequests)?;
        return Ok(None);
    };
    let hash = hash_key(key);
    let (stored, paid) = match throttle.stored_hash(prefix) {
        Some(stored) => (stored, false),
        None => {
            // Paid for up front: it covers the failure it may turn out to be.
            throttle.charge(source).map_err(AppError::TooManyRequests)?;
            let mut conn = state.pool.acquire().await?;
            let stored = crate::db::api_keys::live_hash(&mut conn, prefix).await?;
            throttle.remember(prefix, stored.clone());
            (stored, true)
        }
    };
    let matches = stored.is_some_and(|stored| crate::signature::constant_time_eq(&stored, &hash));
    if !matches {
        if !paid {
            throttle.charge(source).map_err(AppError::TooManyRequests)?;
        }
        return Ok(None);
    }
    let mut conn = state.pool.acquire().await?;
    let found = crate::db::api_keys::authenticate(&mut conn, &hash).await?;
    if found.is_none() {
        throttle.forget(prefix);
    }
    Ok(found)
}

#[derive(Debug, Clone, Copy)]
pub struct TenantAdmin {
    pub tenant: TenantId,
    pub key_id: Uuid,
}

impl FromRequestParts<AppState> for TenantAdmin {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        let key = bearer(parts).ok_or(AppError::Unauthorized("missing bearer token"))?;
        let source = parts
            .extensions
            .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
            .map(|info| info.0.ip());
        let found = verify_key(state, source, key).await?;
        let (key_id, tenant) = found.ok_or(AppError::Unauthorized("invalid or revoked API key"))?;
        tracing::Span::current().record("tenant_id", tracing::field::display(tenant));
        Ok(Self { tenant, key_id })
    }
}

#[derive(Debug, Clone, Copy)]
pub struct Operator;

impl FromRequestParts<AppState> for Operator {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        let Some(expected) = state.settings.operator_token.as_ref() else {
            return Err(AppError::Forbidden(
                "operator endpoints are disabled (no CB_OPERATOR_TOKEN)",
            ));
        };
        let token = bearer(parts).ok_or(AppError::Unauthorized("missing bearer token"))?;
        if crate::signature::constant_time_eq(token.as_bytes(), expected.expose_secret().as_bytes()) {
            Ok(Operator)
        } else {
            Err(AppError::Unauthorized("invalid operator token"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issued_keys_are_random_prefixed_and_stored_only_as_a_hash() {
        let a = issue_key();
        let b = issue_key();
        assert_ne!(a.key, b.key);
        assert!(a.key.starts_with(&format!("cbk_{}_", a.prefix)));
        assert_eq!(a.hash, hash_key(&a.key));
        assert_eq!(a.hash.len(), 32);
        assert!(a.key.len() > 50);
    }
}
