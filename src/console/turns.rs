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
use crate::domain::MessageStatus;
use crate::error::AppError;
use crate::http::state::AppState;
use crate::shapes::MessageSelection;

/// The filter form's fields (the listing's others are not taken here).
const FORM_FIELDS: [&str; 4] = ["q", "status", "user_id", "cursor"];

/// The listing the filter form asks for: a field the form leaves empty is not set.
fn listing_of(form: Vec<(String, String)>) -> Result<MessagesQuery, AppError> {
    let mut seen = Vec::new();
    let mut set = serde_json::Map::new();
    for (name, value) in form {
        if !FORM_FIELDS.contains(&name.as_str()) {
            continue;
        }
        if seen.contains(&name) {
            return Err(AppError::BadRequest(format!("duplicate field `{name}`")));
        }
        seen.push(name.clone());
        if !value.is_empty() {
            set.insert(name, value.into());
        }
    }
    serde_json::from_value(set.into()).map_err(|err| AppError::Unprocessable(err.to_string()))
}

pub async fn turns(
    State(state): State<AppState>,
    signed_in: SignedIn,
    Query(form): Query<Vec<(String, String)>>,
) -> PageResult {
    let query = listing_of(form)?;
    let page = messages::list_messages(&state.pool, signed_in.session.tenant, &query).await?;
    let body = pages::turns(&query, &page);
    ok_page("/console/turns", "Conversations", &signed_in, &body)
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
    let tenant = signed_in.session.tenant;
    let detail = messages::get_message(&state.pool, tenant, turn_id(&id)?).await?;
    let tapped_answer = match &detail.message.action {
        Some(action) => answer_of(&state, tenant, action.message_id.0).await?,
        None => None,
    };
    let body = pages::turn(
        &detail,
        &signed_in.session.csrf,
        query.queued,
        tapped_answer.as_deref(),
    );
    ok_page("/console/turns", "Turn", &signed_in, &body)
}

/// The answer text of the turn a tap answered; none once that turn is gone (erased, or past
/// retention), which the tap outlives.
async fn answer_of(
    state: &AppState,
    tenant: crate::domain::TenantId,
    id: Uuid,
) -> Result<Option<String>, AppError> {
    match messages::get_message(&state.pool, tenant, id).await {
        Ok(answered) => Ok(answered.message.response_content),
        Err(AppError::NotFound(_)) => Ok(None),
        Err(err) => Err(err),
    }
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
    let of_status = |status| MessagesQuery {
        matching: MessageSelection {
            status: Some(status),
            ..MessageSelection::default()
        },
        ..MessagesQuery::default()
    };
    let dispatch = of_status(MessageStatus::DispatchFailed);
    let dispatch = messages::list_messages(&state.pool, tenant, &dispatch).await?;
    let delivery = of_status(MessageStatus::DeliveryFailed);
    let delivery = messages::list_messages(&state.pool, tenant, &delivery).await?;
    let body = pages::failed(&dispatch, &delivery, &signed_in.session.csrf);
    ok_page("/console/failed", "Failed turns", &signed_in, &body)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn form(fields: &[(&str, &str)]) -> Vec<(String, String)> {
        fields
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn an_empty_form_field_is_not_set_and_others_than_the_forms_are_not_taken() {
        let query = listing_of(form(&[
            ("q", ""),
            ("status", ""),
            ("user_id", "alice"),
            ("cursor", ""),
            ("limit", "x"),
        ]))
        .map_err(|e| e.to_string())
        .expect("a good form");
        assert_eq!(query.matching.user_id.as_deref(), Some("alice"));
        assert!(query.q.is_none() && query.matching.status.is_none() && query.cursor.is_none());
        assert!(query.limit.is_none());
        let query = listing_of(form(&[("status", "dispatch_failed")])).map_err(|e| e.to_string());
        assert!(query.is_ok_and(|q| q.matching.status == Some(MessageStatus::DispatchFailed)));
    }

    #[test]
    fn a_bad_or_repeated_field_is_refused() {
        let status = |fields: &[(&str, &str)]| {
            listing_of(form(fields)).map(|_| ()).map_err(|e| {
                use axum::response::IntoResponse;
                e.into_response().status().as_u16()
            })
        };
        assert_eq!(status(&[("status", "nope")]), Err(422));
        assert_eq!(status(&[("q", ""), ("q", "x")]), Err(400));
    }
}
