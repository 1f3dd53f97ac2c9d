//! The typing indicator while the agent works on a turn (issue #14): from the claim until
//! the first reply part is about to be posted, each platform's own signal, refreshed before
//! it fades (PLATFORMS.md §6):
//! - Telegram: `sendChatAction` `typing` (with `message_thread_id` in a forum topic); it
//!   shows for 5 s or until the bot's next message: refreshed every `CB_TYPING_INTERVAL_MS`
//!   (4 s).
//! - WhatsApp: the read receipt of the user's message with `typing_indicator` (the message
//!   shows as read from then on); it shows for up to 25 s or until the reply: refreshed
//!   every 5 intervals (20 s).
//! - Slack: `assistant.threads.setStatus` ("is thinking…"), which only exists in assistant
//!   threads (Agents & AI Apps). A turn is taken for one as Bolt's `Assistant` middleware
//!   takes a message for one, from what ingress recorded: a `message` event (not
//!   `app_mention`) with `channel_type` `im`, in a thread (`thread_id`), without a subtype
//!   other than `file_share`. Elsewhere Slack offers no indicator and nothing is sent. The
//!   status goes when the app replies, and after 2 min without a message: refreshed every
//!   25 intervals (100 s), and cleared (empty status) when the turn ends without a reply.
//!
//! This file is the machinery; each platform's requests are its `typing.rs`
//! (`crate::platforms::telegram::typing`…) behind `crate::platforms::contract::TypingIndicator`.
//!
//! Best effort, never in the turn's way: the indicator runs in a task of its own, each
//! request with a short timeout (2 s, at most one interval), and nothing it meets (an error,
//! a timeout, the egress policy) reaches the turn; a refusal (4xx) stops its refreshes.
//! [`Typing::before_reply`] ends it before the first part is posted: it waits at most
//! [`REPLY_GRACE`] for a request already under way, so that no indicator lands after the
//! answer (a WhatsApp one would show for 25 s), and abandons it after that. Dropping the
//! handle (the turn ended any other way) ends it without waiting.
//!
//! Rate limit: one keyed GCRA limiter (`governor`) per instance lets at most one indicator
//! request per chat through per interval, across every turn of that chat in flight here (a
//! group's several senders); a request that must wait for its slot waits, rather than
//! being skipped, so the indicator does not lapse. "Chat" is where the indicator shows: the
//! chat, and the topic or thread in it (a Telegram forum topic and a Slack assistant thread
//! show their own).
//!
//! Nothing is logged with a URL or an answer's text: Telegram URLs hold the bot token.

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use reqwest::StatusCode;
use secrecy::{ExposeSecret, SecretString};
use serde_json::Value;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::db::messages::MessageRow;
use crate::domain::{Connector, ConnectorId, Platform};
use crate::egress::{GuardedClient, SendError};
use crate::platforms;
use crate::platforms::contract::{api_base, Place, Show};

/// Longest wait of one indicator request (and never more than one interval).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
/// Longest the first reply part waits for an indicator request under way.
pub const REPLY_GRACE: Duration = Duration::from_millis(300);
/// Turns started between two sweeps of the limiter's idle chats.
const SWEEP_EVERY: u64 = 1024;

/// Where an indicator shows: connector, chat, and topic or thread.
type ChatKey = (ConnectorId, String, Option<String>);

/// The instance's indicators: one HTTP client, one rate limiter.
pub struct Indicators {
    client: GuardedClient,
    interval: Duration,
    limiter: DefaultKeyedRateLimiter<ChatKey>,
    clock: DefaultClock,
    started: AtomicU64,
}

/// A running indicator; ends it when dropped.
pub struct Typing {
    stop: watch::Sender<Option<Ending>>,
    task: Option<JoinHandle<()>>,
}

/// How a turn's indicator ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ending {
    /// The first reply part is being posted (which clears every platform's indicator).
    Reply,
    /// No reply follows (agent failure, retry, empty answer, lost lease).
    NoReply,
}

/// What one indicator request came to (the `outcome` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Ok,
    /// The platform asked to slow down: this refresh is lost, the next one is tried.
    RateLimited,
    /// Refused (4xx, Slack `ok: false`): a repeat would be refused too; refreshes stop.
    Rejected,
    /// 5xx or an unreadable answer.
    Failed,
    Timeout,
    /// No connection, or the egress policy refused the URL.
    Unreachable,
}

impl Outcome {
    fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::RateLimited => "rate_limited",
            Self::Rejected => "rejected",
            Self::Failed => "failed",
            Self::Timeout => "timeout",
            Self::Unreachable => "unreachable",
        }
    }
}

/// One turn's indicator request, everything resolved from the connector and the message.
struct Target {
    platform: Platform,
    key: ChatKey,
    base_url: String,
    token: SecretString,
    place: Place,
}

