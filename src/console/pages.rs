//! The pages' bodies, built from the admin API's output types.

use std::fmt::Write;

use crate::admin::messages::{MessageDetailOut, MessageOut, MessagePage, MessagesQuery};
use crate::api_schema::MESSAGE_STATUSES;
use crate::domain::{MessageStatus, TurnOrigin};

use axum::http::StatusCode;

use super::choices;
use super::error::PageResult;
use super::html::{self, badge, esc, excerpt, page, query_value, when};
use super::reactions;
use super::session::SignedIn;

fn nav(signed_in: &SignedIn) -> html::Nav<'_> {
    html::Nav {
        key_prefix: &signed_in.session.key_prefix,
        csrf: &signed_in.session.csrf,
    }
}

pub fn ok_page(title: &str, signed_in: &SignedIn, body: &str) -> PageResult {
    Ok(html::respond(
        StatusCode::OK,
        html::page(title, Some(&nav(signed_in)), body),
    ))
}

pub fn sign_in(error: Option<&str>) -> String {
    let error = error
        .map(|e| format!(r#"<p class="alert" id="error">{}</p>"#, esc(e)))
        .unwrap_or_default();
    let body = format!(
        r#"{error}<form method="post" action="/console/sign-in" class="signin">
<label for="key">Tenant admin key</label>
<input id="key" name="key" type="password" autocomplete="off" required placeholder="cbk_…">
<button type="submit" id="sign-in">Sign in</button></form>
<p class="empty">Keys are issued by the operator (<code>channel-bridge admin keys issue</code>).</p>"#
    );
    page("Sign in", None, &body)
}

fn who(message: &MessageOut) -> String {
    match &message.user_id {
        Some(user) => esc(user),
        None => format!("{} (unlinked)", esc(&message.platform_user_id)),
    }
}

pub(super) fn action_form(message: &MessageOut, csrf: &str) -> String {
    let (action, label) = match message.status.as_str() {
        "dispatch_failed" => ("redispatch", "Redispatch"),
        "delivery_failed" => ("resend", "Resend"),
        _ => return String::new(),
    };
    format!(
        r#"<form method="post" action="/console/turns/{id}/{action}"><input type="hidden" name="csrf" value="{csrf}"><button type="submit" class="{action}">{label}</button></form>"#,
        id = esc(&message.id.to_string()),
        csrf = esc(csrf),
    )
}

fn turn_card(message: &MessageOut, csrf: Option<&str>) -> String {
    let id = esc(&message.id.to_string());
    let answer = message
        .response_content
        .as_deref()
        .map(|r| format!(r#"<p class="answer">↳ {}</p>"#, esc(&excerpt(r, 200))))
        .unwrap_or_default();
    let error = message
        .last_error
        .as_deref()
        .map(|e| format!(r#"<p class="error">{}</p>"#, esc(&excerpt(e, 200))))
        .unwrap_or_default();
    let action = csrf.map(|csrf| action_form(message, csrf)).unwrap_or_default();
    format!(
        r#"<div class="card turn" id="turn-{id}" data-status="{status}">
<div class="meta">{badge}<span>{who}</span><span>{platform}</span><span>{at}</span><a href="/console/turns/{id}">details</a></div>
<p class="text">{text}</p>{answer}{error}{action}</div>"#,
        status = esc(&message.status),
        badge = badge(&message.status),
        who = who(message),
        platform = esc(&message.platform),
        at = when(message.received_at),
        text = card_text(message),
    )
}

/// What was asked; a tap says so (which answer it was made on: the turn's page).
fn card_text(message: &MessageOut) -> String {
    match &message.action {
        Some(action) => format!(
            r#"Tapped <span class="chip">{}</span> on an answer"#,
            esc(&action.label)
        ),
        None => esc(&excerpt(&message.request_content, 300)),
    }
}

pub fn turns(query: &MessagesQuery, list: &MessagePage) -> String {
    let q = query.q.as_deref().unwrap_or_default();
    let matching = &query.matching;
    let mut options = String::from(r#"<option value="">any status</option>"#);
    for status in MESSAGE_STATUSES {
        let selected = if Some(status) == matching.status {
            " selected"
        } else {
            ""
        };
        let _ = write!(options, r#"<option value="{status}"{selected}>{status}</option>"#);
    }
    let user = matching
        .user_id
        .as_deref()
        .map(|u| format!(r#"<input type="hidden" name="user_id" value="{}">"#, esc(u)))
        .unwrap_or_default();
    let mut body = format!(
        r#"<form method="get" action="/console/turns" class="filters">{user}
<input type="search" name="q" id="q" value="{q}" placeholder="Search requests and answers">
<select name="status" id="status">{options}</select><button type="submit" id="search">Search</button></form>"#,
        q = esc(q),
    );
    if let Some(user) = &matching.user_id {
        let _ = write!(
            body,
            r#"<p>Turns of <strong>{}</strong> · <a href="/console/turns">everyone</a></p>"#,
            esc(user)
        );
    }
    if list.items.is_empty() {
        body.push_str(r#"<p class="empty" id="no-turns">No turns match.</p>"#);
    }
    for message in &list.items {
        body.push_str(&turn_card(message, None));
    }
    if let Some(cursor) = &list.next_cursor {
        let mut link = format!("/console/turns?cursor={}", query_value(cursor));
        for (name, value) in [
            ("q", query.q.as_deref()),
            ("status", matching.status.map(MessageStatus::as_str)),
            ("user_id", matching.user_id.as_deref()),
        ] {
            if let Some(value) = value {
                let _ = write!(link, "&{name}={}", query_value(value));
            }
        }
        let _ = write!(body, r#"<p><a href="{}">Older turns →</a></p>"#, esc(&link));
    }
    body
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
    let mut body = String::new();
    match queued {
        Some(0) => body.push_str(r#"<p class="notice" id="queued">Nothing to queue: the turn is already queued or has nothing left to deliver.</p>"#),
        Some(_) => body.push_str(r#"<p class="notice" id="queued">Queued: the worker picks it up shortly. Reload to follow it.</p>"#),
        None => {}
    }
    body.push_str(&facts(m, csrf));
    match &m.action {
        Some(action) => {
            let _ = write!(
                body,
                r#"<h2>Tap</h2><div class="card" id="request">{}</div>"#,
                choices::tap(action, tapped_answer)
            );
        }
        None => {
            let _ = write!(
                body,
                r#"<h2>Request</h2><pre id="request">{}</pre>"#,
                esc(&m.request_content)
            );
        }
    }
    let response = m
        .response_content
        .as_deref()
        .map(esc)
        .unwrap_or_else(|| r#"<span class="empty">No answer.</span>"#.into());
    let _ = write!(
        body,
        r#"<h2>Answer, as the agent gave it</h2><pre id="response">{response}</pre>"#
    );
    body.push_str(&reactions_section(detail));
    body.push_str(&reply_parts(detail));
    body
}

/// People's reactions to the answer, where it was posted.
fn reactions_section(detail: &MessageDetailOut) -> String {
    if detail.reactions.is_empty() && detail.reply_parts.is_empty() {
        return String::new();
    }
    let list = reactions::of_answer(&detail.reactions, reactions::several(&detail.reply_parts));
    let list = if list.is_empty() {
        r#"<p class="empty">None.</p>"#.to_owned()
    } else {
        list
    };
    format!(r#"<h2>Reactions</h2><section class="card" id="reactions">{list}</section>"#)
}

fn written_by(m: &MessageOut) -> String {
    match (m.origin, &m.author) {
        (TurnOrigin::User, _) if m.action.is_some() => {
            "the user, tapping a choice (answered by the agent)".to_owned()
        }
        (TurnOrigin::User, _) => "the user (answered by the agent)".to_owned(),
        (TurnOrigin::Person, Some(author)) => format!("a person: {}", esc(author)),
        (TurnOrigin::Person, None) => "a person".to_owned(),
        (TurnOrigin::Agent, _) => "the agent, writing first".to_owned(),
    }
}

/// The turn's card of facts, with its recovery button.
fn facts(m: &MessageOut, csrf: &str) -> String {
    let user_link = m
        .user_id
        .as_deref()
        .map(|u| {
            format!(
                r#" · <a href="/console/conversation?user_id={}">their conversation</a>"#,
                esc(&query_value(u))
            )
        })
        .unwrap_or_default();
    let optional = |value: &Option<String>| value.as_deref().map(esc).unwrap_or_else(|| "—".into());
    let optional_at = |at: Option<chrono::DateTime<chrono::Utc>>| at.map(when).unwrap_or_else(|| "—".into());
    format!(
        r#"<div class="card"><dl>
<dt>Status</dt><dd id="status" data-status="{status}">{badge}</dd>
<dt>Written by</dt><dd id="origin" data-origin="{origin}">{written_by}</dd>
<dt>From</dt><dd>{who}{user_link}</dd>
<dt>Platform</dt><dd>{platform} · chat {chat}{thread}</dd>
<dt>Received</dt><dd>{received}</dd><dt>Answered</dt><dd>{completed}</dd><dt>Delivered</dt><dd>{delivered}</dd>
<dt>Attempts</dt><dd>{attempts}</dd><dt>Last error</dt><dd class="error">{error}</dd>
<dt>Id</dt><dd>{id}</dd></dl>{action}</div>"#,
        status = esc(&m.status),
        badge = badge(&m.status),
        origin = m.origin.as_str(),
        written_by = written_by(m),
        who = who(m),
        platform = esc(&m.platform),
        chat = esc(&m.chat_id),
        thread = m
            .thread_id
            .as_deref()
            .map(|t| format!(" · thread {}", esc(t)))
            .unwrap_or_default(),
        received = when(m.received_at),
        completed = optional_at(m.completed_at),
        delivered = optional_at(m.delivered_at),
        attempts = m.attempts,
        error = optional(&m.last_error),
        id = esc(&m.id.to_string()),
        action = action_form(m, csrf),
    )
}

/// Each part as posted, with the choices it carried (and which was chosen) and, for an
/// edit, the part whose message it changed.
fn reply_parts(detail: &MessageDetailOut) -> String {
    let mut body = String::from("<h2>Reply parts, as posted</h2>");
    if detail.reply_parts.is_empty() {
        body.push_str(r#"<p class="empty">None.</p>"#);
    }
    for part in &detail.reply_parts {
        let _ = write!(
            body,
            r#"<div class="card part" data-status="{status}" id="part-{index}"><div class="meta">#{index} {badge}{edit}<span>{platform_id}</span><span>{delivery}</span><span>{attempts} attempt(s)</span><span>{sent}</span></div>
{what}<p class="text">{content}</p>{choices}{error}</div>"#,
            status = esc(&part.status),
            index = part.part_index,
            badge = badge(&part.status),
            edit = choices::edit_note(part),
            platform_id = part
                .platform_message_id
                .as_deref()
                .map(|id| format!("id {}", esc(id)))
                .unwrap_or_default(),
            delivery = part.delivery_status.as_deref().map(badge).unwrap_or_default(),
            attempts = part.attempts,
            sent = part.sent_at.map(when).unwrap_or_default(),
            what = what_part(part),
            content = esc(&part.content),
            choices = choices::offered(part),
            error = part
                .last_error
                .as_deref()
                .map(|e| format!(r#"<p class="error">{}</p>"#, esc(e)))
                .unwrap_or_default(),
        );
    }
    body
}

/// What a part posts when it is not a message of text: a file (its content the caption),
/// or a reaction on the user's message (its content the emoji). The file's URL is shown,
/// not linked: it is the agent's, not the console's.
fn what_part(part: &crate::admin::messages::ReplyPartOut) -> String {
    if part.reaction {
        return r#"<p class="meta">A reaction on the user's message:</p>"#.into();
    }
    let Some(file) = &part.file else {
        return String::new();
    };
    let source = match (&file.url, file.size) {
        (Some(url), _) => format!("from {}", esc(url)),
        (None, Some(size)) => format!("{size} bytes, given inline"),
        (None, None) => String::new(),
    };
    format!(
        r#"<p class="file">File <strong>{name}</strong> ({mime}), {source}</p>"#,
        name = esc(&file.name),
        mime = esc(&file.mime),
    )
}

pub fn failed(dispatch: &MessagePage, delivery: &MessagePage, csrf: &str) -> String {
    let mut body = String::new();
    for (title, id, list) in [
        (
            "The agent did not answer (dispatch_failed)",
            "dispatch-failed",
            dispatch,
        ),
        (
            "The answer did not reach the user (delivery_failed)",
            "delivery-failed",
            delivery,
        ),
    ] {
        let _ = write!(body, r#"<h2>{title}</h2><section id="{id}">"#);
        if list.items.is_empty() {
            body.push_str(r#"<p class="empty">None.</p>"#);
        }
        for message in &list.items {
            body.push_str(&turn_card(message, Some(csrf)));
        }
        if list.next_cursor.is_some() {
            let _ = write!(
                body,
                r#"<p><a href="/console/turns?status={}">More…</a></p>"#,
                id.replace('-', "_")
            );
        }
        body.push_str("</section>");
    }
    body
}
