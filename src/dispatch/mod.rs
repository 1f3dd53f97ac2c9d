//! The dispatch worker: turns queued user turns into agent calls, in order per conversation,
//! each with the user's recent history (DESIGN.md "Pipeline", "Ordering").
//!
//! `Worker::claim` takes a batch of jobs (each the head of its conversation) and prepares
//! them in the claim's own transaction: grouped by tenant, each group marked `dispatching`
//! in one statement, its histories read in at most two and its connectors in one, then one
//! commit for the whole batch. `Worker::run_job` then works one claimed job with no
//! database connection held while it waits on the agent or the platform: it calls the
//! agent, hands the answer to the turn writer (`writer`, many turns per commit; the same
//! commit marks the first part `sending`), posts the parts (`crate::delivery`) and records
//! the delivery, which removes the job, through the writer again. Three commits for a
//! one-part answer, each shared with other turns. A crash anywhere leaves the job leased;
//! when the lease runs out it is claimed again and the agent sees the same
//! `Idempotency-Key`.
//!
//! `dispatcher` runs this: one claimer per instance feeding a bounded in-flight set.
//! `Worker::step` claims one job and runs it to the end, for tests and tools that drive the
//! worker deterministically.
//!
//! Retries are scheduled in the queue by time: a retryable agent failure puts the job back
//! after an exponential, jittered delay (`crate::retry`) until the retry horizon
//! (`CB_DISPATCH_RETRY_HORIZON_SECS`, counted from when the job was queued) or the optional
//! attempt limit is reached.

pub mod agent;
pub mod dispatcher;
pub mod history;
pub mod payload;
pub mod signature;
pub mod stream;
pub mod wakeup;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use secrecy::ExposeSecret;
use sqlx::{PgPool, Postgres, Transaction};
use tracing::Instrument;

use self::agent::CallOutcome;
use self::payload::ChatMessage;
use crate::cache::ConfigCache;
use crate::db::messages::MessageRow;
use crate::db::queue::{ClaimRequest, Job, Queue, Stage};
use crate::db::tenants::TenantRow;
use crate::db::TenantTx;
use crate::delivery::live::{LiveContext, LiveView, TextSink};
use crate::delivery::typing::{Indicators, Typing};
use crate::delivery::{split, Delivery, DeliveryOutcome, Outgoing};
use crate::domain::{Connector, MessageId, Platform, TenantId};
use crate::egress::GuardedClient;
use crate::settings::ServeSettings;
use crate::telemetry::traces;
use crate::turn::writer::TurnWriter;
use crate::turn::{apply, Applied, Transition};

/// Why a reply stays unposted when its message or connector is gone.
const NOTHING_TO_POST: &str = "not posted: the message or its connector was deleted";

/// What one job came to; tests drive the worker with it instead of sleeping.
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
    /// The job's lease was lost (it was claimed again): this holder stopped.
    LeaseLost(MessageId),
}

/// A claimed job and what its claim prepared for it.
pub struct Claimed {
    pub job: Job,
    work: Work,
}

enum Work {
    Dispatch(Box<Prepared>),
    Deliver(Box<Outgoing>),
    /// The message is gone or already finished.
    Skip,
    /// A reply whose message or connector is gone: nothing can be posted.
    Abandon,
}

/// Everything a dispatch needs after the claim's transaction.
struct Prepared {
    message: MessageRow,
    history: Vec<ChatMessage>,
    /// Agent URL and dispatch secrets.
    tenant: Arc<TenantRow>,
    /// Where the answer goes (`None`: the connector was deleted meanwhile).
    connector: Option<Arc<Connector>>,
    /// When the claim statement returned (the typing indicator's latency counts from it).
    claimed_at: Instant,
}

/// Time a job spent waiting on others (the agent, the platform), to tell the worker's own
/// cost apart.
#[derive(Default)]
struct Waited(Duration);

fn phase(name: &'static str, started: Instant) {
    metrics::histogram!("channel_bridge_dispatch_phase_seconds", "phase" => name)
        .record(started.elapsed().as_secs_f64());
}

