//! The pipeline harness: the application on a fresh database, a tenant whose connectors send
//! to fake platforms, a fake agent that verifies every dispatch, and a dispatch worker the
//! test drives step by step. The worker is not the application's own (`spawn_app` runs none):
//! nothing happens until the test calls `step`, and a failed step is due again at once, so a
//! test decides when time passes (`time_passes`).

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use channel_bridge::db::parts::ReplyPart;
use channel_bridge::dispatch::{StepOutcome, Worker};
use channel_bridge::domain::{MessageId, Platform};
use channel_bridge::settings::ServeSettings;
use serde_json::Value;
use tokio::sync::{OnceCell, Semaphore};
use tokio::task::JoinHandle;

use super::fake_agent::FakeAgent;
use super::fake_platforms::FakePlatforms;
use super::platforms::{deliver, post, provision_tenant_at, signed_headers, Provisioned};
use super::{spawn_app, TestApp};

/// A dispatch worker on `app`'s database driven by hand: its agent is `agent_url`, a failed
/// step is due again at once (`retry_base_ms = 0`), and `configure` adjusts the rest.
pub fn worker(app: &TestApp, agent_url: &str, configure: impl FnOnce(&mut ServeSettings)) -> Arc<Worker> {
    worker_with(app, |settings| {
        settings.agent_url = Some(agent_url.to_owned());
        configure(settings);
    })
}

/// Like `worker`, with no agent URL of the worker's own: each tenant's is used.
pub fn worker_with(app: &TestApp, configure: impl FnOnce(&mut ServeSettings)) -> Arc<Worker> {
    let mut settings = app.db.serve_settings();
    settings.dispatch.retry_base_ms = 0;
    configure(&mut settings);
    let worker = Worker::new(app.pool.clone(), Arc::new(settings), || {
        chrono::Utc::now().timestamp()
    })
    .expect("the worker's settings are valid");
    Arc::new(worker)
}

/// Everything a turn passes through, from webhook to reply (see the module doc).
#[allow(dead_code)] // each test module uses its own part
pub struct Pipeline {
    pub app: TestApp,
    pub platforms: FakePlatforms,
    pub agent: FakeAgent,
    pub tenant: Provisioned,
    pub worker: Arc<Worker>,
    /// With `gated_agent`: the agent answers a call only once `answer` added a permit.
    gate: Option<Arc<Semaphore>>,
    next_id: AtomicI64,
    admin_key: OnceCell<String>,
}

/// One adjustment of the worker's settings.
type Configure = Box<dyn FnOnce(&mut ServeSettings)>;

/// What differs between pipeline tests; `Pipeline::builder()` starts with none of it.
#[derive(Default)]
pub struct PipelineBuilder {
    settings: Vec<Configure>,
    gated_agent: bool,
    platform_api: Option<String>,
    media_from_the_app: bool,
}

#[allow(dead_code)]
impl PipelineBuilder {
    /// Adjusts the worker's settings (after `retry_base_ms = 0`).
    pub fn settings(mut self, configure: impl FnOnce(&mut ServeSettings) + 'static) -> Self {
        self.settings.push(Box::new(configure));
        self
    }

    /// The agent holds every answer until the test calls `Pipeline::answer`.
    pub fn gated_agent(mut self) -> Self {
        self.gated_agent = true;
        self
    }

    /// The connectors call `base_url` as their platform API instead of the fake platforms
    /// (which then receive nothing).
    pub fn platform_api(mut self, base_url: &str) -> Self {
        self.platform_api = Some(base_url.to_owned());
        self
    }

    /// Attachments are offered to the agent at the application's own `/v1/media` URLs.
    pub fn media_from_the_app(mut self) -> Self {
        self.media_from_the_app = true;
        self
    }

    pub async fn start(self) -> Pipeline {
        let app = spawn_app().await;
        let platforms = FakePlatforms::start().await;
        let api = self.platform_api.as_deref().unwrap_or(&platforms.base_url);
        let tenant = provision_tenant_at(&app.pool, "acme", Some(api)).await;
        let gate = self.gated_agent.then(|| Arc::new(Semaphore::new(0)));
        let agent = match &gate {
            Some(gate) => FakeAgent::start_gated(&tenant.dispatch_secret, gate.clone()).await,
            None => FakeAgent::start(&tenant.dispatch_secret).await,
        };
        let media_url = self.media_from_the_app.then(|| app.url(""));
        let worker = worker(&app, &agent.url, |settings| {
            if media_url.is_some() {
                settings.media.public_url = media_url;
            }
            for configure in self.settings {
                configure(settings);
            }
        });
        Pipeline {
            app,
            platforms,
            agent,
            tenant,
            worker,
            gate,
            next_id: AtomicI64::new(0),
            admin_key: OnceCell::new(),
        }
    }
}

