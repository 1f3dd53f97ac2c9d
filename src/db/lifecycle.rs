//! The data lifecycle's statements (docs/admin.md#data-lifecycle-retention-erasure-export-audit):
//! retention, erasure and export reads. The rules live in `crate::lifecycle`.

use sqlx::{PgConnection, Postgres, QueryBuilder};

use super::messages::{MessageRow, MESSAGE_COLUMNS};
use super::parts::ReplyPart;
use super::reactions::ReactionOut;
use super::{queue, TenantTx};
use crate::domain::{MessageId, Platform, TenantId};

/// A tenant user (with what their accounts sent before being linked), or one platform
/// account (every turn it sent, linked or not).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Person {
    User(String),
    Sender {
        platform: Platform,
        platform_user_id: String,
    },
}

impl Person {
    /// `user:<id>` or `<platform>:<platform user id>`.
    pub fn target(&self) -> String {
        match self {
            Person::User(user) => format!("user:{user}"),
            Person::Sender {
                platform,
                platform_user_id,
            } => format!("{platform}:{platform_user_id}"),
        }
    }
}

/// A user's turns include those a linked account sent while unlinked (`user_id` null); a
/// turn recorded under another user's id is that user's.
fn push_person(sql: &mut QueryBuilder<'_, Postgres>, tenant: TenantId, person: &Person) {
    match person {
        Person::User(user) => {
            sql.push(" and (m.user_id = ")
                .push_bind(user.clone())
                .push(
                    " or (m.user_id is null and (m.platform, m.platform_user_id) in
                       (select l.platform, l.platform_user_id from channel_links l
                         where l.tenant_id = ",
                )
                .push_bind(tenant)
                .push(" and l.user_id = ")
                .push_bind(user.clone())
                .push(")))");
        }
        Person::Sender {
            platform,
            platform_user_id,
        } => {
            sql.push(" and m.platform_user_id = ")
                .push_bind(platform_user_id.clone())
                .push(" and m.platform = ")
                .push_bind(platform.as_str());
        }
    }
}

/// `None`: kept for ever, or an unknown tenant.
pub async fn retention_days(conn: &mut PgConnection, tenant: TenantId) -> Result<Option<i32>, sqlx::Error> {
    let days: Option<Option<i32>> = sqlx::query_scalar("select retention_days from tenants where id = $1")
        .bind(tenant)
        .fetch_optional(conn)
        .await?;
    Ok(days.flatten())
}

pub async fn set_retention_days(
    conn: &mut PgConnection,
    tenant: TenantId,
    days: Option<i32>,
) -> Result<bool, sqlx::Error> {
    let done = sqlx::query("update tenants set retention_days = $2, updated_at = now() where id = $1")
        .bind(tenant)
        .bind(days)
        .execute(conn)
        .await?;
    Ok(done.rows_affected() == 1)
}

pub async fn tenants_with_retention(conn: &mut PgConnection) -> Result<Vec<(TenantId, i32)>, sqlx::Error> {
    sqlx::query_as("select id, retention_days from tenants where retention_days is not null order by id")
        .fetch_all(conn)
        .await
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Purged {
    pub turns: u64,
    pub reply_parts: u64,
}

/// Leaves every turn in flight (unfinished, with a job, or a part `pending`/`sending`).
/// Locked rows are skipped, not waited for: the next pass takes them.
pub async fn purge_turns(
    tx: &mut TenantTx,
    cutoff: chrono::DateTime<chrono::Utc>,
    limit: i64,
) -> Result<Purged, sqlx::Error> {
    let tenant = tx.tenant();
    let (doomed, _) = queue::without_jobs(tx, limit, |seen, need| {
        let mut sql = QueryBuilder::new("select m.id from channel_messages m where m.tenant_id = ");
        sql.push_bind(tenant)
            .push(" and m.received_at < ")
            .push_bind(cutoff)
            .push(
                " and m.status not in ('accepted', 'dispatching')
                  and not exists (select 1 from channel_replies r
                                   where r.tenant_id = m.tenant_id and r.message_id = m.id
                                     and r.status in ('pending', 'sending'))
                  and m.id <> all(",
            )
            .push_bind(seen.to_vec())
            .push(") order by m.received_at, m.id limit ")
            .push_bind(need)
            .push(" for update of m skip locked");
        sql
    })
    .await?;
    if doomed.is_empty() {
        return Ok(Purged::default());
    }
    let (turns, reply_parts): (i64, i64) = sqlx::query_as(
        "with parts as (
             delete from channel_replies where tenant_id = $1 and message_id = any($2) returning 1),
         turns as (
             delete from channel_messages where tenant_id = $1 and id = any($2) returning 1)
         select (select count(*) from turns), (select count(*) from parts)",
    )
    .bind(tenant)
    .bind(&doomed)
    .fetch_one(tx.conn())
    .await?;
    Ok(Purged {
        turns: turns.unsigned_abs(),
        reply_parts: reply_parts.unsigned_abs(),
    })
}

/// Notice marks only matter for today's "once a day".
pub async fn purge_notices(
    tx: &mut TenantTx,
    cutoff: chrono::NaiveDate,
    limit: i64,
) -> Result<u64, sqlx::Error> {
    let tenant = tx.tenant();
    let done = sqlx::query(
        "delete from channel_notices n
          where n.tenant_id = $1
            and (n.connector_id, n.platform_user_id, n.day) in
                (select o.connector_id, o.platform_user_id, o.day from channel_notices o
                  where o.tenant_id = $1 and o.day < $2 limit $3)",
    )
    .bind(tenant)
    .bind(cutoff)
    .bind(limit)
    .execute(tx.conn())
    .await?;
    Ok(done.rows_affected())
}

/// What an erasure deleted, by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Erased {
    /// The person's turns (`channel_messages`), on every platform.
    pub turns: u64,
    /// The reply parts of those turns.
    pub reply_parts: u64,
    /// Queued or running jobs of those turns (a reply in flight is not posted after this).
    pub jobs: u64,
    pub links: u64,
    /// The once-a-day marks of notices posted to the person's accounts while unlinked.
    pub notices: u64,
    /// The person's reactions to answers given to others (in a shared chat); those on
    /// their own turns go with the turns.
    pub reactions: u64,
}

/// In the caller's transaction; nobody else's rows. The Slack read budget is per
/// workspace, not per person, and stays.
pub async fn erase(tx: &mut TenantTx, person: &Person) -> Result<Erased, sqlx::Error> {
    let tenant = tx.tenant();
    let mut select = QueryBuilder::new(
        "select m.id, m.platform, m.platform_user_id from channel_messages m where m.tenant_id = ",
    );
    select.push_bind(tenant);
    push_person(&mut select, tenant, person);
    select.push(" for update of m");
    let turns: Vec<(MessageId, String, String)> = select.build_query_as().fetch_all(tx.conn()).await?;
    let ids: Vec<MessageId> = turns.iter().map(|(id, ..)| *id).collect();
    let mut senders: Vec<(String, String)> = turns.into_iter().map(|(_, p, s)| (p, s)).collect();
    senders.extend(accounts(tx, person).await?);
    senders.sort();
    senders.dedup();

    let jobs = delete_by_ids(
        tx,
        "delete from dispatch_queue where message_id = any($2) and tenant_id is not distinct from $1",
        &ids,
    )
    .await?;
    let reply_parts = delete_by_ids(
        tx,
        "delete from channel_replies where tenant_id = $1 and message_id = any($2)",
        &ids,
    )
    .await?;
    let turns = delete_by_ids(
        tx,
        "delete from channel_messages where tenant_id = $1 and id = any($2)",
        &ids,
    )
    .await?;
    let links = delete_links(tx, person).await?;
    let notices = delete_notices(tx, &senders).await?;
    let reactions = delete_reactions(tx, &senders).await?;
    Ok(Erased {
        turns,
        reply_parts,
        jobs,
        links,
        notices,
        reactions,
    })
}

async fn accounts(tx: &mut TenantTx, person: &Person) -> Result<Vec<(String, String)>, sqlx::Error> {
    let tenant = tx.tenant();
    match person {
        Person::User(user) => {
            sqlx::query_as(
                "select platform, platform_user_id from channel_links where tenant_id = $1 and user_id = $2",
            )
            .bind(tenant)
            .bind(user)
            .fetch_all(tx.conn())
            .await
        }
        Person::Sender {
            platform,
            platform_user_id,
        } => Ok(vec![(platform.as_str().to_owned(), platform_user_id.clone())]),
    }
}

async fn delete_by_ids(tx: &mut TenantTx, sql: &'static str, ids: &[MessageId]) -> Result<u64, sqlx::Error> {
    let tenant = tx.tenant();
    let done = sqlx::query(sql).bind(tenant).bind(ids).execute(tx.conn()).await?;
    Ok(done.rows_affected())
}

async fn delete_links(tx: &mut TenantTx, person: &Person) -> Result<u64, sqlx::Error> {
    let tenant = tx.tenant();
    let done =
        match person {
            Person::User(user) => {
                sqlx::query("delete from channel_links where tenant_id = $1 and user_id = $2")
                    .bind(tenant)
                    .bind(user)
                    .execute(tx.conn())
                    .await?
            }
            Person::Sender {
                platform,
                platform_user_id,
            } => sqlx::query(
                "delete from channel_links where tenant_id = $1 and platform = $2 and platform_user_id = $3",
            )
            .bind(tenant)
            .bind(platform.as_str())
            .bind(platform_user_id)
            .execute(tx.conn())
            .await?,
        };
    Ok(done.rows_affected())
}

/// Notice marks are kept per connector: those of every connector of each account's platform.
async fn delete_notices(tx: &mut TenantTx, senders: &[(String, String)]) -> Result<u64, sqlx::Error> {
    let sql = "delete from channel_notices n using channel_connectors c
          where n.tenant_id = $1 and c.tenant_id = $1 and c.id = n.connector_id
            and (c.platform, n.platform_user_id) in";
    delete_of_senders(tx, sql, senders).await
}

/// Those the person left on answers to others; those on their own turns went with them.
async fn delete_reactions(tx: &mut TenantTx, senders: &[(String, String)]) -> Result<u64, sqlx::Error> {
    let sql = "delete from channel_reactions r using channel_messages m
          where r.tenant_id = $1 and m.tenant_id = $1 and m.id = r.message_id
            and (m.platform, r.platform_user_id) in";
    delete_of_senders(tx, sql, senders).await
}

/// `delete`, ending in `(platform, platform user id) in`, for these senders' accounts.
async fn delete_of_senders(
    tx: &mut TenantTx,
    delete: &str,
    senders: &[(String, String)],
) -> Result<u64, sqlx::Error> {
    let tenant = tx.tenant();
    let (platforms, ids): (Vec<String>, Vec<String>) = senders.iter().cloned().unzip();
    let sql = format!(
        "{delete} (select s.platform, s.platform_user_id from unnest($2::text[], $3::text[])
                      as s(platform, platform_user_id))"
    );
    let done = sqlx::query(&sql)
        .bind(tenant)
        .bind(&platforms)
        .bind(&ids)
        .execute(tx.conn())
        .await?;
    Ok(done.rows_affected())
}

