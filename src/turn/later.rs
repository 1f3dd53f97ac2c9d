//! An answer the agent gives later (docs/agent.md#answering-later): the events it posts to a
//! turn left `awaiting_agent` by a 202. Like `requeue`, these transitions hold no lease:
//! each locks the turn's row, records the event under its id (a repeat changes nothing),
//! and gives new reply parts a reply job of the turn, which the delivery pass posts in
//! order like any answer's.

use super::HandoffRequest;
use crate::db::messages::{MessageRow, MESSAGE_COLUMNS};
use crate::db::queue::{self, Stage};
use crate::db::TenantTx;
use crate::domain::{MessageId, MessageStatus, PartStatus};

/// The error of a turn the horizon ended before any part came (`dispatch_failed`). Every turn
/// the horizon ended answers its events 410 from then on.
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
    let events: Events = sqlx::query_as(
        "select coalesce(bool_or(event_id = $3), false) as seen,
                coalesce(bool_or(kind = 'done'), false) as done, count(*) > 0 as any
           from agent_events where tenant_id = $1 and message_id = $2",
    )
    .bind(tenant)
    .bind(message)
    .bind(event_id)
    .fetch_one(tx.conn())
    .await?;
    if events.seen {
        return Ok(Opened::Repeat);
    }
    if turn.status != MessageStatus::AwaitingAgent {
        if ended_at_horizon(&turn, &events) {
            return Ok(Opened::PastHorizon);
        }
        return Ok(Opened::NotAwaiting(turn.status));
    }
    if awaiting_until.is_some_and(|until| until < chrono::Utc::now()) {
        return Ok(Opened::PastHorizon);
    }
    Ok(Opened::Ready(Box::new(turn)))
}

/// What a turn's events say of it.
#[derive(sqlx::FromRow)]
struct Events {
    /// The event being opened was applied before.
    seen: bool,
    done: bool,
    any: bool,
}

/// The sweep leaves its error on a turn that got nothing; one that got parts reads as any
/// answered turn, and only its events (parts, but no `done`) tell that the horizon ended it.
fn ended_at_horizon(turn: &MessageRow, events: &Events) -> bool {
    let answered = matches!(
        turn.status,
        MessageStatus::Executed | MessageStatus::DeliveryFailed
    );
    turn.last_error.as_deref() == Some(PAST_HORIZON) || (answered && events.any && !events.done)
}

/// An event `open` found ready to apply.
#[derive(Debug, Clone)]
pub struct Event<'a> {
    /// Its `webhook-id`.
    pub id: &'a str,
    pub kind: EventKind,
    /// The event's text (as history shows it) and its reply parts, made ready for the
    /// platform (none for a status or a bare `done`).
    pub text: Option<&'a str>,
    pub reply: &'a crate::db::parts::Reply,
    /// A `done` that asks for a person: the conversation is held in the event's commit.
    pub handoff: Option<HandoffRequest>,
}

/// Records an event of a turn `open` found ready.
pub async fn apply(tx: &mut TenantTx, turn: &MessageRow, event: &Event<'_>) -> Result<(), sqlx::Error> {
    sqlx::query(
        "insert into agent_events (tenant_id, message_id, event_id, kind, parts)
         values ($1, $2, $3, $4, $5)",
    )
    .bind(tx.tenant())
    .bind(turn.id)
    .bind(event.id)
    .bind(event.kind.as_str())
    .bind(i32::try_from(event.reply.len()).unwrap_or(i32::MAX))
    .execute(tx.conn())
    .await?;
    if !event.reply.is_empty() {
        add_parts(tx, turn, event.text.unwrap_or_default(), event.reply).await?;
    }
    if event.kind == EventKind::Done {
        settle(tx, &[turn.id], End::Done, chrono::Utc::now()).await?;
        if let Some(request) = &event.handoff {
            super::handoff::hold_for_agent(tx, turn.id, request).await?;
        }
    }
    Ok(())
}

