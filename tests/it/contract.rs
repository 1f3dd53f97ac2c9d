//! The HTTP contract: every 4xx/5xx answer is the JSON error `{"error","message"}` with a
//! status the OpenAPI document lists for that operation, and the document itself has unique
//! operation ids and documents 401 (and 503) wherever a key or the operator token is
//! required, and 429 wherever a key is.

use std::collections::HashMap;

use channel_bridge::domain::Platform;
use reqwest::{Method, RequestBuilder, StatusCode};
use serde_json::{json, Value};

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
            "/v1/operator/tenants/{tenant}/keys",
            "/v1/operator/tenants/Not_A_Slug/keys",
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
    assert_eq!(ids.len(), 45, "every operation was walked");
    assert_eq!(
        secured, 36,
        "every admin and operator operation requires credentials"
    );
}

/// The schemas a request body of the admin and operator API refers to.
fn request_body_schemas(doc: &Value) -> Vec<(String, &Value)> {
    let mut schemas = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        if !(path.starts_with("/v1/admin/") || path.starts_with("/v1/operator/")) {
            continue;
        }
        for operation in item.as_object().unwrap().values() {
            let reference = &operation["requestBody"]["content"]["application/json"]["schema"]["$ref"];
            if let Some(name) = reference
                .as_str()
                .and_then(|r| r.strip_prefix("#/components/schemas/"))
            {
                schemas.push((name.to_owned(), &doc["components"]["schemas"][name]));
            }
        }
    }
    schemas
}

#[tokio::test]
async fn the_document_states_the_enums_limits_and_examples_the_handlers_hold_to() {
    let (app, _) = app_with_key().await;
    let doc = served_document(&app).await;
    let schemas = &doc["components"]["schemas"];

    let platforms: Vec<Value> = Platform::ALL.iter().map(|p| p.as_str().into()).collect();
    assert_eq!(
        schemas["LinkIn"]["properties"]["platform"]["enum"],
        json!(platforms)
    );
    assert_eq!(
        schemas["ConnectorPatch"]["properties"]["previous_secret_grace_secs"]["maximum"],
        30 * 24 * 3600
    );
    assert_eq!(
        schemas["RedispatchFilterIn"]["properties"]["status"]["enum"],
        json!(["dispatch_failed", null])
    );
    assert!(schemas["RedispatchFilterIn"]["properties"]["include_unknown"].is_null());
    let list = &doc["paths"]["/v1/admin/messages"]["get"]["parameters"];
    let param = |name: &str| {
        list.as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .map(|p| p["schema"].clone())
            .unwrap_or_else(|| panic!("parameter {name}"))
    };
    assert_eq!(
        (
            param("limit")["minimum"].clone(),
            param("limit")["maximum"].clone()
        ),
        (json!(1), json!(200))
    );
    assert_eq!(param("status")["enum"].as_array().unwrap().len(), 9);
    assert!(param("decision")["enum"]
        .as_array()
        .unwrap()
        .contains(&json!("no_reply")));

    // An answer given later may ask for a person in its `done` event, bounded like the rest.
    let done = &schemas["TurnEvent"]["oneOf"][2]["properties"];
    assert_eq!(done["type"]["enum"], json!(["done"]));
    assert_eq!(
        done["handoff"]["oneOf"][1]["$ref"],
        "#/components/schemas/HandoffIn"
    );
    assert_eq!(schemas["HandoffAskIn"]["properties"]["reason"]["maxLength"], 500);

    // Files go by every way an answer comes in, each field of a file bounded.
    for (schema, path) in [
        ("AgentMessageIn", "/properties/attachments/items/$ref"),
        ("PersonMessageIn", "/properties/attachments/items/$ref"),
        ("TurnEvent", "/oneOf/1/properties/attachments/items/$ref"),
    ] {
        assert_eq!(
            schemas[schema].pointer(path),
            Some(&json!("#/components/schemas/FileIn")),
            "{schema}"
        );
    }
    for (field, property) in schemas["FileIn"]["properties"].as_object().unwrap() {
        assert!(
            property["maxLength"].is_u64(),
            "FileIn.{field} is text without a bound"
        );
    }

    // No request body takes text without a bound, and each shows an example.
    let bodies = request_body_schemas(&doc);
    assert_eq!(bodies.len(), 11, "every operation with a body was walked");
    for (name, schema) in bodies {
        assert!(schema["example"].is_object(), "{name} has an example");
        for (field, property) in schema["properties"].as_object().unwrap() {
            let text = property["type"] == "string" || property["type"].to_string().contains("\"string\"");
            let bounded = property["maxLength"].is_u64()
                || property["enum"].is_array()
                || matches!(property["format"].as_str(), Some("uuid" | "date-time"));
            assert!(
                !text || bounded,
                "{name}.{field} is text without a bound: {property}"
            );
        }
    }
}

