//! `admin messages …` and `admin history`. `export` pages through the listing: the API's own
//! export is oldest first with reply parts, this one is the listing's lines, newest first.

use clap::{Args, Subcommand};
use reqwest::Method;
use serde_json::{json, Value};
use uuid::Uuid;

use super::client::Query;
use super::output::{self, cut, text, time, Field, Format};
use super::{object, Context};
use crate::shapes::MessageSelection;

#[derive(Debug, Subcommand)]
pub enum Command {
    /// One page of messages, newest first; the next page with --cursor.
    List {
        #[command(flatten)]
        filters: Filters,
        /// `next_cursor` of the previous page.
        #[arg(long)]
        cursor: Option<String>,
        /// Page size, 1..=200 (server default 50).
        #[arg(long)]
        limit: Option<i64>,
    },
    /// One message with its reply parts.
    Get { id: Uuid },
    /// Every message the filters select, as JSON Lines (newest first), page after page.
    Export {
        #[command(flatten)]
        filters: Filters,
        /// Messages asked per request, 1..=200.
        #[arg(long, default_value_t = 200)]
        page_size: i64,
    },
    /// Ask the agent again for dispatch_failed messages: one (--id) or many by filter.
    Redispatch {
        #[command(flatten)]
        selection: Selection,
    },
    /// Post again the undelivered parts of answered messages: one (--id) or many by filter.
    Resend {
        #[command(flatten)]
        selection: Selection,
        /// Also the parts whose outcome is `unknown` (Telegram at-most-once): they may
        /// already be in the chat, so this can double them.
        #[arg(long)]
        include_unknown: bool,
    },
}

/// The listing's filters; each narrows.
#[derive(Debug, Args)]
#[command(mut_arg("status", |status| status.help(
    "accepted, dispatching, executed, delivery_failed, dispatch_failed, denied_unlinked, ignored or held"
)))]
pub struct Filters {
    #[command(flatten)]
    pub matching: MessageSelection,
    /// respond, no_reply, dispatch_failed, deny_unlinked or ignore_non_text.
    #[arg(long)]
    pub decision: Option<String>,
    /// Case-insensitive text search over request and response.
    #[arg(long)]
    pub search: Option<String>,
}

impl Filters {
    fn query(&self) -> Query {
        let matching = &self.matching;
        let mut query = Query::new();
        let mut add = |name, value: Option<String>| {
            if let Some(value) = value {
                query.push((name, value));
            }
        };
        add("user_id", matching.user_id.clone());
        add("platform", matching.platform.map(|p| p.as_str().to_owned()));
        add("connector_id", matching.connector_id.map(|c| c.to_string()));
        add("status", matching.status.map(|s| s.as_str().to_owned()));
        add("decision", self.decision.clone());
        add("since", matching.since.map(|t| t.to_rfc3339()));
        add("until", matching.until.map(|t| t.to_rfc3339()));
        add("q", self.search.clone());
        query
    }
}

/// Which messages a recovery action takes: one by id, or those the filters select (at most
/// --limit per call; the answer's `more` says whether to run it again).
#[derive(Debug, Args)]
#[command(mut_arg("status", |status| status.help(
    "resend: delivery_failed or executed (both when absent); redispatch: dispatch_failed"
)))]
pub struct Selection {
    /// One message, by id.
    #[arg(long, conflicts_with_all = ["user_id", "platform", "connector_id", "status", "since", "until", "limit"])]
    pub id: Option<Uuid>,
    #[command(flatten)]
    pub matching: MessageSelection,
    /// Most messages this call queues, 1..=1000 (server default 100).
    #[arg(long)]
    pub limit: Option<i64>,
}

impl Selection {
    fn body(&self, include_unknown: Option<bool>) -> Value {
        let matching = &self.matching;
        object(vec![
            ("user_id", matching.user_id.as_ref().map(|u| json!(u))),
            ("platform", matching.platform.map(|p| json!(p.as_str()))),
            ("connector_id", matching.connector_id.map(|c| json!(c))),
            ("status", matching.status.map(|s| json!(s.as_str()))),
            ("since", matching.since.map(|t| json!(t))),
            ("until", matching.until.map(|t| json!(t))),
            ("limit", self.limit.map(Value::from)),
            ("include_unknown", include_unknown.map(Value::from)),
        ])
    }
}

#[derive(Debug, Args)]
pub struct HistoryArgs {
    /// The tenant's user id.
    #[arg(long)]
    pub user: String,
    /// With --chat: the history of the user's next message in that chat, rather than their
    /// next direct message (needed when the tenant's history scope is `chat`).
    #[arg(long, requires = "chat")]
    pub connector: Option<Uuid>,
    #[arg(long, requires = "connector")]
    pub chat: Option<String>,
}

