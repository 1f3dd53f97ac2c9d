//! The worker and one claimed job run to its outcome; `Worker::step` claims and runs one
//! job, for tests and tools.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use sqlx::PgPool;

use super::claimed::{Claimed, StepOutcome, Waited, Work, NOTHING_TO_POST};
use crate::cache::ConfigCache;
use crate::db::queue::{ClaimRequest, Job, Queue};
use crate::delivery::typing::Indicators;
use crate::egress::GuardedClient;
use crate::settings::ServeSettings;
use crate::telemetry::traces;
use crate::turn::writer::TurnWriter;
use crate::turn::Transition;

pub(super) const NO_AGENT_URL: &str = "neither the tenant nor CB_AGENT_URL names an agent";

pub struct Worker {
    pub(super) pool: PgPool,
    pub(super) queue: Queue,
    pub(super) settings: Arc<ServeSettings>,
    pub(super) client: GuardedClient,
    /// Shorter timeouts than an agent call.
    pub(super) platform_client: GuardedClient,
    pub(super) writer: TurnWriter,
    pub(super) typing: Arc<Indicators>,
    /// Shared with the instance's admin API, which forgets what it changes.
    pub(super) cache: Arc<ConfigCache>,
    pub(super) urls: crate::media::token::UrlMinter,
    pub(super) holds: crate::delivery::holds::SendHolds,
    pub(super) clock: fn() -> i64,
}

/// What one instance builds once and shares between its worker and its HTTP faces: the
/// platform client, the typing indicators (so one per-chat limiter a process) and the cache
/// of tenant and connector settings (admin changes through the instance forget what they
/// change, for the worker too).
#[derive(Clone)]
pub struct Services {
    pub platform_client: GuardedClient,
    pub typing: Arc<Indicators>,
    pub cache: Arc<ConfigCache>,
}

impl Services {
    pub fn build(settings: &ServeSettings) -> anyhow::Result<Self> {
        let platform_client = platform_client(settings, Arc::new(settings.egress.allow.clone()))?;
        let typing = Arc::new(Indicators::new(
            platform_client.clone(),
            Duration::from_millis(settings.dispatch.typing_interval_ms),
        ));
        let cache = Arc::new(ConfigCache::new(
            Duration::from_secs(settings.config_cache_secs),
            settings.database.secrets.clone(),
        ));
        Ok(Self {
            platform_client,
            typing,
            cache,
        })
    }
}

/// The client of the platforms' APIs: shorter timeouts than an agent call, and the egress
/// policy (the API base URLs are the tenants' to set). HTTP/1.1 only: a platform's HTTP/2
/// server would cap the posts in flight to it at its stream limit.
fn platform_client(
    settings: &ServeSettings,
    policy: Arc<crate::egress::EgressPolicy>,
) -> anyhow::Result<GuardedClient> {
    let platform = reqwest::Client::builder()
        .timeout(Duration::from_secs(settings.dispatch.platform_timeout_secs))
        .connect_timeout(Duration::from_secs(5))
        .http1_only()
        .user_agent(concat!("channel-bridge/", env!("CARGO_PKG_VERSION")));
    GuardedClient::build(platform, policy).context("Failed to build the platform HTTP client")
}

/// The client of the agent: the egress policy (the agent URL is the tenants' to set), and
/// HTTP/1.1, which holds a connection (hyper's channel, task and buffers) per call in flight,
/// or HTTP/2, which holds a stream (CB_AGENT_HTTP2; docs/benchmarks.md, "HTTP/2 to the
/// agent").
fn agent_client(settings: &ServeSettings) -> anyhow::Result<GuardedClient> {
    let agent = reqwest::Client::builder()
        .timeout(Duration::from_secs(settings.dispatch.agent_timeout_secs))
        .connect_timeout(Duration::from_secs(5))
        .user_agent(concat!("channel-bridge/", env!("CARGO_PKG_VERSION")));
    let agent = match settings.dispatch.agent_http2 {
        true => agent.http2_prior_knowledge(),
        false => agent.http1_only(),
    };
    GuardedClient::build(agent, Arc::new(settings.egress.allow.clone()))
        .context("Failed to build the agent HTTP client")
}

impl Worker {
    /// The tenant's agent URL, else the instance's `CB_AGENT_URL`.
    pub(super) fn agent_url<'a>(&'a self, tenant: &'a crate::db::tenants::TenantRow) -> Option<&'a str> {
        tenant.agent_url.as_deref().or(self.settings.agent_url.as_deref())
    }

