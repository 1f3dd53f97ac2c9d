//! Human handoff in the console, in headless Chromium through the harness of `console.rs`,
//! against the real pipeline (fake agent and platforms, the worker stepped by hand).

use std::time::{Duration, Instant};

use channel_bridge::dispatch::StepOutcome;
use channel_bridge::domain::{MessageId, Platform};
use fantoccini::{Client, Locator};
use reqwest::Method;
use serde_json::json;

use crate::console::{
    browser, click, console, csrf_of, get_page, http_sign_in, no_redirects, overflow_and_small_text,
    screenshot, sign_in_with, type_into, wait_for_page, with_screenshot_on_failure, Screen,
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

pub(crate) async fn links_the_fixture_human(s: &Pipeline) {
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

        // Taken over, with a reason: the user's next turn is recorded, shown without a reload,
        // not dispatched.
        type_into(&c, "#take-over-reason", "refund over the limit").await;
        crate::console::screenshot(&c, "take_over_with_reason").await;
        click(&c, "#take-over").await;
        wait_for(&c, "#held").await;
        let held = c.find(Locator::Id("held")).await.unwrap().text().await.unwrap();
        assert!(held.contains("refund over the limit"), "{held}");
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

// ---------------------------------------------------------------------------------------
// Choices and taps (docs/console.md#choices-and-taps)

/// A Telegram `callback_query` from the fixture's human tapping `data` on message `on`.
fn telegram_tap(update_id: i64, on: &str, data: &str) -> Vec<u8> {
    let mut update: serde_json::Value =
        serde_json::from_slice(&fixture(Platform::Telegram, "callback_query")).unwrap();
    update["update_id"] = update_id.into();
    update["callback_query"]["id"] = format!("cb{update_id}").into();
    update["callback_query"]["message"]["message_id"] = on.parse::<i64>().unwrap().into();
    update["callback_query"]["data"] = data.into();
    serde_json::to_vec(&update).unwrap()
}

/// The fixture's human asks, the agent answers with three choices (one a link, one with
/// markup in its label), the human taps Approve and the agent answers the tap: the asked
/// turn and the tap's turn.
pub(crate) async fn a_tapped_approval(s: &Pipeline) -> (MessageId, MessageId) {
    let approval = json!({"content": "Approve the refund?", "choices": [
        {"id": "approve", "label": "Approve", "style": "primary", "value": {"refund": 42}},
        {"id": "later", "label": "<i>Later</i>", "style": "danger"},
        {"label": "Policy", "url": "https://example.com/policy"}
    ]});
    s.agent.script([Reply::Json(200, approval, None)]);
    s.deliver(
        Platform::Telegram,
        telegram_text(400_000 + s.next_id(), "refund please"),
    )
    .await;
    let asked = s.step_executed().await;
    let on = s.parts(asked).await.pop().unwrap().platform_message_id.unwrap();
    let sent = s.platforms.sent_to(Platform::Telegram);
    let keyboard = &sent.last().unwrap().body["reply_markup"]["inline_keyboard"];
    let approve = keyboard[0][0]["callback_data"].as_str().unwrap().to_owned();
    s.agent
        .script([Reply::Json(200, json!({"content": "Refund approved."}), None)]);
    let tapped = s
        .post_webhook(
            Platform::Telegram,
            telegram_tap(400_900 + s.next_id(), &on, &approve),
        )
        .await;
    assert_eq!(tapped.status(), 200);
    let closed = s.worker.step().await.unwrap();
    assert!(
        matches!(closed, StepOutcome::Delivered(id) if id == asked),
        "{closed:?}"
    );
    (asked, s.step_executed().await)
}

/// The texts of the elements `css` selects, each on one line (a wrapped row's items are
/// lines of WebDriver's text).
async fn texts(client: &Client, css: &str) -> Vec<String> {
    let mut texts = Vec::new();
    for element in client.find_all(Locator::Css(css)).await.unwrap() {
        texts.push(element.text().await.unwrap().replace('\n', " "));
    }
    texts
}

#[tokio::test]
async fn a_tap_reads_as_a_tap_and_an_answer_lists_its_choices_with_the_one_chosen() {
    let s = Pipeline::start().await;
    links_the_fixture_human(&s).await;
    let (asked, tapped) = a_tapped_approval(&s).await;
    let key = s.admin_key().await;
    let (_driver, client) = browser(Screen::Laptop).await;
    let c = client.clone();
    with_screenshot_on_failure(client, "choices_and_taps", async move {
        sign_in_with(&c, &s.app, &key).await;
        c.goto(&console(&s.app, &format!("/console/turns/{tapped}")))
            .await
            .unwrap();
        let tap = texts(&c, "#request .tap").await.join("");
        assert!(tap.starts_with("Tapped Approve on the answer to turn"), "{tap}");
        assert!(
            tap.contains("Approve the refund?") && tap.contains(r#"{"refund":42}"#),
            "{tap}"
        );
        let link = c.find(Locator::Css("#request a.tapped-on")).await.unwrap();
        let href = link.attr("href").await.unwrap();
        assert_eq!(href.as_deref(), Some(format!("/console/turns/{asked}").as_str()));

        // The answered turn: its last part lists the choices as labels, never as controls.
        link.click().await.unwrap();
        wait_for(&c, "#part-0 .choices").await;
        let choices = texts(&c, "#part-0 .choices li").await;
        assert_eq!(choices.len(), 3, "{choices:?}");
        assert!(
            choices[0].starts_with("Approve ✓ chosen by 408258968"),
            "{choices:?}"
        );
        assert_eq!(choices[1], "<i>Later</i>", "markup shows as text");
        assert_eq!(choices[2], "Policy ↗ https://example.com/policy");
        let chosen = texts(&c, "#part-0 li[data-chosen]").await;
        assert_eq!(chosen.len(), 1);
        assert!(c
            .find_all(Locator::Css(".choices button, .choices a, .choices i"))
            .await
            .unwrap()
            .is_empty());
        let edit = texts(&c, "#part-1 .meta .edit").await;
        assert_eq!(edit, ["edits part #0"]);
        c.execute("document.getElementById('part-0').scrollIntoView();", vec![])
            .await
            .unwrap();
        screenshot(&c, "turn_with_choices").await;

        // The conversation: the tap and the offered choices in place.
        c.goto(&console(&s.app, "/console/conversation?user_id=alice"))
            .await
            .unwrap();
        let tap = texts(&c, &format!(r#"#turn-{tapped}[data-tap="true"] .tap"#)).await;
        assert_eq!(tap.len(), 1);
        assert!(
            tap[0].starts_with("Tapped Approve on the answer to turn"),
            "{tap:?}"
        );
        let chosen = texts(&c, &format!("#turn-{asked} .choices li[data-chosen]")).await;
        assert_eq!(chosen.len(), 1, "{chosen:?}");
        assert!(
            chosen[0].starts_with("Approve ✓ chosen by 408258968"),
            "{chosen:?}"
        );

        // The list of turns: the tap says it is one.
        c.goto(&console(&s.app, "/console/turns")).await.unwrap();
        let card = texts(&c, &format!("#turn-{tapped} .text")).await;
        assert_eq!(card, ["Tapped Approve on an answer"]);
    })
    .await;
}

#[tokio::test]
async fn a_person_answers_with_choices_from_the_console_and_a_bad_list_is_refused_with_its_reason() {
    let s = Pipeline::start().await;
    links_the_fixture_human(&s).await;
    let conversation = conversation_of_first_turn(&s).await;
    let key = s.admin_key().await;
    let (_driver, client) = browser(Screen::Laptop).await;
    let c = client.clone();
    with_screenshot_on_failure(client, "person_choices", async move {
        sign_in_with(&c, &s.app, &key).await;
        c.goto(&console(&s.app, &page_of(&conversation))).await.unwrap();
        type_into(&c, "#answer", "Shall I book Tuesday?").await;
        type_into(&c, "#choices", "Yes\nNo\nOther times | https://example.com/times").await;
        click(&c, "#send").await;
        wait_for(&c, r#"[data-origin="person"] .choices"#).await;
        let sends = s.platforms.sent().len();
        assert!(matches!(
            s.worker.step().await.unwrap(),
            StepOutcome::Delivered(_) | StepOutcome::Executed(_)
        ));
        let sent = s.platforms.sent();
        assert_eq!(sent.len(), sends + 1);
        let keyboard = &sent[sends].body["reply_markup"]["inline_keyboard"];
        let buttons: Vec<&serde_json::Value> = keyboard
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|r| r.as_array().unwrap())
            .collect();
        let labels: Vec<&str> = buttons.iter().map(|b| b["text"].as_str().unwrap()).collect();
        assert_eq!(labels, ["Yes", "No", "Other times"]);
        assert_eq!(buttons[2]["url"], "https://example.com/times");
        let (_, audit) = s.admin(Method::GET, "/v1/admin/audit", None).await;
        let entry = audit["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["action"] == "conversation.message")
            .cloned()
            .unwrap();
        assert_eq!(entry["details"]["choices"], 3, "{entry}");

        // 26 choices: refused with the reason and a way back, nothing recorded.
        c.goto(&console(&s.app, &page_of(&conversation))).await.unwrap();
        type_into(&c, "#answer", "Pick one").await;
        let many: String = (0..26).map(|i| format!("Option {i}\n")).collect();
        type_into(&c, "#choices", &many).await;
        click(&c, "#send").await;
        wait_for(&c, "#back").await;
        let error = c.find(Locator::Id("error")).await.unwrap().text().await.unwrap();
        assert_eq!(error, "Not sent: Choices: at most 25, one per line");
        let person: i64 = s
            .owner_scalar("select count(*) from channel_messages where origin = 'person'")
            .await;
        assert_eq!(person, 1);
    })
    .await;
}

#[tokio::test]
async fn choices_no_platform_could_show_are_refused_as_a_page_with_422_not_a_500() {
    let s = Pipeline::start().await;
    links_the_fixture_human(&s).await;
    let conversation = conversation_of_first_turn(&s).await;
    let cookie = http_sign_in(&s.app, &s.admin_key().await).await;
    let (_, page) = get_page(&s.app, &cookie, &page_of(&conversation)).await;
    let csrf = csrf_of(&page);
    for (choices, reason) in [
        ("Yes%0AYes", "used twice"),
        (&"x".repeat(76), "over 75 characters"),
    ] {
        let response = no_redirects()
            .post(s.app.url("/console/conversation/messages"))
            .header("cookie", &cookie)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(format!(
                "csrf={csrf}&conversation={conversation}&text=hi&key=&choices={choices}"
            ))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 422, "{choices}");
        let page = response.text().await.unwrap();
        assert!(page.contains(reason), "{choices}: {page}");
    }
    let person: i64 = s
        .owner_scalar("select count(*) from channel_messages where origin = 'person'")
        .await;
    assert_eq!(person, 0);
}

// ---------------------------------------------------------------------------------------
// Reactions (docs/console.md#reactions)

/// The fixture's human asks `text` and the agent answers it in one part: the turn and the
/// part's Telegram message id.
pub(crate) async fn answered(s: &Pipeline, text: &str) -> (MessageId, String) {
    s.agent
        .script([Reply::Json(200, json!({"content": "Here you go."}), None)]);
    s.deliver(Platform::Telegram, telegram_text(500_000 + s.next_id(), text))
        .await;
    let turn = s.step_executed().await;
    let part = s.parts(turn).await.pop().expect("a reply part");
    (turn, part.platform_message_id.expect("posted"))
}

/// The fixture's human reacts with `emoji` (none: takes it off) to message `on` of their
/// private chat, as Telegram sends `message_reaction`, signed, through the real webhook.
pub(crate) async fn telegram_reacts(s: &Pipeline, on: &str, date: i64, emoji: Option<&str>) {
    let mut update: serde_json::Value =
        serde_json::from_slice(&fixture(Platform::Telegram, "message_reaction")).unwrap();
    update["update_id"] = (600_000 + s.next_id()).into();
    let reaction = &mut update["message_reaction"];
    reaction["chat"] = json!({"id": 408258968, "first_name": "Hirrolot", "type": "private"});
    reaction["message_id"] = on.parse::<i64>().unwrap().into();
    reaction["date"] = date.into();
    reaction["new_reaction"] = match emoji {
        Some(emoji) => json!([{"type": "emoji", "emoji": emoji}]),
        None => json!([]),
    };
    let response = s
        .post_webhook(Platform::Telegram, serde_json::to_vec(&update).unwrap())
        .await;
    assert_eq!(response.status(), 200);
}

/// 2026-03-10 12:04:00 UTC, as the platform's clock says it.
const REACTED_AT: i64 = 1_773_144_240;

#[tokio::test]
async fn a_thumbs_up_shows_on_the_answers_turn_and_conversation_with_who_and_when() {
    let pipeline = Pipeline::start().await;
    let s = &pipeline;
    links_the_fixture_human(s).await;
    let (liked, on) = answered(s, "was this useful?").await;
    telegram_reacts(s, &on, REACTED_AT, Some("👍")).await;
    let (taken_back, other) = answered(s, "and this?").await;
    telegram_reacts(s, &other, REACTED_AT, Some("👎")).await;
    telegram_reacts(s, &other, REACTED_AT + 1, None).await;
    let key = s.admin_key().await;
    let (_driver, client) = browser(Screen::Laptop).await;
    let c = client.clone();
    with_screenshot_on_failure(client, "turn_with_reaction", async move {
        sign_in_with(&c, &s.app, &key).await;
        c.goto(&console(&s.app, &format!("/console/turns/{liked}")))
            .await
            .unwrap();
        // "positive" is visually hidden text: what a screen reader (and WebDriver) reads.
        let shown = texts(&c, "#reactions li.reaction").await;
        assert_eq!(shown, ["👍 positive 408258968 · 2026-03-10 12:04:00 UTC"]);
        let reaction = c.find(Locator::Css("#reactions li.reaction")).await.unwrap();
        assert_eq!(reaction.attr("data-value").await.unwrap().as_deref(), Some("1"));
        let hidden = c.find(Locator::Css("#reactions li.reaction .vh")).await.unwrap();
        let size = hidden.rectangle().await.unwrap();
        assert!(size.2 <= 1.0 && size.3 <= 1.0, "not shown: {size:?}");
        c.execute("document.getElementById('reactions').scrollIntoView();", vec![])
            .await
            .unwrap();
        screenshot(&c, "turn_with_reaction_1280").await;

        // The conversation: the 👍 under its answer; the 👎 taken back, muted, as removed.
        c.goto(&console(&s.app, "/console/conversation?user_id=alice"))
            .await
            .unwrap();
        let liked_there = texts(&c, &format!("#turn-{liked} .reaction")).await;
        assert_eq!(liked_there, ["👍 positive 408258968 · 2026-03-10 12:04:00 UTC"]);
        let removed = texts(&c, &format!("#turn-{taken_back} .reaction.removed")).await;
        assert_eq!(removed, ["removed 408258968 · 2026-03-10 12:04:01 UTC"]);
    })
    .await;
    on_a_small_phone_the_reaction_fits(s, liked).await;
}

async fn on_a_small_phone_the_reaction_fits(s: &Pipeline, turn: MessageId) {
    let key = s.admin_key().await;
    let (_driver, client) = browser(Screen::SmallPhone).await;
    let c = client.clone();
    with_screenshot_on_failure(client, "turn_with_reaction_375", async move {
        sign_in_with(&c, &s.app, &key).await;
        c.goto(&console(&s.app, &format!("/console/turns/{turn}")))
            .await
            .unwrap();
        c.find(Locator::Css("#reactions li.reaction")).await.unwrap();
        let (overflow, _) = overflow_and_small_text(&c).await;
        assert_eq!(overflow, 0, "the turn page scrolls sideways");
        c.execute("document.getElementById('reactions').scrollIntoView();", vec![])
            .await
            .unwrap();
        screenshot(&c, "turn_with_reaction_375").await;
    })
    .await;
}
