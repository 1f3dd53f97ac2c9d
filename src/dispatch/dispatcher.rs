//! One claimer per instance feeding a bounded in-flight set
//! (docs/architecture.md#webhook-to-reply). It claims again on a wake-up or a finished job
//! (gathered for a few milliseconds, so a busy instance claims in batches), after a claim
//! that filled its batch, and on the polling tick, which first asks whether anything is
//! ready, so an idle instance costs one statement a tick. Each claim takes every tenant's
//! oldest head before any tenant's second, each tenant within its cap. Leases are renewed
//! every lease/3; a holder whose lease was lost anyway finds out at its next state change.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{watch, Notify};
use tokio::task::JoinSet;

use super::wakeup::Wakeup;
use super::{StepOutcome, Worker};
use crate::db::queue::{ClaimRequest, LeaseToken, Rotation};
use crate::domain::{MessageId, TenantId};

/// Under load many wake-ups arrive per millisecond, and one claim serves them all.
const GATHER: Duration = Duration::from_millis(10);
const STATS_EVERY: Duration = Duration::from_secs(10);
const ROTATE_EVERY: Duration = Duration::from_secs(1);
const OUTAGE_BACKOFF_MIN: Duration = Duration::from_millis(250);
/// Short: claims resume within this of the database's return (a refused connection costs
/// nothing, and a held one is bounded by the deadline).
const OUTAGE_BACKOFF_MAX: Duration = Duration::from_secs(4);

enum ClaimResult {
    Full,
    Partial,
    Failed(Duration),
}

#[derive(Default)]
struct InFlight {
    total: usize,
    per_tenant: HashMap<TenantId, usize>,
    leases: HashMap<MessageId, LeaseToken>,
    caps: HashMap<TenantId, usize>,
    caps_read: Option<Instant>,
}

/// Given back when dropped, also if the job's task panics: a bug in one job must not shrink
/// the capacity for good.
struct Slot {
    dispatcher: Arc<Dispatcher>,
    tenant: TenantId,
    message: MessageId,
    lease: LeaseToken,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.dispatcher.finish(self.tenant, self.message, self.lease);
    }
}

pub struct Dispatcher {
    worker: Arc<Worker>,
    capacity: usize,
    default_cap: usize,
    batch_max: usize,
    in_flight: Mutex<InFlight>,
    freed: Notify,
    claims: std::sync::atomic::AtomicU64,
    /// Failures in a row (an outage).
    failures: std::sync::atomic::AtomicU32,
}

impl Dispatcher {
    pub fn new(worker: Arc<Worker>) -> Arc<Self> {
        let settings = worker.settings();
        let capacity = settings.max_in_flight.max(1);
        let default_cap = (capacity * usize::from(settings.tenant_share_percent))
            .div_ceil(100)
            .max(1);
        Arc::new(Self {
            capacity,
            default_cap,
            batch_max: settings.claim_batch_max.max(1),
            worker,
            in_flight: Mutex::new(InFlight::default()),
            freed: Notify::new(),
            claims: std::sync::atomic::AtomicU64::new(0),
            failures: std::sync::atomic::AtomicU32::new(0),
        })
    }

    pub fn in_flight(&self) -> usize {
        self.lock().total
    }

