//! The console as an inbox a person answers from (docs/console.md#conversation and
//! #held-the-inbox): the conversation as a chat, the held list as an inbox, every page on a
//! small phone, the overview's chart filling its card. Headless Chromium through the harness
//! of `console.rs`; screenshots to look at in `target/console-screenshots/`.

use std::time::{Duration, Instant};

use channel_bridge::dispatch::StepOutcome;
use channel_bridge::domain::Platform;
use fantoccini::{Client, Locator};
use reqwest::Method;
use serde_json::json;

use crate::console::{
    browser, click, console, get_page, http_sign_in, overflow_and_small_text, screenshot, sign_in_with,
    type_into, with_screenshot_on_failure, Screen,
};
use crate::console_handoff::links_the_fixture_human;
use crate::support::platforms::*;
use crate::support::Pipeline;

/// Waits (20 s at most) for an element.
async fn wait_for(client: &Client, css: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while client.find(Locator::Css(css)).await.is_err() {
        assert!(Instant::now() < deadline, "{css} never showed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn texts(client: &Client, css: &str) -> Vec<String> {
    let mut texts = Vec::new();
    for element in client.find_all(Locator::Css(css)).await.unwrap() {
        texts.push(element.text().await.unwrap().replace('\n', " "));
    }
    texts
}

/// A Telegram text from the fixture's human, recorded and stepped.
async fn user_says(s: &Pipeline, text: &str) -> StepOutcome {
    s.deliver(Platform::Telegram, telegram_text(500_000 + s.next_id(), text))
        .await;
    s.worker.step().await.unwrap()
}

/// A Telegram text from another account (`from` and chat `account`), recorded.
async fn stranger_says(s: &Pipeline, account: i64, text: &str) {
    let mut update: serde_json::Value =
        serde_json::from_slice(&telegram_text(600_000 + s.next_id(), text)).unwrap();
    update["message"]["from"]["id"] = account.into();
    update["message"]["chat"]["id"] = account.into();
    s.deliver(Platform::Telegram, serde_json::to_vec(&update).unwrap())
        .await;
}

/// alice (the fixture's human, linked) and the agent talk for `turns` turns; the page's path.
async fn a_long_conversation(s: &Pipeline, turns: usize) -> &'static str {
    links_the_fixture_human(s).await;
    for n in 0..turns {
        let outcome = user_says(s, &format!("question number {n}")).await;
        assert!(matches!(outcome, StepOutcome::Executed(_)), "{outcome:?}");
    }
    "/console/conversation?user_id=alice"
}

/// The element's top and bottom, in the page's coordinates.
async fn top_and_bottom(client: &Client, css: &str) -> (f64, f64) {
    let found = client
        .execute(
            "const r = document.querySelector(arguments[0]).getBoundingClientRect();
             return [r.top + window.scrollY, r.bottom + window.scrollY, r.bottom, window.innerHeight];",
            vec![json!(css)],
        )
        .await
        .unwrap();
    let value = |i: usize| found[i].as_f64().unwrap();
    (value(0), value(1))
}

/// Whether the window shows the end of the page, and the element `css` inside the window.
async fn at_end_with_in_view(client: &Client, css: &str) -> (bool, bool) {
    let found = client
        .execute(
            "const page = document.documentElement;
             const r = document.querySelector(arguments[0]).getBoundingClientRect();
             return [page.scrollHeight - page.scrollTop - page.clientHeight < 4,
                     r.top >= 0 && r.bottom <= window.innerHeight + 1];",
            vec![json!(css)],
        )
        .await
        .unwrap();
    (found[0].as_bool().unwrap(), found[1].as_bool().unwrap())
}

#[tokio::test]
async fn a_conversation_reads_oldest_first_with_rendered_markdown_and_the_answer_box_under_it() {
    let s = Pipeline::start().await;
    let page = a_long_conversation(&s, 8).await;
    let key = s.admin_key().await;
    let (_driver, client) = browser(Screen::Laptop).await;
    let c = client.clone();
    with_screenshot_on_failure(client, "chat_1280", async move {
        sign_in_with(&c, &s.app, &key).await;
        c.goto(&console(&s.app, page)).await.unwrap();
        wait_for(&c, "#agent-answers").await;
        // Taken over from the console with a reason; the user's next turn is held.
        type_into(&c, "#take-over-reason", "refund over the limit").await;
        click(&c, "#take-over").await;
        wait_for(&c, "#held").await;
        assert!(matches!(
            user_says(&s, "I need a human").await,
            StepOutcome::Held(_)
        ));
        c.refresh().await.unwrap();
        wait_for(&c, r#"[data-status="held"]"#).await;
        let answer = "Hi, this is **Dana** <script>alert(1)</script>\n\n> your refund is on its way";
        type_into(&c, "#answer", answer).await;
        click(&c, "#send").await;
        wait_for(&c, r#"[data-origin="person"]"#).await;

        // Oldest at the top, newest at the bottom; each side named.
        let names = texts(&c, "#turns .bubble .name").await;
        assert_eq!(names.first().map(String::as_str), Some("alice"), "{names:?}");
        assert_eq!(names.get(1).map(String::as_str), Some("Agent"), "{names:?}");
        assert_eq!(
            &names[names.len() - 2..],
            ["alice", "Person · ci"],
            "the held turn, then the person's answer, last"
        );
        let said = texts(&c, "#turns .bubble.from-user .text").await;
        assert_eq!(said.first().map(String::as_str), Some("question number 0"));
        assert_eq!(said.last().map(String::as_str), Some("I need a human"));

        // The person's Markdown rendered; the script in it is text, never an element.
        let bold = texts(&c, "#turns .from-person .md strong").await;
        assert_eq!(bold, ["Dana"]);
        let quote = texts(&c, "#turns .from-person .md blockquote").await;
        assert_eq!(quote, ["your refund is on its way"]);
        let person = texts(&c, "#turns .from-person .md").await.join("");
        assert!(person.contains("<script>alert(1)</script>"), "{person}");
        assert!(c.find_all(Locator::Css("main script")).await.unwrap().is_empty());

        // The answer box is under the transcript, in view, and the page opened at its end.
        let (_, transcript_bottom) = top_and_bottom(&c, "#turns").await;
        let (composer_top, _) = top_and_bottom(&c, "#answer-form").await;
        assert!(
            composer_top >= transcript_bottom,
            "{composer_top} < {transcript_bottom}"
        );
        let (at_end, in_view) = at_end_with_in_view(&c, "#answer-form").await;
        assert!(
            at_end && in_view,
            "at the end: {at_end}, answer box in view: {in_view}"
        );
        let scrolls = c
            .execute(
                "return document.documentElement.scrollHeight > window.innerHeight;",
                vec![],
            )
            .await
            .unwrap();
        assert_eq!(scrolls, json!(true), "long enough to scroll");
        screenshot(&c, "conversation_1280").await;

        // The platform, status and attempts one click away.
        let facts = c.find(Locator::Css("#turns .turn details.facts")).await.unwrap();
        assert!(!facts
            .find(Locator::Css("dl"))
            .await
            .unwrap()
            .is_displayed()
            .await
            .unwrap());

        // The reason typed into the console shows in the held list.
        click(&c, "#nav-held").await;
        wait_for(&c, "a.held").await;
        let held = texts(&c, r#"a.held[data-conversation="user:alice"]"#)
            .await
            .join(" ");
        assert!(held.contains("Why: refund over the limit"), "{held}");
        assert!(held.contains("held by ci") && held.contains("alice"), "{held}");
        assert_eq!(texts(&c, "#held-count").await, ["1"]);
        screenshot(&c, "held_1280").await;
    })
    .await;
}

#[tokio::test]
async fn two_unlinked_senders_waiting_are_told_apart_on_held_by_platform_and_account() {
    let s = Pipeline::start().await;
    // Unlinked senders' turns go to the agent, so a person can hold their conversations.
    s.owner_exec("update channel_connectors set unlinked_policy = 'allow'")
        .await;
    let strangers = [(454_686_569, "asked for a refund"), (777_000_111, "locked out")];
    for (account, _) in strangers {
        stranger_says(&s, account, "hello").await;
        assert!(matches!(s.worker.step().await.unwrap(), StepOutcome::Executed(_)));
    }
    let connector = s.tenant.telegram.0;
    for (account, reason) in strangers {
        let conversation = format!("sender:{connector}:{account}");
        let (status, _) = s
            .admin(
                Method::POST,
                &format!("/v1/admin/conversations/{conversation}/take-over"),
                Some(json!({"reason": reason})),
            )
            .await;
        assert_eq!(status, 200, "{conversation}");
    }
    stranger_says(&s, 454_686_569, "my parcel never came").await;
    stranger_says(&s, 777_000_111, "how do I reset my password?\nI tried twice").await;
    for _ in strangers {
        assert!(matches!(s.worker.step().await.unwrap(), StepOutcome::Held(_)));
    }
    let key = s.admin_key().await;
    let (_driver, client) = browser(Screen::Laptop).await;
    let c = client.clone();
    with_screenshot_on_failure(client, "held_strangers", async move {
        sign_in_with(&c, &s.app, &key).await;
        c.goto(&console(&s.app, "/console/held")).await.unwrap();
        wait_for(&c, "a.held").await;
        let names = texts(&c, "a.held .name").await;
        assert_eq!(
            names,
            ["telegram 454686569", "telegram 777000111"],
            "the longest wait first"
        );
        let rows = texts(&c, "a.held").await;
        assert!(
            rows[0].contains("waiting") && rows[1].contains("waiting"),
            "{rows:?}"
        );
        assert!(rows[0].contains("User: my parcel never came"), "{rows:?}");
        assert!(rows[0].contains("Why: asked for a refund"), "{rows:?}");
        assert!(rows[1].contains("User: how do I reset my password?"), "{rows:?}");
        assert!(
            !rows[1].contains("I tried twice"),
            "only the first line: {rows:?}"
        );
        assert!(rows[1].contains("Why: locked out"), "{rows:?}");
        assert_eq!(texts(&c, "#held-count").await, ["2"]);
        screenshot(&c, "held_strangers_1280").await;
    })
    .await;
}

/// Every page a person works from, on a 375-pixel phone: no sideways scrolling, no text
/// under 11 px, and the navigation in one row.
#[tokio::test]
async fn on_a_small_phone_no_page_scrolls_sideways_or_has_text_under_11_px() {
    let s = Pipeline::start().await;
    let conversation = a_long_conversation(&s, 6).await;
    let (status, _) = s
        .admin(
            Method::POST,
            "/v1/admin/conversations/user:alice/take-over",
            Some(json!({"reason": "wants a person to confirm the refund of order 1234567890"})),
        )
        .await;
    assert_eq!(status, 200);
    assert!(matches!(
        user_says(&s, "hello? anyone there?").await,
        StepOutcome::Held(_)
    ));
    let (_, turns) = s.admin(Method::GET, "/v1/admin/messages", None).await;
    let turn = turns["items"][0]["id"].as_str().unwrap().to_owned();
    let key = s.admin_key().await;
    let (_driver, client) = browser(Screen::SmallPhone).await;
    let c = client.clone();
    with_screenshot_on_failure(client, "small_phone_pages", async move {
        sign_in_with(&c, &s.app, &key).await;
        let width = c.execute("return window.innerWidth;", vec![]).await.unwrap();
        assert_eq!(width.as_i64(), Some(375), "a small phone's viewport");
        for (path, shot) in [
            ("/console/overview".to_owned(), Some("overview_375")),
            ("/console/held".to_owned(), Some("held_375")),
            (conversation.to_owned(), Some("conversation_375")),
            ("/console/turns".to_owned(), None),
            (format!("/console/turns/{turn}"), None),
            ("/console/failed".to_owned(), None),
            ("/console/users".to_owned(), None),
            ("/console/connectors".to_owned(), Some("connectors_375")),
            ("/console/links".to_owned(), None),
        ] {
            c.goto(&console(&s.app, &path)).await.unwrap();
            wait_for(&c, "main h1").await;
            let (overflow, small) = overflow_and_small_text(&c).await;
            assert_eq!(overflow, 0, "{path} scrolls sideways");
            assert!(small.is_empty(), "{path}: text under 11 px: {small:?}");
            let (_, header) = top_and_bottom(&c, "header").await;
            assert!(header <= 60.0, "{path}: the navigation takes {header} px");
            if let Some(name) = shot {
                // The overview's chart is what to look at; other pages open where a person reads.
                c.execute(
                    "const chart = document.querySelector('figure.chart'); if (chart) chart.scrollIntoView();",
                    vec![],
                )
                .await
                .unwrap();
                screenshot(&c, name).await;
            }
        }
        // The conversation opens at its end, its answer box in view.
        c.goto(&console(&s.app, conversation)).await.unwrap();
        wait_for(&c, "#answer-form").await;
        let (at_end, in_view) = at_end_with_in_view(&c, "#answer-form").await;
        assert!(
            at_end && in_view,
            "at the end: {at_end}, answer box in view: {in_view}"
        );
    })
    .await;
}

#[tokio::test]
async fn on_a_laptop_the_overviews_chart_fills_its_card_and_names_its_span_in_words() {
    let s = Pipeline::start().await;
    a_long_conversation(&s, 3).await;
    let key = s.admin_key().await;
    let (_driver, client) = browser(Screen::Laptop).await;
    let c = client.clone();
    with_screenshot_on_failure(client, "overview_1280", async move {
        sign_in_with(&c, &s.app, &key).await;
        let sizes = c
            .execute(
                "const card = document.querySelector('figure.chart').getBoundingClientRect();
                 const chart = document.getElementById('overview-chart').getBoundingClientRect();
                 const bars = document.querySelector('#band-volume svg').getBoundingClientRect();
                 return [window.innerWidth, card.width, chart.width, bars.width];",
                vec![],
            )
            .await
            .unwrap();
        let [window, card, chart, bars] = [0, 1, 2, 3].map(|i| sizes[i].as_f64().unwrap());
        assert_eq!(window, 1280.0);
        assert!(
            chart >= 0.95 * card,
            "the chart is {chart} px of a {card} px card"
        );
        assert!(bars >= 0.9 * card, "the bars take {bars} px of a {card} px card");
        let title = texts(&c, "#chart-title").await.join("");
        assert!(
            title.starts_with("Turns, failures and answer times, hour by hour from ")
                && title.ends_with(" (UTC)")
                && title.contains(" on "),
            "{title}"
        );
        let labelled = c
            .find(Locator::Id("overview-chart"))
            .await
            .unwrap()
            .attr("aria-labelledby")
            .await
            .unwrap();
        assert_eq!(labelled.as_deref(), Some("chart-title"));
        let (overflow, small) = overflow_and_small_text(&c).await;
        assert_eq!((overflow, small), (0, Vec::<String>::new()));
        c.execute("document.querySelector('figure.chart').scrollIntoView();", vec![])
            .await
            .unwrap();
        screenshot(&c, "overview_1280").await;
    })
    .await;
}

#[tokio::test]
async fn earlier_turns_are_a_page_up_oldest_first_and_the_newest_page_a_link_down() {
    let s = Pipeline::start().await;
    let page = a_long_conversation(&s, 32).await;
    let cookie = http_sign_in(&s.app, &s.admin_key().await).await;
    let (status, newest) = get_page(&s.app, &cookie, page).await;
    assert_eq!(status, 200);
    let at = |html: &str, needle: &str| html.find(needle).unwrap_or_else(|| panic!("{needle}"));
    // The newest 30 turns, oldest of them first; the way to earlier ones above them.
    assert!(at(&newest, r#"id="older""#) < at(&newest, r#"id="turns""#));
    assert!(at(&newest, "question number 2<") < at(&newest, "question number 31<"));
    assert!(!newest.contains("question number 1<") && !newest.contains(r#"id="newer""#));
    assert!(at(&newest, r#"id="turns""#) < at(&newest, r#"id="answer-form""#));
    // `<a href="…" id="older">`: the link's address ends where its id starts.
    let before_id = &newest[..at(&newest, r#"" id="older""#)];
    let older = before_id[before_id.rfind("href=\"").expect("the link") + 6..].replace("&#38;", "&");
    let (status, earlier) = get_page(&s.app, &cookie, &older).await;
    assert_eq!(status, 200, "{older}");
    assert!(at(&earlier, "question number 0<") < at(&earlier, "question number 1<"));
    assert!(!earlier.contains("question number 2<") && !earlier.contains(r#"id="older""#));
    assert!(at(&earlier, r#"id="turns""#) < at(&earlier, r#"id="newer""#));
}
