//! The connectors webhooks are checked against, cached in memory for a few seconds.
//!
//! Every webhook needs its connector (secret, platform, policy) before anything else, and
//! reading it costs a tenant transaction: as much database work as recording the turn. The
//! cache keeps each enabled connector for `CB_CONNECTOR_CACHE_SECS` (default 5, 0 turns it
//! off), and this instance's admin API drops an entry as soon as it changes or deletes the
//! connector. What another instance changed (a disabled connector, a rotated secret) is
//! seen here within the cache time at most; a secret rotation keeps the previous secret
//! valid far longer than that, so no platform delivery is rejected by the delay.
//!
//! Only found, enabled connectors are kept: an unknown or disabled connector is read again
//! each time (and answered 404), so a new connector is usable at once and a flood of made-up
//! ids cannot fill the cache.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use crate::db::{self, TenantTx};
use crate::domain::{Connector, ConnectorId, TenantId};

/// Entries kept at most; past it the cache starts over (a new entry is rare next to the
/// reads that hit).
const MAX_ENTRIES: usize = 10_000;

pub struct ConnectorCache {
    ttl: Duration,
    entries: RwLock<HashMap<(TenantId, ConnectorId), Entry>>,
}

struct Entry {
    connector: Arc<Connector>,
    loaded: Instant,
}

impl ConnectorCache {
    pub fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            entries: RwLock::new(HashMap::new()),
        }
    }

    /// The enabled connector, from the cache or read inside its tenant's transaction.
    /// `None` for an unknown or disabled connector (or one of another tenant).
    pub async fn get(
        &self,
        pool: &sqlx::PgPool,
        tenant: TenantId,
        id: ConnectorId,
    ) -> Result<Option<Arc<Connector>>, sqlx::Error> {
        if let Some(hit) = self.lookup(tenant, id) {
            metrics::counter!("connector_cache_total", "result" => "hit").increment(1);
            return Ok(Some(hit));
        }
        metrics::counter!("connector_cache_total", "result" => "miss").increment(1);
        let mut tx = TenantTx::begin(pool, tenant).await?;
        let connector = db::connectors::get(&mut tx, id).await?;
        tx.commit().await?;
        let Some(connector) = connector.filter(|c| c.enabled).map(Arc::new) else {
            return Ok(None);
        };
        self.store(tenant, id, connector.clone());
        Ok(Some(connector))
    }

    /// Forgets a connector this instance just changed or deleted.
    pub fn invalidate(&self, tenant: TenantId, id: ConnectorId) {
        self.write().remove(&(tenant, id));
    }

    fn lookup(&self, tenant: TenantId, id: ConnectorId) -> Option<Arc<Connector>> {
        let entries = self
            .entries
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        entries
            .get(&(tenant, id))
            .filter(|entry| entry.loaded.elapsed() < self.ttl)
            .map(|entry| entry.connector.clone())
    }

    fn store(&self, tenant: TenantId, id: ConnectorId, connector: Arc<Connector>) {
        if self.ttl.is_zero() {
            return;
        }
        let mut entries = self.write();
        if entries.len() >= MAX_ENTRIES {
            entries.clear();
        }
        let loaded = Instant::now();
        entries.insert((tenant, id), Entry { connector, loaded });
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<(TenantId, ConnectorId), Entry>> {
        // A panic while holding the lock cannot leave a half-written entry behind (insert and
        // remove are single calls), so a poisoned lock is still a consistent map.
        self.entries
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
