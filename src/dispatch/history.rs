//! The earlier turns a dispatch carries
//! (docs/agent.md#history-scope-what-the-agent-sees-of-earlier-turns): finished turns with
//! text or files, strictly older than the one dispatched, the newest `HISTORY_TURNS`, oldest
//! first. A linked user's history spans every platform; an unlinked sender's is their own
//! conversation.

use std::collections::HashMap;

use super::payload::ChatMessage;
use super::payload::TurnMetadata;
use crate::choices::TapAction;
use crate::db::messages::MessageRow;
use crate::db::TenantTx;
use crate::domain::{ConnectorId, HistoryScopeSetting, MessageId, TurnOrigin};
use crate::media::{Attachment, AttachmentOut};

pub const HISTORY_TURNS: i64 = 12;

#[derive(sqlx::FromRow)]
struct Turn {
    id: MessageId,
    request_content: String,
    response_content: Option<String>,
    #[sqlx(json(nullable))]
    attachments: Option<Vec<Attachment>>,
    origin: TurnOrigin,
    author: Option<String>,
    status: crate::domain::MessageStatus,
    #[sqlx(json(nullable))]
    action: Option<TapAction>,
    command: Option<String>,
}

/// A person's or the agent's own turn has no request, only its text.
const HAS_CONTENT: &str =
    "(btrim(h.request_content) <> '' or h.attachments is not null or h.origin <> 'user')";

/// Finished turns, those recorded while a person held the conversation, and those whose
/// answer the agent is still to post (marked so).
const SHOWN: &str =
    "(h.status in ('executed', 'delivery_failed', 'dispatch_failed', 'held', 'awaiting_agent')
                     or h.status like 'denied\\_%')";

#[derive(Debug, Clone)]
pub struct HistoryScope<'a> {
    pub user_id: Option<&'a str>,
    /// Used for an unlinked sender only.
    pub conversation_key: &'a str,
    pub place: HistoryPlace<'a>,
    /// `None` for "what the next turn would see".
    pub before: Option<(chrono::DateTime<chrono::Utc>, MessageId)>,
}

