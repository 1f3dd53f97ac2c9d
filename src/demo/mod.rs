//! `channel-bridge demo`: the whole product on one machine, in a few seconds.
//!
//! On DATABASE_URL's server the demo drops and re-creates one database (default
//! `channel_bridge_demo`) and migrates it; starts the gateway (HTTP and worker, port 0), an
//! echo `agent-bridge` (port 0) and local stand-ins for the three platforms' send APIs;
//! provisions a tenant `demo` whose agent is the echo bridge, with a Slack, a WhatsApp and a
//! Telegram connector sending to the stand-ins, and two linked people (alice on Slack and
//! Telegram, one history; bob on WhatsApp). It then posts a short conversation through the
//! real webhook routes over HTTP, signed as each platform signs — including a Slack retry of
//! an event already received and our own reply echoed back by Slack — waits for each reply
//! to reach its platform, and reports turn by turn. The database stays for exploring.

pub mod platforms;
pub mod webhooks;

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;
use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};
use sqlx::migrate::MigrateDatabase;
use sqlx::PgPool;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use self::platforms::{PlatformStandIns, PostedReply};
use self::webhooks::*;
use crate::agent_bridge::{self, BridgeConfig};
use crate::db::connectors::NewConnector;
use crate::db::TenantTx;
use crate::dispatch::payload::DispatchOut;
use crate::domain::{ConnectorId, Platform, TelegramDelivery, TenantId, UnlinkedPolicy};
use crate::settings::{DatabaseSettings, ServeSettings};
use crate::startup::Application;

/// How long one turn may take from webhook to reply on the platform. A healthy run needs
/// milliseconds; the margin is for a cold, busy machine.
const REPLY_TIMEOUT: Duration = Duration::from_secs(20);

/// Flags of `channel-bridge demo`.
#[derive(Debug, Clone, clap::Args)]
pub struct DemoArgs {
    /// A PostgreSQL URL of the server to use (its user must be allowed to create databases);
    /// the demo works in its own database there, named by --database-name.
    #[arg(long = "database-url", env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: SecretString,
    /// The demo's database on that server: dropped and re-created on every run.
    #[arg(long, default_value = "channel_bridge_demo")]
    pub database_name: String,
    /// Print the summary as JSON on stdout (the walkthrough then goes to stderr).
    #[arg(long)]
    pub json: bool,
    /// Show the gateway's own log lines on the terminal, between the walkthrough's lines
    /// (by default they go to the file `log_file` names).
    #[arg(long)]
    pub verbose: bool,
}

impl DemoArgs {
    /// Where the gateway's log goes while the demo runs: a file in the temporary directory,
    /// unless `--verbose` keeps it on the terminal.
    pub fn log_file(&self) -> Option<std::path::PathBuf> {
        (!self.verbose).then(|| std::env::temp_dir().join("channel-bridge-demo.log"))
    }
}

/// `channel-bridge demo`.
pub async fn run_cli(args: DemoArgs) -> anyhow::Result<()> {
    let database_url = demo_database_url(args.database_url.expose_secret(), &args.database_name)?;
    let config = DemoConfig {
        database_url,
        log_file: args.log_file(),
    };
    if args.json {
        let summary = run(&config, &mut std::io::stderr()).await?;
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        run(&config, &mut std::io::stdout()).await?;
    }
    Ok(())
}

/// DATABASE_URL with the demo's database name. Refuses the database DATABASE_URL itself
/// names: the demo drops its database, and that one is the user's.
pub fn demo_database_url(database_url: &str, name: &str) -> anyhow::Result<String> {
    let valid = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if !valid {
        anyhow::bail!("--database-name must be lowercase letters, digits and underscores");
    }
    let mut url = reqwest::Url::parse(database_url).context("DATABASE_URL is not a URL")?;
    if url.path().trim_start_matches('/') == name {
        anyhow::bail!(
            "DATABASE_URL names `{name}`, which the demo would drop; choose another --database-name"
        );
    }
    url.set_path(&format!("/{name}"));
    Ok(url.to_string())
}

