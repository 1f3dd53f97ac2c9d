//! The operator API's tenant routes (by id or slug).

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::support::platforms::*;
use crate::support::{spawn_app_with, TestApp};

const OPERATOR: &str = "operator-token-0123456789";

async fn app() -> TestApp {
    spawn_app_with(|settings, _| settings.operator_token = Some(OPERATOR.to_owned().into())).await
}

/// Sends a request with a bearer token; returns status and JSON body (Null when empty).
async fn call(
    app: &TestApp,
    method: Method,
    path: &str,
    token: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let mut request = app.client.request(method, app.url(path)).bearer_auth(token);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    let status = response.status();
    let text = response.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// A provisioned tenant (three connectors, linked users) and an admin key.
async fn tenant_with_key(app: &TestApp, slug: &str) -> (Provisioned, String) {
    let p = provision_tenant(&app.pool, slug).await;
    let issued = channel_bridge::admin::operator::issue(&app.pool, p.tenant, "ci")
        .await
        .unwrap();
    (p, issued.key)
}

async fn tenant_row(app: &TestApp, slug: &str) -> (String, Option<i32>, String) {
    let mut owner = app.db.owner_conn().await;
    sqlx::query_as("select name, max_in_flight, history_scope from tenants where slug = $1")
        .bind(slug)
        .fetch_one(&mut owner)
        .await
        .unwrap()
}

// ---------------------------------------------------------------- the operator API

#[tokio::test]
async fn operator_lists_tenants_by_slug_a_page_at_a_time_with_their_settings_and_key_counts() {
    let app = app().await;
    for slug in ["initech", "acme", "globex"] {
        provision_tenant(&app.pool, slug).await;
    }
    let (acme, _) = tenant_with_key(&app, "hooli").await;
    channel_bridge::admin::operator::issue(&app.pool, acme.tenant, "second")
        .await
        .unwrap();

    let (status, first) = call(&app, Method::GET, "/v1/operator/tenants?limit=3", OPERATOR, None).await;
    assert_eq!(status, 200, "{first}");
    let slugs = |page: &Value| -> Vec<String> {
        page["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["slug"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(slugs(&first), ["acme", "globex", "hooli"]);
    assert_eq!(first["next_cursor"], "hooli");
    let hooli = &first["items"][2];
    assert_eq!(hooli["id"], acme.tenant.to_string());
    assert_eq!(hooli["active_keys"], 2);
    assert_eq!(hooli["history_scope"], "private_aware");
    assert_eq!(hooli["max_in_flight"], Value::Null);
    assert!(hooli["created_at"].is_string());
    assert!(
        !first.to_string().contains("whsec_"),
        "no dispatch secret in a listing"
    );

    let (status, last) = call(
        &app,
        Method::GET,
        "/v1/operator/tenants?limit=3&cursor=hooli",
        OPERATOR,
        None,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(slugs(&last), ["initech"]);
    assert_eq!(last["next_cursor"], Value::Null);

    for bad in ["limit=0", "limit=201", "cursor=Not_A_Slug", "limit=x"] {
        let (status, body) = call(
            &app,
            Method::GET,
            &format!("/v1/operator/tenants?{bad}"),
            OPERATOR,
            None,
        )
        .await;
        assert_eq!(
            (status, body["error"].as_str()),
            (StatusCode::UNPROCESSABLE_ENTITY, Some("unprocessable")),
            "{bad}"
        );
    }
}

#[tokio::test]
async fn operator_reads_and_changes_a_tenant_by_id_or_by_slug_and_absent_fields_stay() {
    let app = app().await;
    let globex = provision_tenant(&app.pool, "globex").await;
    let by_id = format!("/v1/operator/tenants/{}", globex.tenant);

    let (status, read_by_slug) = call(&app, Method::GET, "/v1/operator/tenants/globex", OPERATOR, None).await;
    assert_eq!(status, 200, "{read_by_slug}");
    let (_, read_by_id) = call(&app, Method::GET, &by_id, OPERATOR, None).await;
    assert_eq!(read_by_slug, read_by_id);
    assert_eq!(read_by_slug["id"], globex.tenant.to_string());

    let (status, changed) = call(
        &app,
        Method::PATCH,
        "/v1/operator/tenants/globex",
        OPERATOR,
        Some(json!({"max_in_flight": 12, "history_scope": "chat"})),
    )
    .await;
    assert_eq!(status, 200, "{changed}");
    assert_eq!(
        (changed["max_in_flight"].clone(), changed["history_scope"].clone()),
        (json!(12), json!("chat"))
    );
    assert_eq!(
        tenant_row(&app, "globex").await,
        ("globex".into(), Some(12), "chat".into())
    );

    // A name alone leaves the cap and the scope as they are.
    let (status, renamed) = call(
        &app,
        Method::PATCH,
        &by_id,
        OPERATOR,
        Some(json!({"name": "Globex Corp"})),
    )
    .await;
    assert_eq!(status, 200, "{renamed}");
    assert_eq!(
        tenant_row(&app, "globex").await,
        ("Globex Corp".into(), Some(12), "chat".into())
    );
    // null returns the cap to the instance default.
    let (status, _) = call(
        &app,
        Method::PATCH,
        &by_id,
        OPERATOR,
        Some(json!({"max_in_flight": null})),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(
        tenant_row(&app, "globex").await,
        ("Globex Corp".into(), None, "chat".into())
    );

    for refused in [
        json!({"name": "  "}),
        json!({"max_in_flight": 0}),
        json!({"history_scope": "everything"}),
        json!({"dispatch_secret": "whsec_x"}),
    ] {
        let (status, body) = call(&app, Method::PATCH, &by_id, OPERATOR, Some(refused.clone())).await;
        assert_eq!(
            (status, body["error"].as_str()),
            (StatusCode::UNPROCESSABLE_ENTITY, Some("unprocessable")),
            "{refused}"
        );
    }
    assert_eq!(
        tenant_row(&app, "globex").await,
        ("Globex Corp".into(), None, "chat".into())
    );

    // Keys by slug as well.
    let (status, issued) = call(
        &app,
        Method::POST,
        "/v1/operator/tenants/globex/keys",
        OPERATOR,
        Some(json!({"name": "ops"})),
    )
    .await;
    assert_eq!(status, 201, "{issued}");
    assert_eq!(issued["tenant_id"], globex.tenant.to_string());
    let (status, keys) = call(
        &app,
        Method::GET,
        "/v1/operator/tenants/globex/keys",
        OPERATOR,
        None,
    )
    .await;
    assert_eq!(
        (status, keys[0]["id"].clone()),
        (StatusCode::OK, issued["id"].clone())
    );
}

#[tokio::test]
async fn an_unknown_tenant_answers_the_json_404_on_every_operator_route() {
    let app = app().await;
    provision_tenant(&app.pool, "acme").await;
    let unknown_id = uuid::Uuid::new_v4().to_string();
    for tenant in ["globex", unknown_id.as_str(), "Not_A_Slug"] {
        let requests = [
            (Method::GET, format!("/v1/operator/tenants/{tenant}"), None),
            (
                Method::PATCH,
                format!("/v1/operator/tenants/{tenant}"),
                Some(json!({"max_in_flight": 5})),
            ),
            (Method::GET, format!("/v1/operator/tenants/{tenant}/keys"), None),
            (
                Method::POST,
                format!("/v1/operator/tenants/{tenant}/keys"),
                Some(json!({"name": "x"})),
            ),
        ];
        for (method, path, body) in requests {
            let (status, error) = call(&app, method.clone(), &path, OPERATOR, body).await;
            assert_eq!(status, 404, "{method} {path}");
            assert_eq!(
                error,
                json!({"error": "not_found", "message": "tenant not found"}),
                "{method} {path}"
            );
        }
    }
    let mut owner = app.db.owner_conn().await;
    let keys: i64 = sqlx::query_scalar("select count(*) from api_keys")
        .fetch_one(&mut owner)
        .await
        .unwrap();
    assert_eq!(keys, 0, "no key was issued for a tenant that does not exist");

    // An unknown method on the new routes keeps answering the JSON error.
    let (status, error) = call(&app, Method::DELETE, "/v1/operator/tenants/acme", OPERATOR, None).await;
    assert_eq!(
        (status, error["error"].as_str()),
        (StatusCode::METHOD_NOT_ALLOWED, Some("method_not_allowed"))
    );
    let (status, error) = call(&app, Method::PUT, "/v1/operator/tenants", OPERATOR, None).await;
    assert_eq!(
        (status, error["error"].as_str()),
        (StatusCode::METHOD_NOT_ALLOWED, Some("method_not_allowed"))
    );
}

#[tokio::test]
async fn a_tenant_key_cannot_use_the_operator_routes_and_the_operator_token_is_no_tenant_key() {
    let app = app().await;
    let (acme, acme_key) = tenant_with_key(&app, "acme").await;
    provision_tenant(&app.pool, "globex").await;
    let attempts = [
        (Method::GET, "/v1/operator/tenants".to_owned(), None),
        (Method::GET, "/v1/operator/tenants/globex".to_owned(), None),
        (Method::GET, format!("/v1/operator/tenants/{}", acme.tenant), None),
        (
            Method::PATCH,
            "/v1/operator/tenants/globex".to_owned(),
            Some(json!({"max_in_flight": 1})),
        ),
        (
            Method::PATCH,
            "/v1/operator/tenants/acme".to_owned(),
            Some(json!({"max_in_flight": 100000})),
        ),
        (Method::GET, "/v1/operator/tenants/globex/keys".to_owned(), None),
        (
            Method::POST,
            "/v1/operator/tenants/globex/keys".to_owned(),
            Some(json!({"name": "mine now"})),
        ),
    ];
    for (method, path, body) in attempts {
        let (status, error) = call(&app, method.clone(), &path, &acme_key, body).await;
        assert_eq!(
            (status, error["error"].as_str()),
            (StatusCode::UNAUTHORIZED, Some("unauthorized")),
            "{method} {path} with acme's key"
        );
    }
    assert_eq!(tenant_row(&app, "globex").await.1, None);
    assert_eq!(tenant_row(&app, "acme").await.1, None, "nor raise its own cap");
    let mut owner = app.db.owner_conn().await;
    let keys: i64 = sqlx::query_scalar("select count(*) from api_keys")
        .fetch_one(&mut owner)
        .await
        .unwrap();
    assert_eq!(keys, 1, "only acme's own key exists");

    let (status, _) = call(&app, Method::GET, "/v1/admin/messages", OPERATOR, None).await;
    assert_eq!(status, 401, "the operator token is not a tenant key");
}

#[tokio::test]
async fn a_slug_of_uuid_form_is_refused_so_that_a_uuid_always_names_an_id() {
    let app = app().await;
    let uuid = uuid::Uuid::new_v4();
    for slug in [uuid.to_string(), uuid.simple().to_string()] {
        let (status, error) = call(
            &app,
            Method::POST,
            "/v1/operator/tenants",
            OPERATOR,
            Some(json!({"slug": slug})),
        )
        .await;
        assert_eq!(status, 422, "{slug}: {error}");
        assert!(error["message"].as_str().unwrap().contains("UUID"), "{error}");
    }
    let (status, _) = call(
        &app,
        Method::POST,
        "/v1/operator/tenants",
        OPERATOR,
        Some(json!({"slug": "c0ffee"})),
    )
    .await;
    assert_eq!(status, 201, "hex alone is still a slug");
}
