//! `POST|GET /v1/hooks/{tenant_id}/{connector_id}`: the platforms' webhooks and handshakes,
//! as the steps of docs/architecture.md#webhook-to-reply. JSON is never parsed before the
//! signature is verified over the raw bytes.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{RawQuery, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::extract::ApiPath;
use super::state::AppState;
use crate::domain::{Connector, ConnectorId, Platform, TenantId};
use crate::error::ApiJsonError;
use crate::error::AppError;
use crate::platforms::contract::PlatformApi;
use crate::platforms::inbound::{HandshakeReply, HookError, HookRequest, Inbound, Parsed, TapAnswer};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(receive, handshake))
        .routes(routes!(interact))
        .routes(routes!(command))
}

/// A platform's POST: an event delivery, or Slack's signed `url_verification`.
#[utoipa::path(post, path = "/v1/hooks/{tenant_id}/{connector_id}", operation_id = "receive_webhook", tag = "webhooks",
    params(("tenant_id" = Uuid, Path), ("connector_id" = Uuid, Path)),
    request_body(content = String, description = "The platform's signed payload, verified over its raw bytes"),
    responses((status = 200, description = "verified and recorded (duplicates too), or handshake answered"),
        (status = 400, body = ApiJsonError), (status = 401, body = ApiJsonError), (status = 404, body = ApiJsonError),
        (status = 413, body = ApiJsonError), (status = 503, body = ApiJsonError)))]
async fn receive(
    State(state): State<AppState>,
    ApiPath(ids): ApiPath<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, AppError> {
    verified(state, ids, headers, body, |channel, connector, body| {
        channel.parse(connector, body)
    })
    .await
}

/// Slack's Interactivity Request URL: taps on the buttons of an answer
/// (docs/platforms.md#buttons-and-taps), signed like the events and acknowledged the same way.
#[utoipa::path(post, path = "/v1/hooks/{tenant_id}/{connector_id}/interactivity", operation_id = "receive_interaction", tag = "webhooks",
    params(("tenant_id" = Uuid, Path), ("connector_id" = Uuid, Path)),
    request_body(content = String, content_type = "application/x-www-form-urlencoded", description = "Slack's signed form, `payload=<JSON>`, verified over its raw bytes"),
    responses((status = 200, description = "verified and recorded (duplicates too)"),
        (status = 400, body = ApiJsonError), (status = 401, body = ApiJsonError), (status = 404, body = ApiJsonError),
        (status = 405, body = ApiJsonError), (status = 413, body = ApiJsonError), (status = 503, body = ApiJsonError)))]
async fn interact(
    State(state): State<AppState>,
    ApiPath(ids): ApiPath<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, AppError> {
    verified(state, ids, headers, body, |channel, connector, body| {
        channel.parse_interaction(connector, body)
    })
    .await
}

/// Slack's slash commands' Request URL (docs/platforms.md#slash-commands): each command is a
/// turn, signed like the events; the 200 shows the command in its channel.
#[utoipa::path(post, path = "/v1/hooks/{tenant_id}/{connector_id}/commands", operation_id = "receive_command", tag = "webhooks",
    params(("tenant_id" = Uuid, Path), ("connector_id" = Uuid, Path)),
    request_body(content = String, content_type = "application/x-www-form-urlencoded", description = "Slack's signed slash command form, verified over its raw bytes"),
    responses((status = 200, description = "verified and recorded (duplicates too); Slack's `in_channel` acknowledgement"),
        (status = 400, body = ApiJsonError), (status = 401, body = ApiJsonError), (status = 404, body = ApiJsonError),
        (status = 405, body = ApiJsonError), (status = 413, body = ApiJsonError), (status = 503, body = ApiJsonError)))]
