//! Message history for tenant admins: listing with filters and keyset paging, one message
//! with its reply parts, a user's history as the agent would get it next, and the two
//! recovery actions: redispatch (ask the agent again for `dispatch_failed` turns) and resend
//! (post the undelivered parts of answered turns again), each for one message or many by
//! filter. The functions take a pool and a tenant so the CLI calls the same code as the API.
//!
//! Recovery actions are idempotent: a turn that already has a job (queued, or being worked)
//! is never queued again, and a delivered one has nothing to resend, so a repeated call
//! queues nothing and says so (`{"queued": 0, "ids": []}`). One call takes at most
//! `MAX_ACTION_LIMIT` turns, oldest first; `more` says whether to call again.

use axum::extract::State;
use axum::Json;
use serde::{Deserialize, Serialize};
use sqlx::PgPool;
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use super::auth::TenantAdmin;
use super::schema;
use crate::db::audit::{Actor, AuditAction, AuditEntry};
use crate::db::messages::{MessageFilter, MessageRow, ReplyPart};
use crate::db::{self, TenantTx};
use crate::dispatch::history::{self, HistoryScope, Place};
use crate::dispatch::payload::ChatMessage;
use crate::domain::{ConnectorId, HistoryScopeSetting, MessageId, MessageStatus, Platform, TenantId};
use crate::error::{ApiJsonError, AppError};
use crate::http::extract::{ApiJson, ApiPath, ApiQuery};
use crate::http::state::AppState;
use crate::turn::requeue::{self, Requeued, Selection};

const DEFAULT_LIMIT: i64 = 50;
const MAX_LIMIT: i64 = 200;
/// Turns one recovery action takes when the caller names no `limit`.
pub const DEFAULT_ACTION_LIMIT: i64 = 100;
/// The most turns one recovery action takes (each gets a job in the same transaction).
pub const MAX_ACTION_LIMIT: i64 = 1000;

#[derive(Debug, Default, Clone, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct MessagesQuery {
    /// Linked user id.
    #[param(max_length = 256, pattern = r"^[^\u0000]*$")]
    pub user_id: Option<String>,
    #[param(schema_with = schema::platform)]
    pub platform: Option<String>,
    pub connector_id: Option<Uuid>,
    #[param(schema_with = schema::message_status)]
    pub status: Option<String>,
    #[param(schema_with = schema::decision)]
    pub decision: Option<String>,
    /// Received at or after (RFC 3339).
    pub since: Option<chrono::DateTime<chrono::Utc>>,
    /// Received before (RFC 3339).
    pub until: Option<chrono::DateTime<chrono::Utc>>,
    /// Case-insensitive text search over request and response.
    #[param(max_length = 500, pattern = r"^[^\u0000]*$")]
    pub q: Option<String>,
    /// `next_cursor` of the previous page.
    #[param(
        pattern = r"^-?[0-9]{1,16}_[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
    )]
    pub cursor: Option<String>,
    /// Page size (default 50).
    #[param(minimum = 1, maximum = 200)]
    pub limit: Option<i64>,
}

/// A recorded turn as admins see it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct MessageOut {
    pub id: Uuid,
    pub connector_id: Uuid,
    #[schema(schema_with = schema::platform)]
    pub platform: String,
    pub platform_message_id: String,
    pub chat_id: String,
    pub thread_id: Option<String>,
    /// The shared space (channel, group) the turn was asked in; null for a direct message.
    pub space: Option<String>,
    pub platform_user_id: String,
    pub reply_to_id: Option<String>,
    pub user_id: Option<String>,
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
            space: row.space,
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
            attachments: row
                .attachments
                .as_deref()
                .map(|files| crate::media::AttachmentOut::of_turn(row.id, files))
                .unwrap_or_default(),
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({"items": [{"id": "0192f0c4-7a6e-7b3a-9c1d-2e4f5a6b7c8d", "connector_id": "0192f0c4-1111-7b3a-9c1d-2e4f5a6b7c8d",
    "platform": "telegram", "platform_message_id": "8812", "chat_id": "408258968", "thread_id": null,
    "platform_user_id": "408258968", "reply_to_id": null, "user_id": "alice", "request_content": "Is my order shipped?",
    "response_content": "Yes, it left this morning.", "decision": "respond", "status": "executed", "attempts": 1,
    "last_error": null, "received_at": "2026-11-22T09:30:00Z", "completed_at": "2026-11-22T09:30:02Z",
    "delivered_at": "2026-11-22T09:30:02Z", "metadata": {}}],
    "next_cursor": "1795339800000000_0192f0c4-7a6e-7b3a-9c1d-2e4f5a6b7c8d"}))]
