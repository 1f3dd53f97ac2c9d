//! The web console: in a real headless Chromium driven over WebDriver (chromedriver), and
//! over plain HTTP for what a browser would hide (cookies, status codes, raw markup).
//!
//! The console's cookie is `Secure`; browsers still send it over plain http to `localhost`
//! (a secure context), so the browser opens the console at `http://localhost:<port>`. The
//! HTTP tests carry the cookie by hand (reqwest keeps no cookie jar here).

use std::panic::AssertUnwindSafe;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use channel_bridge::dispatch::{StepOutcome, Worker};
use channel_bridge::domain::{MessageId, Platform};
use fantoccini::{Client, ClientBuilder, Locator};
use futures::FutureExt;
use serde_json::json;

use crate::support::fake_agent::{FakeAgent, Reply};
use crate::support::fake_platforms::FakePlatforms;
use crate::support::platforms::*;
use crate::support::{spawn_app, worker, TestApp};

// ---------------------------------------------------------------------------------------
// Browser harness

/// chromedriver as a child process on a free port, killed when dropped.
pub(crate) struct Chromedriver {
    child: Child,
    url: String,
}

impl Drop for Chromedriver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn on_path(program: &str) -> Option<String> {
    let output = Command::new("which").arg(program).output().ok()?;
    let path = String::from_utf8(output.stdout).ok()?.trim().to_owned();
    (output.status.success() && !path.is_empty()).then_some(path)
}

/// chromedriver and Chromium, installed from Debian's packages when missing and running as
/// root (CI and fresh machines); otherwise the test says what to install. Once per process:
/// the browser tests run in parallel, and a second `apt-get` beside the first fails on
/// dpkg's lock (which each also waits for, in case something else holds it).
fn browser_binaries() -> (String, String) {
    static BINARIES: std::sync::OnceLock<(String, String)> = std::sync::OnceLock::new();
    BINARIES.get_or_init(find_or_install_browser).clone()
}

fn find_or_install_browser() -> (String, String) {
    let found = || Some((on_path("chromedriver")?, on_path("chromium")?));
    if let Some(found) = found() {
        return found;
    }
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| out.stdout.trim_ascii() == b"0");
    assert!(
        root,
        "the console tests need chromium and chromedriver (apt-get install chromium chromium-driver)"
    );
    let install = || {
        Command::new("apt-get")
            .args([
                "-o",
                "DPkg::Lock::Timeout=600",
                "install",
                "-y",
                "chromium",
                "chromium-driver",
            ])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()
            .is_ok_and(|s| s.success())
    };
    if !install() {
        let _ = Command::new("apt-get").arg("update").status();
        assert!(install(), "apt-get install chromium chromium-driver failed");
    }
    found().expect("chromium and chromedriver are on PATH after installing them")
}

async fn start_chromedriver() -> (Chromedriver, String) {
    // chromedriver takes a port number, not a listener: a free one is asked of the kernel
    // and handed over (a race with another process is possible, and would fail loudly).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free local port")
        .port();
    let (driver, chromium) = browser_binaries();
    let child = Command::new(driver)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromedriver starts");
    let chromedriver = Chromedriver {
        child,
        url: format!("http://127.0.0.1:{port}"),
    };
    let status = format!("{}/status", chromedriver.url);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let ready = reqwest::get(&status)
            .await
            .ok()
            .filter(|r| r.status().is_success());
        if ready.is_some() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "chromedriver did not answer within 20 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    (chromedriver, chromium)
}

/// How big the browser's page is.
pub(crate) enum Screen {
    Laptop,
    /// A phone's viewport (390×844, as an iPhone 12–15), by Chromium's device emulation:
    /// a window cannot be made narrower than 500 px.
    Phone,
    /// A small phone's (375×667, as an iPhone SE), likewise.
    SmallPhone,
}

/// A headless Chromium session (and its chromedriver).
pub(crate) async fn browser(screen: Screen) -> (Chromedriver, Client) {
    let (chromedriver, chromium) = start_chromedriver().await;
    // No sandbox: the tests may run as root, where Chromium's sandbox refuses to start.
    let mut options = json!({
        "binary": chromium,
        "args": ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                 "--window-size=1280,900"],
    });
    let phone = match screen {
        Screen::Laptop => None,
        Screen::Phone => Some((390, 844)),
        Screen::SmallPhone => Some((375, 667)),
    };
    if let Some((width, height)) = phone {
        options["mobileEmulation"] =
            json!({"deviceMetrics": {"width": width, "height": height, "pixelRatio": 3}});
    }
    let mut capabilities = serde_json::Map::new();
    capabilities.insert("goog:chromeOptions".into(), options);
    let client = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(capabilities)
        .connect(&chromedriver.url)
        .await
        .expect("a WebDriver session starts");
    (chromedriver, client)
}

/// Runs a browser flow; on failure saves a screenshot under `target/console-screenshots/`
/// before failing the test.
pub(crate) async fn with_screenshot_on_failure<F>(client: Client, name: &str, flow: F)
where
    F: std::future::Future<Output = ()>,
{
    let outcome = AssertUnwindSafe(flow).catch_unwind().await;
    if let Err(panic) = outcome {
        let target = std::env::var("CARGO_TARGET_DIR")
            .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/target").into());
        let dir = std::path::Path::new(&target).join("console-screenshots");
        if let Ok(png) = client.screenshot().await {
            let _ = std::fs::create_dir_all(&dir);
            let path = dir.join(format!("{name}.png"));
            if std::fs::write(&path, png).is_ok() {
                eprintln!("screenshot: {}", path.display());
            }
        }
        let _ = client.close().await;
        std::panic::resume_unwind(panic);
    }
    let _ = client.close().await;
}

