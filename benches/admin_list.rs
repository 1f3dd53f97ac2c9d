//! Admin listing benchmark (not a test): the 50 newest messages of one tenant, with
//! 1,000,000 rows in `channel_messages` (10 tenants × 100,000), through the same library
//! function the API and the CLI call (a tenant transaction under RLS), and end to end
//! through the real server: `GET /v1/admin/messages?limit=50` with a tenant admin key over
//! loopback HTTP/1.1 keep-alive (key check, tenant transaction, JSON), one request at a
//! time.
//!
//!   cargo bench --bench admin_list -- [--tenants 10] [--rows-per-tenant 100000] [--samples 2000]
//!
//! Uses DATABASE_URL's server (default postgres://postgres@127.0.0.1:5432/postgres) and a
//! fresh database that it drops at the end.

#[allow(dead_code)] // each bench uses a part of it
mod common;

use channel_bridge::secrets::Keyring;
use std::time::{Duration, Instant};

use anyhow::Context;
use channel_bridge::admin::messages::{list_messages, MessagesQuery};
use channel_bridge::domain::{MessageStatus, TenantId};
use channel_bridge::settings::{DatabaseSettings, ServeSettings};
use channel_bridge::shapes::MessageSelection;
use channel_bridge::startup::Application;
use common::BenchDb;
use sqlx::{Connection, Executor, PgConnection};

struct Args {
    tenants: i64,
    rows_per_tenant: i64,
    samples: usize,
}

fn args() -> Args {
    let mut args = Args {
        tenants: 10,
        rows_per_tenant: 100_000,
        samples: 2000,
    };
    let raw: Vec<String> = std::env::args().collect();
    let mut i = 1;
    while i < raw.len() {
        let value = raw.get(i + 1).and_then(|v| v.parse::<i64>().ok());
        match (raw[i].as_str(), value) {
            ("--tenants", Some(v)) => args.tenants = v,
            ("--rows-per-tenant", Some(v)) => args.rows_per_tenant = v,
            ("--samples", Some(v)) => args.samples = v as usize,
            _ => {
                i += 1;
                continue;
            }
        }
        i += 2;
    }
    args
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index]
}

fn report(label: &str, mut samples: Vec<Duration>) {
    samples.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "{label:<40} p50 {:>7.3} ms   p99 {:>7.3} ms   max {:>7.3} ms   (n={})",
        ms(percentile(&samples, 0.5)),
        ms(percentile(&samples, 0.99)),
        ms(*samples.last().unwrap()),
        samples.len()
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let args = args();
    let db = BenchDb::create().await?;
    let result = run(&args, &db.settings(), &db.url).await;
    db.drop_now().await;
    result
}

async fn run(args: &Args, settings: &DatabaseSettings, url: &str) -> anyhow::Result<()> {
    let pool = channel_bridge::db::connect_pool(settings)?;
    let mut tenants = Vec::new();
    for i in 0..args.tenants {
        let tenant = channel_bridge::provision::create_tenant(
            &pool,
            &Keyring::ephemeral(),
            &format!("t{i}"),
            "bench",
            None,
        )
        .await?;
        tenants.push(tenant.tenant_id);
    }
    let load_started = Instant::now();
    let mut owner = PgConnection::connect(url).await?;
    for tenant in &tenants {
        load(&mut owner, *tenant, args.rows_per_tenant).await?;
    }
    owner.execute("analyze").await?;
    println!(
        "loaded {} rows ({} tenants × {}) in {:.1} s",
        args.tenants * args.rows_per_tenant,
        args.tenants,
        args.rows_per_tenant,
        load_started.elapsed().as_secs_f64()
    );

    let tenant = tenants[tenants.len() / 2];
    let newest = MessagesQuery {
        limit: Some(50),
        ..Default::default()
    };
    measure("newest 50 (no filter)", args.samples, || {
        list_messages(&pool, tenant, &newest)
    })
    .await?;
    let by_user = MessagesQuery {
        matching: MessageSelection {
            user_id: Some("user-7".into()),
            ..Default::default()
        },
        limit: Some(50),
        ..Default::default()
    };
    measure("newest 50 of one user", args.samples, || {
        list_messages(&pool, tenant, &by_user)
    })
    .await?;
    let by_status = MessagesQuery {
        matching: MessageSelection {
            status: Some(MessageStatus::DispatchFailed),
            ..Default::default()
        },
        limit: Some(50),
        ..Default::default()
    };
    measure("newest 50 dispatch_failed", args.samples, || {
        list_messages(&pool, tenant, &by_status)
    })
    .await?;

    // A deep page: the cursor after 50,000 rows.
    let mut query = MessagesQuery {
        limit: Some(200),
        ..Default::default()
    };
    for _ in 0..250 {
        let page = list_messages(&pool, tenant, &query)
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        query.cursor = page.next_cursor;
    }
    let deep = MessagesQuery {
        limit: Some(50),
        cursor: query.cursor,
        ..Default::default()
    };
    measure("50 after a cursor 50,000 rows deep", args.samples, || {
        list_messages(&pool, tenant, &deep)
    })
    .await?;
    measure_http(args, url, tenant).await
}

