//! Typed settings, read once at start from flags and environment, validated before anything
//! runs. Secrets are `SecretString`, whose `Debug` prints `[REDACTED]`.

use std::net::SocketAddr;
use std::time::Duration;

use clap::{Args, ValueEnum};
use secrecy::{ExposeSecret, SecretString};

use crate::egress::EgressPolicy;
use crate::secrets::Keyring;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// One JSON object per line, for log shippers.
    Json,
    /// Human-readable, for terminals.
    #[default]
    Pretty,
}

/// How to reach PostgreSQL. Shared by every subcommand that touches the database.
#[derive(Clone, Debug, Args)]
pub struct DatabaseSettings {
    /// PostgreSQL URL of the schema owner: migrations run as this user. Without
    /// `CB_APP_DATABASE_URL`, every pooled connection logs in as this user too and then
    /// switches to the `channel_bridge_app` role (reversible: the development default).
    #[arg(long = "database-url", env = "DATABASE_URL", hide_env_values = true)]
    pub url: SecretString,

    /// PostgreSQL URL of the runtime login role (a member of `channel_bridge_app` that owns
    /// nothing, is no superuser and has no BYPASSRLS). When set, the pool logs in with it
    /// and never runs `SET ROLE`, so no statement can step back to a privileged role;
    /// migrations still run as the `DATABASE_URL` owner.
    #[arg(
        long = "app-database-url",
        env = "CB_APP_DATABASE_URL",
        hide_env_values = true
    )]
    pub app_url: Option<SecretString>,

    /// Keys that seal the secrets stored in the database (connector secrets and tokens,
    /// tenants' dispatch secrets; `crate::secrets`): `id:base64-of-32-bytes`, several
    /// separated by commas, the first sealing and all opening. `@path` reads a file. Unset:
    /// `serve` refuses to start unless `--allow-plaintext-secrets` says to keep secrets in
    /// plain text. `channel-bridge secrets generate-key` makes one.
    #[arg(
        long = "secrets-key",
        env = "CB_SECRETS_KEY",
        hide_env_values = true,
        hide_default_value = true,
        default_value = "",
        value_parser = crate::secrets::parse_setting
    )]
    pub secrets: Keyring,

    /// Maximum connections in the pool.
    #[arg(long = "db-pool-size", env = "CB_DB_POOL_SIZE", default_value_t = 16)]
    pub pool_size: u32,

    /// How long a request waits for a pooled connection before answering 503.
    #[arg(
        long = "db-acquire-timeout-ms",
        env = "CB_DB_ACQUIRE_TIMEOUT_MS",
        default_value_t = 2000
    )]
    pub acquire_timeout_ms: u64,

    /// The longest one database interaction may take before it is abandoned as an outage
    /// (answered 503 on the request path; retried later by the worker): recording a batch of
    /// webhooks, one batch of dispatch state changes, a claim, a lease renewal. Bounds the
    /// wait when the network to PostgreSQL holds traffic, which no error reports for
    /// minutes.
    #[arg(long = "db-deadline-ms", env = "CB_DB_DEADLINE_MS", default_value_t = 2000)]
    pub deadline_ms: u64,

    /// Server-side `statement_timeout` of the gateway's sessions, in milliseconds (0: the
    /// server's default). Cancels a statement the client has stopped waiting for.
    #[arg(
        long = "db-statement-timeout-ms",
        env = "CB_DB_STATEMENT_TIMEOUT_MS",
        default_value_t = 15_000
    )]
    pub statement_timeout_ms: u64,

    /// Server-side `idle_in_transaction_session_timeout`, in milliseconds (0: the server's
    /// default): a session whose client vanished mid-transaction is ended and its locks
    /// released.
    #[arg(
        long = "db-idle-in-transaction-timeout-ms",
        env = "CB_DB_IDLE_IN_TRANSACTION_TIMEOUT_MS",
        default_value_t = 15_000
    )]
    pub idle_in_transaction_timeout_ms: u64,
}