async fn command(
    State(state): State<AppState>,
    ApiPath(ids): ApiPath<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, AppError> {
    verified(state, ids, headers, body, |channel, connector, body| {
        channel.parse_interaction(connector, body)
    })
    .await
}

type Parse = fn(&dyn PlatformApi, &Connector, &[u8]) -> Result<Parsed, HookError>;

/// Verifies the raw body, then parses it with `parse` and records what it holds.
async fn verified(
    state: AppState,
    ids: (String, String),
    headers: HeaderMap,
    body: Body,
    parse: Parse,
) -> Result<Response, AppError> {
    let connector = load_connector(&state, &ids).await?;
    let body = read_body(&state, &connector, &headers, body).await?;
    let channel = crate::platforms::of(connector.profile.platform);
    let request = HookRequest {
        headers: &headers,
        query: None,
        body: &body,
        now: (state.clock)(),
    };
    channel
        .verify(&connector, &request)
        .inspect_err(|err| reject_metric(&connector, err))?;
    match parse(channel, &connector, &body)? {
        Parsed::Handshake(reply) => Ok(handshake_response(reply)),
        Parsed::Events(inbound) => accept(&state, connector, inbound, request_id(&headers)).await,
    }
}

/// Meta's GET handshake (`hub.mode=subscribe`). Unsigned by design: it proves the verify
/// token instead.
#[utoipa::path(get, path = "/v1/hooks/{tenant_id}/{connector_id}", operation_id = "webhook_handshake", tag = "webhooks",
    params(("tenant_id" = Uuid, Path), ("connector_id" = Uuid, Path),
        ("hub.mode" = Option<String>, Query), ("hub.challenge" = Option<String>, Query), ("hub.verify_token" = Option<String>, Query)),
    responses((status = 200, description = "the challenge, verbatim", content_type = "text/plain"),
        (status = 403, body = ApiJsonError), (status = 404, body = ApiJsonError), (status = 405, body = ApiJsonError)))]
async fn handshake(
    State(state): State<AppState>,
    ApiPath(ids): ApiPath<(String, String)>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Result<Response, AppError> {
    let connector = load_connector(&state, &ids).await?;
    let request = HookRequest {
        headers: &headers,
        query: query.as_deref(),
        body: &[],
        now: (state.clock)(),
    };
    let reply = crate::platforms::of(connector.profile.platform).handshake(&connector, &request)?;
    Ok(handshake_response(reply))
}

/// Unknown tenant, unknown connector and disabled connector answer the same 404.
async fn load_connector(
    state: &AppState,
    (tenant, connector): &(String, String),
) -> Result<Arc<Connector>, AppError> {
    let not_found = || AppError::NotFound("connector");
    let tenant: TenantId = tenant.parse().map_err(|_| not_found())?;
    let connector_id: ConnectorId = connector.parse().map_err(|_| not_found())?;
    let span = tracing::Span::current();
    span.record("tenant_id", tracing::field::display(tenant));
    span.record("connector_id", tracing::field::display(connector_id));
    let connector = state
        .cache
        .connector_of_unless(&state.pool, tenant, connector_id, || refusing(state))
        .await
        .map_err(|err| noted(state, err))?
        .filter(|c| c.profile.enabled)
        .ok_or_else(not_found)?;
    span.record("platform", connector.profile.platform.as_str());
    Ok(connector)
}

/// Reads the raw body up to the platform's limit (Meta batches run to about 3 MB).
async fn read_body(
    state: &AppState,
    connector: &Connector,
    headers: &HeaderMap,
    body: Body,
) -> Result<Bytes, AppError> {
    let limit = if crate::platforms::of(connector.profile.platform).batches_webhooks() {
        state.settings.whatsapp_body_limit
    } else {
        state.settings.body_limit
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|len| len > limit) {
        return Err(AppError::PayloadTooLarge(limit));
    }
    // A read error now is a chunked body over the limit or a client gone: nothing recorded.
    axum::body::to_bytes(body, limit)
        .await
        .map_err(|_| AppError::PayloadTooLarge(limit))
}

async fn accept(
    state: &AppState,
    connector: Arc<Connector>,
    mut inbound: Inbound,
    request_id: Option<&str>,
) -> Result<Response, AppError> {
    let platform = connector.profile.platform;
    stamp_request_id(&mut inbound, request_id);
    stamp_traceparent(&mut inbound);
    count_dropped(platform, &inbound.dropped);
    let dropped = inbound.dropped.len();
    let ack = inbound.ack.take();
    let mut taps: Vec<TapAnswer> = inbound
        .dropped_taps
        .iter()
        .map(|id| TapAnswer {
            answer_id: id.clone(),
            toast: None,
        })
        .collect();
    if refusing(state) {
        return Err(noted(state, crate::db::outage::not_tried()));
    }
    let outcome = state
        .ingress
        .record(connector, inbound)
        .await
        .map_err(|err| noted(state, err))?;
    state.db_health.wrote();
    if outcome.has_work() {
        state.wake_workers();
    }
    if !outcome.feedback.is_empty() {
        state.wakeup.wake_feedback();
    }
    count_recorded(platform, &outcome);
    let dropped = dropped + outcome.taps_dropped + outcome.reactions_dropped;
    taps.extend(outcome.taps);
    let body = crate::platforms::of(platform)
        .tap_reply(&taps)
        .or(ack)
        .unwrap_or_else(|| {
            json!({
                "ok": true,
                "queued": outcome.queued.len(),
                "recorded_only": outcome.recorded_only,
                "duplicates": outcome.duplicates,
                "dropped": dropped,
            })
        });
    // Meta counts anything but exactly 200 as a failure; the others accept any 2xx.
    let mut response = (StatusCode::OK, Json(body)).into_response();
    response.extensions_mut().insert(Accepted {
        queued: outcome.queued,
        recorded_only: outcome.recorded_only,
        duplicates: outcome.duplicates,
        dropped,
    });
    Ok(response)
}

/// While the database is out of reach, a webhook is answered 503 at once instead of after
/// the pool's whole wait; `db::outage::probe` ends it when the database answers.
fn refusing(state: &AppState) -> bool {
    state.db_health.refusing()
}

/// An outage is noted (and logged) once, and counted for the log line that ends it.
fn noted(state: &AppState, err: impl Into<std::sync::Arc<sqlx::Error>>) -> AppError {
    let err = err.into();
    state.db_health.failed(&err);
    if crate::db::is_unavailable(&err) {
        state.db_health.refused_one();
    }
    AppError::from_shared_db(err)
}

/// Attached to the response for the request log line, which knows the latency.
#[derive(Clone, Debug)]
pub struct Accepted {
    pub queued: Vec<crate::domain::MessageId>,
    pub recorded_only: usize,
    pub duplicates: usize,
    pub dropped: usize,
}

impl Accepted {
    /// The queued message ids, comma-separated; a large WhatsApp batch is cut short.
    pub fn message_ids(&self) -> String {
        const SHOWN: usize = 16;
        let mut ids: Vec<String> = self.queued.iter().take(SHOWN).map(ToString::to_string).collect();
        if self.queued.len() > SHOWN {
            ids.push(format!("and {} more", self.queued.len() - SHOWN));
        }
        ids.join(",")
    }
}

fn request_id(headers: &HeaderMap) -> Option<&str> {
    headers
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .filter(|id| !id.is_empty() && id.len() <= 128)
}

/// So the worker's logs carry the webhook's request id; a duplicate keeps the first one.
fn stamp_request_id(inbound: &mut Inbound, request_id: Option<&str>) {
    let Some(id) = request_id else { return };
    for message in &mut inbound.messages {
        match &mut message.metadata {
            serde_json::Value::Object(map) => {
                map.insert("request_id".into(), id.into());
            }
            other if other.is_null() => *other = json!({ "request_id": id }),
            _ => {}
        }
    }
}

/// So the job that works the turn, maybe on another instance, continues the webhook's trace.
fn stamp_traceparent(inbound: &mut Inbound) {
    let Some(traceparent) = crate::telemetry::traces::current_traceparent() else {
        return;
    };
    for message in &mut inbound.messages {
        match &mut message.metadata {
            serde_json::Value::Object(map) => {
                map.insert("traceparent".into(), traceparent.clone().into());
            }
            other if other.is_null() => *other = json!({ "traceparent": traceparent }),
            _ => {}
        }
    }
}

fn handshake_response(reply: HandshakeReply) -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, reply.content_type)],
        reply.body,
    )
        .into_response()
}

