//! The pages' bodies, built from the admin API's output types into their templates
//! (`templates/console/`).

use askama::Template;
use axum::http::StatusCode;

use crate::admin::messages::{MessageDetailOut, MessageOut, MessagePage, MessagesQuery, ReplyPartOut};
use crate::api_schema::MESSAGE_STATUSES;
use crate::domain::{MessageStatus, TurnOrigin};

use super::choices::{self, Offered, Tap};
use super::error::PageResult;
use super::html::{self, action_form, badge, excerpt, query_value, when, ActionForm, Badge, RenderPage};
use super::parts::PartFacts;
use super::reactions::{self, Reactions};
use super::session::SignedIn;

fn nav<'a>(signed_in: &'a SignedIn, here: &'a str) -> html::Nav<'a> {
    html::Nav {
        key_prefix: &signed_in.session.key_prefix,
        csrf: &signed_in.session.csrf,
        here,
        held: signed_in.held,
    }
}

/// `here`: the page's entry in the navigation (`html::NAV`).
pub fn ok_page(here: &str, title: &str, signed_in: &SignedIn, body: &str) -> PageResult {
    Ok(html::respond(
        StatusCode::OK,
        html::page(title, Some(&nav(signed_in, here)), body),
    ))
}

/// A page that uses a laptop's whole width (the conversation's chat).
pub fn wide_page(here: &str, title: &str, signed_in: &SignedIn, body: &str) -> PageResult {
    Ok(html::respond(
        StatusCode::OK,
        html::layout(title, Some(&nav(signed_in, here)), body, true),
    ))
}

#[derive(Template)]
#[template(path = "console/sign_in.html")]
struct SignInHtml<'a> {
    error: Option<&'a str>,
}

pub fn sign_in(error: Option<&str>) -> String {
    html::page("Sign in", None, &SignInHtml { error }.render_page())
}

/// The user's name: their user id, or their account when they are not linked.
fn who(message: &MessageOut) -> String {
    match &message.user_id {
        Some(user) => user.clone(),
        None => format!("{} (unlinked)", message.address.platform_user_id),
    }
}

/// A turn in a list.
struct Card {
    id: uuid::Uuid,
    status: String,
    badge: Badge,
    who: String,
    platform: String,
    at: String,
    /// A tap's label: the card says it was one (which answer it was made on: the turn's page).
    tapped: Option<String>,
    text: String,
    answer: Option<String>,
    error: Option<String>,
    action: Option<ActionForm>,
}

fn card(message: &MessageOut, csrf: Option<&str>) -> Card {
    Card {
        id: message.id,
        status: message.status.clone(),
        badge: badge(&message.status),
        who: who(message),
        platform: message.platform.clone(),
        at: when(message.received_at),
        tapped: message.action.as_ref().map(|a| a.label.clone()),
        text: excerpt(&message.request_content, 300),
        answer: message.response_content.as_deref().map(|r| excerpt(r, 200)),
        error: message.last_error.as_deref().map(|e| excerpt(e, 200)),
        action: csrf.and_then(|csrf| action_form(message.id, &message.status, csrf)),
    }
}

#[derive(Template)]
#[template(path = "console/turns.html")]
struct TurnsHtml<'a> {
    user: Option<&'a str>,
    q: &'a str,
    statuses: Vec<(&'static str, bool)>,
    cards: Vec<Card>,
    next: Option<String>,
}

pub fn turns(query: &MessagesQuery, list: &MessagePage) -> String {
    let matching = &query.matching;
    let next = list.next_cursor.as_ref().map(|cursor| {
        let mut link = format!("/console/turns?cursor={}", query_value(cursor));
        for (name, value) in [
            ("q", query.q.as_deref()),
            ("status", matching.status.map(MessageStatus::as_str)),
            ("user_id", matching.user_id.as_deref()),
        ] {
            if let Some(value) = value {
                link.push_str(&format!("&{name}={}", query_value(value)));
            }
        }
        link
    });
    TurnsHtml {
        user: matching.user_id.as_deref(),
        q: query.q.as_deref().unwrap_or_default(),
        statuses: MESSAGE_STATUSES
            .iter()
            .map(|&status| (status.as_str(), Some(status) == matching.status))
            .collect(),
        cards: list.items.iter().map(|m| card(m, None)).collect(),
        next,
    }
    .render_page()
}