impl DatabaseSettings {
    pub fn from_url(url: impl Into<String>) -> Self {
        Self {
            url: SecretString::from(url.into()),
            app_url: None,
            secrets: Keyring::plain(),
            pool_size: 16,
            acquire_timeout_ms: 2000,
            deadline_ms: 2000,
            statement_timeout_ms: 15_000,
            idle_in_transaction_timeout_ms: 15_000,
        }
    }

    pub fn acquire_timeout(&self) -> Duration {
        Duration::from_millis(self.acquire_timeout_ms)
    }

    pub fn deadline(&self) -> Duration {
        Duration::from_millis(self.deadline_ms)
    }

    pub fn with_secrets(mut self, keys: Keyring) -> Self {
        self.secrets = keys;
        self
    }

    pub fn with_app_url(mut self, app_url: impl Into<String>) -> Self {
        self.app_url = Some(SecretString::from(app_url.into()));
        self
    }

    /// The URL the pool logs in with: `CB_APP_DATABASE_URL` when set, else `DATABASE_URL`.
    pub fn pool_url(&self) -> &SecretString {
        self.app_url.as_ref().unwrap_or(&self.url)
    }

    fn validate(&self) -> Result<(), SettingsError> {
        let is_postgres = |url: &SecretString| {
            let url = url.expose_secret();
            url.starts_with("postgres://") || url.starts_with("postgresql://")
        };
        if !is_postgres(&self.url) {
            return Err(SettingsError(
                "DATABASE_URL must start with postgres:// or postgresql://".into(),
            ));
        }
        if self.app_url.as_ref().is_some_and(|url| !is_postgres(url)) {
            return Err(SettingsError(
                "CB_APP_DATABASE_URL must start with postgres:// or postgresql://".into(),
            ));
        }
        if self.pool_size == 0 {
            return Err(SettingsError("CB_DB_POOL_SIZE must be at least 1".into()));
        }
        if self.deadline_ms == 0 || self.acquire_timeout_ms == 0 {
            return Err(SettingsError(
                "CB_DB_DEADLINE_MS and CB_DB_ACQUIRE_TIMEOUT_MS must be at least 1".into(),
            ));
        }
        Ok(())
    }
}

/// Settings of `serve`.
#[derive(Clone, Debug, Args)]
pub struct ServeSettings {
    #[command(flatten)]
    pub database: DatabaseSettings,

    /// Serve without `CB_SECRETS_KEY`, keeping connector secrets, tokens and dispatch
    /// secrets in plain text (warned about at start and on `/readyz`). Without a key and
    /// without this, `serve` refuses to start.
    #[arg(long = "allow-plaintext-secrets", env = "CB_SECRETS_PLAINTEXT")]
    pub allow_plaintext_secrets: bool,

    /// Address the HTTP server listens on.
    #[arg(long, env = "CB_BIND", default_value = "0.0.0.0:8080")]
    pub bind: SocketAddr,

    /// Agent proxy URL for tenants that have none of their own.
    #[arg(long, env = "CB_AGENT_URL")]
    pub agent_url: Option<String>,

    #[command(flatten)]
    pub egress: EgressSettings,

    #[command(flatten)]
    pub media: crate::media::MediaSettings,

    /// Bearer token of the operator endpoints (tenant creation, key issue). Unset disables them.
    #[arg(long, env = "CB_OPERATOR_TOKEN", hide_env_values = true, value_parser = crate::secret_input::parse)]
    pub operator_token: Option<SecretString>,

    /// Largest webhook body accepted from Slack and Telegram, in bytes.
    #[arg(long, env = "CB_BODY_LIMIT", default_value_t = 1024 * 1024)]
    pub body_limit: usize,

