//! A webhook's turns inserted with their queue jobs: one statement on PostgreSQL, the turns
//! routed to their shard and the queue apart on Citus.

use serde_json::Value;

use crate::db::queue::{self, Stage};
use crate::db::TenantTx;
use crate::domain::{Address, ConnectorId, ConversationKey, MessageId, MessageStatus, Platform};

#[derive(Debug, Clone)]
pub struct NewMessage<'a> {
    pub connector_id: ConnectorId,
    pub platform: Platform,
    pub idempotency_key: &'a str,
    pub platform_message_id: &'a str,
    pub address: &'a Address,
    pub reply_to_id: Option<&'a str>,
    pub user_id: Option<&'a str>,
    pub conversation_key: &'a ConversationKey,
    pub request_content: &'a str,
    pub status: MessageStatus,
    /// For turns decided at ingress (`deny_unlinked`, `ignore_non_text`).
    pub decision: Option<&'a str>,
    pub metadata: &'a Value,
    pub attachments: Option<Value>,
    /// A tap's choice (`crate::choices::TapAction`).
    pub action: Option<Value>,
    /// A slash command's name (`/ask`).
    pub command: Option<&'a str>,
}

/// Inserts turns in order unless their idempotency key is recorded (the unique index
/// decides, no check-then-insert race), and queues the jobs of the accepted ones in the same
/// transaction. Returns the new id per input, `None` for a duplicate. On Citus a multi-row
/// `VALUES`, which it routes to the tenant's shard (it pulls `INSERT … SELECT FROM unnest`
/// through the coordinator), and the coordinator's queue in a statement of its own.
pub async fn insert_many(
    tx: &mut TenantTx,
    rows: &[NewMessage<'_>],
) -> Result<Vec<Option<MessageId>>, sqlx::Error> {
    if crate::db::citus::on_citus(tx.conn()).await? {
        insert_many_routed(tx, rows).await
    } else {
        insert_many_in_one(tx, rows).await
    }
}

async fn insert_many_routed(
    tx: &mut TenantTx,
    rows: &[NewMessage<'_>],
) -> Result<Vec<Option<MessageId>>, sqlx::Error> {
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    let tenant = tx.tenant();
    let ids: Vec<MessageId> = rows.iter().map(|_| MessageId::new()).collect();
    let now = chrono::Utc::now();
    let mut sql = sqlx::QueryBuilder::new(
        "insert into channel_messages (tenant_id, id, connector_id, platform, idempotency_key,
             platform_message_id, chat_id, thread_id, platform_user_id, reply_to_id, user_id,
             conversation_key, request_content, status, decision, metadata, space, attachments,
             completed_at, action, command) ",
    );
    sql.push_values(rows.iter().zip(&ids), |mut row, (r, id)| {
        row.push_bind(tenant)
            .push_bind(*id)
            .push_bind(r.connector_id)
            .push_bind(r.platform.as_str())
            .push_bind(r.idempotency_key)
            .push_bind(r.platform_message_id)
            .push_bind(&r.address.chat_id)
            .push_bind(&r.address.thread_id)
            .push_bind(&r.address.platform_user_id)
            .push_bind(r.reply_to_id)
            .push_bind(r.user_id)
            .push_bind(r.conversation_key)
            .push_bind(r.request_content)
            .push_bind(r.status.as_str())
            .push_bind(r.decision)
            .push_bind(r.metadata)
            .push_bind(&r.address.space)
            .push_bind(&r.attachments)
            .push_bind((r.status != MessageStatus::Accepted).then_some(now))
            .push_bind(&r.action)
            .push_bind(r.command);
    });
    sql.push(" on conflict (tenant_id, connector_id, idempotency_key) do nothing returning id");
    let inserted: std::collections::HashSet<MessageId> = sql
        .build_query_scalar()
        .fetch_all(tx.conn())
        .await?
        .into_iter()
        .collect();
    let jobs: Vec<(MessageId, &ConversationKey)> = rows
        .iter()
        .zip(&ids)
        .filter(|(r, id)| r.status == MessageStatus::Accepted && inserted.contains(id))
        .map(|(r, id)| (*id, r.conversation_key))
        .collect();
    queue::enqueue_many(tx, &jobs, Stage::Dispatch).await?;
    Ok(ids
        .into_iter()
        .map(|id| inserted.contains(&id).then_some(id))
        .collect())
}

async fn insert_many_in_one(
    tx: &mut TenantTx,
    rows: &[NewMessage<'_>],
) -> Result<Vec<Option<MessageId>>, sqlx::Error> {
    let tenant = tx.tenant();
    let ids: Vec<MessageId> = rows.iter().map(|_| MessageId::new()).collect();
    let column = |f: fn(&NewMessage<'_>) -> Option<String>| rows.iter().map(f).collect::<Vec<_>>();
    let inserted: Vec<MessageId> = sqlx::query_scalar(in_one_sql())
        .bind(tenant)
        .bind(&ids)
        .bind(rows.iter().map(|r| r.connector_id).collect::<Vec<_>>())
        .bind(column(|r| Some(r.platform.as_str().to_owned())))
        .bind(column(|r| Some(r.idempotency_key.to_owned())))
        .bind(column(|r| Some(r.platform_message_id.to_owned())))
        .bind(column(|r| Some(r.address.chat_id.clone())))
        .bind(column(|r| r.address.thread_id.clone()))
        .bind(column(|r| Some(r.address.platform_user_id.clone())))
        .bind(column(|r| r.reply_to_id.map(str::to_owned)))
        .bind(column(|r| r.user_id.map(str::to_owned)))
        .bind(column(|r| Some(r.conversation_key.as_str().to_owned())))
        .bind(column(|r| Some(r.request_content.to_owned())))
        .bind(column(|r| Some(r.status.as_str().to_owned())))
        .bind(column(|r| r.decision.map(str::to_owned)))
        .bind(rows.iter().map(|r| r.metadata.clone()).collect::<Vec<Value>>())
        .bind(column(|r| r.address.space.clone()))
        // A turn decided at ingress is complete now. The clock is read here: Citus refuses
        // `now()` inside a CASE of a modification.
        .bind(chrono::Utc::now())
        .bind(
            rows.iter()
                .map(|r| r.attachments.clone())
                .collect::<Vec<Option<Value>>>(),
        )
        .bind(
            rows.iter()
                .map(|r| r.action.clone())
                .collect::<Vec<Option<Value>>>(),
        )
        .bind(column(|r| r.command.map(str::to_owned)))
        .fetch_all(tx.conn())
        .await?;
    let inserted: std::collections::HashSet<MessageId> = inserted.into_iter().collect();
    Ok(ids
        .into_iter()
        .map(|id| inserted.contains(&id).then_some(id))
        .collect())
}

/// The turns from arrays, inserted in order, and the accepted ones queued, each under its
/// conversation's shared lock: one statement.
fn in_one_sql() -> &'static str {
    static SQL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SQL.get_or_init(|| {
        let lock = queue::conversation_lock("$1", "i.conversation_key");
        format!(
            "with rows as (
                 select * from unnest($2::uuid[], $3::uuid[], $4::text[], $5::text[], $6::text[],
                                      $7::text[], $8::text[], $9::text[], $10::text[], $11::text[],
                                      $12::text[], $13::text[], $14::text[], $15::text[], $16::jsonb[],
                                      $17::text[], $19::jsonb[], $20::jsonb[], $21::text[])
                      with ordinality as r(id, connector_id, platform, idempotency_key,
                           platform_message_id, chat_id, thread_id, platform_user_id, reply_to_id,
                           user_id, conversation_key, request_content, status, decision, metadata,
                           space, attachments, action, command, ord)),
             inserted as (
                 insert into channel_messages (tenant_id, id, connector_id, platform, idempotency_key,
                     platform_message_id, chat_id, thread_id, platform_user_id, reply_to_id, user_id,
                     conversation_key, request_content, status, decision, metadata, space, attachments,
                     completed_at, action, command)
                 select $1, r.id, r.connector_id, r.platform, r.idempotency_key, r.platform_message_id,
                        r.chat_id, r.thread_id, r.platform_user_id, r.reply_to_id, r.user_id,
                        r.conversation_key, r.request_content, r.status, r.decision, r.metadata, r.space,
                        r.attachments, case when r.status = 'accepted' then null else $18::timestamptz end,
                        r.action, r.command
                   from rows r
                  order by r.ord
                 on conflict (tenant_id, connector_id, idempotency_key) do nothing
                 returning id, conversation_key, status),
             queued as (
                 insert into dispatch_queue (message_id, tenant_id, conversation_key, stage)
                 select i.id, $1, i.conversation_key, 'dispatch'
                   from inserted i
                   join rows r on r.id = i.id
                   cross join lateral (select pg_advisory_xact_lock_shared({lock})) as recording
                  where i.status = 'accepted'
                  order by r.ord)
             select id from inserted"
        )
    })
}
