//! A turn's transitions across its message row, its reply parts and its job: the one place
//! that answers "where does a job end?".
//!
//! ```text
//! message  accepted ─claim─▶ dispatching ─Answered─▶ executed ─Delivered─▶ (delivered_at)
//!                              │    ▲
//!                              │    └─ AgentRetry (error kept; the job waits, lease ended)
//!                              └─ AgentFailed ─▶ dispatch_failed
//! part     pending ─MarkSending─▶ sending ─PartPosted / Delivered─▶ sent
//!                                   │  ├─ PartWait (not sent) ─▶ pending
//!                                   │  ├─ PartWait (in doubt) ─▶ sending (reconciled first)
//!                                   └──┴─ PartFailed ─▶ failed (and every later part)
//! job      dispatch ─Answered with parts─▶ reply ─Delivered / PartFailed / Abandoned─▶ gone
//!             └─ Answered without parts / AgentFailed / Skipped ─▶ gone
//! ```
//!
//! Every transition is made by the holder of the job's lease and first renews it
//! (`queue::renew_lease`), in the same transaction: a holder whose lease ran out and whose
//! job was claimed again gets `Applied::LeaseLost` and nothing is written, except that a
//! part it did post is still recorded as `sent` (a fact, whoever holds the job now). In
//! particular a part is only ever marked `sending` (the mark that precedes its request)
//! under a lease that was still held when the mark committed.
//!
//! `Answered` creates part 0 already `sending` (attempt 1) and `PartPosted` marks the next
//! part `sending` with the settling of the one just posted, so each commit carries every
//! mark the next request needs and a one-part answer costs three commits in all (claim,
//! answer, delivery), each shared with other turns (`crate::dispatch::writer`).

use std::time::Duration;

use super::queue::{self, LeaseToken};
use super::TenantTx;
use crate::domain::MessageId;

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
}

impl PartStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Sending => "sending",
            Self::Sent => "sent",
            Self::Failed => "failed",
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
    /// A part failed for good: it and every later part fail, the job is gone.
    PartFailed { part: i32, error: String },
    /// Nothing can be posted (the connector is gone): unsent parts fail, the job is gone.
    Abandoned { error: String },
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