impl Indicators {
    /// `interval`: Telegram's refresh and the least time between two requests for a chat.
    pub fn new(client: GuardedClient, interval: Duration) -> Self {
        let interval = interval.max(Duration::from_millis(1));
        let quota = Quota::with_period(interval)
            .unwrap_or_else(|| Quota::per_second(NonZeroU32::MIN))
            .allow_burst(NonZeroU32::MIN);
        Self {
            client,
            interval,
            limiter: RateLimiter::keyed(quota),
            clock: DefaultClock::default(),
            started: AtomicU64::new(0),
        }
    }

    /// Starts the indicator of a turn claimed at `claimed_at`, when its connector shows one
    /// and the platform has one for this chat.
    pub fn start(
        self: &Arc<Self>,
        connector: &Connector,
        message: &MessageRow,
        claimed_at: Instant,
    ) -> Option<Typing> {
        if !connector.typing_indicator {
            return None;
        }
        let target = Target::of(connector, message)?;
        if self.started.fetch_add(1, Ordering::Relaxed) % SWEEP_EVERY == SWEEP_EVERY - 1 {
            self.limiter.retain_recent();
        }
        let (stop, stopped) = watch::channel(None);
        let task = tokio::spawn(Arc::clone(self).run(target, claimed_at, stopped));
        Some(Typing {
            stop,
            task: Some(task),
        })
    }

    async fn run(
        self: Arc<Self>,
        target: Target,
        claimed_at: Instant,
        mut stop: watch::Receiver<Option<Ending>>,
    ) {
        let refresh = self
            .interval
            .checked_mul(target.refresh_intervals())
            .unwrap_or(Duration::MAX);
        let mut first = true;
        let mut refreshing = true;
        let mut shown = false;
        loop {
            if refreshing {
                if !self.wait_turn(&target.key, &mut stop).await {
                    break;
                }
                if std::mem::take(&mut first) {
                    metrics::histogram!("channel_bridge_typing_first_seconds")
                        .record(claimed_at.elapsed().as_secs_f64());
                }
                match self.send(&target, Show::Working).await {
                    Outcome::Ok => shown = true,
                    Outcome::Rejected => refreshing = false,
                    _ => {}
                }
            }
            let pause = if refreshing { refresh } else { Duration::MAX };
            tokio::select! {
                () = sleep(pause) => {}
                _ = stop.changed() => break,
            }
        }
        let ending = (*stop.borrow()).unwrap_or(Ending::NoReply);
        if ending == Ending::NoReply && shown && platforms::of(target.platform).typing_stays() {
            // The turn ends without the reply that would clear it.
            let clear = async {
                self.until_turn(&target.key).await;
                self.send(&target, Show::Nothing).await
            };
            let limit = self.interval.saturating_add(self.request_timeout());
            let _ = tokio::time::timeout(limit, clear).await;
        }
    }

    /// Waits until the chat's limiter lets a request through; `false` when the indicator is
    /// stopped meanwhile.
    async fn wait_turn(&self, key: &ChatKey, stop: &mut watch::Receiver<Option<Ending>>) -> bool {
        if stop.borrow().is_some() {
            return false;
        }
        tokio::select! {
            () = self.until_turn(key) => true,
            _ = stop.changed() => false,
        }
    }

    async fn until_turn(&self, key: &ChatKey) {
        while let Err(not_until) = self.limiter.check_key(key) {
            tokio::time::sleep(not_until.wait_time_from(self.clock.now())).await;
        }
    }

    fn request_timeout(&self) -> Duration {
        REQUEST_TIMEOUT.min(self.interval)
    }

    async fn send(&self, target: &Target, show: Show) -> Outcome {
        let request = target.request(&self.client, show);
        let exchange = async {
            let response = self.client.send(request).await?;
            let status = response.status();
            let body = response.json::<Value>().await.ok();
            Ok::<_, SendError>((status, body))
        };
        let outcome = match tokio::time::timeout(self.request_timeout(), exchange).await {
            Err(_) => Outcome::Timeout,
            Ok(Err(_)) => Outcome::Unreachable,
            Ok(Ok((status, body))) => classify(target.platform, status, body.as_ref()),
        };
        metrics::counter!(
            "channel_bridge_typing_requests_total",
            "platform" => target.platform.as_str(),
            "outcome" => outcome.as_str()
        )
        .increment(1);
        if outcome != Outcome::Ok {
            tracing::debug!(platform = %target.platform, outcome = outcome.as_str(), "typing indicator not shown");
        }
        outcome
    }
}

