//! One recorded turn as admins see it, with its reply parts.

use axum::extract::State;
use axum::Json;
use serde::Serialize;
use sqlx::PgPool;
use utoipa::ToSchema;
use uuid::Uuid;

use crate::admin::auth::TenantAdmin;
use crate::admin::schema;
use crate::db::messages::MessageRow;
use crate::db::parts::ReplyPart;
use crate::db::{self, TenantTx};
use crate::domain::{Address, MessageId, TenantId};
use crate::error::{ApiJsonError, AppError};
use crate::http::extract::ApiPath;
use crate::http::state::AppState;

/// A recorded turn as admins see it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct MessageOut {
    pub id: Uuid,
    pub connector_id: Uuid,
    #[schema(schema_with = schema::platform)]
    pub platform: String,
    pub platform_message_id: String,
    /// The chat, thread and space, and the sender.
    #[serde(flatten)]
    pub address: Address,
    pub reply_to_id: Option<String>,
    pub user_id: Option<String>,
    /// The conversation the turn belongs to: `user:<user id>` for a linked user,
    /// `sender:<connector id>:<platform user id>` for an unlinked sender
    /// (`/v1/admin/conversations/{conversation}/…`).
    pub conversation: String,
    pub request_content: String,
    pub response_content: Option<String>,
    #[schema(schema_with = schema::optional_decision)]
    pub decision: Option<String>,
    #[schema(schema_with = schema::message_status)]
    pub status: String,
    pub attempts: i32,
    pub last_error: Option<String>,
    pub received_at: chrono::DateTime<chrono::Utc>,
    pub completed_at: Option<chrono::DateTime<chrono::Utc>>,
    pub delivered_at: Option<chrono::DateTime<chrono::Utc>>,
    #[schema(value_type = Object)]
    pub metadata: serde_json::Value,
    /// The files sent with the turn (type, MIME type, size, name; `url` is always null
    /// here: the agent gets signed, expiring URLs with each dispatch).
    pub attachments: Vec<crate::media::AttachmentOut>,
    /// Who wrote the turn: `user` (answered by the agent), `person` (a tenant's person
    /// answering in the agent's place; `request_content` is empty and the text is
    /// `response_content`) or `agent` (the agent writing first).
    pub origin: crate::domain::TurnOrigin,
    /// A person's turn: the name of the admin key that wrote it.
    pub author: Option<String>,
    /// A tap's turn: the choice it made (the agent's id, label and value, and the turn
    /// whose answer offered it). Absent for a message.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub action: Option<crate::choices::TapAction>,
    /// A slash command's turn: the command (`/ask`); `request_content` is what followed it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
}

impl From<MessageRow> for MessageOut {
    fn from(row: MessageRow) -> Self {
        Self {
            id: row.id.0,
            connector_id: row.connector_id.0,
            platform: row.platform.to_string(),
            platform_message_id: row.platform_message_id,
            address: row.address,
            reply_to_id: row.reply_to_id,
            user_id: row.user_id,
            conversation: row.conversation_key.into(),
            request_content: row.request_content,
            response_content: row.response_content,
            decision: row.decision,
            status: row.status.as_str().to_owned(),
            attempts: row.attempts,
            last_error: row.last_error,
            received_at: row.received_at,
            completed_at: row.completed_at,
            delivered_at: row.delivered_at,
            metadata: row.metadata,
            attachments: row
                .attachments
                .as_deref()
                .map(|files| crate::media::AttachmentOut::of_turn(row.id, files))
                .unwrap_or_default(),
            origin: row.origin,
            author: row.author,
            action: row.action,
            command: row.command,
        }
    }
}

/// A person's reaction as admins see it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct ReactionOut {
    /// The platform user who reacted.
    pub by: String,
    /// The emoji now on the answer, as the platform spells it (Slack: its name); null once
    /// removed.
    pub emoji: Option<String>,
    /// +1 for 👍, -1 for 👎 (and their platform spellings), 0 for anything else or removed.
    pub value: i16,
    /// The reply part reacted to.
    pub part_index: i32,
    /// When the person reacted, by the platform's clock.
    pub at: chrono::DateTime<chrono::Utc>,
}

