//! The command line: one binary, one subcommand per role or admin task.

use anyhow::Context;
use clap::{Args, CommandFactory, Parser, Subcommand};
use secrecy::SecretString;

use crate::db::audit::Actor;

use crate::db::connectors::NewConnector;
use crate::domain::{Platform, TelegramDelivery, TenantId, UnlinkedPolicy};
use crate::settings::{DatabaseSettings, EgressSettings, LogFormat, ServeSettings};

#[derive(Debug, Parser)]
#[command(
    name = "channel-bridge",
    version,
    about = "Multi-tenant messaging gateway: Slack, WhatsApp and Telegram to an AI agent"
)]
pub struct Cli {
    /// Log output format.
    #[arg(long, env = "CB_LOG_FORMAT", value_enum, default_value_t = LogFormat::Pretty, global = true)]
    pub log_format: LogFormat,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the HTTP server and the dispatch worker (either alone with --http/--worker false).
    Serve(ServeSettings),
    /// Create the database if missing and apply pending migrations.
    Migrate(DatabaseSettings),
    /// Exit 0 when the instance's /readyz answers 200, 1 otherwise (container health checks).
    Healthcheck(crate::settings::HealthcheckSettings),
    /// Manage tenants.
    #[command(subcommand)]
    Tenant(TenantCommand),
    /// Manage a tenant's platform connectors.
    #[command(subcommand)]
    Connector(ConnectorCommand),
    /// Link platform senders to tenant users.
    #[command(subcommand)]
    Link(LinkCommand),
    /// Issue and revoke tenant admin API keys.
    #[command(subcommand)]
    Key(KeyCommand),
    /// Query a tenant's message history (the admin API's listing).
    #[command(subcommand)]
    Messages(MessagesCommand),
    /// A user's history exactly as the agent would receive it with their next message.
    History {
        #[command(flatten)]
        database: DatabaseSettings,
        #[arg(long)]
        tenant: TenantId,
        #[arg(long)]
        user: String,
    },
    /// Running on Citus (README "Running on Citus").
    #[command(subcommand)]
    Citus(CitusCommand),
    /// Erase every row of one person (a user, or one platform account) from a tenant's data;
    /// prints the counts. Recorded in the audit log (actor `cli`).
    Erase(EraseArgs),
    /// Write a person's or the whole tenant's history to stdout as JSON Lines (one turn with
    /// its reply parts per line, oldest first).
    Export(ExportArgs),
    /// Keys that seal the secrets stored in the database (`CB_SECRETS_KEY`).
    #[command(subcommand)]
    Secrets(SecretsCommand),
    /// Receive signed dispatches and answer them from an OpenAI-compatible server (or --echo).
    AgentBridge(crate::agent_bridge::BridgeArgs),
    /// Run gateway, echo agent and platform stand-ins locally through a short conversation.
    Demo(crate::demo::DemoArgs),
    /// Stand-ins for the Slack, Telegram and WhatsApp send APIs on a local port, printing each
    /// reply they receive as a JSON line: try the gateway without a platform account.
    PlatformStandIn(crate::demo::platforms::StandInArgs),
    /// The admin and operator API over HTTP (`--url`, a tenant key or the operator token):
    /// connectors, links, messages, history, tenants, keys.
    Admin(crate::admin_cli::AdminArgs),
    /// Post a JSON file to a running gateway, signed as the platform would sign it, and print
    /// the answer (or, with --print-curl, an equivalent curl command).
    SendFixture(crate::send_fixture::SendFixtureArgs),
}

#[derive(Debug, Subcommand)]
pub enum CitusCommand {
    /// Distribute the tables of a database migrated before it had the `citus` extension:
    /// `tenants` and `api_keys` as reference tables, the tenant tables by `tenant_id`,
    /// co-located; the queue stays on the coordinator. Runs as the `DATABASE_URL` owner;
    /// safe to repeat. (A database that has Citus when it is migrated is distributed by
    /// `migrate` itself.)
    Distribute {
        #[command(flatten)]
        database: DatabaseSettings,
    },
}

