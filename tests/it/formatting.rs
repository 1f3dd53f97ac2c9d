//! The agent's Markdown reaching each platform in its own formatting
//! (docs/configuration.md#formatted-replies): what the platform stand-ins receive, split
//! outside code blocks, Telegram with `parse_mode=HTML`; and plain text, as before, for a
//! connector that turns conversion off.

use channel_bridge::domain::{MessageId, Platform};
use channel_bridge::platforms::telegram::format::visible_units;
use serde_json::{json, Value};

use crate::support::fake_agent::Reply;
use crate::support::fake_platforms::{Answer, Sent};
use crate::support::platforms::*;
use crate::support::Pipeline;

const MARKDOWN: &str = "**Sure!** Use `a < b` and *see* [the docs](https://example.com/d?x=1&y=2).\n\n\
```python\nprint(\"<hi>\")\n```\n\n- one\n- ~~two~~";

/// A user's message on `platform` answered with `answer`; the platform's requests.
async fn answered(s: &Pipeline, platform: Platform, answer: &str) -> (MessageId, Vec<Sent>) {
    s.agent
        .script([Reply::Json(200, json!({ "content": answer }), None)]);
    let before = s.platforms.sent_to(platform).len();
    let n = s.next_id();
    let body = match platform {
        Platform::Slack => slack_text(&format!("17180009{n:02}.000100"), "format please"),
        Platform::Telegram => telegram_text(12_000 + n, "format please"),
        Platform::Whatsapp => {
            let mut body: Value = serde_json::from_slice(&fixture(Platform::Whatsapp, "text")).unwrap();
            body["entry"][0]["changes"][0]["value"]["messages"][0]["id"] = format!("wamid.format{n}").into();
            serde_json::to_vec(&body).unwrap()
        }
    };
    s.deliver(platform, body).await;
    let id = s.step_executed().await;
    let sent = s.platforms.sent_to(platform).split_off(before);
    (id, sent)
}

/// A connector change through the admin API; the connector as it answers.
async fn patch_connector(s: &Pipeline, platform: Platform, patch: Value) -> Value {
    let path = format!("/v1/admin/connectors/{}", s.tenant.connector(platform));
    let (status, connector) = s.admin(reqwest::Method::PATCH, &path, Some(patch)).await;
    assert_eq!(status, 200);
    connector
}

#[tokio::test]
async fn markdown_reaches_slack_as_mrkdwn() {
    let s = Pipeline::start().await;
    let (id, sent) = answered(&s, Platform::Slack, MARKDOWN).await;
    assert_eq!(sent.len(), 1);
    assert_eq!(
        sent[0].text(),
        "*Sure!* Use `a &lt; b` and _see_ <https://example.com/d?x=1&amp;y=2|the docs>.\n\n\
```\nprint(\"&lt;hi&gt;\")\n```\n\n• one\n• ~two~"
    );
    assert!(s.delivered(id).await);
}

#[tokio::test]
async fn markdown_reaches_telegram_as_html_with_parse_mode() {
    let s = Pipeline::start().await;
    let (id, sent) = answered(&s, Platform::Telegram, MARKDOWN).await;
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].body["parse_mode"], "HTML");
    assert_eq!(
        sent[0].text(),
        "<b>Sure!</b> Use <code>a &lt; b</code> and <i>see</i> \
<a href=\"https://example.com/d?x=1&amp;y=2\">the docs</a>.\n\n\
<pre><code class=\"language-python\">print(&quot;&lt;hi&gt;&quot;)</code></pre>\n\n• one\n• <s>two</s>"
    );
    assert!(s.delivered(id).await);
}

#[tokio::test]
async fn markdown_reaches_whatsapp_with_its_markers_and_links_as_text() {
    let s = Pipeline::start().await;
    let (id, sent) = answered(&s, Platform::Whatsapp, MARKDOWN).await;
    assert_eq!(sent.len(), 1);
    assert_eq!(
        sent[0].text(),
        "*Sure!* Use `a < b` and _see_ the docs (https://example.com/d?x=1&y=2).\n\n\
```\nprint(\"<hi>\")\n```\n\n- one\n- ~two~"
    );
    assert!(s.delivered(id).await);
}

