//! The operator API's tenant routes (by id or slug) and `channel-bridge admin`, the HTTP admin
//! CLI, run as the real binary against a running gateway. Secrets reach the binary through
//! its environment (or standard input), never its arguments.

use std::io::Write;
use std::process::{Output, Stdio};

use channel_bridge::domain::Platform;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::support::api::{call, operator_app as app, OPERATOR};
use crate::support::platforms::*;
use crate::support::TestApp;

/// A provisioned tenant (three connectors, linked users) and an admin key.
async fn tenant_with_key(app: &TestApp, slug: &str) -> (Provisioned, String) {
    let p = provision_tenant(&app.pool, slug).await;
    let issued = channel_bridge::admin::operator::issue(&app.pool, p.tenant, "ci")
        .await
        .unwrap();
    (p, issued.key)
}

async fn tenant_row(app: &TestApp, slug: &str) -> (String, Option<i32>, String) {
    let mut owner = app.db.owner_conn().await;
    sqlx::query_as("select name, max_in_flight, history_scope from tenants where slug = $1")
        .bind(slug)
        .fetch_one(&mut owner)
        .await
        .unwrap()
}

// ---------------------------------------------------------------- the operator API

#[tokio::test]
async fn operator_lists_tenants_by_slug_a_page_at_a_time_with_their_settings_and_key_counts() {
    let app = app().await;
    for slug in ["initech", "acme", "globex"] {
        provision_tenant(&app.pool, slug).await;
    }
    let (acme, _) = tenant_with_key(&app, "hooli").await;
    channel_bridge::admin::operator::issue(&app.pool, acme.tenant, "second")
        .await
        .unwrap();

    let (status, first) = call(&app, Method::GET, "/v1/operator/tenants?limit=3", OPERATOR, None).await;
    assert_eq!(status, 200, "{first}");
    let slugs = |page: &Value| -> Vec<String> {
        page["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["slug"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(slugs(&first), ["acme", "globex", "hooli"]);
    assert_eq!(first["next_cursor"], "hooli");
    let hooli = &first["items"][2];
    assert_eq!(hooli["id"], acme.tenant.to_string());
    assert_eq!(hooli["active_keys"], 2);
    assert_eq!(hooli["history_scope"], "private_aware");
    assert_eq!(hooli["max_in_flight"], Value::Null);
    assert!(hooli["created_at"].is_string());
    assert!(
        !first.to_string().contains("whsec_"),
        "no dispatch secret in a listing"
    );

    let (status, last) = call(
        &app,
        Method::GET,
        "/v1/operator/tenants?limit=3&cursor=hooli",
        OPERATOR,
        None,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(slugs(&last), ["initech"]);
    assert_eq!(last["next_cursor"], Value::Null);

    for bad in ["limit=0", "limit=201", "cursor=Not_A_Slug", "limit=x"] {
        let (status, body) = call(
            &app,
            Method::GET,
            &format!("/v1/operator/tenants?{bad}"),
            OPERATOR,
            None,
        )
        .await;
        assert_eq!(
            (status, body["error"].as_str()),
            (StatusCode::UNPROCESSABLE_ENTITY, Some("unprocessable")),
            "{bad}"
        );
    }
}

#[tokio::test]
async fn operator_reads_and_changes_a_tenant_by_id_or_by_slug_and_absent_fields_stay() {
    let app = app().await;
    let globex = provision_tenant(&app.pool, "globex").await;
    let by_id = format!("/v1/operator/tenants/{}", globex.tenant);

    let (status, read_by_slug) = call(&app, Method::GET, "/v1/operator/tenants/globex", OPERATOR, None).await;
    assert_eq!(status, 200, "{read_by_slug}");
    let (_, read_by_id) = call(&app, Method::GET, &by_id, OPERATOR, None).await;
    assert_eq!(read_by_slug, read_by_id);
    assert_eq!(read_by_slug["id"], globex.tenant.to_string());

    let (status, changed) = call(
        &app,
        Method::PATCH,
        "/v1/operator/tenants/globex",
        OPERATOR,
        Some(json!({"max_in_flight": 12, "history_scope": "chat"})),
    )
    .await;
    assert_eq!(status, 200, "{changed}");
    assert_eq!(
        (changed["max_in_flight"].clone(), changed["history_scope"].clone()),
        (json!(12), json!("chat"))
    );
    assert_eq!(
        tenant_row(&app, "globex").await,
        ("globex".into(), Some(12), "chat".into())
    );

    // A name alone leaves the cap and the scope as they are.
    let (status, renamed) = call(
        &app,
        Method::PATCH,
        &by_id,
        OPERATOR,
        Some(json!({"name": "Globex Corp"})),
    )
    .await;
    assert_eq!(status, 200, "{renamed}");
    assert_eq!(
        tenant_row(&app, "globex").await,
        ("Globex Corp".into(), Some(12), "chat".into())
    );
    // null returns the cap to the instance default.
    let (status, _) = call(
        &app,
        Method::PATCH,
        &by_id,
        OPERATOR,
        Some(json!({"max_in_flight": null})),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(
        tenant_row(&app, "globex").await,
        ("Globex Corp".into(), None, "chat".into())
    );

    for refused in [
        json!({"name": "  "}),
        json!({"max_in_flight": 0}),
        json!({"history_scope": "everything"}),
        json!({"dispatch_secret": "whsec_x"}),
    ] {
        let (status, body) = call(&app, Method::PATCH, &by_id, OPERATOR, Some(refused.clone())).await;
        assert_eq!(
            (status, body["error"].as_str()),
            (StatusCode::UNPROCESSABLE_ENTITY, Some("unprocessable")),
            "{refused}"
        );
    }
    assert_eq!(
        tenant_row(&app, "globex").await,
        ("Globex Corp".into(), None, "chat".into())
    );

    // Keys by slug as well.
    let (status, issued) = call(
        &app,
        Method::POST,
        "/v1/operator/tenants/globex/keys",
        OPERATOR,
        Some(json!({"name": "ops"})),
    )
    .await;
    assert_eq!(status, 201, "{issued}");
    assert_eq!(issued["tenant_id"], globex.tenant.to_string());
    let (status, keys) = call(
        &app,
        Method::GET,
        "/v1/operator/tenants/globex/keys",
        OPERATOR,
        None,
    )
    .await;
    assert_eq!(
        (status, keys[0]["id"].clone()),
        (StatusCode::OK, issued["id"].clone())
    );
}

#[tokio::test]
async fn an_unknown_tenant_answers_the_json_404_on_every_operator_route() {
    let app = app().await;
    provision_tenant(&app.pool, "acme").await;
    let unknown_id = uuid::Uuid::new_v4().to_string();
    for tenant in ["globex", unknown_id.as_str(), "Not_A_Slug"] {
        let requests = [
            (Method::GET, format!("/v1/operator/tenants/{tenant}"), None),
            (
                Method::PATCH,
                format!("/v1/operator/tenants/{tenant}"),
                Some(json!({"max_in_flight": 5})),
            ),
            (Method::GET, format!("/v1/operator/tenants/{tenant}/keys"), None),
            (
                Method::POST,
                format!("/v1/operator/tenants/{tenant}/keys"),
                Some(json!({"name": "x"})),
            ),
        ];
        for (method, path, body) in requests {
            let (status, error) = call(&app, method.clone(), &path, OPERATOR, body).await;
            assert_eq!(status, 404, "{method} {path}");
            assert_eq!(
                error,
                json!({"error": "not_found", "message": "tenant not found"}),
                "{method} {path}"
            );
        }
    }
    let mut owner = app.db.owner_conn().await;
    let keys: i64 = sqlx::query_scalar("select count(*) from api_keys")
        .fetch_one(&mut owner)
        .await
        .unwrap();
    assert_eq!(keys, 0, "no key was issued for a tenant that does not exist");

    // An unknown method on the new routes keeps answering the JSON error.
    let (status, error) = call(&app, Method::DELETE, "/v1/operator/tenants/acme", OPERATOR, None).await;
    assert_eq!(
        (status, error["error"].as_str()),
        (StatusCode::METHOD_NOT_ALLOWED, Some("method_not_allowed"))
    );
    let (status, error) = call(&app, Method::PUT, "/v1/operator/tenants", OPERATOR, None).await;
    assert_eq!(
        (status, error["error"].as_str()),
        (StatusCode::METHOD_NOT_ALLOWED, Some("method_not_allowed"))
    );
}

#[tokio::test]
async fn a_tenant_key_cannot_use_the_operator_routes_and_the_operator_token_is_no_tenant_key() {
    let app = app().await;
    let (acme, acme_key) = tenant_with_key(&app, "acme").await;
    provision_tenant(&app.pool, "globex").await;
    let attempts = [
        (Method::GET, "/v1/operator/tenants".to_owned(), None),
        (Method::GET, "/v1/operator/tenants/globex".to_owned(), None),
        (Method::GET, format!("/v1/operator/tenants/{}", acme.tenant), None),
        (
            Method::PATCH,
            "/v1/operator/tenants/globex".to_owned(),
            Some(json!({"max_in_flight": 1})),
        ),
        (
            Method::PATCH,
            "/v1/operator/tenants/acme".to_owned(),
            Some(json!({"max_in_flight": 100000})),
        ),
        (Method::GET, "/v1/operator/tenants/globex/keys".to_owned(), None),
        (
            Method::POST,
            "/v1/operator/tenants/globex/keys".to_owned(),
            Some(json!({"name": "mine now"})),
        ),
    ];
    for (method, path, body) in attempts {
        let (status, error) = call(&app, method.clone(), &path, &acme_key, body).await;
        assert_eq!(
            (status, error["error"].as_str()),
            (StatusCode::UNAUTHORIZED, Some("unauthorized")),
            "{method} {path} with acme's key"
        );
    }
    assert_eq!(tenant_row(&app, "globex").await.1, None);
    assert_eq!(tenant_row(&app, "acme").await.1, None, "nor raise its own cap");
    let mut owner = app.db.owner_conn().await;
    let keys: i64 = sqlx::query_scalar("select count(*) from api_keys")
        .fetch_one(&mut owner)
        .await
        .unwrap();
    assert_eq!(keys, 1, "only acme's own key exists");

    let (status, _) = call(&app, Method::GET, "/v1/admin/messages", OPERATOR, None).await;
    assert_eq!(status, 401, "the operator token is not a tenant key");
}

#[tokio::test]
async fn a_slug_of_uuid_form_is_refused_so_that_a_uuid_always_names_an_id() {
    let app = app().await;
    let uuid = uuid::Uuid::new_v4();
    for slug in [uuid.to_string(), uuid.simple().to_string()] {
        let (status, error) = call(
            &app,
            Method::POST,
            "/v1/operator/tenants",
            OPERATOR,
            Some(json!({"slug": slug})),
        )
        .await;
        assert_eq!(status, 422, "{slug}: {error}");
        assert!(error["message"].as_str().unwrap().contains("UUID"), "{error}");
    }
    let (status, _) = call(
        &app,
        Method::POST,
        "/v1/operator/tenants",
        OPERATOR,
        Some(json!({"slug": "c0ffee"})),
    )
    .await;
    assert_eq!(status, 201, "hex alone is still a slug");
}

// ---------------------------------------------------------------- the CLI

/// Whose secret the binary gets, through its environment.
enum As<'a> {
    Admin(&'a str),
    Operator,
}

/// Runs `channel-bridge admin --url <app> <args…>` with the secret in the environment (and
/// nothing else inherited that could stand in for it); `stdin` is piped in when given.
async fn admin_cli(app: &TestApp, who: As<'_>, args: &[&str], stdin: Option<&str>) -> Output {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_channel-bridge"));
    command
        .arg("admin")
        .arg("--url")
        .arg(app.url(""))
        .args(args)
        .env_remove("CB_ADMIN_KEY")
        .env_remove("CB_OPERATOR_TOKEN")
        .env_remove("CB_ADMIN_URL")
        .env("RUST_LOG", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    match who {
        As::Admin(key) => command.env("CB_ADMIN_KEY", key),
        As::Operator => command.env("CB_OPERATOR_TOKEN", OPERATOR),
    };
    let stdin = stdin.map(str::to_owned);
    tokio::task::spawn_blocking(move || {
        let mut child = command.spawn().expect("the binary runs");
        let mut input = child.stdin.take().expect("stdin is piped");
        if let Some(text) = stdin {
            input.write_all(text.as_bytes()).expect("stdin takes the text");
        }
        drop(input);
        child.wait_with_output().expect("the binary ends")
    })
    .await
    .unwrap()
}

fn stdout(output: &Output) -> String {
    assert!(
        output.status.success(),
        "exit {:?}: {}",
        output.status.code(),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout.clone()).unwrap()
}

/// What the CLI printed, as one JSON document (its output when stdout is not a terminal).
fn json_of(output: &Output) -> Value {
    let text = stdout(output);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[tokio::test]
async fn the_cli_lists_and_updates_connectors_with_the_key_from_the_environment() {
    let app = app().await;
    let (acme, key) = tenant_with_key(&app, "acme").await;
    let telegram = acme.telegram.to_string();

    let listed = json_of(&admin_cli(&app, As::Admin(&key), &["connectors", "list"], None).await);
    assert_eq!(listed.as_array().unwrap().len(), 3, "{listed}");

    let updated = json_of(
        &admin_cli(
            &app,
            As::Admin(&key),
            &[
                "connectors",
                "update",
                &telegram,
                "--name",
                "Support bot",
                "--enabled",
                "false",
                "--telegram-delivery",
                "at-least-once",
            ],
            None,
        )
        .await,
    );
    assert_eq!(
        (updated["name"].clone(), updated["enabled"].clone()),
        (json!("Support bot"), json!(false))
    );
    let mut owner = app.db.owner_conn().await;
    let (name, enabled, delivery, format_markdown): (String, bool, String, bool) = sqlx::query_as(
        "select name, enabled, telegram_delivery, format_markdown from channel_connectors where id = $1",
    )
    .bind(acme.telegram)
    .fetch_one(&mut owner)
    .await
    .unwrap();
    assert_eq!(
        (name.as_str(), enabled, delivery.as_str(), format_markdown),
        ("Support bot", false, "at_least_once", true)
    );
}

#[tokio::test]
async fn the_cli_rotates_a_verification_secret_read_from_standard_input_and_never_prints_it() {
    let app = app().await;
    let (acme, key) = tenant_with_key(&app, "acme").await;
    let telegram = acme.telegram.to_string();

    // A new verification secret from standard input: rotated, never printed.
    let rotated = admin_cli(
        &app,
        As::Admin(&key),
        &["connectors", "update", &telegram, "--verification-secret", "@-"],
        Some("a-brand-new-secret\n"),
    )
    .await;
    let rotated = json_of(&rotated);
    assert!(rotated["previous_secret_expires_at"].is_string(), "{rotated}");
    assert!(!rotated.to_string().contains("a-brand-new-secret"));
}

#[tokio::test]
async fn the_cli_deletes_a_connector_and_keeps_one_with_history_unless_purge() {
    let app = app().await;
    let (acme, key) = tenant_with_key(&app, "acme").await;
    let telegram = acme.telegram.to_string();
    let mut owner = app.db.owner_conn().await;

    let deleted = admin_cli(&app, As::Admin(&key), &["connectors", "delete", &telegram], None).await;
    assert_eq!(json_of(&deleted), json!({"deleted": "connector", "id": telegram}));
    let connectors: i64 = sqlx::query_scalar("select count(*) from channel_connectors where tenant_id = $1")
        .bind(acme.tenant)
        .fetch_one(&mut owner)
        .await
        .unwrap();
    assert_eq!(connectors, 2);

    // A connector with history is kept unless --purge: the API's message, exit status 1.
    deliver(
        &app,
        &acme,
        Platform::Slack,
        slack_text("1700000000.000100", "hello"),
    )
    .await;
    let slack = acme.slack.to_string();
    let kept = admin_cli(&app, As::Admin(&key), &["connectors", "delete", &slack], None).await;
    assert_eq!(kept.status.code(), Some(1));
    assert!(
        stderr(&kept).contains("the connector has message history"),
        "{}",
        stderr(&kept)
    );
    assert!(stderr(&kept).contains("409 conflict"), "{}", stderr(&kept));
    stdout(
        &admin_cli(
            &app,
            As::Admin(&key),
            &["connectors", "delete", &slack, "--purge"],
            None,
        )
        .await,
    );
}

#[tokio::test]
async fn the_cli_adds_lists_and_deletes_links() {
    let app = app().await;
    let (_, key) = tenant_with_key(&app, "acme").await;
    let mut owner = app.db.owner_conn().await;

    let added = admin_cli(
        &app,
        As::Admin(&key),
        &[
            "links",
            "add",
            "--platform",
            "slack",
            "--platform-user-id",
            "U0NEW",
            "--user-id",
            "dave",
        ],
        None,
    )
    .await;
    assert_eq!(json_of(&added)["user_id"], "dave");
    let links = json_of(&admin_cli(&app, As::Admin(&key), &["links", "list"], None).await);
    assert!(
        links
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l["platform_user_id"] == "U0NEW"),
        "{links}"
    );
    let unlinked = admin_cli(
        &app,
        As::Admin(&key),
        &[
            "links",
            "delete",
            "--platform",
            "slack",
            "--platform-user-id",
            "U0NEW",
        ],
        None,
    )
    .await;
    stdout(&unlinked);
    let left: i64 = sqlx::query_scalar("select count(*) from channel_links where platform_user_id = 'U0NEW'")
        .fetch_one(&mut owner)
        .await
        .unwrap();
    assert_eq!(left, 0);
}

/// Five Telegram turns of alice's, the first three made `dispatch_failed` (no job left).
async fn failed_turns(app: &TestApp, tenant: &Provisioned) -> Vec<String> {
    for i in 0..5 {
        deliver(
            app,
            tenant,
            Platform::Telegram,
            telegram_text(500 + i, &format!("turn {i}")),
        )
        .await;
    }
    let mut owner = app.db.owner_conn().await;
    sqlx::query_scalar(
        "with failed as (
             update channel_messages set status = 'dispatch_failed', last_error = 'agent down'
              where id in (select id from channel_messages where tenant_id = $1
                            and request_content in ('turn 0', 'turn 1', 'turn 2'))
             returning id),
         unqueued as (delete from dispatch_queue where message_id in (select id from failed))
         select id::text from failed order by id",
    )
    .bind(tenant.tenant)
    .fetch_all(&mut owner)
    .await
    .unwrap()
}

#[tokio::test]
async fn the_cli_redispatches_the_failed_turns_a_filter_selects_and_only_those() {
    let app = app().await;
    let (acme, key) = tenant_with_key(&app, "acme").await;
    let failed = failed_turns(&app, &acme).await;
    assert_eq!(failed.len(), 3);

    let listed = json_of(
        &admin_cli(
            &app,
            As::Admin(&key),
            &["messages", "list", "--status", "dispatch_failed"],
            None,
        )
        .await,
    );
    assert_eq!(listed["items"].as_array().unwrap().len(), 3, "{listed}");

    let queued = json_of(
        &admin_cli(
            &app,
            As::Admin(&key),
            &["messages", "redispatch", "--platform", "telegram", "--limit", "2"],
            None,
        )
        .await,
    );
    assert_eq!(
        (queued["queued"].clone(), queued["more"].clone()),
        (json!(2), json!(true)),
        "{queued}"
    );
    let again = json_of(
        &admin_cli(
            &app,
            As::Admin(&key),
            &["messages", "redispatch", "--platform", "telegram"],
            None,
        )
        .await,
    );
    assert_eq!(
        (again["queued"].clone(), again["more"].clone()),
        (json!(1), json!(false)),
        "{again}"
    );
    let mut requeued: Vec<String> = queued["ids"]
        .as_array()
        .unwrap()
        .iter()
        .chain(again["ids"].as_array().unwrap())
        .map(|id| id.as_str().unwrap().to_owned())
        .collect();
    requeued.sort();
    assert_eq!(requeued, failed, "exactly the failed turns, each once");

    let mut owner = app.db.owner_conn().await;
    let rows: Vec<(String, String, bool)> = sqlx::query_as(
        "select m.id::text, m.status, q.message_id is not null
           from channel_messages m left join dispatch_queue q on q.message_id = m.id
          where m.tenant_id = $1",
    )
    .bind(acme.tenant)
    .fetch_all(&mut owner)
    .await
    .unwrap();
    assert_eq!(rows.len(), 5);
    assert!(
        rows.iter()
            .all(|(_, status, queued)| status == "accepted" && *queued),
        "{rows:?}"
    );

    // A filter the API refuses is its 422 message, exit status 1; a bad flag is clap's 2.
    let refused = admin_cli(
        &app,
        As::Admin(&key),
        &["messages", "redispatch", "--status", "executed"],
        None,
    )
    .await;
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        stderr(&refused).contains("redispatch applies to dispatch_failed messages"),
        "{}",
        stderr(&refused)
    );
    let usage = admin_cli(
        &app,
        As::Admin(&key),
        &["messages", "redispatch", "--platform", "irc"],
        None,
    )
    .await;
    assert_eq!(usage.status.code(), Some(2));
}

#[tokio::test]
async fn the_cli_exports_every_matching_message_as_json_lines_across_pages() {
    let app = app().await;
    let (acme, key) = tenant_with_key(&app, "acme").await;
    let (globex, _) = tenant_with_key(&app, "globex").await;
    for i in 0..5 {
        deliver(
            &app,
            &acme,
            Platform::Telegram,
            telegram_text(700 + i, &format!("acme {i}")),
        )
        .await;
    }
    deliver(
        &app,
        &acme,
        Platform::Slack,
        slack_text("1700000000.000200", "acme on slack"),
    )
    .await;
    deliver(
        &app,
        &globex,
        Platform::Telegram,
        telegram_text(900, "globex's own"),
    )
    .await;

    let exported = admin_cli(
        &app,
        As::Admin(&key),
        &[
            "messages",
            "export",
            "--platform",
            "telegram",
            "--page-size",
            "2",
            "--table",
        ],
        None,
    )
    .await;
    let lines: Vec<Value> = stdout(&exported)
        .lines()
        .map(|line| serde_json::from_str(line).expect("each line is one JSON message"))
        .collect();
    let mut texts: Vec<&str> = lines
        .iter()
        .map(|m| m["request_content"].as_str().unwrap())
        .collect();
    assert_eq!(
        texts,
        ["acme 4", "acme 3", "acme 2", "acme 1", "acme 0"],
        "newest first, over three pages"
    );
    texts.dedup();
    assert_eq!(texts.len(), 5);
    assert!(lines.iter().all(|m| m["platform"] == "telegram"));

    let everything = admin_cli(&app, As::Admin(&key), &["messages", "export"], None).await;
    let everything = stdout(&everything);
    assert_eq!(everything.lines().count(), 6);
    assert!(
        !everything.contains("globex's own"),
        "another tenant's turns never come out"
    );
}

#[tokio::test]
async fn the_cli_prints_aligned_tables_with_table_and_the_api_json_with_json() {
    let app = app().await;
    let (acme, key) = tenant_with_key(&app, "acme").await;
    deliver(
        &app,
        &acme,
        Platform::Telegram,
        telegram_text(800, "first line\nsecond \u{1b}[31mline"),
    )
    .await;

    let table = stdout(&admin_cli(&app, As::Admin(&key), &["messages", "list", "--table"], None).await);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 2, "{table}");
    assert!(lines[0].starts_with("ID "), "{table}");
    // Each value starts where its header does.
    for header in ["RECEIVED (UTC)", "PLATFORM", "USER", "STATUS", "TEXT"] {
        let column = lines[0]
            .find(header)
            .unwrap_or_else(|| panic!("{header} in {table}"));
        let row = lines[1].as_bytes();
        assert!(
            row[column - 1] == b' ' && row[column] != b' ',
            "{header} aligned: {table}"
        );
    }
    let status_column = lines[0].find("STATUS").unwrap();
    assert_eq!(
        &lines[1][status_column..status_column + "accepted".len()],
        "accepted",
        "{table}"
    );
    assert!(
        lines[1].contains("first line second  [31mline"),
        "newlines and escapes made safe: {table}"
    );
    assert!(!table.contains('\u{1b}'));

    let json = json_of(&admin_cli(&app, As::Admin(&key), &["messages", "list", "--json"], None).await);
    let (_, api) = call(&app, Method::GET, "/v1/admin/messages", &key, None).await;
    assert_eq!(json, api, "--json prints the API's answer unchanged");
    let piped = json_of(&admin_cli(&app, As::Admin(&key), &["messages", "list"], None).await);
    assert_eq!(piped, api, "not a terminal: JSON by default");

    let id = api["items"][0]["id"].as_str().unwrap();
    let record = stdout(&admin_cli(&app, As::Admin(&key), &["--table", "messages", "get", id], None).await);
    assert!(
        record
            .lines()
            .any(|l| l.starts_with("status ") && l.ends_with(" accepted")),
        "{record}"
    );
    assert!(record.contains("reply parts:\n(none)"), "{record}");

    let both = admin_cli(
        &app,
        As::Admin(&key),
        &["messages", "list", "--json", "--table"],
        None,
    )
    .await;
    assert_eq!(
        both.status.code(),
        Some(2),
        "--json and --table exclude each other"
    );
}

#[tokio::test]
async fn the_operator_cli_finds_tenants_by_slug_updates_them_and_manages_their_keys() {
    let app = app().await;
    let globex = provision_tenant(&app.pool, "globex").await;
    provision_tenant(&app.pool, "acme").await;

    let table = stdout(&admin_cli(&app, As::Operator, &["tenants", "list", "--table"], None).await);
    let lines: Vec<&str> = table.lines().collect();
    assert!(lines[0].starts_with("SLUG  "), "{table}");
    assert!(
        lines[1].starts_with("acme  ") && lines[2].starts_with("globex  "),
        "{table}"
    );
    assert!(lines[2].contains("default"), "no cap of its own: {table}");
    let all = json_of(
        &admin_cli(
            &app,
            As::Operator,
            &["tenants", "list", "--all", "--limit", "1"],
            None,
        )
        .await,
    );
    assert_eq!(all["items"].as_array().unwrap().len(), 2, "{all}");

    let by_slug = json_of(&admin_cli(&app, As::Operator, &["tenants", "get", "globex"], None).await);
    assert_eq!(by_slug["id"], globex.tenant.to_string());
    let by_id = json_of(
        &admin_cli(
            &app,
            As::Operator,
            &["tenants", "get", &globex.tenant.to_string()],
            None,
        )
        .await,
    );
    assert_eq!(by_id, by_slug);

    let updated = json_of(
        &admin_cli(
            &app,
            As::Operator,
            &[
                "tenants",
                "update",
                "globex",
                "--max-in-flight",
                "32",
                "--history-scope",
                "user",
                "--name",
                "Globex Corp",
            ],
            None,
        )
        .await,
    );
    assert_eq!(updated["max_in_flight"], 32, "{updated}");
    assert_eq!(
        tenant_row(&app, "globex").await,
        ("Globex Corp".into(), Some(32), "user".into())
    );
    stdout(
        &admin_cli(
            &app,
            As::Operator,
            &["tenants", "update", "globex", "--max-in-flight", "default"],
            None,
        )
        .await,
    );
    assert_eq!(tenant_row(&app, "globex").await.1, None);

    let issued = json_of(
        &admin_cli(
            &app,
            As::Operator,
            &["keys", "issue", "globex", "--name", "ops"],
            None,
        )
        .await,
    );
    let key = issued["key"].as_str().unwrap().to_owned();
    let keys = json_of(&admin_cli(&app, As::Operator, &["keys", "list", "globex"], None).await);
    assert_eq!(keys[0]["prefix"], issued["prefix"]);
    assert!(!keys.to_string().contains(&key), "a listing never shows the key");
    // The issued key works, and is read from standard input here.
    let mine = admin_cli(&app, As::Operator, &["--key", "@-", "links", "list"], Some(&key)).await;
    assert_eq!(json_of(&mine).as_array().unwrap().len(), 4);

    let key_id = issued["id"].as_str().unwrap();
    let revoked = json_of(&admin_cli(&app, As::Operator, &["keys", "revoke", key_id], None).await);
    assert!(revoked["revoked_at"].is_string(), "{revoked}");
    let refused = admin_cli(&app, As::Admin(&key), &["links", "list"], None).await;
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        stderr(&refused).contains("invalid or revoked API key (401 unauthorized)"),
        "{}",
        stderr(&refused)
    );
}

#[tokio::test]
async fn an_unknown_tenant_exits_1_with_the_api_message_and_a_missing_secret_is_a_usage_error() {
    let app = app().await;
    let (_, key) = tenant_with_key(&app, "acme").await;

    for args in [
        &["keys", "list", "globex"][..],
        &["tenants", "get", "globex"],
        &["tenants", "update", "globex", "--name", "x"],
        &["keys", "issue", "globex"],
    ] {
        let output = admin_cli(&app, As::Operator, args, None).await;
        assert_eq!(output.status.code(), Some(1), "{args:?}");
        assert!(output.stdout.is_empty(), "{args:?}");
        assert_eq!(
            stderr(&output).trim(),
            "error: tenant not found (404 not_found)",
            "{args:?}"
        );
    }

    // A tenant key is not the operator's: the operator commands need the operator token.
    let output = admin_cli(&app, As::Admin(&key), &["tenants", "list"], None).await;
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("--operator-token"),
        "{}",
        stderr(&output)
    );
    assert!(!stderr(&output).contains(&key), "the key is never echoed");
    let output = admin_cli(
        &app,
        As::Admin(&key),
        &["--operator-token", "@-", "tenants", "list"],
        Some(&key),
    )
    .await;
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output).contains("invalid operator token (401 unauthorized)"),
        "{}",
        stderr(&output)
    );
    let output = admin_cli(&app, As::Operator, &["messages", "list"], None).await;
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr(&output).contains("CB_ADMIN_KEY"), "{}", stderr(&output));
}