pub struct MessagePage {
    pub items: Vec<MessageOut>,
    /// Pass as `cursor` for the next (older) page; absent on the last page.
    pub next_cursor: Option<String>,
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
#[schema(example = json!({"user_id": "alice", "history_scope": "private_aware", "messages": [{"role": "user", "content": "Is my order shipped?"},
    {"role": "assistant", "content": "Yes, it left this morning."}]}))]
pub struct HistoryOut {
    pub user_id: String,
    /// The tenant's history scope the history was chosen by.
    pub history_scope: HistoryScopeSetting,
    /// Exactly the `messages[]` history the agent would get with this user's next turn.
    pub messages: Vec<ChatMessage>,
}

/// `<received_at in µs>_<id>`: plain, so that the document can state its form (`pattern`)
/// and every cursor it allows decodes.
fn encode_cursor(row: &MessageRow) -> String {
    format!("{}_{}", row.received_at.timestamp_micros(), row.id)
}

fn decode_cursor(cursor: &str) -> Result<(chrono::DateTime<chrono::Utc>, MessageId), AppError> {
    let invalid = || AppError::Unprocessable("invalid cursor".into());
    let (micros, id) = cursor.split_once('_').ok_or_else(invalid)?;
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
    if let Some(decision) = query.decision.as_deref() {
        if !schema::DECISIONS.contains(&decision) {
            return Err(AppError::Unprocessable(format!("unknown decision `{decision}`")));
        }
    }
    schema::check_optional_text("user_id", query.user_id.as_deref(), schema::ID_MAX)?;
    schema::check_optional_text("q", query.q.as_deref(), schema::SEARCH_MAX)?;
    Ok(MessageFilter {
        user_id: query.user_id.clone(),
        sender_conversation: None,
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
    let rows = db::messages::list(&mut tx, &filter).await?;
    tx.commit().await?;
    let (rows, next_cursor) = page_of(rows, filter.limit);
    Ok(MessagePage {
        items: rows.into_iter().map(MessageOut::from).collect(),
        next_cursor,
    })
}

/// A page's rows and the cursor of the next page: the filter asked for one row more than
/// the page holds, and that row's presence says whether another page exists.
fn page_of(mut rows: Vec<MessageRow>, asked: i64) -> (Vec<MessageRow>, Option<String>) {
    let more = rows.len() as i64 == asked;
    if more {
        rows.pop();
    }
    let next_cursor = if more {
        rows.last().map(encode_cursor)
    } else {
        None
    };
    (rows, next_cursor)
}

/// Whose conversation: a linked user (all their platforms), or an unlinked sender (its
/// `conversation_key`, as `db::conversations` lists it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Who {
    User(String),
    Sender(String),
}

/// One turn of a conversation: what the user wrote and the agent answered, and the reply
/// parts as they were posted.
#[derive(Debug)]
pub struct ConversationTurn {
    pub message: MessageOut,
    pub reply_parts: Vec<ReplyPartOut>,
}

#[derive(Debug)]
pub struct ConversationPage {
    /// Newest first.
    pub turns: Vec<ConversationTurn>,
    /// The platform accounts linked to the user (none for an unlinked sender).
    pub links: Vec<db::links::Link>,
    pub next_cursor: Option<String>,
}

/// Turns a conversation page holds.
const CONVERSATION_PAGE: i64 = 30;

/// One page of a conversation, newest first, with every turn's reply parts, in one tenant
/// transaction: the listing's own query (by the user's or the sender's history index) and
/// one primary-key read of the page's parts.
pub async fn conversation(
    pool: &PgPool,
    tenant: TenantId,
    who: &Who,
    cursor: Option<&str>,
) -> Result<ConversationPage, AppError> {
    let query = MessagesQuery {
        user_id: match who {
            Who::User(user) => Some(user.clone()),
            Who::Sender(_) => None,
        },
        cursor: cursor.map(str::to_owned),
        limit: Some(CONVERSATION_PAGE),
        ..MessagesQuery::default()
    };
    let mut filter = filter_of(&query)?;
    if let Who::Sender(key) = who {
        schema::check_text("sender", key, schema::SECRET_MAX)?;
        filter.sender_conversation = Some(key.clone());
    }
    let mut tx = TenantTx::begin(pool, tenant).await?;
    let rows = db::messages::list(&mut tx, &filter).await?;
    let (rows, next_cursor) = page_of(rows, filter.limit);
    let ids: Vec<MessageId> = rows.iter().map(|row| row.id).collect();
    let parts = db::messages::reply_parts_of(&mut tx, &ids).await?;
    let links = match who {
        Who::User(user) => db::links::of_user(&mut tx, user).await?,
        Who::Sender(_) => Vec::new(),
    };
    tx.commit().await?;
    let mut parts_of: std::collections::HashMap<MessageId, Vec<ReplyPartOut>> = Default::default();
    for (message, part) in parts {
        parts_of.entry(message).or_default().push(part.into());
    }
    let turns = rows
        .into_iter()
        .map(|row| ConversationTurn {
            reply_parts: parts_of.remove(&row.id).unwrap_or_default(),
            message: row.into(),
        })
        .collect();
    Ok(ConversationPage {
        turns,
        links,
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

/// Whose next turn `user_history` shows the history of.
#[derive(Debug, Default, Clone, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct HistoryQuery {
    /// With `chat_id`: the user's next turn in this chat of this connector, rather than
    /// their next direct message (under the `chat` scope: in the direct chat they wrote in
    /// last). Either alone: the chat of this connector, or with this id, they wrote in last.
    pub connector_id: Option<Uuid>,
    #[param(max_length = 256, pattern = r"^[^\u0000]*$")]
    pub chat_id: Option<String>,
}

/// What the agent would get as history with `user_id`'s next turn, in a direct message or
/// in the chat `query` names, under the tenant's history scope: the worker's own code.
pub async fn user_history(
    pool: &PgPool,
    tenant: TenantId,
    user_id: &str,
    query: &HistoryQuery,
) -> Result<HistoryOut, AppError> {
    schema::check_optional_text("chat_id", query.chat_id.as_deref(), schema::ID_MAX)?;
    let mut tx = TenantTx::begin(pool, tenant).await?;
    let setting = db::tenants::history_scope(tx.conn(), tenant)
        .await?
        .ok_or(AppError::NotFound("tenant"))?;
    let last;
    let chat = match (query.connector_id, query.chat_id.as_deref()) {
        (Some(connector), Some(chat_id)) => {
            let connector = ConnectorId(connector);
            let space = db::messages::space_of_chat(&mut tx, connector, chat_id).await?;
            Some((connector, chat_id, space))
        }
        // Under `chat` a direct message sees its own chat only: the one they wrote in last.
        (None, None) if setting == HistoryScopeSetting::Chat => {
            last = db::messages::last_chat(&mut tx, user_id, None, None, true).await?;
            last.as_ref()
                .map(|(connector, chat_id)| (*connector, chat_id.as_str(), None))
        }
        (None, None) => None,
        // One of the two: the chat of that connector, or with that id, they wrote in last.
        (connector, chat_id) => {
            last =
                db::messages::last_chat(&mut tx, user_id, connector.map(ConnectorId), chat_id, false).await?;
            match &last {
                Some((connector, chat_id)) => {
                    let space = db::messages::space_of_chat(&mut tx, *connector, chat_id).await?;
                    Some((*connector, chat_id.as_str(), space))
                }
                None => None,
            }
        }
    };
    let place = match (setting, &chat) {
        (HistoryScopeSetting::User, _) => Place::Anywhere,
        (HistoryScopeSetting::PrivateAware, Some((connector, _, Some(space)))) => Place::Space {
            connector: *connector,
            space,
        },
        (HistoryScopeSetting::PrivateAware, _) => Place::Direct,
        (HistoryScopeSetting::Chat, Some((connector, chat_id, space))) => Place::Chat {
            connector: *connector,
            chat_id,
            space: space.as_deref(),
        },
        // No direct chat yet: the next one starts with no history.
        (HistoryScopeSetting::Chat, None) => {
            tx.commit().await?;
            return Ok(HistoryOut {
                user_id: user_id.to_owned(),
                history_scope: setting,
                messages: Vec::new(),
            });
        }
    };
    let scope = HistoryScope {
        user_id: Some(user_id),
        conversation_key: "",
        place,
        before: None,
    };
    let messages = history::load_scope(&mut tx, &scope).await?;
    tx.commit().await?;
    Ok(HistoryOut {
        user_id: user_id.to_owned(),
        history_scope: setting,
        messages,
    })
}

/// Which turns a bulk resend takes (the CLI's redispatch too). Every field that is set
/// narrows the choice, with the listing's meaning; `{}` takes every turn the action applies
/// to (up to `limit`).
#[derive(Debug, Default, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = ResendFilterIn, example = json!({"platform": "telegram", "status": "delivery_failed", "since": "2026-11-22T00:00:00Z", "limit": 100}))]
pub struct ActionFilterIn {
    /// Linked user id.
    #[schema(max_length = 256, pattern = r"^[^\u0000]*$")]
    pub user_id: Option<String>,
    #[schema(schema_with = schema::optional_platform)]
    pub platform: Option<String>,
    pub connector_id: Option<Uuid>,
    /// Both when absent.
    #[schema(schema_with = schema::optional_resend_status)]
    pub status: Option<String>,
    /// Received at or after (RFC 3339); before `until` (else 422).
    pub since: Option<chrono::DateTime<chrono::Utc>>,
    /// Received before (RFC 3339).
    pub until: Option<chrono::DateTime<chrono::Utc>>,
    /// Most turns this call queues (default 100), oldest first.
    #[schema(minimum = 1, maximum = 1000)]
    #[serde(default, deserialize_with = "schema::optional_integer")]
    pub limit: Option<i64>,
    /// Also post again the parts whose outcome is `unknown` (Telegram at-most-once). They
    /// may already be in the chat, so a resend can double them.
    pub include_unknown: Option<bool>,
}

/// Which `dispatch_failed` turns a bulk redispatch takes: the resend filter's fields, but
/// for `include_unknown`.
#[derive(Debug, Default, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"connector_id": "0192f0c4-7a6e-7b3a-9c1d-2e4f5a6b7c8d", "until": "2026-11-22T12:00:00Z"}))]
pub struct RedispatchFilterIn {
    /// Linked user id.
    #[schema(max_length = 256, pattern = r"^[^\u0000]*$")]
    pub user_id: Option<String>,
    #[schema(schema_with = schema::optional_platform)]
    pub platform: Option<String>,
    pub connector_id: Option<Uuid>,
    /// The only status redispatch applies to.
    #[schema(schema_with = schema::optional_redispatch_status)]
    pub status: Option<String>,
    /// Received at or after (RFC 3339); before `until` (else 422).
    pub since: Option<chrono::DateTime<chrono::Utc>>,
    /// Received before (RFC 3339).
    pub until: Option<chrono::DateTime<chrono::Utc>>,
    /// Most turns this call queues (default 100), oldest first.
    #[schema(minimum = 1, maximum = 1000)]
    #[serde(default, deserialize_with = "schema::optional_integer")]
    pub limit: Option<i64>,
}

impl From<RedispatchFilterIn> for ActionFilterIn {
    fn from(filter: RedispatchFilterIn) -> Self {
        Self {
            user_id: filter.user_id,
            platform: filter.platform,
            connector_id: filter.connector_id,
            status: filter.status,
            since: filter.since,
            until: filter.until,
            limit: filter.limit,
            include_unknown: None,
        }
    }
}

/// `include_unknown` of the one-message resend.
#[derive(Debug, Default, Clone, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ResendQuery {
    /// Also post again the parts whose outcome is `unknown` (they may already be in the
    /// chat: a resend can double them).
    pub include_unknown: Option<bool>,
}

/// What a recovery action queued.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({"queued": 2, "ids": ["0192f0c4-7a6e-7b3a-9c1d-2e4f5a6b7c8d", "0192f0c4-8b7f-7c4b-8d2e-3f5a6b7c8d9e"], "more": false}))]
pub struct QueuedOut {
    /// How many turns this call queued (0 when they were already queued or delivered).
    pub queued: usize,
    /// The queued turns, oldest first (the order their jobs run in).
    pub ids: Vec<Uuid>,
    /// More turns match than this call's `limit` took: call again for the next ones.
    pub more: bool,
}

impl From<Requeued> for QueuedOut {
    fn from(requeued: Requeued) -> Self {
        Self {
            queued: requeued.ids.len(),
            ids: requeued.ids.into_iter().map(|id| id.0).collect(),
            more: requeued.more,
        }
    }
}

/// The two recovery actions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recovery {
    Redispatch,
    Resend,
}

impl Recovery {
    async fn apply(
        self,
        tx: &mut TenantTx,
        selection: &Selection,
        include_unknown: bool,
    ) -> Result<Requeued, sqlx::Error> {
        match self {
            Recovery::Redispatch => requeue::redispatch(tx, selection).await,
            Recovery::Resend => requeue::resend(tx, selection, include_unknown).await,
        }
    }

    /// The audit record of a call that queued something (`target`: the message, or
    /// `messages` for a bulk call); ids and counts only.
    fn audit(self, actor: Actor, target: String, requeued: &Requeued, include_unknown: bool) -> AuditEntry {
        let action = match self {
            Recovery::Redispatch => AuditAction::MessagesRedispatch,
            Recovery::Resend => AuditAction::MessagesResend,
        };
        let mut details =
            serde_json::json!({"queued": requeued.ids.len(), "ids": requeued.ids, "more": requeued.more});
        if self == Recovery::Resend {
            details["include_unknown"] = include_unknown.into();
        }
        AuditEntry::new(actor, action, target, details)
    }

    /// The statuses a `status` filter may name for this action.
    fn statuses(self) -> &'static [MessageStatus] {
        match self {
            Recovery::Redispatch => &[MessageStatus::DispatchFailed],
            Recovery::Resend => &[MessageStatus::DeliveryFailed, MessageStatus::Executed],
        }
    }
}

