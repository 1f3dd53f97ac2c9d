//! `admin conversations held|take-over|hand-back|send`: a person stepping in
//! (docs/admin.md#human-handoff). A conversation is `user:<user id>` or
//! `sender:<connector id>:<platform user id>`, as the turns' `conversation` field shows.

use clap::Subcommand;
use reqwest::Method;
use serde_json::json;

use super::output::{text, time, Field};
use super::{object, Context};

#[derive(Debug, Subcommand)]
pub enum Command {
    /// The conversations a person holds, oldest hold first.
    Held,
    /// Hold a conversation: its user's turns are recorded, not sent to the agent.
    TakeOver {
        conversation: String,
        /// Shown in the held list.
        #[arg(long)]
        reason: Option<String>,
    },
    /// Give it back to the agent (which answers the user's last turn if nobody did).
    HandBack { conversation: String },
    /// Write to the user as a person (Markdown), threaded to their latest message.
    Send {
        conversation: String,
        /// The message; `-` reads it from standard input.
        text: String,
        /// The same key again posts nothing twice.
        #[arg(long)]
        idempotency_key: Option<String>,
    },
}

const HELD: &[Field] = &[
    text("CONVERSATION", "/conversation"),
    text("HELD BY", "/held_by"),
    text("REASON", "/reason"),
    time("HELD AT (UTC)", "/held_at"),
    text("WAITING", "/waiting"),
    time("LAST TURN (UTC)", "/last_turn_at"),
];

pub async fn run(command: Command, context: &Context) -> anyhow::Result<()> {
    let (client, out) = (&context.client, &context.out);
    match command {
        Command::Held => {
            let held = client.get(&["admin", "conversations", "held"], &vec![]).await?;
            out.list(&held, &held["conversations"], HELD)
        }
        Command::TakeOver { conversation, reason } => {
            let body = object(vec![("reason", reason.map(Into::into))]);
            let hold = client
                .send(
                    Method::POST,
                    &["admin", "conversations", &conversation, "take-over"],
                    &vec![],
                    Some(&body),
                )
                .await?;
            let by = hold["held_by"].as_str().unwrap_or("someone");
            out.done(&format!("{conversation} is held by {by}."), &hold)
        }
        Command::HandBack { conversation } => {
            let back = client
                .send(
                    Method::POST,
                    &["admin", "conversations", &conversation, "hand-back"],
                    &vec![],
                    None,
                )
                .await?;
            let sentence = match (back["released"].as_bool(), back["dispatched"].as_str()) {
                (Some(false), _) => format!("{conversation} was not held."),
                (_, Some(id)) => format!("{conversation} is the agent's again; it answers turn {id} now."),
                _ => format!("{conversation} is the agent's again."),
            };
            out.done(&sentence, &back)
        }
        Command::Send {
            conversation,
            text,
            idempotency_key,
        } => {
            let content = if text == "-" {
                std::io::read_to_string(std::io::stdin())?
            } else {
                text
            };
            let body = object(vec![
                ("content", Some(json!(content))),
                ("idempotency_key", idempotency_key.map(Into::into)),
            ]);
            let posted = client
                .send(
                    Method::POST,
                    &["admin", "conversations", &conversation, "messages"],
                    &vec![],
                    Some(&body),
                )
                .await?;
            let id = posted["message_id"].as_str().unwrap_or("?");
            let sentence = if posted["created"].as_bool() == Some(false) {
                format!("Already posted as turn {id}.")
            } else {
                format!("Queued as turn {id}; its parts are posted in order.")
            };
            out.done(&sentence, &posted)
        }
    }
}
