//! The answer stage: the agent called with its typing indicator and live view, the answer
//! stored, and the reply handed to the delivery stage.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::Instrument;

use super::agent::{CallOutcome, NO_AGENT_URL};
use super::claimed::{phase, Prepared, StepOutcome, Waited, NOTHING_TO_POST};
use super::deliver::Deliverer;
use super::payload::{Answer, ChatMessage};
use super::{agent, payload};
use crate::db::parts::Reply;
use crate::db::queue::Job;
use crate::delivery::live::{LiveContext, LiveView, TextSink};
use crate::delivery::typing::{Indicators, Typing};
use crate::delivery::{split, Outgoing};
use crate::egress::GuardedClient;
use crate::media::token::UrlMinter;
use crate::settings::ServeSettings;
use crate::telemetry::traces;
use crate::turn::writer::TurnWriter;
use crate::turn::{Applied, HandoffRequest, Transition};

pub(super) struct Answerer {
    settings: Arc<ServeSettings>,
    /// The agent's client.
    agent: GuardedClient,
    /// The platforms' client, for the live view and the preview it leaves.
    platform: GuardedClient,
    writer: TurnWriter,
    typing: Arc<Indicators>,
    urls: UrlMinter,
    clock: fn() -> i64,
}

impl Answerer {
    pub(super) fn new(
        settings: Arc<ServeSettings>,
        agent: GuardedClient,
        platform: GuardedClient,
        writer: TurnWriter,
        typing: Arc<Indicators>,
        urls: UrlMinter,
        clock: fn() -> i64,
    ) -> Self {
        Self {
            settings,
            agent,
            platform,
            writer,
            typing,
            urls,
            clock,
        }
    }

    /// `deliverer` posts the reply once the answer is stored, in the same job.
    pub(super) async fn dispatch(
        &self,
        job: &Job,
        mut prepared: Prepared,
        waited: &mut Waited,
        deliverer: &Deliverer,
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
        match outcome {
            CallOutcome::Answered(answer) => {
                let agent_ms = i32::try_from(started.elapsed().as_millis()).ok();
                // Boxed: its future is twice the size of the agent call's, and thousands of
                // jobs wait on the agent at once holding a future as large as their largest step.
                let answered = Answered {
                    answer,
                    agent_ms,
                    typing,
                };
                Box::pin(self.complete(job, prepared, answered, waited, deliverer)).await
            }
            CallOutcome::Accepted => self.accepted(job, &prepared).await,
            CallOutcome::Retryable {
                reason,
                error,
                retry_after,
            } => {
                let delay = crate::retry::backoff(&self.settings.dispatch, attempts, retry_after);
                if self.may_retry(job, attempts, delay) {
                    tracing::debug!(reason, %error, attempts, "agent call failed; will retry");
                    let retry = Transition::AgentRetry { error, delay };
                    let retrying = StepOutcome::Retrying(job.message_id);
                    return self.writer.conclude(job, retry, retrying).await;
                }
                tracing::warn!(reason, %error, attempts, "dispatch failed; retries are over");
                self.failed(job, &prepared, reason, error).await
            }
            CallOutcome::Permanent { reason, error } => {
                tracing::warn!(reason, %error, attempts, "dispatch failed");
                self.failed(job, &prepared, reason, error).await
            }
        }
    }

    /// The agent answered 202: its answer comes later, within the async horizon.
    async fn accepted(&self, job: &Job, prepared: &Prepared) -> anyhow::Result<StepOutcome> {
        metrics::counter!("channel_bridge_dispatch_async_total").increment(1);
        self.end_preview(prepared).await;
        let horizon = chrono::Duration::seconds(self.settings.dispatch.async_horizon_secs as i64);
        let accepted = Transition::AgentAccepted {
            until: chrono::Utc::now() + horizon,
        };
        self.writer
            .conclude(job, accepted, StepOutcome::Awaiting(job.message_id))
            .await
    }

    /// The turn ends `dispatch_failed` for `reason` (a metric's label), its preview ended.
    async fn failed(
        &self,
        job: &Job,
        prepared: &Prepared,
        reason: &'static str,
        error: String,
    ) -> anyhow::Result<StepOutcome> {
        metrics::counter!("channel_bridge_dispatch_failures_total", "reason" => reason).increment(1);
        self.end_preview(prepared).await;
        self.writer
            .conclude(
                job,
                Transition::AgentFailed { error },
                StepOutcome::Failed(job.message_id),
            )
            .await
    }

    fn start_typing(&self, prepared: &Prepared) -> Option<Typing> {
        let connector = prepared.connector.as_ref()?;
        self.typing
            .start(connector, &prepared.message, prepared.claimed_at)
    }

    fn live_context(&self, job: &Job, prepared: &Prepared) -> Option<LiveContext> {
        Some(LiveContext {
            client: self.platform.clone(),
            writer: self.writer.clone(),
            job: job.clone(),
            connector: prepared.connector.clone()?,
            message: prepared.message.clone(),
            interval: Duration::from_millis(self.settings.dispatch.stream_interval_ms),
        })
    }

