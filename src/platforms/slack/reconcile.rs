//! An interrupted Slack send (a part left `sending`), settled within Slack's limits
//! (docs/delivery.md#delivery-guarantees, "Slack, within its limits").
//!
//! The `message_metadata_posted` event is the main path; reading the thread is the fallback,
//! since `conversations.replies` allows a non-Marketplace app one request a minute
//! (<https://docs.slack.dev/apis/web-api/rate-limits>). A part is resent only when absent
//! from every page; a thread that cannot be read makes it `unknown`.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::PgPool;

use super::thread::{self, ThreadPage, ThreadPageQuery};
use crate::db::parts::ReplyPart;
use crate::db::{replies, slack_budget, TenantTx};
use crate::platforms::contract::{Pending, Reconciled};
use crate::retry::{part_backoff, window_left};
use crate::settings::DispatchSettings;

/// How far before the `sending` mark the read starts: room for our clock and Slack's to differ.
const OLDEST_MARGIN: chrono::Duration = chrono::Duration::seconds(60);

/// Most pages one pass reads even when the budget allows more; the next pass resumes.
const MAX_PAGES_PER_PASS: usize = 20;

/// Longest wait inside the confirmation window: an event that arrives while the job is still
/// leased cannot wake it, so it is noticed this soon (no request to Slack).
const WINDOW_RECHECK: Duration = Duration::from_secs(15);

const MIN_WAIT: Duration = Duration::from_millis(200);

const AWAITING_EVENT: &str = "send interrupted; waiting for Slack's message_metadata_posted confirmation";
const BUDGET_SPENT: &str =
    "send interrupted; reading the thread waits for the workspace's conversations.replies budget";

enum Cursor {
    /// Not read from the database yet.
    Unread,
    /// As saved: the next page to read (`None`: the first).
    Saved(Option<String>),
    /// Reached in this pass, not saved yet.
    Reached(String),
}

impl Cursor {
    fn page(&self) -> Option<&str> {
        match self {
            Cursor::Unread | Cursor::Saved(None) => None,
            Cursor::Saved(Some(cursor)) | Cursor::Reached(cursor) => Some(cursor),
        }
    }
}

/// Whether the part in doubt was posted, as far as this pass can tell.
pub(super) async fn reconcile(pending: &Pending<'_>, part: &ReplyPart) -> anyhow::Result<Reconciled> {
    let search = ThreadSearch {
        pool: pending.pool,
        client: pending.client,
        settings: pending.settings,
    };
    search.reconcile(pending, part).await
}

struct ThreadSearch<'a> {
    pub pool: &'a PgPool,
    pub client: &'a crate::egress::GuardedClient,
    pub settings: &'a DispatchSettings,
}

