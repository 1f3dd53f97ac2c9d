//! `channel_messages` and `channel_replies`: one row per inbound user turn, and its reply
//! parts (tenant tables, RLS).

use serde::Serialize;
use serde_json::Value;

use super::TenantTx;
use crate::domain::{ConnectorId, ConversationKey, MessageId, MessageStatus, Platform, TenantId};

#[derive(Debug, Clone)]
pub struct NewMessage<'a> {
    pub connector_id: ConnectorId,
    pub platform: Platform,
    pub idempotency_key: &'a str,
    pub platform_message_id: &'a str,
    pub chat_id: &'a str,
    pub thread_id: Option<&'a str>,
    /// The shared space it was asked in; `None` for a direct message.
    pub space: Option<&'a str>,
    pub platform_user_id: &'a str,
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
    if super::on_citus(tx.conn()).await? {
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
            .push_bind(r.chat_id)
            .push_bind(r.thread_id)
            .push_bind(r.platform_user_id)
            .push_bind(r.reply_to_id)
            .push_bind(r.user_id)
            .push_bind(r.conversation_key)
            .push_bind(r.request_content)
            .push_bind(r.status.as_str())
            .push_bind(r.decision)
            .push_bind(r.metadata)
            .push_bind(r.space)
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
    super::queue::enqueue_many(tx, &jobs, super::queue::Stage::Dispatch).await?;
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
    static SQL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let sql = SQL.get_or_init(|| {
        let lock = super::queue::conversation_lock("$1", "i.conversation_key");
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
    });
    let inserted: Vec<MessageId> = sqlx::query_scalar(sql)
        .bind(tenant)
        .bind(&ids)
        .bind(rows.iter().map(|r| r.connector_id).collect::<Vec<_>>())
        .bind(column(|r| Some(r.platform.as_str().to_owned())))
        .bind(column(|r| Some(r.idempotency_key.to_owned())))
        .bind(column(|r| Some(r.platform_message_id.to_owned())))
        .bind(column(|r| Some(r.chat_id.to_owned())))
        .bind(column(|r| r.thread_id.map(str::to_owned)))
        .bind(column(|r| Some(r.platform_user_id.to_owned())))
        .bind(column(|r| r.reply_to_id.map(str::to_owned)))
        .bind(column(|r| r.user_id.map(str::to_owned)))
        .bind(column(|r| Some(r.conversation_key.as_str().to_owned())))
        .bind(column(|r| Some(r.request_content.to_owned())))
        .bind(column(|r| Some(r.status.as_str().to_owned())))
        .bind(column(|r| r.decision.map(str::to_owned)))
        .bind(rows.iter().map(|r| r.metadata.clone()).collect::<Vec<Value>>())
        .bind(column(|r| r.space.map(str::to_owned)))
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

#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct MessageRow {
    pub id: MessageId,
    pub tenant_id: TenantId,
    pub connector_id: ConnectorId,
    pub platform: Platform,
    pub idempotency_key: String,
    pub platform_message_id: String,
    pub chat_id: String,
    pub thread_id: Option<String>,
    pub space: Option<String>,
    pub platform_user_id: String,
    pub reply_to_id: Option<String>,
    pub user_id: Option<String>,
    pub conversation_key: ConversationKey,
    pub request_content: String,
    pub response_content: Option<String>,
    pub decision: Option<String>,
    pub status: MessageStatus,
    pub attempts: i32,
    pub last_error: Option<String>,
    pub received_at: chrono::DateTime<chrono::Utc>,
    pub completed_at: Option<chrono::DateTime<chrono::Utc>>,
    pub delivered_at: Option<chrono::DateTime<chrono::Utc>>,
    pub metadata: Value,
    #[sqlx(json(nullable))]
    pub attachments: Option<Vec<crate::media::Attachment>>,
    /// Where a streamed answer was shown; the first reply part adopts it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub live_message_id: Option<String>,
    pub origin: crate::domain::TurnOrigin,
    /// Who wrote a person's turn (the key's name).
    pub author: Option<String>,
    /// On a tap's turn: the choice it made.
    #[sqlx(json(nullable), default)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub action: Option<crate::choices::TapAction>,
    /// On a slash command's turn: which (`/ask`).
    #[sqlx(default)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
}

