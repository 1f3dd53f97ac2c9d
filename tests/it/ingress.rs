//! Webhook ingress through the real route and the real database: verification, handshakes,
//! filtering, dedupe, linking, limits and outages.

use channel_bridge::domain::Platform;
use futures::future::join_all;
use serde_json::Value;

use crate::support::db_proxy::{upstream_addr, DbProxy};
use crate::support::platforms::*;
use crate::support::{eventually, spawn_app, spawn_app_with, worker, TestApp};

/// What the database holds for one tenant, read as the owner (outside RLS) so a test can
/// also see rows it should not have written.
#[derive(Debug, PartialEq, Eq)]
struct Counts {
    messages: i64,
    queued: i64,
}

async fn counts(app: &TestApp) -> Counts {
    let mut owner = app.db.owner_conn().await;
    let messages = sqlx::query_scalar("select count(*) from channel_messages")
        .fetch_one(&mut owner)
        .await
        .unwrap();
    let queued = sqlx::query_scalar("select count(*) from dispatch_queue")
        .fetch_one(&mut owner)
        .await
        .unwrap();
    Counts { messages, queued }
}

/// (status, request_content, user_id, thread_id, reply_to_id) of every recorded row.
type Row = (String, String, Option<String>, Option<String>, Option<String>);

async fn rows(app: &TestApp) -> Vec<Row> {
    let mut owner = app.db.owner_conn().await;
    sqlx::query_as(
        "select status, request_content, user_id, thread_id, reply_to_id from channel_messages order by received_at, id",
    )
    .fetch_all(&mut owner)
    .await
    .unwrap()
}

async fn tenant_rows(app: &TestApp, tenant: &Provisioned) -> (Vec<Row>, i64) {
    let mut owner = app.db.owner_conn().await;
    let rows = sqlx::query_as(
        "select status, request_content, user_id, thread_id, reply_to_id from channel_messages
          where tenant_id = $1 order by received_at, id",
    )
    .bind(tenant.tenant)
    .fetch_all(&mut owner)
    .await
    .unwrap();
    let queued = sqlx::query_scalar("select count(*) from dispatch_queue where tenant_id = $1")
        .bind(tenant.tenant)
        .fetch_one(&mut owner)
        .await
        .unwrap();
    (rows, queued)
}

struct Case {
    platform: Platform,
    fixture: &'static str,
    /// Rows recorded: (status, text) in order.
    recorded: &'static [(&'static str, &'static str)],
    queued: i64,
}

const fn case(
    platform: Platform,
    fixture: &'static str,
    recorded: &'static [(&'static str, &'static str)],
    queued: i64,
) -> Case {
    Case {
        platform,
        fixture,
        recorded,
        queued,
    }
}

const FORWARDED: &str = "accepted";
const IGNORED: &str = "ignored";
/// A turn forwarded with an empty text (a file without caption).
const NO_TEXT: &str = "(no text)";

