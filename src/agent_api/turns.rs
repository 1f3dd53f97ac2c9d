//! `POST /v1/agent/{tenant_id}/turns/{message_id}/events`: the answer to a turn the agent
//! accepted with `202` (docs/agent.md#answering-later), posted as it comes.

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::choices::{Choice, Choices};
use crate::db::messages::MessageRow;
use crate::db::parts::Reply;
use crate::db::{self, TenantTx};
use crate::delivery::split::Ask;
use crate::dispatch::payload::HANDOFF_REASON_MAX;
use crate::domain::{MessageId, MessageStatus, TenantId};
use crate::error::{ApiJsonError, AppError};
use crate::http::extract::{ApiBytes, ApiPath};
use crate::http::state::AppState;
use crate::media::outgoing::FileIn;
use crate::turn::later::{self, EventKind, Opened};
use crate::turn::HandoffRequest;

/// The longest status text kept (Slack shows 100 characters).
const STATUS_MAX: usize = 500;

/// One event of an answer given later. `message` and `done` text is Markdown, rendered and
/// split for the platform like a synchronous answer.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
#[schema(example = json!({"type": "message", "content": "Found 3 flights; the cheapest leaves at 7:05."}))]
pub enum TurnEvent {
    /// What the agent is doing, shown as the platform's typing indicator (Slack: the
    /// assistant thread's status text) while the user waits.
    Status {
        #[schema(max_length = 500)]
        text: String,
    },
    /// One part of the answer, posted now (threaded, exactly once).
    Message {
        #[schema(max_length = 100000)]
        content: String,
        /// Buttons posted with this text (docs/agent.md#offering-choices).
        #[serde(default)]
        choices: Option<Vec<Choice>>,
        #[serde(default)]
        choices_reusable: bool,
        /// Files posted after the text (docs/agent.md#files-and-reactions-in-answers).
        #[serde(default)]
        attachments: Vec<FileIn>,
        /// An emoji set on the user's message.
        #[serde(default)]
        react: Option<String>,
    },
    /// The answer is complete (with a last part, if `content` is given). Later events get 409.
    Done {
        #[schema(max_length = 100000)]
        #[serde(default)]
        content: Option<String>,
        /// Ask for a person, as a synchronous answer does: the conversation is held in the
        /// commit that ends the turn.
        #[serde(default)]
        handoff: Option<HandoffIn>,
        /// Buttons posted with `content` (docs/agent.md#offering-choices).
        #[serde(default)]
        choices: Option<Vec<Choice>>,
        #[serde(default)]
        choices_reusable: bool,
        /// Files posted after `content`.
        #[serde(default)]
        attachments: Vec<FileIn>,
        /// An emoji set on the user's message (`✅` when done, say).
        #[serde(default)]
        react: Option<String>,
    },
}

/// `handoff` of a `done` event: `{"reason": "…"}` or `true` (`false`: no handoff), read as
/// on a synchronous answer (docs/agent.md#asking-for-a-person).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(untagged, expecting = "an object (`{\"reason\": \"…\"}`) or a boolean")]
pub enum HandoffIn {
    Flag(bool),
    Ask(HandoffAskIn),
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"reason": "refund over the limit"}))]
pub struct HandoffAskIn {
    /// Shown in the held list.
    #[schema(max_length = 500, pattern = r"^[^\u0000]*$")]
    #[serde(default)]
    pub reason: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct EventOut {
    /// `accepted`, or `duplicate` for a `webhook-id` applied before (nothing done again).
    pub status: &'static str,
    /// Reply parts this event made (after splitting for the platform).
    pub parts: usize,
    /// For a status update: whether the platform shows it (no indicator on this platform or
    /// connector, or another one a moment ago, leaves it out).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shown: Option<bool>,
}

/// Post an event of the answer to a turn the agent accepted with `202`. Signed like a
/// dispatch, the other way round: Standard Webhooks headers with the tenant's dispatch
/// secret; `webhook-id` is the event's idempotency key.
#[utoipa::path(post, path = "/v1/agent/{tenant_id}/turns/{message_id}/events", operation_id = "post_turn_event", tag = "agent",
    security(("dispatch_signature" = [])),
    params(("tenant_id" = Uuid, Path), ("message_id" = Uuid, Path),
        ("webhook-id" = String, Header, description = "The event's idempotency key"),
        ("webhook-timestamp" = String, Header, description = "Unix seconds"),
        ("webhook-signature" = String, Header, description = "v1,<base64 HMAC-SHA256 of \"{id}.{timestamp}.{body}\"> with the dispatch secret")),
    request_body = TurnEvent,
    responses((status = 202, body = EventOut), (status = 200, body = EventOut, description = "The same webhook-id again: nothing done twice"),
        (status = 400, body = ApiJsonError), (status = 401, body = ApiJsonError), (status = 404, body = ApiJsonError),
        (status = 409, body = ApiJsonError, description = "The turn is not waiting for the agent: done already, or not answered 202"),
        (status = 410, body = ApiJsonError, description = "Past CB_AGENT_ASYNC_HORIZON_SECS"),
        (status = 413, body = ApiJsonError), (status = 422, body = ApiJsonError), (status = 503, body = ApiJsonError)))]
