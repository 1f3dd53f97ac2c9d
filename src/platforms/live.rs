//! What the platforms' live views share: where a stream shows, what it has shown, and the
//! call each view makes. `crate::delivery::live` drives them and records what they leave.

use std::time::Duration;

use secrecy::ExposeSecret;
use serde_json::Value;

use crate::db::messages::MessageRow;
use crate::domain::Connector;
use crate::egress::GuardedClient;

/// Where a turn's stream shows, as its platform says.
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

/// The turn a view shows on.
pub struct LiveTarget<'a> {
    pub client: &'a GuardedClient,
    pub connector: &'a Connector,
    pub message: &'a MessageRow,
}

impl LiveTarget<'_> {
    pub fn token(&self) -> &str {
        self.connector
            .outbound_token
            .as_ref()
            .map_or("", |t| t.expose_secret())
    }

    /// Posts `request` and reads the JSON answer; `Err` for anything but `ok: true`.
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

/// What one call of a view came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LiveStep {
    Shown,
    /// The call left this new message on the platform: it must be recorded before the view
    /// goes on (the first reply part adopts it).
    Started(String),
}

/// What the view has shown so far.
#[derive(Default)]
pub struct Shown {
    /// The platform message it recorded.
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
