//! The table of the agent API's answers (docs/agent.md#the-agent-apis-answers): every answer
//! these tests provoke from the two signed routes, status and body as served, is a row of that
//! table.

use channel_bridge::domain::Platform;
use serde_json::{json, Value};

use crate::async_answers::accepted_turn;
use crate::support::platforms::telegram_text;
use crate::support::Pipeline;

const AGENT_MD: &str = include_str!("../../docs/agent.md");

/// One answer: the route (`events` or `messages`), its status and its body as served.
struct Answer {
    route: &'static str,
    status: u16,
    body: String,
}

/// The table's rows: (route, status, body pattern), `…` standing for what varies.
fn documented() -> Vec<(String, u16, String)> {
    let section = AGENT_MD
        .split("## The agent API's answers")
        .nth(1)
        .expect("docs/agent.md has the answers section");
    let section = section.split("\n## ").next().unwrap_or_default();
    section
        .lines()
        .filter_map(|line| {
            let cells: Vec<&str> = line.split(" | ").collect();
            let route = cells.first()?.strip_prefix("| ")?.to_owned();
            let status = cells.get(1)?.parse().ok()?;
            let body = cells.get(2)?.trim_matches(|c| c == '`' || c == ' ').to_owned();
            Some((route, status, body))
        })
        .collect()
}

/// `body` as `pattern` says, each `…` standing for any text.
fn matches(pattern: &str, body: &str) -> bool {
    let pieces: Vec<&str> = pattern.split('…').collect();
    let (first, last) = (pieces[0], pieces[pieces.len() - 1]);
    if pieces.len() == 1 {
        return body == pattern;
    }
    if !body.starts_with(first) || !body[first.len()..].ends_with(last) {
        return false;
    }
    let mut rest = &body[first.len()..body.len() - last.len()];
    for piece in &pieces[1..pieces.len() - 1] {
        match rest.find(piece) {
            Some(at) => rest = &rest[at + piece.len()..],
            None => return false,
        }
    }
    true
}

fn assert_documented(answers: &[Answer]) {
    let rows = documented();
    assert!(rows.len() > 20, "the table is read: {}", rows.len());
    for answer in answers {
        let covered = rows.iter().any(|(route, status, pattern)| {
            (route == answer.route || route == "both")
                && *status == answer.status
                && matches(pattern, &answer.body)
        });
        assert!(
            covered,
            "docs/agent.md does not list {} {} {}",
            answer.route, answer.status, answer.body
        );
    }
}

/// The signature headers' values; `None` leaves them out.
struct Signing<'a> {
    secret: &'a str,
    id: &'a str,
    timestamp: i64,
}

