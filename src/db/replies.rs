//! Delivery state of reply parts (`channel_replies`, tenant table, RLS).
//!
//! pending → sending → sent | failed. `sending` is written and committed before the
//! platform request, so after a crash an interrupted send is known and reconciled instead
//! of being posted twice.

use super::TenantTx;
use crate::channels::DeliveryStatus;
use crate::domain::MessageId;

async fn update(
    tx: &mut TenantTx,
    message: MessageId,
    part: i32,
    set: &str,
    text: Option<&str>,
) -> Result<(), sqlx::Error> {
    let tenant = tx.tenant();
    sqlx::query(&format!(
        "update channel_replies set {set}, updated_at = now()
          where tenant_id = $1 and message_id = $2 and part_index = $3"
    ))
    .bind(tenant)
    .bind(message)
    .bind(part)
    .bind(text)
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// The request is about to leave: from here on its outcome may be unknown.
pub async fn mark_sending(tx: &mut TenantTx, message: MessageId, part: i32) -> Result<(), sqlx::Error> {
    update(tx, message, part, "status = 'sending', attempts = attempts + 1, sending_since = now(), last_error = coalesce($4, last_error)", None).await
}

/// Posted, with the platform's id for it.
pub async fn mark_sent(
    tx: &mut TenantTx,
    message: MessageId,
    part: i32,
    platform_id: &str,
) -> Result<(), sqlx::Error> {
    update(
        tx,
        message,
        part,
        "status = 'sent', platform_message_id = $4, sent_at = now(), last_error = null",
        Some(platform_id),
    )
    .await
}

/// Certainly not posted (rate limit, no connection): send again later.
pub async fn mark_pending(
    tx: &mut TenantTx,
    message: MessageId,
    part: i32,
    error: &str,
) -> Result<(), sqlx::Error> {
    update(
        tx,
        message,
        part,
        "status = 'pending', sending_since = null, last_error = $4",
        Some(error),
    )
    .await
}

/// Outcome unknown: stays `sending`, to be reconciled before any resend.
pub async fn note_error(
    tx: &mut TenantTx,
    message: MessageId,
    part: i32,
    error: &str,
) -> Result<(), sqlx::Error> {
    update(tx, message, part, "last_error = $4", Some(error)).await
}

pub async fn mark_failed(
    tx: &mut TenantTx,
    message: MessageId,
    part: i32,
    error: &str,
) -> Result<(), sqlx::Error> {
    update(
        tx,
        message,
        part,
        "status = 'failed', last_error = $4",
        Some(error),
    )
    .await
}

/// After a part failed for good, the parts behind it are not sent either (a reply with a
/// hole in the middle reads worse than a cut one).
pub async fn fail_remaining(tx: &mut TenantTx, message: MessageId, after: i32) -> Result<(), sqlx::Error> {
    let tenant = tx.tenant();
    sqlx::query(
        "update channel_replies set status = 'failed', last_error = 'not sent: an earlier part failed', updated_at = now()
          where tenant_id = $1 and message_id = $2 and part_index > $3 and status = 'pending'",
    )
    .bind(tenant)
    .bind(message)
    .bind(after)
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// Fails every part not yet posted (the connector is gone).
pub async fn fail_unsent(tx: &mut TenantTx, message: MessageId, error: &str) -> Result<(), sqlx::Error> {
    let tenant = tx.tenant();
    sqlx::query(
        "update channel_replies set status = 'failed', last_error = $3, updated_at = now()
          where tenant_id = $1 and message_id = $2 and status in ('pending', 'sending')",
    )
    .bind(tenant)
    .bind(message)
    .bind(error)
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// Every part is posted: the turn is delivered and its job removed (the conversation's
/// next message may go), in one statement. `last_sent` settles the part just posted (index,
/// platform id) in the same statement.
pub async fn mark_delivered(
    tx: &mut TenantTx,
    message: MessageId,
    last_sent: Option<(i32, &str)>,
) -> Result<(), sqlx::Error> {
    let tenant = tx.tenant();
    let (part, platform_id) = last_sent.unzip();
    sqlx::query(
        "with part as (
             update channel_replies
                set status = 'sent', platform_message_id = $4, sent_at = now(), last_error = null,
                    updated_at = now()
              where tenant_id = $1 and message_id = $2 and part_index = $3),
         job as (
             delete from dispatch_queue where message_id = $2 and tenant_id = $1)
         update channel_messages set delivered_at = now(), updated_at = now()
          where tenant_id = $1 and id = $2",
    )
    .bind(tenant)
    .bind(message)
    .bind(part)
    .bind(platform_id)
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// Applies a WhatsApp status callback to the reply part it names: by our part key
/// (`biz_opaque_callback_data` = `{message_id}:{part_index}`) when present, else by the
/// `wamid` the send returned. A `sent`/`delivered`/`read` for a part still `sending`
/// settles it as posted. Returns the message whose part changed, if any.
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
    sqlx::query_scalar(
        "update channel_replies
            set delivery_status = $5,
                status = case when $6 and status in ('sending', 'pending') then 'sent' else status end,
                platform_message_id = coalesce(platform_message_id, $4),
                sent_at = case when $6 then coalesce(sent_at, now()) else sent_at end,
                last_error = case when $5 = 'failed' then $7 else last_error end,
                updated_at = now()
          where tenant_id = $1
            and (($2::uuid is not null and message_id = $2 and part_index = $3)
                 or ($2::uuid is null and platform_message_id = $4))
      returning message_id",
    )
    .bind(tenant)
    .bind(message)
    .bind(part)
    .bind(&status.platform_message_id)
    .bind(&status.status)
    .bind(posted)
    .bind(&status.error)
    .fetch_optional(tx.conn())
    .await
}

/// The key of a reply part, as sent to the platforms.
pub fn part_key(message: MessageId, part: i32) -> String {
    format!("{message}:{part}")
}

fn parse_part_key(key: &str) -> Option<(MessageId, i32)> {
    let (message, part) = key.rsplit_once(':')?;
    Some((message.parse().ok()?, part.parse().ok()?))
}

/// Claims today's notice for an unlinked sender; `true` only for the first claim of the day.
pub async fn claim_daily_notice(
    tx: &mut TenantTx,
    connector: uuid::Uuid,
    sender: &str,
) -> Result<bool, sqlx::Error> {
    let tenant = tx.tenant();
    let inserted = sqlx::query(
        "insert into channel_notices (tenant_id, connector_id, platform_user_id, day)
         values ($1, $2, $3, (now() at time zone 'utc')::date)
         on conflict do nothing",
    )
    .bind(tenant)
    .bind(connector)
    .bind(sender)
    .execute(tx.conn())
    .await?
    .rows_affected();
    Ok(inserted == 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn part_keys_round_trip() {
        let id = MessageId::new();
        assert_eq!(parse_part_key(&part_key(id, 3)), Some((id, 3)));
        assert_eq!(parse_part_key("part:0"), None);
    }
}