/// Locks the turn's job if it has one, so a delivery pass ending now waits for this commit
/// and then finds the new parts (`PartsPosted`); without one, the parts get a job. Returns
/// the first new part's index.
async fn add_parts(
    tx: &mut TenantTx,
    turn: &MessageRow,
    text: &str,
    reply: &crate::db::parts::Reply,
) -> Result<i32, sqlx::Error> {
    let tenant = tx.tenant();
    let first: i32 = sqlx::query_scalar(
        "select coalesce(max(part_index) + 1, 0) from channel_replies
          where tenant_id = $1 and message_id = $2",
    )
    .bind(tenant)
    .bind(turn.id)
    .fetch_one(tx.conn())
    .await?;
    crate::db::parts::insert_reply_parts_from(tx, turn.id, first, reply).await?;
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
    if !queue::has_job(tx, turn.id).await? {
        queue::enqueue(tx, turn.id, &turn.conversation_key, Stage::Reply).await?;
    }
    Ok(first)
}

/// Turns past their horizon end with what they got, as `settle` reads it; a turn that got
/// no part is `dispatch_failed`. Returns how many.
pub async fn end_past_horizon(
    tx: &mut TenantTx,
    now: chrono::DateTime<chrono::Utc>,
    limit: i64,
) -> Result<u64, sqlx::Error> {
    let due: Vec<MessageId> = sqlx::query_scalar(
        "select id from channel_messages
          where tenant_id = $1 and status = 'awaiting_agent' and awaiting_until < $2
          order by awaiting_until limit $3 for update",
    )
    .bind(tx.tenant())
    .bind(now)
    .bind(limit)
    .fetch_all(tx.conn())
    .await?;
    settle(tx, &due, End::Horizon, now).await?;
    Ok(due.len() as u64)
}

/// What ended an answer given later.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// The agent posted `done`.
    Done,
    /// `CB_AGENT_ASYNC_HORIZON_SECS` passed first.
    Horizon,
}

/// How an ended answer's parts stand.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Parts {
    /// Every part was posted (or there is none).
    Posted,
    /// The turn's reply job still has parts to post: it records the delivery when it ends
    /// (`PartsPosted` or `Delivered`), as for any answer.
    Posting,
    /// A part failed for good: its error.
    Failed(String),
    /// A part may or may not have been posted (Telegram at-most-once): its error.
    InDoubt(String),
}

impl Parts {
    /// `parts` in order, as (status, error).
    fn of(job: bool, parts: &[(PartStatus, Option<String>)]) -> Self {
        let error_of = |wanted: PartStatus| {
            parts
                .iter()
                .find(|(status, _)| *status == wanted)
                .map(|(_, error)| error.clone().unwrap_or_else(|| wanted.as_str().to_owned()))
        };
        if job {
            Self::Posting
        } else if let Some(error) = error_of(PartStatus::Failed) {
            Self::Failed(error)
        } else if let Some(error) = error_of(PartStatus::Unknown) {
            Self::InDoubt(error)
        } else if parts.iter().all(|(status, _)| *status == PartStatus::Sent) {
            Self::Posted
        } else {
            Self::Posting
        }
    }
}

/// An ended turn's row, as a synchronous answer with the same parts would read
/// (docs/admin.md#failed-turns-seeing-them-and-acting-on-them).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Ended {
    status: MessageStatus,
    decision: &'static str,
    last_error: Option<String>,
    delivered: bool,
}

impl Ended {
    /// `answered`: the agent gave some text (a `message` or `done` with content).
    fn of(end: End, answered: bool, parts: Parts) -> Self {
        let executed = |last_error, delivered| Self {
            status: MessageStatus::Executed,
            decision: if answered { "respond" } else { "no_reply" },
            last_error,
            delivered,
        };
        match (end, answered, parts) {
            (End::Horizon, false, _) => Self {
                status: MessageStatus::DispatchFailed,
                decision: "dispatch_failed",
                last_error: Some(PAST_HORIZON.to_owned()),
                delivered: false,
            },
            (_, _, Parts::Posted) => executed(None, true),
            (_, _, Parts::Posting) => executed(None, false),
            (_, _, Parts::InDoubt(error)) => executed(Some(error), false),
            (_, _, Parts::Failed(error)) => Self {
                status: MessageStatus::DeliveryFailed,
                ..executed(Some(error), false)
            },
        }
    }
}

