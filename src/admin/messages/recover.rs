//! Redispatch and resend, for one message or many by filter
//! (docs/admin.md#failed-turns-seeing-them-and-acting-on-them). Idempotent: a turn that has a
//! job is never queued again, so a repeated call queues nothing and says so.

use std::borrow::Cow;
use std::sync::OnceLock;

use axum::extract::State;
use axum::Json;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::json;
use sqlx::PgPool;
use utoipa::openapi::{ObjectBuilder, RefOr, Schema};
use utoipa::{IntoParams, PartialSchema, ToSchema};
use uuid::Uuid;

use crate::admin::auth::TenantAdmin;
use crate::admin::schema;
use crate::api_schema::{self, Body, FromBody};
use crate::db::audit::{Actor, AuditAction, AuditEntry};
use crate::db::{self, TenantTx};
use crate::domain::{MessageId, MessageStatus, TenantId};
use crate::error::{ApiJsonError, AppError};
use crate::http::extract::{ApiJson, ApiPath, ApiQuery};
use crate::http::state::AppState;
use crate::shapes::MessageSelection;
use crate::turn::requeue::{self, Requeued, Selection};

pub const DEFAULT_ACTION_LIMIT: i64 = 100;
/// Bounds the transaction: every turn taken gets its job in it.
pub const MAX_ACTION_LIMIT: i64 = 1000;

/// Which turns a bulk action takes: the selection (every field set narrows it, with the
/// listing's meaning; `{}` takes every turn the action applies to), at most `limit`. The
/// resend body (`ResendFilterIn` in the document), and what the CLI hands to either action.
#[derive(Debug, Default, Clone)]
pub struct ActionFilterIn {
    pub matching: MessageSelection,
    pub limit: Option<i64>,
    /// Resend only.
    pub include_unknown: Option<bool>,
}

/// The bulk redispatch body: an `ActionFilterIn` without `include_unknown`, which is refused
/// as an unknown field (it applies to resend only).
#[derive(Debug, Default, Clone)]
pub struct RedispatchFilterIn(pub ActionFilterIn);

impl FromBody for ActionFilterIn {
    fn fields() -> &'static [&'static str] {
        Recovery::Resend.fields()
    }

    fn from_body<E: serde::de::Error>(body: &Body) -> Result<Self, E> {
        Ok(Self {
            matching: body.part()?,
            limit: body.field("limit", schema::optional_integer)?,
            include_unknown: body.field("include_unknown", Option::<bool>::deserialize)?,
        })
    }
}

impl FromBody for RedispatchFilterIn {
    fn fields() -> &'static [&'static str] {
        Recovery::Redispatch.fields()
    }

    fn from_body<E: serde::de::Error>(body: &Body) -> Result<Self, E> {
        ActionFilterIn::from_body(body).map(Self)
    }
}

impl<'de> Deserialize<'de> for ActionFilterIn {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        api_schema::read_body(deserializer)
    }
}

impl<'de> Deserialize<'de> for RedispatchFilterIn {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        api_schema::read_body(deserializer)
    }
}

impl PartialSchema for ActionFilterIn {
    fn schema() -> RefOr<Schema> {
        Recovery::Resend.body_schema()
    }
}

impl ToSchema for ActionFilterIn {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("ResendFilterIn")
    }
}

impl PartialSchema for RedispatchFilterIn {
    fn schema() -> RefOr<Schema> {
        Recovery::Redispatch.body_schema()
    }
}

impl ToSchema for RedispatchFilterIn {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("RedispatchFilterIn")
    }
}

/// `include_unknown` of the one-message resend.
#[derive(Debug, Default, Clone, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ResendQuery {
    /// Also post again the parts whose outcome is `unknown` (they may already be in the
    /// chat: a resend can double them).
    pub include_unknown: Option<bool>,
}

/// What a recovery action queued.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({"queued": 2, "ids": ["0192f0c4-7a6e-7b3a-9c1d-2e4f5a6b7c8d", "0192f0c4-8b7f-7c4b-8d2e-3f5a6b7c8d9e"], "more": false}))]
pub struct QueuedOut {
    /// How many turns this call queued (0 when they were already queued or delivered).
    pub queued: usize,
    /// The queued turns, oldest first (the order their jobs run in).
    pub ids: Vec<Uuid>,
    /// More turns match than this call's `limit` took: call again for the next ones.
    pub more: bool,
}

