//! A person stepping in (docs/console.md#human-handoff): the turns of a held conversation
//! are recorded `held` at their claim instead of being dispatched; what the person writes is
//! a turn of its own (origin `person`) whose reply parts go out through the queue's reply
//! stage like an answer's; handing back dispatches the user's last unanswered turn.

use crate::db::audit::{self, Actor, AuditAction, AuditEntry};
use crate::db::holds::{self, NewHold};
use crate::db::messages::{MessageRow, MESSAGE_COLUMNS};
use crate::db::queue::{self, Stage};
use crate::db::TenantTx;
use crate::domain::{ConversationOf, MessageId};

/// A conversation's id in the API: `user:<user id>` or `sender:<connector id>:<platform user
/// id>`, as `conversation_key` holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Conversation<'a> {
    User(&'a str),
    Sender(&'a str),
}

impl<'a> Conversation<'a> {
    /// A user's or an unlinked sender's key, naming someone.
    pub fn parse(key: &'a str) -> Option<Self> {
        match ConversationOf::parse(key)? {
            ConversationOf::User(user) => (!user.is_empty()).then_some(Self::User(user)),
            ConversationOf::Sender(_, sender) => (!sender.is_empty()).then_some(Self::Sender(key)),
            ConversationOf::Chat(..) => None,
        }
    }

    /// `who` narrows to the conversation on the history index its kind has.
    fn who(self) -> (&'static str, &'a str) {
        match self {
            Self::User(user) => ("user_id = $2", user),
            Self::Sender(key) => ("user_id is null and conversation_key = $2", key),
        }
    }
}

/// The conversation's latest turn written by its user, which a person's answer threads to.
pub async fn last_user_turn(
    tx: &mut TenantTx,
    conversation: Conversation<'_>,
) -> Result<Option<MessageRow>, sqlx::Error> {
    latest(tx, conversation, "and origin = 'user'").await
}

async fn latest(
    tx: &mut TenantTx,
    conversation: Conversation<'_>,
    and: &str,
) -> Result<Option<MessageRow>, sqlx::Error> {
    let (who, key) = conversation.who();
    sqlx::query_as(&format!(
        "select {MESSAGE_COLUMNS} from channel_messages
          where tenant_id = $1 and {who} {and}
          order by received_at desc, id desc limit 1"
    ))
    .bind(tx.tenant())
    .bind(key)
    .fetch_optional(tx.conn())
    .await
}

/// Claimed turns whose conversation is held become `held` (complete, not dispatched). The
/// others are left as they are.
pub async fn hold_claimed(tx: &mut TenantTx, ids: &[MessageId]) -> Result<Vec<MessageId>, sqlx::Error> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    sqlx::query_scalar(
        "update channel_messages m
            set status = 'held', decision = 'held', completed_at = now(), updated_at = now()
          where m.tenant_id = $1 and m.id = any($2) and m.status in ('accepted', 'dispatching')
            and exists (select 1 from conversation_holds h
                         where h.tenant_id = $1 and h.conversation_key = m.conversation_key)
      returning m.id",
    )
    .bind(tx.tenant())
    .bind(ids)
    .fetch_all(tx.conn())
    .await
}

/// Who steps in: the actor the audit records, and the name a person's message is signed with.
#[derive(Debug, Clone)]
pub struct Person {
    pub actor: Actor,
    pub name: String,
}

/// `person` holds the conversation (`reason` optional), with a metric and an audit record
/// when it was not held yet; `false`: it was held already.
pub async fn take_over(
    tx: &mut TenantTx,
    person: &Person,
    turn: &MessageRow,
    reason: Option<&str>,
) -> Result<bool, sqlx::Error> {
    let new = NewHold {
        conversation: turn.conversation_key.as_str(),
        user_id: turn.user_id.as_deref(),
        held_by: &person.name,
        by_agent: false,
        reason: reason.filter(|r| !r.trim().is_empty()),
    };
    let taken = holds::take(tx, &new).await?;
    if taken {
        metrics::counter!("channel_bridge_handoffs_total", "by" => "person").increment(1);
        let entry = AuditEntry::new(
            person.actor,
            AuditAction::ConversationTakeOver,
            turn.conversation_key.as_str(),
            serde_json::json!({}),
        );
        audit::record(tx, &entry).await?;
    }
    Ok(taken)
}

/// A person's answer to `target` (the user's latest turn): the conversation held if it was
/// not (the agent does not answer over a person), the turn recorded and queued
/// (`record_person_turn`), and, when new, a metric and an audit record that counts its
/// parts and choices.
pub async fn answer(
    tx: &mut TenantTx,
    person: &Person,
    target: &MessageRow,
    turn: &PersonTurn<'_>,
) -> Result<Posted, sqlx::Error> {
    take_over(tx, person, target, None).await?;
    let posted = record_person_turn(tx, target, turn).await?;
    if let Posted::New(id) = posted {
        metrics::counter!("channel_bridge_person_answers_total").increment(1);
        let mut details = serde_json::json!({ "message_id": id.to_string(), "parts": turn.reply.len() });
        let offered = turn.reply.choices.as_ref().map_or(0, |c| c.choices.items.len());
        if offered > 0 {
            details["choices"] = offered.into();
        }
        let entry = AuditEntry::new(
            person.actor,
            AuditAction::ConversationMessage,
            target.conversation_key.as_str(),
            details,
        );
        audit::record(tx, &entry).await?;
    }
    Ok(posted)
}

