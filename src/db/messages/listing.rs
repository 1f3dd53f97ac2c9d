//! The admin listing of turns: a selection's filters, a text search and keyset pages.

use super::{MessageRow, MESSAGE_COLUMNS};
use crate::db::TenantTx;
use crate::domain::{ConnectorId, MessageId, MessageStatus, Platform};

/// Which turns a listing narrows to, each field set narrowing it (made from a request's
/// `shapes::MessageSelection`).
#[derive(Debug, Clone, Default)]
pub struct Matching {
    pub user_id: Option<String>,
    pub platform: Option<Platform>,
    pub connector_id: Option<ConnectorId>,
    pub status: Option<MessageStatus>,
    /// Received at or after.
    pub since: Option<chrono::DateTime<chrono::Utc>>,
    /// Received before.
    pub until: Option<chrono::DateTime<chrono::Utc>>,
}

#[derive(Debug, Clone, Default)]
pub struct MessageFilter {
    pub matching: Matching,
    /// An unlinked sender's conversation (`conversation_key` of turns with no user).
    pub sender_conversation: Option<String>,
    pub decision: Option<String>,
    /// Case-insensitive, in the request or the response.
    pub text: Option<String>,
    /// Keyset: rows strictly older than this `(received_at, id)`.
    pub before: Option<(chrono::DateTime<chrono::Utc>, MessageId)>,
    pub limit: i64,
}

/// Newest first; keyset paging keeps pages stable while new rows arrive.
pub async fn list(tx: &mut TenantTx, filter: &MessageFilter) -> Result<Vec<MessageRow>, sqlx::Error> {
    let tenant = tx.tenant();
    let mut sql = sqlx::QueryBuilder::<sqlx::Postgres>::new(format!(
        "select {MESSAGE_COLUMNS} from channel_messages where tenant_id = "
    ));
    sql.push_bind(tenant);
    let mut eq = |column: &str, value: Option<String>| {
        if let Some(value) = value {
            sql.push(format!(" and {column} = ")).push_bind(value);
        }
    };
    let matching = &filter.matching;
    eq("user_id", matching.user_id.clone());
    eq("platform", matching.platform.map(|p| p.as_str().to_owned()));
    eq("status", matching.status.map(|s| s.as_str().to_owned()));
    eq("decision", filter.decision.clone());
    if let Some(connector) = matching.connector_id {
        sql.push(" and connector_id = ").push_bind(connector);
    }
    if let Some(key) = &filter.sender_conversation {
        // `user_id is null` lets the planner use the partial sender history index.
        sql.push(" and user_id is null and conversation_key = ")
            .push_bind(key.clone());
    }
    if let Some(since) = matching.since {
        sql.push(" and received_at >= ").push_bind(since);
    }
    if let Some(until) = matching.until {
        sql.push(" and received_at < ").push_bind(until);
    }
    if let Some(text) = &filter.text {
        let pattern = format!("%{}%", escape_like(text));
        sql.push(" and (request_content ilike ")
            .push_bind(pattern.clone());
        sql.push(" or response_content ilike ")
            .push_bind(pattern)
            .push(")");
    }
    if let Some((received_at, id)) = filter.before {
        sql.push(" and (received_at, id) < (")
            .push_bind(received_at)
            .push(", ")
            .push_bind(id)
            .push(")");
    }
    sql.push(" order by received_at desc, id desc limit ")
        .push_bind(filter.limit);
    sql.build_query_as().fetch_all(tx.conn()).await
}

/// `%`, `_` and `\` match themselves in a search, not as LIKE wildcards.
fn escape_like(text: &str) -> String {
    text.replace('\\', "\\\\").replace('%', "\\%").replace('_', "\\_")
}
