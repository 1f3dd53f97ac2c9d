//! Migrations, readiness, provisioning.

use channel_bridge::db::{self, TenantTx};
use channel_bridge::domain::{Platform, TenantId, UnlinkedPolicy};
use channel_bridge::provision;
use channel_bridge::secrets::Keyring;
use channel_bridge::shapes::{ConnectorSettings, NewConnector};
use secrecy::SecretString;

use crate::support::db_proxy::{upstream_addr, DbProxy};
use crate::support::{spawn_app_with, url_with, TestDb};

#[tokio::test]
async fn migrate_applies_on_an_empty_database_and_a_second_run_is_a_no_op() {
    let test_db = TestDb::empty().await;
    let first = db::migrate(&test_db.settings()).await.expect("first migrate");
    assert!(!first.applied.is_empty(), "first run applies every migration");
    let second = db::migrate(&test_db.settings()).await.expect("second migrate");
    assert_eq!(second.applied, Vec::<i64>::new());
    assert!(!second.database_created);

    let mut owner = test_db.owner_conn().await;
    let tables: Vec<String> = sqlx::query_scalar(
        "select relname::text from pg_class
          where relkind = 'r' and relnamespace = 'public'::regnamespace and relname not like '\\_%'
          order by 1",
    )
    .fetch_all(&mut owner)
    .await
    .unwrap();
    assert_eq!(
        tables,
        [
            "agent_events",
            "api_keys",
            "audit_log",
            "channel_connectors",
            "channel_links",
            "channel_messages",
            "channel_notices",
            "channel_reactions",
            "channel_replies",
            "console_sessions",
            "conversation_holds",
            "dispatch_queue_0",
            "dispatch_queue_1",
            "dispatch_queue_generation",
            "feedback_queue",
            "slack_read_budget",
            "tenants"
        ]
    );
    // Statistics from the start, whether autovacuum comes or not: migrate analyzes every table.
    let unanalyzed: Vec<String> = sqlx::query_scalar(
        "select relname::text from pg_stat_user_tables
          where schemaname = 'public' and last_analyze is null and relname not like '\\_%'",
    )
    .fetch_all(&mut owner)
    .await
    .unwrap();
    assert!(unanalyzed.is_empty(), "not analyzed by migrate: {unanalyzed:?}");
}

/// A database migrated before migration 19's comments were reworded recorded the old text's
/// checksum: migrate takes the new file, and still refuses a file that differs otherwise.
#[tokio::test]
async fn migrate_accepts_a_reworded_migration_and_refuses_any_other_change() {
    use sha2::Digest;
    const HISTORY_SCOPE: i64 = 20261122000019;
    const OLD_TEXT: &str =
        "d89e814ad98c4d1b1b57893726493c884ca9ee6e472aeb05b507c03620c5e1f594427741bc887059438c2c85ee23d62e";
    let test_db = TestDb::migrated().await;
    let mut owner = test_db.owner_conn().await;
    let recorded = |checksum: &'static str| {
        sqlx::query("update _sqlx_migrations set checksum = decode($1, 'hex') where version = $2")
            .bind(checksum)
            .bind(HISTORY_SCOPE)
    };
    recorded(OLD_TEXT).execute(&mut owner).await.unwrap();
    db::migrate(&test_db.settings())
        .await
        .expect("a reworded migration is taken");
    let checksum: Vec<u8> = sqlx::query_scalar("select checksum from _sqlx_migrations where version = $1")
        .bind(HISTORY_SCOPE)
        .fetch_one(&mut owner)
        .await
        .unwrap();
    let file = include_str!("../../migrations/20261122000019_history_scope.sql");
    assert_eq!(checksum, sha2::Sha384::digest(file.as_bytes()).to_vec());

    recorded("00ff").execute(&mut owner).await.unwrap();
    let err = db::migrate(&test_db.settings())
        .await
        .expect_err("another change is refused");
    assert!(format!("{err:#}").contains("20261122000019"), "{err:#}");
}

#[tokio::test]
async fn migrate_creates_the_database_when_it_does_not_exist() {
    let name = format!("cbt_{}", uuid::Uuid::new_v4().simple());
    let settings = channel_bridge::settings::DatabaseSettings::from_url(url_with(&name, None));
    let guard = TestDb { name };
    let report = db::migrate(&settings)
        .await
        .expect("migrate creates and migrates");
    assert!(report.database_created);
    drop(guard);
}

