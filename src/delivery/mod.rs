//! Posting a turn's reply parts, in order, each exactly once
//! (docs/delivery.md#delivery-guarantees). A part left `sending` by an earlier pass is
//! reconciled as its platform says before anything is resent; a part a streamed answer's
//! live view left a message for is adopted (an edit, so simply redone) rather than posted.
//! Every state change is a `crate::turn::Transition` committed before the pass goes on, and
//! a pass whose lease was lost stops before its next request.

pub mod holds;
pub mod live;
pub mod split;
pub mod typing;

use std::sync::Arc;
use std::time::{Duration, Instant};

use sqlx::PgPool;

use crate::db::messages::MessageRow;
use crate::db::parts::{Reply, ReplyPart};
use crate::db::queue::{Job, LeaseToken};
use crate::db::{self, replies, TenantTx};
use crate::domain::{Connector, MessageId, PartStatus, Platform};
use crate::platforms;
use crate::platforms::contract::{Pending, Reconciled};
use crate::platforms::send::{OutboundPart, SendOutcome};
use crate::retry::part_backoff;
use crate::settings::DispatchSettings;
use crate::turn::writer::{Conclusion, TurnWriter};
use crate::turn::Transition;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeliveryOutcome {
    Delivered,
    Wait,
    /// A part failed for good, or the pass ended with a part in doubt; the job is finished.
    Stopped,
    LeaseLost,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryPass {
    pub outcome: DeliveryOutcome,
    pub platform_time: Duration,
}

/// What one pass carries from a part to the next.
struct Pass<'o> {
    outgoing: &'o Outgoing,
    /// Neither sent nor in doubt, in order.
    pending: Vec<&'o ReplyPart>,
    /// The part marked `sending` for this pass, not reconciled when met.
    marked: Option<i32>,
    /// A part of this answer is `unknown`: the pass ends `Concluded`, not delivered.
    in_doubt: bool,
    /// The agent may still post parts of this answer (docs/agent.md#answering-later).
    awaiting: bool,
    /// The answer offered choices (`Transition::Delivered`).
    offered: bool,
    platform_time: Duration,
}

impl<'o> Pass<'o> {
    fn of(outgoing: &'o Outgoing) -> Self {
        let parts = &outgoing.parts;
        Self {
            outgoing,
            pending: parts
                .iter()
                .filter(|part| !matches!(part.status, PartStatus::Sent | PartStatus::Unknown))
                .collect(),
            marked: outgoing.marked,
            in_doubt: parts.iter().any(|part| part.status == PartStatus::Unknown),
            awaiting: outgoing.message.status == crate::domain::MessageStatus::AwaitingAgent,
            offered: parts.iter().any(|part| part.choices.is_some()),
            platform_time: Duration::ZERO,
        }
    }

    /// How the pass ends after `last` (the part just posted, not recorded yet).
    fn finished(&self, last: Option<(i32, String)>) -> (Transition, DeliveryOutcome) {
        finished(last, self.in_doubt, self.awaiting, self.offered)
    }

    fn ended(&self, outcome: DeliveryOutcome) -> DeliveryPass {
        DeliveryPass {
            outcome,
            platform_time: self.platform_time,
        }
    }
}

/// What the pass does after a part.
enum Step {
    Next,
    /// This transition ends the pass, with this outcome unless the lease was lost.
    End(Transition, DeliveryOutcome),
    LeaseLost,
}

impl Step {
    fn end((transition, outcome): (Transition, DeliveryOutcome)) -> Self {
        Self::End(transition, outcome)
    }
}

enum PartOutcome {
    /// Not yet recorded.
    Posted(String),
    Unknown(String),
    End(Transition, DeliveryOutcome),
}

/// Uploads one part's pass may make (`SendOutcome::Staged`).
const STAGES_MAX: usize = 2;

/// How long writing a rate-limit hold for the other instances may take.
const SHARE_DEADLINE: Duration = Duration::from_secs(2);

pub struct Delivery<'a> {
    pub writer: &'a TurnWriter,
    pub pool: &'a PgPool,
    pub client: &'a crate::egress::GuardedClient,
    pub settings: &'a DispatchSettings,
    pub holds: &'a holds::SendHolds,
}

pub struct Outgoing {
    pub message: MessageRow,
    pub connector: Arc<Connector>,
    pub parts: Vec<ReplyPart>,
    /// Marked `sending` for this pass by a committed transition: posted, not reconciled.
    pub marked: Option<i32>,
}

