//! The users page (a linked user across their platforms, or an unlinked sender) and each
//! conversation's page. Ordered by user id, not by activity: `db::conversations` says why.

use std::fmt::Write;

use axum::extract::{Query, State};
use serde::Deserialize;

use super::choices;
use super::error::PageResult;
use super::html::when;
use super::html::{badge, esc, excerpt, query_value};
use super::pages::ok_page;
use super::session::SignedIn;
use crate::admin::messages::{self, ConversationPage, ConversationTurn, MessageOut, ReplyPartOut, Who};
use crate::db::conversations::{self, ConversationRow, PageStart, COUNT_CAP};
use crate::domain::TurnOrigin;
use crate::error::AppError;
use crate::http::state::AppState;

const PAGE: i64 = 30;

#[derive(Debug, Default, Deserialize)]
pub struct UsersQuery {
    /// Jump to the users whose id sorts at or after this text.
    from: Option<String>,
    /// The next page: `u.<user id>` or `s.<conversation key>` of the last row shown.
    after: Option<String>,
}

impl UsersQuery {
    fn start(&self) -> Result<PageStart, AppError> {
        if let Some(after) = self.after.as_deref().filter(|a| !a.is_empty()) {
            crate::admin::schema::check_text("after", after, 2048)?;
            return match after.split_once('.') {
                Some(("u", user)) => Ok(PageStart::User {
                    user_id: user.to_owned(),
                    inclusive: false,
                }),
                Some(("s", key)) => Ok(PageStart::Sender {
                    after: key.to_owned(),
                }),
                _ => Err(AppError::Unprocessable("invalid cursor".into())),
            };
        }
        match self.from.as_deref().map(str::trim).filter(|f| !f.is_empty()) {
            Some(from) => {
                crate::admin::schema::check_text("from", from, crate::admin::schema::ID_MAX)?;
                Ok(PageStart::User {
                    user_id: from.to_owned(),
                    inclusive: true,
                })
            }
            None => Ok(PageStart::Start),
        }
    }
}

pub async fn list(
    State(state): State<AppState>,
    signed_in: SignedIn,
    Query(query): Query<UsersQuery>,
) -> PageResult {
    let start = query.start()?;
    let mut tx = crate::db::TenantTx::begin(&state.pool, signed_in.session.tenant)
        .await
        .map_err(AppError::from)?;
    let mut rows = conversations::page(&mut tx, &start, PAGE + 1)
        .await
        .map_err(AppError::from)?;
    tx.commit().await.map_err(AppError::from)?;
    let more = rows.len() as i64 > PAGE;
    rows.truncate(PAGE as usize);
    let body = render_list(&query, &rows, more);
    ok_page("Conversations by user", &signed_in, &body)
}

#[derive(Debug, Default, Deserialize)]
pub struct ConversationQuery {
    user_id: Option<String>,
    /// An unlinked sender's conversation key.
    sender: Option<String>,
    cursor: Option<String>,
}

pub async fn conversation(
    State(state): State<AppState>,
    signed_in: SignedIn,
    Query(query): Query<ConversationQuery>,
) -> PageResult {
    let nonempty = |v: &Option<String>| v.clone().filter(|v| !v.is_empty());
    let who = match (nonempty(&query.user_id), nonempty(&query.sender)) {
        (Some(user), None) => Who::User(user),
        (None, Some(sender)) => Who::Sender(sender),
        _ => return Err(AppError::NotFound("conversation").into()),
    };
    let cursor = nonempty(&query.cursor);
    let page = messages::conversation(&state.pool, signed_in.session.tenant, &who, cursor.as_deref()).await?;
    let title = match &who {
        Who::User(user) => format!("Conversation of {user}"),
        // Named by the account, so two strangers are told apart (escaped by the page).
        Who::Sender(_) => match page.turns.first() {
            Some(turn) => format!(
                "Conversation of {} {} (unlinked)",
                turn.message.platform, turn.message.platform_user_id
            ),
            None => "Conversation of an unlinked sender".to_owned(),
        },
    };
    let conversation = super::handoff::conversation_of(&who);
    let hold = super::handoff::hold_of(&state, signed_in.session.tenant, &conversation).await?;
    // Nothing of the tenant's (another tenant's, or none at all): 404, as the API answers.
    if cursor.is_none() && page.turns.is_empty() && page.links.is_empty() && hold.is_none() {
        return Err(AppError::NotFound("conversation").into());
    }
    let mut body = super::handoff::panel(&conversation, hold.as_ref(), &signed_in.session.csrf);
    body.push_str(&render_conversation(
        &who,
        &page,
        &signed_in.session.csrf,
        cursor.is_none(),
    ));
    ok_page(&title, &signed_in, &body)
}

