//! `POST /v1/agent/{tenant_id}/messages`: a message the agent writes first
//! (docs/agent.md#writing-first), to a linked user, to a chat on a connector, or threaded to
//! a stored turn. Recorded as the agent's own turn (so the user's next dispatch has it in
//! `messages[]`) and posted through the reply stage like an answer.

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::choices::{Choice, Choices};
use crate::db::audit::{Actor, AuditAction, AuditEntry};
use crate::db::messages::{MessageRow, MESSAGE_COLUMNS};
use crate::db::parts::Reply;
use crate::db::{self, TenantTx};
use crate::delivery::split::Ask;
use crate::domain::{Address, Connector, ConnectorId, ConversationKey, MessageId, Platform};
use crate::error::{ApiJsonError, AppError};
use crate::http::extract::{ApiBytes, ApiPath};
use crate::http::state::AppState;
use crate::media::outgoing::FileIn;
use crate::turn::outgoing::{self, Destination, Posted, WrittenTurn};

/// The message made ready for `platform` (422 when it cannot post it); a template is one
/// message, whatever its text.
fn reply(input: &AgentMessageIn, text: &str, platform: Platform, markdown: bool) -> Result<Reply, AppError> {
    if input.template.is_some() {
        return Ok(Reply::text(vec![text.to_owned()]));
    }
    let ask = Ask {
        texts: Some(text.to_owned())
            .filter(|t| !t.trim().is_empty())
            .into_iter()
            .collect(),
        choices: input.choices.clone().map(|items| Choices {
            items,
            reusable: input.choices_reusable,
        }),
        files: input.attachments.clone(),
        react: None,
    };
    crate::delivery::split::reply(platform, markdown, ask)
        .map_err(|unfit| AppError::Unprocessable(unfit.to_string()))
}

/// Exactly one of `user_id`, `chat_id` (with `connector_id`) or `reply_to` says where.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"user_id": "alice", "content": "Your report is ready: **3 findings**."}))]
pub struct AgentMessageIn {
    /// A linked user, on the connector they wrote on last (or `connector_id`): a direct
    /// message (Slack opens one when none is recorded).
    #[schema(max_length = 256)]
    pub user_id: Option<String>,
    /// With `user_id`, which of the tenant's connectors; with `chat_id`, required.
    pub connector_id: Option<uuid::Uuid>,
    /// A chat or channel on `connector_id` (Slack channel id, Telegram chat id, WhatsApp
    /// number).
    #[schema(max_length = 256)]
    pub chat_id: Option<String>,
    /// A stored turn (`message_id` of a dispatch): the message goes to its chat, threaded.
    pub reply_to: Option<uuid::Uuid>,
    /// Markdown, rendered and split for the platform. Required unless `template`.
    #[schema(max_length = 100000)]
    pub content: Option<String>,
    /// WhatsApp only: an approved template, the only message Meta delivers more than 24
    /// hours after the user's last message.
    pub template: Option<TemplateIn>,
    /// Buttons posted with `content` (docs/agent.md#offering-choices); not with a template.
    #[serde(default)]
    pub choices: Option<Vec<Choice>>,
    #[serde(default)]
    pub choices_reusable: bool,
    /// Files posted after `content` (docs/agent.md#files-and-reactions-in-answers); not
    /// with a template.
    #[serde(default)]
    pub attachments: Vec<FileIn>,
}

#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TemplateIn {
    #[schema(max_length = 512)]
    pub name: String,
    /// e.g. `en_US`.
    #[schema(max_length = 32)]
    pub language: String,
    /// The body's `{{1}}`, `{{2}}`… in order.
    #[serde(default)]
    pub parameters: Vec<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct AgentMessageOut {
    /// The agent's turn (`GET /v1/admin/messages/{id}` shows its parts as posted, and a
    /// refusal such as a Telegram user who blocked the bot as its `last_error`).
    pub message_id: uuid::Uuid,
    pub conversation: String,
    #[schema(schema_with = crate::admin::schema::platform)]
    pub platform: String,
    pub connector_id: uuid::Uuid,
    pub chat_id: String,
    pub parts: usize,
    /// `false`: sent before under the same `webhook-id`.
    pub created: bool,
}