impl Conclusion for DeliveryOutcome {
    fn lease_lost(_job: &Job) -> Self {
        DeliveryOutcome::LeaseLost
    }
}

impl Outgoing {
    /// The parts as the answer's store created them, without reading them back: part 0
    /// `sending` (attempt 1) under `lease`, the rest `pending`.
    pub fn fresh(message: MessageRow, connector: Arc<Connector>, reply: &Reply, lease: LeaseToken) -> Self {
        let parts = reply.parts(Some(lease));
        Self {
            message,
            connector,
            parts,
            marked: Some(0),
        }
    }
}

impl Delivery<'_> {
    /// `None` when the message or its connector no longer exists. A part `sending` under
    /// `lease` was marked by this holder, whose request has not left: the commit of the
    /// mark lost its acknowledgement, so the holder reads the part again. It is posted, not
    /// reconciled; a part marked under any other lease is in doubt.
    pub async fn load(
        tx: &mut TenantTx,
        keys: &crate::secrets::Keyring,
        message: MessageId,
        lease: LeaseToken,
    ) -> Result<Option<Outgoing>, sqlx::Error> {
        let Some(row) = db::messages::get(tx, message).await? else {
            return Ok(None);
        };
        let Some(connector) = db::connectors::get(tx, keys, row.connector_id).await? else {
            return Ok(None);
        };
        let parts = db::parts::reply_parts(tx, message).await?;
        let marked = parts
            .iter()
            .find(|part| part.status == PartStatus::Sending && part.sending_lease == Some(lease))
            .map(|part| part.part_index);
        Ok(Some(Outgoing {
            message: row,
            connector: Arc::new(connector),
            parts,
            marked,
        }))
    }

    /// Posts the parts still to post, in order, each state change committed before the
    /// next request; ends the pass at the first part that must wait, failed, or in doubt
    /// with none after it.
    pub async fn run(&self, job: &Job, outgoing: &Outgoing) -> anyhow::Result<DeliveryPass> {
        let mut pass = Pass::of(outgoing);
        if pass.pending.is_empty() {
            let (transition, outcome) = pass.finished(None);
            return self.end(job, &pass, transition, outcome).await;
        }
        for position in 0..pass.pending.len() {
            let part = pass.pending[position];
            let next = pass.pending.get(position + 1).copied();
            match self.step(job, &mut pass, part, next).await? {
                Step::Next => continue,
                Step::LeaseLost => return Ok(pass.ended(DeliveryOutcome::LeaseLost)),
                Step::End(transition, outcome) => return self.end(job, &pass, transition, outcome).await,
            }
        }
        unreachable!("the loop returns at the last pending part")
    }

    /// The pass's last transition committed (under the lease check), and how it ended.
    async fn end(
        &self,
        job: &Job,
        pass: &Pass<'_>,
        transition: Transition,
        outcome: DeliveryOutcome,
    ) -> anyhow::Result<DeliveryPass> {
        let outcome = self.writer.conclude(job, transition, outcome).await?;
        Ok(pass.ended(outcome))
    }

    /// One pending part posted, settled or failed, and whether the pass goes on to `next`.
    async fn step(
        &self,
        job: &Job,
        pass: &mut Pass<'_>,
        part: &ReplyPart,
        next: Option<&ReplyPart>,
    ) -> anyhow::Result<Step> {
        let outgoing = pass.outgoing;
        let result = match part.status {
            PartStatus::Failed => PartOutcome::End(
                Transition::PartFailed {
                    part: part.part_index,
                    error: part.last_error.clone().unwrap_or_else(|| "failed".into()),
                },
                DeliveryOutcome::Stopped,
            ),
            _ => {
                let marked = pass.marked == Some(part.part_index);
                self.deliver_part(job, outgoing, part, marked, &mut pass.platform_time)
                    .await?
            }
        };
        match result {
            PartOutcome::Unknown(error) => self.in_doubt(job, pass, part, error, next).await,
            PartOutcome::Posted(platform_id) => match next {
                None => Ok(Step::end(pass.finished(Some((part.part_index, platform_id))))),
                Some(next) => self.posted(job, pass, part, platform_id, next).await,
            },
            PartOutcome::End(_, DeliveryOutcome::LeaseLost) => Ok(Step::LeaseLost),
            PartOutcome::End(transition, outcome) => Ok(Step::End(transition, outcome)),
        }
    }

    /// A part in doubt is recorded `unknown` and the pass goes on to the next, if any.
    async fn in_doubt(
        &self,
        job: &Job,
        pass: &mut Pass<'_>,
        part: &ReplyPart,
        error: String,
        next: Option<&ReplyPart>,
    ) -> anyhow::Result<Step> {
        let unknown = Transition::PartUnknown {
            part: part.part_index,
            error,
        };
        if self.writer.conclude(job, unknown, DeliveryOutcome::Wait).await? == DeliveryOutcome::LeaseLost {
            return Ok(Step::LeaseLost);
        }
        pass.in_doubt = true;
        pass.marked = None;
        Ok(match next {
            Some(_) => Step::Next,
            None => Step::end(pass.finished(None)),
        })
    }

    /// A part posted with more to come: recorded, and the next part's mark rides on the same
    /// commit, with the lease check.
    async fn posted(
        &self,
        job: &Job,
        pass: &mut Pass<'_>,
        part: &ReplyPart,
        platform_id: String,
        next: &ReplyPart,
    ) -> anyhow::Result<Step> {
        let next_sending = (next.status == PartStatus::Pending).then_some(next.part_index);
        let posted = Transition::PartPosted {
            part: part.part_index,
            platform_id,
            next: next_sending,
        };
        if self.writer.conclude(job, posted, DeliveryOutcome::Wait).await? == DeliveryOutcome::LeaseLost {
            return Ok(Step::LeaseLost);
        }
        pass.marked = next_sending;
        Ok(Step::Next)
    }

    async fn deliver_part(
        &self,
        job: &Job,
        outgoing: &Outgoing,
        part: &ReplyPart,
        marked: bool,
        platform_time: &mut Duration,
    ) -> anyhow::Result<PartOutcome> {
        let index = part.part_index;
        // An edit repeated changes nothing: one in doubt is simply made again.
        // So is a reaction.
        let in_doubt =
            part.status == PartStatus::Sending && !marked && part.edit_of.is_none() && !part.reaction;
        if in_doubt && adopted(outgoing, part).is_none() {
            if let Some(settled) = self.settle_in_doubt(outgoing, part, platform_time).await? {
                return Ok(settled);
            }
        }
        if let Some(delay) = self.held_back(outgoing) {
            let error = "held: the platform asked this connector to slow down".to_owned();
            return Ok(wait(index, error, false, delay));
        }
        if !marked {
            let mark = Transition::MarkSending { part: index };
            if self.writer.conclude(job, mark, DeliveryOutcome::Wait).await? == DeliveryOutcome::LeaseLost {
                return Ok(PartOutcome::End(Transition::Skipped, DeliveryOutcome::LeaseLost));
            }
        }
        let mut outcome = self.send(outgoing, part, None, platform_time).await;
        // An upload is recorded before the post that shows it; a platform that lost it (an
        // upload expired before its post) uploads once more.
        for _ in 0..STAGES_MAX {
            let SendOutcome::Staged(upload) = outcome else {
                break;
            };
            let staged = Transition::PartStaged {
                part: index,
                upload_ref: upload.clone(),
            };
            if self.writer.conclude(job, staged, DeliveryOutcome::Wait).await? == DeliveryOutcome::LeaseLost {
                return Ok(PartOutcome::End(Transition::Skipped, DeliveryOutcome::LeaseLost));
            }
            outcome = self.send(outgoing, part, Some(&upload), platform_time).await;
        }
        Ok(self.settle(outgoing, part, marked, outcome).await)
    }

    /// A part an earlier pass left `sending`, as its platform tells: posted, to wait for,
    /// failed or unknowable; `None`: not posted, so it is posted now.
    async fn settle_in_doubt(
        &self,
        outgoing: &Outgoing,
        part: &ReplyPart,
        platform_time: &mut Duration,
    ) -> anyhow::Result<Option<PartOutcome>> {
        let index = part.part_index;
        let started = Instant::now();
        let reconciled = self.reconcile(outgoing, part).await?;
        *platform_time += started.elapsed();
        Ok(match reconciled {
            Reconciled::Found(platform_id) => Some(PartOutcome::Posted(platform_id)),
            Reconciled::Absent => None,
            Reconciled::Later(delay, why) if part.attempts < self.max_attempts() => {
                Some(wait(index, why, true, delay))
            }
            Reconciled::Later(..) => {
                let error = "outcome unknown after the last attempt; not resent";
                Some(failed(index, error.into()))
            }
            Reconciled::Unknowable(error) => Some(PartOutcome::Unknown(error)),
        })
    }

    /// How long the connector's sends are held (a 429 met here or by another instance).
    fn held_back(&self, outgoing: &Outgoing) -> Option<Duration> {
        if let Some(until) = outgoing.connector.sends_held_until {
            let left = (until - chrono::Utc::now()).to_std().unwrap_or_default();
            self.holds.learn(outgoing.connector.id, Instant::now() + left);
        }
        match self.holds.clearance(outgoing.connector.id, outgoing.message.id) {
            holds::Clearance::Wait(delay) => Some(delay),
            holds::Clearance::Go => None,
        }
    }

    /// `staged`: what this pass's own upload left, if the part's row does not say yet.
    async fn send(
        &self,
        outgoing: &Outgoing,
        part: &ReplyPart,
        staged: Option<&str>,
        platform_time: &mut Duration,
    ) -> SendOutcome {
        let started = Instant::now();
        let send = self.post(outgoing, part, staged);
        let outcome = traced_send(outgoing.connector.profile.platform, part.part_index, send).await;
        *platform_time += started.elapsed();
        metrics::histogram!("channel_bridge_reply_send_seconds").record(started.elapsed().as_secs_f64());
        outcome
    }

    async fn settle(
        &self,
        outgoing: &Outgoing,
        part: &ReplyPart,
        marked: bool,
        outcome: SendOutcome,
    ) -> PartOutcome {
        let platform = outgoing.connector.profile.platform.as_str();
        let attempts = if marked { part.attempts } else { part.attempts + 1 };
        let index = part.part_index;
        match &outcome {
            SendOutcome::RateLimited { retry_after, .. } => {
                let delay = (*retry_after).min(Duration::from_millis(self.settings.retry_max_ms));
                self.holds
                    .rate_limited(outgoing.connector.id, outgoing.message.id, delay);
                self.share_hold(&outgoing.connector, delay).await;
            }
            _ => self.holds.passed(outgoing.connector.id),
        }
        match outcome {
            SendOutcome::Sent(platform_id) => {
                metrics::counter!("channel_bridge_replies_sent_total", "platform" => platform).increment(1);
                PartOutcome::Posted(platform_id)
            }
            SendOutcome::RateLimited { retry_after, error } => {
                metrics::counter!("channel_bridge_replies_rate_limited_total", "platform" => platform)
                    .increment(1);
                let delay = retry_after.min(Duration::from_millis(self.settings.retry_max_ms));
                wait(index, error, false, delay)
            }
            SendOutcome::NotSent { error } if attempts < self.max_attempts() => {
                wait(index, error, false, self.backoff(attempts))
            }
            SendOutcome::Unknown { error } if attempts < self.max_attempts() => {
                tracing::warn!(%error, part = index, "reply send outcome unknown; will reconcile");
                wait(index, error, true, self.backoff(attempts))
            }
            // A platform asks to be sent again once only; a second upload is a fault.
            SendOutcome::Staged(_) => failed(index, "the platform's upload did not complete".into()),
            SendOutcome::NotSent { error }
            | SendOutcome::Unknown { error }
            | SendOutcome::Permanent { error } => {
                tracing::warn!(%error, part = index, "reply part failed");
                metrics::counter!("channel_bridge_replies_failed_total", "platform" => platform).increment(1);
                failed(index, error)
            }
        }
    }

    /// For the other instances; on failure they meet the 429 themselves.
    async fn share_hold(&self, connector: &Connector, delay: Duration) {
        let until = chrono::Utc::now() + chrono::Duration::from_std(delay).unwrap_or_default();
        let written = async {
            let mut tx = TenantTx::begin(self.pool, connector.tenant_id).await?;
            db::connectors::hold_sends(&mut tx, connector.id, until).await?;
            tx.commit().await
        };
        if let Err(err) = db::within(SHARE_DEADLINE, written).await {
            tracing::warn!(%err, connector_id = %connector.id, "could not share a rate-limit hold");
        }
    }

    async fn reconcile(&self, outgoing: &Outgoing, part: &ReplyPart) -> anyhow::Result<Reconciled> {
        let pending = Pending {
            connector: &outgoing.connector,
            message: &outgoing.message,
            pool: self.pool,
            client: self.client,
            settings: self.settings,
        };
        let platform = platforms::of(outgoing.connector.profile.platform);
        platform.reconcile(&pending, part).await
    }

    fn max_attempts(&self) -> i32 {
        i32::try_from(self.settings.reply_max_attempts).unwrap_or(i32::MAX)
    }

    fn backoff(&self, attempts: i32) -> Duration {
        part_backoff(self.settings, attempts)
    }
}

