//! `conversation_holds` (tenant table, RLS): the conversations a person holds, whose user
//! turns are recorded but not dispatched (docs/console.md#human-handoff).

use super::TenantTx;
use crate::domain::TenantId;

/// A held conversation.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct Hold {
    /// `user:<user id>` for a linked user, `sender:<connector id>:<platform user id>` for an
    /// unlinked sender: the conversation's id in the API's paths.
    pub conversation: String,
    pub user_id: Option<String>,
    /// The name of the key that took it over, or `agent` when the agent asked for a person.
    pub held_by: String,
    pub by_agent: bool,
    /// What the agent gave as its reason (or the person typed).
    pub reason: Option<String>,
    pub held_at: chrono::DateTime<chrono::Utc>,
}

/// A hold with the conversation's latest turn, for the held list.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct HeldConversation {
    #[sqlx(flatten)]
    pub hold: Hold,
    pub last_turn_at: Option<chrono::DateTime<chrono::Utc>>,
    /// The latest turn is the user's and nobody has answered it yet.
    pub waiting: bool,
}

#[derive(Debug, Clone)]
pub struct NewHold<'a> {
    pub conversation: &'a str,
    pub user_id: Option<&'a str>,
    pub held_by: &'a str,
    pub by_agent: bool,
    pub reason: Option<&'a str>,
}

const HOLD_COLUMNS: &str = "conversation_key as conversation, user_id, held_by, by_agent, reason, held_at";

/// `false`: the conversation was already held (the first hold stays).
pub async fn take(tx: &mut TenantTx, hold: &NewHold<'_>) -> Result<bool, sqlx::Error> {
    let taken: Option<bool> = sqlx::query_scalar(
        "insert into conversation_holds (tenant_id, conversation_key, user_id, held_by, by_agent, reason)
         values ($1, $2, $3, $4, $5, $6)
         on conflict (tenant_id, conversation_key) do nothing
         returning true",
    )
    .bind(tx.tenant())
    .bind(hold.conversation)
    .bind(hold.user_id)
    .bind(hold.held_by)
    .bind(hold.by_agent)
    .bind(hold.reason)
    .fetch_optional(tx.conn())
    .await?;
    Ok(taken.unwrap_or(false))
}

pub async fn release(tx: &mut TenantTx, conversation: &str) -> Result<Option<Hold>, sqlx::Error> {
    sqlx::query_as(&format!(
        "delete from conversation_holds where tenant_id = $1 and conversation_key = $2
         returning {HOLD_COLUMNS}"
    ))
    .bind(tx.tenant())
    .bind(conversation)
    .fetch_optional(tx.conn())
    .await
}

pub async fn get(tx: &mut TenantTx, conversation: &str) -> Result<Option<Hold>, sqlx::Error> {
    sqlx::query_as(&format!(
        "select {HOLD_COLUMNS} from conversation_holds where tenant_id = $1 and conversation_key = $2"
    ))
    .bind(tx.tenant())
    .bind(conversation)
    .fetch_optional(tx.conn())
    .await
}

/// Oldest hold first, at most `limit`; each with its conversation's latest turn, read on the
/// history index its kind of conversation has.
pub async fn list(tx: &mut TenantTx, limit: i64) -> Result<Vec<HeldConversation>, sqlx::Error> {
    sqlx::query_as(
        "select h.conversation_key as conversation, h.user_id, h.held_by, h.by_agent, h.reason,
                h.held_at, t.received_at as last_turn_at,
                coalesce(t.origin = 'user' and t.status = 'held', false) as waiting
           from conversation_holds h
           left join lateral (
                 select m.received_at, m.origin, m.status from channel_messages m
                  where m.tenant_id = h.tenant_id and m.user_id = h.user_id
                  order by m.received_at desc, m.id desc limit 1) u on h.user_id is not null
           left join lateral (
                 select m.received_at, m.origin, m.status from channel_messages m
                  where m.tenant_id = h.tenant_id and m.user_id is null
                    and m.conversation_key = h.conversation_key
                  order by m.received_at desc, m.id desc limit 1) s on h.user_id is null
           cross join lateral (
                 select coalesce(u.received_at, s.received_at) as received_at,
                        coalesce(u.origin, s.origin) as origin,
                        coalesce(u.status, s.status) as status) t
          where h.tenant_id = $1
          order by h.held_at, h.conversation_key
          limit $2",
    )
    .bind(tx.tenant())
    .bind(limit)
    .fetch_all(tx.conn())
    .await
}

/// Holds the tenant's return time has run out on: the conversation's latest turn is a held
/// user turn older than `return_after`. Both kinds of conversation, oldest hold first.
pub async fn expired(
    tx: &mut TenantTx,
    return_after: chrono::DateTime<chrono::Utc>,
    limit: i64,
) -> Result<Vec<String>, sqlx::Error> {
    let held = list(tx, limit).await?;
    Ok(held
        .into_iter()
        .filter(|h| h.waiting && h.last_turn_at.is_some_and(|at| at < return_after))
        .map(|h| h.hold.conversation)
        .collect())
}

/// `None`: held conversations stay held (the default), or an unknown tenant.
pub async fn return_secs(
    conn: &mut sqlx::PgConnection,
    tenant: TenantId,
) -> Result<Option<i32>, sqlx::Error> {
    let secs: Option<Option<i32>> =
        sqlx::query_scalar("select handoff_return_secs from tenants where id = $1")
            .bind(tenant)
            .fetch_optional(conn)
            .await?;
    Ok(secs.flatten())
}

pub async fn set_return_secs(
    conn: &mut sqlx::PgConnection,
    tenant: TenantId,
    secs: Option<i32>,
) -> Result<(), sqlx::Error> {
    sqlx::query("update tenants set handoff_return_secs = $2, updated_at = now() where id = $1")
        .bind(tenant)
        .bind(secs)
        .execute(conn)
        .await?;
    Ok(())
}

pub async fn tenants_with_return(conn: &mut sqlx::PgConnection) -> Result<Vec<(TenantId, i32)>, sqlx::Error> {
    sqlx::query_as(
        "select id, handoff_return_secs from tenants where handoff_return_secs is not null order by id",
    )
    .fetch_all(conn)
    .await
}
