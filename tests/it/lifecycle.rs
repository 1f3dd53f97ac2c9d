//! The data lifecycle: retention deletes old settled turns and keeps recent and in-flight
//! ones; erasure removes every row of one person in every tenant table and nothing of
//! anyone else; export round-trips with the admin listing; the audit log records the admin
//! actions, without content or secrets, and only for the tenant that made them.

use std::collections::{BTreeMap, HashSet};

use channel_bridge::db::TenantTx;
use channel_bridge::domain::Platform;
use channel_bridge::lifecycle::retention;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use sqlx::PgConnection;
use uuid::Uuid;

use crate::support::api::call;
use crate::support::platforms::*;
use crate::support::{run_cli, spawn_app, TestApp};

/// A provisioned tenant (`provision_tenant`: alice on Slack and Telegram, bob and carol on
/// WhatsApp) with an admin key.
struct Tenant {
    p: Provisioned,
    key: String,
    key_id: Uuid,
}

async fn tenant(app: &TestApp, slug: &str) -> Tenant {
    let p = provision_tenant(&app.pool, slug).await;
    let issued = channel_bridge::admin::operator::issue(&app.pool, p.tenant, "ci")
        .await
        .unwrap();
    Tenant {
        p,
        key: issued.key,
        key_id: issued.id,
    }
}

/// A turn written as ingress and the worker would have left it.
struct Turn<'a> {
    platform: Platform,
    sender: &'a str,
    user: Option<&'a str>,
    status: &'a str,
    age_days: i64,
    text: &'a str,
}

impl<'a> Turn<'a> {
    fn of(platform: Platform, sender: &'a str, user: Option<&'a str>) -> Self {
        Self {
            platform,
            sender,
            user,
            status: "executed",
            age_days: 0,
            text: "hello",
        }
    }

    fn status(self, status: &'a str) -> Self {
        Self { status, ..self }
    }

    fn aged(self, age_days: i64) -> Self {
        Self { age_days, ..self }
    }

    fn text(self, text: &'a str) -> Self {
        Self { text, ..self }
    }
}

/// Inserts a turn as the owner (RLS does not apply); its id.
async fn insert_turn(owner: &mut PgConnection, t: &Tenant, turn: Turn<'_>) -> Uuid {
    let id = Uuid::now_v7();
    let connector = t.p.connector(turn.platform);
    let conversation = match turn.user {
        Some(user) => format!("user:{user}"),
        None => format!("sender:{connector}:{}", turn.sender),
    };
    let answered = turn.status == "executed";
    sqlx::query(
        "insert into channel_messages (tenant_id, id, connector_id, platform, idempotency_key,
             platform_message_id, chat_id, platform_user_id, user_id, conversation_key,
             request_content, response_content, status, received_at)
         values ($1, $2, $3, $4, $2::text, $2::text, $5, $5, $6, $7, $8, $9, $10,
                 now() - make_interval(days => $11))",
    )
    .bind(t.p.tenant)
    .bind(id)
    .bind(connector)
    .bind(turn.platform.as_str())
    .bind(turn.sender)
    .bind(turn.user)
    .bind(conversation)
    .bind(turn.text)
    .bind(answered.then_some("an answer"))
    .bind(turn.status)
    .bind(i32::try_from(turn.age_days).unwrap())
    .execute(owner)
    .await
    .unwrap();
    id
}

async fn insert_part(owner: &mut PgConnection, t: &Tenant, message: Uuid, index: i32, status: &str) {
    sqlx::query(
        "insert into channel_replies (tenant_id, message_id, part_index, content, status)
         values ($1, $2, $3, 'part text', $4)",
    )
    .bind(t.p.tenant)
    .bind(message)
    .bind(index)
    .bind(status)
    .execute(owner)
    .await
    .unwrap();
}

/// Two statements, as the gateway's own: on Citus the queue is the coordinator's table, and
/// its generation default is not for the workers to evaluate.
async fn insert_job(owner: &mut PgConnection, t: &Tenant, message: Uuid, stage: &str) {
    let key: String =
        sqlx::query_scalar("select conversation_key from channel_messages where tenant_id = $1 and id = $2")
            .bind(t.p.tenant)
            .bind(message)
            .fetch_one(&mut *owner)
            .await
            .unwrap();
    sqlx::query(
        "insert into dispatch_queue (message_id, tenant_id, conversation_key, stage)
         values ($2, $1, $3, $4)",
    )
    .bind(t.p.tenant)
    .bind(message)
    .bind(key)
    .bind(stage)
    .execute(owner)
    .await
    .unwrap();
}

async fn insert_notice(
    owner: &mut PgConnection,
    t: &Tenant,
    platform: Platform,
    sender: &str,
    age_days: i32,
) {
    sqlx::query(
        "insert into channel_notices (tenant_id, connector_id, platform_user_id, day)
         values ($1, $2, $3, current_date - $4)",
    )
    .bind(t.p.tenant)
    .bind(t.p.connector(platform))
    .bind(sender)
    .bind(age_days)
    .execute(owner)
    .await
    .unwrap();
}

async fn message_ids_of(owner: &mut PgConnection, t: &Tenant) -> HashSet<Uuid> {
    sqlx::query_scalar("select id from channel_messages where tenant_id = $1")
        .bind(t.p.tenant)
        .fetch_all(owner)
        .await
        .unwrap()
        .into_iter()
        .collect()
}

async fn count(owner: &mut PgConnection, sql: &str, t: &Tenant) -> i64 {
    sqlx::query_scalar(sql)
        .bind(t.p.tenant)
        .fetch_one(owner)
        .await
        .unwrap()
}

