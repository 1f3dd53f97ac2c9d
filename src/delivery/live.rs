//! The live view of a streamed answer (docs/agent.md#streamed-answers): the machinery; each
//! platform's calls are its `live.rs` behind `platforms::contract::LivePreview`. A message
//! the view leaves is recorded under the job's lease before the next call, so the first part
//! adopts it instead of posting a second one, also after a crash. A `watch` channel keeps
//! only the newest text, so deltas coalesce. Best effort: a failed call ends the view, never
//! the turn. Nothing is logged with a URL (Telegram URLs hold the bot token) or text.

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
    fn push(&mut self, delta: &str);
}

pub struct LiveContext {
    pub client: GuardedClient,
    pub writer: TurnWriter,
    pub job: Job,
    pub connector: Arc<Connector>,
    pub message: MessageRow,
    pub interval: Duration,
}

/// Starts at the stream's first text: a JSON answer costs nothing.
pub struct LiveView<F> {
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

pub struct LiveEnd {
    pub live_message_id: Option<String>,
    /// Still running when the view never showed anything.
    pub typing: Option<Typing>,
}

fn surface(connector: &Connector, message: &MessageRow) -> Option<Surface> {
    connector.secrets.outbound_token.as_ref()?;
    // Claimed again after a crash mid-stream: the first part completes the known message.
    if message.live_message_id.is_some() {
        return None;
    }
    platforms::of(connector.profile.platform).live_surface(message)
}

impl<F: FnOnce() -> Option<LiveContext>> LiveView<F> {
    pub fn new(context: F, typing: Option<Typing>) -> Self {
        Self {
            context: Some(context),
            running: None,
            typing,
        }
    }

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

    /// A call under way is waited for: its message must be recorded before the answer is
    /// delivered.
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

/// Ends a preview no part will adopt, so a Slack stream does not stay open.
pub async fn end(client: &GuardedClient, connector: &Connector, message: &MessageRow, live_id: &str) {
    let Some(token) = connector.secrets.outbound_token.as_ref() else {
        return;
    };
    let platform = platforms::of(connector.profile.platform);
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
            metrics::histogram!("channel_bridge_stream_first_show_seconds", "platform" => context.connector.profile.platform.as_str())
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

/// `false` ends the view.
async fn show(context: &LiveContext, surface: Surface, text: &str, shown: &mut Shown) -> bool {
    let platform = platforms::of(context.connector.profile.platform);
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
            metrics::counter!("channel_bridge_stream_view_failures_total", "platform" => context.connector.profile.platform.as_str())
                .increment(1);
            tracing::debug!(why, "live view stopped; the answer is delivered normally");
            false
        }
    }
}

/// `Ok(false)` when the lease is gone: the new holder decides.
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
