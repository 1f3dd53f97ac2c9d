//! `admin links list|add|delete`: which tenant user a platform sender is.

use clap::Subcommand;
use reqwest::Method;
use serde_json::json;

use super::output::{text, time, Field};
use super::Context;
use crate::domain::Platform;

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Every link of the tenant.
    List,
    /// Link a platform sender to a tenant user (re-points an existing link).
    Add {
        #[arg(long, value_enum)]
        platform: Platform,
        /// The sender's id on the platform (Slack U…, WhatsApp number, Telegram user id).
        #[arg(long)]
        platform_user_id: String,
        /// The tenant's own id for the person.
        #[arg(long)]
        user_id: String,
    },
    /// Unlink a sender.
    Delete {
        #[arg(long, value_enum)]
        platform: Platform,
        #[arg(long)]
        platform_user_id: String,
    },
}

const FIELDS: &[Field] = &[
    text("PLATFORM", "/platform"),
    text("PLATFORM USER", "/platform_user_id"),
    text("USER", "/user_id"),
    time("CREATED (UTC)", "/created_at"),
];

pub async fn run(command: Command, context: &Context) -> anyhow::Result<()> {
    let (client, out) = (&context.client, &context.out);
    match command {
        Command::List => {
            let list = client.get(&["admin", "links"], &vec![]).await?;
            out.list(&list, &list, FIELDS)
        }
        Command::Add {
            platform,
            platform_user_id,
            user_id,
        } => {
            let body = json!({"platform": platform.as_str(), "platform_user_id": platform_user_id, "user_id": user_id});
            let link = client
                .send(Method::POST, &["admin", "links"], &vec![], Some(&body))
                .await?;
            out.list(&link, &json!([link]), FIELDS)
        }
        Command::Delete {
            platform,
            platform_user_id,
        } => {
            client
                .send(
                    Method::DELETE,
                    &["admin", "links", platform.as_str(), &platform_user_id],
                    &vec![],
                    None,
                )
                .await?;
            out.done(
                &format!("Unlinked {platform} sender {platform_user_id}."),
                &json!({"deleted": "link", "platform": platform.as_str(), "platform_user_id": platform_user_id}),
            )
        }
    }
}
