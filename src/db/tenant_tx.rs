//! The one door to tenant tables.
//!
//! Every function that reads or writes `channel_connectors`, `channel_links`,
//! `channel_messages` or `channel_replies` takes a `&mut TenantTx`, and the only way to make
//! one is `TenantTx::begin`, which sets `app.tenant_id` for this transaction alone. RLS then
//! hides every other tenant's rows even if a query forgets its `tenant_id = $1` predicate.
//!
//! The setting is transaction-local (`SET LOCAL app.tenant_id`, run by the function
//! `channel_bridge_set_tenant`, migration 27), so a pooled connection (or a pgbouncer in
//! transaction mode) never carries one tenant's setting into another's work, and Citus
//! passes it on to its workers whatever the cluster's defaults.
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

    /// Scopes a transaction that began without a tenant (the queue claim, which looks at
    /// every tenant's jobs) to `tenant`, so the claimed turns' first tenant work commits
    /// with the claim.
    pub async fn after_claim(
        mut tx: Transaction<'static, Postgres>,
        tenant: TenantId,
    ) -> Result<Self, sqlx::Error> {
        set_tenant(&mut tx, tenant).await?;
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

/// The tenant setting, transaction-local. With `begin_statement`, the only code that sets
/// it.
async fn set_tenant(tx: &mut Transaction<'static, Postgres>, tenant: TenantId) -> Result<(), sqlx::Error> {
    sqlx::query("select channel_bridge_set_tenant($1)")
        .bind(tenant)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

fn begin_statement(tenant: TenantId) -> String {
    let tenant: uuid::Uuid = tenant.0;
    format!("begin; select channel_bridge_set_tenant('{tenant}')")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn begin_statement_sets_the_tenant_locally() {
        let tenant = TenantId(uuid::Uuid::from_u128(0x0123_4567_89ab_cdef_0123_4567_89ab_cdef));
        assert_eq!(
            begin_statement(tenant),
            "begin; select channel_bridge_set_tenant('01234567-89ab-cdef-0123-456789abcdef')"
        );
    }
}