const LIST: &[Field] = &[
    text("ID", "/id"),
    time("RECEIVED (UTC)", "/received_at"),
    text("PLATFORM", "/platform"),
    text("USER", "/user_id"),
    text("STATUS", "/status"),
    cut("TEXT", "/request_content", 48),
];

const ONE: &[Field] = &[
    text("id", "/id"),
    text("status", "/status"),
    text("decision", "/decision"),
    text("platform", "/platform"),
    text("connector_id", "/connector_id"),
    text("chat_id", "/chat_id"),
    text("thread_id", "/thread_id"),
    text("space", "/space"),
    text("platform_user_id", "/platform_user_id"),
    text("user_id", "/user_id"),
    text("attempts", "/attempts"),
    cut("last_error", "/last_error", 200),
    time("received_at", "/received_at"),
    time("completed_at", "/completed_at"),
    time("delivered_at", "/delivered_at"),
    cut("request", "/request_content", 2000),
    cut("response", "/response_content", 2000),
];

const PARTS: &[Field] = &[
    text("PART", "/part_index"),
    text("STATUS", "/status"),
    text("DELIVERY", "/delivery_status"),
    text("ATTEMPTS", "/attempts"),
    time("SENT (UTC)", "/sent_at"),
    cut("ERROR", "/last_error", 40),
    cut("TEXT", "/content", 48),
];

/// A tap's turn: which choice, on the answer of which turn.
const TAP: &[Field] = &[
    cut("tapped", "/action/label", 80),
    cut("choice_id", "/action/id", 200),
    cut("choice_value", "/action/value", 200),
    text("on_answer_of", "/action/message_id"),
];

/// One answer's choices (rows built by `choice_rows`).
const CHOICES: &[Field] = &[
    text("#", "/index"),
    cut("LABEL", "/label", 80),
    cut("ID", "/id", 40),
    text("CHOSEN", "/chosen"),
    cut("LINK", "/url", 80),
];

const HISTORY: &[Field] = &[text("ROLE", "/role"), cut("CONTENT", "/content", 120)];

pub async fn run(command: Command, context: &Context) -> anyhow::Result<()> {
    match command {
        Command::List {
            filters,
            cursor,
            limit,
        } => list(context, &filters, cursor, limit).await,
        Command::Get { id } => get(context, id).await,
        Command::Export { filters, page_size } => export(context, &filters, page_size).await,
        Command::Redispatch { selection } => recover(context, "redispatch", &selection, None).await,
        Command::Resend {
            selection,
            include_unknown,
        } => recover(context, "resend", &selection, Some(include_unknown)).await,
    }
}

async fn list(
    context: &Context,
    filters: &Filters,
    cursor: Option<String>,
    limit: Option<i64>,
) -> anyhow::Result<()> {
    let mut query = filters.query();
    query.extend(cursor.map(|c| ("cursor", c)));
    query.extend(limit.map(|l| ("limit", l.to_string())));
    let page = context.client.get(&["admin", "messages"], &query).await?;
    context
        .out
        .list(&page, &page["items"], &list_fields(&page["items"]))?;
    if context.out.format == Format::Table {
        if let Some(next) = page["next_cursor"].as_str() {
            eprintln!("More messages: add --cursor {next}");
        }
    }
    Ok(())
}

async fn get(context: &Context, id: Uuid) -> anyhow::Result<()> {
    let id = id.to_string();
    let message = context.client.get(&["admin", "messages", &id], &vec![]).await?;
    context.out.record(&message, &one_fields(&message))?;
    if context.out.format == Format::Table {
        output::print("\nreply parts:\n")?;
        context.out.list(
            &message,
            &message["reply_parts"],
            &part_fields(&message["reply_parts"]),
        )?;
        print_choices(&message["reply_parts"])?;
    }
    Ok(())
}

fn is_tap(message: &Value) -> bool {
    message.get("action").is_some_and(|a| !a.is_null())
}

/// The listing's columns, with the answered turn of each tap when the page has taps.
fn list_fields(items: &Value) -> Vec<Field> {
    let mut fields = LIST.to_vec();
    if items.as_array().is_some_and(|items| items.iter().any(is_tap)) {
        fields.insert(LIST.len() - 1, text("TAP ON ANSWER OF", "/action/message_id"));
    }
    fields
}

