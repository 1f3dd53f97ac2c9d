//! The database away: which errors mean it (`is_unavailable`), waiting one out where an
//! outcome must not be dropped (`through_outage`), and what an instance knows of it
//! (`DbHealth`), so webhooks are answered 503 at once while it cannot be reached and an
//! outage is logged when it starts and ends rather than once per request
//! (docs/delivery.md#when-the-database-is-out-of-reach).

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// An outage (answer 503 so the platform retries; a worker waits it out), not a bug or a bad
/// request: the server cannot be reached, is shutting down or starting, or cannot write.
pub fn is_unavailable(err: &sqlx::Error) -> bool {
    kind_of(err).is_some()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutageKind {
    /// No answer, a refused or broken connection, a server shutting down or starting.
    Unreachable,
    /// The server answers but fails the work: read-only (a full disk on a managed service),
    /// out of disk, memory or connections, or a connection exception it raised itself.
    Failing,
}

fn kind_of(err: &sqlx::Error) -> Option<OutageKind> {
    match err {
        // A restarting server closes the socket during TLS/startup.
        sqlx::Error::Io(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_) => Some(OutageKind::Unreachable),
        sqlx::Error::Database(db) => kind_of_code(db.code().as_deref().unwrap_or_default()),
        _ => None,
    }
}

/// As the server reports them. 57P01–57P03: admin or crash shutdown, cannot connect now;
/// 08: connection exceptions; 25006: read-only transaction; 53: insufficient resources
/// (disk full, out of memory, too many connections); 58: system errors (I/O).
fn kind_of_code(code: &str) -> Option<OutageKind> {
    if code.starts_with("57P") {
        Some(OutageKind::Unreachable)
    } else if code.starts_with("08") || code == "25006" || code.starts_with("53") || code.starts_with("58") {
        Some(OutageKind::Failing)
    } else {
        None
    }
}

/// The errors a caller can wait out.
pub trait MaybeOutage {
    fn is_outage(&self) -> bool;
}

impl MaybeOutage for sqlx::Error {
    fn is_outage(&self) -> bool {
        is_unavailable(self)
    }
}

impl MaybeOutage for std::sync::Arc<sqlx::Error> {
    fn is_outage(&self) -> bool {
        is_unavailable(self)
    }
}

impl MaybeOutage for anyhow::Error {
    fn is_outage(&self) -> bool {
        self.chain().any(|cause| {
            cause.downcast_ref::<sqlx::Error>().is_some_and(is_unavailable)
                || cause
                    .downcast_ref::<std::sync::Arc<sqlx::Error>>()
                    .is_some_and(|err| is_unavailable(err))
        })
    }
}

const FIRST_PAUSE: Duration = Duration::from_millis(100);
/// The longest a worker waits between two tries: a database back is found within it.
const LONGEST_PAUSE: Duration = Duration::from_secs(1);

/// Runs `attempt` again while it fails for an outage, pausing 100 ms doubling to 1 s, for at
/// most `patience` in all; then, or for any other error, the error. For work whose outcome
/// must not be dropped (a platform's message id, an agent's answer): each attempt must be
/// safe to repeat after one whose commit may have landed unacknowledged.
pub async fn through_outage<T, E, F, Fut>(
    patience: Duration,
    what: &'static str,
    mut attempt: F,
) -> Result<T, E>
where
    E: MaybeOutage + std::fmt::Display,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let started = Instant::now();
    let mut pause = FIRST_PAUSE;
    let mut tries = 0u32;
    loop {
        tries += 1;
        match attempt().await {
            Ok(done) => {
                if tries > 1 {
                    tracing::info!(
                        what,
                        tries,
                        waited_ms = started.elapsed().as_millis() as u64,
                        "done after the database came back"
                    );
                }
                return Ok(done);
            }
            Err(err) if err.is_outage() && started.elapsed() + pause < patience => {
                if tries == 1 {
                    tracing::info!(what, error = %err, "database unavailable; trying again until it returns");
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(LONGEST_PAUSE);
            }
            Err(err) => return Err(err),
        }
    }
}

/// An instance's view of its database, fed by what its requests meet. A failure that means
/// an outage starts one (logged once, as a warning); while it cannot be reached
/// (`refusing`), webhooks are answered 503 without waiting on the pool, and `probe` finds
/// when it answers again. A database that cannot write is tried by every request (it answers
/// at once) until one writes; `/readyz` shows it while failures are recent.
#[derive(Debug, Default)]
pub struct DbHealth {
    /// Fast path of `state`: whether an outage is under way.
    down: AtomicBool,
    state: Mutex<Option<Down>>,
    /// Requests answered 503 during the current outage.
    refused: AtomicU64,
}

#[derive(Debug, Clone)]
struct Down {
    kind: OutageKind,
    since: Instant,
    last_failure: Instant,
    cause: String,
}

/// How long a failure to write keeps `/readyz` at 503 without another.
const FAILING_SHOWN: Duration = Duration::from_secs(5);

impl DbHealth {
    /// Notes `err` if it means an outage; other errors say nothing of the database.
    pub fn failed(&self, err: &sqlx::Error) {
        let Some(kind) = kind_of(err) else {
            return;
        };
        let now = Instant::now();
        let mut state = self.lock();
        match state.as_mut() {
            Some(down) => {
                down.last_failure = now;
                // A server that answers again but cannot write is another state.
                if down.kind != kind {
                    tracing::warn!(cause = %err, ?kind, "database state changed");
                    down.kind = kind;
                    down.cause = err.to_string();
                }
            }
            None => {
                tracing::warn!(cause = %err, ?kind, "database unavailable: requests are answered 503 until it returns");
                metrics::counter!("channel_bridge_db_outages_total").increment(1);
                *state = Some(Down {
                    kind,
                    since: now,
                    last_failure: now,
                    cause: err.to_string(),
                });
                self.refused.store(0, Ordering::Relaxed);
                self.down.store(true, Ordering::Release);
            }
        }
    }

    /// A request answered 503 for the outage.
    pub fn refused_one(&self) {
        self.refused.fetch_add(1, Ordering::Relaxed);
    }

    /// A write committed: any outage is over.
    pub fn wrote(&self) {
        if self.down.load(Ordering::Acquire) {
            self.end(|_| true);
        }
    }

    /// A statement was answered: an outage of reach is over (not one of writing).
    pub fn reached(&self) {
        if self.down.load(Ordering::Acquire) {
            self.end(|down| down.kind == OutageKind::Unreachable);
        }
    }

    /// Whether webhooks should be answered 503 without trying the database.
    pub fn refusing(&self) -> bool {
        self.down.load(Ordering::Acquire)
            && self
                .lock()
                .as_ref()
                .is_some_and(|down| down.kind == OutageKind::Unreachable)
    }

    /// For `/readyz`: what keeps the database from serving, while it lasts.
    pub fn fault(&self) -> Option<String> {
        if !self.down.load(Ordering::Acquire) {
            return None;
        }
        let state = self.lock();
        let down = state.as_ref()?;
        match down.kind {
            OutageKind::Unreachable => Some(format!("database unreachable: {}", down.cause)),
            OutageKind::Failing if down.last_failure.elapsed() < FAILING_SHOWN => {
                Some(format!("database cannot write: {}", down.cause))
            }
            OutageKind::Failing => None,
        }
    }

    fn end(&self, applies: impl Fn(&Down) -> bool) {
        let mut state = self.lock();
        let Some(down) = state.as_ref().filter(|down| applies(down)) else {
            return;
        };
        tracing::info!(
            down_ms = down.since.elapsed().as_millis() as u64,
            answered_503 = self.refused.load(Ordering::Relaxed),
            "database available again"
        );
        *state = None;
        self.down.store(false, Ordering::Release);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Down>> {
        // A note of state only: a panic elsewhere cannot tear it in a way that matters.
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// While `health` says the database cannot be reached, asks it every `every` (within
/// `deadline`) whether it answers again, so webhooks wait no longer than that after its
/// return. Costs nothing while the database is up.
pub async fn probe(
    health: std::sync::Arc<DbHealth>,
    pool: sqlx::PgPool,
    every: Duration,
    deadline: Duration,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    while !*stop.borrow() {
        if health.refusing() {
            let answered = super::within(deadline, sqlx::query("select 1").execute(&pool)).await;
            if answered.is_ok() {
                health.reached();
            }
        }
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            _ = stop.changed() => {}
        }
    }
}

/// The error a webhook gets while the database is known to be out of reach.
pub fn not_tried() -> sqlx::Error {
    sqlx::Error::Io(std::io::Error::new(
        std::io::ErrorKind::NotConnected,
        "the database is out of reach (not tried: it failed a moment ago)",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_only_or_full_database_fails_the_work_and_a_shutting_down_one_is_out_of_reach() {
        for code in ["25006", "53100", "53200", "53300", "58030", "08006"] {
            assert_eq!(kind_of_code(code), Some(OutageKind::Failing), "{code}");
        }
        for code in ["57P01", "57P02", "57P03"] {
            assert_eq!(kind_of_code(code), Some(OutageKind::Unreachable), "{code}");
        }
        for code in ["23505", "22P02", "42501", "40001"] {
            assert_eq!(kind_of_code(code), None, "{code}");
        }
    }

    #[test]
    fn an_outage_of_reach_ends_with_an_answer_and_one_of_writing_only_with_a_write() {
        let health = DbHealth::default();
        health.failed(&sqlx::Error::PoolTimedOut);
        assert!(health.refusing());
        assert!(health.fault().is_some());
        health.reached();
        assert!(!health.refusing());
        assert!(health.fault().is_none());

        health.failed(&sqlx::Error::Protocol("x".into()));
        health.wrote();
        assert!(health.fault().is_none());
    }
}
