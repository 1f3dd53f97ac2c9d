//! The egress policy (SSRF guard): every shape of internal URL is refused when a tenant
//! saves it and when the worker would connect to it; redirects are not followed; what an
//! internal server answers never reaches `last_error` or the admin API.
//!
//! "Internal" servers here are real local HTTP servers that count the requests they get, so
//! "refused" is proven by a count of zero, not by an error message alone.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Router;
use channel_bridge::dispatch::{StepOutcome, Worker};
use channel_bridge::domain::{MessageId, Platform};
use channel_bridge::egress::{EgressPolicy, AGENT_REFUSED, PLATFORM_REFUSED};
use channel_bridge::settings::EgressSettings;
use reqwest::Method;
use serde_json::{json, Value};

use crate::support::fake_agent::FakeAgent;
use crate::support::platforms::*;
use crate::support::{spawn_app, spawn_app_with, TestApp};

/// What an internal service must never leak.
const SECRET: &str = "INTERNAL-ONLY-aws-key-AKIAEXAMPLE-do-not-leak";

/// A local HTTP server that counts every request and answers each with `answer`.
struct Internal {
    port: u16,
    hits: Arc<AtomicUsize>,
}

impl Internal {
    async fn start(answer: fn() -> Response) -> Self {
        let hits = Arc::new(AtomicUsize::new(0));
        let counter = hits.clone();
        let app = Router::new().fallback(move || {
            counter.fetch_add(1, Ordering::SeqCst);
            std::future::ready(answer())
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self { port, hits }
    }

    fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

fn secret_page() -> Response {
    (StatusCode::OK, format!("{{\"content\": \"{SECRET}\"}}")).into_response()
}

fn secret_error() -> Response {
    (StatusCode::BAD_REQUEST, format!("<html>{SECRET}</html>")).into_response()
}

/// The URL shapes a tenant might use to reach inside; `{port}` is an internal server's.
fn ssrf_shapes(port: u16) -> Vec<String> {
    vec![
        format!("http://127.0.0.1:{port}/agent"),
        "http://10.0.0.1/agent".into(),
        "http://169.254.169.254/latest/meta-data/".into(),
        format!("http://[::1]:{port}/agent"),
        format!("http://[::ffff:127.0.0.1]:{port}/agent"),
        format!("http://localhost:{port}/agent"),
        "ftp://example.com/agent".into(),
        "file:///etc/passwd".into(),
    ]
}

/// A worker driven step by step whose policy is `allow` (empty: public addresses only).
fn worker(app: &TestApp, allow: &str, agent_url: Option<String>) -> Arc<Worker> {
    crate::support::worker_with(app, |settings| {
        settings.egress = EgressSettings {
            allow: EgressPolicy::parse(allow).unwrap(),
        };
        settings.agent_url = agent_url;
    })
}

async fn admin_key(app: &TestApp, tenant: &Provisioned) -> String {
    channel_bridge::admin::operator::issue(&app.pool, tenant.tenant, "ci")
        .await
        .unwrap()
        .key
}

async fn call(app: &TestApp, key: &str, method: Method, path: &str, body: Option<Value>) -> (u16, String) {
    let mut request = app.client.request(method, app.url(path)).bearer_auth(key);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.text().await.unwrap())
}

/// (status, last_error) of a message, read as the owner.
async fn message_state(app: &TestApp, id: MessageId) -> (String, Option<String>) {
    let mut owner = app.db.owner_conn().await;
    sqlx::query_as("select status, last_error from channel_messages where id = $1")
        .bind(id)
        .fetch_one(&mut owner)
        .await
        .unwrap()
}

/// (status, last_error) of each reply part of a message, in order.
async fn part_states(app: &TestApp, id: MessageId) -> Vec<(String, Option<String>)> {
    let mut owner = app.db.owner_conn().await;
    sqlx::query_as("select status, last_error from channel_replies where message_id = $1 order by part_index")
        .bind(id)
        .fetch_all(&mut owner)
        .await
        .unwrap()
}

async fn set_agent_url(app: &TestApp, tenant: &Provisioned, url: &str) {
    let mut owner = app.db.owner_conn().await;
    sqlx::query("update tenants set agent_url = $2 where id = $1")
        .bind(tenant.tenant)
        .bind(url)
        .execute(&mut owner)
        .await
        .unwrap();
}

fn failed(outcome: StepOutcome) -> MessageId {
    match outcome {
        StepOutcome::Failed(id) => id,
        other => panic!("expected a failed dispatch, got {other:?}"),
    }
}

#[tokio::test]
async fn every_ssrf_shape_is_refused_when_a_tenant_saves_it_and_nothing_is_stored() {
    let app = spawn_app_with(|settings, _| settings.egress = EgressSettings::default()).await;
    let tenant = provision_tenant(&app.pool, "acme").await;
    let key = admin_key(&app, &tenant).await;
    let internal = Internal::start(secret_page).await;

    for url in ssrf_shapes(internal.port) {
        let patch = json!({"agent_url": url});
        let (status, body) = call(&app, &key, Method::PATCH, "/v1/admin/tenant", Some(patch)).await;
        assert_eq!(status, 422, "agent_url {url}: {body}");
        let body: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(body["error"], "unprocessable");
        let message = body["message"].as_str().unwrap();
        assert!(message.starts_with("agent_url "), "{message}");
        assert!(
            message.contains("egress policy") || message.contains("http or https"),
            "names the rule: {message}"
        );
        // A name's resolved addresses are internal details: never echoed.
        assert!(
            !message.contains("127.0.0.1") && !message.contains("::1"),
            "{message}"
        );

        let connector = format!("/v1/admin/connectors/{}", tenant.telegram);
        let patch = json!({"api_base_url": url});
        let (status, body) = call(&app, &key, Method::PATCH, &connector, Some(patch)).await;
        assert_eq!(status, 422, "api_base_url {url}: {body}");
        assert!(body.contains("api_base_url "), "{body}");

        let new = json!({"platform": "slack", "verification_secret": "s3cret", "api_base_url": url});
        let (status, body) = call(&app, &key, Method::POST, "/v1/admin/connectors", Some(new)).await;
        assert_eq!(status, 422, "new connector with {url}: {body}");
    }

    let (_, tenant_out) = call(&app, &key, Method::GET, "/v1/admin/tenant", None).await;
    assert_eq!(
        serde_json::from_str::<Value>(&tenant_out).unwrap()["agent_url"],
        Value::Null
    );
    let (_, connectors) = call(&app, &key, Method::GET, "/v1/admin/connectors", None).await;
    let connectors: Value = serde_json::from_str(&connectors).unwrap();
    assert_eq!(
        connectors.as_array().unwrap().len(),
        3,
        "no connector was created"
    );
    assert_eq!(internal.hits(), 0, "a save-time check never requests the URL");
}

#[tokio::test]
async fn addresses_and_hosts_the_operator_allows_are_accepted_when_saved() {
    let app = spawn_app_with(|settings, _| {
        settings.egress = EgressSettings {
            allow: EgressPolicy::parse("10.0.0.0/8, localhost").unwrap(),
        }
    })
    .await;
    let tenant = provision_tenant(&app.pool, "acme").await;
    let key = admin_key(&app, &tenant).await;

    for url in [
        "http://10.0.0.1/agent",
        "http://localhost:9/agent",
        "https://93.184.215.14/",
    ] {
        let patch = json!({"agent_url": url});
        let (status, body) = call(&app, &key, Method::PATCH, "/v1/admin/tenant", Some(patch)).await;
        assert_eq!(status, 200, "{url}: {body}");
    }
    // Allowing 10/8 and a name opens nothing else.
    let patch = json!({"agent_url": "http://127.0.0.1:9/agent"});
    let (status, _) = call(&app, &key, Method::PATCH, "/v1/admin/tenant", Some(patch)).await;
    assert_eq!(status, 422);
    // An empty string still clears the URL.
    let patch = json!({"agent_url": ""});
    let (status, body) = call(&app, &key, Method::PATCH, "/v1/admin/tenant", Some(patch)).await;
    assert_eq!(status, 200, "{body}");
}

#[tokio::test]
async fn a_refused_agent_url_fails_the_turn_at_once_and_the_worker_never_connects() {
    let app = spawn_app().await;
    let tenant = provision_tenant(&app.pool, "acme").await;
    let internal = Internal::start(secret_page).await;
    let port = internal.port;
    // URLs saved before the policy (or whose DNS changed since): the worker decides again.
    let shapes = [
        format!("http://127.0.0.1:{port}/agent"),
        format!("http://localhost:{port}/agent"),
        format!("http://[::ffff:127.0.0.1]:{port}/agent"),
        format!("http://[::1]:{port}/agent"),
        "ftp://127.0.0.1/agent".to_owned(),
    ];
    let worker = worker(&app, "", None);

    for (n, url) in (0..).zip(&shapes) {
        set_agent_url(&app, &tenant, url).await;
        deliver(&app, &tenant, Platform::Telegram, telegram_text(2001 + n, "hi")).await;
        let id = failed(worker.step().await.unwrap());
        assert_eq!(
            message_state(&app, id).await,
            ("dispatch_failed".to_owned(), Some(AGENT_REFUSED.to_owned())),
            "{url}"
        );
    }
    assert_eq!(internal.hits(), 0, "the worker never reached the internal server");
    assert_eq!(
        worker.step().await.unwrap(),
        StepOutcome::Empty,
        "nothing left to retry"
    );
}

#[tokio::test]
async fn the_operators_agent_url_is_checked_when_connecting_too() {
    let app = spawn_app().await;
    let tenant = provision_tenant(&app.pool, "acme").await;
    let internal = Internal::start(secret_page).await;
    let worker = worker(
        &app,
        "",
        Some(format!("http://localhost:{}/agent", internal.port)),
    );

    deliver(&app, &tenant, Platform::Telegram, telegram_text(2101, "hi")).await;
    let id = failed(worker.step().await.unwrap());
    assert_eq!(message_state(&app, id).await.1.as_deref(), Some(AGENT_REFUSED));
    assert_eq!(internal.hits(), 0);
}

#[tokio::test]
async fn a_refused_platform_api_url_fails_the_reply_part_and_nothing_is_posted() {
    let app = spawn_app().await;
    let internal = Internal::start(secret_page).await;
    // The mapped form of loopback: the policy below allows 127.0.0.1 as written, not this.
    let base = format!("http://[::ffff:127.0.0.1]:{}", internal.port);
    let tenant = provision_tenant_at(&app.pool, "acme", Some(&base)).await;
    let agent = FakeAgent::start(&tenant.dispatch_secret).await;
    let worker = worker(&app, "127.0.0.1", Some(agent.url.clone()));

    deliver(&app, &tenant, Platform::Telegram, telegram_text(2201, "hi")).await;
    let outcome = worker.step().await.unwrap();
    let StepOutcome::Executed(id) = outcome else {
        panic!("the agent answered; got {outcome:?}");
    };
    assert_eq!(agent.calls().len(), 1);
    assert_eq!(
        part_states(&app, id).await,
        [("failed".to_owned(), Some(PLATFORM_REFUSED.to_owned()))]
    );
    assert_eq!(message_state(&app, id).await.0, "delivery_failed");
    assert_eq!(
        internal.hits(),
        0,
        "neither the reply text nor the bot token left"
    );
}

#[tokio::test]
async fn a_redirect_to_an_internal_server_is_not_followed() {
    let app = spawn_app().await;
    let tenant = provision_tenant(&app.pool, "acme").await;
    let internal = Internal::start(secret_page).await;
    // The redirect target is only known once the internal server runs.
    static TARGET: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TARGET.get_or_init(|| format!("http://127.0.0.1:{}/secret", internal.port));
    let redirector = Internal::start(|| {
        let location = TARGET
            .get()
            .expect("the target is set before the server starts")
            .clone();
        (StatusCode::TEMPORARY_REDIRECT, [(header::LOCATION, location)]).into_response()
    })
    .await;
    // Even with loopback allowed (the test policy), a redirect is an answer, not a path.
    let worker = worker(
        &app,
        "127.0.0.1",
        Some(format!("http://127.0.0.1:{}/agent", redirector.port)),
    );

    deliver(&app, &tenant, Platform::Telegram, telegram_text(2301, "hi")).await;
    let id = failed(worker.step().await.unwrap());
    assert_eq!(redirector.hits(), 1);
    assert_eq!(internal.hits(), 0, "the redirect was not followed");
    let (status, error) = message_state(&app, id).await;
    assert_eq!(status, "dispatch_failed");
    let error = error.unwrap();
    assert!(error.ends_with("answered 307 Temporary Redirect"), "{error}");
    assert!(!error.contains("/secret"), "{error}");
}

#[tokio::test]
async fn an_internal_services_answer_never_reaches_last_error_or_the_admin_api() {
    let app = spawn_app().await;
    // An internal service the operator allowed (loopback in tests): what it says still stays
    // out of what the tenant can read.
    let internal = Internal::start(secret_error).await;
    let tenant = provision_tenant(&app.pool, "acme").await;
    let key = admin_key(&app, &tenant).await;
    set_agent_url(
        &app,
        &tenant,
        &format!("http://127.0.0.1:{}/agent", internal.port),
    )
    .await;
    let worker = worker(&app, "127.0.0.1", None);

    deliver(&app, &tenant, Platform::Telegram, telegram_text(2401, "hi")).await;
    let id = failed(worker.step().await.unwrap());
    assert_eq!(internal.hits(), 1);
    let (_, error) = message_state(&app, id).await;
    let error = error.unwrap();
    assert!(error.ends_with("answered 400 Bad Request"), "{error}");

    let (status, one) = call(&app, &key, Method::GET, &format!("/v1/admin/messages/{id}"), None).await;
    assert_eq!(status, 200);
    let (_, list) = call(&app, &key, Method::GET, "/v1/admin/messages", None).await;
    for body in [&one, &list, &error] {
        assert!(!body.contains(SECRET) && !body.contains("<html>"), "{body}");
    }
}

#[tokio::test]
async fn a_platform_api_that_answers_with_internal_text_is_kept_to_a_short_clean_reason() {
    let app = spawn_app().await;
    fn telegram_error() -> Response {
        let description = format!("{SECRET}\n{}", "x".repeat(500));
        let body = json!({"ok": false, "error_code": 400, "description": description});
        (StatusCode::BAD_REQUEST, axum::Json(body)).into_response()
    }
    fn slack_error() -> Response {
        axum::Json(json!({"ok": false, "error": format!("<b>{SECRET}</b>")})).into_response()
    }
    let telegram = Internal::start(telegram_error).await;
    let slack = Internal::start(slack_error).await;
    let tenant = provision_tenant(&app.pool, "acme").await;
    let mut owner = app.db.owner_conn().await;
    for (connector, port) in [(tenant.telegram, telegram.port), (tenant.slack, slack.port)] {
        sqlx::query("update channel_connectors set api_base_url = $2 where id = $1")
            .bind(connector)
            .bind(format!("http://127.0.0.1:{port}"))
            .execute(&mut owner)
            .await
            .unwrap();
    }
    let agent = FakeAgent::start(&tenant.dispatch_secret).await;
    let worker = worker(&app, "127.0.0.1", Some(agent.url.clone()));

    deliver(&app, &tenant, Platform::Telegram, telegram_text(2501, "hi")).await;
    let StepOutcome::Executed(id) = worker.step().await.unwrap() else {
        panic!("the agent answered");
    };
    let error = part_states(&app, id).await[0].1.clone().unwrap();
    assert!(error.starts_with("telegram 400: "), "{error}");
    assert!(error.chars().count() <= "telegram 400: ".len() + 81, "{error}");
    assert!(!error.contains('\n'), "{error}");

    deliver(
        &app,
        &tenant,
        Platform::Slack,
        slack_text("1718002500.000100", "hi"),
    )
    .await;
    let StepOutcome::Executed(id) = worker.step().await.unwrap() else {
        panic!("the agent answered");
    };
    // An unknown Slack error leaves the part in doubt (to be reconciled); what is kept of
    // the answer is a fixed code, not the text.
    let error = part_states(&app, id).await[0].1.clone();
    assert_eq!(error.as_deref(), Some("slack: unrecognised_error"));
}

/// Runs the binary with `args` against `app`'s database; (success, stdout, stderr).
fn cli(app: &TestApp, args: &[&str], allow: Option<&str>) -> (bool, String, String) {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_channel-bridge"));
    command
        .args(args)
        .env("DATABASE_URL", app.db.url())
        .env_remove("CB_EGRESS_ALLOW")
        .stdin(std::process::Stdio::null());
    if let Some(allow) = allow {
        command.env("CB_EGRESS_ALLOW", allow);
    }
    let output = command.output().unwrap();
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    (
        output.status.success(),
        text(&output.stdout),
        text(&output.stderr),
    )
}

#[tokio::test]
async fn the_cli_refuses_internal_urls_unless_cb_egress_allow_lists_them() {
    let app = spawn_app().await;
    let create = [
        "tenant",
        "create",
        "--slug",
        "acme",
        "--agent-url",
        "http://10.0.0.1/agent",
    ];
    let (ok, _, stderr) = cli(&app, &create, None);
    assert!(!ok);
    assert!(stderr.contains("--agent-url is a private address"), "{stderr}");
    assert!(stderr.contains("CB_EGRESS_ALLOW"), "{stderr}");

    let (ok, stdout, stderr) = cli(&app, &create, Some("10.0.0.0/8"));
    assert!(ok, "{stderr}");
    let tenant: Value = serde_json::from_str(&stdout).unwrap();
    let tenant_id = tenant["tenant_id"].as_str().unwrap();

    let add = [
        "connector",
        "add",
        "--tenant",
        tenant_id,
        "--platform",
        "telegram",
        "--verification-secret",
        "s3cret",
        "--api-base-url",
        "http://169.254.169.254",
    ];
    let (ok, _, stderr) = cli(&app, &add, Some("10.0.0.0/8"));
    assert!(!ok);
    assert!(
        stderr.contains("--api-base-url is a link-local address"),
        "{stderr}"
    );
}
