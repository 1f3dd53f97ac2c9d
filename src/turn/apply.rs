//! Applying transitions: the SQL behind the diagram in [`super`], in as few statements as
//! the batch allows.

use std::collections::HashSet;
use std::time::Duration;

use super::{Applied, Change, Transition};
use crate::db::messages::{MessageRow, MESSAGE_COLUMNS};
use crate::db::queue::{self, LeaseToken};
use crate::db::{self, TenantTx};
use crate::domain::{MessageId, PartStatus};

/// At most one change per turn, all of the transaction's tenant; answers in their order.
/// The frequent transitions cost one statement each for the whole batch; retries and
/// failures go one by one.
pub async fn apply_many(tx: &mut TenantTx, changes: &[&Change]) -> Result<Vec<Applied>, sqlx::Error> {
    let held = held_leases(tx, changes).await?;
    // A part that was posted is a fact whoever holds the lease now: it is recorded either
    // way, so that a new holder finds it `sent` instead of reconciling (or resending) it.
    mark_sent_many(tx, &posted_parts(changes)).await?;

    let mut applied = lease_outcomes(changes, &held);
    let indexes: Vec<usize> = (0..changes.len())
        .filter(|&i| applied[i] == Applied::Done)
        .collect();
    let stored = store_answers(tx, &answers_at(changes, &indexes)).await?;
    for &i in &indexes {
        if stored.contains(&changes[i].message) {
            with_answer(tx, changes[i]).await?;
        }
    }
    mark_sending_many(tx, &marks(changes, &indexes)).await?;
    deliver(tx, changes, &indexes).await?;

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

/// The parts the changes report posted, with the platform's id for each.
fn posted_parts<'a>(changes: &[&'a Change]) -> Vec<(MessageId, i32, &'a str)> {
    changes
        .iter()
        .filter_map(|change| match &change.transition {
            Transition::PartPosted {
                part, platform_id, ..
            }
            | Transition::Delivered {
                last: Some((part, platform_id)),
                ..
            }
            | Transition::Concluded {
                last: Some((part, platform_id)),
            }
            | Transition::PartsPosted {
                last: Some((part, platform_id)),
            } => Some((change.message, *part, platform_id.as_str())),
            _ => None,
        })
        .collect()
}

/// `Done` for each change whose job's lease is still held, `LeaseLost` for the others.
fn lease_outcomes(changes: &[&Change], held: &HashSet<(MessageId, LeaseToken)>) -> Vec<Applied> {
    changes
        .iter()
        .map(|change| {
            if held.contains(&(change.message, change.lease)) {
                Applied::Done
            } else {
                Applied::LeaseLost
            }
        })
        .collect()
}

/// The answers the changes at `indexes` bring, in their order.
fn answers_at<'a>(changes: &[&'a Change], indexes: &[usize]) -> Vec<StoredAnswer<'a>> {
    indexes
        .iter()
        .filter_map(|&i| match &changes[i].transition {
            Transition::Answered {
                response,
                reply,
                agent_ms,
                ..
            } => Some(StoredAnswer {
                id: changes[i].message,
                lease: changes[i].lease,
                response,
                reply,
                agent_ms: *agent_ms,
            }),
            _ => None,
        })
        .collect()
}

/// What a stored answer brings beside its texts: the choices posted with its last text, its
/// files and reaction, and the conversation held when the agent asked for a person.
async fn with_answer(tx: &mut TenantTx, change: &Change) -> Result<(), sqlx::Error> {
    let Transition::Answered { handoff, reply, .. } = &change.transition else {
        return Ok(());
    };
    if let (Some(offered), Some(last)) = (&reply.choices, reply.texts.len().checked_sub(1)) {
        db::parts::offer_choices(tx, change.message, last, offered).await?;
    }
    db::parts::insert_extras(tx, change.message, reply, change.lease).await?;
    if let Some(request) = handoff {
        super::handoff::hold_for_agent(tx, change.message, request).await?;
    }
    Ok(())
}

/// The `sending` marks the changes at `indexes` make, each under its job's lease.
fn marks(changes: &[&Change], indexes: &[usize]) -> Vec<(MessageId, i32, LeaseToken)> {
    indexes
        .iter()
        .filter_map(|&i| {
            let change = changes[i];
            match &change.transition {
                Transition::PartPosted { next: Some(next), .. } => {
                    Some((change.message, *next, change.lease))
                }
                Transition::MarkSending { part } => Some((change.message, *part, change.lease)),
                _ => None,
            }
        })
        .collect()
}

