//! The tenant admin and operator API: every endpoint, tenant isolation on every route,
//! keys, stable paging, and the OpenAPI document.

use std::collections::HashSet;

use channel_bridge::domain::Platform;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::support::api::{call, operator_app as app, OPERATOR};
use crate::support::fake_agent::{FakeAgent, Reply};
use crate::support::fake_platforms::{Answer, FakePlatforms};
use crate::support::platforms::*;
use crate::support::{eventually, run_cli, spawn_app_on, worker, TestApp};

/// A tenant provisioned like the webhook tests', with an admin key.
struct Tenant {
    p: Provisioned,
    key: String,
}

async fn tenant_with_key(app: &TestApp, slug: &str) -> Tenant {
    let p = provision_tenant(&app.pool, slug).await;
    let path = format!("/v1/operator/tenants/{}/keys", p.tenant);
    let (status, body) = call(app, Method::POST, &path, OPERATOR, Some(json!({"name": "ci"}))).await;
    assert_eq!(status, 201, "{body}");
    let key = body["key"].as_str().unwrap().to_owned();
    assert!(key.starts_with(&format!("cbk_{}_", body["prefix"].as_str().unwrap())));
    Tenant { p, key }
}

/// A tenant whose connectors post to `platforms`, with an admin key.
async fn tenant_at(app: &TestApp, slug: &str, platforms: &FakePlatforms) -> Tenant {
    let p = provision_tenant_at(&app.pool, slug, Some(&platforms.base_url)).await;
    let issued = channel_bridge::admin::operator::issue(&app.pool, p.tenant, "ci")
        .await
        .unwrap();
    Tenant { p, key: issued.key }
}

/// A tenant's turns by request text: (id, status, received_at as RFC 3339, delivered).
async fn turns_by_text(
    app: &TestApp,
    tenant: &Tenant,
) -> std::collections::HashMap<String, (String, String, String, bool)> {
    let mut owner = app.db.owner_conn().await;
    let rows: Vec<(String, String, String, chrono::DateTime<chrono::Utc>, bool)> = sqlx::query_as(
        "select request_content, id::text, status, received_at, delivered_at is not null
           from channel_messages where tenant_id = $1",
    )
    .bind(tenant.p.tenant)
    .fetch_all(&mut owner)
    .await
    .unwrap();
    rows.into_iter()
        .map(|(text, id, status, at, delivered)| {
            let at = at.to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
            (text, (id, status, at, delivered))
        })
        .collect()
}

async fn queue_depth(app: &TestApp) -> i64 {
    let mut owner = app.db.owner_conn().await;
    sqlx::query_scalar("select count(*) from dispatch_queue")
        .fetch_one(&mut owner)
        .await
        .unwrap()
}

async fn seed_messages(app: &TestApp, tenant: &Tenant, from: i64, count: i64) {
    for i in from..from + count {
        deliver(
            app,
            &tenant.p,
            Platform::Telegram,
            telegram_text(100_000 + i, &format!("message {i}")),
        )
        .await;
    }
}

async fn message_ids(app: &TestApp, tenant: &Tenant) -> Vec<String> {
    let (status, page) = call(
        app,
        Method::GET,
        "/v1/admin/messages?limit=200",
        &tenant.key,
        None,
    )
    .await;
    assert_eq!(status, 200);
    page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap().to_owned())
        .collect()
}

/// The operator creates tenant acme; the answer's body.
async fn operator_creates_acme(app: &TestApp) -> Value {
    let (status, created) = call(
        app,
        Method::POST,
        "/v1/operator/tenants",
        OPERATOR,
        Some(json!({"slug": "acme", "name": "Acme"})),
    )
    .await;
    assert_eq!(status, 201);
    created
}