pub struct Worker {
    pool: PgPool,
    queue: Queue,
    settings: Arc<ServeSettings>,
    client: GuardedClient,
    /// For the platforms' send APIs: shorter timeouts than an agent call.
    platform_client: GuardedClient,
    writer: TurnWriter,
    /// Typing indicators while the agent works (`crate::delivery::typing`).
    typing: Arc<Indicators>,
    /// Tenant settings (shared with the instance's admin API, which forgets what it changes).
    cache: Arc<ConfigCache>,
    /// Signs the attachment URLs given to the agent (`crate::media`).
    urls: crate::media::token::UrlMinter,
    /// Rate-limit holds of the platforms' send APIs, per connector.
    holds: crate::delivery::holds::SendHolds,
    clock: fn() -> i64,
}

impl Worker {
    /// A worker on the current runtime (its turn writer's tasks start here).
    pub fn new(pool: PgPool, settings: Arc<ServeSettings>, clock: fn() -> i64) -> anyhow::Result<Self> {
        // Both clients apply the egress policy when connecting (and follow no redirects):
        // the agent URL and the platform API base URLs are the tenants' to set.
        let policy = Arc::new(settings.egress.allow.clone());
        let agent = reqwest::Client::builder()
            .timeout(Duration::from_secs(settings.dispatch.agent_timeout_secs))
            .connect_timeout(Duration::from_secs(5))
            .user_agent(concat!("channel-bridge/", env!("CARGO_PKG_VERSION")));
        let client = GuardedClient::build(agent, Arc::clone(&policy))
            .context("Failed to build the agent HTTP client")?;
        let platform = reqwest::Client::builder()
            .timeout(Duration::from_secs(settings.dispatch.platform_timeout_secs))
            .connect_timeout(Duration::from_secs(5))
            .user_agent(concat!("channel-bridge/", env!("CARGO_PKG_VERSION")));
        let platform_client =
            GuardedClient::build(platform, policy).context("Failed to build the platform HTTP client")?;
        let typing = Arc::new(Indicators::new(
            platform_client.clone(),
            Duration::from_millis(settings.dispatch.typing_interval_ms),
        ));
        let writer = TurnWriter::spawn(
            pool.clone(),
            crate::batch::BatchLimits {
                writers: settings.state_writers,
                batch_max: settings.state_batch_max,
                deadline: settings.database.deadline(),
            },
        );
        Ok(Self {
            queue: Queue::new(pool.clone()),
            pool,
            client,
            platform_client,
            writer,
            typing,
            clock,
            cache: Arc::new(ConfigCache::new(
                Duration::from_secs(settings.config_cache_secs),
                settings.database.secrets.clone(),
            )),
            urls: crate::media::token::UrlMinter::new(settings.database.secrets.clone(), &settings.media),
            holds: Default::default(),
            settings,
        })
    }

    /// Uses the instance's cache instead of a private one, so that tenant changes made
    /// through this instance's admin API reach the worker at once.
    pub fn sharing_cache(mut self, cache: Arc<ConfigCache>) -> Self {
        self.cache = cache;
        self
    }

    pub fn settings(&self) -> &ServeSettings {
        &self.settings
    }

    pub fn queue(&self) -> &Queue {
        &self.queue
    }

    fn lease(&self) -> Duration {
        Duration::from_secs(self.settings.dispatch.lease_secs)
    }

    /// Claims one job, if one is ready, and runs it to the end.
    pub async fn step(&self) -> anyhow::Result<StepOutcome> {
        let request = ClaimRequest {
            wanted: 1,
            room: Vec::new(),
            default_room: 1,
            lease: self.lease(),
        };
        let mut claimed = self.claim(&request).await?;
        match claimed.pop() {
            Some(claimed) => self.run_job(claimed).await,
            None => Ok(StepOutcome::Empty),
        }
    }