#[tokio::test]
async fn readyz_answers_503_while_the_database_is_unreachable_and_200_when_it_is_back() {
    let proxy = DbProxy::start(upstream_addr()).await;
    let app = spawn_app_with(|settings, db| {
        let keys = settings.database.secrets.clone();
        settings.database =
            channel_bridge::settings::DatabaseSettings::from_url(url_with(&db.name, Some(proxy.addr)))
                .with_secrets(keys);
        settings.database.acquire_timeout_ms = 500;
    })
    .await;

    let ready = app.client.get(app.url("/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 200);

    proxy.cut();
    let down = app.client.get(app.url("/readyz")).send().await.unwrap();
    assert_eq!(down.status(), 503);
    let body: serde_json::Value = down.json().await.unwrap();
    assert_eq!(body["status"], "database unavailable");

    proxy.restore();
    let back = app.client.get(app.url("/readyz")).send().await.unwrap();
    assert_eq!(back.status(), 200);

    let health = app.client.get(app.url("/healthz")).send().await.unwrap();
    assert_eq!(health.status(), 200);
    assert!(health.headers().contains_key("x-request-id"));
}

#[tokio::test]
async fn metrics_are_served_in_prometheus_text_format() {
    let app = crate::support::spawn_app().await;
    let response = app.client.get(app.url("/metrics")).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let content_type = response.headers()["content-type"].to_str().unwrap().to_owned();
    assert!(content_type.starts_with("text/plain"), "{content_type}");
}

fn slack_connector() -> NewConnector {
    let mut new = NewConnector::new(Platform::Slack, SecretString::from("signing-secret".to_owned()));
    new.secrets.outbound_token = Some(SecretString::from("xoxb-token".to_owned()));
    new.settings = ConnectorSettings {
        name: Some("workspace".into()),
        external_id: Some("T0001".into()),
        app_id: Some("A0001".into()),
        bot_user_id: Some("UBOT1".into()),
        bot_id: Some("BBOT1".into()),
        unlinked_policy: Some(UnlinkedPolicy::Deny),
        ..ConnectorSettings::default()
    };
    new
}

#[tokio::test]
async fn provisioned_tenant_connector_and_link_are_visible_to_their_tenant_only() {
    let test_db = TestDb::migrated().await;
    let pool = test_db.app_pool();
    let acme = provision::create_tenant(&pool, &Keyring::ephemeral(), "acme", "Acme", None)
        .await
        .unwrap();
    let other = provision::create_tenant(&pool, &Keyring::ephemeral(), "other", "Other", None)
        .await
        .unwrap();
    assert!(acme.dispatch_secret.starts_with("whsec_"));

    let created = provision::add_connector(&pool, &Keyring::ephemeral(), acme.tenant_id, &slack_connector())
        .await
        .unwrap();
    assert_eq!(
        created.webhook_path,
        format!("/v1/hooks/{}/{}", acme.tenant_id, created.connector_id)
    );
    provision::add_link(&pool, acme.tenant_id, Platform::Slack, "U0USER1", "alice")
        .await
        .unwrap();

    let mut tx = TenantTx::begin(&pool, acme.tenant_id).await.unwrap();
    let connector = db::connectors::get(&mut tx, &Keyring::ephemeral(), created.connector_id)
        .await
        .unwrap()
        .expect("own connector");
    assert_eq!(connector.profile.bot_id.as_deref(), Some("BBOT1"));
    assert_eq!(
        db::links::resolve(&mut tx, Platform::Slack, "U0USER1")
            .await
            .unwrap()
            .as_deref(),
        Some("alice")
    );
    tx.commit().await.unwrap();

    let mut tx = TenantTx::begin(&pool, other.tenant_id).await.unwrap();
    assert!(
        db::connectors::get(&mut tx, &Keyring::ephemeral(), created.connector_id)
            .await
            .unwrap()
            .is_none()
    );
    assert!(db::connectors::list(&mut tx, &Keyring::ephemeral())
        .await
        .unwrap()
        .is_empty());
    assert_eq!(
        db::links::resolve(&mut tx, Platform::Slack, "U0USER1")
            .await
            .unwrap(),
        None
    );
    assert!(db::links::list(&mut tx).await.unwrap().is_empty());
}

#[tokio::test]
async fn provisioning_errors_are_clear() {
    let test_db = TestDb::migrated().await;
    let pool = test_db.app_pool();
    provision::create_tenant(&pool, &Keyring::ephemeral(), "acme", "Acme", None)
        .await
        .unwrap();
    let taken = provision::create_tenant(&pool, &Keyring::ephemeral(), "acme", "Again", None)
        .await
        .unwrap_err();
    assert_eq!(taken.to_string(), "a tenant with slug `acme` already exists");

    let missing = TenantId::new();
    let err = provision::add_connector(&pool, &Keyring::ephemeral(), missing, &slack_connector())
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), format!("unknown tenant {missing}"));
}