/// Send a message the agent writes first. Signed like a dispatch, the other way round
/// (Standard Webhooks with the tenant's dispatch secret); `webhook-id` is the message's
/// idempotency key: the same id again sends nothing twice.
#[utoipa::path(post, path = "/v1/agent/{tenant_id}/messages", operation_id = "post_agent_message", tag = "agent",
    security(("dispatch_signature" = [])),
    params(("tenant_id" = Uuid, Path),
        ("webhook-id" = String, Header, description = "The message's idempotency key"),
        ("webhook-timestamp" = String, Header, description = "Unix seconds"),
        ("webhook-signature" = String, Header, description = "v1,<base64 HMAC-SHA256 of \"{id}.{timestamp}.{body}\"> with the dispatch secret")),
    request_body = AgentMessageIn,
    responses((status = 202, body = AgentMessageOut, description = "Recorded and queued: its parts are posted in order"),
        (status = 200, body = AgentMessageOut, description = "The same webhook-id again: nothing sent twice"),
        (status = 400, body = ApiJsonError), (status = 401, body = ApiJsonError),
        (status = 404, body = ApiJsonError, description = "No such tenant, user, connector or turn"),
        (status = 413, body = ApiJsonError),
        (status = 422, body = ApiJsonError, description = "Not a valid target, or WhatsApp's 24-hour window has passed without a template"),
        (status = 502, body = ApiJsonError, description = "The platform would not open a direct message (Slack's conversations.open failed)"),
        (status = 503, body = ApiJsonError)))]
pub async fn post_message(
    State(state): State<AppState>,
    ApiPath(tenant_id): ApiPath<String>,
    headers: HeaderMap,
    ApiBytes(body): ApiBytes,
) -> Result<(StatusCode, Json<AgentMessageOut>), AppError> {
    let signed = super::verify(&state, &tenant_id, &headers, &body).await?;
    let input: AgentMessageIn = super::parse(&body)?;
    check(&input)?;
    let mut tx = TenantTx::begin(&state.pool, signed.tenant.id).await?;
    let (place, connector) = resolve(&state, &mut tx, &input).await?;
    within_platform_rules(&mut tx, &place, &input).await?;
    let text = input.text();
    let ready = reply(&input, &text, place.platform, connector.profile.format_markdown)?;
    let key = format!("agent:{}", signed.event_id);
    let turn = WrittenTurn {
        origin: crate::domain::TurnOrigin::Agent,
        author: None,
        text: &text,
        reply: &ready,
        idempotency_key: &key,
        metadata: input.metadata(),
    };
    let posted = record(&mut tx, &place, &turn).await?;
    tx.commit().await?;
    let (id, created, status) = match posted {
        Posted::New(id) => {
            state.wake_workers();
            (id, true, StatusCode::ACCEPTED)
        }
        Posted::Repeat(id) => (id, false, StatusCode::OK),
    };
    Ok((
        status,
        Json(AgentMessageOut {
            message_id: id.0,
            conversation: place.conversation_key.into(),
            platform: place.platform.to_string(),
            connector_id: place.connector_id.0,
            chat_id: place.address.chat_id,
            parts: ready.len(),
            created,
        }),
    ))
}

impl AgentMessageIn {
    /// What the turn records as the agent's words: the content, or the template's name.
    fn text(&self) -> String {
        match (&self.content, &self.template) {
            (Some(content), _) => content.clone(),
            (None, Some(template)) => format!("[template {}]", template.name),
            (None, None) => String::new(),
        }
    }

    fn metadata(&self) -> serde_json::Value {
        match &self.template {
            Some(template) => serde_json::json!({ "template": template }),
            None => serde_json::json!({}),
        }
    }
}

/// A template only where the platform has them, and a free-form message only within its
/// window (WhatsApp's 24 hours).
async fn within_platform_rules(
    tx: &mut TenantTx,
    place: &Destination,
    input: &AgentMessageIn,
) -> Result<(), AppError> {
    match (
        crate::platforms::of(place.platform).template_window(),
        &input.template,
    ) {
        (Some(window), None) => within_window(tx, place, window).await,
        (None, Some(_)) => Err(AppError::Unprocessable(
            "`template` is for WhatsApp connectors only".into(),
        )),
        _ => Ok(()),
    }
}

/// The agent's turn recorded and queued, with a metric and an audit record when new.
async fn record(tx: &mut TenantTx, place: &Destination, turn: &WrittenTurn<'_>) -> Result<Posted, AppError> {
    let posted = outgoing::record(tx, place, turn).await?;
    if let Posted::New(id) = posted {
        metrics::counter!("channel_bridge_agent_messages_total", "platform" => place.platform.as_str())
            .increment(1);
        let details = serde_json::json!({ "message_id": id.to_string(), "parts": turn.reply.len() });
        let entry = AuditEntry::new(
            Actor::Agent,
            AuditAction::ConversationMessage,
            place.conversation_key.as_str(),
            details,
        );
        db::audit::record(tx, &entry).await?;
    }
    Ok(posted)
}