#[tokio::test]
async fn retention_below_seven_days_is_refused_and_the_setting_is_shown_and_cleared() {
    let app = spawn_app().await;
    let a = tenant(&app, "acme").await;
    let (status, tenant) = call(&app, Method::GET, "/v1/admin/tenant", &a.key, None).await;
    assert_eq!(
        (status, &tenant["retention_days"]),
        (StatusCode::OK, &Value::Null),
        "for ever by default"
    );

    for refused in [json!(6), json!(0), json!(-1), json!(36501)] {
        let body = json!({ "retention_days": refused });
        let (status, error) = call(&app, Method::PATCH, "/v1/admin/tenant", &a.key, Some(body)).await;
        assert_eq!(status, 422, "{refused}: {error}");
        assert!(error["message"].as_str().unwrap().contains("7"), "{error}");
    }
    let body = Some(json!({"retention_days": 7.0}));
    let (status, tenant) = call(&app, Method::PATCH, "/v1/admin/tenant", &a.key, body).await;
    assert_eq!(
        (status, tenant["retention_days"].clone()),
        (StatusCode::OK, json!(7))
    );
    // A PATCH without the field keeps it; `null` clears it.
    let body = Some(json!({"name": "Acme"}));
    let (_, tenant) = call(&app, Method::PATCH, "/v1/admin/tenant", &a.key, body).await;
    assert_eq!(tenant["retention_days"], 7);
    let (_, tenant) = call(&app, Method::GET, "/v1/admin/tenant", &a.key, None).await;
    assert_eq!(tenant["retention_days"], 7);
    let body = Some(json!({"retention_days": null}));
    let (_, tenant) = call(&app, Method::PATCH, "/v1/admin/tenant", &a.key, body).await;
    assert_eq!(tenant["retention_days"], Value::Null);

    // The database holds the same floor whatever the code does.
    let mut owner = app.db.owner_conn().await;
    let below = sqlx::query("update tenants set retention_days = 6 where id = $1")
        .bind(a.p.tenant)
        .execute(&mut owner)
        .await;
    assert!(below.is_err(), "tenants_retention_days_check refuses 6");
}

/// Tenant A with a 30-day retention and B with none, seeded for retention: old settled
/// turns of A (`doomed`, with 1,100 more for several batches), old in-flight and recent ones
/// (`kept`), an old turn of B, and old and new notices of both.
struct RetentionSeed {
    app: TestApp,
    a: Tenant,
    b: Tenant,
    owner: PgConnection,
    answered: Uuid,
    refused: Uuid,
    doomed: HashSet<Uuid>,
    kept: HashSet<Uuid>,
    recent: Uuid,
    others: Uuid,
}

async fn retention_seeded() -> RetentionSeed {
    let app = spawn_app().await;
    let a = tenant(&app, "acme").await;
    let b = tenant(&app, "globex").await;
    let body = Some(json!({"retention_days": 30}));
    let (status, _) = call(&app, Method::PATCH, "/v1/admin/tenant", &a.key, body).await;
    assert_eq!(status, 200);
    let mut owner = app.db.owner_conn().await;
    let turn =
        |status: &'static str| Turn::of(Platform::Telegram, TELEGRAM_USER, Some("alice")).status(status);

    // Old and settled: deleted, with their reply parts.
    let mut doomed = HashSet::new();
    let answered = insert_turn(&mut owner, &a, turn("executed").aged(40)).await;
    insert_part(&mut owner, &a, answered, 0, "sent").await;
    insert_part(&mut owner, &a, answered, 1, "sent").await;
    let in_doubt = insert_turn(&mut owner, &a, turn("executed").aged(40)).await;
    insert_part(&mut owner, &a, in_doubt, 0, "unknown").await;
    let refused = insert_turn(&mut owner, &a, turn("delivery_failed").aged(31)).await;
    insert_part(&mut owner, &a, refused, 0, "failed").await;
    doomed.extend([answered, in_doubt, refused]);
    doomed.insert(insert_turn(&mut owner, &a, turn("dispatch_failed").aged(40)).await);
    doomed.insert(insert_turn(&mut owner, &a, turn("denied_unlinked").aged(400)).await);
    // Enough old turns for several batches.
    sqlx::query(
        "insert into channel_messages (tenant_id, id, connector_id, platform, idempotency_key,
             platform_message_id, chat_id, platform_user_id, user_id, conversation_key,
             request_content, status, received_at)
         select $1, gen_random_uuid(), $2, 'telegram', 'bulk-' || n, n::text, 'c', 'p', 'bulk',
                'user:bulk', 'old', 'executed', now() - make_interval(days => 35, secs => n)
           from generate_series(1, 1100) as n",
    )
    .bind(a.p.tenant)
    .bind(a.p.telegram)
    .execute(&mut owner)
    .await
    .unwrap();

    // Old but in flight, recent, or another tenant's (no retention): kept.
    let mut kept = HashSet::new();
    let accepted = insert_turn(&mut owner, &a, turn("accepted").aged(40)).await;
    insert_job(&mut owner, &a, accepted, "dispatch").await;
    let dispatching = insert_turn(&mut owner, &a, turn("dispatching").aged(40)).await;
    insert_job(&mut owner, &a, dispatching, "dispatch").await;
    let replying = insert_turn(&mut owner, &a, turn("executed").aged(40)).await;
    insert_part(&mut owner, &a, replying, 0, "failed").await;
    insert_job(&mut owner, &a, replying, "reply").await;
    let pending = insert_turn(&mut owner, &a, turn("executed").aged(40)).await;
    insert_part(&mut owner, &a, pending, 0, "sent").await;
    insert_part(&mut owner, &a, pending, 1, "pending").await;
    let sending = insert_turn(&mut owner, &a, turn("executed").aged(40)).await;
    insert_part(&mut owner, &a, sending, 0, "sending").await;
    let recent = insert_turn(&mut owner, &a, turn("executed").aged(29)).await;
    insert_part(&mut owner, &a, recent, 0, "sent").await;
    kept.extend([accepted, dispatching, replying, pending, sending, recent]);
    let others = insert_turn(&mut owner, &b, turn("executed").aged(4000)).await;
    insert_notice(&mut owner, &a, Platform::Telegram, "u-old", 40).await;
    insert_notice(&mut owner, &a, Platform::Telegram, "u-today", 0).await;
    insert_notice(&mut owner, &b, Platform::Telegram, "u-old", 400).await;
    RetentionSeed {
        app,
        a,
        b,
        owner,
        answered,
        refused,
        doomed,
        kept,
        recent,
        others,
    }
}