    /// Largest webhook body accepted from WhatsApp, in bytes: Meta batches up to 1000
    /// updates, about 3 MB.
    #[arg(long, env = "CB_WHATSAPP_BODY_LIMIT", default_value_t = 4 * 1024 * 1024)]
    pub whatsapp_body_limit: usize,

    /// Seconds a connector read for webhook verification, and a tenant read for dispatch,
    /// are reused (0: read them every time). Changes made through this instance apply at
    /// once; changes made through another instance or the CLI apply within this time.
    #[arg(long, env = "CB_CONFIG_CACHE_SECS", default_value_t = 5)]
    pub config_cache_secs: u64,

    /// Ingress writer tasks: transactions recording webhooks at the same time.
    #[arg(long, env = "CB_INGRESS_WRITERS", default_value_t = 4)]
    pub ingress_writers: usize,

    /// Most webhooks one ingress transaction records (they share its commit).
    #[arg(long, env = "CB_INGRESS_BATCH_MAX", default_value_t = 64)]
    pub ingress_batch_max: usize,

    /// Run the HTTP server (disable to run a worker-only instance).
    #[arg(long, env = "CB_HTTP", default_value_t = true, action = clap::ArgAction::Set)]
    pub http: bool,

    /// Address of a second listener serving only `/metrics`, `/healthz` and `/readyz`
    /// (unset: none). A worker-only instance (`--http false`) is scraped and probed here;
    /// beside the main listener it keeps metrics and probes off the public address.
    #[arg(long, env = "CB_METRICS_BIND")]
    pub metrics_bind: Option<SocketAddr>,

    /// Run the dispatch worker (disable to run a web-only instance).
    #[arg(long, env = "CB_WORKER", default_value_t = true, action = clap::ArgAction::Set)]
    pub worker: bool,

    /// Most jobs this instance keeps in flight (agent calls and reply posts). A ceiling, not
    /// a number of pollers: one claimer fills it. A job waiting on the agent holds no
    /// database connection; throughput is about this ÷ the agent's latency.
    #[arg(long, env = "CB_MAX_IN_FLIGHT", default_value_t = 8192)]
    pub max_in_flight: usize,

    /// The share of `CB_MAX_IN_FLIGHT` one tenant may hold, in percent, unless the operator
    /// set the tenant's own `max_in_flight`.
    #[arg(long, env = "CB_TENANT_SHARE_PERCENT", default_value_t = 50)]
    pub tenant_share_percent: u8,

    /// Most jobs one claim statement takes.
    #[arg(long, env = "CB_CLAIM_BATCH_MAX", default_value_t = 256)]
    pub claim_batch_max: usize,

    /// Turn-writer tasks: transactions recording dispatch state changes at the same time.
    #[arg(long, env = "CB_STATE_WRITERS", default_value_t = 4)]
    pub state_writers: usize,

    /// Most state changes one turn-writer transaction applies (they share its commit).
    #[arg(long, env = "CB_STATE_BATCH_MAX", default_value_t = 128)]
    pub state_batch_max: usize,

    /// Tenants with the deepest queues that get per-tenant queue metrics (0: none).
    #[arg(long, env = "CB_METRICS_TOP_TENANTS", default_value_t = 10)]
    pub metrics_top_tenants: usize,

    #[command(flatten)]
    pub dispatch: DispatchSettings,

    /// The longest a webhook request may take, in milliseconds, before it is answered 503
    /// so the platform retries (Slack retries after 3 s). Whatever it recorded stays
    /// recorded; the retry is then a duplicate.
    #[arg(long, env = "CB_WEBHOOK_DEADLINE_MS", default_value_t = 2500)]
    pub webhook_deadline_ms: u64,

    /// The longest an admin, operator or agent API request may take, in milliseconds, before
    /// it is answered 503.
    #[arg(long, env = "CB_ADMIN_DEADLINE_MS", default_value_t = 10_000)]
    pub admin_deadline_ms: u64,