/// The transitions applied one turn at a time: retries, failures and the job's end.
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
        Transition::AgentAccepted { until } => {
            await_agent(tx, message, until).await?;
            queue::finish(tx, message).await?;
        }
        Transition::Abandoned { error } => {
            fail_unsent(tx, message, error).await?;
            record_delivery_error(tx, message, error, true).await?;
            queue::finish(tx, message).await?;
        }
        Transition::PartWait { .. }
        | Transition::PartFailed { .. }
        | Transition::PartUnknown { .. }
        | Transition::PartStaged { .. } => apply_part(tx, change).await?,
        Transition::Concluded { .. } => queue::finish(tx, message).await?,
        Transition::PartsPosted { .. } => end_posting(tx, change).await?,
        Transition::LiveShown { platform_id } => record_live_message(tx, message, platform_id).await?,
        Transition::Answered { .. }
        | Transition::MarkSending { .. }
        | Transition::PartPosted { .. }
        | Transition::Delivered { .. } => {}
    }
    Ok(())
}

/// The agent answered 202: the turn waits for its events until `until`.
async fn await_agent(
    tx: &mut TenantTx,
    message: MessageId,
    until: &chrono::DateTime<chrono::Utc>,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "update channel_messages
            set status = 'awaiting_agent', decision = 'async', awaiting_until = $3,
                last_error = null, updated_at = now()
          where tenant_id = $1 and id = $2 and status = 'dispatching'",
    )
    .bind(tx.tenant())
    .bind(message)
    .bind(until)
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// Every part of an answer still awaited is posted: the job goes back if the agent added
/// parts meanwhile, else it ends and the turn is delivered if the agent is done.
async fn end_posting(tx: &mut TenantTx, change: &Change) -> Result<(), sqlx::Error> {
    let message = change.message;
    // The job's row is locked (`held_leases`): an event adding parts committed before
    // this reads them, and one after finds no job and queues one.
    if has_pending_parts(tx, message).await? {
        put_back(tx, message, change.lease, Duration::ZERO).await?;
    } else {
        queue::finish(tx, message).await?;
        mark_delivered_if_executed(tx, message).await?;
    }
    Ok(())
}

/// Whether `message` has a part still to post.
async fn has_pending_parts(tx: &mut TenantTx, message: MessageId) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar(
        "select exists (select 1 from channel_replies
                         where tenant_id = $1 and message_id = $2 and status = 'pending')",
    )
    .bind(tx.tenant())
    .bind(message)
    .fetch_one(tx.conn())
    .await
}