impl From<Requeued> for QueuedOut {
    fn from(requeued: Requeued) -> Self {
        Self {
            queued: requeued.ids.len(),
            ids: requeued.ids.into_iter().map(|id| id.0).collect(),
            more: requeued.more,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recovery {
    Redispatch,
    Resend,
}

impl Recovery {
    async fn apply(
        self,
        tx: &mut TenantTx,
        selection: &Selection,
        include_unknown: bool,
    ) -> Result<Requeued, sqlx::Error> {
        match self {
            Recovery::Redispatch => requeue::redispatch(tx, selection).await,
            Recovery::Resend => requeue::resend(tx, selection, include_unknown).await,
        }
    }

    /// Ids and counts only; `target` is the message, or `messages` for a bulk call.
    fn audit(self, actor: Actor, target: String, requeued: &Requeued, include_unknown: bool) -> AuditEntry {
        let action = match self {
            Recovery::Redispatch => AuditAction::MessagesRedispatch,
            Recovery::Resend => AuditAction::MessagesResend,
        };
        let mut details =
            serde_json::json!({"queued": requeued.ids.len(), "ids": requeued.ids, "more": requeued.more});
        if self == Recovery::Resend {
            details["include_unknown"] = include_unknown.into();
        }
        AuditEntry::new(actor, action, target, details)
    }

    fn statuses(self) -> &'static [MessageStatus] {
        match self {
            Recovery::Redispatch => &[MessageStatus::DispatchFailed],
            Recovery::Resend => &[MessageStatus::DeliveryFailed, MessageStatus::Executed],
        }
    }

    /// The fields of its bulk body: the selection's, `limit`, and resend's `include_unknown`.
    fn fields(self) -> &'static [&'static str] {
        static REDISPATCH: OnceLock<Vec<&str>> = OnceLock::new();
        static RESEND: OnceLock<Vec<&str>> = OnceLock::new();
        let (fields, own): (_, &[&'static str]) = match self {
            Recovery::Redispatch => (&REDISPATCH, &["limit"]),
            Recovery::Resend => (&RESEND, &["limit", "include_unknown"]),
        };
        fields.get_or_init(|| MessageSelection::fields().iter().chain(own).copied().collect())
    }

    /// The selection's body fields with this action's statuses, then `limit` and resend's
    /// `include_unknown`; no other field.
    fn body_schema(self) -> RefOr<Schema> {
        use utoipa::openapi::schema::{AdditionalProperties, KnownFormat, SchemaFormat, SchemaType, Type};
        let RefOr::T(Schema::Object(mut body)) = MessageSelection::schema() else {
            unreachable!("a struct's derived schema is an object")
        };
        let nullable = |kind: Type| SchemaType::from_iter([kind, Type::Null]);
        let limit = ObjectBuilder::new()
            .schema_type(nullable(Type::Integer))
            .format(Some(SchemaFormat::KnownFormat(KnownFormat::Int64)))
            .description(Some("Most turns this call queues (default 100), oldest first."))
            .minimum(Some(1))
            .maximum(Some(MAX_ACTION_LIMIT));
        body.properties.insert("limit".into(), limit.into());
        let (statuses, description, example) = match self {
            Recovery::Redispatch => (
                schema::optional_redispatch_status(),
                "Which `dispatch_failed` turns a bulk redispatch takes: the resend filter's \
                 fields, but for `include_unknown`.",
                json!({"connector_id": "0192f0c4-7a6e-7b3a-9c1d-2e4f5a6b7c8d", "until": "2026-11-22T12:00:00Z"}),
            ),
            Recovery::Resend => {
                let include_unknown = ObjectBuilder::new()
                    .schema_type(nullable(Type::Boolean))
                    .description(Some(
                        "Also post again the parts whose outcome is `unknown` (Telegram \
                         at-most-once). They may already be in the chat, so a resend can double them.",
                    ));
                body.properties
                    .insert("include_unknown".into(), include_unknown.into());
                (
                    schema::optional_resend_status(),
                    "Which turns a bulk resend takes. Every field that is set narrows the \
                     choice, with the listing's meaning; `{}` takes every turn the action applies \
                     to (up to `limit`).",
                    json!({"platform": "telegram", "status": "delivery_failed", "since": "2026-11-22T00:00:00Z", "limit": 100}),
                )
            }
        };
        body.properties.insert("status".into(), statuses.into());
        if let Some(RefOr::T(Schema::Object(since))) = body.properties.get_mut("since") {
            since.description = Some("Received at or after (RFC 3339); before `until` (else 422).".into());
        }
        body.description = Some(description.into());
        body.example = Some(example);
        body.additional_properties = Some(Box::new(AdditionalProperties::FreeForm(false)));
        RefOr::T(Schema::Object(body))
    }
}

fn selection_of(filter: &ActionFilterIn, action: Recovery) -> Result<Selection, AppError> {
    let unprocessable = |message: String| AppError::Unprocessable(message);
    let limit = filter.limit.unwrap_or(DEFAULT_ACTION_LIMIT);
    if !(1..=MAX_ACTION_LIMIT).contains(&limit) {
        return Err(unprocessable(format!(
            "limit must be between 1 and {MAX_ACTION_LIMIT}"
        )));
    }
    let matching = &filter.matching;
    if let Some(status) = matching.status.filter(|s| !action.statuses().contains(s)) {
        return Err(unprocessable(match action {
            Recovery::Redispatch => format!(
                "redispatch applies to dispatch_failed messages, not {status} (resend posts the \
                 undelivered parts of answered ones)"
            ),
            Recovery::Resend => format!(
                "resend applies to answered messages (delivery_failed or executed), not {status} \
                 (redispatch asks the agent again for dispatch_failed ones)"
            ),
        }));
    }
    if let (Some(since), Some(until)) = (matching.since, matching.until) {
        if since >= until {
            return Err(unprocessable("since must be before until".into()));
        }
    }
    schema::check_optional_text("user_id", matching.user_id.as_deref(), schema::ID_MAX)?;
    if action == Recovery::Redispatch && filter.include_unknown.is_some() {
        return Err(unprocessable("include_unknown applies to resend only".into()));
    }
    Ok(Selection {
        ids: None,
        matching: matching.clone(),
        limit,
    })
}

/// A call that queued nothing is not audited.
pub async fn recover_many(
    pool: &PgPool,
    tenant: TenantId,
    action: Recovery,
    filter: &ActionFilterIn,
    actor: Actor,
) -> Result<QueuedOut, AppError> {
    let selection = selection_of(filter, action)?;
    let include_unknown = filter.include_unknown.unwrap_or(false);
    let mut tx = TenantTx::begin(pool, tenant).await?;
    let requeued = action.apply(&mut tx, &selection, include_unknown).await?;
    if !requeued.ids.is_empty() {
        let entry = action.audit(actor, "messages".into(), &requeued, include_unknown);
        db::audit::record(&mut tx, &entry).await?;
    }
    tx.commit().await?;
    Ok(requeued.into())
}

/// 404 for an unknown id and for another tenant's alike.
pub async fn recover_one(
    pool: &PgPool,
    tenant: TenantId,
    action: Recovery,
    id: Uuid,
    include_unknown: bool,
    actor: Actor,
) -> Result<QueuedOut, AppError> {
    let id = MessageId(id);
    let selection = Selection {
        ids: Some(vec![id]),
        limit: 1,
        ..Selection::default()
    };
    let mut tx = TenantTx::begin(pool, tenant).await?;
    let requeued = action.apply(&mut tx, &selection, include_unknown).await?;
    if requeued.ids.is_empty() {
        let row = db::messages::get(&mut tx, id)
            .await?
            .ok_or(AppError::NotFound("message"))?;
        refuse_if_never_applies(action, row.status)?;
    } else {
        let entry = action.audit(actor, id.0.to_string(), &requeued, include_unknown);
        db::audit::record(&mut tx, &entry).await?;
    }
    tx.commit().await?;
    Ok(requeued.into())
}

/// A turn on its way is not refused: the action has nothing to add, and says so.
fn refuse_if_never_applies(action: Recovery, status: MessageStatus) -> Result<(), AppError> {
    use MessageStatus::*;
    match (action, status) {
        (Recovery::Redispatch, DispatchFailed | AwaitingAgent | Accepted | Dispatching) => Ok(()),
        (Recovery::Redispatch, Executed | DeliveryFailed | DeniedUnlinked | Ignored | Held) => Err(
            AppError::Conflict("only a dispatch_failed message can be redispatched"),
        ),
        (Recovery::Resend, Executed | DeliveryFailed) => Ok(()),
        (
            Recovery::Resend,
            Accepted | Dispatching | DispatchFailed | DeniedUnlinked | Ignored | Held | AwaitingAgent,
        ) => Err(AppError::Conflict(
            "only an answered message (executed or delivery_failed) can be resent",
        )),
    }
}

/// Ask the agent again for a `dispatch_failed` message: it is queued as if it had just
/// arrived. A message already queued again answers `queued: 0`.
#[utoipa::path(post, path = "/v1/admin/messages/{id}/redispatch", operation_id = "redispatch_message", tag = "messages", params(("id" = Uuid, Path)),
    security(("api_key" = [])),
    responses((status = 200, body = QueuedOut), (status = 401, body = ApiJsonError), (status = 404, body = ApiJsonError), (status = 409, body = ApiJsonError)))]
