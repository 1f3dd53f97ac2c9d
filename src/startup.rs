//! Building and running the application: the HTTP server and the background worker share
//! one pool and stop together on SIGTERM or ctrl-c.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::batch::BatchLimits;
use crate::cache::ConfigCache;
use crate::dispatch::dispatcher::Dispatcher;
use crate::dispatch::Worker;
use crate::ingress::writer::Writer;

use crate::settings::ServeSettings;
use crate::state::{system_clock, AppState};

pub struct Application {
    state: AppState,
    listener: Option<TcpListener>,
    local_addr: Option<SocketAddr>,
}

impl Application {
    /// Connects the pool (lazily) and binds the listener. Bind to port 0 to get a free port;
    /// `local_addr` tells which. The bound listener is what `run` serves: no re-binding.
    pub async fn build(settings: ServeSettings) -> anyhow::Result<Self> {
        settings.validate()?;
        let pool = crate::db::connect_pool(&settings.database)?;
        let listener = if settings.http {
            let listener = TcpListener::bind(settings.bind)
                .await
                .with_context(|| format!("Failed to bind {}", settings.bind))?;
            Some(listener)
        } else {
            None
        };
        let local_addr = listener.as_ref().map(TcpListener::local_addr).transpose()?;
        let cache_ttl = Duration::from_secs(settings.config_cache_secs);
        let ingress = Writer::spawn(
            pool.clone(),
            BatchLimits {
                writers: settings.ingress_writers,
                batch_max: settings.ingress_batch_max,
                deadline: settings.database.deadline(),
            },
        );
        let keys = settings.database.secrets.clone();
        let state = AppState {
            pool,
            settings: Arc::new(settings),
            metrics: crate::telemetry::metrics_handle(),
            clock: system_clock,
            wakeup: Arc::new(crate::dispatch::wakeup::Wakeup::default()),
            cache: Arc::new(ConfigCache::new(cache_ttl, keys)),
            ingress: Arc::new(ingress),
            auth_throttle: Arc::default(),
        };
        Ok(Self {
            state,
            listener,
            local_addr,
        })
    }

    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.local_addr
    }

    pub fn state(&self) -> &AppState {
        &self.state
    }

    /// Replaces the clock (tests of timestamp windows).
    pub fn with_clock(mut self, clock: fn() -> i64) -> Self {
        self.state.clock = clock;
        self
    }

    /// Serves until `shutdown` resolves, then stops accepting, drains in-flight requests
    /// (bounded by the grace period) and returns.
    pub async fn run_until(
        mut self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        let grace = Duration::from_secs(self.state.settings.shutdown_grace_secs);
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let server = self.listener.take().map(|listener| {
            let app = crate::http::router(self.state.clone());
            let mut stop = stop_rx.clone();
            tokio::spawn(async move {
                // The peer address is what bad admin keys are throttled by.
                let app = app.into_make_service_with_connect_info::<SocketAddr>();
                axum::serve(listener, app)
                    .with_graceful_shutdown(async move {
                        let _ = stop.wait_for(|stopped| *stopped).await;
                    })
                    .await
            })
        });
        let background = self.spawn_background(&stop_rx)?;
        shutdown.await;
        tracing::info!("shutting down: draining in-flight requests and jobs");
        let _ = stop_tx.send(true);
        let drained = async {
            if let Some(server) = server {
                server
                    .await
                    .context("HTTP server task panicked")?
                    .context("HTTP server failed")?;
            }
            for task in background {
                task.await.context("background task panicked")?;
            }
            anyhow::Ok(())
        };
        match tokio::time::timeout(grace, drained).await {
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

impl Application {
    /// The worker tasks (when this instance runs the worker), the `LISTEN` task that wakes
    /// them, the `NOTIFY` task that wakes other instances after ingress, and queue metrics.
    fn spawn_background(&self, stop: &watch::Receiver<bool>) -> anyhow::Result<Vec<JoinHandle<()>>> {
        let state = &self.state;
        let mut tasks = vec![tokio::spawn(seal_plain_secrets(
            state.pool.clone(),
            state.settings.database.secrets.clone(),
        ))];
        let wakeup = state.wakeup.clone();
        let (pool, stop_rx) = (state.pool.clone(), stop.clone());
        tasks.push(tokio::spawn(
            async move { wakeup.run_notifier(pool, stop_rx).await },
        ));
        if !state.settings.worker {
            return Ok(tasks);
        }
        let worker = Arc::new(
            Worker::new(state.pool.clone(), state.settings.clone(), state.clock)?
                .sharing_cache(state.cache.clone()),
        );
        let dispatcher = Dispatcher::new(worker);
        tasks.push(tokio::spawn(
            dispatcher.clone().run(state.wakeup.clone(), stop.clone()),
        ));
        tasks.push(tokio::spawn(dispatcher.clone().keep_leases(stop.clone())));
        tasks.push(tokio::spawn(dispatcher.report_queue_stats(stop.clone())));
        let wakeup = state.wakeup.clone();
        let (pool, stop_rx) = (state.pool.clone(), stop.clone());
        tasks.push(tokio::spawn(
            async move { wakeup.run_listener(pool, stop_rx).await },
        ));
        Ok(tasks)
    }
}

/// Seals the secrets stored in plain text before a key was configured (`crate::secrets`),
/// once, in the background: they stay readable meanwhile. Without a key, says so loudly.
async fn seal_plain_secrets(pool: sqlx::PgPool, keys: crate::secrets::Keyring) {
    use crate::db::sealing::{reseal, Reseal};
    if !keys.seals() {
        tracing::warn!(
            "CB_SECRETS_KEY is not set: connector secrets, tokens and dispatch secrets are stored \
             in plain text (channel-bridge secrets generate-key makes a key)"
        );
        return;
    }
    match reseal(&pool, &keys, Reseal::Plain).await {
        Ok(done) if done.tenants_resealed + done.connectors_resealed > 0 => tracing::info!(
            key = done.key.as_deref().unwrap_or_default(),
            tenants = done.tenants_resealed,
            connectors = done.connectors_resealed,
            "sealed the secrets stored in plain text"
        ),
        Ok(_) => {}
        Err(err) => tracing::error!(
            error = %err,
            "cannot seal the secrets stored in plain text; retried at the next start"
        ),
    }
}

/// Resolves on SIGTERM (container stop) or ctrl-c.
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
