//! `channel_messages`: one row per turn (tenant table, RLS), read whole as a `MessageRow`, and
//! the lookups by chat, user, attachment and platform message. The inserts of a webhook's
//! turns are in `insert.rs`, the admin listing in `listing.rs`.

use serde::Serialize;
use serde_json::Value;

use super::TenantTx;
use crate::domain::{Address, ConnectorId, ConversationKey, MessageId, MessageStatus, Platform, TenantId};

mod insert;
mod listing;

pub use insert::{insert_many, NewMessage};
pub use listing::{list, Matching, MessageFilter};

#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct MessageRow {
    pub id: MessageId,
    pub tenant_id: TenantId,
    pub connector_id: ConnectorId,
    pub platform: Platform,
    pub idempotency_key: String,
    pub platform_message_id: String,
    #[sqlx(flatten)]
    #[serde(flatten)]
    pub address: Address,
    pub reply_to_id: Option<String>,
    pub user_id: Option<String>,
    pub conversation_key: ConversationKey,
    pub request_content: String,
    pub response_content: Option<String>,
    pub decision: Option<String>,
    pub status: MessageStatus,
    pub attempts: i32,
    pub last_error: Option<String>,
    pub received_at: chrono::DateTime<chrono::Utc>,
    pub completed_at: Option<chrono::DateTime<chrono::Utc>>,
    pub delivered_at: Option<chrono::DateTime<chrono::Utc>>,
    pub metadata: Value,
    #[sqlx(json(nullable))]
    pub attachments: Option<Vec<crate::media::Attachment>>,
    /// Where a streamed answer was shown; the first reply part adopts it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub live_message_id: Option<String>,
    pub origin: crate::domain::TurnOrigin,
    /// Who wrote a person's turn (the key's name).
    pub author: Option<String>,
    /// On a tap's turn: the choice it made.
    #[sqlx(json(nullable), default)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub action: Option<crate::choices::TapAction>,
    /// On a slash command's turn: which (`/ask`).
    #[sqlx(default)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
}

impl MessageRow {
    /// The platform message a reply threads to: `None` for a turn the agent wrote first
    /// (`turn::outgoing`), which replies to nothing.
    pub fn reply_target(&self) -> Option<&str> {
        Some(self.platform_message_id.as_str()).filter(|id| !id.is_empty())
    }
}

pub const MESSAGE_COLUMNS: &str = "id, tenant_id, connector_id, platform, idempotency_key,
    platform_message_id, chat_id, thread_id, space, platform_user_id, reply_to_id, user_id,
    conversation_key, request_content, response_content, decision, status, attempts,
    last_error, received_at, completed_at, delivered_at, metadata, attachments, live_message_id,
    origin, author, action, command";

/// `None`: a direct chat, or none recorded.
pub async fn space_of_chat(
    tx: &mut TenantTx,
    connector: ConnectorId,
    chat_id: &str,
) -> Result<Option<String>, sqlx::Error> {
    let tenant = tx.tenant();
    let space: Option<Option<String>> = sqlx::query_scalar(
        "select space from channel_messages
          where tenant_id = $1 and connector_id = $2 and chat_id = $3
          order by received_at desc limit 1",
    )
    .bind(tenant)
    .bind(connector)
    .bind(chat_id)
    .fetch_optional(tx.conn())
    .await?;
    Ok(space.flatten())
}

/// `(connector, chat id)` `user_id` last wrote in, narrowed by the other arguments.
pub async fn last_chat(
    tx: &mut TenantTx,
    user_id: &str,
    connector: Option<ConnectorId>,
    chat_id: Option<&str>,
    direct: bool,
) -> Result<Option<(ConnectorId, String)>, sqlx::Error> {
    let tenant = tx.tenant();
    sqlx::query_as(
        "select connector_id, chat_id from channel_messages
          where tenant_id = $1 and user_id = $2
            and ($3::uuid is null or connector_id = $3) and ($4::text is null or chat_id = $4)
            and (not $5 or space is null)
          order by received_at desc limit 1",
    )
    .bind(tenant)
    .bind(user_id)
    .bind(connector)
    .bind(chat_id)
    .bind(direct)
    .fetch_optional(tx.conn())
    .await
}

pub async fn attachment(
    tx: &mut TenantTx,
    id: MessageId,
    index: u16,
) -> Result<Option<(ConnectorId, crate::media::Attachment)>, sqlx::Error> {
    let tenant = tx.tenant();
    let row: Option<(ConnectorId, sqlx::types::Json<crate::media::Attachment>)> = sqlx::query_as(
        "select connector_id, attachments -> $3::int from channel_messages
          where tenant_id = $1 and id = $2 and attachments -> $3::int is not null",
    )
    .bind(tenant)
    .bind(id)
    .bind(i32::from(index))
    .fetch_optional(tx.conn())
    .await?;
    Ok(row.map(|(connector, attachment)| (connector, attachment.0)))
}

pub async fn get(tx: &mut TenantTx, id: MessageId) -> Result<Option<MessageRow>, sqlx::Error> {
    let tenant = tx.tenant();
    sqlx::query_as(&format!(
        "select {MESSAGE_COLUMNS} from channel_messages where tenant_id = $1 and id = $2"
    ))
    .bind(tenant)
    .bind(id)
    .fetch_optional(tx.conn())
    .await
}

/// An inbound turn of this tenant, or the turn whose reply part the user answered.
pub async fn resolve_reply_to(
    tx: &mut TenantTx,
    connector: ConnectorId,
    platform_message_id: &str,
) -> Result<Option<MessageId>, sqlx::Error> {
    let tenant = tx.tenant();
    sqlx::query_scalar(
        "select id from channel_messages
          where tenant_id = $1 and connector_id = $2 and platform_message_id = $3
         union all
         select r.message_id from channel_replies r
          where r.tenant_id = $1 and r.platform_message_id = $3
         limit 1",
    )
    .bind(tenant)
    .bind(connector)
    .bind(platform_message_id)
    .fetch_optional(tx.conn())
    .await
}
