//! `admin conversations held|take-over|hand-back|send`: a person stepping in
//! (docs/admin.md#human-handoff). A conversation is `user:<user id>` or
//! `sender:<connector id>:<platform user id>`, as the turns' `conversation` field shows.

use clap::{Args, Subcommand};
use reqwest::Method;
use serde_json::{json, Value};

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
        #[command(flatten)]
        choices: ChoiceArgs,
    },
}

/// Buttons under the message (docs/agent.md#offering-choices): the user's tap is a turn of
/// theirs, held while the conversation is.
#[derive(Debug, Args)]
pub struct ChoiceArgs {
    /// A button, in order; its label is also its id. Repeat for more (at most 25).
    #[arg(long = "choice", value_name = "LABEL")]
    labels: Vec<String>,
    /// Keep the choices open after a tap (a menu tapped again and again).
    #[arg(long, requires = "labels")]
    choices_reusable: bool,
}

impl ChoiceArgs {
    fn fields(&self) -> Vec<(&'static str, Option<Value>)> {
        if self.labels.is_empty() {
            return Vec::new();
        }
        let items: Vec<Value> = self
            .labels
            .iter()
            .map(|label| json!({"id": label, "label": label}))
            .collect();
        vec![
            ("choices", Some(Value::Array(items))),
            (
                "choices_reusable",
                self.choices_reusable.then_some(Value::Bool(true)),
            ),
        ]
    }
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
            choices,
        } => send(context, &conversation, text, idempotency_key, &choices).await,
    }
}

async fn send(
    context: &Context,
    conversation: &str,
    text: String,
    idempotency_key: Option<String>,
    choices: &ChoiceArgs,
) -> anyhow::Result<()> {
    let content = if text == "-" {
        std::io::read_to_string(std::io::stdin())?
    } else {
        text
    };
    let mut fields = vec![
        ("content", Some(json!(content))),
        ("idempotency_key", idempotency_key.map(Into::into)),
    ];
    fields.extend(choices.fields());
    let posted = context
        .client
        .send(
            Method::POST,
            &["admin", "conversations", conversation, "messages"],
            &vec![],
            Some(&object(fields)),
        )
        .await?;
    let id = posted["message_id"].as_str().unwrap_or("?");
    let sentence = if posted["created"].as_bool() == Some(false) {
        format!("Already posted as turn {id}.")
    } else {
        format!("Queued as turn {id}; its parts are posted in order.")
    };
    context.out.done(&sentence, &posted)
}
