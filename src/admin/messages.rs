//! Message history for tenant admins: listing with filters and keyset paging, one message
//! with its reply parts, a user's history as the agent would get it next, redispatch.
//! The functions take a pool and a tenant so the CLI calls the same code as the API.

use axum::extract::{Path, State};
use axum::Json;
use base64::Engine;
use serde::{Deserialize, Serialize};
use sqlx::PgPool;
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use super::auth::TenantAdmin;
use super::{ApiJsonError, ApiQuery};
use crate::db::messages::{MessageFilter, MessageRow, ReplyPart};
use crate::db::{self, TenantTx};
use crate::dispatch::history::{self, HistoryScope};
use crate::dispatch::payload::ChatMessage;
use crate::domain::{MessageId, TenantId};
use crate::error::AppError;
use crate::state::AppState;

const DEFAULT_LIMIT: i64 = 50;
const MAX_LIMIT: i64 = 200;

#[derive(Debug, Default, Clone, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct MessagesQuery {
    /// Linked user id.
    pub user_id: Option<String>,
    /// `slack`, `whatsapp` or `telegram`.
    pub platform: Option<String>,
    pub connector_id: Option<Uuid>,
    /// `accepted`, `dispatching`, `executed`, `dispatch_failed`, `denied_unlinked`, `ignored`.
    pub status: Option<String>,
    pub decision: Option<String>,
    /// Received at or after (RFC 3339).
    pub since: Option<chrono::DateTime<chrono::Utc>>,
    /// Received before (RFC 3339).
    pub until: Option<chrono::DateTime<chrono::Utc>>,
    /// Case-insensitive text search over request and response.
    pub q: Option<String>,
    /// `next_cursor` of the previous page.
    pub cursor: Option<String>,
    /// Page size, 1..=200 (default 50).
    pub limit: Option<i64>,
}

/// A recorded turn as admins see it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct MessageOut {
    pub id: Uuid,
    pub connector_id: Uuid,
    pub platform: String,
    pub platform_message_id: String,
    pub chat_id: String,
    pub thread_id: Option<String>,
    pub platform_user_id: String,
    pub reply_to_id: Option<String>,
    pub user_id: Option<String>,
    pub request_content: String,
    pub response_content: Option<String>,
    pub decision: Option<String>,
    pub status: String,
    pub attempts: i32,
    pub last_error: Option<String>,
    pub received_at: chrono::DateTime<chrono::Utc>,
    pub completed_at: Option<chrono::DateTime<chrono::Utc>>,
    pub delivered_at: Option<chrono::DateTime<chrono::Utc>>,
    #[schema(value_type = Object)]
    pub metadata: serde_json::Value,
}

