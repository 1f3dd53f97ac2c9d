//! A turn's transitions across its message row, its reply parts and its job: the one place
//! that answers "where does a job end?".
//!
//! ```text
//! message  accepted ─claim─▶ dispatching ─Answered─▶ executed ─Delivered─▶ (delivered_at)
//!             ▲                │    ▲                   │  ▲
//!             │                │    └─ AgentRetry       │  └─ resend ─┐
//!             │                │      (error kept; the  ├─ PartFailed / Abandoned ─▶ delivery_failed
//!             │                │       job waits)       └─ Concluded (a part unknown): stays
//!             │                └─ AgentFailed ─▶ dispatch_failed      executed, not delivered
//!             └──────────── redispatch ─────────────────┘
//! part     pending ─MarkSending─▶ sending ─PartPosted / Delivered─▶ sent
//!             ▲                     │  ├─ PartWait (not sent) ─▶ pending
//!             │                     │  ├─ PartWait (in doubt) ─▶ sending (reconciled first)
//!             │                     ├──┴─ PartFailed ─▶ failed (and every later part) ─┐
//!             │                     └─ PartUnknown (Telegram at-most-once) ─▶ unknown ─┤
//!             └──────── resend (failed; unknown only when asked) ───────────────────────┘
//! job      dispatch ─Answered with parts─▶ reply ─Delivered / Concluded / PartFailed / Abandoned─▶ gone
//!             └─ Answered without parts / AgentFailed / Skipped ─▶ gone
//!          gone ─redispatch─▶ dispatch;  gone ─resend─▶ reply
//! ```
//!
//! Every transition is made by the holder of the job's lease and first checks it (and locks
//! the job's row until the commit, which holds off any claim), in the same transaction: a
//! holder whose lease ran out and whose job was claimed again gets `Applied::LeaseLost`
//! and nothing is written, except that a
//! part it did post is still recorded as `sent` (a fact, whoever holds the job now). In
//! particular a part is only ever marked `sending` (the mark that precedes its request)
//! under a lease that was still held when the mark committed.
//!
//! `Answered` creates part 0 already `sending` (attempt 1) and `PartPosted` marks the next
//! part `sending` with the settling of the one just posted, so each commit carries every
//! mark the next request needs and a one-part answer costs three commits in all (claim,
//! answer, delivery), each shared with other turns (`crate::dispatch::writer`).
//!
//! `LiveShown` changes no state: while a streamed answer runs (`dispatching`), it records the
//! platform message its live view left (`live_message_id`), which the first part then
//! adopts instead of posting a second message (`crate::delivery::live`).
//!
//! The two admin actions (`redispatch`, `resend`) are the only transitions made without a
//! lease: they apply only to turns that have no job, and they create one. Each takes the
//! turns it changes by a row lock on their message and re-checks their state under it, so
//! two calls at the same time (or a repeated call) queue a turn at most once.
//!
//! A turn whose reply has a part in doubt (`unknown`: Telegram at-most-once) and none
//! failed stays `executed` with `delivered_at` unset and the part's error in `last_error`:
//! distinguishable from a delivered turn, and not `delivery_failed`, because resending it
//! may post a second copy, which is what the connector's at-most-once choice forbids. A
//! resend re-posts such a part only when asked to explicitly (`include_unknown`).

use std::time::Duration;

use super::queue::{self, LeaseToken, Stage};
use super::TenantTx;
use crate::domain::{ConnectorId, MessageId, MessageStatus, Platform};

/// Status of a reply part (`channel_replies.status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, sqlx::Type)]
#[sqlx(type_name = "text", rename_all = "snake_case")]
#[serde(rename_all = "snake_case")]
pub enum PartStatus {
    Pending,
    /// Its request may have left: reconciled before any resend.
    Sending,
    Sent,
    Failed,
    /// Its request may or may not have been posted, and the platform offers no way to
    /// tell (Telegram, at-most-once): never resent, the parts after it still are.
    Unknown,
}

impl PartStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Sending => "sending",
            Self::Sent => "sent",
            Self::Failed => "failed",
            Self::Unknown => "unknown",
        }
    }
}

