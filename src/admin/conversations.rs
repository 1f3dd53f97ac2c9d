//! A person stepping in (docs/admin.md#human-handoff): take a conversation over, write in
//! it, hand it back, list the held ones. The console calls the same functions.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};
use sqlx::PgPool;
use utoipa::{IntoParams, ToSchema};

use super::auth::TenantAdmin;
use super::schema;
use crate::db::audit::Actor;
use crate::db::parts::Reply;
use crate::db::{self, TenantTx};
use crate::delivery::split::Ask;
use crate::domain::{MessageId, Platform, TenantId};
use crate::error::{ApiJsonError, AppError};
use crate::http::extract::{ApiJson, ApiJsonOrNone, ApiPath};
use crate::http::state::AppState;
use crate::media::outgoing::FileIn;
use crate::turn::handoff::{self, Conversation, PersonTurn, Posted};

/// A person's message: longer ones are split into the platform's parts like an answer.
pub const TEXT_MAX: usize = 20_000;
/// The held list shows this many, oldest hold first.
pub const HELD_LIST_MAX: i64 = 500;

/// Who acts: the key (for the audit record) and the name a person's message is signed with.
pub use crate::turn::handoff::Person;

impl Person {
    pub async fn of_key(pool: &PgPool, key_id: uuid::Uuid) -> Result<Self, AppError> {
        let mut conn = pool.acquire().await?;
        let name = db::api_keys::signature_of(&mut conn, key_id)
            .await?
            .ok_or(AppError::Unauthorized("invalid or revoked API key"))?;
        Ok(Self {
            actor: Actor::ApiKey(key_id),
            name,
        })
    }
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct ConversationPath {
    /// `user:<user id>` for a linked user (every platform they use), or
    /// `sender:<connector id>:<platform user id>` for an unlinked sender: the turns'
    /// `conversation` field.
    #[param(max_length = 300, pattern = r"^(user:|sender:)[^\u0000]+$")]
    pub conversation: String,
}

fn parse(conversation: &str) -> Result<Conversation<'_>, AppError> {
    if !schema::names_something(conversation, 300) {
        return Err(AppError::NotFound("conversation"));
    }
    Conversation::parse(conversation).ok_or(AppError::NotFound("conversation"))
}

#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"reason": "asked for a refund over the limit"}))]
pub struct TakeOverIn {
    /// Shown in the held list.
    #[schema(max_length = 500, pattern = r"^[^\u0000]*$")]
    #[serde(default)]
    pub reason: Option<String>,
}

/// A held conversation as admins see it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct Hold {
    /// `user:<user id>` for a linked user, `sender:<connector id>:<platform user id>` for an
    /// unlinked sender: the conversation's id in the API's paths.
    pub conversation: String,
    pub user_id: Option<String>,
    /// The name of the key that took it over, or `agent` when the agent asked for a person.
    pub held_by: String,
    pub by_agent: bool,
    /// What the agent gave as its reason (or the person typed).
    pub reason: Option<String>,
    pub held_at: chrono::DateTime<chrono::Utc>,
}

impl From<db::holds::Hold> for Hold {
    fn from(row: db::holds::Hold) -> Self {
        let db::holds::Hold {
            conversation,
            user_id,
            held_by,
            by_agent,
            reason,
            held_at,
        } = row;
        Self {
            conversation,
            user_id,
            held_by,
            by_agent,
            reason,
            held_at,
        }
    }
}

/// A hold with the conversation's latest turn, for the held list.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct HeldConversation {
    #[serde(flatten)]
    pub hold: Hold,
    pub last_turn_at: Option<chrono::DateTime<chrono::Utc>>,
    /// The latest turn is the user's and nobody has answered it yet.
    pub waiting: bool,
}

impl From<db::holds::HeldConversation> for HeldConversation {
    fn from(row: db::holds::HeldConversation) -> Self {
        Self {
            hold: row.hold.into(),
            last_turn_at: row.last_turn_at,
            waiting: row.waiting,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct HoldOut {
    #[serde(flatten)]
    pub hold: Hold,
    /// `false`: it was already held (the earlier hold stands).
    pub taken: bool,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct HandBackOut {
    pub conversation: String,
    /// `false`: it was not held.
    pub released: bool,
    /// The user's last turn, unanswered while held, now queued for the agent.
    pub dispatched: Option<uuid::Uuid>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"content": "Hi, this is Dana from support: your refund is on its way.", "idempotency_key": "d1c7e2a0"}))]
pub struct PersonMessageIn {
    /// Markdown, rendered for the platform like an agent's answer. Not blank.
    #[schema(
        min_length = 1,
        max_length = 20000,
        pattern = r"^[^\u0000]*[^\u0000\t-\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000][^\u0000]*$"
    )]
    pub content: String,
    /// The same key again posts nothing twice (and answers 200 with the first message).
    /// Without one, every request posts.
    #[schema(max_length = 200, pattern = r"^[^\u0000]*$")]
    #[serde(default)]
    pub idempotency_key: Option<String>,
    /// Buttons posted with `content`, as an agent offers them (docs/agent.md#offering-choices):
    /// the user's tap goes to the agent once the conversation is handed back, or waits
    /// `held` until then.
    #[serde(default)]
    pub choices: Option<Vec<crate::choices::Choice>>,
    #[serde(default)]
    pub choices_reusable: bool,
    /// Files posted after `content` (docs/agent.md#files-and-reactions-in-answers).
    #[serde(default)]
    pub attachments: Vec<FileIn>,
}

