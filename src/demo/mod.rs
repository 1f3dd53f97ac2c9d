//! `channel-bridge demo`: the gateway, an echo agent and platform stand-ins (`stack`), a short
//! conversation through the real webhook routes (`script`), and a report (`report`). The
//! database it drops and re-creates is its own, never the one DATABASE_URL names.

mod agent;
mod database;
pub mod platforms;
mod provision;
mod report;
mod script;
mod served;
mod stack;
mod uploads;
pub mod webhooks;

use std::io::Write;
use std::time::Instant;

use secrecy::{ExposeSecret, SecretString};

pub use self::database::demo_database_url;
use self::database::{count_turns, recreate_database, shown_url_differs};
use self::report::conclude;
pub use self::report::{DemoSummary, Outcome, Step, Turn, WebhookAnswer};
use self::script::Script;
use self::stack::Stack;

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
    pub fn log_file(&self) -> Option<std::path::PathBuf> {
        (!self.verbose).then(|| std::env::temp_dir().join("channel-bridge-demo.log"))
    }
}

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

#[derive(Debug, Clone)]
pub struct DemoConfig {
    /// The demo's own database: dropped (sessions on it are ended) and re-created.
    pub database_url: String,
    /// `None`: the terminal (`--verbose`), or a test's subscriber.
    pub log_file: Option<std::path::PathBuf>,
}

pub async fn run(config: &DemoConfig, out: &mut (dyn Write + Send)) -> anyhow::Result<DemoSummary> {
    let started = Instant::now();
    let shown_url = crate::db::masked_url(&config.database_url);
    writeln!(out, "channel-bridge demo\n")?;
    if let Some(log) = &config.log_file {
        writeln!(out, "  gateway log {} (--verbose shows it here)", log.display())?;
    }
    recreate_database(&config.database_url).await?;
    writeln!(out, "  database   {shown_url} (fresh, migrated)")?;
    let stack = Stack::start(&config.database_url).await?;
    stack.describe(out)?;
    let mut script = Script::new(&stack, out)?;
    let conversation = script.converse().await;
    let steps = script.into_steps();
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
