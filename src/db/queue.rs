//! `dispatch_queue`: the durable job queue (infrastructure, no RLS).
//!
//! Two doors, on purpose:
//! - `enqueue` and `finish` run inside a tenant transaction, atomically with the message
//!   row they belong to (a message never exists without its job, a stored answer never
//!   leaves its job behind); for the same reason the statements that store an answer
//!   (`messages::store_answer`, which moves the job to its reply stage) and record a
//!   delivery (`replies::mark_delivered`, which removes it) touch the job themselves;
//! - `Queue` is the one cross-tenant piece of code: claiming looks at every tenant's jobs.
//!   It reads and writes only this table, which holds ids and scheduling state, never
//!   message content.

use std::sync::OnceLock;
use std::time::Duration;

use sqlx::PgPool;
use uuid::Uuid;

use super::TenantTx;
use crate::domain::{MessageId, TenantId};

/// A job's stage: call the agent, or post the reply parts back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    Dispatch,
    Reply,
}

impl Stage {
    fn as_str(self) -> &'static str {
        match self {
            Stage::Dispatch => "dispatch",
            Stage::Reply => "reply",
        }
    }
}

/// The advisory-lock key of a conversation, from SQL expressions for its tenant id and its
/// conversation key: `enqueue_many` takes it shared, the claim tries it exclusive.
fn conversation_lock(tenant: &str, key: &str) -> String {
    format!("hashtextextended({tenant}::text || '/' || {key}, 0)")
}

/// Queues work for a freshly recorded message, in the same transaction (see
/// `enqueue_many`).
pub async fn enqueue(
    tx: &mut TenantTx,
    message: MessageId,
    conversation_key: &str,
    stage: Stage,
) -> Result<(), sqlx::Error> {
    enqueue_many(tx, &[(message, conversation_key)], stage).await
}

/// Queues work for freshly recorded messages in one statement, in the order given (that is
/// their order in their conversations).
///
/// The statement also takes a *shared* transaction-scoped advisory lock on each message's
/// conversation (`conversation_lock`), held until this transaction ends. The claim only
/// takes a conversation's head after winning the *exclusive* lock without waiting, so it
/// never picks a later message while an earlier one of the same conversation is still
/// uncommitted: without this, two ingress batches (or two instances) recording M1 and M2
/// at the same time could commit M2 first, have it claimed as the head, and then M1 would
/// become a second head in flight. Shared locks never conflict with each other, so
/// ingress transactions do not wait for one another; one waits only while a claim of the
/// same conversation commits (milliseconds), and a claim never waits at all.
pub async fn enqueue_many(
    tx: &mut TenantTx,
    jobs: &[(MessageId, &str)],
    stage: Stage,
) -> Result<(), sqlx::Error> {
    static SQL: OnceLock<String> = OnceLock::new();
    if jobs.is_empty() {
        return Ok(());
    }
    let sql = SQL.get_or_init(|| {
        let lock = conversation_lock("$1", "j.key");
        format!(
            "insert into dispatch_queue (message_id, tenant_id, conversation_key, stage)
             select j.id, $1, j.key, $4
               from unnest($2::uuid[], $3::text[]) with ordinality as j(id, key, ord)
               cross join lateral (select pg_advisory_xact_lock_shared({lock})) as recording
              order by j.ord"
        )
    });
    let tenant = tx.tenant();
    let ids: Vec<MessageId> = jobs.iter().map(|(id, _)| *id).collect();
    let keys: Vec<&str> = jobs.iter().map(|(_, key)| *key).collect();
    sqlx::query(sql)
        .bind(tenant)
        .bind(&ids)
        .bind(&keys)
        .bind(stage.as_str())
        .execute(tx.conn())
        .await?;
    Ok(())
}

/// Extends a job's lease while its owner is still working on it (between the parts of a
/// long delivery). Does nothing when the lease is no longer this owner's.
pub async fn renew_lease(
    tx: &mut TenantTx,
    message: MessageId,
    owner: Uuid,
    lease: Duration,
) -> Result<(), sqlx::Error> {
    let tenant = tx.tenant();
    sqlx::query(
        "update dispatch_queue set leased_until = now() + make_interval(secs => $4)
          where message_id = $1 and tenant_id = $2 and lease_owner = $3",
    )
    .bind(message)
    .bind(tenant)
    .bind(owner)
    .bind(lease.as_secs_f64())
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// Makes a waiting reply job ready now (a WhatsApp status callback settled its part),
/// with the conversation's later jobs that `retry_later` parked behind it.
pub async fn wake_reply(tx: &mut TenantTx, message: MessageId) -> Result<(), sqlx::Error> {
    let tenant = tx.tenant();
    sqlx::query(
        "with head as (
             update dispatch_queue set available_at = now()
              where message_id = $1 and tenant_id = $2 and stage = 'reply' and leased_until is null
          returning tenant_id, conversation_key, seq)
         update dispatch_queue q set available_at = now()
           from head
          where q.tenant_id = head.tenant_id and q.conversation_key = head.conversation_key
            and q.seq > head.seq and q.available_at > now()",
    )
    .bind(message)
    .bind(tenant)
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// Removes a finished job, in the transaction that stores its result. The conversation's
/// next message becomes the head of line at commit.
pub async fn finish(tx: &mut TenantTx, message: MessageId) -> Result<(), sqlx::Error> {
    let tenant = tx.tenant();
    sqlx::query("delete from dispatch_queue where message_id = $1 and tenant_id = $2")
        .bind(message)
        .bind(tenant)
        .execute(tx.conn())
        .await?;
    Ok(())
}

/// The claim, scoped to the job's tenant by its own select list (built once).
static CLAIM_SQL: OnceLock<String> = OnceLock::new();

const CLAIM_HEAD: &str = "with head as (
         select q.message_id
           from dispatch_queue q
          where q.available_at <= now()
            and (q.leased_until is null or q.leased_until < now())
            -- The head of its conversation (no older job), and no transaction is still
            -- recording a message of it (see `enqueue`). The CASE keeps the order: the
            -- lock is only tried on a head.
            and case when not exists (
                         select 1 from dispatch_queue older
                          where older.tenant_id = q.tenant_id
                            and older.conversation_key = q.conversation_key
                            and older.seq < q.seq)
                     then pg_try_advisory_xact_lock({conversation_lock})
                     else false end
          order by q.available_at, q.seq
          limit 1
          for update of q skip locked)
     update dispatch_queue q
        set leased_until = now() + make_interval(secs => $1), lease_owner = $2,
            attempts = q.attempts + 1
       from head
      where q.message_id = head.message_id
  returning q.message_id, q.tenant_id, q.conversation_key, q.stage, q.attempts";

