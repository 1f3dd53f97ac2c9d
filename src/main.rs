use clap::Parser;

use channel_bridge::cli::{self, Cli, Command};
use channel_bridge::telemetry::{self, traces};

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let traces = match start_traces(&cli.command) {
        Ok(traces) => traces,
        Err(err) => {
            eprintln!("error: {err:#}");
            return std::process::ExitCode::FAILURE;
        }
    };
    telemetry::init_tracing(cli.log_format, "info,sqlx=warn,tower_http=info", traces.as_ref());
    if traces.is_some() {
        traces::warn_if_protocol_unsupported();
    }
    let result = cli::run(cli.command).await;
    if let Some(traces) = traces {
        // Blocks until the last batch is posted: off the async workers.
        let _ = tokio::task::spawn_blocking(move || traces.shutdown()).await;
    }
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// The OTLP trace exporter, for `serve` only and only when the `OTEL_*` variables name a
/// collector: the one-shot commands have no turn to follow.
fn start_traces(command: &Command) -> anyhow::Result<Option<traces::Traces>> {
    match command {
        Command::Serve(_) => traces::TraceExport::from_env()?
            .map(traces::TraceExport::start)
            .transpose(),
        _ => Ok(None),
    }
}