fn count_recorded(platform: Platform, outcome: &crate::ingress::RecordOutcome) {
    let platform = platform.as_str();
    metrics::counter!("channel_bridge_webhook_events_total", "platform" => platform, "result" => "queued")
        .increment(outcome.queued.len() as u64);
    metrics::counter!("channel_bridge_webhook_events_total", "platform" => platform, "result" => "recorded_only")
        .increment(outcome.recorded_only as u64);
    metrics::counter!("channel_bridge_webhook_events_total", "platform" => platform, "result" => "duplicate")
        .increment(outcome.duplicates as u64);
    for feedback in &outcome.feedback {
        metrics::counter!("channel_bridge_feedback_total", "platform" => platform, "feedback" => feedback.as_str())
            .increment(1);
    }
    if outcome.reactions_dropped > 0 {
        metrics::counter!("channel_bridge_webhook_events_dropped_total", "platform" => platform, "reason" => "reaction_not_on_an_answer")
            .increment(outcome.reactions_dropped as u64);
    }
}

fn count_dropped(platform: Platform, dropped: &[&'static str]) {
    let platform = platform.as_str();
    for reason in dropped {
        tracing::debug!(reason, "inbound event dropped");
        metrics::counter!("channel_bridge_webhook_events_dropped_total", "platform" => platform, "reason" => *reason)
            .increment(1);
    }
}

fn reject_metric(connector: &Connector, err: &crate::platforms::inbound::HookError) {
    tracing::info!(error = %err, "webhook rejected");
    metrics::counter!("channel_bridge_webhook_rejected_total", "platform" => connector.profile.platform.as_str())
        .increment(1);
}
