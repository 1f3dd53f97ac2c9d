//! `channel_reactions`: people's reactions to posted answers, the latest state per answered
//! turn and person (docs/agent.md#reactions-feedback-on-answers). A reaction finds its
//! answer by the reacted message's platform id among the reply parts of the connector's
//! turns in that chat; anything else (a person's own message, another tenant's) is not ours.

use serde::Serialize;

use super::TenantTx;
use crate::domain::{ConnectorId, MessageId};

/// Which answer a reaction is about: the turn and the part reacted to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, sqlx::FromRow)]
pub struct ReactedPart {
    pub message_id: MessageId,
    pub part_index: i32,
}

/// A person's reaction, the latest state of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct ReactionOut {
    /// The platform user who reacted.
    pub by: String,
    /// The emoji now on the answer, as the platform spells it (Slack: its name); null once
    /// removed.
    pub emoji: Option<String>,
    /// +1 for 👍, -1 for 👎 (and their platform spellings), 0 for anything else or removed.
    pub value: i16,
    /// The reply part reacted to.
    pub part_index: i32,
    /// When the person reacted, by the platform's clock.
    pub at: chrono::DateTime<chrono::Utc>,
}

/// One person's reaction at a moment, by the platform's clock.
#[derive(Debug, Clone, Copy)]
pub struct ReactionBy<'a> {
    pub part: ReactedPart,
    pub platform_user_id: &'a str,
    pub at: chrono::DateTime<chrono::Utc>,
}

/// The answer a reaction is about, if the reacted message is one of our reply parts in the
/// reaction's chat on this connector. An edit part shares its message: the part it edits
/// is the one reacted to.
pub async fn reacted_part(
    tx: &mut TenantTx,
    connector: ConnectorId,
    chat_id: &str,
    platform_message_id: &str,
) -> Result<Option<ReactedPart>, sqlx::Error> {
    let tenant = tx.tenant();
    sqlx::query_as(
        "select r.message_id, r.part_index
           from channel_replies r
           join channel_messages m on m.tenant_id = r.tenant_id and m.id = r.message_id
          where r.tenant_id = $1 and m.tenant_id = $1 and r.platform_message_id = $2
            and m.connector_id = $3 and m.chat_id = $4 and r.edit_of is null
          order by r.created_at
          limit 1",
    )
    .bind(tenant)
    .bind(platform_message_id)
    .bind(connector)
    .bind(chat_id)
    .fetch_optional(tx.conn())
    .await
}

/// The person's reaction is now `emoji`, unless a later state is recorded. `Some(value)`
/// when their state changed, `None` when nothing did.
pub async fn set(
    tx: &mut TenantTx,
    reaction: ReactionBy<'_>,
    emoji: &str,
    value: i16,
) -> Result<Option<i16>, sqlx::Error> {
    let tenant = tx.tenant();
    // Citus refuses `now()` in some modifications: the clock is read here.
    sqlx::query_scalar(
        "insert into channel_reactions as c
                (tenant_id, message_id, platform_user_id, part_index, emoji, value, reacted_at,
                 recorded_at)
         values ($1, $2, $3, $4, $5, $6, $7, $8)
         on conflict (tenant_id, message_id, platform_user_id) do update
            set part_index = excluded.part_index, emoji = excluded.emoji, value = excluded.value,
                reacted_at = excluded.reacted_at, recorded_at = excluded.recorded_at
          where c.reacted_at <= excluded.reacted_at
            and (c.emoji is distinct from excluded.emoji or c.part_index <> excluded.part_index)
         returning value",
    )
    .bind(tenant)
    .bind(reaction.part.message_id)
    .bind(reaction.platform_user_id)
    .bind(reaction.part.part_index)
    .bind(emoji)
    .bind(value)
    .bind(reaction.at)
    .bind(chrono::Utc::now())
    .fetch_optional(tx.conn())
    .await
}

/// The person's reaction is taken off: `emoji` only if it is that one (Slack removes one of
/// several), `None` whichever it is. `Some(0)` when it was there, `None` when not.
pub async fn remove(
    tx: &mut TenantTx,
    reaction: ReactionBy<'_>,
    emoji: Option<&str>,
) -> Result<Option<i16>, sqlx::Error> {
    let tenant = tx.tenant();
    sqlx::query_scalar(
        "update channel_reactions
            set emoji = null, value = 0, reacted_at = $5, recorded_at = $6
          where tenant_id = $1 and message_id = $2 and platform_user_id = $3
            and emoji is not null and reacted_at <= $5
            and ($4::text is null or emoji = $4)
         returning value",
    )
    .bind(tenant)
    .bind(reaction.part.message_id)
    .bind(reaction.platform_user_id)
    .bind(emoji)
    .bind(reaction.at)
    .bind(chrono::Utc::now())
    .fetch_optional(tx.conn())
    .await
}

