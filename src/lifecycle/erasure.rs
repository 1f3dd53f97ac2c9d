//! Erasing one person: every row of theirs in every tenant table (turns on every platform,
//! the turns' reply parts and queue jobs, links, unlinked-notice marks) and nothing of
//! anyone else, in one tenant transaction that also writes the audit record (the counts,
//! never content). See `db::lifecycle::Person` for whose rows a user id and an account
//! name.
//!
//! A turn in flight is erased too: its job goes with it, so a worker holding the job finds
//! its lease gone and writes nothing more. A request to the agent or the platform already
//! on the wire cannot be called back: at most that one answer is still posted.

use serde_json::json;
use sqlx::PgPool;

use crate::db::audit::{self, Actor, AuditAction, AuditEntry};
use crate::db::lifecycle::{self, Erased, Person};
use crate::db::TenantTx;
use crate::domain::TenantId;

/// Erases `person` from `tenant`'s data; what it deleted (all zero when nothing was
/// there: erasing twice is not an error).
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
