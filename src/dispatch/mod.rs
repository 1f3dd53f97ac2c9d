//! The dispatch worker: turns queued user turns into agent calls, in order per conversation,
//! each with the user's recent history (DESIGN.md "Pipeline", "Ordering").
//!
//! A step claims one job and, in the same transaction, prepares it (mark `dispatching`, read
//! the tenant, the history and the connector); calls the agent; stores the answer and its
//! reply parts in a second transaction that also marks the first part `sending`; posts the
//! parts (`crate::delivery`), and settles the last one, records the delivery and removes
//! the job in a third. Three commits for a one-part answer. A crash anywhere leaves the job
//! leased; when the lease runs out it is claimed again and the agent sees the same
//! `Idempotency-Key`.
//!
//! Each step records `dispatch_phase_seconds{phase}` (claim, prepare, agent, reply),
//! `dispatch_history_seconds` (the history read inside prepare) and `dispatch_own_seconds`:
//! the step's time minus the agent call and the platform requests, which is what the worker
//! itself costs per turn.

pub mod agent;
pub mod history;
pub mod payload;
pub mod signature;
pub mod wakeup;

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use secrecy::ExposeSecret;
use sqlx::PgPool;
use tokio::sync::watch;
use uuid::Uuid;

use self::agent::CallOutcome;
use self::payload::ChatMessage;
use self::wakeup::Wakeup;
use crate::cache::ConfigCache;
use crate::db::messages::{MessageRow, ReplyPart};
use crate::db::queue::{Job, Queue};
use crate::db::tenants::TenantRow;
use crate::db::{self, TenantTx};
use crate::delivery::{split, Delivery, DeliveryOutcome, Outgoing};
use crate::domain::{Connector, MessageId, Platform};
use crate::settings::ServeSettings;

/// What one `step` did; tests drive the worker with it instead of sleeping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepOutcome {
    /// Nothing was ready.
    Empty,
    /// The agent answered; the turn is `executed`.
    Executed(MessageId),
    /// The call (or a reply part) failed and will be retried later.
    Retrying(MessageId),
    /// The turn is `dispatch_failed`, or a reply part failed for good.
    Failed(MessageId),
    /// Every reply part is posted.
    Delivered(MessageId),
    /// The job's message was gone or already finished; the job was dropped.
    Skipped(MessageId),
}

/// Everything a dispatch needs after the first transaction.
struct Prepared {
    message: MessageRow,
    history: Vec<ChatMessage>,
    /// Agent URL and dispatch secrets.
    tenant: Arc<TenantRow>,
    /// Where the answer goes (`None`: the connector was deleted meanwhile).
    connector: Option<Arc<Connector>>,
}

/// Time a step spent waiting on others (the agent, the platform), to tell the worker's own
/// cost apart.
#[derive(Default)]
struct Waited(Duration);

fn phase(name: &'static str, started: Instant) {
    metrics::histogram!("dispatch_phase_seconds", "phase" => name).record(started.elapsed().as_secs_f64());
}

pub struct Worker {
    pool: PgPool,
    queue: Queue,
    settings: Arc<ServeSettings>,
    client: reqwest::Client,
    /// For the platforms' send APIs: shorter timeouts than an agent call.
    platform_client: reqwest::Client,
    /// This instance's lease owner id.
    owner: Uuid,
    /// Tenant settings (shared with the instance's admin API, which forgets what it changes).
    cache: Arc<ConfigCache>,
    clock: fn() -> i64,
}