    /// Claims up to `request.wanted` jobs and prepares them, in one transaction. When the
    /// preparation fails, the batch's jobs are put back with a backoff (a job that fails
    /// every time must not be claimed again at once) and the error is returned.
    pub async fn claim(&self, request: &ClaimRequest) -> anyhow::Result<Vec<Claimed>> {
        let started = Instant::now();
        let Some((jobs, tx)) = self.queue.claim(request).await.context("Failed to claim jobs")? else {
            return Ok(Vec::new());
        };
        phase("claim", started);
        metrics::histogram!("channel_bridge_dispatch_claim_batch_size").record(jobs.len() as f64);
        let started = Instant::now();
        match self.prepare(tx, &jobs, started).await {
            Ok(claimed) => {
                phase("prepare", started);
                Ok(claimed)
            }
            Err(err) => {
                for job in &jobs {
                    self.back_off(job).await;
                }
                Err(err.context("Failed to prepare claimed jobs"))
            }
        }
    }

    /// In the claim's transaction, tenant by tenant: mark the turns `dispatching`, read
    /// tenant, histories and connectors (or a reply's parts), then commit.
    async fn prepare(
        &self,
        tx: Transaction<'static, Postgres>,
        jobs: &[Job],
        claimed_at: Instant,
    ) -> anyhow::Result<Vec<Claimed>> {
        let mut by_tenant: Vec<&Job> = jobs.iter().collect();
        by_tenant.sort_by_key(|job| job.tenant_id);
        let Some(first) = by_tenant.first() else {
            tx.rollback().await?;
            return Ok(Vec::new());
        };
        let mut tx = TenantTx::after_claim(tx, first.tenant_id).await?;
        let mut claimed = Vec::with_capacity(jobs.len());
        for group in by_tenant.chunk_by(|a, b| a.tenant_id == b.tenant_id) {
            tx.switch_tenant(group[0].tenant_id).await?;
            claimed.extend(self.prepare_tenant(&mut tx, group, claimed_at).await?);
        }
        tx.commit().await?;
        Ok(claimed)
    }

    async fn prepare_tenant(
        &self,
        tx: &mut TenantTx,
        jobs: &[&Job],
        claimed_at: Instant,
    ) -> anyhow::Result<Vec<Claimed>> {
        let tenant_id = tx.tenant();
        let tenant = self.cache.tenant(tx.conn(), tenant_id).await?;
        let mut claimed = Vec::with_capacity(jobs.len());
        let (dispatch, reply): (Vec<&Job>, Vec<&Job>) =
            jobs.iter().partition(|job| job.stage == Stage::Dispatch);
        for job in reply {
            let work = match Delivery::load(tx, &self.settings.database.secrets, job.message_id).await? {
                Some(outgoing) => Work::Deliver(Box::new(outgoing)),
                None => Work::Abandon,
            };
            claimed.push(Claimed {
                job: (*job).clone(),
                work,
            });
        }
        if dispatch.is_empty() {
            return Ok(claimed);
        }
        let Some(tenant) = tenant else {
            claimed.extend(dispatch.into_iter().map(|job| Claimed {
                job: job.clone(),
                work: Work::Skip,
            }));
            return Ok(claimed);
        };
        let ids: Vec<MessageId> = dispatch.iter().map(|job| job.message_id).collect();
        let mut messages: HashMap<MessageId, MessageRow> = apply::begin_dispatch(tx, &ids)
            .await?
            .into_iter()
            .map(|row| (row.id, row))
            .collect();
        let rows: Vec<&MessageRow> = messages.values().collect();
        let mut histories = read_histories_or_empty(tx, &rows, tenant.history_scope).await;
        let connectors = self.connectors_of(tx, &rows).await?;
        for job in dispatch {
            let work = match messages.remove(&job.message_id) {
                Some(message) => Work::Dispatch(Box::new(Prepared {
                    history: histories.remove(&message.id).unwrap_or_default(),
                    connector: connectors.get(&message.connector_id).cloned(),
                    tenant: tenant.clone(),
                    message,
                    claimed_at,
                })),
                None => Work::Skip,
            };
            claimed.push(Claimed {
                job: job.clone(),
                work,
            });
        }
        Ok(claimed)
    }

