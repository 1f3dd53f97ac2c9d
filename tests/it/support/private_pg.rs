//! A PostgreSQL cluster of a test's own, which the test can crash for real
//! (`pg_ctl stop -m immediate`: no shutdown checkpoint, every connection cut, commits kept
//! only as far as they reached the WAL on disk) and start again on the same port. fsync and
//! synchronous_commit stay on, as in production. The server binaries are PostgreSQL 15's
//! (`PGBIN`, else /usr/lib/postgresql/15/bin); as root, they run as the OS user postgres.
//! Removed when dropped.

use std::path::{Path, PathBuf};
use std::process::Command;

use channel_bridge::settings::DatabaseSettings;

pub struct PrivateCluster {
    dir: PathBuf,
    pub port: u16,
}

fn pg_bin(tool: &str) -> PathBuf {
    let dir = std::env::var("PGBIN").unwrap_or_else(|_| "/usr/lib/postgresql/15/bin".into());
    Path::new(&dir).join(tool)
}

/// Runs a server binary as the OS user postgres when this process is root (PostgreSQL
/// refuses to run as root).
fn as_postgres(tool: &str, args: &[&str]) -> std::process::Output {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| out.stdout.starts_with(b"0\n"));
    let binary = pg_bin(tool);
    let mut command = if root {
        let mut runuser = Command::new("runuser");
        runuser.args(["-u", "postgres", "--"]).arg(&binary);
        runuser
    } else {
        Command::new(&binary)
    };
    command
        .args(args)
        .output()
        .unwrap_or_else(|err| panic!("{} runs: {err}", binary.display()))
}

fn checked(what: &str, output: std::process::Output) {
    assert!(
        output.status.success(),
        "{what} failed: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

async fn blocking(work: impl FnOnce() + Send + 'static) {
    tokio::task::spawn_blocking(work)
        .await
        .expect("a server command's thread ends");
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .expect("a free port")
}

impl PrivateCluster {
    /// `None` (the caller says the test is skipped) where PostgreSQL 15's server binaries
    /// are missing.
    pub async fn start() -> Option<Self> {
        if !pg_bin("initdb").exists() {
            eprintln!(
                "skipped: no PostgreSQL server binaries at {}",
                pg_bin("initdb").display()
            );
            return None;
        }
        let dir = std::env::temp_dir().join(format!("cb-crash-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).expect("the cluster's directory is made");
        let _ = Command::new("chown").arg("postgres").arg(&dir).output();
        let cluster = Self {
            dir,
            port: free_port(),
        };
        let data = cluster.data();
        blocking(move || {
            checked(
                "initdb",
                as_postgres(
                    "initdb",
                    &[
                        "-D",
                        &data,
                        "-U",
                        "postgres",
                        "--auth=trust",
                        "-E",
                        "UTF8",
                        "--no-sync",
                    ],
                ),
            )
        })
        .await;
        cluster.configure();
        cluster.start_again().await;
        Some(cluster)
    }

    fn data(&self) -> String {
        self.dir.join("data").display().to_string()
    }

    fn configure(&self) {
        let conf = format!(
            "listen_addresses = '127.0.0.1'\nport = {}\nunix_socket_directories = '{}'\n\
             fsync = on\nsynchronous_commit = on\nautovacuum = off\nmax_connections = 100\n\
             shared_buffers = 32MB\n",
            self.port,
            self.dir.display()
        );
        let path = self.dir.join("data").join("postgresql.auto.conf");
        let mut existing = std::fs::read_to_string(&path).unwrap_or_default();
        existing.push_str(&conf);
        std::fs::write(&path, existing).expect("the cluster's settings are written");
    }

    /// Starts the server (again, after a crash: recovery replays the WAL) and waits until it
    /// accepts connections.
    pub async fn start_again(&self) {
        let data = self.data();
        let log = self.dir.join("server.log").display().to_string();
        blocking(move || {
            checked(
                "pg_ctl start",
                as_postgres("pg_ctl", &["-D", &data, "-l", &log, "-w", "-t", "60", "start"]),
            )
        })
        .await;
    }

    /// A crash: the postmaster and every backend stop at once, nothing is flushed.
    pub async fn crash(&self) {
        let data = self.data();
        blocking(move || {
            checked(
                "pg_ctl stop -m immediate",
                as_postgres("pg_ctl", &["-D", &data, "-m", "immediate", "-w", "stop"]),
            )
        })
        .await;
    }

    /// The superuser's URL of database `db`.
    pub fn url(&self, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.port)
    }

    /// A new database, migrated by the application's own `migrate`; its settings.
    pub async fn migrated(&self, db: &str) -> DatabaseSettings {
        let settings = DatabaseSettings::from_url(self.url(db));
        channel_bridge::db::migrate(&settings)
            .await
            .expect("migrations apply on the private cluster");
        settings
    }
}

impl Drop for PrivateCluster {
    fn drop(&mut self) {
        let data = self.data();
        let _ = as_postgres("pg_ctl", &["-D", &data, "-m", "immediate", "stop"]);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
