//! Running on Citus (docs/citus.md), on the live cluster of `scripts/test-citus`: what migrate
//! and `citus distribute` make of the schema, and what `serve` refuses. The rest of the
//! suite's Citus run (ingress, dispatch, replies, admin, console, lifecycle, RLS as the
//! runtime role) is the ordinary tests on the cluster. Without a cluster these say so and
//! pass.

use channel_bridge::settings::DatabaseSettings;
use serde_json::Value;
use sqlx::{Connection, Executor, PgConnection};

use crate::support::platforms::*;
use crate::support::{citus, run_cli, spawn_app, TestDb};

/// The cluster's workers, or `None` after saying the test needs one.
fn cluster(test: &str) -> Option<Vec<String>> {
    let workers = citus::workers();
    if workers.is_none() {
        eprintln!("{test}: needs a Citus cluster; scripts/test-citus runs it on one");
    }
    workers
}

/// Each table of the schema Citus knows: (table, kind `n` reference / `h` hash, colocation).
async fn distribution(owner: &mut PgConnection) -> Vec<(String, String, i32)> {
    sqlx::query_as(
        "select logicalrelid::text, partmethod::text, colocationid from pg_dist_partition
          where logicalrelid::regclass::text not like 'test_guard%' order by 1",
    )
    .fetch_all(owner)
    .await
    .unwrap()
}

const TENANT_TABLES: [&str; 10] = [
    "agent_events",
    "audit_log",
    "channel_connectors",
    "channel_links",
    "channel_messages",
    "channel_notices",
    "channel_reactions",
    "channel_replies",
    "conversation_holds",
    "slack_read_budget",
];

fn assert_distributed_as_designed(tables: &[(String, String, i32)]) {
    let kind = |name: &str| tables.iter().find(|t| t.0 == name).map(|t| (t.1.as_str(), t.2));
    assert_eq!(kind("tenants").map(|k| k.0), Some("n"), "{tables:?}");
    assert_eq!(kind("api_keys").map(|k| k.0), Some("n"), "{tables:?}");
    let group = kind("channel_connectors")
        .expect("channel_connectors is distributed")
        .1;
    for table in TENANT_TABLES {
        assert_eq!(
            kind(table),
            Some(("h", group)),
            "{table}: hash-distributed, co-located"
        );
    }
    for local in COORDINATOR_TABLES {
        assert_eq!(
            kind(local),
            None,
            "{local} stays a plain table on the coordinator"
        );
    }
    assert_eq!(tables.len(), TENANT_TABLES.len() + 2, "{tables:?}");
}

/// docs/citus.md, "What stays on the coordinator": every other table is distributed.
const COORDINATOR_TABLES: [&str; 7] = [
    "_sqlx_migrations",
    "console_sessions",
    "dispatch_queue",
    "dispatch_queue_0",
    "dispatch_queue_1",
    "dispatch_queue_generation",
    // Claimed across tenants with SKIP LOCKED, as the dispatch queue is.
    "feedback_queue",
];

/// The schema's tables that are neither distributed nor reference tables (Citus's shards of
/// reference tables on the coordinator aside).
async fn coordinator_tables(owner: &mut PgConnection) -> Vec<String> {
    sqlx::query_scalar(
        "select c.relname::text from pg_class c
          where c.relnamespace = 'public'::regnamespace and c.relkind in ('r', 'p')
            and c.oid not in (select logicalrelid from pg_dist_partition)
            and c.oid not in (select shardid_rel from (
                  select to_regclass(logicalrelid::text || '_' || shardid) as shardid_rel
                    from pg_dist_shard) shards where shardid_rel is not null)
          order by 1",
    )
    .fetch_all(owner)
    .await
    .unwrap()
}

#[tokio::test]
async fn a_fresh_migrate_distributes_the_tenant_tables_co_located_and_keeps_the_queue_local() {
    if cluster("fresh migrate").is_none() {
        return;
    }
    let db = TestDb::empty().await;
    channel_bridge::db::migrate(&DatabaseSettings::from_url(db.url()))
        .await
        .expect("migrations apply on Citus");
    let mut owner = db.owner_conn().await;
    assert_distributed_as_designed(&distribution(&mut owner).await);
    assert_eq!(coordinator_tables(&mut owner).await, COORDINATOR_TABLES);
}

