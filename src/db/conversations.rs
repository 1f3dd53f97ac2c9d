//! The tenant's conversations, one row each (the console's users page), linked users first.
//! Ordered by key, not latest activity: that would need a hot summary row per busy user on
//! the ingress path, or a walk over the newest turns as long as one chatty user's history. By
//! key, a page is a skip scan of the history indexes, a few probes per row.

use super::TenantTx;
use crate::domain::{MessageId, MessageStatus};

/// Shown as "500+": a page must not count a million index entries for one busy user.
pub const COUNT_CAP: i64 = 500;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PageStart {
    Start,
    /// A jump to a name (`inclusive`), or the next page.
    User {
        user_id: String,
        inclusive: bool,
    },
    /// Past every linked user.
    Sender {
        after: String,
    },
}

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ConversationRow {
    /// `key` is the user id, else the unlinked sender's conversation key.
    pub linked: bool,
    pub key: String,
    /// At most `COUNT_CAP`.
    pub turns: i64,
    pub linked_accounts: i64,
    pub latest_id: MessageId,
    pub platform: String,
    pub platform_user_id: String,
    pub request_content: String,
    pub response_content: Option<String>,
    pub status: MessageStatus,
    pub received_at: chrono::DateTime<chrono::Utc>,
}

/// Each step of the skip scans is one index probe, run only as far as the outer LIMIT
/// pulls; the `p.linked` guards let only the branch for the row's kind run.
const PAGE_SQL: &str = "
with recursive users(user_id) as (
    select (select m.user_id from channel_messages m
             where $4 and m.tenant_id = $1 and m.user_id >= $2 and (m.user_id <> $2 or $3)
             order by m.user_id limit 1)
  union all
    select (select m.user_id from channel_messages m
             where m.tenant_id = $1 and m.user_id > u.user_id
             order by m.user_id limit 1)
      from users u where u.user_id is not null
),
senders(conversation_key) as (
    select (select m.conversation_key from channel_messages m
             where m.tenant_id = $1 and m.user_id is null and m.conversation_key > $5
             order by m.conversation_key limit 1)
  union all
    select (select m.conversation_key from channel_messages m
             where m.tenant_id = $1 and m.user_id is null and m.conversation_key > s.conversation_key
             order by m.conversation_key limit 1)
      from senders s where s.conversation_key is not null
),
page as (
    (select true as linked, user_id as key from users where user_id is not null)
    union all
    (select false, conversation_key from senders where conversation_key is not null)
    limit $6
)
select p.linked, p.key, counted.turns, accounts.linked_accounts,
       latest.id as latest_id, latest.platform, latest.platform_user_id, latest.request_content,
       latest.response_content, latest.status, latest.received_at
  from page p
  cross join lateral (
      (select m.id, m.platform, m.platform_user_id, m.request_content, m.response_content,
              m.status, m.received_at
         from channel_messages m
        where p.linked and m.tenant_id = $1 and m.user_id = p.key
        order by m.received_at desc limit 1)
      union all
      (select m.id, m.platform, m.platform_user_id, m.request_content, m.response_content,
              m.status, m.received_at
         from channel_messages m
        where not p.linked and m.tenant_id = $1 and m.user_id is null and m.conversation_key = p.key
        order by m.received_at desc limit 1)
  ) latest
  cross join lateral (
      select count(*) as turns from (
          (select 1 from channel_messages m
            where p.linked and m.tenant_id = $1 and m.user_id = p.key limit $7)
          union all
          (select 1 from channel_messages m
            where not p.linked and m.tenant_id = $1 and m.user_id is null
              and m.conversation_key = p.key limit $7)
      ) c
  ) counted
  cross join lateral (
      select count(*) as linked_accounts from channel_links l
       where p.linked and l.tenant_id = $1 and l.user_id = p.key
  ) accounts
 order by p.linked desc, p.key";

/// At most `limit` conversations from `from` on, in the order of the module doc.
pub async fn page(
    tx: &mut TenantTx,
    from: &PageStart,
    limit: i64,
) -> Result<Vec<ConversationRow>, sqlx::Error> {
    let tenant = tx.tenant();
    let (walk_users, user_from, inclusive, sender_after) = match from {
        PageStart::Start => (true, "", true, ""),
        PageStart::User { user_id, inclusive } => (true, user_id.as_str(), *inclusive, ""),
        PageStart::Sender { after } => (false, "", true, after.as_str()),
    };
    sqlx::query_as(PAGE_SQL)
        .bind(tenant)
        .bind(user_from)
        .bind(inclusive)
        .bind(walk_users)
        .bind(sender_after)
        .bind(limit)
        .bind(COUNT_CAP)
        .fetch_all(tx.conn())
        .await
}
