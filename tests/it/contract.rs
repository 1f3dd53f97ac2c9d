//! The HTTP contract: every 4xx/5xx answer is the JSON error `{"error","message"}` with a
//! status the OpenAPI document lists for that operation, and the document itself has unique
//! operation ids and documents 401 (and 503) wherever a key or the operator token is
//! required, and 429 wherever a key is.

use std::collections::HashMap;

use channel_bridge::domain::Platform;
use reqwest::{Method, RequestBuilder, StatusCode};
use serde_json::Value;

use crate::support::platforms::provision_tenant;
use crate::support::{spawn_app_with, TestApp};

const OPERATOR: &str = "operator-token-0123456789";

/// An app with an operator token and one tenant; returns the tenant's admin key too.
async fn app_with_key() -> (TestApp, String) {
    let app = spawn_app_with(|settings, _| settings.operator_token = Some(OPERATOR.to_owned().into())).await;
    let tenant = provision_tenant(&app.pool, "acme").await;
    let issued = channel_bridge::admin::operator::issue(&app.pool, tenant.tenant, "ci")
        .await
        .unwrap();
    (app, issued.key)
}

async fn served_document(app: &TestApp) -> Value {
    let response = app.client.get(app.url("/v1/openapi.json")).send().await.unwrap();
    assert_eq!(response.status(), 200);
    response.json().await.unwrap()
}