#[tokio::test]
async fn citus_distribute_moves_a_database_migrated_before_citus_and_leaves_no_copy_behind() {
    let Some(workers) = cluster("citus distribute") else {
        return;
    };
    let name = format!("cbt_{}", uuid::Uuid::new_v4().simple());
    citus::create_before_citus(&name, &workers).await;
    let db = TestDb { name };
    channel_bridge::db::migrate(&DatabaseSettings::from_url(db.url()))
        .await
        .expect("migrations apply without Citus");
    // Data written while the database was plain: it must all be reachable afterwards.
    let pool = channel_bridge::db::connect_pool(&DatabaseSettings::from_url(db.url())).unwrap();
    let tenant = provision_tenant(&pool, "acme").await;
    pool.close().await;
    let runtime = LoginRole::before_citus(&db).await;
    citus::install(&db.name, &workers).await;

    let output = run_cli(&db, &["citus", "distribute"]).await;
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let answer: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert!(
        answer["result"]
            .as_str()
            .unwrap()
            .starts_with("distributed: tenants (reference)"),
        "{answer}"
    );
    let mut owner = db.owner_conn().await;
    assert_distributed_as_designed(&distribution(&mut owner).await);
    // The rows moved to the shards, and none stayed in the coordinator's own tables.
    let connectors: i64 = sqlx::query_scalar("select count(*) from channel_connectors where tenant_id = $1")
        .bind(tenant.tenant)
        .fetch_one(&mut owner)
        .await
        .unwrap();
    assert_eq!(connectors, 3, "the tenant's three connectors, now on the shards");
    let left: Vec<(String, i64)> = sqlx::query_as(
        "select logicalrelid::text, pg_relation_size(logicalrelid) from pg_dist_partition
          where pg_relation_size(logicalrelid) > 0",
    )
    .fetch_all(&mut owner)
    .await
    .unwrap();
    assert!(
        left.is_empty(),
        "pre-distribution rows left on the coordinator: {left:?}"
    );

    // Roles belong to the cluster: the other tests' are there too.
    let carried = answer["login_roles"].as_array().unwrap();
    assert!(carried.contains(&Value::from(runtime.name.as_str())), "{answer}");
    runtime.assert_on_every_worker().await;

    let again = run_cli(&db, &["citus", "distribute"]).await;
    assert!(
        again.status.success(),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    let answer: Value = serde_json::from_slice(&again.stdout).unwrap();
    assert_eq!(answer["result"], "already distributed");
    runtime.drop_everywhere().await;
}

/// A runtime login role (a member of `channel_bridge_app` with a password) made while the
/// database had no Citus: on the coordinator alone.
struct LoginRole {
    name: String,
}

impl LoginRole {
    async fn before_citus(db: &TestDb) -> Self {
        let name = format!("cbt_login_{}", uuid::Uuid::new_v4().simple());
        let password = uuid::Uuid::new_v4().simple().to_string();
        db.owner_conn()
            .await
            .execute(
                format!(
                    "create role {name} login noinherit password '{password}'; \
                     grant channel_bridge_app to {name}"
                )
                .as_str(),
            )
            .await
            .unwrap();
        Self { name }
    }

    /// The role on `node` (an admin URL): its password verifier, whether it inherits, and
    /// whether it is a member of the app role.
    async fn on(&self, node: &str) -> Option<(Option<String>, bool, bool)> {
        let mut conn = PgConnection::connect(node).await.expect("the node answers");
        sqlx::query_as(
            "select rolpassword, rolinherit, pg_has_role(oid, 'channel_bridge_app', 'MEMBER')
               from pg_authid where rolname = $1 and rolcanlogin",
        )
        .bind(&self.name)
        .fetch_optional(&mut conn)
        .await
        .unwrap()
    }

    /// The same password verifier, inheritance and membership on every worker as on the
    /// coordinator.
    async fn assert_on_every_worker(&self) {
        let nodes = citus::all_nodes();
        let coordinator = self.on(&nodes[0]).await.expect("the role is on the coordinator");
        assert!(coordinator.0.is_some() && coordinator.2, "{coordinator:?}");
        for worker in &nodes[1..] {
            assert_eq!(self.on(worker).await.as_ref(), Some(&coordinator), "on {worker}");
        }
    }

    async fn drop_everywhere(self) {
        for node in citus::all_nodes() {
            let mut conn = PgConnection::connect(&node).await.expect("the node answers");
            conn.execute(format!("drop role if exists {}", self.name).as_str())
                .await
                .unwrap();
        }
    }
}

#[tokio::test]
async fn a_command_without_the_runtime_url_names_why_the_workers_refuse_it() {
    if cluster("a command without CB_APP_DATABASE_URL").is_none() {
        return;
    }
    let db = TestDb::migrated().await;
    let tenant = provision_tenant(&db.app_pool(), "acme").await.tenant.to_string();
    for args in [
        ["key", "issue", "--tenant", tenant.as_str(), "--name", "ops"].as_slice(),
        ["messages", "list", "--tenant", tenant.as_str()].as_slice(),
    ] {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_channel-bridge"))
            .args(args)
            .env("DATABASE_URL", db.url())
            .env_remove("CB_APP_DATABASE_URL")
            .env("RUST_LOG", "warn")
            .output()
            .expect("the binary runs");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{args:?}: {stderr}");
        assert!(
            stderr.contains("is not permitted to log in") && stderr.contains("set CB_APP_DATABASE_URL"),
            "{args:?} names the cause and the setting: {stderr}"
        );
    }
}

#[tokio::test]
async fn serve_refuses_a_citus_cluster_without_a_runtime_login_role_and_says_which_setting() {
    if cluster("serve without a login role").is_none() {
        return;
    }
    let db = TestDb::migrated().await;
    let set_role_mode = DatabaseSettings::from_url(db.url());
    let refused = channel_bridge::db::check_ready_to_serve(&set_role_mode)
        .await
        .expect_err("SET ROLE mode cannot reach the workers");
    assert!(refused.to_string().contains("CB_APP_DATABASE_URL"), "{refused}");
    channel_bridge::db::check_ready_to_serve(&db.settings())
        .await
        .expect("the runtime role reaches every worker");
}

#[tokio::test]
async fn on_plain_postgresql_distributing_does_nothing_and_the_queue_has_no_key_to_tenants() {
    if citus::enabled() {
        eprintln!("on plain PostgreSQL only");
        return;
    }
    let app = spawn_app().await;
    let output = run_cli(&app.db, &["citus", "distribute"]).await;
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let answer: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert!(
        answer["result"].as_str().unwrap().contains("not installed"),
        "{answer}"
    );
    let mut owner = app.db.owner_conn().await;
    let keys: i64 = sqlx::query_scalar(
        "select count(*) from pg_constraint where conrelid = 'dispatch_queue'::regclass and contype = 'f'",
    )
    .fetch_one(&mut owner)
    .await
    .unwrap();
    assert_eq!(keys, 0);
}