impl MessageRow {
    /// The platform message a reply threads to: `None` for a turn the agent wrote first
    /// (`turn::outgoing`), which replies to nothing.
    pub fn reply_target(&self) -> Option<&str> {
        Some(self.platform_message_id.as_str()).filter(|id| !id.is_empty())
    }
}

pub const MESSAGE_COLUMNS: &str = "id, tenant_id, connector_id, platform, idempotency_key,
    platform_message_id, chat_id, thread_id, space, platform_user_id, reply_to_id, user_id,
    conversation_key, request_content, response_content, decision, status, attempts,
    last_error, received_at, completed_at, delivered_at, metadata, attachments, live_message_id,
    origin, author, action, command";

/// `None`: a direct chat, or none recorded.
pub async fn space_of_chat(
    tx: &mut TenantTx,
    connector: ConnectorId,
    chat_id: &str,
) -> Result<Option<String>, sqlx::Error> {
    let tenant = tx.tenant();
    let space: Option<Option<String>> = sqlx::query_scalar(
        "select space from channel_messages
          where tenant_id = $1 and connector_id = $2 and chat_id = $3
          order by received_at desc limit 1",
    )
    .bind(tenant)
    .bind(connector)
    .bind(chat_id)
    .fetch_optional(tx.conn())
    .await?;
    Ok(space.flatten())
}

/// `(connector, chat id)` `user_id` last wrote in, narrowed by the other arguments.
pub async fn last_chat(
    tx: &mut TenantTx,
    user_id: &str,
    connector: Option<ConnectorId>,
    chat_id: Option<&str>,
    direct: bool,
) -> Result<Option<(ConnectorId, String)>, sqlx::Error> {
    let tenant = tx.tenant();
    sqlx::query_as(
        "select connector_id, chat_id from channel_messages
          where tenant_id = $1 and user_id = $2
            and ($3::uuid is null or connector_id = $3) and ($4::text is null or chat_id = $4)
            and (not $5 or space is null)
          order by received_at desc limit 1",
    )
    .bind(tenant)
    .bind(user_id)
    .bind(connector)
    .bind(chat_id)
    .bind(direct)
    .fetch_optional(tx.conn())
    .await
}

pub async fn attachment(
    tx: &mut TenantTx,
    id: MessageId,
    index: u16,
) -> Result<Option<(ConnectorId, crate::media::Attachment)>, sqlx::Error> {
    let tenant = tx.tenant();
    let row: Option<(ConnectorId, sqlx::types::Json<crate::media::Attachment>)> = sqlx::query_as(
        "select connector_id, attachments -> $3::int from channel_messages
          where tenant_id = $1 and id = $2 and attachments -> $3::int is not null",
    )
    .bind(tenant)
    .bind(id)
    .bind(i32::from(index))
    .fetch_optional(tx.conn())
    .await?;
    Ok(row.map(|(connector, attachment)| (connector, attachment.0)))
}

pub async fn get(tx: &mut TenantTx, id: MessageId) -> Result<Option<MessageRow>, sqlx::Error> {
    let tenant = tx.tenant();
    sqlx::query_as(&format!(
        "select {MESSAGE_COLUMNS} from channel_messages where tenant_id = $1 and id = $2"
    ))
    .bind(tenant)
    .bind(id)
    .fetch_optional(tx.conn())
    .await
}

