//! Citus mode of the harness (`scripts/test-citus`). With `CB_TEST_CITUS_WORKERS` set
//! (`host:port` of each worker, comma-separated), `DATABASE_URL` is a Citus coordinator and
//! every test database lives on all three nodes.
//!
//! A migrated test database is a copy, on every node, of one template that the application's
//! own `migrate` distributed once per test process: the copies of the coordinator's and the
//! workers' databases under one new name form a cluster database of their own (the shards
//! and metadata come along; nodes are named by host and port, which the copy keeps). The
//! pool logs in as `cbt_runtime`, a login member of `channel_bridge_app`, because Citus
//! opens its worker connections as the session's role.

use std::sync::OnceLock;

use channel_bridge::settings::DatabaseSettings;
use sqlx::{Connection, Executor, PgConnection};

use super::{admin_url, url_with};

pub const RUNTIME_ROLE: &str = "cbt_runtime";

/// The workers (`host:port`), when the suite runs on Citus.
pub fn workers() -> Option<Vec<String>> {
    let listed = std::env::var("CB_TEST_CITUS_WORKERS").ok()?;
    let workers: Vec<String> = listed
        .split(',')
        .map(str::trim)
        .filter(|w| !w.is_empty())
        .map(str::to_owned)
        .collect();
    (!workers.is_empty()).then_some(workers)
}

/// Whether the suite runs on Citus.
pub fn enabled() -> bool {
    workers().is_some()
}

/// The admin URL (database `postgres`) of every node: the coordinator first.
pub fn all_nodes() -> Vec<String> {
    let mut nodes = vec![admin_url()];
    for worker in workers().unwrap_or_default() {
        nodes.push(node_url(&worker, "postgres"));
    }
    nodes
}

fn node_url(host_port: &str, db: &str) -> String {
    let addr = host_port
        .parse()
        .expect("CB_TEST_CITUS_WORKERS lists host:port addresses");
    url_with(db, Some(addr))
}

/// The runtime role's URL for database `db` on the coordinator (trust authentication: a
/// test cluster).
pub fn runtime_url(db: &str) -> String {
    runtime_url_at(db, None)
}

/// `runtime_url`, through `host_port` (a `DbProxy`) when given.
pub fn runtime_url_at(db: &str, host_port: Option<std::net::SocketAddr>) -> String {
    let mut url = reqwest::Url::parse(&url_with(db, host_port)).expect("DATABASE_URL is a valid URL");
    url.set_username(RUNTIME_ROLE).expect("the URL has a host");
    url.set_password(None).expect("the URL has a host");
    url.to_string()
}

/// Creates `name` on every node with the citus extension, and adds the workers to it.
pub async fn create_database(name: &str, workers: &[String]) {
    create_before_citus(name, workers).await;
    install(name, workers).await;
}

/// Creates `name` on every node, with the citus extension on the workers only: a database
/// that does not know yet it will be distributed (`install` makes it a cluster database).
pub async fn create_before_citus(name: &str, workers: &[String]) {
    for admin in all_nodes() {
        super::create_database(&admin, &format!("create database {name}")).await;
    }
    for worker in workers {
        let mut conn = PgConnection::connect(&node_url(worker, name))
            .await
            .expect("the new database answers");
        conn.execute("create extension citus")
            .await
            .expect("citus is installed on every node");
    }
}

/// Creates the citus extension in `name` on the coordinator and adds the workers.
pub async fn install(name: &str, workers: &[String]) {
    let url = url_with(name, None);
    let coordinator: reqwest::Url = url.parse().expect("a valid URL");
    let mut conn = PgConnection::connect(&url)
        .await
        .expect("the coordinator answers");
    conn.execute("create extension citus")
        .await
        .expect("citus is installed on the coordinator");
    sqlx::query("select citus_set_coordinator_host($1, $2)")
        .bind(coordinator.host_str().expect("a host"))
        .bind(i32::from(coordinator.port().unwrap_or(5432)))
        .execute(&mut conn)
        .await
        .expect("the coordinator is registered");
    for worker in workers {
        let (host, port) = worker.rsplit_once(':').expect("host:port");
        sqlx::query("select citus_add_node($1, $2)")
            .bind(host)
            .bind(port.parse::<i32>().expect("a port number"))
            .execute(&mut conn)
            .await
            .expect("the worker joins");
    }
}

/// Creates `name` on every node as a copy of the process's migrated template.
pub async fn copy_template(name: &str, workers: &[String]) {
    let template = template(workers);
    for admin in all_nodes() {
        let mut conn = PgConnection::connect(&admin).await.expect("the node answers");
        close_sessions(&mut conn, template).await;
        conn.execute(format!("create database {name} template {template}").as_str())
            .await
            .expect("the template copies");
    }
}

/// The migrated template, made on first use.
fn template(workers: &[String]) -> &'static str {
    static TEMPLATE: OnceLock<String> = OnceLock::new();
    TEMPLATE.get_or_init(|| {
        let workers = workers.to_vec();
        // Tests run on runtimes of their own: the template is made on one of its own.
        std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime")
                .block_on(make_template(workers))
        })
        .join()
        .expect("the Citus template is made")
    })
}

async fn make_template(workers: Vec<String>) -> String {
    let name = format!("cbt_template_{}", uuid::Uuid::new_v4().simple());
    create_database(&name, &workers).await;
    channel_bridge::db::migrate(&DatabaseSettings::from_url(url_with(&name, None)))
        .await
        .expect("migrations apply on Citus");
    let mut owner = PgConnection::connect(&url_with(&name, None))
        .await
        .expect("the template answers");
    owner
        .execute(super::SET_CONFIG_GUARD)
        .await
        .expect("the set_config guard installs");
    let exists: bool = sqlx::query_scalar("select exists (select 1 from pg_roles where rolname = $1)")
        .bind(RUNTIME_ROLE)
        .fetch_one(&mut owner)
        .await
        .expect("roles are readable");
    if !exists {
        // Citus creates the role, with its membership, on the workers too.
        owner
            .execute(
                format!(
                    "create role {RUNTIME_ROLE} login inherit; grant channel_bridge_app to {RUNTIME_ROLE}"
                )
                .as_str(),
            )
            .await
            .expect("the runtime role is created");
    }
    drop(owner);
    for admin in all_nodes() {
        let mut conn = PgConnection::connect(&admin).await.expect("the node answers");
        close_sessions(&mut conn, &name).await;
    }
    name
}

/// Ends every session on `db` (Citus's maintenance daemon, cached worker connections): a
/// database is copied only while nobody is connected to it.
async fn close_sessions(conn: &mut PgConnection, db: &str) {
    sqlx::query("select pg_terminate_backend(pid) from pg_stat_activity where datname = $1 and pid <> pg_backend_pid()")
        .bind(db)
        .execute(conn)
        .await
        .expect("sessions can be ended");
}