/// Saved under `target/console-screenshots/` to look at (the failure screenshots' folder).
pub(crate) async fn screenshot(client: &Client, name: &str) {
    let target = std::env::var("CARGO_TARGET_DIR")
        .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/target").into());
    let dir = std::path::Path::new(&target).join("console-screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    let png = client.screenshot().await.unwrap();
    std::fs::write(dir.join(format!("{name}.png")), png).unwrap();
}

/// How far the page scrolls sideways (0 when it fits), and the text smaller than 11 px: each
/// such element's tag and size (the chart's SVG aside, which scales as a picture).
pub(crate) async fn overflow_and_small_text(client: &Client) -> (i64, Vec<String>) {
    let found = client
        .execute(
            "const small = [];
             for (const el of document.querySelectorAll('body *')) {
               if (el.closest('svg') || !el.childNodes.length) continue;
               const text = [...el.childNodes].some(n => n.nodeType === 3 && n.textContent.trim());
               const size = parseFloat(getComputedStyle(el).fontSize);
               if (text && el.getClientRects().length && size < 11) small.push(el.tagName + ' ' + size);
             }
             return [document.documentElement.scrollWidth - document.documentElement.clientWidth, small];",
            vec![],
        )
        .await
        .unwrap();
    let small = found[1]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_owned())
        .collect();
    (found[0].as_i64().unwrap(), small)
}

/// The console's base URL as the browser opens it (`localhost`: see the module doc).
pub(crate) fn console(app: &TestApp, path: &str) -> String {
    format!("http://localhost:{}{path}", app.addr.port())
}

