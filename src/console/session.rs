//! Console sessions: a random id in an HttpOnly, Secure, SameSite=Strict cookie, and what
//! it stands for in the `console_sessions` table (`db::console_sessions`).
//!
//! Why server-side rather than a signed cookie: signing out (or the session expiring) ends
//! the session at once, the cookie carries nothing but 32 random bytes, and no signing key
//! has to be configured and rotated. Why in the database rather than in memory: every
//! instance behind a balancer sees every session (no sticky sessions), signing out on one
//! ends it on all, and a restart signs no one out. The cost is a row per session and one
//! primary-key read per console request, next to the key check that was there already.
//!
//! The admin key itself is never stored: the session keeps the key's id, and every request
//! checks that key is still live in `api_keys`, so a revoked key ends its sessions too. The
//! table is keyed by the SHA-256 of the session id, so it holds no usable cookie.
//!
//! CSRF: SameSite=Strict keeps the cookie off cross-site requests, and every POST form of a
//! signed-in page also carries the session's random CSRF token, compared in constant time.

use std::time::Duration;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Redirect, Response};
use base64::Engine;
use rand::RngCore;
use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::error::ConsoleError;
use crate::db::console_sessions::{self, SessionRow};
use crate::domain::TenantId;
use crate::error::AppError;
use crate::http::state::AppState;

/// The cookie's name. Not `__Host-`: that prefix needs `Path=/`, and the cookie is scoped to
/// `/console` so it never travels with API or webhook requests.
pub const COOKIE: &str = "cb_console";
/// A session's absolute lifetime; signing in again starts a new one.
pub const LIFETIME: Duration = Duration::from_secs(8 * 60 * 60);
/// What a session id stands for.
#[derive(Clone)]
pub struct Session {
    pub tenant: TenantId,
    /// The id of the admin key that signed in: the actor of audited actions.
    pub key_id: uuid::Uuid,
    /// The key's public prefix, shown in the header so admins know which key they used.
    pub key_prefix: String,
    pub csrf: String,
}

fn random_token() -> String {
    let mut bytes = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

fn id_hash(id: &str) -> Vec<u8> {
    Sha256::digest(id.as_bytes()).to_vec()
}

/// Starts a session for a key that authenticated; returns the cookie's value.
pub async fn start(
    pool: &sqlx::PgPool,
    tenant: TenantId,
    key_id: uuid::Uuid,
    key_prefix: &str,
) -> Result<String, AppError> {
    let id = random_token();
    let row = SessionRow {
        tenant_id: tenant,
        key_id,
        key_prefix: key_prefix.to_owned(),
        csrf: random_token(),
    };
    let expires_at = chrono::Utc::now() + chrono::Duration::seconds(LIFETIME.as_secs() as i64);
    let mut conn = pool.acquire().await?;
    console_sessions::insert(&mut conn, &id_hash(&id), &row, expires_at).await?;
    Ok(id)
}

/// Ends a session on every instance.
pub async fn end(pool: &sqlx::PgPool, id: &str) -> Result<(), AppError> {
    let mut conn = pool.acquire().await?;
    console_sessions::delete(&mut conn, &id_hash(id)).await?;
    Ok(())
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

/// A form that only carries the page's CSRF token.
#[derive(Deserialize)]
pub struct CsrfForm {
    #[serde(default)]
    pub csrf: String,
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
    pub fn check_csrf(&self, token: &str) -> Result<(), ConsoleError> {
        if crate::platforms::inbound::constant_time_eq(token.as_bytes(), self.session.csrf.as_bytes()) {
            Ok(())
        } else {
            Err(ConsoleError::Csrf)
        }
    }
}

fn to_sign_in() -> Response {
    Redirect::to("/console/sign-in").into_response()
}

fn failed(err: sqlx::Error) -> Response {
    ConsoleError::from(AppError::from(err)).into_response()
}

impl FromRequestParts<AppState> for SignedIn {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        let id = cookie_value(parts).ok_or_else(to_sign_in)?.to_owned();
        let hash = id_hash(&id);
        let mut conn = state.pool.acquire().await.map_err(failed)?;
        let row = console_sessions::live(&mut conn, &hash)
            .await
            .map_err(failed)?
            .ok_or_else(to_sign_in)?;
        let live = crate::db::api_keys::live_by_id(&mut conn, row.key_id)
            .await
            .map_err(failed)?;
        if live != Some(row.tenant_id) {
            // The key was revoked since: the session ends with it.
            console_sessions::delete(&mut conn, &hash).await.map_err(failed)?;
            return Err(to_sign_in());
        }
        tracing::Span::current().record("tenant_id", tracing::field::display(row.tenant_id));
        let session = Session {
            tenant: row.tenant_id,
            key_id: row.key_id,
            key_prefix: row.key_prefix,
            csrf: row.csrf,
        };
        Ok(Self {
            key_id: session.key_id,
            session,
            id,
        })
    }
}
