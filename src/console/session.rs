//! Console sessions (docs/console.md): a random id in an HttpOnly, Secure, SameSite=Strict
//! cookie, standing for a `console_sessions` row keyed by the id's SHA-256 (the table holds
//! no usable cookie). Server-side, so signing out ends a session on every instance at once;
//! each request checks the session's key is still live, so revoking a key ends its sessions.

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

/// `Secure`: HTTPS only, except to `localhost` (how the browser tests sign in over http).
pub fn set_cookie(id: &str) -> HeaderValue {
    let value = format!(
        "{COOKIE}={id}; Path=/console; HttpOnly; Secure; SameSite=Strict; Max-Age={}",
        LIFETIME.as_secs()
    );
    // The id is base64url: always a valid header value.
    HeaderValue::from_str(&value).unwrap_or_else(|_| HeaderValue::from_static(""))
}

pub fn clear_cookie() -> HeaderValue {
    HeaderValue::from_static("cb_console=; Path=/console; HttpOnly; Secure; SameSite=Strict; Max-Age=0")
}

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

#[derive(Deserialize)]
pub struct CsrfForm {
    #[serde(default)]
    pub csrf: String,
}

/// A request from a signed-in admin whose key is still live.
pub struct SignedIn {
    pub session: Session,
    pub id: String,
    pub key_id: uuid::Uuid,
    /// How many conversations the tenant holds (up to `html::HELD_CAP`), for the navigation.
    pub held: i64,
}

impl SignedIn {
    /// On top of SameSite=Strict; compared in constant time, else 403.
    pub fn check_csrf(&self, token: &str) -> Result<(), ConsoleError> {
        if crate::signature::constant_time_eq(token.as_bytes(), self.session.csrf.as_bytes()) {
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

/// Read in the tenant's transaction, as every page's data is.
async fn held_count(state: &AppState, tenant: TenantId) -> Result<i64, sqlx::Error> {
    let mut tx = crate::db::TenantTx::begin(&state.pool, tenant).await?;
    let held = crate::db::inbox::count(&mut tx, super::html::HELD_CAP).await?;
    tx.commit().await?;
    Ok(held)
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
        let held = held_count(state, session.tenant).await.map_err(failed)?;
        Ok(Self {
            key_id: session.key_id,
            session,
            id,
            held,
        })
    }
}
