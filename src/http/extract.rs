//! The API's extractors and what their rejections answer: every handler takes its path,
//! query and body through these, so a bad request gets the JSON error every other error has.

use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use crate::error::AppError;

/// The largest JSON body the admin and operator API reads (axum's default, made explicit so
/// the 413 can name it). Webhook bodies have their own per-platform limits (`hooks.rs`).
pub const API_BODY_LIMIT: usize = 2 * 1024 * 1024;

/// `Query<T>` whose rejection is a JSON 422.
pub struct ApiQuery<T>(pub T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let axum::extract::Query(value) = axum::extract::Query::<T>::from_request_parts(parts, state).await?;
        Ok(Self(value))
    }
}

/// `Path<T>` whose rejection is the JSON 404 of `From<PathRejection> for AppError`: every
/// handler takes its path through it, so a non-UUID id answers like an unknown one.
#[derive(axum::extract::FromRequestParts)]
#[from_request(via(axum::extract::Path), rejection(AppError))]
pub struct ApiPath<T>(pub T);

/// `Json<T>` whose rejection is a JSON error (`From<JsonRejection> for AppError`): 422 for
/// a body that is not a JSON object, lacks the JSON content type or has the wrong shape, 413
/// past `API_BODY_LIMIT`. Every body the API takes is an object, and serde would take
/// a struct from an array too (`[null, null]`), which the document does not allow.
pub struct ApiJson<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> axum::extract::FromRequest<S> for ApiJson<T> {
    type Rejection = AppError;

    async fn from_request(request: axum::extract::Request, state: &S) -> Result<Self, Self::Rejection> {
        let axum::Json(value) = axum::Json::<serde_json::Value>::from_request(request, state).await?;
        if !value.is_object() {
            return Err(AppError::Unprocessable(
                "the request body must be a JSON object".into(),
            ));
        }
        // Through the bytes again, so the shape errors keep axum's wording and field paths.
        let bytes = serde_json::to_vec(&value).map_err(anyhow::Error::from)?;
        let axum::Json(input) = axum::Json::<T>::from_bytes(&bytes)?;
        Ok(Self(input))
    }
}

/// A JSON body we cannot use: 413 past the body limit, 400 when it could not be read at
/// all, otherwise 422 (not JSON, wrong content type, or JSON of the wrong shape: the caller
/// sent something we cannot process, and one status keeps the contract small).
impl From<JsonRejection> for AppError {
    fn from(rejection: JsonRejection) -> Self {
        use axum::extract::rejection::{BytesRejection, FailedToBufferBody};
        match rejection {
            JsonRejection::BytesRejection(BytesRejection::FailedToBufferBody(
                FailedToBufferBody::LengthLimitError(_),
            )) => Self::PayloadTooLarge(API_BODY_LIMIT),
            JsonRejection::BytesRejection(_) => Self::BadRequest("the request body could not be read".into()),
            other => Self::Unprocessable(other.body_text()),
        }
    }
}

impl From<QueryRejection> for AppError {
    fn from(rejection: QueryRejection) -> Self {
        Self::Unprocessable(rejection.body_text())
    }
}

/// A path segment that does not parse (a non-UUID id, text that is not UTF-8) names no
/// resource: 404, as for an id that parses but is unknown, so the two cannot be told apart
/// (the webhook routes answer an unknown and a malformed connector id alike).
impl From<PathRejection> for AppError {
    fn from(_: PathRejection) -> Self {
        Self::NotFound("resource")
    }
}
