//! The API's extractors: every handler takes its path, query and body through these, so a
//! bad request gets the JSON error every other error has.

use axum::extract::rejection::{
    BytesRejection, FailedToBufferBody, JsonRejection, PathRejection, QueryRejection,
};
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use crate::error::AppError;

/// axum's default, made explicit so the 413 can name it. Webhooks have their own limits.
pub const API_BODY_LIMIT: usize = 2 * 1024 * 1024;

pub struct ApiQuery<T>(pub T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let axum::extract::Query(value) = axum::extract::Query::<T>::from_request_parts(parts, state).await?;
        Ok(Self(value))
    }
}

/// A non-UUID id answers the same 404 as an unknown one.
#[derive(axum::extract::FromRequestParts)]
#[from_request(via(axum::extract::Path), rejection(AppError))]
pub struct ApiPath<T>(pub T);

/// The raw body, for requests verified over their bytes before they are parsed (the agent's
/// signed routes): past the limit it is the JSON 413 every other route answers.
pub struct ApiBytes(pub axum::body::Bytes);

impl<S: Send + Sync> axum::extract::FromRequest<S> for ApiBytes {
    type Rejection = AppError;

    async fn from_request(request: axum::extract::Request, state: &S) -> Result<Self, Self::Rejection> {
        Ok(Self(axum::body::Bytes::from_request(request, state).await?))
    }
}

/// Only an object: serde would take a struct from an array too, which the document forbids.
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

/// An optional body: a request with neither a body nor a content type takes the default.
pub struct ApiJsonOrNone<T>(pub T);

impl<T: DeserializeOwned + Default, S: Send + Sync> axum::extract::FromRequest<S> for ApiJsonOrNone<T> {
    type Rejection = AppError;

    async fn from_request(request: axum::extract::Request, state: &S) -> Result<Self, Self::Rejection> {
        use axum::http::header::{CONTENT_LENGTH, CONTENT_TYPE};
        let headers = request.headers();
        let no_length = headers.get(CONTENT_LENGTH).is_none_or(|length| length == "0");
        if headers.get(CONTENT_TYPE).is_none() && no_length {
            return Ok(Self(T::default()));
        }
        let ApiJson(input) = ApiJson::from_request(request, state).await?;
        Ok(Self(input))
    }
}

/// 413 past the limit, 400 when unreadable, else 422 (not JSON, wrong content type or
/// shape): one status for all of those keeps the contract small.
impl From<JsonRejection> for AppError {
    fn from(rejection: JsonRejection) -> Self {
        match rejection {
            JsonRejection::BytesRejection(rejection) => rejection.into(),
            other => Self::Unprocessable(other.body_text()),
        }
    }
}

impl From<BytesRejection> for AppError {
    fn from(rejection: BytesRejection) -> Self {
        match rejection {
            BytesRejection::FailedToBufferBody(FailedToBufferBody::LengthLimitError(_)) => {
                Self::PayloadTooLarge(API_BODY_LIMIT)
            }
            _ => Self::BadRequest("the request body could not be read".into()),
        }
    }
}

impl From<QueryRejection> for AppError {
    fn from(rejection: QueryRejection) -> Self {
        Self::Unprocessable(rejection.body_text())
    }
}

/// The same 404 as an unknown id, so the two cannot be told apart.
impl From<PathRejection> for AppError {
    fn from(_: PathRejection) -> Self {
        Self::NotFound("resource")
    }
}
