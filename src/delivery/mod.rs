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

use std::time::Duration;

use sqlx::PgPool;

use self::outbound::{OutboundPart, SendOutcome};
use crate::db::messages::{MessageRow, ReplyPart};
use crate::db::{self, replies, TenantTx};
use crate::domain::{Connector, MessageId, Platform, TelegramDelivery, TenantId};
use crate::settings::DispatchSettings;

/// Where a message's delivery stands after one pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeliveryOutcome {
    /// Every part is posted.
    Delivered,
    /// Try again after this delay (rate limit, unknown outcome, awaiting a callback).
    Wait(Duration),
    /// A part failed for good; the rest are not sent.
    Stopped,
}

/// What a single part came to.
enum PartOutcome {
    Posted,
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
}

struct Context {
    tenant: TenantId,
    message: MessageRow,
    connector: Connector,
    parts: Vec<ReplyPart>,
}

impl Delivery<'_> {
    /// One delivery pass over a message's parts. `None` when the message or its connector
    /// no longer exists.
    pub async fn run(&self, tenant: TenantId, message: MessageId) -> anyhow::Result<Option<DeliveryOutcome>> {
        let Some(context) = self.load(tenant, message).await? else {
            return Ok(None);
        };
        for part in &context.parts {
            let outcome = match part.status.as_str() {
                "sent" => continue,
                "failed" => return Ok(Some(DeliveryOutcome::Stopped)),
                _ => self.deliver_part(&context, part).await?,
            };
            match outcome {
                PartOutcome::Posted => {}
                PartOutcome::Wait(delay) => return Ok(Some(DeliveryOutcome::Wait(delay))),
                PartOutcome::Failed => {
                    let mut tx = TenantTx::begin(self.pool, tenant).await?;
                    replies::fail_remaining(&mut tx, message, part.part_index).await?;
                    tx.commit().await?;
                    return Ok(Some(DeliveryOutcome::Stopped));
                }
            }
        }
        let mut tx = TenantTx::begin(self.pool, tenant).await?;
        replies::mark_delivered(&mut tx, message).await?;
        tx.commit().await?;
        Ok(Some(DeliveryOutcome::Delivered))
    }

    async fn load(&self, tenant: TenantId, message: MessageId) -> anyhow::Result<Option<Context>> {
        let mut tx = TenantTx::begin(self.pool, tenant).await?;
        let Some(row) = db::messages::get(&mut tx, message).await? else {
            return Ok(None);
        };
        let Some(connector) = db::connectors::get(&mut tx, row.connector_id).await? else {
            return Ok(None);
        };
        let parts = db::messages::reply_parts(&mut tx, message).await?;
        tx.commit().await?;
        Ok(Some(Context {
            tenant,
            message: row,
            connector,
            parts,
        }))
    }

    async fn deliver_part(&self, context: &Context, part: &ReplyPart) -> anyhow::Result<PartOutcome> {
        if part.status == "sending" {
            match self.reconcile(context, part).await {
                Reconciled::Found(platform_id) => {
                    let mut tx = TenantTx::begin(self.pool, context.tenant).await?;
                    replies::mark_sent(&mut tx, context.message.id, part.part_index, &platform_id).await?;
                    tx.commit().await?;
                    return Ok(PartOutcome::Posted);
                }
                Reconciled::Absent => {}
                Reconciled::Later(delay) if part.attempts < self.max_attempts() => {
                    return Ok(PartOutcome::Wait(delay))
                }
                Reconciled::Later(_) => {
                    let error = "outcome unknown after the last attempt; not resent";
                    return self.fail(context, part, error).await;
                }
                Reconciled::GiveUp(error) => return self.fail(context, part, &error).await,
            }
        }
        self.send(context, part).await
    }

    async fn send(&self, context: &Context, part: &ReplyPart) -> anyhow::Result<PartOutcome> {
        let message = context.message.id;
        let mut tx = TenantTx::begin(self.pool, context.tenant).await?;
        replies::mark_sending(&mut tx, message, part.part_index).await?;
        tx.commit().await?;

        let key = replies::part_key(message, part.part_index);
        let outbound = OutboundPart {
            connector: &context.connector,
            message: &context.message,
            part_key: &key,
            text: &part.content,
        };
        let outcome = outbound::send(self.client, &outbound).await;
        let platform = context.connector.platform.as_str();
        let attempts = part.attempts + 1;
        let mut tx = TenantTx::begin(self.pool, context.tenant).await?;
        let result = match outcome {
            SendOutcome::Sent(platform_id) => {
                replies::mark_sent(&mut tx, message, part.part_index, &platform_id).await?;
                metrics::counter!("replies_sent_total", "platform" => platform).increment(1);
                PartOutcome::Posted
            }
            SendOutcome::RateLimited { retry_after, error } => {
                replies::mark_pending(&mut tx, message, part.part_index, &error).await?;
                metrics::counter!("replies_rate_limited_total", "platform" => platform).increment(1);
                PartOutcome::Wait(retry_after.min(Duration::from_millis(self.settings.retry_max_ms)))
            }
            SendOutcome::NotSent { error } if attempts < self.max_attempts() => {
                replies::mark_pending(&mut tx, message, part.part_index, &error).await?;
                PartOutcome::Wait(self.backoff(attempts))
            }
            SendOutcome::Unknown { error } if attempts < self.max_attempts() => {
                tracing::warn!(%error, part = part.part_index, "reply send outcome unknown; will reconcile");
                replies::note_error(&mut tx, message, part.part_index, &error).await?;
                PartOutcome::Wait(self.backoff(attempts))
            }
            SendOutcome::NotSent { error }
            | SendOutcome::Unknown { error }
            | SendOutcome::Permanent { error } => {
                tracing::warn!(%error, part = part.part_index, "reply part failed");
                replies::mark_failed(&mut tx, message, part.part_index, &error).await?;
                metrics::counter!("replies_failed_total", "platform" => platform).increment(1);
                PartOutcome::Failed
            }
        };
        tx.commit().await?;
        Ok(result)
    }

    async fn reconcile(&self, context: &Context, part: &ReplyPart) -> Reconciled {
        let key = replies::part_key(context.message.id, part.part_index);
        match context.connector.platform {
            Platform::Slack => {
                match outbound::slack_find_part(self.client, &context.connector, &context.message, &key).await
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
            Platform::Telegram => match context.connector.telegram_delivery {
                TelegramDelivery::AtLeastOnce => Reconciled::Absent,
                TelegramDelivery::AtMostOnce => {
                    Reconciled::GiveUp("send interrupted, outcome unknown; not resent (at-most-once)".into())
                }
            },
        }
    }

    async fn fail(&self, context: &Context, part: &ReplyPart, error: &str) -> anyhow::Result<PartOutcome> {
        let mut tx = TenantTx::begin(self.pool, context.tenant).await?;
        replies::mark_failed(&mut tx, context.message.id, part.part_index, error).await?;
        tx.commit().await?;
        Ok(PartOutcome::Failed)
    }

    fn max_attempts(&self) -> i32 {
        i32::try_from(self.settings.reply_max_attempts).unwrap_or(i32::MAX)
    }

    fn backoff(&self, attempts: i32) -> Duration {
        crate::dispatch::agent::backoff(self.settings, u32::try_from(attempts).unwrap_or(1), None)
    }
}