/// Every fixture (but the handshake) and what it must leave in the database.
fn cases() -> Vec<Case> {
    use Platform::*;
    vec![
        case(Slack, "dm_text", &[(FORWARDED, "")], 1),
        case(Slack, "channel_text", &[(FORWARDED, "")], 1),
        case(Slack, "thread_reply", &[(FORWARDED, "")], 1),
        case(Slack, "mention_message", &[(FORWARDED, "")], 1),
        case(Slack, "mention_app_mention", &[(FORWARDED, "")], 1),
        case(Slack, "message_changed", &[], 0),
        case(Slack, "message_deleted", &[], 0),
        case(Slack, "bot_echo", &[], 0),
        case(Slack, "bot_message_classic", &[], 0),
        case(Slack, "channel_join", &[], 0),
        case(Slack, "reaction_added", &[], 0),
        case(Slack, "app_rate_limited", &[], 0),
        case(Slack, "file_share_no_text", &[(FORWARDED, NO_TEXT)], 1),
        case(
            Whatsapp,
            "text",
            &[(FORWARDED, "Does it come in another color?")],
            1,
        ),
        case(
            Whatsapp,
            "batch_two_messages_two_statuses",
            &[(FORWARDED, ""), (FORWARDED, "")],
            2,
        ),
        case(Whatsapp, "image", &[(FORWARDED, "this one")], 1),
        case(Whatsapp, "system_without_from", &[], 0),
        case(Whatsapp, "reply_with_context", &[(FORWARDED, "")], 1),
        case(Whatsapp, "status_failed", &[], 0),
        case(Whatsapp, "message_echoes", &[], 0),
        case(Whatsapp, "vector_49_bytes", &[], 0),
        case(Whatsapp, "vector_403_bytes", &[(FORWARDED, "hi")], 1),
        case(
            Telegram,
            "private_text",
            &[(FORWARDED, "What is on my calendar today?")],
            1,
        ),
        case(Telegram, "group_topic_reply", &[(FORWARDED, "")], 1),
        case(Telegram, "edited_message", &[], 0),
        case(Telegram, "channel_post", &[], 0),
        case(Telegram, "my_chat_member", &[], 0),
        case(Telegram, "bot_sender", &[], 0),
        case(Telegram, "photo", &[(FORWARDED, "Receipt from lunch")], 1),
        case(Telegram, "sticker", &[(IGNORED, "[sticker]")], 0),
        case(Telegram, "new_chat_members", &[], 0),
        case(Telegram, "unknown_update_kind", &[], 0),
    ]
}

#[tokio::test]
async fn every_fixture_through_the_real_route_answers_200_and_records_exactly_what_it_should() {
    let app = spawn_app().await;
    for (i, case) in cases().into_iter().enumerate() {
        // A tenant per fixture keeps each expectation independent of the others.
        let tenant = provision_tenant(&app.pool, &format!("case-{i}")).await;
        let response = post_fixture(&app, &tenant, case.platform, case.fixture).await;
        let label = format!("{}/{}", case.platform, case.fixture);
        assert_eq!(response.status(), 200, "{label}: {:?}", response.text().await);

        let (recorded, queued) = tenant_rows(&app, &tenant).await;
        assert_eq!(recorded.len(), case.recorded.len(), "{label}: {recorded:?}");
        for ((status, text, ..), (want_status, want_text)) in recorded.iter().zip(case.recorded) {
            assert_eq!(status, want_status, "{label}");
            if want_text.is_empty() {
                assert!(!text.trim().is_empty(), "{label}: forwarded text is not empty");
            } else if *want_text == NO_TEXT {
                assert_eq!(text, "", "{label}");
            } else {
                assert_eq!(text, want_text, "{label}");
            }
        }
        assert_eq!(queued, case.queued, "{label}: queue rows");
    }
}

#[tokio::test]
async fn linked_senders_get_their_user_id_and_thread_references_are_stored() {
    let app = spawn_app().await;
    let tenant = provision_tenant(&app.pool, "acme").await;
    for (platform, fixture) in [
        (Platform::Slack, "thread_reply"),
        (Platform::Telegram, "group_topic_reply"),
        (Platform::Whatsapp, "reply_with_context"),
    ] {
        assert_eq!(post_fixture(&app, &tenant, platform, fixture).await.status(), 200);
    }
    let recorded = rows(&app).await;
    let (_, _, user, thread, reply_to) = &recorded[0];
    assert_eq!(user.as_deref(), Some("alice"));
    assert_eq!(thread.as_deref(), Some("1718000100.000200"));
    assert_eq!(reply_to.as_deref(), Some("1718000100.000200"));
    let (_, _, user, thread, reply_to) = &recorded[1];
    assert_eq!(
        user.as_deref(),
        Some("alice"),
        "Slack and Telegram senders are one user"
    );
    assert_eq!((thread.as_deref(), reply_to.as_deref()), (Some("42"), Some("57")));
    let (_, _, user, thread, reply_to) = &recorded[2];
    assert_eq!(user.as_deref(), Some("bob"));
    assert_eq!(thread.as_deref(), None);
    assert!(
        reply_to.as_deref().is_some_and(|id| id.starts_with("wamid.")),
        "{reply_to:?}"
    );
}

