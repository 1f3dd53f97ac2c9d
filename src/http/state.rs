//! What every handler and worker task shares.

use std::sync::Arc;

use metrics_exporter_prometheus::PrometheusHandle;
use sqlx::PgPool;

use super::readiness::Readiness;
use super::throttle::AuthThrottle;
use crate::settings::ServeSettings;

/// One pointer: axum clones the state for every request (the router, each middleware, each
/// `State` extractor), and a clone of a dozen `Arc`s was 4 % of the gateway's CPU under
/// ingress load (docs/benchmarks.md, "The gateway's state, cloned per request"). Fields are
/// read through `Deref`.
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

impl AppState {
    pub fn new(shared: Shared) -> Self {
        Self(Arc::new(shared))
    }

    /// Before the state is shared; a copy otherwise.
    pub fn shared_mut(&mut self) -> &mut Shared {
        Arc::make_mut(&mut self.0)
    }
}

impl std::ops::Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

#[derive(Clone)]
pub struct Shared {
    pub pool: PgPool,
    pub settings: Arc<ServeSettings>,
    pub metrics: PrometheusHandle,
    pub readiness: Arc<Readiness>,
    /// What requests have met of the database: webhooks answer 503 at once while it is out
    /// of reach, and an outage is logged when it starts and ends.
    pub db_health: Arc<crate::db::outage::DbHealth>,
    /// Unix seconds now; replaced in tests that need a fixed clock.
    pub clock: fn() -> i64,
    pub wakeup: Arc<crate::dispatch::wakeup::Wakeup>,
    /// Connector and tenant settings, reused for a few seconds (admin changes forget them).
    pub cache: Arc<crate::cache::ConfigCache>,
    /// Where webhook handlers record what they accepted (several per commit).
    pub ingress: Arc<crate::ingress::writer::Writer>,
    pub auth_throttle: Arc<AuthThrottle>,
    /// For `/v1/media/{token}`: no total timeout, so a large file can take its time.
    pub media_client: crate::egress::GuardedClient,
    /// For what the agent's requests make the gateway ask a platform: a status shown as
    /// typing, a Slack DM opened (docs/agent.md#the-agents-way-in).
    pub platform_client: crate::egress::GuardedClient,
    pub typing: Arc<crate::delivery::typing::Indicators>,
}

impl AppState {
    pub fn wake_workers(&self) {
        self.wakeup.wake();
    }

    /// The services this instance built once, for its worker to share.
    pub fn services(&self) -> crate::dispatch::Services {
        crate::dispatch::Services {
            platform_client: self.platform_client.clone(),
            typing: self.typing.clone(),
            cache: self.cache.clone(),
        }
    }
}

pub fn system_clock() -> i64 {
    chrono::Utc::now().timestamp()
}
