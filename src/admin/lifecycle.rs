//! Erasing a person and exporting history (`crate::lifecycle`), for tenant admins.

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::auth::TenantAdmin;
use super::links::LinkPath;
use super::messages::{MessageOut, ReactionOut, ReplyPartOut};
use super::schema;
use crate::db::audit::Actor;
use crate::domain::Platform;
use crate::error::{ApiJsonError, AppError};
use crate::http::extract::{ApiPath, ApiQuery};
use crate::http::state::AppState;
use crate::lifecycle::export::{Export, Turn};
use crate::lifecycle::{self, erasure, Person};

pub const NDJSON: &str = "application/x-ndjson";

/// One line of an export.
#[derive(Debug, Serialize, ToSchema)]
pub struct ExportLine {
    #[serde(flatten)]
    pub message: MessageOut,
    pub reply_parts: Vec<ReplyPartOut>,
    /// People's reactions to the answer, each person's latest.
    pub reactions: Vec<ReactionOut>,
}

impl From<Turn> for ExportLine {
    fn from((message, parts, reactions): Turn) -> Self {
        Self {
            message: message.into(),
            reply_parts: parts.into_iter().map(ReplyPartOut::from).collect(),
            reactions: reactions.into_iter().map(ReactionOut::from).collect(),
        }
    }
}

// The API's view of `lifecycle::Erased`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, ToSchema)]
#[schema(example = json!({"turns": 12, "reply_parts": 14, "jobs": 1, "links": 2, "notices": 0, "reactions": 1}))]
pub struct Erased {
    /// The person's turns (`channel_messages`), on every platform.
    pub turns: u64,
    /// The reply parts of those turns.
    pub reply_parts: u64,
    /// Queued or running jobs of those turns (a reply in flight is not posted after this).
    pub jobs: u64,
    pub links: u64,
    /// The once-a-day marks of notices posted to the person's accounts while unlinked.
    pub notices: u64,
    /// The person's reactions to answers given to others (in a shared chat); those on
    /// their own turns go with the turns.
    pub reactions: u64,
}

impl From<lifecycle::Erased> for Erased {
    fn from(erased: lifecycle::Erased) -> Self {
        let lifecycle::Erased {
            turns,
            reply_parts,
            jobs,
            links,
            notices,
            reactions,
        } = erased;
        Self {
            turns,
            reply_parts,
            jobs,
            links,
            notices,
            reactions,
        }
    }
}

/// Whose history an export holds; every field narrows, none is the whole tenant.
#[derive(Debug, Default, Clone, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ExportQuery {
    /// A tenant user: their turns under that id, and those their linked accounts sent
    /// before they were linked (what erasing the user deletes).
    #[param(max_length = 256, pattern = r"^[^\u0000]*$")]
    pub user_id: Option<String>,
    /// One platform account, `<platform>:<platform user id>` (`telegram:408258968`): every
    /// turn it sent, linked or not. The id is at most 256 characters (262 in all is the
    /// bound for the shortest platform name).
    #[param(max_length = 262, pattern = r"^(slack|whatsapp|telegram):[^\u0000]*$")]
    pub sender: Option<String>,
}

impl ExportQuery {
    fn people(&self) -> Result<Vec<Person>, AppError> {
        let mut people = Vec::new();
        if let Some(user) = &self.user_id {
            schema::check_text("user_id", user, schema::ID_MAX)?;
            people.push(Person::User(user.clone()));
        }
        if let Some(sender) = &self.sender {
            people.push(parse_sender(sender)?);
        }
        Ok(people)
    }
}

/// `<platform>:<platform user id>`.
pub fn parse_sender(sender: &str) -> Result<Person, AppError> {
    let (platform, id) = sender
        .split_once(':')
        .ok_or_else(|| AppError::Unprocessable("sender must be <platform>:<platform user id>".into()))?;
    let platform: Platform = platform
        .parse()
        .map_err(|e: crate::domain::UnknownPlatform| AppError::Unprocessable(e.to_string()))?;
    schema::check_text("sender", id, schema::ID_MAX)?;
    Ok(Person::Sender {
        platform,
        platform_user_id: id.to_owned(),
    })
}