pub async fn post_event(
    State(state): State<AppState>,
    ApiPath((tenant_id, message_id)): ApiPath<(String, String)>,
    headers: HeaderMap,
    ApiBytes(body): ApiBytes,
) -> Result<(StatusCode, Json<EventOut>), AppError> {
    let signed = super::verify(&state, &tenant_id, &headers, &body).await?;
    let message = message_id
        .parse::<uuid::Uuid>()
        .map(MessageId)
        .map_err(|_| AppError::NotFound("turn"))?;
    let event: TurnEvent = super::parse(&body)?;
    let (kind, text) = match &event {
        TurnEvent::Status { text } => {
            crate::api_schema::check_text("text", text, STATUS_MAX)?;
            (EventKind::Status, None)
        }
        TurnEvent::Message { content, .. } => (EventKind::Message, Some(content.as_str())),
        TurnEvent::Done { content, .. } => (EventKind::Done, content.as_deref()),
    };
    let handoff = handoff_reason(&event)?;
    if let Some(text) = text {
        crate::api_schema::check_text("content", text, 100_000)?;
    }
    let text = text.filter(|t| !t.trim().is_empty());
    let (mut tx, turn) = match opened(&state, signed.tenant.id, message, &signed.event_id).await? {
        Ok(ready) => ready,
        Err(refused) => return refusal(refused),
    };
    let ask = ask_of(&event, text)?;
    let shown = ask.shown();
    let reply = split(&state, &mut tx, &turn, ask).await?;
    let applied = later::Event {
        id: &signed.event_id,
        kind,
        text: Some(shown.as_str()).filter(|s| !s.is_empty()),
        reply: &reply,
        handoff: handoff.map(|reason| HandoffRequest {
            conversation: turn.conversation_key.clone(),
            user_id: turn.user_id.clone(),
            reason,
        }),
    };
    later::apply(&mut tx, &turn, &applied).await?;
    tx.commit().await?;
    metrics::counter!("channel_bridge_agent_events_total", "type" => kind.as_str()).increment(1);
    if !reply.is_empty() {
        state.wake_workers();
    }
    let shown = match &event {
        TurnEvent::Status { text } => Some(show_status(&state, &turn, text).await),
        _ => None,
    };
    let out = EventOut {
        status: "accepted",
        parts: reply.len(),
        shown,
    };
    Ok((StatusCode::ACCEPTED, Json(out)))
}

/// `Some(reason)` when a `done` asks for a person. A reason past the limit is refused (400),
/// as any text of this API, where a synchronous answer's is cut: that body cannot be refused.
fn handoff_reason(event: &TurnEvent) -> Result<Option<Option<String>>, AppError> {
    let TurnEvent::Done {
        handoff: Some(handoff),
        ..
    } = event
    else {
        return Ok(None);
    };
    match handoff {
        HandoffIn::Flag(asked) => Ok(asked.then_some(None)),
        HandoffIn::Ask(HandoffAskIn { reason }) => {
            crate::api_schema::check_optional_text("handoff.reason", reason.as_deref(), HANDOFF_REASON_MAX)?;
            let reason = reason.clone().filter(|r| !r.trim().is_empty());
            Ok(Some(reason))
        }
    }
}