/// One batch of tenant A's purge: at most `BATCH` turns, oldest first, in one tenant
/// transaction; (turns, reply parts) deleted.
async fn purge_one_batch(s: &RetentionSeed) -> (u64, u64) {
    let mut tx = TenantTx::begin(&s.app.pool, s.a.p.tenant).await.unwrap();
    let cutoff = retention::cutoff(chrono::Utc::now(), 30);
    let batch = channel_bridge::db::lifecycle::purge_turns(&mut tx, cutoff, retention::BATCH)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    (batch.turns, batch.reply_parts)
}

#[tokio::test]
async fn a_retention_batch_deletes_at_most_batch_turns_oldest_first_with_their_parts() {
    let mut s = retention_seeded().await;
    assert_eq!(purge_one_batch(&s).await, (500, 3));
    let left = message_ids_of(&mut s.owner, &s.a).await;
    assert!(
        !left.contains(&s.answered) && left.contains(&s.refused),
        "the oldest go first: the 40-day-old turns before the 31-day-old one"
    );
}

#[tokio::test]
async fn retention_deletes_old_settled_turns_in_batches_and_keeps_recent_and_in_flight_ones() {
    let mut s = retention_seeded().await;
    purge_one_batch(&s).await;
    let (a, b, owner) = (&s.a, &s.b, &mut s.owner);

    let report = retention::run_pass(&s.app.pool, chrono::Utc::now())
        .await
        .unwrap();
    assert_eq!(report.tenants, 1, "only the tenant with a retention");
    assert_eq!(report.turns, 1100 + s.doomed.len() as u64 - 500);
    assert_eq!(report.reply_parts, 1);
    assert_eq!(report.notices, 1);

    let left = message_ids_of(owner, a).await;
    assert_eq!(left, s.kept, "exactly the in-flight and recent turns are left");
    let parts = count(
        owner,
        "select count(*) from channel_replies where tenant_id = $1",
        a,
    )
    .await;
    assert_eq!(parts, 5, "the kept turns' parts, and no other");
    assert!(message_ids_of(owner, b).await.contains(&s.others));
    let notices: Vec<String> =
        sqlx::query_scalar("select platform_user_id from channel_notices where tenant_id = $1")
            .bind(a.p.tenant)
            .fetch_all(&mut *owner)
            .await
            .unwrap();
    assert_eq!(notices, ["u-today"]);
    assert_eq!(
        count(
            owner,
            "select count(*) from channel_notices where tenant_id = $1",
            b
        )
        .await,
        1
    );
    let jobs = count(
        owner,
        "select count(*) from dispatch_queue where tenant_id = $1",
        a,
    )
    .await;
    assert_eq!(jobs, 3, "no job lost its turn");
}

#[tokio::test]
async fn turns_kept_in_flight_go_in_a_later_pass_once_settled_and_an_idle_pass_deletes_nothing() {
    let mut s = retention_seeded().await;
    purge_one_batch(&s).await;
    retention::run_pass(&s.app.pool, chrono::Utc::now())
        .await
        .unwrap();
    let (a, owner) = (&s.a, &mut s.owner);

    // Once the in-flight turns settle, a later pass takes them; a pass with nothing to do
    // deletes nothing.
    sqlx::query("delete from dispatch_queue where tenant_id = $1")
        .bind(a.p.tenant)
        .execute(&mut *owner)
        .await
        .unwrap();
    sqlx::query("update channel_messages set status = 'executed' where tenant_id = $1")
        .bind(a.p.tenant)
        .execute(&mut *owner)
        .await
        .unwrap();
    sqlx::query("update channel_replies set status = 'sent' where tenant_id = $1")
        .bind(a.p.tenant)
        .execute(&mut *owner)
        .await
        .unwrap();
    let report = retention::run_pass(&s.app.pool, chrono::Utc::now())
        .await
        .unwrap();
    assert_eq!(report.turns, 5);
    assert_eq!(message_ids_of(owner, a).await, HashSet::from([s.recent]));
    let report = retention::run_pass(&s.app.pool, chrono::Utc::now())
        .await
        .unwrap();
    assert_eq!((report.turns, report.reply_parts, report.notices), (0, 0, 0));
}