/// One change of a turn's state.
#[derive(Debug, Clone)]
pub enum Transition {
    /// The agent answered. With parts: `executed`, the parts created (part 0 `sending`),
    /// the job moved to its reply stage. Without: `executed`, delivered, the job gone.
    Answered { response: String, parts: Vec<String> },
    /// A failed agent call worth another attempt after `delay`.
    AgentRetry { error: String, delay: Duration },
    /// The agent refused, or retries are over: `dispatch_failed`, the job gone.
    AgentFailed { error: String },
    /// The message is gone or already finished: the job is dropped.
    Skipped,
    /// The next part's request is about to leave.
    MarkSending { part: i32 },
    /// A part was posted (not the last); `next` is marked `sending` with it.
    PartPosted {
        part: i32,
        platform_id: String,
        next: Option<i32>,
    },
    /// Every part is posted (the last one, when given, just now): delivered, job gone.
    Delivered { last: Option<(i32, String)> },
    /// A part must wait `delay` (rate limit, no answer yet): `in_doubt` when its request
    /// may have gone through (it stays `sending`), else it is back to `pending`.
    PartWait {
        part: i32,
        error: String,
        in_doubt: bool,
        delay: Duration,
    },
    /// A part failed for good: it and every later part fail, the turn is `delivery_failed`
    /// with the part's error, the job is gone.
    PartFailed { part: i32, error: String },
    /// A part's outcome cannot be known and it will not be resent (Telegram at-most-once):
    /// it is `unknown` (its error kept on the turn too), and the parts after it are still
    /// sent.
    PartUnknown { part: i32, error: String },
    /// Nothing is left to send but not every part is known to be posted (some are
    /// `unknown`): the last one posted (when given) is recorded, the job is gone, and the
    /// turn is not marked delivered.
    Concluded { last: Option<(i32, String)> },
    /// Nothing can be posted (the connector is gone): unsent parts fail, the turn is
    /// `delivery_failed`, the job is gone.
    Abandoned { error: String },
    /// A streamed answer's live view left this message on the platform (a Slack stream's
    /// `ts`, a Telegram group message id): the first reply part adopts it
    /// (`crate::delivery::live`).
    LiveShown { platform_id: String },
}

/// What applying a transition came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    Done,
    /// `Answered`: whether this was the turn's first stored answer.
    Stored {
        first: bool,
    },
    /// The lease was no longer the caller's: nothing was written.
    LeaseLost,
}

/// One holder's transition of one turn.
#[derive(Debug, Clone)]
pub struct Change {
    pub message: MessageId,
    pub lease: LeaseToken,
    pub transition: Transition,
}

/// Applies several turns' changes (at most one per turn) inside the caller's transaction,
/// scoped to their tenant, and answers in the same order. The frequent transitions cost a
/// fixed number of statements whatever their number: one checks every lease, one records
/// the posted parts, one stores every answer, one marks the next parts `sending`, one
/// records every delivery; the rare ones (retries, failures) go one by one.
pub async fn apply_many(tx: &mut TenantTx, changes: &[&Change]) -> Result<Vec<Applied>, sqlx::Error> {
    let held = held_leases(tx, changes).await?;
    // A part that was posted is a fact whoever holds the lease now: it is recorded either
    // way, so that a new holder finds it `sent` instead of reconciling (or resending) it.
    let posted: Vec<(MessageId, i32, &str)> = changes
        .iter()
        .filter_map(|change| match &change.transition {
            Transition::PartPosted {
                part, platform_id, ..
            }
            | Transition::Delivered {
                last: Some((part, platform_id)),
            }
            | Transition::Concluded {
                last: Some((part, platform_id)),
            } => Some((change.message, *part, platform_id.as_str())),
            _ => None,
        })
        .collect();
    mark_sent_many(tx, &posted).await?;

    let mut applied: Vec<Applied> = changes
        .iter()
        .map(|change| {
            if held.contains(&(change.message, change.lease)) {
                Applied::Done
            } else {
                Applied::LeaseLost
            }
        })
        .collect();
    let live = |i: &usize| applied[*i] == Applied::Done;
    let indexes: Vec<usize> = (0..changes.len()).filter(live).collect();

    let answers: Vec<(MessageId, &str, &[String])> = indexes
        .iter()
        .filter_map(|&i| match &changes[i].transition {
            Transition::Answered { response, parts } => {
                Some((changes[i].message, response.as_str(), parts.as_slice()))
            }
            _ => None,
        })
        .collect();
    let stored = store_answers(tx, &answers).await?;
    let next_parts: Vec<(MessageId, i32)> = indexes
        .iter()
        .filter_map(|&i| match &changes[i].transition {
            Transition::PartPosted { next: Some(next), .. } => Some((changes[i].message, *next)),
            Transition::MarkSending { part } => Some((changes[i].message, *part)),
            _ => None,
        })
        .collect();
    mark_sending_many(tx, &next_parts).await?;
    let delivered: Vec<MessageId> = indexes
        .iter()
        .filter(|&&i| matches!(changes[i].transition, Transition::Delivered { .. }))
        .map(|&i| changes[i].message)
        .collect();
    mark_delivered(tx, &delivered).await?;

    for i in indexes {
        let change = changes[i];
        match &change.transition {
            Transition::Answered { .. } => {
                applied[i] = Applied::Stored {
                    first: stored.contains(&change.message),
                }
            }
            Transition::PartPosted { .. } | Transition::MarkSending { .. } | Transition::Delivered { .. } => {
            }
            _ => apply_rare(tx, change).await?,
        }
    }
    Ok(applied)
}

