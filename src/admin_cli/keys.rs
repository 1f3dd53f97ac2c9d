//! `admin keys list|issue|revoke` (operator). A new key is the only secret this CLI prints.

use clap::Subcommand;
use reqwest::Method;
use serde_json::json;
use uuid::Uuid;

use super::output::{cut, text, time, Field, Format};
use super::Context;

#[derive(Debug, Subcommand)]
pub enum Command {
    /// A tenant's keys, oldest first (never the keys themselves).
    List {
        /// The tenant's id or slug.
        tenant: String,
    },
    /// Issue a key for a tenant; it is printed this once.
    Issue {
        /// The tenant's id or slug.
        tenant: String,
        /// What the key is for, to recognise it in listings.
        #[arg(long, default_value = "")]
        name: String,
    },
    /// Revoke a key by id: its next request answers 401.
    Revoke { key_id: Uuid },
}

const LIST: &[Field] = &[
    text("ID", "/id"),
    text("NAME", "/name"),
    text("PREFIX", "/prefix"),
    time("CREATED (UTC)", "/created_at"),
    time("LAST USED (UTC)", "/last_used_at"),
    time("REVOKED (UTC)", "/revoked_at"),
];

const ISSUED: &[Field] = &[
    text("id", "/id"),
    text("tenant_id", "/tenant_id"),
    text("name", "/name"),
    text("prefix", "/prefix"),
    // A key is about 56 characters: never cut.
    cut("key", "/key", 200),
];

pub async fn run(command: Command, context: &Context) -> anyhow::Result<()> {
    let (client, out) = (&context.client, &context.out);
    match command {
        Command::List { tenant } => {
            let keys = client
                .get(&["operator", "tenants", &tenant, "keys"], &vec![])
                .await?;
            out.list(&keys, &keys, LIST)
        }
        Command::Issue { tenant, name } => {
            let body = json!({ "name": name });
            let issued = client
                .send(
                    Method::POST,
                    &["operator", "tenants", &tenant, "keys"],
                    &vec![],
                    Some(&body),
                )
                .await?;
            out.record(&issued, ISSUED)?;
            if out.format == Format::Table {
                eprintln!("The key is shown this once; only its hash is stored.");
            }
            Ok(())
        }
        Command::Revoke { key_id } => {
            let id = key_id.to_string();
            let revoked = client
                .send(Method::DELETE, &["operator", "keys", &id], &vec![], None)
                .await?;
            out.list(&revoked, &json!([revoked]), LIST)
        }
    }
}