pub(crate) async fn sign_in_with(client: &Client, app: &TestApp, key: &str) {
    client.goto(&console(app, "/console")).await.unwrap();
    let field = client.find(Locator::Id("key")).await.unwrap();
    field.send_keys(key).await.unwrap();
    client
        .find(Locator::Id("sign-in"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_for_page(client, "/console/overview", None).await;
}

/// Waits (20 s at most) until the browser shows `path`, with a query that contains `query`
/// when given: a click may return before the navigation it starts has finished.
pub(crate) async fn wait_for_page(client: &Client, path: &str, query: Option<&str>) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let url = client.current_url().await.unwrap();
        let query_matches = query.is_none_or(|q| url.query().is_some_and(|have| have.contains(q)));
        let loaded = client
            .execute("return document.readyState;", vec![])
            .await
            .is_ok_and(|state| state == "complete");
        if url.path() == path && query_matches && loaded {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the browser stayed at {url}, not {path}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The `data-status` of the element `css` selects, or `None` when there is none.
async fn status_of(client: &Client, css: &str) -> Option<String> {
    let element = client.find(Locator::Css(css)).await.ok()?;
    element.attr("data-status").await.ok().flatten()
}

/// Reloads the page until `css`'s status is `want`, for at most 20 s.
async fn reload_until_status(client: &Client, css: &str, want: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if status_of(client, css).await.as_deref() == Some(want) {
            return;
        }
        assert!(Instant::now() < deadline, "{css} never became {want}");
        tokio::time::sleep(Duration::from_millis(50)).await;
        client.refresh().await.unwrap();
    }
}

// ---------------------------------------------------------------------------------------
// Data

struct Seeded {
    app: TestApp,
    _platforms: FakePlatforms,
    _agent: FakeAgent,
    worker: Arc<Worker>,
    key: String,
    other_key: String,
    failed: MessageId,
    /// acme's Telegram connector.
    connector: channel_bridge::domain::ConnectorId,
}

pub(crate) async fn admin_key(app: &TestApp, tenant: channel_bridge::domain::TenantId) -> String {
    channel_bridge::admin::operator::issue(&app.pool, tenant, "console")
        .await
        .unwrap()
        .key
}

/// Tenant acme with one turn the agent refused (`dispatch_failed`) and one answered and
/// delivered; tenant globex with a key and nothing else.
async fn seeded(first_text: &str) -> Seeded {
    let app = spawn_app().await;
    let platforms = FakePlatforms::start().await;
    let acme = provision_tenant_at(&app.pool, "acme", Some(&platforms.base_url)).await;
    let globex = provision_tenant(&app.pool, "globex").await;
    let agent = FakeAgent::start(&acme.dispatch_secret).await;
    agent.script([Reply::Json(400, json!({"error": "bad payload"}), None)]);
    let worker = worker(&app, &agent.url, |_| {});
    deliver(&app, &acme, Platform::Telegram, telegram_text(7001, first_text)).await;
    deliver(
        &app,
        &acme,
        Platform::Telegram,
        telegram_text(7002, "thanks anyway"),
    )
    .await;
    let StepOutcome::Failed(failed) = worker.step().await.unwrap() else {
        panic!("the first turn fails")
    };
    assert!(matches!(worker.step().await.unwrap(), StepOutcome::Executed(_)));
    Seeded {
        key: admin_key(&app, acme.tenant).await,
        other_key: admin_key(&app, globex.tenant).await,
        app,
        _platforms: platforms,
        _agent: agent,
        worker,
        failed,
        connector: acme.telegram,
    }
}

// ---------------------------------------------------------------------------------------
// Browser flows

#[tokio::test]
async fn an_admin_signs_in_finds_a_failed_turn_redispatches_it_and_watches_it_delivered() {
    let s = seeded("where is my parcel?").await;
    let (_driver, client) = browser(Screen::Laptop).await;
    let c = client.clone();
    with_screenshot_on_failure(client, "redispatch_flow", async move {
        let turn = format!("#turn-{}", s.failed);
        sign_in_with(&c, &s.app, &s.key).await;
        c.goto(&console(&s.app, "/console/turns")).await.unwrap();

        // The conversation is listed; a search narrows it to the turn.
        assert_eq!(status_of(&c, &turn).await.as_deref(), Some("dispatch_failed"));
        let q = c.find(Locator::Id("q")).await.unwrap();
        q.send_keys("parcel").await.unwrap();
        c.find(Locator::Id("search"))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        wait_for_page(&c, "/console/turns", Some("q=parcel")).await;
        let source = c.source().await.unwrap();
        assert!(source.contains("where is my parcel?"));
        assert!(
            !source.contains("thanks anyway"),
            "the search leaves the other turn out"
        );

        // The failed page offers a redispatch; it queues the turn and shows it.
        c.find(Locator::LinkText("Failed"))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        wait_for_page(&c, "/console/failed", None).await;
        let button = format!("#dispatch-failed {turn} button.redispatch");
        c.find(Locator::Css(&button))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        wait_for_page(&c, &format!("/console/turns/{}", s.failed), Some("queued=1")).await;
        c.find(Locator::Id("queued")).await.unwrap();

        // The worker answers it (the agent echoes now) and the page, reloaded, says so.
        let worker = s.worker.clone();
        let step = tokio::spawn(async move { worker.step().await.unwrap() });
        reload_until_status(&c, "#status", "executed").await;
        assert_eq!(step.await.unwrap(), StepOutcome::Executed(s.failed));
        // The page may have been loaded between the answer and the post of its part.
        reload_until_status(&c, ".part", "sent").await;
        let response = c
            .find(Locator::Id("response"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(!response.is_empty() && response != "No answer.", "{response}");

        // Its connectors, without their secrets.
        c.goto(&console(&s.app, "/console/connectors")).await.unwrap();
        let connectors = c.source().await.unwrap();
        assert!(connectors.contains(&s.connector.to_string()));
        for secret in [SLACK_SECRET, WHATSAPP_SECRET, TELEGRAM_SECRET] {
            assert!(!connectors.contains(secret), "no secret on the page");
        }

        // Signed out, the pages send back to the sign-in form.
        c.find(Locator::Id("sign-out"))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        wait_for_page(&c, "/console/sign-in", None).await;
        c.goto(&console(&s.app, "/console/turns")).await.unwrap();
        assert_eq!(c.current_url().await.unwrap().path(), "/console/sign-in");

        // Another tenant's key sees none of it, not even by the turn's id.
        sign_in_with(&c, &s.app, &s.other_key).await;
        c.goto(&console(&s.app, "/console/turns")).await.unwrap();
        c.find(Locator::Id("no-turns")).await.unwrap();
        assert!(!c.source().await.unwrap().contains("parcel"));
        c.goto(&console(&s.app, &format!("/console/turns/{}", s.failed)))
            .await
            .unwrap();
        let error = c.find(Locator::Id("error")).await.unwrap().text().await.unwrap();
        assert_eq!(error, "message not found");
        assert!(!c.source().await.unwrap().contains("parcel"));
        c.goto(&console(&s.app, "/console/failed")).await.unwrap();
        assert!(
            c.find(Locator::Css(".turn")).await.is_err(),
            "globex has no failed turns"
        );
    })
    .await;
}

#[tokio::test]
async fn on_a_phone_sized_window_no_page_scrolls_sideways() {
    // A long unbroken word is the usual cause of sideways scrolling.
    let s = seeded(&format!("please check {}", "x".repeat(300))).await;
    let (_driver, client) = browser(Screen::Phone).await;
    let c = client.clone();
    with_screenshot_on_failure(client, "phone", async move {
        c.goto(&console(&s.app, "/console/sign-in")).await.unwrap();
        let overflow = "return document.documentElement.scrollWidth - window.innerWidth;";
        let fits = |page: String| {
            let c = c.clone();
            async move {
                let excess = c.execute(overflow, vec![]).await.unwrap();
                assert!(
                    excess.as_i64().is_some_and(|px| px <= 0),
                    "{page} overflows by {excess} px"
                );
            }
        };
        fits("sign-in".into()).await;
        sign_in_with(&c, &s.app, &s.key).await;
        let width = c.execute("return window.innerWidth;", vec![]).await.unwrap();
        assert_eq!(width.as_i64(), Some(390), "a phone-sized viewport");
        for path in [
            "/console/turns".to_owned(),
            format!("/console/turns/{}", s.failed),
            "/console/failed".to_owned(),
            "/console/connectors".to_owned(),
            "/console/links".to_owned(),
            "/console/users".to_owned(),
            "/console/conversation?user_id=alice".to_owned(),
        ] {
            c.goto(&console(&s.app, &path)).await.unwrap();
            c.find(Locator::Css("main h1")).await.unwrap();
            fits(path).await;
        }
        // The forms, opened, fit too.
        c.goto(&console(&s.app, "/console/connectors")).await.unwrap();
        c.find(Locator::Css("#new-connector summary"))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        c.find(Locator::Css(".connector details.rotate summary"))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        c.find(Locator::Id("new-secret")).await.unwrap();
        fits("/console/connectors, forms open".into()).await;
        c.goto(&console(&s.app, "/console/users")).await.unwrap();
        c.find(Locator::Css(r#".user[data-user="alice"]"#)).await.unwrap();
        // The failed turn offers its redispatch in the conversation too.
        c.goto(&console(&s.app, "/console/conversation?user_id=alice"))
            .await
            .unwrap();
        let failed = format!("#turn-{} button.redispatch", s.failed);
        c.find(Locator::Css(&failed)).await.unwrap();
    })
    .await;
}

// ---------------------------------------------------------------------------------------
// Plain HTTP

pub(crate) fn no_redirects() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// Signs in over HTTP; returns the `Cookie` header value of the session.
pub(crate) async fn http_sign_in(app: &TestApp, key: &str) -> String {
    let response = no_redirects()
        .post(app.url("/console/sign-in"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("key={key}"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 303);
    let set_cookie = response.headers()["set-cookie"].to_str().unwrap().to_owned();
    for attribute in ["HttpOnly", "Secure", "SameSite=Strict", "Path=/console"] {
        assert!(set_cookie.contains(attribute), "{set_cookie} lacks {attribute}");
    }
    // `cbk_<prefix>_<secret>`; the secret is base64url and may itself hold `_`.
    let secret = key.splitn(3, '_').nth(2).unwrap();
    assert!(!set_cookie.contains(secret), "the key is not in the cookie");
    set_cookie.split(';').next().unwrap().to_owned()
}

pub(crate) async fn get_page(app: &TestApp, cookie: &str, path: &str) -> (u16, String) {
    let response = no_redirects()
        .get(app.url(path))
        .header("cookie", cookie)
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

async fn status_in_db(app: &TestApp, id: MessageId) -> (String, i64) {
    let mut owner = app.db.owner_conn().await;
    sqlx::query_as(
        "select m.status, count(q.message_id)
           from channel_messages m left join dispatch_queue q on q.message_id = m.id
          where m.id = $1 group by m.status",
    )
    .bind(id)
    .fetch_one(&mut owner)
    .await
    .unwrap()
}

#[tokio::test]
async fn a_bad_key_gets_the_form_again_with_an_error_and_no_cookie() {
    let app = spawn_app().await;
    provision_tenant(&app.pool, "acme").await;
    for key in ["cbk_abcdefgh_not-a-real-secret", "not even shaped like a key"] {
        let response = no_redirects()
            .post(app.url("/console/sign-in"))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(format!("key={}", key.replace(' ', "+")))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 401);
        assert!(response.headers().get("set-cookie").is_none());
        let body = response.text().await.unwrap();
        assert!(
            body.contains(r#"id="error""#) && body.contains("That key is not valid"),
            "{body}"
        );
    }
    let response = no_redirects()
        .get(app.url("/console/turns"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 303, "no session: back to the sign-in form");
    assert_eq!(response.headers()["location"], "/console/sign-in");
}

#[tokio::test]
async fn a_post_without_the_session_csrf_token_is_refused_with_403_and_queues_nothing() {
    let s = seeded("refused turn").await;
    let cookie = http_sign_in(&s.app, &s.key).await;
    let path = format!("/console/turns/{}/redispatch", s.failed);
    for body in ["", "csrf=", "csrf=guessed-token"] {
        let response = no_redirects()
            .post(s.app.url(&path))
            .header("cookie", &cookie)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 403, "body {body:?}");
    }
    assert_eq!(
        status_in_db(&s.app, s.failed).await,
        ("dispatch_failed".into(), 0)
    );

    // With the page's token the same POST works: the 403s were the token's doing.
    let (_, page) = get_page(&s.app, &cookie, &format!("/console/turns/{}", s.failed)).await;
    let token = csrf_of(&page);
    let response = no_redirects()
        .post(s.app.url(&path))
        .header("cookie", &cookie)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("csrf={token}"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 303);
    assert_eq!(status_in_db(&s.app, s.failed).await, ("accepted".into(), 1));
}

#[tokio::test]
async fn chat_text_with_markup_is_shown_as_text_never_run() {
    let app = spawn_app().await;
    let acme = provision_tenant(&app.pool, "acme").await;
    let attack = r#"<script>alert(1)</script><img src=x onerror="alert(2)">"#;
    deliver(&app, &acme, Platform::Telegram, telegram_text(7101, attack)).await;
    let cookie = http_sign_in(&app, &admin_key(&app, acme.tenant).await).await;

    let (status, list) = get_page(&app, &cookie, "/console/turns").await;
    assert_eq!(status, 200);
    // As askama escapes: `<`, `>` and `"` as `&#60;`, `&#62;` and `&#34;`.
    let escaped = "&#60;script&#62;alert(1)&#60;/script&#62;&#60;img src=x onerror=&#34;alert(2)&#34;&#62;";
    assert!(list.contains(escaped), "{list}");
    assert!(!list.contains("<script>") && !list.contains("<img"), "{list}");

    let id = list
        .split(r#"id="turn-"#)
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap()
        .to_owned();
    let (status, detail) = get_page(&app, &cookie, &format!("/console/turns/{id}")).await;
    assert_eq!(status, 200);
    assert!(detail.contains(escaped));
    assert!(!detail.contains("<script>") && !detail.contains("<img"));

    // The search box gives back what was typed, escaped too.
    let (_, searched) = get_page(&app, &cookie, "/console/turns?q=%22%3E%3Cscript%3E").await;
    assert!(
        searched.contains(r#"value="&#34;&#62;&#60;script&#62;""#),
        "{searched}"
    );
    assert!(!searched.contains("<script>"));
}

/// The CSRF token of a signed-in page.
pub(crate) fn csrf_of(page: &str) -> String {
    page.split(r#"name="csrf" value=""#)
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("the page has a form with the CSRF token")
        .to_owned()
}

#[tokio::test]
async fn a_reply_telegram_refused_for_good_is_listed_as_failed_and_the_resend_button_delivers_it() {
    let app = spawn_app().await;
    let platforms = FakePlatforms::start().await;
    let acme = provision_tenant_at(&app.pool, "acme", Some(&platforms.base_url)).await;
    let agent = FakeAgent::start(&acme.dispatch_secret).await;
    let worker = worker(&app, &agent.url, |_| {});
    platforms.script(
        Platform::Telegram,
        [crate::support::fake_platforms::Answer::Status(
            403,
            json!({"ok": false, "error_code": 403, "description": "Forbidden: bot was blocked by the user"}),
            None,
        )],
    );
    deliver(&app, &acme, Platform::Telegram, telegram_text(7201, "answer me")).await;
    let StepOutcome::Executed(id) = worker.step().await.unwrap() else {
        panic!("the agent answers")
    };
    assert_eq!(status_in_db(&app, id).await, ("delivery_failed".into(), 0));
    let cookie = http_sign_in(&app, &admin_key(&app, acme.tenant).await).await;

    let (_, failed) = get_page(&app, &cookie, "/console/failed").await;
    let section = failed.split(r#"<section id="delivery-failed">"#).nth(1).unwrap();
    assert!(section.contains(&format!(r#"id="turn-{id}""#)), "{failed}");
    assert!(
        section.contains("bot was blocked by the user"),
        "the error is shown"
    );
    assert!(section.contains(&format!(r#"action="/console/turns/{id}/resend""#)));

    let response = no_redirects()
        .post(app.url(&format!("/console/turns/{id}/resend")))
        .header("cookie", &cookie)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("csrf={}", csrf_of(&failed)))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 303);
    assert_eq!(
        response.headers()["location"].to_str().unwrap(),
        format!("/console/turns/{id}?queued=1")
    );
    assert_eq!(status_in_db(&app, id).await, ("executed".into(), 1));
    assert_eq!(worker.step().await.unwrap(), StepOutcome::Delivered(id));
    let (_, detail) = get_page(&app, &cookie, &format!("/console/turns/{id}")).await;
    assert!(
        detail.contains(r#"class="card part" data-status="sent""#),
        "{detail}"
    );
    assert_eq!(
        platforms.sent_to(Platform::Telegram).len(),
        2,
        "refused once, then posted"
    );
}

#[tokio::test]
async fn revoking_the_key_ends_its_console_sessions() {
    let app = spawn_app().await;
    let acme = provision_tenant(&app.pool, "acme").await;
    let issued = channel_bridge::admin::operator::issue(&app.pool, acme.tenant, "console")
        .await
        .unwrap();
    let cookie = http_sign_in(&app, &issued.key).await;
    assert_eq!(get_page(&app, &cookie, "/console/turns").await.0, 200);

    channel_bridge::admin::operator::revoke(&app.pool, issued.id)
        .await
        .unwrap();
    let response = no_redirects()
        .get(app.url("/console/turns"))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 303);
    assert_eq!(response.headers()["location"], "/console/sign-in");
}

// ---------------------------------------------------------------------------------------
// Connectors, links and conversations by user

/// A tenant with a connector per platform (as `provision_tenant`) and no link at all.
async fn tenant_without_links(app: &TestApp, slug: &str) -> Provisioned {
    let keys = channel_bridge::secrets::Keyring::ephemeral();
    let created = channel_bridge::provision::create_tenant(&app.pool, &keys, slug, slug, None)
        .await
        .unwrap();
    let mut ids = Vec::new();
    for platform in Platform::ALL {
        let new = connector(platform, None);
        let added = channel_bridge::provision::add_connector(&app.pool, &keys, created.tenant_id, &new)
            .await
            .unwrap();
        ids.push(added.connector_id);
    }
    Provisioned {
        tenant: created.tenant_id,
        dispatch_secret: created.dispatch_secret,
        slack: ids[0],
        whatsapp: ids[1],
        telegram: ids[2],
    }
}

pub(crate) async fn click(client: &Client, css: &str) {
    client
        .find(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("{css}: {e}"))
        .click()
        .await
        .unwrap();
}

pub(crate) async fn type_into(client: &Client, css: &str, text: &str) {
    client
        .find(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("{css}: {e}"))
        .send_keys(text)
        .await
        .unwrap();
}

async fn choose(client: &Client, css: &str, value: &str) {
    client
        .find(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("{css}: {e}"))
        .select_by_value(value)
        .await
        .unwrap();
}

/// POSTs a Telegram update to `/v1/hooks/{tenant}/{connector}` with `secret` as its
/// `X-Telegram-Bot-Api-Secret-Token`; the status.
async fn telegram_hook(app: &TestApp, path: &str, secret: &str, update_id: i64) -> u16 {
    let headers = [
        ("content-type", "application/json".to_owned()),
        ("x-telegram-bot-api-secret-token", secret.to_owned()),
    ];
    let body = telegram_text(update_id, &format!("update {update_id}"));
    post(app, path, &headers, body).await.status().as_u16()
}

/// The tenant's audit actions, oldest first, with their actors.
async fn audit_actions(app: &TestApp, tenant: channel_bridge::domain::TenantId) -> Vec<(String, String)> {
    let mut owner = app.db.owner_conn().await;
    sqlx::query_as("select action, actor from audit_log where tenant_id = $1 order by at, id")
        .bind(tenant)
        .fetch_all(&mut owner)
        .await
        .unwrap()
}

/// In the console: a Telegram connector added with `secret` typed into the form; its card's
/// selector and its webhook path.
async fn add_telegram_connector_in_console(
    c: &Client,
    app: &TestApp,
    tenant: channel_bridge::domain::TenantId,
    secret: &str,
) -> (String, String) {
    c.goto(&console(app, "/console/connectors")).await.unwrap();
    click(c, "#new-connector summary").await;
    choose(c, "#new-platform", "telegram").await;
    type_into(c, "#new-name", "Console bot").await;
    type_into(c, "#new-secret", secret).await;
    click(c, "#create-connector").await;
    wait_for_page(c, "/console/connectors", Some("notice=created")).await;
    let url = c.current_url().await.unwrap();
    let id: uuid::Uuid = url
        .query_pairs()
        .find(|(name, _)| name == "id")
        .map(|(_, id)| id.parse().unwrap())
        .expect("the page names the new connector");
    let card = format!("#connector-{id}");
    let hook = channel_bridge::provision::webhook_path(tenant, channel_bridge::domain::ConnectorId(id));
    (card, hook)
}

#[tokio::test]
async fn a_connector_added_in_the_console_takes_webhooks_signed_with_the_typed_secret_which_it_never_shows() {
    let app = spawn_app().await;
    let acme = provision_tenant(&app.pool, "acme").await;
    let issued = channel_bridge::admin::operator::issue(&app.pool, acme.tenant, "console")
        .await
        .unwrap();
    let (_driver, client) = browser(Screen::Laptop).await;
    let c = client.clone();
    let first = "typed-in-the-console-1";
    with_screenshot_on_failure(client, "connector_flow", async move {
        sign_in_with(&c, &app, &issued.key).await;
        // Add a Telegram connector with a secret typed into the form.
        let (_, hook) = add_telegram_connector_in_console(&c, &app, acme.tenant, first).await;
        let source = c.source().await.unwrap();
        assert!(source.contains(&hook), "the webhook URL to register is shown");
        assert!(!source.contains(first), "the secret is never shown");

        // A webhook signed with the typed secret is accepted; another secret is not.
        assert_eq!(telegram_hook(&app, &hook, first, 8001).await, 200);
        assert_eq!(telegram_hook(&app, &hook, "a-guessed-secret", 8002).await, 401);
    })
    .await;
}

#[tokio::test]
async fn a_connector_rotated_in_the_console_takes_both_secrets_until_disabled_and_each_change_is_audited() {
    let app = spawn_app().await;
    let acme = provision_tenant(&app.pool, "acme").await;
    let issued = channel_bridge::admin::operator::issue(&app.pool, acme.tenant, "console")
        .await
        .unwrap();
    let (_driver, client) = browser(Screen::Laptop).await;
    let c = client.clone();
    let (first, second) = ("typed-in-the-console-1", "rotated-in-the-console-2");
    with_screenshot_on_failure(client, "connector_rotation", async move {
        sign_in_with(&c, &app, &issued.key).await;
        let (card, hook) = add_telegram_connector_in_console(&c, &app, acme.tenant, first).await;

        // Rotated with the default grace (24 h): the old and the new secret both work.
        click(&c, &format!("{card} details.rotate summary")).await;
        type_into(&c, &format!("{card} input[name=verification_secret]"), second).await;
        click(&c, &format!("{card} button.rotate")).await;
        wait_for_page(&c, "/console/connectors", Some("notice=rotated")).await;
        let previous = c
            .find(Locator::Css(&format!("{card} .previous")))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(previous.contains("accepted until"), "{previous}");
        let source = c.source().await.unwrap();
        assert!(
            !source.contains(first) && !source.contains(second),
            "no secret on the page"
        );
        assert_eq!(
            telegram_hook(&app, &hook, first, 8003).await,
            200,
            "old secret, within grace"
        );
        assert_eq!(telegram_hook(&app, &hook, second, 8004).await, 200, "new secret");

        // Disabled: the same webhooks are refused (404, as for an unknown connector).
        click(&c, &format!("{card} button.disable")).await;
        wait_for_page(&c, "/console/connectors", Some("notice=disabled")).await;
        let enabled = c
            .find(Locator::Css(card.as_str()))
            .await
            .unwrap()
            .attr("data-enabled")
            .await
            .unwrap();
        assert_eq!(enabled.as_deref(), Some("false"));
        assert_eq!(telegram_hook(&app, &hook, second, 8005).await, 404);
        assert_eq!(telegram_hook(&app, &hook, first, 8006).await, 404);

        // Enabled again, it takes them again.
        click(&c, &format!("{card} button.enable")).await;
        wait_for_page(&c, "/console/connectors", Some("notice=enabled")).await;
        assert_eq!(telegram_hook(&app, &hook, second, 8007).await, 200);

        // Each change is audited as the API's, under the signed-in key.
        let key = issued.id.to_string();
        let actions: Vec<(String, String)> = audit_actions(&app, acme.tenant).await;
        // The operator issued the key first (`key.issue`).
        let want = [
            "key.issue",
            "connector.create",
            "connector.update",
            "connector.disable",
            "connector.update",
        ];
        assert_eq!(
            actions.iter().map(|(a, _)| a.as_str()).collect::<Vec<_>>(),
            want,
            "{actions:?}"
        );
        assert!(actions[1..].iter().all(|(_, actor)| *actor == key), "{actions:?}");
        assert_eq!(actions[0].1, "operator");
    })
    .await;
}

/// Tenant acme without links, a message from its Telegram account before any link, and
/// globex whose own alice wrote too; acme's and globex's admin keys.
async fn acme_and_globex(app: &TestApp) -> (Provisioned, String, String) {
    let acme = tenant_without_links(app, "acme").await;
    let globex = provision_tenant(&app.pool, "globex").await;
    let key = admin_key(app, acme.tenant).await;
    let other_key = admin_key(app, globex.tenant).await;
    // globex's own alice writes too: acme's admin must not see her.
    deliver(
        app,
        &globex,
        Platform::Telegram,
        telegram_text(7400, "globex secret plans"),
    )
    .await;
    // Before any link, the Telegram account is an unlinked sender.
    deliver(
        app,
        &acme,
        Platform::Telegram,
        telegram_text(7401, "before the link"),
    )
    .await;

    (acme, key, other_key)
}

/// In the console: alice's Slack and Telegram accounts linked to her.
async fn link_alice_in_console(c: &Client, app: &TestApp) {
    c.goto(&console(app, "/console/links")).await.unwrap();
    c.find(Locator::Id("no-links")).await.unwrap();
    for (platform, account) in [("slack", SLACK_USER), ("telegram", TELEGRAM_USER)] {
        choose(c, "#link-platform", platform).await;
        type_into(c, "#link-account", account).await;
        type_into(c, "#link-user", "alice").await;
        click(c, "#add-link").await;
        wait_for_page(c, "/console/links", Some("notice=added")).await;
        // After the first link the URL already says `notice=added`: wait for the new row
        // itself, which only the reloaded page shows.
        let link = format!(r#".link[data-account="{platform}:{account}"][data-user="alice"]"#);
        c.wait()
            .at_most(Duration::from_secs(20))
            .for_element(Locator::Css(&link))
            .await
            .unwrap();
    }
}

async fn alice_writes_on_both_platforms(app: &TestApp, acme: &Provisioned) {
    deliver(
        app,
        acme,
        Platform::Slack,
        slack_text("1795339800.000100", "hello from slack"),
    )
    .await;
    deliver(
        app,
        acme,
        Platform::Telegram,
        telegram_text(7402, "hello from telegram"),
    )
    .await;
}

#[tokio::test]
async fn links_added_in_the_console_group_a_users_turns_across_platforms() {
    let app = spawn_app().await;
    let (acme, key, _) = acme_and_globex(&app).await;

    let (_driver, client) = browser(Screen::Laptop).await;
    let c = client.clone();
    with_screenshot_on_failure(client, "links_flow", async move {
        sign_in_with(&c, &app, &key).await;
        c.goto(&console(&app, "/console/users")).await.unwrap();
        c.find(Locator::Css(".user[data-sender]")).await.unwrap();
        assert!(
            c.find(Locator::Css(".user[data-user]")).await.is_err(),
            "no linked user yet"
        );

        // Link the person's Slack and Telegram accounts to alice.
        link_alice_in_console(&c, &app).await;

        // alice writes on both platforms: one user, one conversation.
        alice_writes_on_both_platforms(&app, &acme).await;
        c.goto(&console(&app, "/console/users")).await.unwrap();
        let alice = c.find(Locator::Css(r#".user[data-user="alice"]"#)).await.unwrap();
        let card = alice.text().await.unwrap();
        assert!(
            card.contains("2 turns") && card.contains("2 linked accounts"),
            "{card}"
        );
        assert!(!c.source().await.unwrap().contains("globex secret plans"));
        alice.click().await.unwrap();
        wait_for_page(&c, "/console/conversation", Some("user_id=alice")).await;
        let mut platforms = Vec::new();
        for turn in c.find_all(Locator::Css(".exchange")).await.unwrap() {
            platforms.push(turn.attr("data-platform").await.unwrap().unwrap());
        }
        assert_eq!(platforms, ["slack", "telegram"], "oldest first, both platforms");
        let page = c.source().await.unwrap();
        assert!(page.contains("hello from slack") && page.contains("hello from telegram"));
        assert!(
            !page.contains("before the link"),
            "that turn is the unlinked sender's"
        );
    })
    .await;
}

#[tokio::test]
async fn a_link_removed_in_the_console_leaves_the_list_is_audited_and_another_tenant_sees_no_user() {
    let app = spawn_app().await;
    let (acme, key, other_key) = acme_and_globex(&app).await;

    let (_driver, client) = browser(Screen::Laptop).await;
    let c = client.clone();
    with_screenshot_on_failure(client, "links_removed", async move {
        sign_in_with(&c, &app, &key).await;
        link_alice_in_console(&c, &app).await;
        alice_writes_on_both_platforms(&app, &acme).await;

        // Unlinked again, the Telegram account drops out of the link list.
        c.goto(&console(&app, "/console/links")).await.unwrap();
        click(
            &c,
            &format!(r#".link[data-account="telegram:{TELEGRAM_USER}"] button.remove"#),
        )
        .await;
        wait_for_page(&c, "/console/links", Some("notice=removed")).await;
        assert!(c
            .find(Locator::Css(&format!(
                r#".link[data-account="telegram:{TELEGRAM_USER}"]"#
            )))
            .await
            .is_err());
        c.find(Locator::Css(&format!(
            r#".link[data-account="slack:{SLACK_USER}"]"#
        )))
        .await
        .unwrap();
        let actions: Vec<String> = audit_actions(&app, acme.tenant)
            .await
            .into_iter()
            .map(|(a, _)| a)
            .collect();
        assert_eq!(actions, ["key.issue", "link.set", "link.set", "link.delete"]);

        // globex's key sees none of acme's users, not even by name.
        c.find(Locator::Id("sign-out"))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        wait_for_page(&c, "/console/sign-in", None).await;
        sign_in_with(&c, &app, &other_key).await;
        c.goto(&console(&app, "/console/users")).await.unwrap();
        let users = c.source().await.unwrap();
        assert!(!users.contains("hello from"), "acme's turns are not listed");
        assert!(users.contains("globex secret plans"), "globex's own are");
        c.goto(&console(&app, "/console/conversation?user_id=alice"))
            .await
            .unwrap();
        let theirs = c.source().await.unwrap();
        assert!(
            !theirs.contains("hello from"),
            "acme's alice is not globex's alice"
        );
    })
    .await;
}

/// `n` turns of a user (or of an unlinked sender when `user` is `None`) written straight
/// into the tenant's table, newest last.
async fn insert_turns(app: &TestApp, tenant: &Provisioned, user: Option<&str>, sender: &str, n: i64) {
    // As the owner: Citus copies the rows of an `INSERT … SELECT` into the shards, which
    // row-level security refuses to the app role (the gateway's own always has ON CONFLICT).
    let mut owner = app.db.owner_conn().await;
    let key = match user {
        Some(user) => format!("user:{user}"),
        None => format!("sender:{}:{sender}", tenant.telegram),
    };
    sqlx::query(
        "insert into channel_messages (tenant_id, id, connector_id, platform, idempotency_key,
             platform_message_id, chat_id, platform_user_id, user_id, conversation_key,
             request_content, status, received_at)
         select $1, gen_random_uuid(), $2, 'telegram', gen_random_uuid()::text, i::text, $4, $4, $5, $3,
                'turn ' || i, 'denied_unlinked', now() - make_interval(secs => $6 - i)
           from generate_series(1, $6) as i",
    )
    .bind(tenant.tenant)
    .bind(tenant.telegram)
    .bind(&key)
    .bind(sender)
    .bind(user)
    .bind(n)
    .execute(&mut owner)
    .await
    .unwrap();
}

#[tokio::test]
async fn the_users_page_pages_by_user_id_then_unlinked_senders_and_caps_counts() {
    let app = spawn_app().await;
    let acme = tenant_without_links(&app, "acme").await;
    for n in 0..32 {
        insert_turns(&app, &acme, Some(&format!("user{n:02}")), &format!("9{n:02}"), 1).await;
    }
    insert_turns(&app, &acme, Some("user00"), "900", 600).await;
    insert_turns(&app, &acme, None, "555", 2).await;
    let cookie = http_sign_in(&app, &admin_key(&app, acme.tenant).await).await;

    let users_of = |page: &str| -> Vec<String> {
        page.split(r#"data-user=""#)
            .skip(1)
            .filter_map(|rest| rest.split('"').next())
            .map(str::to_owned)
            .collect()
    };
    let (status, first) = get_page(&app, &cookie, "/console/users").await;
    assert_eq!(status, 200);
    let want: Vec<String> = (0..30).map(|n| format!("user{n:02}")).collect();
    assert_eq!(users_of(&first), want);
    assert!(
        first.contains("500+ turns"),
        "a busy user's count stops at the cap"
    );
    let next = first
        .split(r#"<a href=""#)
        .find_map(|rest| {
            rest.split_once(r#"" id="next""#)
                .map(|(href, _)| href.replace("&amp;", "&"))
        })
        .expect("a next page");
    assert_eq!(next, "/console/users?after=u.user29");

    // The next page: the last two users, then the unlinked sender.
    let (_, second) = get_page(&app, &cookie, &next).await;
    assert_eq!(users_of(&second), ["user30", "user31"]);
    assert!(
        second.contains("data-sender=") && second.contains("2 turns"),
        "{second}"
    );
    assert!(!second.contains(r#"id="next""#));

    // A jump to a name starts there.
    let (_, jumped) = get_page(&app, &cookie, "/console/users?from=user3").await;
    assert_eq!(users_of(&jumped), ["user30", "user31"]);

    // The sender's conversation, from its card.
    let sender = second
        .split(r#"class="card user" href=""#)
        .nth(3)
        .and_then(|rest| rest.split('"').next())
        .unwrap()
        .replace("&amp;", "&");
    let (status, conversation) = get_page(&app, &cookie, &sender).await;
    assert_eq!(status, 200, "{sender}");
    assert_eq!(
        conversation.matches(r#"<article class="turn exchange"#).count(),
        2
    );
    let heading = conversation
        .split("<h1>")
        .nth(1)
        .and_then(|h| h.split("</h1>").next());
    assert!(
        heading.is_some_and(|h| h.starts_with("Conversation of ") && h.ends_with(" (unlinked)")),
        "the sender is named by their account: {heading:?}"
    );
}

#[tokio::test]
async fn a_conversation_the_tenant_does_not_have_is_404_not_an_empty_page() {
    let app = spawn_app().await;
    let acme = provision_tenant(&app.pool, "acme").await;
    let cookie = http_sign_in(&app, &admin_key(&app, acme.tenant).await).await;
    for path in [
        "/console/conversation?user_id=nobody",
        "/console/conversation?sender=sender%3A0190a8e0-0000-7000-8000-000000000000%3Ax",
    ] {
        let (status, body) = get_page(&app, &cookie, path).await;
        assert_eq!(status, 404, "{path}");
        assert!(
            !body.contains(r#"id="take-over""#),
            "no working-looking buttons: {path}"
        );
    }
}

#[tokio::test]
async fn a_console_page_past_the_admin_deadline_answers_503_as_a_page() {
    let proxy = crate::support::db_proxy::DbProxy::start(crate::support::db_proxy::upstream_addr()).await;
    let app = crate::support::spawn_app_with(|settings, db| {
        db.route_via(&mut settings.database, proxy.addr);
        settings.database.acquire_timeout_ms = 20_000;
        settings.database.deadline_ms = 20_000;
        settings.admin_deadline_ms = 700;
    })
    .await;
    let acme = provision_tenant(&app.pool, "acme").await;
    let cookie = http_sign_in(&app, &admin_key(&app, acme.tenant).await).await;

    proxy.hold();
    let started = Instant::now();
    let response = no_redirects()
        .get(app.url("/console/users"))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    let took = started.elapsed();
    proxy.release();
    assert_eq!(response.status(), 503);
    assert!(took < Duration::from_secs(5), "answered after {took:?}");
    assert_eq!(response.headers()["retry-after"], "1");
    assert!(response.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/html"));
    let body = response.text().await.unwrap();
    assert!(body.contains(r#"id="error""#), "{body}");
}

#[tokio::test]
async fn a_session_started_on_one_instance_works_on_another_and_signing_out_there_ends_it_on_both() {
    let first = spawn_app().await;
    let second = crate::support::spawn_app_on(&first.db, |_| {}).await;
    let acme = provision_tenant(&first.pool, "acme").await;
    let cookie = http_sign_in(&first, &admin_key(&first, acme.tenant).await).await;

    // The other instance knows the session: no sticky sessions needed.
    let (status, page) = get_page(&second, &cookie, "/console/users").await;
    assert_eq!(status, 200);
    assert!(page.contains("Sign out"), "signed in on the second instance");

    // Signed out there, the session is over on the first one too.
    let response = no_redirects()
        .post(second.url("/console/sign-out"))
        .header("cookie", &cookie)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("csrf={}", csrf_of(&page)))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 303);
    for app in [&first, &second] {
        let response = no_redirects()
            .get(app.url("/console/users"))
            .header("cookie", &cookie)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 303);
        assert_eq!(response.headers()["location"], "/console/sign-in");
    }
    let mut owner = first.db.owner_conn().await;
    let left: i64 = sqlx::query_scalar("select count(*) from console_sessions")
        .fetch_one(&mut owner)
        .await
        .unwrap();
    assert_eq!(left, 0, "the session's row is gone");
}
