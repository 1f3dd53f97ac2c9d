//! The in-flight table: the jobs this instance runs, in all and per tenant, the leases they
//! hold, and each tenant's cap. Each claim asks it for the room that is free.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use crate::db::queue::{ClaimRequest, Job, LeaseToken, Queue};
use crate::domain::{MessageId, TenantId};
use crate::settings::ServeSettings;

#[derive(Default)]
struct Table {
    total: usize,
    per_tenant: HashMap<TenantId, usize>,
    leases: HashMap<MessageId, LeaseToken>,
    caps: HashMap<TenantId, usize>,
    caps_read: Option<Instant>,
}

pub(super) struct InFlight {
    capacity: usize,
    /// A tenant's cap where the tenant sets none (`CB_TENANT_SHARE_PERCENT` of the capacity).
    default_cap: usize,
    batch_max: usize,
    table: Mutex<Table>,
    freed: Notify,
}

/// A job's place in the table, given back when dropped, also if the job's task panics: a
/// bug in one job must not shrink the capacity for good.
pub(super) struct Slot {
    table: Arc<InFlight>,
    tenant: TenantId,
    message: MessageId,
    lease: LeaseToken,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.table.give_back(self.tenant, self.message, self.lease);
    }
}

impl InFlight {
    pub(super) fn new(settings: &ServeSettings) -> Self {
        let capacity = settings.max_in_flight.max(1);
        let default_cap = (capacity * usize::from(settings.tenant_share_percent))
            .div_ceil(100)
            .max(1);
        Self {
            capacity,
            default_cap,
            batch_max: settings.claim_batch_max.max(1),
            table: Mutex::new(Table::default()),
            freed: Notify::new(),
        }
    }

    pub(super) fn total(&self) -> usize {
        self.lock().total
    }

    pub(super) fn is_full(&self) -> bool {
        self.total() >= self.capacity
    }

    /// Ends when a job gives its place back (or one did since the last wait).
    pub(super) async fn freed(&self) {
        self.freed.notified().await;
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        // Only counters: a panic cannot leave them torn in a way that matters more than
        // losing the dispatcher.
        self.table.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Only when claiming, so an idle instance does not read them.
    pub(super) async fn refresh_caps(&self, queue: &Queue, settings: &ServeSettings) {
        let ttl = Duration::from_secs(settings.config_cache_secs.max(1));
        if self.lock().caps_read.is_some_and(|read| read.elapsed() < ttl) {
            return;
        }
        let deadline = settings.database.deadline();
        match crate::db::within(deadline, queue.tenant_caps()).await {
            Ok(caps) => {
                let mut table = self.lock();
                table.caps = caps
                    .into_iter()
                    .map(|(tenant, cap)| (tenant, usize::try_from(cap).unwrap_or(1)))
                    .collect();
                table.caps_read = Some(Instant::now());
            }
            Err(err) => tracing::warn!(%err, "cannot read tenant caps; keeping the last ones"),
        }
    }

    /// `None` when no room is free.
    pub(super) fn claim_request(&self, lease: Duration) -> Option<ClaimRequest> {
        let table = self.lock();
        let free = self.capacity.saturating_sub(table.total);
        if free == 0 {
            return None;
        }
        let mut tenants: Vec<TenantId> = table.per_tenant.keys().copied().collect();
        tenants.extend(table.caps.keys().filter(|t| !table.per_tenant.contains_key(t)));
        let room = tenants
            .into_iter()
            .map(|tenant| {
                let busy = table.per_tenant.get(&tenant).copied().unwrap_or(0);
                (tenant, self.cap_of(&table, tenant).saturating_sub(busy).min(free))
            })
            .collect();
        Some(ClaimRequest {
            wanted: free.min(self.batch_max),
            room,
            default_room: self.default_cap.min(free),
            lease,
        })
    }

    fn cap_of(&self, table: &Table, tenant: TenantId) -> usize {
        table
            .caps
            .get(&tenant)
            .map_or(self.default_cap, |cap| (*cap).min(self.capacity))
    }

    pub(super) fn take(self: &Arc<Self>, job: &Job) -> Slot {
        let (tenant, message, lease) = (job.tenant_id, job.message_id, job.lease);
        {
            let mut table = self.lock();
            table.total += 1;
            *table.per_tenant.entry(tenant).or_default() += 1;
            table.leases.insert(message, lease);
        }
        Slot {
            table: self.clone(),
            tenant,
            message,
            lease,
        }
    }

    fn give_back(&self, tenant: TenantId, message: MessageId, lease: LeaseToken) {
        {
            let mut table = self.lock();
            table.total = table.total.saturating_sub(1);
            if let Some(busy) = table.per_tenant.get_mut(&tenant) {
                *busy -= 1;
                if *busy == 0 {
                    table.per_tenant.remove(&tenant);
                }
            }
            // After an expiry this instance may hold the same job again, under a new lease.
            if table.leases.get(&message) == Some(&lease) {
                table.leases.remove(&message);
            }
        }
        self.freed.notify_one();
    }

    pub(super) fn leases(&self) -> Vec<(MessageId, LeaseToken)> {
        self.lock().leases.iter().map(|(m, t)| (*m, *t)).collect()
    }
}
