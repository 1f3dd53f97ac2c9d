//! The least-privilege runtime (`CB_APP_DATABASE_URL`): the pool logs in as a role that is
//! a member of `channel_bridge_app` and nothing more, so no statement can step back to a
//! privileged role; and the app role may update only the columns of `tenants` and
//! `api_keys` the code updates. Each test creates its own login role (roles are
//! cluster-wide) and drops it when it ends, pass or fail.

use std::sync::Arc;

use channel_bridge::db::{self, TenantTx};
use channel_bridge::domain::Platform;
use channel_bridge::settings::DatabaseSettings;
use reqwest::Method;
use serde_json::{json, Value};
use sqlx::{Connection, Executor, PgConnection, PgPool};

use crate::support::platforms::*;
use crate::support::{admin_url, spawn_app_on, TestApp, TestDb};

const OPERATOR: &str = "operator-token-0123456789";

/// A login role created for one test, dropped when the test ends.
struct LoginRole {
    name: String,
    password: String,
}

impl LoginRole {
    /// A role that can log in, with the app role's privileges through membership (INHERIT,
    /// the default), as README tells operators to create it.
    async fn member_of_app_role(db: &TestDb) -> Self {
        Self::create(db, "IN ROLE channel_bridge_app").await
    }

    /// A role that can log in and has no privileges at all.
    async fn outsider(db: &TestDb) -> Self {
        Self::create(db, "").await
    }

    async fn create(db: &TestDb, membership: &str) -> Self {
        let role = Self {
            name: format!("cbt_rt_{}", uuid::Uuid::new_v4().simple()),
            password: uuid::Uuid::new_v4().simple().to_string(),
        };
        let mut owner = db.owner_conn().await;
        owner
            .execute(
                format!(
                    "create role {} login nosuperuser nobypassrls password '{}' {membership}",
                    role.name, role.password
                )
                .as_str(),
            )
            .await
            .expect("the test user may create roles");
        role
    }

    /// The test database's URL, logging in as this role.
    fn url(&self, db: &TestDb) -> String {
        let mut url = reqwest::Url::parse(&db.url()).expect("test URL is valid");
        url.set_username(&self.name).expect("URL has a host");
        url.set_password(Some(&self.password)).expect("URL has a host");
        url.to_string()
    }

    /// Database settings whose pool logs in as this role.
    fn settings(&self, db: &TestDb) -> DatabaseSettings {
        db.settings().with_app_url(self.url(db))
    }
}

impl Drop for LoginRole {
    fn drop(&mut self) {
        let statement = format!("drop role if exists {}", self.name);
        // As TestDb's drop: outside async context, on a thread with its own runtime.
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            runtime.block_on(async {
                let mut admin = PgConnection::connect(&admin_url()).await.ok()?;
                admin.execute(statement.as_str()).await.ok()
            })
        })
        .join();
    }
}

/// A migrated database, a login role for it, and the application whose pool (and the
/// test's `app.pool`) logs in as that role. The role is declared first so it outlives the
/// application's connections.
async fn app_with_login_role() -> (LoginRole, TestApp) {
    let db = Arc::new(TestDb::migrated().await);
    let role = LoginRole::member_of_app_role(&db).await;
    let app_url = role.url(&db);
    let app = spawn_app_on(&db, |settings| {
        settings.database = settings.database.clone().with_app_url(app_url);
        settings.operator_token = Some(OPERATOR.to_owned().into());
    })
    .await;
    (role, app)
}

