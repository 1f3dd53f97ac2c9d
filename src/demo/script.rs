//! The demo's conversation: signed webhooks to the gateway's real routes, two of which must
//! not become turns (a Slack retry, Slack's echo of our reply). Each turn's reply is awaited
//! before the next is sent: that is what makes the history each dispatch sees deterministic.

use std::io::Write;
use std::time::Duration;

use anyhow::Context;

use super::report::{plural, Outcome, Step, Turn, WebhookAnswer};
use super::stack::Stack;
use super::webhooks::*;
use crate::domain::Platform;

/// A healthy run needs milliseconds; the margin is for a cold, busy machine.
const REPLY_TIMEOUT: Duration = Duration::from_secs(20);

pub(super) struct Script<'a> {
    stack: &'a Stack,
    client: reqwest::Client,
    out: &'a mut (dyn Write + Send),
    steps: Vec<Step>,
}

impl<'a> Script<'a> {
    pub(super) fn new(stack: &'a Stack, out: &'a mut (dyn Write + Send)) -> anyhow::Result<Self> {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .context("Failed to build the HTTP client")?;
        Ok(Self {
            stack,
            client,
            out,
            steps: Vec::new(),
        })
    }

    pub(super) fn into_steps(self) -> Vec<Step> {
        self.steps
    }

    pub(super) async fn converse(&mut self) -> anyhow::Result<()> {
        let now = chrono::Utc::now().timestamp();
        let (first_ts, echo_ts, thanks_ts) = (
            format!("{now}.000100"),
            format!("{now}.000200"),
            format!("{}.000300", now + 1),
        );
        let hello = "Hi! What can you do?";
        let first = slack_dm(&first_ts, None, hello);
        self.turn(Platform::Slack, SLACK_ALICE, hello, first.clone())
            .await?;

        // Slack retries an event it thinks timed out: same body, retry headers.
        let retry = [
            ("x-slack-retry-num", "1".to_owned()),
            ("x-slack-retry-reason", "http_timeout".to_owned()),
        ];
        self.not_a_turn(
            Platform::Slack,
            SLACK_ALICE,
            hello,
            first,
            &retry,
            Outcome::Duplicate,
        )
        .await?;

        // Slack sends our own reply back to the app as a message event.
        let reply_text = self.last_reply_text();
        let echo = slack_bot_echo(&echo_ts, &first_ts, &reply_text);
        self.not_a_turn(
            Platform::Slack,
            SLACK_BOT_USER,
            &reply_text,
            echo,
            &[],
            Outcome::Dropped,
        )
        .await?;

        let telegram = "Same person, now on Telegram: do you remember me?";
        self.turn(
            Platform::Telegram,
            TELEGRAM_ALICE,
            telegram,
            telegram_text(900_000_001, 201, telegram),
        )
        .await?;

        let whatsapp = "Does it come in another color?";
        self.turn(
            Platform::Whatsapp,
            WHATSAPP_BOB,
            whatsapp,
            whatsapp_text(&format!("wamid.DEMO{now}"), whatsapp),
        )
        .await?;

        let thanks = "Back in the Slack thread: thanks!";
        self.turn(
            Platform::Slack,
            SLACK_ALICE,
            thanks,
            slack_dm(&thanks_ts, Some(&first_ts), thanks),
        )
        .await
    }

    fn last_reply_text(&self) -> String {
        self.steps
            .iter()
            .rev()
            .find_map(|s| match &s.outcome {
                Outcome::Replied(turn) => Some(turn.reply.text.clone()),
                _ => None,
            })
            .unwrap_or_default()
    }

    fn replies_so_far(&self) -> usize {
        self.steps
            .iter()
            .filter(|s| matches!(s.outcome, Outcome::Replied(_)))
            .count()
    }

    async fn turn(
        &mut self,
        platform: Platform,
        sender: &str,
        text: &str,
        body: Vec<u8>,
    ) -> anyhow::Result<()> {
        self.announce(platform, sender, text, "")?;
        let webhook = self.post(platform, body, &[]).await?;
        writeln!(
            self.out,
            "     gateway    {}, {} queued",
            webhook.status,
            plural(webhook.queued as usize, "turn")
        )?;
        anyhow::ensure!(
            webhook.queued == 1,
            "the gateway should have queued this message as one turn: {webhook:?}"
        );
        let expected = self.replies_so_far() + 1;
        let replies = self
            .stack
            .stand_ins
            .wait_for_replies(expected, REPLY_TIMEOUT)
            .await?;
        let reply = replies[expected - 1].clone();
        let dispatch = self
            .stack
            .seen
            .latest()
            .context("a reply arrived, yet the agent saw no dispatch")?;
        let turn = Turn {
            user_id: dispatch.user_id.clone(),
            agent_saw: dispatch.messages.iter().map(|m| m.role.clone()).collect(),
            reply,
        };
        self.print_turn(&turn)?;
        self.record(platform, sender, text, webhook, Outcome::Replied(turn));
        Ok(())
    }

