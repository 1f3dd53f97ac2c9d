//! The connectors page. Changes go through `admin::connectors`: the API's checks, egress
//! rule, audit record and cache refresh. Secrets are write-only: `SecretString` from the form
//! on, and never rendered, not even masked or echoed into a failed form.

use askama::Template;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Redirect};
use axum::Form;
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;

use super::error::{ConsoleError, PageResult};
use super::html::{badge, when, Badge, RenderPage};
use super::pages::ok_page;
use super::session::{CsrfForm, SignedIn};
use crate::admin::connectors;
use crate::db::audit::Actor;
use crate::db::connectors::ConnectorSummary;
use crate::domain::{ConnectorId, Platform, TenantId};
use crate::error::AppError;
use crate::http::state::AppState;
use crate::shapes::{
    ConnectorPatch, ConnectorSettings, NewConnector, SecretsIn, DEFAULT_GRACE_SECS, MAX_GRACE_SECS,
};

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
    ok_page("/console/connectors", "Connectors", &signed_in, &body)
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

#[derive(Template)]
#[template(path = "console/connectors.html")]
struct ConnectorsHtml<'a> {
    notice: Option<&'static str>,
    csrf: &'a str,
    cards: Vec<CardView>,
    /// Each grace, its label, and whether it is the default.
    graces: Vec<(u64, &'static str, bool)>,
}

/// A connector as its card shows it; `hook` is the full webhook URL.
struct CardView {
    id: uuid::Uuid,
    fresh: bool,
    enabled: bool,
    badge: Badge,
    platform: &'static str,
    name: String,
    hook: String,
    previous: String,
    policy: &'static str,
    markdown: &'static str,
    base: String,
    token: &'static str,
    created: String,
}

fn render(list: &[ConnectorSummary], signed_in: &SignedIn, query: &ListQuery, base: &str) -> String {
    let cards = list
        .iter()
        .map(|connector| {
            let hook = format!(
                "{base}{}",
                crate::provision::webhook_path(signed_in.session.tenant, ConnectorId(connector.id))
            );
            card(connector, hook, query.id == Some(connector.id))
        })
        .collect();
    ConnectorsHtml {
        notice: query.notice.as_deref().and_then(notice_text),
        csrf: &signed_in.session.csrf,
        cards,
        graces: GRACES
            .iter()
            .map(|&(secs, label)| (secs, label, secs == DEFAULT_GRACE_SECS))
            .collect(),
    }
    .render_page()
}

/// The webhook URL is shown whole in a readonly field that wraps (selectable without
/// script), with a Copy button that `console.js` shows and runs.
fn card(c: &ConnectorSummary, hook: String, fresh: bool) -> CardView {
    let profile = &c.profile;
    CardView {
        id: c.id,
        fresh,
        enabled: profile.enabled,
        badge: badge(if profile.enabled { "enabled" } else { "disabled" }),
        platform: profile.platform.as_str(),
        name: if profile.name.is_empty() {
            "(unnamed)".to_owned()
        } else {
            profile.name.clone()
        },
        hook,
        previous: c
            .previous_secret_expires_at
            .map(|at| format!("set; the previous one is accepted until {}", when(at)))
            .unwrap_or_else(|| "set".into()),
        policy: profile.unlinked_policy.as_str(),
        markdown: if profile.format_markdown {
            "converted"
        } else {
            "plain text"
        },
        base: profile.api_base_url.clone().unwrap_or_else(|| "default".into()),
        token: if c.has_outbound_token { "set" } else { "not set" },
        created: when(c.created_at),
    }
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
