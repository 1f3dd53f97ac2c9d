//! Reply parts (`channel_replies`, tenant table, RLS) as the outside world changes them:
//! WhatsApp status callbacks, and the daily notice to unlinked senders. The worker's own
//! part transitions (pending → sending → sent | failed) live in `super::turns`.

use super::TenantTx;
use crate::channels::DeliveryStatus;
use crate::domain::MessageId;

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
    let sender = crate::channels::index_key(sender);
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
