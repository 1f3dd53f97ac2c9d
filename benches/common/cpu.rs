//! CPU time from /proc (Linux), in clock ticks: of one process, of every `postgres`
//! process, of the bench database's backends and of the whole machine.

use anyhow::Context;
use sqlx::{Connection, PgConnection};
use std::collections::HashMap;
use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;

/// CPU ticks at one moment: the machine (busy, total), all `postgres` processes, the bench
/// database's backends by pid, the gateway, this process (posters and stand-ins).
pub struct CpuSnapshot {
    pub machine: Option<(u64, u64)>,
    pub postgres: u64,
    pub backends: HashMap<u32, u64>,
    pub gateway: Option<u64>,
    pub bench: Option<u64>,
}

/// CPU seconds spent between two snapshots, and how busy the machine was.
pub struct CpuSpent {
    pub postgres: f64,
    /// The part of `postgres` spent in the bench database's backends (a backend that exited
    /// in between is missing).
    pub backends: f64,
    pub gateway: f64,
    pub bench: f64,
    /// Busy seconds of all cores.
    pub busy: f64,
    pub machine_busy_pct: f64,
}

impl CpuSnapshot {
    pub async fn take(gateway: u32, db_url: &str) -> anyhow::Result<Self> {
        let postgres = postgres_ticks();
        Ok(Self {
            machine: machine_ticks(),
            postgres,
            backends: backend_ticks(db_url).await?,
            gateway: pid_ticks(gateway),
            bench: own_ticks(),
        })
    }

    /// What was spent from `before` to this snapshot; `None` when /proc did not say.
    pub fn since(&self, before: &CpuSnapshot) -> Option<CpuSpent> {
        let ((busy0, total0), (busy1, total1)) = (before.machine?, self.machine?);
        let secs = |ticks: u64| ticks as f64 / ticks_per_sec();
        let backends = self.backends.iter().map(|(pid, &ticks)| {
            let earlier = before.backends.get(pid).copied().unwrap_or(0);
            ticks.saturating_sub(earlier)
        });
        Some(CpuSpent {
            postgres: secs(self.postgres.saturating_sub(before.postgres)),
            backends: secs(backends.sum()),
            gateway: secs(self.gateway?.saturating_sub(before.gateway?)),
            bench: secs(self.bench?.saturating_sub(before.bench?)),
            busy: secs(busy1.saturating_sub(busy0)),
            machine_busy_pct: 100.0 * busy1.saturating_sub(busy0) as f64
                / total1.saturating_sub(total0).max(1) as f64,
        })
    }
}

impl CpuSpent {
    /// Milliseconds per unit of work (a turn, a file): PostgreSQL, its bench database's
    /// backends, the gateway, this process.
    pub fn ms_per(&self, units: u64) -> [f64; 4] {
        let per = |s: f64| s * 1e3 / units.max(1) as f64;
        [self.postgres, self.backends, self.gateway, self.bench].map(per)
    }

    /// Busy cores outside the gateway, this process and PostgreSQL, on average over
    /// `window_secs`.
    pub fn other_cores(&self, window_secs: f64) -> f64 {
        let others = self.busy - self.postgres - self.gateway - self.bench;
        (others / window_secs.max(1e-9)).max(0.0)
    }
}

/// Ticks of the bench database's backends (not this query's own), by pid.
pub async fn backend_ticks(db_url: &str) -> anyhow::Result<HashMap<u32, u64>> {
    let mut conn = PgConnection::connect(db_url).await?;
    let pids: Vec<i32> = sqlx::query_scalar(
        "select pid from pg_stat_activity where datname = current_database() and pid <> pg_backend_pid()",
    )
    .fetch_all(&mut conn)
    .await
    .context("Failed to list the database's backends")?;
    conn.close().await?;
    let ticks = |pid: i32| {
        let pid = u32::try_from(pid).ok()?;
        Some((pid, pid_ticks(pid)?))
    };
    Ok(pids.into_iter().filter_map(ticks).collect())
}

/// Ticks of every process named `postgres`.
pub fn postgres_ticks() -> u64 {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .filter_map(|entry| process_ticks(&entry.ok()?.path().join("stat")))
        .filter(|(comm, _)| comm == "postgres")
        .map(|(_, ticks)| ticks)
        .sum()
}

/// Ticks of this process.
pub fn own_ticks() -> Option<u64> {
    process_ticks(Path::new("/proc/self/stat")).map(|(_, t)| t)
}

pub fn pid_ticks(pid: u32) -> Option<u64> {
    process_ticks(Path::new(&format!("/proc/{pid}/stat"))).map(|(_, t)| t)
}

/// (comm, utime + stime) of one /proc/<pid>/stat.
pub fn process_ticks(path: &Path) -> Option<(String, u64)> {
    let stat = std::fs::read_to_string(path).ok()?;
    let (head, rest) = stat.rsplit_once(')')?;
    let comm = head.split_once('(')?.1.to_owned();
    // After the comm: state is field 3; utime and stime are fields 14 and 15.
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some((comm, ticks))
}

/// (busy, total) ticks of all cores; busy is everything but idle and iowait.
pub fn machine_ticks() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let ticks: Vec<u64> = stat
        .lines()
        .next()?
        .split_whitespace()
        .skip(1)
        .filter_map(|t| t.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal; guest time is within user already.
    let total: u64 = ticks.iter().take(8).sum();
    Some((total - ticks.get(3)? - ticks.get(4)?, total))
}

/// USER_HZ from `getconf CLK_TCK`, else the usual 100.
pub fn ticks_per_sec() -> f64 {
    static TICKS: OnceLock<f64> = OnceLock::new();
    *TICKS.get_or_init(|| {
        let output = Command::new("getconf").arg("CLK_TCK").output().ok();
        output
            .and_then(|o| String::from_utf8(o.stdout).ok()?.trim().parse().ok())
            .unwrap_or(100.0)
    })
}