/// POSTs `body` to `path`, signed as `signing` says; the status and the body as served.
async fn post(s: &Pipeline, path: &str, signing: Option<Signing<'_>>, body: Vec<u8>) -> (u16, String) {
    let mut request = s
        .app
        .client
        .post(s.app.url(path))
        .header("content-type", "application/json");
    if let Some(Signing {
        secret,
        id,
        timestamp,
    }) = signing
    {
        let signature = channel_bridge::signature::sign(secret, id, timestamp, &body).unwrap();
        request = request
            .header("webhook-id", id)
            .header("webhook-timestamp", timestamp.to_string())
            .header("webhook-signature", signature);
    }
    let response = request.body(body).send().await.unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

/// Signed with the tenant's dispatch secret, now, under `id`.
async fn signed(s: &Pipeline, path: &str, id: &str, body: Value) -> (u16, String) {
    let signing = Signing {
        secret: &s.tenant.dispatch_secret,
        id,
        timestamp: chrono::Utc::now().timestamp(),
    };
    post(s, path, Some(signing), serde_json::to_vec(&body).unwrap()).await
}

/// Records `got` as an answer of `route`, checking its status first.
fn expect(answers: &mut Vec<Answer>, route: &'static str, status: u16, got: (u16, String)) {
    assert_eq!(got.0, status, "{route}: {}", got.1);
    answers.push(Answer {
        route,
        status: got.0,
        body: got.1,
    });
}

/// What an event's route answers that is not about the turn's state.
async fn refusals_of_any_request(s: &Pipeline, path: &str, answers: &mut Vec<Answer>) {
    let now = chrono::Utc::now().timestamp();
    let event = serde_json::to_vec(&json!({"type": "status", "text": "…"})).unwrap();
    let secret = &s.tenant.dispatch_secret;
    let with = |id, timestamp, secret| {
        Some(Signing {
            secret,
            id,
            timestamp,
        })
    };
    expect(answers, "events", 401, post(s, path, None, event.clone()).await);
    let long_id = "x".repeat(201);
    let got = post(s, path, with(&long_id, now, secret), event.clone()).await;
    expect(answers, "events", 401, got);
    let got = post(s, path, with("old", now - 3600, secret), event.clone()).await;
    expect(answers, "events", 401, got);
    let other = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    let got = post(s, path, with("other", now, other), event).await;
    expect(answers, "events", 401, got);
    let got = post(s, path, with("not-json", now, secret), b"{nope".to_vec()).await;
    expect(answers, "events", 400, got);
    let huge = format!(
        r#"{{"type":"message","content":"{}"}}"#,
        "x".repeat(2 * 1024 * 1024)
    );
    let got = post(s, path, with("huge", now, secret), huge.into_bytes()).await;
    expect(answers, "events", 413, got);
    let no_tenant = path.replace(&s.tenant.tenant.to_string(), &uuid::Uuid::new_v4().to_string());
    expect(
        answers,
        "events",
        404,
        signed(s, &no_tenant, "t", json!({})).await,
    );
}

#[tokio::test]
async fn every_answer_of_the_events_route_is_in_docs_agent_md() {
    let s = Pipeline::start().await;
    let (id, path) = accepted_turn(&s, "book me a flight").await;
    let mut answers = Vec::new();
    refusals_of_any_request(&s, &path, &mut answers).await;
    let events = [
        ("e1", 202, json!({"type": "status", "text": "Searching flights…"})),
        (
            "e2",
            202,
            json!({"type": "message", "content": "Found **3** flights."}),
        ),
        (
            "e2",
            200,
            json!({"type": "message", "content": "Found **3** flights."}),
        ),
        (
            "e3",
            400,
            json!({"type": "message", "content": "x".repeat(100_001)}),
        ),
        ("e4", 422, json!([{"type": "done"}])),
        ("e5", 422, json!({"type": "shout"})),
        ("e6", 202, json!({"type": "done"})),
        ("e7", 409, json!({"type": "status", "text": "still here"})),
    ];
    for (event_id, status, event) in events {
        expect(
            &mut answers,
            "events",
            status,
            signed(&s, &path, event_id, event).await,
        );
    }
    let unknown = path.replace(&id.to_string(), &uuid::Uuid::new_v4().to_string());
    let done = json!({"type": "done"});
    expect(
        &mut answers,
        "events",
        404,
        signed(&s, &unknown, "u", done.clone()).await,
    );

    // A turn answered synchronously (after the answer's part is posted: it is queued
    // first), and one past its horizon.
    s.worker.step().await.unwrap();
    s.deliver(Platform::Telegram, telegram_text(600_000 + s.next_id(), "hello"))
        .await;
    let answered = s.step_executed().await;
    let not_waiting = path.replace(&id.to_string(), &answered.to_string());
    expect(
        &mut answers,
        "events",
        409,
        signed(&s, &not_waiting, "n", done.clone()).await,
    );
    let (late, late_path) = accepted_turn(&s, "and a hotel").await;
    s.owner_exec(&format!(
        "update channel_messages set awaiting_until = now() - interval '1 second' where id = '{late}'"
    ))
    .await;
    expect(
        &mut answers,
        "events",
        410,
        signed(&s, &late_path, "l", done).await,
    );
    assert_documented(&answers);
}

#[tokio::test]
async fn every_answer_of_the_messages_route_is_in_docs_agent_md() {
    let s = Pipeline::start().await;
    s.deliver(Platform::Telegram, telegram_text(600_000 + s.next_id(), "hi"))
        .await;
    let turn = s.step_executed().await.to_string();
    let path = format!("/v1/agent/{}/messages", s.tenant.tenant);
    let (telegram, whatsapp) = (s.tenant.telegram.to_string(), s.tenant.whatsapp.to_string());
    let link = json!({"platform": "whatsapp", "platform_user_id": "15550002222", "user_id": "dora"});
    let (status, out) = s
        .admin(reqwest::Method::POST, "/v1/admin/links", Some(link))
        .await;
    assert_eq!(status, 201, "{out}");
    let nobody = uuid::Uuid::new_v4();
    let requests = [
        ("m1", 202, json!({"reply_to": turn, "content": "One more thing."})),
        ("m1", 200, json!({"reply_to": turn, "content": "One more thing."})),
        (
            "m2",
            422,
            json!({"reply_to": turn, "chat_id": "1", "content": "x"}),
        ),
        ("m3", 422, json!({"chat_id": "1", "content": "x"})),
        ("m4", 422, json!({"reply_to": turn, "content": " "})),
        (
            "m5",
            422,
            json!({"reply_to": turn, "template": {"name": "t", "language": "en"}}),
        ),
        (
            "m6",
            422,
            json!({"reply_to": turn, "connector_id": whatsapp, "content": "x"}),
        ),
        (
            "m7",
            422,
            json!({"user_id": "dora", "connector_id": whatsapp, "content": "x"}),
        ),
        (
            "m8",
            422,
            json!({"reply_to": turn, "content": "x", "colour": "red"}),
        ),
        ("m9", 404, json!({"reply_to": nobody, "content": "x"})),
        (
            "m10",
            404,
            json!({"chat_id": "1", "connector_id": nobody, "content": "x"}),
        ),
        ("m11", 404, json!({"user_id": "nobody", "content": "x"})),
        (
            "m12",
            404,
            json!({"user_id": "nobody", "connector_id": telegram, "content": "x"}),
        ),
        ("m13", 400, json!({"user_id": "x".repeat(257), "content": "x"})),
    ];
    let mut answers = Vec::new();
    for (id, status, body) in requests {
        expect(
            &mut answers,
            "messages",
            status,
            signed(&s, &path, id, body).await,
        );
    }
    assert_documented(&answers);
}
