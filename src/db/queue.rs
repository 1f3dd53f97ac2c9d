//! `dispatch_queue`: the durable job queue (infrastructure, no RLS).
//!
//! Enqueueing happens inside the ingress tenant transaction, so a message row never exists
//! without its job and a rolled-back webhook leaves neither.

use super::TenantTx;
use crate::domain::MessageId;

/// Queues the dispatch of a freshly recorded message, in the same transaction.
pub async fn enqueue(
    tx: &mut TenantTx,
    message: MessageId,
    conversation_key: &str,
) -> Result<(), sqlx::Error> {
    let tenant = tx.tenant();
    sqlx::query("insert into dispatch_queue (message_id, tenant_id, conversation_key) values ($1, $2, $3)")
        .bind(message)
        .bind(tenant)
        .bind(conversation_key)
        .execute(tx.conn())
        .await?;
    Ok(())
}
