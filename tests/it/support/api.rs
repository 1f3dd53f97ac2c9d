//! The admin and operator API as the tests call it: an application with an operator
//! token, and one request with a bearer token.

use reqwest::{Method, StatusCode};
use serde_json::Value;

use super::{spawn_app_with, TestApp};

/// The operator token of `operator_app`.
pub const OPERATOR: &str = "operator-token-0123456789";

/// A fresh application whose operator endpoints take `OPERATOR`.
pub async fn operator_app() -> TestApp {
    spawn_app_with(|settings, _| settings.operator_token = Some(OPERATOR.to_owned().into())).await
}

/// Sends a request with a bearer token; returns status and JSON body (Null when empty).
pub async fn call(
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
