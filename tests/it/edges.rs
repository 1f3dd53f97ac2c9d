//! Reliability at the edges: a database the network holds (no error, no answer), a
//! database without the schema, identifiers too long for an index, and values the database
//! cannot store.

use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use channel_bridge::dispatch::dispatcher::Dispatcher;
use channel_bridge::dispatch::wakeup::Wakeup;
use channel_bridge::dispatch::Worker;
use channel_bridge::domain::Platform;
use channel_bridge::settings::ServeSettings;
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::support::db_proxy::{upstream_addr, DbProxy};
use crate::support::fake_agent::FakeAgent;
use crate::support::fake_platforms::FakePlatforms;
use crate::support::platforms::*;
use crate::support::serve::secrets_key;
use crate::support::{eventually, spawn_app, spawn_app_on, spawn_app_with, url_with, TestApp, TestDb};

/// `len` characters that do not compress (PostgreSQL compresses long values before it
/// indexes them, so a repeated character would fit).
fn incompressible(len: usize) -> String {
    let mut text = String::new();
    while text.len() < len {
        text.push_str(&uuid::Uuid::new_v4().simple().to_string());
    }
    text.truncate(len);
    text
}

async fn count(app: &TestApp, sql: &str) -> i64 {
    let mut owner = app.db.owner_conn().await;
    sqlx::query_scalar(sql).fetch_one(&mut owner).await.unwrap()
}

/// Posts a signed webhook and returns its status and how long the answer took.
async fn timed_post(app: &TestApp, tenant: &Provisioned, body: Vec<u8>) -> (u16, Duration) {
    let started = Instant::now();
    let response = post(
        app,
        &tenant.hook_path(Platform::Telegram),
        &signed_headers(Platform::Telegram, &body),
        body,
    )
    .await;
    (response.status().as_u16(), started.elapsed())
}

