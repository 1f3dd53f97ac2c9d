//! The feedback stage: due feedback events sent, each signed like a dispatch and retried
//! with backoff, then settled. `feedback.rs` runs its passes.

use std::sync::Arc;

use serde::Serialize;
use sha2::{Digest, Sha256};
use sqlx::PgPool;

use super::agent::{self, NO_AGENT_URL};
use super::payload::ChannelOut;
use crate::cache::ConfigCache;
use crate::db::messages::MessageRow;
use crate::db::reactions::{self, FeedbackJob, ReactionOut};
use crate::db::tenants::TenantRow;
use crate::db::TenantTx;
use crate::egress::{GuardedClient, SendError};
use crate::settings::ServeSettings;
use crate::signature;

/// Seconds before each next attempt; after the last, the event is given up (logged and
/// counted). A pass runs when woken and every `feedback::EVERY`, so a wait is at least
/// that long.
const BACKOFF_SECS: [i32; 8] = [5, 15, 60, 300, 900, 1800, 3600, 3600];
const BATCH: i64 = 16;

pub(super) struct FeedbackSender {
    pool: PgPool,
    /// Shared with the instance's admin API, which forgets what it changes.
    cache: Arc<ConfigCache>,
    /// The agent's client.
    client: GuardedClient,
    settings: Arc<ServeSettings>,
}

/// The body of a `feedback` event.
#[derive(Debug, Serialize)]
struct FeedbackOut<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    tenant_id: String,
    /// The answered turn.
    message_id: String,
    user_id: Option<&'a str>,
    conversation: &'a str,
    /// Where the answer was posted; `platform_user_id` is who reacted.
    channel: ChannelOut,
    reaction: &'a ReactionOut,
}

/// How one attempt ended.
#[derive(Debug)]
enum Sent {
    Delivered,
    /// The reaction changed again (its own event follows), or the tenant opted out.
    Superseded,
    Retry(String),
    Refused(String),
}

impl Sent {
    fn label(&self) -> &'static str {
        match self {
            Sent::Delivered => "delivered",
            Sent::Superseded => "superseded",
            Sent::Retry(_) => "failed",
            Sent::Refused(_) => "refused",
        }
    }
}

impl FeedbackSender {
    pub(super) fn new(
        pool: PgPool,
        cache: Arc<ConfigCache>,
        client: GuardedClient,
        settings: Arc<ServeSettings>,
    ) -> Self {
        Self {
            pool,
            cache,
            client,
            settings,
        }
    }

    /// One pass over the due events, each attempted once. Returns how many were settled
    /// (sent, superseded, refused or given up).
    pub(super) async fn deliver(&self) -> Result<usize, sqlx::Error> {
        let jobs = {
            let mut conn = self.pool.acquire().await?;
            reactions::claim_feedback(&mut conn, chrono::Utc::now(), BATCH, &BACKOFF_SECS).await?
        };
        let mut settled = 0;
        for job in jobs {
            let sent = self.send(&job).await?;
            let last = usize::try_from(job.attempts).unwrap_or(usize::MAX) >= BACKOFF_SECS.len();
            match &sent {
                Sent::Retry(error) if !last => {
                    tracing::info!(message_id = %job.message_id, attempts = job.attempts, %error, "feedback event not delivered; retried later");
                    continue;
                }
                Sent::Retry(error) | Sent::Refused(error) => {
                    tracing::warn!(message_id = %job.message_id, attempts = job.attempts, %error, "feedback event given up");
                }
                Sent::Delivered | Sent::Superseded => {}
            }
            metrics::counter!("channel_bridge_feedback_events_total", "result" => sent.label()).increment(1);
            let mut conn = self.pool.acquire().await?;
            reactions::settle_feedback(&mut conn, job.id).await?;
            settled += 1;
        }
        Ok(settled)
    }

    async fn send(&self, job: &FeedbackJob) -> Result<Sent, sqlx::Error> {
        let mut tx = TenantTx::begin(&self.pool, job.tenant_id).await?;
        let tenant = self.cache.tenant(tx.conn(), job.tenant_id).await?;
        let reaction =
            reactions::reaction_as_of(&mut tx, job.message_id, &job.platform_user_id, job.reacted_at).await?;
        let turn = crate::db::messages::get(&mut tx, job.message_id).await?;
        tx.commit().await?;
        let (Some(tenant), Some(reaction), Some(turn)) = (tenant, reaction, turn) else {
            return Ok(Sent::Superseded);
        };
        if !tenant.feedback_events {
            return Ok(Sent::Superseded);
        }
        let Some(url) = agent::url_of(&tenant, &self.settings) else {
            return Ok(Sent::Refused(NO_AGENT_URL.into()));
        };
        let event = FeedbackOut {
            kind: "feedback",
            tenant_id: turn.tenant_id.to_string(),
            message_id: turn.id.to_string(),
            user_id: turn.user_id.as_deref(),
            conversation: turn.conversation_key.as_str(),
            channel: channel_of(&turn, &reaction.by),
            reaction: &reaction,
        };
        Ok(self.post(url, &tenant, &event_id(job), &event).await)
    }

    async fn post(&self, url: &str, tenant: &TenantRow, id: &str, event: &FeedbackOut<'_>) -> Sent {
        let body = match serde_json::to_vec(event) {
            Ok(body) => body,
            Err(err) => return Sent::Refused(err.to_string()),
        };
        let secrets = tenant.signing_secrets();
        let now = chrono::Utc::now().timestamp();
        let signature = match signature::sign_all(&secrets, id, now, &body) {
            Ok(signature) => signature,
            Err(err) => return Sent::Refused(err.to_string()),
        };
        let request = self
            .client
            .post(url)
            .header("content-type", "application/json")
            .header("webhook-id", id)
            .header("webhook-timestamp", now.to_string())
            .header("webhook-signature", signature)
            .body(body);
        // The host only, never the URL: a tenant's agent URL may carry a token.
        let host = agent::host_of(url);
        match self.client.send(request).await {
            Ok(response) if response.status().is_success() => Sent::Delivered,
            Ok(response) if response.status().as_u16() == 429 || response.status().is_server_error() => {
                Sent::Retry(format!("agent {host} answered {}", response.status()))
            }
            Ok(response) => Sent::Refused(format!("agent {host} answered {}", response.status())),
            Err(SendError::Refused(_)) => Sent::Refused(crate::egress::AGENT_REFUSED.to_owned()),
            Err(SendError::Transport(err)) => Sent::Retry(format!("agent {host}: {}", agent::cause(&err))),
        }
    }
}

fn channel_of(turn: &MessageRow, reacted_by: &str) -> ChannelOut {
    ChannelOut {
        platform: turn.platform.to_string(),
        connector_id: turn.connector_id.to_string(),
        chat_id: turn.address.chat_id.clone(),
        thread_id: turn.address.thread_id.clone(),
        platform_user_id: reacted_by.to_owned(),
    }
}

/// The same on every attempt of one change, so an agent can drop a repeat; another change
/// (or another person) is another id.
fn event_id(job: &FeedbackJob) -> String {
    let who = hex::encode(Sha256::digest(job.platform_user_id.as_bytes()));
    format!(
        "feedback_{}_{}_{}",
        job.message_id,
        job.reacted_at.timestamp_micros(),
        &who[..16]
    )
}