#[allow(dead_code)]
impl Pipeline {
    /// The harness with nothing changed.
    pub async fn start() -> Self {
        Self::builder().start().await
    }

    pub fn builder() -> PipelineBuilder {
        PipelineBuilder::default()
    }

    /// 0, 1, 2, … within this pipeline: for message ids the platforms' dedupe keys tell apart.
    pub fn next_id(&self) -> i64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// POSTs `body`, signed, to the tenant's connector of `platform`; asserts 200.
    pub async fn deliver(&self, platform: Platform, body: Vec<u8>) {
        deliver(&self.app, &self.tenant, platform, body).await;
    }

    /// POSTs `body`, signed, to the tenant's connector of `platform`; the response as it is.
    pub async fn post_webhook(&self, platform: Platform, body: Vec<u8>) -> reqwest::Response {
        let path = self.tenant.hook_path(platform);
        post(&self.app, &path, &signed_headers(platform, &body), body).await
    }

    /// One worker step, expected to execute a turn; the turn's id.
    pub async fn step_executed(&self) -> MessageId {
        expect_executed(self.worker.step().await.unwrap())
    }

    /// A worker step running on its own task (a test can kill it as a crash would).
    pub fn step(&self) -> JoinHandle<StepOutcome> {
        let worker = self.worker.clone();
        tokio::spawn(async move { worker.step().await.unwrap() })
    }

    /// Records `body` on `platform` and starts a worker step on it.
    pub async fn turn(&self, platform: Platform, body: Vec<u8>) -> JoinHandle<StepOutcome> {
        self.deliver(platform, body).await;
        self.step()
    }

    /// With `gated_agent`: lets the agent answer one call.
    pub fn answer(&self) {
        self.gate
            .as_ref()
            .expect("answer needs a pipeline built with gated_agent")
            .add_permits(1);
    }

    /// Time passes: every waiting job and lease is due now.
    pub async fn time_passes(&self) {
        self.owner_exec("update dispatch_queue set available_at = now(), lease_owner = null")
            .await;
    }

    /// The turn's reply parts, read through the tenant transaction.
    pub async fn parts(&self, message: MessageId) -> Vec<ReplyPart> {
        let mut tx = self.app.tenant_tx(self.tenant.tenant).await;
        channel_bridge::db::parts::reply_parts(&mut tx, message)
            .await
            .unwrap()
    }

    pub async fn delivered(&self, message: MessageId) -> bool {
        let mut owner = self.app.db.owner_conn().await;
        sqlx::query_scalar("select delivered_at is not null from channel_messages where id = $1")
            .bind(message)
            .fetch_one(&mut owner)
            .await
            .unwrap()
    }

    /// A tenant admin key, issued as the operator would on first use.
    pub async fn admin_key(&self) -> String {
        self.admin_key
            .get_or_init(|| async {
                channel_bridge::admin::operator::issue(&self.app.pool, self.tenant.tenant, "ci")
                    .await
                    .unwrap()
                    .key
            })
            .await
            .clone()
    }

    /// An admin API request with the tenant's admin key; its status and JSON body (null when
    /// there is none).
    pub async fn admin(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
        let key = self.admin_key().await;
        let mut request = self
            .app
            .client
            .request(method, self.app.url(path))
            .bearer_auth(key);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    /// Runs `sql` as the database owner (states the application cannot reach itself).
    pub async fn owner_exec(&self, sql: &str) {
        let mut owner = self.app.db.owner_conn().await;
        sqlx::query(sql).execute(&mut owner).await.unwrap();
    }

    /// One value read as the database owner.
    pub async fn owner_scalar<T>(&self, sql: &str) -> T
    where
        T: for<'r> sqlx::Decode<'r, sqlx::Postgres> + sqlx::Type<sqlx::Postgres> + Send + Unpin,
    {
        let mut owner = self.app.db.owner_conn().await;
        sqlx::query_scalar(sql).fetch_one(&mut owner).await.unwrap()
    }
}

/// The step ended by executing a turn; the turn's id.
pub async fn executed(step: JoinHandle<StepOutcome>) -> MessageId {
    expect_executed(step.await.unwrap())
}

fn expect_executed(outcome: StepOutcome) -> MessageId {
    match outcome {
        StepOutcome::Executed(id) => id,
        other => panic!("expected an executed turn, got {other:?}"),
    }
}

/// The parts' statuses, in order.
pub fn statuses(parts: &[ReplyPart]) -> Vec<&str> {
    parts.iter().map(|p| p.status.as_str()).collect()
}
