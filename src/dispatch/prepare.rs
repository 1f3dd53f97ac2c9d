//! The claim stage: a claim and its preparation in the claim's own transaction, a few
//! statements per tenant and one commit for the batch; and the end of a failed job's lease.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use sqlx::{Postgres, Transaction};

use super::claimed::{phase, Claimed, Prepared, Work};
use super::history;
use super::payload::ChatMessage;
use crate::cache::ConfigCache;
use crate::db::messages::MessageRow;
use crate::db::queue::{ClaimRequest, Job, Queue, Stage};
use crate::db::tenants::TenantRow;
use crate::db::TenantTx;
use crate::delivery::Delivery;
use crate::domain::{Connector, MessageId};
use crate::settings::ServeSettings;
use crate::turn::apply;

pub(super) struct Preparer {
    queue: Queue,
    settings: Arc<ServeSettings>,
    /// Shared with the instance's admin API, which forgets what it changes.
    cache: Arc<ConfigCache>,
}

impl Preparer {
    pub(super) fn new(queue: Queue, settings: Arc<ServeSettings>, cache: Arc<ConfigCache>) -> Self {
        Self {
            queue,
            settings,
            cache,
        }
    }

    pub(super) fn queue(&self) -> &Queue {
        &self.queue
    }

    /// Ends a failed job's lease (see `release`); `'static`, so it can be spawned.
    pub(super) fn release(&self, job: Job, outage: bool) -> impl std::future::Future<Output = ()> + 'static {
        release(self.queue.clone(), self.settings.clone(), job, outage)
    }

    /// A failed preparation puts the batch's jobs back with a backoff.
    pub(super) async fn claim(&self, request: &ClaimRequest) -> anyhow::Result<Vec<Claimed>> {
        let started = Instant::now();
        let Some((jobs, tx)) = self.queue.claim(request).await.context("Failed to claim jobs")? else {
            return Ok(Vec::new());
        };
        phase("claim", started);
        metrics::histogram!("channel_bridge_dispatch_claim_batch_size").record(jobs.len() as f64);
        let started = Instant::now();
        match self.prepare(tx, &jobs, started).await {
            Ok(claimed) => {
                phase("prepare", started);
                Ok(claimed)
            }
            Err(err) => {
                // The claim's commit may have landed unacknowledged: its leases are ours to end.
                // Through an outage in the background, as the claimer's wait is bounded.
                use crate::db::outage::MaybeOutage;
                let outage = err.is_outage();
                for job in jobs {
                    let release = self.release(job, outage);
                    match outage {
                        true => drop(tokio::spawn(release)),
                        false => release.await,
                    }
                }
                Err(err.context("Failed to prepare claimed jobs"))
            }
        }
    }

    async fn prepare(
        &self,
        tx: Transaction<'static, Postgres>,
        jobs: &[Job],
        claimed_at: Instant,
    ) -> anyhow::Result<Vec<Claimed>> {
        let mut by_tenant: Vec<&Job> = jobs.iter().collect();
        by_tenant.sort_by_key(|job| job.tenant_id);
        let Some(first) = by_tenant.first() else {
            tx.rollback().await?;
            return Ok(Vec::new());
        };
        let mut tx = TenantTx::after_claim(tx, first.tenant_id).await?;
        let mut claimed = Vec::with_capacity(jobs.len());
        for group in by_tenant.chunk_by(|a, b| a.tenant_id == b.tenant_id) {
            tx.switch_tenant(group[0].tenant_id).await?;
            claimed.extend(self.prepare_tenant(&mut tx, group, claimed_at).await?);
        }
        tx.commit().await?;
        Ok(claimed)
    }

    async fn prepare_tenant(
        &self,
        tx: &mut TenantTx,
        jobs: &[&Job],
        claimed_at: Instant,
    ) -> anyhow::Result<Vec<Claimed>> {
        let tenant_id = tx.tenant();
        let tenant = self.cache.tenant(tx.conn(), tenant_id).await?;
        let (dispatch, reply): (Vec<&Job>, Vec<&Job>) =
            jobs.iter().partition(|job| job.stage == Stage::Dispatch);
        let mut claimed = self.prepare_replies(tx, &reply).await?;
        if dispatch.is_empty() {
            return Ok(claimed);
        }
        let Some(tenant) = tenant else {
            claimed.extend(dispatch.into_iter().map(|job| Claimed {
                job: job.clone(),
                work: Work::Skip,
            }));
            return Ok(claimed);
        };
        claimed.extend(self.prepare_dispatches(tx, &dispatch, tenant, claimed_at).await?);
        Ok(claimed)
    }

    /// Reply jobs: their turn's parts and connector, read for the delivery pass.
    async fn prepare_replies(&self, tx: &mut TenantTx, jobs: &[&Job]) -> anyhow::Result<Vec<Claimed>> {
        let mut claimed = Vec::with_capacity(jobs.len());
        for job in jobs {
            let keys = &self.settings.database.secrets;
            let work = match Delivery::load(tx, keys, job.message_id, job.lease).await? {
                Some(outgoing) => Work::Deliver(Box::new(outgoing)),
                None => Work::Abandon,
            };
            claimed.push(Claimed {
                job: (*job).clone(),
                work,
            });
        }
        Ok(claimed)
    }

    /// Dispatch jobs: their turns marked `dispatching` (or `held` where a person holds the
    /// conversation), with their histories and connectors.
    async fn prepare_dispatches(
        &self,
        tx: &mut TenantTx,
        jobs: &[&Job],
        tenant: Arc<TenantRow>,
        claimed_at: Instant,
    ) -> anyhow::Result<Vec<Claimed>> {
        let ids: Vec<MessageId> = jobs.iter().map(|job| job.message_id).collect();
        let (mut messages, held) = begin_dispatches(tx, &ids).await?;
        let rows: Vec<&MessageRow> = messages.values().collect();
        let mut histories = read_histories_or_empty(tx, &rows, tenant.history_scope).await;
        let connectors = self.connectors_of(tx, &rows).await?;
        let mut claimed = Vec::with_capacity(jobs.len());
        for job in jobs {
            let work = match messages.remove(&job.message_id) {
                Some(message) => Work::Dispatch(Box::new(Prepared {
                    history: histories.remove(&message.id).unwrap_or_default(),
                    connector: connectors.get(&message.connector_id).cloned(),
                    tenant: tenant.clone(),
                    message,
                    claimed_at,
                })),
                None if held.contains(&job.message_id) => Work::Hold,
                None => Work::Skip,
            };
            claimed.push(Claimed {
                job: (*job).clone(),
                work,
            });
        }
        Ok(claimed)
    }

    /// Read fresh rather than cached: a token rotated a moment ago must not fail the reply.
    async fn connectors_of(
        &self,
        tx: &mut TenantTx,
        messages: &[&MessageRow],
    ) -> Result<HashMap<crate::domain::ConnectorId, Arc<Connector>>, sqlx::Error> {
        let ids: Vec<crate::domain::ConnectorId> = messages
            .iter()
            .map(|m| m.connector_id)
            .collect::<HashSet<_>>()
            .into_iter()
            .collect();
        if ids.is_empty() {
            return Ok(HashMap::new());
        }
        let connectors = crate::db::connectors::get_many(tx, &self.settings.database.secrets, &ids).await?;
        Ok(connectors.into_iter().map(|c| (c.id, Arc::new(c))).collect())
    }
}

