//! Tracing and metrics set-up, once per process.

use std::sync::OnceLock;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tracing_subscriber::{fmt, EnvFilter};

use crate::settings::LogFormat;

/// Installs the global tracing subscriber. `RUST_LOG` overrides the default filter.
/// Calling it twice is harmless (the second call is ignored), which tests rely on.
pub fn init_tracing(format: LogFormat, default_filter: &str) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    let builder = fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .try_init(),
        LogFormat::Pretty => builder.compact().try_init(),
    };
}

/// The process-wide Prometheus recorder. Several applications in one process (tests, the
/// demo) share it.
pub fn metrics_handle() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let recorder = PrometheusBuilder::new()
                .set_buckets(&[
                    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
                ])
                .expect("static bucket list is non-empty")
                .build_recorder();
            let handle = recorder.handle();
            // Fails only when another recorder is installed, which nothing else in the
            // process does; the handle then still renders our (empty) registry.
            let _ = metrics::set_global_recorder(recorder);
            handle
        })
        .clone()
}
