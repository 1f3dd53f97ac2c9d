//! The command line's grammar; its doc comments are the `--help` text.

use clap::{Args, Parser, Subcommand};

use crate::domain::{Platform, TenantId};
use crate::settings::{DatabaseSettings, EgressSettings, LogFormat, ServeSettings};
use crate::shapes::NewConnector;

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
    /// Running on Citus (docs/citus.md).
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

// The secrets may come from the environment here, never on `admin connectors update`.
#[derive(Debug, Args)]
#[command(
    mut_arg("verification_secret", |arg| arg.required(true).env("CB_VERIFICATION_SECRET").hide_env_values(true)),
    mut_arg("verify_token", |arg| arg.env("CB_VERIFY_TOKEN").hide_env_values(true)),
    mut_arg("outbound_token", |arg| arg.env("CB_OUTBOUND_TOKEN").hide_env_values(true))
)]
pub struct ConnectorAdd {
    #[command(flatten)]
    pub database: DatabaseSettings,
    #[arg(long)]
    pub tenant: TenantId,
    #[command(flatten)]
    pub connector: NewConnector,
    // Switches for the two settings a new connector has on, the spelling README and scripts
    // use; the shared `--format-markdown false` and `--typing-indicator false` work as well.
    /// Send replies as plain text instead of converting the agent's Markdown to the platform's
    /// formatting (--format-markdown false).
    #[arg(long, conflicts_with = "format_markdown")]
    pub plain_text: bool,
    /// Show no typing indicator while the agent works; on WhatsApp it also marks the user's
    /// message read (--typing-indicator false).
    #[arg(long, conflicts_with = "typing_indicator")]
    pub no_typing: bool,
    #[command(flatten)]
    pub egress: EgressSettings,
}

impl ConnectorAdd {
    /// The connector to add, the switches folded into its settings.
    pub fn new_connector(&self) -> NewConnector {
        let mut new = self.connector.clone();
        if self.plain_text {
            new.settings.format_markdown = Some(false);
        }
        if self.no_typing {
            new.settings.typing_indicator = Some(false);
        }
        new
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_malformed_cb_egress_allow_stops_the_start_naming_it() {
        use clap::Parser;
        let parse = |allow: &str| {
            Cli::try_parse_from([
                "channel-bridge",
                "serve",
                "--database-url",
                "postgres://x/cb",
                "--egress-allow",
                allow,
            ])
        };
        let err = parse("10.0.0.0/33").unwrap_err().to_string();
        assert!(err.contains("CB_EGRESS_ALLOW"), "{err}");
        assert!(parse("10.0.0.0/8, agent.internal").is_ok());
    }

    #[test]
    fn connector_add_takes_the_shared_flags_and_its_switches() {
        use clap::Parser;
        let add = |flags: &[&str]| -> Result<NewConnector, clap::Error> {
            let base = [
                "channel-bridge",
                "connector",
                "add",
                "--database-url",
                "postgres://x/cb",
                "--tenant",
                "0190e5a4-0000-7000-8000-000000000000",
                "--platform",
                "telegram",
            ];
            let cli = Cli::try_parse_from(base.iter().chain(flags))?;
            match cli.command {
                Command::Connector(ConnectorCommand::Add(add)) => Ok(add.new_connector()),
                _ => unreachable!("connector add parses as connector add"),
            }
        };
        let new = add(&[
            "--verification-secret",
            "s",
            "--plain-text",
            "--no-typing",
            "--name",
            "n",
        ])
        .unwrap();
        let settings = &new.settings;
        assert_eq!(
            (
                settings.format_markdown,
                settings.typing_indicator,
                settings.name.as_deref()
            ),
            (Some(false), Some(false), Some("n"))
        );
        let new = add(&["--verification-secret", "s", "--format-markdown", "false"]).unwrap();
        assert_eq!(
            (new.settings.format_markdown, new.settings.typing_indicator),
            (Some(false), None)
        );
        let both = add(&[
            "--verification-secret",
            "s",
            "--plain-text",
            "--format-markdown",
            "true",
        ]);
        assert!(both.is_err(), "a switch and the flag it stands for");
        if std::env::var_os("CB_VERIFICATION_SECRET").is_none() {
            let err = add(&[]).unwrap_err().to_string();
            assert!(err.contains("--verification-secret"), "{err}");
        }
    }
}
