//! Console sessions: a random id in an HttpOnly, Secure, SameSite=Strict cookie, and what it
//! stands for kept in this instance's memory.
//!
//! Why server-side rather than a signed cookie: signing out (or the session expiring) ends
//! the session at once, the cookie carries nothing but 32 random bytes, and no signing key
//! has to be configured and rotated. The cost: sessions live in one instance's memory, so a
//! restart signs everyone out and several instances behind a balancer need sticky sessions.
//!
//! The admin key itself is never stored: the session keeps its SHA-256 (as `api_keys` does)
//! and authenticates it again on every request, so a revoked key ends its sessions too. The
//! store is keyed by the SHA-256 of the session id, so the memory holds no usable cookie.
//!
//! CSRF: SameSite=Strict keeps the cookie off cross-site requests, and every POST form of a
//! signed-in page also carries the session's random CSRF token, compared in constant time.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Redirect, Response};
use base64::Engine;
use rand::RngCore;
use sha2::{Digest, Sha256};

use crate::domain::TenantId;
use crate::error::AppError;
use crate::state::AppState;

/// The cookie's name. Not `__Host-`: that prefix needs `Path=/`, and the cookie is scoped to
/// `/console` so it never travels with API or webhook requests.
pub const COOKIE: &str = "cb_console";
/// A session's absolute lifetime; signing in again starts a new one.
pub const LIFETIME: Duration = Duration::from_secs(8 * 60 * 60);
/// Sessions kept at most per instance (the oldest go first past it).
const MAX_SESSIONS: u64 = 10_000;

/// What a session id stands for.
#[derive(Clone)]
pub struct Session {
    pub tenant: TenantId,
    /// SHA-256 of the admin key that signed in (`admin::auth::hash_key`).
    key_hash: Arc<Vec<u8>>,
    /// The key's public prefix, shown in the header so admins know which key they used.
    pub key_prefix: String,
    pub csrf: String,
}

pub struct Sessions {
    by_id_hash: moka::sync::Cache<Vec<u8>, Session>,
}

impl Default for Sessions {
    fn default() -> Self {
        Self {
            by_id_hash: moka::sync::Cache::builder()
                .max_capacity(MAX_SESSIONS)
                .time_to_live(LIFETIME)
                .build(),
        }
    }
}

fn random_token() -> String {
    let mut bytes = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

impl Sessions {
    /// Starts a session for a key that authenticated; returns the cookie's value.
    pub fn start(&self, tenant: TenantId, key_hash: Vec<u8>, key_prefix: &str) -> String {
        let id = random_token();
        let session = Session {
            tenant,
            key_hash: Arc::new(key_hash),
            key_prefix: key_prefix.to_owned(),
            csrf: random_token(),
        };
        self.by_id_hash
            .insert(Sha256::digest(id.as_bytes()).to_vec(), session);
        id
    }

    fn get(&self, id: &str) -> Option<Session> {
        self.by_id_hash.get(&Sha256::digest(id.as_bytes()).to_vec())
    }

    pub fn end(&self, id: &str) {
        self.by_id_hash
            .invalidate(&Sha256::digest(id.as_bytes()).to_vec());
    }
}

/// The `Set-Cookie` value that carries a new session id. `Secure`: browsers send it over
/// HTTPS only, except to `localhost`, which they treat as secure (the browser tests open
/// the console at `http://localhost:<port>`).
pub fn set_cookie(id: &str) -> HeaderValue {
    let value = format!(
        "{COOKIE}={id}; Path=/console; HttpOnly; Secure; SameSite=Strict; Max-Age={}",
        LIFETIME.as_secs()
    );
    // The id is base64url: always a valid header value.
    HeaderValue::from_str(&value).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// The `Set-Cookie` value that removes the session cookie.
pub fn clear_cookie() -> HeaderValue {
    HeaderValue::from_static("cb_console=; Path=/console; HttpOnly; Secure; SameSite=Strict; Max-Age=0")
}

/// The session id the request's cookies carry, if any.
pub fn cookie_value(parts: &Parts) -> Option<&str> {
    parts
        .headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value)
        .filter(|value| !value.is_empty())
}

/// A request from a signed-in admin whose key is still live.
pub struct SignedIn {
    pub session: Session,
    pub id: String,
    /// The id of the admin key the session stands for: the actor of audited actions.
    pub key_id: uuid::Uuid,
}

impl SignedIn {
    /// The form's CSRF token matches the session's; else 403.
    pub fn check_csrf(&self, token: &str) -> Result<(), super::ConsoleError> {
        if crate::channels::constant_time_eq(token.as_bytes(), self.session.csrf.as_bytes()) {
            Ok(())
        } else {
            Err(super::ConsoleError::Csrf)
        }
    }
}

fn to_sign_in() -> Response {
    Redirect::to("/console/sign-in").into_response()
}

impl FromRequestParts<AppState> for SignedIn {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        let sessions = parts.extensions.get::<Arc<Sessions>>().cloned().ok_or_else(|| {
            AppError::Internal(anyhow::anyhow!("console sessions are not installed")).into_response()
        })?;
        let id = cookie_value(parts).ok_or_else(to_sign_in)?.to_owned();
        let session = sessions.get(&id).ok_or_else(to_sign_in)?;
        let mut conn = state
            .pool
            .acquire()
            .await
            .map_err(|e| super::ConsoleError::from(AppError::from(e)).into_response())?;
        let live = crate::db::api_keys::authenticate(&mut conn, &session.key_hash)
            .await
            .map_err(|e| super::ConsoleError::from(AppError::from(e)).into_response())?;
        match live {
            Some((key_id, tenant)) if tenant == session.tenant => {
                tracing::Span::current().record("tenant_id", tracing::field::display(tenant));
                Ok(Self { session, id, key_id })
            }
            // The key was revoked since: the session ends with it.
            _ => {
                sessions.end(&id);
                Err(to_sign_in())
            }
        }
    }
}
