//! Running a parsed command; the database-URL admin tasks call the admin API's functions.

use anyhow::Context;
use clap::CommandFactory;

use super::args::{
    CitusCommand, Cli, Command, ConnectorCommand, EraseArgs, ExportArgs, KeyCommand, LinkCommand,
    MessagesCommand, RecoveryArgs, SecretsCommand, TenantCommand,
};
use crate::db::audit::Actor;
use crate::domain::TenantId;
use crate::settings::{EgressSettings, ServeSettings};

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

/// `serve` blocks until shutdown; the others print JSON on stdout.
pub async fn run(command: Command) -> anyhow::Result<()> {
    run_command(command)
        .await
        .map_err(crate::db::explain_missing_schema)
        .map_err(crate::db::citus::explain)
}

async fn run_command(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Serve(settings) => serve(settings).await,
        Command::Migrate(database) => print_json(&crate::db::migrate(&database).await?),
        Command::Healthcheck(check) => crate::http::health::probe(&check.target()?, check.timeout()).await,
        command @ (Command::Tenant(_) | Command::Connector(_) | Command::Link(_)) => {
            run_provision(command).await
        }
        Command::Key(key) => run_key(key).await,
        command @ (Command::Messages(_) | Command::History { .. }) => run_admin(command).await,
        Command::Erase(args) => erase(args).await,
        Command::Export(args) => export(args).await,
        Command::Citus(CitusCommand::Distribute { database }) => {
            print_json(&crate::db::citus::distribute(&database).await?)
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

/// Tenants, connectors and links, written as the operator (`crate::provision`).
async fn run_provision(command: Command) -> anyhow::Result<()> {
    match command {
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
            let new = add.new_connector();
            check_egress(
                &add.egress,
                "--api-base-url",
                new.settings.api_base_url.as_deref(),
            )
            .await?;
            let pool = crate::db::connect_pool(&add.database)?;
            print_json(
                &crate::provision::add_connector(&pool, &add.database.secrets, add.tenant, &new).await?,
            )
        }
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
        other => anyhow::bail!("not a provisioning command: {other:?}"),
    }
}

/// Operator keys, issued and revoked as the operator API does.
async fn run_key(command: KeyCommand) -> anyhow::Result<()> {
    use crate::admin::operator;
    match command {
        KeyCommand::Issue {
            database,
            tenant,
            name,
        } => {
            let pool = crate::db::connect_pool(&database)?;
            print_json(
                &operator::issue_as(&pool, tenant, &name, Actor::Cli)
                    .await
                    .map_err(admin_error)?,
            )
        }
        KeyCommand::Revoke { database, id } => {
            let pool = crate::db::connect_pool(&database)?;
            print_json(
                &operator::revoke_as(&pool, id, Actor::Cli)
                    .await
                    .map_err(admin_error)?,
            )
        }
    }
}

async fn run_admin(command: Command) -> anyhow::Result<()> {
    use crate::admin::messages;
    match command {
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
                matching: filters.matching,
                decision: filters.decision,
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

/// The `NOTIFY` after the commit makes running workers take the jobs now, not at their next poll.
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
                matching: selection.matching,
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

async fn erase(args: EraseArgs) -> anyhow::Result<()> {
    use crate::lifecycle::Person;
    let person = match (args.user, args.sender.as_deref()) {
        (Some(user), _) => {
            crate::api_schema::check_text("--user", &user, crate::api_schema::ID_MAX)
                .map_err(|refused| admin_error(refused.into()))?;
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

/// The API's client-facing text, and below it the cause: an operator at the command line is
/// told what the database said (a refused login, a missing grant), as a client never is.
fn admin_error(err: crate::error::AppError) -> anyhow::Error {
    match err {
        crate::error::AppError::Internal(err) => err,
        other => anyhow::Error::new(other),
    }
}

/// Checks the database and its schema first: a gateway that cannot record anything must not
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_database_error_keeps_its_cause_at_the_command_line() {
        let refused = sqlx::Error::Protocol("role \"channel_bridge_app\" is not permitted to log in".into());
        let err = admin_error(crate::error::AppError::Unavailable(std::sync::Arc::new(refused)));
        let printed = format!("{err:#}");
        assert!(printed.starts_with("database unavailable: "), "{printed}");
        assert!(printed.contains("is not permitted to log in"), "{printed}");
    }
}