/// The transitions of retries and failures, one statement or two each.
async fn apply_rare(tx: &mut TenantTx, change: &Change) -> Result<(), sqlx::Error> {
    let message = change.message;
    match &change.transition {
        Transition::AgentRetry { error, delay } => {
            record_failure(tx, message, error, false).await?;
            put_back(tx, message, change.lease, *delay).await?;
        }
        Transition::AgentFailed { error } => {
            record_failure(tx, message, error, true).await?;
            queue::finish(tx, message).await?;
        }
        Transition::Skipped => queue::finish(tx, message).await?,
        Transition::PartWait {
            part,
            error,
            in_doubt,
            delay,
        } => {
            let set = if *in_doubt {
                "last_error = $4"
            } else {
                "status = 'pending', sending_since = null, last_error = $4"
            };
            part_update(tx, message, *part, set, Some(error)).await?;
            put_back(tx, message, change.lease, *delay).await?;
        }
        Transition::PartFailed { part, error } => {
            part_update(
                tx,
                message,
                *part,
                "status = 'failed', last_error = $4",
                Some(error),
            )
            .await?;
            fail_remaining(tx, message, *part).await?;
            record_delivery_error(tx, message, error, true).await?;
            queue::finish(tx, message).await?;
        }
        Transition::Abandoned { error } => {
            fail_unsent(tx, message, error).await?;
            record_delivery_error(tx, message, error, true).await?;
            queue::finish(tx, message).await?;
        }
        Transition::PartUnknown { part, error } => {
            part_update(
                tx,
                message,
                *part,
                "status = 'unknown', last_error = $4",
                Some(error),
            )
            .await?;
            record_delivery_error(tx, message, error, false).await?;
        }
        Transition::Concluded { .. } => queue::finish(tx, message).await?,
        Transition::LiveShown { platform_id } => {
            sqlx::query(
                "update channel_messages set live_message_id = $3, updated_at = now()
                  where tenant_id = $1 and id = $2 and status = 'dispatching'",
            )
            .bind(tx.tenant())
            .bind(message)
            .bind(platform_id)
            .execute(tx.conn())
            .await?;
        }
        Transition::Answered { .. }
        | Transition::MarkSending { .. }
        | Transition::PartPosted { .. }
        | Transition::Delivered { .. } => {}
    }
    Ok(())
}

/// Checks, in one statement, that the changes' leases are still the callers', and locks
/// those jobs' rows until the commit, so that no claim can take one of them meanwhile (a
/// claim skips locked rows). Returns the (job, token) pairs that hold. The lease itself is
/// extended by the dispatcher's keeper (`Queue::renew_leases`), not here: a lock writes no
/// new row version.
async fn held_leases(
    tx: &mut TenantTx,
    changes: &[&Change],
) -> Result<std::collections::HashSet<(MessageId, LeaseToken)>, sqlx::Error> {
    let ids: Vec<MessageId> = changes.iter().map(|c| c.message).collect();
    // Two plain `= any` conditions keep the plan a primary-key lookup whatever the
    // statistics say; the pairs are matched exactly by the caller.
    let held: Vec<(MessageId, LeaseToken)> = sqlx::query_as(
        "select q.message_id, q.lease_owner
           from dispatch_queue q
          where q.tenant_id = $1 and q.message_id = any($2) and q.lease_owner is not null
            for update of q",
    )
    .bind(tx.tenant())
    .bind(&ids)
    .fetch_all(tx.conn())
    .await?;
    Ok(held.into_iter().collect())
}