impl ThreadSearch<'_> {
    async fn reconcile(&self, outgoing: &Pending<'_>, part: &ReplyPart) -> anyhow::Result<Reconciled> {
        let now = Utc::now();
        let mark = part.sending_since.unwrap_or(now);
        let window = Duration::from_secs(self.settings.slack_confirm_secs);
        if let Some(left) = window_left(window, mark, now) {
            return Ok(Reconciled::Later(left.min(WINDOW_RECHECK), AWAITING_EVENT.into()));
        }
        let key = replies::part_key(outgoing.message.id, part.part_index);
        let oldest = slack_ts(mark - OLDEST_MARGIN);
        let mut cursor = Cursor::Unread;
        for _ in 0..MAX_PAGES_PER_PASS {
            if let Some(wait) = self.before_request(outgoing, part, mark, &mut cursor).await? {
                return Ok(Reconciled::Later(wait.max(MIN_WAIT), BUDGET_SPENT.into()));
            }
            let query = ThreadPageQuery {
                connector: outgoing.connector,
                message: outgoing.message,
                part_key: &key,
                oldest: &oldest,
                cursor: cursor.page(),
            };
            let page = thread::thread_page(self.client, &query).await;
            metrics::counter!("channel_bridge_slack_thread_reads_total", "result" => page_result(&page))
                .increment(1);
            match page {
                ThreadPage::Found(ts) => return Ok(Reconciled::Found(ts)),
                ThreadPage::NotHere { next_cursor: None } => return Ok(Reconciled::Absent),
                ThreadPage::NotHere {
                    next_cursor: Some(next),
                } => cursor = Cursor::Reached(next),
                ThreadPage::RateLimited(retry_after) => {
                    return self.rate_limited(outgoing, retry_after).await
                }
                ThreadPage::CursorInvalid => {
                    self.save_cursor(outgoing, part, mark, None).await?;
                    return Ok(Reconciled::Later(
                        MIN_WAIT,
                        "slack: invalid_cursor; search restarts".into(),
                    ));
                }
                ThreadPage::Refused(error) => {
                    let error =
                        format!("send interrupted and the thread cannot be read ({error}); not resent");
                    return Ok(Reconciled::Unknowable(error));
                }
                ThreadPage::Failed(error) => {
                    tracing::warn!(%error, part = part.part_index, "cannot read the Slack thread yet");
                    let delay = part_backoff(self.settings, part.attempts.max(1));
                    return Ok(Reconciled::Later(delay, error));
                }
            }
        }
        if let Cursor::Reached(next) = &cursor {
            self.save_cursor(outgoing, part, mark, Some(next)).await?;
        }
        Ok(Reconciled::Later(MIN_WAIT, "thread search continues".into()))
    }

    /// Before each request, in one transaction: save (or first read) the cursor, then take the
    /// workspace's budget. Returns how long to wait when it is spent.
    async fn before_request(
        &self,
        outgoing: &Pending<'_>,
        part: &ReplyPart,
        mark: DateTime<Utc>,
        cursor: &mut Cursor,
    ) -> anyhow::Result<Option<Duration>> {
        let message = outgoing.message.id;
        let mut tx = TenantTx::begin(self.pool, outgoing.connector.tenant_id).await?;
        match std::mem::replace(cursor, Cursor::Unread) {
            Cursor::Unread => {
                *cursor =
                    Cursor::Saved(replies::search_cursor(&mut tx, message, part.part_index, mark).await?)
            }
            Cursor::Reached(next) => {
                replies::save_search_cursor(&mut tx, message, part.part_index, mark, Some(&next)).await?;
                *cursor = Cursor::Saved(Some(next));
            }
            saved @ Cursor::Saved(_) => *cursor = saved,
        }
        let interval = Duration::from_millis(self.settings.slack_read_interval_ms);
        let wait = slack_budget::take(&mut tx, &workspace(outgoing), interval).await?;
        tx.commit().await?;
        Ok(wait)
    }

    async fn save_cursor(
        &self,
        outgoing: &Pending<'_>,
        part: &ReplyPart,
        mark: DateTime<Utc>,
        cursor: Option<&str>,
    ) -> anyhow::Result<()> {
        let mut tx = TenantTx::begin(self.pool, outgoing.connector.tenant_id).await?;
        replies::save_search_cursor(&mut tx, outgoing.message.id, part.part_index, mark, cursor).await?;
        tx.commit().await?;
        Ok(())
    }

    /// A 429 holds the whole workspace off for its `Retry-After` (or one interval).
    async fn rate_limited(
        &self,
        outgoing: &Pending<'_>,
        retry_after: Option<Duration>,
    ) -> anyhow::Result<Reconciled> {
        let interval = Duration::from_millis(self.settings.slack_read_interval_ms);
        let delay = retry_after
            .unwrap_or(interval)
            .min(Duration::from_millis(self.settings.retry_max_ms))
            .max(MIN_WAIT);
        let mut tx = TenantTx::begin(self.pool, outgoing.connector.tenant_id).await?;
        slack_budget::hold_off(&mut tx, &workspace(outgoing), delay).await?;
        tx.commit().await?;
        Ok(Reconciled::Later(
            delay,
            "slack conversations.replies: rate limited".into(),
        ))
    }
}

/// The budget's key: the team id, or the connector itself when it names none.
fn workspace(outgoing: &Pending<'_>) -> String {
    let connector = &outgoing.connector;
    connector
        .profile
        .external_id
        .clone()
        .filter(|team| !team.is_empty())
        .unwrap_or_else(|| connector.id.to_string())
}

fn slack_ts(at: DateTime<Utc>) -> String {
    format!("{}.{:06}", at.timestamp(), at.timestamp_subsec_micros())
}

fn page_result(page: &ThreadPage) -> &'static str {
    match page {
        ThreadPage::Found(_) => "found",
        ThreadPage::NotHere { next_cursor: None } => "absent",
        ThreadPage::NotHere { .. } => "next_page",
        ThreadPage::RateLimited(_) => "rate_limited",
        ThreadPage::CursorInvalid => "invalid_cursor",
        ThreadPage::Refused(_) => "refused",
        ThreadPage::Failed(_) => "failed",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_written_as_slack_timestamps() {
        let at = DateTime::from_timestamp(1_718_000_000, 1_500_000).expect("valid time");
        assert_eq!(slack_ts(at), "1718000000.001500");
        assert_eq!(slack_ts(at - OLDEST_MARGIN), "1717999940.001500");
    }
}
