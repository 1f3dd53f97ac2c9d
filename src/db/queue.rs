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

use sqlx::{PgPool, Postgres, Transaction};
use uuid::Uuid;

use super::TenantTx;
use crate::domain::{MessageId, TenantId};

/// A job's stage: call the agent, or post the reply parts back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, sqlx::Type)]
#[sqlx(type_name = "text", rename_all = "snake_case")]
pub enum Stage {
    Dispatch,
    Reply,
}

impl Stage {
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Dispatch => "dispatch",
            Stage::Reply => "reply",
        }
    }
}

impl std::fmt::Display for Stage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Who holds a job: a token drawn by the claim for that job alone. Every write a holder
/// makes on the job's behalf names it, so a holder whose lease ran out and was claimed again
/// (by any instance, this one included) changes nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, sqlx::Type)]
#[sqlx(transparent)]
pub struct LeaseToken(pub Uuid);

/// The advisory-lock key of a conversation, from SQL expressions for its tenant id and its
/// conversation key: `enqueue_many` takes it shared, the claim tries it exclusive.
pub(crate) fn conversation_lock(tenant: &str, key: &str) -> String {
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

/// Makes a waiting reply job ready now (a WhatsApp status callback settled its part),
/// with the conversation's later jobs that `retry_later` parked behind it. A job under a
/// live lease is left alone (its holder is working on it).
pub async fn wake_reply(tx: &mut TenantTx, message: MessageId) -> Result<(), sqlx::Error> {
    let tenant = tx.tenant();
    sqlx::query(
        "with head as (
             update dispatch_queue set available_at = now()
              where message_id = $1 and tenant_id = $2 and stage = 'reply' and lease_owner is null
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

/// Those of `messages` (the tenant's turns) that have a job, queued or being worked. Asked
/// of the queue alone: on Citus the queue is a table of the coordinator, which a statement
/// on the sharded tenant tables cannot join.
async fn having_jobs(
    tx: &mut TenantTx,
    messages: &[MessageId],
) -> Result<std::collections::HashSet<MessageId>, sqlx::Error> {
    if messages.is_empty() {
        return Ok(Default::default());
    }
    let queued: Vec<MessageId> = sqlx::query_scalar(
        "select message_id from dispatch_queue where tenant_id = $1 and message_id = any($2)",
    )
    .bind(tx.tenant())
    .bind(messages)
    .fetch_all(tx.conn())
    .await?;
    Ok(queued.into_iter().collect())
}

/// Up to `limit` turns from `candidates`, oldest first, that have no job, and those skipped
/// for having one. `candidates(seen, need)` builds the query of the next `need` candidate
/// ids, oldest first, none of `seen`; it is asked again while jobs made it come up short.
pub async fn without_jobs(
    tx: &mut TenantTx,
    limit: i64,
    mut candidates: impl FnMut(&[MessageId], i64) -> sqlx::QueryBuilder<'static, sqlx::Postgres>,
) -> Result<(Vec<MessageId>, Vec<MessageId>), sqlx::Error> {
    let (mut chosen, mut skipped) = (Vec::new(), Vec::new());
    loop {
        let need = limit.saturating_sub(i64::try_from(chosen.len()).unwrap_or(i64::MAX));
        if need <= 0 {
            break;
        }
        let seen: Vec<MessageId> = chosen.iter().chain(&skipped).copied().collect();
        let found: Vec<MessageId> = candidates(&seen, need)
            .build_query_scalar()
            .fetch_all(tx.conn())
            .await?;
        let with_jobs = having_jobs(tx, &found).await?;
        // Short of `need` only for the jobs: ask again past them.
        let again = i64::try_from(found.len()).unwrap_or(i64::MAX) == need && !with_jobs.is_empty();
        let (free, queued): (Vec<_>, Vec<_>) = found.into_iter().partition(|id| !with_jobs.contains(id));
        chosen.extend(free);
        skipped.extend(queued);
        if !again {
            break;
        }
    }
    Ok((chosen, skipped))
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

/// `Queue::retry_later`'s statement (also run inside a turn's transaction by
/// `turns::apply_many`): `$1` message, `$2` lease token, `$3` delay in seconds.
pub(crate) const RETRY_LATER_SQL: &str = "with head as (
         update dispatch_queue
            set available_at = now() + make_interval(secs => $3), lease_owner = null
          where message_id = $1
            and (lease_owner = $2 or lease_owner is null or available_at <= now())
      returning tenant_id, conversation_key, seq, available_at)
     update dispatch_queue q set available_at = head.available_at
       from head
      where q.tenant_id = head.tenant_id and q.conversation_key = head.conversation_key
        and q.seq > head.seq and q.available_at < head.available_at";

/// The batch claim (built once; see `Queue::claim`).
static CLAIM_SQL: OnceLock<String> = OnceLock::new();

/// `$1`/`$2` the room of tenants that have jobs in flight or a cap of their own, `$3` the
/// room of any other tenant, `$4` jobs wanted, `$5` lease seconds.
///
/// Tenant by tenant, so that a tenant at its cap costs the claim nothing however deep its
/// backlog, and every tenant with a ready job gets a look at every claim.
const CLAIM_BATCH: &str = "with recursive ready_tenants(tenant_id) as (
         -- The tenants with a ready job: a loose scan of the (tenant_id, available_at, seq)
         -- index, one descent per tenant. Leased jobs are not ready (their lease end is
         -- their `available_at`).
         (select q.tenant_id from dispatch_queue q
           where q.available_at <= now()
           order by q.tenant_id limit 1)
         union all
         select (select q.tenant_id from dispatch_queue q
                  where q.tenant_id > r.tenant_id and q.available_at <= now()
                  order by q.tenant_id limit 1)
           from ready_tenants r
          where r.tenant_id is not null),
     room as (
         select r.tenant_id, least(coalesce(given.n, $3), $4) as n
           from ready_tenants r
           left join unnest($1::uuid[], $2::int[]) as given(tenant_id, n) on given.tenant_id = r.tenant_id
          where r.tenant_id is not null and coalesce(given.n, $3) > 0),
     candidates as (
         -- Each tenant's oldest ready jobs that head their conversation (no older job: one
         -- message per conversation in flight, never two of one conversation in a batch),
         -- at most its room.
         select c.*
           from room
           cross join lateral (
                 select q.message_id, q.tenant_id, q.conversation_key, q.seq, q.available_at
                   from dispatch_queue q
                  where q.tenant_id = room.tenant_id and q.available_at <= now()
                    and not exists (
                          select 1 from dispatch_queue older
                           where older.tenant_id = q.tenant_id
                             and older.conversation_key = q.conversation_key
                             and older.seq < q.seq)
                  order by q.available_at, q.seq
                  limit room.n
                  for update of q skip locked) c),
     chosen as (
         -- Tenants interleaved: every tenant's first job before any tenant's second. And no
         -- transaction may still be recording a message of the conversation (see
         -- `enqueue_many`).
         select ranked.message_id
           from (select c.*, row_number() over (partition by c.tenant_id order by c.available_at, c.seq) as rank
                   from candidates c) ranked
          where pg_try_advisory_xact_lock({conversation_lock})
          order by ranked.rank, ranked.available_at, ranked.seq
          limit $4)
     update dispatch_queue q
        set available_at = now() + make_interval(secs => $5), lease_owner = gen_random_uuid(),
            attempts = q.attempts + 1
       from chosen
      where q.message_id = chosen.message_id
  returning q.message_id, q.tenant_id, q.conversation_key, q.stage, q.attempts,
            q.lease_owner as lease, q.enqueued_at";

/// A claimed job.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Job {
    pub message_id: MessageId,
    pub tenant_id: TenantId,
    pub conversation_key: String,
    pub stage: Stage,
    /// Claims of this job so far, this one included.
    pub attempts: i32,
    /// This claim's lease.
    pub lease: LeaseToken,
    /// When the job was queued: the retry horizon counts from here.
    pub enqueued_at: chrono::DateTime<chrono::Utc>,
}

