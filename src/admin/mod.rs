//! The tenant admin API (`/v1/admin/…`, bearer API key, everything inside the key's tenant
//! transaction) and the operator API (`/v1/operator/…`, the operator token): history
//! queries, connectors, links, tenant settings, keys. Handlers are thin; the functions they
//! call take a pool and a tenant, so the CLI runs the same code.

pub mod audit;
pub mod auth;
pub mod connectors;
pub mod lifecycle;
pub mod links;
pub mod messages;
pub mod operator;
pub mod schema;
pub mod tenant;
pub mod throttle;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::error::AppError;
use crate::state::AppState;

/// The save-time egress check of a URL the caller sets (`field` names it in the answer):
/// 422 naming the rule, never the addresses its host resolved to. An empty string (which
/// clears the field) is not checked.
pub async fn check_egress(state: &AppState, field: &str, url: Option<&str>) -> Result<(), AppError> {
    let Some(url) = url.filter(|u| !u.is_empty()) else {
        return Ok(());
    };
    state
        .settings
        .egress
        .allow
        .check_url(url)
        .await
        .map_err(|refusal| AppError::Unprocessable(format!("{field} {refusal}")))
}

/// Every admin and operator route; each is documented in the OpenAPI document by the same
/// `routes!` call that serves it.
pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(messages::list))
        .routes(routes!(messages::get))
        .routes(routes!(messages::post_redispatch))
        .routes(routes!(messages::post_resend))
        .routes(routes!(messages::post_redispatch_many))
        .routes(routes!(messages::post_resend_many))
        .routes(routes!(messages::history))
        .routes(routes!(connectors::list, connectors::create))
        .routes(routes!(connectors::get, connectors::update, connectors::delete))
        .routes(routes!(connectors::disable))
        .routes(routes!(links::list, links::create))
        .routes(routes!(links::delete))
        .routes(routes!(tenant::get, tenant::update))
        .routes(routes!(tenant::rotate_dispatch_secret))
        .routes(routes!(lifecycle::erase_user))
        .routes(routes!(lifecycle::erase_sender))
        .routes(routes!(lifecycle::export))
        .routes(routes!(audit::list))
        .routes(routes!(operator::list_tenants, operator::create_tenant))
        .routes(routes!(operator::get_tenant, operator::update_tenant))
        .routes(routes!(operator::list_keys, operator::issue_key_route))
        .routes(routes!(operator::revoke_key))
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
/// past `http::API_BODY_LIMIT`. Every body the API takes is an object, and serde would take
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
