//! Part transitions the platforms report after the fact: WhatsApp status callbacks and
//! Slack's `message_metadata_posted` (docs/delivery.md#delivery-guarantees).

use chrono::Utc;

use crate::db::replies::parse_part_key;
use crate::db::TenantTx;
use crate::domain::{ConnectorId, MessageId};
use crate::platforms::inbound::{DeliveryStatus, PostedPart};

/// The part is found by our part key when the callback echoes it, else by its `wamid`. A
/// `failed` for a part Meta had accepted (outside the 24-hour window, say) fails the part
/// and its turn, so admins see it and can resend it.
pub async fn apply_status(
    tx: &mut TenantTx,
    status: &DeliveryStatus,
) -> Result<Option<MessageId>, sqlx::Error> {
    let tenant = tx.tenant();
    let (message, part) = match status.callback_data.as_deref().and_then(parse_part_key) {
        Some((message, part)) => (Some(message), Some(part)),
        None => (None, None),
    };
    let posted = matches!(status.status.as_str(), "sent" | "delivered" | "read");
    // Citus refuses `now()` inside CASE or COALESCE of a modification.
    let now = chrono::Utc::now();
    let changed: Option<(MessageId, String, Option<String>)> = sqlx::query_as(
        "update channel_replies
            set delivery_status = $5,
                status = case when $6 and status in ('sending', 'pending') then 'sent'
                              when $5 = 'failed' and status = 'sent' then 'failed'
                              else status end,
                platform_message_id = coalesce(platform_message_id, $4),
                sent_at = case when $6 then coalesce(sent_at, $8) else sent_at end,
                last_error = case when $5 = 'failed' then $7 else last_error end,
                updated_at = $8
          where tenant_id = $1
            and (($2::uuid is not null and message_id = $2 and part_index = $3)
                 or ($2::uuid is null and platform_message_id = $4))
      returning message_id, status, last_error",
    )
    .bind(tenant)
    .bind(message)
    .bind(part)
    .bind(&status.platform_message_id)
    .bind(&status.status)
    .bind(posted)
    .bind(&status.error)
    .bind(now)
    .fetch_optional(tx.conn())
    .await?;
    let Some((message, part_status, last_error)) = changed else {
        return Ok(None);
    };
    // Its own statement, not a CTE of the one above: Citus cannot nest a statement on one
    // distributed table inside a statement on another's shard.
    if status.status == "failed" && part_status == "failed" {
        sqlx::query(
            "update channel_messages
                set status = 'delivery_failed', last_error = $3, updated_at = $4
              where tenant_id = $1 and id = $2 and status = 'executed'",
        )
        .bind(tenant)
        .bind(message)
        .bind(last_error.unwrap_or_else(|| "not delivered (WhatsApp status failed)".to_owned()))
        .bind(now)
        .execute(tx.conn())
        .await?;
    }
    Ok(Some(message))
}

/// Only an unsettled part of this connector's turn in the chat posted to changes: a key of
/// another tenant, connector or chat, or a repeated event, changes nothing.
pub async fn confirm_posted(
    tx: &mut TenantTx,
    connector: ConnectorId,
    posted: &PostedPart,
) -> Result<Option<MessageId>, sqlx::Error> {
    let tenant = tx.tenant();
    sqlx::query_scalar(
        "update channel_replies r
            set status = 'sent', platform_message_id = $4, sent_at = $7, last_error = null,
                updated_at = $7
           from channel_messages m
          where r.tenant_id = $1 and r.message_id = $2 and r.part_index = $3
            and r.status in ('sending', 'pending')
            and m.tenant_id = $1 and m.id = $2 and m.connector_id = $5 and m.chat_id = $6
      returning r.message_id",
    )
    .bind(tenant)
    .bind(posted.message)
    .bind(posted.part_index)
    .bind(&posted.platform_message_id)
    .bind(connector)
    .bind(&posted.chat_id)
    // Citus: no `now()` where a modification returns.
    .bind(Utc::now())
    .fetch_optional(tx.conn())
    .await
}
