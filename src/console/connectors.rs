//! The connectors page. Changes go through `admin::connectors`: the API's checks, egress
//! rule, audit record and cache refresh. Secrets are write-only: `SecretString` from the form
//! on, and never rendered, not even masked or echoed into a failed form.

use std::fmt::Write;

use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Redirect};
use axum::Form;
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;

use super::error::{ConsoleError, PageResult};
use super::html::{badge, esc};
use super::pages::{ok_page, when};
use super::session::{CsrfForm, SignedIn};
use crate::admin::connectors::{self, MAX_GRACE_SECS};
use crate::db::audit::Actor;
use crate::db::connectors::{ConnectorPatch, ConnectorSummary, NewConnector, DEFAULT_GRACE_SECS};
use crate::domain::{ConnectorId, Platform, TenantId, UnlinkedPolicy};
use crate::error::AppError;
use crate::http::state::AppState;

/// The API takes any grace up to `MAX_GRACE_SECS`.
const GRACES: [(u64, &str); 5] = [
    (0, "none: the old secret stops at once"),
    (3600, "1 hour"),
    (DEFAULT_GRACE_SECS, "24 hours (as Slack does)"),
    (7 * 24 * 3600, "7 days"),
    (MAX_GRACE_SECS, "30 days"),
];

#[derive(Deserialize)]
pub struct ListQuery {
    notice: Option<String>,
    id: Option<uuid::Uuid>,
}

pub async fn list(
    State(state): State<AppState>,
    signed_in: SignedIn,
    Query(query): Query<ListQuery>,
) -> PageResult {
    // Secrets are not among the summary's columns.
    let mut tx = crate::db::TenantTx::begin(&state.pool, signed_in.session.tenant)
        .await
        .map_err(AppError::from)?;
    let list = crate::db::connectors::summaries(&mut tx)
        .await
        .map_err(AppError::from)?;
    tx.commit().await.map_err(AppError::from)?;
    let body = render(&list, &signed_in, &query);
    ok_page("Connectors", &signed_in, &body)
}

fn text(value: Option<String>) -> Option<String> {
    value.map(|v| v.trim().to_owned()).filter(|v| !v.is_empty())
}

fn secret(value: Option<SecretString>) -> Option<SecretString> {
    value.filter(|s| !s.expose_secret().is_empty())
}

/// The add form. Secrets are `SecretString` from the moment they are parsed.
#[derive(Deserialize)]
pub struct NewForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    platform: String,
    name: Option<String>,
    verification_secret: Option<SecretString>,
    verify_token: Option<SecretString>,
    outbound_token: Option<SecretString>,
    external_id: Option<String>,
    app_id: Option<String>,
    bot_user_id: Option<String>,
    bot_id: Option<String>,
    unlinked_policy: Option<String>,
    api_base_url: Option<String>,
}

impl NewForm {
    fn into_input(self) -> Result<NewConnector, AppError> {
        let unprocessable = |message: String| AppError::Unprocessable(message);
        let platform: Platform = self
            .platform
            .parse()
            .map_err(|e: crate::domain::UnknownPlatform| unprocessable(e.to_string()))?;
        let unlinked_policy = text(self.unlinked_policy)
            .map(|p| p.parse::<UnlinkedPolicy>())
            .transpose()
            .map_err(unprocessable)?;
        Ok(NewConnector {
            platform,
            name: text(self.name).unwrap_or_default(),
            // An empty one is refused by the API's check ("must not be empty").
            verification_secret: self
                .verification_secret
                .unwrap_or_else(|| SecretString::from(String::new())),
            verify_token: secret(self.verify_token),
            outbound_token: secret(self.outbound_token),
            api_base_url: text(self.api_base_url),
            external_id: text(self.external_id),
            app_id: text(self.app_id),
            bot_user_id: text(self.bot_user_id),
            bot_id: text(self.bot_id),
            unlinked_policy: unlinked_policy.unwrap_or_default(),
            telegram_delivery: Default::default(),
            unlinked_notice: None,
            format_markdown: true,
            typing_indicator: true,
        })
    }
}

fn actor(signed_in: &SignedIn) -> (TenantId, Actor) {
    (signed_in.session.tenant, Actor::ApiKey(signed_in.key_id))
}

/// POST, redirect, GET: a reload does not repeat the change.
fn done(notice: &str, id: uuid::Uuid) -> PageResult {
    Ok(Redirect::to(&format!(
        "/console/connectors?notice={notice}&id={id}#connector-{id}"
    ))
    .into_response())
}