impl Worker {
    pub fn new(pool: PgPool, settings: Arc<ServeSettings>, clock: fn() -> i64) -> anyhow::Result<Self> {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(settings.dispatch.agent_timeout_secs))
            .connect_timeout(Duration::from_secs(5))
            .user_agent(concat!("channel-bridge/", env!("CARGO_PKG_VERSION")))
            .build()
            .context("Failed to build the agent HTTP client")?;
        let platform_client = reqwest::Client::builder()
            .timeout(Duration::from_secs(15))
            .connect_timeout(Duration::from_secs(5))
            .user_agent(concat!("channel-bridge/", env!("CARGO_PKG_VERSION")))
            .build()
            .context("Failed to build the platform HTTP client")?;
        Ok(Self {
            queue: Queue::new(pool.clone()),
            pool,
            client,
            platform_client,
            owner: Uuid::new_v4(),
            clock,
            cache: Arc::new(ConfigCache::new(Duration::from_secs(settings.config_cache_secs))),
            settings,
        })
    }

    /// Uses the instance's cache instead of a private one, so that tenant changes made
    /// through this instance's admin API reach the worker at once.
    pub fn sharing_cache(mut self, cache: Arc<ConfigCache>) -> Self {
        self.cache = cache;
        self
    }

    fn lease(&self) -> Duration {
        Duration::from_secs(self.settings.dispatch.lease_secs)
    }

    /// Claims and runs one job, if one is ready.
    pub async fn step(&self) -> anyhow::Result<StepOutcome> {
        let started = Instant::now();
        let Some((job, tx)) = self
            .queue
            .claim(self.lease(), self.owner)
            .await
            .context("Failed to claim a job")?
        else {
            return Ok(StepOutcome::Empty);
        };
        phase("claim", started);
        let span = tracing::info_span!("job", tenant_id = %job.tenant_id, message_id = %job.message_id, stage = %job.stage);
        let mut waited = Waited::default();
        let work = async {
            match job.stage.as_str() {
                "reply" => self.deliver(&job, tx, &mut waited).await,
                _ => self.dispatch(&job, tx, &mut waited).await,
            }
        };
        let outcome = tracing::Instrument::instrument(work, span).await;
        let own = started.elapsed().saturating_sub(waited.0);
        metrics::histogram!("dispatch_own_seconds").record(own.as_secs_f64());
        if outcome.is_err() {
            // A database error, maybe before the claim committed (then the lease rolled back
            // with it): back off, or a job that fails every time would be claimed again at
            // once by every task. Best effort: with the database gone, the lease or the next
            // claim decides.
            let attempts = u32::try_from(job.attempts).unwrap_or(1);
            let delay = agent::backoff(&self.settings.dispatch, attempts, None);
            let _ = self.queue.retry_later(job.message_id, self.owner, delay).await;
        }
        outcome
    }

    async fn dispatch(
        &self,
        job: &Job,
        mut tx: TenantTx,
        waited: &mut Waited,
    ) -> anyhow::Result<StepOutcome> {
        let started = Instant::now();
        let Some(prepared) = self.prepare(&mut tx, job).await? else {
            db::queue::finish(&mut tx, job.message_id).await?;
            tx.commit().await?;
            return Ok(StepOutcome::Skipped(job.message_id));
        };
        tx.commit().await?;
        phase("prepare", started);
        let attempts = u32::try_from(prepared.message.attempts).unwrap_or(u32::MAX);
        metrics::counter!("dispatch_attempts_total").increment(1);
        let started = Instant::now();
        let outcome = self.call_agent(&prepared).await;
        waited.0 += started.elapsed();
        metrics::histogram!("dispatch_agent_seconds").record(started.elapsed().as_secs_f64());
        phase("agent", started);
        match outcome {
            CallOutcome::Answered(parts) => self.complete(job, prepared, &parts, waited).await,
            CallOutcome::Retryable {
                reason,
                error,
                retry_after,
            } if attempts < self.settings.dispatch.max_attempts => {
                tracing::info!(reason, %error, attempts, "agent call failed; will retry");
                let delay = agent::backoff(&self.settings.dispatch, attempts, retry_after);
                self.retry(job, &error, delay).await
            }
            CallOutcome::Retryable { reason, error, .. } | CallOutcome::Permanent { reason, error } => {
                tracing::warn!(reason, %error, attempts, "dispatch failed");
                metrics::counter!("dispatch_failures_total", "reason" => reason).increment(1);
                self.fail(job, &error).await
            }
        }
    }

    /// In the claim's transaction: mark the turn `dispatching`, read tenant, history and
    /// connector.
    async fn prepare(&self, tx: &mut TenantTx, job: &Job) -> anyhow::Result<Option<Prepared>> {
        let Some(tenant) = self.cache.tenant(tx.conn(), job.tenant_id).await? else {
            return Ok(None);
        };
        let Some(message) = db::messages::begin_dispatch(tx, job.message_id).await? else {
            return Ok(None);
        };
        let history = read_history_or_empty(tx, &message).await;
        // Read fresh, not from a cache: a token rotated a moment ago must not fail the reply.
        let connector = db::connectors::get(tx, message.connector_id).await?.map(Arc::new);
        Ok(Some(Prepared {
            message,
            history,
            tenant,
            connector,
        }))
    }

    async fn call_agent(&self, prepared: &Prepared) -> CallOutcome {
        let tenant = &prepared.tenant;
        let Some(url) = tenant.agent_url.as_ref().or(self.settings.agent_url.as_ref()) else {
            return CallOutcome::Permanent {
                reason: "no_agent_url",
                error: "neither the tenant nor CB_AGENT_URL names an agent".into(),
            };
        };
        let payload = payload::build(&prepared.message, prepared.history.clone());
        let mut secrets = vec![tenant.dispatch_secret.0.expose_secret()];
        secrets.extend(tenant.previous_dispatch_secret.as_deref());
        agent::call(&self.client, url, &secrets, &payload, (self.clock)()).await
    }

    /// Stores the answer and its reply parts, then posts them: the store commits together
    /// with the first part's `sending` mark.
    async fn complete(
        &self,
        job: &Job,
        prepared: Prepared,
        answer: &[String],
        waited: &mut Waited,
    ) -> anyhow::Result<StepOutcome> {
        let started = Instant::now();
        let platform: Platform = prepared.message.platform.parse()?;
        let parts = split::split_parts(platform, answer);
        let mut tx = TenantTx::begin(&self.pool, job.tenant_id).await?;
        let first = db::messages::store_answer(&mut tx, job.message_id, &answer.join("\n\n"), &parts).await?;
        if !first {
            tracing::info!("turn was already finished by another attempt; keeping the first answer");
        }
        if parts.is_empty() {
            db::replies::mark_delivered(&mut tx, job.message_id, None).await?;
            tx.commit().await?;
            return Ok(StepOutcome::Executed(job.message_id));
        }
        let context = match (first, prepared.connector) {
            // The parts were created just now, exactly as split, part 0 marked `sending`.
            (true, Some(connector)) => Outgoing {
                message: prepared.message,
                connector,
                parts: (0..)
                    .zip(parts)
                    .map(|(index, content)| ReplyPart::created(index, content))
                    .collect(),
                marked: Some(0),
            },
            _ => match Delivery::load(&mut tx, job.message_id).await? {
                Some(context) => context,
                None => {
                    abandon_reply(&mut tx, job.message_id).await?;
                    tx.commit().await?;
                    return Ok(StepOutcome::Executed(job.message_id));
                }
            },
        };
        // Post at once, under the lease this step already holds.
        self.run_delivery(job, tx, &context, waited).await?;
        phase("reply", started);
        Ok(StepOutcome::Executed(job.message_id))
    }

    /// The reply stage of a claimed job: one delivery pass; the job ends when every part is
    /// posted or one failed for good, and otherwise waits its turn again.
    async fn deliver(&self, job: &Job, mut tx: TenantTx, waited: &mut Waited) -> anyhow::Result<StepOutcome> {
        let started = Instant::now();
        let Some(context) = Delivery::load(&mut tx, job.message_id).await? else {
            abandon_reply(&mut tx, job.message_id).await?;
            tx.commit().await?;
            return Ok(StepOutcome::Skipped(job.message_id));
        };
        let outcome = self.run_delivery(job, tx, &context, waited).await?;
        phase("reply", started);
        Ok(outcome)
    }

    async fn run_delivery(
        &self,
        job: &Job,
        tx: TenantTx,
        context: &Outgoing,
        waited: &mut Waited,
    ) -> anyhow::Result<StepOutcome> {
        let delivery = Delivery {
            pool: &self.pool,
            client: &self.platform_client,
            settings: &self.settings.dispatch,
            owner: self.owner,
        };
        let pass = delivery.run(tx, context).await?;
        waited.0 += pass.platform_time;
        match pass.outcome {
            DeliveryOutcome::Wait(delay) => {
                self.queue.retry_later(job.message_id, self.owner, delay).await?;
                Ok(StepOutcome::Retrying(job.message_id))
            }
            DeliveryOutcome::Delivered => Ok(StepOutcome::Delivered(job.message_id)),
            DeliveryOutcome::Stopped => Ok(StepOutcome::Failed(job.message_id)),
        }
    }

    async fn retry(&self, job: &Job, error: &str, delay: Duration) -> anyhow::Result<StepOutcome> {
        let mut tx = TenantTx::begin(&self.pool, job.tenant_id).await?;
        db::messages::record_failure(&mut tx, job.message_id, error, false).await?;
        tx.commit().await?;
        self.queue.retry_later(job.message_id, self.owner, delay).await?;
        Ok(StepOutcome::Retrying(job.message_id))
    }

    async fn fail(&self, job: &Job, error: &str) -> anyhow::Result<StepOutcome> {
        let mut tx = TenantTx::begin(&self.pool, job.tenant_id).await?;
        db::messages::record_failure(&mut tx, job.message_id, error, true).await?;
        db::queue::finish(&mut tx, job.message_id).await?;
        tx.commit().await?;
        Ok(StepOutcome::Failed(job.message_id))
    }

    /// Runs steps until `stop` turns true, sleeping on the wake-up signal (or the polling
    /// interval) when the queue is empty. A job in progress is finished before returning.
    pub async fn run(self: Arc<Self>, wakeup: Arc<Wakeup>, mut stop: watch::Receiver<bool>) {
        let poll = Duration::from_millis(self.settings.dispatch.poll_interval_ms);
        while !*stop.borrow() {
            // Registered before the step, so a wake-up during the step is not lost.
            let notified = wakeup.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let idle = match self.step().await {
                Ok(StepOutcome::Empty) => true,
                Ok(_) => false,
                Err(err) => {
                    tracing::error!(error = ?err, "dispatch step failed");
                    true
                }
            };
            if idle {
                tokio::select! {
                    () = &mut notified => {}
                    () = tokio::time::sleep(poll) => {}
                    _ = stop.changed() => {}
                }
            }
        }
    }

    /// Publishes queue depth and oldest-job age every polling interval.
    pub async fn report_queue_stats(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        let every = Duration::from_millis(self.settings.dispatch.poll_interval_ms.max(1000));
        while !*stop.borrow() {
            if let Ok(stats) = self.queue.stats().await {
                metrics::gauge!("dispatch_queue_depth").set(stats.depth as f64);
                metrics::gauge!("dispatch_queue_oldest_age_seconds").set(stats.oldest_age_secs);
            }
            tokio::select! {
                () = tokio::time::sleep(every) => {}
                _ = stop.changed() => {}
            }
        }
    }
}

