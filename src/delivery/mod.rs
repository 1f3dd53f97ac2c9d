//! Posting reply parts back where the user wrote (DESIGN.md "Replies back to the
//! platform"): in order, threaded, each part exactly once.
//!
//! For each part still to post:
//! - `sending` (an earlier send whose outcome is unknown) is reconciled first: Slack looks
//!   for the part key in the thread's message metadata; WhatsApp waits for the status
//!   callback that echoes the part key, and resends only when none came within
//!   `CB_WHATSAPP_CONFIRM_SECS`; Telegram, which offers no way to look, follows the
//!   connector's choice (at-most-once: mark failed; at-least-once: resend).
//! - then the part is marked `sending` (committed), posted, and settled from the answer.
//!
//! Rate-limit answers put the part back to `pending` and the job waits the platform's delay;
//! a permanent refusal fails the part and the ones after it and releases the conversation.

pub mod outbound;
pub mod split;

use std::sync::Arc;
use std::time::{Duration, Instant};

use sqlx::PgPool;

use self::outbound::{OutboundPart, SendOutcome};
use crate::db::messages::{MessageRow, ReplyPart};
use crate::db::{self, replies, TenantTx};
use crate::domain::{Connector, MessageId, Platform, TelegramDelivery, TenantId};
use crate::settings::DispatchSettings;

/// Where a message's delivery stands after one pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeliveryOutcome {
    /// Every part is posted; the job is finished.
    Delivered,
    /// Try again after this delay (rate limit, unknown outcome, awaiting a callback); the
    /// job is left to the caller to put back.
    Wait(Duration),
    /// A part failed for good; the rest are not sent; the job is finished.
    Stopped,
}

/// One pass: its outcome, and the time spent waiting on the platform's API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryPass {
    pub outcome: DeliveryOutcome,
    pub platform_time: Duration,
}

/// What a single part came to.
enum PartOutcome {
    /// Posted, with the platform's id for it (not yet recorded).
    Posted(String),
    Wait(Duration),
    Failed,
}

/// Reconciling an interrupted send.
enum Reconciled {
    /// It was posted; here is its platform id.
    Found(String),
    /// It certainly was not posted (or the connector accepts a possible duplicate): send.
    Absent,
    /// Not known yet; look again later.
    Later(Duration),
    /// Not knowable, and the connector prefers a lost reply to a doubled one.
    GiveUp(String),
}

pub struct Delivery<'a> {
    pub pool: &'a PgPool,
    pub client: &'a reqwest::Client,
    pub settings: &'a DispatchSettings,
    /// The lease owner of the job being delivered: each part posted renews its lease, so a
    /// long answer (many parts, slow platform) does not outlive it mid-delivery.
    pub owner: uuid::Uuid,
}

/// What a delivery pass works from.
pub struct Outgoing {
    pub message: MessageRow,
    pub connector: Arc<Connector>,
    pub parts: Vec<ReplyPart>,
    /// A part the caller's transaction has just marked `sending` for this pass (the
    /// stored answer's part 0): it is posted, not reconciled as an interrupted send.
    pub marked: Option<i32>,
}

/// A pass's database writes: the transaction still open (its writes go out with the next
/// commit) and the tenant to open the next one for.
///
/// Every commit carries as much as is known at that point: the caller's transaction (the
/// claim, or the stored answer) also marks the first part `sending`; the transaction that
/// settles a posted part also marks the next one `sending`; the last one also records the
/// delivery and finishes the job. A platform request is only ever made with nothing left
/// uncommitted, and a part is `sending` in a committed row before its request leaves.
struct Writes {
    tenant: TenantId,
    open: Option<TenantTx>,
}

impl Writes {
    async fn tx(&mut self, pool: &PgPool) -> Result<&mut TenantTx, sqlx::Error> {
        if self.open.is_none() {
            self.open = Some(TenantTx::begin(pool, self.tenant).await?);
        }
        Ok(self.open.as_mut().expect("opened above"))
    }

    async fn commit(&mut self) -> Result<(), sqlx::Error> {
        match self.open.take() {
            Some(tx) => tx.commit().await,
            None => Ok(()),
        }
    }
}

