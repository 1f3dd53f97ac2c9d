//! Signing webhooks the way each platform does (the rules: `src/platforms/*/inbound.rs`), and
//! a tenant with one connector per platform whose ids match the fixtures in `fixtures/`.

use channel_bridge::domain::{ConnectorId, Platform, TenantId, UnlinkedPolicy};
use channel_bridge::provision;
use channel_bridge::secrets::Keyring;
use channel_bridge::shapes::{ConnectorSettings, NewConnector};
use hmac::{Hmac, Mac};
use secrecy::SecretString;
use sha2::Sha256;
use sqlx::PgPool;

pub const SLACK_SECRET: &str = "slack-signing-secret";
pub const WHATSAPP_SECRET: &str = "meta-app-secret";
pub const WHATSAPP_VERIFY_TOKEN: &str = "meatyhamhock";
pub const TELEGRAM_SECRET: &str = "telegram-secret_token-1";

/// The humans of the fixtures, linked to tenant users.
pub const SLACK_USER: &str = "U0USER1";
pub const WHATSAPP_USER: &str = "16505551234";
pub const WHATSAPP_USER_2: &str = "16505550000";
pub const TELEGRAM_USER: &str = "408258968";

pub struct Provisioned {
    pub tenant: TenantId,
    pub dispatch_secret: String,
    pub slack: ConnectorId,
    pub whatsapp: ConnectorId,
    pub telegram: ConnectorId,
}

impl Provisioned {
    pub fn connector(&self, platform: Platform) -> ConnectorId {
        match platform {
            Platform::Slack => self.slack,
            Platform::Whatsapp => self.whatsapp,
            Platform::Telegram => self.telegram,
        }
    }

    pub fn hook_path(&self, platform: Platform) -> String {
        provision::webhook_path(self.tenant, self.connector(platform))
    }
}

pub fn connector(platform: Platform, api_base_url: Option<&str>) -> NewConnector {
    let (secret, external_id, bot_user_id, bot_id) = match platform {
        Platform::Slack => (SLACK_SECRET, "T0001", Some("UBOT1"), Some("BBOT1")),
        Platform::Whatsapp => (WHATSAPP_SECRET, "106540352242922", None, None),
        Platform::Telegram => (TELEGRAM_SECRET, "7000000001", Some("7000000001"), None),
    };
    let mut new = NewConnector::new(platform, SecretString::from(secret.to_owned()));
    new.secrets.verify_token =
        (platform == Platform::Whatsapp).then(|| SecretString::from(WHATSAPP_VERIFY_TOKEN.to_owned()));
    new.secrets.outbound_token = Some(SecretString::from(format!("{platform}-outbound-token")));
    new.settings = ConnectorSettings {
        name: Some(platform.to_string()),
        external_id: Some(external_id.into()),
        app_id: (platform == Platform::Slack).then(|| "A0001".into()),
        bot_user_id: bot_user_id.map(Into::into),
        bot_id: bot_id.map(Into::into),
        api_base_url: api_base_url.map(str::to_owned),
        unlinked_policy: Some(UnlinkedPolicy::Deny),
        ..ConnectorSettings::default()
    };
    new
}

/// A tenant with a Slack, a WhatsApp and a Telegram connector, and the fixtures' humans
/// linked: Slack and Telegram to `alice` (one person, one history), WhatsApp to `bob`.
pub async fn provision_tenant(pool: &PgPool, slug: &str) -> Provisioned {
    provision_tenant_at(pool, slug, None).await
}

/// Like `provision_tenant`, with every connector's platform API at `api_base_url` (a
/// `FakePlatforms`).
pub async fn provision_tenant_at(pool: &PgPool, slug: &str, api_base_url: Option<&str>) -> Provisioned {
    provision_tenant_sealed(pool, slug, api_base_url, &Keyring::ephemeral()).await
}