/// How long an event waits for its turn's dispatch to end: an agent may post it while its
/// 202 is still on the way, before the gateway has recorded that it answers later.
const EARLY_EVENT_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// The turn locked for the event, or why the event is not applied. An event for a turn
/// still being dispatched waits (the tenant transaction is let go meanwhile, so the worker
/// can record the 202), then is answered 503 with `Retry-After`.
async fn opened(
    state: &AppState,
    tenant: TenantId,
    message: MessageId,
    event_id: &str,
) -> Result<Result<(TenantTx, Box<MessageRow>), Opened>, AppError> {
    let deadline = tokio::time::Instant::now() + EARLY_EVENT_WAIT;
    let mut pause = std::time::Duration::from_millis(5);
    loop {
        let mut tx = TenantTx::begin(&state.pool, tenant).await?;
        let refused = match later::open(&mut tx, message, event_id).await? {
            Opened::Ready(turn) => return Ok(Ok((tx, turn))),
            refused => refused,
        };
        tx.rollback().await?;
        if !matches!(refused, Opened::NotAwaiting(MessageStatus::Dispatching)) {
            return Ok(Err(refused));
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(AppError::NotYet(
                "the turn's dispatch has not ended yet (the agent's 202 is not recorded): retry",
            ));
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(std::time::Duration::from_millis(100));
    }
}

/// What an event that is not applied is answered.
fn refusal(opened: Opened) -> Result<(StatusCode, Json<EventOut>), AppError> {
    match opened {
        Opened::Repeat => {
            let out = EventOut {
                status: "duplicate",
                parts: 0,
                shown: None,
            };
            Ok((StatusCode::OK, Json(out)))
        }
        Opened::NotAwaiting(MessageStatus::Executed | MessageStatus::DeliveryFailed) => {
            Err(AppError::Conflict("the turn is done: its answer is complete"))
        }
        Opened::NotAwaiting(_) => Err(AppError::Conflict(
            "the turn is not waiting for an answer (the agent did not answer it 202)",
        )),
        Opened::PastHorizon => Err(AppError::Gone(
            "the turn's CB_AGENT_ASYNC_HORIZON_SECS has passed",
        )),
        Opened::NoSuchTurn | Opened::Ready(_) => Err(AppError::NotFound("turn")),
    }
}

/// What a `message` or `done` event asks to post (`text`: its content, unless blank).
fn ask_of(event: &TurnEvent, text: Option<&str>) -> Result<Ask, AppError> {
    let (choices, reusable, files, react) = match event {
        TurnEvent::Message {
            choices,
            choices_reusable,
            attachments,
            react,
            ..
        }
        | TurnEvent::Done {
            choices,
            choices_reusable,
            attachments,
            react,
            ..
        } => (choices, *choices_reusable, attachments, react),
        TurnEvent::Status { .. } => return Ok(Ask::default()),
    };
    if choices.is_some() && text.is_none() {
        return Err(AppError::Unprocessable(
            "choices need `content` to go with".into(),
        ));
    }
    Ok(Ask {
        texts: text.map(str::to_owned).into_iter().collect(),
        choices: choices.clone().map(|items| Choices { items, reusable }),
        files: files.clone(),
        react: react.clone(),
    })
}

/// Split as a synchronous answer is, for the turn's platform and connector (read in the
/// event's transaction: a token rotated a moment ago is no reason to fail); what the
/// platform could not post is refused (422) before anything is recorded.
async fn split(state: &AppState, tx: &mut TenantTx, turn: &MessageRow, ask: Ask) -> Result<Reply, AppError> {
    if ask == Ask::default() {
        return Ok(Reply::default());
    }
    let connector = db::connectors::get(tx, &state.settings.database.secrets, turn.connector_id).await?;
    let markdown = connector.as_ref().is_some_and(|c| c.profile.format_markdown);
    crate::delivery::split::reply(turn.platform, markdown, ask)
        .map_err(|unfit| AppError::Unprocessable(unfit.to_string()))
}

async fn show_status(state: &AppState, turn: &MessageRow, text: &str) -> bool {
    let tenant = turn.tenant_id;
    let Ok(Some(connector)) = state
        .cache
        .connector_of(&state.pool, tenant, turn.connector_id)
        .await
    else {
        return false;
    };
    state.typing.show_status(&connector, turn, text).await
}
