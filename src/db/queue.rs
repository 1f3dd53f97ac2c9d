//! `dispatch_queue`: the durable job queue (ids and scheduling state only, no RLS), in two
//! generations truncated in turn so that it needs no VACUUM (`Queue::rotate`). The free
//! functions run inside a tenant transaction, atomically with the message row; `Queue` is
//! the one cross-tenant code, since claiming looks at every tenant's jobs.
//!
//! The generations never have planner statistics (nobody may ANALYZE them at the right
//! moment, and a truncate forgets their size), so each statement is written to leave the
//! planner one sensible path: a statement keyed by message ids states its tenant
//! as `tenant_id is not distinct from $n`, a check on the rows the primary key finds that no
//! index scan can serve; only the claim states the predicate of the per-tenant ready index.

use std::sync::OnceLock;
use std::time::Duration;

use sqlx::{PgPool, Postgres, Transaction};
use uuid::Uuid;

use super::TenantTx;
use crate::domain::{ConversationKey, MessageId, TenantId};

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

/// Drawn per claim and job; every write names it, so a holder whose lease was taken over
/// changes nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, sqlx::Type)]
#[sqlx(transparent)]
pub struct LeaseToken(pub Uuid);

/// `enqueue_many` takes it shared, the claim tries it exclusive.
pub(crate) fn conversation_lock(tenant: &str, key: &str) -> String {
    format!("hashtextextended({tenant}::text || '/' || {key}, 0)")
}

pub async fn enqueue(
    tx: &mut TenantTx,
    message: MessageId,
    conversation_key: &ConversationKey,
    stage: Stage,
) -> Result<(), sqlx::Error> {
    enqueue_many(tx, &[(message, conversation_key)], stage).await
}

/// Takes a *shared* advisory lock on each conversation until commit; the claim takes a head
/// only with the *exclusive* lock, without waiting, so it never claims M2 while M1 of the
/// same conversation is uncommitted (M1 would become a second head in flight).
pub async fn enqueue_many(
    tx: &mut TenantTx,
    jobs: &[(MessageId, &ConversationKey)],
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
    let keys: Vec<&str> = jobs.iter().map(|(_, key)| key.as_str()).collect();
    sqlx::query(sql)
        .bind(tenant)
        .bind(&ids)
        .bind(&keys)
        .bind(stage.as_str())
        .execute(tx.conn())
        .await?;
    Ok(())
}