fn check(input: &AgentMessageIn) -> Result<(), AppError> {
    use crate::api_schema::{check_optional_text, ID_MAX};
    let targets = [
        input.user_id.is_some(),
        input.chat_id.is_some(),
        input.reply_to.is_some(),
    ];
    if targets.iter().filter(|set| **set).count() != 1 {
        return Err(AppError::Unprocessable(
            "name exactly one of user_id, chat_id (with connector_id) or reply_to".into(),
        ));
    }
    if input.chat_id.is_some() && input.connector_id.is_none() {
        return Err(AppError::Unprocessable("chat_id needs connector_id".into()));
    }
    check_optional_text("user_id", input.user_id.as_deref(), ID_MAX)?;
    check_optional_text("chat_id", input.chat_id.as_deref(), ID_MAX)?;
    check_optional_text("content", input.content.as_deref(), 100_000)?;
    if input.template.is_some() && input.choices.is_some() {
        return Err(AppError::Unprocessable(
            "a template cannot carry choices: give its buttons in the template".into(),
        ));
    }
    let blank = input.content.as_deref().is_none_or(|c| c.trim().is_empty());
    if blank && input.template.is_none() && input.attachments.is_empty() {
        return Err(AppError::Unprocessable(
            "content must not be empty (or name a template, or carry attachments)".into(),
        ));
    }
    if input.template.is_some() && !input.attachments.is_empty() {
        return Err(AppError::Unprocessable(
            "a template cannot carry attachments: give its media in the template".into(),
        ));
    }
    if let Some(template) = &input.template {
        crate::api_schema::check_text("template.name", &template.name, 512)?;
        crate::api_schema::check_text("template.language", &template.language, 32)?;
        for parameter in &template.parameters {
            crate::api_schema::check_text("template.parameters", parameter, 1024)?;
        }
    }
    Ok(())
}

async fn connector(state: &AppState, tx: &mut TenantTx, id: ConnectorId) -> Result<Connector, AppError> {
    db::connectors::get(tx, &state.settings.database.secrets, id)
        .await?
        .filter(|c| c.profile.enabled)
        .ok_or(AppError::NotFound("connector"))
}

/// Where the message goes, and through which connector: the turn it replies to, the chat it
/// names, or the user's direct chat.
async fn resolve(
    state: &AppState,
    tx: &mut TenantTx,
    input: &AgentMessageIn,
) -> Result<(Destination, Connector), AppError> {
    if let Some(reply_to) = input.reply_to {
        return replying_to(state, tx, MessageId(reply_to), input.connector_id).await;
    }
    if let (Some(chat), Some(connector_id)) = (&input.chat_id, input.connector_id) {
        let connector = connector(state, tx, ConnectorId(connector_id)).await?;
        let place = Destination {
            connector_id: connector.id,
            platform: connector.profile.platform,
            reply_to: String::new(),
            address: Address {
                chat_id: chat.clone(),
                ..Address::default()
            },
            user_id: None,
            conversation_key: ConversationKey::chat(connector.id, chat),
        };
        return Ok((place, connector));
    }
    let user = input.user_id.as_deref().unwrap_or_default();
    to_user(state, tx, user, input.connector_id.map(ConnectorId)).await
}

/// Threaded to a stored turn, on its connector (which `connector`, if named, must be).
async fn replying_to(
    state: &AppState,
    tx: &mut TenantTx,
    reply_to: MessageId,
    named: Option<uuid::Uuid>,
) -> Result<(Destination, Connector), AppError> {
    let turn = db::messages::get(tx, reply_to)
        .await?
        .ok_or(AppError::NotFound("turn"))?;
    if named.is_some_and(|c| c != turn.connector_id.0) {
        return Err(AppError::Unprocessable(
            "reply_to is a turn of another connector".into(),
        ));
    }
    let connector = connector(state, tx, turn.connector_id).await?;
    Ok((Destination::replying_to(&turn), connector))
}