impl From<MessageRow> for MessageOut {
    fn from(row: MessageRow) -> Self {
        Self {
            id: row.id.0,
            connector_id: row.connector_id.0,
            platform: row.platform,
            platform_message_id: row.platform_message_id,
            chat_id: row.chat_id,
            thread_id: row.thread_id,
            platform_user_id: row.platform_user_id,
            reply_to_id: row.reply_to_id,
            user_id: row.user_id,
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
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct MessagePage {
    pub items: Vec<MessageOut>,
    /// Pass as `cursor` for the next (older) page; absent on the last page.
    pub next_cursor: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ReplyPartOut {
    pub part_index: i32,
    pub content: String,
    /// `pending`, `sending`, `sent`, `failed` or `unknown` (sent or not, never resent).
    pub status: String,
    pub platform_message_id: Option<String>,
    /// What the platform reported later (WhatsApp `delivered`, `read`, `failed`).
    pub delivery_status: Option<String>,
    pub attempts: i32,
    pub last_error: Option<String>,
    pub sent_at: Option<chrono::DateTime<chrono::Utc>>,
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
}

#[derive(Debug, Serialize, ToSchema)]
pub struct HistoryOut {
    pub user_id: String,
    /// Exactly the `messages[]` history the agent would get with this user's next turn.
    pub messages: Vec<ChatMessage>,
}

fn encode_cursor(row: &MessageRow) -> String {
    let raw = format!("{}|{}", row.received_at.timestamp_micros(), row.id);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)
}

fn decode_cursor(cursor: &str) -> Result<(chrono::DateTime<chrono::Utc>, MessageId), AppError> {
    let invalid = || AppError::Unprocessable("invalid cursor".into());
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(cursor)
        .map_err(|_| invalid())?;
    let raw = String::from_utf8(raw).map_err(|_| invalid())?;
    let (micros, id) = raw.split_once('|').ok_or_else(invalid)?;
    let micros: i64 = micros.parse().map_err(|_| invalid())?;
    let at = chrono::DateTime::from_timestamp_micros(micros).ok_or_else(invalid)?;
    Ok((at, id.parse().map_err(|_| invalid())?))
}

fn filter_of(query: &MessagesQuery) -> Result<MessageFilter, AppError> {
    let limit = query.limit.unwrap_or(DEFAULT_LIMIT);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(AppError::Unprocessable(format!(
            "limit must be between 1 and {MAX_LIMIT}"
        )));
    }
    if let Some(platform) = &query.platform {
        platform
            .parse::<crate::domain::Platform>()
            .map_err(|e| AppError::Unprocessable(e.to_string()))?;
    }
    if let Some(status) = &query.status {
        status
            .parse::<crate::domain::MessageStatus>()
            .map_err(AppError::Unprocessable)?;
    }
    Ok(MessageFilter {
        user_id: query.user_id.clone(),
        platform: query.platform.clone(),
        connector_id: query.connector_id,
        status: query.status.clone(),
        decision: query.decision.clone(),
        since: query.since,
        until: query.until,
        text: query.q.clone().filter(|q| !q.is_empty()),
        before: query.cursor.as_deref().map(decode_cursor).transpose()?,
        // One more than asked tells whether another page exists.
        limit: limit + 1,
    })
}

/// One page of the tenant's messages, newest first.
pub async fn list_messages(
    pool: &PgPool,
    tenant: TenantId,
    query: &MessagesQuery,
) -> Result<MessagePage, AppError> {
    let filter = filter_of(query)?;
    let mut tx = TenantTx::begin(pool, tenant).await?;
    let mut rows = db::messages::list(&mut tx, &filter).await?;
    tx.commit().await?;
    let more = rows.len() as i64 == filter.limit;
    if more {
        rows.pop();
    }
    let next_cursor = if more {
        rows.last().map(encode_cursor)
    } else {
        None
    };
    Ok(MessagePage {
        items: rows.into_iter().map(MessageOut::from).collect(),
        next_cursor,
    })
}

pub async fn get_message(pool: &PgPool, tenant: TenantId, id: Uuid) -> Result<MessageDetailOut, AppError> {
    let mut tx = TenantTx::begin(pool, tenant).await?;
    let row = db::messages::get(&mut tx, MessageId(id))
        .await?
        .ok_or(AppError::NotFound("message"))?;
    let parts = db::messages::reply_parts(&mut tx, row.id).await?;
    let reply_to = match &row.reply_to_id {
        Some(reply_to) => db::messages::resolve_reply_to(&mut tx, row.connector_id, reply_to).await?,
        None => None,
    };
    tx.commit().await?;
    Ok(MessageDetailOut {
        message: row.into(),
        reply_to_message_id: reply_to.map(|id| id.0),
        reply_parts: parts.into_iter().map(ReplyPartOut::from).collect(),
    })
}

/// What the agent would get as history with `user_id`'s next turn: the worker's own code.
pub async fn user_history(pool: &PgPool, tenant: TenantId, user_id: &str) -> Result<HistoryOut, AppError> {
    let mut tx = TenantTx::begin(pool, tenant).await?;
    let scope = HistoryScope {
        user_id: Some(user_id),
        conversation_key: "",
        before: None,
    };
    let messages = history::load_scope(&mut tx, &scope).await?;
    tx.commit().await?;
    Ok(HistoryOut {
        user_id: user_id.to_owned(),
        messages,
    })
}

/// Queues a `dispatch_failed` turn again. 404 for an unknown (or another tenant's) id,
/// 409 when the turn is not failed.
pub async fn redispatch(pool: &PgPool, tenant: TenantId, id: Uuid) -> Result<MessageOut, AppError> {
    let mut tx = TenantTx::begin(pool, tenant).await?;
    let Some(row) = db::messages::redispatch(&mut tx, MessageId(id)).await? else {
        let exists = db::messages::get(&mut tx, MessageId(id)).await?.is_some();
        return Err(if exists {
            AppError::Conflict("only a dispatch_failed message can be redispatched")
        } else {
            AppError::NotFound("message")
        });
    };
    tx.commit().await?;
    Ok(row.into())
}

/// List messages, newest first.
#[utoipa::path(get, path = "/v1/admin/messages", tag = "messages", params(MessagesQuery),
    security(("api_key" = [])),
    responses((status = 200, body = MessagePage), (status = 401, body = ApiJsonError), (status = 422, body = ApiJsonError)))]
pub async fn list(
    State(state): State<AppState>,
    admin: TenantAdmin,
    ApiQuery(query): ApiQuery<MessagesQuery>,
) -> Result<Json<MessagePage>, AppError> {
    Ok(Json(list_messages(&state.pool, admin.tenant, &query).await?))
}

/// One message with its reply parts.
#[utoipa::path(get, path = "/v1/admin/messages/{id}", tag = "messages", params(("id" = Uuid, Path)),
    security(("api_key" = [])),
    responses((status = 200, body = MessageDetailOut), (status = 404, body = ApiJsonError)))]
pub async fn get(
    State(state): State<AppState>,
    admin: TenantAdmin,
    Path(id): Path<Uuid>,
) -> Result<Json<MessageDetailOut>, AppError> {
    Ok(Json(get_message(&state.pool, admin.tenant, id).await?))
}

/// Put a `dispatch_failed` message back in the queue.
#[utoipa::path(post, path = "/v1/admin/messages/{id}/redispatch", tag = "messages", params(("id" = Uuid, Path)),
    security(("api_key" = [])),
    responses((status = 200, body = MessageOut), (status = 404, body = ApiJsonError), (status = 409, body = ApiJsonError)))]
pub async fn post_redispatch(
    State(state): State<AppState>,
    admin: TenantAdmin,
    Path(id): Path<Uuid>,
) -> Result<Json<MessageOut>, AppError> {
    let out = redispatch(&state.pool, admin.tenant, id).await?;
    state.wake_workers();
    Ok(Json(out))
}

/// A user's history exactly as the agent would receive it with their next message.
#[utoipa::path(get, path = "/v1/admin/users/{user_id}/history", tag = "messages", params(("user_id" = String, Path)),
    security(("api_key" = [])),
    responses((status = 200, body = HistoryOut), (status = 401, body = ApiJsonError)))]
pub async fn history(
    State(state): State<AppState>,
    admin: TenantAdmin,
    Path(user_id): Path<String>,
) -> Result<Json<HistoryOut>, AppError> {
    Ok(Json(user_history(&state.pool, admin.tenant, &user_id).await?))
}
