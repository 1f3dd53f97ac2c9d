//! Recording what a verified webhook carried: each inbound turn becomes a `channel_messages`
//! row and, when it is to reach the agent, a `dispatch_queue` row, in one tenant
//! transaction. A duplicate (same idempotency key) inserts nothing and is still a success.
//!
//! `record_in` is what one webhook writes, inside a transaction it is given. The HTTP
//! handlers go through the batching `writer::Writer` (several webhooks per commit, past
//! PostgreSQL's per-commit ceiling); `record` is the same work in a transaction of its own
//! (the writer's fallback, the CLI and the benchmarks). Handlers find connectors through
//! `crate::cache::ConfigCache`.
//!
//! What admins see of what is not dispatched:
//! - a real user's non-text message (image, sticker, voice…) is recorded with a placeholder
//!   such as `[image]` and status `ignored`;
//! - an unlinked sender's message under the deny policy is recorded as `denied_unlinked`;
//! - bot echoes, our own messages, edits, deletes, joins, statuses and unknown update kinds
//!   are not recorded at all: they are counted in `webhook_events_dropped_total` and logged
//!   at debug level.

pub mod writer;

use sqlx::PgPool;

use crate::channels::{Inbound, InboundKind, InboundMessage};
use crate::db::queue::Stage;
use crate::db::{self, messages::NewMessage, TenantTx};
use crate::domain::{Connector, MessageId, MessageStatus, UnlinkedPolicy};

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
}

impl RecordOutcome {
    /// Whether a worker has something new to do.
    pub fn has_work(&self) -> bool {
        !self.queued.is_empty() || self.notices > 0 || self.statuses_applied > 0
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
    if inbound.messages.is_empty() && inbound.statuses.is_empty() {
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
    debug_assert_eq!(tx.tenant(), connector.tenant_id);
    let mut outcome = RecordOutcome::default();
    for message in &inbound.messages {
        let routing = route(tx, connector, message).await?;
        match insert(tx, connector, message, &routing).await? {
            None => outcome.duplicates += 1,
            Some(id) if routing.status == MessageStatus::Accepted => {
                db::queue::enqueue(tx, id, &routing.conversation_key, Stage::Dispatch).await?;
                outcome.queued.push(id);
            }
            Some(id) => {
                outcome.recorded_only += 1;
                if routing.status == MessageStatus::DeniedUnlinked
                    && queue_notice(tx, connector, message, id, &routing).await?
                {
                    outcome.notices += 1;
                }
            }
        }
    }
    for status in &inbound.statuses {
        if let Some(message) = db::replies::apply_status(tx, status).await? {
            db::queue::wake_reply(tx, message).await?;
            outcome.statuses_applied += 1;
        }
    }
    Ok(outcome)
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

/// Resolves the linked user and decides the status and conversation of one turn.
async fn route(
    tx: &mut TenantTx,
    connector: &Connector,
    message: &InboundMessage,
) -> Result<Routing, sqlx::Error> {
    let user_id = db::links::resolve(tx, connector.platform, &message.platform_user_id).await?;
    let conversation_key = match &user_id {
        Some(user) => format!("user:{user}"),
        None => format!("sender:{}:{}", connector.id, message.platform_user_id),
    };
    let (status, decision) = match (message.kind, &user_id, connector.unlinked_policy) {
        (InboundKind::NonText, _, _) => (MessageStatus::Ignored, Some("ignore_non_text")),
        (InboundKind::Text, None, UnlinkedPolicy::Deny) => {
            (MessageStatus::DeniedUnlinked, Some("deny_unlinked"))
        }
        (InboundKind::Text, _, _) => (MessageStatus::Accepted, None),
    };
    Ok(Routing {
        user_id,
        conversation_key,
        status,
        decision,
    })
}

async fn insert(
    tx: &mut TenantTx,
    connector: &Connector,
    message: &InboundMessage,
    routing: &Routing,
) -> Result<Option<MessageId>, sqlx::Error> {
    let new = NewMessage {
        connector_id: connector.id,
        platform: connector.platform,
        idempotency_key: &message.idempotency_key,
        platform_message_id: &message.platform_message_id,
        chat_id: &message.chat_id,
        thread_id: message.thread_id.as_deref(),
        platform_user_id: &message.platform_user_id,
        reply_to_id: message.reply_to_id.as_deref(),
        user_id: routing.user_id.as_deref(),
        conversation_key: &routing.conversation_key,
        request_content: &message.text,
        status: routing.status,
        decision: routing.decision,
        metadata: &message.metadata,
    };
    db::messages::insert_new(tx, &new).await
}
