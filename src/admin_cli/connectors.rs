//! `admin connectors list|get|update|delete`. A new secret comes from its flag only, never
//! the environment, so a variable left over from `connector add` cannot rotate one.

use clap::{Args, Subcommand};
use reqwest::Method;
use secrecy::{ExposeSecret, SecretString};
use serde_json::{json, Value};
use uuid::Uuid;

use super::output::{text, time, Field};
use super::{object, Context};
use crate::shapes::ConnectorPatch;

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
            let body = patch_of(&update)?;
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

/// The PATCH body: the settings given as the API spells them, and the secrets.
fn patch_of(update: &UpdateArgs) -> anyhow::Result<Value> {
    let patch = &update.patch;
    let secret = |value: &Option<SecretString>| value.as_ref().map(|v| json!(v.expose_secret()));
    let mut body = object(vec![
        ("enabled", patch.enabled.map(Value::from)),
        ("verification_secret", secret(&patch.secrets.verification_secret)),
        (
            "previous_secret_grace_secs",
            patch.previous_secret_grace_secs.map(Value::from),
        ),
        ("verify_token", secret(&patch.secrets.verify_token)),
        ("outbound_token", secret(&patch.secrets.outbound_token)),
    ]);
    if let (Value::Object(body), Value::Object(settings)) =
        (&mut body, serde_json::to_value(&patch.settings)?)
    {
        body.extend(settings.into_iter().filter(|(_, value)| !value.is_null()));
    }
    Ok(body)
}
