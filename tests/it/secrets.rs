//! Secrets at rest (docs/security.md#secrets-at-rest): what a dump of `tenants` and
//! `channel_connectors` shows, the plain rows of an older deployment sealed at start, key
//! rotation with the CLI, and a sealed value that only opens in its own row. `serve` without a
//! key: refused unless plain text is allowed.

use std::process::{Command, Stdio};

use channel_bridge::domain::Platform;
use channel_bridge::secrets::{sealed_with, Keyring};
use secrecy::ExposeSecret;
use serde_json::{json, Value};

use crate::support::platforms::{
    fixture, now, post, provision_tenant, provision_tenant_sealed, signed_headers, slack_headers,
    Provisioned, SLACK_SECRET, TELEGRAM_SECRET, WHATSAPP_SECRET, WHATSAPP_VERIFY_TOKEN,
};
use crate::support::serve::{listening_addr, secrets_key, KilledOnDrop};
use crate::support::{eventually, spawn_app, spawn_app_on, spawn_app_with, TestApp, TestDb};

/// The rows of both tables as text, as `pg_dump --data-only` would print them, read as the
/// schema owner (no RLS).
async fn dump(db: &TestDb) -> String {
    let mut owner = db.owner_conn().await;
    let rows: Vec<String> = sqlx::query_scalar(
        "select t::text from tenants t union all select c::text from channel_connectors c",
    )
    .fetch_all(&mut owner)
    .await
    .unwrap();
    rows.join("\n")
}

/// Every stored secret value of both tables (NULLs left out).
async fn stored_secrets(db: &TestDb) -> Vec<String> {
    let mut owner = db.owner_conn().await;
    sqlx::query_scalar(
        "select v from (
            select unnest(array[dispatch_secret, previous_dispatch_secret]) as v from tenants
            union all
            select unnest(array[verification_secret, previous_verification_secret, verify_token,
                                outbound_token]) from channel_connectors) s
          where v is not null",
    )
    .fetch_all(&mut owner)
    .await
    .unwrap()
}

fn clear_secrets(tenant: &Provisioned) -> Vec<String> {
    let mut secrets: Vec<String> = [
        SLACK_SECRET,
        WHATSAPP_SECRET,
        TELEGRAM_SECRET,
        WHATSAPP_VERIFY_TOKEN,
    ]
    .map(str::to_owned)
    .into();
    secrets.extend(Platform::ALL.map(|p| format!("{p}-outbound-token")));
    secrets.push(tenant.dispatch_secret.clone());
    secrets
}