#[derive(Debug, Subcommand)]
pub enum SecretsCommand {
    /// Print a new random key as a `CB_SECRETS_KEY` entry, `id:base64` (keep it in a file
    /// only the operator can read; `CB_SECRETS_KEY=@file` reads it).
    GenerateKey {
        /// The key's id, stored beside every value it seals (default: k<today's date>).
        #[arg(long)]
        id: Option<String>,
    },
    /// Seal every stored secret under the first key of `CB_SECRETS_KEY`: plain ones and
    /// those under older keys. Run it once every instance lists the new key first; the
    /// older keys can then be removed. Safe to repeat; prints what it changed.
    RotateKey {
        #[command(flatten)]
        database: DatabaseSettings,
    },
}

#[derive(Debug, Subcommand)]
pub enum KeyCommand {
    /// Issue a key for a tenant; prints it once.
    Issue {
        #[command(flatten)]
        database: DatabaseSettings,
        #[arg(long)]
        tenant: TenantId,
        #[arg(long, default_value = "")]
        name: String,
    },
    /// Revoke a key by id; its next request answers 401.
    Revoke {
        #[command(flatten)]
        database: DatabaseSettings,
        #[arg(long)]
        id: uuid::Uuid,
    },
}

#[derive(Debug, Subcommand)]
pub enum MessagesCommand {
    /// One page of messages, newest first; pass `next_cursor` as --cursor for the next.
    List {
        #[command(flatten)]
        database: DatabaseSettings,
        #[arg(long)]
        tenant: TenantId,
        /// The same filters as `channel-bridge admin messages list`.
        #[command(flatten)]
        filters: crate::admin_cli::messages::Filters,
        #[arg(long)]
        cursor: Option<String>,
        #[arg(long, default_value_t = 50)]
        limit: i64,
    },
    /// Post again the undelivered parts of answered messages (their `failed` parts; `sent`
    /// parts never): one (--id) or many by filter, oldest first. Prints what it queued.
    Resend {
        #[command(flatten)]
        recovery: RecoveryArgs,
        /// Also post again the parts whose outcome is `unknown` (Telegram at-most-once):
        /// they may already be in the chat, so this can double them.
        #[arg(long)]
        include_unknown: bool,
    },
    /// Ask the agent again for `dispatch_failed` messages: one (--id) or many by filter,
    /// oldest first. Prints what it queued.
    Redispatch {
        #[command(flatten)]
        recovery: RecoveryArgs,
    },
}

/// Which messages `messages resend` / `messages redispatch` take: one by id, or every
/// message the filters select (each narrows), at most --limit per call.
#[derive(Debug, Args)]
pub struct RecoveryArgs {
    #[command(flatten)]
    pub database: DatabaseSettings,
    #[arg(long)]
    pub tenant: TenantId,
    /// The same selection as `channel-bridge admin messages resend|redispatch`.
    #[command(flatten)]
    pub selection: crate::admin_cli::messages::Selection,
}

/// Whose data `erase` deletes: exactly one of --user and --sender.
#[derive(Debug, Args)]
pub struct EraseArgs {
    #[command(flatten)]
    pub database: DatabaseSettings,
    #[arg(long)]
    pub tenant: TenantId,
    /// A tenant user: their turns, the turns their linked accounts sent before they were
    /// linked, their links.
    #[arg(long, required_unless_present = "sender", conflicts_with = "sender")]
    pub user: Option<String>,
    /// One platform account, `<platform>:<platform user id>` (`telegram:408258968`).
    #[arg(long)]
    pub sender: Option<String>,
}