/// Marks `message` delivered if its answer is complete (`executed`) and not delivered yet.
async fn mark_delivered_if_executed(tx: &mut TenantTx, message: MessageId) -> Result<(), sqlx::Error> {
    sqlx::query(
        "update channel_messages set delivered_at = now(), updated_at = now()
          where tenant_id = $1 and id = $2 and status = 'executed' and delivered_at is null",
    )
    .bind(tx.tenant())
    .bind(message)
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// Records the message a streamed answer's live view left, which its first part adopts.
async fn record_live_message(
    tx: &mut TenantTx,
    message: MessageId,
    platform_id: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "update channel_messages set live_message_id = $3, updated_at = now()
          where tenant_id = $1 and id = $2 and status = 'dispatching'",
    )
    .bind(tx.tenant())
    .bind(message)
    .bind(platform_id)
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// The transitions of one reply part the delivery could not post as it is. None touches a
/// `sent` part: a confirmation (a Slack metadata event) may have settled it while its job
/// was deciding to wait.
async fn apply_part(tx: &mut TenantTx, change: &Change) -> Result<(), sqlx::Error> {
    let message = change.message;
    match &change.transition {
        Transition::PartWait {
            part,
            error,
            in_doubt,
            delay,
        } => {
            if *in_doubt {
                keep_part_in_doubt(tx, message, *part, error).await?;
            } else {
                return_part_to_pending(tx, message, *part, error).await?;
            }
            put_back(tx, message, change.lease, *delay).await?;
        }
        Transition::PartFailed { part, error } => {
            end_part(tx, message, *part, PartStatus::Failed, error).await?;
            fail_remaining(tx, message, *part).await?;
            record_delivery_error(tx, message, error, true).await?;
            queue::finish(tx, message).await?;
        }
        Transition::PartUnknown { part, error } => {
            end_part(tx, message, *part, PartStatus::Unknown, error).await?;
            record_delivery_error(tx, message, error, false).await?;
        }
        Transition::PartStaged { part, upload_ref } => {
            // The post that shows the upload starts now: a wait for its confirmation counts
            // from here, not from before the fetch and the upload.
            mark_part_staged(tx, message, *part, upload_ref).await?;
        }
        _ => {}
    }
    Ok(())
}

/// The part may have been posted: it stays `sending`, to be reconciled, with its error.
async fn keep_part_in_doubt(
    tx: &mut TenantTx,
    message: MessageId,
    part: i32,
    error: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "update channel_replies set last_error = $4, updated_at = now()
          where tenant_id = $1 and message_id = $2 and part_index = $3 and status <> 'sent'",
    )
    .bind(tx.tenant())
    .bind(message)
    .bind(part)
    .bind(error)
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// The part was not posted: it is `pending` again, with its error.
async fn return_part_to_pending(
    tx: &mut TenantTx,
    message: MessageId,
    part: i32,
    error: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "update channel_replies set status = 'pending', sending_since = null, last_error = $4,
                                    updated_at = now()
          where tenant_id = $1 and message_id = $2 and part_index = $3 and status <> 'sent'",
    )
    .bind(tx.tenant())
    .bind(message)
    .bind(part)
    .bind(error)
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// Ends the part `failed` or `unknown`, with its error (a part already sent stays sent).
async fn end_part(
    tx: &mut TenantTx,
    message: MessageId,
    part: i32,
    status: PartStatus,
    error: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "update channel_replies set status = $5, last_error = $4, updated_at = now()
          where tenant_id = $1 and message_id = $2 and part_index = $3 and status <> 'sent'",
    )
    .bind(tx.tenant())
    .bind(message)
    .bind(part)
    .bind(error)
    .bind(status.as_str())
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// Records the part's uploaded bytes and starts its wait for the post that shows them.
async fn mark_part_staged(
    tx: &mut TenantTx,
    message: MessageId,
    part: i32,
    upload_ref: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "update channel_replies set upload_ref = $4, sending_since = now(), updated_at = now()
          where tenant_id = $1 and message_id = $2 and part_index = $3 and status <> 'sent'",
    )
    .bind(tx.tenant())
    .bind(message)
    .bind(part)
    .bind(upload_ref)
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// Locks the jobs' rows until the commit, so no claim takes one meanwhile. Leases are
/// extended by the dispatcher's keeper, not here: a lock writes no new row version.
async fn held_leases(
    tx: &mut TenantTx,
    changes: &[&Change],
) -> Result<HashSet<(MessageId, LeaseToken)>, sqlx::Error> {
    let ids: Vec<MessageId> = changes.iter().map(|c| c.message).collect();
    // Two plain `= any` conditions keep the plan a primary-key lookup whatever the
    // statistics say; the pairs are matched exactly by the caller.
    let held: Vec<(MessageId, LeaseToken)> = sqlx::query_as(
        "select q.message_id, q.lease_owner
           from dispatch_queue q
          where q.message_id = any($2) and q.tenant_id is not distinct from $1
            and q.lease_owner is not null
            for update of q",
    )
    .bind(tx.tenant())
    .bind(&ids)
    .fetch_all(tx.conn())
    .await?;
    Ok(held.into_iter().collect())
}

/// Turns gone, already terminal (claimed again after another holder finished them) or of a
/// conversation a person holds (`handoff::hold_claimed`) are missing from the answer.
pub async fn begin_dispatch(tx: &mut TenantTx, ids: &[MessageId]) -> Result<Vec<MessageRow>, sqlx::Error> {
    let tenant = tx.tenant();
    sqlx::query_as(&format!(
        "update channel_messages m
            set status = 'dispatching', attempts = attempts + 1, updated_at = now()
          where m.tenant_id = $1 and m.id = any($2) and m.status in ('accepted', 'dispatching')
            and not exists (select 1 from conversation_holds h
                             where h.tenant_id = $1 and h.conversation_key = m.conversation_key)
      returning {}",
        MESSAGE_COLUMNS
    ))
    .bind(tenant)
    .bind(ids)
    .fetch_all(tx.conn())
    .await
}

struct StoredAnswer<'a> {
    id: MessageId,
    lease: LeaseToken,
    response: &'a str,
    reply: &'a crate::db::parts::Reply,
    agent_ms: Option<i32>,
}

