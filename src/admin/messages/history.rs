//! A user's history as the agent would get it next: the worker's own code, so they agree.

use axum::extract::State;
use axum::Json;
use serde::{Deserialize, Serialize};
use sqlx::PgPool;
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use crate::admin::auth::TenantAdmin;
use crate::admin::schema;
use crate::db::{self, TenantTx};
use crate::dispatch::history::{self, HistoryPlace, HistoryScope};
use crate::dispatch::payload::ChatMessage;
use crate::domain::{ConnectorId, HistoryScopeSetting, TenantId};
use crate::error::{ApiJsonError, AppError};
use crate::http::extract::{ApiPath, ApiQuery};
use crate::http::state::AppState;

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

/// The history the agent would get with the user's next turn, in the chat the query names.
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
    let chat = next_chat(&mut tx, user_id, query, setting).await?;
    let messages = match next_place(setting, chat.as_ref()) {
        Some(place) => {
            let scope = HistoryScope {
                user_id: Some(user_id),
                conversation_key: "",
                place,
                before: None,
            };
            history::load_scope(&mut tx, &scope).await?
        }
        // No direct chat yet: the next one starts with no history.
        None => Vec::new(),
    };
    tx.commit().await?;
    Ok(HistoryOut {
        user_id: user_id.to_owned(),
        history_scope: setting,
        messages,
    })
}

/// A chat of a connector, with its space if it has one.
struct Chat {
    connector: ConnectorId,
    chat_id: String,
    space: Option<String>,
}

/// The chat the user's next turn is in, as the query names it; `None` for their next
/// direct message, or when they wrote in no chat that fits.
async fn next_chat(
    tx: &mut TenantTx,
    user_id: &str,
    query: &HistoryQuery,
    setting: HistoryScopeSetting,
) -> Result<Option<Chat>, sqlx::Error> {
    match (query.connector_id, query.chat_id.as_deref()) {
        (Some(connector), Some(chat_id)) => Ok(Some(
            chat_with_space(tx, ConnectorId(connector), chat_id.to_owned()).await?,
        )),
        // Under `chat` a direct message sees its own chat only: the one they wrote in last.
        (None, None) if setting == HistoryScopeSetting::Chat => {
            let last = db::messages::last_chat(tx, user_id, None, None, true).await?;
            Ok(last.map(|(connector, chat_id)| Chat {
                connector,
                chat_id,
                space: None,
            }))
        }
        (None, None) => Ok(None),
        // One of the two: the chat of that connector, or with that id, they wrote in last.
        (connector, chat_id) => {
            match db::messages::last_chat(tx, user_id, connector.map(ConnectorId), chat_id, false).await? {
                Some((connector, chat_id)) => Ok(Some(chat_with_space(tx, connector, chat_id).await?)),
                None => Ok(None),
            }
        }
    }
}

/// The chat with its space, as its turns recorded it.
async fn chat_with_space(
    tx: &mut TenantTx,
    connector: ConnectorId,
    chat_id: String,
) -> Result<Chat, sqlx::Error> {
    let space = db::messages::space_of_chat(tx, connector, &chat_id).await?;
    Ok(Chat {
        connector,
        chat_id,
        space,
    })
}

/// Where the next turn's history is drawn from under `setting`; `None` when it has none
/// (under `chat`, with no chat yet).
fn next_place(setting: HistoryScopeSetting, chat: Option<&Chat>) -> Option<HistoryPlace<'_>> {
    Some(match (setting, chat) {
        (HistoryScopeSetting::User, _) => HistoryPlace::Anywhere,
        (
            HistoryScopeSetting::PrivateAware,
            Some(Chat {
                connector,
                space: Some(space),
                ..
            }),
        ) => HistoryPlace::Space {
            connector: *connector,
            space,
        },
        (HistoryScopeSetting::PrivateAware, _) => HistoryPlace::Direct,
        (HistoryScopeSetting::Chat, Some(chat)) => HistoryPlace::Chat {
            connector: chat.connector,
            chat_id: &chat.chat_id,
            space: chat.space.as_deref(),
        },
        (HistoryScopeSetting::Chat, None) => return None,
    })
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
