//! The users page (a linked user across their platforms, or an unlinked sender) and each
//! conversation's page. Ordered by user id, not by activity: `db::conversations` says why.

use askama::Template;
use axum::extract::{Query, State};
use serde::Deserialize;

use super::error::PageResult;
use super::html::{badge, excerpt, query_value, when, Badge, RenderPage};
use super::pages::ok_page;
use super::session::SignedIn;
use crate::admin::messages::{self, Who};
use crate::db::conversations::{self, ConversationRow, PageStart, COUNT_CAP};
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
            crate::api_schema::check_text("after", after, 2048)?;
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
                crate::api_schema::check_text("from", from, crate::api_schema::ID_MAX)?;
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
    ok_page("/console/users", "Conversations by user", &signed_in, &body)
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
                turn.message.platform, turn.message.address.platform_user_id
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
    let shown = super::conversation::Shown {
        who: &who,
        conversation: &conversation,
        hold: hold.as_ref(),
        csrf: &signed_in.session.csrf,
        first: cursor.is_none(),
    };
    let body = super::conversation::render(&shown, &page);
    super::pages::wide_page("/console/users", &title, &signed_in, &body)
}

fn conversation_link(row: &ConversationRow) -> String {
    if row.linked {
        format!("/console/conversation?user_id={}#end", query_value(&row.key))
    } else {
        format!("/console/conversation?sender={}#end", query_value(&row.key))
    }
}

fn turns_count(turns: i64) -> String {
    match turns {
        1 => "1 turn".into(),
        n if n >= COUNT_CAP => format!("{COUNT_CAP}+ turns"),
        n => format!("{n} turns"),
    }
}

struct UserRow {
    href: String,
    linked: bool,
    key: String,
    name: String,
    sub: String,
    badge: Badge,
    count: String,
    platform: String,
    at: String,
    text: String,
    answer: Option<String>,
}

#[derive(Template)]
#[template(path = "console/users.html")]
struct UsersHtml<'a> {
    from: &'a str,
    rows: Vec<UserRow>,
    next: Option<String>,
}

fn user_row(row: &ConversationRow) -> UserRow {
    let (name, sub) = if row.linked {
        let accounts = match row.linked_accounts {
            1 => "1 linked account".to_owned(),
            n => format!("{n} linked accounts"),
        };
        (row.key.clone(), accounts)
    } else {
        (
            format!("{} {}", row.platform, row.platform_user_id),
            "unlinked".to_owned(),
        )
    };
    UserRow {
        href: conversation_link(row),
        linked: row.linked,
        key: row.key.clone(),
        name,
        sub,
        badge: badge(row.status.as_str()),
        count: turns_count(row.turns),
        platform: row.platform.clone(),
        at: when(row.received_at),
        text: excerpt(&row.request_content, 160),
        answer: row.response_content.as_deref().map(|r| excerpt(r, 160)),
    }
}

fn render_list(query: &UsersQuery, rows: &[ConversationRow], more: bool) -> String {
    let next = rows.last().filter(|_| more).map(|last| {
        let kind = if last.linked { "u" } else { "s" };
        format!("/console/users?after={kind}.{}", query_value(&last.key))
    });
    UsersHtml {
        from: query.from.as_deref().unwrap_or_default(),
        rows: rows.iter().map(user_row).collect(),
        next,
    }
    .render_page()
}
