//! People's reactions to posted answers (docs/agent.md#reactions-feedback-on-answers):
//! feedback recorded against the answer, never a turn. A reaction to anything but one of
//! our reply parts in its chat (a person's own message, another connector's) is dropped.

use crate::db::reactions::{self, ReactionBy};
use crate::db::TenantTx;
use crate::domain::Connector;
use crate::platforms::inbound::{feedback_value, Reaction, ReactionChange};

/// What a reaction did, as the metric labels it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Feedback {
    Positive,
    Negative,
    /// Any other emoji.
    Other,
    Removed,
}

impl Feedback {
    pub fn as_str(self) -> &'static str {
        match self {
            Feedback::Positive => "positive",
            Feedback::Negative => "negative",
            Feedback::Other => "other",
            Feedback::Removed => "removed",
        }
    }

    fn of(value: i16) -> Self {
        match value {
            1 => Feedback::Positive,
            -1 => Feedback::Negative,
            _ => Feedback::Other,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Recorded {
    NotOnAnAnswer,
    /// The same state again (a redelivery), or older than the one recorded.
    Unchanged,
    Changed(Feedback),
}

pub(super) async fn record(
    tx: &mut TenantTx,
    connector: &Connector,
    reaction: &Reaction,
) -> Result<Recorded, sqlx::Error> {
    let part =
        reactions::reacted_part(tx, connector.id, &reaction.chat_id, &reaction.platform_message_id).await?;
    let Some(part) = part else {
        return Ok(Recorded::NotOnAnAnswer);
    };
    let by = ReactionBy {
        part,
        platform_user_id: &reaction.platform_user_id,
        at: reaction.at,
    };
    let changed = match &reaction.change {
        ReactionChange::Set(emoji) => reactions::set(tx, by, emoji, feedback_value(emoji))
            .await?
            .map(Feedback::of),
        ReactionChange::Removed(emoji) => reactions::remove(tx, by, emoji.as_deref())
            .await?
            .map(|_| Feedback::Removed),
    };
    let Some(feedback) = changed else {
        return Ok(Recorded::Unchanged);
    };
    if reactions::feedback_events_on(tx).await? {
        reactions::queue_feedback(tx, by).await?;
    }
    Ok(Recorded::Changed(feedback))
}