#[tokio::test]
async fn a_duplicate_storm_of_50_concurrent_deliveries_records_one_message_and_one_job() {
    let app = spawn_app().await;
    let tenant = provision_tenant(&app.pool, "acme").await;
    let storm = (0..50).map(|_| post_fixture(&app, &tenant, Platform::Telegram, "private_text"));
    for response in join_all(storm).await {
        assert_eq!(response.status(), 200);
    }
    assert_eq!(
        counts(&app).await,
        Counts {
            messages: 1,
            queued: 1
        }
    );
}

#[tokio::test]
async fn slack_message_and_app_mention_of_one_message_collapse_into_one_turn() {
    let app = spawn_app().await;
    let tenant = provision_tenant(&app.pool, "acme").await;
    let pair = [
        post_fixture(&app, &tenant, Platform::Slack, "mention_message"),
        post_fixture(&app, &tenant, Platform::Slack, "mention_app_mention"),
    ];
    let answers = join_all(pair).await;
    assert!(answers.iter().all(|r| r.status() == 200));
    assert_eq!(
        counts(&app).await,
        Counts {
            messages: 1,
            queued: 1
        }
    );
}

#[tokio::test]
async fn a_slack_retry_is_recorded_when_the_first_delivery_never_arrived_and_deduped_when_it_did() {
    let app = spawn_app().await;
    let tenant = provision_tenant(&app.pool, "acme").await;
    let body = fixture(Platform::Slack, "dm_text");
    let mut headers = signed_headers(Platform::Slack, &body);
    headers.push(("x-slack-retry-num", "1".into()));
    headers.push(("x-slack-retry-reason", "http_timeout".into()));
    let first = post(&app, &tenant.hook_path(Platform::Slack), &headers, body.clone()).await;
    assert_eq!(first.status(), 200);
    let again = post(&app, &tenant.hook_path(Platform::Slack), &headers, body).await;
    assert_eq!(again.status(), 200);
    let answer: Value = again.json().await.unwrap();
    assert_eq!(answer["duplicates"], 1);
    assert_eq!(
        counts(&app).await,
        Counts {
            messages: 1,
            queued: 1
        }
    );
}

#[tokio::test]
async fn slack_url_verification_is_answered_only_after_the_signature_checks_out() {
    let app = spawn_app().await;
    let tenant = provision_tenant(&app.pool, "acme").await;
    let body = fixture(Platform::Slack, "url_verification");
    let path = tenant.hook_path(Platform::Slack);

    let unsigned = post(
        &app,
        &path,
        &[("content-type", "application/json".into())],
        body.clone(),
    )
    .await;
    assert_eq!(unsigned.status(), 401);

    let signed = post(&app, &path, &signed_headers(Platform::Slack, &body), body).await;
    assert_eq!(signed.status(), 200);
    let answer: Value = signed.json().await.unwrap();
    assert_eq!(
        answer["challenge"],
        "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"
    );
    assert_eq!(
        counts(&app).await,
        Counts {
            messages: 0,
            queued: 0
        }
    );
}

#[tokio::test]
async fn bad_missing_and_stale_signatures_are_401_and_record_nothing() {
    let app = spawn_app().await;
    let tenant = provision_tenant(&app.pool, "acme").await;
    let body = fixture(Platform::Slack, "dm_text");
    let slack = tenant.hook_path(Platform::Slack);

    // A minute beyond the 5 minutes' tolerance (its exact edges are the unit tests'): a
    // second passing between signing and checking must not bring `future` back inside it.
    let stale = slack_headers(SLACK_SECRET, now() - 360, &body);
    let future = slack_headers(SLACK_SECRET, now() + 360, &body);
    let wrong_secret = slack_headers("not-the-secret", now(), &body);
    for headers in [stale, future, wrong_secret, vec![]] {
        let response = post(&app, &slack, &headers, body.clone()).await;
        assert_eq!(response.status(), 401);
        let error: Value = response.json().await.unwrap();
        assert_eq!(error["error"], "unauthorized");
        assert!(!error.to_string().contains(SLACK_SECRET));
    }

    let wa_body = fixture(Platform::Whatsapp, "text");
    let mut tampered = wa_body.clone();
    tampered.extend_from_slice(b" ");
    let wa_headers = signed_headers(Platform::Whatsapp, &wa_body);
    let response = post(&app, &tenant.hook_path(Platform::Whatsapp), &wa_headers, tampered).await;
    assert_eq!(response.status(), 401);

    let tg_body = fixture(Platform::Telegram, "private_text");
    let wrong_token = vec![("x-telegram-bot-api-secret-token", "guess".to_owned())];
    let response = post(
        &app,
        &tenant.hook_path(Platform::Telegram),
        &wrong_token,
        tg_body.clone(),
    )
    .await;
    assert_eq!(response.status(), 401);
    let response = post(&app, &tenant.hook_path(Platform::Telegram), &[], tg_body).await;
    assert_eq!(response.status(), 401);

    assert_eq!(
        counts(&app).await,
        Counts {
            messages: 0,
            queued: 0
        }
    );
}