/// Erase a tenant user: their turns on every platform (with reply parts and queued jobs),
/// the turns their linked accounts sent before they were linked, their links and the
/// notice marks of those accounts, in one transaction; nothing of anyone else. Answers what
/// was deleted (zeros when nothing was there) and records it in the audit log.
#[utoipa::path(post, path = "/v1/admin/users/{user_id}/erase", operation_id = "erase_user", tag = "lifecycle",
    params(("user_id" = String, Path, max_length = 256, pattern = r"^[^\u0000]*$")),
    security(("api_key" = [])),
    responses((status = 200, body = Erased), (status = 401, body = ApiJsonError), (status = 404, body = ApiJsonError)))]
pub async fn erase_user(
    State(state): State<AppState>,
    admin: TenantAdmin,
    ApiPath(user_id): ApiPath<String>,
) -> Result<Json<Erased>, AppError> {
    // An id no link can hold names no user.
    if !schema::names_something(&user_id, schema::ID_MAX) {
        return Err(AppError::NotFound("user"));
    }
    let person = Person::User(user_id);
    let actor = Actor::ApiKey(admin.key_id);
    let erased = erasure::erase(&state.pool, admin.tenant, &person, actor).await?;
    Ok(Json(erased.into()))
}

/// Erase one platform account (an unlinked sender, or one account of a user): every turn
/// it sent, linked or not (with reply parts and queued jobs), its link and its notice
/// marks, in one transaction. Answers what was deleted and records it in the audit log.
#[utoipa::path(post, path = "/v1/admin/senders/{platform}/{platform_user_id}/erase", operation_id = "erase_sender", tag = "lifecycle",
    params(LinkPath),
    security(("api_key" = [])),
    responses((status = 200, body = Erased), (status = 401, body = ApiJsonError), (status = 404, body = ApiJsonError)))]
pub async fn erase_sender(
    State(state): State<AppState>,
    admin: TenantAdmin,
    ApiPath(LinkPath {
        platform,
        platform_user_id,
    }): ApiPath<LinkPath>,
) -> Result<Json<Erased>, AppError> {
    let platform: Platform = platform.parse().map_err(|_| AppError::NotFound("sender"))?;
    if !schema::names_something(&platform_user_id, schema::ID_MAX) {
        return Err(AppError::NotFound("sender"));
    }
    let person = Person::Sender {
        platform,
        platform_user_id,
    };
    let actor = Actor::ApiKey(admin.key_id);
    let erased = erasure::erase(&state.pool, admin.tenant, &person, actor).await?;
    Ok(Json(erased.into()))
}

/// Export history as JSON Lines (`application/x-ndjson`): one line per turn, oldest first,
/// with the listing's fields and the turn's `reply_parts`. Streamed page by page (200
/// turns per database transaction), so any size of tenant can be exported; a failure after
/// the first page cuts the stream short (the body ends without its final chunk).
#[utoipa::path(get, path = "/v1/admin/export", operation_id = "export_history", tag = "lifecycle", params(ExportQuery),
    security(("api_key" = [])),
    responses((status = 200, description = "One JSON object (ExportLine) per line", content_type = "application/x-ndjson", body = ExportLine),
        (status = 400, body = ApiJsonError), (status = 401, body = ApiJsonError), (status = 422, body = ApiJsonError)))]
pub async fn export(
    State(state): State<AppState>,
    admin: TenantAdmin,
    ApiQuery(query): ApiQuery<ExportQuery>,
) -> Result<Response, AppError> {
    let people = query.people()?;
    let deadline = std::time::Duration::from_millis(state.settings.admin_deadline_ms);
    let mut export = Export::<ExportLine>::new(state.pool.clone(), admin.tenant, people, deadline);
    let first = export.next_chunk().await?;
    let body = axum::body::Body::from_stream(export.into_stream(first));
    Ok(([(header::CONTENT_TYPE, NDJSON)], body).into_response())
}
