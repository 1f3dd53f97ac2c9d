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

/// The latest turn of the hold's conversation; `same` says which turns are its (as `m`).
fn latest(same: &str) -> String {
    format!(
        "select m.platform, m.platform_user_id, m.origin, m.status, m.request_content,
                m.response_content, m.received_at
           from channel_messages m
          where m.tenant_id = h.tenant_id and {same}
          order by m.received_at desc, m.id desc limit 1"
    )
}

/// The oldest of the user's held turns since the conversation's latest other turn.
fn waiting_since(same: &str) -> String {
    let same_a = same.replace("m.", "a.");
    format!(
        "select min(m.received_at) as since from channel_messages m
          where m.tenant_id = h.tenant_id and {same}
            and m.origin = 'user' and m.status = 'held'
            and m.received_at > coalesce(
                (select a.received_at from channel_messages a
                  where a.tenant_id = h.tenant_id and {same_a}
                    and not (a.origin = 'user' and a.status = 'held')
                  order by a.received_at desc limit 1), '-infinity')"
    )
}

/// Waiting conversations first, the longest wait first; then the others, oldest hold first.
/// At most `limit`. A linked user's turns and an unlinked sender's are read apart, each on
/// its history index, as `holds::list` reads them.
pub async fn list(tx: &mut TenantTx, limit: i64) -> Result<Vec<InboxRow>, sqlx::Error> {
    let user = "m.user_id = h.user_id";
    let sender = "m.user_id is null and m.conversation_key = h.conversation_key";
    let sql = format!(
        "select h.conversation_key as conversation, h.user_id, h.held_by, h.by_agent, h.reason,
                h.held_at, t.platform, t.platform_user_id,
                case when t.origin = 'user' and t.response_content is not null then 'agent'
                     else t.origin::text end as last_origin,
                case when t.origin = 'user' and t.response_content is null then t.request_content
                     else coalesce(t.response_content, '') end as last_text,
                t.received_at as last_at, t.waiting,
                case when t.waiting then coalesce(wu.since, ws.since) end as waiting_since
           from conversation_holds h
           left join lateral ({user_latest}) u on h.user_id is not null
           left join lateral ({sender_latest}) s on h.user_id is null
           cross join lateral (
                 select coalesce(u.platform, s.platform) as platform,
                        coalesce(u.platform_user_id, s.platform_user_id) as platform_user_id,
                        coalesce(u.origin, s.origin) as origin,
                        coalesce(u.request_content, s.request_content) as request_content,
                        case when u.received_at is not null then u.response_content
                             else s.response_content end as response_content,
                        coalesce(u.received_at, s.received_at) as received_at,
                        coalesce(coalesce(u.origin, s.origin) = 'user'
                                 and coalesce(u.status, s.status) = 'held', false) as waiting) t
           left join lateral ({user_since}) wu on h.user_id is not null
           left join lateral ({sender_since}) ws on h.user_id is null
          where h.tenant_id = $1
          order by t.waiting desc, waiting_since nulls last, h.held_at, h.conversation_key
          limit $2",
        user_latest = latest(user),
        sender_latest = latest(sender),
        user_since = waiting_since(user),
        sender_since = waiting_since(sender),
    );
    sqlx::query_as(&sql)
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
