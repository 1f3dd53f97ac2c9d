//! Local stand-ins for the platforms' send APIs (the calls `crate::platforms` makes): each
//! records where a reply went and answers as the platform does on success.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::routing::post;
use axum::{Json, Router};
use serde::Serialize;
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::sync::Notify;

use super::served::Served;
use crate::domain::Platform;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PostedReply {
    pub platform: Platform,
    /// Slack channel, Telegram chat id, WhatsApp recipient.
    pub chat: String,
    /// What the reply is threaded to: Slack `thread_ts`, Telegram
    /// `reply_parameters.message_id`, WhatsApp `context.message_id`.
    pub reply_to: String,
    pub text: String,
}

#[derive(Default)]
struct Recorded {
    replies: Mutex<Vec<PostedReply>>,
    arrived: Notify,
}

pub struct PlatformStandIns {
    pub base_url: String,
    recorded: Arc<Recorded>,
    served: Served,
}

/// Flags of `channel-bridge platform-stand-in`.
#[derive(Debug, clap::Args)]
pub struct StandInArgs {
    /// Where the stand-ins listen; give connectors `--api-base-url http://<this address>`.
    #[arg(long, env = "CB_STAND_IN_BIND", default_value = "127.0.0.1:9100")]
    pub bind: std::net::SocketAddr,
}

/// Until ctrl-c or SIGTERM; README "First steps" uses it.
pub async fn run_cli(args: StandInArgs) -> anyhow::Result<()> {
    use anyhow::Context;
    let listener = TcpListener::bind(args.bind)
        .await
        .with_context(|| format!("Failed to bind {}", args.bind))?;
    let stand_ins = PlatformStandIns::serve(listener)?;
    eprintln!(
        "platform stand-ins (Slack, Telegram, WhatsApp send APIs) on {}",
        stand_ins.base_url
    );
    tokio::select! {
        result = print_replies(&stand_ins) => result,
        () = crate::startup::shutdown_signal() => {
            stand_ins.stop().await;
            Ok(())
        }
    }
}

async fn print_replies(stand_ins: &PlatformStandIns) -> anyhow::Result<()> {
    use std::io::Write;
    let mut printed = 0;
    loop {
        let replies = stand_ins.replies_reaching(printed + 1).await;
        let mut out = std::io::stdout().lock();
        for reply in &replies[printed..] {
            writeln!(out, "{}", serde_json::to_string(reply)?)?;
        }
        out.flush()?;
        printed = replies.len();
    }
}

impl PlatformStandIns {
    pub async fn start() -> anyhow::Result<Self> {
        Self::serve(TcpListener::bind("127.0.0.1:0").await?)
    }

    fn serve(listener: TcpListener) -> anyhow::Result<Self> {
        let recorded = Arc::new(Recorded::default());
        let app = Router::new()
            .route("/api/chat.postMessage", post(slack_post))
            .route("/{bot}/sendMessage", post(telegram_send))
            .route("/{version}/{phone}/messages", post(whatsapp_send))
            .with_state(recorded.clone());
        let base_url = format!("http://{}", listener.local_addr()?);
        Ok(Self {
            base_url,
            recorded,
            served: Served::spawn(listener, app),
        })
    }

    pub fn replies(&self) -> Vec<PostedReply> {
        self.recorded
            .replies
            .lock()
            .expect("lock holders never panic")
            .clone()
    }

    async fn replies_reaching(&self, n: usize) -> Vec<PostedReply> {
        loop {
            // Registered before the check, so an arrival in between is not missed.
            let notified = self.recorded.arrived.notified();
            let replies = self.replies();
            if replies.len() >= n {
                return replies;
            }
            notified.await;
        }
    }

    /// Waits (without polling) until at least `n` replies arrived, or `timeout` passes.
    pub async fn wait_for_replies(&self, n: usize, timeout: Duration) -> anyhow::Result<Vec<PostedReply>> {
        tokio::time::timeout(timeout, self.replies_reaching(n))
            .await
            .map_err(|_| anyhow::anyhow!("no reply reached the platform stand-ins within {timeout:?}"))
    }

    pub async fn stop(self) {
        self.served.stop().await;
    }
}

fn record(recorded: &Recorded, reply: PostedReply) -> usize {
    let mut replies = recorded.replies.lock().expect("lock holders never panic");
    replies.push(reply);
    recorded.arrived.notify_waiters();
    replies.len()
}

fn text_of(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

async fn slack_post(State(recorded): State<Arc<Recorded>>, Json(body): Json<Value>) -> Json<Value> {
    let n = record(
        &recorded,
        PostedReply {
            platform: Platform::Slack,
            chat: text_of(&body["channel"]),
            reply_to: text_of(&body["thread_ts"]),
            text: text_of(&body["text"]),
        },
    );
    Json(json!({"ok": true, "channel": body["channel"], "ts": format!("1900000000.{n:06}")}))
}

async fn telegram_send(State(recorded): State<Arc<Recorded>>, Json(body): Json<Value>) -> Json<Value> {
    let n = record(
        &recorded,
        PostedReply {
            platform: Platform::Telegram,
            chat: text_of(&body["chat_id"]),
            reply_to: text_of(&body["reply_parameters"]["message_id"]),
            text: text_of(&body["text"]),
        },
    );
    Json(json!({"ok": true, "result": {"message_id": 9000 + n, "chat": {"id": body["chat_id"]}}}))
}

async fn whatsapp_send(State(recorded): State<Arc<Recorded>>, Json(body): Json<Value>) -> Json<Value> {
    // The read receipt with the typing indicator shares the endpoint; it is not a reply.
    if body["status"] == "read" {
        return Json(json!({"success": true}));
    }
    let n = record(
        &recorded,
        PostedReply {
            platform: Platform::Whatsapp,
            chat: text_of(&body["to"]),
            reply_to: text_of(&body["context"]["message_id"]),
            text: text_of(&body["text"]["body"]),
        },
    );
    Json(
        json!({"messaging_product": "whatsapp", "contacts": [{"input": body["to"]}],
                "messages": [{"id": format!("wamid.DEMO{n}")}]}),
    )
}
