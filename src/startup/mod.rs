//! Building and running the application: the HTTP server and the background worker share
//! one pool and stop together on SIGTERM or ctrl-c.

pub mod openapi;
pub mod router;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::batch::BatchLimits;
use crate::dispatch::dispatcher::Dispatcher;
use crate::dispatch::{Services, Worker};
use crate::ingress::writer::Writer;

use crate::http::state::{system_clock, AppState};
use crate::settings::ServeSettings;

pub struct Application {
    state: AppState,
    listener: Option<TcpListener>,
    local_addr: Option<SocketAddr>,
    /// `CB_METRICS_BIND`: `/metrics`, `/healthz`, `/readyz` only.
    metrics_listener: Option<TcpListener>,
    metrics_addr: Option<SocketAddr>,
}

impl Application {
    /// Binds once, so port 0 works: `local_addr` and `metrics_addr` tell which port.
    pub async fn build(mut settings: ServeSettings) -> anyhow::Result<Self> {
        settings.validate()?;
        let pool = crate::db::connect_pool(&settings.database)?;
        let listener = if settings.http {
            Some(bind(settings.bind).await?)
        } else {
            None
        };
        let local_addr = listener.as_ref().map(TcpListener::local_addr).transpose()?;
        // Attachment URLs name this listener unless the operator says otherwise.
        settings.media.public_url = Some(settings.media.base_url(local_addr));
        let metrics_listener = match settings.metrics_bind {
            Some(addr) => Some(bind(addr).await?),
            None => None,
        };
        let metrics_addr = metrics_listener
            .as_ref()
            .map(TcpListener::local_addr)
            .transpose()?;
        let ingress = Writer::spawn(
            pool.clone(),
            BatchLimits {
                writers: settings.ingress_writers,
                batch_max: settings.ingress_batch_max,
                deadline: settings.database.deadline(),
            },
        );
        let media_client = crate::http::media::client(&settings.egress)?;
        let services = Services::build(&settings)?;
        let state = AppState::new(crate::http::state::Shared {
            pool,
            settings: Arc::new(settings),
            metrics: crate::telemetry::metrics_handle(),
            readiness: Arc::default(),
            db_health: Arc::default(),
            clock: system_clock,
            wakeup: Arc::new(crate::dispatch::wakeup::Wakeup::default()),
            cache: services.cache,
            ingress: Arc::new(ingress),
            auth_throttle: Arc::default(),
            media_client,
            platform_client: services.platform_client,
            typing: services.typing,
        });
        Ok(Self {
            state,
            listener,
            local_addr,
            metrics_listener,
            metrics_addr,
        })
    }

    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.local_addr
    }

    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_addr
    }

    pub fn state(&self) -> &AppState {
        &self.state
    }

    /// For tests of timestamp windows.
    pub fn with_clock(mut self, clock: fn() -> i64) -> Self {
        self.state.shared_mut().clock = clock;
        self
    }

    /// After `shutdown`, in-flight requests and jobs drain within the grace period.
    pub async fn run_until(
        mut self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        let grace = Duration::from_secs(self.state.settings.shutdown_grace_secs);
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let server = self.listener.take().map(|listener| {
            let app = router::router(self.state.clone());
            let stop = stopped(stop_rx.clone());
            tokio::spawn(async move {
                // The peer address is what bad admin keys are throttled by.
                let app = app.into_make_service_with_connect_info::<SocketAddr>();
                axum::serve(listener, app).with_graceful_shutdown(stop).await
            })
        });
        let metrics_server = self.metrics_listener.take().map(|listener| {
            let app = crate::http::health::metrics_listener_router(self.state.clone());
            let stop = stopped(stop_rx.clone());
            tokio::spawn(async move { axum::serve(listener, app).with_graceful_shutdown(stop).await })
        });
        let background = self.spawn_background(&stop_rx)?;
        shutdown.await;
        tracing::info!("shutting down: draining in-flight requests and jobs");
        let _ = stop_tx.send(true);
        match tokio::time::timeout(grace, drained(server, metrics_server, background)).await {
            Ok(result) => result?,
            Err(_) => tracing::warn!(
                grace_secs = grace.as_secs(),
                "grace period over; exiting with work in flight"
            ),
        }
        self.state.pool.close().await;
        Ok(())
    }
}

/// Resolves once `stop` says stopped (a server's graceful shutdown).
async fn stopped(mut stop: watch::Receiver<bool>) {
    let _ = stop.wait_for(|stopped| *stopped).await;
}

type ServerTask = JoinHandle<std::io::Result<()>>;

/// Every server and background task ended, the first failure reported.
async fn drained(
    server: Option<ServerTask>,
    metrics_server: Option<ServerTask>,
    background: Vec<JoinHandle<()>>,
) -> anyhow::Result<()> {
    if let Some(server) = server {
        server
            .await
            .context("HTTP server task panicked")?
            .context("HTTP server failed")?;
    }
    if let Some(server) = metrics_server {
        server
            .await
            .context("metrics listener task panicked")?
            .context("metrics listener failed")?;
    }
    for task in background {
        task.await.context("background task panicked")?;
    }
    Ok(())
}