fn selection_of(filter: &ActionFilterIn, action: Recovery) -> Result<Selection, AppError> {
    let unprocessable = |message: String| AppError::Unprocessable(message);
    let limit = filter.limit.unwrap_or(DEFAULT_ACTION_LIMIT);
    if !(1..=MAX_ACTION_LIMIT).contains(&limit) {
        return Err(unprocessable(format!(
            "limit must be between 1 and {MAX_ACTION_LIMIT}"
        )));
    }
    let platform = filter
        .platform
        .as_deref()
        .map(str::parse::<Platform>)
        .transpose()
        .map_err(|e| unprocessable(e.to_string()))?;
    let status = filter
        .status
        .as_deref()
        .map(str::parse::<MessageStatus>)
        .transpose()
        .map_err(unprocessable)?;
    if let Some(status) = status.filter(|s| !action.statuses().contains(s)) {
        return Err(unprocessable(match action {
            Recovery::Redispatch => format!(
                "redispatch applies to dispatch_failed messages, not {status} (resend posts the \
                 undelivered parts of answered ones)"
            ),
            Recovery::Resend => format!(
                "resend applies to answered messages (delivery_failed or executed), not {status} \
                 (redispatch asks the agent again for dispatch_failed ones)"
            ),
        }));
    }
    if let (Some(since), Some(until)) = (filter.since, filter.until) {
        if since >= until {
            return Err(unprocessable("since must be before until".into()));
        }
    }
    schema::check_optional_text("user_id", filter.user_id.as_deref(), schema::ID_MAX)?;
    if action == Recovery::Redispatch && filter.include_unknown.is_some() {
        return Err(unprocessable("include_unknown applies to resend only".into()));
    }
    Ok(Selection {
        ids: None,
        user_id: filter.user_id.clone(),
        platform,
        connector_id: filter.connector_id.map(ConnectorId),
        status,
        since: filter.since,
        until: filter.until,
        limit,
    })
}

