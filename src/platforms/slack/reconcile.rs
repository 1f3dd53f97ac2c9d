//! An interrupted Slack send (a part left `sending`), settled within Slack's limits.
//!
//! Reading the thread cannot be the main path: for apps outside the Slack Marketplace,
//! `conversations.replies` allows one request a minute and 15 messages a page
//! (PLATFORMS.md §6). So, in this order:
//!
//! 1. **Push.** Every part is posted with metadata `{event_type: "channel_bridge_reply",
//!    event_payload: {part_key}}`, and Slack sends the app a `message_metadata_posted` event
//!    for it (the app subscribes to that event type in its manifest, README). Ingress turns
//!    the event into a confirmation (`db::replies::confirm_posted`): the part is recorded
//!    `sent` with the event's `message_ts` and its job is woken. A part in doubt waits for
//!    that event `CB_SLACK_CONFIRM_SECS` after its `sending` mark before anything else.
//! 2. **Fallback read.** Then the thread is read, 15 messages a page (`limit=15`), from just
//!    before the mark (`oldest` = mark − `OLDEST_MARGIN`, `inclusive`), so the first page
//!    usually holds the part, following `response_metadata.next_cursor` while `has_more`,
//!    looking for the part key in each message's metadata. Found: the part is recorded
//!    `sent` with that `ts`. Absent from every page: it certainly was not posted, and only
//!    then is it sent again (once: the resend is a new `sending` mark, which starts a new
//!    window and a new search).
//! 3. **Budget.** Each request first takes the workspace's budget (`db::slack_budget`: one
//!    request per `CB_SLACK_READ_INTERVAL_MS`, default a minute, kept in the database so
//!    every instance spends the same one; the workspace is the connector's team id, or the
//!    connector when it has none). A pass reads pages while the budget grants them at once
//!    (at most `MAX_PAGES_PER_PASS`); when it is spent, the job waits until it is due
//!    (`Reconciled::Later`) and the part is never resent meanwhile. A 429 holds the whole
//!    workspace off for its `Retry-After` (capped by `CB_RETRY_MAX_MS`).
//! 4. **Resuming.** When a pass stops before the last page, the next page's cursor is saved
//!    on the part together with the mark it belongs to (`db::replies::save_search_cursor`),
//!    and the next pass resumes there, so a long thread costs one request per page, never
//!    the first pages again. A cursor Slack no longer accepts (`invalid_cursor`) restarts the
//!    search from the first page.
//!
//! A thread that cannot be read for good (`missing_scope`, a revoked token, the channel or
//! thread gone) cannot say whether the part is there: the part is recorded `unknown`, never
//! resent, and the parts after it are still posted (as Telegram's at-most-once does).
//! Any other failed read waits a backoff and tries again.
//!
//! Limits: a confirmation that arrives while a pass is deciding to wait is applied at once
//! but cannot wake the job (it is still leased): inside the window the part is looked at
//! again every `WINDOW_RECHECK` at most, so such a turn goes on within 15 s. A message posted more than `OLDEST_MARGIN` before the mark (clocks that far apart) is
//! not found by the read; the confirmation event still finds it.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::PgPool;

use super::thread::{self, ThreadPage, ThreadPageQuery};
use crate::db::messages::ReplyPart;
use crate::db::{replies, slack_budget, TenantTx};
use crate::platforms::contract::{Pending, Reconciled};
use crate::retry::{part_backoff, window_left};
use crate::settings::DispatchSettings;

/// How far before the part's `sending` mark the read starts: room for the clocks of our
/// database and of Slack to disagree.
const OLDEST_MARGIN: chrono::Duration = chrono::Duration::seconds(60);

/// Most pages one pass reads, even when the budget would allow more (no budget in tests,
/// or a Marketplace app): a long thread goes on in the next pass, from its saved cursor.
const MAX_PAGES_PER_PASS: usize = 20;

/// Longest wait inside the confirmation window before the part is looked at again: an
/// event that arrives while a pass is deciding to wait (its job still leased, so the event
/// cannot wake it) is noticed this soon. Such a look costs no request to Slack.
const WINDOW_RECHECK: Duration = Duration::from_secs(15);

/// The shortest wait handed back to the queue.
const MIN_WAIT: Duration = Duration::from_millis(200);

const AWAITING_EVENT: &str = "send interrupted; waiting for Slack's message_metadata_posted confirmation";
const BUDGET_SPENT: &str =
    "send interrupted; reading the thread waits for the workspace's conversations.replies budget";

/// Where the search stands with its cursor.
enum Cursor {
    /// Not read from the database yet (the pass's first request).
    Unread,
    /// As saved: the next page to read (`None`: the first).
    Saved(Option<String>),
    /// Reached in this pass and not saved yet.
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

    /// One transaction before each request: the cursor reached is saved (a later pass
    /// resumes there) or, before the pass's first request, the saved one is read; then the
    /// workspace's budget is taken. Returns how long to wait when the budget is spent.
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

    /// Slack said 429: the whole workspace waits its `Retry-After` (or one interval).
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

/// The budget's key: the connector's workspace (team id), or the connector itself when it
/// names none.
fn workspace(outgoing: &Pending<'_>) -> String {
    let connector = &outgoing.connector;
    connector
        .external_id
        .clone()
        .filter(|team| !team.is_empty())
        .unwrap_or_else(|| connector.id.to_string())
}

/// A time in Slack's `ts` form: seconds and microseconds.
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