impl PersonMessageIn {
    fn check(&self) -> Result<(), AppError> {
        if self.content.trim().is_empty() {
            return Err(AppError::Unprocessable("content must not be empty".into()));
        }
        schema::check_text("content", &self.content, TEXT_MAX)?;
        schema::check_optional_text("idempotency_key", self.idempotency_key.as_deref(), 200)?;
        Ok(())
    }

    /// The caller's idempotency key, unless blank.
    fn key(&self) -> Option<&str> {
        self.idempotency_key
            .as_deref()
            .filter(|key| !key.trim().is_empty())
    }

    /// The message made ready for `platform` (422 when it cannot post it).
    fn reply(&self, platform: Platform, markdown: bool) -> Result<Reply, AppError> {
        let ask = Ask {
            texts: vec![self.content.clone()],
            choices: self.choices.clone().map(|items| crate::choices::Choices {
                items,
                reusable: self.choices_reusable,
            }),
            files: self.attachments.clone(),
            react: None,
        };
        crate::delivery::split::reply(platform, markdown, ask)
            .map_err(|unfit| AppError::Unprocessable(unfit.to_string()))
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct PersonMessageOut {
    /// The person's turn (`GET /v1/admin/messages/{id}` shows its reply parts as posted).
    pub message_id: uuid::Uuid,
    pub conversation: String,
    #[schema(schema_with = schema::platform)]
    pub platform: String,
    /// The user's message it is threaded to.
    pub reply_to: uuid::Uuid,
    pub parts: usize,
    /// `false`: posted before under the same idempotency key.
    pub created: bool,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct HeldOut {
    pub conversations: Vec<HeldConversation>,
    /// More are held than listed.
    pub more: bool,
}

/// Hold a conversation for a person: its user's next turns are recorded (`held`) and not
/// sent to the agent until it is handed back. A turn already with the agent is answered.
#[utoipa::path(post, path = "/v1/admin/conversations/{conversation}/take-over", operation_id = "take_over_conversation", tag = "conversations",
    params(ConversationPath), request_body(content = TakeOverIn, description = "Optional"), security(("api_key" = [])),
    responses((status = 200, body = HoldOut), (status = 400, body = ApiJsonError), (status = 401, body = ApiJsonError), (status = 404, body = ApiJsonError), (status = 413, body = ApiJsonError), (status = 422, body = ApiJsonError)))]
pub async fn post_take_over(
    State(state): State<AppState>,
    admin: TenantAdmin,
    ApiPath(ConversationPath { conversation }): ApiPath<ConversationPath>,
    ApiJsonOrNone(input): ApiJsonOrNone<TakeOverIn>,
) -> Result<Json<HoldOut>, AppError> {
    let person = Person::of_key(&state.pool, admin.key_id).await?;
    let out = take_over(
        &state.pool,
        admin.tenant,
        &person,
        &conversation,
        input.reason.as_deref(),
    )
    .await?;
    Ok(Json(out))
}

pub async fn take_over(
    pool: &PgPool,
    tenant: TenantId,
    person: &Person,
    conversation: &str,
    reason: Option<&str>,
) -> Result<HoldOut, AppError> {
    let parsed = parse(conversation)?;
    schema::check_optional_text("reason", reason, 500)?;
    let mut tx = TenantTx::begin(pool, tenant).await?;
    let Some(turn) = handoff::last_user_turn(&mut tx, parsed).await? else {
        return Err(AppError::NotFound("conversation"));
    };
    let taken = handoff::take_over(&mut tx, person, &turn, reason).await?;
    let hold = db::holds::get(&mut tx, turn.conversation_key.as_str())
        .await?
        .ok_or(AppError::NotFound("conversation"))?;
    tx.commit().await?;
    Ok(HoldOut {
        hold: hold.into(),
        taken,
    })
}

/// Give the conversation back to the agent. If its user's last turn went unanswered while
/// held, that turn is sent to the agent now, with everything said meanwhile (the person's
/// messages too) in its history. A conversation of the tenant that is not held answers
/// `released: false`; one the tenant does not have (unknown, or another tenant's) is 404.
#[utoipa::path(post, path = "/v1/admin/conversations/{conversation}/hand-back", operation_id = "hand_back_conversation", tag = "conversations",
    params(ConversationPath), security(("api_key" = [])),
    responses((status = 200, body = HandBackOut), (status = 401, body = ApiJsonError), (status = 404, body = ApiJsonError)))]