pub async fn post_redispatch(
    State(state): State<AppState>,
    admin: TenantAdmin,
    ApiPath(id): ApiPath<Uuid>,
) -> Result<Json<QueuedOut>, AppError> {
    let actor = Actor::ApiKey(admin.key_id);
    let out = recover_one(&state.pool, admin.tenant, Recovery::Redispatch, id, false, actor).await?;
    Ok(Json(wake_if_queued(&state, out)))
}

/// Post the undelivered parts of an answered message again: its `failed` parts (and its
/// `unknown` ones with `include_unknown=true`); `sent` parts are never posted again. A
/// message already queued or delivered answers `queued: 0`.
#[utoipa::path(post, path = "/v1/admin/messages/{id}/resend", operation_id = "resend_message", tag = "messages",
    params(("id" = Uuid, Path), ResendQuery),
    security(("api_key" = [])),
    responses((status = 200, body = QueuedOut), (status = 401, body = ApiJsonError), (status = 404, body = ApiJsonError), (status = 409, body = ApiJsonError), (status = 422, body = ApiJsonError)))]
pub async fn post_resend(
    State(state): State<AppState>,
    admin: TenantAdmin,
    ApiPath(id): ApiPath<Uuid>,
    ApiQuery(query): ApiQuery<ResendQuery>,
) -> Result<Json<QueuedOut>, AppError> {
    let include_unknown = query.include_unknown.unwrap_or(false);
    let actor = Actor::ApiKey(admin.key_id);
    let out = recover_one(
        &state.pool,
        admin.tenant,
        Recovery::Resend,
        id,
        include_unknown,
        actor,
    )
    .await?;
    Ok(Json(wake_if_queued(&state, out)))
}

