//! The console's overview (the last 24 hours per hour, as an SVG chart) and the connectors'
//! copyable webhook URL, in headless Chromium through the harness of `console.rs`; the
//! overview's statement and the script's headers over plain HTTP and SQL.

use channel_bridge::db::overview::{self, Feedback, Figures};
use channel_bridge::db::TenantTx;
use chrono::{DateTime, TimeDelta, Utc};
use fantoccini::{Client, Locator};

use crate::console::{
    admin_key, browser, click, console, get_page, http_sign_in, no_redirects, overflow_and_small_text,
    screenshot, sign_in_with, wait_for_page, with_screenshot_on_failure, Screen,
};
use crate::console_handoff::{answered, telegram_reacts};
use crate::support::platforms::*;
use crate::support::{spawn_app, spawn_app_with, Pipeline, TestApp};

// ---------------------------------------------------------------------------------------
// Data

/// A row of `channel_messages` as the overview reads it.
struct Turn {
    at: DateTime<Utc>,
    origin: &'static str,
    status: &'static str,
    answer: Option<&'static str>,
    agent_ms: Option<i32>,
}

fn user_turn(
    at: DateTime<Utc>,
    status: &'static str,
    answer: Option<&'static str>,
    agent_ms: Option<i32>,
) -> Turn {
    Turn {
        at,
        origin: "user",
        status,
        answer,
        agent_ms,
    }
}

/// Written straight into the tenant's table as the owner (as `console.rs` seeds turns), at
/// the chosen times, on its Telegram connector.
async fn seed(app: &TestApp, tenant: &Provisioned, turns: &[Turn]) {
    let mut owner = app.db.owner_conn().await;
    for turn in turns {
        sqlx::query(
            "insert into channel_messages (tenant_id, id, connector_id, platform, idempotency_key,
                 platform_message_id, chat_id, platform_user_id, user_id, conversation_key,
                 request_content, response_content, status, received_at, origin, agent_ms)
             values ($1, gen_random_uuid(), $2, 'telegram', gen_random_uuid()::text, '1', '42', '42',
                     'alice', 'user:alice', 'hello', $3, $4, $5, $6, $7)",
        )
        .bind(tenant.tenant)
        .bind(tenant.telegram)
        .bind(turn.answer)
        .bind(turn.status)
        .bind(turn.at)
        .bind(turn.origin)
        .bind(turn.agent_ms)
        .execute(&mut owner)
        .await
        .unwrap();
    }
}

/// The hour that holds `now`, minus `hours`, plus ten minutes: inside that hour.
fn hours_ago(now: DateTime<Utc>, hours: i64) -> DateTime<Utc> {
    overview::window_start(now) + TimeDelta::hours(23 - hours) + TimeDelta::minutes(10)
}

/// As the chart's `data-hour`.
fn hour_key(at: DateTime<Utc>) -> String {
    let start = overview::window_start(at) + TimeDelta::hours(23);
    start.format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// acme's turns five and two hours back, one a day and more back, a person's answer;
/// globex's own turns in the same hour; acme's key and its two hours as chart keys.
struct Day {
    app: TestApp,
    key: String,
    five_back: String,
    two_back: String,
}

async fn a_day_of_turns() -> Day {
    let app = spawn_app().await;
    let acme = provision_tenant(&app.pool, "acme").await;
    let globex = provision_tenant(&app.pool, "globex").await;
    let now = Utc::now();
    let (five, two) = (hours_ago(now, 5), hours_ago(now, 2));
    seed(
        &app,
        &acme,
        &[
            user_turn(five, "executed", Some("sure"), Some(100)),
            user_turn(five, "executed", Some("done"), Some(300)),
            user_turn(five, "dispatch_failed", None, None),
            // Answered, not delivered: an answer and a failure.
            user_turn(two, "delivery_failed", Some("here"), Some(500)),
            user_turn(two, "held", None, None),
            // Executed without text (a reaction, an empty answer): no answer.
            user_turn(two, "executed", Some(""), None),
            // What a person wrote is not a user's turn.
            Turn {
                origin: "person",
                ..user_turn(two, "executed", Some("a person here"), None)
            },
            // Older than the window.
            user_turn(now - TimeDelta::hours(30), "executed", Some("old"), Some(9000)),
        ],
    )
    .await;
    seed(
        &app,
        &globex,
        &[
            user_turn(five, "dispatch_failed", None, Some(7000)),
            user_turn(five, "held", None, Some(7000)),
        ],
    )
    .await;
    Day {
        key: admin_key(&app, acme.tenant).await,
        app,
        five_back: hour_key(five),
        two_back: hour_key(two),
    }
}

// ---------------------------------------------------------------------------------------
// Reading the chart

async fn attr(client: &Client, css: &str, name: &str) -> String {
    client
        .find(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("{css}: {e}"))
        .attr(name)
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("{css} has no {name}"))
}