impl From<db::reactions::ReactionOut> for ReactionOut {
    fn from(row: db::reactions::ReactionOut) -> Self {
        let db::reactions::ReactionOut {
            by,
            emoji,
            value,
            part_index,
            at,
        } = row;
        Self {
            by,
            emoji,
            value,
            part_index,
            at,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ReplyPartOut {
    pub part_index: i32,
    pub content: String,
    /// `unknown`: sent or not, never resent.
    #[schema(schema_with = schema::part_status)]
    pub status: String,
    pub platform_message_id: Option<String>,
    /// What the platform reported later (WhatsApp `delivered`, `read`, `failed`).
    pub delivery_status: Option<String>,
    pub attempts: i32,
    pub last_error: Option<String>,
    pub sent_at: Option<chrono::DateTime<chrono::Utc>>,
    /// The buttons posted with the part (an answer's last), under the token they carried.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub choices: Option<crate::choices::Offered>,
    /// Which choice was tapped first, by which platform user.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chosen: Option<crate::choices::Chosen>,
    /// Not a message of its own: the edit of part `edit_of`'s message once its choice was
    /// made (`content` says which: `✓ <label>`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub edit_of: Option<i32>,
    /// The file the part posts (`content` is its caption;
    /// docs/agent.md#files-and-reactions-in-answers).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<crate::media::outgoing::FileOut>,
    /// The part sets `content` as a reaction on the user's message.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub reaction: bool,
}

impl From<ReplyPart> for ReplyPartOut {
    fn from(part: ReplyPart) -> Self {
        Self {
            part_index: part.part_index,
            content: part.content,
            status: part.status.as_str().to_owned(),
            platform_message_id: part.platform_message_id,
            delivery_status: part.delivery_status,
            attempts: part.attempts,
            last_error: part.last_error,
            sent_at: part.sent_at,
            choices: part.choices,
            chosen: part.chosen,
            edit_of: part.edit_of,
            file: part
                .attachment
                .as_ref()
                .map(crate::media::outgoing::OutgoingFile::summary),
            reaction: part.reaction,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct MessageDetailOut {
    #[serde(flatten)]
    pub message: MessageOut,
    /// The local turn that `reply_to_id` points at, when it is one of ours (an earlier user
    /// message, or the turn whose reply the user answered).
    pub reply_to_message_id: Option<Uuid>,
    pub reply_parts: Vec<ReplyPartOut>,
    /// People's reactions to the answer, each person's latest
    /// (docs/agent.md#reactions-feedback-on-answers).
    pub reactions: Vec<ReactionOut>,
}

pub async fn get_message(pool: &PgPool, tenant: TenantId, id: Uuid) -> Result<MessageDetailOut, AppError> {
    let mut tx = TenantTx::begin(pool, tenant).await?;
    let row = db::messages::get(&mut tx, MessageId(id))
        .await?
        .ok_or(AppError::NotFound("message"))?;
    let parts = db::parts::reply_parts(&mut tx, row.id).await?;
    let reactions = db::reactions::of_messages(&mut tx, &[row.id]).await?;
    let reply_to = match &row.reply_to_id {
        Some(reply_to) => db::messages::resolve_reply_to(&mut tx, row.connector_id, reply_to).await?,
        None => None,
    };
    tx.commit().await?;
    Ok(MessageDetailOut {
        message: row.into(),
        reply_to_message_id: reply_to.map(|id| id.0),
        reply_parts: parts.into_iter().map(ReplyPartOut::from).collect(),
        reactions: reactions
            .into_iter()
            .map(|(_, reaction)| reaction.into())
            .collect(),
    })
}

/// One message with its reply parts.
#[utoipa::path(get, path = "/v1/admin/messages/{id}", operation_id = "get_message", tag = "messages", params(("id" = Uuid, Path)),
    security(("api_key" = [])),
    responses((status = 200, body = MessageDetailOut), (status = 401, body = ApiJsonError), (status = 404, body = ApiJsonError)))]
pub async fn get(
    State(state): State<AppState>,
    admin: TenantAdmin,
    ApiPath(id): ApiPath<Uuid>,
) -> Result<Json<MessageDetailOut>, AppError> {
    Ok(Json(get_message(&state.pool, admin.tenant, id).await?))
}