/// What the demo runs against.
#[derive(Debug, Clone)]
pub struct DemoConfig {
    /// The demo's own database: dropped (sessions on it are ended) and re-created.
    pub database_url: String,
    /// Where the gateway's own log lines go instead of the terminal (`None`: the terminal,
    /// with `--verbose`, or a test's subscriber).
    pub log_file: Option<std::path::PathBuf>,
}

/// What happened, step by step; the demo's printed walkthrough is made from it.
#[derive(Debug, Clone, Serialize)]
pub struct DemoSummary {
    pub tenant_id: TenantId,
    /// The demo database (a password, if any, replaced by `****`).
    pub database_url: String,
    pub steps: Vec<Step>,
    /// Rows in `channel_messages` of the demo tenant once the conversation is over.
    pub recorded_turns: usize,
    pub elapsed_ms: u64,
}

impl DemoSummary {
    /// The steps that became a turn and were answered.
    pub fn turns(&self) -> impl Iterator<Item = (&Step, &Turn)> {
        self.steps.iter().filter_map(|step| match &step.outcome {
            Outcome::Replied(turn) => Some((step, turn)),
            _ => None,
        })
    }

    pub fn duplicates(&self) -> usize {
        self.count(|o| matches!(o, Outcome::Duplicate))
    }

    pub fn dropped(&self) -> usize {
        self.count(|o| matches!(o, Outcome::Dropped))
    }

    fn count(&self, which: impl Fn(&Outcome) -> bool) -> usize {
        self.steps.iter().filter(|s| which(&s.outcome)).count()
    }
}

/// One webhook the demo posted.
#[derive(Debug, Clone, Serialize)]
pub struct Step {
    pub platform: Platform,
    /// The platform's id of the sender.
    pub sender: String,
    pub text: String,
    pub webhook: WebhookAnswer,
    pub outcome: Outcome,
}

/// The gateway's answer to a webhook (`POST /v1/hooks/…`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WebhookAnswer {
    #[serde(default)]
    pub status: u16,
    #[serde(default)]
    pub queued: u64,
    #[serde(default)]
    pub duplicates: u64,
    #[serde(default)]
    pub dropped: u64,
}

#[derive(Debug, Clone, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Outcome {
    /// A new user turn: dispatched to the agent and answered on the platform.
    Replied(Turn),
    /// A retry of a message already recorded: no new turn.
    Duplicate,
    /// Never recorded, never dispatched (a bot's own message).
    Dropped,
}

#[derive(Debug, Clone, Serialize)]
pub struct Turn {
    /// The linked user the gateway resolved the sender to.
    pub user_id: Option<String>,
    /// The roles of `messages[]` as the agent received them, oldest first.
    pub agent_saw: Vec<String>,
    pub reply: PostedReply,
}

/// Runs the demo, writing the walkthrough to `out`.
pub async fn run(config: &DemoConfig, out: &mut (dyn Write + Send)) -> anyhow::Result<DemoSummary> {
    let started = Instant::now();
    let shown_url = redact_password(&config.database_url);
    writeln!(out, "channel-bridge demo\n")?;
    if let Some(log) = &config.log_file {
        writeln!(out, "  gateway log {} (--verbose shows it here)", log.display())?;
    }
    recreate_database(&config.database_url).await?;
    writeln!(out, "  database   {shown_url} (fresh, migrated)")?;
    let stack = Stack::start(&config.database_url).await?;
    stack.describe(out)?;
    let mut script = Script {
        stack: &stack,
        client: reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .context("Failed to build the HTTP client")?,
        out,
        steps: Vec::new(),
    };
    let conversation = script.converse().await;
    let steps = std::mem::take(&mut script.steps);
    let summary = match conversation {
        Ok(()) => count_turns(&stack.pool, stack.tenant)
            .await
            .map(|recorded_turns| DemoSummary {
                tenant_id: stack.tenant,
                database_url: shown_url,
                steps,
                recorded_turns,
                elapsed_ms: started.elapsed().as_millis() as u64,
            }),
        Err(err) => Err(err),
    };
    let summary = summary.and_then(|summary| {
        let turns = summary.turns().count();
        anyhow::ensure!(
            summary.recorded_turns == turns,
            "{turns} turns were answered, but the database holds {} messages",
            summary.recorded_turns
        );
        Ok(summary)
    });
    if let Ok(summary) = &summary {
        let url_holds_a_secret = shown_url_differs(&config.database_url);
        conclude(summary, url_holds_a_secret, out)?;
    }
    stack.stop().await;
    summary
}

