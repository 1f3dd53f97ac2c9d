//! A person stepping in from the console (docs/console.md#human-handoff): the panel on a
//! conversation's page (take over, answer, hand back), the held list, and the forms' POSTs,
//! each running the admin API's own function and redirecting back (POST, redirect, GET).

use std::fmt::Write;

use axum::extract::State;
use axum::response::{IntoResponse, Redirect};
use axum::Form;
use serde::Deserialize;

use super::error::PageResult;
use super::html::when;
use super::html::{esc, query_value};
use super::pages::ok_page;
use super::session::SignedIn;
use crate::admin::conversations::{self, Person, PersonMessageIn};
use crate::admin::messages::Who;
use crate::db::audit::Actor;
use crate::db::holds::Hold;
use crate::domain::{MessageId, TenantId};
use crate::error::AppError;
use crate::http::state::AppState;

/// The conversation id of a page (`user:…` or the sender's key).
pub fn conversation_of(who: &Who) -> String {
    match who {
        Who::User(user) => format!("user:{user}"),
        Who::Sender(key) => key.clone(),
    }
}

pub fn page_of(conversation: &str) -> String {
    match conversation.strip_prefix("user:") {
        Some(user) => format!("/console/conversation?user_id={}", query_value(user)),
        None => format!("/console/conversation?sender={}", query_value(conversation)),
    }
}

pub async fn hold_of(
    state: &AppState,
    tenant: TenantId,
    conversation: &str,
) -> Result<Option<Hold>, AppError> {
    let mut tx = crate::db::TenantTx::begin(&state.pool, tenant).await?;
    let hold = crate::db::holds::get(&mut tx, conversation).await?;
    tx.commit().await?;
    Ok(hold)
}

/// Above the turns: who answers the conversation, and the forms to change that or write.
/// The answer form carries a fresh idempotency key, so a double submit posts once.
pub fn panel(conversation: &str, hold: Option<&Hold>, csrf: &str) -> String {
    let csrf = esc(csrf);
    let id = esc(conversation);
    let state = match hold {
        Some(hold) => {
            let reason = hold
                .reason
                .as_deref()
                .map(|r| format!(" — {}", esc(r)))
                .unwrap_or_default();
            let by = if hold.by_agent {
                "the agent asked for a person".to_owned()
            } else {
                format!("held by {}", esc(&hold.held_by))
            };
            format!(
                r#"<p class="alert" id="held">A person answers this conversation ({by} since {at}{reason}): the user's turns are recorded, not sent to the agent.</p>
<form method="post" action="/console/conversation/hand-back" class="inline"><input type="hidden" name="csrf" value="{csrf}"><input type="hidden" name="conversation" value="{id}"><button type="submit" id="hand-back">Hand back to the agent</button></form>"#,
                at = when(hold.held_at),
            )
        }
        None => format!(
            r#"<p class="empty" id="agent-answers">The agent answers this conversation.</p>
<form method="post" action="/console/conversation/take-over" class="inline"><input type="hidden" name="csrf" value="{csrf}"><input type="hidden" name="conversation" value="{id}"><label>Reason <small>optional, shown in the held list</small> <input type="text" name="reason" id="take-over-reason" maxlength="500"></label> <button type="submit" id="take-over" class="danger">Take over</button></form>"#
        ),
    };
    format!(
        r#"<section class="card" id="handoff">{state}
<form method="post" action="/console/conversation/messages" class="stack" id="answer-form"><input type="hidden" name="csrf" value="{csrf}"><input type="hidden" name="conversation" value="{id}"><input type="hidden" name="key" value="{key}">
<label>Answer as a person <small>Markdown; posted threaded to the user's latest message{takes}.</small><textarea name="text" id="answer" rows="3" required maxlength="{max}"></textarea></label>
<label>Choices <small>Optional: buttons under the answer, one label per line (at most {most}); <code>Label | https://…</code> is a link. The user's tap is a turn of theirs, held while you hold the conversation.</small><textarea name="choices" id="choices" rows="2"></textarea></label>
<button type="submit" id="send">Send</button></form></section>"#,
        key = MessageId::new(),
        max = conversations::TEXT_MAX,
        most = crate::choices::MAX_CHOICES,
        takes = if hold.is_some() {
            ""
        } else {
            "; sending takes the conversation over"
        },
    )
}

#[derive(Deserialize)]
pub struct ConversationForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    conversation: String,
    /// Why a person takes the conversation over (the take-over form only).
    #[serde(default)]
    reason: String,
}