    /// A webhook that must not become a turn: a duplicate or a dropped echo.
    async fn not_a_turn(
        &mut self,
        platform: Platform,
        sender: &str,
        text: &str,
        body: Vec<u8>,
        extra_headers: &[(&'static str, String)],
        outcome: Outcome,
    ) -> anyhow::Result<()> {
        let note = match outcome {
            Outcome::Duplicate => "  (Slack retries the same event: x-slack-retry-num 1)",
            _ => "  (our reply, sent back to the app by Slack)",
        };
        self.announce(platform, sender, text, note)?;
        let webhook = self.post(platform, body, extra_headers).await?;
        let (held, why) = match outcome {
            Outcome::Duplicate => (
                webhook.duplicates == 1,
                "duplicate: the same message key, so no new turn and no second reply",
            ),
            _ => (
                webhook.dropped == 1,
                "dropped: the bot's own message never reaches the agent",
            ),
        };
        writeln!(self.out, "     gateway    {}, {why}", webhook.status)?;
        anyhow::ensure!(
            held && webhook.queued == 0,
            "unexpected gateway answer: {webhook:?}"
        );
        self.record(platform, sender, text, webhook, outcome);
        Ok(())
    }

    fn announce(&mut self, platform: Platform, sender: &str, text: &str, note: &str) -> std::io::Result<()> {
        let who = match sender {
            SLACK_ALICE | TELEGRAM_ALICE => format!("alice ({sender})"),
            WHATSAPP_BOB => format!("bob ({sender})"),
            _ => format!("the bot itself ({sender})"),
        };
        writeln!(
            self.out,
            "{:>2}. {:<9} {who}: {text:?}{note}",
            self.steps.len() + 1,
            platform.as_str(),
        )
    }

    fn print_turn(&mut self, turn: &Turn) -> std::io::Result<()> {
        let earlier = turn
            .agent_saw
            .iter()
            .filter(|r| *r == "user")
            .count()
            .saturating_sub(1);
        writeln!(
            self.out,
            "     agent saw  {} [{}] for user {}: {} before this one",
            plural(turn.agent_saw.len(), "message"),
            turn.agent_saw.join(", "),
            turn.user_id.as_deref().unwrap_or("(unlinked)"),
            plural(earlier, "turn"),
        )?;
        let reply = &turn.reply;
        let target = match reply.platform {
            Platform::Slack => format!("channel {}, in thread {}", reply.chat, reply.reply_to),
            Platform::Telegram => format!("chat {}, replying to message {}", reply.chat, reply.reply_to),
            Platform::Whatsapp => format!("to {}, quoting {}", reply.chat, reply.reply_to),
        };
        writeln!(
            self.out,
            "     replied    {} {target}: {:?}\n",
            reply.platform, reply.text
        )
    }

    fn record(
        &mut self,
        platform: Platform,
        sender: &str,
        text: &str,
        webhook: WebhookAnswer,
        outcome: Outcome,
    ) {
        if !matches!(outcome, Outcome::Replied(_)) {
            let _ = writeln!(self.out);
        }
        self.steps.push(Step {
            platform,
            sender: sender.to_owned(),
            text: text.to_owned(),
            webhook,
            outcome,
        });
    }

    /// Anything but 200 stops the demo.
    async fn post(
        &self,
        platform: Platform,
        body: Vec<u8>,
        extra_headers: &[(&'static str, String)],
    ) -> anyhow::Result<WebhookAnswer> {
        let mut request = self.client.post(self.stack.hook_url(platform));
        for (name, value) in signed_headers(platform, &body) {
            request = request.header(name, value);
        }
        for (name, value) in extra_headers {
            request = request.header(*name, value);
        }
        let response = request
            .body(body)
            .send()
            .await
            .context("Failed to reach the demo gateway")?;
        let status = response.status();
        let text = response.text().await.unwrap_or_default();
        anyhow::ensure!(status == 200, "the gateway answered {status}: {text}");
        let mut answer: WebhookAnswer =
            serde_json::from_str(&text).with_context(|| format!("unexpected webhook answer: {text}"))?;
        answer.status = status.as_u16();
        Ok(answer)
    }
}