    /// The connectors the answers go to, read fresh rather than from a cache: a token
    /// rotated a moment ago must not fail the reply.
    async fn connectors_of(
        &self,
        tx: &mut TenantTx,
        messages: &[&MessageRow],
    ) -> Result<HashMap<crate::domain::ConnectorId, Arc<Connector>>, sqlx::Error> {
        let ids: Vec<crate::domain::ConnectorId> = messages
            .iter()
            .map(|m| m.connector_id)
            .collect::<HashSet<_>>()
            .into_iter()
            .collect();
        if ids.is_empty() {
            return Ok(HashMap::new());
        }
        let connectors = crate::db::connectors::get_many(tx, &self.settings.database.secrets, &ids).await?;
        Ok(connectors.into_iter().map(|c| (c.id, Arc::new(c))).collect())
    }

    /// Puts a job whose step failed on a database error back after a backoff: a job that
    /// fails every time must not be claimed again at once. Best effort: with the database
    /// gone, the lease decides.
    async fn back_off(&self, job: &Job) {
        let attempts = u32::try_from(job.attempts).unwrap_or(1);
        let delay = crate::retry::backoff(&self.settings.dispatch, attempts, None);
        let _ = self.queue.retry_later(job.message_id, job.lease, delay).await;
    }

    /// Works one claimed job to its outcome.
    pub async fn run_job(&self, claimed: Claimed) -> anyhow::Result<StepOutcome> {
        let started = Instant::now();
        let request_id = claimed.request_id().unwrap_or_default().to_owned();
        let traceparent = claimed.traceparent().map(str::to_owned);
        let job = claimed.job;
        let span = tracing::info_span!("job", tenant_id = %job.tenant_id, message_id = %job.message_id, stage = %job.stage, request_id, otel.kind = tracing::field::Empty, trace_id = tracing::field::Empty);
        // In traces the job continues its webhook's trace, named after its stage.
        traces::continue_trace(&span, traceparent.as_deref());
        traces::describe(&span, "consumer", job.stage.as_str());
        let mut waited = Waited::default();
        let work = async {
            match claimed.work {
                Work::Dispatch(prepared) => self.dispatch(&job, *prepared, &mut waited).await,
                Work::Deliver(outgoing) => self.deliver(&job, &outgoing, &mut waited).await,
                Work::Skip => {
                    self.conclude(&job, Transition::Skipped, StepOutcome::Skipped(job.message_id))
                        .await
                }
                Work::Abandon => {
                    let error = NOTHING_TO_POST.to_owned();
                    let abandoned = Transition::Abandoned { error };
                    self.conclude(&job, abandoned, StepOutcome::Skipped(job.message_id))
                        .await
                }
            }
        };
        let outcome = tracing::Instrument::instrument(work, span).await;
        let own = started.elapsed().saturating_sub(waited.0);
        metrics::histogram!("channel_bridge_dispatch_own_seconds").record(own.as_secs_f64());
        if outcome.is_err() {
            self.back_off(&job).await;
        }
        outcome
    }