/// Applies `change` inside the caller's transaction (scoped to the turn's tenant),
/// renewing the lease for `lease` first.
pub async fn apply(tx: &mut TenantTx, change: &Change, lease: Duration) -> Result<Applied, sqlx::Error> {
    let message = change.message;
    let held = queue::renew_lease(tx, message, change.lease, lease).await?;
    // A part that was posted is a fact whoever holds the lease now: it is recorded either
    // way, so that a new holder finds it `sent` instead of reconciling (or resending) it.
    if let Transition::PartPosted {
        part, platform_id, ..
    }
    | Transition::Delivered {
        last: Some((part, platform_id)),
    } = &change.transition
    {
        mark_sent(tx, message, *part, platform_id).await?;
    }
    if !held {
        return Ok(Applied::LeaseLost);
    }
    match &change.transition {
        Transition::Answered { response, parts } => {
            let first = store_answer(tx, message, response, parts).await?;
            if parts.is_empty() {
                mark_delivered(tx, message).await?;
            }
            return Ok(Applied::Stored { first });
        }
        Transition::AgentRetry { error, delay } => {
            record_failure(tx, message, error, false).await?;
            put_back(tx, message, change.lease, *delay).await?;
        }
        Transition::AgentFailed { error } => {
            record_failure(tx, message, error, true).await?;
            queue::finish(tx, message).await?;
        }
        Transition::Skipped => queue::finish(tx, message).await?,
        Transition::MarkSending { part } => mark_sending(tx, message, *part).await?,
        Transition::PartPosted { next, .. } => {
            if let Some(next) = next {
                mark_sending(tx, message, *next).await?;
            }
        }
        Transition::Delivered { .. } => mark_delivered(tx, message).await?,
        Transition::PartWait {
            part,
            error,
            in_doubt,
            delay,
        } => {
            if *in_doubt {
                part_update(tx, message, *part, "last_error = $4", Some(error)).await?;
            } else {
                let set = "status = 'pending', sending_since = null, last_error = $4";
                part_update(tx, message, *part, set, Some(error)).await?;
            }
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
            queue::finish(tx, message).await?;
        }
        Transition::Abandoned { error } => {
            fail_unsent(tx, message, error).await?;
            queue::finish(tx, message).await?;
        }
    }
    Ok(Applied::Done)
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

/// Stores the agent's answer: status `executed`, the response (the agent's parts joined by
/// a blank line, as history shows it), the decision and the reply parts (the answer split
/// to the platform's size). Only the first store of a turn counts: `false` when it was no
/// longer `dispatching`, and then nothing is touched.
async fn store_answer(
    tx: &mut TenantTx,
    id: MessageId,
    response: &str,
    parts: &[String],
) -> Result<bool, sqlx::Error> {
    let tenant = tx.tenant();
    let decision = if parts.is_empty() { "no_reply" } else { "respond" };
    let indexes: Vec<i32> = (0..parts.len() as i32).collect();
    let stored: i64 = sqlx::query_scalar(
        "with stored as (
             update channel_messages
                set status = 'executed', response_content = $3, decision = $4, last_error = null,
                    completed_at = now(), updated_at = now()
              where tenant_id = $1 and id = $2 and status = 'dispatching'
          returning id),
         parts as (
             insert into channel_replies (tenant_id, message_id, part_index, content, status, attempts,
                                          sending_since)
             select $1, $2, part.idx, part.content,
                    case when part.idx = 0 then 'sending' else 'pending' end,
                    case when part.idx = 0 then 1 else 0 end,
                    case when part.idx = 0 then $7::timestamptz end
               from unnest($5::int[], $6::text[]) as part(idx, content)
              where exists (select 1 from stored)
             on conflict (tenant_id, message_id, part_index) do nothing),
         staged as (
             update dispatch_queue set stage = 'reply'
              where message_id = $2 and tenant_id = $1 and cardinality($5::int[]) > 0
                and exists (select 1 from stored))
         select count(*) from stored",
    )
    .bind(tenant)
    .bind(id)
    .bind(response)
    .bind(decision)
    .bind(&indexes)
    .bind(parts)
    // The clock is read here, not by `now()` inside the CASE: Citus refuses non-immutable
    // functions there on a distributed table.
    .bind(chrono::Utc::now())
    .fetch_one(tx.conn())
    .await?;
    Ok(stored == 1)
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
          where tenant_id = $1 and message_id = $2 and part_index = $3"
    ))
    .bind(tenant)
    .bind(message)
    .bind(part)
    .bind(text)
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// The request is about to leave: from here on its outcome may be unknown.
async fn mark_sending(tx: &mut TenantTx, message: MessageId, part: i32) -> Result<(), sqlx::Error> {
    let set = "status = 'sending', attempts = attempts + 1, sending_since = now(), last_error = coalesce($4, last_error)";
    part_update(tx, message, part, set, None).await
}

/// Posted, with the platform's id for it.
async fn mark_sent(
    tx: &mut TenantTx,
    message: MessageId,
    part: i32,
    platform_id: &str,
) -> Result<(), sqlx::Error> {
    let set = "status = 'sent', platform_message_id = $4, sent_at = now(), last_error = null";
    part_update(tx, message, part, set, Some(platform_id)).await
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

/// Every part is posted: the turn is delivered and its job removed (the conversation's
/// next message may go), in one statement.
async fn mark_delivered(tx: &mut TenantTx, message: MessageId) -> Result<(), sqlx::Error> {
    let tenant = tx.tenant();
    sqlx::query(
        "with job as (delete from dispatch_queue where message_id = $2 and tenant_id = $1)
         update channel_messages set delivered_at = now(), updated_at = now()
          where tenant_id = $1 and id = $2",
    )
    .bind(tenant)
    .bind(message)
    .execute(tx.conn())
    .await?;
    Ok(())
}