/// Ends turns locked by the caller (`open`, the sweep). The jobs' rows are locked first, so
/// a delivery pass ending now either commits before the parts are read here, or finds the
/// turn ended and records its delivery itself.
async fn settle(
    tx: &mut TenantTx,
    turns: &[MessageId],
    end: End,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<(), sqlx::Error> {
    if turns.is_empty() {
        return Ok(());
    }
    let tenant = tx.tenant();
    let answered: Vec<(MessageId, bool)> = sqlx::query_as(
        "select id, response_content is not null from channel_messages
          where tenant_id = $1 and id = any($2)",
    )
    .bind(tenant)
    .bind(turns)
    .fetch_all(tx.conn())
    .await?;
    let jobs: std::collections::HashSet<MessageId> = sqlx::query_scalar(
        "select message_id from dispatch_queue
          where message_id = any($2) and tenant_id is not distinct from $1 for update",
    )
    .bind(tenant)
    .bind(turns)
    .fetch_all(tx.conn())
    .await?
    .into_iter()
    .collect();
    let parts = parts_of(tx, turns).await?;
    let ended: Vec<(MessageId, Ended)> = answered
        .into_iter()
        .map(|(id, answered)| {
            let none = Vec::new();
            let parts = Parts::of(jobs.contains(&id), parts.get(&id).unwrap_or(&none));
            (id, Ended::of(end, answered, parts))
        })
        .collect();
    write_ended(tx, &ended, now).await
}

type PartStates = std::collections::HashMap<MessageId, Vec<(PartStatus, Option<String>)>>;

async fn parts_of(tx: &mut TenantTx, turns: &[MessageId]) -> Result<PartStates, sqlx::Error> {
    let rows: Vec<(MessageId, PartStatus, Option<String>)> = sqlx::query_as(
        "select message_id, status, last_error from channel_replies
          where tenant_id = $1 and message_id = any($2)
          order by message_id, part_index",
    )
    .bind(tx.tenant())
    .bind(turns)
    .fetch_all(tx.conn())
    .await?;
    let mut parts = PartStates::new();
    for (id, status, error) in rows {
        parts.entry(id).or_default().push((status, error));
    }
    Ok(parts)
}

async fn write_ended(
    tx: &mut TenantTx,
    ended: &[(MessageId, Ended)],
    now: chrono::DateTime<chrono::Utc>,
) -> Result<(), sqlx::Error> {
    let ids: Vec<MessageId> = ended.iter().map(|(id, _)| *id).collect();
    let statuses: Vec<&str> = ended.iter().map(|(_, e)| e.status.as_str()).collect();
    let decisions: Vec<&str> = ended.iter().map(|(_, e)| e.decision).collect();
    let errors: Vec<Option<&str>> = ended.iter().map(|(_, e)| e.last_error.as_deref()).collect();
    let delivered: Vec<Option<chrono::DateTime<chrono::Utc>>> =
        ended.iter().map(|(_, e)| e.delivered.then_some(now)).collect();
    sqlx::query(
        "update channel_messages m
            set status = e.status, decision = e.decision, last_error = e.error,
                delivered_at = e.delivered_at, awaiting_until = null, completed_at = $3,
                updated_at = $3
           from unnest($2::uuid[], $4::text[], $5::text[], $6::text[], $7::timestamptz[])
                as e(id, status, decision, error, delivered_at)
          where m.tenant_id = $1 and m.id = e.id",
    )
    .bind(tx.tenant())
    .bind(&ids)
    .bind(now)
    .bind(&statuses)
    .bind(&decisions)
    .bind(&errors)
    .bind(&delivered)
    .execute(tx.conn())
    .await?;
    Ok(())
}
