use clap::Parser;

use channel_bridge::cli::{self, Cli};
use channel_bridge::telemetry;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    telemetry::init_tracing(cli.log_format, "info,sqlx=warn,tower_http=info");
    match cli::run(cli.command).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
