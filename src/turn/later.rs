//! An answer the agent gives later (docs/agent.md#answering-later): the events it posts to a
//! turn left `awaiting_agent` by a 202. Like `requeue`, these transitions hold no lease:
//! each locks the turn's row, records the event under its id (a repeat changes nothing),
//! and gives new reply parts a reply job of the turn, which the delivery pass posts in
//! order like any answer's.

use crate::db::messages::{MessageRow, MESSAGE_COLUMNS};
use crate::db::queue::{self, Stage};
use crate::db::TenantTx;
use crate::domain::{MessageId, MessageStatus};

/// The error of a turn ended at the horizon: its events answer 410 from then on.
pub const PAST_HORIZON: &str = "the agent did not post done within CB_AGENT_ASYNC_HORIZON_SECS";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    Status,
    Message,
    Done,
}

impl EventKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Status => "status",
            Self::Message => "message",
            Self::Done => "done",
        }
    }
}

/// A turn opened for an event: locked until the commit, and waiting for the agent.
#[derive(Debug, Clone)]
pub enum Opened {
    Ready(Box<MessageRow>),
    /// The same `webhook-id` was applied before.
    Repeat,
    NoSuchTurn,
    /// The turn is not waiting for the agent (answered, done, or never answered 202).
    NotAwaiting(MessageStatus),
    /// `awaiting_until` has passed.
    PastHorizon,
}

#[derive(sqlx::FromRow)]
struct Locked {
    #[sqlx(flatten)]
    turn: MessageRow,
    awaiting_until: Option<chrono::DateTime<chrono::Utc>>,
}

/// Locks the turn's row and says whether the event may be applied to it.
pub async fn open(tx: &mut TenantTx, message: MessageId, event_id: &str) -> Result<Opened, sqlx::Error> {
    let tenant = tx.tenant();
    let locked: Option<Locked> = sqlx::query_as(&format!(
        "select {MESSAGE_COLUMNS}, awaiting_until from channel_messages
          where tenant_id = $1 and id = $2 for update"
    ))
    .bind(tenant)
    .bind(message)
    .fetch_optional(tx.conn())
    .await?;
    let Some(Locked { turn, awaiting_until }) = locked else {
        return Ok(Opened::NoSuchTurn);
    };
    let seen: bool = sqlx::query_scalar(
        "select exists (select 1 from agent_events
                         where tenant_id = $1 and message_id = $2 and event_id = $3)",
    )
    .bind(tenant)
    .bind(message)
    .bind(event_id)
    .fetch_one(tx.conn())
    .await?;
    if seen {
        return Ok(Opened::Repeat);
    }
    if turn.status != MessageStatus::AwaitingAgent {
        if turn.last_error.as_deref() == Some(PAST_HORIZON) {
            return Ok(Opened::PastHorizon);
        }
        return Ok(Opened::NotAwaiting(turn.status));
    }
    if awaiting_until.is_some_and(|until| until < chrono::Utc::now()) {
        return Ok(Opened::PastHorizon);
    }
    Ok(Opened::Ready(Box::new(turn)))
}

/// Records an event of a turn `open` found ready. `parts`: the event's text, split for the
/// platform (empty for a status or a bare done).
pub async fn apply(
    tx: &mut TenantTx,
    turn: &MessageRow,
    event_id: &str,
    kind: EventKind,
    text: Option<&str>,
    parts: &[String],
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "insert into agent_events (tenant_id, message_id, event_id, kind, parts)
         values ($1, $2, $3, $4, $5)",
    )
    .bind(tx.tenant())
    .bind(turn.id)
    .bind(event_id)
    .bind(kind.as_str())
    .bind(i32::try_from(parts.len()).unwrap_or(i32::MAX))
    .execute(tx.conn())
    .await?;
    let queued = if parts.is_empty() {
        job_exists(tx, turn.id).await?
    } else {
        add_parts(tx, turn, text.unwrap_or_default(), parts).await?;
        true
    };
    if kind == EventKind::Done {
        finish(tx, turn.id, queued).await?;
    }
    Ok(())
}

/// Locks the turn's job if it has one, so a delivery pass ending now waits for this commit
/// and then finds the new parts (`PartsPosted`); without one, the parts get a job.
async fn add_parts(
    tx: &mut TenantTx,
    turn: &MessageRow,
    text: &str,
    parts: &[String],
) -> Result<(), sqlx::Error> {
    let tenant = tx.tenant();
    let first: i32 = sqlx::query_scalar(
        "select coalesce(max(part_index) + 1, 0) from channel_replies
          where tenant_id = $1 and message_id = $2",
    )
    .bind(tenant)
    .bind(turn.id)
    .fetch_one(tx.conn())
    .await?;
    crate::db::messages::insert_reply_parts_from(tx, turn.id, first, parts).await?;
    sqlx::query(
        "update channel_messages
            set response_content = case when response_content is null or response_content = ''
                                        then $3 else response_content || E'\\n\\n' || $3 end,
                decision = 'respond', updated_at = now()
          where tenant_id = $1 and id = $2",
    )
    .bind(tenant)
    .bind(turn.id)
    .bind(text)
    .execute(tx.conn())
    .await?;
    if !job_exists(tx, turn.id).await? {
        queue::enqueue(tx, turn.id, &turn.conversation_key, Stage::Reply).await?;
    }
    Ok(())
}

async fn job_exists(tx: &mut TenantTx, message: MessageId) -> Result<bool, sqlx::Error> {
    let job: Option<MessageId> = sqlx::query_scalar(
        "select message_id from dispatch_queue
          where message_id = $2 and tenant_id is not distinct from $1 for update",
    )
    .bind(tx.tenant())
    .bind(message)
    .fetch_optional(tx.conn())
    .await?;
    Ok(job.is_some())
}

/// The answer is complete: `executed`, and delivered now when nothing is left to post (a
/// job still queued records that when it ends).
async fn finish(tx: &mut TenantTx, message: MessageId, queued: bool) -> Result<(), sqlx::Error> {
    let now = chrono::Utc::now();
    sqlx::query(
        "update channel_messages
            set status = 'executed', awaiting_until = null, completed_at = $3, updated_at = $3,
                decision = case when response_content is null then 'no_reply' else 'respond' end,
                delivered_at = case when $4 then null else $3 end
          where tenant_id = $1 and id = $2",
    )
    .bind(tx.tenant())
    .bind(message)
    .bind(now)
    .bind(queued)
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// Turns past their horizon end with what they got: `executed` when some part came (the
/// error says the rest did not), else `dispatch_failed`. Returns how many.
pub async fn end_past_horizon(
    tx: &mut TenantTx,
    now: chrono::DateTime<chrono::Utc>,
    limit: i64,
) -> Result<u64, sqlx::Error> {
    let ended = sqlx::query(
        "update channel_messages m
            set status = case when m.response_content is null then 'dispatch_failed' else 'executed' end,
                decision = case when m.response_content is null then 'dispatch_failed' else m.decision end,
                last_error = $4,
                awaiting_until = null, completed_at = $2, updated_at = $2
          where m.tenant_id = $1 and m.status = 'awaiting_agent'
            and m.id in (select id from channel_messages
                          where tenant_id = $1 and status = 'awaiting_agent' and awaiting_until < $2
                          order by awaiting_until limit $3)",
    )
    .bind(tx.tenant())
    .bind(now)
    .bind(limit)
    .bind(PAST_HORIZON)
    .execute(tx.conn())
    .await?;
    Ok(ended.rows_affected())
}
