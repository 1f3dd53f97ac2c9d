//! The worker: its stages (claim, answer, delivery, feedback) built once and one claimed
//! job run through them to its outcome; `Worker::step` claims and runs one job, for tests
//! and tools.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use sqlx::PgPool;

use super::answer::Answerer;
use super::claimed::{Claimed, StepOutcome, Waited, Work, NOTHING_TO_POST};
use super::deliver::Deliverer;
use super::feedback_sender::FeedbackSender;
use super::prepare::Preparer;
use crate::cache::ConfigCache;
use crate::db::queue::{ClaimRequest, Queue};
use crate::delivery::typing::Indicators;
use crate::egress::GuardedClient;
use crate::media::token::UrlMinter;
use crate::settings::ServeSettings;
use crate::telemetry::traces;
use crate::turn::writer::TurnWriter;
use crate::turn::Transition;

/// Each stage holds only the services it uses; the turn writer is shared, so their changes
/// share its batches.
pub struct Worker {
    settings: Arc<ServeSettings>,
    writer: TurnWriter,
    preparer: Preparer,
    answerer: Answerer,
    deliverer: Deliverer,
    feedback: FeedbackSender,
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
        let agent = agent_client(&settings)?;
        let urls = UrlMinter::new(settings.database.secrets.clone(), &settings.media);
        let Services {
            platform_client,
            typing,
            cache,
        } = services;
        Ok(Self {
            preparer: Preparer::new(Queue::new(pool.clone()), settings.clone(), cache.clone()),
            answerer: Answerer::new(
                settings.clone(),
                agent.clone(),
                platform_client.clone(),
                writer.clone(),
                typing,
                urls,
                clock,
            ),
            deliverer: Deliverer::new(pool.clone(), writer.clone(), platform_client, settings.clone()),
            feedback: FeedbackSender::new(pool, cache, agent, settings.clone()),
            writer,
            settings,
        })
    }

    pub fn settings(&self) -> &ServeSettings {
        &self.settings
    }

    pub fn queue(&self) -> &Queue {
        self.preparer.queue()
    }

    /// A failed preparation puts the batch's jobs back with a backoff.
    pub async fn claim(&self, request: &ClaimRequest) -> anyhow::Result<Vec<Claimed>> {
        self.preparer.claim(request).await
    }

    /// One pass over the due feedback events, each attempted once. Returns how many were
    /// settled (sent, superseded, refused or given up).
    pub async fn deliver_feedback(&self) -> Result<usize, sqlx::Error> {
        self.feedback.deliver().await
    }

    pub async fn step(&self) -> anyhow::Result<StepOutcome> {
        let request = ClaimRequest {
            wanted: 1,
            room: Vec::new(),
            default_room: 1,
            lease: Duration::from_secs(self.settings.dispatch.lease_secs),
        };
        let mut claimed = self.claim(&request).await?;
        match claimed.pop() {
            Some(claimed) => self.run_job(claimed).await,
            None => Ok(StepOutcome::Empty),
        }
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
                Work::Dispatch(prepared) => {
                    let deliverer = &self.deliverer;
                    self.answerer
                        .dispatch(&job, *prepared, &mut waited, deliverer)
                        .await
                }
                // Boxed, as `dispatch`'s delivery: a job's future is as large as its largest step.
                Work::Deliver(outgoing) => {
                    Box::pin(self.deliverer.deliver(&job, &outgoing, &mut waited)).await
                }
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
            self.preparer.release(job.clone(), err.is_outage()).await;
        }
        outcome
    }
}