    /// Apply pending migrations before serving (as `channel-bridge migrate` would). Without
    /// it, `serve` refuses to start on a database whose schema is behind the binary.
    #[arg(long)]
    pub migrate: bool,

    /// Seconds to finish in-flight requests and jobs after SIGTERM or ctrl-c.
    #[arg(long, env = "CB_SHUTDOWN_GRACE_SECS", default_value_t = 30)]
    pub shutdown_grace_secs: u64,
}

/// Settings of `healthcheck`: which `/readyz` to ask.
#[derive(Clone, Debug, Args)]
pub struct HealthcheckSettings {
    /// URL to probe; one without a path gets `/readyz`. Default: the instance's
    /// `CB_METRICS_BIND` when set, else its `CB_BIND`, on loopback when the address names
    /// every interface (`0.0.0.0`, `::`).
    #[arg(long, env = "CB_HEALTHCHECK_URL")]
    pub url: Option<String>,

    /// The instance's `CB_BIND` (read to find the default URL).
    #[arg(long, env = "CB_BIND", default_value = "0.0.0.0:8080", hide = true)]
    pub bind: SocketAddr,

    /// The instance's `CB_METRICS_BIND` (read to find the default URL).
    #[arg(long, env = "CB_METRICS_BIND", hide = true)]
    pub metrics_bind: Option<SocketAddr>,

    /// Seconds to wait for the answer.
    #[arg(long, default_value_t = 5)]
    pub timeout_secs: u64,
}

impl HealthcheckSettings {
    /// The URL `healthcheck` asks.
    pub fn target(&self) -> Result<reqwest::Url, SettingsError> {
        let url = match &self.url {
            Some(url) => url.clone(),
            None => {
                let mut addr = self.metrics_bind.unwrap_or(self.bind);
                if addr.ip().is_unspecified() {
                    addr.set_ip(match addr {
                        SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
                        SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
                    });
                }
                format!("http://{addr}/readyz")
            }
        };
        let mut url = reqwest::Url::parse(&url)
            .map_err(|e| SettingsError(format!("CB_HEALTHCHECK_URL is not a URL: {e}")))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(SettingsError(
                "CB_HEALTHCHECK_URL must be an http or https URL".into(),
            ));
        }
        if url.path() == "/" {
            url.set_path("/readyz");
        }
        Ok(url)
    }

    pub fn timeout(&self) -> Duration {
        Duration::from_secs(self.timeout_secs.max(1))
    }
}

/// Where the worker may send requests beyond public addresses (`crate::egress`).
#[derive(Clone, Debug, Default, Args)]
pub struct EgressSettings {
    /// Comma-separated CIDRs, IP addresses and host names the worker may reach although
    /// they are not public (an internal agent: `10.0.5.0/24`, `agent.internal`). Empty:
    /// public addresses only.
    #[arg(
        long = "egress-allow",
        env = "CB_EGRESS_ALLOW",
        default_value = "",
        value_parser = EgressPolicy::parse
    )]
    pub allow: EgressPolicy,
}