/// Runs a recovery action on the turns `filter` selects, in one tenant transaction, and
/// records what it queued in the audit log (a call that queued nothing is not recorded).
pub async fn recover_many(
    pool: &PgPool,
    tenant: TenantId,
    action: Recovery,
    filter: &ActionFilterIn,
    actor: Actor,
) -> Result<QueuedOut, AppError> {
    let selection = selection_of(filter, action)?;
    let include_unknown = filter.include_unknown.unwrap_or(false);
    let mut tx = TenantTx::begin(pool, tenant).await?;
    let requeued = action.apply(&mut tx, &selection, include_unknown).await?;
    if !requeued.ids.is_empty() {
        let entry = action.audit(actor, "messages".into(), &requeued, include_unknown);
        db::audit::record(&mut tx, &entry).await?;
    }
    tx.commit().await?;
    Ok(requeued.into())
}

/// Runs a recovery action on one turn. 404 for an unknown (or another tenant's) id; 409 when
/// the action can never apply to the turn (redispatching an answered turn, resending one
/// that has no answer); otherwise what it queued, nothing when the turn is already queued
/// or has nothing left to deliver.
pub async fn recover_one(
    pool: &PgPool,
    tenant: TenantId,
    action: Recovery,
    id: Uuid,
    include_unknown: bool,
    actor: Actor,
) -> Result<QueuedOut, AppError> {
    let id = MessageId(id);
    let selection = Selection {
        ids: Some(vec![id]),
        limit: 1,
        ..Selection::default()
    };
    let mut tx = TenantTx::begin(pool, tenant).await?;
    let requeued = action.apply(&mut tx, &selection, include_unknown).await?;
    if requeued.ids.is_empty() {
        let row = db::messages::get(&mut tx, id)
            .await?
            .ok_or(AppError::NotFound("message"))?;
        refuse_if_never_applies(action, row.status)?;
    } else {
        let entry = action.audit(actor, id.0.to_string(), &requeued, include_unknown);
        db::audit::record(&mut tx, &entry).await?;
    }
    tx.commit().await?;
    Ok(requeued.into())
}