/// Redispatch the `dispatch_failed` messages the filter selects, oldest first, at most
/// `limit` (default 100, at most 1000) per call.
#[utoipa::path(post, path = "/v1/admin/messages/redispatch", operation_id = "redispatch_messages", tag = "messages", request_body = RedispatchFilterIn,
    security(("api_key" = [])),
    responses((status = 200, body = QueuedOut), (status = 400, body = ApiJsonError), (status = 401, body = ApiJsonError), (status = 413, body = ApiJsonError), (status = 422, body = ApiJsonError)))]
pub async fn post_redispatch_many(
    State(state): State<AppState>,
    admin: TenantAdmin,
    ApiJson(RedispatchFilterIn(filter)): ApiJson<RedispatchFilterIn>,
) -> Result<Json<QueuedOut>, AppError> {
    let actor = Actor::ApiKey(admin.key_id);
    let out = recover_many(&state.pool, admin.tenant, Recovery::Redispatch, &filter, actor).await?;
    Ok(Json(wake_if_queued(&state, out)))
}

/// Resend the undelivered parts of the answered messages the filter selects, oldest first,
/// at most `limit` (default 100, at most 1000) per call.
#[utoipa::path(post, path = "/v1/admin/messages/resend", operation_id = "resend_messages", tag = "messages", request_body = ActionFilterIn,
    security(("api_key" = [])),
    responses((status = 200, body = QueuedOut), (status = 400, body = ApiJsonError), (status = 401, body = ApiJsonError), (status = 413, body = ApiJsonError), (status = 422, body = ApiJsonError)))]