async fn call(app: &TestApp, method: Method, path: &str, token: &str, body: Option<Value>) -> (u16, Value) {
    let mut request = app.client.request(method, app.url(path)).bearer_auth(token);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.expect("request reaches the app");
    let status = response.status().as_u16();
    let text = response.text().await.expect("response body is readable");
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

fn sql_state(err: &sqlx::Error) -> String {
    err.as_database_error()
        .and_then(|e| e.code())
        .unwrap_or_default()
        .into_owned()
}

#[tokio::test]
async fn with_a_login_runtime_role_webhooks_are_recorded_and_the_admin_api_works() {
    let (role, app) = app_with_login_role().await;
    let (session, current): (String, String) =
        sqlx::query_as("select session_user::text, current_user::text")
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!(
        (session.as_str(), current.as_str()),
        (role.name.as_str(), role.name.as_str()),
        "the pool logs in as the runtime role and switches to no other"
    );

    // Operator: a tenant, its cap, a key (inserts into tenants and api_keys, an update).
    let (status, created) = call(
        &app,
        Method::POST,
        "/v1/operator/tenants",
        OPERATOR,
        Some(json!({"slug": "acme", "name": "Acme"})),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    let tenant = created["tenant_id"].as_str().unwrap().to_owned();
    let (status, limits) = call(
        &app,
        Method::PATCH,
        &format!("/v1/operator/tenants/{tenant}"),
        OPERATOR,
        Some(json!({"max_in_flight": 25})),
    )
    .await;
    assert_eq!((status, limits["max_in_flight"].clone()), (200, json!(25)));

    // A provisioned tenant with connectors and an admin key; a webhook is recorded.
    let p = provision_tenant(&app.pool, "globex").await;
    let (status, issued) = call(
        &app,
        Method::POST,
        &format!("/v1/operator/tenants/{}/keys", p.tenant),
        OPERATOR,
        Some(json!({"name": "ci"})),
    )
    .await;
    assert_eq!(status, 201, "{issued}");
    let key = issued["key"].as_str().unwrap().to_owned();
    deliver(&app, &p, Platform::Telegram, telegram_text(700_001, "hello")).await;

    // Tenant admin: the message is listed (authentication records the key's use), the
    // tenant's settings change and its dispatch secret rotates.
    let (status, page) = call(&app, Method::GET, "/v1/admin/messages", &key, None).await;
    assert_eq!(status, 200, "{page}");
    let items = page["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{page}");
    assert_eq!(items[0]["request_content"], json!("hello"), "{page}");
    let patch = json!({"agent_url": "http://127.0.0.1:9/agent", "name": "Globex Inc"});
    let (status, settings) = call(&app, Method::PATCH, "/v1/admin/tenant", &key, Some(patch)).await;
    assert_eq!((status, settings["name"].clone()), (200, json!("Globex Inc")));
    let (status, rotated) = call(
        &app,
        Method::POST,
        "/v1/admin/tenant/rotate-dispatch-secret",
        &key,
        None,
    )
    .await;
    assert_eq!(status, 200, "{rotated}");
    assert_ne!(
        rotated["dispatch_secret"].as_str(),
        Some(p.dispatch_secret.as_str())
    );

    // Revoking the key (an update of api_keys) shuts it out.
    let revoke = format!("/v1/operator/keys/{}", issued["id"].as_str().unwrap());
    let (status, revoked) = call(&app, Method::DELETE, &revoke, OPERATOR, None).await;
    assert_eq!(status, 200, "{revoked}");
    let (status, _) = call(&app, Method::GET, "/v1/admin/messages", &key, None).await;
    assert_eq!(status, 401);

    let mut owner = app.db.owner_conn().await;
    let used: bool = sqlx::query_scalar("select last_used_at is not null from api_keys where prefix = $1")
        .bind(issued["prefix"].as_str().unwrap())
        .fetch_one(&mut owner)
        .await
        .unwrap();
    assert!(used, "authentication recorded the key's use");
}

#[tokio::test]
async fn through_the_login_role_reset_role_stays_unprivileged_and_no_privileged_role_can_be_set() {
    let db = TestDb::migrated().await;
    let role = LoginRole::member_of_app_role(&db).await;
    let pool = db::connect_pool(&role.settings(&db)).unwrap();
    let mut conn = pool.acquire().await.unwrap();
    let mut owner = db.owner_conn().await;
    let owner_name: String = sqlx::query_scalar("select current_user::text")
        .fetch_one(&mut owner)
        .await
        .unwrap();

    conn.execute("reset role").await.unwrap();
    let (current, superuser, bypass): (String, bool, bool) = sqlx::query_as(
        "select current_user::text, rolsuper, rolbypassrls from pg_roles where rolname = current_user",
    )
    .fetch_one(&mut *conn)
    .await
    .unwrap();
    assert_eq!(
        current, role.name,
        "RESET ROLE leaves the session as the login role"
    );
    assert!(
        !superuser && !bypass,
        "the login role is no superuser and does not bypass RLS"
    );

    for privileged in ["postgres".to_owned(), owner_name] {
        let err = conn
            .execute(format!("set role \"{privileged}\"").as_str())
            .await
            .expect_err("SET ROLE to a privileged role must fail");
        assert_eq!(
            sql_state(&err),
            "42501",
            "permission denied to set role {privileged}: {err}"
        );
    }
    let err = conn
        .execute("set session authorization postgres")
        .await
        .expect_err("SET SESSION AUTHORIZATION must fail");
    assert_eq!(sql_state(&err), "42501", "{err}");
}

#[tokio::test]
async fn the_app_role_cannot_move_a_key_to_another_tenant_nor_rekey_a_tenant() {
    let db = TestDb::migrated().await;
    let role = LoginRole::member_of_app_role(&db).await;
    let login_pool = db::connect_pool(&role.settings(&db)).unwrap();
    let a = provision_tenant(&login_pool, "acme").await;
    let b = provision_tenant(&login_pool, "globex").await;
    let issued = channel_bridge::admin::operator::issue(&login_pool, a.tenant, "ci")
        .await
        .unwrap();
    let key_id = issued.id;

    let refused = [
        ("update api_keys set tenant_id = $2 where id = $1", "api_keys.tenant_id"),
        ("update api_keys set key_hash = sha256($2::text::bytea) where id = $1", "api_keys.key_hash"),
        ("update api_keys set prefix = $2::text where id = $1", "api_keys.prefix"),
        ("update tenants set id = $2 where id = (select tenant_id from api_keys where id = $1)", "tenants.id"),
        ("update tenants set slug = 'taken-over' where id = (select tenant_id from api_keys where id = $1) and $2::uuid is not null", "tenants.slug"),
        ("delete from api_keys where id = $1 and $2::uuid is not null", "delete api_keys"),
    ];
    // Both ways of running as the app role: the login role and the single-URL `SET ROLE`.
    for pool in [&login_pool, &db.app_pool()] {
        for (statement, what) in refused {
            let err = sqlx::query(statement)
                .bind(key_id)
                .bind(b.tenant)
                .execute(pool)
                .await
                .expect_err(what);
            assert_eq!(sql_state(&err), "42501", "{what} must be refused: {err}");
        }
    }

    let mut owner = db.owner_conn().await;
    let (tenant, slug): (uuid::Uuid, String) = sqlx::query_as(
        "select k.tenant_id, t.slug from api_keys k join tenants t on t.id = k.tenant_id where k.id = $1",
    )
    .bind(key_id)
    .fetch_one(&mut owner)
    .await
    .unwrap();
    assert_eq!((tenant, slug.as_str()), (a.tenant.0, "acme"));
}

#[tokio::test]
async fn rls_still_hides_other_tenants_rows_through_the_login_role() {
    let db = TestDb::migrated().await;
    let role = LoginRole::member_of_app_role(&db).await;
    let pool = db::connect_pool(&role.settings(&db)).unwrap();
    let a = provision_tenant(&pool, "acme").await;
    let b = provision_tenant(&pool, "globex").await;

    let count = |statement: &'static str, pool: &PgPool| {
        let pool = pool.clone();
        async move {
            let mut tx = TenantTx::begin(&pool, b.tenant).await.unwrap();
            let n: i64 = sqlx::query_scalar(statement)
                .bind(a.tenant)
                .fetch_one(tx.conn())
                .await
                .unwrap();
            n
        }
    };
    assert_eq!(
        count(
            "select count(*) from channel_connectors where tenant_id = $1",
            &pool
        )
        .await,
        0,
        "tenant B cannot read tenant A's connectors, even by tenant id"
    );
    assert_eq!(
        count("select count(*) from channel_links where tenant_id = $1", &pool).await,
        0,
        "tenant B cannot read tenant A's links, even by tenant id"
    );
    assert_eq!(
        count(
            "select count(*) from channel_connectors where tenant_id <> $1",
            &pool
        )
        .await,
        3,
        "tenant B sees its own three connectors"
    );
    let outside: i64 = sqlx::query_scalar("select count(*) from channel_connectors")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(outside, 0, "no tenant set: no rows");
}

#[tokio::test]
async fn serve_refuses_a_runtime_url_with_more_or_less_than_the_app_roles_privileges() {
    let db = TestDb::migrated().await;
    let member = LoginRole::member_of_app_role(&db).await;
    let outsider = LoginRole::outsider(&db).await;

    db::check_ready_to_serve(&member.settings(&db))
        .await
        .expect("a member of channel_bridge_app may serve");

    let owner = db.settings().with_app_url(db.url());
    let err = db::check_ready_to_serve(&owner)
        .await
        .expect_err("the schema owner must not be the runtime role")
        .to_string();
    assert!(err.contains("CB_APP_DATABASE_URL"), "{err}");
    assert!(err.contains("superuser") || err.contains("owns tables"), "{err}");

    let err = db::check_ready_to_serve(&outsider.settings(&db))
        .await
        .expect_err("a role without the app role's privileges cannot serve")
        .to_string();
    assert!(err.contains("CB_APP_DATABASE_URL"), "{err}");
    assert!(
        !err.contains(&outsider.name) && !err.contains(&outsider.password),
        "{err}"
    );
}
