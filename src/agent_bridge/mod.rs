//! `agent-bridge`: the receiving end of a dispatch, in front of an OpenAI-compatible server
//! (docs/agent.md#the-agent-side-agent-bridge). An upstream 4xx is answered 502, which the
//! gateway retries: it is the bridge's misconfiguration, not the dispatch's fault.

pub mod content;
pub mod echo;
pub mod inbound;
pub mod later;
pub mod offer;
pub mod outputs;
pub mod png;
pub mod upstream;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use secrecy::{ExposeSecret, SecretString};
use serde::Serialize;
use serde_json::json;
use tokio::net::TcpListener;

pub use self::echo::{echo_answer, echo_reply, EchoOptions};
use self::inbound::{InvalidDispatch, Turn};
use self::offer::Reply;
use self::upstream::{Ask, Completion, Modality, UpstreamConfig, UpstreamError};
use crate::choices::Choice;
use crate::dispatch::payload::ChatMessage;
use crate::media::outgoing::FileIn;
use crate::signature::{self, SignatureError};

/// Largest dispatch accepted: twelve turns of long messages fit with room to spare.
const BODY_LIMIT: usize = 8 * 1024 * 1024;

/// Flags of `channel-bridge agent-bridge`.
#[derive(Debug, Clone, clap::Args)]
pub struct BridgeArgs {
    /// OpenAI-compatible server: a base URL (`http://host:8000`, `http://host:8000/v1`) or
    /// the full `…/chat/completions` endpoint, used as is.
    #[arg(
        long,
        env = "CB_BRIDGE_UPSTREAM",
        required_unless_present = "echo",
        conflicts_with = "echo"
    )]
    pub upstream: Option<String>,
    /// The tenant's dispatch signing secret (`whsec_…`, printed once by `tenant create`).
    #[arg(long, env = "CB_AGENT_SECRET", hide_env_values = true, value_parser = crate::secret_input::parse)]
    pub secret: SecretString,
    /// Address to listen on.
    #[arg(long, env = "CB_BRIDGE_BIND", default_value = "127.0.0.1:9000")]
    pub bind: SocketAddr,
    /// A system message put before the conversation.
    #[arg(long, env = "CB_BRIDGE_SYSTEM_PROMPT")]
    pub system_prompt: Option<String>,
    /// The upstream's model name (`model` of the request); omitted when unset.
    #[arg(long, env = "CB_BRIDGE_MODEL")]
    pub model: Option<String>,
    /// Bearer token for the upstream.
    #[arg(long, env = "CB_BRIDGE_UPSTREAM_API_KEY", hide_env_values = true, value_parser = crate::secret_input::parse)]
    pub upstream_api_key: Option<SecretString>,
    /// Timeout of one upstream call, in seconds; keep it below the gateway's
    /// CB_AGENT_TIMEOUT_SECS (30) so the gateway sees a 504 instead of its own timeout.
    #[arg(long, env = "CB_BRIDGE_UPSTREAM_TIMEOUT_SECS", default_value_t = 25)]
    pub upstream_timeout_secs: u64,
    /// Ask the upstream for `stream: true` and relay its chunks to the gateway as they come
    /// (the gateway shows them on the platform). For upstreams that support streaming.
    #[arg(long, env = "CB_BRIDGE_STREAM", conflicts_with = "echo")]
    pub stream: bool,
    /// Declare one function tool, `offer_choices`, to the upstream: the model's call of it
    /// becomes the answer's buttons (docs/agent.md#the-agent-side-agent-bridge). Needs the
    /// non-streamed mode.
    #[arg(long, env = "CB_BRIDGE_CHOICES_TOOL", conflicts_with_all = ["echo", "stream"])]
    pub choices_tool: bool,
    /// Ask the upstream for these outputs (`modalities`, comma-separated: `text,image` for
    /// image models behind OpenRouter or LiteLLM, `text,audio` for OpenAI's audio models);
    /// the images and audio come back as the answer's files. Needs the non-streamed mode.
    #[arg(
        long,
        env = "CB_BRIDGE_MODALITIES",
        value_delimiter = ',',
        conflicts_with_all = ["echo", "stream"]
    )]
    pub modalities: Vec<Modality>,
    /// With `audio` among --modalities: the voice the upstream speaks with.
    #[arg(long, env = "CB_BRIDGE_AUDIO_VOICE", default_value = "alloy")]
    pub audio_voice: String,
    /// No upstream: answer `echo: <text> (history: N turns)` (demos, tests).
    #[arg(long)]
    pub echo: bool,
    /// With --echo: offer Yes/No buttons with every answer, and answer a tap
    /// `echo: tapped <label> (history: N turns)`.
    #[arg(long, requires = "echo")]
    pub choices: bool,
    /// With --echo: send a small picture (`echo.png`, captioned `echo: <text>`) with every
    /// answer but a tap's.
    #[arg(long, requires = "echo")]
    pub file: bool,
    /// With --echo: answer each dispatch `202 Accepted`, then post a status, the echo and
    /// `done` to the turn's events URL after --async-delay-ms (docs/agent.md#answering-later).
    #[arg(long = "async", requires = "echo")]
    pub answer_later: bool,
    /// With --async: how long the echo "works" before it answers.
    #[arg(long, default_value_t = 1000, requires = "answer_later")]
    pub async_delay_ms: u64,
    /// Send `user = <tenant_id>:<user_id>` to the upstream. Only for upstreams that need a
    /// stable end-user id and keep no transcript of their own: one that does (OpenClaw)
    /// would see every earlier turn twice.
    #[arg(long)]
    pub stable_user: bool,
}