#[tokio::test]
async fn malformed_json_after_a_valid_signature_is_400() {
    let app = spawn_app().await;
    let tenant = provision_tenant(&app.pool, "acme").await;
    for platform in Platform::ALL {
        let body = b"{\"not json".to_vec();
        let response = post(
            &app,
            &tenant.hook_path(platform),
            &signed_headers(platform, &body),
            body,
        )
        .await;
        assert_eq!(response.status(), 400, "{platform}");
        let error: Value = response.json().await.unwrap();
        assert_eq!(error["error"], "bad_request");
    }
}

#[tokio::test]
async fn unknown_tenant_unknown_connector_and_disabled_connector_are_404() {
    let app = spawn_app().await;
    let tenant = provision_tenant(&app.pool, "acme").await;
    let other = provision_tenant(&app.pool, "other").await;
    let body = fixture(Platform::Telegram, "private_text");
    let headers = signed_headers(Platform::Telegram, &body);
    let paths = [
        format!("/v1/hooks/{}/{}", uuid::Uuid::new_v4(), tenant.telegram),
        format!("/v1/hooks/{}/{}", tenant.tenant, uuid::Uuid::new_v4()),
        format!("/v1/hooks/{}/{}", other.tenant, tenant.telegram),
        format!("/v1/hooks/not-a-uuid/{}", tenant.telegram),
    ];
    for path in paths {
        let response = post(&app, &path, &headers, body.clone()).await;
        assert_eq!(response.status(), 404, "{path}");
    }

    let mut owner = app.db.owner_conn().await;
    sqlx::query("update channel_connectors set enabled = false where id = $1")
        .bind(tenant.telegram)
        .execute(&mut owner)
        .await
        .unwrap();
    let response = post(&app, &tenant.hook_path(Platform::Telegram), &headers, body).await;
    assert_eq!(response.status(), 404);
    assert_eq!(
        counts(&app).await,
        Counts {
            messages: 0,
            queued: 0
        }
    );
}

#[tokio::test]
async fn whatsapp_handshake_answers_the_challenge_only_for_the_right_verify_token() {
    let app = spawn_app().await;
    let tenant = provision_tenant(&app.pool, "acme").await;
    let path = tenant.hook_path(Platform::Whatsapp);
    let get = |query: String| app.client.get(app.url(&format!("{path}?{query}"))).send();

    let good = get(format!(
        "hub.mode=subscribe&hub.challenge=1158201444&hub.verify_token={WHATSAPP_VERIFY_TOKEN}"
    ))
    .await
    .unwrap();
    assert_eq!(good.status(), 200);
    assert_eq!(good.text().await.unwrap(), "1158201444");

    let bad = get("hub.mode=subscribe&hub.challenge=1158201444&hub.verify_token=wrong".into())
        .await
        .unwrap();
    assert_eq!(bad.status(), 403);
    let missing = get("hub.mode=subscribe&hub.challenge=1158201444".into())
        .await
        .unwrap();
    assert_eq!(missing.status(), 403);

    // A connector with no verify token refuses every handshake, even an empty token.
    let mut owner = app.db.owner_conn().await;
    sqlx::query("update channel_connectors set verify_token = null where id = $1")
        .bind(tenant.whatsapp)
        .execute(&mut owner)
        .await
        .unwrap();
    let empty = get("hub.mode=subscribe&hub.challenge=1&hub.verify_token=".into())
        .await
        .unwrap();
    assert_eq!(empty.status(), 403);
}