/// 409 for a turn the action can never apply to. A turn on its way (queued, being
/// dispatched or delivered) is not refused: the action has nothing to add, and says so.
fn refuse_if_never_applies(action: Recovery, status: MessageStatus) -> Result<(), AppError> {
    use MessageStatus::*;
    match (action, status) {
        (Recovery::Redispatch, DispatchFailed | Accepted | Dispatching) => Ok(()),
        (Recovery::Redispatch, Executed | DeliveryFailed | DeniedUnlinked | Ignored) => Err(
            AppError::Conflict("only a dispatch_failed message can be redispatched"),
        ),
        (Recovery::Resend, Executed | DeliveryFailed) => Ok(()),
        (Recovery::Resend, Accepted | Dispatching | DispatchFailed | DeniedUnlinked | Ignored) => Err(
            AppError::Conflict("only an answered message (executed or delivery_failed) can be resent"),
        ),
    }
}

/// List messages, newest first.
#[utoipa::path(get, path = "/v1/admin/messages", operation_id = "list_messages", tag = "messages", params(MessagesQuery),
    security(("api_key" = [])),
    responses((status = 200, body = MessagePage), (status = 400, body = ApiJsonError), (status = 401, body = ApiJsonError), (status = 422, body = ApiJsonError)))]
pub async fn list(
    State(state): State<AppState>,
    admin: TenantAdmin,
    ApiQuery(query): ApiQuery<MessagesQuery>,
) -> Result<Json<MessagePage>, AppError> {
    Ok(Json(list_messages(&state.pool, admin.tenant, &query).await?))
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

/// Ask the agent again for a `dispatch_failed` message: it is queued as if it had just
/// arrived. A message already queued again answers `queued: 0`.
#[utoipa::path(post, path = "/v1/admin/messages/{id}/redispatch", operation_id = "redispatch_message", tag = "messages", params(("id" = Uuid, Path)),
    security(("api_key" = [])),
    responses((status = 200, body = QueuedOut), (status = 401, body = ApiJsonError), (status = 404, body = ApiJsonError), (status = 409, body = ApiJsonError)))]