pub async fn create(
    State(state): State<AppState>,
    signed_in: SignedIn,
    Form(form): Form<NewForm>,
) -> PageResult {
    signed_in.check_csrf(&form.csrf)?;
    let (tenant, actor) = actor(&signed_in);
    let summary = connectors::create_connector(&state, tenant, actor, form.into_input()?).await?;
    done("created", summary.id)
}

/// A path id that is not a UUID names no connector: the same 404 as an unknown one.
fn connector_id(id: &str) -> Result<ConnectorId, ConsoleError> {
    id.parse()
        .map(ConnectorId)
        .map_err(|_| ConsoleError::App(AppError::NotFound("connector")))
}

#[derive(Deserialize)]
pub struct RotateForm {
    #[serde(default)]
    csrf: String,
    verification_secret: Option<SecretString>,
    grace_secs: Option<u64>,
}

pub async fn rotate(
    State(state): State<AppState>,
    signed_in: SignedIn,
    Path(id): Path<String>,
    Form(form): Form<RotateForm>,
) -> PageResult {
    signed_in.check_csrf(&form.csrf)?;
    let id = connector_id(&id)?;
    let patch = ConnectorPatch {
        verification_secret: Some(
            form.verification_secret
                .unwrap_or_else(|| SecretString::from(String::new())),
        ),
        previous_secret_grace_secs: Some(form.grace_secs.unwrap_or(DEFAULT_GRACE_SECS)),
        ..ConnectorPatch::default()
    };
    let (tenant, actor) = actor(&signed_in);
    connectors::update_connector(&state, tenant, actor, id, patch).await?;
    done("rotated", id.0)
}

pub async fn disable(
    State(state): State<AppState>,
    signed_in: SignedIn,
    Path(id): Path<String>,
    Form(form): Form<CsrfForm>,
) -> PageResult {
    signed_in.check_csrf(&form.csrf)?;
    let id = connector_id(&id)?;
    let (tenant, actor) = actor(&signed_in);
    connectors::disable_connector(&state, tenant, actor, id).await?;
    done("disabled", id.0)
}

pub async fn enable(
    State(state): State<AppState>,
    signed_in: SignedIn,
    Path(id): Path<String>,
    Form(form): Form<CsrfForm>,
) -> PageResult {
    signed_in.check_csrf(&form.csrf)?;
    let id = connector_id(&id)?;
    let patch = ConnectorPatch {
        enabled: Some(true),
        ..ConnectorPatch::default()
    };
    let (tenant, actor) = actor(&signed_in);
    connectors::update_connector(&state, tenant, actor, id, patch).await?;
    done("enabled", id.0)
}

fn notice_text(notice: &str) -> Option<&'static str> {
    Some(match notice {
        "created" => "Connector added. Register its webhook URL (below) with the platform.",
        "rotated" => "Secret rotated. Put the new one in the platform's settings now.",
        "disabled" => "Connector disabled: its webhooks are refused from now on.",
        "enabled" => "Connector enabled.",
        _ => return None,
    })
}