impl EgressSettings {
    /// For the demo and tests, whose stand-in servers listen on loopback.
    pub fn allowing_loopback() -> Self {
        let allow =
            EgressPolicy::parse("127.0.0.1,::1,localhost").expect("the loopback allow list is well formed");
        Self { allow }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("invalid configuration: {0}")]
pub struct SettingsError(pub String);

/// Why `serve` stops without a key, and both ways on (docs/security.md#secrets-at-rest).
const NO_SECRETS_KEY: &str = "CB_SECRETS_KEY is not set, and serve does not keep connector \
    secrets, tokens and dispatch secrets in plain text unless told to. Make a key with \
    `(umask 077; channel-bridge secrets generate-key > cb_secrets.key)`, keep a copy of it \
    (sealed secrets do not open without it) and start serve with CB_SECRETS_KEY=@cb_secrets.key \
    (secrets stored in plain text so far are sealed at start); or, to keep them in plain text, \
    start it with --allow-plaintext-secrets or CB_SECRETS_PLAINTEXT=true \
    (docs/security.md#secrets-at-rest)";

impl ServeSettings {
    /// For tests and the demo: an ephemeral port, a key of the process's own (their databases
    /// do not outlive it), loopback allowed.
    pub fn for_database(url: impl Into<String>) -> Self {
        Self {
            database: DatabaseSettings::from_url(url).with_secrets(Keyring::ephemeral()),
            allow_plaintext_secrets: false,
            bind: SocketAddr::from(([127, 0, 0, 1], 0)),
            agent_url: None,
            egress: EgressSettings::allowing_loopback(),
            media: crate::media::MediaSettings::default(),
            operator_token: None,
            body_limit: 1024 * 1024,
            whatsapp_body_limit: 4 * 1024 * 1024,
            config_cache_secs: 5,
            ingress_writers: 4,
            ingress_batch_max: 64,
            http: true,
            metrics_bind: None,
            worker: true,
            max_in_flight: 8192,
            tenant_share_percent: 50,
            claim_batch_max: 256,
            state_writers: 4,
            state_batch_max: 128,
            metrics_top_tenants: 10,
            dispatch: DispatchSettings::default(),
            webhook_deadline_ms: 2500,
            admin_deadline_ms: 10_000,
            migrate: false,
            shutdown_grace_secs: 30,
        }
    }

    /// Checks what clap cannot: ranges and cross-field rules. Fails fast with one message.
    pub fn validate(&self) -> Result<(), SettingsError> {
        self.database.validate()?;
        if !self.database.secrets.seals() && !self.allow_plaintext_secrets {
            return Err(SettingsError(NO_SECRETS_KEY.into()));
        }
        if !self.http && !self.worker {
            return Err(SettingsError(
                "CB_HTTP and CB_WORKER are both false: nothing to run".into(),
            ));
        }
        if let Some(url) = &self.agent_url {
            let parsed = reqwest::Url::parse(url)
                .map_err(|e| SettingsError(format!("CB_AGENT_URL is not a URL: {e}")))?;
            // The scheme can be judged now; the address is checked when connecting, as for
            // every agent URL (DNS can change), so an internal agent needs CB_EGRESS_ALLOW.
            if !matches!(parsed.scheme(), "http" | "https") {
                return Err(SettingsError("CB_AGENT_URL must be an http or https URL".into()));
            }
        }
        if let Some(url) = &self.media.public_url {
            let http = reqwest::Url::parse(url).is_ok_and(|u| matches!(u.scheme(), "http" | "https"));
            if !http {
                return Err(SettingsError("CB_PUBLIC_URL must be an http or https URL".into()));
            }
        }
        if let Some(token) = &self.operator_token {
            if token.expose_secret().len() < 16 {
                return Err(SettingsError(
                    "CB_OPERATOR_TOKEN must be at least 16 characters".into(),
                ));
            }
        }
        self.validate_limits()
    }

