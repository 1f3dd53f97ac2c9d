//! The live view of a streamed answer (issue #14): what the person sees while the agent's
//! stream runs (`crate::dispatch::stream`), before the answer is stored and delivered.
//!
//! - Slack: the platform's own streaming, in the reply thread: `chat.startStream` with the
//!   text so far (the `ts` it returns is recorded at once), then `chat.appendStream` with
//!   what was added since (PLATFORMS.md §6).
//! - Telegram private chat: `sendMessageDraft` with the text so far (an ephemeral preview;
//!   nothing to record: the answer is then sent with `sendMessage` like any reply).
//! - Telegram group or channel: `sendMessage` with the text so far, replying to the user's
//!   message (its id recorded at once), then `editMessageText`.
//! - WhatsApp: no such API; the typing indicator goes on until the reply.
//!
//! The view starts with the stream's first text (an answer in JSON starts none).
//!
//! Throttling: the view wakes on the newest text (a `watch` channel keeps only the latest,
//! so deltas coalesce by themselves), makes one call, then waits `CB_STREAM_INTERVAL_MS`
//! before the next (three times that in a Telegram group, where a bot may send about 20
//! messages a minute, edits included). The first text is shown as soon as it arrives, and
//! the typing indicator is stopped just before.
//!
//! Exactly once: a message the view leaves on the platform (Slack stream, Telegram group
//! message) is recorded in `channel_messages.live_message_id` through the turn writer, under
//! the job's lease, before any further call. The answer's first part then *adopts* it
//! (`outbound::adopt`: `chat.stopStream` + `chat.update`, `editMessageText`) instead of
//! posting a second message, and a worker that claims the turn again after a crash finds
//! the id, shows nothing live, and completes that same message. Limit: a worker that dies
//! between the platform's answer to the first call and that record leaves an unfinished
//! preview which nothing adopts (the answer is then posted as a new message).
//!
//! A preview that no part will adopt (the agent failed for good, or answered nothing) is
//! ended: a Slack stream is stopped (`end`); a retry keeps it for the next attempt.
//!
//! Best effort: a failed call ends the view (the answer is delivered normally), never the
//! turn. Nothing is logged with a URL (Telegram URLs hold the bot token) or text.

use std::sync::Arc;
use std::time::{Duration, Instant};

use secrecy::ExposeSecret;
use serde_json::{json, Value};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

use super::outbound::{base_url, slack_thread_ts, telegram_int};
use super::typing::Typing;
use crate::db::messages::MessageRow;
use crate::db::queue::Job;
use crate::db::turns::{Applied, Transition};
use crate::dispatch::stream::TextSink;
use crate::dispatch::writer::TurnWriter;
use crate::domain::{Connector, Platform};
use crate::egress::GuardedClient;

/// Telegram's limit on a message's (and a draft's) text, in characters.
const TELEGRAM_MAX_CHARS: usize = 4096;
/// Slack's limit on one `markdown_text`, in characters (12,000 per the API reference).
const SLACK_MAX_CHARS: usize = 12_000;

/// Everything a view needs: where to show and how to record what it left.
pub struct LiveContext {
    pub client: GuardedClient,
    pub writer: TurnWriter,
    pub job: Job,
    pub connector: Arc<Connector>,
    pub message: MessageRow,
    pub interval: Duration,
}

/// A turn's view. It starts at the stream's first text: a JSON answer costs nothing.
pub struct LiveView<F> {
    /// Builds the view's context when the first text arrives (`None`: nothing to show).
    context: Option<F>,
    running: Option<Running>,
    /// The turn's typing indicator while no task holds it.
    typing: Option<Typing>,
}

struct Running {
    text: watch::Sender<String>,
    done: oneshot::Sender<()>,
    task: JoinHandle<LiveEnd>,
}

/// What a view came to.
pub struct LiveEnd {
    /// The recorded platform message the first reply part adopts.
    pub live_message_id: Option<String>,
    /// The typing indicator, when the view never showed anything (it is still running).
    pub typing: Option<Typing>,
}

/// Where a turn's stream shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Surface {
    SlackStream,
    TelegramDraft,
    TelegramMessage,
}

impl Surface {
    fn of(connector: &Connector, message: &MessageRow) -> Option<Self> {
        connector.outbound_token.as_ref()?;
        // Claimed again after a crash mid-stream: the known message is completed by the
        // first part; a second live message must not start.
        if message.live_message_id.is_some() {
            return None;
        }
        match connector.platform {
            Platform::Slack => Some(Self::SlackStream),
            Platform::Telegram if message.space.is_none() => Some(Self::TelegramDraft),
            Platform::Telegram => Some(Self::TelegramMessage),
            Platform::Whatsapp => None,
        }
    }

    fn interval(self, base: Duration) -> Duration {
        match self {
            Self::TelegramMessage => base.saturating_mul(3),
            Self::SlackStream | Self::TelegramDraft => base,
        }
    }
}