/// The claim's row: the job, and what the statement set the tenant to.
#[derive(sqlx::FromRow)]
struct Claimed {
    #[sqlx(flatten)]
    job: Job,
    tenant_scope: String,
}

/// A claimed job.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Job {
    pub message_id: MessageId,
    pub tenant_id: TenantId,
    pub conversation_key: String,
    pub stage: String,
    pub attempts: i32,
}

/// Queue depth and the age of its oldest job, for metrics.
#[derive(Debug, Clone, Copy, sqlx::FromRow)]
pub struct QueueStats {
    pub depth: i64,
    pub oldest_age_secs: f64,
}

/// The cross-tenant side of the queue.
#[derive(Clone)]
pub struct Queue {
    pool: PgPool,
}

impl Queue {
    pub fn new(pool: PgPool) -> Self {
        Self { pool }
    }

    /// Claims the oldest ready job that is the head of its conversation, leasing it to
    /// `owner`, and hands back the open transaction, scoped to the job's tenant by the claim
    /// statement itself: the
    /// caller's first tenant work (mark the turn `dispatching`, read its history) commits
    /// with the lease, one commit instead of two. Until that commit the job's row stays
    /// locked, and other claimers pass it by.
    ///
    /// Only the lowest `seq` of a conversation qualifies, and a leased head blocks its
    /// conversation, so one message per conversation is in flight across all instances.
    /// `SKIP LOCKED` lets concurrent claimers pass each other without waiting.
    pub async fn claim(&self, lease: Duration, owner: Uuid) -> Result<Option<(Job, TenantTx)>, sqlx::Error> {
        let mut tx = self.pool.begin().await?;
        let sql = CLAIM_SQL.get_or_init(|| {
            let scope = super::tenant_tx::SCOPE_FROM_STATEMENT.replace("$tenant", "q.tenant_id");
            let lock = conversation_lock("q.tenant_id", "q.conversation_key");
            let head = CLAIM_HEAD.replace("{conversation_lock}", &lock);
            format!("{head}, {scope} as tenant_scope")
        });
        let claimed: Option<Claimed> = sqlx::query_as(sql)
            .bind(lease.as_secs_f64())
            .bind(owner)
            .fetch_optional(&mut *tx)
            .await?;
        let Some(Claimed { job, tenant_scope }) = claimed else {
            tx.rollback().await?;
            return Ok(None);
        };
        let tx = TenantTx::scoped_by_statement(tx, job.tenant_id, &tenant_scope)?;
        Ok(Some((job, tx)))
    }

    /// Puts a job back for a later attempt. It stays the head of its conversation, so the
    /// user's later messages wait behind it and order is kept.
    ///
    /// Those later jobs are parked until the same time. They could not run earlier anyway,
    /// and a job that is ready but blocked costs every claim, of every conversation, a
    /// look at it (the claim scans ready jobs in order and rejects non-heads one by one):
    /// with 3,000 turns behind one head in backoff, the dispatch-load benchmark measured
    /// 50 ms per claim and throughput falling from ~140 to ~34 dispatches/s. Parked, they
    /// are outside the claim's `available_at <= now()` range. Only the owner's own retry
    /// parks anything (the head update must match), and `wake_reply` wakes them with it.
    ///
    /// A job nobody holds a live lease on qualifies too: a step that failed before its
    /// claim committed (the claim rolled back with it) puts the job back this way, so a job
    /// that fails every time waits its backoff instead of being claimed again at once.
    pub async fn retry_later(
        &self,
        message: MessageId,
        owner: Uuid,
        delay: Duration,
    ) -> Result<(), sqlx::Error> {
        sqlx::query(
            "with head as (
                 update dispatch_queue
                    set available_at = now() + make_interval(secs => $3), leased_until = null,
                        lease_owner = null
                  where message_id = $1
                    and (lease_owner = $2 or leased_until is null or leased_until < now())
              returning tenant_id, conversation_key, seq, available_at)
             update dispatch_queue q set available_at = head.available_at
               from head
              where q.tenant_id = head.tenant_id and q.conversation_key = head.conversation_key
                and q.seq > head.seq and q.available_at < head.available_at",
        )
        .bind(message)
        .bind(owner)
        .bind(delay.as_secs_f64())
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    pub async fn stats(&self) -> Result<QueueStats, sqlx::Error> {
        sqlx::query_as(
            "select count(*) as depth,
                    coalesce(extract(epoch from now() - min(enqueued_at))::float8, 0) as oldest_age_secs
               from dispatch_queue",
        )
        .fetch_one(&self.pool)
        .await
    }
}
