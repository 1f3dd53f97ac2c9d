//! Human handoff in the console, in headless Chromium through the harness of `console.rs`,
//! against the real pipeline (fake agent and platforms, the worker stepped by hand).

use std::time::{Duration, Instant};

use channel_bridge::dispatch::StepOutcome;
use channel_bridge::domain::Platform;
use fantoccini::{Client, Locator};
use reqwest::Method;
use serde_json::json;

use crate::console::{
    browser, click, console, csrf_of, get_page, http_sign_in, no_redirects, sign_in_with, type_into,
    wait_for_page, with_screenshot_on_failure, Screen,
};
use crate::support::fake_agent::Reply;
use crate::support::platforms::*;
use crate::support::Pipeline;

fn page_of(conversation: &str) -> String {
    let user = conversation
        .strip_prefix("user:")
        .expect("the fixture's human is linked");
    format!("/console/conversation?user_id={user}")
}

/// A Telegram text from the fixture's human, recorded and stepped.
async fn user_says(s: &Pipeline, text: &str) -> StepOutcome {
    s.deliver(Platform::Telegram, telegram_text(400_000 + s.next_id(), text))
        .await;
    s.worker.step().await.unwrap()
}

async fn conversation_of_first_turn(s: &Pipeline) -> String {
    let StepOutcome::Executed(first) = user_says(s, "hello").await else {
        panic!("the first turn is answered")
    };
    let (_, message) = s
        .admin(Method::GET, &format!("/v1/admin/messages/{first}"), None)
        .await;
    message["conversation"].as_str().unwrap().to_owned()
}