/// Sends the request and checks the answer is exactly the JSON error; returns its status
/// and code.
async fn json_error(request: RequestBuilder) -> (StatusCode, String) {
    let response = request.send().await.unwrap();
    let status = response.status();
    let content_type = response
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let text = response.text().await.unwrap();
    assert!(status.is_client_error(), "{status}: {text}");
    assert_eq!(content_type, "application/json", "{status}: {text}");
    let body: Value = serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON: {text}"));
    let object = body.as_object().unwrap();
    assert_eq!(object.len(), 2, "{body}");
    assert!(
        object["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{body}"
    );
    (status, object["error"].as_str().unwrap().to_owned())
}

/// The statuses the document lists for one operation.
fn documented(doc: &Value, method: &str, path: &str) -> Vec<u16> {
    doc["paths"][path][method]["responses"]
        .as_object()
        .unwrap_or_else(|| panic!("{method} {path} is documented"))
        .keys()
        .map(|status| status.parse().unwrap())
        .collect()
}

#[tokio::test]
async fn unknown_routes_wrong_methods_and_unparsable_path_ids_answer_the_json_error() {
    let (app, key) = app_with_key().await;
    let doc = served_document(&app).await;

    let unknown = app.client.get(app.url("/v1/admin/nothing-here"));
    assert_eq!(
        json_error(unknown).await,
        (StatusCode::NOT_FOUND, "not_found".into())
    );

    let response = app.client.put(app.url("/v1/admin/links")).send().await.unwrap();
    assert_eq!(response.status(), 405);
    assert_eq!(
        response.headers()["allow"],
        "GET,HEAD,POST",
        "axum's Allow header stays"
    );
    let wrong_method = app.client.put(app.url("/v1/admin/links")).bearer_auth(&key);
    assert_eq!(
        json_error(wrong_method).await,
        (StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed".into())
    );

    // A path id that does not parse names no resource: the same 404 as an unknown id, and a
    // status each operation documents.
    let malformed = [
        (
            Method::GET,
            "/v1/admin/connectors/{id}",
            "/v1/admin/connectors/not-a-uuid",
            key.as_str(),
        ),
        (
            Method::POST,
            "/v1/admin/messages/{id}/resend",
            "/v1/admin/messages/42/resend",
            &key,
        ),
        (
            Method::DELETE,
            "/v1/operator/keys/{key_id}",
            "/v1/operator/keys/xyz",
            OPERATOR,
        ),
        (
            Method::GET,
            "/v1/operator/tenants/{tenant_id}/keys",
            "/v1/operator/tenants/acme/keys",
            OPERATOR,
        ),
    ];
    for (method, template, path, token) in malformed {
        let request = app
            .client
            .request(method.clone(), app.url(path))
            .bearer_auth(token);
        assert_eq!(
            json_error(request).await,
            (StatusCode::NOT_FOUND, "not_found".into()),
            "{path}"
        );
        let operation = method.as_str().to_lowercase();
        assert!(
            documented(&doc, &operation, template).contains(&404),
            "{method} {template}"
        );
    }

    // A webhook path that is not UTF-8 was a text/plain 400; now the webhook's own 404.
    let tenant = uuid::Uuid::new_v4();
    let not_utf8 = app.client.get(app.url(&format!("/v1/hooks/{tenant}/%FF")));
    assert_eq!(
        json_error(not_utf8).await,
        (StatusCode::NOT_FOUND, "not_found".into())
    );
}

#[tokio::test]
async fn malformed_mistyped_missing_and_oversized_bodies_and_bad_queries_answer_the_json_error() {
    let (app, key) = app_with_key().await;
    let doc = served_document(&app).await;
    let links = || app.client.post(app.url("/v1/admin/links")).bearer_auth(&key);
    let json = "application/json";

    let cases = [
        (
            "malformed JSON",
            links().header("content-type", json).body("{\"platform\": "),
        ),
        (
            "wrong content type",
            links().header("content-type", "text/plain").body("{}"),
        ),
        (
            "no content type",
            links().body(r#"{"platform":"slack","platform_user_id":"U1","user_id":"u"}"#),
        ),
        ("no body", links().header("content-type", json)),
        (
            "wrong shape",
            links().header("content-type", json).body(r#"{"platform": 7}"#),
        ),
    ];
    for (what, request) in cases {
        let answer = json_error(request).await;
        assert_eq!(
            answer,
            (StatusCode::UNPROCESSABLE_ENTITY, "unprocessable".into()),
            "{what}"
        );
    }
    assert!(documented(&doc, "post", "/v1/admin/links").contains(&422));

    let oversized = format!(
        r#"{{"platform":"slack","platform_user_id":"U1","user_id":"{}"}}"#,
        "u".repeat(channel_bridge::http::API_BODY_LIMIT)
    );
    let request = links().header("content-type", json).body(oversized);
    assert_eq!(
        json_error(request).await,
        (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large".into())
    );
    assert!(documented(&doc, "post", "/v1/admin/links").contains(&413));

    for query in ["limit=many", "since=yesterday", "connector_id=not-a-uuid"] {
        let request = app
            .client
            .get(app.url(&format!("/v1/admin/messages?{query}")))
            .bearer_auth(&key);
        assert_eq!(
            json_error(request).await,
            (StatusCode::UNPROCESSABLE_ENTITY, "unprocessable".into()),
            "{query}"
        );
    }
    assert!(documented(&doc, "get", "/v1/admin/messages").contains(&422));

    // The same body, well formed, is taken: the cases above failed for what they changed.
    let request = links().header("content-type", json).body(format!(
        r#"{{"platform":"{}","platform_user_id":"U1","user_id":"u"}}"#,
        Platform::Slack
    ));
    assert_eq!(request.send().await.unwrap().status(), 201);
}

#[tokio::test]
async fn the_openapi_document_has_unique_operation_ids_and_documents_401_wherever_a_key_is_required() {
    let (app, _) = app_with_key().await;
    let doc = served_document(&app).await;
    let mut ids: HashMap<String, String> = HashMap::new();
    let mut secured = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            let name = format!("{} {path}", method.to_uppercase());
            let id = operation["operationId"]
                .as_str()
                .unwrap_or_else(|| panic!("{name} has an operationId"));
            if let Some(first) = ids.insert(id.to_owned(), name.clone()) {
                panic!("operationId {id} is used by {first} and {name}");
            }
            let requires_credentials = operation["security"].as_array().is_some_and(|s| !s.is_empty());
            if requires_credentials {
                secured += 1;
                assert!(operation["responses"]["401"].is_object(), "{name} documents 401");
                // The request deadline, and the database being out of reach.
                assert!(operation["responses"]["503"].is_object(), "{name} documents 503");
            }
            let takes_key = operation["security"].to_string().contains("\"api_key\"");
            assert_eq!(
                operation["responses"]["429"].is_object(),
                takes_key,
                "{name}: 429 (bad keys throttled) exactly where a key is taken"
            );
            for (status, response) in operation["responses"].as_object().unwrap() {
                if status.starts_with('4') {
                    let schema = &response["content"]["application/json"]["schema"]["$ref"];
                    assert_eq!(schema, "#/components/schemas/ApiJsonError", "{name} {status}");
                }
            }
        }
    }
    assert_eq!(ids.len(), 30, "every operation was walked");
    assert_eq!(
        secured, 24,
        "every admin and operator operation requires credentials"
    );
}