async fn text_of(client: &Client, css: &str) -> String {
    client
        .find(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("{css}: {e}"))
        .text()
        .await
        .unwrap()
}

/// Each bar of `series` as (hour, value), oldest first.
async fn bars(client: &Client, series: &str) -> Vec<(String, i64)> {
    let css = format!(r#"#overview-chart rect[data-series="{series}"]"#);
    let mut found = Vec::new();
    for bar in client.find_all(Locator::Css(&css)).await.unwrap() {
        let hour = bar.attr("data-hour").await.unwrap().unwrap();
        let value = bar.attr("data-value").await.unwrap().unwrap();
        found.push((hour, value.parse().unwrap()));
    }
    found
}

// ---------------------------------------------------------------------------------------
// Browser flows

#[tokio::test]
async fn the_overview_shows_each_hour_of_the_tenants_own_turns_with_answer_times_and_links_to_failed_and_held(
) {
    let day = a_day_of_turns().await;
    let (_driver, client) = browser(Screen::Laptop).await;
    let c = client.clone();
    with_screenshot_on_failure(client, "overview", async move {
        // Signing in lands on the overview.
        sign_in_with(&c, &day.app, &day.key).await;
        c.find(Locator::Css(r#"nav a[href="/console/overview"]"#))
            .await
            .unwrap();

        // 24 hours, each with a bar per series; only the two seeded hours are not zero.
        let (five, two) = (day.five_back.as_str(), day.two_back.as_str());
        for (series, at_five, at_two) in [
            ("turns", 3, 3),
            ("answers", 2, 1),
            ("failures", 1, 1),
            ("held", 0, 1),
        ] {
            let found = bars(&c, series).await;
            assert_eq!(found.len(), 24, "{series}: one bar an hour");
            let nonzero: Vec<(&str, i64)> = found
                .iter()
                .filter(|(_, v)| *v != 0)
                .map(|(h, v)| (h.as_str(), *v))
                .collect();
            let want: Vec<(&str, i64)> = [(five, at_five), (two, at_two)]
                .into_iter()
                .filter(|(_, v)| *v != 0)
                .collect();
            assert_eq!(
                nonzero, want,
                "{series}: globex's and older turns are not counted"
            );
        }
        let turns = format!(r#"rect[data-series="turns"][data-hour="{five}"] title"#);
        let label = c
            .find(Locator::Css(&turns))
            .await
            .unwrap()
            .html(true)
            .await
            .unwrap();
        assert!(label.ends_with("UTC · turns: 3"), "{label}");

        // Answer times per hour (100 and 300 ms five hours back) and over the day.
        let point =
            |series: &str, hour: &str| format!(r#".point[data-series="{series}"][data-hour="{hour}"]"#);
        assert_eq!(attr(&c, &point("median", five), "data-value").await, "200");
        assert_eq!(attr(&c, &point("p95", five), "data-value").await, "290");
        assert_eq!(attr(&c, &point("median", two), "data-value").await, "500");
        let points = c
            .find_all(Locator::Css(".point[data-series=median]"))
            .await
            .unwrap();
        assert_eq!(points.len(), 2, "no point for an hour without timed answers");
        assert_eq!(text_of(&c, "#total-turns").await, "6");
        assert_eq!(text_of(&c, "#total-answers").await, "3");
        assert_eq!(text_of(&c, "#total-median").await, "300 ms");
        assert_eq!(text_of(&c, "#total-p95").await, "480 ms");

        // The chart names itself for a screen reader, with the figures in words.
        let chart = c.find(Locator::Id("overview-chart")).await.unwrap();
        assert_eq!(chart.attr("role").await.unwrap().as_deref(), Some("img"));
        let desc = c
            .find(Locator::Id("chart-desc"))
            .await
            .unwrap()
            .html(true)
            .await
            .unwrap();
        assert!(desc.contains("6 turns, 3 answers, 2 failures, 1 held"), "{desc}");

        // Failures and held turns lead to their lists.
        let held = c
            .find(Locator::Id("to-held"))
            .await
            .unwrap()
            .prop("href")
            .await
            .unwrap();
        assert_eq!(held, Some(console(&day.app, "/console/held")));
        assert_eq!(text_of(&c, "#to-held").await, "1");
        click(&c, "#to-failed").await;
        wait_for_page(&c, "/console/failed", None).await;
        c.find(Locator::Css("#dispatch-failed .turn")).await.unwrap();
        c.find(Locator::Css("#delivery-failed .turn")).await.unwrap();
    })
    .await;
}

#[tokio::test]
async fn on_a_phone_the_overview_fits_the_screen_and_its_chart_scales_down() {
    let day = a_day_of_turns().await;
    let (_driver, client) = browser(Screen::Phone).await;
    let c = client.clone();
    with_screenshot_on_failure(client, "overview_phone", async move {
        sign_in_with(&c, &day.app, &day.key).await;
        let width = c.execute("return window.innerWidth;", vec![]).await.unwrap();
        assert_eq!(width.as_i64(), Some(390), "a phone-sized viewport");
        // The hour-by-hour table, opened, fits too.
        click(&c, "#by-hour summary").await;
        let row = format!(r#"#by-hour tr[data-hour="{}"]"#, day.five_back);
        let cells = text_of(&c, &row).await;
        let cells = cells.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(cells.ends_with("3 2 1 0 200 ms 290 ms"), "{cells}");
        let sizes = c
            .execute(
                "const chart = document.getElementById('overview-chart').getBoundingClientRect();
                 return [document.documentElement.scrollWidth - window.innerWidth, chart.right, chart.width];",
                vec![],
            )
            .await
            .unwrap();
        let [overflow, right, chart_width] = [0, 1, 2].map(|i| sizes[i].as_f64().unwrap());
        assert!(overflow <= 0.0, "the page overflows by {overflow} px");
        assert!(right <= 390.0, "the chart ends at {right} px");
        assert!(chart_width >= 300.0, "the chart uses the width: {chart_width} px");
    })
    .await;
}

#[tokio::test]
async fn a_connector_shows_its_full_webhook_url_on_the_public_base_url_and_the_copy_button_copies_it() {
    let app = spawn_app_with(|settings, _| {
        settings.media.public_url = Some("https://bridge.example.com/".into());
    })
    .await;
    let acme = provision_tenant(&app.pool, "acme").await;
    let key = admin_key(&app, acme.tenant).await;
    let (_driver, client) = browser(Screen::Laptop).await;
    let c = client.clone();
    with_screenshot_on_failure(client, "copy_webhook_url", async move {
        sign_in_with(&c, &app, &key).await;
        c.goto(&console(&app, "/console/connectors")).await.unwrap();
        let path = channel_bridge::provision::webhook_path(acme.tenant, acme.telegram);
        let want = format!("https://bridge.example.com{path}");
        let field = format!("#hook-{}", acme.telegram);
        let input = c.find(Locator::Css(&field)).await.unwrap();
        assert_eq!(input.prop("value").await.unwrap().as_deref(), Some(want.as_str()));
        assert!(input.attr("readonly").await.unwrap().is_some(), "readonly");
        screenshot(&c, "connectors_1280").await;

        // The script shows the button (hidden in the markup) and it puts the URL on the
        // clipboard: pasted into another field, it arrives whole.
        let button = format!(r#"button[data-copy="hook-{}"]"#, acme.telegram);
        let copy = c.find(Locator::Css(&button)).await.unwrap();
        assert!(
            copy.is_displayed().await.unwrap(),
            "the script shows the copy button"
        );
        copy.click().await.unwrap();
        c.wait()
            .for_element(Locator::XPath(&format!(
                "//button[@data-copy='hook-{}' and text()='Copied']",
                acme.telegram
            )))
            .await
            .unwrap();
        click(&c, "#new-connector summary").await;
        let name = c.find(Locator::Id("new-name")).await.unwrap();
        name.click().await.unwrap();
        name.send_keys(&(fantoccini::key::Key::Control + "v"))
            .await
            .unwrap();
        assert_eq!(name.prop("value").await.unwrap().as_deref(), Some(want.as_str()));
    })
    .await;
}

// ---------------------------------------------------------------------------------------
// Plain HTTP and SQL

#[tokio::test]
async fn pages_load_only_the_consoles_own_script_file_which_is_cached_by_its_version() {
    let app = spawn_app().await;
    let acme = provision_tenant(&app.pool, "acme").await;
    let cookie = http_sign_in(&app, &admin_key(&app, acme.tenant).await).await;
    let page = no_redirects()
        .get(app.url("/console/overview"))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    let csp = page.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(csp.contains("script-src 'self';"), "{csp}");
    assert!(
        !csp.contains("unsafe-eval") && csp.matches("unsafe-inline").count() == 1,
        "{csp}"
    );
    let html = page.text().await.unwrap();
    assert_eq!(html.matches("<script").count(), 1, "one script element");
    let src = html
        .split(r#"<script src=""#)
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap()
        .to_owned();
    assert!(src.starts_with("/console/static/console.js?v="), "{src}");

    let script = app.client.get(app.url(&src)).send().await.unwrap();
    assert_eq!(script.status(), 200);
    let headers = script.headers().clone();
    assert_eq!(headers["content-type"], "text/javascript; charset=utf-8");
    assert_eq!(headers["cache-control"], "public, max-age=31536000, immutable");
    assert_eq!(headers["x-content-type-options"], "nosniff");
    assert!(script.text().await.unwrap().contains("data-copy"));

    // Another version's URL is not kept; an unchanged file is not sent again.
    let other = app
        .client
        .get(app.url("/console/static/console.js?v=0000"))
        .send()
        .await
        .unwrap();
    assert_eq!(other.headers()["cache-control"], "no-cache");
    let again = app
        .client
        .get(app.url(&src))
        .header("if-none-match", headers["etag"].clone())
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 304);

    // Signed in or not, `/console` opens the overview or the sign-in form.
    for (cookie, want) in [(cookie.as_str(), "/console/overview"), ("", "/console/sign-in")] {
        let response = no_redirects()
            .get(app.url("/console"))
            .header("cookie", cookie)
            .send()
            .await
            .unwrap();
        assert_eq!(response.headers()["location"], want);
    }
    assert_eq!(get_page(&app, &cookie, "/console/overview").await.0, 200);
}

#[tokio::test]
async fn the_overview_counts_the_24_whole_hours_to_now_in_utc_and_an_hour_without_turns_is_zero() {
    let app = spawn_app().await;
    let acme = provision_tenant(&app.pool, "acme").await;
    let at = |text: &str| text.parse::<DateTime<Utc>>().unwrap();
    let now = at("2026-03-10T09:41:00Z");
    seed(
        &app,
        &acme,
        &[
            user_turn(at("2026-03-09T09:59:59Z"), "executed", Some("a"), Some(50)),
            user_turn(at("2026-03-09T10:00:00Z"), "executed", Some("b"), Some(100)),
            user_turn(at("2026-03-10T09:59:59Z"), "dispatch_failed", None, None),
            user_turn(at("2026-03-10T10:00:00Z"), "executed", Some("c"), Some(70)),
        ],
    )
    .await;

    // A session time zone off the hour (+05:30) does not move the hours.
    let mut tx = TenantTx::begin(&app.pool, acme.tenant).await.unwrap();
    sqlx::query("set local time zone 'Asia/Kolkata'")
        .execute(tx.conn())
        .await
        .unwrap();
    let day = overview::last_day(&mut tx, now).await.unwrap();
    tx.commit().await.unwrap();

    let starts: Vec<DateTime<Utc>> = day.hours.iter().map(|h| h.start).collect();
    let want: Vec<DateTime<Utc>> = (0..24)
        .map(|i| at("2026-03-09T10:00:00Z") + TimeDelta::hours(i))
        .collect();
    assert_eq!(starts, want);
    let first = Figures {
        turns: 1,
        answers: 1,
        median_ms: Some(100.0),
        p95_ms: Some(100.0),
        ..Figures::default()
    };
    let last = Figures {
        turns: 1,
        failures: 1,
        ..Figures::default()
    };
    assert_eq!(day.hours[0].figures, first, "the first hour starts the window");
    assert_eq!(day.hours[23].figures, last, "the current hour ends it");
    for hour in &day.hours[1..23] {
        assert_eq!(hour.figures, Figures::default(), "{}: all zeros", hour.start);
    }
    let total = Figures {
        turns: 2,
        answers: 1,
        failures: 1,
        held: 0,
        median_ms: Some(100.0),
        p95_ms: Some(100.0),
    };
    assert_eq!(day.total, total);

    // A tenant without a turn: 24 empty hours and a zero total, not an empty answer.
    let globex = provision_tenant(&app.pool, "globex").await;
    let mut tx = TenantTx::begin(&app.pool, globex.tenant).await.unwrap();
    let empty = overview::last_day(&mut tx, now).await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(empty.hours.len(), 24);
    assert!(empty.hours.iter().all(|h| h.figures == Figures::default()));
    assert_eq!(empty.total, Figures::default());
}

// ---------------------------------------------------------------------------------------
// Feedback (reactions to the day's answers)

/// Four answers to the fixture's human: 👍, 👍, 👎 and 🎉 (not a rating), through Telegram's
/// real `message_reaction` webhook.
async fn four_answers_three_rated() -> Pipeline {
    let s = Pipeline::start().await;
    let now = Utc::now().timestamp();
    for (ask, emoji) in [("one", "👍"), ("two", "👍"), ("three", "👎"), ("four", "🎉")] {
        let (_, on) = answered(&s, ask).await;
        telegram_reacts(&s, &on, now, Some(emoji)).await;
    }
    s
}

#[tokio::test]
async fn the_overview_shows_the_share_of_thumbs_up_among_the_days_rated_answers() {
    let s = four_answers_three_rated().await;
    let key = s.admin_key().await;
    for (screen, name) in [
        (Screen::Laptop, "overview_feedback_1280"),
        (Screen::SmallPhone, "overview_feedback_375"),
    ] {
        let (_driver, client) = browser(screen).await;
        let c = client.clone();
        let (s, key) = (&s, &key);
        with_screenshot_on_failure(client, name, async move {
            sign_in_with(&c, &s.app, key).await;
            assert_eq!(text_of(&c, "#total-answers").await, "4");
            assert_eq!(text_of(&c, "#feedback-share").await, "67 % positive");
            let counts = text_of(&c, "#feedback-counts").await;
            assert!(counts.starts_with("2 👍 · 1 👎"), "{counts}");
            assert!(counts.ends_with("3 of 4 answers rated"), "{counts}");
            let words = c
                .find(Locator::Css("#feedback-counts .vh"))
                .await
                .unwrap()
                .prop("textContent")
                .await
                .unwrap();
            assert_eq!(words.as_deref(), Some("2 positive, 1 negative"));
            let (overflow, small) = overflow_and_small_text(&c).await;
            assert_eq!(overflow, 0, "the overview scrolls sideways");
            assert!(small.is_empty(), "text under 11 px: {small:?}");
            screenshot(&c, name).await;
        })
        .await;
    }
}

/// Each person's reaction on the acme answer whose text is `answer`, as the owner writes it.
async fn react(app: &TestApp, answer: &str, reactions: &[(&str, Option<&str>, i16)]) {
    let mut owner = app.db.owner_conn().await;
    for (by, emoji, value) in reactions {
        sqlx::query(
            "insert into channel_reactions (tenant_id, message_id, platform_user_id, part_index,
                 emoji, value, reacted_at)
             select tenant_id, id, $2, 0, $3, $4, now() from channel_messages
              where response_content = $1",
        )
        .bind(answer)
        .bind(by)
        .bind(emoji)
        .bind(value)
        .execute(&mut owner)
        .await
        .unwrap();
    }
}

#[tokio::test]
async fn feedback_counts_each_persons_thumbs_on_the_windows_answers_of_the_tenant_only() {
    let app = spawn_app().await;
    let acme = provision_tenant(&app.pool, "acme").await;
    let globex = provision_tenant(&app.pool, "globex").await;
    let now = Utc::now();
    let two = hours_ago(now, 2);
    seed(
        &app,
        &acme,
        &[
            user_turn(two, "executed", Some("sure"), None),
            user_turn(two, "executed", Some("done"), None),
            user_turn(two, "delivery_failed", Some("here"), None),
            user_turn(now - TimeDelta::hours(30), "executed", Some("old"), None),
            Turn {
                origin: "person",
                ..user_turn(two, "executed", Some("a person here"), None)
            },
        ],
    )
    .await;
    seed(&app, &globex, &[user_turn(two, "executed", Some("theirs"), None)]).await;
    let up = |by| (by, Some("👍"), 1);
    react(&app, "sure", &[up("a"), ("b", Some("👎"), -1)]).await;
    // Neither another emoji nor a removed one rates an answer.
    react(&app, "done", &[("c", Some("🎉"), 0), ("d", None, 0)]).await;
    react(&app, "here", &[up("a")]).await;
    // Older than the window, a person's answer, another tenant's: not counted.
    for answer in ["old", "a person here", "theirs"] {
        react(&app, answer, &[up("a")]).await;
    }

    let mut tx = TenantTx::begin(&app.pool, acme.tenant).await.unwrap();
    let day = overview::last_day(&mut tx, now).await.unwrap();
    tx.commit().await.unwrap();
    let want = Feedback {
        rated: 2,
        positive: 2,
        negative: 1,
    };
    assert_eq!(day.feedback, want);
    assert_eq!(want.positive_share().map(f64::round), Some(67.0));
}
