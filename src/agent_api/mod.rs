//! The agent's way in (docs/agent.md#the-agents-way-in): a turn's events for an answer the
//! agent gives later (`turns`), and messages the agent writes first (`send`). Every request
//! is signed as the gateway signs its dispatches, the other way round: Standard Webhooks
//! with the tenant's dispatch secret (the previous one too while it is still valid), the
//! `webhook-id` being the request's idempotency key.

pub mod send;
pub mod turns;

use axum::body::Bytes;
use axum::http::HeaderMap;
use serde::de::DeserializeOwned;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::db::tenants::TenantRow;
use crate::domain::TenantId;
use crate::error::AppError;
use crate::http::state::AppState;
use crate::signature::{self, SignatureError};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(turns::post_event))
        .routes(routes!(send::post_message))
}

/// The longest `webhook-id` kept as an idempotency key.
pub const EVENT_ID_MAX: usize = 200;

/// A verified request of the tenant's agent.
pub struct Signed {
    pub tenant: std::sync::Arc<TenantRow>,
    /// `webhook-id`: the same id again is the same request.
    pub event_id: String,
}

const UNSIGNED: &str = "the request is not signed (webhook-id, webhook-timestamp, webhook-signature)";

/// 404 for a tenant that does not exist, 401 for anything that does not verify.
pub async fn verify(
    state: &AppState,
    tenant_id: &str,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<Signed, AppError> {
    let tenant_id: TenantId = tenant_id
        .parse::<uuid::Uuid>()
        .map(TenantId)
        .map_err(|_| AppError::NotFound("tenant"))?;
    let request = SignedRequest {
        event_id: event_id(headers)?,
        timestamp: header(headers, "webhook-timestamp"),
        signature: header(headers, "webhook-signature"),
        body,
        now: (state.clock)(),
    };
    let mut conn = state.pool.acquire().await?;
    let mut tenant = state
        .cache
        .tenant(&mut conn, tenant_id)
        .await?
        .ok_or(AppError::NotFound("tenant"))?;
    let mut outcome = request.check(&tenant);
    if outcome == Err(SignatureError::Mismatch) {
        // A secret rotated on another instance a moment ago: read it fresh once.
        state.cache.forget_tenant(tenant_id);
        tenant = state
            .cache
            .tenant(&mut conn, tenant_id)
            .await?
            .ok_or(AppError::NotFound("tenant"))?;
        outcome = request.check(&tenant);
    }
    drop(conn);
    outcome.map_err(refused)?;
    Ok(Signed {
        tenant,
        event_id: request.event_id.to_owned(),
    })
}

fn header<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// `webhook-id`, which must be there and fit an idempotency key.
fn event_id(headers: &HeaderMap) -> Result<&str, AppError> {
    let event_id = header(headers, "webhook-id")
        .map(str::trim)
        .filter(|id| !id.is_empty())
        .ok_or(AppError::Unauthorized(UNSIGNED))?;
    if event_id.chars().count() > EVENT_ID_MAX || event_id.contains('\0') {
        return Err(AppError::Unauthorized("webhook-id is longer than 200 characters"));
    }
    Ok(event_id)
}

/// What a request's signature covers, and the gateway's clock.
struct SignedRequest<'r> {
    event_id: &'r str,
    timestamp: Option<&'r str>,
    signature: Option<&'r str>,
    body: &'r [u8],
    now: i64,
}

impl SignedRequest<'_> {
    /// Checked against the tenant's dispatch secret, then the previous one while valid; a
    /// stale timestamp ends the search (no secret can make it fresh).
    fn check(&self, tenant: &TenantRow) -> Result<(), SignatureError> {
        use secrecy::ExposeSecret;
        let previous = tenant.previous_dispatch_secret.as_ref();
        let secrets = std::iter::once(tenant.dispatch_secret.0.expose_secret())
            .chain(previous.map(|s| s.expose_secret()));
        let mut outcome = Err(SignatureError::Mismatch);
        for secret in secrets {
            outcome = signature::verify(
                secret,
                Some(self.event_id),
                self.timestamp,
                self.signature,
                self.body,
                self.now,
            );
            if outcome.is_ok() || outcome == Err(SignatureError::StaleTimestamp) {
                break;
            }
        }
        outcome
    }
}

/// The 401 a signature that does not verify gets, counted.
fn refused(err: SignatureError) -> AppError {
    metrics::counter!("channel_bridge_agent_requests_rejected_total").increment(1);
    AppError::Unauthorized(match err {
        SignatureError::MissingHeader => UNSIGNED,
        SignatureError::StaleTimestamp => "webhook-timestamp is more than 5 minutes from the gateway's clock",
        SignatureError::BadSecret | SignatureError::Mismatch => {
            "no webhook-signature matches the tenant's dispatch secret"
        }
    })
}

/// The body as JSON, read only after the signature held: 400 when it is not JSON, 422 when
/// it is not the documented shape.
pub fn parse<T: DeserializeOwned>(body: &Bytes) -> Result<T, AppError> {
    let value: serde_json::Value = serde_json::from_slice(body)
        .map_err(|err| AppError::BadRequest(format!("the body is not JSON: {err}")))?;
    if !value.is_object() {
        return Err(AppError::Unprocessable(
            "the request body must be a JSON object".into(),
        ));
    }
    serde_path_to_error::deserialize(value)
        .map_err(|err| AppError::Unprocessable(format!("{}: {}", err.path(), err.inner())))
}
