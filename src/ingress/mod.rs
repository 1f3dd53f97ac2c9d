//! Recording verified webhooks: each turn a `channel_messages` row and, when it is to reach
//! the agent, a queue job, in one tenant transaction; a duplicate inserts nothing and is still
//! a success (what is dropped: docs/platforms.md#what-is-forwarded-recorded-or-dropped).

pub mod reactions;
mod taps;
pub mod writer;

use sqlx::PgPool;

use crate::db::queue::Stage;
use crate::db::{self, messages::NewMessage, TenantTx};
use crate::domain::{Connector, ConversationKey, MessageId, MessageStatus, Platform, UnlinkedPolicy};
use crate::platforms::inbound::{Inbound, InboundKind, InboundMessage, TapAnswer};

#[derive(Debug, Default, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RecordOutcome {
    pub queued: Vec<MessageId>,
    /// New rows recorded without dispatch (`ignored`, `denied_*`).
    pub recorded_only: usize,
    pub duplicates: usize,
    pub notices: usize,
    /// WhatsApp status callbacks that matched one of our reply parts.
    pub statuses_applied: usize,
    /// Slack confirmations (`message_metadata_posted`) that settled a reply part in doubt.
    pub parts_confirmed: usize,
    /// The taps to acknowledge on the platform, in order.
    pub taps: Vec<TapAnswer>,
    /// Taps that made no turn (not a choice of ours in this chat).
    pub taps_dropped: usize,
    /// Reactions that changed a person's feedback on an answer, each as it did.
    pub feedback: Vec<reactions::Feedback>,
    /// Reactions to something other than one of our answers in their chat.
    pub reactions_dropped: usize,
}

impl RecordOutcome {
    pub fn has_work(&self) -> bool {
        !self.queued.is_empty() || self.notices > 0 || self.statuses_applied > 0 || self.parts_confirmed > 0
    }
}

struct Routing {
    user_id: Option<String>,
    conversation_key: ConversationKey,
    status: MessageStatus,
    decision: Option<&'static str>,
}

/// One webhook in a transaction of its own (the writer's fallback, the benchmarks).
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

/// `tx` must be scoped to the connector's tenant.
pub async fn record_in(
    tx: &mut TenantTx,
    connector: &Connector,
    inbound: &Inbound,
) -> Result<RecordOutcome, sqlx::Error> {
    let mut outcomes = record_many_in(tx, &[(connector, inbound)]).await?;
    Ok(outcomes.pop().unwrap_or_default())
}

/// Several webhooks of one tenant in a fixed number of statements, whatever their number;
/// only the rare things (taps, notices, status callbacks, confirmations) go one by one.
pub async fn record_many_in(
    tx: &mut TenantTx,
    webhooks: &[(&Connector, &Inbound)],
) -> Result<Vec<RecordOutcome>, sqlx::Error> {
    let mut outcomes = vec![RecordOutcome::default(); webhooks.len()];
    let turns: Vec<Turn<'_>> = webhooks
        .iter()
        .enumerate()
        .flat_map(|(at, (connector, inbound))| {
            debug_assert_eq!(tx.tenant(), connector.tenant_id);
            inbound.messages.iter().map(move |message| Turn {
                at,
                connector,
                message,
                tap: None,
            })
        })
        .collect();
    let turns = judge_taps(tx, turns, &mut outcomes).await?;
    if !turns.is_empty() {
        record_turns(tx, &turns, &mut outcomes).await?;
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
        for reaction in &inbound.reactions {
            match reactions::record(tx, connector, reaction).await? {
                reactions::Recorded::Changed(feedback) => outcome.feedback.push(feedback),
                reactions::Recorded::Unchanged => {}
                reactions::Recorded::NotOnAnAnswer => outcome.reactions_dropped += 1,
            }
        }
    }
    Ok(outcomes)
}

/// One inbound turn of a batch: its webhook (`at`), and for a tap how it was judged.
struct Turn<'a> {
    at: usize,
    connector: &'a Connector,
    message: &'a InboundMessage,
    tap: Option<taps::Verdict>,
}

/// Looks every tap up; one that is no turn is left out (and counted). Every tap the
/// platform wants acknowledged gets its answer, dropped or not.
async fn judge_taps<'a>(
    tx: &mut TenantTx,
    turns: Vec<Turn<'a>>,
    outcomes: &mut [RecordOutcome],
) -> Result<Vec<Turn<'a>>, sqlx::Error> {
    let mut kept = Vec::with_capacity(turns.len());
    for mut turn in turns {
        if let Some(tap) = &turn.message.tap {
            let verdict = taps::resolve(tx, turn.connector, turn.message, tap).await?;
            if let Some(answer_id) = &tap.answer_id {
                outcomes[turn.at].taps.push(TapAnswer {
                    answer_id: answer_id.clone(),
                    toast: verdict.toast(),
                });
            }
            if let taps::Verdict::Dropped(reason) = verdict {
                metrics::counter!("channel_bridge_taps_dropped_total", "reason" => reason).increment(1);
                outcomes[turn.at].taps_dropped += 1;
                continue;
            }
            turn.tap = Some(verdict);
        }
        kept.push(turn);
    }
    Ok(kept)
}