#[tokio::test]
async fn bodies_over_the_platform_limit_are_413_and_whatsapp_has_a_larger_limit() {
    let app = spawn_app_with(|settings, _| {
        settings.body_limit = 4096;
        settings.whatsapp_body_limit = 64 * 1024;
    })
    .await;
    let tenant = provision_tenant(&app.pool, "acme").await;

    let mut big: Value = serde_json::from_slice(&fixture(Platform::Telegram, "private_text")).unwrap();
    big["message"]["text"] = Value::String("x".repeat(5000));
    let body = serde_json::to_vec(&big).unwrap();
    let response = post(
        &app,
        &tenant.hook_path(Platform::Telegram),
        &signed_headers(Platform::Telegram, &body),
        body,
    )
    .await;
    assert_eq!(response.status(), 413);
    let error: Value = response.json().await.unwrap();
    assert_eq!(error["error"], "payload_too_large");

    let mut wa: Value = serde_json::from_slice(&fixture(Platform::Whatsapp, "text")).unwrap();
    wa["entry"][0]["changes"][0]["value"]["messages"][0]["text"]["body"] = Value::String("y".repeat(5000));
    let body = serde_json::to_vec(&wa).unwrap();
    let response = post(
        &app,
        &tenant.hook_path(Platform::Whatsapp),
        &signed_headers(Platform::Whatsapp, &body),
        body,
    )
    .await;
    assert_eq!(response.status(), 200);
    assert_eq!(
        counts(&app).await,
        Counts {
            messages: 1,
            queued: 1
        }
    );
}

#[tokio::test]
async fn unlinked_senders_are_denied_by_default_and_queued_under_their_own_key_when_allowed() {
    let app = spawn_app().await;
    let tenant = provision_tenant(&app.pool, "acme").await;
    let mut owner = app.db.owner_conn().await;
    sqlx::query("delete from channel_links")
        .execute(&mut owner)
        .await
        .unwrap();

    assert_eq!(
        post_fixture(&app, &tenant, Platform::Telegram, "private_text")
            .await
            .status(),
        200
    );
    let (status, decision): (String, Option<String>) =
        sqlx::query_as("select status, decision from channel_messages")
            .fetch_one(&mut owner)
            .await
            .unwrap();
    assert_eq!(
        (status.as_str(), decision.as_deref()),
        ("denied_unlinked", Some("deny_unlinked"))
    );
    assert_eq!(
        counts(&app).await,
        Counts {
            messages: 1,
            queued: 0
        }
    );

    sqlx::query("update channel_connectors set unlinked_policy = 'allow' where id = $1")
        .bind(tenant.whatsapp)
        .execute(&mut owner)
        .await
        .unwrap();
    assert_eq!(
        post_fixture(&app, &tenant, Platform::Whatsapp, "text")
            .await
            .status(),
        200
    );
    let key: String = sqlx::query_scalar("select conversation_key from dispatch_queue")
        .fetch_one(&mut owner)
        .await
        .unwrap();
    assert_eq!(key, format!("sender:{}:{}", tenant.whatsapp, WHATSAPP_USER));
}

#[tokio::test]
async fn with_the_database_unreachable_the_answer_is_503_and_the_retry_records_once() {
    let proxy = DbProxy::start(upstream_addr()).await;
    let app = spawn_app_with(|settings, db| {
        db.route_via(&mut settings.database, proxy.addr);
        settings.database.acquire_timeout_ms = 500;
    })
    .await;
    let tenant = provision_tenant(&app.pool, "acme").await;

    proxy.cut();
    let response = post_fixture(&app, &tenant, Platform::Telegram, "private_text").await;
    assert_eq!(response.status(), 503);
    let error: Value = response.json().await.unwrap();
    assert_eq!(error["error"], "unavailable");

    proxy.restore();
    assert_eq!(
        counts(&app).await,
        Counts {
            messages: 0,
            queued: 0
        }
    );
    // The platform retries until it gets a 2xx: a connection the cut left half-open may
    // cost the first retry a 503 of its own, never a second row.
    eventually("a retry is accepted once the database is back", || async {
        post_fixture(&app, &tenant, Platform::Telegram, "private_text")
            .await
            .status()
            == 200
    })
    .await;
    assert_eq!(
        counts(&app).await,
        Counts {
            messages: 1,
            queued: 1
        }
    );
}