/// The reactions on these turns, by turn, the earliest first.
pub async fn of_messages(
    tx: &mut TenantTx,
    ids: &[MessageId],
) -> Result<Vec<(MessageId, ReactionOut)>, sqlx::Error> {
    #[derive(sqlx::FromRow)]
    struct Row {
        message_id: MessageId,
        #[sqlx(flatten)]
        reaction: ReactionOut,
    }
    let tenant = tx.tenant();
    let rows: Vec<Row> = sqlx::query_as(
        "select message_id, platform_user_id as by, emoji, value, part_index, reacted_at as at
           from channel_reactions
          where tenant_id = $1 and message_id = any($2)
          order by message_id, reacted_at, platform_user_id",
    )
    .bind(tenant)
    .bind(ids)
    .fetch_all(tx.conn())
    .await?;
    Ok(rows.into_iter().map(|r| (r.message_id, r.reaction)).collect())
}

/// Whether the tenant asked for `feedback` events.
pub async fn feedback_events_on(tx: &mut TenantTx) -> Result<bool, sqlx::Error> {
    let tenant = tx.tenant();
    let on: Option<bool> = sqlx::query_scalar("select feedback_events from tenants where id = $1")
        .bind(tenant)
        .fetch_optional(tx.conn())
        .await?;
    Ok(on.unwrap_or(false))
}

/// Queues the `feedback` event of a change, in the transaction that records it.
pub async fn queue_feedback(tx: &mut TenantTx, reaction: ReactionBy<'_>) -> Result<(), sqlx::Error> {
    let tenant = tx.tenant();
    sqlx::query(
        "insert into feedback_queue (tenant_id, message_id, platform_user_id, reacted_at)
         values ($1, $2, $3, $4)",
    )
    .bind(tenant)
    .bind(reaction.part.message_id)
    .bind(reaction.platform_user_id)
    .bind(reaction.at)
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// A queued `feedback` event, claimed for one attempt.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct FeedbackJob {
    pub id: i64,
    pub tenant_id: crate::domain::TenantId,
    pub message_id: MessageId,
    pub platform_user_id: String,
    pub reacted_at: chrono::DateTime<chrono::Utc>,
    pub attempts: i32,
}

/// Up to `limit` due events, each put off by `retry_in(attempts)` should its attempt fail
/// (or the instance stop) before it is settled; across tenants, skipping those another
/// instance holds.
pub async fn claim_feedback(
    conn: &mut sqlx::PgConnection,
    now: chrono::DateTime<chrono::Utc>,
    limit: i64,
    backoff_secs: &[i32],
) -> Result<Vec<FeedbackJob>, sqlx::Error> {
    sqlx::query_as(
        "update feedback_queue q
            set attempts = q.attempts + 1,
                due_at = $1 + make_interval(secs => ($3::int[])[least(q.attempts + 1, cardinality($3::int[]))])
          where q.id in (select id from feedback_queue where due_at <= $1
                          order by due_at limit $2 for update skip locked)
      returning q.id, q.tenant_id, q.message_id, q.platform_user_id, q.reacted_at, q.attempts",
    )
    .bind(now)
    .bind(limit)
    .bind(backoff_secs)
    .fetch_all(conn)
    .await
}

/// The event is settled: sent, superseded, or given up.
pub async fn settle_feedback(conn: &mut sqlx::PgConnection, id: i64) -> Result<(), sqlx::Error> {
    sqlx::query("delete from feedback_queue where id = $1")
        .bind(id)
        .execute(conn)
        .await?;
    Ok(())
}

/// The person's reaction on the turn, if it is still the state of `at`.
pub async fn reaction_as_of(
    tx: &mut TenantTx,
    message: MessageId,
    platform_user_id: &str,
    at: chrono::DateTime<chrono::Utc>,
) -> Result<Option<ReactionOut>, sqlx::Error> {
    let tenant = tx.tenant();
    sqlx::query_as(
        "select platform_user_id as by, emoji, value, part_index, reacted_at as at
           from channel_reactions
          where tenant_id = $1 and message_id = $2 and platform_user_id = $3 and reacted_at = $4",
    )
    .bind(tenant)
    .bind(message)
    .bind(platform_user_id)
    .bind(at)
    .fetch_optional(tx.conn())
    .await
}