    /// The sizes, deadlines and counts, each with its floor.
    fn validate_limits(&self) -> Result<(), SettingsError> {
        if self.body_limit < 1024 || self.whatsapp_body_limit < 1024 {
            return Err(SettingsError("body limits must be at least 1024 bytes".into()));
        }
        if self.webhook_deadline_ms == 0 || self.admin_deadline_ms == 0 {
            return Err(SettingsError(
                "CB_WEBHOOK_DEADLINE_MS and CB_ADMIN_DEADLINE_MS must be at least 1".into(),
            ));
        }
        if self.ingress_writers == 0 || self.ingress_batch_max == 0 {
            return Err(SettingsError(
                "CB_INGRESS_WRITERS and CB_INGRESS_BATCH_MAX must be at least 1".into(),
            ));
        }
        self.dispatch.validate()?;
        if self.worker && (self.max_in_flight == 0 || self.claim_batch_max == 0) {
            return Err(SettingsError(
                "CB_MAX_IN_FLIGHT and CB_CLAIM_BATCH_MAX must be at least 1".into(),
            ));
        }
        if !(1..=100).contains(&self.tenant_share_percent) {
            return Err(SettingsError(
                "CB_TENANT_SHARE_PERCENT must be between 1 and 100".into(),
            ));
        }
        if self.state_writers == 0 || self.state_batch_max == 0 {
            return Err(SettingsError(
                "CB_STATE_WRITERS and CB_STATE_BATCH_MAX must be at least 1".into(),
            ));
        }
        Ok(())
    }
}

/// How the worker calls agents and retries them.
#[derive(Clone, Debug, Args)]
pub struct DispatchSettings {
    /// Timeout of one agent call, in seconds.
    #[arg(long, env = "CB_AGENT_TIMEOUT_SECS", default_value_t = 30)]
    pub agent_timeout_secs: u64,

    /// Call the agent over HTTP/2 (prior knowledge: `h2c` on `http://`, `h2` over TLS), every
    /// call in flight to one agent host a stream of one connection. Off: HTTP/1.1, one
    /// connection per call in flight (about 30 kB of the gateway's memory each). The agent's
    /// server must accept as many concurrent streams as calls are in flight: calls beyond
    /// its `SETTINGS_MAX_CONCURRENT_STREAMS` wait for a free stream.
    #[arg(long, env = "CB_AGENT_HTTP2", default_value_t = false, action = clap::ArgAction::Set)]
    pub agent_http2: bool,

    /// Agent calls per message before it is `dispatch_failed` (first call included); 0: no
    /// limit by count, only the retry horizon.
    #[arg(long, env = "CB_DISPATCH_MAX_ATTEMPTS", default_value_t = 0)]
    pub max_attempts: u32,

    /// How long an unreachable or failing agent is retried, in seconds, counted from when
    /// the turn was queued (default one day, as Svix retries a webhook for about a day).
    #[arg(long, env = "CB_DISPATCH_RETRY_HORIZON_SECS", default_value_t = 86_400)]
    pub retry_horizon_secs: u64,

