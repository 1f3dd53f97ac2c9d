//! `channel-bridge send-fixture`: posts a JSON file to a running gateway, signed as the
//! platform would sign it (docs/platforms.md#checking-a-connector-send-fixture).
//!
//! `--print-curl` never prints Telegram's header, which *is* the secret (core.telegram.org/bots/api#setwebhook, `secret_token`);
//! Slack's and WhatsApp's are HMACs of the body and reveal nothing.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use axum::http::HeaderName;
use reqwest::Url;
use secrecy::{ExposeSecret, SecretString};
use serde::Serialize;
use serde_json::Value;

use crate::domain::{ConnectorId, Platform, TenantId};

/// A Telegram connector's printed curl command refers to this instead of holding the secret.
pub const SECRET_ENV: &str = "CB_VERIFICATION_SECRET";

#[derive(Debug, clap::Args)]
pub struct SendFixtureArgs {
    /// Base URL of the gateway, e.g. http://127.0.0.1:8080 (a path prefix is kept).
    #[arg(long)]
    pub url: Url,
    #[arg(long)]
    pub tenant: TenantId,
    #[arg(long)]
    pub connector: ConnectorId,
    #[arg(long, value_enum)]
    pub platform: Platform,
    /// The connector's verification secret: Slack signing secret, Meta app secret or
    /// Telegram secret_token.
    #[arg(long, env = SECRET_ENV, hide_env_values = true, value_parser = crate::secret_input::parse)]
    pub secret: SecretString,
    /// The JSON body to send, byte for byte (e.g. one of fixtures/<platform>/*.json).
    #[arg(long)]
    pub file: PathBuf,
    /// Print an equivalent curl command instead of sending.
    #[arg(long)]
    pub print_curl: bool,
    /// Unix time to sign a Slack request with (default: now). Ignored for other platforms.
    #[arg(long, allow_hyphen_values = true)]
    pub timestamp: Option<i64>,
}

#[derive(Debug, Clone)]
pub struct Target {
    pub base_url: Url,
    pub tenant: TenantId,
    pub connector: ConnectorId,
    pub platform: Platform,
}

impl Target {
    /// Keeps a path prefix of the base URL (a gateway behind a reverse proxy at `/bridge/`).
    pub fn hook_url(&self) -> anyhow::Result<Url> {
        let scheme = self.base_url.scheme();
        if scheme != "http" && scheme != "https" {
            anyhow::bail!("--url must be an http:// or https:// URL, not {scheme}:");
        }
        let mut url = self.base_url.clone();
        let path = format!(
            "{}{}",
            self.base_url.path().trim_end_matches('/'),
            crate::provision::webhook_path(self.tenant, self.connector)
        );
        url.set_path(&path);
        url.set_query(None);
        url.set_fragment(None);
        Ok(url)
    }
}

#[derive(Debug, Clone)]
pub struct SignedRequest {
    pub url: Url,
    pub platform: Platform,
    pub headers: Vec<(HeaderName, String)>,
    pub body: Vec<u8>,
}

pub fn sign(target: &Target, secret: &str, body: Vec<u8>, now: i64) -> anyhow::Result<SignedRequest> {
    if secret.is_empty() {
        // The gateway never accepts an empty secret; say so here rather than as a 401.
        anyhow::bail!("the verification secret is empty (set --secret or {SECRET_ENV})");
    }
    Ok(SignedRequest {
        url: target.hook_url()?,
        platform: target.platform,
        headers: crate::sign::sign_headers(target.platform, secret, &body, now),
        body,
    })
}

/// The body is JSON when it is JSON, else the text.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GatewayAnswer {
    pub status: u16,
    pub body: Value,
}

impl GatewayAnswer {
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

pub async fn send(client: &reqwest::Client, request: SignedRequest) -> anyhow::Result<GatewayAnswer> {
    let url = request.url.clone();
    let mut builder = client.post(request.url).body(request.body);
    for (name, value) in request.headers {
        builder = builder.header(name, value);
    }
    let response = builder
        .send()
        .await
        .with_context(|| format!("Failed to reach the gateway at {url}"))?;
    let status = response.status().as_u16();
    let bytes = response
        .bytes()
        .await
        .context("Failed to read the gateway's answer")?;
    let body = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    Ok(GatewayAnswer { status, body })
}

/// `--data-binary @file`, never `-d`, which strips newlines and would break the signature.
pub fn curl_command(request: &SignedRequest, file: &Path) -> String {
    let secret_header = crate::sign::secret_header(request.platform);
    let mut words = vec!["curl -sS -X POST".to_owned(), shell_quote(request.url.as_str())];
    for (name, value) in &request.headers {
        let header = if Some(name) == secret_header.as_ref() {
            // Double quotes: the shell expands the variable; a secret_token is
            // [A-Za-z0-9_-] only, so it needs no further quoting.
            format!("-H \"{name}: ${SECRET_ENV}\"")
        } else {
            format!("-H {}", shell_quote(&format!("{name}: {value}")))
        };
        words.push(header);
    }
    words.push(format!("--data-binary @{}", shell_quote(&file.to_string_lossy())));
    words.push(r"-w '\nHTTP %{http_code}\n'".to_owned());
    words.join(" ")
}

/// Printed on stderr, so stdout holds only the command.
pub fn curl_notes(request: &SignedRequest, now: i64) -> Vec<String> {
    let channel = crate::platforms::of(request.platform);
    channel.signing_note(now, SECRET_ENV).into_iter().collect()
}

fn shell_quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', r"'\''"))
}

