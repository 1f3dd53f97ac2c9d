//! A conversation's page as a chat: the turns oldest first, each turn as the user's bubble
//! and the answer's (the agent's or a person's, its Markdown rendered by `markdown.rs`),
//! their facts one click away in a `<details>`, earlier turns a page up, the answer box
//! under the transcript. The API gives a page newest first; it is shown the other way up.

use askama::Template;

use super::choices::{Offered, Tap};
use super::html::{action_form, badge, query_value, when, ActionForm, Badge, RenderPage};
use super::parts::PartFacts;
use super::reactions::Reactions;
use crate::admin::messages::{ConversationPage, ConversationTurn, MessageOut, Who};
use crate::db::holds::Hold;
use crate::domain::{MessageId, TurnOrigin};

/// What one side said in a turn.
struct Said {
    /// `user`, `agent` or `person`: which side of the chat, and its colour.
    side: &'static str,
    name: String,
    at: String,
    at_key: String,
    /// Plain text, escaped by the template (what the user wrote).
    text: Option<String>,
    /// Markup: the rendered Markdown of an answer (`markdown.rs`).
    html: Option<String>,
    tap: Option<Tap>,
    /// Under an answer: the choices it offered, the reactions to it.
    offered: Vec<Offered>,
    reactions: Option<Reactions>,
    held: bool,
}

struct TurnView {
    id: String,
    status: String,
    platform: String,
    account: String,
    origin: &'static str,
    tap: bool,
    /// Whether the turn has an answer (the agent's or a person's).
    answered: bool,
    said: Vec<Said>,
    /// Why a turn has no answer, shown in the chat.
    error: Option<String>,
    last_error: Option<String>,
    summary: String,
    badge: Badge,
    attempts: i32,
    parts: Vec<PartFacts>,
    action: Option<ActionForm>,
}

struct HoldView {
    by: String,
    since: String,
    reason: Option<String>,
}

#[derive(Template)]
#[template(path = "console/conversation.html")]
struct ConversationHtml {
    user_query: Option<String>,
    accounts: Vec<String>,
    hold: Option<HoldView>,
    csrf: String,
    conversation: String,
    key: MessageId,
    turns: Vec<TurnView>,
    older: Option<String>,
    newer: bool,
    first_page: String,
    poll: bool,
    text_max: usize,
    choices_max: usize,
}

pub struct Shown<'a> {
    pub who: &'a Who,
    pub conversation: &'a str,
    pub hold: Option<&'a Hold>,
    pub csrf: &'a str,
    /// Whether this is the newest page (no cursor).
    pub first: bool,
}

pub fn render(shown: &Shown, page: &ConversationPage) -> String {
    let (name, value) = match shown.who {
        Who::User(user) => ("user_id", user),
        Who::Sender(key) => ("sender", key),
    };
    let first_page = format!("/console/conversation?{name}={}", query_value(value));
    let older = page
        .next_cursor
        .as_ref()
        .map(|cursor| format!("{first_page}&cursor={}#end", query_value(cursor)));
    let turns = page
        .turns
        .iter()
        .rev()
        .map(|turn| turn_view(turn, page, shown.csrf))
        .collect();
    ConversationHtml {
        user_query: match shown.who {
            Who::User(user) => Some(query_value(user)),
            Who::Sender(_) => None,
        },
        accounts: page
            .links
            .iter()
            .map(|l| format!("{} {}", l.platform, l.platform_user_id))
            .collect(),
        hold: shown.hold.map(hold_view),
        csrf: shown.csrf.to_owned(),
        conversation: shown.conversation.to_owned(),
        key: MessageId::new(),
        turns,
        older,
        newer: !shown.first,
        first_page: format!("{first_page}#end"),
        poll: shown.first,
        text_max: crate::admin::conversations::TEXT_MAX,
        choices_max: crate::choices::MAX_CHOICES,
    }
    .render_page()
}

fn hold_view(hold: &Hold) -> HoldView {
    HoldView {
        by: if hold.by_agent {
            "the agent asked for a person".to_owned()
        } else {
            format!("held by {}", hold.held_by)
        },
        since: when(hold.held_at),
        reason: hold.reason.clone(),
    }
}

/// The user's name in the chat: their user id, or their platform account.
fn user_name(m: &MessageOut) -> String {
    match &m.user_id {
        Some(user) => user.clone(),
        None => format!("{} {}", m.platform, m.address.platform_user_id),
    }
}

fn said(side: &'static str, name: String, m: &MessageOut) -> Said {
    Said {
        side,
        name,
        at: when(m.received_at),
        at_key: m.received_at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        text: None,
        html: None,
        tap: None,
        offered: Vec::new(),
        reactions: None,
        held: false,
    }
}

/// The user's words (or tap), then the answer: the agent's, or a person's.
fn turn_view(turn: &ConversationTurn, page: &ConversationPage, csrf: &str) -> TurnView {
    let m = &turn.message;
    let mut said_list = Vec::new();
    if m.origin == TurnOrigin::User {
        let mut asked = said("user", user_name(m), m);
        asked.held = m.status == "held";
        match &m.action {
            Some(action) => {
                let answers = page
                    .turns
                    .iter()
                    .map(|t| (t.message.id, t.message.response_content.as_deref()));
                let answer = super::choices::answer_in(action, answers);
                asked.tap = Some(super::choices::tap(action, answer));
            }
            None => asked.text = Some(m.request_content.clone()),
        }
        said_list.push(asked);
    }
    if let Some(answer) = answer_of(turn) {
        said_list.push(answer);
    }
    let unanswered = m.response_content.is_none();
    TurnView {
        id: m.id.to_string(),
        status: m.status.clone(),
        platform: m.platform.clone(),
        account: m.address.platform_user_id.clone(),
        origin: m.origin.as_str(),
        tap: m.action.is_some(),
        answered: !unanswered,
        said: said_list,
        error: m.last_error.clone().filter(|_| unanswered),
        last_error: m.last_error.clone(),
        summary: format!("{} · {} · {}", m.status, m.platform, attempts(m.attempts)),
        badge: badge(&m.status),
        attempts: m.attempts,
        parts: turn.reply_parts.iter().map(PartFacts::of).collect(),
        action: action_form(m.id, &m.status, csrf),
    }
}

fn attempts(n: i32) -> String {
    match n {
        1 => "1 attempt".to_owned(),
        n => format!("{n} attempts"),
    }
}

/// The answer's bubble, with the choices it offered and the reactions to it.
fn answer_of(turn: &ConversationTurn) -> Option<Said> {
    let m = &turn.message;
    let answer = m.response_content.as_deref()?;
    let (side, name) = match (m.origin, &m.author) {
        (TurnOrigin::Person, Some(author)) => ("person", format!("Person · {author}")),
        (TurnOrigin::Person, None) => ("person", "Person".to_owned()),
        (TurnOrigin::Agent, _) => ("agent", "Agent (wrote first)".to_owned()),
        (TurnOrigin::User, _) => ("agent", "Agent".to_owned()),
    };
    let mut bubble = said(side, name, m);
    if let Some(at) = m.completed_at.filter(|_| m.origin == TurnOrigin::User) {
        bubble.at = when(at);
        bubble.at_key = at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    }
    bubble.html = Some(super::markdown::to_html(answer));
    bubble.offered = turn
        .reply_parts
        .iter()
        .filter_map(super::choices::offered)
        .collect();
    let several = super::reactions::several(&turn.reply_parts);
    bubble.reactions = super::reactions::of_answer(&turn.reactions, several);
    Some(bubble)
}