/// Only the first store of a turn counts: a turn no longer `dispatching` is missing from
/// the answer and nothing of it is touched.
async fn store_answers(
    tx: &mut TenantTx,
    answers: &[StoredAnswer<'_>],
) -> Result<HashSet<MessageId>, sqlx::Error> {
    if answers.is_empty() {
        return Ok(Default::default());
    }
    let columns = AnswerColumns::of(answers);
    if db::on_citus(tx.conn()).await? {
        return store_answers_routed(tx, answers, &columns).await;
    }
    store_answers_in_one(tx, &columns, &PartColumns::of(answers)).await
}

/// The answers as the columns of `channel_messages` they set, one array each.
struct AnswerColumns<'a> {
    ids: Vec<MessageId>,
    responses: Vec<&'a str>,
    decisions: Vec<&'static str>,
    agent_ms: Vec<Option<i32>>,
}

impl<'a> AnswerColumns<'a> {
    fn of(answers: &[StoredAnswer<'a>]) -> Self {
        Self {
            ids: answers.iter().map(|a| a.id).collect(),
            responses: answers.iter().map(|a| a.response).collect(),
            decisions: answers
                .iter()
                .map(|a| if a.reply.is_empty() { "no_reply" } else { "respond" })
                .collect(),
            agent_ms: answers.iter().map(|a| a.agent_ms).collect(),
        }
    }
}

/// The answers' texts as the columns of `channel_replies` they set, one array each.
struct PartColumns<'a> {
    ids: Vec<MessageId>,
    indexes: Vec<i32>,
    texts: Vec<&'a str>,
    leases: Vec<LeaseToken>,
}

impl<'a> PartColumns<'a> {
    fn of(answers: &[StoredAnswer<'a>]) -> Self {
        let mut columns = Self {
            ids: Vec::new(),
            indexes: Vec::new(),
            texts: Vec::new(),
            leases: Vec::new(),
        };
        for answer in answers {
            for (index, text) in (0..).zip(answer.reply.texts.iter()) {
                columns.ids.push(answer.id);
                columns.indexes.push(index);
                columns.texts.push(text.as_str());
                columns.leases.push(answer.lease);
            }
        }
        columns
    }
}

/// `store_answers` in one statement: the turns, their parts (the first `sending`) and their
/// jobs, moved to the reply stage or gone with no reply.
async fn store_answers_in_one(
    tx: &mut TenantTx,
    answers: &AnswerColumns<'_>,
    parts: &PartColumns<'_>,
) -> Result<HashSet<MessageId>, sqlx::Error> {
    let stored: Vec<MessageId> = sqlx::query_scalar(
        "with stored as (
             update channel_messages m
                set status = 'executed', response_content = a.response, decision = a.decision,
                    last_error = null, completed_at = now(), updated_at = now(), agent_ms = a.agent_ms,
                    delivered_at = case when a.decision = 'no_reply' then $8::timestamptz end
               from unnest($2::uuid[], $3::text[], $4::text[], $9::int[])
                    as a(id, response, decision, agent_ms)
              where m.tenant_id = $1 and m.id = a.id and m.status = 'dispatching'
          returning m.id, a.decision),
         parts as (
             insert into channel_replies (tenant_id, message_id, part_index, content, status, attempts,
                                          sending_since, sending_lease)
             select $1, p.id, p.idx, p.content,
                    case when p.idx = 0 then 'sending' else 'pending' end,
                    case when p.idx = 0 then 1 else 0 end,
                    case when p.idx = 0 then $8::timestamptz end,
                    case when p.idx = 0 then p.lease end
               from unnest($5::uuid[], $6::int[], $7::text[], $10::uuid[]) as p(id, idx, content, lease)
              where p.id in (select id from stored)
             on conflict (tenant_id, message_id, part_index) do nothing),
         staged as (
             update dispatch_queue q set stage = 'reply'
              where q.message_id = any(array(select id from stored where decision = 'respond'))
                and q.tenant_id is not distinct from $1),
         finished as (
             delete from dispatch_queue q
              where q.message_id = any(array(select id from stored where decision = 'no_reply'))
                and q.tenant_id is not distinct from $1)
         select id from stored",
    )
    .bind(tx.tenant())
    .bind(&answers.ids)
    .bind(&answers.responses)
    .bind(&answers.decisions)
    .bind(&parts.ids)
    .bind(&parts.indexes)
    .bind(&parts.texts)
    // Citus refuses `now()` inside a CASE on a distributed table.
    .bind(chrono::Utc::now())
    .bind(&answers.agent_ms)
    .bind(&parts.leases)
    .fetch_all(tx.conn())
    .await?;
    Ok(stored.into_iter().collect())
}

