//! Connectors and tenants reused for `CB_CONFIG_CACHE_SECS` (docs/configuration.md). The
//! worker reads connectors fresh, for the outbound token as it is now. Only rows that exist
//! are kept: a new connector is usable at once, and made-up ids cannot fill the cache.

use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sqlx::PgConnection;

use crate::db::tenants::TenantRow;
use crate::db::{self, TenantTx};
use crate::domain::{Connector, ConnectorId, TenantId};
use crate::secrets::Keyring;

const MAX_ENTRIES: u64 = 10_000;

/// Never stores a value read before a removal of any key: the removal stands for a change
/// the value may predate.
pub struct TtlCache<K, V> {
    /// `None` when the time to live is zero.
    entries: Option<moka::sync::Cache<K, V>>,
    /// `insert` compares and stores under this lock, so no removal slips in between.
    generation: Mutex<u64>,
}

impl<K, V> TtlCache<K, V>
where
    K: Eq + Hash + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    pub fn new(ttl: Duration) -> Self {
        let entries = (!ttl.is_zero()).then(|| {
            moka::sync::Cache::builder()
                .max_capacity(MAX_ENTRIES)
                .time_to_live(ttl)
                .build()
        });
        Self {
            entries,
            generation: Mutex::new(0),
        }
    }

    /// Take before reading the value from its source; pass to `insert`.
    pub fn generation(&self) -> u64 {
        *self.lock()
    }

    pub fn get(&self, key: &K) -> Option<V> {
        self.entries.as_ref()?.get(key)
    }

    /// Unless an entry was removed since `generation` was taken.
    pub fn insert(&self, key: K, value: V, generation: u64) {
        let Some(entries) = &self.entries else {
            return;
        };
        let current = self.lock();
        if *current == generation {
            entries.insert(key, value);
        }
    }

    pub fn remove(&self, key: &K) {
        let mut current = self.lock();
        *current += 1;
        if let Some(entries) = &self.entries {
            entries.invalidate(key);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, u64> {
        // A counter changed in one step: a poisoned lock still guards a consistent value.
        self.generation
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Shared by an instance's handlers, worker and admin API (which forgets what it changes).
pub struct ConfigCache {
    connectors: TtlCache<(TenantId, ConnectorId), Arc<Connector>>,
    tenants: TtlCache<TenantId, Arc<TenantRow>>,
    keys: Keyring,
}

impl ConfigCache {
    pub fn new(ttl: Duration, keys: Keyring) -> Self {
        Self {
            connectors: TtlCache::new(ttl),
            tenants: TtlCache::new(ttl),
            keys,
        }
    }

    /// Enabled or not. `None` for an unknown connector or one of another tenant.
    pub async fn connector_of(
        &self,
        pool: &sqlx::PgPool,
        tenant: TenantId,
        id: ConnectorId,
    ) -> Result<Option<Arc<Connector>>, sqlx::Error> {
        self.connector_of_unless(pool, tenant, id, || false).await
    }

    /// `connector_of`, but a miss is not read while `unreachable()` says the database is out
    /// of reach (`db::outage::not_tried`).
    pub async fn connector_of_unless(
        &self,
        pool: &sqlx::PgPool,
        tenant: TenantId,
        id: ConnectorId,
        unreachable: impl FnOnce() -> bool,
    ) -> Result<Option<Arc<Connector>>, sqlx::Error> {
        let key = (tenant, id);
        if let Some(hit) = self.connectors.get(&key) {
            metrics::counter!("channel_bridge_connector_cache_lookups_total", "result" => "hit").increment(1);
            return Ok(Some(hit));
        }
        if unreachable() {
            return Err(db::outage::not_tried());
        }
        metrics::counter!("channel_bridge_connector_cache_lookups_total", "result" => "miss").increment(1);
        let generation = self.connectors.generation();
        let mut tx = TenantTx::begin(pool, tenant).await?;
        let connector = db::connectors::get(&mut tx, &self.keys, id).await?.map(Arc::new);
        tx.commit().await?;
        if let Some(connector) = &connector {
            self.connectors.insert(key, connector.clone(), generation);
        }
        Ok(connector)
    }

    pub async fn tenant(
        &self,
        conn: &mut PgConnection,
        id: TenantId,
    ) -> Result<Option<Arc<TenantRow>>, sqlx::Error> {
        if let Some(hit) = self.tenants.get(&id) {
            return Ok(Some(hit));
        }
        let generation = self.tenants.generation();
        let tenant = db::tenants::get(conn, &self.keys, id).await?.map(Arc::new);
        if let Some(tenant) = &tenant {
            self.tenants.insert(id, tenant.clone(), generation);
        }
        Ok(tenant)
    }

    pub fn forget_tenant(&self, tenant: TenantId) {
        self.tenants.remove(&tenant);
    }

    pub fn forget_connector(&self, tenant: TenantId, id: ConnectorId) {
        self.connectors.remove(&(tenant, id));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Expiry is moka's (tested there); ours: a zero time to live, and the generation rule.
    #[test]
    fn a_zero_ttl_keeps_nothing() {
        let off = TtlCache::new(Duration::ZERO);
        off.insert("a", 1, off.generation());
        assert_eq!(off.get(&"a"), None);
        let on = TtlCache::new(Duration::from_secs(60));
        on.insert("a", 1, on.generation());
        assert_eq!(on.get(&"a"), Some(1));
    }

    #[test]
    fn a_value_read_before_a_removal_is_not_stored_after_it() {
        let cache = TtlCache::new(Duration::from_secs(60));
        let before_read = cache.generation();
        cache.remove(&"a"); // the admin changed "a" while the old row was being read
        cache.insert("a", "old", before_read);
        assert_eq!(cache.get(&"a"), None);
        cache.insert("a", "new", cache.generation());
        assert_eq!(cache.get(&"a"), Some("new"));
    }

    #[test]
    fn removed_entries_are_gone_and_others_stay() {
        let cache = TtlCache::new(Duration::from_secs(60));
        for i in 0..100 {
            cache.insert(i, i, cache.generation());
        }
        cache.remove(&7);
        assert_eq!(cache.get(&7), None);
        assert_eq!(cache.get(&8), Some(8));
    }
}
