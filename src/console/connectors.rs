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
use super::html::when;
use super::html::{badge, esc};
use super::pages::ok_page;
use super::session::{CsrfForm, SignedIn};
use crate::admin::connectors;
use crate::db::audit::Actor;
use crate::db::connectors::{
    ConnectorPatch, ConnectorSettings, ConnectorSummary, NewConnector, SecretsIn, DEFAULT_GRACE_SECS,
    MAX_GRACE_SECS,
};
use crate::domain::{ConnectorId, Platform, TenantId};
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
    // `CB_PUBLIC_URL`, else the bound address (`Application::build` fills it in).
    let base = state.settings.media.base_url(None);
    let body = render(&list, &signed_in, &query, &base);
    ok_page("Connectors", &signed_in, &body)
}

/// The add form: the API's settings and secrets (`SecretString` from the moment they are
/// parsed), where an input left empty is a field not given.
#[derive(Deserialize)]
pub struct NewForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    platform: String,
    #[serde(flatten)]
    secrets: SecretsIn,
    #[serde(flatten)]
    settings: ConnectorSettings,
}

/// Trimmed, and `None` when empty.
fn text(value: &mut Option<String>) {
    *value = value
        .take()
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty());
}

/// `None` when empty.
fn secret(value: &mut Option<SecretString>) {
    *value = value.take().filter(|s| !s.expose_secret().is_empty());
}

impl NewForm {
    fn into_input(self) -> Result<NewConnector, AppError> {
        let platform: Platform = self
            .platform
            .parse()
            .map_err(|e: crate::domain::UnknownPlatform| AppError::Unprocessable(e.to_string()))?;
        let (mut secrets, mut settings) = (self.secrets, self.settings);
        let s = &mut settings;
        for value in [
            &mut s.name,
            &mut s.api_base_url,
            &mut s.external_id,
            &mut s.app_id,
            &mut s.bot_user_id,
            &mut s.bot_id,
            &mut s.unlinked_notice,
        ] {
            text(value);
        }
        // An empty verification secret is refused by the API's check ("must not be empty").
        for value in [
            &mut secrets.verification_secret,
            &mut secrets.verify_token,
            &mut secrets.outbound_token,
        ] {
            secret(value);
        }
        Ok(NewConnector {
            platform,
            secrets,
            settings,
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
        secrets: SecretsIn {
            verification_secret: Some(
                form.verification_secret
                    .unwrap_or_else(|| SecretString::from(String::new())),
            ),
            ..SecretsIn::default()
        },
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

fn render(list: &[ConnectorSummary], signed_in: &SignedIn, query: &ListQuery, base: &str) -> String {
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
        let hook = format!(
            "{base}{}",
            crate::provision::webhook_path(signed_in.session.tenant, ConnectorId(connector.id))
        );
        body.push_str(&card(connector, &hook, &csrf, fresh));
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

/// `hook`: the full webhook URL, in a readonly input (selectable without script) with a Copy
/// button that `console.js` shows and runs.
fn card(c: &ConnectorSummary, hook: &str, csrf: &str, fresh: bool) -> String {
    let id = esc(&c.id.to_string());
    let (state, toggle) = if c.profile.enabled {
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
    let profile = &c.profile;
    let name = if profile.name.is_empty() {
        "(unnamed)"
    } else {
        profile.name.as_str()
    };
    let fresh = if fresh { " fresh" } else { "" };
    format!(
        r#"<div class="card connector{fresh}" id="connector-{id}" data-enabled="{enabled}"><div class="meta">{state}<span>{platform}</span><span>{id}</span></div>
<p class="text"><strong>{name}</strong></p><dl><dt>Webhook URL</dt><dd><div class="copyable"><input type="text" readonly class="hook" id="hook-{id}" value="{hook}" aria-label="Webhook URL to register with the platform"><button type="button" class="copy" data-copy="hook-{id}" aria-live="polite" hidden>Copy</button></div></dd>
<dt>Verification secret</dt><dd class="previous">{previous}</dd><dt>Unlinked users</dt><dd>{policy}</dd><dt>Markdown</dt><dd>{markdown}</dd><dt>API base URL</dt><dd>{base}</dd><dt>Outbound token</dt><dd>{token}</dd><dt>Created</dt><dd>{created}</dd></dl>
<details class="rotate"><summary>Rotate the verification secret</summary>
<form method="post" action="/console/connectors/{id}/rotate" class="stack" autocomplete="off"><input type="hidden" name="csrf" value="{csrf}">
<label>New secret <input type="password" name="verification_secret" required maxlength="1024" autocomplete="new-password"></label>
<label>Keep accepting the current one for <select name="grace_secs">{graces}</select></label>
<button type="submit" class="rotate">Rotate</button></form></details>
{toggle}</div>"#,
        enabled = profile.enabled,
        platform = esc(profile.platform.as_str()),
        name = esc(name),
        hook = esc(hook),
        policy = esc(profile.unlinked_policy.as_str()),
        markdown = if profile.format_markdown {
            "converted"
        } else {
            "plain text"
        },
        base = profile
            .api_base_url
            .as_deref()
            .map(esc)
            .unwrap_or_else(|| "default".into()),
        token = if c.has_outbound_token { "set" } else { "not set" },
        created = when(c.created_at),
    )
}

#[cfg(test)]
mod tests {
    use axum::extract::FromRequest;
    use secrecy::ExposeSecret;

    use super::NewForm;
    use crate::domain::{Platform, UnlinkedPolicy};

    async fn form(body: &str) -> NewForm {
        let request = axum::http::Request::post("/console/connectors")
            .header("content-type", "application/x-www-form-urlencoded")
            .body(axum::body::Body::from(body.to_owned()))
            .unwrap();
        axum::Form::<NewForm>::from_request(request, &()).await.unwrap().0
    }

    #[tokio::test]
    async fn the_form_fills_the_apis_settings_and_an_empty_input_is_not_given() {
        let body = "csrf=c&platform=slack&name=+Bot+&verification_secret=s+1&outbound_token=\
                    &verify_token=&external_id=T1&bot_user_id=&app_id=&bot_id=&unlinked_policy=allow\
                    &api_base_url=";
        let new = form(body).await.into_input().unwrap();
        let (secrets, settings) = (&new.secrets, &new.settings);
        assert_eq!(new.platform, Platform::Slack);
        assert_eq!(
            secrets.verification_secret.as_ref().map(|s| s.expose_secret()),
            Some("s 1")
        );
        assert!(secrets.outbound_token.is_none() && secrets.verify_token.is_none());
        assert_eq!(
            (settings.name.as_deref(), settings.external_id.as_deref()),
            (Some("Bot"), Some("T1"))
        );
        assert!(settings.app_id.is_none() && settings.api_base_url.is_none());
        assert_eq!(settings.unlinked_policy, Some(UnlinkedPolicy::Allow));
        assert!(new.profile().format_markdown);

        let unknown = form("platform=fax&verification_secret=s").await.into_input();
        assert!(unknown.is_err());
    }
}
