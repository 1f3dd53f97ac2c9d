//! Erasing one person in one tenant transaction with its audit record (counts, never
//! content). A turn in flight is erased too: its job goes, so the worker finds its lease
//! gone; a request already on the wire cannot be called back.

use serde_json::json;
use sqlx::PgPool;

use crate::db::audit::{self, Actor, AuditAction, AuditEntry};
use crate::db::lifecycle::{self, Erased, Person};
use crate::db::TenantTx;
use crate::domain::TenantId;

/// All zero when nothing was there: erasing twice is not an error.
pub async fn erase(
    pool: &PgPool,
    tenant: TenantId,
    person: &Person,
    actor: Actor,
) -> Result<Erased, sqlx::Error> {
    let mut tx = TenantTx::begin(pool, tenant).await?;
    let erased = lifecycle::erase(&mut tx, person).await?;
    let entry = AuditEntry::new(actor, AuditAction::PersonErase, person.target(), json!(erased));
    audit::record(&mut tx, &entry).await?;
    tx.commit().await?;
    tracing::info!(
        tenant_id = %tenant,
        turns = erased.turns,
        reply_parts = erased.reply_parts,
        links = erased.links,
        "erased a person's data"
    );
    Ok(erased)
}
