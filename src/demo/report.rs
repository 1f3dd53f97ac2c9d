//! What the demo reports: the summary of every step (also its `--json` output) and the last
//! words with commands to explore that work when pasted.

use std::io::Write;

use serde::{Deserialize, Serialize};

use super::platforms::{PostedFile, PostedReply};
use crate::choices::TapAction;
use crate::domain::{Platform, TenantId};

/// What happened, step by step; the demo's printed walkthrough is made from it.
#[derive(Debug, Clone, Serialize)]
pub struct DemoSummary {
    pub tenant_id: TenantId,
    /// The demo database (a password, if any, replaced by `****`).
    pub database_url: String,
    pub steps: Vec<Step>,
    /// Rows in `channel_messages` of the demo tenant once the conversation is over.
    pub recorded_turns: usize,
    pub elapsed_ms: u64,
}

impl DemoSummary {
    /// Every answered turn, a tap's included.
    pub fn turns(&self) -> impl Iterator<Item = (&Step, &Turn)> {
        self.steps
            .iter()
            .filter_map(|step| step.outcome.turn().map(|turn| (step, turn)))
    }

    pub fn taps(&self) -> usize {
        self.count(|o| matches!(o, Outcome::Tapped(_)))
    }

    /// Pictures the platforms received with the answers.
    pub fn pictures(&self) -> usize {
        self.turns().map(|(_, turn)| turn.pictures.len()).sum()
    }

    pub fn duplicates(&self) -> usize {
        self.count(|o| matches!(o, Outcome::Duplicate))
    }

    pub fn dropped(&self) -> usize {
        self.count(|o| matches!(o, Outcome::Dropped))
    }

    fn count(&self, which: impl Fn(&Outcome) -> bool) -> usize {
        self.steps.iter().filter(|s| which(&s.outcome)).count()
    }
}

/// One webhook the demo posted.
#[derive(Debug, Clone, Serialize)]
pub struct Step {
    pub platform: Platform,
    pub sender: String,
    pub text: String,
    pub webhook: WebhookAnswer,
    pub outcome: Outcome,
}

/// The gateway's answer to a webhook (`POST /v1/hooks/…`). A Telegram tap is answered with
/// a Bot API method instead (`answerCallbackQuery`, which stops the button's spinner).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WebhookAnswer {
    #[serde(default)]
    pub status: u16,
    #[serde(default)]
    pub queued: u64,
    #[serde(default)]
    pub duplicates: u64,
    #[serde(default)]
    pub dropped: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Outcome {
    /// A new user turn: dispatched to the agent and answered on the platform.
    Replied(Turn),
    /// A tap on a button of an answer: a turn too, dispatched with its `action`.
    Tapped(Turn),
    /// A retry of a message already recorded: no new turn.
    Duplicate,
    /// Never recorded, never dispatched (a bot's own message).
    Dropped,
}

impl Outcome {
    pub fn turn(&self) -> Option<&Turn> {
        match self {
            Outcome::Replied(turn) | Outcome::Tapped(turn) => Some(turn),
            Outcome::Duplicate | Outcome::Dropped => None,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Turn {
    /// The linked user the gateway resolved the sender to.
    pub user_id: Option<String>,
    /// The roles of `messages[]` as the agent received them, oldest first.
    pub agent_saw: Vec<String>,
    /// On a tap: the choice as the agent received it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub action: Option<TapAction>,
    pub reply: PostedReply,
    /// The files posted after the reply's text, as the platform received them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pictures: Vec<PostedFile>,
}

/// A URL with a password is not printed; the scripts' own set-up gives it back instead.
pub(super) fn conclude(
    summary: &DemoSummary,
    url_holds_a_secret: bool,
    out: &mut (dyn Write + Send),
) -> std::io::Result<()> {
    let turns = summary.turns().count();
    writeln!(
        out,
        "Done in {:.1} s: {} webhooks made {turns} turns ({} rows in channel_messages), each answered on its \
         own platform, {} of them a tap on a button; {} posted; {} retried duplicate collapsed, {} bot echo \
         dropped.\n",
        summary.elapsed_ms as f64 / 1000.0,
        summary.steps.len(),
        summary.recorded_turns,
        summary.taps(),
        plural(summary.pictures(), "picture"),
        summary.duplicates(),
        summary.dropped(),
    )?;
    writeln!(
        out,
        "Explore, from the repository root (the database stays until the next demo; the demo's agent and \
         platform stand-ins have stopped):"
    )?;
    let database = reqwest::Url::parse(&summary.database_url)
        .ok()
        .map(|url| url.path().trim_start_matches('/').to_owned())
        .unwrap_or_default();
    if url_holds_a_secret {
        writeln!(
            out,
            "  source scripts/lib/postgres.sh && ensure_database {database}   # DATABASE_URL, password included"
        )?;
    } else {
        writeln!(out, "  export DATABASE_URL='{}'", summary.database_url)?;
    }
    writeln!(out, "  B={}", this_binary())?;
    let tenant = summary.tenant_id;
    writeln!(out, "  $B messages list --tenant {tenant}")?;
    writeln!(out, "  $B history --tenant {tenant} --user alice")?;
    writeln!(
        out,
        "  $B key issue --tenant {tenant}   # then the admin API (docs/admin.md)"
    )?;
    writeln!(
        out,
        "  scripts/run     # with that DATABASE_URL: the gateway, its admin API and CLI on the demo data (README)"
    )
}

/// This program's path, relative to the working directory when it lies below it.
fn this_binary() -> String {
    let Ok(exe) = std::env::current_exe() else {
        return "channel-bridge".to_owned();
    };
    let relative = std::env::current_dir()
        .ok()
        .and_then(|cwd| exe.strip_prefix(cwd).ok().map(std::path::Path::to_path_buf));
    relative.unwrap_or(exe).display().to_string()
}

pub(super) fn plural(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}