#[tokio::test]
async fn stopping_the_application_drains_and_closes_the_listener() {
    let app = crate::support::spawn_app().await;
    let addr = app.addr;
    assert_eq!(
        app.client.get(app.url("/healthz")).send().await.unwrap().status(),
        200
    );
    app.stop().await.expect("clean shutdown");
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "listener is closed after shutdown"
    );
}

/// A turn's status changes (accepted → dispatching → executed) are heap-only (HOT) updates:
/// no index of `channel_messages` names a column they change, so none gets a new entry per
/// change (migration 32's index on `status` had made every one a full update).
#[tokio::test]
async fn a_turns_status_change_is_a_heap_only_update() {
    use crate::support::platforms::{deliver, provision_tenant, telegram_text};

    let app = crate::support::spawn_app().await;
    let tenant = provision_tenant(&app.pool, "acme").await;
    deliver(&app, &tenant, Platform::Telegram, telegram_text(9901, "hello")).await;
    let mut tx = TenantTx::begin(&app.pool, tenant.tenant).await.unwrap();
    let id: channel_bridge::domain::MessageId = sqlx::query_scalar("select id from channel_messages")
        .fetch_one(tx.conn())
        .await
        .unwrap();
    let dispatching = channel_bridge::turn::apply::begin_dispatch(&mut tx, &[id])
        .await
        .unwrap();
    assert_eq!(dispatching.len(), 1);
    // This transaction's own counts, before any statistics are flushed.
    let (updated, hot): (i64, i64) = sqlx::query_as(
        "select pg_stat_get_xact_tuples_updated('channel_messages'::regclass),
                pg_stat_get_xact_tuples_hot_updated('channel_messages'::regclass)",
    )
    .fetch_one(tx.conn())
    .await
    .unwrap();
    assert_eq!((updated, hot), (1, 1), "(updated, of which heap-only)");
    tx.rollback().await.unwrap();
}

/// The turn writer's transactions plan their statements once per connection on plain
/// PostgreSQL, and only they: the setting ends with the transaction. On Citus,
/// which cannot plan distributed statements generically, they keep `auto`.
#[tokio::test]
async fn the_turn_writers_transactions_alone_use_generic_plans_and_only_on_plain_postgresql() {
    use crate::support::platforms::provision_tenant;

    async fn mode(conn: &mut sqlx::PgConnection) -> String {
        sqlx::query_scalar("select current_setting('plan_cache_mode')")
            .fetch_one(conn)
            .await
            .unwrap()
    }

    let app = crate::support::spawn_app().await;
    let tenant = provision_tenant(&app.pool, "acme").await;
    let expected = match crate::support::citus::enabled() {
        true => "auto",
        false => "force_generic_plan",
    };
    let mut batch = TenantTx::begin_batch(&app.pool, tenant.tenant).await.unwrap();
    assert_eq!(mode(batch.conn()).await, expected);
    let scoped: Option<String> = sqlx::query_scalar("select current_setting('app.tenant_id', true)")
        .fetch_one(batch.conn())
        .await
        .unwrap();
    assert_eq!(
        scoped,
        Some(tenant.tenant.0.to_string()),
        "the tenant is set as by `begin`"
    );
    batch.commit().await.unwrap();

    let mut other = TenantTx::begin(&app.pool, tenant.tenant).await.unwrap();
    assert_eq!(mode(other.conn()).await, "auto");
    other.rollback().await.unwrap();
    // Each connection of the pool, the one the batch ran on included.
    let mut conns = Vec::new();
    for _ in 0..3 {
        let mut conn = app.pool.acquire().await.unwrap();
        assert_eq!(mode(&mut conn).await, "auto");
        conns.push(conn);
    }
}