/// Makes a waiting reply job ready now, with the later jobs `retry_later` parked behind
/// it. A job under a live lease is left alone.
/// Whether `message` has a job, locking it until commit: a delivery pass ending meanwhile
/// waits for this transaction, then finds what it added.
pub async fn has_job(tx: &mut TenantTx, message: MessageId) -> Result<bool, sqlx::Error> {
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

pub async fn wake_reply(tx: &mut TenantTx, message: MessageId) -> Result<(), sqlx::Error> {
    let tenant = tx.tenant();
    sqlx::query(
        "with head as (
             update dispatch_queue set available_at = now()
              where message_id = $1 and tenant_id is not distinct from $2 and stage = 'reply'
                and lease_owner is null
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

/// Those of `messages` that have a job. Asked of the queue alone: on Citus the queue is a
/// coordinator table, which a statement on the sharded tables cannot join.
async fn having_jobs(
    tx: &mut TenantTx,
    messages: &[MessageId],
) -> Result<std::collections::HashSet<MessageId>, sqlx::Error> {
    if messages.is_empty() {
        return Ok(Default::default());
    }
    let queued: Vec<MessageId> = sqlx::query_scalar(
        "select message_id from dispatch_queue
          where message_id = any($2) and tenant_id is not distinct from $1",
    )
    .bind(tx.tenant())
    .bind(messages)
    .fetch_all(tx.conn())
    .await?;
    Ok(queued.into_iter().collect())
}

/// Up to `limit` of the candidates without a job, and those skipped for having one.
/// `candidates(seen, need)` is asked again while jobs made it come up short.
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

/// In the transaction that stores the result; the next message becomes head at commit.
pub async fn finish(tx: &mut TenantTx, message: MessageId) -> Result<(), sqlx::Error> {
    let tenant = tx.tenant();
    sqlx::query("delete from dispatch_queue where message_id = $1 and tenant_id is not distinct from $2")
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

static CLAIM_SQL: OnceLock<String> = OnceLock::new();

/// `$1`/`$2` room of tenants in flight or capped, `$3` of the others, `$4` wanted, `$5` lease
/// seconds. Tenant by tenant: one at its cap costs nothing however deep its backlog.
const CLAIM_BATCH: &str = "with recursive ready_tenants(tenant_id) as (
         -- The tenants with a ready job: a loose scan of the (tenant_id, available_at, seq)
         -- index, one descent per tenant. Leased jobs are not ready (their lease end is
         -- their `available_at`).
         -- `enqueued_at is not null` (always true) opts into that index: it is partial on
         -- this predicate, so no other statement can pick it (migration 34).
         (select q.tenant_id from dispatch_queue q
           where q.available_at <= now() and q.enqueued_at is not null
           order by q.tenant_id limit 1)
         union all
         select (select q.tenant_id from dispatch_queue q
                  where q.tenant_id > r.tenant_id and q.available_at <= now()
                    and q.enqueued_at is not null
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
                    and q.enqueued_at is not null
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
      -- By the primary key whatever the statistics say: a join let the planner read the
      -- whole generation, dead rows included, to update a batch.
      where q.message_id = any(array(select message_id from chosen))
  returning q.message_id, q.tenant_id, q.conversation_key, q.stage, q.attempts,
            q.lease_owner as lease, q.enqueued_at";

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Job {
    pub message_id: MessageId,
    pub tenant_id: TenantId,
    pub conversation_key: String,
    pub stage: Stage,
    pub attempts: i32,
    pub lease: LeaseToken,
    /// When the job was queued: the retry horizon counts from here.
    pub enqueued_at: chrono::DateTime<chrono::Utc>,
}

#[derive(Debug, Clone, Default)]
pub struct ClaimRequest {
    pub wanted: usize,
    /// Per tenant in flight or capped; tenants at zero are skipped without a look.
    pub room: Vec<(TenantId, usize)>,
    pub default_room: usize,
    pub lease: Duration,
}

#[derive(Debug, Clone, Copy, sqlx::FromRow)]
pub struct QueueStats {
    pub depth: i64,
    pub oldest_age_secs: f64,
}

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct TenantQueueStats {
    pub tenant_id: TenantId,
    pub depth: i64,
    pub oldest_age_secs: f64,
}

/// What one `Queue::rotate` step did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rotation {
    /// Another instance is rotating, or the truncate's lock was not granted in time.
    Busy,
    /// The other generation still holds jobs.
    Draining,
    /// The other generation had drained and is now empty and fresh.
    Truncated,
    /// The fresh generation takes the new jobs from now on.
    Switched,
    /// The current generation has taken too few jobs to be worth a switch.
    Idle,
}

/// The longest a truncate waits for its lock (and so holds up the queue's statements).
pub const LOCK_WAIT: Duration = Duration::from_millis(100);

#[derive(Clone)]
pub struct Queue {
    pool: PgPool,
}

impl Queue {
    pub fn new(pool: PgPool) -> Self {
        Self { pool }
    }

    /// Hands back the open transaction, so the turns' first tenant work commits with the
    /// leases; other claimers skip the locked rows meanwhile.
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

    /// EXPLAIN ANALYZE of the claim, rolled back (for the dispatch benchmark).
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

    /// Few, so the dispatcher reads them all before it claims.
    pub async fn tenant_caps(&self) -> Result<Vec<(TenantId, i32)>, sqlx::Error> {
        sqlx::query_as("select id, max_in_flight from tenants where max_in_flight is not null")
            .fetch_all(&self.pool)
            .await
    }

    /// An idle instance's cheap look on each polling tick.
    pub async fn any_ready(&self) -> Result<bool, sqlx::Error> {
        sqlx::query_scalar("select exists (select 1 from dispatch_queue where available_at <= now())")
            .fetch_one(&self.pool)
            .await
    }

    /// Returns the jobs still held: the holder of a missing one must stop.
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

    /// Ends the lease; the job stays its conversation's head. The later jobs are parked
    /// until the same time: ready but blocked, each would cost every claim a look
    /// (docs/benchmarks.md). An unleased job qualifies too (a batch whose claim rolled back),
    /// so a job that always fails still waits its backoff.
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

    /// One step of the generations' cycle (migration 30): truncate the other generation
    /// once it has drained, or make it current once the current one has taken
    /// `switch_after` jobs. The truncate waits at most `LOCK_WAIT` for its lock, so queue
    /// statements stall no longer than that; any instance may run it, one at a time.
    pub async fn rotate(&self, switch_after: i64) -> Result<Rotation, sqlx::Error> {
        let mut tx = self.pool.begin().await?;
        let state: Option<(i16, i64, bool)> = sqlx::query_as(
            "select current, started_seq, other_fresh from dispatch_queue_generation
                for update skip locked",
        )
        .fetch_optional(&mut *tx)
        .await?;
        match state {
            None => Ok(Rotation::Busy),
            Some((_, started, true)) => switch_generation(tx, started, switch_after).await,
            Some((current, _, false)) => truncate_drained(tx, 1 - current).await,
        }
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

/// The fresh generation becomes current once `switch_after` jobs went into this one.
async fn switch_generation(
    mut tx: sqlx::Transaction<'static, sqlx::Postgres>,
    started: i64,
    switch_after: i64,
) -> Result<Rotation, sqlx::Error> {
    let next: i64 = sqlx::query_scalar("select nextval('dispatch_queue_seq_seq')")
        .fetch_one(&mut *tx)
        .await?;
    if next - started < switch_after {
        tx.rollback().await?;
        return Ok(Rotation::Idle);
    }
    sqlx::query(
        "update dispatch_queue_generation
            set current = 1 - current, started_seq = $1, other_fresh = false",
    )
    .bind(next)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(Rotation::Switched)
}

/// Generation `other`, once drained, truncated and marked fresh.
async fn truncate_drained(
    mut tx: sqlx::Transaction<'static, sqlx::Postgres>,
    other: i16,
) -> Result<Rotation, sqlx::Error> {
    let other = format!("dispatch_queue_{other}");
    // Looked at without the lock first: jobs that wait long (a backoff, a platform's
    // hold) keep a generation from draining, and each try would stall the queue.
    let empty = format!("select not exists (select 1 from {other})");
    if !sqlx::query_scalar::<_, bool>(&empty).fetch_one(&mut *tx).await? {
        tx.rollback().await?;
        return Ok(Rotation::Draining);
    }
    sqlx::query(&format!("set local lock_timeout = '{}ms'", LOCK_WAIT.as_millis()))
        .execute(&mut *tx)
        .await?;
    let locked = sqlx::query(&format!("lock table {other} in access exclusive mode"))
        .execute(&mut *tx)
        .await;
    match locked {
        Err(sqlx::Error::Database(err)) if err.code().as_deref() == Some("55P03") => {
            tx.rollback().await?;
            return Ok(Rotation::Busy);
        }
        locked => locked?,
    };
    // Under the lock no transaction is still writing to it: empty now is empty for good.
    if !sqlx::query_scalar::<_, bool>(&empty).fetch_one(&mut *tx).await? {
        tx.rollback().await?;
        return Ok(Rotation::Draining);
    }
    sqlx::query(&format!("truncate {other}"))
        .execute(&mut *tx)
        .await?;
    sqlx::query("update dispatch_queue_generation set other_fresh = true")
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(Rotation::Truncated)
}

fn claim_sql() -> &'static str {
    CLAIM_SQL.get_or_init(|| {
        let lock = conversation_lock("ranked.tenant_id", "ranked.conversation_key");
        CLAIM_BATCH.replace("{conversation_lock}", &lock)
    })
}

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