/// What a batch claim may take.
#[derive(Debug, Clone, Default)]
pub struct ClaimRequest {
    /// Most jobs to claim.
    pub wanted: usize,
    /// Jobs each tenant with jobs in flight (or a cap of its own) may still take; tenants
    /// at zero are skipped without looking at their jobs.
    pub room: Vec<(TenantId, usize)>,
    /// Jobs any other tenant may take.
    pub default_room: usize,
    pub lease: Duration,
}

/// Queue depth and the age of its oldest job, for metrics.
#[derive(Debug, Clone, Copy, sqlx::FromRow)]
pub struct QueueStats {
    pub depth: i64,
    pub oldest_age_secs: f64,
}

/// One tenant's share of the queue, for metrics.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct TenantQueueStats {
    pub tenant_id: TenantId,
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

    /// Claims up to `request.wanted` jobs in one statement, each the oldest job of its
    /// conversation, leasing each to a token of its own, and hands back the open
    /// transaction so the claimed turns' first tenant work commits with the lease (one
    /// commit for the batch). Until that commit the rows stay locked and other claimers
    /// pass them by (`SKIP LOCKED`). `None` when nothing was ready.
    ///
    /// Tenants interleave: the batch takes each tenant's oldest ready head before any
    /// tenant's second, and no tenant more than its room.
    pub async fn claim(
        &self,
        request: &ClaimRequest,
    ) -> Result<Option<(Vec<Job>, Transaction<'static, Postgres>)>, sqlx::Error> {
        let args = ClaimArgs::of(request);
        let mut tx = self.pool.begin().await?;
        let jobs: Vec<Job> = sqlx::query_as(claim_sql())
            .bind(&args.room_tenants)
            .bind(&args.room)
            .bind(args.default_room)
            .bind(args.wanted)
            .bind(args.lease_secs)
            .fetch_all(&mut *tx)
            .await?;
        if jobs.is_empty() {
            tx.rollback().await?;
            return Ok(None);
        }
        Ok(Some((jobs, tx)))
    }

    /// EXPLAIN (ANALYZE, BUFFERS) of the claim `request` would run, rolled back: nothing is
    /// claimed (for the dispatch benchmark).
    pub async fn explain_claim(&self, request: &ClaimRequest) -> Result<Vec<String>, sqlx::Error> {
        let args = ClaimArgs::of(request);
        let mut tx = self.pool.begin().await?;
        let plan = sqlx::query_scalar(&format!("explain (analyze, buffers) {}", claim_sql()))
            .bind(&args.room_tenants)
            .bind(&args.room)
            .bind(args.default_room)
            .bind(args.wanted)
            .bind(args.lease_secs)
            .fetch_all(&mut *tx)
            .await?;
        tx.rollback().await?;
        Ok(plan)
    }

    /// The tenants the operator gave a cap of their own (`tenants.max_in_flight`): few, so
    /// the dispatcher reads them all and knows every cap before it claims.
    pub async fn tenant_caps(&self) -> Result<Vec<(TenantId, i32)>, sqlx::Error> {
        sqlx::query_as("select id, max_in_flight from tenants where max_in_flight is not null")
            .fetch_all(&self.pool)
            .await
    }

    /// Whether any job is ready: the cheap look an idle instance takes on each polling tick
    /// before it opens a claim transaction.
    pub async fn any_ready(&self) -> Result<bool, sqlx::Error> {
        sqlx::query_scalar("select exists (select 1 from dispatch_queue where available_at <= now())")
            .fetch_one(&self.pool)
            .await
    }

    /// Extends the leases of every job this instance holds, in one statement, and returns
    /// the ones it still held: a job missing from the answer was claimed again elsewhere
    /// (its lease had run out) or is gone, and its holder must stop.
    pub async fn renew_leases(
        &self,
        held: &[(MessageId, LeaseToken)],
        lease: Duration,
    ) -> Result<Vec<MessageId>, sqlx::Error> {
        let (ids, tokens): (Vec<MessageId>, Vec<LeaseToken>) = held.iter().copied().unzip();
        sqlx::query_scalar(
            // Tokens are drawn per claim: a row holding one of ours is the job it was
            // drawn for (see `turns::held_leases`).
            "update dispatch_queue q set available_at = now() + make_interval(secs => $3)
              where q.message_id = any($1) and q.lease_owner = any($2)
          returning q.message_id",
        )
        .bind(&ids)
        .bind(&tokens)
        .bind(lease.as_secs_f64())
        .fetch_all(&self.pool)
        .await
    }

    /// Puts a job back for a later attempt and ends the lease. It stays the head of its
    /// conversation, so the user's later messages wait behind it and order is kept.
    ///
    /// Those later jobs are parked until the same time. They could not run earlier anyway,
    /// and a job that is ready but blocked costs every claim, of every conversation, a
    /// look at it (the claim scans ready jobs in order and rejects non-heads one by one):
    /// with 3,000 turns behind one head in backoff, the dispatch-load benchmark measured
    /// 50 ms per claim and throughput falling from ~140 to ~34 dispatches/s. Parked, they
    /// are outside the claim's `available_at <= now()` range. Only the holder's own retry
    /// parks anything (the head update must match), and `wake_reply` wakes them with it.
    ///
    /// A job nobody holds a live lease on qualifies too: a batch whose preparation failed
    /// before its claim committed (the leases rolled back with it) puts its jobs back this
    /// way, so a job that fails every time waits its backoff instead of being claimed again
    /// at once.
    pub async fn retry_later(
        &self,
        message: MessageId,
        token: LeaseToken,
        delay: Duration,
    ) -> Result<(), sqlx::Error> {
        sqlx::query(RETRY_LATER_SQL)
            .bind(message)
            .bind(token)
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

    /// The `top` tenants with the deepest queues.
    pub async fn tenant_stats(&self, top: usize) -> Result<Vec<TenantQueueStats>, sqlx::Error> {
        sqlx::query_as(
            "select tenant_id, count(*) as depth,
                    extract(epoch from now() - min(enqueued_at))::float8 as oldest_age_secs
               from dispatch_queue
              group by tenant_id
              order by count(*) desc
              limit $1",
        )
        .bind(clamp(top))
        .fetch_all(&self.pool)
        .await
    }
}

/// The claim statement, built once.
fn claim_sql() -> &'static str {
    CLAIM_SQL.get_or_init(|| {
        let lock = conversation_lock("ranked.tenant_id", "ranked.conversation_key");
        CLAIM_BATCH.replace("{conversation_lock}", &lock)
    })
}

/// A claim request as the statement's parameters.
struct ClaimArgs {
    room_tenants: Vec<TenantId>,
    room: Vec<i32>,
    default_room: i32,
    wanted: i32,
    lease_secs: f64,
}

impl ClaimArgs {
    fn of(request: &ClaimRequest) -> Self {
        let (room_tenants, room) = request
            .room
            .iter()
            .map(|(tenant, room)| (*tenant, clamp(*room)))
            .unzip();
        Self {
            room_tenants,
            room,
            default_room: clamp(request.default_room),
            wanted: clamp(request.wanted),
            lease_secs: request.lease.as_secs_f64(),
        }
    }
}

fn clamp(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}