/// Whose history `export` writes (each narrows; neither: the whole tenant).
#[derive(Debug, Args)]
pub struct ExportArgs {
    #[command(flatten)]
    pub database: DatabaseSettings,
    #[arg(long)]
    pub tenant: TenantId,
    #[arg(long)]
    pub user: Option<String>,
    /// `<platform>:<platform user id>`.
    #[arg(long)]
    pub sender: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum TenantCommand {
    /// Create a tenant; prints its id and dispatch signing secret (shown once).
    Create {
        #[command(flatten)]
        database: DatabaseSettings,
        /// Short unique name: lowercase letters, digits, dashes.
        #[arg(long)]
        slug: String,
        /// Display name (defaults to the slug).
        #[arg(long)]
        name: Option<String>,
        /// The tenant's agent proxy URL (else the server's CB_AGENT_URL); checked against
        /// the egress policy.
        #[arg(long)]
        agent_url: Option<String>,
        #[command(flatten)]
        egress: EgressSettings,
    },
}

#[derive(Debug, Subcommand)]
pub enum ConnectorCommand {
    /// Add a connector; prints its id and the webhook path to register with the platform.
    Add(ConnectorAdd),
}

#[derive(Debug, Args)]
pub struct ConnectorAdd {
    #[command(flatten)]
    pub database: DatabaseSettings,
    #[arg(long)]
    pub tenant: TenantId,
    #[arg(long, value_enum)]
    pub platform: Platform,
    #[arg(long, default_value = "")]
    pub name: String,
    /// Slack signing secret, Meta app secret or Telegram secret_token.
    #[arg(long, env = "CB_VERIFICATION_SECRET", hide_env_values = true, value_parser = crate::secret_input::parse)]
    pub verification_secret: SecretString,
    /// Meta's hub.verify_token (WhatsApp only).
    #[arg(long, env = "CB_VERIFY_TOKEN", hide_env_values = true, value_parser = crate::secret_input::parse)]
    pub verify_token: Option<SecretString>,
    /// Slack bot token, WhatsApp access token or Telegram bot token.
    #[arg(long, env = "CB_OUTBOUND_TOKEN", hide_env_values = true, value_parser = crate::secret_input::parse)]
    pub outbound_token: Option<SecretString>,
    /// Platform API base URL override (tests, proxies); checked against the egress policy.
    #[arg(long)]
    pub api_base_url: Option<String>,
    #[command(flatten)]
    pub egress: EgressSettings,
    /// Slack team id, WhatsApp phone_number_id or Telegram bot id.
    #[arg(long)]
    pub external_id: Option<String>,
    /// Slack api_app_id.
    #[arg(long)]
    pub app_id: Option<String>,
    /// The bot's own user id (Slack U…, Telegram bot id), for echo filtering.
    #[arg(long)]
    pub bot_user_id: Option<String>,
    /// Slack bot_id (B…), for echo filtering.
    #[arg(long)]
    pub bot_id: Option<String>,
    /// What to do with senders that have no link.
    #[arg(long, value_enum, default_value_t = UnlinkedPolicy::Deny)]
    pub unlinked_policy: UnlinkedPolicy,
    /// Telegram: resend a reply whose send was interrupted (at-least-once) or not.
    #[arg(long, value_enum, default_value_t = TelegramDelivery::AtMostOnce)]
    pub telegram_delivery: TelegramDelivery,
    /// Text posted to unlinked senders (deny policy), at most once a day each.
    #[arg(long)]
    pub unlinked_notice: Option<String>,
    /// Send replies as plain text instead of converting the agent's Markdown to the
    /// platform's formatting.
    #[arg(long)]
    pub plain_text: bool,
    /// Show no typing indicator while the agent works (on WhatsApp it also marks the user's
    /// message read).
    #[arg(long)]
    pub no_typing: bool,
}

impl ConnectorAdd {
    pub fn to_new_connector(&self) -> NewConnector {
        NewConnector {
            platform: self.platform,
            name: self.name.clone(),
            external_id: self.external_id.clone(),
            app_id: self.app_id.clone(),
            bot_user_id: self.bot_user_id.clone(),
            bot_id: self.bot_id.clone(),
            verification_secret: self.verification_secret.clone(),
            verify_token: self.verify_token.clone(),
            outbound_token: self.outbound_token.clone(),
            api_base_url: self.api_base_url.clone(),
            unlinked_policy: self.unlinked_policy,
            telegram_delivery: self.telegram_delivery,
            unlinked_notice: self.unlinked_notice.clone(),
            format_markdown: !self.plain_text,
            typing_indicator: !self.no_typing,
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum LinkCommand {
    /// Link a platform sender to a tenant user (re-points an existing link).
    Add {
        #[command(flatten)]
        database: DatabaseSettings,
        #[arg(long)]
        tenant: TenantId,
        #[arg(long, value_enum)]
        platform: Platform,
        #[arg(long)]
        platform_user_id: String,
        #[arg(long)]
        user_id: String,
    },
}

/// The save-time egress check the admin API makes, for URLs set from the command line.
async fn check_egress(egress: &EgressSettings, flag: &str, url: Option<&str>) -> anyhow::Result<()> {
    match url.filter(|u| !u.is_empty()) {
        Some(url) => egress
            .allow
            .check_url(url)
            .await
            .map_err(|refusal| anyhow::anyhow!("{flag} {refusal}")),
        None => Ok(()),
    }
}

/// Runs a parsed command. `serve` blocks until shutdown; the others print JSON on stdout.
/// An error from a database without the schema says to run `migrate`.
pub async fn run(command: Command) -> anyhow::Result<()> {
    run_command(command)
        .await
        .map_err(crate::db::explain_missing_schema)
}

async fn run_command(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Serve(settings) => serve(settings).await,
        Command::Migrate(database) => print_json(&crate::db::migrate(&database).await?),
        Command::Healthcheck(check) => crate::http::health::probe(&check.target()?, check.timeout()).await,
        Command::Tenant(TenantCommand::Create {
            database,
            slug,
            name,
            agent_url,
            egress,
        }) => {
            check_egress(&egress, "--agent-url", agent_url.as_deref()).await?;
            let pool = crate::db::connect_pool(&database)?;
            let name = name.unwrap_or_else(|| slug.clone());
            print_json(
                &crate::provision::create_tenant(
                    &pool,
                    &database.secrets,
                    &slug,
                    &name,
                    agent_url.as_deref(),
                )
                .await?,
            )
        }
        Command::Connector(ConnectorCommand::Add(add)) => {
            check_egress(&add.egress, "--api-base-url", add.api_base_url.as_deref()).await?;
            let pool = crate::db::connect_pool(&add.database)?;
            print_json(
                &crate::provision::add_connector(
                    &pool,
                    &add.database.secrets,
                    add.tenant,
                    &add.to_new_connector(),
                )
                .await?,
            )
        }
        command @ (Command::Key(_) | Command::Messages(_) | Command::History { .. }) => {
            run_admin(command).await
        }
        Command::Erase(args) => erase(args).await,
        Command::Export(args) => export(args).await,
        Command::Link(LinkCommand::Add {
            database,
            tenant,
            platform,
            platform_user_id,
            user_id,
        }) => {
            let pool = crate::db::connect_pool(&database)?;
            print_json(
                &crate::provision::add_link_as(
                    &pool,
                    tenant,
                    platform,
                    &platform_user_id,
                    &user_id,
                    Some(Actor::Cli),
                )
                .await?,
            )
        }
        Command::Citus(CitusCommand::Distribute { database }) => {
            let done = crate::db::distribute_on_citus(&database).await?;
            print_json(&serde_json::json!({ "result": done }))
        }
        Command::Secrets(SecretsCommand::GenerateKey { id }) => {
            use secrecy::ExposeSecret;
            let id = id.unwrap_or_else(|| format!("k{}", chrono::Utc::now().format("%Y%m%d")));
            let entry = crate::secrets::Keyring::generate_entry(&id)?;
            println!("{}", entry.expose_secret());
            Ok(())
        }
        Command::Secrets(SecretsCommand::RotateKey { database }) => {
            use crate::db::sealing::{reseal, Reseal};
            if !database.secrets.seals() {
                anyhow::bail!("CB_SECRETS_KEY is not set: there is no key to seal with");
            }
            let pool = crate::db::connect_pool(&database)?;
            let done = reseal(&pool, &database.secrets, Reseal::NotUnderCurrentKey)
                .await
                .map_err(|err| anyhow::Error::new(err).context("Failed to seal the stored secrets again"))?;
            print_json(&done)
        }
        Command::SendFixture(args) => crate::send_fixture::run(args).await,
        Command::PlatformStandIn(args) => crate::demo::platforms::run_cli(args).await,
        Command::AgentBridge(args) => crate::agent_bridge::run(args).await,
        Command::Demo(args) => crate::demo::run_cli(args).await,
        Command::Admin(args) => crate::admin_cli::run(args, Cli::command).await,
    }
}

async fn run_admin(command: Command) -> anyhow::Result<()> {
    use crate::admin::{messages, operator};
    match command {
        Command::Key(KeyCommand::Issue {
            database,
            tenant,
            name,
        }) => {
            let pool = crate::db::connect_pool(&database)?;
            print_json(
                &operator::issue_as(&pool, tenant, &name, Actor::Cli)
                    .await
                    .map_err(admin_error)?,
            )
        }
        Command::Key(KeyCommand::Revoke { database, id }) => {
            let pool = crate::db::connect_pool(&database)?;
            print_json(
                &operator::revoke_as(&pool, id, Actor::Cli)
                    .await
                    .map_err(admin_error)?,
            )
        }
        Command::Messages(MessagesCommand::List {
            database,
            tenant,
            filters,
            cursor,
            limit,
        }) => {
            let pool = crate::db::connect_pool(&database)?;
            known_tenant(&pool, tenant).await?;
            let query = messages::MessagesQuery {
                user_id: filters.user,
                platform: filters.platform.map(|p| p.as_str().to_owned()),
                connector_id: filters.connector,
                status: filters.status,
                decision: filters.decision,
                since: filters.since,
                until: filters.until,
                q: filters.search,
                cursor,
                limit: Some(limit),
            };
            print_json(
                &messages::list_messages(&pool, tenant, &query)
                    .await
                    .map_err(admin_error)?,
            )
        }
        Command::Messages(MessagesCommand::Resend {
            recovery,
            include_unknown,
        }) => recover(messages::Recovery::Resend, recovery, include_unknown).await,
        Command::Messages(MessagesCommand::Redispatch { recovery }) => {
            recover(messages::Recovery::Redispatch, recovery, false).await
        }
        Command::History {
            database,
            tenant,
            user,
        } => {
            let pool = crate::db::connect_pool(&database)?;
            print_json(
                &messages::user_history(&pool, tenant, &user, &Default::default())
                    .await
                    .map_err(admin_error)?,
            )
        }
        other => anyhow::bail!("not an admin command: {other:?}"),
    }
}

/// `messages resend` / `messages redispatch`: the admin API's own functions, then a
/// `NOTIFY` so that running workers pick the jobs up at once rather than at their next poll.
async fn recover(
    action: crate::admin::messages::Recovery,
    args: RecoveryArgs,
    include_unknown: bool,
) -> anyhow::Result<()> {
    use crate::admin::messages::{self, ActionFilterIn};
    let pool = crate::db::connect_pool(&args.database)?;
    known_tenant(&pool, args.tenant).await?;
    let selection = args.selection;
    let queued = match selection.id {
        Some(id) => messages::recover_one(&pool, args.tenant, action, id, include_unknown, Actor::Cli).await,
        None => {
            let filter = ActionFilterIn {
                user_id: selection.user,
                platform: selection.platform.map(|p| p.as_str().to_owned()),
                connector_id: selection.connector,
                status: selection.status,
                since: selection.since,
                until: selection.until,
                limit: selection.limit,
                include_unknown: include_unknown.then_some(true),
            };
            messages::recover_many(&pool, args.tenant, action, &filter, Actor::Cli).await
        }
    }
    .map_err(admin_error)?;
    if queued.queued > 0 {
        if let Err(err) = crate::dispatch::wakeup::notify(&pool).await {
            tracing::warn!(%err, "cannot wake the workers; they pick the jobs up at their next poll");
        }
    }
    print_json(&queued)
}

/// Fails unless `tenant` exists: under row-level security an unknown tenant reads as one
/// with no messages, and an empty answer would hide a mistyped id.
async fn known_tenant(pool: &sqlx::PgPool, tenant: TenantId) -> anyhow::Result<()> {
    use anyhow::Context;
    let mut conn = pool.acquire().await.context("Failed to reach the database")?;
    let found = crate::db::tenants::resolve(&mut conn, &crate::db::tenants::TenantRef::Id(tenant))
        .await
        .context("Failed to look the tenant up")?;
    match found {
        Some(_) => Ok(()),
        None => anyhow::bail!("tenant {tenant} not found"),
    }
}

/// `erase`: the admin API's erasure, recorded with actor `cli`.
async fn erase(args: EraseArgs) -> anyhow::Result<()> {
    use crate::lifecycle::Person;
    let person = match (args.user, args.sender.as_deref()) {
        (Some(user), _) => {
            crate::admin::schema::check_text("--user", &user, crate::admin::schema::ID_MAX)
                .map_err(admin_error)?;
            Person::User(user)
        }
        (None, Some(sender)) => crate::admin::lifecycle::parse_sender(sender).map_err(admin_error)?,
        (None, None) => anyhow::bail!("name the person with --user or --sender"),
    };
    let pool = crate::db::connect_pool(&args.database)?;
    known_tenant(&pool, args.tenant).await?;
    let erased = crate::lifecycle::erasure::erase(&pool, args.tenant, &person, Actor::Cli)
        .await
        .context("Failed to erase the person's data")?;
    print_json(&erased)
}

/// `export`: JSON Lines on stdout, a page at a time.
async fn export(args: ExportArgs) -> anyhow::Result<()> {
    use crate::admin::lifecycle::ExportLine;
    use crate::lifecycle::export::Export;
    use std::io::Write;
    let mut people = Vec::new();
    if let Some(user) = args.user {
        people.push(crate::lifecycle::Person::User(user));
    }
    if let Some(sender) = args.sender.as_deref() {
        people.push(crate::admin::lifecycle::parse_sender(sender).map_err(admin_error)?);
    }
    let pool = crate::db::connect_pool(&args.database)?;
    known_tenant(&pool, args.tenant).await?;
    let deadline = args.database.deadline();
    let mut export = Export::<ExportLine>::new(pool, args.tenant, people, deadline);
    let mut out = std::io::stdout().lock();
    while let Some(chunk) = export.next_chunk().await.context("Failed to read the history")? {
        out.write_all(&chunk).context("Failed to write the export")?;
    }
    out.flush().context("Failed to write the export")
}

/// The API's error as a CLI message (its client-facing text, never internals).
fn admin_error(err: crate::error::AppError) -> anyhow::Error {
    match err {
        crate::error::AppError::Internal(err) => err,
        other => anyhow::anyhow!("{other}"),
    }
}

/// Serves, after checking that the database answers and that its schema is this binary's
/// (migrating first with `--migrate`): a gateway that cannot record anything must not
/// start and report itself healthy.
async fn serve(settings: ServeSettings) -> anyhow::Result<()> {
    settings.validate()?;
    if settings.migrate {
        let report = crate::db::migrate(&settings.database).await?;
        tracing::info!(applied = ?report.applied, created = report.database_created, "migrated");
    }
    let schema = crate::db::check_ready_to_serve(&settings.database).await?;
    tracing::info!(%schema, "database ready");
    let app = crate::startup::Application::build(settings).await?;
    if let Some(addr) = app.local_addr() {
        tracing::info!(%addr, "listening");
    }
    if let Some(addr) = app.metrics_addr() {
        tracing::info!(%addr, "metrics listener listening");
    }
    app.run_until(crate::startup::shutdown_signal()).await
}

fn print_json(value: &impl serde::Serialize) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}