#[tokio::test]
async fn a_connector_with_formatting_off_posts_the_markdown_as_plain_text() {
    let s = Pipeline::start().await;
    for platform in Platform::ALL {
        let connector = patch_connector(&s, platform, json!({"format_markdown": false})).await;
        assert_eq!(connector["format_markdown"], false);
    }
    let (_, telegram) = answered(&s, Platform::Telegram, MARKDOWN).await;
    assert_eq!(telegram.len(), 1);
    assert!(
        telegram[0].body.get("parse_mode").is_none(),
        "plain text has no parse_mode"
    );
    assert_eq!(telegram[0].text(), MARKDOWN);
    let (_, whatsapp) = answered(&s, Platform::Whatsapp, MARKDOWN).await;
    assert_eq!(whatsapp[0].text(), MARKDOWN);
    let (_, slack) = answered(&s, Platform::Slack, "**a** < b").await;
    assert_eq!(
        slack[0].text(),
        "**a** &lt; b",
        "escaped as before, not converted"
    );

    // And back on: the next answer is formatted again.
    let connector = patch_connector(&s, Platform::Telegram, json!({"format_markdown": true})).await;
    assert_eq!(connector["format_markdown"], true);
    let (_, again) = answered(&s, Platform::Telegram, "**a**").await;
    assert_eq!(again[0].text(), "<b>a</b>");
    assert_eq!(again[0].body["parse_mode"], "HTML");
}

#[tokio::test]
async fn a_code_block_longer_than_telegrams_limit_arrives_split_outside_the_fence() {
    let s = Pipeline::start().await;
    let lines: Vec<String> = (0..500)
        .map(|i| format!("    total += values[{i}] * 2  # <{i}> & more"))
        .collect();
    let answer = format!(
        "Here is **the code**:\n\n```python\ndef f(values):\n{}\n```\n\nDone.",
        lines.join("\n")
    );
    let (id, sent) = answered(&s, Platform::Telegram, &answer).await;
    assert!(sent.len() >= 5, "{} parts", sent.len());
    for part in &sent {
        let html = part.text();
        assert_eq!(part.body["parse_mode"], "HTML");
        assert!(visible_units(html) <= 4096, "within the limit Telegram counts");
        assert_eq!(html.matches("<pre>").count(), html.matches("</pre>").count());
        assert_eq!(html.matches("<code").count(), html.matches("</code>").count());
    }
    // Every part holding code is a python block of its own: closed at the end of one
    // part and opened again, with its language, at the start of the next.
    let code_parts: Vec<&str> = sent
        .iter()
        .map(Sent::text)
        .filter(|t| t.contains("total +="))
        .collect();
    assert!(code_parts.len() >= 4);
    for html in code_parts {
        let block = &html[html.find("<pre>").unwrap_or(0)..];
        assert!(
            block.starts_with("<pre><code class=\"language-python\">"),
            "{block}"
        );
        assert!(block.contains("</code></pre>"));
    }
    assert!(sent[0].text().starts_with("Here is <b>the code</b>:"));
    assert!(sent.last().is_some_and(|p| p.text().ends_with("Done.")));
    let all: String = sent.iter().map(Sent::text).collect();
    for i in 0..500 {
        assert_eq!(all.matches(&format!("values[{i}] ")).count(), 1, "line {i} once");
    }
    assert!(s.delivered(id).await);
}

#[tokio::test]
async fn a_formatted_part_telegram_refuses_is_sent_again_as_plain_text() {
    let s = Pipeline::start().await;
    s.platforms.script(
        Platform::Telegram,
        [Answer::Status(
            400,
            json!({"ok": false, "error_code": 400,
                   "description": "Bad Request: can't parse entities: Unsupported start tag"}),
            None,
        )],
    );
    let (id, sent) = answered(&s, Platform::Telegram, "**bold** answer").await;
    assert_eq!(sent.len(), 2);
    assert_eq!(sent[0].body["parse_mode"], "HTML");
    assert_eq!(sent[0].text(), "<b>bold</b> answer");
    assert!(sent[1].body.get("parse_mode").is_none());
    assert_eq!(sent[1].text(), "**bold** answer");
    assert!(s.delivered(id).await, "the reply is not lost");
}

#[tokio::test]
async fn connectors_are_created_formatting_by_default_and_can_be_created_plain() {
    let s = Pipeline::start().await;
    let key = channel_bridge::admin::operator::issue(&s.app.pool, s.tenant.tenant, "ci")
        .await
        .unwrap()
        .key;
    let create = |body: Value| {
        s.app
            .client
            .post(s.app.url("/v1/admin/connectors"))
            .bearer_auth(&key)
            .json(&body)
            .send()
    };
    let default: Value = create(json!({"platform": "telegram", "verification_secret": "s1"}))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(default["format_markdown"], true);
    let plain = create(json!({"platform": "telegram", "verification_secret": "s2",
                              "format_markdown": false}))
    .await
    .unwrap();
    assert_eq!(plain.status(), 201);
    let plain: Value = plain.json().await.unwrap();
    assert_eq!(plain["format_markdown"], false);
    let mut owner = s.app.db.owner_conn().await;
    let stored: bool = sqlx::query_scalar("select format_markdown from channel_connectors where id = $1")
        .bind(uuid::Uuid::parse_str(plain["id"].as_str().unwrap()).unwrap())
        .fetch_one(&mut owner)
        .await
        .unwrap();
    assert!(!stored);
}