pub async fn post_redispatch(
    State(state): State<AppState>,
    admin: TenantAdmin,
    ApiPath(id): ApiPath<Uuid>,
) -> Result<Json<QueuedOut>, AppError> {
    let actor = Actor::ApiKey(admin.key_id);
    let out = recover_one(&state.pool, admin.tenant, Recovery::Redispatch, id, false, actor).await?;
    Ok(Json(wake_if_queued(&state, out)))
}

/// Post the undelivered parts of an answered message again: its `failed` parts (and its
/// `unknown` ones with `include_unknown=true`); `sent` parts are never posted again. A
/// message already queued or delivered answers `queued: 0`.
#[utoipa::path(post, path = "/v1/admin/messages/{id}/resend", operation_id = "resend_message", tag = "messages",
    params(("id" = Uuid, Path), ResendQuery),
    security(("api_key" = [])),
    responses((status = 200, body = QueuedOut), (status = 401, body = ApiJsonError), (status = 404, body = ApiJsonError), (status = 409, body = ApiJsonError), (status = 422, body = ApiJsonError)))]
pub async fn post_resend(
    State(state): State<AppState>,
    admin: TenantAdmin,
    ApiPath(id): ApiPath<Uuid>,
    ApiQuery(query): ApiQuery<ResendQuery>,
) -> Result<Json<QueuedOut>, AppError> {
    let include_unknown = query.include_unknown.unwrap_or(false);
    let actor = Actor::ApiKey(admin.key_id);
    let out = recover_one(
        &state.pool,
        admin.tenant,
        Recovery::Resend,
        id,
        include_unknown,
        actor,
    )
    .await?;
    Ok(Json(wake_if_queued(&state, out)))
}

