//! The HTTP side of the admin CLI. URLs are built segment by segment, so an id, slug or user
//! id is always percent-encoded as one path segment.

use std::time::Duration;

use anyhow::Context;
use reqwest::{Method, Url};
use secrecy::{ExposeSecret, SecretString};
use serde_json::Value;

#[derive(Debug, thiserror::Error)]
#[error("{message} ({status} {code})")]
pub struct ApiError {
    pub status: u16,
    pub code: String,
    pub message: String,
}

pub struct Client {
    http: reqwest::Client,
    base: Url,
    token: SecretString,
}

pub type Query = Vec<(&'static str, String)>;

impl Client {
    pub fn new(base: Url, token: SecretString, timeout: Duration) -> anyhow::Result<Self> {
        if !matches!(base.scheme(), "http" | "https") || base.cannot_be_a_base() {
            anyhow::bail!("--url must be an http or https URL, such as http://127.0.0.1:8080");
        }
        if !base.username().is_empty() || base.password().is_some() {
            // The key or token is the credential; a second one in the URL would be sent too.
            anyhow::bail!("--url must not hold credentials (user:password@)");
        }
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10).min(timeout))
            .timeout(timeout)
            .user_agent(concat!("channel-bridge-admin/", env!("CARGO_PKG_VERSION")))
            .build()
            .context("Failed to build the HTTP client")?;
        Ok(Self { http, base, token })
    }

    /// Keeps a path prefix of the base URL (a gateway behind a reverse proxy at `/bridge`).
    fn url(&self, segments: &[&str]) -> Url {
        let mut url = self.base.clone();
        url.set_query(None);
        url.set_fragment(None);
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().push("v1").extend(segments);
        }
        url
    }

    pub async fn get(&self, segments: &[&str], query: &Query) -> anyhow::Result<Value> {
        self.send(Method::GET, segments, query, None).await
    }

    pub async fn send(
        &self,
        method: Method,
        segments: &[&str],
        query: &Query,
        body: Option<&Value>,
    ) -> anyhow::Result<Value> {
        let url = self.url(segments);
        let mut request = self
            .http
            .request(method.clone(), url.clone())
            .bearer_auth(self.token.expose_secret());
        if !query.is_empty() {
            request = request.query(query);
        }
        if let Some(body) = body {
            request = request.json(body);
        }
        let shown = format!("{method} {}", shown(&url));
        let response = request
            .send()
            .await
            .map_err(|err| anyhow::anyhow!("{shown}: {}", describe(&err)))?;
        let status = response.status();
        let text = response
            .text()
            .await
            .map_err(|err| anyhow::anyhow!("{shown}: reading the answer: {}", describe(&err)))?;
        if status.is_success() {
            if text.is_empty() {
                return Ok(Value::Null);
            }
            return serde_json::from_str(&text)
                .with_context(|| format!("{shown}: the answer is not JSON (is --url the gateway?)"));
        }
        Err(api_error(status, &text).into())
    }
}

/// Never with credentials.
fn shown(url: &Url) -> String {
    let mut url = url.clone();
    url.set_query(None);
    let _ = url.set_username("");
    let _ = url.set_password(None);
    url.to_string()
}

/// Another server's page (a proxy's) is not printed: it can be long and is not ours.
fn api_error(status: reqwest::StatusCode, text: &str) -> ApiError {
    #[derive(serde::Deserialize)]
    struct Body {
        error: String,
        message: String,
    }
    match serde_json::from_str::<Body>(text) {
        Ok(body) => ApiError {
            status: status.as_u16(),
            code: body.error,
            message: body.message,
        },
        Err(_) => ApiError {
            status: status.as_u16(),
            code: status
                .canonical_reason()
                .unwrap_or("error")
                .to_lowercase()
                .replace(' ', "_"),
            message: "the server answered without the gateway's JSON error (is --url the gateway?)".into(),
        },
    }
}

fn describe(err: &reqwest::Error) -> String {
    let what = if err.is_timeout() {
        "no answer in time"
    } else if err.is_connect() {
        "cannot connect"
    } else {
        "request failed"
    };
    let mut text = what.to_owned();
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        text.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(base: &str) -> Client {
        Client::new(
            base.parse().unwrap(),
            SecretString::from("cbk_x_y"),
            Duration::from_secs(5),
        )
        .unwrap()
    }

    #[test]
    fn each_segment_is_encoded_as_one_and_a_base_path_is_kept() {
        let url = client("http://127.0.0.1:8080").url(&["admin", "users", "a/b c?", "history"]);
        assert_eq!(
            url.as_str(),
            "http://127.0.0.1:8080/v1/admin/users/a%2Fb%20c%3F/history"
        );
        let url = client("https://gw.example.com/bridge/?x=1").url(&["operator", "tenants"]);
        assert_eq!(url.as_str(), "https://gw.example.com/bridge/v1/operator/tenants");
        let with_credentials: Url = "http://me:pw@gw:8080/v1/admin/messages?q=secret".parse().unwrap();
        assert_eq!(shown(&with_credentials), "http://gw:8080/v1/admin/messages");
        assert!(Client::new(
            "ftp://x".parse().unwrap(),
            SecretString::from("k"),
            Duration::from_secs(1)
        )
        .is_err());
    }

    #[test]
    fn the_api_error_is_read_and_anything_else_is_named_by_status() {
        let err = api_error(
            reqwest::StatusCode::NOT_FOUND,
            r#"{"error":"not_found","message":"tenant not found"}"#,
        );
        assert_eq!(err.to_string(), "tenant not found (404 not_found)");
        let err = api_error(reqwest::StatusCode::BAD_GATEWAY, "<html>proxy</html>");
        assert_eq!(err.code, "bad_gateway");
        assert!(!err.to_string().contains("html"));
    }
}
