//! The one door to tenant tables.
//!
//! Every function that reads or writes `channel_connectors`, `channel_links`,
//! `channel_messages` or `channel_replies` takes a `&mut TenantTx`, and the only way to make
//! one is `TenantTx::begin`, which sets `app.tenant_id` for this transaction alone. RLS then
//! hides every other tenant's rows even if a query forgets its `tenant_id = $1` predicate.
//!
//! The setting is transaction-local (`set_config(…, true)`), so a pooled connection (or a
//! pgbouncer in transaction mode) never carries one tenant's setting into another's work.
//! Under Citus this constructor is the single place that would switch to
//! `SET LOCAL app.tenant_id = '<uuid>'`, which Citus propagates to workers.

use sqlx::{PgConnection, PgPool, Postgres, Transaction};

use crate::domain::TenantId;

pub struct TenantTx {
    tx: Transaction<'static, Postgres>,
    tenant: TenantId,
}

impl TenantTx {
    /// Begins a transaction scoped to `tenant`.
    pub async fn begin(pool: &PgPool, tenant: TenantId) -> Result<Self, sqlx::Error> {
        let mut tx = pool.begin().await?;
        sqlx::query("select set_config('app.tenant_id', $1, true)")
            .bind(tenant.to_string())
            .execute(&mut *tx)
            .await?;
        Ok(Self { tx, tenant })
    }

    pub fn tenant(&self) -> TenantId {
        self.tenant
    }

    /// The connection, for the table modules of `crate::db`.
    pub fn conn(&mut self) -> &mut PgConnection {
        &mut self.tx
    }

    pub async fn commit(self) -> Result<(), sqlx::Error> {
        self.tx.commit().await
    }

    pub async fn rollback(self) -> Result<(), sqlx::Error> {
        self.tx.rollback().await
    }
}
