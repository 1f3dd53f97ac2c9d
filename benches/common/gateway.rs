//! The gateway as a child process: `channel-bridge serve` of this build on the bench
//! database, its log in the target directory, waiting for readiness and stopping it.

use super::provision::bench_keys;
use super::BenchDb;
use anyhow::Context;
use secrecy::ExposeSecret;
use serde::Serialize;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long `serve` may take to answer `/readyz`.
pub const READY_LIMIT: Duration = Duration::from_secs(30);
/// How long `serve` may take to exit on SIGTERM before it is killed.
pub const STOP_LIMIT: Duration = Duration::from_secs(15);

pub struct Gateway {
    /// What messages call it: `serve`, `the idle instance`.
    label: String,
    child: Child,
    pub log: PathBuf,
}

/// How a stop went.
#[derive(Serialize)]
pub struct Stopped {
    pub secs: f64,
    /// Killed after `STOP_LIMIT` because SIGTERM did not stop it.
    pub killed: bool,
    pub status: String,
}

impl Gateway {
    /// `serve` on `database_url`, with this process's environment, so `CB_*` settings given
    /// to `cargo bench` apply; with `bind`, HTTP on that address, else no HTTP. Its output
    /// goes to `log`.
    pub fn start(
        label: impl Into<String>,
        database_url: &str,
        bind: Option<SocketAddr>,
        worker: bool,
        log: PathBuf,
    ) -> anyhow::Result<Self> {
        let file =
            std::fs::File::create(&log).with_context(|| format!("Failed to create {}", log.display()))?;
        let mut command = Command::new(env!("CARGO_BIN_EXE_channel-bridge"));
        command
            .arg("serve")
            .env("DATABASE_URL", database_url)
            .env("CB_LOG_FORMAT", "json")
            .env("CB_WORKER", worker.to_string())
            // The stand-ins (agent, platform APIs, file host) listen on loopback.
            .env("CB_EGRESS_ALLOW", "127.0.0.1")
            // The key the bench sealed the tenants' secrets with (never an argument).
            .env("CB_SECRETS_KEY", bench_keys().1.expose_secret())
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file);
        match bind {
            Some(addr) => command.env("CB_HTTP", "true").env("CB_BIND", addr.to_string()),
            None => command.env("CB_HTTP", "false"),
        };
        if std::env::var_os("RUST_LOG").is_none() {
            command.env("RUST_LOG", "warn");
        }
        let child = command.spawn().context("Failed to start the gateway binary")?;
        let label = label.into();
        Ok(Self { label, child, log })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// An error naming the log if the process has exited.
    pub fn ensure_running(&mut self) -> anyhow::Result<()> {
        if let Some(status) = self.child.try_wait()? {
            anyhow::bail!("{} exited ({status}); see {}", self.label, self.log.display());
        }
        Ok(())
    }

    /// Polls `/readyz` until it answers 200; returns how long that took.
    pub async fn wait_ready(&mut self, addr: SocketAddr) -> anyhow::Result<Duration> {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(1))
            .build()?;
        let url = format!("http://{addr}/readyz");
        let started = Instant::now();
        while started.elapsed() < READY_LIMIT {
            self.ensure_running()?;
            if let Ok(response) = client.get(&url).send().await {
                if response.status() == reqwest::StatusCode::OK {
                    return Ok(started.elapsed());
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        anyhow::bail!("{} was not ready within {READY_LIMIT:?}", self.label)
    }

    /// SIGTERM, then a kill if it has not exited within `STOP_LIMIT`.
    pub async fn stop_timed(&mut self) -> anyhow::Result<Stopped> {
        let started = Instant::now();
        let signalled = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status();
        if signalled.is_ok_and(|s| s.success()) {
            while started.elapsed() < STOP_LIMIT {
                if let Some(status) = self.child.try_wait()? {
                    let (secs, status) = (started.elapsed().as_secs_f64(), status.to_string());
                    return Ok(Stopped {
                        secs,
                        killed: false,
                        status,
                    });
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        self.child.kill().context("Failed to kill the gateway")?;
        let status = self.child.wait()?.to_string();
        let secs = started.elapsed().as_secs_f64();
        Ok(Stopped {
            secs,
            killed: true,
            status,
        })
    }

    /// `stop_timed`, saying on stderr when it had to be killed.
    pub async fn stop(&mut self) -> anyhow::Result<()> {
        if self.stop_timed().await?.killed {
            eprintln!(
                "{} did not stop on SIGTERM within {STOP_LIMIT:?}: killed",
                self.label
            );
        }
        Ok(())
    }

    /// CPU seconds the process has used (0 once it is gone), at 100 ticks a second.
    pub fn cpu_secs(&self) -> f64 {
        super::cpu::pid_ticks(self.pid()).unwrap_or(0) as f64 / 100.0
    }

    /// Its resident set in MB (0 once it is gone).
    pub fn rss_mb(&self) -> f64 {
        super::memory::vm_rss_kb(self.pid()).map_or(0.0, |kb| kb as f64 / 1024.0)
    }
}

impl Drop for Gateway {
    /// On an early return the child must not outlive the bench.
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A loopback address nothing listens on at the moment.
pub fn free_local_port() -> anyhow::Result<SocketAddr> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").context("Failed to find a free port")?;
    Ok(listener.local_addr()?)
}

/// `<target>/<bench>-<database>-<name>.log`.
pub fn log_path(db: &BenchDb, name: &str) -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("target"),
        PathBuf::from,
    );
    target.join(format!("{}-{}-{name}.log", env!("CARGO_CRATE_NAME"), db.name))
}

/// The warnings and errors of a serve log.
#[derive(Serialize)]
pub struct LogSummary {
    pub path: String,
    pub warnings: usize,
    pub errors: usize,
    /// The first warning or error, shortened.
    pub first: Option<String>,
}

pub fn scan_log(path: &Path) -> LogSummary {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let warning = |line: &str| line.contains("\"level\":\"WARN\"");
    // JSON error events, and what `main` prints when the process fails.
    let error = |line: &str| line.contains("\"level\":\"ERROR\"") || line.starts_with("error");
    let problems: Vec<&str> = text.lines().filter(|l| warning(l) || error(l)).collect();
    LogSummary {
        path: path.display().to_string(),
        warnings: problems.iter().filter(|l| warning(l)).count(),
        errors: problems.iter().filter(|l| error(l)).count(),
        first: problems.first().map(|l| l.chars().take(300).collect()),
    }
}