#[derive(Deserialize)]
pub struct AnswerForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    conversation: String,
    #[serde(default)]
    text: String,
    /// One choice per line (`choices::from_field`).
    #[serde(default)]
    choices: String,
    #[serde(default)]
    key: String,
}

pub async fn take_over(
    State(state): State<AppState>,
    signed_in: SignedIn,
    Form(form): Form<ConversationForm>,
) -> PageResult {
    signed_in.check_csrf(&form.csrf)?;
    let person = Person::of_key(&state.pool, signed_in.key_id).await?;
    conversations::take_over(
        &state.pool,
        signed_in.session.tenant,
        &person,
        &form.conversation,
        Some(form.reason.trim()).filter(|reason| !reason.is_empty()),
    )
    .await?;
    Ok(Redirect::to(&page_of(&form.conversation)).into_response())
}

pub async fn hand_back(
    State(state): State<AppState>,
    signed_in: SignedIn,
    Form(form): Form<ConversationForm>,
) -> PageResult {
    signed_in.check_csrf(&form.csrf)?;
    let actor = Actor::ApiKey(signed_in.key_id);
    conversations::hand_back(&state, signed_in.session.tenant, actor, &form.conversation).await?;
    Ok(Redirect::to(&page_of(&form.conversation)).into_response())
}

pub async fn answer(
    State(state): State<AppState>,
    signed_in: SignedIn,
    Form(form): Form<AnswerForm>,
) -> PageResult {
    signed_in.check_csrf(&form.csrf)?;
    let person = Person::of_key(&state.pool, signed_in.key_id).await?;
    let choices = match super::choices::from_field(&form.choices) {
        Ok(choices) => choices,
        Err(err) => return Ok(not_posted(&form.conversation, &err.to_string())),
    };
    let input = PersonMessageIn {
        content: form.text,
        idempotency_key: Some(form.key).filter(|k| !k.is_empty()),
        choices,
        choices_reusable: false,
        attachments: Vec::new(),
    };
    let posted = conversations::post_person_message(
        &state,
        signed_in.session.tenant,
        &person,
        &form.conversation,
        &input,
    )
    .await;
    match posted {
        Ok(_) => Ok(Redirect::to(&page_of(&form.conversation)).into_response()),
        Err(AppError::Unprocessable(reason)) => Ok(not_posted(&form.conversation, &reason)),
        Err(err) => Err(err.into()),
    }
}

/// An answer refused for what it says (its text or choices): the reason, and the way back
/// to the conversation, whose browser history still holds what was typed.
fn not_posted(conversation: &str, reason: &str) -> axum::response::Response {
    let body = format!(
        r#"<p class="alert" id="error" role="alert">Not sent: {}</p><p><a href="{}" id="back">Back to the conversation</a></p>"#,
        esc(reason),
        esc(&page_of(conversation)),
    );
    super::html::respond(
        axum::http::StatusCode::UNPROCESSABLE_ENTITY,
        super::html::page("Answer not sent", None, &body),
    )
}

/// The held conversations, oldest hold first; those whose user waits come with a mark.
pub async fn held(State(state): State<AppState>, signed_in: SignedIn) -> PageResult {
    let out = conversations::held(&state.pool, signed_in.session.tenant).await?;
    let mut body = String::new();
    if out.conversations.is_empty() {
        body.push_str(
            r#"<p class="empty" id="none-held">No conversation is held: the agent answers every one.</p>"#,
        );
    }
    for held in &out.conversations {
        let hold = &held.hold;
        let who = match hold.conversation.strip_prefix("user:") {
            Some(user) => esc(user),
            None => "an unlinked sender".to_owned(),
        };
        let by = if hold.by_agent {
            "the agent asked for a person".to_owned()
        } else {
            format!("held by {}", esc(&hold.held_by))
        };
        let waiting = if held.waiting {
            r#"<span class="badge bad">waiting</span>"#
        } else {
            r#"<span class="badge ok">answered</span>"#
        };
        let _ = write!(
            body,
            r#"<a class="card held" href="{href}" data-conversation="{id}"><span class="who">{who}</span>
<span class="meta">{waiting}<span>{by}</span><span>since {at}</span></span>{reason}</a>"#,
            href = esc(&page_of(&hold.conversation)),
            id = esc(&hold.conversation),
            at = when(hold.held_at),
            reason = hold
                .reason
                .as_deref()
                .map(|r| format!(r#"<p class="text">{}</p>"#, esc(r)))
                .unwrap_or_default(),
        );
    }
    if out.more {
        body.push_str(r#"<p class="empty">More are held than shown here (the API lists them too).</p>"#);
    }
    ok_page("Held conversations", &signed_in, &body)
}