/// The newest 50 through the real server, as an admin's client sees it.
async fn measure_http(args: &Args, url: &str, tenant: TenantId) -> anyhow::Result<()> {
    let mut settings = ServeSettings::for_database(url);
    settings.worker = false;
    let app = Application::build(settings).await?;
    let addr = app.local_addr().context("the HTTP role is on")?;
    let pool = app.state().pool.clone();
    let key = channel_bridge::admin::operator::issue(&pool, tenant, "bench")
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?
        .key;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(app.run_until(async {
        let _ = stopped.await;
    }));
    let client = reqwest::Client::new();
    let endpoint = format!("http://{addr}/v1/admin/messages?limit=50");
    let get = || async {
        let response = client.get(&endpoint).bearer_auth(&key).send().await?;
        anyhow::ensure!(response.status() == 200, "GET answered {}", response.status());
        let page: serde_json::Value = response.json().await?;
        anyhow::ensure!(page["items"].as_array().map(Vec::len) == Some(50), "a full page");
        Ok(())
    };
    for _ in 0..50 {
        get().await?; // warm-up
    }
    let mut timings = Vec::with_capacity(args.samples);
    for _ in 0..args.samples {
        let started = Instant::now();
        get().await?;
        timings.push(started.elapsed());
    }
    report("newest 50 over HTTP (key check included)", timings);
    let _ = stop.send(());
    server.await??;
    Ok(())
}

async fn measure<F, Fut>(label: &str, samples: usize, mut f: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<
        Output = Result<channel_bridge::admin::messages::MessagePage, channel_bridge::error::AppError>,
    >,
{
    for _ in 0..50 {
        f().await.map_err(|e| anyhow::anyhow!("{e}"))?; // warm-up
    }
    let mut timings = Vec::with_capacity(samples);
    for _ in 0..samples {
        let started = Instant::now();
        let page = f().await.map_err(|e| anyhow::anyhow!("{e}"))?;
        timings.push(started.elapsed());
        assert!(!page.items.is_empty());
    }
    report(label, timings);
    Ok(())
}

/// Bulk-loads a tenant's history as the owner: one connector, 100 users, realistic text,
/// a few failed turns, spread over 90 days.
async fn load(owner: &mut PgConnection, tenant: TenantId, rows: i64) -> anyhow::Result<()> {
    let connector = uuid::Uuid::now_v7();
    sqlx::query(
        "insert into channel_connectors (tenant_id, id, platform, verification_secret) values ($1, $2, 'telegram', 'x')",
    )
    .bind(tenant)
    .bind(connector)
    .execute(&mut *owner)
    .await?;
    sqlx::query(
        "insert into channel_messages (tenant_id, id, connector_id, platform, idempotency_key, platform_message_id,
             chat_id, platform_user_id, user_id, conversation_key, request_content, response_content, decision,
             status, attempts, received_at, completed_at)
         select $1, gen_random_uuid(), $2, 'telegram', g::text, g::text, (g % 100)::text, (g % 100)::text,
                'user-' || (g % 100), 'user:user-' || (g % 100),
                'What is the status of order number ' || g || ', and when will it arrive?',
                'Order ' || g || ' ships tomorrow and should arrive within three business days.',
                case when g % 50 = 0 then 'dispatch_failed' else 'respond' end,
                case when g % 50 = 0 then 'dispatch_failed' else 'executed' end, 1,
                now() - make_interval(secs => ($3 - g) * 77.7), now() - make_interval(secs => ($3 - g) * 77.7)
           from generate_series(1, $3) g",
    )
    .bind(tenant)
    .bind(connector)
    .bind(rows)
    .execute(&mut *owner)
    .await?;
    Ok(())
}