/// Which turns a listing narrows to, each field set narrowing it (made from a request's
/// `shapes::MessageSelection`).
#[derive(Debug, Clone, Default)]
pub struct Matching {
    pub user_id: Option<String>,
    pub platform: Option<Platform>,
    pub connector_id: Option<ConnectorId>,
    pub status: Option<MessageStatus>,
    /// Received at or after.
    pub since: Option<chrono::DateTime<chrono::Utc>>,
    /// Received before.
    pub until: Option<chrono::DateTime<chrono::Utc>>,
}

#[derive(Debug, Clone, Default)]
pub struct MessageFilter {
    pub matching: Matching,
    /// An unlinked sender's conversation (`conversation_key` of turns with no user).
    pub sender_conversation: Option<String>,
    pub decision: Option<String>,
    /// Case-insensitive, in the request or the response.
    pub text: Option<String>,
    /// Keyset: rows strictly older than this `(received_at, id)`.
    pub before: Option<(chrono::DateTime<chrono::Utc>, MessageId)>,
    pub limit: i64,
}

/// Newest first; keyset paging keeps pages stable while new rows arrive.
pub async fn list(tx: &mut TenantTx, filter: &MessageFilter) -> Result<Vec<MessageRow>, sqlx::Error> {
    let tenant = tx.tenant();
    let mut sql = sqlx::QueryBuilder::<sqlx::Postgres>::new(format!(
        "select {MESSAGE_COLUMNS} from channel_messages where tenant_id = "
    ));
    sql.push_bind(tenant);
    let mut eq = |column: &str, value: Option<String>| {
        if let Some(value) = value {
            sql.push(format!(" and {column} = ")).push_bind(value);
        }
    };
    let matching = &filter.matching;
    eq("user_id", matching.user_id.clone());
    eq("platform", matching.platform.map(|p| p.as_str().to_owned()));
    eq("status", matching.status.map(|s| s.as_str().to_owned()));
    eq("decision", filter.decision.clone());
    if let Some(connector) = matching.connector_id {
        sql.push(" and connector_id = ").push_bind(connector);
    }
    if let Some(key) = &filter.sender_conversation {
        // `user_id is null` lets the planner use the partial sender history index.
        sql.push(" and user_id is null and conversation_key = ")
            .push_bind(key.clone());
    }
    if let Some(since) = matching.since {
        sql.push(" and received_at >= ").push_bind(since);
    }
    if let Some(until) = matching.until {
        sql.push(" and received_at < ").push_bind(until);
    }
    if let Some(text) = &filter.text {
        let pattern = format!("%{}%", escape_like(text));
        sql.push(" and (request_content ilike ")
            .push_bind(pattern.clone());
        sql.push(" or response_content ilike ")
            .push_bind(pattern)
            .push(")");
    }
    if let Some((received_at, id)) = filter.before {
        sql.push(" and (received_at, id) < (")
            .push_bind(received_at)
            .push(", ")
            .push_bind(id)
            .push(")");
    }
    sql.push(" order by received_at desc, id desc limit ")
        .push_bind(filter.limit);
    sql.build_query_as().fetch_all(tx.conn()).await
}

/// `%`, `_` and `\` match themselves in a search, not as LIKE wildcards.
fn escape_like(text: &str) -> String {
    text.replace('\\', "\\\\").replace('%', "\\%").replace('_', "\\_")
}

/// An inbound turn of this tenant, or the turn whose reply part the user answered.
pub async fn resolve_reply_to(
    tx: &mut TenantTx,
    connector: ConnectorId,
    platform_message_id: &str,
) -> Result<Option<MessageId>, sqlx::Error> {
    let tenant = tx.tenant();
    sqlx::query_scalar(
        "select id from channel_messages
          where tenant_id = $1 and connector_id = $2 and platform_message_id = $3
         union all
         select r.message_id from channel_replies r
          where r.tenant_id = $1 and r.platform_message_id = $3
         limit 1",
    )
    .bind(tenant)
    .bind(connector)
    .bind(platform_message_id)
    .fetch_optional(tx.conn())
    .await
}
