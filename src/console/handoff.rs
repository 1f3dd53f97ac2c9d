//! A person stepping in from the console (docs/console.md#human-handoff): the panel on a
//! conversation's page (take over, answer, hand back), the held list, and the forms' POSTs,
//! each running the admin API's own function and redirecting back (POST, redirect, GET).

use askama::Template;
use axum::extract::State;
use axum::response::{IntoResponse, Redirect};
use axum::Form;
use serde::Deserialize;

use super::error::PageResult;
use super::html::when;
use super::html::{query_value, RenderPage};
use super::pages::ok_page;
use super::session::SignedIn;
use crate::admin::conversations::{self, Person, PersonMessageIn};
use crate::admin::messages::Who;
use crate::db::audit::Actor;
use crate::db::holds::Hold;
use crate::db::inbox::InboxRow;
use crate::domain::{ConversationKey, ConversationOf, TenantId};
use crate::error::AppError;
use crate::http::state::AppState;

/// The conversation id of a page (`user:…` or the sender's key).
pub fn conversation_of(who: &Who) -> String {
    match who {
        Who::User(user) => ConversationKey::user(user).into(),
        Who::Sender(key) => key.clone(),
    }
}

pub fn page_of(conversation: &str) -> String {
    match ConversationOf::parse(conversation) {
        Some(ConversationOf::User(user)) => format!("/console/conversation?user_id={}", query_value(user)),
        _ => format!("/console/conversation?sender={}", query_value(conversation)),
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
        Ok(_) => Ok(Redirect::to(&format!("{}#end", page_of(&form.conversation))).into_response()),
        Err(AppError::Unprocessable(reason)) => Ok(not_posted(&form.conversation, &reason)),
        Err(err) => Err(err.into()),
    }
}

/// An answer refused for what it says (its text or choices): the reason, and the way back
/// to the conversation, whose browser history still holds what was typed.
fn not_posted(conversation: &str, reason: &str) -> axum::response::Response {
    let text = format!("Not sent: {reason}");
    let back = page_of(conversation);
    let body = super::html::Alert {
        text: &text,
        back: &back,
        back_label: "Back to the conversation",
    }
    .render_page();
    super::html::respond(
        axum::http::StatusCode::UNPROCESSABLE_ENTITY,
        super::html::page("Answer not sent", None, &body),
    )
}

/// The inbox: held conversations, those whose user waits first (`db::inbox`).
pub async fn held(State(state): State<AppState>, signed_in: SignedIn) -> PageResult {
    let mut tx = crate::db::TenantTx::begin(&state.pool, signed_in.session.tenant)
        .await
        .map_err(AppError::from)?;
    let mut rows = crate::db::inbox::list(&mut tx, INBOX_MAX + 1)
        .await
        .map_err(AppError::from)?;
    tx.commit().await.map_err(AppError::from)?;
    let more = rows.len() as i64 > INBOX_MAX;
    rows.truncate(INBOX_MAX as usize);
    let now = chrono::Utc::now();
    let body = HeldHtml {
        rows: rows.iter().map(|row| inbox_row(row, now)).collect(),
        more,
    }
    .render_page();
    ok_page("/console/held", "Held conversations", &signed_in, &body)
}

const INBOX_MAX: i64 = 200;

struct InboxView {
    href: String,
    conversation: String,
    name: String,
    unlinked: bool,
    /// How long the user has waited, when they wait.
    waiting: Option<String>,
    /// The latest turn is an answer (a person's or the agent's).
    answered: bool,
    by: String,
    since: String,
    last: Option<String>,
    last_who: &'static str,
    reason: Option<String>,
}

#[derive(Template)]
#[template(path = "console/held.html")]
struct HeldHtml {
    rows: Vec<InboxView>,
    more: bool,
}

/// A linked user by their id; an unlinked sender by their platform and account, so two
/// strangers are told apart (before any turn, by the account in the conversation's id).
fn inbox_name(row: &InboxRow) -> String {
    if let Some(user) = &row.hold.user_id {
        return user.clone();
    }
    match (&row.platform, &row.platform_user_id) {
        (Some(platform), Some(account)) => format!("{platform} {account}"),
        _ => {
            let account = row.hold.conversation.rsplit(':').next().unwrap_or_default();
            format!("unlinked sender {account}")
        }
    }
}

fn inbox_row(row: &InboxRow, now: chrono::DateTime<chrono::Utc>) -> InboxView {
    let hold = &row.hold;
    let waiting = row
        .waiting
        .then(|| waited(now - row.waiting_since.or(row.last_at).unwrap_or(now)));
    InboxView {
        href: format!("{}#end", page_of(&hold.conversation)),
        conversation: hold.conversation.clone(),
        name: inbox_name(row),
        unlinked: hold.user_id.is_none(),
        waiting,
        answered: matches!(row.last_origin.as_deref(), Some("person" | "agent")),
        by: if hold.by_agent {
            "the agent asked for a person".to_owned()
        } else {
            format!("held by {}", hold.held_by)
        },
        since: when(hold.held_at),
        last: row
            .last_text
            .as_deref()
            .map(|text| match row.last_origin.as_deref() {
                // An answer is Markdown: its words, without the markers.
                Some("person" | "agent") => first_line(&super::markdown::to_text(text)),
                _ => first_line(text),
            }),
        last_who: match row.last_origin.as_deref() {
            Some("person") => "Person",
            Some("agent") => "Agent",
            _ => "User",
        },
        reason: hold.reason.clone(),
    }
}

/// The first line of a message, at most 120 characters.
fn first_line(text: &str) -> String {
    let line = text.trim().lines().next().unwrap_or_default();
    super::html::excerpt(line, 120)
}

/// "under a minute", "12 min", "3 h 5 min", "2 days".
fn waited(for_: chrono::TimeDelta) -> String {
    let minutes = for_.num_minutes().max(0);
    match minutes {
        0 => "under a minute".to_owned(),
        1..60 => format!("{minutes} min"),
        60..1440 => format!("{} h {} min", minutes / 60, minutes % 60),
        _ if minutes < 2880 => "1 day".to_owned(),
        _ => format!("{} days", minutes / 1440),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_reads_in_minutes_hours_or_days() {
        let wait = |m| waited(chrono::TimeDelta::minutes(m));
        assert_eq!(wait(0), "under a minute");
        assert_eq!(wait(12), "12 min");
        assert_eq!(wait(185), "3 h 5 min");
        assert_eq!(wait(1500), "1 day");
        assert_eq!(wait(3 * 1440), "3 days");
    }

    #[test]
    fn the_inbox_shows_a_messages_first_line() {
        assert_eq!(first_line("  Hello\nsecond line"), "Hello");
        assert_eq!(first_line(""), "");
    }
}