#[derive(Debug, Clone)]
pub enum Answerer {
    Echo(EchoOptions),
    Upstream(UpstreamConfig),
}

#[derive(Debug, Clone)]
pub struct BridgeConfig {
    pub secret: SecretString,
    pub system_prompt: Option<String>,
    pub answerer: Answerer,
    /// The echo answers 202, then through the events URL after this long.
    pub answer_later: Option<Duration>,
}

impl BridgeConfig {
    pub fn echo(secret: &str) -> Self {
        Self {
            secret: SecretString::from(secret.to_owned()),
            system_prompt: None,
            answerer: Answerer::Echo(EchoOptions::default()),
            answer_later: None,
        }
    }

    /// `--echo --choices`.
    pub fn echo_offering_choices(secret: &str) -> Self {
        Self {
            answerer: Answerer::Echo(EchoOptions {
                choices: true,
                file: false,
            }),
            ..Self::echo(secret)
        }
    }

    /// `--echo --file`.
    pub fn echo_sending_a_file(secret: &str) -> Self {
        Self {
            answerer: Answerer::Echo(EchoOptions {
                choices: false,
                file: true,
            }),
            ..Self::echo(secret)
        }
    }

    pub fn upstream(secret: &str, upstream: UpstreamConfig) -> Self {
        Self {
            secret: SecretString::from(secret.to_owned()),
            system_prompt: None,
            answerer: Answerer::Upstream(upstream),
            answer_later: None,
        }
    }

    /// Fails fast on a secret that is not `whsec_<base64>` (every dispatch would be a 401).
    pub fn validate(&self) -> anyhow::Result<()> {
        signature::sign(self.secret.expose_secret(), "check", 0, b"")
            .map_err(|_| anyhow::anyhow!("CB_AGENT_SECRET must be a whsec_<base64> secret"))?;
        Ok(())
    }
}