#[tokio::test]
async fn text_at_its_documented_limit_is_taken_and_past_it_refused_never_with_a_500() {
    let (app, key) = app_with_key().await;
    let post_link = |platform_user_id: String| {
        app.client
            .post(app.url("/v1/admin/links"))
            .bearer_auth(&key)
            .json(&json!({"platform": "slack", "platform_user_id": platform_user_id, "user_id": "alice"}))
    };
    let at_limit = "é".repeat(256);
    assert_eq!(post_link(at_limit.clone()).send().await.unwrap().status(), 201);
    assert_eq!(
        json_error(post_link("é".repeat(257))).await,
        (StatusCode::BAD_REQUEST, "bad_request".into())
    );

    // A path segment past the limit names nothing; one at it names the link just made.
    let delete = |id: &str| {
        let path = format!("/v1/admin/links/slack/{}", urlencoding(id));
        app.client.delete(app.url(&path)).bearer_auth(&key)
    };
    assert_eq!(
        json_error(delete(&"é".repeat(257))).await,
        (StatusCode::NOT_FOUND, "not_found".into())
    );
    assert_eq!(delete(&at_limit).send().await.unwrap().status(), 204);
    let history = app
        .client
        .get(app.url(&format!("/v1/admin/users/{}/history", "u".repeat(257))))
        .bearer_auth(&key);
    assert_eq!(
        json_error(history).await,
        (StatusCode::NOT_FOUND, "not_found".into())
    );

    let listing = |query: &str| {
        app.client
            .get(app.url(&format!("/v1/admin/messages?{query}")))
            .bearer_auth(&key)
    };
    assert_eq!(listing("decision=no_reply").send().await.unwrap().status(), 200);
    assert_eq!(
        json_error(listing("decision=maybe")).await,
        (StatusCode::UNPROCESSABLE_ENTITY, "unprocessable".into())
    );
    assert_eq!(
        json_error(listing(&format!("q={}", "q".repeat(501)))).await,
        (StatusCode::BAD_REQUEST, "bad_request".into())
    );
}

#[tokio::test]
async fn a_body_must_be_an_object_and_an_integral_number_is_an_integer() {
    let (app, key) = app_with_key().await;
    let patch_tenant = app
        .client
        .patch(app.url("/v1/admin/tenant"))
        .bearer_auth(&key)
        .json(&json!([null, null]));
    assert_eq!(
        json_error(patch_tenant).await,
        (StatusCode::UNPROCESSABLE_ENTITY, "unprocessable".into()),
        "serde would take an array as the struct's fields"
    );

    let resend = |body: Value| {
        app.client
            .post(app.url("/v1/admin/messages/resend"))
            .bearer_auth(&key)
            .json(&body)
    };
    let taken = resend(json!({"limit": 100.0})).send().await.unwrap();
    assert_eq!(taken.status(), 200, "JSON Schema counts 100.0 as an integer");
    assert_eq!(
        json_error(resend(json!({"limit": 1.5}))).await,
        (StatusCode::UNPROCESSABLE_ENTITY, "unprocessable".into())
    );
    assert_eq!(
        json_error(resend(json!({"limit": 1001.0}))).await,
        (StatusCode::UNPROCESSABLE_ENTITY, "unprocessable".into())
    );
}

/// Percent-encodes a path segment (non-ASCII as UTF-8 bytes).
fn urlencoding(segment: &str) -> String {
    segment
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[tokio::test]
async fn a_handshake_get_on_a_connector_that_has_none_is_a_documented_405() {
    let (app, _) = app_with_key().await;
    let doc = served_document(&app).await;
    let tenant = provision_tenant(&app.pool, "globex").await;
    for platform in [Platform::Telegram, Platform::Slack] {
        let request = app.client.get(app.url(&tenant.hook_path(platform)));
        assert_eq!(
            json_error(request).await,
            (StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed".into()),
            "{platform:?}"
        );
    }
    assert!(documented(&doc, "get", "/v1/hooks/{tenant_id}/{connector_id}").contains(&405));
}