pub async fn post_resend_many(
    State(state): State<AppState>,
    admin: TenantAdmin,
    ApiJson(filter): ApiJson<ActionFilterIn>,
) -> Result<Json<QueuedOut>, AppError> {
    let actor = Actor::ApiKey(admin.key_id);
    let out = recover_many(&state.pool, admin.tenant, Recovery::Resend, &filter, actor).await?;
    Ok(Json(wake_if_queued(&state, out)))
}

/// This instance's workers at once, the others by `NOTIFY`.
fn wake_if_queued(state: &AppState, out: QueuedOut) -> QueuedOut {
    if out.queued > 0 {
        state.wake_workers();
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;
    use crate::domain::Platform;

    fn resend(body: Value) -> Result<ActionFilterIn, String> {
        serde_json::from_value(body).map_err(|e| e.to_string())
    }

    fn redispatch(body: Value) -> Result<ActionFilterIn, String> {
        serde_json::from_value::<RedispatchFilterIn>(body)
            .map(|body| body.0)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn a_body_reads_the_selection_typed_and_its_own_fields() {
        let filter = resend(
            json!({"platform": "telegram", "status": "executed", "limit": 100.0,
            "include_unknown": true, "since": null}),
        )
        .expect("a good body");
        assert_eq!(filter.matching.platform, Some(Platform::Telegram));
        assert_eq!(filter.matching.status, Some(MessageStatus::Executed));
        assert_eq!((filter.limit, filter.include_unknown), (Some(100), Some(true)));
        assert!(redispatch(json!({})).is_ok_and(|filter| filter.limit.is_none()));
    }

    #[test]
    fn an_unknown_field_or_a_bad_value_is_refused_by_name() {
        for (refused, says) in [
            (
                redispatch(json!({"include_unknown": null})),
                "unknown field `include_unknown`, expected one of `user_id`, `platform`, \
                 `connector_id`, `status`, `since`, `until`, `limit`",
            ),
            (
                resend(json!({"connector": "x"})),
                "unknown field `connector`, expected one of `user_id`, `platform`, \
                 `connector_id`, `status`, `since`, `until`, `limit`, `include_unknown`",
            ),
            (
                resend(json!({"status": "nope"})),
                "status: unknown message status `nope`",
            ),
            (
                resend(json!({"platform": "irc"})),
                "platform: unknown platform `irc`",
            ),
            (resend(json!({"since": "yesterday"})), "since: "),
            (resend(json!({"limit": 1.5})), "limit: "),
            (resend(json!({"include_unknown": "yes"})), "include_unknown: "),
        ] {
            let refused = refused.expect_err(says);
            assert!(refused.starts_with(says), "{refused}");
        }
    }

    #[test]
    fn each_body_documents_its_own_statuses_and_no_other_field() {
        let document = |schema: RefOr<Schema>| serde_json::to_value(schema).unwrap_or_default();
        let resend = document(ActionFilterIn::schema());
        let redispatch = document(RedispatchFilterIn::schema());
        assert_eq!(
            resend["properties"]["status"]["enum"],
            json!(["delivery_failed", "executed", null])
        );
        assert_eq!(
            redispatch["properties"]["status"]["enum"],
            json!(["dispatch_failed", null])
        );
        for (schema, action) in [(&resend, Recovery::Resend), (&redispatch, Recovery::Redispatch)] {
            let mut fields = action.fields().to_vec();
            fields.sort_unstable();
            let documented: Vec<&str> = schema["properties"]
                .as_object()
                .map(|properties| properties.keys().map(String::as_str).collect())
                .unwrap_or_default();
            assert_eq!(documented, fields);
            assert_eq!(schema["additionalProperties"], json!(false));
        }
    }
}