impl BridgeArgs {
    pub fn into_config(self) -> anyhow::Result<BridgeConfig> {
        let answerer = match (&self.upstream, self.echo) {
            (_, true) => Answerer::Echo(EchoOptions {
                choices: self.choices,
                file: self.file,
            }),
            (Some(url), false) => Answerer::Upstream(self.upstream_config(url)?),
            (None, false) => anyhow::bail!("give --upstream <url> or --echo"),
        };
        let config = BridgeConfig {
            secret: self.secret,
            system_prompt: self.system_prompt.filter(|p| !p.trim().is_empty()),
            answerer,
            answer_later: self
                .answer_later
                .then(|| Duration::from_millis(self.async_delay_ms)),
        };
        config.validate()?;
        Ok(config)
    }

    fn upstream_config(&self, url: &str) -> anyhow::Result<UpstreamConfig> {
        if self.upstream_timeout_secs == 0 {
            anyhow::bail!("--upstream-timeout-secs must be at least 1");
        }
        // clap's `requires` counts the echo flag's default as given, so it is checked here.
        if self.choices {
            anyhow::bail!("--choices is the echo's; an upstream offers choices with --choices-tool");
        }
        if self.file {
            anyhow::bail!(
                "--file is the echo's; an upstream's files are its image and audio outputs (--modalities)"
            );
        }
        if self.answer_later {
            anyhow::bail!("--async is the echo's: an upstream's answer is given at once");
        }
        let mut config = UpstreamConfig::new(url).map_err(anyhow::Error::msg)?;
        config.model = self.model.clone();
        config.api_key = self.upstream_api_key.clone();
        config.timeout = Duration::from_secs(self.upstream_timeout_secs);
        config.stable_user = self.stable_user;
        config.stream = self.stream;
        config.choices_tool = self.choices_tool;
        config.modalities = self.modalities.clone();
        config.audio_voice = self.audio_voice.clone();
        Ok(config)
    }
}

struct Bridge {
    config: BridgeConfig,
    client: reqwest::Client,
}

/// One HTTP client, without retries of its own, serves every upstream call.
pub fn router(config: BridgeConfig) -> anyhow::Result<Router> {
    let client = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(5))
        .http1_only()
        .user_agent(concat!("channel-bridge-agent-bridge/", env!("CARGO_PKG_VERSION")))
        .build()
        .context("Failed to build the upstream HTTP client")?;
    let bridge = Arc::new(Bridge { config, client });
    Ok(Router::new()
        .route("/healthz", get(|| async { Json(json!({"status": "ok"})) }))
        .route("/", post(receive))
        .route("/{*path}", post(receive))
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .with_state(bridge))
}

pub async fn serve(
    listener: TcpListener,
    config: BridgeConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    config.validate()?;
    axum::serve(listener, router(config)?)
        .with_graceful_shutdown(shutdown)
        .await
        .context("agent-bridge server failed")
}

pub async fn run(args: BridgeArgs) -> anyhow::Result<()> {
    let bind = args.bind;
    let config = args.into_config()?;
    let listener = TcpListener::bind(bind)
        .await
        .with_context(|| format!("Failed to bind {bind}"))?;
    let mode = match &config.answerer {
        Answerer::Echo(options) => {
            let choices = if options.choices { ", offering choices" } else { "" };
            let file = if options.file { ", sending a file" } else { "" };
            format!("echo{choices}{file}")
        }
        Answerer::Upstream(upstream) => upstream.endpoint.to_string(),
    };
    tracing::info!(addr = %listener.local_addr()?, upstream = %mode, "agent-bridge listening");
    serve(listener, config, crate::startup::shutdown_signal()).await
}

/// The gateway's `messages` answer; `choices` go with the last message, `attachments` are
/// posted after the text.
#[derive(Debug, Serialize)]
struct AnswerOut {
    messages: Vec<ChatMessage>,
    #[serde(skip_serializing_if = "Option::is_none")]
    choices: Option<Vec<Choice>>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    choices_reusable: bool,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    attachments: Vec<FileIn>,
}

