//! The links page, through `admin::links`: the API's checks and audit records.

use std::fmt::Write;

use axum::extract::{Query, State};
use axum::response::{IntoResponse, Redirect};
use axum::Form;
use serde::Deserialize;

use super::error::PageResult;
use super::html::when;
use super::html::{esc, query_value};
use super::pages::ok_page;
use super::session::SignedIn;
use crate::admin::links::{self, LinkIn};
use crate::db::audit::Actor;
use crate::db::links::Link;
use crate::domain::Platform;
use crate::error::AppError;
use crate::http::state::AppState;

#[derive(Deserialize)]
pub struct ListQuery {
    notice: Option<String>,
}

pub async fn list(
    State(state): State<AppState>,
    signed_in: SignedIn,
    Query(query): Query<ListQuery>,
) -> PageResult {
    let mut tx = crate::db::TenantTx::begin(&state.pool, signed_in.session.tenant)
        .await
        .map_err(AppError::from)?;
    let list = crate::db::links::list(&mut tx).await.map_err(AppError::from)?;
    tx.commit().await.map_err(AppError::from)?;
    let body = render(&list, &signed_in.session.csrf, query.notice.as_deref());
    ok_page("Links", &signed_in, &body)
}

#[derive(Deserialize)]
pub struct LinkForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    platform: String,
    #[serde(default)]
    platform_user_id: String,
    #[serde(default)]
    user_id: String,
}

pub async fn add(
    State(state): State<AppState>,
    signed_in: SignedIn,
    Form(form): Form<LinkForm>,
) -> PageResult {
    signed_in.check_csrf(&form.csrf)?;
    let platform: Platform = form
        .platform
        .parse()
        .map_err(|e: crate::domain::UnknownPlatform| AppError::Unprocessable(e.to_string()))?;
    let input = LinkIn {
        platform,
        platform_user_id: form.platform_user_id.trim().to_owned(),
        user_id: form.user_id.trim().to_owned(),
    };
    let actor = Actor::ApiKey(signed_in.key_id);
    links::set_link(&state.pool, signed_in.session.tenant, actor, &input).await?;
    Ok(Redirect::to("/console/links?notice=added").into_response())
}

/// The account's turns stay; its next ones are an unlinked sender's.
pub async fn remove(
    State(state): State<AppState>,
    signed_in: SignedIn,
    Form(form): Form<LinkForm>,
) -> PageResult {
    signed_in.check_csrf(&form.csrf)?;
    let actor = Actor::ApiKey(signed_in.key_id);
    links::delete_link(
        &state.pool,
        signed_in.session.tenant,
        actor,
        &form.platform,
        &form.platform_user_id,
    )
    .await?;
    Ok(Redirect::to("/console/links?notice=removed").into_response())
}

fn render(list: &[Link], csrf: &str, notice: Option<&str>) -> String {
    let csrf = esc(csrf);
    let mut body = String::new();
    let notice = match notice {
        Some("added") => Some("Linked. The account's next turns belong to that user."),
        Some("removed") => Some("Link removed. The account's next turns are an unlinked sender's."),
        _ => None,
    };
    if let Some(text) = notice {
        let _ = write!(body, r#"<p class="notice" id="notice">{text}</p>"#);
    }
    let _ = write!(
        body,
        r#"<p class="empty">A link names the user behind a platform account; one user's accounts share one history.</p>
<form method="post" action="/console/links" class="card stack" id="new-link" autocomplete="off"><input type="hidden" name="csrf" value="{csrf}">
<label>Platform <select name="platform" id="link-platform"><option value="slack">Slack</option><option value="whatsapp">WhatsApp</option><option value="telegram">Telegram</option></select></label>
<label>Platform user id <small>Slack U…, WhatsApp phone number, Telegram user id</small><input name="platform_user_id" id="link-account" required maxlength="256"></label>
<label>User id <small>your own id for the person</small><input name="user_id" id="link-user" required maxlength="256"></label>
<button type="submit" id="add-link">Link</button></form>"#
    );
    if list.is_empty() {
        body.push_str(r#"<p class="empty" id="no-links">No links.</p>"#);
    }
    for link in list {
        let _ = write!(
            body,
            r#"<div class="card link" data-account="{platform}:{account}" data-user="{user}"><div class="meta"><span>{platform}</span><span>{account}</span><span>{created}</span></div>
<p class="text">→ <a href="/console/conversation?user_id={query}">{user}</a></p>
<form method="post" action="/console/links/remove" class="inline"><input type="hidden" name="csrf" value="{csrf}"><input type="hidden" name="platform" value="{platform}"><input type="hidden" name="platform_user_id" value="{account}"><button type="submit" class="remove danger">Remove</button></form></div>"#,
            platform = esc(&link.platform),
            account = esc(&link.platform_user_id),
            created = when(link.created_at),
            query = esc(&query_value(&link.user_id)),
            user = esc(&link.user_id),
        );
    }
    body
}
