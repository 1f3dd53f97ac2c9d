//! The batching ingress writer and the connector cache: several webhooks per commit, each
//! under its own tenant, one webhook's failure never its neighbours'; admin changes reach
//! webhook verification at once.

use channel_bridge::secrets::Keyring;
use std::sync::Arc;
use std::time::Duration;

use channel_bridge::cache::ConfigCache;
use channel_bridge::db;
use channel_bridge::dispatch::StepOutcome;
use channel_bridge::domain::{Connector, ConnectorId, Platform, TenantId};
use channel_bridge::ingress;
use channel_bridge::ingress::writer::Writer;
use channel_bridge::platforms::inbound::{Inbound, Parsed};
use futures::future::join_all;
use serde_json::json;
use sqlx::PgPool;

use crate::support::fake_agent::FakeAgent;
use crate::support::fake_platforms::FakePlatforms;
use crate::support::platforms::*;
use crate::support::{spawn_app, worker, TestApp};

/// One writer, batches of up to 64, the default deadline.
fn one_writer() -> channel_bridge::batch::BatchLimits {
    channel_bridge::batch::BatchLimits {
        writers: 1,
        batch_max: 64,
        deadline: Duration::from_secs(2),
    }
}

async fn connector(pool: &PgPool, tenant: TenantId, id: ConnectorId) -> Arc<Connector> {
    ConfigCache::new(Duration::ZERO, Keyring::ephemeral())
        .connector_of(pool, tenant, id)
        .await
        .unwrap()
        .expect("connector exists and is enabled")
}

fn parsed(connector: &Connector, body: &[u8]) -> Inbound {
    match channel_bridge::platforms::of(connector.profile.platform)
        .parse(connector, body)
        .unwrap()
    {
        Parsed::Events(inbound) => inbound,
        Parsed::Handshake(_) => panic!("a message, not a handshake"),
    }
}

/// (tenant, idempotency key, transaction id) of every recorded message, and the job count.
async fn recorded(app: &TestApp) -> (Vec<(TenantId, String, String)>, i64) {
    let mut owner = app.db.owner_conn().await;
    let rows = sqlx::query_as(
        "select tenant_id, idempotency_key, xmin::text from channel_messages order by tenant_id, idempotency_key",
    )
    .fetch_all(&mut owner)
    .await
    .unwrap();
    let jobs = sqlx::query_scalar("select count(*) from dispatch_queue")
        .fetch_one(&mut owner)
        .await
        .unwrap();
    (rows, jobs)
}

fn transactions(rows: &[(TenantId, String, String)]) -> usize {
    let mut xids: Vec<&str> = rows.iter().map(|(_, _, xid)| xid.as_str()).collect();
    xids.sort_unstable();
    xids.dedup();
    xids.len()
}