    async fn dispatch(
        &self,
        job: &Job,
        mut prepared: Prepared,
        waited: &mut Waited,
    ) -> anyhow::Result<StepOutcome> {
        let attempts = u32::try_from(prepared.message.attempts).unwrap_or(u32::MAX);
        metrics::counter!("channel_bridge_dispatch_attempts_total").increment(1);
        let started = Instant::now();
        let typing = self.start_typing(&prepared);
        let history = std::mem::take(&mut prepared.history);
        let mut live = LiveView::new(|| self.live_context(job, &prepared), typing);
        let outcome = self.call_agent(&prepared, history, &mut live).await;
        let live = live.finish().await;
        if prepared.message.live_message_id.is_none() {
            prepared.message.live_message_id = live.live_message_id;
        }
        // Without an answer there is no reply to wait for: the indicator ends now.
        let typing = live
            .typing
            .filter(|_| matches!(outcome, CallOutcome::Answered(_)));
        waited.0 += started.elapsed();
        metrics::histogram!("channel_bridge_dispatch_agent_seconds").record(started.elapsed().as_secs_f64());
        phase("agent", started);
        let id = job.message_id;
        match outcome {
            CallOutcome::Answered(parts) => self.complete(job, prepared, &parts, waited, typing).await,
            CallOutcome::Retryable {
                reason,
                error,
                retry_after,
            } => {
                let delay = crate::retry::backoff(&self.settings.dispatch, attempts, retry_after);
                if self.may_retry(job, attempts, delay) {
                    tracing::debug!(reason, %error, attempts, "agent call failed; will retry");
                    let retry = Transition::AgentRetry { error, delay };
                    self.conclude(job, retry, StepOutcome::Retrying(id)).await
                } else {
                    tracing::warn!(reason, %error, attempts, "dispatch failed; retries are over");
                    metrics::counter!("channel_bridge_dispatch_failures_total", "reason" => reason)
                        .increment(1);
                    self.end_preview(&prepared).await;
                    self.conclude(job, Transition::AgentFailed { error }, StepOutcome::Failed(id))
                        .await
                }
            }
            CallOutcome::Permanent { reason, error } => {
                tracing::warn!(reason, %error, attempts, "dispatch failed");
                metrics::counter!("channel_bridge_dispatch_failures_total", "reason" => reason).increment(1);
                self.end_preview(&prepared).await;
                self.conclude(job, Transition::AgentFailed { error }, StepOutcome::Failed(id))
                    .await
            }
        }
    }

    /// The turn's typing indicator, when its connector shows one (best effort: it never
    /// holds up or fails the turn).
    fn start_typing(&self, prepared: &Prepared) -> Option<Typing> {
        let connector = prepared.connector.as_ref()?;
        self.typing
            .start(connector, &prepared.message, prepared.claimed_at)
    }

    /// Where a streamed answer is shown while it runs (`None`: the connector is gone).
    fn live_context(&self, job: &Job, prepared: &Prepared) -> Option<LiveContext> {
        Some(LiveContext {
            client: self.platform_client.clone(),
            writer: self.writer.clone(),
            job: job.clone(),
            connector: prepared.connector.clone()?,
            message: prepared.message.clone(),
            interval: Duration::from_millis(self.settings.dispatch.stream_interval_ms),
        })
    }

    /// Ends the preview of a streamed answer that gets no reply (the agent failed for good,
    /// or answered nothing), so that no Slack stream stays open. A retry keeps it: the next
    /// attempt's first part adopts it.
    async fn end_preview(&self, prepared: &Prepared) {
        let (Some(connector), Some(live_id)) = (&prepared.connector, &prepared.message.live_message_id)
        else {
            return;
        };
        crate::delivery::live::end(&self.platform_client, connector, &prepared.message, live_id).await;
    }

    /// Whether a failed call gets another attempt after `delay`: within the attempt limit
    /// (when one is set) and within the retry horizon, counted from when the job was queued.
    fn may_retry(&self, job: &Job, attempts: u32, delay: Duration) -> bool {
        let settings = &self.settings.dispatch;
        if settings.max_attempts != 0 && attempts >= settings.max_attempts {
            return false;
        }
        let queued_for = (chrono::Utc::now() - job.enqueued_at)
            .to_std()
            .unwrap_or_default();
        queued_for + delay <= Duration::from_secs(settings.retry_horizon_secs)
    }

    /// Applies a transition that ends this holder's work on the job.
    async fn conclude(
        &self,
        job: &Job,
        transition: Transition,
        outcome: StepOutcome,
    ) -> anyhow::Result<StepOutcome> {
        match self.writer.apply(job, transition).await? {
            Applied::LeaseLost => Ok(StepOutcome::LeaseLost(job.message_id)),
            Applied::Done | Applied::Stored { .. } => Ok(outcome),
        }
    }