#[tokio::test]
async fn a_partition_answers_503_within_the_deadline_and_after_it_every_webhook_is_answered_once() {
    let proxy = DbProxy::start(upstream_addr()).await;
    let webhook_deadline = Duration::from_millis(1500);
    // The web-only instance reaches PostgreSQL through the proxy; the worker directly.
    let web = spawn_app_with(|settings, db| {
        db.route_via(&mut settings.database, proxy.addr);
        settings.database.acquire_timeout_ms = 500;
        settings.database.deadline_ms = 1000;
        settings.webhook_deadline_ms = webhook_deadline.as_millis() as u64;
    })
    .await;
    let platforms = FakePlatforms::start().await;
    let tenant = provision_tenant_at(&web.pool, "acme", Some(&platforms.base_url)).await;
    let agent = FakeAgent::start(&tenant.dispatch_secret).await;
    let _worker = spawn_app_on(&web.db, |settings| {
        settings.worker = true;
        settings.http = true;
        settings.agent_url = Some(agent.url.clone());
        settings.dispatch.poll_interval_ms = 50;
    })
    .await;

    let body = |n: i64| telegram_text(9000 + n, &format!("turn {n}"));
    for n in 0..3 {
        assert_eq!(timed_post(&web, &tenant, body(n)).await.0, 200);
    }

    proxy.hold();
    // Two rounds, more webhooks than ingress writers: a writer stuck on the held network
    // must not hold up the next round.
    let mut answered = Vec::new();
    for round in 0..2 {
        let posts = (0..6).map(|k| timed_post(&web, &tenant, body(3 + round * 6 + k)));
        answered.extend(futures::future::join_all(posts).await);
    }
    for (status, took) in &answered {
        assert_eq!(*status, 503, "a webhook during the partition");
        assert!(
            *took < webhook_deadline + Duration::from_millis(1500),
            "answered after {took:?}"
        );
    }
    let started = Instant::now();
    let ready = web.client.get(web.url("/readyz")).send().await.unwrap();
    let readyz_took = started.elapsed();
    assert_eq!(ready.status(), 503);
    assert!(
        readyz_took < Duration::from_millis(2500),
        "/readyz took {readyz_took:?}"
    );
    let slowest = answered.iter().map(|(_, took)| *took).max().unwrap_or_default();
    eprintln!("partition: slowest 503 after {slowest:?}, /readyz 503 after {readyz_took:?}");

    proxy.release();
    // The platform retries each 503'd webhook until it gets its 200.
    for n in 3..15 {
        eventually("a retried webhook is accepted after the partition", || async {
            timed_post(&web, &tenant, body(n)).await.0 == 200
        })
        .await;
    }
    let ready = web.client.get(web.url("/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 200);

    platforms.wait_for_sends(15).await;
    eventually("every turn executed", || async {
        count(
            &web,
            "select count(*) from channel_messages where status = 'executed'",
        )
        .await
            == 15
    })
    .await;
    assert_eq!(count(&web, "select count(*) from channel_messages").await, 15);
    let mut texts: Vec<String> = agent
        .calls()
        .iter()
        .map(|call| call.payload.messages.last().unwrap().content.clone())
        .collect();
    texts.sort();
    texts.dedup();
    assert_eq!(texts.len(), 15, "each turn reached the agent");
    assert_eq!(agent.calls().len(), 15, "no turn reached the agent twice");
    assert_eq!(platforms.sent().len(), 15, "one reply per turn");
}

#[tokio::test]
async fn an_unmigrated_database_is_not_ready_and_serve_refuses_it_saying_to_migrate() {
    let db = Arc::new(TestDb::empty().await);
    let app = spawn_app_on(&db, |_| {}).await;
    let ready = app.client.get(app.url("/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 503);
    let body: Value = ready.json().await.unwrap();
    assert!(
        body["status"]
            .as_str()
            .unwrap()
            .contains("channel-bridge migrate"),
        "{body}"
    );

    let serve = std::process::Command::new(env!("CARGO_BIN_EXE_channel-bridge"))
        .args(["serve", "--bind", "127.0.0.1:0"])
        .env("DATABASE_URL", db.url())
        .env("CB_SECRETS_KEY", secrets_key("k1"))
        .env("CB_LOG_FORMAT", "json")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!serve.status.success());
    let stderr = String::from_utf8_lossy(&serve.stderr);
    let last = stderr.lines().last().unwrap_or_default();
    assert!(last.starts_with("error: "), "{stderr}");
    assert!(last.contains("run `channel-bridge migrate`"), "{stderr}");
    assert!(!stderr.contains("backtrace"), "{stderr}");

    let cli = std::process::Command::new(env!("CARGO_BIN_EXE_channel-bridge"))
        .args(["tenant", "create", "--slug", "acme"])
        .env("DATABASE_URL", db.url())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!cli.status.success());
    let stderr = String::from_utf8_lossy(&cli.stderr);
    assert!(stderr.contains("run `channel-bridge migrate`"), "{stderr}");
    assert_eq!(stderr.matches("does not exist").count(), 1, "{stderr}");
}

#[tokio::test]
async fn serve_on_a_database_that_does_not_answer_exits_naming_it_without_the_password() {
    let proxy = DbProxy::start(upstream_addr()).await;
    proxy.cut();
    let url = url_with("nowhere", Some(proxy.addr)).replace("postgres@", "postgres:hunter2secret@");
    let serve = std::process::Command::new(env!("CARGO_BIN_EXE_channel-bridge"))
        .args(["serve", "--bind", "127.0.0.1:0"])
        .env("DATABASE_URL", &url)
        .env("CB_SECRETS_KEY", secrets_key("k1"))
        .env("CB_DB_ACQUIRE_TIMEOUT_MS", "300")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!serve.status.success());
    let stderr = String::from_utf8_lossy(&serve.stderr);
    assert!(stderr.contains("cannot reach PostgreSQL at"), "{stderr}");
    assert!(stderr.contains(&format!("{}/nowhere", proxy.addr)), "{stderr}");
    assert!(!stderr.contains("hunter2secret"), "{stderr}");
}

#[tokio::test]
async fn migrate_refused_by_the_server_names_the_masked_url_and_the_reason_once() {
    let mut url = reqwest::Url::parse(&crate::support::admin_url()).unwrap();
    url.set_username("no_such_role_cb").unwrap();
    url.set_password(Some("hunter2secret")).unwrap();
    let url = url.to_string();
    let cli = std::process::Command::new(env!("CARGO_BIN_EXE_channel-bridge"))
        .arg("migrate")
        .env("DATABASE_URL", &url)
        .output()
        .unwrap();
    assert!(!cli.status.success());
    let stderr = String::from_utf8_lossy(&cli.stderr);
    assert!(
        stderr.contains("DATABASE_URL=postgres://no_such_role_cb:****@"),
        "{stderr}"
    );
    assert!(!stderr.contains("hunter2secret"), "{stderr}");
    assert_eq!(
        stderr.matches("no_such_role_cb\" does not exist").count(),
        1,
        "{stderr}"
    );
}

#[tokio::test]
async fn serve_with_migrate_brings_an_empty_database_to_the_binary_schema_and_serves() {
    let db = TestDb::empty().await;
    let mut serve = std::process::Command::new(env!("CARGO_BIN_EXE_channel-bridge"))
        .args(["serve", "--migrate", "--bind", "127.0.0.1:0"])
        .env("DATABASE_URL", db.url())
        .env("CB_SECRETS_KEY", secrets_key("k1"))
        .env("CB_WORKER", "false")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pool = db.app_pool();
    eventually("the schema reaches the binary's version", || async {
        matches!(
            channel_bridge::db::schema(&pool).await,
            Ok(schema) if schema.is_current()
        )
    })
    .await;
    let running = serve.try_wait().unwrap().is_none();
    serve.kill().unwrap();
    serve.wait().unwrap();
    assert!(running, "serve keeps running");
}

#[tokio::test]
async fn an_identifier_too_long_for_an_index_is_recorded_by_its_digest_and_deduplicated() {
    let app = spawn_app_with(|_, _| {}).await;
    let tenant = provision_tenant(&app.pool, "acme").await;
    let mut update: Value = serde_json::from_slice(&fixture(Platform::Whatsapp, "text")).unwrap();
    let long_id = format!("wamid.{}", incompressible(8000));
    let long_sender = incompressible(8000);
    update["entry"][0]["changes"][0]["value"]["messages"][0]["id"] = long_id.clone().into();
    update["entry"][0]["changes"][0]["value"]["messages"][0]["from"] = long_sender.clone().into();
    update["entry"][0]["changes"][0]["value"]["contacts"][0]["wa_id"] = long_sender.into();
    let body = serde_json::to_vec(&update).unwrap();
    let path = tenant.hook_path(Platform::Whatsapp);
    let first = post(
        &app,
        &path,
        &signed_headers(Platform::Whatsapp, &body),
        body.clone(),
    )
    .await;
    assert_eq!(first.status(), 200, "{:?}", first.text().await);
    let retry = post(&app, &path, &signed_headers(Platform::Whatsapp, &body), body).await;
    assert_eq!(retry.status(), 200);
    let retry: Value = retry.json().await.unwrap();
    assert_eq!(retry["duplicates"], 1, "{retry}");

    let mut owner = app.db.owner_conn().await;
    let (stored_id, key, conversation): (String, String, String) =
        sqlx::query_as("select platform_message_id, idempotency_key, conversation_key from channel_messages")
            .fetch_one(&mut owner)
            .await
            .unwrap();
    assert_eq!(stored_id, long_id, "the id itself is kept whole");
    assert!(key.len() < 300 && key.starts_with("sha256:"), "{key}");
    // The unlinked sender's conversation (an indexed key) names them by digest too.
    assert!(
        conversation.len() < 300 && conversation.contains("sha256:"),
        "{conversation}"
    );
}

#[tokio::test]
async fn the_admin_api_answers_400_for_values_the_database_cannot_store() {
    let app = spawn_app_with(|_, _| {}).await;
    let tenant = provision_tenant(&app.pool, "acme").await;
    let key = channel_bridge::admin::operator::issue(&app.pool, tenant.tenant, "ci")
        .await
        .unwrap()
        .key;
    for link in [
        json!({"platform": "telegram", "platform_user_id": incompressible(8000), "user_id": "alice"}),
        json!({"platform": "telegram", "platform_user_id": "42", "user_id": "al\u{0}ice"}),
    ] {
        let response = app
            .client
            .post(app.url("/v1/admin/links"))
            .bearer_auth(&key)
            .json(&link)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 400, "{:?}", response.text().await);
    }
}