    pub fn claims_issued(&self) -> u64 {
        self.claims.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, InFlight> {
        // Only counters: a panic cannot leave them torn in a way that matters more than
        // losing the dispatcher.
        self.in_flight
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Only when claiming, so an idle instance does not read them.
    async fn refresh_caps(&self) {
        let ttl = Duration::from_secs(self.worker.settings().config_cache_secs.max(1));
        if self.lock().caps_read.is_some_and(|read| read.elapsed() < ttl) {
            return;
        }
        let deadline = self.worker.settings().database.deadline();
        match crate::db::within(deadline, self.worker.queue().tenant_caps()).await {
            Ok(caps) => {
                let mut state = self.lock();
                state.caps = caps
                    .into_iter()
                    .map(|(tenant, cap)| (tenant, usize::try_from(cap).unwrap_or(1)))
                    .collect();
                state.caps_read = Some(Instant::now());
            }
            Err(err) => tracing::warn!(%err, "cannot read tenant caps; keeping the last ones"),
        }
    }

    fn claim_request(&self) -> Option<ClaimRequest> {
        let state = self.lock();
        let free = self.capacity.saturating_sub(state.total);
        if free == 0 {
            return None;
        }
        let mut tenants: Vec<TenantId> = state.per_tenant.keys().copied().collect();
        tenants.extend(state.caps.keys().filter(|t| !state.per_tenant.contains_key(t)));
        let room = tenants
            .into_iter()
            .map(|tenant| {
                let busy = state.per_tenant.get(&tenant).copied().unwrap_or(0);
                (tenant, self.cap_of(&state, tenant).saturating_sub(busy).min(free))
            })
            .collect();
        Some(ClaimRequest {
            wanted: free.min(self.batch_max),
            room,
            default_room: self.default_cap.min(free),
            lease: Duration::from_secs(self.worker.settings().dispatch.lease_secs),
        })
    }

    fn cap_of(&self, state: &InFlight, tenant: TenantId) -> usize {
        state
            .caps
            .get(&tenant)
            .map_or(self.default_cap, |cap| (*cap).min(self.capacity))
    }

    async fn claim_once(self: &Arc<Self>, tasks: &mut JoinSet<()>) -> ClaimResult {
        self.refresh_caps().await;
        let Some(request) = self.claim_request() else {
            return ClaimResult::Partial;
        };
        self.claims.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let deadline = self.worker.settings().database.deadline();
        let claimed = match crate::db::within(deadline, self.worker.claim(&request)).await {
            Ok(claimed) => claimed,
            Err(err) => return ClaimResult::Failed(self.failed("claim", &err)),
        };
        self.recovered();
        let full = claimed.len() == request.wanted;
        for job in claimed {
            self.start(job, tasks);
        }
        metrics::gauge!("channel_bridge_dispatch_in_flight").set(self.in_flight() as f64);
        if full {
            ClaimResult::Full
        } else {
            ClaimResult::Partial
        }
    }

    /// One log line per failure; the pause doubles up to `OUTAGE_BACKOFF_MAX`.
    fn failed(&self, what: &str, err: &anyhow::Error) -> Duration {
        let failures = self.failures.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        let pause = OUTAGE_BACKOFF_MIN
            .saturating_mul(1 << failures.saturating_sub(1).min(16))
            .min(OUTAGE_BACKOFF_MAX);
        metrics::counter!("channel_bridge_dispatch_claim_failures_total").increment(1);
        tracing::warn!(
            error = format!("{err:#}"),
            failures,
            retry_in_ms = pause.as_millis() as u64,
            "{what} failed; pausing the dispatcher"
        );
        pause
    }

    fn recovered(&self) {
        let failures = self.failures.swap(0, std::sync::atomic::Ordering::Relaxed);
        if failures > 0 {
            tracing::info!(failures, "database reachable again; dispatching resumed");
        }
    }

    fn start(self: &Arc<Self>, claimed: super::Claimed, tasks: &mut JoinSet<()>) {
        let (tenant, message, lease) = (claimed.job.tenant_id, claimed.job.message_id, claimed.job.lease);
        {
            let mut state = self.lock();
            state.total += 1;
            *state.per_tenant.entry(tenant).or_default() += 1;
            state.leases.insert(message, lease);
        }
        let slot = Slot {
            dispatcher: self.clone(),
            tenant,
            message,
            lease,
        };
        tasks.spawn(async move {
            match slot.dispatcher.worker.run_job(claimed).await {
                Ok(StepOutcome::LeaseLost(_)) => {
                    tracing::warn!(%message, "lease lost; another holder has the job");
                    metrics::counter!("channel_bridge_dispatch_leases_lost_total").increment(1);
                }
                Ok(_) => {}
                Err(err) => tracing::error!(error = ?err, %message, "dispatch job failed"),
            }
            drop(slot);
        });
    }

    fn finish(&self, tenant: TenantId, message: MessageId, lease: LeaseToken) {
        {
            let mut state = self.lock();
            state.total = state.total.saturating_sub(1);
            if let Some(busy) = state.per_tenant.get_mut(&tenant) {
                *busy -= 1;
                if *busy == 0 {
                    state.per_tenant.remove(&tenant);
                }
            }
            // After an expiry this instance may hold the same job again, under a new lease.
            if state.leases.get(&message) == Some(&lease) {
                state.leases.remove(&message);
            }
        }
        self.freed.notify_one();
    }

    pub async fn run(self: Arc<Self>, wakeup: Arc<Wakeup>, mut stop: watch::Receiver<bool>) {
        let settings = self.worker.settings();
        let mut poll =
            tokio::time::interval(Duration::from_millis(settings.dispatch.poll_interval_ms.max(1)));
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut tasks = JoinSet::new();
        let mut ready = true;
        while !*stop.borrow() {
            // A finished job's task keeps its memory (its whole future) until it is joined,
            // and under load thousands finish between two turns of this loop.
            while tasks.try_join_next().is_some() {}
            // Registered before the claim, so a wake-up during it is not lost.
            let notified = wakeup.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let mut outcome = ready.then_some(ClaimResult::Partial);
            if ready {
                outcome = Some(self.claim_once(&mut tasks).await);
            }
            match outcome {
                Some(ClaimResult::Full) => continue,
                Some(ClaimResult::Failed(pause)) => {
                    tokio::select! {
                        () = tokio::time::sleep(pause) => {}
                        _ = stop.changed() => {}
                    }
                    continue;
                }
                _ => {}
            }
            ready = false;
            tokio::select! {
                () = &mut notified => {
                    tokio::time::sleep(GATHER).await;
                    ready = true;
                }
                () = self.freed.notified() => {
                    tokio::time::sleep(GATHER).await;
                    ready = true;
                }
                _ = poll.tick() => match self.anything_ready().await {
                    Ok(found) => ready = found,
                    Err(pause) => {
                        tokio::select! {
                            () = tokio::time::sleep(pause) => {}
                            _ = stop.changed() => {}
                        }
                        ready = true;
                    }
                },
                _ = stop.changed() => {}
            }
        }
        while tasks.join_next().await.is_some() {}
    }

    async fn anything_ready(&self) -> Result<bool, Duration> {
        if self.in_flight() >= self.capacity {
            return Ok(false);
        }
        let deadline = self.worker.settings().database.deadline();
        match crate::db::within(deadline, self.worker.queue().any_ready()).await {
            Ok(ready) => {
                self.recovered();
                Ok(ready)
            }
            Err(err) => Err(self.failed("a look at the queue", &err.into())),
        }
    }

    pub async fn keep_leases(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        let lease = Duration::from_secs(self.worker.settings().dispatch.lease_secs);
        let every = (lease / 3).max(Duration::from_millis(100));
        while !*stop.borrow() {
            tokio::select! {
                () = tokio::time::sleep(every) => {}
                _ = stop.changed() => return,
            }
            let held: Vec<(MessageId, LeaseToken)> =
                self.lock().leases.iter().map(|(m, t)| (*m, *t)).collect();
            if held.is_empty() {
                continue;
            }
            let started = Instant::now();
            let renewal = self.worker.queue().renew_leases(&held, lease);
            match crate::db::within(self.worker.settings().database.deadline(), renewal).await {
                Ok(renewed) if renewed.len() < held.len() => {
                    // Finished, or claimed again after an expiry: the holder's next state
                    // change finds out.
                    tracing::debug!(
                        held = held.len(),
                        renewed = renewed.len(),
                        "some leases were not renewed"
                    );
                }
                Ok(_) => {}
                Err(err) => tracing::warn!(%err, "lease renewal failed; retrying next round"),
            }
            metrics::histogram!("channel_bridge_dispatch_lease_renewal_seconds")
                .record(started.elapsed().as_secs_f64());
        }
    }

    /// Truncates drained queue generations, so the claim never walks what finished jobs
    /// leave behind and nothing waits for VACUUM (`Queue::rotate`).
    /// An instance that has claimed nothing since its last step skips it: an idle one sends
    /// no statement for this, and a generation drains only as jobs finish.
    pub async fn keep_queue_fresh(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        let (mut claims_seen, mut pending) = (self.claims_issued(), true);
        while !*stop.borrow() {
            let claims = self.claims_issued();
            if pending || claims != claims_seen {
                claims_seen = claims;
                let settings = self.worker.settings();
                let switch_after = settings.dispatch.queue_generation_jobs;
                let step = self.worker.queue().rotate(switch_after);
                let step = crate::db::within(settings.database.deadline(), step);
                pending = match step.await {
                    Ok(step @ (Rotation::Truncated | Rotation::Switched)) => {
                        let step = if step == Rotation::Truncated {
                            "truncated"
                        } else {
                            "switched"
                        };
                        tracing::debug!(step, "queue generation rotated");
                        metrics::counter!("channel_bridge_dispatch_queue_rotations_total", "step" => step)
                            .increment(1);
                        true
                    }
                    Ok(Rotation::Busy) => true,
                    Ok(Rotation::Draining | Rotation::Idle) => false,
                    Err(err) => {
                        tracing::debug!(%err, "queue rotation failed; trying again");
                        true
                    }
                };
            }
            tokio::select! {
                () = tokio::time::sleep(ROTATE_EVERY) => {}
                _ = stop.changed() => {}
            }
        }
    }

    /// Per tenant only for the `CB_METRICS_TOP_TENANTS` deepest queues, to bound the labels;
    /// a tenant that leaves the top is set to zero.
    pub async fn report_queue_stats(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        let top = self.worker.settings().metrics_top_tenants;
        let mut published: Vec<TenantId> = Vec::new();
        while !*stop.borrow() {
            let deadline = self.worker.settings().database.deadline();
            if let Ok(stats) = crate::db::within(deadline, self.worker.queue().stats()).await {
                metrics::gauge!("channel_bridge_dispatch_queue_depth").set(stats.depth as f64);
                metrics::gauge!("channel_bridge_dispatch_queue_oldest_age_seconds")
                    .set(stats.oldest_age_secs);
            }
            if top > 0 {
                let tenants = self.worker.queue().tenant_stats(top);
                if let Ok(tenants) = crate::db::within(deadline, tenants).await {
                    for gone in published
                        .iter()
                        .filter(|t| !tenants.iter().any(|s| s.tenant_id == **t))
                    {
                        metrics::gauge!("channel_bridge_dispatch_tenant_queue_depth", "tenant" => gone.to_string()).set(0.0);
                        metrics::gauge!("channel_bridge_dispatch_tenant_queue_oldest_age_seconds", "tenant" => gone.to_string())
                            .set(0.0);
                    }
                    for stats in &tenants {
                        let tenant = stats.tenant_id.to_string();
                        metrics::gauge!("channel_bridge_dispatch_tenant_queue_depth", "tenant" => tenant.clone())
                            .set(stats.depth as f64);
                        metrics::gauge!("channel_bridge_dispatch_tenant_queue_oldest_age_seconds", "tenant" => tenant)
                            .set(stats.oldest_age_secs);
                    }
                    published = tenants.into_iter().map(|s| s.tenant_id).collect();
                }
            }
            tokio::select! {
                () = tokio::time::sleep(STATS_EVERY) => {}
                _ = stop.changed() => {}
            }
        }
    }
}
