//! Recording what a verified webhook carried: each inbound turn becomes a `channel_messages`
//! row and, when it is to reach the agent, a `dispatch_queue` row, in one tenant
//! transaction. A duplicate (same idempotency key) inserts nothing and is still a success.
//!
//! `record_many_in` is what webhooks of one tenant write, inside a transaction it is given,
//! in a fixed number of statements whatever their number. The HTTP handlers go through the
//! batching `writer::Writer` (several webhooks per commit, past PostgreSQL's per-commit
//! ceiling); `record` is one webhook in a transaction of its own (the writer's fallback and
//! the benchmarks). Handlers find connectors through
//! `crate::cache::ConfigCache`.
//!
//! What admins see of what is not dispatched:
//! - a real user's picture, voice note, video or file is a turn like text, with its caption
//!   (or `""`) and its attachments (`crate::media`); other non-text content (sticker,
//!   location, poll…) is recorded with a placeholder such as `[sticker]` and status `ignored`;
//! - an unlinked sender's message under the deny policy is recorded as `denied_unlinked`;
//! - bot echoes, our own messages, edits, deletes, joins, statuses and unknown update kinds
//!   are not recorded at all: they are counted in `webhook_events_dropped_total` and logged
//!   at debug level.
//!
//! Platform reports about our own reply parts are never turns: WhatsApp status callbacks
//! (`db::replies::apply_status`) and Slack's `message_metadata_posted` confirmations
//! (`db::replies::confirm_posted`) settle the part they name and wake its job.

pub mod writer;

use sqlx::PgPool;

use crate::db::queue::Stage;
use crate::db::{self, messages::NewMessage, TenantTx};
use crate::domain::{Connector, MessageId, MessageStatus, Platform, UnlinkedPolicy};
use crate::platforms::inbound::{Inbound, InboundKind, InboundMessage};

/// What `record` did with one webhook.
#[derive(Debug, Default, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RecordOutcome {
    /// New rows queued for dispatch.
    pub queued: Vec<MessageId>,
    /// New rows recorded without dispatch (`ignored`, `denied_*`).
    pub recorded_only: usize,
    /// Turns already recorded by an earlier delivery.
    pub duplicates: usize,
    /// Unlinked-sender notices queued for posting.
    pub notices: usize,
    /// WhatsApp status callbacks that matched one of our reply parts.
    pub statuses_applied: usize,
    /// Slack confirmations (`message_metadata_posted`) that settled a reply part in doubt.
    pub parts_confirmed: usize,
}

impl RecordOutcome {
    /// Whether a worker has something new to do.
    pub fn has_work(&self) -> bool {
        !self.queued.is_empty() || self.notices > 0 || self.statuses_applied > 0 || self.parts_confirmed > 0
    }
}

/// The decision for one inbound turn, before it is written.
struct Routing {
    user_id: Option<String>,
    conversation_key: String,
    status: MessageStatus,
    decision: Option<&'static str>,
}

/// Records every inbound turn of one verified webhook in a tenant transaction of its own.
pub async fn record(
    pool: &PgPool,
    connector: &Connector,
    inbound: &Inbound,
) -> Result<RecordOutcome, sqlx::Error> {
    if !inbound.has_records() {
        return Ok(RecordOutcome::default());
    }
    let mut tx = TenantTx::begin(pool, connector.tenant_id).await?;
    let outcome = record_in(&mut tx, connector, inbound).await?;
    tx.commit().await?;
    Ok(outcome)
}

/// Records every inbound turn of one verified webhook in `tx`, which must be scoped to the
/// connector's tenant. Nothing is visible to workers before the caller commits.
pub async fn record_in(
    tx: &mut TenantTx,
    connector: &Connector,
    inbound: &Inbound,
) -> Result<RecordOutcome, sqlx::Error> {
    let mut outcomes = record_many_in(tx, &[(connector, inbound)]).await?;
    Ok(outcomes.pop().unwrap_or_default())
}