/// Marks claimed turns as being dispatched and counts the attempt, in one statement.
/// Turns that are gone or already terminal (a repeat claim after another holder finished
/// them) are missing from the answer.
pub async fn begin_dispatch(
    tx: &mut TenantTx,
    ids: &[MessageId],
) -> Result<Vec<super::messages::MessageRow>, sqlx::Error> {
    let tenant = tx.tenant();
    sqlx::query_as(&format!(
        "update channel_messages
            set status = 'dispatching', attempts = attempts + 1, updated_at = now()
          where tenant_id = $1 and id = any($2) and status in ('accepted', 'dispatching')
      returning {}",
        super::messages::MESSAGE_COLUMNS
    ))
    .bind(tenant)
    .bind(ids)
    .fetch_all(tx.conn())
    .await
}

/// Stores agents' answers (one statement for all on PostgreSQL; see `store_answers_routed`
/// for Citus): status `executed`, the response (the
/// agent's parts joined by a blank line, as history shows it), the decision and the reply
/// parts (the answer split to the platform's size), part 0 already `sending` (attempt 1),
/// the job moved to its reply stage; an answer without parts is delivered at once and its
/// job removed. Only the first store of a turn counts: a turn no longer `dispatching` is
/// missing from the answer and nothing of it is touched.
async fn store_answers(
    tx: &mut TenantTx,
    answers: &[(MessageId, &str, &[String])],
) -> Result<std::collections::HashSet<MessageId>, sqlx::Error> {
    if answers.is_empty() {
        return Ok(Default::default());
    }
    let ids: Vec<MessageId> = answers.iter().map(|(id, ..)| *id).collect();
    let responses: Vec<&str> = answers.iter().map(|(_, response, _)| *response).collect();
    let decisions: Vec<&str> = answers
        .iter()
        .map(|(.., parts)| if parts.is_empty() { "no_reply" } else { "respond" })
        .collect();
    if super::on_citus(tx.conn()).await? {
        return store_answers_routed(tx, answers, &ids, &responses, &decisions).await;
    }
    let (mut part_ids, mut part_indexes, mut part_texts) = (Vec::new(), Vec::new(), Vec::new());
    for (id, _, parts) in answers {
        for (index, text) in (0..).zip(parts.iter()) {
            part_ids.push(*id);
            part_indexes.push(index);
            part_texts.push(text.as_str());
        }
    }
    let stored: Vec<MessageId> = sqlx::query_scalar(
        "with stored as (
             update channel_messages m
                set status = 'executed', response_content = a.response, decision = a.decision,
                    last_error = null, completed_at = now(), updated_at = now(),
                    delivered_at = case when a.decision = 'no_reply' then $8::timestamptz end
               from unnest($2::uuid[], $3::text[], $4::text[]) as a(id, response, decision)
              where m.tenant_id = $1 and m.id = a.id and m.status = 'dispatching'
          returning m.id, a.decision),
         parts as (
             insert into channel_replies (tenant_id, message_id, part_index, content, status, attempts,
                                          sending_since)
             select $1, p.id, p.idx, p.content,
                    case when p.idx = 0 then 'sending' else 'pending' end,
                    case when p.idx = 0 then 1 else 0 end,
                    case when p.idx = 0 then $8::timestamptz end
               from unnest($5::uuid[], $6::int[], $7::text[]) as p(id, idx, content)
              where p.id in (select id from stored)
             on conflict (tenant_id, message_id, part_index) do nothing),
         staged as (
             update dispatch_queue q set stage = 'reply'
               from stored s
              where q.tenant_id = $1 and q.message_id = s.id and s.decision = 'respond'),
         finished as (
             delete from dispatch_queue q using stored s
              where q.tenant_id = $1 and q.message_id = s.id and s.decision = 'no_reply')
         select id from stored",
    )
    .bind(tx.tenant())
    .bind(&ids)
    .bind(&responses)
    .bind(&decisions)
    .bind(&part_ids)
    .bind(&part_indexes)
    .bind(&part_texts)
    // The clock is read here, not by `now()` inside a CASE: Citus refuses non-immutable
    // functions there on a distributed table.
    .bind(chrono::Utc::now())
    .fetch_all(tx.conn())
    .await?;
    Ok(stored.into_iter().collect())
}

