//! `GET /v1/media/{token}`: the attachment URLs given to the agent
//! (docs/agent.md#pictures-voice-notes-and-files). The token is the whole authorisation: one
//! that is not ours answers 404, so a guess learns nothing.

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use futures::TryStreamExt;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::state::AppState;
use crate::db::TenantTx;
use crate::domain::Connector;
use crate::error::AppError;
use crate::media::token::{MediaToken, TokenError};
use crate::media::Attachment;
use crate::platforms::files::FetchError;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(media))
}

/// The file of an attachment URL, streamed from the platform.
#[utoipa::path(get, path = "/v1/media/{token}", tag = "media", operation_id = "getMedia",
    params(("token" = String, Path, description = "the signed token of an attachment URL given to the agent")),
    responses(
        (status = 200, description = "the file's bytes, with its MIME type", content_type = "application/octet-stream"),
        (status = 404, description = "not a valid media link, or the platform no longer has the file", body = crate::error::ApiJsonError),
        (status = 410, description = "the link has expired: the next dispatch attempt gets a fresh one", body = crate::error::ApiJsonError),
        (status = 413, description = "the file is larger than this gateway streams", body = crate::error::ApiJsonError),
        (status = 502, description = "the platform did not serve the file", body = crate::error::ApiJsonError),
        (status = 503, description = "the database is unavailable, or did not answer within the deadline", body = crate::error::ApiJsonError)))]
async fn media(State(state): State<AppState>, Path(token): Path<String>) -> Result<Response, AppError> {
    let keys = &state.settings.database.secrets;
    let token = MediaToken::decode(&token, keys, (state.clock)()).map_err(|err| match err {
        TokenError::Invalid => AppError::NotFound("media link"),
        TokenError::Expired => {
            AppError::Gone("this media link has expired; the next attempt of the dispatch gets a fresh one")
        }
    })?;
    // Only the database part is bounded: the download that follows holds no connection.
    let deadline_ms = state.settings.admin_deadline_ms;
    let found = tokio::time::timeout(
        std::time::Duration::from_millis(deadline_ms),
        find(&state, &token),
    )
    .await;
    let (attachment, connector) = match found {
        Ok(found) => found?,
        Err(_) => {
            crate::db::deadline_missed();
            return Err(AppError::DeadlinePassed(deadline_ms));
        }
    };
    let max = state.settings.media.media_max_bytes;
    if !state
        .settings
        .media
        .offers(attachment.kind, attachment.mime.as_deref(), attachment.size)
    {
        return Err(AppError::NotFound("attachment"));
    }
    let upstream = crate::platforms::open_file(&state.media_client, &connector, &attachment.source, max)
        .await
        .map_err(|err| fetch_error(err, max))?;
    Ok(stream(&attachment, upstream, max))
}

async fn find(state: &AppState, token: &MediaToken) -> Result<(Attachment, Connector), AppError> {
    let mut tx = TenantTx::begin(&state.pool, token.tenant).await?;
    let found = crate::db::messages::attachment(&mut tx, token.message, token.index).await?;
    let Some((connector_id, attachment)) = found else {
        return Err(AppError::NotFound("attachment"));
    };
    let connector = crate::db::connectors::get(&mut tx, &state.settings.database.secrets, connector_id)
        .await?
        .ok_or(AppError::NotFound("attachment"))?;
    tx.commit().await?;
    Ok((attachment, connector))
}

fn fetch_error(err: FetchError, max: u64) -> AppError {
    match err {
        FetchError::Gone => AppError::NotFound("file (the platform no longer has it)"),
        FetchError::TooLarge => AppError::FileTooLarge(max),
        FetchError::Refused(why) => {
            tracing::warn!(reason = why, "an attachment could not be fetched");
            AppError::BadGateway("the file cannot be fetched from the platform")
        }
        FetchError::Upstream(why) => {
            tracing::warn!(error = %why, "the platform did not serve an attachment");
            AppError::BadGateway("the platform did not serve the file")
        }
    }
}

/// Our MIME type before the platform's; a browser may neither sniff nor cache it.
fn stream(attachment: &Attachment, upstream: reqwest::Response, max: u64) -> Response {
    let content_type = attachment
        .mime
        .as_deref()
        .and_then(|m| HeaderValue::from_str(m).ok())
        .or_else(|| upstream.headers().get(header::CONTENT_TYPE).cloned())
        .unwrap_or(HeaderValue::from_static("application/octet-stream"));
    let length = upstream.content_length();
    let mut sent: u64 = 0;
    let body = upstream
        .bytes_stream()
        .map_err(std::io::Error::other)
        .and_then(move |chunk| {
            sent += chunk.len() as u64;
            let result = if sent > max {
                Err(std::io::Error::other(
                    "the file is larger than the gateway streams",
                ))
            } else {
                Ok(chunk)
            };
            std::future::ready(result)
        });
    let mut response = Body::from_stream(body).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, content_type);
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("private, no-store"),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    if let Some(length) = length {
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(length));
    }
    response
}

/// No total timeout, only between chunks: a large file on a slow link is not an error.
pub fn client(egress: &crate::settings::EgressSettings) -> anyhow::Result<crate::egress::GuardedClient> {
    let builder = reqwest::Client::builder()
        .connect_timeout(std::time::Duration::from_secs(5))
        .read_timeout(std::time::Duration::from_secs(30))
        .http1_only()
        .user_agent(concat!("channel-bridge/", env!("CARGO_PKG_VERSION")));
    let policy = std::sync::Arc::new(egress.allow.clone());
    crate::egress::GuardedClient::build(builder, policy)
        .map_err(|e| anyhow::anyhow!("Failed to build the media HTTP client: {e}"))
}