/// Records several verified webhooks of one tenant in `tx` (scoped to that tenant), with a
/// fixed number of statements for all their turns: one link lookup, one insert of the
/// message rows, one insert of the jobs (in arrival order). Only what is rare goes turn by
/// turn: unlinked-sender notices, WhatsApp status callbacks and Slack post confirmations.
/// Returns one outcome per webhook, in order.
pub async fn record_many_in(
    tx: &mut TenantTx,
    webhooks: &[(&Connector, &Inbound)],
) -> Result<Vec<RecordOutcome>, sqlx::Error> {
    let mut outcomes = vec![RecordOutcome::default(); webhooks.len()];
    let turns: Vec<(usize, &Connector, &InboundMessage)> = webhooks
        .iter()
        .enumerate()
        .flat_map(|(at, (connector, inbound))| {
            debug_assert_eq!(tx.tenant(), connector.tenant_id);
            inbound
                .messages
                .iter()
                .map(move |message| (at, *connector, message))
        })
        .collect();
    if !turns.is_empty() {
        let senders: Vec<(Platform, &str)> = turns
            .iter()
            .map(|(_, connector, message)| (connector.platform, message.platform_user_id.as_str()))
            .collect();
        let links = db::links::resolve_many(tx, &senders).await?;
        let routings: Vec<Routing> = turns
            .iter()
            .map(|(_, connector, message)| {
                let key = (
                    connector.platform.as_str().to_owned(),
                    message.platform_user_id.clone(),
                );
                route(connector, message, links.get(&key).cloned())
            })
            .collect();
        let rows: Vec<NewMessage<'_>> = turns
            .iter()
            .zip(&routings)
            .map(|((_, connector, message), routing)| new_message(connector, message, routing))
            .collect();
        // Queues the accepted turns' dispatch jobs in the same statement.
        let ids = db::messages::insert_many(tx, &rows).await?;
        for (((at, connector, message), routing), id) in turns.iter().zip(&routings).zip(ids) {
            let outcome = &mut outcomes[*at];
            match id {
                None => outcome.duplicates += 1,
                Some(id) if routing.status == MessageStatus::Accepted => outcome.queued.push(id),
                Some(id) => {
                    outcome.recorded_only += 1;
                    if routing.status == MessageStatus::DeniedUnlinked
                        && queue_notice(tx, connector, message, id, routing).await?
                    {
                        outcome.notices += 1;
                    }
                }
            }
        }
    }
    for ((connector, inbound), outcome) in webhooks.iter().zip(&mut outcomes) {
        for status in &inbound.statuses {
            if let Some(message) = crate::turn::settle::apply_status(tx, status).await? {
                db::queue::wake_reply(tx, message).await?;
                outcome.statuses_applied += 1;
            }
        }
        // A confirmed part's job may be waiting out its confirmation window: it goes on now.
        for posted in &inbound.posted {
            if let Some(message) = crate::turn::settle::confirm_posted(tx, connector.id, posted).await? {
                db::queue::wake_reply(tx, message).await?;
                outcome.parts_confirmed += 1;
            }
        }
    }
    Ok(outcomes)
}

/// Queues the connector's notice to an unlinked sender, at most once per sender and day,
/// as a reply part of their denied message (so it is delivered, threaded and reconciled
/// like any reply). Off unless the connector has a notice text.
async fn queue_notice(
    tx: &mut TenantTx,
    connector: &Connector,
    message: &InboundMessage,
    id: MessageId,
    routing: &Routing,
) -> Result<bool, sqlx::Error> {
    let Some(notice) = connector
        .unlinked_notice
        .as_deref()
        .filter(|n| !n.trim().is_empty())
    else {
        return Ok(false);
    };
    if !db::replies::claim_daily_notice(tx, connector.id.0, &message.platform_user_id).await? {
        return Ok(false);
    }
    db::messages::insert_reply_parts(tx, id, &[notice.to_owned()]).await?;
    db::queue::enqueue(tx, id, &routing.conversation_key, Stage::Reply).await?;
    Ok(true)
}

/// Decides the status and conversation of one turn, given its sender's linked user.
fn route(connector: &Connector, message: &InboundMessage, user_id: Option<String>) -> Routing {
    let conversation_key = match &user_id {
        Some(user) => format!("user:{user}"),
        None => format!(
            "sender:{}:{}",
            connector.id,
            crate::platforms::inbound::index_key(&message.platform_user_id)
        ),
    };
    let (status, decision) = match (message.kind, &user_id, connector.unlinked_policy) {
        (InboundKind::NonText, _, _) => (MessageStatus::Ignored, Some("ignore_non_text")),
        (InboundKind::Text, None, UnlinkedPolicy::Deny) => {
            (MessageStatus::DeniedUnlinked, Some("deny_unlinked"))
        }
        (InboundKind::Text, _, _) => (MessageStatus::Accepted, None),
    };
    Routing {
        user_id,
        conversation_key,
        status,
        decision,
    }
}

fn new_message<'a>(
    connector: &Connector,
    message: &'a InboundMessage,
    routing: &'a Routing,
) -> NewMessage<'a> {
    NewMessage {
        connector_id: connector.id,
        platform: connector.platform,
        idempotency_key: &message.idempotency_key,
        platform_message_id: &message.platform_message_id,
        chat_id: &message.chat_id,
        thread_id: message.thread_id.as_deref(),
        space: message.space.as_deref(),
        platform_user_id: &message.platform_user_id,
        reply_to_id: message.reply_to_id.as_deref(),
        user_id: routing.user_id.as_deref(),
        conversation_key: &routing.conversation_key,
        request_content: &message.text,
        status: routing.status,
        decision: routing.decision,
        metadata: &message.metadata,
        attachments: attachments_json(&message.attachments),
    }
}

/// The attachments column: `None` for none, so the common text turn stores nothing.
fn attachments_json(attachments: &[crate::media::Attachment]) -> Option<serde_json::Value> {
    if attachments.is_empty() {
        return None;
    }
    serde_json::to_value(attachments).ok()
}