fn render(list: &[ConnectorSummary], signed_in: &SignedIn, query: &ListQuery) -> String {
    let csrf = esc(&signed_in.session.csrf);
    let mut body = String::new();
    if let Some(text) = query.notice.as_deref().and_then(notice_text) {
        let _ = write!(body, r#"<p class="notice" id="notice">{text}</p>"#);
    }
    body.push_str(
        r#"<p class="empty">Secrets are write-only: type them here, and they are never shown again.</p>"#,
    );
    body.push_str(&new_form(&csrf, list.is_empty()));
    if list.is_empty() {
        body.push_str(r#"<p class="empty">No connectors.</p>"#);
    }
    for connector in list {
        let fresh = query.id == Some(connector.id);
        body.push_str(&card(connector, signed_in.session.tenant, &csrf, fresh));
    }
    body
}

fn new_form(csrf: &str, open: bool) -> String {
    let open = if open { " open" } else { "" };
    format!(
        r#"<details class="card" id="new-connector"{open}><summary>Add a connector</summary>
<form method="post" action="/console/connectors" class="stack" autocomplete="off">
<input type="hidden" name="csrf" value="{csrf}">
<label>Platform <select name="platform" id="new-platform"><option value="slack">Slack</option><option value="whatsapp">WhatsApp</option><option value="telegram">Telegram</option></select></label>
<label>Name <input name="name" id="new-name" maxlength="200"></label>
<label>Verification secret <small>Slack signing secret, Meta app secret or Telegram secret_token</small>
<input type="password" name="verification_secret" id="new-secret" required maxlength="1024" autocomplete="new-password"></label>
<label>Outbound token <small>bot token or access token, to post replies</small>
<input type="password" name="outbound_token" id="new-outbound-token" maxlength="1024" autocomplete="new-password"></label>
<label>Verify token <small>WhatsApp only: Meta's hub.verify_token</small>
<input type="password" name="verify_token" id="new-verify-token" maxlength="1024" autocomplete="new-password"></label>
<label>External id <small>Slack team id, WhatsApp phone_number_id or Telegram bot id</small><input name="external_id" maxlength="256"></label>
<label>Bot user id <small>the bot's own user: its messages are never dispatched</small><input name="bot_user_id" maxlength="256"></label>
<label>Slack app id <input name="app_id" maxlength="256"></label>
<label>Slack bot id <input name="bot_id" maxlength="256"></label>
<label>Unlinked senders <select name="unlinked_policy"><option value="deny">deny (record, never dispatch)</option><option value="allow">allow</option></select></label>
<label>API base URL <small>optional override, for proxies</small><input name="api_base_url" type="url" maxlength="2048"></label>
<button type="submit" id="create-connector">Add connector</button></form></details>"#
    )
}

fn card(c: &ConnectorSummary, tenant: TenantId, csrf: &str, fresh: bool) -> String {
    let id = esc(&c.id.to_string());
    let (state, toggle) = if c.enabled {
        (
            badge("enabled"),
            format!(
                r#"<form method="post" action="/console/connectors/{id}/disable" class="inline"><input type="hidden" name="csrf" value="{csrf}"><button type="submit" class="disable danger">Disable</button></form>"#
            ),
        )
    } else {
        (
            badge("disabled"),
            format!(
                r#"<form method="post" action="/console/connectors/{id}/enable" class="inline"><input type="hidden" name="csrf" value="{csrf}"><button type="submit" class="enable">Enable</button></form>"#
            ),
        )
    };
    let previous = c
        .previous_secret_expires_at
        .map(|at| format!("set; the previous one is accepted until {}", when(at)))
        .unwrap_or_else(|| "set".into());
    let mut graces = String::new();
    for (secs, label) in GRACES {
        let selected = if secs == DEFAULT_GRACE_SECS {
            " selected"
        } else {
            ""
        };
        let _ = write!(graces, r#"<option value="{secs}"{selected}>{label}</option>"#);
    }
    let hook = crate::provision::webhook_path(tenant, ConnectorId(c.id));
    let name = if c.name.is_empty() {
        "(unnamed)"
    } else {
        c.name.as_str()
    };
    let fresh = if fresh { " fresh" } else { "" };
    format!(
        r#"<div class="card connector{fresh}" id="connector-{id}" data-enabled="{enabled}"><div class="meta">{state}<span>{platform}</span><span>{id}</span></div>
<p class="text"><strong>{name}</strong></p><dl><dt>Webhook URL</dt><dd><code class="hook">{hook}</code></dd>
<dt>Verification secret</dt><dd class="previous">{previous}</dd><dt>Unlinked users</dt><dd>{policy}</dd><dt>Markdown</dt><dd>{markdown}</dd><dt>API base URL</dt><dd>{base}</dd><dt>Outbound token</dt><dd>{token}</dd><dt>Created</dt><dd>{created}</dd></dl>
<details class="rotate"><summary>Rotate the verification secret</summary>
<form method="post" action="/console/connectors/{id}/rotate" class="stack" autocomplete="off"><input type="hidden" name="csrf" value="{csrf}">
<label>New secret <input type="password" name="verification_secret" required maxlength="1024" autocomplete="new-password"></label>
<label>Keep accepting the current one for <select name="grace_secs">{graces}</select></label>
<button type="submit" class="rotate">Rotate</button></form></details>
{toggle}</div>"#,
        enabled = c.enabled,
        platform = esc(&c.platform),
        name = esc(name),
        hook = esc(&hook),
        policy = esc(&c.unlinked_policy),
        markdown = if c.format_markdown {
            "converted"
        } else {
            "plain text"
        },
        base = c
            .api_base_url
            .as_deref()
            .map(esc)
            .unwrap_or_else(|| "default".into()),
        token = if c.has_outbound_token { "set" } else { "not set" },
        created = when(c.created_at),
    )
}
