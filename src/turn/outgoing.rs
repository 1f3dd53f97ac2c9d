//! A turn the gateway's side writes, not the user: a person's answer (`handoff`) or a
//! message the agent writes first. It is recorded after everything its conversation holds
//! so far, with its reply parts, and queued for the reply stage, where its parts are posted
//! as an answer's are: in order, each exactly once.

use crate::db::messages::MessageRow;
use crate::db::queue::{self, Stage};
use crate::db::TenantTx;
use crate::domain::{Address, ConnectorId, ConversationKey, MessageId, Platform, TurnOrigin};

/// Where the turn goes, and what it threads to (`reply_to`: a platform message id, empty
/// for a new message).
#[derive(Debug, Clone)]
pub struct Destination {
    pub connector_id: ConnectorId,
    pub platform: Platform,
    pub reply_to: String,
    pub address: Address,
    pub user_id: Option<String>,
    pub conversation_key: ConversationKey,
}

impl Destination {
    /// Threaded to `turn`, in its chat.
    pub fn replying_to(turn: &MessageRow) -> Self {
        Self {
            connector_id: turn.connector_id,
            platform: turn.platform,
            reply_to: turn.platform_message_id.clone(),
            address: turn.address.clone(),
            user_id: turn.user_id.clone(),
            conversation_key: turn.conversation_key.clone(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct WrittenTurn<'a> {
    pub origin: TurnOrigin,
    pub author: Option<&'a str>,
    pub text: &'a str,
    /// Made ready for the platform (`delivery::split::reply`).
    pub reply: &'a crate::db::parts::Reply,
    /// Unique on the connector with the users' own keys: prefixed by its kind.
    pub idempotency_key: &'a str,
    pub metadata: serde_json::Value,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Posted {
    New(MessageId),
    /// Posted before under the same key: nothing new.
    Repeat(MessageId),
}

/// Two writers of one conversation are serialized on it, so history and the platform show
/// their turns in the same order.
pub async fn record(
    tx: &mut TenantTx,
    place: &Destination,
    turn: &WrittenTurn<'_>,
) -> Result<Posted, sqlx::Error> {
    let tenant = tx.tenant();
    sqlx::query("select pg_advisory_xact_lock(hashtextextended($1::text || '/outgoing/' || $2, 0))")
        .bind(tenant)
        .bind(&place.conversation_key)
        .execute(tx.conn())
        .await?;
    let Some(id) = insert(tx, place, turn).await? else {
        return Ok(Posted::Repeat(earlier(tx, place, turn).await?));
    };
    crate::db::parts::insert_reply_parts(tx, id, turn.reply).await?;
    queue::enqueue(tx, id, &place.conversation_key, Stage::Reply).await?;
    Ok(Posted::New(id))
}

/// The turn's row, unless its key is recorded already (`None`).
async fn insert(
    tx: &mut TenantTx,
    place: &Destination,
    turn: &WrittenTurn<'_>,
) -> Result<Option<MessageId>, sqlx::Error> {
    let tenant = tx.tenant();
    let id = MessageId::new();
    let decision = match turn.origin {
        TurnOrigin::Agent => "proactive",
        TurnOrigin::Person | TurnOrigin::User => "person",
    };
    sqlx::query_scalar(
        "insert into channel_messages (tenant_id, id, connector_id, platform, idempotency_key,
             platform_message_id, chat_id, thread_id, space, platform_user_id, reply_to_id, user_id,
             conversation_key, request_content, response_content, decision, status, origin, author,
             metadata, completed_at)
         values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, nullif($6, ''), $11, $12, '', $13, $14,
                 'executed', $15, $16, $17, now())
         on conflict (tenant_id, connector_id, idempotency_key) do nothing
         returning id",
    )
    .bind(tenant)
    .bind(id)
    .bind(place.connector_id)
    .bind(place.platform.as_str())
    .bind(turn.idempotency_key)
    .bind(&place.reply_to)
    .bind(&place.address.chat_id)
    .bind(&place.address.thread_id)
    .bind(&place.address.space)
    .bind(&place.address.platform_user_id)
    .bind(&place.user_id)
    .bind(&place.conversation_key)
    .bind(turn.text)
    .bind(decision)
    .bind(turn.origin.as_str())
    .bind(turn.author)
    .bind(&turn.metadata)
    .fetch_optional(tx.conn())
    .await
}

/// The turn recorded before under the same key.
async fn earlier(
    tx: &mut TenantTx,
    place: &Destination,
    turn: &WrittenTurn<'_>,
) -> Result<MessageId, sqlx::Error> {
    let tenant = tx.tenant();
    sqlx::query_scalar(
        "select id from channel_messages
          where tenant_id = $1 and connector_id = $2 and idempotency_key = $3",
    )
    .bind(tenant)
    .bind(place.connector_id)
    .bind(turn.idempotency_key)
    .fetch_one(tx.conn())
    .await
}
