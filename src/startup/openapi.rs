//! The API's routes and the OpenAPI document built from them (`/v1/openapi.json`).

use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::http::{self, state::AppState};

/// Documented by the same calls that serve them, so the document cannot drift.
pub fn api() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .merge(http::health::router())
        .merge(http::hooks::router())
        .merge(http::media::router())
        .merge(crate::admin::router())
        .merge(crate::agent_api::router())
        .routes(routes!(openapi_json))
}

pub fn openapi() -> utoipa::openapi::OpenApi {
    let mut doc = api().into_openapi();
    document_shared_answers(&mut doc);
    require_path_parameters(&mut doc);
    doc
}

fn operations(
    item: &mut utoipa::openapi::PathItem,
) -> impl Iterator<Item = &mut utoipa::openapi::path::Operation> {
    [
        &mut item.get,
        &mut item.post,
        &mut item.put,
        &mut item.patch,
        &mut item.delete,
    ]
    .into_iter()
    .flatten()
}

/// OpenAPI requires every path parameter to be `required`; utoipa leaves it out for a
/// parameter whose schema comes from `schema_with` (the enums of `admin::schema`).
fn require_path_parameters(doc: &mut utoipa::openapi::OpenApi) {
    use utoipa::openapi::path::ParameterIn;
    use utoipa::openapi::Required;
    for item in doc.paths.paths.values_mut() {
        for operation in operations(item) {
            let parameters = operation.parameters.iter_mut().flatten();
            for parameter in parameters.filter(|p| p.parameter_in == ParameterIn::Path) {
                parameter.required = Required::True;
            }
        }
    }
}

/// Answers of the layers rather than of a handler: 503 from the deadline or an unreachable
/// database, and 429 from the key throttle on every operation that takes a key.
fn document_shared_answers(doc: &mut utoipa::openapi::OpenApi) {
    use utoipa::openapi::{ContentBuilder, Ref, ResponseBuilder};
    let error = |description: &str| {
        ResponseBuilder::new()
            .description(description)
            .content(
                "application/json",
                ContentBuilder::new()
                    .schema(Some(Ref::from_schema_name("ApiJsonError")))
                    .build(),
            )
            .build()
    };
    for (path, item) in doc.paths.paths.iter_mut() {
        let bounded = ["/v1/hooks/", "/v1/admin/", "/v1/operator/", "/v1/agent/"]
            .iter()
            .any(|prefix| path.starts_with(prefix));
        for operation in operations(item) {
            let responses = &mut operation.responses.responses;
            if bounded {
                responses.entry("503".into()).or_insert_with(|| {
                    error("The database is unavailable, or the request passed its deadline: retry later.")
                        .into()
                });
            }
            let takes_key = operation.security.as_ref().is_some_and(|requirements| {
                serde_json::to_value(requirements)
                    .is_ok_and(|value| value.to_string().contains("\"api_key\""))
            });
            if takes_key {
                responses.entry("429".into()).or_insert_with(|| {
                    error("Too many attempts with keys that did not work from this address or with this prefix; see Retry-After.").into()
                });
            }
        }
    }
}

#[derive(utoipa::OpenApi)]
#[openapi(
    info(title = "channel-bridge", description = "Multi-tenant messaging gateway: webhooks, admin and operator API."),
    modifiers(&SecuritySchemes)
)]
struct ApiDoc;

struct SecuritySchemes;

impl utoipa::Modify for SecuritySchemes {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
        let components = openapi.components.get_or_insert_with(Default::default);
        let bearer = |description: &str| {
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(description))
                    .build(),
            )
        };
        components.add_security_scheme("api_key", bearer("A tenant admin key, `cbk_<prefix>_<secret>`."));
        components.add_security_scheme(
            "operator_token",
            bearer("The operator token (CB_OPERATOR_TOKEN)."),
        );
        // The agent's requests: Standard Webhooks headers with the tenant's dispatch secret.
        use utoipa::openapi::security::{ApiKey, ApiKeyValue};
        components.add_security_scheme(
            "dispatch_signature",
            SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::with_description(
                "webhook-signature",
                "Standard Webhooks: `webhook-id`, `webhook-timestamp` and `webhook-signature: \
                 v1,<base64 HMAC-SHA256 of \"{id}.{timestamp}.{body}\">` keyed with the tenant's \
                 dispatch secret (docs/agent.md#the-agents-way-in).",
            ))),
        );
    }
}

/// This document.
#[utoipa::path(get, path = "/v1/openapi.json", tag = "meta", operation_id = "openapi_document", responses((status = 200, description = "OpenAPI 3.1 document")))]
async fn openapi_json() -> axum::Json<utoipa::openapi::OpenApi> {
    static DOC: std::sync::OnceLock<utoipa::openapi::OpenApi> = std::sync::OnceLock::new();
    axum::Json(DOC.get_or_init(openapi).clone())
}