/// Like `provision_tenant_at`, the secrets sealed with `keys` (the apps' default is
/// `Keyring::ephemeral()`).
pub async fn provision_tenant_sealed(
    pool: &PgPool,
    slug: &str,
    api_base_url: Option<&str>,
    keys: &Keyring,
) -> Provisioned {
    let created = provision::create_tenant(pool, keys, slug, slug, None)
        .await
        .unwrap();
    let tenant = created.tenant_id;
    let mut ids = Vec::new();
    for platform in Platform::ALL {
        ids.push(
            provision::add_connector(pool, keys, tenant, &connector(platform, api_base_url))
                .await
                .unwrap()
                .connector_id,
        );
    }
    for (platform, sender, user) in [
        (Platform::Slack, SLACK_USER, "alice"),
        (Platform::Telegram, TELEGRAM_USER, "alice"),
        (Platform::Whatsapp, WHATSAPP_USER, "bob"),
        (Platform::Whatsapp, WHATSAPP_USER_2, "carol"),
    ] {
        provision::add_link(pool, tenant, platform, sender, user)
            .await
            .unwrap();
    }
    Provisioned {
        tenant,
        dispatch_secret: created.dispatch_secret,
        slack: ids[0],
        whatsapp: ids[1],
        telegram: ids[2],
    }
}

pub fn fixture(platform: Platform, name: &str) -> Vec<u8> {
    let path = format!("{}/fixtures/{platform}/{name}.json", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("fixture {path}: {e}"))
}

fn hmac_hex(key: &str, parts: &[&[u8]]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(key.as_bytes()).expect("HMAC takes any key length");
    for part in parts {
        mac.update(part);
    }
    hex::encode(mac.finalize().into_bytes())
}

pub fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

/// Headers a platform would send with `body`, signed with the connector's secret.
pub fn signed_headers(platform: Platform, body: &[u8]) -> Vec<(&'static str, String)> {
    match platform {
        Platform::Slack => slack_headers(SLACK_SECRET, now(), body),
        Platform::Whatsapp => vec![
            ("content-type", "application/json".into()),
            (
                "x-hub-signature-256",
                format!("sha256={}", hmac_hex(WHATSAPP_SECRET, &[body])),
            ),
        ],
        Platform::Telegram => vec![
            ("content-type", "application/json".into()),
            ("x-telegram-bot-api-secret-token", TELEGRAM_SECRET.into()),
        ],
    }
}

pub fn slack_headers(secret: &str, timestamp: i64, body: &[u8]) -> Vec<(&'static str, String)> {
    let ts = timestamp.to_string();
    let signature = hmac_hex(secret, &[b"v0:", ts.as_bytes(), b":", body]);
    vec![
        ("content-type", "application/json".into()),
        ("x-slack-request-timestamp", ts),
        ("x-slack-signature", format!("v0={signature}")),
    ]
}

/// POSTs `body` with `headers` to `path` of the app.
pub async fn post(
    app: &super::TestApp,
    path: &str,
    headers: &[(&'static str, String)],
    body: Vec<u8>,
) -> reqwest::Response {
    let mut request = app.client.post(app.url(path)).body(body);
    for (name, value) in headers {
        request = request.header(*name, value);
    }
    request.send().await.expect("request reaches the app")
}

/// POSTs a fixture, correctly signed for its platform.
pub async fn post_fixture(
    app: &super::TestApp,
    tenant: &Provisioned,
    platform: Platform,
    name: &str,
) -> reqwest::Response {
    let body = fixture(platform, name);
    post(
        app,
        &tenant.hook_path(platform),
        &signed_headers(platform, &body),
        body,
    )
    .await
}

/// A Telegram private-chat text from the fixture's human, with its own update id.
pub fn telegram_text(update_id: i64, text: &str) -> Vec<u8> {
    let mut update: serde_json::Value =
        serde_json::from_slice(&fixture(Platform::Telegram, "private_text")).unwrap();
    update["update_id"] = update_id.into();
    update["message"]["message_id"] = (update_id % 100_000).into();
    update["message"]["text"] = text.into();
    serde_json::to_vec(&update).unwrap()
}

/// A Slack DM from the fixture's human (the same person as the Telegram one), unique by ts.
pub fn slack_text(ts: &str, text: &str) -> Vec<u8> {
    let mut event: serde_json::Value = serde_json::from_slice(&fixture(Platform::Slack, "dm_text")).unwrap();
    event["event"]["ts"] = ts.into();
    event["event"]["event_ts"] = ts.into();
    event["event"]["text"] = text.into();
    event["event_id"] = format!("Ev{}", ts.replace('.', "")).into();
    serde_json::to_vec(&event).unwrap()
}

/// POSTs a body, correctly signed, to the tenant's connector of `platform`; asserts 200.
pub async fn deliver(app: &super::TestApp, tenant: &Provisioned, platform: Platform, body: Vec<u8>) {
    let response = post(
        app,
        &tenant.hook_path(platform),
        &signed_headers(platform, &body),
        body,
    )
    .await;
    assert_eq!(response.status(), 200, "{:?}", response.text().await);
}