/// Every row of every table that holds tenant data (every table with a `tenant_id` but the
/// admin keys, which hold no one's data and whose `last_used_at` each request moves), as
/// JSON text, by table.
async fn snapshot(owner: &mut PgConnection) -> BTreeMap<String, HashSet<String>> {
    let tables: Vec<String> = sqlx::query_scalar(
        // A partitioned table's rows are read through it, not again through its partitions.
        "select table_name::text from information_schema.columns
          where table_schema = 'public' and column_name = 'tenant_id' and table_name <> 'api_keys'
            and not exists (select 1 from pg_class c
                             where c.relname = table_name and c.relispartition)
          order by 1",
    )
    .fetch_all(&mut *owner)
    .await
    .unwrap();
    let mut rows = BTreeMap::new();
    for table in tables {
        let table_rows: Vec<String> =
            sqlx::query_scalar(&format!("select row_to_json(t)::text from {table} t"))
                .fetch_all(&mut *owner)
                .await
                .unwrap();
        rows.insert(table, table_rows.into_iter().collect());
    }
    rows
}

/// Tenants A and B with Alice's rows and everyone else's (as the comments say), seeded
/// for an erasure of Alice in A; `is_alices` tells a snapshot row of hers in tenant A.
struct ErasureSeed {
    app: TestApp,
    a: Tenant,
    b: Tenant,
    tenant_a: String,
    zed: String,
    needles: Vec<String>,
}

impl ErasureSeed {
    /// A row is Alice's in tenant A when it is tenant A's and names her, one of her accounts
    /// or one of her turns; the turn recorded under zed stays zed's.
    fn is_alices(&self, row: &str) -> bool {
        row.contains(&self.tenant_a)
            && !row.contains(&self.zed)
            && self.needles.iter().any(|n| row.contains(n.as_str()))
    }
}

async fn erasure_seeded() -> ErasureSeed {
    let app = spawn_app().await;
    let a = tenant(&app, "acme").await;
    let b = tenant(&app, "globex").await;
    let mut owner = app.db.owner_conn().await;

    // Alice (Slack U0USER1 and Telegram 408258968 in both tenants): a webhook turn still
    // queued, answered turns with reply parts, a turn her Telegram account sent before it
    // was linked, notices to that account, and a job being delivered.
    deliver(&app, &a.p, Platform::Telegram, telegram_text(500_001, "queued")).await;
    let answered = insert_turn(
        &mut owner,
        &a,
        Turn::of(Platform::Slack, SLACK_USER, Some("alice")),
    )
    .await;
    insert_part(&mut owner, &a, answered, 0, "sent").await;
    insert_part(&mut owner, &a, answered, 1, "sent").await;
    let replying = insert_turn(
        &mut owner,
        &a,
        Turn::of(Platform::Telegram, TELEGRAM_USER, Some("alice")),
    )
    .await;
    insert_part(&mut owner, &a, replying, 0, "pending").await;
    insert_job(&mut owner, &a, replying, "reply").await;
    let unlinked = Turn::of(Platform::Telegram, TELEGRAM_USER, None).status("denied_unlinked");
    insert_turn(&mut owner, &a, unlinked).await;
    insert_notice(&mut owner, &a, Platform::Telegram, TELEGRAM_USER, 3).await;
    insert_notice(&mut owner, &a, Platform::Telegram, TELEGRAM_USER, 2).await;

    // Everyone else's: bob's and carol's turns and notices, an unlinked stranger, a turn
    // Alice's Telegram account sent while it was linked to someone else (that user's
    // history), the Slack read budget of the workspace, and all of Alice in tenant B.
    let bobs = insert_turn(
        &mut owner,
        &a,
        Turn::of(Platform::Whatsapp, WHATSAPP_USER, Some("bob")),
    )
    .await;
    insert_part(&mut owner, &a, bobs, 0, "sent").await;
    insert_turn(
        &mut owner,
        &a,
        Turn::of(Platform::Whatsapp, WHATSAPP_USER_2, Some("carol")),
    )
    .await;
    insert_turn(
        &mut owner,
        &a,
        Turn::of(Platform::Slack, "U0STRANGER", None).status("denied_unlinked"),
    )
    .await;
    insert_notice(&mut owner, &a, Platform::Slack, "U0STRANGER", 1).await;
    let zeds = insert_turn(
        &mut owner,
        &a,
        Turn::of(Platform::Telegram, TELEGRAM_USER, Some("zed")),
    )
    .await;
    sqlx::query("insert into slack_read_budget (tenant_id, workspace, next_at) values ($1, 'T0001', now())")
        .bind(a.p.tenant)
        .execute(&mut owner)
        .await
        .unwrap();
    deliver(
        &app,
        &b.p,
        Platform::Telegram,
        telegram_text(500_002, "queued in b"),
    )
    .await;
    let alice_in_b = insert_turn(
        &mut owner,
        &b,
        Turn::of(Platform::Slack, SLACK_USER, Some("alice")),
    )
    .await;
    insert_part(&mut owner, &b, alice_in_b, 0, "sent").await;
    insert_notice(&mut owner, &b, Platform::Telegram, TELEGRAM_USER, 1).await;

    let alice_turns: HashSet<Uuid> = sqlx::query_scalar(
        "select id from channel_messages where tenant_id = $1
            and (user_id = 'alice' or (user_id is null and platform_user_id = $2))",
    )
    .bind(a.p.tenant)
    .bind(TELEGRAM_USER)
    .fetch_all(&mut owner)
    .await
    .unwrap()
    .into_iter()
    .collect();
    assert_eq!(alice_turns.len(), 4);
    let mut needles: Vec<String> = vec!["\"alice\"".into(), SLACK_USER.into(), TELEGRAM_USER.into()];
    needles.extend(alice_turns.iter().map(Uuid::to_string));
    let tenant_a = a.p.tenant.to_string();
    let zed = zeds.to_string();

    ErasureSeed {
        app,
        a,
        b,
        tenant_a,
        zed,
        needles,
    }
}