impl From<Reply> for AnswerOut {
    fn from(reply: Reply) -> Self {
        let reusable = reply.choices.as_ref().is_some_and(|c| c.reusable);
        Self {
            messages: reply.parts.into_iter().map(ChatMessage::assistant).collect(),
            choices: reply.choices.map(|c| c.items),
            choices_reusable: reusable,
            attachments: reply.attachments,
        }
    }
}

async fn receive(State(bridge): State<Arc<Bridge>>, headers: HeaderMap, body: Bytes) -> Response {
    match answer(&bridge, &headers, &body).await {
        Ok(Completion::Reply(reply)) => Json(AnswerOut::from(reply)).into_response(),
        Ok(Completion::Later) => (StatusCode::ACCEPTED, Json(json!({"status": "pending"}))).into_response(),
        Ok(Completion::Stream(upstream)) => (
            [
                (header::CONTENT_TYPE, "text/event-stream"),
                (header::CACHE_CONTROL, "no-cache"),
            ],
            upstream::relay(upstream),
        )
            .into_response(),
        Err(err) => err.into_response(),
    }
}

async fn answer(bridge: &Bridge, headers: &HeaderMap, body: &[u8]) -> Result<Completion, BridgeError> {
    verify(bridge.config.secret.expose_secret(), headers, body)?;
    let turn = inbound::parse(body)?;
    if let (Some(delay), Some(url), Answerer::Echo(options)) = (
        bridge.config.answer_later,
        &turn.reply_url,
        &bridge.config.answerer,
    ) {
        let events = later::Events {
            client: bridge.client.clone(),
            url: url.clone(),
            secret: bridge.config.secret.clone(),
        };
        tokio::spawn(later::echo_later(events, delay, echo_answer(&turn, *options)));
        return Ok(Completion::Later);
    }
    let span = tracing::info_span!(
        "dispatch",
        message_id = turn.message_id.as_deref().unwrap_or_default(),
        tenant_id = turn.tenant_id.as_deref().unwrap_or_default(),
        turns = turn.messages.len(),
    );
    tracing::Instrument::instrument(ask(bridge, &turn), span).await
}

async fn ask(bridge: &Bridge, turn: &Turn) -> Result<Completion, BridgeError> {
    match &bridge.config.answerer {
        Answerer::Echo(options) => Ok(Completion::Reply(echo_answer(turn, *options))),
        Answerer::Upstream(config) => {
            let messages = with_system_prompt(bridge.config.system_prompt.as_deref(), &turn.messages);
            let messages = content::upstream_messages(&bridge.client, &messages).await;
            let stable_user = turn.stable_user();
            let question = Ask {
                messages: &messages,
                stable_user: stable_user.as_deref(),
                platform: turn.platform,
            };
            let started = std::time::Instant::now();
            let result = upstream::complete(&bridge.client, config, &question).await;
            let elapsed_ms = started.elapsed().as_millis() as u64;
            match &result {
                Ok(Completion::Reply(reply)) => tracing::info!(
                    elapsed_ms,
                    parts = reply.parts.len(),
                    choices = reply.choices.as_ref().map_or(0, |c| c.items.len()),
                    files = reply.attachments.len(),
                    "upstream answered"
                ),
                Ok(Completion::Stream(_)) => tracing::info!(elapsed_ms, "upstream streams; relaying"),
                Ok(Completion::Later) => {}
                Err(err) => tracing::warn!(elapsed_ms, error = %err, "upstream failed"),
            }
            Ok(result?)
        }
    }
}

fn verify(secret: &str, headers: &HeaderMap, body: &[u8]) -> Result<(), SignatureError> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    signature::verify(
        secret,
        header("webhook-id"),
        header("webhook-timestamp"),
        header("webhook-signature"),
        body,
        chrono::Utc::now().timestamp(),
    )
}

/// A system message of the payload's own (the gateway sends none) stays where it was.
pub fn with_system_prompt(prompt: Option<&str>, messages: &[ChatMessage]) -> Vec<ChatMessage> {
    let system = prompt.map(|p| ChatMessage {
        role: "system".into(),
        ..ChatMessage::user(p)
    });
    system.into_iter().chain(messages.iter().cloned()).collect()
}