/// `tokio::time::sleep`, where `Duration::MAX` means "until stopped".
async fn sleep(pause: Duration) {
    match tokio::time::Instant::now().checked_add(pause) {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

impl Typing {
    /// The first reply part is about to be posted: no further indicator request is made,
    /// and one under way gets at most [`REPLY_GRACE`] to finish (then it is abandoned).
    pub async fn before_reply(mut self) {
        self.stop.send_replace(Some(Ending::Reply));
        if let Some(mut task) = self.task.take() {
            if tokio::time::timeout(REPLY_GRACE, &mut task).await.is_err() {
                task.abort();
            }
        }
    }
}

impl Typing {
    /// A streamed answer's preview is about to show (`super::live`): no further indicator
    /// request is made; one under way finishes in the background rather than delay the
    /// first text.
    pub fn end_for_preview(mut self) {
        self.stop.send_replace(Some(Ending::Reply));
        drop(self.task.take());
    }
}

impl Drop for Typing {
    /// The turn ended without a reply (or the reply path already stopped it): the task ends
    /// by itself (clearing a Slack status first), bounded by its own timeouts.
    fn drop(&mut self) {
        self.stop.send_if_modified(|ending| {
            let unset = ending.is_none();
            if unset {
                *ending = Some(Ending::NoReply);
            }
            unset
        });
    }
}

impl Target {
    /// The indicator request of `message`, or `None` where the platform has none (a Slack
    /// message outside an assistant thread) or it cannot be addressed.
    fn of(connector: &Connector, message: &MessageRow) -> Option<Self> {
        let token = connector.outbound_token.clone()?;
        let place = platforms::of(connector.platform).typing_place(connector, message)?;
        Some(Self {
            platform: connector.platform,
            key: (connector.id, message.chat_id.clone(), message.thread_id.clone()),
            base_url: api_base(connector).to_owned(),
            token,
            place,
        })
    }

    /// How many intervals the platform's indicator outlasts comfortably.
    fn refresh_intervals(&self) -> u32 {
        platforms::of(self.platform).typing_refresh_intervals()
    }

    fn request(&self, client: &GuardedClient, show: Show) -> reqwest::RequestBuilder {
        let token = self.token.expose_secret();
        platforms::of(self.platform).typing_request(client, &self.base_url, token, &self.place, show)
    }
}

fn classify(platform: Platform, status: StatusCode, body: Option<&Value>) -> Outcome {
    let platform = platforms::of(platform);
    if status == StatusCode::TOO_MANY_REQUESTS {
        return Outcome::RateLimited;
    }
    if status.is_success() && body.is_some_and(|b| platform.typing_shown(b)) {
        return Outcome::Ok;
    }
    let slack_error = body.and_then(|b| b["error"].as_str());
    if matches!(slack_error, Some("ratelimited" | "rate_limited")) {
        return Outcome::RateLimited;
    }
    if body.is_some_and(|b| platform.typing_slowed(b)) {
        return Outcome::RateLimited;
    }
    if status.is_client_error() || (status.is_success() && body.is_some_and(|b| platform.typing_refused(b))) {
        Outcome::Rejected
    } else {
        Outcome::Failed
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn indicator_answers_are_classified() {
        let ok = |platform, body: Value| classify(platform, StatusCode::OK, Some(&body));
        assert_eq!(
            ok(Platform::Telegram, json!({"ok": true, "result": true})),
            Outcome::Ok
        );
        assert_eq!(ok(Platform::Whatsapp, json!({"success": true})), Outcome::Ok);
        assert_eq!(ok(Platform::Slack, json!({"ok": true})), Outcome::Ok);
        assert_eq!(
            ok(Platform::Slack, json!({"ok": false, "error": "missing_scope"})),
            Outcome::Rejected
        );
        assert_eq!(
            ok(Platform::Slack, json!({"ok": false, "error": "ratelimited"})),
            Outcome::RateLimited
        );
        let limited = json!({"ok": false, "error_code": 429, "parameters": {"retry_after": 3}});
        assert_eq!(
            classify(Platform::Telegram, StatusCode::TOO_MANY_REQUESTS, Some(&limited)),
            Outcome::RateLimited
        );
        let pair = json!({"error": {"code": 131056, "message": "pair rate limit"}});
        assert_eq!(
            classify(Platform::Whatsapp, StatusCode::BAD_REQUEST, Some(&pair)),
            Outcome::RateLimited
        );
        let forbidden = json!({"ok": false, "error_code": 403, "description": "Forbidden"});
        assert_eq!(
            classify(Platform::Telegram, StatusCode::FORBIDDEN, Some(&forbidden)),
            Outcome::Rejected
        );
        assert_eq!(
            classify(Platform::Whatsapp, StatusCode::INTERNAL_SERVER_ERROR, None),
            Outcome::Failed
        );
        assert_eq!(
            classify(Platform::Telegram, StatusCode::OK, None),
            Outcome::Failed
        );
    }
}