#[tokio::test]
async fn webhooks_of_two_tenants_waiting_together_share_one_commit_each_under_its_own_tenant() {
    let app = spawn_app().await;
    let acme = provision_tenant(&app.pool, "acme").await;
    let globex = provision_tenant(&app.pool, "globex").await;
    let acme_bot = connector(&app.pool, acme.tenant, acme.telegram).await;
    let globex_bot = connector(&app.pool, globex.tenant, globex.telegram).await;
    let writer = Writer::spawn(app.pool.clone(), one_writer());

    // The same update ids on both bots: different turns, since keys are per connector.
    // Interleaved, with one delivery repeated inside the batch.
    let mut jobs = Vec::new();
    for update_id in 1..=10 {
        for bot in [&acme_bot, &globex_bot] {
            let body = telegram_text(update_id, &format!("turn {update_id}"));
            jobs.push((bot.clone(), parsed(bot, &body)));
        }
    }
    jobs.push((acme_bot.clone(), parsed(&acme_bot, &telegram_text(3, "turn 3"))));
    // Every record call is queued before the writer task first runs (this test's runtime
    // has one thread), so the writer finds all 21 waiting and takes them as one batch.
    let outcomes = join_all(jobs.into_iter().map(|(bot, inbound)| writer.record(bot, inbound))).await;

    let outcomes: Vec<_> = outcomes.into_iter().map(Result::unwrap).collect();
    assert_eq!(outcomes.iter().map(|o| o.queued.len()).sum::<usize>(), 20);
    assert_eq!(outcomes.iter().map(|o| o.duplicates).sum::<usize>(), 1);
    let (rows, jobs) = recorded(&app).await;
    assert_eq!(rows.len(), 20);
    assert_eq!(jobs, 20);
    // On Citus each worker numbers its own part of the one distributed transaction.
    if !crate::support::citus::enabled() {
        assert_eq!(transactions(&rows), 1, "one commit for the whole batch");
    }
    for tenant in [acme.tenant, globex.tenant] {
        let keys: Vec<&str> = rows
            .iter()
            .filter(|(t, _, _)| *t == tenant)
            .map(|(_, key, _)| key.as_str())
            .collect();
        assert_eq!(keys.len(), 10, "ten turns recorded under {tenant}");
    }
    // Each tenant reads its own ten turns, and only those, through RLS.
    for tenant in [&acme, &globex] {
        let mut tx = app.tenant_tx(tenant.tenant).await;
        let visible: i64 = sqlx::query_scalar("select count(*) from channel_messages")
            .fetch_one(tx.conn())
            .await
            .unwrap();
        assert_eq!(visible, 10);
        let own: i64 = sqlx::query_scalar("select count(*) from channel_messages where connector_id = $1")
            .bind(tenant.telegram)
            .fetch_one(tx.conn())
            .await
            .unwrap();
        assert_eq!(own, 10);
    }
}

#[tokio::test]
async fn a_webhook_that_cannot_be_written_fails_alone_and_its_batch_neighbours_are_recorded() {
    let app = spawn_app().await;
    let acme = provision_tenant(&app.pool, "acme").await;
    let bot = connector(&app.pool, acme.tenant, acme.telegram).await;
    // A connector deleted after its webhook was verified: its row cannot be written (the
    // message's connector must exist), which fails the batch transaction it is in.
    let mut gone = (*bot).clone();
    gone.id = ConnectorId::new();
    let gone = Arc::new(gone);
    let writer = Writer::spawn(app.pool.clone(), one_writer());

    let mut jobs = Vec::new();
    for update_id in 1..=6 {
        let target = if update_id == 4 { &gone } else { &bot };
        jobs.push((target.clone(), parsed(target, &telegram_text(update_id, "hello"))));
    }
    let outcomes = join_all(
        jobs.into_iter()
            .map(|(connector, inbound)| writer.record(connector, inbound)),
    )
    .await;

    for (index, outcome) in outcomes.iter().enumerate() {
        match outcome {
            Ok(outcome) => {
                assert_ne!(index, 3);
                assert_eq!(outcome.queued.len(), 1);
            }
            Err(err) => {
                assert_eq!(index, 3, "only the unwritable webhook fails");
                assert!(!db::is_unavailable(err), "a failure, not an outage: {err}");
            }
        }
    }
    let (rows, jobs) = recorded(&app).await;
    assert_eq!(rows.len(), 5);
    assert_eq!(jobs, 5);
    assert_eq!(transactions(&rows), 5, "recorded again one transaction each");
}

#[tokio::test]
async fn a_tenant_transaction_switched_to_another_tenant_no_longer_reaches_the_first() {
    let app = spawn_app().await;
    let acme = provision_tenant(&app.pool, "acme").await;
    let globex = provision_tenant(&app.pool, "globex").await;

    let mut tx = app.tenant_tx(acme.tenant).await;
    assert!(db::connectors::get(&mut tx, &Keyring::ephemeral(), acme.slack)
        .await
        .unwrap()
        .is_some());
    tx.switch_tenant(globex.tenant).await.unwrap();
    assert_eq!(tx.tenant(), globex.tenant);
    assert!(db::connectors::get(&mut tx, &Keyring::ephemeral(), acme.slack)
        .await
        .unwrap()
        .is_none());
    let touched = sqlx::query("update channel_connectors set name = 'stolen' where id = $1")
        .bind(acme.slack)
        .execute(tx.conn())
        .await
        .unwrap()
        .rows_affected();
    assert_eq!(touched, 0);
    let names: Vec<String> = sqlx::query_scalar("select name from channel_connectors order by name")
        .fetch_all(tx.conn())
        .await
        .unwrap();
    assert_eq!(
        names,
        ["slack", "telegram", "whatsapp"],
        "globex's own three only"
    );
    tx.commit().await.unwrap();
}