/// `store_answers` on Citus: one statement per table, so the first two are routed to the
/// tenant's shard as they are (the queue is the coordinator's).
async fn store_answers_routed(
    tx: &mut TenantTx,
    answers: &[StoredAnswer<'_>],
    columns: &AnswerColumns<'_>,
) -> Result<HashSet<MessageId>, sqlx::Error> {
    // Citus refuses `now()` inside a CASE on a distributed table.
    let now = chrono::Utc::now();
    let stored = mark_executed(tx, columns, now).await?;
    let stored_ids: HashSet<MessageId> = stored.iter().map(|(id, _)| *id).collect();
    insert_reply_parts(tx, &texts_of_stored(answers, &stored_ids), now).await?;
    stage_or_finish_jobs(tx, &stored).await?;
    Ok(stored_ids)
}

/// Stores the answers on their turns still `dispatching`; gives those stored, with each
/// one's decision.
async fn mark_executed(
    tx: &mut TenantTx,
    columns: &AnswerColumns<'_>,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<Vec<(MessageId, String)>, sqlx::Error> {
    sqlx::query_as(
        "update channel_messages m
            set status = 'executed', response_content = a.response, decision = a.decision,
                last_error = null, completed_at = now(), updated_at = now(), agent_ms = a.agent_ms,
                delivered_at = case when a.decision = 'no_reply' then $5::timestamptz end
           from unnest($2::uuid[], $3::text[], $4::text[], $6::int[])
                as a(id, response, decision, agent_ms)
          where m.tenant_id = $1 and m.id = a.id and m.status = 'dispatching'
      returning m.id, a.decision",
    )
    .bind(tx.tenant())
    .bind(&columns.ids)
    .bind(&columns.responses)
    .bind(&columns.decisions)
    .bind(now)
    .bind(&columns.agent_ms)
    .fetch_all(tx.conn())
    .await
}

/// The texts of the answers `stored`, each with its turn, index and the job's lease.
fn texts_of_stored<'a>(
    answers: &[StoredAnswer<'a>],
    stored: &HashSet<MessageId>,
) -> Vec<(MessageId, i32, &'a str, LeaseToken)> {
    answers
        .iter()
        .filter(|a| stored.contains(&a.id))
        .flat_map(|a| {
            (0..)
                .zip(a.reply.texts.iter())
                .map(|(index, text)| (a.id, index, text.as_str(), a.lease))
        })
        .collect()
}

/// Inserts the texts as reply parts, the first of each answer already `sending` under its
/// job's lease since `now`. No texts, no statement.
async fn insert_reply_parts(
    tx: &mut TenantTx,
    parts: &[(MessageId, i32, &str, LeaseToken)],
    now: chrono::DateTime<chrono::Utc>,
) -> Result<(), sqlx::Error> {
    if parts.is_empty() {
        return Ok(());
    }
    let mut sql = sqlx::QueryBuilder::new(
        "insert into channel_replies (tenant_id, message_id, part_index, content, status, attempts,
                                      sending_since, sending_lease) ",
    );
    sql.push_values(parts, |mut row, (id, index, text, lease)| {
        let first = *index == 0;
        row.push_bind(tx.tenant())
            .push_bind(*id)
            .push_bind(*index)
            .push_bind(*text)
            .push_bind(if first { "sending" } else { "pending" })
            .push_bind(i32::from(first))
            .push_bind(first.then_some(now))
            .push_bind(first.then_some(*lease));
    });
    sql.push(" on conflict (tenant_id, message_id, part_index) do nothing");
    sql.build().execute(tx.conn()).await?;
    Ok(())
}