async fn recreate_database(url: &str) -> anyhow::Result<()> {
    sqlx::Postgres::force_drop_database(url)
        .await
        .context("Failed to drop the previous demo database (is PostgreSQL up at DATABASE_URL?)")?;
    crate::db::migrate(&DatabaseSettings::from_url(url))
        .await
        .context("Failed to create and migrate the demo database")?;
    Ok(())
}

/// Everything the demo runs, started in dependency order: the agent's port must be known
/// before the tenant that points at it is created, and the tenant's secret before the agent
/// can verify.
struct Stack {
    pool: PgPool,
    tenant: TenantId,
    connectors: Vec<(Platform, ConnectorId)>,
    gateway_url: String,
    agent_url: String,
    stand_ins: PlatformStandIns,
    seen: Arc<SeenDispatches>,
    agent: Served,
    gateway: (oneshot::Sender<()>, JoinHandle<anyhow::Result<()>>),
}

impl Stack {
    async fn start(database_url: &str) -> anyhow::Result<Self> {
        let stand_ins = PlatformStandIns::start().await?;
        let agent_listener = TcpListener::bind("127.0.0.1:0").await?;
        let agent_url = format!("http://{}/agent", agent_listener.local_addr()?);
        let mut settings = ServeSettings::for_database(database_url);
        settings.shutdown_grace_secs = 5;
        let app = Application::build(settings).await?;
        let gateway_url = format!(
            "http://{}",
            app.local_addr().expect("the demo gateway serves HTTP")
        );
        let pool = app.state().pool.clone();
        let keys = app.state().settings.database.secrets.clone();
        let (tenant, secret, connectors) = provision(&pool, &keys, &agent_url, &stand_ins.base_url).await?;
        let seen = Arc::new(SeenDispatches::default());
        let agent = Served::spawn(agent_listener, observed_echo_bridge(&secret, seen.clone())?);
        let (stop, stopped) = oneshot::channel::<()>();
        let gateway = tokio::spawn(app.run_until(async {
            let _ = stopped.await;
        }));
        Ok(Self {
            pool,
            tenant,
            connectors,
            gateway_url,
            agent_url,
            stand_ins,
            seen,
            agent,
            gateway: (stop, gateway),
        })
    }

    fn describe(&self, out: &mut (dyn Write + Send)) -> std::io::Result<()> {
        writeln!(out, "  gateway    {} (HTTP + dispatch worker)", self.gateway_url)?;
        writeln!(out, "  agent      {} (agent-bridge --echo)", self.agent_url)?;
        writeln!(
            out,
            "  platforms  {} (stand-ins for Slack, WhatsApp and Telegram send APIs)",
            self.stand_ins.base_url
        )?;
        writeln!(out, "  tenant     demo {}", self.tenant)?;
        for (platform, connector) in &self.connectors {
            writeln!(out, "             {:<9} connector {connector}", platform.as_str())?;
        }
        writeln!(
            out,
            "  people     alice = Slack {SLACK_ALICE} + Telegram {TELEGRAM_ALICE} (one history), bob = WhatsApp {WHATSAPP_BOB}\n"
        )
    }

    fn hook_url(&self, platform: Platform) -> String {
        let connector = self
            .connectors
            .iter()
            .find(|(p, _)| *p == platform)
            .map(|(_, id)| *id)
            .expect("the demo provisions one connector per platform");
        format!(
            "{}{}",
            self.gateway_url,
            crate::provision::webhook_path(self.tenant, connector)
        )
    }

    async fn stop(self) {
        let (stop, gateway) = self.gateway;
        let _ = stop.send(());
        match gateway.await {
            Ok(Ok(())) => {}
            Ok(Err(err)) => tracing::warn!(error = ?err, "demo gateway stopped with an error"),
            Err(err) => tracing::warn!(%err, "demo gateway task failed"),
        }
        self.agent.stop().await;
        self.stand_ins.stop().await;
    }
}