/// A part of the answer as posted.
struct PartView {
    facts: PartFacts,
    platform_id: Option<String>,
    attempts: i32,
    sent: String,
    reaction: bool,
    /// A file's name, type and where it comes from (its URL shown, not linked: it is the
    /// agent's, not the console's).
    file: Option<(String, String, String)>,
    content: String,
    choices: Option<Offered>,
}

fn part_view(part: &ReplyPartOut) -> PartView {
    PartView {
        facts: PartFacts::of(part),
        platform_id: part.platform_message_id.clone(),
        attempts: part.attempts,
        sent: part.sent_at.map(when).unwrap_or_default(),
        reaction: part.reaction,
        file: part.file.as_ref().map(|file| {
            let source = match (&file.url, file.size) {
                (Some(url), _) => format!("from {url}"),
                (None, Some(size)) => format!("{size} bytes, given inline"),
                (None, None) => String::new(),
            };
            (file.name.clone(), file.mime.clone(), source)
        }),
        content: part.content.clone(),
        choices: choices::offered(part),
    }
}

#[derive(Template)]
#[template(path = "console/turn.html")]
struct TurnHtml<'a> {
    m: &'a MessageOut,
    /// What a recovery button queued, after it was pressed.
    queued: Option<&'static str>,
    badge: Badge,
    origin: &'static str,
    written_by: String,
    who: String,
    user_query: Option<String>,
    received: String,
    completed: String,
    delivered: String,
    action: Option<ActionForm>,
    tap: Option<Tap>,
    show_reactions: bool,
    reactions: Option<Reactions>,
    parts: Vec<PartView>,
}

/// One turn: its facts, what was asked (or tapped), the answer, and the parts as posted.
/// `tapped_answer`: for a tap, the answer text of the turn whose choice it made.
pub fn turn(
    detail: &MessageDetailOut,
    csrf: &str,
    queued: Option<usize>,
    tapped_answer: Option<&str>,
) -> String {
    let m = &detail.message;
    let optional_at = |at: Option<chrono::DateTime<chrono::Utc>>| at.map(when).unwrap_or_else(|| "—".into());
    TurnHtml {
        m,
        queued: queued.map(|n| match n {
            0 => "Nothing to queue: the turn is already queued or has nothing left to deliver.",
            _ => "Queued: the worker picks it up shortly. Reload to follow it.",
        }),
        badge: badge(&m.status),
        origin: m.origin.as_str(),
        written_by: written_by(m),
        who: who(m),
        user_query: m.user_id.as_deref().map(query_value),
        received: when(m.received_at),
        completed: optional_at(m.completed_at),
        delivered: optional_at(m.delivered_at),
        action: action_form(m.id, &m.status, csrf),
        tap: m
            .action
            .as_ref()
            .map(|action| choices::tap(action, tapped_answer)),
        show_reactions: !(detail.reactions.is_empty() && detail.reply_parts.is_empty()),
        reactions: reactions::of_answer(&detail.reactions, reactions::several(&detail.reply_parts)),
        parts: detail.reply_parts.iter().map(part_view).collect(),
    }
    .render_page()
}

fn written_by(m: &MessageOut) -> String {
    match (m.origin, &m.author) {
        (TurnOrigin::User, _) if m.action.is_some() => {
            "the user, tapping a choice (answered by the agent)".to_owned()
        }
        (TurnOrigin::User, _) => "the user (answered by the agent)".to_owned(),
        (TurnOrigin::Person, Some(author)) => format!("a person: {author}"),
        (TurnOrigin::Person, None) => "a person".to_owned(),
        (TurnOrigin::Agent, _) => "the agent, writing first".to_owned(),
    }
}

struct FailedSection {
    title: &'static str,
    id: &'static str,
    status: &'static str,
    cards: Vec<Card>,
    more: bool,
}

#[derive(Template)]
#[template(path = "console/failed.html")]
struct FailedHtml {
    sections: Vec<FailedSection>,
}

pub fn failed(dispatch: &MessagePage, delivery: &MessagePage, csrf: &str) -> String {
    let section = |title, id, status, list: &MessagePage| FailedSection {
        title,
        id,
        status,
        cards: list.items.iter().map(|m| card(m, Some(csrf))).collect(),
        more: list.next_cursor.is_some(),
    };
    FailedHtml {
        sections: vec![
            section(
                "The agent did not answer (dispatch_failed)",
                "dispatch-failed",
                "dispatch_failed",
                dispatch,
            ),
            section(
                "The answer did not reach the user (delivery_failed)",
                "delivery-failed",
                "delivery_failed",
                delivery,
            ),
        ],
    }
    .render_page()
}