impl<F: FnOnce() -> Option<LiveContext>> LiveView<F> {
    /// The view of a turn, holding its typing indicator (stopped when text is first shown).
    pub fn new(context: F, typing: Option<Typing>) -> Self {
        Self {
            context: Some(context),
            running: None,
            typing,
        }
    }

    /// Starts the view's task, once, if the turn's platform shows streams.
    fn start(&mut self) {
        let Some(make) = self.context.take() else {
            return;
        };
        let Some(context) = make() else {
            return;
        };
        let Some(surface) = Surface::of(&context.connector, &context.message) else {
            return;
        };
        let (text, shown) = watch::channel(String::new());
        let (done, stopped) = oneshot::channel();
        let task = tokio::spawn(run(context, surface, shown, stopped, self.typing.take()));
        self.running = Some(Running { text, done, task });
    }

    /// The stream is over: no further call is made; one under way is waited for (its
    /// message, if it leaves one, must be recorded before the answer is delivered).
    pub async fn finish(mut self) -> LiveEnd {
        let Some(running) = self.running.take() else {
            return LiveEnd {
                live_message_id: None,
                typing: self.typing.take(),
            };
        };
        drop(running.done);
        running.task.await.unwrap_or_else(|_| LiveEnd {
            live_message_id: None,
            typing: None,
        })
    }
}

impl<F: FnOnce() -> Option<LiveContext>> TextSink for LiveView<F> {
    fn push(&mut self, delta: &str) {
        self.start();
        if let Some(running) = &self.running {
            running.text.send_modify(|text| text.push_str(delta));
        }
    }
}

/// Ends a preview that no reply part will adopt (best effort): a Slack stream is stopped
/// with the text it shows; a Telegram group message keeps its text (there is nothing to
/// end).
pub async fn end(client: &GuardedClient, connector: &Connector, message: &MessageRow, live_id: &str) {
    let Some(token) = connector.outbound_token.as_ref() else {
        return;
    };
    if connector.platform != Platform::Slack {
        return;
    }
    let request = client
        .post(format!("{}/api/chat.stopStream", base_url(connector)))
        .bearer_auth(token.expose_secret())
        .json(&json!({ "channel": message.chat_id, "ts": live_id }));
    if client.send(request).await.is_err() {
        tracing::debug!("could not stop the stream of an answer that failed");
    }
}

/// What the view has shown so far.
#[derive(Default)]
struct Shown {
    /// The platform message it recorded.
    id: Option<String>,
    /// The text last sent (Slack: its length is what was appended).
    text: String,
}

async fn run(
    context: LiveContext,
    surface: Surface,
    mut text: watch::Receiver<String>,
    mut done: oneshot::Receiver<()>,
    mut typing: Option<Typing>,
) -> LiveEnd {
    let mut shown = Shown::default();
    let mut first = true;
    let interval = surface.interval(context.interval);
    loop {
        tokio::select! {
            biased;
            _ = &mut done => break,
            changed = text.changed() => if changed.is_err() { break },
        }
        let current = text.borrow_and_update().clone();
        if current.trim().is_empty() {
            continue;
        }
        if let Some(typing) = typing.take() {
            typing.end_for_preview();
        }
        let started = Instant::now();
        let keep = show(&context, surface, &current, &mut shown).await;
        if std::mem::take(&mut first) {
            metrics::histogram!("channel_bridge_stream_first_show_seconds", "platform" => context.connector.platform.as_str())
                .record(started.elapsed().as_secs_f64());
        }
        if !keep {
            break;
        }
        tokio::select! {
            biased;
            _ = &mut done => break,
            () = tokio::time::sleep(interval) => {}
        }
    }
    LiveEnd {
        live_message_id: shown.id,
        typing,
    }
}

/// One call showing `text`; `false` ends the view.
async fn show(context: &LiveContext, surface: Surface, text: &str, shown: &mut Shown) -> bool {
    let result = match surface {
        Surface::SlackStream => slack_show(context, text, shown).await,
        Surface::TelegramDraft => telegram_draft(context, text, shown).await,
        Surface::TelegramMessage => telegram_show(context, text, shown).await,
    };
    match result {
        Ok(keep) => keep,
        Err(why) => {
            metrics::counter!("channel_bridge_stream_view_failures_total", "platform" => context.connector.platform.as_str())
                .increment(1);
            tracing::debug!(why, "live view stopped; the answer is delivered normally");
            false
        }
    }
}

/// Records the message the view left, under the job's lease: `Ok(false)` when the lease is
/// gone (the view stops; the new holder decides).
async fn record(context: &LiveContext, id: &str, shown: &mut Shown) -> Result<bool, &'static str> {
    let transition = Transition::LiveShown {
        platform_id: id.to_owned(),
    };
    match context.writer.apply(&context.job, transition).await {
        Ok(Applied::LeaseLost) => Ok(false),
        Ok(_) => {
            shown.id = Some(id.to_owned());
            Ok(true)
        }
        Err(_) => Err("the live message could not be recorded"),
    }
}