/// The demo tenant: its agent is the echo bridge; its three connectors send to the
/// stand-ins and know the bot identities of the fixtures (so echoes are recognised).
async fn provision(
    pool: &PgPool,
    keys: &crate::secrets::Keyring,
    agent_url: &str,
    platforms_url: &str,
) -> anyhow::Result<(TenantId, String, Vec<(Platform, ConnectorId)>)> {
    use crate::provision::{add_connector, add_link, create_tenant};
    let created = create_tenant(pool, keys, "demo", "Demo tenant", Some(agent_url)).await?;
    let tenant = created.tenant_id;
    let mut connectors = Vec::new();
    for platform in [Platform::Slack, Platform::Whatsapp, Platform::Telegram] {
        let new = demo_connector(platform, platforms_url);
        connectors.push((
            platform,
            add_connector(pool, keys, tenant, &new).await?.connector_id,
        ));
    }
    for (platform, sender, user) in [
        (Platform::Slack, SLACK_ALICE, "alice"),
        (Platform::Telegram, TELEGRAM_ALICE, "alice"),
        (Platform::Whatsapp, WHATSAPP_BOB, "bob"),
    ] {
        add_link(pool, tenant, platform, sender, user).await?;
    }
    Ok((tenant, created.dispatch_secret, connectors))
}

fn demo_connector(platform: Platform, platforms_url: &str) -> NewConnector {
    let secret = |s: &str| Some(SecretString::from(s.to_owned()));
    let (verification, external_id, bot_user_id, token) = match platform {
        Platform::Slack => (
            SLACK_SIGNING_SECRET,
            SLACK_TEAM,
            Some(SLACK_BOT_USER),
            "xoxb-demo-token",
        ),
        Platform::Whatsapp => (
            WHATSAPP_APP_SECRET,
            WHATSAPP_PHONE_NUMBER_ID,
            None,
            "demo-whatsapp-access-token",
        ),
        Platform::Telegram => (
            TELEGRAM_SECRET_TOKEN,
            TELEGRAM_BOT,
            Some(TELEGRAM_BOT),
            "7000000001:demo-telegram-bot-token",
        ),
    };
    NewConnector {
        platform,
        name: format!("demo {platform}"),
        external_id: Some(external_id.into()),
        app_id: (platform == Platform::Slack).then(|| SLACK_APP.into()),
        bot_user_id: bot_user_id.map(Into::into),
        bot_id: (platform == Platform::Slack).then(|| SLACK_BOT_ID.into()),
        verification_secret: SecretString::from(verification.to_owned()),
        verify_token: if platform == Platform::Whatsapp {
            secret("demo-verify-token")
        } else {
            None
        },
        outbound_token: secret(token),
        api_base_url: Some(platforms_url.to_owned()),
        unlinked_policy: UnlinkedPolicy::Deny,
        telegram_delivery: TelegramDelivery::AtMostOnce,
        unlinked_notice: None,
        format_markdown: true,
        typing_indicator: true,
    }
}

/// The dispatches the echo bridge answered, as it received them.
#[derive(Default)]
struct SeenDispatches(Mutex<Vec<DispatchOut>>);

impl SeenDispatches {
    fn latest(&self) -> Option<DispatchOut> {
        self.0.lock().expect("lock holders never panic").last().cloned()
    }
}

/// The echo bridge, with a layer that keeps a copy of each dispatch it answered — what
/// the demo prints as "the agent saw".
fn observed_echo_bridge(secret: &str, seen: Arc<SeenDispatches>) -> anyhow::Result<Router> {
    let bridge = agent_bridge::router(BridgeConfig::echo(secret))?;
    Ok(bridge.layer(axum::middleware::from_fn_with_state(seen, observe)))
}

async fn observe(State(seen): State<Arc<SeenDispatches>>, request: Request, next: Next) -> Response {
    let (parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, 8 * 1024 * 1024).await else {
        return axum::http::StatusCode::PAYLOAD_TOO_LARGE.into_response();
    };
    let dispatch = serde_json::from_slice::<DispatchOut>(&bytes).ok();
    let response = next.run(Request::from_parts(parts, Body::from(bytes))).await;
    if let (true, Some(dispatch)) = (response.status().is_success(), dispatch) {
        seen.0.lock().expect("lock holders never panic").push(dispatch);
    }
    response
}

