//! The conversation so far, as the agent sees it (DESIGN.md "Statuses and decisions").
//!
//! Terminal turns only (`executed`, `delivery_failed`, `dispatch_failed`, `denied_*`; a
//! `delivery_failed` turn keeps its answer, as it did before that status existed), non-empty
//! request text,
//! strictly older than the turn being dispatched, the newest `HISTORY_TURNS` of them,
//! returned oldest first, each as the user's message followed by the assistant's response
//! when there is one. A linked user's history spans all their platforms (`user_id`); an
//! unlinked sender's is their own conversation key. Of those turns, the tenant's
//! `HistoryScopeSetting` keeps the ones asked in the same kind of place (`Place`): by
//! default a turn in a shared space sees the user's turns in that space only, and a direct
//! message sees their direct messages on every platform.

use std::collections::HashMap;

use super::payload::ChatMessage;
use crate::db::messages::MessageRow;
use crate::db::TenantTx;
use crate::domain::{ConnectorId, HistoryScopeSetting, MessageId};
use crate::media::{Attachment, AttachmentOut};

/// Turns of history given to the agent.
pub const HISTORY_TURNS: i64 = 12;

#[derive(sqlx::FromRow)]
struct Turn {
    id: MessageId,
    request_content: String,
    response_content: Option<String>,
    #[sqlx(json(nullable))]
    attachments: Option<Vec<Attachment>>,
}

/// A turn counts when the user said something or sent a file.
const HAS_CONTENT: &str = "(btrim(h.request_content) <> '' or h.attachments is not null)";

/// Whose history, and up to where.
#[derive(Debug, Clone)]
pub struct HistoryScope<'a> {
    /// The linked user; their history spans every platform.
    pub user_id: Option<&'a str>,
    /// For an unlinked sender: their own conversation.
    pub conversation_key: &'a str,
    /// Where the turns were asked.
    pub place: Place<'a>,
    /// Only turns strictly older than this one; `None` for "what the next turn would see".
    pub before: Option<(chrono::DateTime<chrono::Utc>, MessageId)>,
}

impl<'a> HistoryScope<'a> {
    /// The history the agent gets with `message` under the tenant's `setting`.
    pub fn of(message: &'a MessageRow, setting: HistoryScopeSetting) -> Self {
        Self {
            user_id: message.user_id.as_deref(),
            conversation_key: &message.conversation_key,
            place: Place::of(message, setting),
            before: Some((message.received_at, message.id)),
        }
    }
}

/// Which of the user's turns count, by where they were asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place<'a> {
    /// Anywhere (`HistoryScopeSetting::User`).
    Anywhere,
    /// Direct messages, on every connector and platform.
    Direct,
    /// This shared space of this connector.
    Space { connector: ConnectorId, space: &'a str },
    /// This chat of this connector (and its space, which tells a WhatsApp group from the
    /// same person's direct chat).
    Chat {
        connector: ConnectorId,
        chat_id: &'a str,
        space: Option<&'a str>,
    },
}

impl<'a> Place<'a> {
    /// Where `message`'s history comes from under `setting`.
    pub fn of(message: &'a MessageRow, setting: HistoryScopeSetting) -> Self {
        match (setting, message.space.as_deref()) {
            (HistoryScopeSetting::User, _) => Self::Anywhere,
            (HistoryScopeSetting::PrivateAware, None) => Self::Direct,
            (HistoryScopeSetting::PrivateAware, Some(space)) => Self::Space {
                connector: message.connector_id,
                space,
            },
            (HistoryScopeSetting::Chat, space) => Self::Chat {
                connector: message.connector_id,
                chat_id: &message.chat_id,
                space,
            },
        }
    }

    /// The place as the four values `place_matches` compares with: kind, connector, chat,
    /// space.
    fn columns(
        self,
    ) -> (
        &'static str,
        Option<ConnectorId>,
        Option<&'a str>,
        Option<&'a str>,
    ) {
        match self {
            Self::Anywhere => ("anywhere", None, None, None),
            Self::Direct => ("direct", None, None, None),
            Self::Space { connector, space } => ("space", Some(connector), None, Some(space)),
            Self::Chat {
                connector,
                chat_id,
                space,
            } => ("chat", Some(connector), Some(chat_id), space),
        }
    }
}

/// Whether history row `h` was asked in a place of `kind` described by `p`
/// (`Place::columns`), for the single and the batched read. One condition per kind rather
/// than one with an `OR` per kind: the planner then keeps walking the user's history index
/// newest first and stops at the limit (the `OR` form cost the batched read ~1 ms a turn).
fn place_matches(kind: &str) -> &'static str {
    match kind {
        "direct" => "h.space is null",
        "space" => "h.connector_id = p.connector and h.space = p.space",
        "chat" => {
            "h.connector_id = p.connector and h.chat_id = p.chat and h.space is not distinct from p.space"
        }
        _ => "true",
    }
}

/// Reads the history of `message`'s conversation inside the tenant transaction.
pub async fn load(
    tx: &mut TenantTx,
    message: &MessageRow,
    setting: HistoryScopeSetting,
) -> Result<Vec<ChatMessage>, sqlx::Error> {
    load_scope(tx, &HistoryScope::of(message, setting)).await
}