#[tokio::test]
async fn the_database_cli_names_an_unknown_tenant_instead_of_printing_an_empty_page() {
    let app = app().await;
    let unknown = uuid::Uuid::new_v4().to_string();
    for args in [
        vec!["messages", "list", "--tenant", &unknown],
        vec!["messages", "redispatch", "--tenant", &unknown],
    ] {
        let output = crate::support::run_cli(&app.db, &args).await;
        assert_eq!(output.status.code(), Some(1), "{args:?}");
        assert!(output.stdout.is_empty(), "{args:?}");
        assert_eq!(
            stderr(&output).trim(),
            format!("error: tenant {unknown} not found"),
            "{args:?}"
        );
    }
}

#[tokio::test]
async fn the_cli_erases_one_person_only_with_yes_and_the_audit_log_shows_it() {
    let app = app().await;
    let (acme, key) = tenant_with_key(&app, "acme").await;
    deliver(
        &app,
        &acme,
        Platform::Telegram,
        telegram_text(800, "alice on telegram"),
    )
    .await;
    deliver(
        &app,
        &acme,
        Platform::Slack,
        slack_text("1700000000.000300", "alice on slack"),
    )
    .await;
    deliver(
        &app,
        &acme,
        Platform::Whatsapp,
        fixture(Platform::Whatsapp, "text"),
    )
    .await;

    let refused = admin_cli(&app, As::Admin(&key), &["erase", "--user-id", "alice"], None).await;
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    assert!(stderr(&refused).contains("--yes"), "{}", stderr(&refused));
    let nobody = admin_cli(&app, As::Admin(&key), &["erase", "--yes"], None).await;
    assert_eq!(nobody.status.code(), Some(2), "a person must be named");

    let erased = json_of(
        &admin_cli(
            &app,
            As::Admin(&key),
            &["erase", "--user-id", "alice", "--yes"],
            None,
        )
        .await,
    );
    assert_eq!(
        (erased["turns"].as_u64(), erased["links"].as_u64()),
        (Some(2), Some(2)),
        "{erased}"
    );
    let left = json_of(&admin_cli(&app, As::Admin(&key), &["messages", "list"], None).await);
    let users: Vec<&str> = left["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["user_id"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(users, ["bob"], "only alice's turns went");

    let sender = admin_cli(
        &app,
        As::Admin(&key),
        &[
            "erase",
            "--platform",
            "whatsapp",
            "--platform-user-id",
            WHATSAPP_USER,
            "--yes",
            "--table",
        ],
        None,
    )
    .await;
    assert!(
        stdout(&sender).contains(&format!("Erased whatsapp account {WHATSAPP_USER}: 1 turns")),
        "{}",
        stdout(&sender)
    );

    let audit = json_of(&admin_cli(&app, As::Admin(&key), &["audit"], None).await);
    let records: Vec<(&str, &str)> = audit["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["action"].as_str().unwrap(), r["target"].as_str().unwrap()))
        .collect();
    assert_eq!(
        records[..2],
        [
            ("person.erase", format!("whatsapp:{WHATSAPP_USER}").as_str()),
            ("person.erase", "user:alice")
        ]
    );
    let table = stdout(&admin_cli(&app, As::Admin(&key), &["audit", "--table", "--limit", "1"], None).await);
    assert!(table.starts_with("AT (UTC)"), "{table}");
    assert_eq!(table.lines().count(), 2, "a header and one record: {table}");
}

#[tokio::test]
async fn the_cli_takes_a_conversation_over_writes_in_it_lists_it_held_and_hands_it_back() {
    let app = app().await;
    let (acme, key) = tenant_with_key(&app, "acme").await;
    deliver(&app, &acme, Platform::Telegram, telegram_text(900, "hello")).await;
    let listed = json_of(&admin_cli(&app, As::Admin(&key), &["messages", "list"], None).await);
    let conversation = listed["items"][0]["conversation"].as_str().unwrap().to_owned();

    let hold = json_of(
        &admin_cli(
            &app,
            As::Admin(&key),
            &["conversations", "take-over", &conversation, "--reason", "VIP"],
            None,
        )
        .await,
    );
    assert_eq!(
        (&hold["taken"], &hold["held_by"]),
        (&json!(true), &json!("ci")),
        "{hold}"
    );

    let posted = json_of(
        &admin_cli(
            &app,
            As::Admin(&key),
            &[
                "conversations",
                "send",
                &conversation,
                "-",
                "--idempotency-key",
                "k1",
            ],
            Some("Hi, **Dana** here."),
        )
        .await,
    );
    assert_eq!(posted["created"], true, "{posted}");
    let again = json_of(
        &admin_cli(
            &app,
            As::Admin(&key),
            &[
                "conversations",
                "send",
                &conversation,
                "other text",
                "--idempotency-key",
                "k1",
            ],
            None,
        )
        .await,
    );
    assert_eq!(
        (&again["created"], &again["message_id"]),
        (&json!(false), &posted["message_id"])
    );

    let table = stdout(&admin_cli(&app, As::Admin(&key), &["--table", "conversations", "held"], None).await);
    assert!(table.contains(&conversation) && table.contains("VIP"), "{table}");

    let back = json_of(
        &admin_cli(
            &app,
            As::Admin(&key),
            &["conversations", "hand-back", &conversation],
            None,
        )
        .await,
    );
    assert_eq!(back["released"], true, "{back}");
    let none = json_of(&admin_cli(&app, As::Admin(&key), &["conversations", "held"], None).await);
    assert_eq!(none["conversations"], json!([]));
}

// ---------------------------------------------------------------- choices and taps

/// The lines of an NDJSON export of the tenant (the admin API's).
async fn exported(s: &crate::support::Pipeline) -> Vec<Value> {
    let response = s
        .app
        .client
        .get(s.app.url("/v1/admin/export"))
        .bearer_auth(s.admin_key().await)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body = response.text().await.unwrap();
    body.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

#[tokio::test]
async fn the_cli_shows_a_tap_as_a_tap_and_an_answers_choices_with_the_one_chosen() {
    let s = crate::support::Pipeline::start().await;
    crate::console_handoff::links_the_fixture_human(&s).await;
    let (asked, tapped) = crate::console_handoff::a_tapped_approval(&s).await;
    let key = s.admin_key().await;
    let cli = |args: Vec<String>| {
        let (app, key) = (&s.app, key.clone());
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            admin_cli(app, As::Admin(&key), &args, None).await
        }
    };
    let args = |list: &[&str]| list.iter().map(|a| a.to_string()).collect::<Vec<_>>();

    let table = stdout(&cli(args(&["--table", "messages", "list"])).await);
    let header = table.lines().next().unwrap();
    let column = header.find("TAP ON ANSWER OF").expect(&table);
    let row = table
        .lines()
        .find(|l| l.starts_with(&tapped.to_string()))
        .unwrap();
    assert_eq!(&row[column..column + 36], asked.to_string(), "{table}");

    let record = stdout(&cli(args(&["--table", "messages", "get", &tapped.to_string()])).await);
    for (name, value) in [
        ("tapped", "Approve".to_owned()),
        ("choice_id", "approve".to_owned()),
        ("choice_value", r#"{"refund":42}"#.to_owned()),
        ("on_answer_of", asked.to_string()),
    ] {
        assert!(
            record
                .lines()
                .any(|l| l.starts_with(&format!("{name} ")) && l.ends_with(&format!(" {value}"))),
            "{name}: {record}"
        );
    }

    let answer = stdout(&cli(args(&["--table", "messages", "get", &asked.to_string()])).await);
    assert!(
        !answer.contains("tapped "),
        "no tap lines for a message: {answer}"
    );
    assert!(answer.contains("EDIT OF"), "{answer}");
    let choices = answer
        .split("choices of part 0 (close after the first tap):\n")
        .nth(1)
        .unwrap_or_else(|| panic!("{answer}"));
    let rows: Vec<&str> = choices.lines().collect();
    assert!(rows[0].starts_with("#  LABEL"), "{answer}");
    assert!(
        rows[1].starts_with("0  Approve ") && rows[1].contains("✓ by 408258968 at "),
        "{answer}"
    );
    assert!(rows[2].starts_with("1  <i>Later</i> "), "{answer}");
    assert!(rows[3].ends_with("https://example.com/policy"), "{answer}");

    let json = json_of(&cli(args(&["--json", "messages", "get", &tapped.to_string()])).await);
    let (_, api) = s
        .admin(Method::GET, &format!("/v1/admin/messages/{tapped}"), None)
        .await;
    assert_eq!(json, api, "--json is the API's answer, action and all");
    assert_eq!(json["action"]["message_id"], asked.to_string());

    // The export: the tap's action, and the choices with the one chosen.
    let lines = exported(&s).await;
    let line = |id: String| lines.iter().find(|l| l["id"] == id).cloned().unwrap();
    assert_eq!(line(tapped.to_string())["action"]["label"], "Approve");
    let parts = line(asked.to_string())["reply_parts"].clone();
    assert_eq!(parts[0]["choices"]["items"][0]["id"], "approve");
    assert_eq!(parts[0]["chosen"]["index"], 0);
    assert_eq!(parts[1]["edit_of"], 0);

    // A person's answer with buttons from the command line.
    let sent = json_of(
        &cli(args(&[
            "--json",
            "conversations",
            "send",
            "user:alice",
            "Which day?",
            "--choice",
            "Monday",
            "--choice",
            "Tuesday",
        ]))
        .await,
    );
    let turn = sent["message_id"].as_str().unwrap();
    let (_, person) = s
        .admin(Method::GET, &format!("/v1/admin/messages/{turn}"), None)
        .await;
    let items = &person["reply_parts"][0]["choices"]["items"];
    assert_eq!(
        *items,
        json!([{"id": "Monday", "label": "Monday"}, {"id": "Tuesday", "label": "Tuesday"}])
    );
    let (_, audit) = s.admin(Method::GET, "/v1/admin/audit", None).await;
    let entry = &audit["items"][0];
    assert_eq!(
        (&entry["action"], &entry["details"]["choices"]),
        (&json!("conversation.message"), &json!(2))
    );
}