#[tokio::test]
async fn connector_changes_made_through_the_admin_api_apply_to_the_next_webhook() {
    let app = spawn_app().await;
    let acme = provision_tenant(&app.pool, "acme").await;
    let key = issue_key(&app, acme.tenant).await;
    // A first delivery puts the connectors in the cache.
    deliver(
        &app,
        &acme,
        Platform::Slack,
        slack_text("1700000001.000100", "one"),
    )
    .await;
    deliver(&app, &acme, Platform::Telegram, telegram_text(1, "one")).await;

    // A rotated Slack signing secret verifies at once (the old one stays valid for its grace).
    let rotated = "8f742231b10e8888abcd99yyyzzz85a5";
    let response = app
        .client
        .patch(app.url(&format!("/v1/admin/connectors/{}", acme.slack)))
        .bearer_auth(&key)
        .json(&json!({"verification_secret": rotated}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "{:?}", response.text().await);
    let body = slack_text("1700000002.000100", "two");
    let headers = slack_headers(rotated, now(), &body);
    let response = post(&app, &acme.hook_path(Platform::Slack), &headers, body).await;
    assert_eq!(response.status(), 200);

    // A disabled connector answers 404 from the next webhook on.
    let response = app
        .client
        .post(app.url(&format!("/v1/admin/connectors/{}/disable", acme.telegram)))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body = telegram_text(2, "two");
    let headers = signed_headers(Platform::Telegram, &body);
    let response = post(&app, &acme.hook_path(Platform::Telegram), &headers, body).await;
    assert_eq!(response.status(), 404);

    let (rows, _) = recorded(&app).await;
    let keys: Vec<&str> = rows.iter().map(|(_, key, _)| key.as_str()).collect();
    assert_eq!(keys.len(), 3, "{keys:?}");
}

async fn issue_key(app: &TestApp, tenant: TenantId) -> String {
    channel_bridge::admin::operator::issue(&app.pool, tenant, "test")
        .await
        .unwrap()
        .key
}

#[tokio::test]
async fn an_agent_url_changed_through_the_admin_api_gets_the_next_dispatch_of_the_same_instance() {
    let platforms = FakePlatforms::start().await;
    let app = crate::support::spawn_app_with(|s, _| s.worker = true).await;
    let acme = provision_tenant_at(&app.pool, "acme", Some(&platforms.base_url)).await;
    let first = FakeAgent::start(&acme.dispatch_secret).await;
    let second = FakeAgent::start(&acme.dispatch_secret).await;
    let key = issue_key(&app, acme.tenant).await;
    let set_agent = |url: String| {
        app.client
            .patch(app.url("/v1/admin/tenant"))
            .bearer_auth(&key)
            .json(&json!({ "agent_url": url }))
            .send()
    };

    assert_eq!(set_agent(first.url.clone()).await.unwrap().status(), 200);
    deliver(&app, &acme, Platform::Telegram, telegram_text(1, "one")).await;
    platforms.wait_for_sends(1).await;
    // The worker now holds the tenant in its cache; the change must replace it.
    assert_eq!(set_agent(second.url.clone()).await.unwrap().status(), 200);
    deliver(&app, &acme, Platform::Telegram, telegram_text(2, "two")).await;
    platforms.wait_for_sends(2).await;

    assert_eq!(first.calls().len(), 1);
    assert_eq!(second.calls().len(), 1);
    assert_eq!(second.calls()[0].payload.content, "two");
}

#[tokio::test]
async fn a_later_message_is_not_claimed_while_an_earlier_one_of_the_conversation_is_uncommitted() {
    let app = spawn_app().await;
    let platforms = FakePlatforms::start().await;
    let acme = provision_tenant_at(&app.pool, "acme", Some(&platforms.base_url)).await;
    let agent = FakeAgent::start(&acme.dispatch_secret).await;
    let worker = worker(&app, &agent.url, |_| {});
    let bot = connector(&app.pool, acme.tenant, acme.telegram).await;

    // M1 is queued in a transaction that stays open (a batch still recording others);
    // M2 of the same user commits meanwhile in another (another batch, another instance).
    let mut open = app.tenant_tx(acme.tenant).await;
    ingress::record_in(&mut open, &bot, &parsed(&bot, &telegram_text(1, "first")))
        .await
        .unwrap();
    ingress::record(&app.pool, &bot, &parsed(&bot, &telegram_text(2, "second")))
        .await
        .unwrap();
    // M2 is committed and looks like its conversation's head, but M1 is still coming.
    assert_eq!(worker.step().await.unwrap(), StepOutcome::Empty);
    assert!(agent.calls().is_empty());

    open.commit().await.unwrap();
    assert!(matches!(worker.step().await.unwrap(), StepOutcome::Executed(_)));
    assert!(matches!(worker.step().await.unwrap(), StepOutcome::Executed(_)));
    let texts: Vec<String> = agent.calls().iter().map(|c| c.payload.content.clone()).collect();
    assert_eq!(texts, ["first", "second"]);
    assert_eq!(
        agent.calls()[1].payload.messages.len(),
        3,
        "M2 sees M1 and its answer"
    );
}

#[tokio::test]
async fn webhooks_recorded_together_keep_their_order_and_outcomes_each() {
    let app = spawn_app().await;
    let acme = provision_tenant(&app.pool, "acme").await;
    let bot = connector(&app.pool, acme.tenant, acme.telegram).await;
    let slack = connector(&app.pool, acme.tenant, acme.slack).await;
    let first = parsed(&bot, &telegram_text(1, "first"));
    let second = parsed(&slack, &slack_text("1718000001.000100", "second")); // same person
    let again = parsed(&bot, &telegram_text(1, "first"));
    let mut stranger = telegram_text(3, "who am I");
    stranger = String::from_utf8(stranger)
        .unwrap()
        .replace(TELEGRAM_USER, "999")
        .into_bytes();
    let stranger = parsed(&bot, &stranger);

    let mut tx = app.tenant_tx(acme.tenant).await;
    let webhooks = [
        (bot.as_ref(), &first),
        (slack.as_ref(), &second),
        (bot.as_ref(), &again),
        (bot.as_ref(), &stranger),
    ];
    let outcomes = ingress::record_many_in(&mut tx, &webhooks).await.unwrap();
    tx.commit().await.unwrap();

    let counts: Vec<(usize, usize, usize)> = outcomes
        .iter()
        .map(|o| (o.queued.len(), o.duplicates, o.recorded_only))
        .collect();
    assert_eq!(counts, [(1, 0, 0), (1, 0, 0), (0, 1, 0), (0, 0, 1)]);
    let mut owner = app.db.owner_conn().await;
    let queued: Vec<(String, String)> = sqlx::query_as(
        "select m.request_content, q.conversation_key
           from dispatch_queue q join channel_messages m on m.id = q.message_id order by q.seq",
    )
    .fetch_all(&mut owner)
    .await
    .unwrap();
    assert_eq!(
        queued,
        [
            ("first".to_owned(), "user:alice".to_owned()),
            ("second".to_owned(), "user:alice".to_owned())
        ]
    );
    let denied: String =
        sqlx::query_scalar("select status from channel_messages where platform_user_id = '999'")
            .fetch_one(&mut owner)
            .await
            .unwrap();
    assert_eq!(denied, "denied_unlinked");
}
