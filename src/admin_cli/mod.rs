//! `channel-bridge admin`: a thin HTTP client of the admin and operator API
//! (docs/admin.md#the-http-admin-cli-channel-bridge-admin); every rule is the server's.
//! Secrets come from the environment or `@file`/`@-`; only `keys issue` prints one, once.

mod client;
mod connectors;
mod conversations;
mod keys;
mod lifecycle;
mod links;
pub mod messages;
mod output;
mod tenants;

use std::io::IsTerminal;
use std::time::Duration;

use clap::{Args, Subcommand};
use secrecy::SecretString;

pub use client::ApiError;
use client::Client;
use output::{Format, Output};

#[derive(Debug, Args)]
pub struct AdminArgs {
    /// The gateway's base URL, e.g. http://127.0.0.1:8080 (a path prefix is kept).
    #[arg(long, env = "CB_ADMIN_URL")]
    pub url: reqwest::Url,
    /// Tenant admin key (`cbk_…`) for connectors, links, messages and history. Prefer the
    /// variable, or `@file` / `@-` (standard input), to a value on the command line.
    #[arg(long, env = "CB_ADMIN_KEY", hide_env_values = true, value_parser = crate::secret_input::parse)]
    pub key: Option<SecretString>,
    /// The operator token, for tenants and keys (also `@file` or `@-`).
    #[arg(long, env = "CB_OPERATOR_TOKEN", hide_env_values = true, value_parser = crate::secret_input::parse)]
    pub operator_token: Option<SecretString>,
    /// Print the API's JSON answer (the default when stdout is not a terminal).
    #[arg(long, global = true, conflicts_with = "table")]
    pub json: bool,
    /// Print aligned tables (the default on a terminal).
    #[arg(long, global = true)]
    pub table: bool,
    /// Longest wait for one request.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub timeout_secs: u64,
    #[command(subcommand)]
    pub command: AdminCommand,
}

#[derive(Debug, Subcommand)]
pub enum AdminCommand {
    /// The tenant's platform connectors (tenant key).
    #[command(subcommand)]
    Connectors(connectors::Command),
    /// Which tenant user each platform sender is (tenant key).
    #[command(subcommand)]
    Links(links::Command),
    /// Recorded turns: list, read, export, redispatch, resend (tenant key).
    #[command(subcommand)]
    Messages(messages::Command),
    /// Conversations a person holds: take over, write, hand back (tenant key).
    #[command(subcommand)]
    Conversations(conversations::Command),
    /// A user's history exactly as the agent would get it with their next message (tenant key).
    History(messages::HistoryArgs),
    /// Erase one person's turns, replies, links and notice marks, for good (tenant key).
    Erase(lifecycle::EraseArgs),
    /// The audit log, newest first (tenant key).
    Audit(lifecycle::AuditArgs),
    /// Tenants, named by id or slug (operator token).
    #[command(subcommand)]
    Tenants(tenants::Command),
    /// Tenant admin keys (operator token).
    #[command(subcommand)]
    Keys(keys::Command),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    TenantAdmin,
    Operator,
}

impl AdminCommand {
    fn role(&self) -> Role {
        match self {
            Self::Connectors(_)
            | Self::Links(_)
            | Self::Messages(_)
            | Self::Conversations(_)
            | Self::History(_)
            | Self::Erase(_)
            | Self::Audit(_) => Role::TenantAdmin,
            Self::Tenants(_) | Self::Keys(_) => Role::Operator,
        }
    }
}

pub struct Context {
    client: Client,
    out: Output,
    cli: fn() -> clap::Command,
}

impl Context {
    fn usage_error(&self, message: &str) -> ! {
        usage_error(self.cli, message)
    }
}

/// `cli` builds the whole command line, for the usage line of an error.
pub async fn run(args: AdminArgs, cli: fn() -> clap::Command) -> anyhow::Result<()> {
    let role = args.command.role();
    let token = match role {
        Role::TenantAdmin => args.key,
        Role::Operator => args.operator_token,
    };
    let Some(token) = token else {
        let (flag, variable) = match role {
            Role::TenantAdmin => ("--key", "CB_ADMIN_KEY"),
            Role::Operator => ("--operator-token", "CB_OPERATOR_TOKEN"),
        };
        usage_error(
            cli,
            &format!(
                "this command needs {flag} (or {variable} in the environment; `@file` or `@-` reads it)"
            ),
        );
    };
    let format = Format::choose(args.json, args.table, std::io::stdout().is_terminal());
    let context = Context {
        client: Client::new(args.url, token, Duration::from_secs(args.timeout_secs))?,
        out: Output { format },
        cli,
    };
    match args.command {
        AdminCommand::Connectors(command) => connectors::run(command, &context).await,
        AdminCommand::Links(command) => links::run(command, &context).await,
        AdminCommand::Messages(command) => messages::run(command, &context).await,
        AdminCommand::Conversations(command) => conversations::run(command, &context).await,
        AdminCommand::History(history) => messages::history(history, &context).await,
        AdminCommand::Erase(args) => lifecycle::erase(args, &context).await,
        AdminCommand::Audit(args) => lifecycle::audit(args, &context).await,
        AdminCommand::Tenants(command) => tenants::run(command, &context).await,
        AdminCommand::Keys(command) => keys::run(command, &context).await,
    }
}

/// Exits with clap's usage error (status 2), under the `admin` subcommand's usage line.
fn usage_error(cli: fn() -> clap::Command, message: &str) -> ! {
    let mut whole = cli();
    whole.build();
    let mut admin = whole
        .find_subcommand_mut("admin")
        .map(|admin| admin.clone())
        .unwrap_or_else(cli);
    admin
        .error(clap::error::ErrorKind::MissingRequiredArgument, message)
        .exit()
}

/// Flags not given are left out, so the API keeps those fields.
fn object(fields: Vec<(&str, Option<serde_json::Value>)>) -> serde_json::Value {
    fields
        .into_iter()
        .filter_map(|(name, value)| value.map(|v| (name.to_owned(), v)))
        .collect::<serde_json::Map<_, _>>()
        .into()
}
