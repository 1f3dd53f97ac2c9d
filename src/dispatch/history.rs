//! The conversation so far, as the agent sees it (DESIGN.md "Statuses and decisions").
//!
//! Terminal turns only (`executed`, `dispatch_failed`, `denied_*`), non-empty request text,
//! strictly older than the turn being dispatched, the newest `HISTORY_TURNS` of them,
//! returned oldest first, each as the user's message followed by the assistant's response
//! when there is one. A linked user's history spans all their platforms (`user_id`); an
//! unlinked sender's is their own conversation key.

use super::payload::ChatMessage;
use crate::db::messages::MessageRow;
use crate::db::TenantTx;

/// Turns of history given to the agent.
pub const HISTORY_TURNS: i64 = 12;

#[derive(sqlx::FromRow)]
struct Turn {
    request_content: String,
    response_content: Option<String>,
}

/// Reads the history of `message`'s conversation inside the tenant transaction.
pub async fn load(tx: &mut TenantTx, message: &MessageRow) -> Result<Vec<ChatMessage>, sqlx::Error> {
    let tenant = tx.tenant();
    // Two statements rather than one with an OR, so each uses its own index.
    let scope = match &message.user_id {
        Some(_) => "user_id = $2",
        None => "user_id is null and conversation_key = $2",
    };
    let key = message.user_id.as_deref().unwrap_or(&message.conversation_key);
    let mut turns: Vec<Turn> = sqlx::query_as(&format!(
        "select request_content, response_content
           from channel_messages
          where tenant_id = $1 and {scope}
            and (status in ('executed', 'dispatch_failed') or status like 'denied\\_%')
            and btrim(request_content) <> ''
            and (received_at, id) < ($3, $4)
          order by received_at desc, id desc
          limit $5"
    ))
    .bind(tenant)
    .bind(key)
    .bind(message.received_at)
    .bind(message.id)
    .bind(HISTORY_TURNS)
    .fetch_all(tx.conn())
    .await?;
    turns.reverse();
    Ok(turns.into_iter().flat_map(into_messages).collect())
}

fn into_messages(turn: Turn) -> Vec<ChatMessage> {
    let mut messages = vec![ChatMessage::user(turn.request_content)];
    if let Some(response) = turn.response_content.filter(|r| !r.trim().is_empty()) {
        messages.push(ChatMessage::assistant(response));
    }
    messages
}
