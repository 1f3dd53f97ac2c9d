//! What the platforms' live views of a streamed answer share; `crate::delivery::live` drives
//! them and records what they leave.

use std::time::Duration;

use secrecy::ExposeSecret;
use serde_json::Value;

use crate::db::messages::MessageRow;
use crate::domain::Connector;
use crate::egress::GuardedClient;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Surface {
    /// Multiples of `CB_STREAM_INTERVAL_MS` between two calls.
    pub pace: u32,
    /// A preview that leaves no message behind (Telegram's draft in a private chat).
    pub ephemeral: bool,
}

impl Surface {
    pub fn interval(self, base: Duration) -> Duration {
        base.saturating_mul(self.pace)
    }
}

pub struct LiveTarget<'a> {
    pub client: &'a GuardedClient,
    pub connector: &'a Connector,
    pub message: &'a MessageRow,
}

impl LiveTarget<'_> {
    pub fn token(&self) -> &str {
        self.connector
            .secrets
            .outbound_token
            .as_ref()
            .map_or("", |t| t.expose_secret())
    }

    /// `Err` for anything but `ok: true`.
    pub async fn call(&self, request: reqwest::RequestBuilder) -> Result<Value, &'static str> {
        let response = self.client.send(request).await.map_err(|_| "request failed")?;
        let body: Value = response.json().await.map_err(|_| "unreadable answer")?;
        if body["ok"] == true {
            Ok(body)
        } else {
            Err("refused")
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LiveStep {
    Shown,
    /// A new platform message, to record before the view goes on (the first part adopts it).
    Started(String),
}

#[derive(Default)]
pub struct Shown {
    pub id: Option<String>,
    /// The text last sent (Slack: its length is what was appended).
    pub text: String,
}

pub(crate) fn clip(text: &str, max_chars: usize) -> &str {
    match text.char_indices().nth(max_chars) {
        Some((end, _)) => &text[..end],
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clipping_counts_characters_not_bytes() {
        assert_eq!(clip("héllo", 2), "hé");
        assert_eq!(clip("hé", 5), "hé");
    }
}