    /// Calls the agent with the turn and its `history`, which is consumed: only the encoded
    /// request lives on while the call waits.
    async fn call_agent(
        &self,
        prepared: &Prepared,
        history: Vec<ChatMessage>,
        live: &mut (dyn TextSink + Send),
    ) -> CallOutcome {
        let tenant = &prepared.tenant;
        let Some(url) = tenant.agent_url.as_ref().or(self.settings.agent_url.as_ref()) else {
            return CallOutcome::Permanent {
                reason: "no_agent_url",
                error: "neither the tenant nor CB_AGENT_URL names an agent".into(),
            };
        };
        let now = (self.clock)();
        let payload = payload::build(&prepared.message, history, &self.urls, now);
        let mut secrets = vec![tenant.dispatch_secret.0.expose_secret()];
        secrets.extend(
            tenant
                .previous_dispatch_secret
                .as_ref()
                .map(|s| s.expose_secret()),
        );
        let span = tracing::info_span!(target: traces::TARGET, "agent call", otel.kind = "client");
        let outcome = agent::call(&self.client, url, &secrets, payload, now, Some(live))
            .instrument(span.clone())
            .await;
        match &outcome {
            CallOutcome::Answered(_) => {}
            CallOutcome::Retryable { reason, .. } | CallOutcome::Permanent { reason, .. } => {
                traces::record_failure(&span, reason);
            }
        }
        outcome
    }

    /// Stores the answer and its reply parts (the store commits together with the first
    /// part's `sending` mark), ends the typing indicator, then posts them.
    async fn complete(
        &self,
        job: &Job,
        prepared: Prepared,
        answer: &[String],
        waited: &mut Waited,
        typing: Option<Typing>,
    ) -> anyhow::Result<StepOutcome> {
        let started = Instant::now();
        let platform: Platform = prepared.message.platform.parse()?;
        let markdown = prepared.connector.as_ref().is_some_and(|c| c.format_markdown);
        let parts = split::split_parts(platform, markdown, answer);
        let has_parts = !parts.is_empty();
        let answered = Transition::Answered {
            response: answer.join("\n\n"),
            parts: parts.clone(),
        };
        let first = match self.writer.apply(job, answered).await? {
            Applied::LeaseLost => return Ok(StepOutcome::LeaseLost(job.message_id)),
            Applied::Stored { first } => first,
            Applied::Done => true,
        };
        if !first {
            tracing::info!("turn was already finished by another attempt; keeping the first answer");
        }
        if !has_parts {
            self.end_preview(&prepared).await;
            return Ok(StepOutcome::Executed(job.message_id));
        }
        let outgoing = match (first, prepared.connector) {
            (true, Some(connector)) => Outgoing::fresh(prepared.message, connector, parts),
            _ => match self.load_outgoing(job.tenant_id, job.message_id).await? {
                Some(outgoing) => outgoing,
                None => {
                    let error = NOTHING_TO_POST.to_owned();
                    self.conclude(
                        job,
                        Transition::Abandoned { error },
                        StepOutcome::Executed(job.message_id),
                    )
                    .await?;
                    return Ok(StepOutcome::Executed(job.message_id));
                }
            },
        };
        if let Some(typing) = typing {
            typing.before_reply().await;
        }
        let outcome = self.run_delivery(job, &outgoing, waited).await?;
        phase("reply", started);
        Ok(match outcome {
            StepOutcome::LeaseLost(id) => StepOutcome::LeaseLost(id),
            _ => StepOutcome::Executed(job.message_id),
        })
    }

    async fn load_outgoing(&self, tenant: TenantId, message: MessageId) -> anyhow::Result<Option<Outgoing>> {
        let mut tx = TenantTx::begin(&self.pool, tenant).await?;
        let outgoing = Delivery::load(&mut tx, &self.settings.database.secrets, message).await?;
        tx.commit().await?;
        Ok(outgoing)
    }

    /// The reply stage of a claimed job: one delivery pass; the job ends when every part is
    /// posted or one failed for good, and otherwise waits its turn again.
    async fn deliver(
        &self,
        job: &Job,
        outgoing: &Outgoing,
        waited: &mut Waited,
    ) -> anyhow::Result<StepOutcome> {
        let started = Instant::now();
        let outcome = self.run_delivery(job, outgoing, waited).await?;
        phase("reply", started);
        Ok(outcome)
    }