async fn slack_webhook(app: &TestApp, tenant: &Provisioned, secret: &str) -> (u16, Value) {
    let body = fixture(Platform::Slack, "dm_text");
    let response = post(
        app,
        &tenant.hook_path(Platform::Slack),
        &slack_headers(secret, now(), &body),
        body,
    )
    .await;
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

async fn readyz_warnings(app: &TestApp) -> Vec<String> {
    let body: Value = app
        .client
        .get(app.url("/readyz"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    serde_json::from_value(body["warnings"].clone()).unwrap()
}

fn new_key(id: &str) -> (Keyring, String) {
    let entry = Keyring::generate_entry(id).unwrap().expose_secret().to_owned();
    (Keyring::parse(&entry).unwrap(), entry)
}

#[tokio::test]
async fn a_dump_shows_no_secret_in_clear_and_every_secret_still_works() {
    let app = spawn_app().await;
    let acme = provision_tenant(&app.pool, "acme").await;
    let key = channel_bridge::admin::operator::issue(&app.pool, acme.tenant, "ci")
        .await
        .unwrap()
        .key;
    // A rotation of each kind, so the `previous_` columns hold values too.
    let rotated = app
        .client
        .patch(app.url(&format!("/v1/admin/connectors/{}", acme.slack)))
        .bearer_auth(&key)
        .json(&json!({ "verification_secret": "the-new-slack-secret", "previous_secret_grace_secs": 3600 }))
        .send()
        .await
        .unwrap();
    assert_eq!(rotated.status(), 200);
    let response = app
        .client
        .post(app.url("/v1/admin/tenant/rotate-dispatch-secret"))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let new_dispatch: Value = response.json().await.unwrap();
    let new_dispatch = new_dispatch["dispatch_secret"].as_str().unwrap().to_owned();

    let dump = dump(&app.db).await;
    let mut secrets = clear_secrets(&acme);
    secrets.extend(["the-new-slack-secret".to_owned(), new_dispatch.clone()]);
    for secret in &secrets {
        assert!(!dump.contains(secret.as_str()), "{secret} is in the dump");
    }
    let stored = stored_secrets(&app.db).await;
    assert_eq!(
        stored.len(),
        1 + 1 + 3 + 1 + 1 + 3,
        "two dispatch, four verification, one verify token, three outbound"
    );
    for value in &stored {
        assert_eq!(sealed_with(value), Some("ephemeral"), "{value}");
    }

    // Opened where they are used: the new and (within its grace) the old Slack secret, the
    // WhatsApp verify token, the Telegram secret token.
    assert_eq!(slack_webhook(&app, &acme, "the-new-slack-secret").await.0, 200);
    assert_eq!(slack_webhook(&app, &acme, SLACK_SECRET).await.0, 200);
    let handshake = app
        .client
        .get(app.url(&format!(
            "{}?hub.mode=subscribe&hub.challenge=1158201444&hub.verify_token={WHATSAPP_VERIFY_TOKEN}",
            acme.hook_path(Platform::Whatsapp)
        )))
        .send()
        .await
        .unwrap();
    assert_eq!(handshake.status(), 200);
    assert_eq!(handshake.text().await.unwrap(), "1158201444");
    let body = fixture(Platform::Telegram, "private_text");
    let telegram = post(
        &app,
        &acme.hook_path(Platform::Telegram),
        &signed_headers(Platform::Telegram, &body),
        body,
    )
    .await;
    assert_eq!(telegram.status(), 200);
    assert!(readyz_warnings(&app).await.is_empty());
}

#[tokio::test]
async fn plain_secrets_of_an_older_deployment_are_sealed_when_an_instance_starts_with_a_key() {
    let plain = spawn_app_with(|settings, _| {
        settings.database.secrets = Keyring::plain();
        settings.allow_plaintext_secrets = true;
    })
    .await;
    let acme = provision_tenant_sealed(&plain.pool, "acme", None, &Keyring::plain()).await;
    assert!(
        dump(&plain.db).await.contains(SLACK_SECRET),
        "stored in clear without a key"
    );
    let warnings = readyz_warnings(&plain).await;
    assert!(
        warnings.iter().any(|w| w.contains("CB_SECRETS_KEY")),
        "{warnings:?}"
    );
    // Without a key, a value that would read as sealed is refused rather than stored.
    let key = channel_bridge::admin::operator::issue(&plain.pool, acme.tenant, "ci")
        .await
        .unwrap()
        .key;
    let refused = plain
        .client
        .patch(plain.url(&format!("/v1/admin/connectors/{}", acme.telegram)))
        .bearer_auth(&key)
        .json(&json!({ "outbound_token": "cbsealed:v1:k:abc" }))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 422);

    let (keys, _) = new_key("k1");
    let keyed = spawn_app_on(&plain.db, |settings| settings.database.secrets = keys).await;
    let db = keyed.db.clone();
    eventually("the plain rows are sealed", || {
        let db = db.clone();
        async move {
            stored_secrets(&db)
                .await
                .iter()
                .all(|v| sealed_with(v) == Some("k1"))
        }
    })
    .await;
    let dump = dump(&keyed.db).await;
    for secret in clear_secrets(&acme) {
        assert!(!dump.contains(secret.as_str()), "{secret} is in the dump");
    }
    assert_eq!(slack_webhook(&keyed, &acme, SLACK_SECRET).await.0, 200);
    assert!(readyz_warnings(&keyed).await.is_empty());

    // The instance without the key cannot open them any more: the platform is asked to
    // retry (503), nothing is accepted unverified.
    let (status, body) = slack_webhook(&plain, &acme, SLACK_SECRET).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (503, Some("unavailable")),
        "{body}"
    );
}

#[tokio::test]
async fn rotate_key_moves_every_secret_to_the_new_key_and_the_old_key_can_go() {
    let (old_keys, old) = new_key("old");
    let app = spawn_app_with(|settings, _| settings.database.secrets = old_keys.clone()).await;
    let acme = provision_tenant_sealed(&app.pool, "acme", None, &old_keys).await;
    let generated = std::process::Command::new(env!("CARGO_BIN_EXE_channel-bridge"))
        .args(["secrets", "generate-key", "--id", "new"])
        .output()
        .unwrap();
    assert!(generated.status.success());
    let new = String::from_utf8(generated.stdout).unwrap().trim().to_owned();
    assert!(new.starts_with("new:"), "an `id:base64` entry");

    let rotate = || {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_channel-bridge"))
            .args(["secrets", "rotate-key"])
            .env("DATABASE_URL", app.db.url())
            .env("CB_SECRETS_KEY", format!("{new},{old}"))
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        serde_json::from_slice::<Value>(&output.stdout).unwrap()
    };
    let first = rotate();
    assert_eq!(
        (
            &first["key"],
            &first["tenants_resealed"],
            &first["connectors_resealed"]
        ),
        (&json!("new"), &json!(1), &json!(3)),
        "{first}"
    );
    let again = rotate();
    assert_eq!(
        (&again["tenants_resealed"], &again["connectors_resealed"]),
        (&json!(0), &json!(0))
    );
    for value in stored_secrets(&app.db).await {
        assert_eq!(sealed_with(&value), Some("new"), "{value}");
    }

    let new_only = spawn_app_on(&app.db, |settings| {
        settings.database.secrets = Keyring::parse(&new).unwrap()
    })
    .await;
    assert_eq!(slack_webhook(&new_only, &acme, SLACK_SECRET).await.0, 200);
    let old_only = spawn_app_on(&app.db, |settings| settings.database.secrets = old_keys).await;
    assert_eq!(slack_webhook(&old_only, &acme, SLACK_SECRET).await.0, 503);
}

#[tokio::test]
async fn a_sealed_secret_copied_into_another_tenants_row_does_not_open() {
    let app = spawn_app().await;
    let acme = provision_tenant(&app.pool, "acme").await;
    let globex = provision_tenant(&app.pool, "globex").await;
    let mut owner = app.db.owner_conn().await;
    sqlx::query(
        "update channel_connectors set verification_secret =
             (select verification_secret from channel_connectors where id = $1)
          where id = $2",
    )
    .bind(acme.slack)
    .bind(globex.slack)
    .execute(&mut owner)
    .await
    .unwrap();
    let (status, body) = slack_webhook(&app, &globex, SLACK_SECRET).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (503, Some("unavailable")),
        "{body}"
    );
    assert_eq!(slack_webhook(&app, &acme, SLACK_SECRET).await.0, 200);
}