/// A linked user, on `named` or the connector they wrote on last: the direct chat of their
/// last turn there, or one the platform opens.
async fn to_user(
    state: &AppState,
    tx: &mut TenantTx,
    user: &str,
    named: Option<ConnectorId>,
) -> Result<(Destination, Connector), AppError> {
    let last = last_turn_of(tx, user, named).await?;
    let Some(connector_id) = named.or(last.as_ref().map(|l| l.connector_id)) else {
        return Err(AppError::NotFound(
            "user (no turn on any connector: name connector_id)",
        ));
    };
    let connector = connector(state, tx, connector_id).await?;
    let platform = connector.profile.platform;
    let account = match &last {
        Some(last) => last.address.platform_user_id.clone(),
        None => linked_account(tx, platform, user)
            .await?
            .ok_or(AppError::NotFound(
                "user (no account linked on this connector's platform)",
            ))?,
    };
    let direct = last
        .filter(|l| l.address.space.is_none())
        .map(|l| l.address.chat_id);
    let chat_id = match direct {
        Some(chat) => chat,
        None => open_direct_chat(state, &connector, &account).await?,
    };
    let place = Destination {
        connector_id,
        platform,
        reply_to: String::new(),
        address: Address {
            chat_id,
            thread_id: None,
            space: None,
            platform_user_id: account,
        },
        user_id: Some(user.to_owned()),
        conversation_key: ConversationKey::user(user),
    };
    Ok((place, connector))
}

/// 502 when the platform will not open one (Slack's `conversations.open`).
async fn open_direct_chat(
    state: &AppState,
    connector: &Connector,
    account: &str,
) -> Result<String, AppError> {
    let platform = connector.profile.platform;
    crate::platforms::of(platform)
        .open_direct_chat(&state.platform_client, connector, account)
        .await
        .map_err(|error| {
            tracing::warn!(%error, %platform, "the platform would not open a direct message");
            AppError::BadGateway("the platform would not open a direct message with the user")
        })
}

/// The user's latest own turn (on `connector`, if named), read on the history index.
async fn last_turn_of(
    tx: &mut TenantTx,
    user: &str,
    connector: Option<ConnectorId>,
) -> Result<Option<MessageRow>, sqlx::Error> {
    sqlx::query_as(&format!(
        "select {MESSAGE_COLUMNS} from channel_messages
          where tenant_id = $1 and user_id = $2 and origin = 'user'
            and ($3::uuid is null or connector_id = $3)
          order by received_at desc, id desc limit 1"
    ))
    .bind(tx.tenant())
    .bind(user)
    .bind(connector)
    .fetch_optional(tx.conn())
    .await
}

async fn linked_account(
    tx: &mut TenantTx,
    platform: Platform,
    user: &str,
) -> Result<Option<String>, sqlx::Error> {
    sqlx::query_scalar(
        "select platform_user_id from channel_links
          where tenant_id = $1 and platform = $2 and user_id = $3
          order by platform_user_id limit 1",
    )
    .bind(tx.tenant())
    .bind(platform.as_str())
    .bind(user)
    .fetch_optional(tx.conn())
    .await
}

/// Refused before the platform is asked: a free-form message more than `window` after the
/// user's last message is rejected by it anyway (WhatsApp: Meta's error 131047).
async fn within_window(
    tx: &mut TenantTx,
    place: &Destination,
    window: chrono::TimeDelta,
) -> Result<(), AppError> {
    let address = &place.address;
    let number = if address.platform_user_id.is_empty() {
        &address.chat_id
    } else {
        &address.platform_user_id
    };
    // On the history index of a linked user, or of the unlinked sender.
    let last: Option<chrono::DateTime<chrono::Utc>> = match &place.user_id {
        Some(user) => {
            sqlx::query_scalar(
                "select max(received_at) from channel_messages
                  where tenant_id = $1 and user_id = $2 and connector_id = $3
                    and platform_user_id = $4 and origin = 'user'",
            )
            .bind(tx.tenant())
            .bind(user)
            .bind(place.connector_id)
            .bind(number)
            .fetch_one(tx.conn())
            .await?
        }
        None => {
            sqlx::query_scalar(
                "select max(received_at) from channel_messages
                  where tenant_id = $1 and user_id is null and conversation_key = $2 and origin = 'user'",
            )
            .bind(tx.tenant())
            .bind(ConversationKey::sender(place.connector_id, number))
            .fetch_one(tx.conn())
            .await?
        }
    };
    if last.is_some_and(|at| chrono::Utc::now() - at < window) {
        return Ok(());
    }
    Err(AppError::Unprocessable(
        "WhatsApp delivers a free-form message only within 24 hours of the user's last message \
         (Meta error 131047): name an approved `template` to write outside it"
            .into(),
    ))
}