    /// A worker of its own (tests and tools): its services are built for it. Its turn
    /// writer's tasks start on the current runtime.
    pub fn new(pool: PgPool, settings: Arc<ServeSettings>, clock: fn() -> i64) -> anyhow::Result<Self> {
        let services = Services::build(&settings)?;
        Self::with_services(pool, settings, clock, services)
    }

    /// A worker that shares `services` with the rest of its instance.
    pub fn with_services(
        pool: PgPool,
        settings: Arc<ServeSettings>,
        clock: fn() -> i64,
        services: Services,
    ) -> anyhow::Result<Self> {
        let writer = TurnWriter::spawn(
            pool.clone(),
            crate::batch::BatchLimits {
                writers: settings.state_writers,
                batch_max: settings.state_batch_max,
                deadline: settings.database.deadline(),
            },
            Duration::from_secs(settings.dispatch.lease_secs),
        );
        Ok(Self {
            queue: Queue::new(pool.clone()),
            pool,
            client: agent_client(&settings)?,
            platform_client: services.platform_client,
            writer,
            typing: services.typing,
            clock,
            cache: services.cache,
            urls: crate::media::token::UrlMinter::new(settings.database.secrets.clone(), &settings.media),
            holds: Default::default(),
            settings,
        })
    }

    pub fn settings(&self) -> &ServeSettings {
        &self.settings
    }

    pub fn queue(&self) -> &Queue {
        &self.queue
    }

    pub(super) fn lease(&self) -> Duration {
        Duration::from_secs(self.settings.dispatch.lease_secs)
    }

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

    /// Ends a failed job's lease (see `release`).
    pub(super) async fn back_off(&self, job: &Job, outage: bool) {
        release(self.queue.clone(), self.settings.clone(), job.clone(), outage).await;
    }

    pub async fn run_job(&self, claimed: Claimed) -> anyhow::Result<StepOutcome> {
        let started = Instant::now();
        let request_id = claimed.request_id().unwrap_or_default().to_owned();
        let traceparent = claimed.traceparent().map(str::to_owned);
        let job = claimed.job;
        let span = tracing::info_span!("job", tenant_id = %job.tenant_id, message_id = %job.message_id, stage = %job.stage, request_id, otel.kind = tracing::field::Empty, trace_id = tracing::field::Empty);
        traces::continue_trace(&span, traceparent.as_deref());
        traces::describe(&span, "consumer", job.stage.as_str());
        let mut waited = Waited::default();
        let work = async {
            match claimed.work {
                Work::Dispatch(prepared) => self.dispatch(&job, *prepared, &mut waited).await,
                // Boxed, as `dispatch`'s delivery: a job's future is as large as its largest step.
                Work::Deliver(outgoing) => Box::pin(self.deliver(&job, &outgoing, &mut waited)).await,
                Work::Skip => {
                    self.writer
                        .conclude(&job, Transition::Skipped, StepOutcome::Skipped(job.message_id))
                        .await
                }
                Work::Hold => {
                    metrics::counter!("channel_bridge_turns_held_total").increment(1);
                    self.writer
                        .conclude(&job, Transition::Skipped, StepOutcome::Held(job.message_id))
                        .await
                }
                Work::Abandon => {
                    let error = NOTHING_TO_POST.to_owned();
                    let abandoned = Transition::Abandoned { error };
                    self.writer
                        .conclude(&job, abandoned, StepOutcome::Skipped(job.message_id))
                        .await
                }
            }
        };
        let outcome = tracing::Instrument::instrument(work, span).await;
        let own = started.elapsed().saturating_sub(waited.0);
        metrics::histogram!("channel_bridge_dispatch_own_seconds").record(own.as_secs_f64());
        if let Err(err) = &outcome {
            use crate::db::outage::MaybeOutage;
            self.back_off(&job, err.is_outage()).await;
        }
        outcome
    }
}

/// Ends a failed job's lease. A job that fails every time must not be claimed again at once;
/// one that met an outage is ready again as soon as the database is back, rather than when
/// its lease runs out. Written through the outage, for at most a lease.
pub(super) async fn release(queue: Queue, settings: Arc<ServeSettings>, job: Job, outage: bool) {
    let attempts = u32::try_from(job.attempts).unwrap_or(1);
    let delay = match outage {
        true => Duration::ZERO,
        false => crate::retry::backoff(&settings.dispatch, attempts, None),
    };
    let deadline = settings.database.deadline();
    let patience = Duration::from_secs(settings.dispatch.lease_secs);
    let released = crate::db::outage::through_outage(patience, "job release", || {
        crate::db::within(deadline, queue.retry_later(job.message_id, job.lease, delay))
    })
    .await;
    if let Err(err) = released {
        tracing::warn!(%err, message_id = %job.message_id, "could not release a failed job; its lease decides");
    }
}