/// Ends a failed job's lease. A job that fails every time must not be claimed again at once;
/// one that met an outage is ready again as soon as the database is back, rather than when
/// its lease runs out. Written through the outage, for at most a lease.
async fn release(queue: Queue, settings: Arc<ServeSettings>, job: Job, outage: bool) {
    let attempts = u32::try_from(job.attempts).unwrap_or(1);
    let delay = match outage {
        true => Duration::ZERO,
        false => crate::retry::backoff(&settings.dispatch, attempts, None),
    };
    let deadline = settings.database.deadline();
    let patience = Duration::from_secs(settings.dispatch.lease_secs);
    let released = crate::db::outage::through_outage(patience, "job release", || {
        crate::db::within(deadline, queue.retry_later(job.message_id, job.lease, delay))
    })
    .await;
    if let Err(err) = released {
        tracing::warn!(%err, message_id = %job.message_id, "could not release a failed job; its lease decides");
    }
}

/// A failed read dispatches with no history rather than not at all. The savepoint keeps
/// the transaction usable after a failure; after a success the commit takes it along, so
/// releasing it would only cost a round trip.
async fn read_histories_or_empty(
    tx: &mut TenantTx,
    messages: &[&MessageRow],
    setting: crate::domain::HistoryScopeSetting,
) -> HashMap<MessageId, Vec<ChatMessage>> {
    if messages.is_empty() {
        return HashMap::new();
    }
    let savepoint = sqlx::query("savepoint history").execute(tx.conn()).await;
    if let Err(err) = savepoint {
        tracing::warn!(%err, "history read failed; dispatching without history");
        metrics::counter!("channel_bridge_dispatch_history_failures_total").increment(1);
        return HashMap::new();
    }
    let started = Instant::now();
    match history::load_many(tx, messages, setting).await {
        Ok(history) => {
            metrics::histogram!("channel_bridge_dispatch_history_seconds")
                .record(started.elapsed().as_secs_f64());
            history
        }
        Err(err) => {
            tracing::warn!(%err, "history read failed; dispatching without history");
            metrics::counter!("channel_bridge_dispatch_history_failures_total").increment(1);
            let _ = sqlx::query("rollback to savepoint history")
                .execute(tx.conn())
                .await;
            HashMap::new()
        }
    }
}

/// The turns marked `dispatching`, and of the others those that became `held` because a
/// person holds their conversation (the rest are finished or gone).
async fn begin_dispatches(
    tx: &mut TenantTx,
    ids: &[MessageId],
) -> Result<(HashMap<MessageId, MessageRow>, HashSet<MessageId>), sqlx::Error> {
    let messages: HashMap<MessageId, MessageRow> = apply::begin_dispatch(tx, ids)
        .await?
        .into_iter()
        .map(|row| (row.id, row))
        .collect();
    let missing: Vec<MessageId> = ids
        .iter()
        .filter(|id| !messages.contains_key(id))
        .copied()
        .collect();
    let held = crate::turn::handoff::hold_claimed(tx, &missing)
        .await?
        .into_iter()
        .collect();
    Ok((messages, held))
}