/// `serve` on `db` as an operator starts it (worker off, JSON logs), with `args` and `env`
/// on top: no key and no plain-text opt-in come from the test's own environment.
fn serve(db: &TestDb, args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_channel-bridge"));
    command
        .args(["serve", "--bind", "127.0.0.1:0"])
        .args(args)
        .envs(db.env())
        .env_remove("CB_SECRETS_KEY")
        .env_remove("CB_SECRETS_PLAINTEXT")
        .env("CB_WORKER", "false")
        .env("CB_LOG_FORMAT", "json")
        .env("RUST_LOG", "warn,channel_bridge::cli=info")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    command
}

/// Starts `command` and waits until it listens: the child, and its base URL.
async fn started(mut command: Command) -> (KilledOnDrop, String) {
    let mut child = KilledOnDrop(Some(command.spawn().unwrap()));
    let addr = listening_addr(child.child().stderr.take().unwrap()).await;
    (child, format!("http://{addr}"))
}

/// `/readyz`'s status and warnings.
async fn readyz(base: &str) -> (u16, Vec<String>) {
    let response = reqwest::get(format!("{base}/readyz")).await.unwrap();
    let status = response.status().as_u16();
    let body: Value = response.json().await.unwrap();
    (status, serde_json::from_value(body["warnings"].clone()).unwrap())
}

