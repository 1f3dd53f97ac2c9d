//! The links page, through `admin::links`: the API's checks and audit records.

use askama::Template;
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Redirect};
use axum::Form;
use serde::Deserialize;

use super::error::PageResult;
use super::html::{query_value, when, RenderPage};
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
    ok_page("/console/links", "Links", &signed_in, &body)
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

#[derive(Template)]
#[template(path = "console/links.html")]
struct LinksHtml<'a> {
    notice: Option<&'static str>,
    csrf: &'a str,
    links: Vec<LinkView<'a>>,
}

struct LinkView<'a> {
    platform: &'a str,
    platform_user_id: &'a str,
    user_id: &'a str,
    user_query: String,
    created: String,
}

fn link_view(link: &Link) -> LinkView<'_> {
    LinkView {
        platform: &link.platform,
        platform_user_id: &link.platform_user_id,
        user_id: &link.user_id,
        user_query: query_value(&link.user_id),
        created: when(link.created_at),
    }
}

fn render(list: &[Link], csrf: &str, notice: Option<&str>) -> String {
    let notice = match notice {
        Some("added") => Some("Linked. The account's next turns belong to that user."),
        Some("removed") => Some("Link removed. The account's next turns are an unlinked sender's."),
        _ => None,
    };
    LinksHtml {
        notice,
        csrf,
        links: list.iter().map(link_view).collect(),
    }
    .render_page()
}
