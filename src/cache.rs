//! Connector and tenant settings read from the database, reused for a few seconds.
//!
//! Every webhook needs its connector (secret, platform, policy) before anything else, and
//! every dispatch needs its tenant (agent URL, dispatch secret) and its connector (where
//! the answer goes). Each read is a round trip in a hot path whose answer almost never
//! changes, so both are kept for `CB_CACHE_SECS` (default 5; 0 turns the cache off).
//!
//! Freshness: this instance's admin API forgets an entry as soon as it changes it (connector
//! update, disable, delete, secret rotation; tenant agent URL, dispatch-secret rotation), so
//! the next webhook or dispatch here sees the change. A change made through another
//! instance is seen here within the cache time at most. Rotations keep the previous secret
//! valid far longer than that (Slack signing secret, dispatch secret: 24 h), so no platform
//! delivery is rejected and no agent sees an unknown signature because of the delay.
//!
//! Only rows that exist are kept: an unknown connector or tenant is read again each time,
//! so a new one is usable at once and a flood of made-up ids cannot fill the cache.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use sqlx::PgConnection;

use crate::db::tenants::TenantRow;
use crate::db::{self, TenantTx};
use crate::domain::{Connector, ConnectorId, TenantId};

/// Entries kept at most per map; past it the map starts over (a new entry is rare next to
/// the reads that hit).
const MAX_ENTRIES: usize = 10_000;

/// A map whose entries expire `ttl` after they were stored.
pub struct TtlCache<K, V> {
    ttl: Duration,
    entries: RwLock<HashMap<K, (V, Instant)>>,
}

impl<K: Eq + Hash, V: Clone> TtlCache<K, V> {
    pub fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            entries: RwLock::new(HashMap::new()),
        }
    }

    pub fn get(&self, key: &K) -> Option<V> {
        self.get_at(key, Instant::now())
    }

    fn get_at(&self, key: &K, now: Instant) -> Option<V> {
        // Insert and remove are single calls, so a lock poisoned by a panic elsewhere still
        // guards a consistent map.
        let entries = self
            .entries
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        entries
            .get(key)
            .filter(|(_, stored)| now.saturating_duration_since(*stored) < self.ttl)
            .map(|(value, _)| value.clone())
    }

    pub fn insert(&self, key: K, value: V) {
        if self.ttl.is_zero() {
            return;
        }
        let mut entries = self
            .entries
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if entries.len() >= MAX_ENTRIES {
            entries.clear();
        }
        entries.insert(key, (value, Instant::now()));
    }

    pub fn remove(&self, key: &K) {
        let mut entries = self
            .entries
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        entries.remove(key);
    }
}

/// The settings cache one instance shares between its webhook handlers, its worker and its
/// admin API (which invalidates).
pub struct ConfigCache {
    connectors: TtlCache<(TenantId, ConnectorId), Arc<Connector>>,
    tenants: TtlCache<TenantId, Arc<TenantRow>>,
}

impl ConfigCache {
    pub fn new(ttl: Duration) -> Self {
        Self {
            connectors: TtlCache::new(ttl),
            tenants: TtlCache::new(ttl),
        }
    }

    /// The connector, enabled or not, from the cache or read in `tx` (scoped to its tenant).
    /// `None` for an unknown connector or one of another tenant.
    pub async fn connector(
        &self,
        tx: &mut TenantTx,
        id: ConnectorId,
    ) -> Result<Option<Arc<Connector>>, sqlx::Error> {
        let key = (tx.tenant(), id);
        if let Some(hit) = self.connectors.get(&key) {
            metrics::counter!("config_cache_total", "kind" => "connector", "result" => "hit").increment(1);
            return Ok(Some(hit));
        }
        metrics::counter!("config_cache_total", "kind" => "connector", "result" => "miss").increment(1);
        let Some(connector) = db::connectors::get(tx, id).await?.map(Arc::new) else {
            return Ok(None);
        };
        self.connectors.insert(key, connector.clone());
        Ok(Some(connector))
    }

    /// Like `connector`, opening a tenant transaction only when the cache misses.
    pub async fn connector_of(
        &self,
        pool: &sqlx::PgPool,
        tenant: TenantId,
        id: ConnectorId,
    ) -> Result<Option<Arc<Connector>>, sqlx::Error> {
        if let Some(hit) = self.connectors.get(&(tenant, id)) {
            metrics::counter!("config_cache_total", "kind" => "connector", "result" => "hit").increment(1);
            return Ok(Some(hit));
        }
        let mut tx = TenantTx::begin(pool, tenant).await?;
        let connector = self.connector(&mut tx, id).await?;
        tx.commit().await?;
        Ok(connector)
    }

    /// The tenant row, from the cache or read on `conn`. `None` for an unknown tenant.
    pub async fn tenant(
        &self,
        conn: &mut PgConnection,
        id: TenantId,
    ) -> Result<Option<Arc<TenantRow>>, sqlx::Error> {
        if let Some(hit) = self.tenants.get(&id) {
            metrics::counter!("config_cache_total", "kind" => "tenant", "result" => "hit").increment(1);
            return Ok(Some(hit));
        }
        metrics::counter!("config_cache_total", "kind" => "tenant", "result" => "miss").increment(1);
        let Some(tenant) = db::tenants::get(conn, id).await?.map(Arc::new) else {
            return Ok(None);
        };
        self.tenants.insert(id, tenant.clone());
        Ok(Some(tenant))
    }

    /// Forgets a connector this instance just changed or deleted.
    pub fn forget_connector(&self, tenant: TenantId, id: ConnectorId) {
        self.connectors.remove(&(tenant, id));
    }

    /// Forgets a tenant this instance just changed.
    pub fn forget_tenant(&self, tenant: TenantId) {
        self.tenants.remove(&tenant);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_expire_after_the_ttl_and_a_zero_ttl_keeps_nothing() {
        let ttl = Duration::from_secs(5);
        let cache = TtlCache::new(ttl);
        cache.insert("a", 1);
        assert_eq!(cache.get(&"a"), Some(1));
        let later = Instant::now() + ttl;
        assert_eq!(cache.get_at(&"a", later), None);

        let off = TtlCache::new(Duration::ZERO);
        off.insert("a", 1);
        assert_eq!(off.get(&"a"), None);
    }

    #[test]
    fn removed_entries_are_gone_and_a_full_map_starts_over() {
        let cache = TtlCache::new(Duration::from_secs(60));
        for i in 0..MAX_ENTRIES {
            cache.insert(i, i);
        }
        cache.remove(&7);
        assert_eq!(cache.get(&7), None);
        assert_eq!(cache.get(&8), Some(8));
        cache.insert(MAX_ENTRIES, 0);
        cache.insert(MAX_ENTRIES + 1, 0);
        assert_eq!(
            cache.get(&8),
            None,
            "the map was cleared when it reached its bound"
        );
        assert_eq!(cache.get(&(MAX_ENTRIES + 1)), Some(0));
    }
}