/// The message or its connector is gone: nothing can be posted. Its parts are failed
/// (not left `pending` or `sending` for ever) and the job ends.
async fn abandon_reply(tx: &mut TenantTx, message: MessageId) -> Result<(), sqlx::Error> {
    db::replies::fail_unsent(tx, message, "not posted: the connector was deleted").await?;
    db::queue::finish(tx, message).await
}

/// History is best effort: a failed read is logged and counted, and the dispatch goes on
/// with no history rather than not at all. The read runs in a savepoint so its failure
/// leaves the surrounding transaction usable. A successful read leaves the savepoint open:
/// the commit that follows commits it with the rest, so releasing it would only cost a
/// round trip.
async fn read_history_or_empty(tx: &mut TenantTx, message: &MessageRow) -> Vec<ChatMessage> {
    let savepoint = sqlx::query("savepoint history").execute(tx.conn()).await;
    if let Err(err) = savepoint {
        tracing::warn!(%err, "history read failed; dispatching without history");
        metrics::counter!("dispatch_history_failures_total").increment(1);
        return Vec::new();
    }
    let started = Instant::now();
    match history::load(tx, message).await {
        Ok(history) => {
            metrics::histogram!("dispatch_history_seconds").record(started.elapsed().as_secs_f64());
            history
        }
        Err(err) => {
            tracing::warn!(%err, "history read failed; dispatching without history");
            metrics::counter!("dispatch_history_failures_total").increment(1);
            let _ = sqlx::query("rollback to savepoint history")
                .execute(tx.conn())
                .await;
            Vec::new()
        }
    }
}
