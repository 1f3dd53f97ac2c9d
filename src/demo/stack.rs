//! Everything the demo runs, stopped together. The start order matters: the agent's port is
//! needed to create the tenant, and the tenant's secret to start the agent.

use std::io::Write;
use std::sync::Arc;

use sqlx::PgPool;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::agent::{observed_echo_bridge, EchoSwitch, SeenDispatches};
use super::platforms::PlatformStandIns;
use super::provision::provision;
use super::served::Served;
use super::webhooks::*;
use crate::domain::{ConnectorId, Platform, TenantId};
use crate::settings::ServeSettings;
use crate::startup::Application;

/// The running demo: where the script posts, what it reads back, and what `stop` ends.
pub(super) struct Stack {
    pub(super) pool: PgPool,
    pub(super) tenant: TenantId,
    connectors: Vec<(Platform, ConnectorId)>,
    gateway_url: String,
    agent_url: String,
    pub(super) stand_ins: PlatformStandIns,
    pub(super) seen: Arc<SeenDispatches>,
    /// What the echo adds to its next answers: choices, a picture, nothing.
    pub(super) echo: Arc<EchoSwitch>,
    agent: Served,
    gateway: (oneshot::Sender<()>, JoinHandle<anyhow::Result<()>>),
}

impl Stack {
    pub(super) async fn start(database_url: &str) -> anyhow::Result<Self> {
        let stand_ins = PlatformStandIns::start().await?;
        let agent_listener = TcpListener::bind("127.0.0.1:0").await?;
        let agent_url = format!("http://{}/agent", agent_listener.local_addr()?);
        let mut settings = ServeSettings::for_database(database_url);
        settings.shutdown_grace_secs = 5;
        let app = Application::build(settings).await?;
        let gateway_url = format!(
            "http://{}",
            app.local_addr().expect("the demo gateway serves HTTP")
        );
        let pool = app.state().pool.clone();
        let keys = app.state().settings.database.secrets.clone();
        let (tenant, secret, connectors) = provision(&pool, &keys, &agent_url, &stand_ins.base_url).await?;
        let seen = Arc::new(SeenDispatches::default());
        let echo = Arc::new(EchoSwitch::default());
        let agent = Served::spawn(
            agent_listener,
            observed_echo_bridge(&secret, seen.clone(), echo.clone())?,
        );
        let (stop, stopped) = oneshot::channel::<()>();
        let gateway = tokio::spawn(app.run_until(async {
            let _ = stopped.await;
        }));
        Ok(Self {
            pool,
            tenant,
            connectors,
            gateway_url,
            agent_url,
            stand_ins,
            seen,
            echo,
            agent,
            gateway: (stop, gateway),
        })
    }

    pub(super) fn describe(&self, out: &mut (dyn Write + Send)) -> std::io::Result<()> {
        writeln!(out, "  gateway    {} (HTTP + dispatch worker)", self.gateway_url)?;
        writeln!(
            out,
            "  agent      {} (agent-bridge --echo; --choices for the question alice taps, --file once)",
            self.agent_url
        )?;
        writeln!(
            out,
            "  platforms  {} (stand-ins for Slack, WhatsApp and Telegram send APIs)",
            self.stand_ins.base_url
        )?;
        writeln!(out, "  tenant     demo {}", self.tenant)?;
        for (platform, connector) in &self.connectors {
            writeln!(out, "             {:<9} connector {connector}", platform.as_str())?;
        }
        writeln!(
            out,
            "  people     alice = Slack {SLACK_ALICE} + Telegram {TELEGRAM_ALICE} (one history), bob = WhatsApp {WHATSAPP_BOB}\n"
        )
    }

    pub(super) fn hook_url(&self, platform: Platform) -> String {
        let connector = self
            .connectors
            .iter()
            .find(|(p, _)| *p == platform)
            .map(|(_, id)| *id)
            .expect("the demo provisions one connector per platform");
        format!(
            "{}{}",
            self.gateway_url,
            crate::provision::webhook_path(self.tenant, connector)
        )
    }

    pub(super) async fn stop(self) {
        let (stop, gateway) = self.gateway;
        let _ = stop.send(());
        match gateway.await {
            Ok(Ok(())) => {}
            Ok(Err(err)) => tracing::warn!(error = ?err, "demo gateway stopped with an error"),
            Err(err) => tracing::warn!(%err, "demo gateway task failed"),
        }
        self.agent.stop().await;
        self.stand_ins.stop().await;
    }
}