/// What a person wrote, already split into the platform's parts.
#[derive(Debug, Clone)]
pub struct PersonTurn<'a> {
    pub author: &'a str,
    pub text: &'a str,
    pub reply: crate::db::parts::Reply,
    /// The caller's key: the same one again posts nothing twice.
    pub idempotency_key: &'a str,
}

pub use super::outgoing::Posted;

/// Recorded after everything the conversation holds so far and queued for its reply stage,
/// threaded to `target` (the user's latest turn). Two people posting at once are serialized
/// on the conversation, so history and the platform show their turns in the same order.
pub async fn record_person_turn(
    tx: &mut TenantTx,
    target: &MessageRow,
    turn: &PersonTurn<'_>,
) -> Result<Posted, sqlx::Error> {
    let outgoing = super::outgoing::WrittenTurn {
        origin: crate::domain::TurnOrigin::Person,
        author: Some(turn.author),
        text: turn.text,
        reply: &turn.reply,
        idempotency_key: &format!("person:{}", turn.idempotency_key),
        metadata: serde_json::json!({}),
    };
    super::outgoing::record(tx, &super::outgoing::Destination::replying_to(target), &outgoing).await
}

/// Handing back: when the conversation's latest turn is a `held` one of its user (nobody
/// answered it), it is queued for the agent as if it had just arrived; the earlier held
/// turns stay `held` and reach the agent as history.
pub async fn resume(
    tx: &mut TenantTx,
    conversation: Conversation<'_>,
) -> Result<Option<MessageId>, sqlx::Error> {
    let Some(last) = latest(tx, conversation, "").await? else {
        return Ok(None);
    };
    if last.origin != crate::domain::TurnOrigin::User || last.status != crate::domain::MessageStatus::Held {
        return Ok(None);
    }
    let requeued: Option<MessageId> = sqlx::query_scalar(
        "update channel_messages
            set status = 'accepted', decision = null, completed_at = null, updated_at = now()
          where tenant_id = $1 and id = $2 and status = 'held'
      returning id",
    )
    .bind(tx.tenant())
    .bind(last.id)
    .fetch_optional(tx.conn())
    .await?;
    if let Some(id) = requeued {
        queue::enqueue(tx, id, &last.conversation_key, Stage::Dispatch).await?;
    }
    Ok(requeued)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HandedBack {
    /// `false`: it was not held.
    pub released: bool,
    /// The user's last turn, unanswered while held, now queued for the agent.
    pub dispatched: Option<MessageId>,
}

/// Releases the hold and resumes the conversation (`resume`), with an audit record.
pub async fn hand_back(
    tx: &mut TenantTx,
    actor: Actor,
    conversation: &str,
    parsed: Conversation<'_>,
) -> Result<HandedBack, sqlx::Error> {
    let released = holds::release(tx, conversation).await?.is_some();
    if !released {
        return Ok(HandedBack {
            released,
            dispatched: None,
        });
    }
    let dispatched = resume(tx, parsed).await?;
    metrics::counter!("channel_bridge_hand_backs_total").increment(1);
    let details = serde_json::json!({ "dispatched": dispatched.map(|id| id.to_string()) });
    let entry = AuditEntry::new(actor, AuditAction::ConversationHandBack, conversation, details);
    audit::record(tx, &entry).await?;
    Ok(HandedBack { released, dispatched })
}

/// The agent asked for a person in `message`'s answer: the conversation is held, with an
/// audit record, in the commit that stores the answer. Already held: nothing changes.
pub async fn hold_for_agent(
    tx: &mut TenantTx,
    message: MessageId,
    request: &super::HandoffRequest,
) -> Result<bool, sqlx::Error> {
    let hold = NewHold {
        conversation: request.conversation.as_str(),
        user_id: request.user_id.as_deref(),
        held_by: "agent",
        by_agent: true,
        reason: request.reason.as_deref(),
    };
    let taken = holds::take(tx, &hold).await?;
    if taken {
        metrics::counter!("channel_bridge_handoffs_total", "by" => "agent").increment(1);
        let details = serde_json::json!({ "message_id": message.to_string(), "by_agent": true });
        let entry = AuditEntry::new(
            Actor::Agent,
            AuditAction::ConversationTakeOver,
            request.conversation.as_str(),
            details,
        );
        audit::record(tx, &entry).await?;
    }
    Ok(taken)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversation_ids_are_the_keys_the_gateway_writes() {
        assert_eq!(
            Conversation::parse("user:alice"),
            Some(Conversation::User("alice"))
        );
        assert_eq!(
            Conversation::parse("user:a:b/c"),
            Some(Conversation::User("a:b/c"))
        );
        let sender = "sender:0190c8a4-8b1e-7bb8-9a55-5c4e0c1a2b3c:U123";
        assert_eq!(Conversation::parse(sender), Some(Conversation::Sender(sender)));
        for bad in [
            "",
            "user:",
            "alice",
            "sender:",
            "sender:nope:U1",
            "sender:0190c8a4-8b1e-7bb8-9a55-5c4e0c1a2b3c:",
        ] {
            assert_eq!(Conversation::parse(bad), None, "{bad}");
        }
    }
}