#[tokio::test]
async fn operator_creates_tenants_and_refuses_a_taken_slug_a_wrong_token_and_a_bad_slug() {
    let app = app().await;
    let created = operator_creates_acme(&app).await;
    assert!(created["dispatch_secret"].as_str().unwrap().starts_with("whsec_"));

    let (status, _) = call(
        &app,
        Method::POST,
        "/v1/operator/tenants",
        OPERATOR,
        Some(json!({"slug": "acme"})),
    )
    .await;
    assert_eq!(status, 409);
    let (status, _) = call(
        &app,
        Method::POST,
        "/v1/operator/tenants",
        "wrong-operator-token",
        Some(json!({"slug": "x"})),
    )
    .await;
    assert_eq!(status, 401);
    let (status, _) = call(
        &app,
        Method::POST,
        "/v1/operator/tenants",
        OPERATOR,
        Some(json!({"slug": "Not A Slug"})),
    )
    .await;
    assert_eq!(status, 422);
    // PostgreSQL refuses a NUL byte in any text: it must not read as a database failure.
    let (status, body) = call(
        &app,
        Method::POST,
        "/v1/operator/tenants",
        OPERATOR,
        Some(json!({"slug": "nul\u{0}slug"})),
    )
    .await;
    assert_eq!(
        (status, body["error"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("unprocessable")),
        "{body}"
    );
}

#[tokio::test]
async fn operator_sets_and_clears_a_tenants_in_flight_limit_and_an_unknown_tenant_is_404() {
    let app = app().await;
    let created = operator_creates_acme(&app).await;
    let tenant = created["tenant_id"].as_str().unwrap();

    let tenant_path = format!("/v1/operator/tenants/{tenant}");
    let (status, limits) = call(
        &app,
        Method::PATCH,
        &tenant_path,
        OPERATOR,
        Some(json!({"max_in_flight": 25})),
    )
    .await;
    assert_eq!(
        (status, limits["max_in_flight"].clone()),
        (StatusCode::OK, json!(25))
    );
    let (status, _) = call(
        &app,
        Method::PATCH,
        &tenant_path,
        OPERATOR,
        Some(json!({"max_in_flight": 0})),
    )
    .await;
    assert_eq!(status, 422);
    let (status, limits) = call(
        &app,
        Method::PATCH,
        &tenant_path,
        OPERATOR,
        Some(json!({"max_in_flight": null})),
    )
    .await;
    assert_eq!(
        (status, limits["max_in_flight"].clone()),
        (StatusCode::OK, Value::Null)
    );
    let unknown = format!("/v1/operator/tenants/{}", uuid::Uuid::new_v4());
    let (status, _) = call(
        &app,
        Method::PATCH,
        &unknown,
        OPERATOR,
        Some(json!({"max_in_flight": 5})),
    )
    .await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn operator_issues_a_key_that_works_is_listed_without_the_key_and_once_revoked_is_refused() {
    let app = app().await;
    let created = operator_creates_acme(&app).await;
    let tenant = created["tenant_id"].as_str().unwrap();

    let keys_path = format!("/v1/operator/tenants/{tenant}/keys");
    let (status, issued) = call(
        &app,
        Method::POST,
        &keys_path,
        OPERATOR,
        Some(json!({"name": "laptop"})),
    )
    .await;
    assert_eq!(status, 201);
    let key = issued["key"].as_str().unwrap();
    let (status, me) = call(&app, Method::GET, "/v1/admin/tenant", key, None).await;
    assert_eq!((status, me["slug"].as_str()), (StatusCode::OK, Some("acme")));

    let (status, keys) = call(&app, Method::GET, &keys_path, OPERATOR, None).await;
    assert_eq!(status, 200);
    assert_eq!(keys[0]["prefix"], issued["prefix"]);
    assert!(keys[0]["last_used_at"].is_string(), "use is recorded");
    assert!(!keys.to_string().contains(key), "listings never show the key");

    let revoke = format!("/v1/operator/keys/{}", issued["id"].as_str().unwrap());
    let (status, revoked) = call(&app, Method::DELETE, &revoke, OPERATOR, None).await;
    assert_eq!(status, 200);
    assert!(revoked["revoked_at"].is_string());
    let (status, error) = call(&app, Method::GET, "/v1/admin/tenant", key, None).await;
    assert_eq!(
        (status, error["error"].as_str()),
        (StatusCode::UNAUTHORIZED, Some("unauthorized"))
    );
    let (status, _) = call(&app, Method::GET, "/v1/admin/tenant", "cbk_nope_nope", None).await;
    assert_eq!(status, 401);
    let (status, _) = app
        .client
        .get(app.url("/v1/admin/tenant"))
        .send()
        .await
        .map(|r| (r.status(), ()))
        .unwrap();
    assert_eq!(status, 401);
}

#[tokio::test]
async fn operator_endpoints_are_forbidden_without_a_configured_token() {
    let app = crate::support::spawn_app().await;
    let (status, body) = call(
        &app,
        Method::POST,
        "/v1/operator/tenants",
        "anything-at-all-here",
        Some(json!({"slug": "a"})),
    )
    .await;
    assert_eq!(
        (status, body["error"].as_str()),
        (StatusCode::FORBIDDEN, Some("forbidden"))
    );
}

/// Tenant acme with five turns: three Telegram messages, then bob's WhatsApp text and
/// image.
async fn five_messages(app: &TestApp) -> Tenant {
    let t = tenant_with_key(app, "acme").await;
    seed_messages(app, &t, 0, 3).await;
    assert_eq!(
        post_fixture(app, &t.p, Platform::Whatsapp, "text").await.status(),
        200
    );
    assert_eq!(
        post_fixture(app, &t.p, Platform::Whatsapp, "image")
            .await
            .status(),
        200
    );

    t
}

#[tokio::test]
async fn messages_are_listed_newest_first_with_their_attachments() {
    let app = app().await;
    let t = five_messages(&app).await;

    let (status, page) = call(&app, Method::GET, "/v1/admin/messages", &t.key, None).await;
    assert_eq!(status, 200);
    let items = page["items"].as_array().unwrap();
    assert_eq!(items.len(), 5);
    assert_eq!(
        items[0]["request_content"], "this one",
        "newest first: the image's caption"
    );
    assert_eq!(items[0]["attachments"][0]["type"], "image");
    assert!(page["next_cursor"].is_null());
}

#[tokio::test]
async fn messages_can_be_filtered_and_searched_and_a_bad_query_is_refused() {
    let app = app().await;
    let t = five_messages(&app).await;

    for (query, expected) in [
        ("platform=telegram", 3),
        ("user_id=bob", 2),
        ("status=ignored", 0),
        ("q=this%20one", 1),
        ("q=MESSAGE%201", 1),
        ("q=another%20color", 1),
        (&format!("connector_id={}", t.p.whatsapp), 2),
        ("since=2999-01-01T00:00:00Z", 0),
        ("until=2999-01-01T00:00:00Z", 5),
        ("q=100%25", 0),
    ] {
        let (status, page) = call(
            &app,
            Method::GET,
            &format!("/v1/admin/messages?{query}"),
            &t.key,
            None,
        )
        .await;
        assert_eq!(status, 200, "{query}");
        assert_eq!(page["items"].as_array().unwrap().len(), expected, "{query}");
    }
    for bad in [
        "limit=0",
        "limit=500",
        "platform=irc",
        "status=nope",
        "cursor=garbage",
        "since=yesterday",
    ] {
        let (status, error) = call(
            &app,
            Method::GET,
            &format!("/v1/admin/messages?{bad}"),
            &t.key,
            None,
        )
        .await;
        assert_eq!(
            (status, error["error"].as_str()),
            (StatusCode::UNPROCESSABLE_ENTITY, Some("unprocessable")),
            "{bad}"
        );
    }
}

#[tokio::test]
async fn a_message_is_read_with_its_reply_parts_and_an_unknown_id_is_404() {
    let app = app().await;
    let t = five_messages(&app).await;
    let (_, page) = call(&app, Method::GET, "/v1/admin/messages", &t.key, None).await;
    let items = page["items"].as_array().unwrap();

    // One message, with reply parts written as the worker would.
    let id = items[1]["id"].as_str().unwrap();
    let mut tx = app.tenant_tx(t.p.tenant).await;
    channel_bridge::db::parts::insert_reply_parts(
        &mut tx,
        id.parse().unwrap(),
        &channel_bridge::db::parts::Reply::text(vec!["hi".into(), "there".into()]),
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    let (status, detail) = call(
        &app,
        Method::GET,
        &format!("/v1/admin/messages/{id}"),
        &t.key,
        None,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(detail["request_content"], "Does it come in another color?");
    assert_eq!(detail["reply_parts"][1]["content"], "there");
    assert_eq!(detail["reply_parts"][1]["status"], "pending");
    let (status, _) = call(
        &app,
        Method::GET,
        &format!("/v1/admin/messages/{}", uuid::Uuid::new_v4()),
        &t.key,
        None,
    )
    .await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn paging_through_250_rows_while_new_rows_arrive_neither_loses_nor_repeats_a_row() {
    let app = app().await;
    let t = tenant_with_key(&app, "acme").await;
    seed_messages(&app, &t, 0, 250).await;
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let path = match &cursor {
            Some(c) => format!("/v1/admin/messages?limit=40&cursor={c}"),
            None => "/v1/admin/messages?limit=40".to_owned(),
        };
        let (status, page) = call(&app, Method::GET, &path, &t.key, None).await;
        assert_eq!(status, 200);
        seen.extend(
            page["items"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| m["request_content"].as_str().unwrap().to_owned()),
        );
        pages += 1;
        // New rows arrive between pages.
        seed_messages(&app, &t, 1000 + pages * 2, 2).await;
        match page["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    assert_eq!(pages, 7);
    let expected: Vec<String> = (0..250).rev().map(|i| format!("message {i}")).collect();
    assert_eq!(seen, expected, "every original row exactly once, newest first");
}

#[tokio::test]
async fn history_shows_what_the_agent_would_receive_next() {
    let app = app().await;
    let t = tenant_with_key(&app, "acme").await;
    let mut owner = app.db.owner_conn().await;
    seed_messages(&app, &t, 0, 2).await;
    sqlx::query(
        "update channel_messages set status = 'executed', response_content = 'ok: ' || request_content",
    )
    .execute(&mut owner)
    .await
    .unwrap();
    seed_messages(&app, &t, 2, 1).await; // still queued: not history yet

    let (status, history) = call(&app, Method::GET, "/v1/admin/users/alice/history", &t.key, None).await;
    assert_eq!(status, 200);
    assert_eq!(
        history["messages"],
        json!([
            {"role": "user", "content": "message 0"}, {"role": "assistant", "content": "ok: message 0"},
            {"role": "user", "content": "message 1"}, {"role": "assistant", "content": "ok: message 1"},
        ])
    );
}

#[tokio::test]
async fn a_failed_message_can_be_redispatched_once_and_an_answered_one_cannot() {
    let app = app().await;
    let t = tenant_with_key(&app, "acme").await;
    seed_messages(&app, &t, 0, 1).await;
    let id = message_ids(&app, &t).await.remove(0);
    let path = format!("/v1/admin/messages/{id}/redispatch");
    let nothing = json!({"queued": 0, "ids": [], "more": false});
    let (status, queued) = call(&app, Method::POST, &path, &t.key, None).await;
    assert_eq!(
        (status, queued),
        (StatusCode::OK, nothing.clone()),
        "still queued"
    );

    let mut owner = app.db.owner_conn().await;
    sqlx::raw_sql("update channel_messages set status = 'dispatch_failed', attempts = 5, last_error = 'agent down'; delete from dispatch_queue")
        .execute(&mut owner)
        .await
        .unwrap();
    let (status, queued) = call(&app, Method::POST, &path, &t.key, None).await;
    assert_eq!(
        (status, queued),
        (StatusCode::OK, json!({"queued": 1, "ids": [id], "more": false}))
    );
    let (_, message) = call(
        &app,
        Method::GET,
        &format!("/v1/admin/messages/{id}"),
        &t.key,
        None,
    )
    .await;
    assert_eq!(
        (
            message["status"].as_str(),
            message["attempts"].as_i64(),
            &message["last_error"]
        ),
        (Some("accepted"), Some(0), &Value::Null)
    );
    let (status, queued) = call(&app, Method::POST, &path, &t.key, None).await;
    assert_eq!(
        (status, queued),
        (StatusCode::OK, nothing),
        "a second call queues nothing"
    );
    let queued: i64 = sqlx::query_scalar("select count(*) from dispatch_queue")
        .fetch_one(&mut owner)
        .await
        .unwrap();
    assert_eq!(queued, 1);

    sqlx::raw_sql("update channel_messages set status = 'executed'; delete from dispatch_queue")
        .execute(&mut owner)
        .await
        .unwrap();
    let (status, error) = call(&app, Method::POST, &path, &t.key, None).await;
    assert_eq!(
        (status, error["error"].as_str()),
        (StatusCode::CONFLICT, Some("conflict")),
        "an answered message is resent, not redispatched"
    );
    let (status, error) = call(
        &app,
        Method::POST,
        &format!("/v1/admin/messages/{}/redispatch", uuid::Uuid::new_v4()),
        &t.key,
        None,
    )
    .await;
    assert_eq!(
        (status, error["error"].as_str()),
        (StatusCode::NOT_FOUND, Some("not_found"))
    );
}

/// A second Slack connector of `t`, created through the API with secrets of its own; its
/// id, its admin path and its webhook path.
async fn second_slack_connector(app: &TestApp, t: &Tenant) -> (String, String, String) {
    let create = json!({
        "platform": "slack", "name": "second workspace", "verification_secret": "first-signing-secret",
        "outbound_token": "xoxb-very-secret", "external_id": "T0001", "bot_user_id": "UBOT2", "bot_id": "BBOT2"
    });
    let (status, created) = call(app, Method::POST, "/v1/admin/connectors", &t.key, Some(create)).await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["has_outbound_token"], true);
    let id = created["id"].as_str().unwrap().to_owned();
    let path = format!("/v1/admin/connectors/{id}");
    let hook = format!("/v1/hooks/{}/{id}", t.p.tenant);
    (id, path, hook)
}

#[tokio::test]
async fn a_created_connector_is_listed_and_its_secrets_never_come_back() {
    let app = app().await;
    let t = tenant_with_key(&app, "acme").await;
    second_slack_connector(&app, &t).await;

    let (status, list) = call(&app, Method::GET, "/v1/admin/connectors", &t.key, None).await;
    assert_eq!((status, list.as_array().unwrap().len()), (StatusCode::OK, 4));
    for secret in [
        "first-signing-secret",
        "xoxb-very-secret",
        SLACK_SECRET,
        TELEGRAM_SECRET,
        "outbound-token",
    ] {
        assert!(!list.to_string().contains(secret), "secrets are write-only");
    }
}

#[tokio::test]
async fn a_rotated_signing_secret_verifies_beside_the_previous_one_for_the_grace_period_only() {
    let app = app().await;
    let t = tenant_with_key(&app, "acme").await;
    let (_, path, hook) = second_slack_connector(&app, &t).await;

    // Rotation: both secrets verify during the grace period.
    let (status, rotated) = call(
        &app,
        Method::PATCH,
        &path,
        &t.key,
        Some(json!({"verification_secret": "second-signing-secret"})),
    )
    .await;
    assert_eq!(status, 200);
    assert!(rotated["previous_secret_expires_at"].is_string());
    let body = slack_text("1718009000.000100", "signed with the old secret");
    let old = post(
        &app,
        &hook,
        &slack_headers("first-signing-secret", now(), &body),
        body.clone(),
    )
    .await;
    assert_eq!(old.status(), 200);
    let new = post(
        &app,
        &hook,
        &slack_headers("second-signing-secret", now(), &body),
        body.clone(),
    )
    .await;
    assert_eq!(new.status(), 200);
    let (status, _) = call(
        &app,
        Method::PATCH,
        &path,
        &t.key,
        Some(json!({"verification_secret": "third-signing-secret", "previous_secret_grace_secs": 0})),
    )
    .await;
    assert_eq!(status, 200);
    let expired = post(
        &app,
        &hook,
        &slack_headers("second-signing-secret", now(), &body),
        body.clone(),
    )
    .await;
    assert_eq!(
        expired.status(),
        401,
        "no grace: the previous secret is refused at once"
    );
    // A grace beyond 30 days (here past what a timestamp holds) is refused, and changes
    // nothing: the third secret is still the one in force.
    let (status, error) = call(
        &app,
        Method::PATCH,
        &path,
        &t.key,
        Some(json!({"verification_secret": "fourth-signing-secret", "previous_secret_grace_secs": 10_000_000_000_000u64})),
    )
    .await;
    assert_eq!(status, 422, "{error}");
    assert!(error["message"].as_str().unwrap().contains("30 days"), "{error}");
    let still = post(
        &app,
        &hook,
        &slack_headers("third-signing-secret", now(), &body),
        body.clone(),
    )
    .await;
    assert_eq!(still.status(), 200);
}

#[tokio::test]
async fn a_connector_is_renamed_and_an_invalid_url_or_an_unknown_field_is_refused() {
    let app = app().await;
    let t = tenant_with_key(&app, "acme").await;
    let (_, path, _) = second_slack_connector(&app, &t).await;

    let (status, updated) = call(
        &app,
        Method::PATCH,
        &path,
        &t.key,
        Some(json!({"name": "renamed", "api_base_url": ""})),
    )
    .await;
    assert_eq!(
        (status, updated["name"].as_str()),
        (StatusCode::OK, Some("renamed"))
    );
    let (status, _) = call(
        &app,
        Method::PATCH,
        &path,
        &t.key,
        Some(json!({"api_base_url": "not a url"})),
    )
    .await;
    assert_eq!(status, 422);
    let (status, _) = call(
        &app,
        Method::PATCH,
        &path,
        &t.key,
        Some(json!({"unknown_field": 1})),
    )
    .await;
    assert_eq!(status, 422);
}

#[tokio::test]
async fn a_disabled_connector_takes_no_webhooks_and_one_with_history_is_deleted_only_with_purge() {
    let app = app().await;
    let t = tenant_with_key(&app, "acme").await;
    let (_, path, hook) = second_slack_connector(&app, &t).await;
    // History: one turn recorded through the connector.
    let body = slack_text("1718009000.000100", "signed with the old secret");
    let recorded = post(
        &app,
        &hook,
        &slack_headers("first-signing-secret", now(), &body),
        body.clone(),
    )
    .await;
    assert_eq!(recorded.status(), 200);

    let (status, disabled) = call(&app, Method::POST, &format!("{path}/disable"), &t.key, None).await;
    assert_eq!(
        (status, disabled["enabled"].as_bool()),
        (StatusCode::OK, Some(false))
    );
    let refused = post(
        &app,
        &hook,
        &slack_headers("first-signing-secret", now(), &body),
        body,
    )
    .await;
    assert_eq!(refused.status(), 404, "a disabled connector takes no webhooks");

    let (status, _) = call(&app, Method::DELETE, &path, &t.key, None).await;
    assert_eq!(status, 409, "history is not deleted by accident");
    let (status, _) = call(&app, Method::DELETE, &format!("{path}?purge=true"), &t.key, None).await;
    assert_eq!(status, 204);
    let (status, _) = call(&app, Method::GET, &path, &t.key, None).await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn links_and_tenant_settings_can_be_managed() {
    let app = app().await;
    let t = tenant_with_key(&app, "acme").await;
    let link = json!({"platform": "slack", "platform_user_id": "U0NEW", "user_id": "dave"});
    let (status, created) = call(&app, Method::POST, "/v1/admin/links", &t.key, Some(link)).await;
    assert_eq!(
        (status, created["user_id"].as_str()),
        (StatusCode::CREATED, Some("dave"))
    );
    let (_, links) = call(&app, Method::GET, "/v1/admin/links", &t.key, None).await;
    assert_eq!(links.as_array().unwrap().len(), 5);
    let (status, _) = call(&app, Method::DELETE, "/v1/admin/links/slack/U0NEW", &t.key, None).await;
    assert_eq!(status, 204);
    let (status, _) = call(&app, Method::DELETE, "/v1/admin/links/slack/U0NEW", &t.key, None).await;
    assert_eq!(status, 404);
    let bad = json!({"platform": "irc", "platform_user_id": "x", "user_id": "y"});
    assert_eq!(
        call(&app, Method::POST, "/v1/admin/links", &t.key, Some(bad))
            .await
            .0,
        422
    );

    let patch = json!({"agent_url": "http://127.0.0.1:9/agent", "name": "Acme Inc"});
    let (status, tenant) = call(&app, Method::PATCH, "/v1/admin/tenant", &t.key, Some(patch)).await;
    assert_eq!(
        (status, tenant["agent_url"].as_str()),
        (StatusCode::OK, Some("http://127.0.0.1:9/agent"))
    );
    let (status, rotated) = call(
        &app,
        Method::POST,
        "/v1/admin/tenant/rotate-dispatch-secret",
        &t.key,
        None,
    )
    .await;
    assert_eq!(status, 200);
    let new_secret = rotated["dispatch_secret"].as_str().unwrap();
    assert!(new_secret.starts_with("whsec_") && new_secret != t.p.dispatch_secret);
    let (_, tenant) = call(&app, Method::GET, "/v1/admin/tenant", &t.key, None).await;
    assert!(
        !tenant.to_string().contains("whsec_"),
        "the secret is shown only by the rotation"
    );
}

#[tokio::test]
async fn after_a_dispatch_secret_rotation_both_secrets_sign_until_the_grace_period_ends() {
    use crate::support::fake_agent::FakeAgent;
    use crate::support::fake_platforms::FakePlatforms;
    use channel_bridge::dispatch::StepOutcome;
    let app = app().await;
    let platforms = FakePlatforms::start().await;
    let p = provision_tenant_at(&app.pool, "acme", Some(&platforms.base_url)).await;
    let (_, issued) = call(
        &app,
        Method::POST,
        &format!("/v1/operator/tenants/{}/keys", p.tenant),
        OPERATOR,
        Some(json!({})),
    )
    .await;
    let key = issued["key"].as_str().unwrap();
    call(
        &app,
        Method::POST,
        "/v1/admin/tenant/rotate-dispatch-secret",
        key,
        None,
    )
    .await;

    // An agent that still only knows the old secret keeps verifying.
    let agent = FakeAgent::start(&p.dispatch_secret).await;
    let worker = worker(&app, &agent.url, |_| {});
    deliver(&app, &p, Platform::Telegram, telegram_text(777, "still signed")).await;
    assert!(matches!(worker.step().await.unwrap(), StepOutcome::Executed(_)));
    assert_eq!(agent.calls().len(), 1);
}

/// For every tenant-scoped route, tenant B's key aimed at tenant A's resources finds
/// nothing (404 or an empty result) and changes nothing.
/// Tenants A and B with keys; A with three turns its agent refused, one of them answered
/// since and its reply refused (something to redispatch and to resend).
struct TwoTenants {
    a: Tenant,
    b: Tenant,
    a_message: String,
    a_answered: String,
    a_connector: channel_bridge::domain::ConnectorId,
}

async fn two_tenants(app: &TestApp) -> TwoTenants {
    let a = tenant_with_key(app, "tenant-a").await;
    let b = tenant_with_key(app, "tenant-b").await;
    seed_messages(app, &a, 0, 3).await;
    let mut owner = app.db.owner_conn().await;
    sqlx::query("update channel_messages set status = 'dispatch_failed' where tenant_id = $1")
        .bind(a.p.tenant)
        .execute(&mut owner)
        .await
        .unwrap();
    sqlx::query("delete from dispatch_queue where tenant_id = $1")
        .bind(a.p.tenant)
        .execute(&mut owner)
        .await
        .unwrap();
    let a_message = message_ids(app, &a).await.remove(0);
    // One of A's turns was answered and its reply refused: something to resend.
    let a_answered = message_ids(app, &a).await.remove(1);
    sqlx::query(
        "update channel_messages set status = 'delivery_failed', response_content = 'hi', decision = 'respond'
          where id = $1::uuid",
    )
    .bind(&a_answered)
    .execute(&mut owner)
    .await
    .unwrap();
    sqlx::query(
        "insert into channel_replies (tenant_id, message_id, part_index, content, status, last_error)
         values ($1, $2::uuid, 0, 'hi', 'failed', 'slack: channel_not_found')",
    )
    .bind(a.p.tenant)
    .bind(&a_answered)
    .execute(&mut owner)
    .await
    .unwrap();
    TwoTenants {
        a_connector: a.p.slack,
        a,
        b,
        a_message,
        a_answered,
    }
}

#[tokio::test]
async fn tenant_b_lists_none_of_tenant_a_messages_history_connectors_or_links() {
    let app = app().await;
    let TwoTenants { b, a_connector, .. } = two_tenants(&app).await;

    let (_, page) = call(&app, Method::GET, "/v1/admin/messages", &b.key, None).await;
    assert!(page["items"].as_array().unwrap().is_empty());
    let (_, page) = call(
        &app,
        Method::GET,
        &format!("/v1/admin/messages?connector_id={a_connector}"),
        &b.key,
        None,
    )
    .await;
    assert!(page["items"].as_array().unwrap().is_empty());
    let (_, history) = call(&app, Method::GET, "/v1/admin/users/alice/history", &b.key, None).await;
    assert_eq!(history["messages"], json!([]));
    let (_, connectors) = call(&app, Method::GET, "/v1/admin/connectors", &b.key, None).await;
    assert!(!connectors.to_string().contains(&a_connector.to_string()));
    let (_, links) = call(&app, Method::GET, "/v1/admin/links", &b.key, None).await;
    assert!(links
        .as_array()
        .unwrap()
        .iter()
        .all(|l| l["user_id"] != "alice-of-a"));
}

#[tokio::test]
async fn tenant_b_reading_changing_or_deleting_tenant_a_resources_by_id_gets_404_never_403() {
    let app = app().await;
    let TwoTenants {
        b,
        a_message,
        a_connector,
        ..
    } = two_tenants(&app).await;

    let attempts = [
        (Method::GET, format!("/v1/admin/messages/{a_message}"), None),
        (
            Method::POST,
            format!("/v1/admin/messages/{a_message}/redispatch"),
            None,
        ),
        (
            Method::POST,
            format!("/v1/admin/messages/{a_message}/resend?include_unknown=true"),
            None,
        ),
        (Method::GET, format!("/v1/admin/connectors/{a_connector}"), None),
        (
            Method::PATCH,
            format!("/v1/admin/connectors/{a_connector}"),
            Some(json!({"name": "stolen"})),
        ),
        (
            Method::PATCH,
            format!("/v1/admin/connectors/{a_connector}"),
            Some(json!({"verification_secret": "mine-now"})),
        ),
        (
            Method::POST,
            format!("/v1/admin/connectors/{a_connector}/disable"),
            None,
        ),
        (
            Method::DELETE,
            format!("/v1/admin/connectors/{a_connector}?purge=true"),
            None,
        ),
    ];
    for (method, path, body) in attempts {
        let (status, error) = call(&app, method.clone(), &path, &b.key, body).await;
        assert_eq!(status, 404, "{method} {path} must answer 404, never 403");
        assert_eq!(error["error"], "not_found");
    }
}

#[tokio::test]
async fn tenant_b_bulk_actions_and_link_writes_change_nothing_of_tenant_a_whose_own_key_finds_its_turns() {
    let app = app().await;
    let TwoTenants {
        a,
        b,
        a_answered,
        a_connector,
        ..
    } = two_tenants(&app).await;
    let before = snapshot(&app).await;

    // B's bulk actions, even aimed at A's connector and user, find none of A's turns.
    for action in ["redispatch", "resend"] {
        for filter in [
            json!({}),
            json!({"connector_id": a_connector}),
            json!({"user_id": "alice"}),
        ] {
            let path = format!("/v1/admin/messages/{action}");
            let (status, queued) = call(&app, Method::POST, &path, &b.key, Some(filter.clone())).await;
            assert_eq!(
                (status, queued),
                (StatusCode::OK, json!({"queued": 0, "ids": [], "more": false})),
                "{action} {filter}"
            );
        }
    }
    // B's link writes land in B's tenant, never in A's.
    let link = json!({"platform": "telegram", "platform_user_id": TELEGRAM_USER, "user_id": "mallory"});
    call(&app, Method::POST, "/v1/admin/links", &b.key, Some(link)).await;
    call(
        &app,
        Method::DELETE,
        &format!("/v1/admin/links/slack/{SLACK_USER}"),
        &b.key,
        None,
    )
    .await;
    let mut b_owned = snapshot(&app).await;
    b_owned.retain(|row| !row.contains(&b.p.tenant.to_string()));
    let mut a_before = before.clone();
    a_before.retain(|row| !row.contains(&b.p.tenant.to_string()));
    assert_eq!(a_before, b_owned, "tenant A's rows are unchanged");

    // The same calls with A's own key do find them: B's empty answers were not vacuous.
    let (_, redispatched) = call(
        &app,
        Method::POST,
        "/v1/admin/messages/redispatch",
        &a.key,
        Some(json!({})),
    )
    .await;
    assert_eq!(redispatched["queued"], 2);
    let (_, resent) = call(
        &app,
        Method::POST,
        "/v1/admin/messages/resend",
        &a.key,
        Some(json!({})),
    )
    .await;
    assert_eq!(resent["ids"], json!([a_answered]));
}

/// Every row of every tenant table, as text, for before/after comparisons.
async fn snapshot(app: &TestApp) -> HashSet<String> {
    let mut owner = app.db.owner_conn().await;
    let mut rows = HashSet::new();
    for table in [
        "channel_connectors",
        "channel_links",
        "channel_messages",
        "channel_replies",
        "dispatch_queue",
    ] {
        let table_rows: Vec<String> = sqlx::query_scalar(&format!("select t::text from {table} t"))
            .fetch_all(&mut owner)
            .await
            .unwrap();
        rows.extend(table_rows.into_iter().map(|r| format!("{table}: {r}")));
    }
    rows
}

#[tokio::test]
async fn the_openapi_document_lists_every_route_the_router_serves() {
    let app = app().await;
    let response = app.client.get(app.url("/v1/openapi.json")).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let doc: Value = response.json().await.unwrap();
    let mut documented = HashSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            documented.insert(format!("{} {path}", method.to_uppercase()));
        }
    }
    let served = [
        "GET /healthz",
        "GET /readyz",
        "GET /metrics",
        "GET /v1/openapi.json",
        "GET /v1/media/{token}",
        "POST /v1/hooks/{tenant_id}/{connector_id}",
        "GET /v1/hooks/{tenant_id}/{connector_id}",
        "GET /v1/admin/messages",
        "GET /v1/admin/messages/{id}",
        "POST /v1/admin/messages/{id}/redispatch",
        "POST /v1/admin/messages/{id}/resend",
        "POST /v1/admin/messages/redispatch",
        "POST /v1/admin/messages/resend",
        "GET /v1/admin/users/{user_id}/history",
        "GET /v1/admin/connectors",
        "POST /v1/admin/connectors",
        "GET /v1/admin/connectors/{id}",
        "PATCH /v1/admin/connectors/{id}",
        "DELETE /v1/admin/connectors/{id}",
        "POST /v1/admin/connectors/{id}/disable",
        "GET /v1/admin/links",
        "POST /v1/admin/links",
        "DELETE /v1/admin/links/{platform}/{platform_user_id}",
        "GET /v1/admin/tenant",
        "PATCH /v1/admin/tenant",
        "POST /v1/admin/tenant/rotate-dispatch-secret",
        "POST /v1/admin/users/{user_id}/erase",
        "POST /v1/admin/senders/{platform}/{platform_user_id}/erase",
        "GET /v1/admin/export",
        "GET /v1/admin/audit",
        "GET /v1/admin/conversations/held",
        "POST /v1/admin/conversations/{conversation}/take-over",
        "POST /v1/admin/conversations/{conversation}/hand-back",
        "POST /v1/admin/conversations/{conversation}/messages",
        "POST /v1/hooks/{tenant_id}/{connector_id}/interactivity",
        "POST /v1/hooks/{tenant_id}/{connector_id}/commands",
        "POST /v1/agent/{tenant_id}/turns/{message_id}/events",
        "POST /v1/agent/{tenant_id}/messages",
        "GET /v1/operator/tenants",
        "POST /v1/operator/tenants",
        "GET /v1/operator/tenants/{tenant}",
        "PATCH /v1/operator/tenants/{tenant}",
        "GET /v1/operator/tenants/{tenant}/keys",
        "POST /v1/operator/tenants/{tenant}/keys",
        "DELETE /v1/operator/keys/{key_id}",
    ];
    let served: HashSet<String> = served.iter().map(|s| s.to_string()).collect();
    assert_eq!(
        documented, served,
        "the document and the served routes are the same set"
    );

    // And every documented operation is really routed: the router answers it with its own
    // JSON (or a handshake/metrics body), never the 404/405 of an unknown route or method.
    let unrouted = app.client.get(app.url("/v1/no-such-route")).send().await.unwrap();
    assert_eq!(unrouted.status(), 404);
    let unrouted = unrouted.text().await.unwrap();
    for operation in &documented {
        let (method, path) = operation.split_once(' ').unwrap();
        let concrete = path
            .replace("{tenant_id}", &uuid::Uuid::new_v4().to_string())
            .replace("{tenant}", &uuid::Uuid::new_v4().to_string())
            .replace("{connector_id}", &uuid::Uuid::new_v4().to_string())
            .replace("{id}", &uuid::Uuid::new_v4().to_string())
            .replace("{key_id}", &uuid::Uuid::new_v4().to_string())
            .replace("{user_id}", "someone")
            .replace("{platform}", "slack")
            .replace("{platform_user_id}", "U1");
        let response = app
            .client
            .request(method.parse().unwrap(), app.url(&concrete))
            .send()
            .await
            .unwrap();
        let status = response.status();
        let body = response.text().await.unwrap();
        assert_ne!(status, 405, "{operation}");
        assert_ne!(body, unrouted, "{operation} is routed");
    }
}

/// Tenants A and B whose connectors post to `platforms`; the agent refused four of A's
/// turns and B has a failed turn of its own.
struct Refused {
    _platforms: FakePlatforms,
    a: Tenant,
    b: Tenant,
    agent: FakeAgent,
    worker: std::sync::Arc<channel_bridge::dispatch::Worker>,
}

async fn refused_turns(app: &TestApp) -> Refused {
    use channel_bridge::dispatch::StepOutcome;
    let platforms = FakePlatforms::start().await;
    let a = tenant_at(app, "tenant-a", &platforms).await;
    let b = tenant_at(app, "tenant-b", &platforms).await;
    let agent = FakeAgent::start(&a.p.dispatch_secret).await;
    let worker = worker(app, &agent.url, |_| {});

    // The agent refuses four of A's turns: alice's two on Telegram and one on Slack, bob's
    // on WhatsApp.
    agent.script((0..4).map(|_| Reply::Json(400, json!({"error": "bad_request"}), None)));
    deliver(app, &a.p, Platform::Telegram, telegram_text(200_001, "t1")).await;
    deliver(app, &a.p, Platform::Telegram, telegram_text(200_002, "t2")).await;
    deliver(app, &a.p, Platform::Slack, slack_text("1718002000.000100", "s1")).await;
    assert_eq!(
        post_fixture(app, &a.p, Platform::Whatsapp, "text").await.status(),
        200
    );
    for _ in 0..4 {
        let outcome = worker.step().await.unwrap();
        assert!(matches!(outcome, StepOutcome::Failed(_)), "{outcome:?}");
    }
    // Tenant B has a failed turn of its own alice on Telegram.
    deliver(app, &b.p, Platform::Telegram, telegram_text(200_001, "b1")).await;
    let mut owner = app.db.owner_conn().await;
    sqlx::query(
        "with failed as (update channel_messages set status = 'dispatch_failed', last_error = 'agent down'
                          where tenant_id = $1 returning id)
         delete from dispatch_queue where message_id in (select id from failed)",
    )
    .bind(b.p.tenant)
    .execute(&mut owner)
    .await
    .unwrap();
    Refused {
        _platforms: platforms,
        a,
        b,
        agent,
        worker,
    }
}

#[tokio::test]
async fn bulk_actions_refuse_bad_filters_and_queue_nothing() {
    let app = app().await;
    let Refused { a, .. } = refused_turns(&app).await;
    let turns = turns_by_text(&app, &a).await;
    let received = |text: &str| turns[text].2.clone();

    // Bad filters are refused and queue nothing; a misspelt filter never widens the action.
    let path = "/v1/admin/messages/redispatch";
    for (action, bad) in [
        ("redispatch", json!({"status": "executed"})),
        ("redispatch", json!({"include_unknown": true})),
        ("redispatch", json!({"limit": 0})),
        ("redispatch", json!({"limit": 1001})),
        ("redispatch", json!({"since": "yesterday"})),
        (
            "redispatch",
            json!({"since": received("t2"), "until": received("t1")}),
        ),
        ("redispatch", json!({"connector": a.p.telegram})),
        ("redispatch", json!({"connector_id": "not-a-uuid"})),
        ("resend", json!({"status": "dispatch_failed"})),
        ("resend", json!({"status": "nope"})),
        ("resend", json!({"platform": "irc"})),
        ("resend", json!(["not", "an", "object"])),
    ] {
        let (status, error) = call(
            &app,
            Method::POST,
            &format!("/v1/admin/messages/{action}"),
            &a.key,
            Some(bad.clone()),
        )
        .await;
        assert_eq!(
            (status, error["error"].as_str()),
            (StatusCode::UNPROCESSABLE_ENTITY, Some("unprocessable")),
            "{action} {bad}"
        );
    }
    let no_json = app
        .client
        .post(app.url(path))
        .bearer_auth(&a.key)
        .body("everything please")
        .send()
        .await
        .unwrap();
    assert!(no_json.status().is_client_error(), "{}", no_json.status());
    assert_eq!(queue_depth(&app).await, 0, "nothing was queued by a refused call");
}

#[tokio::test]
async fn bulk_redispatch_requeues_exactly_the_failed_turns_the_filter_selects_and_they_get_answered() {
    use channel_bridge::dispatch::StepOutcome;
    let app = app().await;
    // The platforms stay up: the answers are delivered.
    let Refused {
        _platforms,
        a,
        b,
        agent,
        worker,
    } = refused_turns(&app).await;
    let turns = turns_by_text(&app, &a).await;
    let id = |text: &str| turns[text].0.clone();
    let received = |text: &str| turns[text].2.clone();
    let w1 = turns["Does it come in another color?"].0.clone();
    assert!(turns.values().all(|(_, status, ..)| status == "dispatch_failed"));
    let path = "/v1/admin/messages/redispatch";

    // Alice's Telegram turns received since the second one: that one alone.
    let filter = json!({"connector_id": a.p.telegram, "user_id": "alice", "since": received("t2")});
    let (status, queued) = call(&app, Method::POST, path, &a.key, Some(filter)).await;
    assert_eq!(
        (status, queued),
        (
            StatusCode::OK,
            json!({"queued": 1, "ids": [id("t2")], "more": false})
        )
    );
    // All of alice's Telegram turns: the first one now; the second is already queued.
    let filter = json!({"connector_id": a.p.telegram, "user_id": "alice"});
    let (_, queued) = call(&app, Method::POST, path, &a.key, Some(filter.clone())).await;
    assert_eq!(queued, json!({"queued": 1, "ids": [id("t1")], "more": false}));
    let (_, queued) = call(&app, Method::POST, path, &a.key, Some(filter)).await;
    assert_eq!(
        queued,
        json!({"queued": 0, "ids": [], "more": false}),
        "idempotent"
    );
    // Before the first turn: nothing.
    let (_, queued) = call(
        &app,
        Method::POST,
        path,
        &a.key,
        Some(json!({"until": received("t1")})),
    )
    .await;
    assert_eq!(queued, json!({"queued": 0, "ids": [], "more": false}));
    // The whole tenant, one per call: the oldest first, and more to come.
    let (_, queued) = call(&app, Method::POST, path, &a.key, Some(json!({"limit": 1}))).await;
    assert_eq!(queued, json!({"queued": 1, "ids": [id("s1")], "more": true}));

    // The three are answered, in the order they were queued; the rest stay failed.
    let mut outcomes = Vec::new();
    loop {
        match worker.step().await.unwrap() {
            StepOutcome::Empty => break,
            outcome => outcomes.push(outcome),
        }
    }
    let answered: Vec<String> = outcomes
        .iter()
        .map(|o| match o {
            StepOutcome::Executed(id) => id.to_string(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(answered, [id("t2"), id("t1"), id("s1")]);
    let contents: Vec<String> = agent.calls()[4..]
        .iter()
        .map(|c| c.payload.content.clone())
        .collect();
    assert_eq!(contents, ["t2", "t1", "s1"]);
    let turns = turns_by_text(&app, &a).await;
    for text in ["t1", "t2", "s1"] {
        assert_eq!(
            (turns[text].1.as_str(), turns[text].3),
            ("executed", true),
            "{text}"
        );
    }
    assert_eq!(turns["Does it come in another color?"].1, "dispatch_failed");
    assert_eq!(turns["Does it come in another color?"].0, w1);
    let b_turns = turns_by_text(&app, &b).await;
    assert_eq!(
        b_turns["b1"].1, "dispatch_failed",
        "another tenant's turn is untouched"
    );
    assert_eq!(queue_depth(&app).await, 0);
}

fn printed(output: &std::process::Output) -> Value {
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("the CLI prints JSON")
}

/// A turn's (status, delivered), by its request text.
async fn status_of(app: &TestApp, t: &Tenant, text: &str) -> Option<(String, bool)> {
    turns_by_text(app, t)
        .await
        .get(text)
        .map(|(_, status, _, delivered)| (status.clone(), *delivered))
}

/// Tenant acme served by a worker instance that polls once a minute (only a wake-up gets
/// a job run in time), with one turn whose reply Slack refused and one the agent refused.
struct FailedBothWays {
    platforms: FakePlatforms,
    t: Tenant,
    _agent: FakeAgent,
    _worker: TestApp,
    slack_turn: String,
    bobs_turn: String,
}

async fn failed_both_ways(app: &TestApp) -> FailedBothWays {
    let platforms = FakePlatforms::start().await;
    let t = tenant_at(app, "acme", &platforms).await;
    let agent = FakeAgent::start(&t.p.dispatch_secret).await;
    // A worker instance that polls once a minute: only a wake-up gets a job run in time.
    let agent_url = agent.url.clone();
    let _worker = spawn_app_on(&app.db, move |settings| {
        settings.worker = true;
        settings.agent_url = Some(agent_url);
        settings.dispatch.poll_interval_ms = 60_000;
        settings.dispatch.retry_base_ms = 0;
    })
    .await;
    eventually("the worker instance listens for wake-ups", || async {
        let mut owner = app.db.owner_conn().await;
        sqlx::query_scalar(
            "select exists (select 1 from pg_stat_activity
                             where datname = current_database() and query ilike 'listen%')",
        )
        .fetch_one(&mut owner)
        .await
        .unwrap()
    })
    .await;

    // A two-part answer whose second part Slack refuses, and a turn the agent refuses.
    agent.script([
        Reply::Json(
            200,
            json!({"messages": [{"content": "p0"}, {"content": "p1"}]}),
            None,
        ),
        Reply::Json(400, json!({"error": "bad_request"}), None),
    ]);
    platforms.script(
        Platform::Slack,
        [
            Answer::Ok,
            Answer::Status(200, json!({"ok": false, "error": "channel_not_found"}), None),
        ],
    );
    deliver(
        app,
        &t.p,
        Platform::Slack,
        slack_text("1718003000.000100", "two parts"),
    )
    .await;
    eventually("the reply fails", || async {
        status_of(app, &t, "two parts").await == Some(("delivery_failed".into(), false))
    })
    .await;
    assert_eq!(
        post_fixture(app, &t.p, Platform::Whatsapp, "text").await.status(),
        200
    );
    let bobs = "Does it come in another color?";
    eventually("the dispatch fails", || async {
        status_of(app, &t, bobs).await == Some(("dispatch_failed".into(), false))
    })
    .await;
    let turns = turns_by_text(app, &t).await;
    let (slack_turn, bobs_turn) = (turns["two parts"].0.clone(), turns[bobs].0.clone());

    FailedBothWays {
        platforms,
        t,
        _agent: agent,
        _worker,
        slack_turn,
        bobs_turn,
    }
}

#[tokio::test]
async fn the_cli_resends_by_filter_and_a_running_worker_posts_only_the_missing_part_at_once() {
    let app = app().await;
    let FailedBothWays {
        platforms,
        t,
        _agent,
        _worker,
        slack_turn,
        ..
    } = failed_both_ways(&app).await;

    let tenant = t.p.tenant.to_string();
    let slack = t.p.slack.to_string();
    let resend = [
        "messages",
        "resend",
        "--tenant",
        &tenant,
        "--connector",
        &slack,
        "--status",
        "delivery_failed",
    ];
    let queued = printed(&run_cli(&app.db, &resend).await);
    assert_eq!(queued, json!({"queued": 1, "ids": [slack_turn], "more": false}));
    eventually("the resent part is posted", || async {
        status_of(&app, &t, "two parts").await == Some(("executed".into(), true))
    })
    .await;
    let texts: Vec<String> = platforms
        .sent_to(Platform::Slack)
        .iter()
        .map(|m| m.text().to_owned())
        .collect();
    assert_eq!(texts, ["p0", "p1", "p1"], "only the missing part, once");
    let queued = printed(&run_cli(&app.db, &resend).await);
    assert_eq!(queued, json!({"queued": 0, "ids": [], "more": false}));
}

#[tokio::test]
async fn the_cli_redispatches_by_filter_and_a_running_worker_answers_at_once_but_not_twice() {
    let app = app().await;
    let FailedBothWays {
        platforms,
        t,
        _agent,
        _worker,
        bobs_turn,
        ..
    } = failed_both_ways(&app).await;
    let bobs = "Does it come in another color?";
    let tenant = t.p.tenant.to_string();

    let redispatch = ["messages", "redispatch", "--tenant", &tenant, "--user", "bob"];
    let queued = printed(&run_cli(&app.db, &redispatch).await);
    assert_eq!(queued, json!({"queued": 1, "ids": [bobs_turn], "more": false}));
    eventually("the redispatched turn is answered and delivered", || async {
        status_of(&app, &t, bobs).await == Some(("executed".into(), true))
    })
    .await;
    assert_eq!(platforms.sent_to(Platform::Whatsapp).len(), 1);
    let one = ["messages", "redispatch", "--tenant", &tenant, "--id", &bobs_turn];
    let output = run_cli(&app.db, &one).await;
    assert!(!output.status.success());
    assert!(
        String::from_utf8_lossy(&output.stderr)
            .contains("only a dispatch_failed message can be redispatched"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[tokio::test]
async fn the_cli_refuses_to_redispatch_another_status_or_to_resend_an_unknown_message() {
    let app = app().await;
    let t = tenant_with_key(&app, "acme").await;
    let tenant = t.p.tenant.to_string();

    let wrong = [
        "messages",
        "redispatch",
        "--tenant",
        &tenant,
        "--status",
        "executed",
    ];
    let output = run_cli(&app.db, &wrong).await;
    assert!(!output.status.success());
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("redispatch applies to dispatch_failed messages"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let unknown = uuid::Uuid::new_v4().to_string();
    let output = run_cli(
        &app.db,
        &["messages", "resend", "--tenant", &tenant, "--id", &unknown],
    )
    .await;
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("message not found"));
}

#[tokio::test]
async fn operator_and_database_cli_actions_reach_the_tenants_audit_log() {
    let app = app().await;
    let (status, created) = call(
        &app,
        Method::POST,
        "/v1/operator/tenants",
        OPERATOR,
        Some(json!({"slug": "acme"})),
    )
    .await;
    assert_eq!(status, 201);
    let tenant = created["tenant_id"].as_str().unwrap().to_owned();
    let keys = format!("/v1/operator/tenants/{tenant}/keys");
    let (_, reader) = call(
        &app,
        Method::POST,
        &keys,
        OPERATOR,
        Some(json!({"name": "reader"})),
    )
    .await;
    let (_, spare) = call(
        &app,
        Method::POST,
        &keys,
        OPERATOR,
        Some(json!({"name": "spare"})),
    )
    .await;
    let spare_id = spare["id"].as_str().unwrap();
    let (status, _) = call(
        &app,
        Method::DELETE,
        &format!("/v1/operator/keys/{spare_id}"),
        OPERATOR,
        None,
    )
    .await;
    assert_eq!(status, 200);
    let (status, _) = call(
        &app,
        Method::PATCH,
        "/v1/operator/tenants/acme",
        OPERATOR,
        Some(json!({"max_in_flight": 40, "history_scope": "chat"})),
    )
    .await;
    assert_eq!(status, 200);
    let linked = run_cli(
        &app.db,
        &[
            "link",
            "add",
            "--tenant",
            &tenant,
            "--platform",
            "telegram",
            "--platform-user-id",
            "408258968",
            "--user-id",
            "alice",
        ],
    )
    .await;
    assert!(
        linked.status.success(),
        "{}",
        String::from_utf8_lossy(&linked.stderr)
    );

    let reader_key = reader["key"].as_str().unwrap();
    let (status, page) = call(&app, Method::GET, "/v1/admin/audit", reader_key, None).await;
    assert_eq!(status, 200, "{page}");
    let records: Vec<(String, String, String)> = page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let field = |name: &str| r[name].as_str().unwrap().to_owned();
            (field("action"), field("actor"), field("target"))
        })
        .collect();
    let own =
        |action: &str, actor: &str, target: &str| (action.to_owned(), actor.to_owned(), target.to_owned());
    assert_eq!(
        records,
        [
            own("link.set", "cli", "telegram:408258968"),
            own("tenant.update", "operator", "tenant"),
            own("key.revoke", "operator", spare_id),
            own("key.issue", "operator", spare_id),
            own("key.issue", "operator", reader["id"].as_str().unwrap()),
        ]
    );
    assert_eq!(
        page["items"][1]["details"],
        json!({"fields": ["max_in_flight", "history_scope"]})
    );
    assert!(!page.to_string().contains(reader_key), "no key in the audit log");
}