fn token(context: &LiveContext) -> &str {
    context
        .connector
        .outbound_token
        .as_ref()
        .map_or("", |t| t.expose_secret())
}

/// Posts `body` and reads the JSON answer; `Err` for anything but `ok: true`.
async fn call(context: &LiveContext, request: reqwest::RequestBuilder) -> Result<Value, &'static str> {
    let response = context.client.send(request).await.map_err(|_| "request failed")?;
    let body: Value = response.json().await.map_err(|_| "unreadable answer")?;
    if body["ok"] == true {
        Ok(body)
    } else {
        Err("refused")
    }
}

fn clip(text: &str, max_chars: usize) -> &str {
    match text.char_indices().nth(max_chars) {
        Some((end, _)) => &text[..end],
        None => text,
    }
}

async fn slack_show(context: &LiveContext, text: &str, shown: &mut Shown) -> Result<bool, &'static str> {
    let message = &context.message;
    let base = base_url(&context.connector);
    let Some(ts) = shown.id.clone() else {
        let mut body = json!({
            "channel": message.chat_id,
            "thread_ts": slack_thread_ts(message),
            "markdown_text": clip(text, SLACK_MAX_CHARS),
            "recipient_user_id": message.platform_user_id,
        });
        if let Some(team) = message.metadata.get("team_id").and_then(Value::as_str) {
            body["recipient_team_id"] = team.into();
        }
        let request = context
            .client
            .post(format!("{base}/api/chat.startStream"))
            .bearer_auth(token(context))
            .json(&body);
        let answer = call(context, request).await?;
        let ts = answer["ts"].as_str().ok_or("no ts")?;
        shown.text = text.to_owned();
        return record(context, ts, shown).await;
    };
    let added = text.get(shown.text.len()..).unwrap_or_default();
    if added.is_empty() || shown.text.len() + added.len() > SLACK_MAX_CHARS * 3 {
        return Ok(true);
    }
    let request = context
        .client
        .post(format!("{base}/api/chat.appendStream"))
        .bearer_auth(token(context))
        .json(
            &json!({ "channel": message.chat_id, "ts": ts, "markdown_text": clip(added, SLACK_MAX_CHARS) }),
        );
    call(context, request).await?;
    shown.text = text.to_owned();
    Ok(true)
}

/// A non-zero draft id of the turn (Telegram animates changes of one draft).
fn draft_id(message: &MessageRow) -> i64 {
    let bits = message.id.0.as_u128() as u32 & 0x7fff_ffff;
    i64::from(bits.max(1))
}

async fn telegram_draft(context: &LiveContext, text: &str, shown: &mut Shown) -> Result<bool, &'static str> {
    let text = clip(text, TELEGRAM_MAX_CHARS);
    if text == shown.text {
        return Ok(true);
    }
    let message = &context.message;
    let mut body = json!({
        "chat_id": telegram_int(&message.chat_id),
        "draft_id": draft_id(message),
        "text": text,
    });
    if let Some(topic) = &message.thread_id {
        body["message_thread_id"] = telegram_int(topic);
    }
    let request = context
        .client
        .post(format!(
            "{}/bot{}/sendMessageDraft",
            base_url(&context.connector),
            token(context)
        ))
        .json(&body);
    call(context, request).await?;
    shown.text = text.to_owned();
    Ok(true)
}

async fn telegram_show(context: &LiveContext, text: &str, shown: &mut Shown) -> Result<bool, &'static str> {
    let text = clip(text, TELEGRAM_MAX_CHARS);
    if text == shown.text {
        return Ok(true);
    }
    let message = &context.message;
    let base = format!("{}/bot{}", base_url(&context.connector), token(context));
    let Some(id) = shown.id.clone() else {
        let mut body = json!({
            "chat_id": telegram_int(&message.chat_id),
            "text": text,
            "reply_parameters": {
                "message_id": telegram_int(&message.platform_message_id),
                "allow_sending_without_reply": true,
            },
            "link_preview_options": { "is_disabled": true },
        });
        if let Some(topic) = &message.thread_id {
            body["message_thread_id"] = telegram_int(topic);
        }
        let request = context.client.post(format!("{base}/sendMessage")).json(&body);
        let answer = call(context, request).await?;
        let id = answer
            .pointer("/result/message_id")
            .map(Value::to_string)
            .ok_or("no message_id")?;
        shown.text = text.to_owned();
        return record(context, &id, shown).await;
    };
    let body = json!({
        "chat_id": telegram_int(&message.chat_id),
        "message_id": telegram_int(&id),
        "text": text,
        "link_preview_options": { "is_disabled": true },
    });
    let request = context.client.post(format!("{base}/editMessageText")).json(&body);
    call(context, request).await?;
    shown.text = text.to_owned();
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clipping_counts_characters_not_bytes() {
        assert_eq!(clip("héllo", 2), "hé");
        assert_eq!(clip("hé", 5), "hé");
    }
}
