//! The one door to tenant tables: `TenantTx::begin` sets `app.tenant_id` for this
//! transaction alone (`SET LOCAL`, so it never leaks into a pooled connection's next work),
//! and RLS hides other tenants' rows even if a query forgets its `tenant_id = $1`. The id is
//! a typed UUID, so formatting it into the `BEGIN` round trip's SQL cannot inject anything.

use sqlx::{PgConnection, PgPool, Postgres, Transaction};

use crate::domain::TenantId;

pub struct TenantTx {
    tx: Transaction<'static, Postgres>,
    tenant: TenantId,
}

impl TenantTx {
    pub async fn begin(pool: &PgPool, tenant: TenantId) -> Result<Self, sqlx::Error> {
        let tx = pool.begin_with(begin_statement(tenant)).await?;
        Ok(Self { tx, tenant })
    }

    /// For the turn writer, whose statements are the same every batch: they are planned once
    /// per connection on plain PostgreSQL (`db::BEGIN_BATCH`).
    pub async fn begin_batch(pool: &PgPool, tenant: TenantId) -> Result<Self, sqlx::Error> {
        let begin = format!("{}; {}", super::BEGIN_BATCH, set_tenant_statement(tenant));
        let tx = pool.begin_with(begin).await?;
        Ok(Self { tx, tenant })
    }

    /// Scopes the queue claim's transaction, so the turns' first tenant work commits with it.
    pub async fn after_claim(
        mut tx: Transaction<'static, Postgres>,
        tenant: TenantId,
    ) -> Result<Self, sqlx::Error> {
        set_tenant(&mut tx, tenant).await?;
        Ok(Self { tx, tenant })
    }

    /// For the ingress batch writer. RLS checks each statement against the setting in force
    /// when it runs, so rows written before the switch are out of reach after it.
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

/// With `begin_statement`, the only code that sets the tenant.
async fn set_tenant(tx: &mut Transaction<'static, Postgres>, tenant: TenantId) -> Result<(), sqlx::Error> {
    sqlx::query("select channel_bridge_set_tenant($1)")
        .bind(tenant)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

fn begin_statement(tenant: TenantId) -> String {
    format!("begin; {}", set_tenant_statement(tenant))
}

fn set_tenant_statement(tenant: TenantId) -> String {
    let tenant: uuid::Uuid = tenant.0;
    format!("select channel_bridge_set_tenant('{tenant}')")
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