/// `store_answers` on Citus: three statements, each on one kind of table, so that the
/// first two go to the tenant's shard as they are (the queue is a table of the coordinator).
async fn store_answers_routed(
    tx: &mut TenantTx,
    answers: &[(MessageId, &str, &[String])],
    ids: &[MessageId],
    responses: &[&str],
    decisions: &[&str],
) -> Result<std::collections::HashSet<MessageId>, sqlx::Error> {
    // The clock is read here, not by `now()` inside a CASE: Citus refuses non-immutable
    // functions there on a distributed table.
    let now = chrono::Utc::now();
    let stored: Vec<(MessageId, String)> = sqlx::query_as(
        "update channel_messages m
            set status = 'executed', response_content = a.response, decision = a.decision,
                last_error = null, completed_at = now(), updated_at = now(),
                delivered_at = case when a.decision = 'no_reply' then $5::timestamptz end
           from unnest($2::uuid[], $3::text[], $4::text[]) as a(id, response, decision)
          where m.tenant_id = $1 and m.id = a.id and m.status = 'dispatching'
      returning m.id, a.decision",
    )
    .bind(tx.tenant())
    .bind(ids)
    .bind(responses)
    .bind(decisions)
    .bind(now)
    .fetch_all(tx.conn())
    .await?;
    let stored_ids: std::collections::HashSet<MessageId> = stored.iter().map(|(id, _)| *id).collect();
    let parts: Vec<(MessageId, i32, &str)> = answers
        .iter()
        .filter(|(id, ..)| stored_ids.contains(id))
        .flat_map(|(id, _, parts)| {
            (0..)
                .zip(parts.iter())
                .map(|(index, text)| (*id, index, text.as_str()))
        })
        .collect();
    if !parts.is_empty() {
        let mut sql = sqlx::QueryBuilder::new(
            "insert into channel_replies (tenant_id, message_id, part_index, content, status, attempts,
                                          sending_since) ",
        );
        sql.push_values(&parts, |mut row, (id, index, text)| {
            let first = *index == 0;
            row.push_bind(tx.tenant())
                .push_bind(*id)
                .push_bind(*index)
                .push_bind(*text)
                .push_bind(if first { "sending" } else { "pending" })
                .push_bind(i32::from(first))
                .push_bind(first.then_some(now));
        });
        sql.push(" on conflict (tenant_id, message_id, part_index) do nothing");
        sql.build().execute(tx.conn()).await?;
    }
    let (replying, finished): (Vec<_>, Vec<_>) =
        stored.iter().partition(|(_, decision)| decision == "respond");
    let replying: Vec<MessageId> = replying.into_iter().map(|(id, _)| *id).collect();
    let finished: Vec<MessageId> = finished.into_iter().map(|(id, _)| *id).collect();
    sqlx::query(
        "with staged as (
             update dispatch_queue set stage = 'reply' where tenant_id = $1 and message_id = any($2))
         delete from dispatch_queue where tenant_id = $1 and message_id = any($3)",
    )
    .bind(tx.tenant())
    .bind(&replying)
    .bind(&finished)
    .execute(tx.conn())
    .await?;
    Ok(stored_ids)
}

/// Records a failed attempt; with `terminal`, the turn becomes `dispatch_failed`.
async fn record_failure(
    tx: &mut TenantTx,
    id: MessageId,
    error: &str,
    terminal: bool,
) -> Result<(), sqlx::Error> {
    let tenant = tx.tenant();
    let sql = if terminal {
        "update channel_messages
            set last_error = $3, updated_at = now(), status = 'dispatch_failed',
                decision = 'dispatch_failed', completed_at = now()
          where tenant_id = $1 and id = $2 and status in ('accepted', 'dispatching')"
    } else {
        "update channel_messages set last_error = $3, updated_at = now()
          where tenant_id = $1 and id = $2 and status in ('accepted', 'dispatching')"
    };
    sqlx::query(sql)
        .bind(tenant)
        .bind(id)
        .bind(error)
        .execute(tx.conn())
        .await?;
    Ok(())
}

