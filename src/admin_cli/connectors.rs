//! `admin connectors list|get|update|delete`. A new secret comes from its flag only, never
//! the environment, so a variable left over from `connector add` cannot rotate one.

use clap::{Args, Subcommand};
use reqwest::Method;
use secrecy::{ExposeSecret, SecretString};
use serde_json::{json, Value};
use uuid::Uuid;

use super::output::{text, time, Field};
use super::{object, Context};
use crate::db::connectors::ConnectorPatch;

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Every connector of the tenant.
    List,
    /// One connector.
    Get { id: Uuid },
    /// Change a connector; flags not given keep their value.
    Update(Box<UpdateArgs>),
    /// Delete a connector. One with message history is kept (409) unless --purge.
    Delete {
        id: Uuid,
        /// Delete its message history too.
        #[arg(long)]
        purge: bool,
    },
}

#[derive(Debug, Args)]
pub struct UpdateArgs {
    pub id: Uuid,
    #[command(flatten)]
    pub patch: ConnectorPatch,
}

const LIST: &[Field] = &[
    text("ID", "/id"),
    text("PLATFORM", "/platform"),
    text("NAME", "/name"),
    text("ENABLED", "/enabled"),
    text("EXTERNAL ID", "/external_id"),
    text("UNLINKED", "/unlinked_policy"),
    time("CREATED (UTC)", "/created_at"),
];

const ONE: &[Field] = &[
    text("id", "/id"),
    text("platform", "/platform"),
    text("name", "/name"),
    text("enabled", "/enabled"),
    text("external_id", "/external_id"),
    text("app_id", "/app_id"),
    text("bot_user_id", "/bot_user_id"),
    text("bot_id", "/bot_id"),
    text("api_base_url", "/api_base_url"),
    text("unlinked_policy", "/unlinked_policy"),
    text("unlinked_notice", "/unlinked_notice"),
    text("telegram_delivery", "/telegram_delivery"),
    text("format_markdown", "/format_markdown"),
    text("has_verify_token", "/has_verify_token"),
    text("has_outbound_token", "/has_outbound_token"),
    time("previous_secret_expires_at", "/previous_secret_expires_at"),
    time("created_at", "/created_at"),
    time("updated_at", "/updated_at"),
];

pub async fn run(command: Command, context: &Context) -> anyhow::Result<()> {
    let (client, out) = (&context.client, &context.out);
    match command {
        Command::List => {
            let list = client.get(&["admin", "connectors"], &vec![]).await?;
            out.list(&list, &list, LIST)
        }
        Command::Get { id } => {
            let id = id.to_string();
            out.record(&client.get(&["admin", "connectors", &id], &vec![]).await?, ONE)
        }
        Command::Update(update) => {
            let id = update.id.to_string();
            let body = patch_of(&update);
            let changed = client
                .send(Method::PATCH, &["admin", "connectors", &id], &vec![], Some(&body))
                .await?;
            out.record(&changed, ONE)
        }
        Command::Delete { id, purge } => {
            let path = id.to_string();
            let query = if purge {
                vec![("purge", "true".to_owned())]
            } else {
                vec![]
            };
            client
                .send(Method::DELETE, &["admin", "connectors", &path], &query, None)
                .await?;
            out.done(
                &format!("Deleted connector {id}."),
                &json!({"deleted": "connector", "id": id}),
            )
        }
    }
}

fn patch_of(update: &UpdateArgs) -> Value {
    let update = &update.patch;
    let string = |value: &Option<String>| value.as_ref().map(|v| json!(v));
    let secret = |value: &Option<SecretString>| value.as_ref().map(|v| json!(v.expose_secret()));
    object(vec![
        ("name", string(&update.name)),
        ("enabled", update.enabled.map(Value::from)),
        ("format_markdown", update.format_markdown.map(Value::from)),
        (
            "unlinked_policy",
            update.unlinked_policy.map(|p| json!(p.as_str())),
        ),
        (
            "telegram_delivery",
            update.telegram_delivery.map(|d| json!(d.as_str())),
        ),
        ("unlinked_notice", string(&update.unlinked_notice)),
        ("api_base_url", string(&update.api_base_url)),
        ("external_id", string(&update.external_id)),
        ("app_id", string(&update.app_id)),
        ("bot_user_id", string(&update.bot_user_id)),
        ("bot_id", string(&update.bot_id)),
        ("verification_secret", secret(&update.verification_secret)),
        (
            "previous_secret_grace_secs",
            update.previous_secret_grace_secs.map(Value::from),
        ),
        ("verify_token", secret(&update.verify_token)),
        ("outbound_token", secret(&update.outbound_token)),
    ])
}
