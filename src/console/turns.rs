//! The turns pages: the list, one turn, the failed turns, and their recovery buttons.

use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Redirect};
use axum::Form;
use serde::Deserialize;
use uuid::Uuid;

use super::error::{ConsoleError, PageResult};
use super::pages::{self, ok_page};
use super::session::{CsrfForm, SignedIn};
use crate::admin::messages::{self, MessagesQuery, Recovery};
use crate::error::AppError;
use crate::http::state::AppState;

#[derive(Debug, Default, Deserialize)]
pub struct TurnsQuery {
    q: Option<String>,
    status: Option<String>,
    user_id: Option<String>,
    cursor: Option<String>,
}

pub async fn turns(
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
pub struct TurnQuery {
    queued: Option<usize>,
}

/// A path id that is not a UUID names no turn: the same 404 as an unknown one.
fn turn_id(id: &str) -> Result<Uuid, ConsoleError> {
    id.parse()
        .map_err(|_| ConsoleError::App(AppError::NotFound("message")))
}

pub async fn turn(
    State(state): State<AppState>,
    signed_in: SignedIn,
    Path(id): Path<String>,
    Query(query): Query<TurnQuery>,
) -> PageResult {
    let detail = messages::get_message(&state.pool, signed_in.session.tenant, turn_id(&id)?).await?;
    let body = pages::turn(&detail, &signed_in.session.csrf, query.queued);
    ok_page("Turn", &signed_in, &body)
}

pub async fn redispatch(
    state: State<AppState>,
    signed_in: SignedIn,
    Path(id): Path<String>,
    Form(form): Form<CsrfForm>,
) -> PageResult {
    recover(state, signed_in, Recovery::Redispatch, &id, &form).await
}

pub async fn resend(
    state: State<AppState>,
    signed_in: SignedIn,
    Path(id): Path<String>,
    Form(form): Form<CsrfForm>,
) -> PageResult {
    recover(state, signed_in, Recovery::Resend, &id, &form).await
}

/// POST, redirect, GET: a reload does not repeat the action.
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

pub async fn failed(State(state): State<AppState>, signed_in: SignedIn) -> PageResult {
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