#[tokio::test]
async fn a_dispatcher_backs_off_while_the_database_is_out_of_reach() {
    let proxy = DbProxy::start(upstream_addr()).await;
    let db = Arc::new(TestDb::migrated().await);
    let mut settings = ServeSettings::for_database(url_with(&db.name, Some(proxy.addr)));
    settings.database.acquire_timeout_ms = 200;
    let settings = Arc::new(settings);
    let pool = channel_bridge::db::connect_pool(&settings.database).unwrap();
    let worker = Arc::new(Worker::new(pool, settings, || chrono::Utc::now().timestamp()).unwrap());
    let dispatcher = Dispatcher::new(worker);
    let wakeup = Arc::new(Wakeup::default());
    let (stop, stopped) = tokio::sync::watch::channel(false);
    proxy.cut();
    let running = tokio::spawn(dispatcher.clone().run(wakeup.clone(), stopped));

    // Wake-ups keep coming (webhooks recorded elsewhere) for two seconds: without a pause
    // after each failure every one of them would be a claim.
    let until = Instant::now() + Duration::from_secs(2);
    let mut wakeups = 0;
    while Instant::now() < until {
        wakeup.wake();
        wakeups += 1;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let claims = dispatcher.claims_issued();
    assert!(wakeups > 100);
    assert!(claims <= 6, "{claims} claims in two seconds of outage");

    proxy.restore();
    let _ = stop.send(true);
    running.await.unwrap();
}

#[tokio::test]
async fn a_burst_of_bad_admin_keys_is_answered_429_without_database_work() {
    let proxy = DbProxy::start(upstream_addr()).await;
    let app = spawn_app_with(|settings, db| db.route_via(&mut settings.database, proxy.addr)).await;
    let tenant = provision_tenant(&app.pool, "acme").await;
    let key = channel_bridge::admin::operator::issue(&app.pool, tenant.tenant, "ci")
        .await
        .unwrap()
        .key;
    let links = |token: String| {
        let request = app.client.get(app.url("/v1/admin/links")).bearer_auth(token);
        async move { request.send().await.unwrap() }
    };
    assert_eq!(links(key.clone()).await.status(), 200);

    let before = proxy.statements();
    let bad = (0..100).map(|n| links(format!("cbk_bad{n:05}_{}", uuid::Uuid::new_v4().simple())));
    let answers = futures::future::join_all(bad).await;
    let statements = proxy.statements() - before;
    let refused = answers.iter().filter(|r| r.status() == 401).count();
    let throttled: Vec<_> = answers.iter().filter(|r| r.status() == 429).collect();
    assert_eq!(refused + throttled.len(), 100);
    assert!(throttled.len() >= 70, "{} of 100 throttled", throttled.len());
    assert!(throttled.iter().all(|r| r.headers().contains_key("retry-after")));
    // One statement per lookup, and a `SET ROLE` per connection the pool opened for them
    // (16 at most): far from one per request.
    assert!(
        statements <= refused as u64 + 16,
        "{statements} statements for {refused} lookups"
    );
    let body: Value = answers
        .into_iter()
        .find(|r| r.status() == 429)
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(body["error"], "too_many_requests");

    // A key that works is not held back by the flood from its address.
    assert_eq!(links(key).await.status(), 200);
}

#[tokio::test]
async fn a_flood_of_wrong_keys_with_a_real_keys_prefix_never_locks_that_key_out() {
    let app = spawn_app().await;
    let tenant = provision_tenant(&app.pool, "acme").await;
    let key = channel_bridge::admin::operator::issue(&app.pool, tenant.tenant, "ci")
        .await
        .unwrap()
        .key;
    let prefix = channel_bridge::http::throttle::key_prefix(&key)
        .unwrap()
        .to_owned();
    // A fresh instance on the same database, which has never seen the key work.
    let fresh = spawn_app_on(&app.db, |_| {}).await;
    let from = |last: u8| {
        reqwest::Client::builder()
            .local_address(std::net::IpAddr::from([127, 0, 0, last]))
            .build()
            .unwrap()
    };
    let (attacker, owner) = (from(1), from(2));
    let links = |client: &reqwest::Client, token: String| {
        let request = client.get(fresh.url("/v1/admin/links")).bearer_auth(token);
        async move { request.send().await.unwrap().status() }
    };
    let made_up = || format!("cbk_{prefix}_{}", uuid::Uuid::new_v4().simple());

    let mut flood = Vec::new();
    for _ in 0..30 {
        flood.push(links(&attacker, made_up()).await);
    }
    assert!(flood.iter().all(|s| *s == 401 || *s == 429), "{flood:?}");
    assert!(
        flood.contains(&StatusCode::TOO_MANY_REQUESTS),
        "the flooding source is throttled"
    );

    assert_eq!(
        links(&owner, key.clone()).await,
        200,
        "the real key, from another source"
    );
    assert_eq!(
        links(&attacker, key).await,
        200,
        "a known key is decided by itself"
    );
    assert_eq!(
        links(&attacker, made_up()).await,
        429,
        "the flood stays throttled"
    );
}

#[tokio::test]
async fn the_cli_takes_a_connector_secret_from_standard_input_and_the_webhook_verifies_with_it() {
    use std::io::Write;
    let app = spawn_app_with(|_, _| {}).await;
    let tenant = provision_tenant(&app.pool, "acme").await;
    let mut add = std::process::Command::new(env!("CARGO_BIN_EXE_channel-bridge"))
        .args([
            "connector",
            "add",
            "--platform",
            "telegram",
            "--bot-user-id",
            "8000000001",
        ])
        .args(["--tenant", &tenant.tenant.to_string()])
        .args(["--verification-secret", "@-"])
        .env("DATABASE_URL", app.db.url())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // As `echo` would give it: the line ending is not part of the secret.
    add.stdin
        .take()
        .unwrap()
        .write_all(b"from-stdin-0123456789\n")
        .unwrap();
    let added = add.wait_with_output().unwrap();
    assert!(
        added.status.success(),
        "{}",
        String::from_utf8_lossy(&added.stderr)
    );
    let added: Value = serde_json::from_slice(&added.stdout).unwrap();
    let path = added["webhook_path"].as_str().unwrap().to_owned();

    let webhook = |secret: &'static str| {
        app.client
            .post(app.url(&path))
            .header("X-Telegram-Bot-Api-Secret-Token", secret)
            .header("content-type", "application/json")
            .body(telegram_text(77_001, "hello"))
            .send()
    };
    assert_eq!(webhook("from-stdin-0123456789").await.unwrap().status(), 200);
    assert_eq!(webhook("from-stdin-012345678").await.unwrap().status(), 401);
}

