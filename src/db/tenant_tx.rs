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
//!
//! `BEGIN` and the setting travel in one simple-query round trip. The tenant id is a typed
//! UUID rendered by `uuid` itself (hex digits and hyphens), so formatting it into the SQL
//! text cannot inject anything.

use sqlx::{PgConnection, PgPool, Postgres, Transaction};

use crate::domain::TenantId;

pub struct TenantTx {
    tx: Transaction<'static, Postgres>,
    tenant: TenantId,
}

impl TenantTx {
    /// Begins a transaction scoped to `tenant`.
    pub async fn begin(pool: &PgPool, tenant: TenantId) -> Result<Self, sqlx::Error> {
        let tx = pool.begin_with(begin_statement(tenant)).await?;
        Ok(Self { tx, tenant })
    }

    /// Wraps an open transaction whose last statement scoped it itself: a statement that
    /// finds the tenant (the queue claim) selects `SCOPE_FROM_STATEMENT` with the tenant id
    /// column as `$tenant`, and hands back what it returned as `scope`. The claim and the
    /// claimed turn's first tenant work then share one commit without an extra round trip.
    /// The returned setting is checked against `tenant`, so a statement that set anything
    /// else fails here. (Under Citus, which needs `SET LOCAL`, such a statement would run
    /// `set_tenant` after it instead; this file is the place that would change.)
    pub fn scoped_by_statement(
        tx: Transaction<'static, Postgres>,
        tenant: TenantId,
        scope: &str,
    ) -> Result<Self, sqlx::Error> {
        if scope.parse::<TenantId>().ok() != Some(tenant) {
            return Err(sqlx::Error::Protocol(format!(
                "transaction scoped to {scope:?}, expected tenant {tenant}"
            )));
        }
        Ok(Self { tx, tenant })
    }

    /// Scopes the rest of this transaction to another tenant: the ingress batch writer
    /// commits several webhooks, possibly of several tenants, in one transaction, and runs
    /// each webhook's statements under its own tenant's setting. RLS checks every statement
    /// against the setting in force when it runs, so rows written before the switch stay
    /// out of reach of the statements after it.
    pub async fn switch_tenant(&mut self, tenant: TenantId) -> Result<(), sqlx::Error> {
        if tenant != self.tenant {
            set_tenant(&mut self.tx, tenant).await?;
            self.tenant = tenant;
        }
        Ok(())
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

/// The select-list expression that scopes a statement's transaction to the tenant in the
/// column named by `$tenant` (see `TenantTx::scoped_by_statement`).
pub const SCOPE_FROM_STATEMENT: &str = "set_config('app.tenant_id', $tenant::text, true)";

/// The tenant setting, transaction-local. With `begin_statement` and
/// `SCOPE_FROM_STATEMENT`, the only code that sets it (under Citus: the place to switch to
/// `SET LOCAL`).
async fn set_tenant(tx: &mut Transaction<'static, Postgres>, tenant: TenantId) -> Result<(), sqlx::Error> {
    sqlx::query("select set_config('app.tenant_id', $1, true)")
        .bind(tenant.to_string())
        .execute(&mut **tx)
        .await?;
    Ok(())
}

fn begin_statement(tenant: TenantId) -> String {
    let tenant: uuid::Uuid = tenant.0;
    format!("begin; select set_config('app.tenant_id', '{tenant}', true)")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn begin_statement_sets_the_tenant_locally() {
        let tenant = TenantId(uuid::Uuid::from_u128(0x0123_4567_89ab_cdef_0123_4567_89ab_cdef));
        assert_eq!(
            begin_statement(tenant),
            "begin; select set_config('app.tenant_id', '01234567-89ab-cdef-0123-456789abcdef', true)"
        );
    }
}