impl<'a> HistoryScope<'a> {
    pub fn of(message: &'a MessageRow, setting: HistoryScopeSetting) -> Self {
        Self {
            user_id: message.user_id.as_deref(),
            conversation_key: message.conversation_key.as_str(),
            place: HistoryPlace::of(message, setting),
            before: Some((message.received_at, message.id)),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HistoryPlace<'a> {
    Anywhere,
    Direct,
    Space {
        connector: ConnectorId,
        space: &'a str,
    },
    /// The space tells a WhatsApp group from the same person's direct chat.
    Chat {
        connector: ConnectorId,
        chat_id: &'a str,
        space: Option<&'a str>,
    },
}

impl<'a> HistoryPlace<'a> {
    pub fn of(message: &'a MessageRow, setting: HistoryScopeSetting) -> Self {
        match (setting, message.address.space.as_deref()) {
            (HistoryScopeSetting::User, _) => Self::Anywhere,
            (HistoryScopeSetting::PrivateAware, None) => Self::Direct,
            (HistoryScopeSetting::PrivateAware, Some(space)) => Self::Space {
                connector: message.connector_id,
                space,
            },
            (HistoryScopeSetting::Chat, space) => Self::Chat {
                connector: message.connector_id,
                chat_id: &message.address.chat_id,
                space,
            },
        }
    }

    /// Kind, connector, chat, space: what `place_matches` compares with.
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

/// One condition per kind rather than an `OR` of them: the planner then walks the user's
/// history index newest first and stops at the limit.
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

pub async fn load(
    tx: &mut TenantTx,
    message: &MessageRow,
    setting: HistoryScopeSetting,
) -> Result<Vec<ChatMessage>, sqlx::Error> {
    load_scope(tx, &HistoryScope::of(message, setting)).await
}

/// Also the admin API's "history as the agent would see it".
pub async fn load_scope(
    tx: &mut TenantTx,
    scope: &HistoryScope<'_>,
) -> Result<Vec<ChatMessage>, sqlx::Error> {
    let tenant = tx.tenant();
    // Two statement shapes rather than an OR, so each uses its own index.
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
        "select h.id, h.request_content, h.response_content, h.attachments, h.origin, h.author, h.status,
                h.action, h.command
           from channel_messages h,
                (select $4::text as kind, $5::uuid as connector, $6::text as chat, $7::text as space) p
          where h.tenant_id = $1 and {who}
            and {SHOWN}
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

#[derive(sqlx::FromRow)]
struct BatchTurn {
    for_id: MessageId,
    #[sqlx(flatten)]
    turn: Turn,
}

/// A claimed batch's histories, by turn: one statement per kind of place and per linked or
/// unlinked sender, each turn's history strictly older than itself.
pub async fn load_many(
    tx: &mut TenantTx,
    messages: &[&MessageRow],
    setting: HistoryScopeSetting,
) -> Result<HashMap<MessageId, Vec<ChatMessage>>, sqlx::Error> {
    let mut histories: HashMap<MessageId, Vec<ChatMessage>> =
        messages.iter().map(|m| (m.id, Vec::new())).collect();
    for group in BatchGroup::all(messages, setting) {
        for row in load_group(tx, &group, setting).await? {
            if let Some(history) = histories.get_mut(&row.for_id) {
                history.extend(into_messages(row.turn));
            }
        }
    }
    Ok(histories)
}

/// The turns of a batch one statement reads the histories of: all of linked senders or
/// all of unlinked ones, all of one kind of place.
struct BatchGroup<'m> {
    linked: bool,
    kind: &'static str,
    messages: Vec<&'m MessageRow>,
}

impl<'m> BatchGroup<'m> {
    /// The batch's groups, linked senders first, none empty.
    fn all(messages: &[&'m MessageRow], setting: HistoryScopeSetting) -> Vec<Self> {
        let (linked, unlinked): (Vec<&MessageRow>, Vec<&MessageRow>) =
            messages.iter().partition(|m| m.user_id.is_some());
        let mut groups = Vec::new();
        for (group, linked) in [(linked, true), (unlinked, false)] {
            for kind in ["anywhere", "direct", "space", "chat"] {
                let of_kind: Vec<&MessageRow> = group
                    .iter()
                    .copied()
                    .filter(|m| HistoryPlace::of(m, setting).columns().0 == kind)
                    .collect();
                if !of_kind.is_empty() {
                    groups.push(Self {
                        linked,
                        kind,
                        messages: of_kind,
                    });
                }
            }
        }
        groups
    }
}

/// The histories of one group's turns, by turn, each oldest first.
async fn load_group(
    tx: &mut TenantTx,
    group: &BatchGroup<'_>,
    setting: HistoryScopeSetting,
) -> Result<Vec<BatchTurn>, sqlx::Error> {
    let messages = &group.messages;
    let ids: Vec<MessageId> = messages.iter().map(|m| m.id).collect();
    let keys: Vec<&str> = messages
        .iter()
        .map(|m| m.user_id.as_deref().unwrap_or(m.conversation_key.as_str()))
        .collect();
    let received: Vec<chrono::DateTime<chrono::Utc>> = messages.iter().map(|m| m.received_at).collect();
    let places: Vec<_> = messages
        .iter()
        .map(|m| HistoryPlace::of(m, setting).columns())
        .collect();
    sqlx::query_as(&batch_history_sql(group))
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
        .await
}

/// The statement `load_group` runs for the group's senders and kind of place.
fn batch_history_sql(group: &BatchGroup<'_>) -> String {
    let who = if group.linked {
        "h.user_id = p.who"
    } else {
        "h.user_id is null and h.conversation_key = p.who"
    };
    let place = place_matches(group.kind);
    format!(
        "select p.id as for_id, h.id, h.request_content, h.response_content, h.attachments,
                h.origin, h.author, h.status, h.action, h.command
           from unnest($2::uuid[], $3::text[], $4::timestamptz[], $6::text[], $7::uuid[],
                       $8::text[], $9::text[])
                as p(id, who, received_at, kind, connector, chat, space)
           cross join lateral (
                 select h.request_content, h.response_content, h.attachments, h.received_at, h.id,
                        h.origin, h.author, h.status, h.action, h.command
                   from channel_messages h
                  where h.tenant_id = $1 and {who}
                    and {SHOWN}
                    and {HAS_CONTENT}
                    and {place}
                    and (h.received_at, h.id) < (p.received_at, p.id)
                  order by h.received_at desc, h.id desc
                  limit $5) h
          order by p.id, h.received_at, h.id"
    )
}

fn into_messages(turn: Turn) -> Vec<ChatMessage> {
    if turn.origin != TurnOrigin::User {
        let text = turn.response_content.unwrap_or_default();
        return vec![ChatMessage {
            metadata: Some(TurnMetadata {
                from: Some(turn.origin),
                author: turn.author,
                awaiting_answer: false,
            }),
            ..ChatMessage::assistant(text)
        }];
    }
    let attachments = turn
        .attachments
        .as_deref()
        .map(|files| AttachmentOut::of_turn(turn.id, files))
        .unwrap_or_default();
    let awaiting = turn.status == crate::domain::MessageStatus::AwaitingAgent;
    let mut messages = vec![ChatMessage {
        attachments,
        action: turn.action,
        command: turn.command,
        metadata: awaiting.then(|| TurnMetadata {
            awaiting_answer: true,
            ..TurnMetadata::default()
        }),
        ..ChatMessage::user(turn.request_content)
    }];
    if let Some(response) = turn.response_content.filter(|r| !r.trim().is_empty()) {
        messages.push(ChatMessage::assistant(response));
    }
    messages
}
