//! The console overview's figures: a tenant's last 24 hours, hour by hour, in one statement,
//! and the feedback on that day's answers in a second. The first reads every row of the
//! window (through `channel_messages_recent_idx`), so its cost grows with the tenant's
//! traffic in 24 hours: docs/console.md#overview gives the figure.

use chrono::{DateTime, DurationRound, TimeDelta, Utc};

use super::TenantTx;

/// Hours shown, the current (partial) one last.
pub const HOURS: usize = 24;

/// One hour's figures, or the whole window's (`Overview::total`).
#[derive(Debug, Clone, Default, PartialEq, sqlx::FromRow)]
pub struct Figures {
    /// User turns received.
    pub turns: i64,
    /// User turns the agent answered with text (delivered or not).
    pub answers: i64,
    /// Turns that failed to dispatch or to deliver.
    pub failures: i64,
    /// Turns recorded while a person held the conversation.
    pub held: i64,
    /// The agent's answer time, over the turns that have one.
    pub median_ms: Option<f64>,
    pub p95_ms: Option<f64>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Hour {
    /// The hour's start (UTC).
    pub start: DateTime<Utc>,
    pub figures: Figures,
}

/// People's reactions to the agent's answers to the window's turns (the turns `answers`
/// counts), each person's current one: a reaction given later to a turn of the window counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, sqlx::FromRow)]
pub struct Feedback {
    /// Answers with at least one 👍 or 👎.
    pub rated: i64,
    /// 👍 (in any spelling) on those answers, one per person and answer.
    pub positive: i64,
    /// 👎, likewise.
    pub negative: i64,
}

impl Feedback {
    /// 👍 among 👍 and 👎, in percent; none without either.
    pub fn positive_share(&self) -> Option<f64> {
        let rated = self.positive + self.negative;
        (rated > 0).then(|| 100.0 * self.positive as f64 / rated as f64)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Overview {
    /// `HOURS` hours, oldest first; an hour without turns is all zeros.
    pub hours: Vec<Hour>,
    pub total: Figures,
    pub feedback: Feedback,
}

#[derive(sqlx::FromRow)]
struct Row {
    /// NULL on the window's total row.
    hour: Option<DateTime<Utc>>,
    #[sqlx(flatten)]
    figures: Figures,
}

/// `$2` is the window's first hour (UTC, from `window_start`). The aggregate runs in a CTE of
/// its own (a router query on Citus, routed by `tenant_id`); the empty hours come from
/// `generate_series` outside it. Hours are binned from a UTC origin, whatever the session's
/// time zone. The inner select (kept apart by `offset 0`) narrows each row to a few flags
/// before the sort by hour, which would otherwise carry the answers' text; `octet_length`
/// reads a toasted answer's size from its header without fetching it. The `()` grouping set
/// is the window's total: percentiles over all of its turns, not over the hours'.
/// Ordered-set aggregates skip NULLs, so turns without `agent_ms` do not count in them.
const OVERVIEW_SQL: &str = "
with counted as (
    select t.hour,
           count(*) filter (where t.from_user) as turns,
           count(*) filter (where t.answered) as answers,
           count(*) filter (where t.failed) as failures,
           count(*) filter (where t.held) as held,
           percentile_cont(0.5) within group (order by t.agent_ms) as median_ms,
           percentile_cont(0.95) within group (order by t.agent_ms) as p95_ms
      from (select date_bin('1 hour', m.received_at, timestamptz '2000-01-01 00:00:00+00') as hour,
                   m.origin = 'user' as from_user,
                   m.origin = 'user' and m.status in ('executed', 'delivery_failed')
                       and octet_length(m.response_content) > 0 as answered,
                   m.status in ('dispatch_failed', 'delivery_failed') as failed,
                   m.status = 'held' as held,
                   m.agent_ms
              from channel_messages m
             where m.tenant_id = $1
               and m.received_at >= $2
               and m.received_at < $2 + interval '24 hours'
            offset 0) t
     group by grouping sets ((1), ())
)
select h.hour,
       coalesce(c.turns, 0) as turns, coalesce(c.answers, 0) as answers,
       coalesce(c.failures, 0) as failures, coalesce(c.held, 0) as held,
       c.median_ms, c.p95_ms
  from generate_series($2, $2 + interval '23 hours', interval '1 hour') as h(hour)
  left join counted c on c.hour = h.hour
union all
select null, turns, answers, failures, held, median_ms, p95_ms
  from counted where hour is null
 order by 1 nulls last";

/// `$2` as in `OVERVIEW_SQL`. Reactions are few beside turns: the tenant's 👍 and 👎 are
/// joined to their turns by primary key and kept when the turn is one of the window's user
/// turns. Both tables carry `tenant_id` in the join, so Citus routes it to one shard.
const FEEDBACK_SQL: &str = "
select count(distinct r.message_id) as rated,
       count(*) filter (where r.value = 1) as positive,
       count(*) filter (where r.value = -1) as negative
  from channel_reactions r
  join channel_messages m on m.tenant_id = r.tenant_id and m.id = r.message_id
 where r.tenant_id = $1 and m.tenant_id = $1 and r.value <> 0
   and m.origin = 'user'
   and m.received_at >= $2
   and m.received_at < $2 + interval '24 hours'";

/// The first of the `HOURS` hours whose last holds `now`.
pub fn window_start(now: DateTime<Utc>) -> DateTime<Utc> {
    let hour = now.duration_trunc(TimeDelta::hours(1)).unwrap_or(now);
    hour - TimeDelta::hours(HOURS as i64 - 1)
}

/// The 24 hours up to the one that holds `now`, in the transaction's tenant.
pub async fn last_day(tx: &mut TenantTx, now: DateTime<Utc>) -> Result<Overview, sqlx::Error> {
    let tenant = tx.tenant();
    let rows: Vec<Row> = sqlx::query_as(OVERVIEW_SQL)
        .bind(tenant)
        .bind(window_start(now))
        .fetch_all(tx.conn())
        .await?;
    let feedback = sqlx::query_as(FEEDBACK_SQL)
        .bind(tenant)
        .bind(window_start(now))
        .fetch_one(tx.conn())
        .await?;
    let mut hours = Vec::with_capacity(HOURS);
    let mut total = Figures::default();
    for row in rows {
        match row.hour {
            Some(start) => hours.push(Hour {
                start,
                figures: row.figures,
            }),
            None => total = row.figures,
        }
    }
    Ok(Overview {
        hours,
        total,
        feedback,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_is_the_23_whole_hours_before_nows_hour_and_that_hour() {
        let at = |text: &str| text.parse::<DateTime<Utc>>().unwrap();
        assert_eq!(
            window_start(at("2026-03-10T09:41:07.5Z")),
            at("2026-03-09T10:00:00Z")
        );
        assert_eq!(
            window_start(at("2026-03-10T00:00:00Z")),
            at("2026-03-09T01:00:00Z")
        );
    }
}
