//! Connectors read for webhook verification and tenants read for dispatch, reused for a
//! few seconds.
//!
//! Every webhook needs its connector (secret, platform, policy) before anything else; read
//! each time, it is a tenant transaction of its own, as much database work as recording
//! the turn. Every dispatch needs its tenant (agent URL, dispatch secret): a round trip in
//! the claim's transaction, about a tenth of the worker's database work per turn. Both are
//! kept for `CB_CONFIG_CACHE_SECS` (default 5; 0 turns the cache off).
//!
//! Freshness: this instance's admin API forgets an entry as soon as it changes it (update,
//! disable, delete, secret rotation; tenant agent URL, dispatch-secret rotation), so the
//! next webhook or dispatch here sees the change; a read that
//! was in flight during the change does not put the old row back (a generation counter).
//! A change made through another instance or the CLI is seen here within the cache time at
//! most. Rotations keep the previous secret valid for 24 h (Slack signing secret, dispatch
//! secret), so no platform delivery is rejected and no agent sees an unknown signature
//! meanwhile; a new agent URL set elsewhere gets dispatches within the cache time.
//!
//! The worker reads the connector fresh, not from here: a reply must go out with the
//! outbound token as it is now.
//!
//! Only rows that exist are kept: an unknown connector is read again each time, so a new
//! one is usable at once and a flood of made-up ids cannot fill the cache.

use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sqlx::PgConnection;

use crate::db::tenants::TenantRow;
use crate::db::{self, TenantTx};
use crate::domain::{Connector, ConnectorId, TenantId};
use crate::secrets::Keyring;

/// Entries kept at most per map; past it the least useful are evicted (moka's policy).
const MAX_ENTRIES: u64 = 10_000;

/// A map whose entries expire `ttl` after they were stored (moka), and which never stores a
/// value read before a removal of any key: the removal stands for a change the value may
/// predate.
pub struct TtlCache<K, V> {
    /// `None` when the time to live is zero: nothing is kept.
    entries: Option<moka::sync::Cache<K, V>>,
    /// Bumped by every `remove`, under this lock; `insert` compares and stores under it too,
    /// so no removal slips between the check and the store.
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

    /// Stores a value read since `generation` was taken, unless an entry was removed since
    /// (the value may then predate the change that removal stands for).
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
        // The guarded value is a counter each holder changes in one step: a lock poisoned by
        // a panic elsewhere still guards a consistent value.
        self.generation
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The cache one instance shares between its webhook handlers, its worker and its admin API
/// (which forgets what it changes).
pub struct ConfigCache {
    connectors: TtlCache<(TenantId, ConnectorId), Arc<Connector>>,
    tenants: TtlCache<TenantId, Arc<TenantRow>>,
    /// Opens the secrets of what is read.
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

    /// The connector, enabled or not, from the cache or read inside its tenant's
    /// transaction. `None` for an unknown connector or one of another tenant.
    pub async fn connector_of(
        &self,
        pool: &sqlx::PgPool,
        tenant: TenantId,
        id: ConnectorId,
    ) -> Result<Option<Arc<Connector>>, sqlx::Error> {
        let key = (tenant, id);
        if let Some(hit) = self.connectors.get(&key) {
            metrics::counter!("channel_bridge_connector_cache_lookups_total", "result" => "hit").increment(1);
            return Ok(Some(hit));
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

    /// The tenant row, from the cache or read on `conn`. `None` for an unknown tenant.
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

    /// Forgets a tenant this instance just changed.
    pub fn forget_tenant(&self, tenant: TenantId) {
        self.tenants.remove(&tenant);
    }

    /// Forgets a connector this instance just changed or deleted.
    pub fn forget_connector(&self, tenant: TenantId, id: ConnectorId) {
        self.connectors.remove(&(tenant, id));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Expiry after the time to live is moka's (tested there); what is ours: a zero time to
    // live keeps nothing, and the generation rule below.
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