fn conversation_link(row: &ConversationRow) -> String {
    if row.linked {
        format!("/console/conversation?user_id={}", query_value(&row.key))
    } else {
        format!("/console/conversation?sender={}", query_value(&row.key))
    }
}

fn turns_count(turns: i64) -> String {
    match turns {
        1 => "1 turn".into(),
        n if n >= COUNT_CAP => format!("{COUNT_CAP}+ turns"),
        n => format!("{n} turns"),
    }
}

fn render_list(query: &UsersQuery, rows: &[ConversationRow], more: bool) -> String {
    let from = query.from.as_deref().unwrap_or_default();
    let mut body = format!(
        r#"<form method="get" action="/console/users" class="filters">
<input type="search" name="from" id="from" value="{from}" placeholder="Jump to a user id"><button type="submit" id="jump">Go</button></form>
<p class="empty">Linked users by id (each with all their platforms), then senders who are not linked.</p>"#,
        from = esc(from),
    );
    if rows.is_empty() {
        body.push_str(r#"<p class="empty" id="no-users">No conversations.</p>"#);
    }
    for row in rows {
        let (who, data) = if row.linked {
            let accounts = match row.linked_accounts {
                1 => "1 linked account".to_owned(),
                n => format!("{n} linked accounts"),
            };
            (
                format!(
                    "<strong>{}</strong> <span class=\"sub\">{accounts}</span>",
                    esc(&row.key)
                ),
                format!(r#" data-user="{}""#, esc(&row.key)),
            )
        } else {
            (
                format!(
                    "<strong>{} {}</strong> <span class=\"sub\">unlinked</span>",
                    esc(&row.platform),
                    esc(&row.platform_user_id)
                ),
                format!(r#" data-sender="{}""#, esc(&row.key)),
            )
        };
        let answer = row
            .response_content
            .as_deref()
            .map(|r| format!(r#"<p class="answer">↳ {}</p>"#, esc(&excerpt(r, 160))))
            .unwrap_or_default();
        let _ = write!(
            body,
            r#"<a class="card user" href="{href}"{data}><span class="who">{who}</span>
<span class="meta">{badge}<span class="count">{count}</span><span>{platform}</span><span>{at}</span></span>
<p class="text">{text}</p>{answer}</a>"#,
            href = esc(&conversation_link(row)),
            badge = badge(row.status.as_str()),
            count = turns_count(row.turns),
            platform = esc(&row.platform),
            at = when(row.received_at),
            text = esc(&excerpt(&row.request_content, 160)),
        );
    }
    if let (true, Some(last)) = (more, rows.last()) {
        let kind = if last.linked { "u" } else { "s" };
        let link = format!("/console/users?after={kind}.{}", query_value(&last.key));
        let _ = write!(body, r#"<p><a href="{}" id="next">Next →</a></p>"#, esc(&link));
    }
    body
}

fn render_conversation(who: &Who, page: &ConversationPage, csrf: &str, page_is_first: bool) -> String {
    let mut body = String::new();
    match who {
        Who::User(user) => {
            let accounts: Vec<String> = page
                .links
                .iter()
                .map(|l| format!("{} {}", esc(&l.platform), esc(&l.platform_user_id)))
                .collect();
            let accounts = if accounts.is_empty() {
                "no linked account now".to_owned()
            } else {
                accounts.join(" · ")
            };
            let _ = write!(
                body,
                r#"<p class="empty" id="accounts">Linked accounts: {accounts} · <a href="/console/turns?user_id={q}">search their turns</a></p>"#,
                q = esc(&query_value(user)),
            );
        }
        Who::Sender(_) => body.push_str(
            r#"<p class="empty" id="accounts">Not linked to a user: <a href="/console/links">link the account</a> to give its next turns a user.</p>"#,
        ),
    }
    // Polled by console.js (only the first page: older pages do not change).
    let poll = if page_is_first { r#" data-poll="3000""# } else { "" };
    let _ = write!(body, r#"<section id="turns"{poll}>"#);
    if page.turns.is_empty() {
        body.push_str(r#"<p class="empty" id="no-turns">No turns.</p>"#);
    }
    for turn in &page.turns {
        body.push_str(&exchange(turn, csrf, page));
    }
    body.push_str("</section>");
    if let Some(cursor) = &page.next_cursor {
        let (name, value) = match who {
            Who::User(user) => ("user_id", user),
            Who::Sender(key) => ("sender", key),
        };
        let link = format!(
            "/console/conversation?{name}={}&cursor={}",
            query_value(value),
            query_value(cursor)
        );
        let _ = write!(
            body,
            r#"<p><a href="{}" id="older">Older turns →</a></p>"#,
            esc(&link)
        );
    }
    body
}

/// A failed turn gets the turn page's recovery button. `page` has the turn a tap answered,
/// when it is on the same page.
fn exchange(turn: &ConversationTurn, csrf: &str, page: &ConversationPage) -> String {
    let m = &turn.message;
    let id = esc(&m.id.to_string());
    let (asked, answerer) = match (m.origin, &m.author) {
        (TurnOrigin::Person, Some(author)) => (String::new(), format!("Person · {}", esc(author))),
        (TurnOrigin::Person, None) => (String::new(), "Person".to_owned()),
        (TurnOrigin::Agent, _) => (String::new(), "Agent (wrote first)".to_owned()),
        (TurnOrigin::User, _) => (asked(m, page), "Agent".to_owned()),
    };
    let answer = match &m.response_content {
        Some(answer) => format!(
            r#"<p class="label">{answerer}</p><pre class="answer">{}</pre>"#,
            esc(answer)
        ),
        None => String::new(),
    };
    let error = match (&m.last_error, m.response_content.is_none()) {
        (Some(e), true) => format!(r#"<p class="error">{}</p>"#, esc(e)),
        _ => String::new(),
    };
    format!(
        r#"<div class="card turn exchange" id="turn-{id}" data-status="{status}" data-platform="{platform}" data-origin="{origin}"{tap}>
<div class="meta">{badge}<span>{platform}</span><span>{account}</span><span>{at}</span><a href="/console/turns/{id}">details</a></div>
{asked}{answer}{parts}{reactions}{error}{action}</div>"#,
        origin = m.origin.as_str(),
        tap = if m.action.is_some() {
            r#" data-tap="true""#
        } else {
            ""
        },
        status = esc(&m.status),
        badge = badge(&m.status),
        platform = esc(&m.platform),
        account = esc(&m.platform_user_id),
        at = when(m.received_at),
        parts = posted(&turn.reply_parts),
        reactions = reactions_of(turn),
        action = super::pages::action_form(m, csrf),
    )
}

/// People's reactions to the answer, under "Reactions".
fn reactions_of(turn: &ConversationTurn) -> String {
    let several = super::reactions::several(&turn.reply_parts);
    let list = super::reactions::of_answer(&turn.reactions, several);
    if list.is_empty() {
        return list;
    }
    format!(r#"<p class="label">Reactions</p>{list}"#)
}

/// The user's words, or their tap.
fn asked(m: &MessageOut, page: &ConversationPage) -> String {
    match &m.action {
        Some(action) => {
            let answers = page
                .turns
                .iter()
                .map(|t| (t.message.id, t.message.response_content.as_deref()));
            let answer = choices::answer_in(action, answers);
            format!(r#"<p class="label">User</p>{}"#, choices::tap(action, answer))
        }
        None => format!(
            r#"<p class="label">User</p><pre class="request">{}</pre>"#,
            esc(&m.request_content)
        ),
    }
}

/// The parts as posted, each with the choices it carried.
fn posted(parts: &[ReplyPartOut]) -> String {
    if parts.is_empty() {
        return String::new();
    }
    let mut list = String::from(r#"<p class="label">Posted</p><ol class="parts">"#);
    for part in parts {
        let _ = write!(
            list,
            r#"<li class="part" data-status="{status}">{badge}{delivery}{edit} {content}{error}{choices}</li>"#,
            status = esc(part.status.as_str()),
            badge = badge(&part.status),
            delivery = part
                .delivery_status
                .as_deref()
                .map(|d| format!(" {}", badge(d)))
                .unwrap_or_default(),
            edit = choices::edit_note(part),
            content = esc(&part.content),
            error = part
                .last_error
                .as_deref()
                .map(|e| format!(r#" <span class="error">{}</span>"#, esc(e)))
                .unwrap_or_default(),
            choices = choices::offered(part),
        );
    }
    list.push_str("</ol>");
    list
}