/// Waits (20 s at most) for an element: after a form's POST the page's path stays the same,
/// so the element the new page has is what tells it loaded.
async fn wait_for(client: &Client, css: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while client.find(Locator::Css(css)).await.is_err() {
        assert!(Instant::now() < deadline, "{css} never showed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits (20 s at most) until the page shows `text`, without reloading it.
async fn shows_without_reload(client: &Client, text: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !client.source().await.unwrap().contains(text) {
        assert!(Instant::now() < deadline, "the page never showed {text:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn links_the_fixture_human(s: &Pipeline) {
    let (status, _) = s
        .admin(
            Method::POST,
            "/v1/admin/links",
            Some(json!({"platform": "telegram", "platform_user_id": TELEGRAM_USER, "user_id": "alice"})),
        )
        .await;
    assert_eq!(status, 201);
}

#[tokio::test]
async fn a_person_takes_over_answers_from_the_console_and_hands_back() {
    let s = Pipeline::start().await;
    links_the_fixture_human(&s).await;
    let conversation = conversation_of_first_turn(&s).await;
    let key = s.admin_key().await;
    let (_driver, client) = browser(Screen::Laptop).await;
    let c = client.clone();
    with_screenshot_on_failure(client, "handoff_flow", async move {
        sign_in_with(&c, &s.app, &key).await;
        c.goto(&console(&s.app, &page_of(&conversation))).await.unwrap();
        c.find(Locator::Id("agent-answers")).await.unwrap();

        // Taken over: the user's next turn is recorded, shown without a reload, not dispatched.
        click(&c, "#take-over").await;
        wait_for(&c, "#held").await;
        let calls = s.agent.calls().len();
        let StepOutcome::Held(waiting) = user_says(&s, "I need a human").await else {
            panic!("the turn is held")
        };
        shows_without_reload(&c, "I need a human").await;
        assert_eq!(s.agent.calls().len(), calls, "not sent to the agent");
        let card = c.find(Locator::Css(&format!("#turn-{waiting}"))).await.unwrap();
        assert_eq!(card.attr("data-status").await.unwrap().as_deref(), Some("held"));

        // The person answers; the platform gets it threaded to the user's message, once.
        type_into(&c, "#answer", "Hi, this is *Dana*: your refund is on its way.").await;
        click(&c, "#send").await;
        wait_for(&c, r#"[data-origin="person"]"#).await;
        let sends = s.platforms.sent().len();
        let outcome = s.worker.step().await.unwrap();
        assert!(
            matches!(outcome, StepOutcome::Delivered(_) | StepOutcome::Executed(_)),
            "{outcome:?}"
        );
        assert_eq!(s.worker.step().await.unwrap(), StepOutcome::Empty);
        let sent = s.platforms.sent();
        assert_eq!(sent.len(), sends + 1);
        assert_eq!(
            sent[sends].body["text"],
            "Hi, this is <i>Dana</i>: your refund is on its way."
        );
        let (_, held_turn) = s
            .admin(Method::GET, &format!("/v1/admin/messages/{waiting}"), None)
            .await;
        assert_eq!(
            sent[sends].body["reply_parameters"]["message_id"].to_string(),
            held_turn["platform_message_id"].as_str().unwrap()
        );
        shows_without_reload(&c, "Person · ci").await;

        // Handed back: the next turn reaches the agent with the person's answer in messages[].
        click(&c, "#hand-back").await;
        wait_for(&c, "#agent-answers").await;
        assert!(matches!(user_says(&s, "thanks!").await, StepOutcome::Executed(_)));
        let call = s.agent.calls().pop().unwrap();
        let person = call.raw["messages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["metadata"]["from"] == "person")
            .cloned()
            .expect("the person's answer is in the history");
        assert_eq!(
            person["content"],
            "Hi, this is *Dana*: your refund is on its way."
        );
        assert_eq!(person["metadata"]["author"], "ci");

        // The agent asks for a person: the conversation is on the held list.
        s.agent.script([Reply::Json(
            200,
            json!({"content": "A colleague will help you.", "handoff": {"reason": "angry customer"}}),
            None,
        )]);
        assert!(matches!(
            user_says(&s, "this is useless").await,
            StepOutcome::Executed(_)
        ));
        click(&c, r#"a[href="/console/held"]"#).await;
        wait_for_page(&c, "/console/held", None).await;
        let held = c
            .find(Locator::Css(&format!(
                r#"a.held[data-conversation="{conversation}"]"#
            )))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(
            held.contains("the agent asked for a person") && held.contains("angry customer"),
            "{held}"
        );
    })
    .await;
}

#[tokio::test]
async fn on_a_phone_the_conversation_page_with_its_answer_box_fits_the_screen() {
    let s = Pipeline::start().await;
    links_the_fixture_human(&s).await;
    let conversation = conversation_of_first_turn(&s).await;
    let key = s.admin_key().await;
    let (_driver, client) = browser(Screen::Phone).await;
    let c = client.clone();
    with_screenshot_on_failure(client, "handoff_phone", async move {
        sign_in_with(&c, &s.app, &key).await;
        c.goto(&console(&s.app, &page_of(&conversation))).await.unwrap();
        click(&c, "#take-over").await;
        wait_for(&c, "#held").await;
        type_into(&c, "#answer", "typed on a phone").await;
        click(&c, "#send").await;
        wait_for(&c, r#"[data-origin="person"]"#).await;
        shows_without_reload(&c, "typed on a phone").await;
        for page in [page_of(&conversation), "/console/held".to_owned()] {
            c.goto(&console(&s.app, &page)).await.unwrap();
            let overflow = c
                .execute(
                    "return document.documentElement.scrollWidth - document.documentElement.clientWidth;",
                    vec![],
                )
                .await
                .unwrap();
            assert_eq!(overflow, 0, "{page} scrolls sideways");
        }
    })
    .await;
}

#[tokio::test]
async fn another_tenants_console_session_cannot_take_over_or_write() {
    let s = Pipeline::start().await;
    links_the_fixture_human(&s).await;
    let conversation = conversation_of_first_turn(&s).await;
    let other = provision_tenant_at(&s.app.pool, "globex", Some(&s.platforms.base_url)).await;
    let key = channel_bridge::admin::operator::issue(&s.app.pool, other.tenant, "intruder")
        .await
        .unwrap()
        .key;
    let cookie = http_sign_in(&s.app, &key).await;
    let (status, page) = get_page(&s.app, &cookie, "/console/held").await;
    assert_eq!(status, 200);
    let csrf = csrf_of(&page);
    for (action, extra) in [("take-over", ""), ("messages", "&text=hi&key=k1")] {
        let response = no_redirects()
            .post(s.app.url(&format!("/console/conversation/{action}")))
            .header("cookie", &cookie)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(format!("csrf={csrf}&conversation={conversation}{extra}"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 404, "{action}");
    }
    let without_csrf = no_redirects()
        .post(s.app.url("/console/conversation/take-over"))
        .header("cookie", &cookie)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("csrf=nope&conversation={conversation}"))
        .send()
        .await
        .unwrap();
    assert_eq!(without_csrf.status(), 403);
    let holds: i64 = s.owner_scalar("select count(*) from conversation_holds").await;
    let person: i64 = s
        .owner_scalar("select count(*) from channel_messages where origin = 'person'")
        .await;
    assert_eq!((holds, person), (0, 0));
}

/// POSTs the console's hand-back form for `conversation` in the session of `cookie`.
async fn console_hand_back(s: &Pipeline, cookie: &str, conversation: &str) -> u16 {
    let (_, page) = get_page(&s.app, cookie, "/console/held").await;
    let csrf = csrf_of(&page);
    let response = no_redirects()
        .post(s.app.url("/console/conversation/hand-back"))
        .header("cookie", cookie)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("csrf={csrf}&conversation={conversation}"))
        .send()
        .await
        .unwrap();
    response.status().as_u16()
}

#[tokio::test]
async fn the_console_hands_back_only_conversations_the_tenant_has() {
    let s = Pipeline::start().await;
    links_the_fixture_human(&s).await;
    let conversation = conversation_of_first_turn(&s).await;
    let (status, _) = s
        .admin(
            Method::POST,
            &format!("/v1/admin/conversations/{conversation}/take-over"),
            None,
        )
        .await;
    assert_eq!(status, 200);
    let other = provision_tenant_at(&s.app.pool, "globex", Some(&s.platforms.base_url)).await;
    let intruder = channel_bridge::admin::operator::issue(&s.app.pool, other.tenant, "intruder")
        .await
        .unwrap()
        .key;
    let intruder = http_sign_in(&s.app, &intruder).await;
    assert_eq!(
        console_hand_back(&s, &intruder, &conversation).await,
        404,
        "another tenant's conversation"
    );
    let holds: i64 = s.owner_scalar("select count(*) from conversation_holds").await;
    assert_eq!(holds, 1, "still held");

    let own = http_sign_in(&s.app, &s.admin_key().await).await;
    assert_eq!(console_hand_back(&s, &own, "user:nobody").await, 404);
    assert_eq!(console_hand_back(&s, &own, &conversation).await, 303);
    let holds: i64 = s.owner_scalar("select count(*) from conversation_holds").await;
    assert_eq!(holds, 0, "handed back");
}