/// The stored answers' jobs: to the reply stage with parts to post, gone without.
async fn stage_or_finish_jobs(tx: &mut TenantTx, stored: &[(MessageId, String)]) -> Result<(), sqlx::Error> {
    let (replying, finished): (Vec<_>, Vec<_>) =
        stored.iter().partition(|(_, decision)| decision == "respond");
    let replying: Vec<MessageId> = replying.into_iter().map(|(id, _)| *id).collect();
    let finished: Vec<MessageId> = finished.into_iter().map(|(id, _)| *id).collect();
    sqlx::query(
        "with staged as (
             update dispatch_queue set stage = 'reply'
              where message_id = any($2) and tenant_id is not distinct from $1)
         delete from dispatch_queue where message_id = any($3) and tenant_id is not distinct from $1",
    )
    .bind(tx.tenant())
    .bind(&replying)
    .bind(&finished)
    .execute(tx.conn())
    .await?;
    Ok(())
}

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

/// The part's error is kept on its turn, where admins list and filter turns.
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

/// The statement of `queue::Queue::retry_later`: the conversation's later jobs are parked
/// until the same time.
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

/// A mark is the lease's: written again after an outage (its first commit may have landed),
/// it changes nothing, so one send attempt counts once.
async fn mark_sending_many(
    tx: &mut TenantTx,
    parts: &[(MessageId, i32, LeaseToken)],
) -> Result<(), sqlx::Error> {
    if parts.is_empty() {
        return Ok(());
    }
    let ids: Vec<MessageId> = parts.iter().map(|(id, ..)| *id).collect();
    let indexes: Vec<i32> = parts.iter().map(|(_, index, _)| *index).collect();
    let leases: Vec<LeaseToken> = parts.iter().map(|(.., lease)| *lease).collect();
    sqlx::query(
        "update channel_replies r
            set status = 'sending', attempts = r.attempts + 1, sending_since = now(),
                sending_lease = n.lease, updated_at = now()
           from unnest($2::uuid[], $3::int[], $4::uuid[]) as n(message_id, part, lease)
          where r.tenant_id = $1 and r.message_id = n.message_id and r.part_index = n.part
            and not (r.status = 'sending' and r.sending_lease is not distinct from n.lease)",
    )
    .bind(tx.tenant())
    .bind(&ids)
    .bind(&indexes)
    .bind(&leases)
    .execute(tx.conn())
    .await?;
    Ok(())
}

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

/// A reply with a hole in the middle reads worse than a cut one.
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

/// The delivered turns: their jobs go, but for an answer whose choices a tap closed while
/// it was posted (the closing part is still to post: the job stays, due now).
async fn deliver(tx: &mut TenantTx, changes: &[&Change], indexes: &[usize]) -> Result<(), sqlx::Error> {
    let delivered: Vec<&Change> = indexes
        .iter()
        .map(|&i| changes[i])
        .filter(|change| matches!(change.transition, Transition::Delivered { .. }))
        .collect();
    let offered: Vec<MessageId> = delivered
        .iter()
        .filter(|change| matches!(change.transition, Transition::Delivered { offered: true, .. }))
        .map(|change| change.message)
        .collect();
    let growing = db::parts::with_pending_parts(tx, &offered).await?;
    let (kept, done): (Vec<&Change>, Vec<&Change>) = delivered
        .into_iter()
        .partition(|change| growing.contains(&change.message));
    mark_delivered(tx, &done.iter().map(|change| change.message).collect::<Vec<_>>()).await?;
    for change in kept {
        put_back(tx, change.message, change.lease, Duration::ZERO).await?;
    }
    Ok(())
}

/// Removing the job lets the conversation's next message go.
async fn mark_delivered(tx: &mut TenantTx, messages: &[MessageId]) -> Result<(), sqlx::Error> {
    if messages.is_empty() {
        return Ok(());
    }
    sqlx::query(
        "with job as (delete from dispatch_queue
                        where message_id = any($2) and tenant_id is not distinct from $1)
         update channel_messages set delivered_at = now(), updated_at = now()
          where tenant_id = $1 and id = any($2)",
    )
    .bind(tx.tenant())
    .bind(messages)
    .execute(tx.conn())
    .await?;
    Ok(())
}
