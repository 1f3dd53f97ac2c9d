//! A conversation page for the console: a user's or a sender's turns with their reply parts.

use sqlx::PgPool;

use super::list::{filter_of, page_of, MessagesQuery};
use super::message::{MessageOut, ReactionOut, ReplyPartOut};
use crate::admin::schema;
use crate::db::{self, TenantTx};
use crate::domain::{MessageId, TenantId};
use crate::error::AppError;
use crate::shapes::MessageSelection;

/// A linked user (all their platforms), or an unlinked sender's `conversation_key`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Who {
    User(String),
    Sender(String),
}

#[derive(Debug)]
pub struct ConversationTurn {
    pub message: MessageOut,
    pub reply_parts: Vec<ReplyPartOut>,
    pub reactions: Vec<ReactionOut>,
}

#[derive(Debug)]
pub struct ConversationPage {
    /// Newest first.
    pub turns: Vec<ConversationTurn>,
    /// The platform accounts linked to the user (none for an unlinked sender).
    pub links: Vec<db::links::Link>,
    pub next_cursor: Option<String>,
}

const CONVERSATION_PAGE: i64 = 30;

/// The listing's own query (on the history indexes) and one primary-key read of the parts.
pub async fn conversation(
    pool: &PgPool,
    tenant: TenantId,
    who: &Who,
    cursor: Option<&str>,
) -> Result<ConversationPage, AppError> {
    let query = MessagesQuery {
        matching: MessageSelection {
            user_id: match who {
                Who::User(user) => Some(user.clone()),
                Who::Sender(_) => None,
            },
            ..MessageSelection::default()
        },
        cursor: cursor.map(str::to_owned),
        limit: Some(CONVERSATION_PAGE),
        ..MessagesQuery::default()
    };
    let mut filter = filter_of(&query)?;
    if let Who::Sender(key) = who {
        schema::check_text("sender", key, schema::SECRET_MAX)?;
        filter.sender_conversation = Some(key.clone());
    }
    let mut tx = TenantTx::begin(pool, tenant).await?;
    let rows = db::messages::list(&mut tx, &filter).await?;
    let (rows, next_cursor) = page_of(rows, filter.limit);
    let ids: Vec<MessageId> = rows.iter().map(|row| row.id).collect();
    let parts = db::parts::reply_parts_of(&mut tx, &ids).await?;
    let reactions = db::reactions::of_messages(&mut tx, &ids).await?;
    let links = match who {
        Who::User(user) => db::links::of_user(&mut tx, user).await?,
        Who::Sender(_) => Vec::new(),
    };
    tx.commit().await?;
    let mut parts_of: std::collections::HashMap<MessageId, Vec<ReplyPartOut>> = Default::default();
    for (message, part) in parts {
        parts_of.entry(message).or_default().push(part.into());
    }
    let mut reactions_of: std::collections::HashMap<MessageId, Vec<ReactionOut>> = Default::default();
    for (message, reaction) in reactions {
        reactions_of.entry(message).or_default().push(reaction.into());
    }
    let turns = rows
        .into_iter()
        .map(|row| ConversationTurn {
            reply_parts: parts_of.remove(&row.id).unwrap_or_default(),
            reactions: reactions_of.remove(&row.id).unwrap_or_default(),
            message: row.into(),
        })
        .collect();
    Ok(ConversationPage {
        turns,
        links,
        next_cursor,
    })
}
