//! The console's inbox: the held conversations (`conversation_holds`, RLS) with what names
//! each one and its latest turn, and their count for the navigation. Read in the tenant
//! transaction, on the history index each kind of conversation has.

use super::holds::Hold;
use super::TenantTx;

/// A held conversation as the inbox lists it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct InboxRow {
    #[sqlx(flatten)]
    pub hold: Hold,
    /// The latest turn's platform and sender (none while the conversation has no turn).
    pub platform: Option<String>,
    pub platform_user_id: Option<String>,
    /// The latest message: the answer of the latest turn (a person's or the agent's), or the
    /// user's words while it has none; `last_origin` says whose (`user`, `agent`, `person`).
    pub last_text: Option<String>,
    pub last_origin: Option<String>,
    pub last_at: Option<chrono::DateTime<chrono::Utc>>,
    /// The latest turn is the user's and nobody has answered it yet.
    pub waiting: bool,
    /// The oldest of the user's turns since the last one answered: how long they have waited.
    pub waiting_since: Option<chrono::DateTime<chrono::Utc>>,
}

/// One kind of conversation: `same` says which turns are the hold's (`m` and `a` both).
fn half(kind: &str, same: &str) -> String {
    let same_a = same.replace("m.", "a.");
    format!(
        "select h.conversation_key as conversation, h.user_id, h.held_by, h.by_agent, h.reason,
                h.held_at, l.platform, l.platform_user_id,
                case when l.origin = 'user' and l.response_content is not null then 'agent'
                     else l.origin::text end as last_origin,
                case when l.origin = 'user' and l.response_content is null then l.request_content
                     else coalesce(l.response_content, '') end as last_text,
                l.received_at as last_at,
                coalesce(l.origin = 'user' and l.status = 'held', false) as waiting,
                (select min(m.received_at) from channel_messages m
                  where m.tenant_id = h.tenant_id and {same}
                    and m.origin = 'user' and m.status = 'held'
                    and m.received_at > coalesce(
                        (select a.received_at from channel_messages a
                          where a.tenant_id = h.tenant_id and {same_a}
                            and not (a.origin = 'user' and a.status = 'held')
                          order by a.received_at desc limit 1), '-infinity')) as waiting_since
           from conversation_holds h
           left join lateral (
                 select m.platform, m.platform_user_id, m.origin, m.status, m.request_content,
                        m.response_content, m.received_at
                   from channel_messages m
                  where m.tenant_id = h.tenant_id and {same}
                  order by m.received_at desc, m.id desc limit 1) l on true
          where h.tenant_id = $1 and h.user_id is {kind}"
    )
}

/// Waiting conversations first, the longest wait first; then the others, oldest hold first.
/// At most `limit`.
pub async fn list(tx: &mut TenantTx, limit: i64) -> Result<Vec<InboxRow>, sqlx::Error> {
    let users = half("not null", "m.user_id = h.user_id");
    let senders = half(
        "null",
        "m.user_id is null and m.conversation_key = h.conversation_key",
    );
    sqlx::query_as(&format!(
        "select * from ({users} union all {senders}) held
          order by waiting desc, waiting_since nulls last, held_at, conversation
          limit $2"
    ))
    .bind(tx.tenant())
    .bind(limit)
    .fetch_all(tx.conn())
    .await
}

/// How many conversations are held, counted up to `cap`.
pub async fn count(tx: &mut TenantTx, cap: i64) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(
        "select count(*) from (select 1 from conversation_holds where tenant_id = $1 limit $2) held",
    )
    .bind(tx.tenant())
    .bind(cap)
    .fetch_one(tx.conn())
    .await
}