    /// For a turn that gets no reply; a retry keeps the preview for the next attempt to adopt.
    async fn end_preview(&self, prepared: &Prepared) {
        let (Some(connector), Some(live_id)) = (&prepared.connector, &prepared.message.live_message_id)
        else {
            return;
        };
        crate::delivery::live::end(&self.platform, connector, &prepared.message, live_id).await;
    }

    /// The retry horizon counts from when the job was queued.
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

    /// `history` is consumed: only the encoded request lives on while the call waits.
    async fn call_agent(
        &self,
        prepared: &Prepared,
        history: Vec<ChatMessage>,
        live: &mut (dyn TextSink + Send),
    ) -> CallOutcome {
        let tenant = &prepared.tenant;
        let Some(url) = agent::url_of(tenant, &self.settings) else {
            return CallOutcome::Permanent {
                reason: "no_agent_url",
                error: NO_AGENT_URL.into(),
            };
        };
        let now = (self.clock)();
        let mut payload = payload::build(&prepared.message, history, &self.urls, now);
        let horizon = chrono::Duration::seconds(self.settings.dispatch.async_horizon_secs as i64);
        payload.reply = Some(payload::ReplyTo::of(
            &self.urls.base_url,
            &prepared.message,
            chrono::Utc::now() + horizon,
        ));
        let secrets = tenant.signing_secrets();
        let span = tracing::info_span!(target: traces::TARGET, "agent call", otel.kind = "client");
        let outcome = agent::call(&self.agent, url, &secrets, payload, now, Some(live))
            .instrument(span.clone())
            .await;
        match &outcome {
            CallOutcome::Answered(_) | CallOutcome::Accepted => {}
            CallOutcome::Retryable { reason, .. } | CallOutcome::Permanent { reason, .. } => {
                traces::record_failure(&span, reason);
            }
        }
        outcome
    }

    /// The store commits together with the first part's `sending` mark.
    async fn complete(
        &self,
        job: &Job,
        prepared: Prepared,
        answered: Answered,
        waited: &mut Waited,
        deliverer: &Deliverer,
    ) -> anyhow::Result<StepOutcome> {
        let Answered {
            answer,
            agent_ms,
            typing,
        } = answered;
        let started = Instant::now();
        let Ready { answered, reply } = match reply_of(&prepared, answer, agent_ms)? {
            Ok(reply) => reply,
            Err(error) => {
                tracing::warn!(%error, "dispatch failed");
                return self.failed(job, &prepared, "unfit_answer", error).await;
            }
        };
        let has_parts = !reply.is_empty();
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
        let stored = match (first, prepared.connector) {
            (true, Some(connector)) => Some(Outgoing::fresh(prepared.message, connector, &reply, job.lease)),
            // Stored by an earlier attempt, or by this one in a commit whose acknowledgement was
            // lost: the parts say which (`Delivery::load`).
            _ => deliverer.load_outgoing(job).await?,
        };
        let Some(outgoing) = stored else {
            let abandoned = Transition::Abandoned {
                error: NOTHING_TO_POST.to_owned(),
            };
            let executed = StepOutcome::Executed(job.message_id);
            self.writer.conclude(job, abandoned, executed).await?;
            return Ok(StepOutcome::Executed(job.message_id));
        };
        if let Some(typing) = typing {
            typing.before_reply().await;
        }
        let outcome = deliverer.run_delivery(job, &outgoing, waited).await?;
        phase("reply", started);
        Ok(match outcome {
            StepOutcome::LeaseLost(id) => StepOutcome::LeaseLost(id),
            _ => StepOutcome::Executed(job.message_id),
        })
    }
}

/// What the agent's call left for the store: the answer, how long the agent took, and the
/// typing indicator that runs until the reply is posted.
struct Answered {
    answer: Answer,
    agent_ms: Option<i32>,
    typing: Option<Typing>,
}

/// An answer made ready to store: split for its platform, its choices, files and reaction
/// checked for it.
struct Ready {
    answered: Transition,
    reply: Reply,
}

/// `Ok(Err(reason))`: the platform cannot post the answer (its choices, a file, its reaction).
fn reply_of(
    prepared: &Prepared,
    answer: Answer,
    agent_ms: Option<i32>,
) -> anyhow::Result<Result<Ready, String>> {
    let platform = prepared.message.platform;
    let markdown = prepared
        .connector
        .as_ref()
        .is_some_and(|c| c.profile.format_markdown);
    let ask = answer.ask();
    let response = ask.shown();
    let reply = match split::reply(platform, markdown, ask) {
        Ok(reply) => reply,
        Err(unfit) => return Ok(Err(format!("the agent's answer cannot be posted: {unfit}"))),
    };
    let handoff = answer.handoff.map(|ask| HandoffRequest {
        conversation: prepared.message.conversation_key.clone(),
        user_id: prepared.message.user_id.clone(),
        reason: ask.reason,
    });
    let answered = Transition::Answered {
        response,
        reply: Box::new(reply.clone()),
        agent_ms,
        handoff,
    };
    Ok(Ok(Ready { answered, reply }))
}
