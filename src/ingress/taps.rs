//! Taps on our buttons (docs/agent.md#offering-choices): each is looked up by the token its
//! button carried, within the webhook's tenant, before the turns are inserted. A tap on
//! choices we never posted, on another chat's or on a link is no turn; a second tap on
//! choices already made is recorded, not dispatched. The choices' row is locked while it is
//! decided, so two taps racing on two instances make one choice.

use sqlx::types::Json;

use crate::choices::{ButtonId, Chosen, Offered, TapAction};
use crate::db::queue::{self, Stage};
use crate::db::TenantTx;
use crate::domain::{Connector, ConnectorId, ConversationKey, MessageId};
use crate::platforms::inbound::{InboundMessage, Tap};

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Verdict {
    /// A turn: the choice's label is its text, the action goes with it.
    Chosen {
        action: TapAction,
        toast: Option<String>,
    },
    /// Recorded as `ignored` (`choice_already_made`), never dispatched.
    AlreadyMade { action: TapAction },
    /// No row at all; counted by reason.
    Dropped(&'static str),
}

impl Verdict {
    pub(super) fn action(&self) -> Option<&TapAction> {
        match self {
            Verdict::Chosen { action, .. } | Verdict::AlreadyMade { action } => Some(action),
            Verdict::Dropped(_) => None,
        }
    }

    pub(super) fn toast(&self) -> Option<String> {
        match self {
            Verdict::Chosen { toast, .. } => toast.clone(),
            _ => None,
        }
    }
}

#[derive(sqlx::FromRow)]
struct OfferedRow {
    message_id: MessageId,
    part_index: i32,
    choices: Json<Offered>,
    chosen: Option<Json<Chosen>>,
    chat_id: String,
    connector_id: ConnectorId,
    conversation_key: ConversationKey,
}

/// `tx` is the connector's tenant's; a token of another tenant is simply not found.
pub(super) async fn resolve(
    tx: &mut TenantTx,
    connector: &Connector,
    message: &InboundMessage,
    tap: &Tap,
) -> Result<Verdict, sqlx::Error> {
    let Ok(button) = tap.button.parse::<ButtonId>() else {
        return Ok(Verdict::Dropped("unknown_choice"));
    };
    // The answer's job first, then its part: the order a worker's commit takes them in.
    let Some(found) = offered(tx, &button, false).await? else {
        return Ok(Verdict::Dropped("unknown_choice"));
    };
    let job = queue::has_job(tx, found.message_id).await?;
    let Some(row) = offered(tx, &button, true).await? else {
        return Ok(Verdict::Dropped("unknown_choice"));
    };
    if row.connector_id != connector.id || row.chat_id != message.address.chat_id {
        return Ok(Verdict::Dropped("choice_of_another_chat"));
    }
    let offered = &row.choices.0;
    let Some(action) = TapAction::of(offered, button.index, row.message_id) else {
        return Ok(Verdict::Dropped("unknown_choice"));
    };
    if !offered.choices.reusable {
        match row.chosen.as_ref().map(|chosen| &chosen.0) {
            // The same tap delivered again: the insert finds it recorded.
            Some(chosen) if chosen.key == message.idempotency_key => {}
            Some(_) => return Ok(Verdict::AlreadyMade { action }),
            None => {
                choose(tx, &row, button.index, message).await?;
                close(tx, connector, &row, &action, job).await?;
            }
        }
    }
    let toast = offered.choices.items[button.index].toast.clone();
    Ok(Verdict::Chosen { action, toast })
}

/// `locked`: the part's row is locked until commit, so two taps make one choice.
async fn offered(
    tx: &mut TenantTx,
    button: &ButtonId,
    locked: bool,
) -> Result<Option<OfferedRow>, sqlx::Error> {
    let tenant = tx.tenant();
    let sql = format!(
        "select r.message_id, r.part_index, r.choices, r.chosen, m.chat_id, m.connector_id,
                m.conversation_key
           from channel_replies r
           join channel_messages m on m.tenant_id = r.tenant_id and m.id = r.message_id
          where r.tenant_id = $1 and m.tenant_id = $1 and r.choice_token = $2
            and r.choices is not null
          limit 1 {}",
        if locked { "for update of r" } else { "" }
    );
    sqlx::query_as(&sql)
        .bind(tenant)
        .bind(button.token.as_str())
        .fetch_optional(tx.conn())
        .await
}

/// The answer's message changes where the platform allows (its buttons go): an edit part
/// of the answered turn, posted by a reply job queued before the tap's own dispatch, so the
/// buttons close before the agent answers the tap. `job`: the answer has one already (its
/// parts still being posted, or waiting): it posts the edit too (`Transition::Delivered`
/// keeps it for a part added while it posted).
async fn close(
    tx: &mut TenantTx,
    connector: &Connector,
    row: &OfferedRow,
    action: &TapAction,
    job: bool,
) -> Result<(), sqlx::Error> {
    let edits = crate::platforms::of(connector.profile.platform).closes_choices();
    if !edits || !connector.profile.edit_after_tap {
        return Ok(());
    }
    let note = format!("✓ {}", action.label);
    crate::db::parts::add_choice_edit(tx, row.message_id, row.part_index, &note).await?;
    if !job {
        queue::enqueue(tx, row.message_id, &row.conversation_key, Stage::Reply).await?;
    }
    Ok(())
}

async fn choose(
    tx: &mut TenantTx,
    row: &OfferedRow,
    index: usize,
    message: &InboundMessage,
) -> Result<(), sqlx::Error> {
    let chosen = Chosen {
        index,
        by: message.address.platform_user_id.clone(),
        key: message.idempotency_key.clone(),
        at: chrono::Utc::now(),
    };
    let tenant = tx.tenant();
    sqlx::query(
        "update channel_replies set chosen = $4, updated_at = now()
          where tenant_id = $1 and message_id = $2 and part_index = $3",
    )
    .bind(tenant)
    .bind(row.message_id)
    .bind(row.part_index)
    .bind(Json(&chosen))
    .execute(tx.conn())
    .await?;
    Ok(())
}
