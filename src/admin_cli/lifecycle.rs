//! `admin erase` and `admin audit`: erasing one person's data, and reading the audit log.

use clap::{ArgGroup, Args};
use reqwest::Method;
use serde_json::Value;

use super::output::{text, time, Field, Format};
use super::Context;
use crate::domain::Platform;

/// Who to erase: a tenant user (every platform), or one platform account.
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("person").required(true).args(["user_id", "platform"])))]
pub struct EraseArgs {
    /// The tenant user: their turns on every platform, the turns their linked accounts sent
    /// before being linked, their links and notice marks.
    #[arg(long)]
    pub user_id: Option<String>,
    /// One platform account (with `--platform-user-id`): every turn it sent, its link and
    /// notice marks.
    #[arg(long, value_enum, requires = "platform_user_id")]
    pub platform: Option<Platform>,
    #[arg(long, requires = "platform")]
    pub platform_user_id: Option<String>,
    /// Erasure cannot be undone: say so.
    #[arg(long)]
    pub yes: bool,
}

#[derive(Debug, Args)]
pub struct AuditArgs {
    /// `next_cursor` of the previous page.
    #[arg(long)]
    pub cursor: Option<String>,
    /// Page size (1–200; the server's default 50).
    #[arg(long)]
    pub limit: Option<i64>,
}

const AUDIT: &[Field] = &[
    time("AT (UTC)", "/at"),
    text("ACTOR", "/actor"),
    text("ACTION", "/action"),
    text("TARGET", "/target"),
];

pub async fn erase(args: EraseArgs, context: &Context) -> anyhow::Result<()> {
    if !args.yes {
        context.usage_error("erasure deletes the person's turns, replies and links for good: add --yes");
    }
    let (path, who): (Vec<&str>, String) = match (&args.user_id, args.platform, &args.platform_user_id) {
        (Some(user), _, _) => (vec!["admin", "users", user, "erase"], format!("user {user}")),
        (None, Some(platform), Some(sender)) => (
            vec!["admin", "senders", platform.as_str(), sender, "erase"],
            format!("{platform} account {sender}"),
        ),
        _ => context.usage_error("name the person: --user-id, or --platform with --platform-user-id"),
    };
    let erased = context.client.send(Method::POST, &path, &vec![], None).await?;
    let count = |field: &str| erased[field].as_u64().unwrap_or_default();
    context.out.done(
        &format!(
            "Erased {who}: {} turns, {} reply parts, {} jobs, {} links, {} notice marks.",
            count("turns"),
            count("reply_parts"),
            count("jobs"),
            count("links"),
            count("notices")
        ),
        &erased,
    )
}

pub async fn audit(args: AuditArgs, context: &Context) -> anyhow::Result<()> {
    let mut query = Vec::new();
    query.extend(args.cursor.map(|c| ("cursor", c)));
    query.extend(args.limit.map(|l| ("limit", l.to_string())));
    let page: Value = context.client.get(&["admin", "audit"], &query).await?;
    context.out.list(&page, &page["items"], AUDIT)?;
    if context.out.format == Format::Table {
        if let Some(next) = page["next_cursor"].as_str() {
            eprintln!("Older records: add --cursor {next}");
        }
    }
    Ok(())
}
