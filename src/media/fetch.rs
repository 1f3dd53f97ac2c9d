//! The HTTP client that downloads attachments for `/v1/media/{token}`; each platform's
//! lookups are its `files.rs`.

use crate::egress::GuardedClient;

/// No total timeout, only between chunks: a large file on a slow link is not an error.
pub fn client(egress: &crate::settings::EgressSettings) -> anyhow::Result<GuardedClient> {
    let builder = reqwest::Client::builder()
        .connect_timeout(std::time::Duration::from_secs(5))
        .read_timeout(std::time::Duration::from_secs(30))
        .user_agent(concat!("channel-bridge/", env!("CARGO_PKG_VERSION")));
    let policy = std::sync::Arc::new(egress.allow.clone());
    GuardedClient::build(builder, policy)
        .map_err(|e| anyhow::anyhow!("Failed to build the media HTTP client: {e}"))
}