/// Reads a conversation's history inside the tenant transaction: the worker and the admin
/// API's "history as the agent would see it" both come here.
pub async fn load_scope(
    tx: &mut TenantTx,
    scope: &HistoryScope<'_>,
) -> Result<Vec<ChatMessage>, sqlx::Error> {
    let tenant = tx.tenant();
    // Two statements rather than one with an OR, so each uses its own index.
    let who = match scope.user_id {
        Some(_) => "h.user_id = $2",
        None => "h.user_id is null and h.conversation_key = $2",
    };
    let before = if scope.before.is_some() {
        "and (h.received_at, h.id) < ($8, $9)"
    } else {
        ""
    };
    let key = scope.user_id.unwrap_or(scope.conversation_key);
    let (kind, connector, chat, space) = scope.place.columns();
    let place = place_matches(kind);
    let sql = format!(
        "select h.id, h.request_content, h.response_content, h.attachments
           from channel_messages h,
                (select $4::text as kind, $5::uuid as connector, $6::text as chat, $7::text as space) p
          where h.tenant_id = $1 and {who}
            and (h.status in ('executed', 'delivery_failed', 'dispatch_failed') or h.status like 'denied\\_%')
            and {HAS_CONTENT}
            and {place}
            {before}
          order by h.received_at desc, h.id desc
          limit $3"
    );
    let mut query = sqlx::query_as::<_, Turn>(&sql)
        .bind(tenant)
        .bind(key)
        .bind(HISTORY_TURNS)
        .bind(kind)
        .bind(connector)
        .bind(chat)
        .bind(space);
    if let Some((received_at, id)) = scope.before {
        query = query.bind(received_at).bind(id);
    }
    let mut turns = query.fetch_all(tx.conn()).await?;
    turns.reverse();
    Ok(turns.into_iter().flat_map(into_messages).collect())
}

/// One history row of a batch read: whose history it belongs to.
#[derive(sqlx::FromRow)]
struct BatchTurn {
    for_id: MessageId,
    #[sqlx(flatten)]
    turn: Turn,
}

/// Reads the histories of several turns of one tenant (a claimed batch) in at most two
/// statements per kind of place, one for linked users and one for unlinked senders: the
/// same rule as `load`, each turn's history strictly older than itself. Keyed by the
/// turn's id.
pub async fn load_many(
    tx: &mut TenantTx,
    messages: &[&MessageRow],
    setting: HistoryScopeSetting,
) -> Result<HashMap<MessageId, Vec<ChatMessage>>, sqlx::Error> {
    let mut histories: HashMap<MessageId, Vec<ChatMessage>> =
        messages.iter().map(|m| (m.id, Vec::new())).collect();
    let (linked, unlinked): (Vec<&MessageRow>, Vec<&MessageRow>) =
        messages.iter().partition(|m| m.user_id.is_some());
    let mut groups = Vec::new();
    for (group, who) in [
        (linked, "h.user_id = p.who"),
        (unlinked, "h.user_id is null and h.conversation_key = p.who"),
    ] {
        for kind in ["anywhere", "direct", "space", "chat"] {
            let of_kind: Vec<&MessageRow> = group
                .iter()
                .copied()
                .filter(|m| Place::of(m, setting).columns().0 == kind)
                .collect();
            if !of_kind.is_empty() {
                groups.push((of_kind, who, place_matches(kind)));
            }
        }
    }
    // At most two statements under `user` (linked, unlinked); one more per other kind of
    // place present in the batch.
    for (group, who, place) in groups {
        let ids: Vec<MessageId> = group.iter().map(|m| m.id).collect();
        let keys: Vec<&str> = group
            .iter()
            .map(|m| m.user_id.as_deref().unwrap_or(&m.conversation_key))
            .collect();
        let received: Vec<chrono::DateTime<chrono::Utc>> = group.iter().map(|m| m.received_at).collect();
        let places: Vec<_> = group.iter().map(|m| Place::of(m, setting).columns()).collect();
        let sql = format!(
            "select p.id as for_id, h.id, h.request_content, h.response_content, h.attachments
               from unnest($2::uuid[], $3::text[], $4::timestamptz[], $6::text[], $7::uuid[],
                           $8::text[], $9::text[])
                    as p(id, who, received_at, kind, connector, chat, space)
               cross join lateral (
                     select h.request_content, h.response_content, h.attachments, h.received_at, h.id
                       from channel_messages h
                      where h.tenant_id = $1 and {who}
                        and (h.status in ('executed', 'delivery_failed', 'dispatch_failed') or h.status like 'denied\\_%')
                        and {HAS_CONTENT}
                        and {place}
                        and (h.received_at, h.id) < (p.received_at, p.id)
                      order by h.received_at desc, h.id desc
                      limit $5) h
              order by p.id, h.received_at, h.id"
        );
        let rows: Vec<BatchTurn> = sqlx::query_as(&sql)
            .bind(tx.tenant())
            .bind(&ids)
            .bind(&keys)
            .bind(&received)
            .bind(HISTORY_TURNS)
            .bind(places.iter().map(|p| p.0).collect::<Vec<_>>())
            .bind(places.iter().map(|p| p.1).collect::<Vec<_>>())
            .bind(places.iter().map(|p| p.2).collect::<Vec<_>>())
            .bind(places.iter().map(|p| p.3).collect::<Vec<_>>())
            .fetch_all(tx.conn())
            .await?;
        for row in rows {
            if let Some(history) = histories.get_mut(&row.for_id) {
                history.extend(into_messages(row.turn));
            }
        }
    }
    Ok(histories)
}

fn into_messages(turn: Turn) -> Vec<ChatMessage> {
    let attachments = turn
        .attachments
        .as_deref()
        .map(|files| AttachmentOut::of_turn(turn.id, files))
        .unwrap_or_default();
    let mut messages = vec![ChatMessage {
        attachments,
        ..ChatMessage::user(turn.request_content)
    }];
    if let Some(response) = turn.response_content.filter(|r| !r.trim().is_empty()) {
        messages.push(ChatMessage::assistant(response));
    }
    messages
}
