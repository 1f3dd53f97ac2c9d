//! The console's one script file, built into the binary. Pages name it with its content's
//! hash (`?v=`), so a browser may keep it for a year: a new build names a new URL. A request
//! with another `v` (a page of an older or newer instance during a rolling deploy) gets the
//! file uncached, so no URL is ever kept with content that is not its own.

use std::sync::OnceLock;

use axum::extract::Query;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use sha2::{Digest, Sha256};

pub const PATH: &str = "/console/static/console.js";

const SOURCE: &str = include_str!("static/console.js");

/// The first 16 hex digits of the file's SHA-256.
fn version() -> &'static str {
    static VERSION: OnceLock<String> = OnceLock::new();
    VERSION.get_or_init(|| hex::encode(&Sha256::digest(SOURCE.as_bytes())[..8]))
}

/// What a page's `<script src>` names.
pub fn url() -> String {
    format!("{PATH}?v={}", version())
}

#[derive(Deserialize)]
pub struct ScriptQuery {
    v: Option<String>,
}

pub async fn serve(Query(query): Query<ScriptQuery>, request: HeaderMap) -> Response {
    let etag = format!("\"{}\"", version());
    let cache = if query.v.as_deref() == Some(version()) {
        "public, max-age=31536000, immutable"
    } else {
        "no-cache"
    };
    let unchanged = request
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|tags| tags.split(',').any(|tag| tag.trim() == etag));
    let mut response = if unchanged {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        SOURCE.into_response()
    };
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/javascript; charset=utf-8"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static(cache));
    if let Ok(etag) = HeaderValue::from_str(&etag) {
        headers.insert(header::ETAG, etag);
    }
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    response
}