/// A tap's record says which choice, on which answer, before the label as its text.
fn one_fields(message: &Value) -> Vec<Field> {
    let mut fields = ONE.to_vec();
    if is_tap(message) {
        let request = fields.len() - 2;
        fields.splice(request..request, TAP.iter().copied());
    }
    fields
}

/// The parts' columns, with EDIT OF when a part is the edit of another's message.
fn part_fields(parts: &Value) -> Vec<Field> {
    let mut fields = PARTS.to_vec();
    let edits = parts
        .as_array()
        .is_some_and(|parts| parts.iter().any(|p| !p["edit_of"].is_null()));
    if edits {
        fields.insert(PARTS.len() - 1, text("EDIT OF", "/edit_of"));
    }
    fields
}

/// Under the parts: each part's choices, the chosen one marked.
fn print_choices(parts: &Value) -> anyhow::Result<()> {
    for part in parts.as_array().into_iter().flatten() {
        let Some(offered) = part.get("choices").filter(|c| !c.is_null()) else {
            continue;
        };
        let after = match offered["reusable"].as_bool() {
            Some(true) => "stay open after a tap",
            _ => "close after the first tap",
        };
        let rows = choice_rows(offered, &part["chosen"]);
        output::print(&format!(
            "\nchoices of part {} ({after}):\n{}",
            output::cell(part.get("part_index"), output::Show::Text(10)),
            output::table(&rows, CHOICES)
        ))?;
    }
    Ok(())
}

fn choice_rows(offered: &Value, chosen: &Value) -> Vec<Value> {
    let items = offered["items"].as_array().map(Vec::as_slice).unwrap_or_default();
    items
        .iter()
        .enumerate()
        .map(|(index, choice)| {
            let mark = (chosen["index"].as_u64() == Some(index as u64)).then(|| {
                let by = output::cell(chosen.get("by"), output::Show::Text(60));
                let at = output::cell(chosen.get("at"), output::Show::Time);
                format!("✓ by {by} at {at}")
            });
            json!({"index": index, "label": choice["label"], "id": choice["id"],
                   "url": choice["url"], "chosen": mark})
        })
        .collect()
}

/// Each page is printed as it arrives.
async fn export(context: &Context, filters: &Filters, page_size: i64) -> anyhow::Result<()> {
    let mut cursor: Option<String> = None;
    loop {
        let mut query = filters.query();
        query.push(("limit", page_size.to_string()));
        query.extend(cursor.take().map(|c| ("cursor", c)));
        let page = context.client.get(&["admin", "messages"], &query).await?;
        let mut lines = String::new();
        for message in page["items"].as_array().into_iter().flatten() {
            lines.push_str(&serde_json::to_string(message)?);
            lines.push('\n');
        }
        output::print(&lines)?;
        match page["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => return Ok(()),
        }
    }
}

async fn recover(
    context: &Context,
    action: &'static str,
    selection: &Selection,
    include_unknown: Option<bool>,
) -> anyhow::Result<()> {
    let queued = match selection.id {
        Some(id) => {
            let id = id.to_string();
            let query = match include_unknown {
                Some(true) => vec![("include_unknown", "true".to_owned())],
                _ => vec![],
            };
            context
                .client
                .send(Method::POST, &["admin", "messages", &id, action], &query, None)
                .await?
        }
        None => {
            let body = selection.body(include_unknown.filter(|unknown| *unknown));
            context
                .client
                .send(Method::POST, &["admin", "messages", action], &vec![], Some(&body))
                .await?
        }
    };
    let count = queued["queued"].as_u64().unwrap_or(0);
    let mut sentence = format!("Queued {count} message(s) for {action}.");
    for id in queued["ids"].as_array().into_iter().flatten() {
        sentence.push_str(&format!("\n  {}", output::cell(Some(id), output::Show::Text(36))));
    }
    if queued["more"].as_bool() == Some(true) {
        sentence.push_str("\nMore messages match: run the command again.");
    }
    context.out.done(&sentence, &queued)
}

pub async fn history(args: HistoryArgs, context: &Context) -> anyhow::Result<()> {
    let mut query = Query::new();
    query.extend(args.connector.map(|c| ("connector_id", c.to_string())));
    query.extend(args.chat.map(|c| ("chat_id", c)));
    let history = context
        .client
        .get(&["admin", "users", &args.user, "history"], &query)
        .await?;
    if context.out.format == Format::Table {
        output::print(&format!(
            "history scope: {}\n",
            output::cell(history.get("history_scope"), output::Show::Text(20))
        ))?;
    }
    context.out.list(&history, &history["messages"], HISTORY)
}
