//! The tenant admin web console at `/console`: sign in with a tenant admin key, look at
//! conversations, a turn as the agent saw it with its reply parts, the failed turns, and
//! redispatch or resend them.
//!
//! Server-rendered HTML built with plain Rust strings (`html`), no script at all, one
//! embedded stylesheet: nothing to build, bundle or serve apart, no template crate to keep
//! up to date, and every page works in any browser. The cost is that escaping is by hand:
//! every value from data goes through `html::esc`, and the test of a `<script>` message
//! keeps that honest. The pages are not part of the OpenAPI document (they are not API).
//!
//! Every page reads and writes through the same functions as the admin API
//! (`admin::messages`, `admin::connectors`, `admin::links`, `db::…`), so through the
//! session's tenant transaction and its RLS policies, with the API's checks and audit
//! records (the actor is the signed-in key). Pages: `pages` (turns, failed), `connectors`,
//! `links`, `users` (conversations by user).
//! Sessions and CSRF: `session`.

mod connectors;
mod html;
mod links;
mod pages;
pub mod session;
mod users;

use axum::extract::{ConnectInfo, Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Extension, Form, Router};
use serde::Deserialize;
use uuid::Uuid;

use crate::admin::messages::{self, MessagesQuery, Recovery};
use crate::admin::throttle::key_prefix;
use crate::error::AppError;
use crate::state::AppState;
use session::SignedIn;

/// The console's routes, with this instance's session store.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/console", get(home))
        .route("/console/sign-in", get(sign_in_page).post(sign_in))
        .route("/console/sign-out", post(sign_out))
        .route("/console/turns", get(turns))
        .route("/console/turns/{id}", get(turn))
        .route("/console/turns/{id}/redispatch", post(redispatch))
        .route("/console/turns/{id}/resend", post(resend))
        .route("/console/failed", get(failed))
        .route("/console/users", get(users::list))
        .route("/console/conversation", get(users::conversation))
        .route(
            "/console/connectors",
            get(connectors::list).post(connectors::create),
        )
        .route("/console/connectors/{id}/rotate", post(connectors::rotate))
        .route("/console/connectors/{id}/disable", post(connectors::disable))
        .route("/console/connectors/{id}/enable", post(connectors::enable))
        .route("/console/links", get(links::list).post(links::add))
        .route("/console/links/remove", post(links::remove))
}

/// A console answer that went wrong, as a page: client errors say what was wrong (their
/// messages never hold SQL, paths or secrets), anything else is logged by `AppError` and
/// shown as an opaque failure.
pub enum ConsoleError {
    App(AppError),
    Csrf,
}

impl From<AppError> for ConsoleError {
    fn from(err: AppError) -> Self {
        Self::App(err)
    }
}

impl IntoResponse for ConsoleError {
    fn into_response(self) -> Response {
        let (status, message) = match self {
            ConsoleError::Csrf => (
                StatusCode::FORBIDDEN,
                "This form has expired or did not come from the console. Go back, reload and try again."
                    .to_owned(),
            ),
            ConsoleError::App(err) => {
                let message = err.to_string();
                // `AppError`'s own answer logs server errors with their cause.
                let status = err.into_response().status();
                let shown = if status.is_server_error() {
                    "Something went wrong on our side; try again in a moment.".to_owned()
                } else {
                    message
                };
                (status, shown)
            }
        };
        let body = format!(
            r#"<p class="alert" id="error">{}</p><p><a href="/console/turns">Back to conversations</a></p>"#,
            html::esc(&message)
        );
        html::respond(
            status,
            html::page(status.canonical_reason().unwrap_or("Error"), None, &body),
        )
    }
}

type PageResult = Result<Response, ConsoleError>;

/// The page a console request gets when it passes the admin request deadline
/// (`CB_ADMIN_DEADLINE_MS`, applied in `http::deadline`): 503 with `Retry-After`, as the
/// API's JSON answer has.
pub fn deadline_passed(limit_ms: u64) -> Response {
    let mut response = ConsoleError::App(AppError::DeadlinePassed(limit_ms)).into_response();
    response.headers_mut().insert(
        axum::http::header::RETRY_AFTER,
        axum::http::HeaderValue::from_static("1"),
    );
    response
}

fn nav(signed_in: &SignedIn) -> html::Nav<'_> {
    html::Nav {
        key_prefix: &signed_in.session.key_prefix,
        csrf: &signed_in.session.csrf,
    }
}

fn ok_page(title: &str, signed_in: &SignedIn, body: &str) -> PageResult {
    Ok(html::respond(
        StatusCode::OK,
        html::page(title, Some(&nav(signed_in)), body),
    ))
}

async fn home(signed_in: Result<SignedIn, Response>) -> Redirect {
    match signed_in {
        Ok(_) => Redirect::to("/console/turns"),
        Err(_) => Redirect::to("/console/sign-in"),
    }
}

