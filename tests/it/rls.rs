//! Row-level security is the security boundary. These tests go through the application's
//! own pool (role `channel_bridge_app`) and prove the policies, not the queries: every
//! attack below names the other tenant's keys explicitly, as a buggy query would.

use channel_bridge::db::{self, TenantTx};
use channel_bridge::domain::{MessageId, MessageStatus, Platform, TenantId};
use channel_bridge::provision;
use channel_bridge::secrets::Keyring;
use sqlx::PgPool;

use crate::support::TestDb;

/// One row in each tenant table, owned by one tenant.
struct Seeded {
    tenant: TenantId,
    connector: uuid::Uuid,
    message: MessageId,
}

async fn seed(pool: &PgPool, slug: &str) -> Seeded {
    let tenant = provision::create_tenant(pool, &Keyring::ephemeral(), slug, slug, None)
        .await
        .unwrap()
        .tenant_id;
    let mut new = channel_bridge::shapes::NewConnector::new(
        Platform::Telegram,
        secrecy::SecretString::from(format!("{slug}-secret")),
    );
    new.settings.name = Some(slug.into());
    let connector = provision::add_connector(pool, &Keyring::ephemeral(), tenant, &new)
        .await
        .unwrap()
        .connector_id;
    provision::add_link(
        pool,
        tenant,
        Platform::Telegram,
        "408258968",
        &format!("{slug}-user"),
    )
    .await
    .unwrap();

    let mut tx = TenantTx::begin(pool, tenant).await.unwrap();
    let metadata = serde_json::json!({});
    let message = db::messages::insert_many(
        &mut tx,
        &[db::messages::NewMessage {
            connector_id: connector,
            platform: Platform::Telegram,
            idempotency_key: "1",
            platform_message_id: "10",
            address: &channel_bridge::domain::Address {
                chat_id: "408258968".into(),
                platform_user_id: "408258968".into(),
                ..Default::default()
            },
            reply_to_id: None,
            user_id: Some("user"),
            conversation_key: &channel_bridge::domain::ConversationKey::user("user"),
            request_content: "secret words of tenant",
            status: MessageStatus::Executed,
            decision: None,
            metadata: &metadata,
            attachments: None,
            action: None,
            command: None,
        }],
    )
    .await
    .unwrap()
    .remove(0)
    .expect("first insert is new");
    db::parts::insert_reply_parts(
        &mut tx,
        message,
        &db::parts::Reply::text(vec!["answer".to_owned()]),
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    Seeded {
        tenant,
        connector: connector.0,
        message,
    }
}

/// Each tenant table, with a statement that targets tenant B's row by its full primary key.
const TABLES: [(&str, &str); 4] = [
    ("channel_connectors", "tenant_id = $1 and id = $2"),
    (
        "channel_links",
        "tenant_id = $1 and platform = 'telegram' and platform_user_id = '408258968'",
    ),
    ("channel_messages", "tenant_id = $1 and id = $3"),
    (
        "channel_replies",
        "tenant_id = $1 and message_id = $3 and part_index = 0",
    ),
];

async fn count_as(
    pool: &PgPool,
    viewer: Option<TenantId>,
    table: &str,
    predicate: &str,
    target: &Seeded,
) -> i64 {
    let query = format!("select count(*) from {table} where {predicate}");
    let count = |conn| {
        sqlx::query_scalar(&query)
            .bind(target.tenant)
            .bind(target.connector)
            .bind(target.message)
            .fetch_one(conn)
    };
    match viewer {
        Some(viewer) => count(TenantTx::begin(pool, viewer).await.unwrap().conn())
            .await
            .unwrap(),
        None => count(&mut *pool.begin().await.unwrap()).await.unwrap(),
    }
}

async fn rows_affected_as(pool: &PgPool, viewer: TenantId, statement: &str, target: &Seeded) -> u64 {
    let mut tx = TenantTx::begin(pool, viewer).await.unwrap();
    let done = sqlx::query(statement)
        .bind(target.tenant)
        .bind(target.connector)
        .bind(target.message)
        .execute(tx.conn())
        .await
        .unwrap();
    tx.commit().await.unwrap();
    done.rows_affected()
}

#[tokio::test]
async fn tenant_a_cannot_select_update_or_delete_tenant_b_rows_even_by_primary_key() {
    let test_db = TestDb::migrated().await;
    let pool = test_db.app_pool();
    let a = seed(&pool, "tenant-a").await;
    let b = seed(&pool, "tenant-b").await;

    for (table, predicate) in TABLES {
        assert_eq!(
            count_as(&pool, Some(b.tenant), table, predicate, &b).await,
            1,
            "B sees its own {table} row"
        );
        assert_eq!(
            count_as(&pool, Some(a.tenant), table, predicate, &b).await,
            0,
            "A cannot select B's {table} row"
        );

        let touch = match table {
            "channel_connectors" => "name = 'hijacked'",
            "channel_links" => "user_id = 'hijacked'",
            "channel_messages" => "request_content = 'hijacked'",
            _ => "content = 'hijacked'",
        };
        let update = format!("update {table} set {touch} where {predicate}");
        assert_eq!(
            rows_affected_as(&pool, a.tenant, &update, &b).await,
            0,
            "A cannot update B's {table} row"
        );
        let delete = format!("delete from {table} where {predicate}");
        assert_eq!(
            rows_affected_as(&pool, a.tenant, &delete, &b).await,
            0,
            "A cannot delete B's {table} row"
        );
        let untouched = format!("{predicate} and {}", touch.replace('=', "<>"));
        assert_eq!(
            count_as(&pool, Some(b.tenant), table, &untouched, &b).await,
            1,
            "B's {table} row is unchanged"
        );
    }

    // And through the application's own functions, by id.
    let mut tx = TenantTx::begin(&pool, a.tenant).await.unwrap();
    assert!(db::messages::get(&mut tx, b.message).await.unwrap().is_none());
    assert!(db::parts::reply_parts(&mut tx, b.message)
        .await
        .unwrap()
        .is_empty());
    assert!(db::messages::get(&mut tx, a.message).await.unwrap().is_some());
}

#[tokio::test]
async fn with_no_tenant_set_selects_return_no_rows_and_inserts_fail() {
    let test_db = TestDb::migrated().await;
    let pool = test_db.app_pool();
    let a = seed(&pool, "tenant-a").await;

    for (table, predicate) in TABLES {
        assert_eq!(
            count_as(&pool, None, table, predicate, &a).await,
            0,
            "{table} hidden without a tenant"
        );
        assert_eq!(
            count_as(&pool, None, table, "true", &a).await,
            0,
            "{table} empty without a tenant"
        );
    }

    // Once a backend has seen the setting, "unset" reads back as '' rather than NULL; the
    // policy's nullif keeps that failing closed instead of erroring.
    let mut conn = pool.acquire().await.unwrap();
    let mut tx = sqlx::Connection::begin(&mut *conn).await.unwrap();
    sqlx::raw_sql("set local app.tenant_id = ''")
        .execute(&mut *tx)
        .await
        .unwrap();
    let seen: i64 = sqlx::query_scalar("select count(*) from channel_messages")
        .fetch_one(&mut *tx)
        .await
        .unwrap();
    assert_eq!(seen, 0);
    tx.rollback().await.unwrap();

    let insert = sqlx::query(
        "insert into channel_links (tenant_id, platform, platform_user_id, user_id) values ($1, 'slack', 'U9', 'mallory')",
    )
    .bind(a.tenant)
    .execute(&pool)
    .await;
    assert_rls_violation(insert);
}

#[tokio::test]
async fn inserting_a_row_that_names_another_tenant_fails() {
    let test_db = TestDb::migrated().await;
    let pool = test_db.app_pool();
    let a = seed(&pool, "tenant-a").await;
    let b = seed(&pool, "tenant-b").await;

    let attempts = [
        "insert into channel_links (tenant_id, platform, platform_user_id, user_id) values ($1, 'slack', 'U9', 'mallory')",
        "insert into channel_connectors (tenant_id, id, platform, verification_secret) values ($1, gen_random_uuid(), 'slack', 'x')",
        "insert into channel_messages (tenant_id, id, connector_id, platform, idempotency_key, platform_message_id, chat_id,
             platform_user_id, conversation_key, request_content, status)
         values ($1, gen_random_uuid(), $2, 'telegram', 'k', 'm', 'c', 'u', 'k', 'text', 'accepted')",
        "insert into channel_replies (tenant_id, message_id, part_index, content) values ($1, $3, 7, 'x')",
    ];
    for statement in attempts {
        let mut tx = TenantTx::begin(&pool, a.tenant).await.unwrap();
        let result = sqlx::query(statement)
            .bind(b.tenant)
            .bind(b.connector)
            .bind(b.message)
            .execute(tx.conn())
            .await;
        assert_rls_violation(result);
    }
}