impl Delivery<'_> {
    /// What a pass over `message`'s parts needs, read in the caller's transaction. `None`
    /// when the message or its connector no longer exists.
    pub async fn load(tx: &mut TenantTx, message: MessageId) -> Result<Option<Outgoing>, sqlx::Error> {
        let Some(row) = db::messages::get(tx, message).await? else {
            return Ok(None);
        };
        let Some(connector) = db::connectors::get(tx, row.connector_id).await? else {
            return Ok(None);
        };
        let parts = db::messages::reply_parts(tx, message).await?;
        Ok(Some(Outgoing {
            message: row,
            connector: Arc::new(connector),
            parts,
            marked: None,
        }))
    }

    /// One delivery pass over the parts not yet posted, continuing `tx` (the caller's open
    /// transaction, committed before the first platform request). When every part is
    /// posted, or one failed for good, the job is finished in the pass's last commit.
    pub async fn run(&self, tx: TenantTx, outgoing: &Outgoing) -> anyhow::Result<DeliveryPass> {
        let message = outgoing.message.id;
        let mut writes = Writes {
            tenant: tx.tenant(),
            open: Some(tx),
        };
        let mut platform_time = Duration::ZERO;
        let mut outcome = DeliveryOutcome::Delivered;
        // The last part posted in this pass, recorded with the delivery in one statement.
        let mut last_sent = None;
        for part in &outgoing.parts {
            let result = match part.status.as_str() {
                "sent" => continue,
                "failed" => PartOutcome::Failed,
                _ => {
                    let marked = outgoing.marked == Some(part.part_index);
                    self.deliver_part(&mut writes, outgoing, part, marked, &mut platform_time)
                        .await?
                }
            };
            match result {
                PartOutcome::Posted(platform_id) if part.part_index == last_index(outgoing) => {
                    last_sent = Some((part.part_index, platform_id));
                }
                PartOutcome::Posted(platform_id) => {
                    let tx = writes.tx(self.pool).await?;
                    replies::mark_sent(tx, message, part.part_index, &platform_id).await?;
                    let lease = Duration::from_secs(self.settings.lease_secs);
                    db::queue::renew_lease(tx, message, self.owner, lease).await?;
                }
                PartOutcome::Wait(delay) => {
                    outcome = DeliveryOutcome::Wait(delay);
                    break;
                }
                PartOutcome::Failed => {
                    replies::fail_remaining(writes.tx(self.pool).await?, message, part.part_index).await?;
                    outcome = DeliveryOutcome::Stopped;
                    break;
                }
            }
        }
        match outcome {
            DeliveryOutcome::Delivered => {
                let last_sent = last_sent.as_ref().map(|(part, id)| (*part, id.as_str()));
                replies::mark_delivered(writes.tx(self.pool).await?, message, last_sent).await?;
            }
            DeliveryOutcome::Stopped => db::queue::finish(writes.tx(self.pool).await?, message).await?,
            DeliveryOutcome::Wait(_) => {}
        }
        writes.commit().await?;
        Ok(DeliveryPass {
            outcome,
            platform_time,
        })
    }

    async fn deliver_part(
        &self,
        writes: &mut Writes,
        outgoing: &Outgoing,
        part: &ReplyPart,
        marked: bool,
        platform_time: &mut Duration,
    ) -> anyhow::Result<PartOutcome> {
        let message = outgoing.message.id;
        if part.status == "sending" && !marked {
            writes.commit().await?;
            let started = Instant::now();
            let reconciled = self.reconcile(outgoing, part).await;
            *platform_time += started.elapsed();
            match reconciled {
                Reconciled::Found(platform_id) => return Ok(PartOutcome::Posted(platform_id)),
                Reconciled::Absent => {}
                Reconciled::Later(delay) if part.attempts < self.max_attempts() => {
                    return Ok(PartOutcome::Wait(delay))
                }
                Reconciled::Later(_) => {
                    let error = "outcome unknown after the last attempt; not resent";
                    return self.fail(writes, message, part, error).await;
                }
                Reconciled::GiveUp(error) => return self.fail(writes, message, part, &error).await,
            }
        }
        self.send(writes, outgoing, part, marked, platform_time).await
    }

    async fn send(
        &self,
        writes: &mut Writes,
        outgoing: &Outgoing,
        part: &ReplyPart,
        marked: bool,
        platform_time: &mut Duration,
    ) -> anyhow::Result<PartOutcome> {
        let message = outgoing.message.id;
        if !marked {
            replies::mark_sending(writes.tx(self.pool).await?, message, part.part_index).await?;
        }
        writes.commit().await?;

        let key = replies::part_key(message, part.part_index);
        let outbound = OutboundPart {
            connector: &outgoing.connector,
            message: &outgoing.message,
            part_key: &key,
            text: &part.content,
        };
        let started = Instant::now();
        let outcome = outbound::send(self.client, &outbound).await;
        *platform_time += started.elapsed();
        metrics::histogram!("reply_send_seconds").record(started.elapsed().as_secs_f64());
        let platform = outgoing.connector.platform.as_str();
        let attempts = if marked { part.attempts } else { part.attempts + 1 };
        let tx = writes.tx(self.pool).await?;
        let result = match outcome {
            SendOutcome::Sent(platform_id) => {
                metrics::counter!("replies_sent_total", "platform" => platform).increment(1);
                PartOutcome::Posted(platform_id)
            }
            SendOutcome::RateLimited { retry_after, error } => {
                replies::mark_pending(tx, message, part.part_index, &error).await?;
                metrics::counter!("replies_rate_limited_total", "platform" => platform).increment(1);
                PartOutcome::Wait(retry_after.min(Duration::from_millis(self.settings.retry_max_ms)))
            }
            SendOutcome::NotSent { error } if attempts < self.max_attempts() => {
                replies::mark_pending(tx, message, part.part_index, &error).await?;
                PartOutcome::Wait(self.backoff(attempts))
            }
            SendOutcome::Unknown { error } if attempts < self.max_attempts() => {
                tracing::warn!(%error, part = part.part_index, "reply send outcome unknown; will reconcile");
                replies::note_error(tx, message, part.part_index, &error).await?;
                PartOutcome::Wait(self.backoff(attempts))
            }
            SendOutcome::NotSent { error }
            | SendOutcome::Unknown { error }
            | SendOutcome::Permanent { error } => {
                tracing::warn!(%error, part = part.part_index, "reply part failed");
                replies::mark_failed(tx, message, part.part_index, &error).await?;
                metrics::counter!("replies_failed_total", "platform" => platform).increment(1);
                PartOutcome::Failed
            }
        };
        Ok(result)
    }

    async fn reconcile(&self, outgoing: &Outgoing, part: &ReplyPart) -> Reconciled {
        let key = replies::part_key(outgoing.message.id, part.part_index);
        match outgoing.connector.platform {
            Platform::Slack => {
                match outbound::slack_find_part(self.client, &outgoing.connector, &outgoing.message, &key)
                    .await
                {
                    Ok(Some(ts)) => Reconciled::Found(ts),
                    Ok(None) => Reconciled::Absent,
                    Err(error) => {
                        tracing::warn!(%error, "cannot look for an interrupted Slack send yet");
                        Reconciled::Later(self.backoff(part.attempts.max(1)))
                    }
                }
            }
            Platform::Whatsapp => {
                let since = part.sending_since.unwrap_or_else(chrono::Utc::now);
                let waited = (chrono::Utc::now() - since).num_seconds().max(0) as u64;
                match self.settings.whatsapp_confirm_secs.checked_sub(waited) {
                    Some(left) if left > 0 => Reconciled::Later(Duration::from_secs(left.min(15))),
                    _ => Reconciled::Absent,
                }
            }
            Platform::Telegram => match outgoing.connector.telegram_delivery {
                TelegramDelivery::AtLeastOnce => Reconciled::Absent,
                TelegramDelivery::AtMostOnce => {
                    Reconciled::GiveUp("send interrupted, outcome unknown; not resent (at-most-once)".into())
                }
            },
        }
    }

    async fn fail(
        &self,
        writes: &mut Writes,
        message: MessageId,
        part: &ReplyPart,
        error: &str,
    ) -> anyhow::Result<PartOutcome> {
        replies::mark_failed(writes.tx(self.pool).await?, message, part.part_index, error).await?;
        Ok(PartOutcome::Failed)
    }

    fn max_attempts(&self) -> i32 {
        i32::try_from(self.settings.reply_max_attempts).unwrap_or(i32::MAX)
    }

    fn backoff(&self, attempts: i32) -> Duration {
        crate::dispatch::agent::backoff(self.settings, u32::try_from(attempts).unwrap_or(1), None)
    }
}

fn last_index(outgoing: &Outgoing) -> i32 {
    outgoing.parts.last().map_or(-1, |part| part.part_index)
}