    /// How long an agent that answered a dispatch `202 Accepted` has to post its answer to
    /// the turn's events URL, in seconds (default 6 hours); past it the turn ends with what
    /// it got (docs/agent.md#answering-later).
    #[arg(long, env = "CB_AGENT_ASYNC_HORIZON_SECS", default_value_t = 21_600,
          value_parser = clap::value_parser!(u64).range(60..=2_592_000))]
    pub async_horizon_secs: u64,

    /// Timeout of one request to a platform's API (a reply part, a reconciliation), in
    /// seconds.
    #[arg(long, env = "CB_PLATFORM_TIMEOUT_SECS", default_value_t = 15)]
    pub platform_timeout_secs: u64,

    /// Timeout of fetching one file an answer names, and of one upload of it to the
    /// platform, in seconds (docs/agent.md#files-and-reactions-in-answers).
    #[arg(long, env = "CB_FILE_TIMEOUT_SECS", default_value_t = 60)]
    pub file_timeout_secs: u64,

    /// First retry delay, in milliseconds; doubles each attempt, with equal jitter.
    #[arg(long, env = "CB_RETRY_BASE_MS", default_value_t = 1000)]
    pub retry_base_ms: u64,

    /// Longest retry delay, in milliseconds (also caps an agent's `Retry-After`).
    #[arg(long, env = "CB_RETRY_MAX_MS", default_value_t = 300_000)]
    pub retry_max_ms: u64,

    /// How long a claimed job stays invisible to other workers, in seconds. The holder renews
    /// it every third of this while it works; it must exceed the agent timeout and the
    /// platform timeout, so that one request started right after a renewal that was then
    /// lost still ends before the lease does.
    #[arg(long, env = "CB_LEASE_SECS", default_value_t = 120)]
    pub lease_secs: u64,

    /// Jobs the queue's current generation takes before the other, truncated once drained,
    /// takes the next ones: about how many finished jobs a claim may walk past without
    /// VACUUM (docs/operations.md#the-queue-without-vacuum).
    #[arg(long, env = "CB_QUEUE_GENERATION_JOBS", default_value_t = 10_000,
        value_parser = clap::value_parser!(i64).range(1..))]
    pub queue_generation_jobs: i64,

    /// Send attempts per reply part whose sends fail without a platform verdict (rate-limit
    /// answers do not count: the platform says when to come back).
    #[arg(long, env = "CB_REPLY_MAX_ATTEMPTS", default_value_t = 8)]
    pub reply_max_attempts: u32,

    /// How long an interrupted WhatsApp send waits for the status callback that would
    /// confirm it before it is sent again, in seconds.
    #[arg(long, env = "CB_WHATSAPP_CONFIRM_SECS", default_value_t = 600)]
    pub whatsapp_confirm_secs: u64,

    /// How long an interrupted Slack send waits for the `message_metadata_posted` event
    /// that would confirm it before the thread is read, in seconds.
    #[arg(long, env = "CB_SLACK_CONFIRM_SECS", default_value_t = 60)]
    pub slack_confirm_secs: u64,

    /// Least time between two `conversations.replies` requests for one Slack workspace, in
    /// milliseconds, shared by every instance (Tier 1 for non-Marketplace apps: one a
    /// minute). 0: no limit.
    #[arg(long, env = "CB_SLACK_READ_INTERVAL_MS", default_value_t = 60_000)]
    pub slack_read_interval_ms: u64,

    /// Polling fallback when no wake-up arrives, in milliseconds.
    #[arg(long, env = "CB_POLL_INTERVAL_MS", default_value_t = 1000)]
    pub poll_interval_ms: u64,

    /// How often the typing indicator is refreshed while the agent works, in milliseconds:
    /// Telegram's every interval (its `typing` lasts 5 s), WhatsApp's every 5 (25 s), Slack's
    /// every 25 (a status goes after 2 min). Also the least time between two indicator
    /// requests for one chat on this instance.
    #[arg(long, env = "CB_TYPING_INTERVAL_MS", default_value_t = 4000)]
    pub typing_interval_ms: u64,

    /// Least time between two calls that show a streamed answer as it grows, per turn, in
    /// milliseconds (Slack appendStream, Telegram draft; three times this for the edits of a
    /// Telegram group message, where a bot may send about 20 messages a minute).
    #[arg(long, env = "CB_STREAM_INTERVAL_MS", default_value_t = 1000)]
    pub stream_interval_ms: u64,
}

impl Default for DispatchSettings {
    fn default() -> Self {
        Self {
            agent_timeout_secs: 30,
            agent_http2: false,
            max_attempts: 0,
            retry_horizon_secs: 86_400,
            async_horizon_secs: 21_600,
            platform_timeout_secs: 15,
            file_timeout_secs: 60,
            retry_base_ms: 1000,
            retry_max_ms: 300_000,
            lease_secs: 120,
            queue_generation_jobs: 10_000,
            reply_max_attempts: 8,
            whatsapp_confirm_secs: 600,
            slack_confirm_secs: 60,
            slack_read_interval_ms: 60_000,
            poll_interval_ms: 1000,
            typing_interval_ms: 4000,
            stream_interval_ms: 1000,
        }
    }
}

