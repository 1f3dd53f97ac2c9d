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
//! This file is the machinery; each platform's calls are its `live.rs`
//! (`crate::platforms::slack::live`, `crate::platforms::telegram::live`) behind
//! `crate::platforms::LivePreview`.
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
//! (`crate::platforms::send::adopt`: `chat.stopStream` + `chat.update`, `editMessageText`)
//! instead of posting a second message, and a worker that claims the turn again after a
//! crash finds the id, shows nothing live, and completes that same message. Limit: a worker
//! that dies between the platform's answer to the first call and that record leaves an
//! unfinished preview which nothing adopts (the answer is then posted as a new message).
//!
//! A preview that no part will adopt (the agent failed for good, or answered nothing) is
//! ended: a Slack stream is stopped (`end`); a retry keeps it for the next attempt.
//!
//! Best effort: a failed call ends the view (the answer is delivered normally), never the
//! turn. Nothing is logged with a URL (Telegram URLs hold the bot token) or text.

use std::sync::Arc;
use std::time::{Duration, Instant};

use secrecy::ExposeSecret;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

use super::typing::Typing;
use crate::db::messages::MessageRow;
use crate::db::queue::Job;
use crate::domain::Connector;
use crate::egress::GuardedClient;
use crate::platforms;
use crate::platforms::live::{LiveStep, LiveTarget, Shown, Surface};
use crate::turn::writer::TurnWriter;
use crate::turn::{Applied, Transition};

/// Where a stream's text goes while it runs.
pub trait TextSink {
    /// `delta` was added to the answer's text.
    fn push(&mut self, delta: &str);
}

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

/// Where `message`'s stream shows, if anywhere.
fn surface(connector: &Connector, message: &MessageRow) -> Option<Surface> {
    connector.outbound_token.as_ref()?;
    // Claimed again after a crash mid-stream: the known message is completed by the
    // first part; a second live message must not start.
    if message.live_message_id.is_some() {
        return None;
    }
    platforms::of(connector.platform).live_surface(message)
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
        let Some(surface) = surface(&context.connector, &context.message) else {
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
    let platform = platforms::of(connector.platform);
    platform
        .end_live(client, connector, message, live_id, token.expose_secret())
        .await;
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

/// One call showing `text`, and the recording of a message it left; `false` ends the view.
async fn show(context: &LiveContext, surface: Surface, text: &str, shown: &mut Shown) -> bool {
    let platform = platforms::of(context.connector.platform);
    let target = LiveTarget {
        client: &context.client,
        connector: &context.connector,
        message: &context.message,
    };
    let result = match platform.show_live(&target, surface, text, shown).await {
        Ok(LiveStep::Shown) => Ok(true),
        Ok(LiveStep::Started(id)) => record(context, id, shown).await,
        Err(why) => Err(why),
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
async fn record(context: &LiveContext, id: String, shown: &mut Shown) -> Result<bool, &'static str> {
    let transition = Transition::LiveShown {
        platform_id: id.clone(),
    };
    match context.writer.apply(&context.job, transition).await {
        Ok(Applied::LeaseLost) => Ok(false),
        Ok(_) => {
            shown.id = Some(id);
            Ok(true)
        }
        Err(_) => Err("the live message could not be recorded"),
    }
}