/// Redispatch the `dispatch_failed` messages the filter selects, oldest first, at most
/// `limit` (default 100, at most 1000) per call.
#[utoipa::path(post, path = "/v1/admin/messages/redispatch", operation_id = "redispatch_messages", tag = "messages", request_body = RedispatchFilterIn,
    security(("api_key" = [])),
    responses((status = 200, body = QueuedOut), (status = 400, body = ApiJsonError), (status = 401, body = ApiJsonError), (status = 413, body = ApiJsonError), (status = 422, body = ApiJsonError)))]
pub async fn post_redispatch_many(
    State(state): State<AppState>,
    admin: TenantAdmin,
    ApiJson(filter): ApiJson<RedispatchFilterIn>,
) -> Result<Json<QueuedOut>, AppError> {
    let filter = ActionFilterIn::from(filter);
    let actor = Actor::ApiKey(admin.key_id);
    let out = recover_many(&state.pool, admin.tenant, Recovery::Redispatch, &filter, actor).await?;
    Ok(Json(wake_if_queued(&state, out)))
}

/// Resend the undelivered parts of the answered messages the filter selects, oldest first,
/// at most `limit` (default 100, at most 1000) per call.
#[utoipa::path(post, path = "/v1/admin/messages/resend", operation_id = "resend_messages", tag = "messages", request_body = ActionFilterIn,
    security(("api_key" = [])),
    responses((status = 200, body = QueuedOut), (status = 400, body = ApiJsonError), (status = 401, body = ApiJsonError), (status = 413, body = ApiJsonError), (status = 422, body = ApiJsonError)))]
pub async fn post_resend_many(
    State(state): State<AppState>,
    admin: TenantAdmin,
    ApiJson(filter): ApiJson<ActionFilterIn>,
) -> Result<Json<QueuedOut>, AppError> {
    let actor = Actor::ApiKey(admin.key_id);
    let out = recover_many(&state.pool, admin.tenant, Recovery::Resend, &filter, actor).await?;
    Ok(Json(wake_if_queued(&state, out)))
}

/// Wakes the workers (here at once, other instances by `NOTIFY`) when jobs were queued.
fn wake_if_queued(state: &AppState, out: QueuedOut) -> QueuedOut {
    if out.queued > 0 {
        state.wake_workers();
    }
    out
}

/// A user's history exactly as the agent would receive it with their next direct message
/// (or their next message in the chat the query names), under the tenant's history scope.
#[utoipa::path(get, path = "/v1/admin/users/{user_id}/history", operation_id = "get_user_history", tag = "messages",
    params(("user_id" = String, Path, max_length = 256, pattern = r"^[^\u0000]*$"), HistoryQuery),
    security(("api_key" = [])),
    responses((status = 200, body = HistoryOut), (status = 400, body = ApiJsonError), (status = 401, body = ApiJsonError), (status = 404, body = ApiJsonError), (status = 422, body = ApiJsonError)))]
pub async fn history(
    State(state): State<AppState>,
    admin: TenantAdmin,
    ApiPath(user_id): ApiPath<String>,
    ApiQuery(query): ApiQuery<HistoryQuery>,
) -> Result<Json<HistoryOut>, AppError> {
    // An id no link can hold names no user.
    if !schema::names_something(&user_id, schema::ID_MAX) {
        return Err(AppError::NotFound("user"));
    }
    Ok(Json(
        user_history(&state.pool, admin.tenant, &user_id, &query).await?,
    ))
}