    async fn run_delivery(
        &self,
        job: &Job,
        outgoing: &Outgoing,
        waited: &mut Waited,
    ) -> anyhow::Result<StepOutcome> {
        let delivery = Delivery {
            writer: &self.writer,
            pool: &self.pool,
            client: &self.platform_client,
            settings: &self.settings.dispatch,
            holds: &self.holds,
        };
        let span = tracing::info_span!(target: traces::TARGET, "deliver", parts = outgoing.parts.len());
        let pass = delivery.run(job, outgoing).instrument(span).await?;
        waited.0 += pass.platform_time;
        let id = job.message_id;
        Ok(match pass.outcome {
            DeliveryOutcome::Wait => StepOutcome::Retrying(id),
            DeliveryOutcome::Delivered => {
                log_delivered(outgoing);
                StepOutcome::Delivered(id)
            }
            DeliveryOutcome::Stopped => StepOutcome::Failed(id),
            DeliveryOutcome::LeaseLost => StepOutcome::LeaseLost(id),
        })
    }
}

impl Claimed {
    /// The id of the webhook request that recorded the turn (`metadata.request_id`, set by
    /// `http::hooks`), so a job's logs can be joined to its request's.
    fn request_id(&self) -> Option<&str> {
        self.metadata_str("request_id")
    }

    /// The W3C `traceparent` of the webhook request that recorded the turn
    /// (`metadata.traceparent`, set by `http::hooks` when traces are exported).
    fn traceparent(&self) -> Option<&str> {
        self.metadata_str("traceparent")
    }

    fn metadata_str(&self, key: &str) -> Option<&str> {
        let message = match &self.work {
            Work::Dispatch(prepared) => &prepared.message,
            Work::Deliver(outgoing) => &outgoing.message,
            Work::Skip | Work::Abandon => return None,
        };
        message.metadata.get(key).and_then(serde_json::Value::as_str)
    }
}

/// One INFO line per delivered turn (the job span adds tenant, message and request ids):
/// platform, parts and the time from the webhook to the last part posted. Never text.
fn log_delivered(outgoing: &Outgoing) {
    let message = &outgoing.message;
    let latency_ms = (chrono::Utc::now() - message.received_at).num_milliseconds();
    tracing::info!(
        connector_id = %message.connector_id,
        platform = %message.platform,
        parts = outgoing.parts.len(),
        latency_ms,
        "turn delivered"
    );
}

/// History is best effort: a failed read is logged and counted, and the dispatch goes on
/// with no history rather than not at all. The read runs in a savepoint so its failure
/// leaves the surrounding transaction usable. A successful read leaves the savepoint open:
/// the commit that follows commits it with the rest, so releasing it would only cost a
/// round trip.
async fn read_histories_or_empty(
    tx: &mut TenantTx,
    messages: &[&MessageRow],
    setting: crate::domain::HistoryScopeSetting,
) -> HashMap<MessageId, Vec<ChatMessage>> {
    if messages.is_empty() {
        return HashMap::new();
    }
    let savepoint = sqlx::query("savepoint history").execute(tx.conn()).await;
    if let Err(err) = savepoint {
        tracing::warn!(%err, "history read failed; dispatching without history");
        metrics::counter!("channel_bridge_dispatch_history_failures_total").increment(1);
        return HashMap::new();
    }
    let started = Instant::now();
    match history::load_many(tx, messages, setting).await {
        Ok(history) => {
            metrics::histogram!("channel_bridge_dispatch_history_seconds")
                .record(started.elapsed().as_secs_f64());
            history
        }
        Err(err) => {
            tracing::warn!(%err, "history read failed; dispatching without history");
            metrics::counter!("channel_bridge_dispatch_history_failures_total").increment(1);
            let _ = sqlx::query("rollback to savepoint history")
                .execute(tx.conn())
                .await;
            HashMap::new()
        }
    }
}
