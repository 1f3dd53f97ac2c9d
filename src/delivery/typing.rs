//! The typing indicator from a turn's claim until its first part is posted
//! (docs/configuration.md#typing-indicator): the platform-neutral machinery; each
//! platform's requests are its `typing.rs` behind `platforms::contract::TypingIndicator`.
//! Best effort, never in the turn's way: its own task, short timeouts, nothing it meets
//! reaches the turn. One keyed limiter per instance lets one request per chat (topic,
//! thread) through per interval; a request waits for its slot rather than being skipped, so
//! the indicator does not lapse. Nothing is logged with a URL: Telegram URLs hold the bot
//! token.

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

/// Capped at one interval (`request_timeout`).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
/// Longest the first reply part waits for an indicator request under way, so that none
/// lands after the answer (a WhatsApp one would show for 25 s).
pub const REPLY_GRACE: Duration = Duration::from_millis(300);
const SWEEP_EVERY: u64 = 1024;

/// Connector, chat, and topic or thread.
type ChatKey = (ConnectorId, String, Option<String>);

pub struct Indicators {
    client: GuardedClient,
    interval: Duration,
    limiter: DefaultKeyedRateLimiter<ChatKey>,
    clock: DefaultClock,
    started: AtomicU64,
}

/// Ends the indicator when dropped.
pub struct Typing {
    stop: watch::Sender<Option<Ending>>,
    task: Option<JoinHandle<()>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ending {
    /// The first part's post clears every platform's indicator.
    Reply,
    NoReply,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Ok,
    RateLimited,
    /// A repeat would be refused too: refreshes stop.
    Rejected,
    Failed,
    Timeout,
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

struct Target {
    platform: Platform,
    key: ChatKey,
    base_url: String,
    token: SecretString,
    place: Place,
}

/// Slack cuts a longer assistant status.
const STATUS_MAX: usize = 100;

impl Indicators {
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

    pub fn start(
        self: &Arc<Self>,
        connector: &Connector,
        message: &MessageRow,
        claimed_at: Instant,
    ) -> Option<Typing> {
        if !connector.profile.typing_indicator {
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
            // No reply will clear it.
            let clear = async {
                self.until_turn(&target.key).await;
                self.send(&target, Show::Nothing).await
            };
            let limit = self.interval.saturating_add(self.request_timeout());
            let _ = tokio::time::timeout(limit, clear).await;
        }
    }

    /// Shown once for an agent's status update (docs/agent.md#answering-later), within the
    /// same per-chat rate as the refreshes: `false` when it was not shown (no indicator on
    /// this platform or connector, too soon after the last one, or refused).
    pub async fn show_status(&self, connector: &Connector, message: &MessageRow, text: &str) -> bool {
        if !connector.profile.typing_indicator {
            return false;
        }
        let Some(target) = Target::of(connector, message) else {
            return false;
        };
        if self.limiter.check_key(&target.key).is_err() {
            return false;
        }
        let text: String = text.chars().take(STATUS_MAX).collect();
        self.send(&target, Show::Status(&text)).await == Outcome::Ok
    }

    /// `false` when the indicator is stopped meanwhile.
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

    async fn send(&self, target: &Target, show: Show<'_>) -> Outcome {
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

/// `Duration::MAX` means "until stopped".
async fn sleep(pause: Duration) {
    match tokio::time::Instant::now().checked_add(pause) {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

impl Typing {
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
    /// A request under way finishes in the background rather than delay the first text.
    pub fn end_for_preview(mut self) {
        self.stop.send_replace(Some(Ending::Reply));
        drop(self.task.take());
    }
}

impl Drop for Typing {
    /// Without a reply the task ends by itself, clearing a Slack status first.
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
    /// `None` where the platform has no indicator (a Slack message outside an assistant
    /// thread).
    fn of(connector: &Connector, message: &MessageRow) -> Option<Self> {
        let token = connector.secrets.outbound_token.clone()?;
        let place = platforms::of(connector.profile.platform).typing_place(connector, message)?;
        Some(Self {
            platform: connector.profile.platform,
            key: (
                connector.id,
                message.address.chat_id.clone(),
                message.address.thread_id.clone(),
            ),
            base_url: api_base(connector).to_owned(),
            token,
            place,
        })
    }

    fn refresh_intervals(&self) -> u32 {
        platforms::of(self.platform).typing_refresh_intervals()
    }

    fn request(&self, client: &GuardedClient, show: Show<'_>) -> reqwest::RequestBuilder {
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
