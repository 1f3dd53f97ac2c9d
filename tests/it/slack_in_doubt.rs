//! An interrupted Slack send, settled within Slack's limits: confirmed by the signed
//! `message_metadata_posted` event, else found by reading the thread (15 a page, from just
//! before the send, within the workspace's read budget), and resent only when it is absent
//! from every page. Real gateway, real PostgreSQL, a fake Slack that paginates like Slack.

use channel_bridge::db::messages::NewMessage;
use channel_bridge::db::{self, TenantTx};
use channel_bridge::dispatch::StepOutcome;
use channel_bridge::domain::{MessageId, MessageStatus, Platform};
use serde_json::{json, Value};

use crate::support::fake_agent::Reply;
use crate::support::fake_platforms::Answer;
use crate::support::pipeline::statuses;
use crate::support::platforms::*;
use crate::support::{spawn_app, Pipeline};

/// The DM channel of the Slack fixtures, where every turn below is answered.
const DM: &str = "D0DM00001";

/// The pipeline, its interrupted Slack sends waiting `confirm_secs` for the metadata event
/// and reading threads at most once per `read_interval_ms` per workspace.
async fn setup(confirm_secs: u64, read_interval_ms: u64) -> Pipeline {
    Pipeline::builder()
        .settings(move |settings| {
            settings.dispatch.slack_confirm_secs = confirm_secs;
            settings.dispatch.slack_read_interval_ms = read_interval_ms;
        })
        .start()
        .await
}

/// A minute passes for the workspaces' read budgets.
async fn budget_refills(s: &Pipeline) {
    s.owner_exec("update slack_read_budget set next_at = now()").await;
}

/// Seconds until the message's job is due again.
async fn job_wait(s: &Pipeline, message: MessageId) -> f64 {
    let mut owner = s.app.db.owner_conn().await;
    sqlx::query_scalar(
        "select extract(epoch from available_at - now())::float8 from dispatch_queue where message_id = $1",
    )
    .bind(message)
    .fetch_one(&mut owner)
    .await
    .unwrap()
}

fn posts(s: &Pipeline) -> Vec<String> {
    s.platforms
        .sent_to(Platform::Slack)
        .iter()
        .map(|sent| sent.text().to_owned())
        .collect()
}

/// A user turn in the DM, answered with `parts`, whose first part's send is cut off
/// (`interruption`) by the worker dying while it waits for Slack's answer. The job is
/// then due again. Returns the message.
async fn interrupted_turn(
    s: &Pipeline,
    ts: &str,
    parts: &[&str],
    interruption: Answer,
    fillers: usize,
) -> MessageId {
    let messages: Vec<Value> = parts.iter().map(|text| json!({"content": text})).collect();
    s.agent
        .script([Reply::Json(200, json!({ "messages": messages }), None)]);
    s.platforms.script(Platform::Slack, [interruption]);
    s.deliver(Platform::Slack, slack_text(ts, "hello")).await;
    let now = chrono::Utc::now().timestamp();
    // An hour-old conversation in the thread, then people writing just before the reply.
    s.platforms.slack_thread_add(DM, ts, 10, now - 3600);
    s.platforms.slack_thread_add(DM, ts, fillers, now - 5);
    let worker = s.worker.clone();
    let task = tokio::spawn(async move { worker.step().await });
    s.platforms.wait_for_sends(1).await;
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());
    s.time_passes().await;
    s.owner_scalar("select message_id from channel_replies where part_index = 0 and status = 'sending'")
        .await
}

fn param<'a>(call: &'a [(String, String)], name: &str) -> Option<&'a str> {
    call.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

/// The signed event Slack sends when a message with our metadata is posted.
fn metadata_posted(part_key: &str, channel: &str, ts: &str) -> Vec<u8> {
    let mut body: Value =
        serde_json::from_slice(&fixture(Platform::Slack, "message_metadata_posted")).unwrap();
    let event = &mut body["event"];
    event["metadata"]["event_payload"]["part_key"] = part_key.into();
    event["channel_id"] = channel.into();
    event["message_ts"] = ts.into();
    event["event_ts"] = ts.into();
    body["event_id"] = format!("EvMETA{}", ts.replace('.', "")).into();
    serde_json::to_vec(&body).unwrap()
}