pub async fn post_hand_back(
    State(state): State<AppState>,
    admin: TenantAdmin,
    ApiPath(ConversationPath { conversation }): ApiPath<ConversationPath>,
) -> Result<Json<HandBackOut>, AppError> {
    let out = hand_back(&state, admin.tenant, Actor::ApiKey(admin.key_id), &conversation).await?;
    Ok(Json(out))
}

pub async fn hand_back(
    state: &AppState,
    tenant: TenantId,
    actor: Actor,
    conversation: &str,
) -> Result<HandBackOut, AppError> {
    let parsed = parse(conversation)?;
    let mut tx = TenantTx::begin(&state.pool, tenant).await?;
    let back = handoff::hand_back(&mut tx, actor, conversation, parsed).await?;
    // Not held: 404 unless the tenant has the conversation, as take-over answers (a hold
    // outlives its turns, erased or past retention, so the hold is released first).
    if !back.released && handoff::last_user_turn(&mut tx, parsed).await?.is_none() {
        return Err(AppError::NotFound("conversation"));
    }
    tx.commit().await?;
    if back.dispatched.is_some() {
        state.wake_workers();
    }
    Ok(HandBackOut {
        conversation: conversation.to_owned(),
        released: back.released,
        dispatched: back.dispatched.map(|id| id.0),
    })
}

/// Write to the user as a person: the message is posted like an agent's answer (Markdown
/// rendered, split, threaded to the user's latest message, each part exactly once) and
/// recorded as a turn of its own, so the agent sees it in later histories. Writing holds
/// the conversation if it was not held: the agent does not answer over a person.
#[utoipa::path(post, path = "/v1/admin/conversations/{conversation}/messages", operation_id = "post_person_message", tag = "conversations",
    params(ConversationPath), request_body = PersonMessageIn, security(("api_key" = [])),
    responses((status = 201, body = PersonMessageOut), (status = 200, body = PersonMessageOut, description = "Posted before under the same idempotency key"),
        (status = 400, body = ApiJsonError), (status = 401, body = ApiJsonError), (status = 404, body = ApiJsonError), (status = 413, body = ApiJsonError), (status = 422, body = ApiJsonError)))]
pub async fn post_message(
    State(state): State<AppState>,
    admin: TenantAdmin,
    ApiPath(ConversationPath { conversation }): ApiPath<ConversationPath>,
    ApiJson(input): ApiJson<PersonMessageIn>,
) -> Result<(StatusCode, Json<PersonMessageOut>), AppError> {
    let person = Person::of_key(&state.pool, admin.key_id).await?;
    let out = post_person_message(&state, admin.tenant, &person, &conversation, &input).await?;
    let status = if out.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(out)))
}

pub async fn post_person_message(
    state: &AppState,
    tenant: TenantId,
    person: &Person,
    conversation: &str,
    input: &PersonMessageIn,
) -> Result<PersonMessageOut, AppError> {
    let parsed = parse(conversation)?;
    input.check()?;
    let fresh = MessageId::new().to_string();
    let key = input.key().unwrap_or(&fresh);
    let mut tx = TenantTx::begin(&state.pool, tenant).await?;
    let Some(target) = handoff::last_user_turn(&mut tx, parsed).await? else {
        return Err(AppError::NotFound("conversation"));
    };
    let connector =
        db::connectors::get(&mut tx, &state.settings.database.secrets, target.connector_id).await?;
    let markdown = connector.as_ref().is_some_and(|c| c.profile.format_markdown);
    let turn = PersonTurn {
        author: &person.name,
        text: &input.content,
        reply: input.reply(target.platform, markdown)?,
        idempotency_key: key,
    };
    let posted = handoff::answer(&mut tx, person, &target, &turn).await?;
    tx.commit().await?;
    let (id, created) = match posted {
        Posted::New(id) => {
            state.wake_workers();
            (id, true)
        }
        Posted::Repeat(id) => (id, false),
    };
    Ok(PersonMessageOut {
        message_id: id.0,
        conversation: target.conversation_key.into(),
        platform: target.platform.to_string(),
        reply_to: target.id.0,
        parts: turn.reply.len(),
        created,
    })
}

/// The conversations a person holds, oldest hold first, each with whether its user is
/// waiting for an answer.
#[utoipa::path(get, path = "/v1/admin/conversations/held", operation_id = "list_held_conversations", tag = "conversations",
    security(("api_key" = [])),
    responses((status = 200, body = HeldOut), (status = 401, body = ApiJsonError)))]
pub async fn get_held(State(state): State<AppState>, admin: TenantAdmin) -> Result<Json<HeldOut>, AppError> {
    Ok(Json(held(&state.pool, admin.tenant).await?))
}

pub async fn held(pool: &PgPool, tenant: TenantId) -> Result<HeldOut, AppError> {
    let mut tx = TenantTx::begin(pool, tenant).await?;
    let mut conversations = db::holds::list(&mut tx, HELD_LIST_MAX + 1).await?;
    tx.commit().await?;
    let more = conversations.len() > HELD_LIST_MAX as usize;
    conversations.truncate(HELD_LIST_MAX as usize);
    let conversations = conversations.into_iter().map(HeldConversation::from).collect();
    Ok(HeldOut { conversations, more })
}