/// The body never carries the upstream's body or URL.
#[derive(Debug, thiserror::Error)]
enum BridgeError {
    #[error(transparent)]
    Unauthorized(#[from] SignatureError),
    #[error(transparent)]
    BadRequest(#[from] InvalidDispatch),
    #[error(transparent)]
    Upstream(#[from] UpstreamError),
}

impl BridgeError {
    fn status_and_code(&self) -> (StatusCode, &'static str) {
        match self {
            Self::Unauthorized(_) => (StatusCode::UNAUTHORIZED, "unauthorized"),
            Self::BadRequest(_) => (StatusCode::BAD_REQUEST, "bad_request"),
            Self::Upstream(UpstreamError::Timeout(_)) => (StatusCode::GATEWAY_TIMEOUT, "upstream_timeout"),
            Self::Upstream(UpstreamError::RateLimited { .. }) => {
                (StatusCode::TOO_MANY_REQUESTS, "upstream_rate_limited")
            }
            Self::Upstream(UpstreamError::Unreachable(_)) => {
                (StatusCode::BAD_GATEWAY, "upstream_unreachable")
            }
            Self::Upstream(UpstreamError::Status(_)) => (StatusCode::BAD_GATEWAY, "upstream_error"),
            Self::Upstream(UpstreamError::InvalidAnswer(_)) => {
                (StatusCode::BAD_GATEWAY, "upstream_invalid_answer")
            }
        }
    }
}

impl IntoResponse for BridgeError {
    fn into_response(self) -> Response {
        let (status, code) = self.status_and_code();
        if let Self::Unauthorized(err) = &self {
            tracing::info!(error = %err, "dispatch rejected");
        }
        let mut response =
            (status, Json(json!({"error": code, "message": self.to_string()}))).into_response();
        // The gateway honours Retry-After on a 429.
        if let Self::Upstream(UpstreamError::RateLimited {
            retry_after: Some(secs),
        }) = self
        {
            if let Ok(value) = HeaderValue::from_str(&secs.to_string()) {
                response.headers_mut().insert(header::RETRY_AFTER, value);
            }
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn parse_cli(args: &[&str]) -> Result<crate::cli::Cli, clap::Error> {
        crate::cli::Cli::try_parse_from(["channel-bridge", "agent-bridge"].iter().chain(args))
    }

    #[test]
    fn the_system_prompt_goes_first() {
        let messages = [ChatMessage::user("hi")];
        let sent = with_system_prompt(Some("be brief"), &messages);
        assert_eq!(sent[0].role, "system");
        assert_eq!(sent[0].content, "be brief");
        assert_eq!(sent[1], messages[0]);
        assert_eq!(with_system_prompt(None, &messages), messages);
    }

    #[test]
    fn the_command_line_needs_an_upstream_or_echo_and_a_standard_webhooks_secret() {
        let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        assert!(parse_cli(&["--secret", secret]).is_err(), "neither");
        assert!(
            parse_cli(&["--secret", secret, "--echo", "--upstream", "http://x"]).is_err(),
            "both"
        );
        let crate::cli::Command::AgentBridge(args) = parse_cli(&[
            "--secret",
            secret,
            "--upstream",
            "http://llm:8000/v1",
            "--model",
            "m",
        ])
        .unwrap()
        .command
        else {
            panic!("agent-bridge parses into its own command");
        };
        let config = args.into_config().unwrap();
        let Answerer::Upstream(upstream) = config.answerer else {
            panic!("an upstream was given");
        };
        assert_eq!(upstream.endpoint.as_str(), "http://llm:8000/v1/chat/completions");
        assert_eq!(upstream.model.as_deref(), Some("m"));
        assert!(!upstream.stable_user);

        let crate::cli::Command::AgentBridge(args) =
            parse_cli(&["--secret", "not-base64!", "--echo"]).unwrap().command
        else {
            panic!("agent-bridge parses into its own command");
        };
        let err = args.into_config().unwrap_err().to_string();
        assert!(err.contains("CB_AGENT_SECRET"), "{err}");
    }

    #[test]
    fn choices_are_the_echos_with_choices_and_an_upstreams_with_the_tool_never_streamed() {
        let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        let answerer = |args: &[&str]| {
            let with_secret = [&["--secret", secret][..], args].concat();
            let parsed = parse_cli(&with_secret).map_err(|e| e.to_string())?;
            let crate::cli::Command::AgentBridge(args) = parsed.command else {
                panic!("agent-bridge parses into its own command");
            };
            args.into_config().map(|c| c.answerer).map_err(|e| e.to_string())
        };
        assert!(matches!(
            answerer(&["--echo", "--choices"]),
            Ok(Answerer::Echo(EchoOptions {
                choices: true,
                file: false
            }))
        ));
        assert!(
            answerer(&["--upstream", "http://llm", "--choices"]).is_err(),
            "--choices is the echo's"
        );
        let Ok(Answerer::Upstream(upstream)) = answerer(&["--upstream", "http://llm", "--choices-tool"])
        else {
            panic!("an upstream was given");
        };
        assert!(upstream.choices_tool);
        assert!(
            answerer(&["--upstream", "http://llm", "--choices-tool", "--stream"]).is_err(),
            "tool calls are read from the non-streamed answer only"
        );
        assert!(answerer(&["--echo", "--choices-tool"]).is_err());
        assert!(answerer(&["--upstream", "http://llm", "--async"]).is_err());
    }

    #[test]
    fn files_are_the_echos_with_file_and_an_upstreams_outputs_asked_for_with_modalities() {
        let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        let answerer = |args: &[&str]| {
            let with_secret = [&["--secret", secret][..], args].concat();
            let parsed = parse_cli(&with_secret).map_err(|e| e.to_string())?;
            let crate::cli::Command::AgentBridge(args) = parsed.command else {
                panic!("agent-bridge parses into its own command");
            };
            args.into_config().map(|c| c.answerer).map_err(|e| e.to_string())
        };
        assert!(matches!(
            answerer(&["--echo", "--file", "--choices"]),
            Ok(Answerer::Echo(EchoOptions {
                choices: true,
                file: true
            }))
        ));
        assert!(answerer(&["--file"]).is_err(), "--file needs --echo");
        let refused = answerer(&["--upstream", "http://llm", "--file"]).unwrap_err();
        assert!(refused.contains("--modalities"), "{refused}");
        let Ok(Answerer::Upstream(upstream)) = answerer(&[
            "--upstream",
            "http://llm",
            "--modalities",
            "text,audio",
            "--audio-voice",
            "coral",
        ]) else {
            panic!("an upstream was given");
        };
        assert_eq!(upstream.modalities, [Modality::Text, Modality::Audio]);
        assert_eq!(upstream.audio_voice, "coral");
        for (case, args) in [
            (
                "streamed",
                &[
                    "--upstream",
                    "http://llm",
                    "--stream",
                    "--modalities",
                    "text,image",
                ][..],
            ),
            ("the echo's", &["--echo", "--modalities", "text,image"]),
            ("unknown", &["--upstream", "http://llm", "--modalities", "video"]),
        ] {
            assert!(answerer(args).is_err(), "{case}");
        }
    }

    #[test]
    fn debug_output_never_contains_the_secret_or_the_api_key() {
        let mut upstream = UpstreamConfig::new("http://llm").unwrap();
        upstream.api_key = Some(SecretString::from("sk-very-secret".to_owned()));
        let config = BridgeConfig::upstream("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", upstream);
        let printed = format!("{config:?}");
        assert!(!printed.contains("sk-very-secret"), "{printed}");
        assert!(!printed.contains("MfKQ9r8G"), "{printed}");
    }
}