#[tokio::test]
async fn an_interrupted_slack_part_confirmed_by_a_metadata_event_is_recorded_sent_with_its_ts_and_not_resent()
{
    let s = setup(60, 60_000).await;
    let id = interrupted_turn(
        &s,
        "1718003000.000100",
        &["first", "second"],
        Answer::HangAfterPosting,
        0,
    )
    .await;

    assert_eq!(s.worker.step().await.unwrap(), StepOutcome::Retrying(id));
    let part = &s.parts(id).await[0];
    assert_eq!(
        part.status.as_str(),
        "sending",
        "in doubt: neither resent nor given up"
    );
    assert!(part
        .last_error
        .as_deref()
        .unwrap()
        .contains("message_metadata_posted"));
    let wait = job_wait(&s, id).await;
    assert!(
        (14.0..=15.5).contains(&wait),
        "looks again within the window, got {wait}"
    );
    s.time_passes().await;
    assert_eq!(s.worker.step().await.unwrap(), StepOutcome::Retrying(id));
    assert!(
        s.platforms.replies_calls().is_empty(),
        "no thread read inside the window"
    );
    assert_eq!(posts(&s), ["first"], "nor a resend");

    // Slack confirms the post it did make (the gateway never heard its answer).
    let key = format!("{id}:0");
    let ts = s.platforms.slack_ts_of(&key).expect("the part is in the thread");
    let response = s
        .post_webhook(Platform::Slack, metadata_posted(&key, DM, &ts))
        .await;
    assert_eq!(response.status(), 200);

    assert_eq!(
        s.worker.step().await.unwrap(),
        StepOutcome::Delivered(id),
        "the confirmation woke the job: the next part went at once"
    );
    let parts = s.parts(id).await;
    assert_eq!(statuses(&parts), ["sent", "sent"]);
    assert_eq!(parts[0].platform_message_id.as_deref(), Some(ts.as_str()));
    assert_eq!(parts[0].last_error, None);
    assert_eq!(
        posts(&s),
        ["first", "second"],
        "the confirmed part was not posted again"
    );
    assert!(
        s.platforms.replies_calls().is_empty(),
        "the thread was never read"
    );

    // Slack retries the event (or sends it twice): nothing changes, no turn is recorded.
    let sent_at = parts[0].sent_at;
    let response = s
        .post_webhook(Platform::Slack, metadata_posted(&key, DM, &ts))
        .await;
    assert_eq!(response.status(), 200);
    let again = &s.parts(id).await[0];
    assert_eq!(
        (again.sent_at, again.platform_message_id.as_deref()),
        (sent_at, Some(ts.as_str()))
    );
    let messages: i64 = s.owner_scalar("select count(*) from channel_messages").await;
    assert_eq!(messages, 1, "a metadata event is never a user turn");
    assert_eq!(s.worker.step().await.unwrap(), StepOutcome::Empty);
    assert_eq!(s.agent.calls().len(), 1);
}