/// A Telegram update signed with the connector's secret; the answer's status.
async fn telegram_webhook(base: &str, tenant: &Provisioned) -> u16 {
    let body = fixture(Platform::Telegram, "private_text");
    let mut request = reqwest::Client::new()
        .post(format!("{base}{}", tenant.hook_path(Platform::Telegram)))
        .body(body.clone());
    for (name, value) in signed_headers(Platform::Telegram, &body) {
        request = request.header(name, value);
    }
    request.send().await.unwrap().status().as_u16()
}

#[tokio::test]
async fn serve_without_a_key_refuses_to_start_saying_how_to_make_one_or_allow_plain_text() {
    let db = TestDb::migrated().await;
    for env in [&[][..], &[("CB_SECRETS_PLAINTEXT", "false")][..]] {
        let output = serve(&db, &[], env).output().unwrap();
        assert!(!output.status.success(), "{env:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        let last = stderr.lines().last().unwrap_or_default();
        assert!(
            last.starts_with("error: invalid configuration: CB_SECRETS_KEY is not set"),
            "{stderr}"
        );
        for says in [
            "(umask 077; channel-bridge secrets generate-key > cb_secrets.key)",
            "CB_SECRETS_KEY=@cb_secrets.key",
            "--allow-plaintext-secrets",
            "CB_SECRETS_PLAINTEXT=true",
            "docs/security.md#secrets-at-rest",
        ] {
            assert!(last.contains(says), "{says}: {stderr}");
        }
        assert!(!stderr.contains("listening"), "{stderr}");
    }
}

#[tokio::test]
async fn a_plain_text_database_keeps_working_when_serve_is_told_to_allow_plain_text() {
    let db = TestDb::migrated().await;
    let acme = provision_tenant_sealed(&db.app_pool(), "acme", None, &Keyring::plain()).await;
    for (args, env) in [
        (&["--allow-plaintext-secrets"][..], &[][..]),
        (&[][..], &[("CB_SECRETS_PLAINTEXT", "true")][..]),
    ] {
        let (_serve, base) = started(serve(&db, args, env)).await;
        let (status, warnings) = readyz(&base).await;
        assert_eq!(status, 200, "{args:?} {env:?}");
        assert_eq!(
            warnings,
            ["CB_SECRETS_KEY is not set: stored secrets are in plain text"]
        );
        let verified = telegram_webhook(&base, &acme).await;
        assert_eq!(verified, 200, "the plain secret verifies");
    }
    assert!(dump(&db).await.contains(SLACK_SECRET), "still in plain text");
}

#[tokio::test]
async fn serve_with_a_key_starts_and_seals_what_an_older_deployment_stored_in_plain_text() {
    let db = TestDb::migrated().await;
    let acme = provision_tenant_sealed(&db.app_pool(), "acme", None, &Keyring::plain()).await;
    let key = secrets_key("k1");
    let (_serve, base) = started(serve(&db, &[], &[("CB_SECRETS_KEY", &key)])).await;
    assert_eq!(readyz(&base).await, (200, Vec::new()));
    eventually("the plain rows are sealed", || async {
        stored_secrets(&db)
            .await
            .iter()
            .all(|v| sealed_with(v) == Some("k1"))
    })
    .await;
    let dump = dump(&db).await;
    for secret in clear_secrets(&acme) {
        assert!(!dump.contains(secret.as_str()), "{secret} is in the dump");
    }
    let verified = telegram_webhook(&base, &acme).await;
    assert_eq!(verified, 200, "the sealed secret opens");
}