#[tokio::test]
async fn a_failure_between_the_message_row_and_its_queue_row_is_503_and_writes_neither() {
    let app = spawn_app().await;
    let tenant = provision_tenant(&app.pool, "acme").await;
    // Fault injection as the owner: the queue insert fails after the message row was
    // written in the same transaction, with a connection-class error as an outage would.
    let mut owner = app.db.owner_conn().await;
    sqlx::raw_sql(
        "create function fail_enqueue() returns trigger language plpgsql as
           $$ begin raise exception 'injected outage' using errcode = '08006'; end $$;
         create trigger fail_enqueue before insert on dispatch_queue
           for each row execute function fail_enqueue();",
    )
    .execute(&mut owner)
    .await
    .unwrap();

    let response = post_fixture(
        &app,
        &tenant,
        Platform::Whatsapp,
        "batch_two_messages_two_statuses",
    )
    .await;
    assert_eq!(response.status(), 503);
    assert_eq!(
        counts(&app).await,
        Counts {
            messages: 0,
            queued: 0
        }
    );

    sqlx::raw_sql("drop trigger fail_enqueue on dispatch_queue")
        .execute(&mut owner)
        .await
        .unwrap();
    let response = post_fixture(
        &app,
        &tenant,
        Platform::Whatsapp,
        "batch_two_messages_two_statuses",
    )
    .await;
    assert_eq!(response.status(), 200);
    assert_eq!(
        counts(&app).await,
        Counts {
            messages: 2,
            queued: 2
        }
    );
}

#[tokio::test]
async fn a_nul_in_the_text_of_any_platform_is_stored_as_a_replacement_character_and_answered() {
    use channel_bridge::dispatch::StepOutcome;

    use crate::support::fake_agent::FakeAgent;
    use crate::support::fake_platforms::FakePlatforms;

    let app = spawn_app().await;
    let platforms = FakePlatforms::start().await;
    let tenant = provision_tenant_at(&app.pool, "acme", Some(&platforms.base_url)).await;
    let agent = FakeAgent::start(&tenant.dispatch_secret).await;
    let mut wa: Value = serde_json::from_slice(&fixture(Platform::Whatsapp, "text")).unwrap();
    wa["entry"][0]["changes"][0]["value"]["messages"][0]["text"]["body"] = "wa\u{0}text".into();
    let bodies = [
        (Platform::Telegram, telegram_text(7001, "tg\u{0}text")),
        (Platform::Slack, slack_text("1700000001.000100", "slack\u{0}text")),
        (Platform::Whatsapp, serde_json::to_vec(&wa).unwrap()),
    ];
    for (platform, body) in bodies {
        assert!(
            String::from_utf8_lossy(&body).contains("\\u0000"),
            "the body carries a NUL"
        );
        // A signed body with a NUL is recorded (200), not failed for ever (500).
        deliver(&app, &tenant, platform, body).await;
    }

    let worker = worker(&app, &agent.url, |_| {});
    for _ in 0..3 {
        let outcome = worker.step().await.unwrap();
        assert!(matches!(outcome, StepOutcome::Executed(_)), "{outcome:?}");
    }
    let mut contents: Vec<String> = agent.calls().iter().map(|c| c.payload.content.clone()).collect();
    contents.sort();
    assert_eq!(
        contents,
        ["slack\u{FFFD}text", "tg\u{FFFD}text", "wa\u{FFFD}text"]
    );
    assert_eq!(platforms.sent().len(), 3, "each turn answered");
}
