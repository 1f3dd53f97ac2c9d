//! The demo's conversation: signed webhooks to the gateway's real routes, two of which must
//! not become turns (a Slack retry, Slack's echo of our reply), one of which is a tap on a
//! button the agent offered, and one of which is answered with a picture. Each turn's reply
//! is awaited before the next is sent: that is what makes the history each dispatch sees
//! deterministic.

use std::io::Write;
use std::time::Duration;

use anyhow::Context;

use super::agent::EchoMode;
use super::database::answer_recorded;
use super::platforms::{PostedFile, PostedReply};
use super::report::{plural, Outcome, Step, Turn, WebhookAnswer};
use super::stack::Stack;
use super::webhooks::*;
use crate::dispatch::payload::DispatchOut;
use crate::domain::{MessageId, Platform};

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
        let first_ts = format!("{now}.000100");
        self.slack_opening(&first_ts, &format!("{now}.000200")).await?;

        // The echo offers Yes/No with its answer to this question, and alice taps Yes.
        self.stack.echo.set(EchoMode::OfferingChoices);
        let telegram = "Same person, now on Telegram: do you remember me?";
        self.turn(
            Platform::Telegram,
            TELEGRAM_ALICE,
            telegram,
            telegram_text(900_000_001, 201, telegram),
        )
        .await?;
        self.tap(900_000_002).await?;

        // The echo sends its picture after the text of this answer.
        self.stack.echo.set(EchoMode::SendingAFile);
        let picture = "Can you send me a picture?";
        self.turn(
            Platform::Telegram,
            TELEGRAM_ALICE,
            picture,
            telegram_text(900_000_003, 202, picture),
        )
        .await?;
        self.stack.echo.set(EchoMode::Plain);

        let whatsapp = "Does it come in another color?";
        self.turn(
            Platform::Whatsapp,
            WHATSAPP_BOB,
            whatsapp,
            whatsapp_text(&format!("wamid.DEMO{now}"), whatsapp),
        )
        .await?;

        let thanks = "Back in the Slack thread: thanks!";
        let thanks_ts = format!("{}.000300", now + 1);
        self.turn(
            Platform::Slack,
            SLACK_ALICE,
            thanks,
            slack_dm(&thanks_ts, Some(&first_ts), thanks),
        )
        .await
    }

    /// Alice's first message, Slack's retry of it, and Slack's echo of our reply.
    async fn slack_opening(&mut self, first_ts: &str, echo_ts: &str) -> anyhow::Result<()> {
        let hello = "Hi! What can you do?";
        let first = slack_dm(first_ts, None, hello);
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
        let reply_text = self.last_reply().map(|r| r.text.clone()).unwrap_or_default();
        let echo = slack_bot_echo(echo_ts, first_ts, &reply_text);
        self.not_a_turn(
            Platform::Slack,
            SLACK_BOT_USER,
            &reply_text,
            echo,
            &[],
            Outcome::Dropped,
        )
        .await
    }

    fn last_reply(&self) -> Option<&PostedReply> {
        self.steps
            .iter()
            .rev()
            .find_map(|s| s.outcome.turn().map(|turn| &turn.reply))
    }

    fn replies_so_far(&self) -> usize {
        self.steps.iter().filter(|s| s.outcome.turn().is_some()).count()
    }

    fn pictures_so_far(&self) -> usize {
        let turns = self.steps.iter().filter_map(|s| s.outcome.turn());
        turns.map(|turn| turn.pictures.len()).sum()
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
        let turn = self.answered().await?;
        self.print_turn(&turn)?;
        self.record(platform, sender, text, webhook, Outcome::Replied(turn));
        Ok(())
    }

    /// Alice taps the first button of the last answer, as Telegram sends a tap: the
    /// button's `callback_data` with the message it belongs to.
    async fn tap(&mut self, update_id: i64) -> anyhow::Result<()> {
        let question = self.last_reply().cloned().context("no answer to tap")?;
        let button = question
            .buttons
            .first()
            .cloned()
            .context("the echo's answer offered no buttons")?;
        self.until_answer_recorded().await?;
        self.announce(
            Platform::Telegram,
            TELEGRAM_ALICE,
            &button.label,
            "  (taps a button of that answer)",
        )?;
        let body = telegram_tap(update_id, &question.message_id, &question.text, &button.data);
        let webhook = self.post(Platform::Telegram, body, &[]).await?;
        anyhow::ensure!(
            webhook.method.as_deref() == Some("answerCallbackQuery"),
            "the gateway should answer a tap with answerCallbackQuery: {webhook:?}"
        );
        writeln!(
            self.out,
            "     gateway    {}, answerCallbackQuery in its answer (the button stops spinning)",
            webhook.status
        )?;
        let edits = self.stack.stand_ins.wait_for_edits(1, REPLY_TIMEOUT).await?;
        writeln!(
            self.out,
            "     closed     the keyboard of message {} removed (editMessageReplyMarkup)",
            edits[0].message_id
        )?;
        let turn = self.answered().await?;
        anyhow::ensure!(
            turn.action.as_ref().is_some_and(|a| a.label == button.label),
            "the agent should have received the tap as its `action`: {:?}",
            turn.action
        );
        self.print_turn(&turn)?;
        self.record(
            Platform::Telegram,
            TELEGRAM_ALICE,
            &button.label,
            webhook,
            Outcome::Tapped(turn),
        );
        Ok(())
    }

    /// Until the gateway has recorded the last answer as posted. It learns the message's id
    /// from the platform's response, a moment after the stand-in has the message: a person
    /// never taps that fast, a script does, and a tap before the record finds no message to
    /// close. Nothing announces the record, so it is looked up every few milliseconds.
    async fn until_answer_recorded(&self) -> anyhow::Result<()> {
        let answered: MessageId = self
            .stack
            .seen
            .latest()
            .context("an answer was posted, yet the agent saw no dispatch")?
            .message_id
            .parse()
            .context("the dispatch's message_id is a turn id")?;
        let started = std::time::Instant::now();
        while !answer_recorded(&self.stack.pool, self.stack.tenant, answered).await? {
            anyhow::ensure!(
                started.elapsed() < REPLY_TIMEOUT,
                "the gateway did not record its answer as posted within {REPLY_TIMEOUT:?}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(())
    }

    /// The next reply on the stand-ins, with what the agent saw of the turn it answers.
    async fn answered(&self) -> anyhow::Result<Turn> {
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
        let pictures = match self.stack.echo.mode() {
            EchoMode::SendingAFile => vec![self.posted_picture(&reply, &dispatch).await?],
            _ => Vec::new(),
        };
        Ok(Turn {
            user_id: dispatch.user_id.clone(),
            agent_saw: dispatch.messages.iter().map(|m| m.role.clone()).collect(),
            action: dispatch.action,
            reply,
            pictures,
        })
    }

    /// The echo's picture as the platform received it after the reply's text: uploaded to
    /// the reply's chat as a photo (Telegram `sendPhoto`, multipart), its file `echo.png`
    /// with PNG bytes, its caption `echo: <the text it answers>`.
    async fn posted_picture(
        &self,
        reply: &PostedReply,
        dispatch: &DispatchOut,
    ) -> anyhow::Result<PostedFile> {
        let expected = self.pictures_so_far() + 1;
        let files = self
            .stack
            .stand_ins
            .wait_for_files(expected, REPLY_TIMEOUT)
            .await
            .context("the echo answered with a picture, but the platform received no file")?;
        let file = files[expected - 1].clone();
        anyhow::ensure!(
            (file.platform, file.chat.as_str()) == (reply.platform, reply.chat.as_str()),
            "the picture went to {} chat {}, not to the answer's chat: {file:?}",
            file.platform,
            file.chat
        );
        anyhow::ensure!(
            file.method == "sendPhoto",
            "the picture should be posted as a photo (sendPhoto): {file:?}"
        );
        anyhow::ensure!(
            file.name == "echo.png" && file.png,
            "the platform received another file than the echo's PNG: {file:?}"
        );
        let caption = format!("echo: {}", dispatch.content);
        anyhow::ensure!(
            file.caption == caption,
            "the picture's caption should be {caption:?}: {file:?}"
        );
        Ok(file)
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
        if let Some(action) = &turn.action {
            writeln!(
                self.out,
                "     the tap    as `action`: choice {:?} ({:?}) of the answer to turn {}",
                action.id, action.label, action.message_id
            )?;
        }
        let reply = &turn.reply;
        let target = match reply.platform {
            Platform::Slack => format!("channel {}, in thread {}", reply.chat, reply.reply_to),
            Platform::Telegram => format!("chat {}, replying to message {}", reply.chat, reply.reply_to),
            Platform::Whatsapp => format!("to {}, quoting {}", reply.chat, reply.reply_to),
        };
        let buttons: String = reply.buttons.iter().map(|b| format!(" [{}]", b.label)).collect();
        writeln!(
            self.out,
            "     replied    {} {target}: {:?}{buttons}",
            reply.platform, reply.text
        )?;
        for picture in &turn.pictures {
            writeln!(
                self.out,
                "     picture    {} ({}, {} bytes) with {} to chat {}: caption {:?}",
                picture.name, picture.mime, picture.size, picture.method, picture.chat, picture.caption
            )?;
        }
        writeln!(self.out)
    }

    fn record(
        &mut self,
        platform: Platform,
        sender: &str,
        text: &str,
        webhook: WebhookAnswer,
        outcome: Outcome,
    ) {
        if outcome.turn().is_none() {
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