#[tokio::test]
async fn empty_setting_variables_count_as_unset_so_a_compose_default_env_starts() {
    // docker-compose.yml passes `${CB_AGENT_URL:-}` and friends: empty means "not set".
    // It requires CB_SECRETS_KEY.
    let db = TestDb::empty().await;
    let mut serve = std::process::Command::new(env!("CARGO_BIN_EXE_channel-bridge"))
        .args(["serve", "--migrate", "--bind", "127.0.0.1:0"])
        .env("DATABASE_URL", db.url())
        .env("CB_SECRETS_KEY", secrets_key("k1"))
        .env("CB_WORKER", "false")
        .envs(
            [
                "CB_AGENT_URL",
                "CB_OPERATOR_TOKEN",
                "CB_EGRESS_ALLOW",
                "CB_PUBLIC_URL",
                "CB_SECRETS_PLAINTEXT",
                "CB_METRICS_BIND",
                "OTEL_EXPORTER_OTLP_ENDPOINT",
            ]
            .map(|key| (key, "")),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pool = db.app_pool();
    let started = eventually_or_exit(&mut serve, || async {
        matches!(
            channel_bridge::db::schema(&pool).await,
            Ok(schema) if schema.is_current()
        )
    })
    .await;
    serve.kill().unwrap();
    let output = serve.wait_with_output().unwrap();
    assert!(
        started,
        "serve refused the empty variables: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Polls `condition` until it holds (true) or the child exits first (false); bounded.
async fn eventually_or_exit<F, Fut>(child: &mut std::process::Child, condition: F) -> bool
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while std::time::Instant::now() < deadline {
        if child.try_wait().unwrap().is_some() {
            return false;
        }
        if condition().await {
            return true;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("serve neither started nor exited within 30 s");
}