async fn sign_in_page() -> Response {
    html::respond(StatusCode::OK, pages::sign_in(None))
}

#[derive(Deserialize)]
struct SignInForm {
    #[serde(default)]
    key: String,
}

/// Checks the key as the API does (`admin::auth::verify_key`), then starts a
/// session. A wrong key gets the form again with an error and no cookie.
async fn sign_in(
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
    let mut response = Redirect::to("/console/turns").into_response();
    response
        .headers_mut()
        .insert(axum::http::header::SET_COOKIE, session::set_cookie(&id));
    response
}

/// A sign-in form posted from another site (login CSRF) is refused: when the browser says
/// where the form came from (`Origin`), it must be this host. (The pages' referrer policy
/// is `same-origin`: with `no-referrer` browsers send `Origin: null`.)
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

#[derive(Deserialize)]
struct CsrfForm {
    #[serde(default)]
    csrf: String,
}

async fn sign_out(
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

/// The filters of the conversations page (a subset of the API's).
#[derive(Debug, Default, Deserialize)]
struct TurnsQuery {
    q: Option<String>,
    status: Option<String>,
    user_id: Option<String>,
    cursor: Option<String>,
}

async fn turns(
    State(state): State<AppState>,
    signed_in: SignedIn,
    Query(query): Query<TurnsQuery>,
) -> PageResult {
    let api_query = MessagesQuery {
        q: query.q.clone().filter(|q| !q.is_empty()),
        status: query.status.clone().filter(|s| !s.is_empty()),
        user_id: query.user_id.clone().filter(|u| !u.is_empty()),
        cursor: query.cursor.clone().filter(|c| !c.is_empty()),
        ..MessagesQuery::default()
    };
    let page = messages::list_messages(&state.pool, signed_in.session.tenant, &api_query).await?;
    let body = pages::turns(&api_query, &page);
    ok_page("Conversations", &signed_in, &body)
}

#[derive(Debug, Default, Deserialize)]
struct TurnQuery {
    queued: Option<usize>,
}

/// A path id that is not a UUID names no turn: the same 404 as an unknown one.
fn turn_id(id: &str) -> Result<Uuid, ConsoleError> {
    id.parse()
        .map_err(|_| ConsoleError::App(AppError::NotFound("message")))
}

async fn turn(
    State(state): State<AppState>,
    signed_in: SignedIn,
    Path(id): Path<String>,
    Query(query): Query<TurnQuery>,
) -> PageResult {
    let detail = messages::get_message(&state.pool, signed_in.session.tenant, turn_id(&id)?).await?;
    let body = pages::turn(&detail, &signed_in.session.csrf, query.queued);
    ok_page("Turn", &signed_in, &body)
}

async fn redispatch(
    state: State<AppState>,
    signed_in: SignedIn,
    Path(id): Path<String>,
    Form(form): Form<CsrfForm>,
) -> PageResult {
    recover(state, signed_in, Recovery::Redispatch, &id, &form).await
}

async fn resend(
    state: State<AppState>,
    signed_in: SignedIn,
    Path(id): Path<String>,
    Form(form): Form<CsrfForm>,
) -> PageResult {
    recover(state, signed_in, Recovery::Resend, &id, &form).await
}

/// Runs a recovery action (the API's own `recover_one`), wakes the workers when it queued
/// something, and shows the turn again (POST, redirect, GET: a reload does not repeat it).
async fn recover(
    State(state): State<AppState>,
    signed_in: SignedIn,
    action: Recovery,
    id: &str,
    form: &CsrfForm,
) -> PageResult {
    signed_in.check_csrf(&form.csrf)?;
    let id = turn_id(id)?;
    let actor = crate::db::audit::Actor::ApiKey(signed_in.key_id);
    let out = messages::recover_one(&state.pool, signed_in.session.tenant, action, id, false, actor).await?;
    if out.queued > 0 {
        state.wake_workers();
    }
    Ok(Redirect::to(&format!("/console/turns/{id}?queued={}", out.queued)).into_response())
}

/// Turns the agent never answered and answers that did not reach the user.
async fn failed(State(state): State<AppState>, signed_in: SignedIn) -> PageResult {
    let tenant = signed_in.session.tenant;
    let of_status = |status: &str| MessagesQuery {
        status: Some(status.to_owned()),
        ..MessagesQuery::default()
    };
    let dispatch = messages::list_messages(&state.pool, tenant, &of_status("dispatch_failed")).await?;
    let delivery = messages::list_messages(&state.pool, tenant, &of_status("delivery_failed")).await?;
    let body = pages::failed(&dispatch, &delivery, &signed_in.session.csrf);
    ok_page("Failed turns", &signed_in, &body)
}