/// A non-2xx answer is printed too, then reported as an error (non-zero exit status).
pub async fn run(args: SendFixtureArgs) -> anyhow::Result<()> {
    let body =
        std::fs::read(&args.file).with_context(|| format!("Failed to read {}", args.file.display()))?;
    let now = args.timestamp.unwrap_or_else(|| chrono::Utc::now().timestamp());
    let target = Target {
        base_url: args.url,
        tenant: args.tenant,
        connector: args.connector,
        platform: args.platform,
    };
    let request = sign(&target, args.secret.expose_secret(), body, now)?;
    if args.print_curl {
        for note in curl_notes(&request, now) {
            eprintln!("note: {note}");
        }
        println!("{}", curl_command(&request, &args.file));
        return Ok(());
    }
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .context("Failed to build the HTTP client")?;
    let answer = send(&client, request).await?;
    println!("{}", serde_json::to_string_pretty(&answer)?);
    if !answer.is_success() {
        anyhow::bail!("the gateway answered {}", answer.status);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(platform: Platform, base: &str) -> Target {
        Target {
            base_url: base.parse().expect("test URL parses"),
            tenant: TenantId::new(),
            connector: ConnectorId::new(),
            platform,
        }
    }

    fn curl_for(platform: Platform, secret: &str) -> String {
        let request = sign(
            &target(platform, "http://127.0.0.1:8080"),
            secret,
            b"{}\n".to_vec(),
            1_718_000_000,
        )
        .expect("signs");
        curl_command(&request, Path::new("fixtures/x/it's.json"))
    }

    #[test]
    fn telegram_curl_refers_to_the_secret_by_environment_variable_and_never_contains_it() {
        let curl = curl_for(Platform::Telegram, "tg-secret_TOKEN-42");
        assert!(!curl.contains("tg-secret_TOKEN-42"), "{curl}");
        assert!(
            curl.contains("-H \"x-telegram-bot-api-secret-token: $CB_VERIFICATION_SECRET\""),
            "{curl}"
        );
        assert!(curl.contains("-H 'content-type: application/json'"), "{curl}");
    }

    #[test]
    fn slack_curl_carries_timestamp_and_signature_headers_but_not_the_secret() {
        let curl = curl_for(Platform::Slack, "slack-signing-secret");
        assert!(!curl.contains("slack-signing-secret"), "{curl}");
        assert!(
            curl.contains("-H 'x-slack-request-timestamp: 1718000000'"),
            "{curl}"
        );
        assert!(curl.contains("-H 'x-slack-signature: v0="), "{curl}");
    }

    #[test]
    fn whatsapp_curl_carries_the_hub_signature_but_not_the_secret() {
        let curl = curl_for(Platform::Whatsapp, "meta-app-secret");
        assert!(!curl.contains("meta-app-secret"), "{curl}");
        assert!(curl.contains("-H 'x-hub-signature-256: sha256="), "{curl}");
    }

    #[test]
    fn curl_posts_the_file_bytes_with_data_binary_and_quotes_the_path() {
        let curl = curl_for(Platform::Whatsapp, "s");
        assert!(
            curl.starts_with("curl -sS -X POST 'http://127.0.0.1:8080/v1/hooks/"),
            "{curl}"
        );
        assert!(
            curl.contains(r"--data-binary @'fixtures/x/it'\''s.json'"),
            "{curl}"
        );
    }

    #[test]
    fn hook_url_keeps_a_path_prefix_and_drops_a_query() {
        let t = target(Platform::Slack, "https://gw.example.com/bridge/?x=1");
        let url = t.hook_url().expect("valid");
        assert_eq!(
            url.as_str(),
            format!(
                "https://gw.example.com/bridge/v1/hooks/{}/{}",
                t.tenant, t.connector
            )
        );
        let bare = target(Platform::Slack, "http://127.0.0.1:8080")
            .hook_url()
            .expect("valid");
        assert!(
            bare.as_str().starts_with("http://127.0.0.1:8080/v1/hooks/"),
            "{bare}"
        );
    }

    #[test]
    fn an_empty_secret_or_a_non_http_url_is_refused_before_sending() {
        assert!(sign(&target(Platform::Telegram, "http://h"), "", Vec::new(), 0).is_err());
        assert!(sign(&target(Platform::Slack, "ftp://h"), "s", Vec::new(), 0).is_err());
    }
}