/// Another tenant on the same workspace, with a part in doubt too; the tenant and its
/// message.
async fn foreign_part_in_doubt(s: &Pipeline) -> (Provisioned, MessageId) {
    let other = provision_tenant_at(&s.app.pool, "globex", Some(&s.platforms.base_url)).await;
    let mut tx = TenantTx::begin(&s.app.pool, other.tenant).await.unwrap();
    let metadata = json!({});
    let foreign = db::messages::insert_many(
        &mut tx,
        &[NewMessage {
            connector_id: other.slack,
            platform: Platform::Slack,
            idempotency_key: "T0001:D0DM00001:1718003100.000100",
            platform_message_id: "1718003100.000100",
            address: &channel_bridge::domain::Address {
                chat_id: DM.into(),
                platform_user_id: SLACK_USER.into(),
                ..Default::default()
            },
            reply_to_id: None,
            user_id: Some("alice"),
            conversation_key: &channel_bridge::domain::ConversationKey::user("alice"),
            request_content: "hello",
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
    .unwrap();
    db::parts::insert_reply_parts(
        &mut tx,
        foreign,
        &db::parts::Reply::text(vec!["theirs".to_owned()]),
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    s.owner_exec(
        "update channel_replies set status = 'sending', sending_since = now() where status = 'pending'",
    )
    .await;

    (other, foreign)
}

#[tokio::test]
async fn a_metadata_event_with_an_unknown_or_foreign_key_answers_200_and_changes_nothing() {
    let s = setup(60, 60_000).await;
    let id = interrupted_turn(&s, "1718003100.000100", &["only"], Answer::HangAfterPosting, 0).await;
    assert_eq!(s.worker.step().await.unwrap(), StepOutcome::Retrying(id));
    let before = s.parts(id).await;

    // Another tenant on the same workspace has a part in doubt too.
    let (other, foreign) = foreign_part_in_doubt(&s).await;

    let ours = format!("{id}:0");
    let ts = "1718003101.000001";
    let mut other_app: Value = serde_json::from_slice(&metadata_posted(&ours, DM, ts)).unwrap();
    other_app["event"]["app_id"] = "A0OTHER".into();
    let mut other_type: Value = serde_json::from_slice(&metadata_posted(&ours, DM, ts)).unwrap();
    other_type["event"]["metadata"]["event_type"] = "task_created".into();
    let events = [
        (
            "an unknown key",
            metadata_posted(&format!("{}:0", MessageId::new()), DM, ts),
        ),
        (
            "another tenant's key",
            metadata_posted(&format!("{foreign}:0"), DM, ts),
        ),
        ("our key in another chat", metadata_posted(&ours, "C0OTHER01", ts)),
        (
            "a part that does not exist",
            metadata_posted(&format!("{id}:7"), DM, ts),
        ),
        ("not a part key", metadata_posted("hello:world", DM, ts)),
        ("another app's post", serde_json::to_vec(&other_app).unwrap()),
        ("another event type", serde_json::to_vec(&other_type).unwrap()),
    ];
    for (case, body) in events {
        let response = s.post_webhook(Platform::Slack, body).await;
        assert_eq!(response.status(), 200, "{case}");
    }
    let after = s.parts(id).await;
    assert_eq!(
        (
            after[0].status.as_str(),
            &after[0].platform_message_id,
            &after[0].last_error
        ),
        (
            before[0].status.as_str(),
            &before[0].platform_message_id,
            &before[0].last_error
        ),
        "our part is untouched"
    );
    assert!(job_wait(&s, id).await > 10.0, "and its job was not woken");
    let mut tx = TenantTx::begin(&s.app.pool, other.tenant).await.unwrap();
    let theirs = db::parts::reply_parts(&mut tx, foreign).await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(
        (
            theirs[0].status.as_str(),
            theirs[0].platform_message_id.as_deref()
        ),
        ("sending", None),
        "the other tenant's part is untouched"
    );
    let messages: i64 = s.owner_scalar("select count(*) from channel_messages").await;
    assert_eq!(messages, 2, "no event became a turn");
}

#[tokio::test]
async fn the_right_metadata_event_settles_the_part_in_doubt_and_a_later_one_changes_nothing() {
    let s = setup(60, 60_000).await;
    let id = interrupted_turn(&s, "1718003100.000100", &["only"], Answer::HangAfterPosting, 0).await;
    assert_eq!(s.worker.step().await.unwrap(), StepOutcome::Retrying(id));
    let ours = format!("{id}:0");
    let ts = "1718003101.000001";

    // The right event settles our part; a later one for the part already sent changes nothing.
    let real = s.platforms.slack_ts_of(&ours).unwrap();
    assert_eq!(
        s.post_webhook(Platform::Slack, metadata_posted(&ours, DM, &real))
            .await
            .status(),
        200
    );
    assert_eq!(
        s.parts(id).await[0].platform_message_id.as_deref(),
        Some(real.as_str())
    );
    assert_eq!(
        s.post_webhook(Platform::Slack, metadata_posted(&ours, DM, ts))
            .await
            .status(),
        200
    );
    let settled = &s.parts(id).await[0];
    assert_eq!(
        (settled.status.as_str(), settled.platform_message_id.as_deref()),
        ("sent", Some(real.as_str()))
    );
    assert_eq!(s.worker.step().await.unwrap(), StepOutcome::Delivered(id));
    assert_eq!(posts(&s), ["only"]);
}

#[tokio::test]
async fn an_interrupted_slack_part_found_on_page_2_of_the_thread_is_not_resent() {
    let s = setup(0, 0).await;
    // 20 messages of others come before our part from the read's `oldest` on: it is the
    // 21st, on page 2 (15 a page); the hour-old ones before `oldest` are not read at all.
    let id = interrupted_turn(
        &s,
        "1718003200.000100",
        &["found later"],
        Answer::HangAfterPosting,
        20,
    )
    .await;

    assert_eq!(s.worker.step().await.unwrap(), StepOutcome::Delivered(id));
    assert_eq!(
        posts(&s),
        ["found later"],
        "found in the thread, not posted again"
    );
    let part = &s.parts(id).await[0];
    let key = format!("{id}:0");
    assert_eq!(part.status.as_str(), "sent");
    assert_eq!(part.platform_message_id, s.platforms.slack_ts_of(&key));

    let calls = s.platforms.replies_calls();
    assert_eq!(calls.len(), 2, "page 1, then page 2: {calls:?}");
    let mark = part.sending_since.expect("the send was marked") - chrono::Duration::seconds(60);
    let oldest = format!("{}.{:06}", mark.timestamp(), mark.timestamp_subsec_micros());
    for call in &calls {
        assert_eq!(param(call, "channel"), Some(DM));
        assert_eq!(
            param(call, "ts"),
            Some("1718003200.000100"),
            "the thread's parent"
        );
        assert_eq!(param(call, "limit"), Some("15"));
        assert_eq!(
            param(call, "oldest"),
            Some(oldest.as_str()),
            "just before the send"
        );
        assert_eq!(param(call, "inclusive"), Some("true"));
        assert_eq!(param(call, "include_all_metadata"), Some("true"));
    }
    assert_eq!(param(&calls[0], "cursor"), None);
    assert!(param(&calls[1], "cursor").is_some_and(|c| !c.is_empty()));
}

#[tokio::test]
async fn an_interrupted_slack_part_absent_from_every_page_is_resent_exactly_once() {
    let s = setup(0, 0).await;
    let id = interrupted_turn(&s, "1718003300.000100", &["lost"], Answer::HangBeforePosting, 20).await;

    assert_eq!(s.worker.step().await.unwrap(), StepOutcome::Delivered(id));
    assert_eq!(s.platforms.replies_calls().len(), 2, "both pages read first");
    assert_eq!(posts(&s), ["lost", "lost"], "sent again, once");
    let key = format!("{id}:0");
    assert_eq!(
        s.platforms.slack_thread_keys(),
        std::slice::from_ref(&key),
        "in the thread once"
    );
    let part = &s.parts(id).await[0];
    assert_eq!(
        (part.status.as_str(), part.platform_message_id.clone()),
        ("sent", s.platforms.slack_ts_of(&key))
    );
    assert_eq!(s.worker.step().await.unwrap(), StepOutcome::Empty);
    assert_eq!(posts(&s).len(), 2);
}

#[tokio::test]
async fn the_thread_is_read_no_more_often_than_the_workspace_budget_allows_and_resumes_at_its_cursor() {
    let s = setup(0, 60_000).await;
    // 40 messages of others first: the part is on page 3.
    let id = interrupted_turn(&s, "1718003400.000100", &["deep"], Answer::HangAfterPosting, 40).await;

    assert_eq!(s.worker.step().await.unwrap(), StepOutcome::Retrying(id));
    assert_eq!(
        s.platforms.replies_calls().len(),
        1,
        "one page, then the budget is spent"
    );
    let wait = job_wait(&s, id).await;
    assert!(
        (55.0..=60.5).contains(&wait),
        "the job waits for the budget, got {wait}"
    );
    let saved: Option<String> = s.owner_scalar("select search_cursor from channel_replies").await;
    assert!(saved.is_some(), "where page 2 starts is kept");

    // The job comes round early (another wake-up): the budget still says no.
    s.time_passes().await;
    assert_eq!(s.worker.step().await.unwrap(), StepOutcome::Retrying(id));
    assert_eq!(
        s.platforms.replies_calls().len(),
        1,
        "no request before the budget allows"
    );
    assert!(job_wait(&s, id).await > 50.0);

    budget_refills(&s).await;
    s.time_passes().await;
    assert_eq!(s.worker.step().await.unwrap(), StepOutcome::Retrying(id));
    let calls = s.platforms.replies_calls();
    assert_eq!(calls.len(), 2);
    assert_eq!(
        param(&calls[1], "cursor"),
        saved.as_deref(),
        "resumed at page 2, not page 1"
    );

    budget_refills(&s).await;
    s.time_passes().await;
    assert_eq!(s.worker.step().await.unwrap(), StepOutcome::Delivered(id));
    let calls = s.platforms.replies_calls();
    assert_eq!(calls.len(), 3, "three pages, one per budget");
    assert_ne!(param(&calls[2], "cursor"), param(&calls[1], "cursor"));
    assert_eq!(
        posts(&s),
        ["deep"],
        "found on page 3, never resent while searching"
    );
}

#[tokio::test]
async fn a_rate_limited_thread_read_holds_the_workspace_off_for_retry_after_and_never_resends() {
    let s = setup(0, 0).await;
    s.platforms.script_replies([Answer::Status(
        429,
        json!({"ok": false, "error": "ratelimited"}),
        Some(30),
    )]);
    let id = interrupted_turn(&s, "1718003500.000100", &["patient"], Answer::HangAfterPosting, 0).await;

    assert_eq!(s.worker.step().await.unwrap(), StepOutcome::Retrying(id));
    let wait = job_wait(&s, id).await;
    assert!((28.0..=30.5).contains(&wait), "Retry-After honoured, got {wait}");
    let held: f64 = s
        .owner_scalar("select extract(epoch from next_at - now())::float8 from slack_read_budget")
        .await;
    assert!(
        (28.0..=30.5).contains(&held),
        "the workspace is held off, got {held}"
    );

    s.time_passes().await;
    assert_eq!(s.worker.step().await.unwrap(), StepOutcome::Retrying(id));
    assert_eq!(s.platforms.replies_calls().len(), 1, "no read before Retry-After");

    budget_refills(&s).await;
    s.time_passes().await;
    assert_eq!(s.worker.step().await.unwrap(), StepOutcome::Delivered(id));
    assert_eq!(s.platforms.replies_calls().len(), 2);
    assert_eq!(posts(&s), ["patient"], "never resent");
}

#[tokio::test]
async fn a_thread_that_cannot_be_read_leaves_the_part_unknown_never_resent_and_posts_the_rest() {
    let s = setup(0, 0).await;
    s.platforms.script_replies([Answer::Status(
        200,
        json!({"ok": false, "error": "missing_scope", "needed": "im:history"}),
        None,
    )]);
    let id = interrupted_turn(
        &s,
        "1718003600.000100",
        &["maybe", "after"],
        Answer::HangBeforePosting,
        0,
    )
    .await;

    assert_eq!(s.worker.step().await.unwrap(), StepOutcome::Failed(id));
    let parts = s.parts(id).await;
    assert_eq!(statuses(&parts), ["unknown", "sent"]);
    assert!(parts[0].last_error.as_deref().unwrap().contains("missing_scope"));
    assert_eq!(posts(&s), ["maybe", "after"], "the part in doubt is not resent");
}

#[tokio::test]
async fn tenant_a_cannot_see_or_spend_tenant_b_slack_read_budget() {
    let app = spawn_app().await;
    let a = provision_tenant(&app.pool, "tenant-a").await;
    let b = provision_tenant(&app.pool, "tenant-b").await;
    let minute = std::time::Duration::from_secs(60);
    let mut tx = TenantTx::begin(&app.pool, b.tenant).await.unwrap();
    assert_eq!(
        db::slack_budget::take(&mut tx, "T0001", minute).await.unwrap(),
        None
    );
    tx.commit().await.unwrap();

    let mut tx = TenantTx::begin(&app.pool, a.tenant).await.unwrap();
    let seen: i64 = sqlx::query_scalar("select count(*) from slack_read_budget where tenant_id = $1")
        .bind(b.tenant)
        .fetch_one(tx.conn())
        .await
        .unwrap();
    assert_eq!(seen, 0, "B's budget is invisible to A, even by its key");
    assert_eq!(
        db::slack_budget::take(&mut tx, "T0001", minute).await.unwrap(),
        None,
        "A's workspace has a budget of its own"
    );
    let spend = sqlx::query("update slack_read_budget set next_at = now() where tenant_id = $1")
        .bind(b.tenant)
        .execute(tx.conn())
        .await
        .unwrap();
    assert_eq!(spend.rows_affected(), 0, "A cannot refill B's budget");
    tx.commit().await.unwrap();

    let mut tx = TenantTx::begin(&app.pool, b.tenant).await.unwrap();
    let wait = db::slack_budget::take(&mut tx, "T0001", minute).await.unwrap();
    assert!(
        wait.is_some_and(|w| w.as_secs() >= 55),
        "B's budget is still spent: {wait:?}"
    );
}