impl DispatchSettings {
    fn validate(&self) -> Result<(), SettingsError> {
        if self.lease_secs <= self.agent_timeout_secs
            || self.lease_secs <= self.platform_timeout_secs
            || self.lease_secs <= self.file_timeout_secs
        {
            return Err(SettingsError(
                "CB_LEASE_SECS must be longer than CB_AGENT_TIMEOUT_SECS, CB_PLATFORM_TIMEOUT_SECS and CB_FILE_TIMEOUT_SECS"
                    .into(),
            ));
        }
        if self.agent_timeout_secs == 0 || self.platform_timeout_secs == 0 {
            return Err(SettingsError(
                "CB_AGENT_TIMEOUT_SECS and CB_PLATFORM_TIMEOUT_SECS must be at least 1".into(),
            ));
        }
        if self.typing_interval_ms == 0 {
            return Err(SettingsError("CB_TYPING_INTERVAL_MS must be at least 1".into()));
        }
        if self.retry_base_ms > self.retry_max_ms {
            return Err(SettingsError(
                "CB_RETRY_BASE_MS must not exceed CB_RETRY_MAX_MS".into(),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_output_never_contains_the_database_password_or_operator_token() {
        let mut settings = ServeSettings::for_database("postgres://app:hunter2-pw@db/cb");
        settings.operator_token = Some(SecretString::from("op-token-0123456789abcdef".to_owned()));
        let printed = format!("{settings:?}");
        assert!(!printed.contains("hunter2-pw"), "{printed}");
        assert!(!printed.contains("op-token-0123456789abcdef"), "{printed}");
    }

    #[test]
    fn validation_names_the_offending_setting() {
        let mut settings = ServeSettings::for_database("mysql://nope");
        assert!(settings
            .validate()
            .unwrap_err()
            .to_string()
            .contains("DATABASE_URL"));
        settings = ServeSettings::for_database("postgres://localhost/cb");
        settings.agent_url = Some("not a url".into());
        assert!(settings
            .validate()
            .unwrap_err()
            .to_string()
            .contains("CB_AGENT_URL"));
        settings.agent_url = Some("ftp://agent.example/".into());
        assert!(settings
            .validate()
            .unwrap_err()
            .to_string()
            .contains("CB_AGENT_URL must be an http or https URL"));
        settings.agent_url = None;
        settings.http = false;
        settings.worker = false;
        assert!(settings
            .validate()
            .unwrap_err()
            .to_string()
            .contains("nothing to run"));
    }

    #[test]
    fn serve_without_a_key_is_refused_unless_plain_text_is_allowed() {
        let mut settings = ServeSettings::for_database("postgres://localhost/cb");
        assert!(settings.validate().is_ok(), "a key");
        settings.database.secrets = Keyring::plain();
        let refused = settings.validate().unwrap_err().to_string();
        for says in [
            "CB_SECRETS_KEY is not set",
            "channel-bridge secrets generate-key",
            "CB_SECRETS_KEY=@",
            "--allow-plaintext-secrets",
            "CB_SECRETS_PLAINTEXT=true",
        ] {
            assert!(refused.contains(says), "{refused}");
        }
        settings.allow_plaintext_secrets = true;
        assert!(settings.validate().is_ok(), "told to keep them in plain text");
    }

    #[test]
    fn healthcheck_asks_readyz_of_the_metrics_listener_else_the_main_one_on_loopback() {
        let mut check = HealthcheckSettings {
            url: None,
            bind: "0.0.0.0:8080".parse().unwrap(),
            metrics_bind: None,
            timeout_secs: 5,
        };
        assert_eq!(check.target().unwrap().as_str(), "http://127.0.0.1:8080/readyz");
        check.metrics_bind = Some("[::]:9090".parse().unwrap());
        assert_eq!(check.target().unwrap().as_str(), "http://[::1]:9090/readyz");
        check.url = Some("http://gateway:8080".into());
        assert_eq!(check.target().unwrap().as_str(), "http://gateway:8080/readyz");
        check.url = Some("http://gateway:8080/healthz".into());
        assert_eq!(check.target().unwrap().as_str(), "http://gateway:8080/healthz");
        check.url = Some("ftp://gateway/".into());
        assert!(check.target().is_err());
    }
}