#[tokio::test]
async fn the_pool_role_is_neither_superuser_nor_bypassrls() {
    let test_db = TestDb::migrated().await;
    let pool = test_db.app_pool();
    let (role, superuser, bypass): (String, bool, bool) = sqlx::query_as(
        "select rolname::text, rolsuper, rolbypassrls from pg_roles where rolname = current_user",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    // On Citus the pool logs in as a runtime role, a member of the app role.
    let expected = match crate::support::citus::enabled() {
        true => crate::support::citus::RUNTIME_ROLE,
        false => db::APP_ROLE,
    };
    assert_eq!(role, expected);
    assert!(!superuser, "the app role must not be a superuser");
    assert!(!bypass, "the app role must not bypass RLS");

    let owns_tables: i64 = sqlx::query_scalar(
        "select count(*) from pg_tables where schemaname = 'public' and tableowner = current_user",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(owns_tables, 0, "a table owner could alter its policies");
}

fn assert_rls_violation(result: Result<sqlx::postgres::PgQueryResult, sqlx::Error>) {
    let err = result.expect_err("insert must be refused by row-level security");
    let code = err
        .as_database_error()
        .and_then(|e| e.code())
        .unwrap_or_default()
        .into_owned();
    assert_eq!(
        code, "42501",
        "insufficient_privilege (RLS WITH CHECK), got {err}"
    );
}

/// The suite's guard: any `set_config('app.tenant_id', …)` the code sends fails,
/// so a test of every path that sets the tenant proves it uses `SET LOCAL`.
#[tokio::test]
async fn set_config_of_the_tenant_fails_in_test_databases_and_set_local_works() {
    let db = TestDb::migrated().await;
    let pool = db.app_pool();
    let mut conn = pool.acquire().await.unwrap();
    let refused = sqlx::query("select set_config('app.tenant_id', $1, true)")
        .bind(uuid::Uuid::new_v4().to_string())
        .execute(&mut *conn)
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("forbidden"), "{refused}");
    let other: String = sqlx::query_scalar("select set_config('application_name', 'guarded', false)")
        .fetch_one(&mut *conn)
        .await
        .unwrap();
    assert_eq!(other, "guarded", "other settings pass through");
    drop(conn);
    let tenant = channel_bridge::domain::TenantId::new();
    let mut tx = TenantTx::begin(&pool, tenant).await.unwrap();
    let seen: String = sqlx::query_scalar("select current_setting('app.tenant_id')")
        .fetch_one(tx.conn())
        .await
        .unwrap();
    assert_eq!(seen, tenant.to_string());
}