/// Keeps a reply part's error on its turn, where admins list and filter turns; with
/// `failed`, the turn's reply could not be delivered: `delivery_failed`.
async fn record_delivery_error(
    tx: &mut TenantTx,
    id: MessageId,
    error: &str,
    failed: bool,
) -> Result<(), sqlx::Error> {
    let sql = if failed {
        "update channel_messages set status = 'delivery_failed', last_error = $3, updated_at = now()
          where tenant_id = $1 and id = $2 and status in ('executed', 'delivery_failed')"
    } else {
        "update channel_messages set last_error = $3, updated_at = now()
          where tenant_id = $1 and id = $2 and status in ('executed', 'delivery_failed')"
    };
    sqlx::query(sql)
        .bind(tx.tenant())
        .bind(id)
        .bind(error)
        .execute(tx.conn())
        .await?;
    Ok(())
}

/// Puts the job back for a later attempt and ends the lease; the conversation's later jobs
/// are parked until the same time (see `queue::Queue::retry_later`, the same statement).
async fn put_back(
    tx: &mut TenantTx,
    message: MessageId,
    token: LeaseToken,
    delay: Duration,
) -> Result<(), sqlx::Error> {
    sqlx::query(queue::RETRY_LATER_SQL)
        .bind(message)
        .bind(token)
        .bind(delay.as_secs_f64())
        .execute(tx.conn())
        .await?;
    Ok(())
}