/// The conversation, posted step by step; each turn waits for its reply before the next
/// one is sent, so the history each dispatch sees is deterministic.
struct Script<'a> {
    stack: &'a Stack,
    client: reqwest::Client,
    out: &'a mut (dyn Write + Send),
    steps: Vec<Step>,
}

impl Script<'_> {
    async fn converse(&mut self) -> anyhow::Result<()> {
        let now = chrono::Utc::now().timestamp();
        let (first_ts, echo_ts, thanks_ts) = (
            format!("{now}.000100"),
            format!("{now}.000200"),
            format!("{}.000300", now + 1),
        );
        let hello = "Hi! What can you do?";
        let first = slack_dm(&first_ts, None, hello);
        self.turn(Platform::Slack, SLACK_ALICE, hello, first.clone())
            .await?;

        // Slack retries an event it thinks timed out: same body, retry headers.
        let retry = [
            ("x-slack-retry-num", "1".to_owned()),
            ("x-slack-retry-reason", "http_timeout".to_owned()),
        ];
        self.not_a_turn(
            Platform::Slack,
            SLACK_ALICE,
            hello,
            first,
            &retry,
            Outcome::Duplicate,
        )
        .await?;

        // Slack sends our own reply back to the app as a message event.
        let reply_text = self.last_reply_text();
        let echo = slack_bot_echo(&echo_ts, &first_ts, &reply_text);
        self.not_a_turn(
            Platform::Slack,
            SLACK_BOT_USER,
            &reply_text,
            echo,
            &[],
            Outcome::Dropped,
        )
        .await?;

        let telegram = "Same person, now on Telegram: do you remember me?";
        self.turn(
            Platform::Telegram,
            TELEGRAM_ALICE,
            telegram,
            telegram_text(900_000_001, 201, telegram),
        )
        .await?;

        let whatsapp = "Does it come in another color?";
        self.turn(
            Platform::Whatsapp,
            WHATSAPP_BOB,
            whatsapp,
            whatsapp_text(&format!("wamid.DEMO{now}"), whatsapp),
        )
        .await?;

        let thanks = "Back in the Slack thread: thanks!";
        self.turn(
            Platform::Slack,
            SLACK_ALICE,
            thanks,
            slack_dm(&thanks_ts, Some(&first_ts), thanks),
        )
        .await
    }

    fn last_reply_text(&self) -> String {
        self.steps
            .iter()
            .rev()
            .find_map(|s| match &s.outcome {
                Outcome::Replied(turn) => Some(turn.reply.text.clone()),
                _ => None,
            })
            .unwrap_or_default()
    }

    fn replies_so_far(&self) -> usize {
        self.steps
            .iter()
            .filter(|s| matches!(s.outcome, Outcome::Replied(_)))
            .count()
    }

    /// A new user message: one turn queued, then its reply on the platform.
    async fn turn(
        &mut self,
        platform: Platform,
        sender: &str,
        text: &str,
        body: Vec<u8>,
    ) -> anyhow::Result<()> {
        self.announce(platform, sender, text, "")?;
        let webhook = self.post(platform, body, &[]).await?;
        writeln!(
            self.out,
            "     gateway    {}, {} queued",
            webhook.status,
            plural(webhook.queued as usize, "turn")
        )?;
        anyhow::ensure!(
            webhook.queued == 1,
            "the gateway should have queued this message as one turn: {webhook:?}"
        );
        let expected = self.replies_so_far() + 1;
        let replies = self
            .stack
            .stand_ins
            .wait_for_replies(expected, REPLY_TIMEOUT)
            .await?;
        let reply = replies[expected - 1].clone();
        let dispatch = self
            .stack
            .seen
            .latest()
            .context("a reply arrived, yet the agent saw no dispatch")?;
        let turn = Turn {
            user_id: dispatch.user_id.clone(),
            agent_saw: dispatch.messages.iter().map(|m| m.role.clone()).collect(),
            reply,
        };
        self.print_turn(&turn)?;
        self.record(platform, sender, text, webhook, Outcome::Replied(turn));
        Ok(())
    }

    /// A webhook that must not become a turn: a duplicate or a dropped echo.
    async fn not_a_turn(
        &mut self,
        platform: Platform,
        sender: &str,
        text: &str,
        body: Vec<u8>,
        extra_headers: &[(&'static str, String)],
        outcome: Outcome,
    ) -> anyhow::Result<()> {
        let note = match outcome {
            Outcome::Duplicate => "  (Slack retries the same event: x-slack-retry-num 1)",
            _ => "  (our reply, sent back to the app by Slack)",
        };
        self.announce(platform, sender, text, note)?;
        let webhook = self.post(platform, body, extra_headers).await?;
        let (held, why) = match outcome {
            Outcome::Duplicate => (
                webhook.duplicates == 1,
                "duplicate: the same message key, so no new turn and no second reply",
            ),
            _ => (
                webhook.dropped == 1,
                "dropped: the bot's own message never reaches the agent",
            ),
        };
        writeln!(self.out, "     gateway    {}, {why}", webhook.status)?;
        anyhow::ensure!(
            held && webhook.queued == 0,
            "unexpected gateway answer: {webhook:?}"
        );
        self.record(platform, sender, text, webhook, outcome);
        Ok(())
    }

    fn announce(&mut self, platform: Platform, sender: &str, text: &str, note: &str) -> std::io::Result<()> {
        let who = match sender {
            SLACK_ALICE | TELEGRAM_ALICE => format!("alice ({sender})"),
            WHATSAPP_BOB => format!("bob ({sender})"),
            _ => format!("the bot itself ({sender})"),
        };
        writeln!(
            self.out,
            "{:>2}. {:<9} {who}: {text:?}{note}",
            self.steps.len() + 1,
            platform.as_str(),
        )
    }

    fn print_turn(&mut self, turn: &Turn) -> std::io::Result<()> {
        let earlier = turn
            .agent_saw
            .iter()
            .filter(|r| *r == "user")
            .count()
            .saturating_sub(1);
        writeln!(
            self.out,
            "     agent saw  {} [{}] for user {}: {} before this one",
            plural(turn.agent_saw.len(), "message"),
            turn.agent_saw.join(", "),
            turn.user_id.as_deref().unwrap_or("(unlinked)"),
            plural(earlier, "turn"),
        )?;
        let reply = &turn.reply;
        let target = match reply.platform {
            Platform::Slack => format!("channel {}, in thread {}", reply.chat, reply.reply_to),
            Platform::Telegram => format!("chat {}, replying to message {}", reply.chat, reply.reply_to),
            Platform::Whatsapp => format!("to {}, quoting {}", reply.chat, reply.reply_to),
        };
        writeln!(
            self.out,
            "     replied    {} {target}: {:?}\n",
            reply.platform, reply.text
        )
    }

    fn record(
        &mut self,
        platform: Platform,
        sender: &str,
        text: &str,
        webhook: WebhookAnswer,
        outcome: Outcome,
    ) {
        if !matches!(outcome, Outcome::Replied(_)) {
            let _ = writeln!(self.out);
        }
        self.steps.push(Step {
            platform,
            sender: sender.to_owned(),
            text: text.to_owned(),
            webhook,
            outcome,
        });
    }

    /// POSTs a signed webhook to the gateway's real route; anything but 200 stops the demo.
    async fn post(
        &self,
        platform: Platform,
        body: Vec<u8>,
        extra_headers: &[(&'static str, String)],
    ) -> anyhow::Result<WebhookAnswer> {
        let mut request = self.client.post(self.stack.hook_url(platform));
        for (name, value) in signed_headers(platform, &body) {
            request = request.header(name, value);
        }
        for (name, value) in extra_headers {
            request = request.header(*name, value);
        }
        let response = request
            .body(body)
            .send()
            .await
            .context("Failed to reach the demo gateway")?;
        let status = response.status();
        let text = response.text().await.unwrap_or_default();
        anyhow::ensure!(status == 200, "the gateway answered {status}: {text}");
        let mut answer: WebhookAnswer =
            serde_json::from_str(&text).with_context(|| format!("unexpected webhook answer: {text}"))?;
        answer.status = status.as_u16();
        Ok(answer)
    }
}

/// The demo tenant's recorded turns, read back through the tenant transaction (RLS on).
async fn count_turns(pool: &PgPool, tenant: TenantId) -> anyhow::Result<usize> {
    let mut tx = TenantTx::begin(pool, tenant).await?;
    let count: i64 = sqlx::query_scalar("select count(*) from channel_messages where tenant_id = $1")
        .bind(tenant)
        .fetch_one(tx.conn())
        .await
        .context("Failed to count the demo's messages")?;
    tx.commit().await?;
    Ok(usize::try_from(count).unwrap_or_default())
}

/// The last words: what happened, and commands to explore that work when pasted. A URL
/// with a password is not printed; the scripts' own set-up gives it back instead.
fn conclude(
    summary: &DemoSummary,
    url_holds_a_secret: bool,
    out: &mut (dyn Write + Send),
) -> std::io::Result<()> {
    let turns = summary.turns().count();
    writeln!(
        out,
        "Done in {:.1} s: {} webhooks made {turns} turns ({} rows in channel_messages), each answered on its \
         own platform; {} retried duplicate collapsed, {} bot echo dropped.\n",
        summary.elapsed_ms as f64 / 1000.0,
        summary.steps.len(),
        summary.recorded_turns,
        summary.duplicates(),
        summary.dropped(),
    )?;
    writeln!(
        out,
        "Explore, from the repository root (the database stays until the next demo; the demo's agent and \
         platform stand-ins have stopped):"
    )?;
    let database = reqwest::Url::parse(&summary.database_url)
        .ok()
        .map(|url| url.path().trim_start_matches('/').to_owned())
        .unwrap_or_default();
    if url_holds_a_secret {
        writeln!(
            out,
            "  source scripts/lib/postgres.sh && ensure_database {database}   # DATABASE_URL, password included"
        )?;
    } else {
        writeln!(out, "  export DATABASE_URL='{}'", summary.database_url)?;
    }
    writeln!(out, "  B={}", this_binary())?;
    let tenant = summary.tenant_id;
    writeln!(out, "  $B messages list --tenant {tenant}")?;
    writeln!(out, "  $B history --tenant {tenant} --user alice")?;
    writeln!(
        out,
        "  $B key issue --tenant {tenant}   # then the admin API (README)"
    )?;
    writeln!(
        out,
        "  scripts/run     # with that DATABASE_URL: the gateway, its admin API and CLI on the demo data (README)"
    )
}

/// This program's path, relative to the working directory when it lies below it.
fn this_binary() -> String {
    let Ok(exe) = std::env::current_exe() else {
        return "channel-bridge".to_owned();
    };
    let relative = std::env::current_dir()
        .ok()
        .and_then(|cwd| exe.strip_prefix(cwd).ok().map(std::path::Path::to_path_buf));
    relative.unwrap_or(exe).display().to_string()
}

fn plural(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

fn shown_url_differs(url: &str) -> bool {
    redact_password(url) != url
}

fn redact_password(url: &str) -> String {
    crate::db::masked_url(url)
}

/// A small axum server on a bound listener, stopped gracefully on request.
struct Served {
    stop: oneshot::Sender<()>,
    task: JoinHandle<std::io::Result<()>>,
}

impl Served {
    fn spawn(listener: TcpListener, router: Router) -> Self {
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            axum::serve(listener, router)
                .with_graceful_shutdown(async {
                    let _ = stopped.await;
                })
                .await
        });
        Self { stop, task }
    }

    async fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.task.await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_demo_database_is_a_sibling_and_never_the_users_own() {
        assert_eq!(
            demo_database_url(
                "postgres://postgres@127.0.0.1:5432/channel_bridge",
                "channel_bridge_demo"
            )
            .unwrap(),
            "postgres://postgres@127.0.0.1:5432/channel_bridge_demo"
        );
        assert!(demo_database_url("postgres://h/channel_bridge_demo", "channel_bridge_demo").is_err());
        assert!(demo_database_url("postgres://h/x", "Robert'); drop").is_err());
    }

    #[test]
    fn passwords_are_not_printed() {
        assert_eq!(
            redact_password("postgres://app:hunter2@db:5432/demo"),
            "postgres://app:****@db:5432/demo"
        );
        assert_eq!(
            redact_password("postgres://postgres@db/demo"),
            "postgres://postgres@db/demo"
        );
    }
}
