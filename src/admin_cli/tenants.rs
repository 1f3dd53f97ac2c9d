//! `admin tenants list|get|update` (operator); a tenant is named by its id or its slug.

use clap::Subcommand;
use reqwest::Method;
use serde_json::{json, Value};

use super::client::Query;
use super::output::{or_else, text, time, Field};
use super::{object, Context};

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Tenants by slug, a page at a time (--all: every one).
    List {
        /// `next_cursor` of the previous page.
        #[arg(long, conflicts_with = "all")]
        cursor: Option<String>,
        /// Page size, 1..=200 (server default 50).
        #[arg(long)]
        limit: Option<i64>,
        /// Page through to the last tenant; prints them as one page.
        #[arg(long)]
        all: bool,
    },
    /// One tenant, by id or slug.
    Get { tenant: String },
    /// Change a tenant's settings; flags not given keep their value.
    Update {
        /// The tenant's id or slug.
        tenant: String,
        #[arg(long)]
        name: Option<String>,
        /// Most of its jobs one instance keeps in flight, or `default` for the instance's
        /// share (CB_TENANT_SHARE_PERCENT of CB_MAX_IN_FLIGHT).
        #[arg(long, value_parser = parse_max_in_flight)]
        max_in_flight: Option<MaxInFlight>,
        /// Which earlier turns the agent sees
        /// (docs/agent.md#history-scope-what-the-agent-sees-of-earlier-turns).
        #[arg(long, value_parser = ["user", "private_aware", "chat"])]
        history_scope: Option<String>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MaxInFlight {
    Cap(i32),
    Default,
}

fn parse_max_in_flight(text: &str) -> Result<MaxInFlight, String> {
    match text {
        "default" => Ok(MaxInFlight::Default),
        number => match number.parse::<i32>() {
            Ok(n) if n >= 1 => Ok(MaxInFlight::Cap(n)),
            _ => Err("a whole number of at least 1, or `default`".into()),
        },
    }
}

const LIST: &[Field] = &[
    text("SLUG", "/slug"),
    text("NAME", "/name"),
    text("ID", "/id"),
    or_else("MAX IN FLIGHT", "/max_in_flight", "default"),
    text("HISTORY SCOPE", "/history_scope"),
    text("KEYS", "/active_keys"),
    time("CREATED (UTC)", "/created_at"),
];

const ONE: &[Field] = &[
    text("id", "/id"),
    text("slug", "/slug"),
    text("name", "/name"),
    or_else("agent_url", "/agent_url", "(the server's CB_AGENT_URL)"),
    or_else("max_in_flight", "/max_in_flight", "default"),
    text("history_scope", "/history_scope"),
    text("active_keys", "/active_keys"),
    time("created_at", "/created_at"),
    time("updated_at", "/updated_at"),
];

pub async fn run(command: Command, context: &Context) -> anyhow::Result<()> {
    let (client, out) = (&context.client, &context.out);
    match command {
        Command::List { cursor, limit, all } => {
            let page = if all {
                every_tenant(context, limit).await?
            } else {
                let mut query = Query::new();
                query.extend(cursor.map(|c| ("cursor", c)));
                query.extend(limit.map(|l| ("limit", l.to_string())));
                client.get(&["operator", "tenants"], &query).await?
            };
            out.list(&page, &page["items"], LIST)?;
            if let (super::Format::Table, Some(next)) = (out.format, page["next_cursor"].as_str()) {
                eprintln!("More tenants: add --cursor {next} (or --all)");
            }
            Ok(())
        }
        Command::Get { tenant } => out.record(
            &client.get(&["operator", "tenants", &tenant], &vec![]).await?,
            ONE,
        ),
        Command::Update {
            tenant,
            name,
            max_in_flight,
            history_scope,
        } => {
            let body = object(vec![
                ("name", name.map(Value::from)),
                (
                    "max_in_flight",
                    max_in_flight.map(|max| match max {
                        MaxInFlight::Cap(n) => json!(n),
                        MaxInFlight::Default => Value::Null,
                    }),
                ),
                ("history_scope", history_scope.map(Value::from)),
            ]);
            let changed = client
                .send(
                    Method::PATCH,
                    &["operator", "tenants", &tenant],
                    &vec![],
                    Some(&body),
                )
                .await?;
            out.record(&changed, ONE)
        }
    }
}

/// Every page, as one page: `{"items": [...], "next_cursor": null}`.
async fn every_tenant(context: &Context, limit: Option<i64>) -> anyhow::Result<Value> {
    let mut items = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut query = Query::new();
        query.push(("limit", limit.unwrap_or(200).to_string()));
        query.extend(cursor.take().map(|c| ("cursor", c)));
        let mut page = context.client.get(&["operator", "tenants"], &query).await?;
        if let Some(Value::Array(page_items)) = page.get_mut("items").map(Value::take) {
            items.extend(page_items);
        }
        match page["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => return Ok(json!({"items": items, "next_cursor": null})),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_in_flight_is_a_positive_number_or_default() {
        assert_eq!(parse_max_in_flight("64"), Ok(MaxInFlight::Cap(64)));
        assert_eq!(parse_max_in_flight("default"), Ok(MaxInFlight::Default));
        assert!(parse_max_in_flight("0").is_err());
        assert!(parse_max_in_flight("lots").is_err());
    }
}