impl Delivery<'_> {
    /// The part's request: a post (of text or a file), a reaction on the user's message, the
    /// adoption of the message a stream left, or an edit that closes the choices of the part
    /// it names (and shows).
    async fn post(&self, outgoing: &Outgoing, part: &ReplyPart, staged: Option<&str>) -> SendOutcome {
        let key = replies::part_key(outgoing.message.id, part.part_index);
        let edited = part
            .edit_of
            .and_then(|of| outgoing.parts.iter().find(|p| p.part_index == of));
        let shown = edited.unwrap_or(part);
        let outbound = OutboundPart {
            connector: &outgoing.connector,
            message: &outgoing.message,
            part_key: &key,
            text: &shown.content,
            choices: shown.choices.as_ref(),
            chosen: shown.chosen.as_ref(),
            file: part.attachment.as_ref(),
            staged: staged.or(part.upload_ref.as_deref()),
            transfer_timeout: Duration::from_secs(self.settings.file_timeout_secs),
        };
        if part.reaction {
            return match outgoing.message.reply_target() {
                Some(target) => platforms::react(self.client, &outbound, target).await,
                None => SendOutcome::Permanent {
                    error: "a reaction needs a user's message to react to".into(),
                },
            };
        }
        if let Some(file) = &part.attachment {
            return platforms::send_file(self.client, &outbound, file).await;
        }
        if part.edit_of.is_none() {
            return match adopted(outgoing, part) {
                Some(live_id) => platforms::adopt(self.client, &outbound, live_id).await,
                None => platforms::send(self.client, &outbound).await,
            };
        }
        match edited.map(|p| (p.platform_message_id.as_deref(), p.status)) {
            Some((Some(target), _)) => platforms::close_choices(self.client, &outbound, target).await,
            // Tapped before its post was recorded: closed once it is.
            Some((None, status)) if status != PartStatus::Failed => SendOutcome::NotSent {
                error: "the message whose choices to close is not posted yet".into(),
            },
            _ => SendOutcome::Permanent {
                error: "the message whose choices to close was never posted".into(),
            },
        }
    }
}