/// Oldest first, after `after`; no `people`: every turn of the tenant.
pub async fn export_page(
    tx: &mut TenantTx,
    people: &[Person],
    after: Option<(chrono::DateTime<chrono::Utc>, MessageId)>,
    limit: i64,
) -> Result<Vec<(MessageRow, Vec<ReplyPart>, Vec<ReactionOut>)>, sqlx::Error> {
    let tenant = tx.tenant();
    let mut sql = QueryBuilder::new(format!(
        "select {MESSAGE_COLUMNS} from channel_messages m where m.tenant_id = "
    ));
    sql.push_bind(tenant);
    for person in people {
        push_person(&mut sql, tenant, person);
    }
    if let Some((received_at, id)) = after {
        sql.push(" and (m.received_at, m.id) > (")
            .push_bind(received_at)
            .push(", ")
            .push_bind(id)
            .push(")");
    }
    sql.push(" order by m.received_at, m.id limit ").push_bind(limit);
    let turns: Vec<MessageRow> = sql.build_query_as().fetch_all(tx.conn()).await?;
    let ids: Vec<MessageId> = turns.iter().map(|t| t.id).collect();
    let mut parts: std::collections::HashMap<MessageId, Vec<ReplyPart>> = Default::default();
    for (message, part) in super::parts::reply_parts_of(tx, &ids).await? {
        parts.entry(message).or_default().push(part);
    }
    let mut reactions: std::collections::HashMap<MessageId, Vec<ReactionOut>> = Default::default();
    for (message, reaction) in super::reactions::of_messages(tx, &ids).await? {
        reactions.entry(message).or_default().push(reaction);
    }
    Ok(turns
        .into_iter()
        .map(|turn| {
            let own = parts.remove(&turn.id).unwrap_or_default();
            let felt = reactions.remove(&turn.id).unwrap_or_default();
            (turn, own, felt)
        })
        .collect())
}