#[tokio::test]
async fn erasing_a_user_removes_every_row_of_theirs_in_every_tenant_table_and_nothing_of_anyone_else() {
    let s = erasure_seeded().await;
    let (app, a) = (&s.app, &s.a);
    let mut owner = app.db.owner_conn().await;
    let is_alices = |row: &str| s.is_alices(row);

    let before = snapshot(&mut owner).await;
    let (status, erased) = call(app, Method::POST, "/v1/admin/users/alice/erase", &a.key, None).await;
    assert_eq!(status, 200, "{erased}");
    assert_eq!(
        erased,
        json!({"turns": 4, "reply_parts": 3, "jobs": 2, "links": 2, "notices": 2, "reactions": 0})
    );
    let after = snapshot(&mut owner).await;

    for (table, rows) in &before {
        let expected: HashSet<&String> = rows.iter().filter(|row| !is_alices(row)).collect();
        let left: HashSet<&String> = after[table].iter().collect();
        if table == "audit_log" {
            let added: Vec<&&String> = left.difference(&expected).collect();
            assert_eq!(added.len(), 1, "the erasure's own record: {added:?}");
            assert!(expected.is_subset(&left), "no audit record is removed");
            continue;
        }
        assert_eq!(
            left, expected,
            "{table}: Alice's rows are gone and every other row is as it was"
        );
        let alices = rows.iter().filter(|row| is_alices(row)).count();
        let holds_her = [
            "channel_messages",
            "channel_replies",
            "channel_links",
            "channel_notices",
            "dispatch_queue",
        ];
        assert_eq!(
            alices > 0,
            holds_her.contains(&table.as_str()),
            "{table} held {alices} rows of hers"
        );
    }
}

/// Alice erased in tenant A, as the first test does.
async fn erase_alice(s: &ErasureSeed) {
    let (status, erased) = call(
        &s.app,
        Method::POST,
        "/v1/admin/users/alice/erase",
        &s.a.key,
        None,
    )
    .await;
    assert_eq!(status, 200, "{erased}");
}

#[tokio::test]
async fn after_an_erasure_the_agent_would_see_nothing_of_them_and_erasing_again_finds_nothing() {
    let s = erasure_seeded().await;
    erase_alice(&s).await;
    let (app, a) = (&s.app, &s.a);

    // What the agent would see of her next is nothing; erasing again finds nothing.
    let (_, history) = call(app, Method::GET, "/v1/admin/users/alice/history", &a.key, None).await;
    assert_eq!(history["messages"], json!([]));
    let (status, again) = call(app, Method::POST, "/v1/admin/users/alice/erase", &a.key, None).await;
    assert_eq!(status, 200);
    assert_eq!(
        again,
        json!({"turns": 0, "reply_parts": 0, "jobs": 0, "links": 0, "notices": 0, "reactions": 0})
    );
}

#[tokio::test]
async fn another_tenants_key_erases_nothing_of_tenant_a_even_naming_the_same_person() {
    let s = erasure_seeded().await;
    erase_alice(&s).await;
    let (app, b, tenant_a) = (&s.app, &s.b, &s.tenant_a);
    let mut owner = app.db.owner_conn().await;

    // Another tenant's key erases nothing of tenant A, even naming the same person.
    let before_b = snapshot(&mut owner).await;
    let path = format!("/v1/admin/senders/whatsapp/{WHATSAPP_USER}/erase");
    let (status, erased_in_b) = call(app, Method::POST, &path, &b.key, None).await;
    assert_eq!(status, 200);
    assert_eq!(erased_in_b["links"], 1, "b's own link of that number");
    let after_b = snapshot(&mut owner).await;
    for (table, rows) in &before_b {
        let a_rows = |set: &HashSet<String>| -> HashSet<String> {
            set.iter().filter(|r| r.contains(tenant_a)).cloned().collect()
        };
        assert_eq!(
            a_rows(rows),
            a_rows(&after_b[table]),
            "{table}: tenant A untouched"
        );
    }
}

#[tokio::test]
async fn an_erasure_path_that_names_nobody_answers_404_and_an_unknown_platform_too() {
    let app = spawn_app().await;
    let a = tenant(&app, "acme").await;
    let long = "x".repeat(257);
    for path in [
        format!("/v1/admin/users/{long}/erase"),
        "/v1/admin/senders/irc/U1/erase".to_owned(),
        format!("/v1/admin/senders/slack/{long}/erase"),
    ] {
        let (status, body) = call(&app, Method::POST, &path, &a.key, None).await;
        assert_eq!(status, 404, "{path}: {body}");
    }
}

/// Every page of the admin listing, newest first.
async fn listing(app: &TestApp, key: &str) -> Vec<Value> {
    let mut items = Vec::new();
    let mut path = "/v1/admin/messages?limit=200".to_owned();
    loop {
        let (status, page) = call(app, Method::GET, &path, key, None).await;
        assert_eq!(status, 200, "{page}");
        items.extend(page["items"].as_array().unwrap().iter().cloned());
        match page["next_cursor"].as_str() {
            Some(cursor) => path = format!("/v1/admin/messages?limit=200&cursor={cursor}"),
            None => return items,
        }
    }
}

/// GETs an export; its lines parsed, after checking the media type.
async fn export(app: &TestApp, key: &str, query: &str) -> (String, Vec<Value>) {
    let response = app
        .client
        .get(app.url(&format!("/v1/admin/export{query}")))
        .bearer_auth(key)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "application/x-ndjson");
    let text = response.text().await.unwrap();
    assert!(text.is_empty() || text.ends_with('\n'), "every line ends");
    let lines = text
        .lines()
        .map(|line| serde_json::from_str(line).expect("each line is one JSON object"))
        .collect();
    (text, lines)
}