async fn record_turns(
    tx: &mut TenantTx,
    turns: &[Turn<'_>],
    outcomes: &mut [RecordOutcome],
) -> Result<(), sqlx::Error> {
    let senders: Vec<(Platform, &str)> = turns
        .iter()
        .map(|turn| {
            (
                turn.connector.profile.platform,
                turn.message.address.platform_user_id.as_str(),
            )
        })
        .collect();
    let links = db::links::resolve_many(tx, &senders).await?;
    let routings: Vec<Routing> = turns
        .iter()
        .map(|turn| {
            let key = (
                turn.connector.profile.platform.as_str().to_owned(),
                turn.message.address.platform_user_id.clone(),
            );
            route(turn, links.get(&key).cloned())
        })
        .collect();
    let rows: Vec<NewMessage<'_>> = turns
        .iter()
        .zip(&routings)
        .map(|(turn, routing)| new_message(turn, routing))
        .collect();
    // Queues the accepted turns' dispatch jobs in the same statement.
    let ids = db::messages::insert_many(tx, &rows).await?;
    for ((turn, routing), id) in turns.iter().zip(&routings).zip(ids) {
        let outcome = &mut outcomes[turn.at];
        match id {
            None => outcome.duplicates += 1,
            Some(id) if routing.status == MessageStatus::Accepted => outcome.queued.push(id),
            Some(id) => {
                outcome.recorded_only += 1;
                if routing.status == MessageStatus::DeniedUnlinked
                    && queue_notice(tx, turn.connector, turn.message, id, routing).await?
                {
                    outcome.notices += 1;
                }
            }
        }
    }
    Ok(())
}

/// At most once per sender and day, as a reply part of the denied message, so it is
/// delivered and reconciled like any reply.
async fn queue_notice(
    tx: &mut TenantTx,
    connector: &Connector,
    message: &InboundMessage,
    id: MessageId,
    routing: &Routing,
) -> Result<bool, sqlx::Error> {
    let Some(notice) = connector
        .profile
        .unlinked_notice
        .as_deref()
        .filter(|n| !n.trim().is_empty())
    else {
        return Ok(false);
    };
    if !db::replies::claim_daily_notice(tx, connector.id.0, &message.address.platform_user_id).await? {
        return Ok(false);
    }
    db::parts::insert_reply_parts(tx, id, &db::parts::Reply::text(vec![notice.to_owned()])).await?;
    db::queue::enqueue(tx, id, &routing.conversation_key, Stage::Reply).await?;
    Ok(true)
}

fn route(turn: &Turn<'_>, user_id: Option<String>) -> Routing {
    let (connector, message) = (turn.connector, turn.message);
    let conversation_key = match &user_id {
        Some(user) => ConversationKey::user(user),
        None => ConversationKey::sender(connector.id, &message.address.platform_user_id),
    };
    let (status, decision) = match (message.kind, &user_id, connector.profile.unlinked_policy) {
        _ if matches!(turn.tap, Some(taps::Verdict::AlreadyMade { .. })) => {
            (MessageStatus::Ignored, Some("choice_already_made"))
        }
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

/// A tap's text is its choice's label as the agent wrote it, not what the platform says.
fn new_message<'a>(turn: &'a Turn<'a>, routing: &'a Routing) -> NewMessage<'a> {
    let (connector, message) = (turn.connector, turn.message);
    let action = turn.tap.as_ref().and_then(taps::Verdict::action);
    NewMessage {
        connector_id: connector.id,
        platform: connector.profile.platform,
        idempotency_key: &message.idempotency_key,
        platform_message_id: &message.platform_message_id,
        address: &message.address,
        reply_to_id: message.reply_to_id.as_deref(),
        user_id: routing.user_id.as_deref(),
        conversation_key: &routing.conversation_key,
        request_content: action.map_or(message.text.as_str(), |action| action.label.as_str()),
        status: routing.status,
        decision: routing.decision,
        metadata: &message.metadata,
        attachments: attachments_json(&message.attachments),
        action: action.and_then(|action| serde_json::to_value(action).ok()),
        command: message.command.as_deref(),
    }
}

/// The attachments column: `None` for none, so the common text turn stores nothing.
fn attachments_json(attachments: &[crate::media::Attachment]) -> Option<serde_json::Value> {
    if attachments.is_empty() {
        return None;
    }
    serde_json::to_value(attachments).ok()
}