/// Changes one part that is not posted: a part is `sent` for good (a confirmation, such as
/// a Slack metadata event, may have settled it while its job was deciding to wait).
async fn part_update(
    tx: &mut TenantTx,
    message: MessageId,
    part: i32,
    set: &str,
    text: Option<&str>,
) -> Result<(), sqlx::Error> {
    let tenant = tx.tenant();
    sqlx::query(&format!(
        "update channel_replies set {set}, updated_at = now()
          where tenant_id = $1 and message_id = $2 and part_index = $3 and status <> 'sent'"
    ))
    .bind(tenant)
    .bind(message)
    .bind(part)
    .bind(text)
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// The parts' requests are about to leave: from here on their outcome may be unknown.
async fn mark_sending_many(tx: &mut TenantTx, parts: &[(MessageId, i32)]) -> Result<(), sqlx::Error> {
    if parts.is_empty() {
        return Ok(());
    }
    let (ids, indexes): (Vec<MessageId>, Vec<i32>) = parts.iter().copied().unzip();
    sqlx::query(
        "update channel_replies r
            set status = 'sending', attempts = r.attempts + 1, sending_since = now(), updated_at = now()
           from unnest($2::uuid[], $3::int[]) as n(message_id, part)
          where r.tenant_id = $1 and r.message_id = n.message_id and r.part_index = n.part",
    )
    .bind(tx.tenant())
    .bind(&ids)
    .bind(&indexes)
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// Posted, each with the platform's id for it.
async fn mark_sent_many(tx: &mut TenantTx, parts: &[(MessageId, i32, &str)]) -> Result<(), sqlx::Error> {
    if parts.is_empty() {
        return Ok(());
    }
    let ids: Vec<MessageId> = parts.iter().map(|(id, ..)| *id).collect();
    let indexes: Vec<i32> = parts.iter().map(|(_, index, _)| *index).collect();
    let platform_ids: Vec<&str> = parts.iter().map(|(.., platform_id)| *platform_id).collect();
    sqlx::query(
        "update channel_replies r
            set status = 'sent', platform_message_id = s.platform_id, sent_at = now(), last_error = null,
                updated_at = now()
           from unnest($2::uuid[], $3::int[], $4::text[]) as s(message_id, part, platform_id)
          where r.tenant_id = $1 and r.message_id = s.message_id and r.part_index = s.part",
    )
    .bind(tx.tenant())
    .bind(&ids)
    .bind(&indexes)
    .bind(&platform_ids)
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// After a part failed for good, the parts behind it are not sent either (a reply with a
/// hole in the middle reads worse than a cut one).
async fn fail_remaining(tx: &mut TenantTx, message: MessageId, after: i32) -> Result<(), sqlx::Error> {
    let tenant = tx.tenant();
    sqlx::query(
        "update channel_replies set status = 'failed', last_error = 'not sent: an earlier part failed', updated_at = now()
          where tenant_id = $1 and message_id = $2 and part_index > $3 and status = 'pending'",
    )
    .bind(tenant)
    .bind(message)
    .bind(after)
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// Fails every part not yet posted.
async fn fail_unsent(tx: &mut TenantTx, message: MessageId, error: &str) -> Result<(), sqlx::Error> {
    let tenant = tx.tenant();
    sqlx::query(
        "update channel_replies set status = 'failed', last_error = $3, updated_at = now()
          where tenant_id = $1 and message_id = $2 and status in ('pending', 'sending')",
    )
    .bind(tenant)
    .bind(message)
    .bind(error)
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// Every part is posted: the turns are delivered and their jobs removed (each
/// conversation's next message may go), in one statement.
async fn mark_delivered(tx: &mut TenantTx, messages: &[MessageId]) -> Result<(), sqlx::Error> {
    if messages.is_empty() {
        return Ok(());
    }
    sqlx::query(
        "with job as (delete from dispatch_queue where tenant_id = $1 and message_id = any($2))
         update channel_messages set delivered_at = now(), updated_at = now()
          where tenant_id = $1 and id = any($2)",
    )
    .bind(tx.tenant())
    .bind(messages)
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// Which turns an admin action (`redispatch`, `resend`) takes. Every field that is set
/// narrows the choice, with the admin listing's meaning (`messages::list`); the oldest
/// turns are taken first, at most `limit`.
#[derive(Debug, Clone, Default)]
pub struct Selection {
    /// These turns only (the one-message actions).
    pub ids: Option<Vec<MessageId>>,
    /// The linked user.
    pub user_id: Option<String>,
    pub platform: Option<Platform>,
    pub connector_id: Option<ConnectorId>,
    pub status: Option<MessageStatus>,
    /// Received at or after.
    pub since: Option<chrono::DateTime<chrono::Utc>>,
    /// Received before.
    pub until: Option<chrono::DateTime<chrono::Utc>>,
    pub limit: i64,
}

/// What an admin action queued.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Requeued {
    /// The turns given a job, oldest first (the order of their jobs).
    pub ids: Vec<MessageId>,
    /// Whether more turns match than `Selection::limit` let the call take.
    pub more: bool,
}

/// An admin action, for the candidates it applies to.
#[derive(Debug, Clone, Copy)]
enum Action {
    Redispatch,
    Resend { include_unknown: bool },
}

impl Action {
    /// The part statuses a resend posts again.
    fn undelivered(self) -> Vec<&'static str> {
        match self {
            Action::Resend {
                include_unknown: true,
            } => vec![PartStatus::Failed.as_str(), PartStatus::Unknown.as_str()],
            _ => vec![PartStatus::Failed.as_str()],
        }
    }
}

/// Appends `where …` for the turns (`m`) of `selection` that `action` applies to. A turn
/// that has a job (queued, or being worked) is never taken either, so nothing is queued
/// twice; the queue is asked apart (`choose`), since on Citus it cannot be joined.
fn push_candidates(
    sql: &mut sqlx::QueryBuilder<'_, sqlx::Postgres>,
    tenant: crate::domain::TenantId,
    selection: &Selection,
    action: Action,
) {
    sql.push(" where m.tenant_id = ").push_bind(tenant);
    match action {
        Action::Redispatch => {
            sql.push(" and m.status = 'dispatch_failed'");
        }
        Action::Resend { .. } => {
            sql.push(
                " and m.status in ('executed', 'delivery_failed')
                  and exists (select 1 from channel_replies r
                               where r.tenant_id = m.tenant_id and r.message_id = m.id
                                 and r.status = any(",
            )
            .push_bind(action.undelivered())
            .push("))");
        }
    }
    if let Some(ids) = &selection.ids {
        sql.push(" and m.id = any(").push_bind(ids.clone()).push(")");
    }
    if let Some(user) = &selection.user_id {
        sql.push(" and m.user_id = ").push_bind(user.clone());
    }
    if let Some(platform) = selection.platform {
        sql.push(" and m.platform = ").push_bind(platform.as_str());
    }
    if let Some(connector) = selection.connector_id {
        sql.push(" and m.connector_id = ").push_bind(connector);
    }
    if let Some(status) = selection.status {
        sql.push(" and m.status = ").push_bind(status);
    }
    if let Some(since) = selection.since {
        sql.push(" and m.received_at >= ").push_bind(since);
    }
    if let Some(until) = selection.until {
        sql.push(" and m.received_at < ").push_bind(until);
    }
}

/// The chosen turns, oldest first, locked until the commit (a second call waits for the
/// first and then finds them no longer candidates), without those that have a job; and
/// those skipped for having one.
async fn choose(
    tx: &mut TenantTx,
    selection: &Selection,
    action: Action,
) -> Result<(Vec<MessageId>, Vec<MessageId>), sqlx::Error> {
    let tenant = tx.tenant();
    queue::without_jobs(tx, selection.limit, |seen, need| {
        let mut sql = sqlx::QueryBuilder::new("select m.id from channel_messages m");
        push_candidates(&mut sql, tenant, selection, action);
        sql.push(" and m.id <> all(")
            .push_bind(seen.to_vec())
            .push(") order by m.received_at, m.id limit ")
            .push_bind(need)
            .push(" for update of m");
        sql
    })
    .await
}

/// Puts `dispatch_failed` turns back in the queue, as if they had just arrived: status
/// `accepted`, attempts, decision and error cleared, a dispatch job each, queued oldest
/// first so that one user's turns are dispatched in the order they were written.
pub async fn redispatch(tx: &mut TenantTx, selection: &Selection) -> Result<Requeued, sqlx::Error> {
    let (chosen, skipped) = choose(tx, selection, Action::Redispatch).await?;
    let rows: Vec<(MessageId, String, chrono::DateTime<chrono::Utc>)> = sqlx::query_as(
        "update channel_messages
            set status = 'accepted', decision = null, attempts = 0, last_error = null,
                completed_at = null, updated_at = now()
          where tenant_id = $1 and id = any($2) and status = 'dispatch_failed'
      returning id, conversation_key, received_at",
    )
    .bind(tx.tenant())
    .bind(&chosen)
    .fetch_all(tx.conn())
    .await?;
    requeue(tx, rows, selection, Action::Redispatch, Stage::Dispatch, &skipped).await
}

/// Queues the undelivered parts of answered turns again: their `failed` parts (and, with
/// `include_unknown`, the `unknown` ones) go back to `pending` with a fresh attempt count,
/// the turn back to `executed` with its error cleared, and a reply job each. `sent` parts
/// are never touched, so the pass posts only what is missing.
pub async fn resend(
    tx: &mut TenantTx,
    selection: &Selection,
    include_unknown: bool,
) -> Result<Requeued, sqlx::Error> {
    let action = Action::Resend { include_unknown };
    let (chosen, skipped) = choose(tx, selection, action).await?;
    // The part statuses are checked again by the update itself: a concurrent resend that
    // committed first has made them `pending`, so this one changes (and queues) nothing.
    let mut reopened: Vec<MessageId> = sqlx::query_scalar(
        "update channel_replies
            set status = 'pending', attempts = 0, last_error = null, sending_since = null,
                updated_at = now()
          where tenant_id = $1 and message_id = any($2) and status = any($3)
      returning message_id",
    )
    .bind(tx.tenant())
    .bind(&chosen)
    .bind(action.undelivered())
    .fetch_all(tx.conn())
    .await?;
    reopened.sort();
    reopened.dedup();
    let rows: Vec<(MessageId, String, chrono::DateTime<chrono::Utc>)> = sqlx::query_as(
        "update channel_messages set status = 'executed', last_error = null, updated_at = now()
          where tenant_id = $1 and id = any($2)
      returning id, conversation_key, received_at",
    )
    .bind(tx.tenant())
    .bind(&reopened)
    .fetch_all(tx.conn())
    .await?;
    requeue(tx, rows, selection, action, Stage::Reply, &skipped).await
}

/// Gives the changed turns their jobs, oldest first, and looks whether the selection holds
/// more candidates than the call took.
async fn requeue(
    tx: &mut TenantTx,
    mut rows: Vec<(MessageId, String, chrono::DateTime<chrono::Utc>)>,
    selection: &Selection,
    action: Action,
    stage: Stage,
    skipped: &[MessageId],
) -> Result<Requeued, sqlx::Error> {
    rows.sort_by_key(|(id, _, received_at)| (*received_at, *id));
    let jobs: Vec<(MessageId, &str)> = rows.iter().map(|(id, key, _)| (*id, key.as_str())).collect();
    queue::enqueue_many(tx, &jobs, stage).await?;
    let mut more = sqlx::QueryBuilder::new("select exists (select 1 from channel_messages m");
    push_candidates(&mut more, tx.tenant(), selection, action);
    more.push(" and m.id <> all(")
        .push_bind(skipped.to_vec())
        .push("))");
    let more: bool = more.build_query_scalar().fetch_one(tx.conn()).await?;
    Ok(Requeued {
        ids: rows.into_iter().map(|(id, ..)| id).collect(),
        more,
    })
}
