//! The listing: filters, keyset paging by `(received_at, id)` and its cursors.

use axum::extract::State;
use axum::Json;
use serde::{Deserialize, Serialize};
use sqlx::PgPool;
use utoipa::{IntoParams, ToSchema};

use super::message::MessageOut;
use crate::admin::auth::TenantAdmin;
use crate::admin::cursor;
use crate::admin::schema;
use crate::db::messages::{MessageFilter, MessageRow};
use crate::db::{self, TenantTx};
use crate::domain::TenantId;
use crate::error::{ApiJsonError, AppError};
use crate::http::extract::ApiQuery;
use crate::http::state::AppState;
use crate::shapes::MessageSelection;

const DEFAULT_LIMIT: i64 = 50;
const MAX_LIMIT: i64 = 200;

/// The listing's query: a selection and the listing's own parameters. `IntoParams` cannot
/// flatten, so the operation lists `params(MessageSelection, MessagesQuery)`.
#[derive(Debug, Default, Clone, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct MessagesQuery {
    #[serde(flatten, deserialize_with = "MessageSelection::flattened")]
    #[param(ignore)]
    pub matching: MessageSelection,
    #[param(schema_with = schema::decision)]
    pub decision: Option<String>,
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

pub(super) fn filter_of(query: &MessagesQuery) -> Result<MessageFilter, AppError> {
    let limit = query.limit.unwrap_or(DEFAULT_LIMIT);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(AppError::Unprocessable(format!(
            "limit must be between 1 and {MAX_LIMIT}"
        )));
    }
    if let Some(decision) = query.decision.as_deref() {
        if !schema::DECISIONS.contains(&decision) {
            return Err(AppError::Unprocessable(format!("unknown decision `{decision}`")));
        }
    }
    schema::check_optional_text("user_id", query.matching.user_id.as_deref(), schema::ID_MAX)?;
    schema::check_optional_text("q", query.q.as_deref(), schema::SEARCH_MAX)?;
    Ok(MessageFilter {
        matching: query.matching.clone().into(),
        sender_conversation: None,
        decision: query.decision.clone(),
        text: query.q.clone().filter(|q| !q.is_empty()),
        before: query.cursor.as_deref().map(cursor::decode).transpose()?,
        // One more than asked tells whether another page exists.
        limit: limit + 1,
    })
}

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

/// `asked` is one row more than the page holds: that row's presence means another page.
pub(super) fn page_of(mut rows: Vec<MessageRow>, asked: i64) -> (Vec<MessageRow>, Option<String>) {
    let more = rows.len() as i64 == asked;
    if more {
        rows.pop();
    }
    let next_cursor = if more {
        rows.last().map(|row| cursor::encode(row.received_at, row.id))
    } else {
        None
    };
    (rows, next_cursor)
}

/// List messages, newest first.
#[utoipa::path(get, path = "/v1/admin/messages", operation_id = "list_messages", tag = "messages", params(MessageSelection, MessagesQuery),
    security(("api_key" = [])),
    responses((status = 200, body = MessagePage), (status = 400, body = ApiJsonError), (status = 401, body = ApiJsonError), (status = 422, body = ApiJsonError)))]
pub async fn list(
    State(state): State<AppState>,
    admin: TenantAdmin,
    ApiQuery(query): ApiQuery<MessagesQuery>,
) -> Result<Json<MessagePage>, AppError> {
    Ok(Json(list_messages(&state.pool, admin.tenant, &query).await?))
}
