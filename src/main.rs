use clap::Parser;

use channel_bridge::cli::{self, Cli, Command};
use channel_bridge::telemetry::{self, traces};

/// jemalloc instead of glibc's malloc (the `jemalloc` feature, on by default): with thousands
/// of agent calls in flight, glibc's malloc and free were a quarter of the gateway's CPU; with
/// jemalloc the gateway spent up to a fifth less CPU a turn at the same memory a call in flight
/// (docs/benchmarks.md, "jemalloc as the global allocator").
#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> std::process::ExitCode {
    unset_empty_settings();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("error: cannot start the async runtime: {err}");
            return std::process::ExitCode::FAILURE;
        }
    };
    runtime.block_on(run())
}

/// An empty `CB_*`, `DATABASE_URL` or `OTEL_*` variable counts as unset
/// (docs/configuration.md). Changing the environment is only sound before other threads exist.
fn unset_empty_settings() {
    let empty: Vec<std::ffi::OsString> = std::env::vars_os()
        .filter(|(key, value)| {
            let ours = key
                .to_str()
                .is_some_and(|k| k.starts_with("CB_") || k.starts_with("OTEL_") || k == "DATABASE_URL");
            ours && value.is_empty()
        })
        .map(|(key, _)| key)
        .collect();
    for key in empty {
        std::env::remove_var(key);
    }
}

async fn run() -> std::process::ExitCode {
    let cli = Cli::parse();
    let traces = match start_traces(&cli.command) {
        Ok(traces) => traces,
        Err(err) => {
            eprintln!("error: {err:#}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let filter = "info,sqlx=warn,tower_http=info";
    let log_file = match &cli.command {
        Command::Demo(args) => args.log_file(),
        _ => None,
    };
    match log_file {
        Some(path) => {
            if let Err(err) = telemetry::init_tracing_to_file(cli.log_format, filter, &path) {
                eprintln!("error: cannot write the log file {}: {err}", path.display());
                return std::process::ExitCode::FAILURE;
            }
        }
        None => telemetry::init_tracing(cli.log_format, filter, traces.as_ref()),
    }
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