fn adopted<'a>(outgoing: &'a Outgoing, part: &ReplyPart) -> Option<&'a str> {
    (part.part_index == 0)
        .then_some(outgoing.message.live_message_id.as_deref())
        .flatten()
}

/// The span names the platform and the part, never its text.
async fn traced_send(
    platform: Platform,
    part_index: i32,
    send: impl std::future::Future<Output = SendOutcome>,
) -> SendOutcome {
    use crate::telemetry::traces;
    use tracing::Instrument;
    let platform = platform.as_str();
    let span = tracing::info_span!(target: traces::TARGET, "send reply part", otel.kind = "client", platform, part_index);
    let outcome = send.instrument(span.clone()).await;
    if !matches!(outcome, SendOutcome::Sent(_)) {
        traces::record_failure(&span, "not posted");
    }
    outcome
}

/// `awaiting`: the agent may still post parts of this answer (docs/agent.md#answering-later),
/// so the pass ends with what it posted, not with the turn delivered.
/// How a pass ends; `offered`: the answer offered choices (`Transition::Delivered`).
fn finished(
    last: Option<(i32, String)>,
    in_doubt: bool,
    awaiting: bool,
    offered: bool,
) -> (Transition, DeliveryOutcome) {
    if in_doubt {
        (Transition::Concluded { last }, DeliveryOutcome::Stopped)
    } else if awaiting {
        (Transition::PartsPosted { last }, DeliveryOutcome::Delivered)
    } else {
        (
            Transition::Delivered { last, offered },
            DeliveryOutcome::Delivered,
        )
    }
}

fn wait(part: i32, error: String, in_doubt: bool, delay: Duration) -> PartOutcome {
    let transition = Transition::PartWait {
        part,
        error,
        in_doubt,
        delay,
    };
    PartOutcome::End(transition, DeliveryOutcome::Wait)
}

fn failed(part: i32, error: String) -> PartOutcome {
    PartOutcome::End(Transition::PartFailed { part, error }, DeliveryOutcome::Stopped)
}