/// How soon webhooks are taken again after the database, out of reach, answers.
const DB_PROBE_EVERY: Duration = Duration::from_millis(200);

impl Application {
    fn spawn_background(&self, stop: &watch::Receiver<bool>) -> anyhow::Result<Vec<JoinHandle<()>>> {
        let state = &self.state;
        let mut tasks = vec![
            tokio::spawn(seal_plain_secrets(
                state.pool.clone(),
                state.settings.database.secrets.clone(),
                stop.clone(),
            )),
            tokio::spawn(metrics_upkeep(state.metrics.clone(), stop.clone())),
            tokio::spawn(crate::db::outage::probe(
                state.db_health.clone(),
                state.pool.clone(),
                DB_PROBE_EVERY,
                state.settings.database.deadline().min(Duration::from_secs(1)),
                stop.clone(),
            )),
        ];
        let wakeup = state.wakeup.clone();
        let (pool, stop_rx) = (state.pool.clone(), stop.clone());
        tasks.push(tokio::spawn(
            async move { wakeup.run_notifier(pool, stop_rx).await },
        ));
        if !state.settings.worker {
            return Ok(tasks);
        }
        let worker = Arc::new(Worker::with_services(
            state.pool.clone(),
            state.settings.clone(),
            state.clock,
            state.services(),
        )?);
        tasks.push(tokio::spawn(crate::dispatch::feedback::run(
            worker.clone(),
            state.wakeup.clone(),
            stop.clone(),
        )));
        let dispatcher = Dispatcher::new(worker);
        tasks.push(tokio::spawn(
            dispatcher.clone().run(state.wakeup.clone(), stop.clone()),
        ));
        tasks.push(tokio::spawn(dispatcher.clone().keep_leases(stop.clone())));
        tasks.push(tokio::spawn(dispatcher.clone().keep_queue_fresh(stop.clone())));
        tasks.push(tokio::spawn(dispatcher.report_queue_stats(stop.clone())));
        tasks.extend(lifecycle_tasks(&state.pool, stop));
        let wakeup = state.wakeup.clone();
        let (pool, stop_rx) = (state.pool.clone(), stop.clone());
        tasks.push(tokio::spawn(
            async move { wakeup.run_listener(pool, stop_rx).await },
        ));
        Ok(tasks)
    }
}

/// The sweeps of the worker role: retention (web-only instances never delete), held
/// conversations returned to the agent, turns past the async horizon.
fn lifecycle_tasks(pool: &sqlx::PgPool, stop: &watch::Receiver<bool>) -> Vec<JoinHandle<()>> {
    vec![
        tokio::spawn(crate::lifecycle::retention::run(pool.clone(), stop.clone())),
        tokio::spawn(crate::lifecycle::handoff::run(pool.clone(), stop.clone())),
        tokio::spawn(crate::lifecycle::awaiting::run(pool.clone(), stop.clone())),
    ]
}

/// In the background: secrets stored before a key was configured stay readable meanwhile.
async fn seal_plain_secrets(
    pool: sqlx::PgPool,
    keys: crate::secrets::Keyring,
    mut stop: watch::Receiver<bool>,
) {
    use crate::db::sealing::{reseal, Reseal};
    if !keys.seals() {
        tracing::warn!(
            "CB_SECRETS_KEY is not set and plain text is allowed: connector secrets, tokens and \
             dispatch secrets are stored in plain text (channel-bridge secrets generate-key makes \
             a key)"
        );
        return;
    }
    const AGAIN: Duration = Duration::from_secs(60);
    loop {
        match reseal(&pool, &keys, Reseal::Plain).await {
            Ok(done) => {
                if done.tenants_resealed + done.connectors_resealed > 0 {
                    tracing::info!(
                        key = done.key.as_deref().unwrap_or_default(),
                        tenants = done.tenants_resealed,
                        connectors = done.connectors_resealed,
                        "sealed the secrets stored in plain text"
                    );
                }
                return;
            }
            // No schema yet: nothing is stored, and what is stored later is sealed.
            Err(err) if crate::db::means_no_schema(&err) => return,
            Err(err) => tracing::warn!(
                error = %err,
                "cannot seal the secrets stored in plain text yet; trying again in a minute"
            ),
        }
        tokio::select! {
            () = tokio::time::sleep(AGAIN) => {}
            _ = stop.changed() => return,
        }
    }
}

async fn bind(addr: SocketAddr) -> anyhow::Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .with_context(|| format!("Failed to bind {addr}"))
}

/// Histogram samples pile up until a scrape drains them, and nobody may scrape this instance.
async fn metrics_upkeep(
    handle: metrics_exporter_prometheus::PrometheusHandle,
    mut stop: watch::Receiver<bool>,
) {
    const EVERY: Duration = Duration::from_secs(5);
    while !*stop.borrow() {
        handle.run_upkeep();
        tokio::select! {
            () = tokio::time::sleep(EVERY) => {}
            _ = stop.changed() => {}
        }
    }
}

pub async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(err) = tokio::signal::ctrl_c().await {
            tracing::error!(%err, "cannot listen for ctrl-c");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(err) => {
                tracing::error!(%err, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = terminate => {},
    }
}
