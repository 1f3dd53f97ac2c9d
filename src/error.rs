//! `AppError`, what a handler returns: client errors carry a stable code and a message for
//! the caller; anything else is logged with its cause chain and answered as an opaque 500,
//! so SQL, paths and secrets never reach a client. A database that is out of reach or
//! refuses the app role is 503, so platforms retry. Outside requests: `anyhow` with context.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;
use serde_json::json;
use utoipa::ToSchema;

use crate::platforms::inbound::HookError;

#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    Unauthorized(&'static str),
    #[error("{0}")]
    Forbidden(&'static str),
    #[error("{0} not found")]
    NotFound(&'static str),
    #[error("method not allowed")]
    MethodNotAllowed,
    #[error("request body is larger than {0} bytes")]
    PayloadTooLarge(usize),
    #[error("{0}")]
    Unprocessable(String),
    #[error("{0}")]
    Conflict(&'static str),
    /// It existed, but no longer (an expired media link).
    #[error("{0}")]
    Gone(&'static str),
    #[error("the file is larger than {0} bytes")]
    FileTooLarge(u64),
    /// A server the gateway fetches from (a platform's file API) failed.
    #[error("{0}")]
    BadGateway(&'static str),
    /// The request passed its deadline (milliseconds), most likely waiting on the database.
    #[error("not completed within {0} ms (database unavailable?); retry later")]
    DeadlinePassed(u64),
    /// Not possible yet, soon: retry after a second (an agent's event that came before the
    /// gateway recorded the agent's 202).
    #[error("{0}")]
    NotYet(&'static str),
    /// Too many failed attempts; retry after this long.
    #[error("too many failed authentication attempts; retry later")]
    TooManyRequests(std::time::Duration),
    #[error("database unavailable")]
    Unavailable(#[source] std::sync::Arc<sqlx::Error>),
    /// A missing grant or row-level security: the operator's to fix, so platforms retry.
    #[error("the database refused the gateway's role")]
    Refused(#[source] std::sync::Arc<sqlx::Error>),
    /// Not openable with `CB_SECRETS_KEY`: the operator's to fix, so platforms retry.
    #[error("stored secrets cannot be opened")]
    SecretsUnopened(#[source] crate::secrets::SecretError),
    #[error(transparent)]
    Internal(#[from] anyhow::Error),
}

impl AppError {
    fn status_and_code(&self) -> (StatusCode, &'static str) {
        match self {
            Self::BadRequest(_) => (StatusCode::BAD_REQUEST, "bad_request"),
            Self::Unauthorized(_) => (StatusCode::UNAUTHORIZED, "unauthorized"),
            Self::Forbidden(_) => (StatusCode::FORBIDDEN, "forbidden"),
            Self::NotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
            Self::MethodNotAllowed => (StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed"),
            Self::PayloadTooLarge(_) => (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large"),
            Self::Unprocessable(_) => (StatusCode::UNPROCESSABLE_ENTITY, "unprocessable"),
            Self::Conflict(_) => (StatusCode::CONFLICT, "conflict"),
            Self::Gone(_) => (StatusCode::GONE, "gone"),
            Self::FileTooLarge(_) => (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large"),
            Self::BadGateway(_) => (StatusCode::BAD_GATEWAY, "bad_gateway"),
            Self::TooManyRequests(_) => (StatusCode::TOO_MANY_REQUESTS, "too_many_requests"),
            Self::NotYet(_) => (StatusCode::SERVICE_UNAVAILABLE, "not_yet"),
            Self::Unavailable(_) | Self::Refused(_) | Self::DeadlinePassed(_) | Self::SecretsUnopened(_) => {
                (StatusCode::SERVICE_UNAVAILABLE, "unavailable")
            }
            Self::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
        }
    }
}

impl AppError {
    /// One failed ingress batch answers each of its webhooks with the same error.
    pub fn from_shared_db(err: std::sync::Arc<sqlx::Error>) -> Self {
        if crate::db::is_unavailable(&err) || crate::db::means_no_schema(&err) {
            Self::Unavailable(err)
        } else if crate::db::is_refused(&err) {
            Self::Refused(err)
        } else if let Some(secret) = crate::db::secret_error(&err) {
            match secret {
                crate::secrets::SecretError::ReservedPrefix => Self::Unprocessable(secret.to_string()),
                other => Self::SecretsUnopened(other.clone()),
            }
        } else if crate::db::is_unstorable_value(&err) {
            tracing::info!(error = %err, "request holds a value the database cannot store");
            Self::BadRequest("a value in the request cannot be stored (too long, or not valid text)".into())
        } else {
            Self::Internal(anyhow::Error::new(err).context("database query failed"))
        }
    }
}

impl From<crate::api_schema::TextRefused> for AppError {
    fn from(refused: crate::api_schema::TextRefused) -> Self {
        Self::BadRequest(refused.0)
    }
}

impl From<sqlx::Error> for AppError {
    fn from(err: sqlx::Error) -> Self {
        Self::from_shared_db(std::sync::Arc::new(err))
    }
}

impl From<HookError> for AppError {
    fn from(err: HookError) -> Self {
        match err {
            HookError::MissingSignature(_) => Self::Unauthorized("missing signature"),
            HookError::BadSignature => Self::Unauthorized("signature does not match"),
            HookError::StaleTimestamp => Self::Unauthorized("request timestamp outside the allowed window"),
            HookError::Malformed(why) => Self::BadRequest(why),
            HookError::HandshakeForbidden => Self::Forbidden("verify token does not match"),
            HookError::MethodNotAllowed => Self::MethodNotAllowed,
        }
    }
}

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        let (status, code) = self.status_and_code();
        let message = match &self {
            Self::Internal(err) => {
                tracing::error!(error = ?err, "request failed");
                "internal error".to_owned()
            }
            // Logged when the outage starts and ends (`db::outage::DbHealth`), not per request.
            Self::Unavailable(err) => {
                tracing::debug!(error = %err, "database unavailable");
                "database unavailable, retry later".to_owned()
            }
            Self::Refused(err) => {
                tracing::error!(error = %err, "the database refused the app role: check its grants and the tenant setting");
                "the database refused the gateway's role, retry later".to_owned()
            }
            Self::SecretsUnopened(err) => {
                tracing::error!(error = %err, "a stored secret does not open: check CB_SECRETS_KEY");
                "the gateway cannot open its stored secrets, retry later".to_owned()
            }
            other => other.to_string(),
        };
        let mut response = (status, Json(json!({ "error": code, "message": message }))).into_response();
        let retry_after = match &self {
            Self::TooManyRequests(wait) => Some(wait.as_secs() + u64::from(wait.subsec_nanos() > 0)),
            Self::DeadlinePassed(_)
            | Self::Unavailable(_)
            | Self::Refused(_)
            | Self::SecretsUnopened(_)
            | Self::NotYet(_) => Some(1),
            _ => None,
        };
        if let Some(seconds) = retry_after {
            response
                .headers_mut()
                .insert(axum::http::header::RETRY_AFTER, seconds.max(1).into());
        }
        response
    }
}

/// The JSON error body of every endpoint.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({"error": "unprocessable", "message": "limit must be between 1 and 200"}))]
pub struct ApiJsonError {
    /// Stable code, one per status (`AppError::status_and_code`).
    #[schema(schema_with = error_code)]
    pub error: String,
    /// For people: what was wrong with the request. Never SQL, paths or secrets.
    pub message: String,
}

/// The codes of `AppError`; the contract test checks every error answer against them.
fn error_code() -> utoipa::openapi::Schema {
    let codes = [
        "bad_request",
        "unauthorized",
        "forbidden",
        "not_found",
        "method_not_allowed",
        "conflict",
        "gone",
        "unprocessable",
        "payload_too_large",
        "too_many_requests",
        "bad_gateway",
        "unavailable",
        "internal",
    ];
    utoipa::openapi::schema::ObjectBuilder::new()
        .schema_type(utoipa::openapi::schema::Type::String)
        .enum_values(Some(codes))
        .build()
        .into()
}
