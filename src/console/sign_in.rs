//! Signing in with a tenant admin key, and out.

use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::{Extension, Form};
use serde::Deserialize;

use super::error::{ConsoleError, PageResult};
use super::session::{self, CsrfForm, SignedIn};
use super::{html, pages};
use crate::http::state::AppState;
use crate::http::throttle::key_prefix;

pub async fn home(signed_in: Result<SignedIn, Response>) -> Redirect {
    match signed_in {
        Ok(_) => Redirect::to("/console/overview"),
        Err(_) => Redirect::to("/console/sign-in"),
    }
}

pub async fn sign_in_page() -> Response {
    html::respond(StatusCode::OK, pages::sign_in(None))
}

#[derive(Deserialize)]
pub struct SignInForm {
    #[serde(default)]
    key: String,
}

/// The API's key check and throttle; a wrong key gets the form again and no cookie.
pub async fn sign_in(
    State(state): State<AppState>,
    connect_info: Option<Extension<ConnectInfo<std::net::SocketAddr>>>,
    headers: HeaderMap,
    Form(form): Form<SignInForm>,
) -> Response {
    if !same_origin(&headers) {
        return ConsoleError::Csrf.into_response();
    }
    let key = form.key.trim();
    let source = connect_info.map(|Extension(ConnectInfo(addr))| addr.ip());
    let found = match crate::admin::auth::verify_key(&state, source, key).await {
        Ok(found) => found,
        Err(err) => return ConsoleError::App(err).into_response(),
    };
    let (Some((key_id, tenant)), Some(prefix)) = (found, key_prefix(key)) else {
        return html::respond(
            StatusCode::UNAUTHORIZED,
            pages::sign_in(Some("That key is not valid (or was revoked).")),
        );
    };
    let id = match session::start(&state.pool, tenant, key_id, prefix).await {
        Ok(id) => id,
        Err(err) => return ConsoleError::App(err).into_response(),
    };
    let mut response = Redirect::to("/console/overview").into_response();
    response
        .headers_mut()
        .insert(axum::http::header::SET_COOKIE, session::set_cookie(&id));
    response
}

/// Login CSRF: a browser that names the form's `Origin` must name this host. (The pages'
/// referrer policy is `same-origin`: with `no-referrer` browsers send `Origin: null`.)
fn same_origin(headers: &HeaderMap) -> bool {
    let Some(origin) = headers.get("origin").and_then(|v| v.to_str().ok()) else {
        return true;
    };
    let host = headers
        .get(axum::http::header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let origin_host = origin.split_once("://").map_or("", |(_, rest)| rest);
    !host.is_empty() && origin_host == host
}

pub async fn sign_out(
    State(state): State<AppState>,
    signed_in: SignedIn,
    Form(form): Form<CsrfForm>,
) -> PageResult {
    signed_in.check_csrf(&form.csrf)?;
    session::end(&state.pool, &signed_in.id).await?;
    let mut response = Redirect::to("/console/sign-in").into_response();
    response
        .headers_mut()
        .insert(axum::http::header::SET_COOKIE, session::clear_cookie());
    Ok(response)
}
