//! The batching writer: several webhooks per commit (`crate::batch`).
//!
//! Handlers hand their verified, parsed webhook to `Writer::record` and wait for its
//! outcome; `CB_INGRESS_WRITERS` writer tasks each take whatever has queued up meanwhile
//! (up to `CB_INGRESS_BATCH_MAX` webhooks) and record it in one transaction: grouped by tenant, each group under its own tenant's setting
//! (`TenantTx::switch_tenant`), each group's turns in a fixed number of statements
//! (`record_many_in`: one link lookup, one insert of the rows, one of the jobs). At low
//! load a batch is one webhook and nothing waits; under load batches grow by themselves
//! while the other writers' commits are in flight (group commit).
//!
//! A webhook is answered only after the commit that holds it, so a 200 still means
//! "recorded". When a batch fails for a reason other than an outage (a deadlock between
//! two batches holding the same retried keys in opposite orders, a row one webhook cannot
//! write…), its webhooks are recorded again one transaction each, so one webhook's failure
//! is never its neighbours'. An outage fails the whole batch at once: every webhook in it
//! gets its 503 and the platforms retry.

use std::sync::Arc;

use sqlx::PgPool;
use tokio::sync::oneshot;

use super::{record, record_many_in, RecordOutcome};
use crate::batch::Batcher;
use crate::channels::Inbound;
use crate::db::TenantTx;
use crate::domain::Connector;

/// Why a webhook was not recorded; shared by every webhook of a failed batch.
pub type RecordError = Arc<sqlx::Error>;

type Reply = oneshot::Sender<Result<RecordOutcome, RecordError>>;

struct Job {
    connector: Arc<Connector>,
    inbound: Inbound,
    reply: Reply,
}

/// The handle handlers record through. Cheap to share; the writer tasks stop when the last
/// handle is dropped, after finishing what was handed to them.
pub struct Writer {
    jobs: Batcher<Job>,
}

impl Writer {
    /// Starts `writers` writer tasks on the current runtime, each committing up to
    /// `batch_max` webhooks at a time.
    pub fn spawn(pool: PgPool, writers: usize, batch_max: usize) -> Self {
        let jobs = Batcher::spawn("ingress", writers, batch_max, move |batch| {
            let pool = pool.clone();
            async move { write(&pool, batch).await }
        });
        Self { jobs }
    }

    /// Records one verified webhook; returns once it is committed (or failed).
    pub async fn record(
        &self,
        connector: Arc<Connector>,
        inbound: Inbound,
    ) -> Result<RecordOutcome, RecordError> {
        if inbound.messages.is_empty() && inbound.statuses.is_empty() {
            return Ok(RecordOutcome::default());
        }
        let mut inbound = inbound;
        inbound.scrub_nul();
        let (reply, outcome) = oneshot::channel();
        let job = Job {
            connector,
            inbound,
            reply,
        };
        if self.jobs.send(job).await.is_err() {
            return Err(Arc::new(sqlx::Error::PoolClosed));
        }
        // A writer task that ended without answering (the runtime is shutting down) leaves
        // the webhook unrecorded: an outage answer, so the platform retries.
        outcome.await.unwrap_or(Err(Arc::new(sqlx::Error::PoolClosed)))
    }
}

/// Commits one batch and answers each of its webhooks.
async fn write(pool: &PgPool, mut batch: Vec<Job>) {
    metrics::histogram!("ingress_batch_size").record(batch.len() as f64);
    // Grouping by tenant saves `SET LOCAL` round trips; the sort is stable, so one
    // conversation's webhooks keep their arrival order.
    batch.sort_by_key(|job| job.connector.tenant_id);
    match write_batch(pool, &batch).await {
        Ok(outcomes) => {
            for (job, outcome) in batch.into_iter().zip(outcomes) {
                let _ = job.reply.send(Ok(outcome));
            }
        }
        Err(err) if batch.len() == 1 || crate::db::is_unavailable(&err) => {
            let err = Arc::new(err);
            for job in batch {
                let _ = job.reply.send(Err(err.clone()));
            }
        }
        Err(err) => {
            tracing::warn!(error = %err, webhooks = batch.len(), "ingress batch failed; recording its webhooks one by one");
            metrics::counter!("ingress_batch_fallbacks_total").increment(1);
            for job in batch {
                let outcome = record(pool, &job.connector, &job.inbound).await.map_err(Arc::new);
                let _ = job.reply.send(outcome);
            }
        }
    }
}

async fn write_batch(pool: &PgPool, batch: &[Job]) -> Result<Vec<RecordOutcome>, sqlx::Error> {
    let Some(first) = batch.first() else {
        return Ok(Vec::new());
    };
    let mut tx = TenantTx::begin(pool, first.connector.tenant_id).await?;
    let mut outcomes = Vec::with_capacity(batch.len());
    // The batch is sorted by tenant: each tenant's webhooks are recorded together, with a
    // fixed number of statements (`record_many_in`).
    for group in batch.chunk_by(|a, b| a.connector.tenant_id == b.connector.tenant_id) {
        tx.switch_tenant(group[0].connector.tenant_id).await?;
        let webhooks: Vec<(&Connector, &Inbound)> = group
            .iter()
            .map(|job| (job.connector.as_ref(), &job.inbound))
            .collect();
        outcomes.extend(record_many_in(&mut tx, &webhooks).await?);
    }
    tx.commit().await?;
    Ok(outcomes)
}