fn ids(lines: &[Value]) -> Vec<String> {
    lines
        .iter()
        .map(|l| l["id"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn an_export_round_trips_with_the_listing_and_the_reply_parts_page_by_page() {
    let app = spawn_app().await;
    let a = tenant(&app, "acme").await;
    let b = tenant(&app, "globex").await;
    let mut owner = app.db.owner_conn().await;
    deliver(
        &app,
        &a.p,
        Platform::Telegram,
        telegram_text(600_001, "from the webhook"),
    )
    .await;
    let answered = insert_turn(
        &mut owner,
        &a,
        Turn::of(Platform::Slack, SLACK_USER, Some("alice")).text("q1"),
    )
    .await;
    insert_part(&mut owner, &a, answered, 0, "sent").await;
    insert_part(&mut owner, &a, answered, 1, "failed").await;
    let before_link = Turn::of(Platform::Telegram, TELEGRAM_USER, None)
        .status("denied_unlinked")
        .aged(1);
    let before_link = insert_turn(&mut owner, &a, before_link).await;
    // More than two pages of bob.
    for _ in 0..450 {
        insert_turn(
            &mut owner,
            &a,
            Turn::of(Platform::Whatsapp, WHATSAPP_USER, Some("bob")).aged(2),
        )
        .await;
    }

    let (text, lines) = export(&app, &a.key, "").await;
    let listed = listing(&app, &a.key).await;
    assert_eq!(lines.len(), 453);
    assert_eq!(lines.len(), listed.len());
    let mut oldest_first = listed.clone();
    oldest_first.reverse();
    for (line, item) in lines.iter().zip(&oldest_first) {
        let mut message = line.clone();
        let parts = message.as_object_mut().unwrap().remove("reply_parts").unwrap();
        let reactions = message.as_object_mut().unwrap().remove("reactions").unwrap();
        assert_eq!(reactions, json!([]), "nobody reacted");
        assert_eq!(
            &message, item,
            "the line holds the listing's fields, oldest first"
        );
        if item["platform"] == "whatsapp" {
            assert_eq!(parts, json!([]));
            continue;
        }
        let path = format!("/v1/admin/messages/{}", item["id"].as_str().unwrap());
        let (_, detail) = call(&app, Method::GET, &path, &a.key, None).await;
        assert_eq!(parts, detail["reply_parts"], "and the turn's reply parts");
    }
    let answered_line = lines.iter().find(|l| l["id"] == answered.to_string()).unwrap();
    assert_eq!(answered_line["reply_parts"].as_array().unwrap().len(), 2);

    // A user's export is what erasing them would delete: their turns and what their
    // accounts sent before being linked.
    let (user_text, alice) = export(&app, &a.key, "?user_id=alice").await;
    let alice_ids: HashSet<String> = ids(&alice).into_iter().collect();
    assert_eq!(alice_ids.len(), 3);
    assert!(alice_ids.contains(&before_link.to_string()) && alice_ids.contains(&answered.to_string()));
    let (_, account) = export(&app, &a.key, &format!("?sender=telegram:{TELEGRAM_USER}")).await;
    assert_eq!(account.len(), 2, "the webhook's turn and the one before the link");
    let (_, both) = export(&app, &a.key, &format!("?user_id=alice&sender=slack:{SLACK_USER}")).await;
    assert_eq!(ids(&both), [answered.to_string()], "each filter narrows");
    let (_, nobody) = export(&app, &a.key, "?user_id=nobody").await;
    assert!(nobody.is_empty());
    let (status, _) = call(&app, Method::GET, "/v1/admin/export?sender=irc:1", &a.key, None).await;
    assert_eq!(status, 422);
    let (_, none_of_a) = export(&app, &b.key, "").await;
    assert!(
        none_of_a.is_empty(),
        "another tenant's export holds none of A's turns"
    );

    // The CLI writes the same lines.
    let cli = run_cli(
        &app.db,
        &["export", "--tenant", &a.p.tenant.to_string(), "--user", "alice"],
    )
    .await;
    assert!(cli.status.success(), "{}", String::from_utf8_lossy(&cli.stderr));
    assert_eq!(String::from_utf8(cli.stdout).unwrap(), user_text);
    let cli = run_cli(&app.db, &["export", "--tenant", &a.p.tenant.to_string()]).await;
    assert_eq!(String::from_utf8(cli.stdout).unwrap(), text);
}

/// The tenant's audit log, newest first, walked page by page.
async fn audit(app: &TestApp, key: &str, limit: usize) -> Vec<Value> {
    let mut items = Vec::new();
    let mut path = format!("/v1/admin/audit?limit={limit}");
    loop {
        let (status, page) = call(app, Method::GET, &path, key, None).await;
        assert_eq!(status, 200, "{page}");
        items.extend(page["items"].as_array().unwrap().iter().cloned());
        match page["next_cursor"].as_str() {
            Some(cursor) => path = format!("/v1/admin/audit?limit={limit}&cursor={cursor}"),
            None => return items,
        }
    }
}

/// Written by tenant A's admin into a connector secret and a message; never in the log.
const SECRET_TEXT: &str = "never-in-the-audit-log-0001";
const MESSAGE_TEXT: &str = "my private question about invoices";

/// What `every_admin_action` acted on.
struct Acted {
    connector: String,
    failed: Uuid,
    refused: Uuid,
    new_dispatch_secret: String,
}

/// Tenant A's admin, with A's key, does every audited action once (each answered as it
/// should be): a connector created, updated with new secrets, disabled and deleted; a link
/// set and deleted (twice); retention set; the dispatch secret rotated; a failed turn
/// redispatched (twice) and a refused one resent; a Telegram sender erased.
async fn every_admin_action(app: &TestApp, a: &Tenant) -> Acted {
    let mut owner = app.db.owner_conn().await;
    let (secret_text, message_text) = (SECRET_TEXT, MESSAGE_TEXT);

    let create = json!({"platform": "telegram", "name": "second bot", "verification_secret": secret_text});
    let (status, connector) = call(app, Method::POST, "/v1/admin/connectors", &a.key, Some(create)).await;
    assert_eq!(status, 201, "{connector}");
    let connector = connector["id"].as_str().unwrap().to_owned();
    let path = format!("/v1/admin/connectors/{connector}");
    let rotate = json!({"verification_secret": format!("{secret_text}-2"), "outbound_token": secret_text, "name": "renamed"});
    assert_eq!(call(app, Method::PATCH, &path, &a.key, Some(rotate)).await.0, 200);
    assert_eq!(
        call(app, Method::POST, &format!("{path}/disable"), &a.key, None)
            .await
            .0,
        200
    );
    assert_eq!(call(app, Method::DELETE, &path, &a.key, None).await.0, 204);
    let link = json!({"platform": "slack", "platform_user_id": "U0NEW", "user_id": "dave"});
    assert_eq!(
        call(app, Method::POST, "/v1/admin/links", &a.key, Some(link))
            .await
            .0,
        201
    );
    assert_eq!(
        call(app, Method::DELETE, "/v1/admin/links/slack/U0NEW", &a.key, None)
            .await
            .0,
        204
    );
    assert_eq!(
        call(app, Method::DELETE, "/v1/admin/links/slack/U0NEW", &a.key, None)
            .await
            .0,
        404
    );
    let retention = Some(json!({"retention_days": 90}));
    assert_eq!(
        call(app, Method::PATCH, "/v1/admin/tenant", &a.key, retention)
            .await
            .0,
        200
    );
    let (status, rotated) = call(
        app,
        Method::POST,
        "/v1/admin/tenant/rotate-dispatch-secret",
        &a.key,
        None,
    )
    .await;
    assert_eq!(status, 200);
    let new_dispatch_secret = rotated["dispatch_secret"].as_str().unwrap().to_owned();
    let failed = Turn::of(Platform::Slack, SLACK_USER, Some("alice"))
        .status("dispatch_failed")
        .text(message_text);
    let failed = insert_turn(&mut owner, a, failed).await;
    let path = format!("/v1/admin/messages/{failed}/redispatch");
    assert_eq!(call(app, Method::POST, &path, &a.key, None).await.1["queued"], 1);
    assert_eq!(
        call(app, Method::POST, &path, &a.key, None).await.1["queued"],
        0,
        "not recorded: nothing done"
    );
    let refused = Turn::of(Platform::Slack, SLACK_USER, Some("alice"))
        .status("delivery_failed")
        .text(message_text);
    let refused = insert_turn(&mut owner, a, refused).await;
    insert_part(&mut owner, a, refused, 0, "failed").await;
    let (_, resent) = call(
        app,
        Method::POST,
        "/v1/admin/messages/resend",
        &a.key,
        Some(json!({})),
    )
    .await;
    assert_eq!(resent["queued"], 1);
    let path = format!("/v1/admin/senders/telegram/{TELEGRAM_USER}/erase");
    assert_eq!(call(app, Method::POST, &path, &a.key, None).await.0, 200);
    Acted {
        connector,
        failed,
        refused,
        new_dispatch_secret,
    }
}

/// The audit records of `every_admin_action`, newest first, without the issue of the key.
fn acted_records(everything: &[Value]) -> Vec<Value> {
    everything[..everything.len() - 1].to_vec()
}

#[tokio::test]
async fn every_admin_action_is_audited_once_newest_first_as_done_by_the_key_that_did_it() {
    let app = spawn_app().await;
    let a = tenant(&app, "acme").await;
    every_admin_action(&app, &a).await;

    let everything = audit(&app, &a.key, 3).await;
    // The operator issued the admin key the test uses, before anything else.
    let issued = everything.last().unwrap();
    assert_eq!(
        (
            issued["action"].as_str(),
            issued["actor"].as_str(),
            issued["target"].as_str()
        ),
        (
            Some("key.issue"),
            Some("operator"),
            Some(a.key_id.to_string().as_str())
        )
    );
    let records = acted_records(&everything);
    let actions: Vec<&str> = records.iter().map(|r| r["action"].as_str().unwrap()).collect();
    assert_eq!(
        actions,
        [
            "person.erase",
            "messages.resend",
            "messages.redispatch",
            "tenant.rotate_dispatch_secret",
            "tenant.update",
            "link.delete",
            "link.set",
            "connector.delete",
            "connector.disable",
            "connector.update",
            "connector.create",
        ],
        "every action once, newest first"
    );
    let key_id = a.key_id.to_string();
    assert!(
        records.iter().all(|r| r["actor"] == key_id.as_str()),
        "{records:?}"
    );
}

#[tokio::test]
async fn an_audit_record_names_its_target_and_what_changed() {
    let app = spawn_app().await;
    let a = tenant(&app, "acme").await;
    let acted = every_admin_action(&app, &a).await;

    let records = acted_records(&audit(&app, &a.key, 3).await);
    let by_action = |action: &str| records.iter().find(|r| r["action"] == action).unwrap().clone();
    assert_eq!(by_action("connector.update")["target"], acted.connector.as_str());
    assert_eq!(
        by_action("connector.update")["details"],
        json!({"fields": ["name"], "secrets": ["verification_secret", "outbound_token"],
               "previous_secret_grace_secs": 86400})
    );
    assert_eq!(by_action("link.set")["target"], "slack:U0NEW");
    assert_eq!(
        by_action("tenant.update")["details"],
        json!({"fields": ["retention_days"], "retention_days": 90})
    );
    assert_eq!(
        by_action("messages.redispatch")["target"],
        acted.failed.to_string()
    );
    assert_eq!(
        by_action("messages.resend")["details"]["ids"],
        json!([acted.refused.to_string()])
    );
    assert_eq!(
        by_action("person.erase")["target"],
        format!("telegram:{TELEGRAM_USER}")
    );
    assert_eq!(by_action("person.erase")["details"]["links"], 1);
}

#[tokio::test]
async fn the_audit_log_holds_no_message_content_no_secret_and_not_the_key_itself() {
    let app = spawn_app().await;
    let a = tenant(&app, "acme").await;
    let acted = every_admin_action(&app, &a).await;

    let everything = audit(&app, &a.key, 3).await;
    let issued = everything.last().unwrap();
    assert!(
        !issued.to_string().contains(a.key.as_str()),
        "the key itself is never recorded"
    );
    let all = serde_json::to_string(&acted_records(&everything)).unwrap();
    for leaked in [
        SECRET_TEXT,
        MESSAGE_TEXT,
        "an answer",
        "part text",
        acted.new_dispatch_secret.as_str(),
    ] {
        assert!(!all.contains(leaked), "the audit log holds no {leaked:?}");
    }
}

#[tokio::test]
async fn another_tenant_sees_none_of_the_audit_log_and_nobody_can_rewrite_it() {
    let app = spawn_app().await;
    let a = tenant(&app, "acme").await;
    let b = tenant(&app, "globex").await;
    every_admin_action(&app, &a).await;

    // Tenant B sees none of it, through the API or by naming A's rows in its own tenant
    // transaction (RLS); and B's actions are B's alone.
    let b_records = audit(&app, &b.key, 50).await;
    let b_targets: Vec<&str> = b_records.iter().map(|r| r["target"].as_str().unwrap()).collect();
    assert_eq!(b_targets, [b.key_id.to_string()], "only the issue of B's own key");
    let mut tx = TenantTx::begin(&app.pool, b.p.tenant).await.unwrap();
    let seen: i64 = sqlx::query_scalar("select count(*) from audit_log where tenant_id = $1")
        .bind(a.p.tenant)
        .fetch_one(tx.conn())
        .await
        .unwrap();
    assert_eq!(
        seen, 0,
        "tenant B cannot read tenant A's audit records, even by tenant id"
    );
    let forged = sqlx::query(
        "insert into audit_log (tenant_id, id, at, actor, action, target) values ($1, $2, now(), 'cli', 'x', 'y')",
    )
    .bind(a.p.tenant)
    .bind(Uuid::now_v7())
    .execute(tx.conn())
    .await;
    assert!(forged.is_err(), "nor write one for A");
    drop(tx);
    let mut tx = TenantTx::begin(&app.pool, a.p.tenant).await.unwrap();
    let rewritten = sqlx::query("update audit_log set target = 'nothing' where tenant_id = $1")
        .bind(a.p.tenant)
        .execute(tx.conn())
        .await;
    assert!(rewritten.is_err(), "the app role cannot rewrite the log");
}

#[tokio::test]
async fn the_clis_own_actions_are_audited_as_cli() {
    let app = spawn_app().await;
    let a = tenant(&app, "acme").await;

    let tenant = a.p.tenant.to_string();
    let cli = run_cli(&app.db, &["erase", "--tenant", &tenant, "--user", "bob"]).await;
    assert!(cli.status.success(), "{}", String::from_utf8_lossy(&cli.stderr));
    let erased: Value = serde_json::from_slice(&cli.stdout).unwrap();
    assert_eq!(erased["links"], 1);
    let newest = &audit(&app, &a.key, 1).await[0];
    assert_eq!(
        (newest["actor"].as_str(), newest["target"].as_str()),
        (Some("cli"), Some("user:bob"))
    );
}

#[tokio::test]
async fn the_openapi_document_states_the_lifecycle_operations_limits_and_media_type() {
    let app = spawn_app().await;
    let doc: Value = app
        .client
        .get(app.url("/v1/openapi.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let export = &doc["paths"]["/v1/admin/export"]["get"];
    assert!(
        export["responses"]["200"]["content"]["application/x-ndjson"].is_object(),
        "{export}"
    );
    let patch = &doc["components"]["schemas"]["TenantPatch"]["properties"]["retention_days"];
    assert_eq!(
        (patch["minimum"].clone(), patch["maximum"].clone()),
        (json!(7), json!(36500)),
        "{patch}"
    );
    for path in [
        "/v1/admin/users/{user_id}/erase",
        "/v1/admin/senders/{platform}/{platform_user_id}/erase",
    ] {
        let responses = &doc["paths"][path]["post"]["responses"];
        for status in ["200", "401", "404", "429", "503"] {
            assert!(responses[status].is_object(), "{path} documents {status}");
        }
    }
    let audit = &doc["paths"]["/v1/admin/audit"]["get"];
    let limit = audit["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "limit")
        .unwrap();
    assert_eq!(limit["schema"]["maximum"], 200);
    let actions = &doc["components"]["schemas"]["AuditOut"]["properties"]["action"]["enum"];
    assert!(
        actions.as_array().unwrap().contains(&json!("person.erase")),
        "{actions}"
    );
}
