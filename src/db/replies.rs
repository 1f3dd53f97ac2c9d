//! Reply parts (`channel_replies`) beside their transitions (`crate::turn`): part keys, the
//! Slack thread search's saved cursor, and the daily notice to unlinked senders.

use chrono::{DateTime, Utc};

use super::TenantTx;
use crate::domain::MessageId;

/// The cursor saved for the send marked `sending` at `mark`, if its search stopped half-way.
pub async fn search_cursor(
    tx: &mut TenantTx,
    message: MessageId,
    part: i32,
    mark: DateTime<Utc>,
) -> Result<Option<String>, sqlx::Error> {
    let tenant = tx.tenant();
    let cursor: Option<Option<String>> = sqlx::query_scalar(
        "select search_cursor from channel_replies
          where tenant_id = $1 and message_id = $2 and part_index = $3 and search_mark = $4",
    )
    .bind(tenant)
    .bind(message)
    .bind(part)
    .bind(mark)
    .fetch_optional(tx.conn())
    .await?;
    Ok(cursor.flatten())
}

/// `None`: the search starts again from the first page.
pub async fn save_search_cursor(
    tx: &mut TenantTx,
    message: MessageId,
    part: i32,
    mark: DateTime<Utc>,
    cursor: Option<&str>,
) -> Result<(), sqlx::Error> {
    let tenant = tx.tenant();
    sqlx::query(
        "update channel_replies set search_cursor = $5, search_mark = $4
          where tenant_id = $1 and message_id = $2 and part_index = $3 and status = 'sending'",
    )
    .bind(tenant)
    .bind(message)
    .bind(part)
    .bind(mark)
    .bind(cursor)
    .execute(tx.conn())
    .await?;
    Ok(())
}

pub fn part_key(message: MessageId, part: i32) -> String {
    format!("{message}:{part}")
}

/// A part key of ours (`{message_id}:{part_index}`), or `None` for anything else.
pub fn parse_part_key(key: &str) -> Option<(MessageId, i32)> {
    let (message, part) = key.rsplit_once(':')?;
    Some((message.parse().ok()?, part.parse().ok()?))
}

/// `true` only for the first claim of the day.
pub async fn claim_daily_notice(
    tx: &mut TenantTx,
    connector: uuid::Uuid,
    sender: &str,
) -> Result<bool, sqlx::Error> {
    let tenant = tx.tenant();
    let sender = crate::domain::index_key(sender);
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
        assert_eq!(parse_part_key(&format!("{id}")), None);
        assert_eq!(parse_part_key(&format!("{id}:x")), None);
    }
}
