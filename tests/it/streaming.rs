//! Streamed answers (docs/agent.md#streamed-answers): an agent answering with
//! `text/event-stream` (OpenAI chunks or the gateway's own events) has its answer stored and
//! delivered like any other; while the stream runs, each platform shows it (Slack's native
//! stream, a Telegram draft in a private chat, a Telegram group message edited as it grows),
//! and the message it leaves is adopted as the first reply part, also after a worker was
//! killed mid-stream.

use std::sync::Arc;
use std::time::Duration;

use channel_bridge::dispatch::StepOutcome;
use channel_bridge::domain::Platform;
use serde_json::{json, Value};
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

use crate::support::fake_agent::{Chunk, Reply};
use crate::support::fake_platforms::Answer;
use crate::support::pipeline::executed;
use crate::support::platforms::*;
use crate::support::Pipeline;

/// Short, so that a test sees several calls; the live view paces itself by it.
const STREAM_INTERVAL: Duration = Duration::from_millis(20);

async fn setup() -> Pipeline {
    Pipeline::builder()
        .settings(|settings| settings.dispatch.stream_interval_ms = STREAM_INTERVAL.as_millis() as u64)
        .start()
        .await
}

/// The turn's row: response, live message id, delivered.
async fn turn_row(s: &Pipeline) -> (Option<String>, Option<String>, bool) {
    let mut owner = s.app.db.owner_conn().await;
    sqlx::query_as("select response_content, live_message_id, delivered_at is not null from channel_messages")
        .fetch_one(&mut owner)
        .await
        .unwrap()
}

/// The live message the view recorded, once it is recorded (a bounded wait).
async fn recorded_live_message(s: &Pipeline) -> String {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(id) = turn_row(s).await.1 {
            return id;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the live message is recorded"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Kills a running worker step as a crash would.
async fn kill(step: JoinHandle<StepOutcome>) {
    step.abort();
    assert!(step.await.unwrap_err().is_cancelled());
}

fn whatsapp_text() -> Vec<u8> {
    fixture(Platform::Whatsapp, "text")
}

/// A Telegram text in a supergroup (a shared space).
fn telegram_group_text(update_id: i64, text: &str) -> Vec<u8> {
    let mut update: Value = serde_json::from_slice(&telegram_text(update_id, text)).unwrap();
    update["message"]["chat"] = json!({"id": -1_001_276_785_818_i64, "type": "supergroup", "title": "Team"});
    serde_json::to_vec(&update).unwrap()
}

fn gate() -> Arc<Semaphore> {
    Arc::new(Semaphore::new(0))
}

// --- Step 1: read, stored and delivered -----------------------------------------------------

#[tokio::test]
async fn an_openai_stream_is_stored_and_delivered_as_one_reply() {
    let s = setup().await;
    s.agent.script([Reply::Stream(vec![
        Chunk::Event(": keep-alive comment\n\n".into()),
        Chunk::openai("Hel"),
        Chunk::openai("lo, "),
        Chunk::openai("world"),
        Chunk::openai_done(),
    ])]);
    let id = executed(s.turn(Platform::Whatsapp, whatsapp_text()).await).await;

    let sent = s.platforms.sent_to(Platform::Whatsapp);
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0].text(), "Hello, world");
    let (response, live, delivered) = turn_row(&s).await;
    assert_eq!(response.as_deref(), Some("Hello, world"));
    assert_eq!(live, None, "WhatsApp shows nothing but typing");
    assert!(delivered);
    assert_eq!(s.parts(id).await.len(), 1);
}

#[tokio::test]
async fn the_gateway_event_format_may_name_the_parts_in_its_final_event() {
    let s = setup().await;
    s.agent.script([Reply::Stream(vec![
        Chunk::Event("event: ping\ndata: {}\n\n".into()),
        Chunk::delta("one"),
        Chunk::delta(" two"),
        Chunk::done(json!({"messages": [{"role": "assistant", "content": "one"},
                                         {"role": "assistant", "content": "two"}]})),
    ])]);
    executed(s.turn(Platform::Whatsapp, whatsapp_text()).await).await;
    let texts: Vec<String> = s
        .platforms
        .sent_to(Platform::Whatsapp)
        .iter()
        .map(|sent| sent.text().to_owned())
        .collect();
    assert_eq!(texts, ["one", "two"]);

    // Without parts in it, the final event closes the deltas' text.
    let s = setup().await;
    s.agent.script([Reply::Stream(vec![
        Chunk::delta("all "),
        Chunk::delta("of it"),
        Chunk::done(json!({})),
    ])]);
    executed(s.turn(Platform::Whatsapp, whatsapp_text()).await).await;
    assert_eq!(s.platforms.sent_to(Platform::Whatsapp)[0].text(), "all of it");
}

#[tokio::test]
async fn a_stream_cut_off_before_its_final_event_is_retried_and_answered_once() {
    let s = setup().await;
    s.agent.script([
        Reply::Stream(vec![Chunk::openai("half an ans")]),
        Reply::Stream(vec![Chunk::openai("a whole answer"), Chunk::openai_done()]),
    ]);
    s.deliver(Platform::Whatsapp, whatsapp_text()).await;
    let id = match s.worker.step().await.unwrap() {
        StepOutcome::Retrying(id) => id,
        other => panic!("a cut-off stream is retried, got {other:?}"),
    };
    let mut owner = s.app.db.owner_conn().await;
    let error: Option<String> = sqlx::query_scalar("select last_error from channel_messages where id = $1")
        .bind(id)
        .fetch_one(&mut owner)
        .await
        .unwrap();
    assert!(error.unwrap().contains("stream cut off"));
    assert!(
        s.platforms.sent().is_empty(),
        "nothing of the cut stream is posted"
    );

    s.time_passes().await;
    assert_eq!(s.worker.step().await.unwrap(), StepOutcome::Executed(id));
    let sent = s.platforms.sent_to(Platform::Whatsapp);
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].text(), "a whole answer");
    assert_eq!(s.agent.calls().len(), 2);
}

#[tokio::test]
async fn a_json_answer_shows_no_live_view() {
    let s = setup().await;
    executed(
        s.turn(Platform::Slack, slack_text("1718003000.000100", "plain"))
            .await,
    )
    .await;
    let paths: Vec<String> = s.platforms.sent().iter().map(|c| c.path.clone()).collect();
    assert_eq!(paths, ["/api/chat.postMessage"]);
    assert_eq!(turn_row(&s).await.1, None);
}

// --- Step 2: Telegram private chat: draft, then one sendMessage -----------------------------

#[tokio::test]
async fn a_telegram_private_chat_sees_a_draft_then_one_final_message() {
    let s = setup().await;
    let more = gate();
    s.agent.script([Reply::Stream(vec![
        Chunk::openai("Hel"),
        Chunk::Wait(more.clone()),
        Chunk::openai("lo **you**"),
        Chunk::openai_done(),
    ])]);
    let step = s
        .turn(Platform::Telegram, telegram_text(41_000, "stream it"))
        .await;
    s.platforms.wait_for_calls("sendMessageDraft", 1).await;
    let drafts = s.platforms.calls("sendMessageDraft");
    assert_eq!(drafts[0].body["text"], "Hel");
    assert_eq!(drafts[0].body["chat_id"], TELEGRAM_USER.parse::<i64>().unwrap());
    let draft_id = drafts[0].body["draft_id"].as_i64().unwrap();
    assert_ne!(draft_id, 0, "a draft id is non-zero");
    assert!(s.platforms.calls("sendMessage").is_empty(), "nothing final yet");

    more.add_permits(1);
    let id = executed(step).await;
    let drafts = s.platforms.calls("sendMessageDraft");
    assert!(drafts.iter().all(|d| d.body["draft_id"] == draft_id));
    let finals = s.platforms.calls("sendMessage");
    assert_eq!(finals.len(), 1, "one final message: {finals:?}");
    // The final text is formatted as any reply part is.
    assert_eq!(finals[0].body["text"], "Hello <b>you</b>");
    assert_eq!(finals[0].body["parse_mode"], "HTML");
    assert!(s.platforms.calls("editMessageText").is_empty());
    assert!(drafts.iter().all(|d| d.seq < finals[0].seq));
    let (response, live, delivered) = turn_row(&s).await;
    assert_eq!(response.as_deref(), Some("Hello **you**"));
    assert_eq!(live, None, "a draft leaves nothing to adopt");
    assert!(delivered);
    assert_eq!(s.parts(id).await[0].status.as_str(), "sent");
}

#[tokio::test]
async fn typing_stops_once_the_stream_is_shown() {
    let s = setup().await;
    let more = gate();
    s.agent.script([Reply::Stream(vec![
        Chunk::Wait(more.clone()),
        Chunk::openai("shown"),
        Chunk::Wait(more.clone()),
        Chunk::openai_done(),
    ])]);
    let step = s
        .turn(Platform::Telegram, telegram_text(41_100, "stream it"))
        .await;
    s.platforms.wait_for_typing(1).await;
    more.add_permits(1);
    s.platforms.wait_for_calls("sendMessageDraft", 1).await;
    let draft = s.platforms.calls("sendMessageDraft")[0].seq;
    more.add_permits(1);
    executed(step).await;
    let typing = s.platforms.typing_to(Platform::Telegram);
    assert!(
        typing.iter().all(|t| t.seq < draft),
        "no typing after the preview: {typing:?}"
    );
}

// --- Step 3: Slack native stream, adopted as the first part ---------------------------------

#[tokio::test]
async fn a_slack_stream_starts_appends_and_stops_in_the_thread_and_becomes_the_first_part() {
    let s = setup().await;
    let (more, end) = (gate(), gate());
    s.agent.script([Reply::Stream(vec![
        Chunk::delta("Hello"),
        Chunk::Wait(more.clone()),
        Chunk::delta(" *world*"),
        Chunk::Wait(end.clone()),
        Chunk::done(
            json!({"messages": [{"role": "assistant", "content": "Hello *world*"},
                                         {"role": "assistant", "content": "second part"}]}),
        ),
    ])]);
    let user_ts = "1718003100.000100";
    let step = s.turn(Platform::Slack, slack_text(user_ts, "stream it")).await;
    s.platforms.wait_for_calls("chat.startStream", 1).await;
    let start = &s.platforms.calls("chat.startStream")[0];
    assert_eq!(start.body["thread_ts"], user_ts, "streamed in the reply thread");
    assert_eq!(start.body["markdown_text"], "Hello");
    assert_eq!(start.body["recipient_user_id"], SLACK_USER);
    assert!(start
        .authorization
        .as_deref()
        .unwrap()
        .contains("slack-outbound-token"));
    let ts = recorded_live_message(&s).await;

    more.add_permits(1);
    s.platforms.wait_for_calls("chat.appendStream", 1).await;
    let append = &s.platforms.calls("chat.appendStream")[0];
    assert_eq!(append.body["ts"], ts.as_str());
    assert_eq!(append.body["markdown_text"], " *world*");

    end.add_permits(1);
    let id = executed(step).await;
    let stop = s.platforms.calls("chat.stopStream");
    assert_eq!(stop.len(), 1);
    assert_eq!(stop[0].body["ts"], ts.as_str());
    let update = s.platforms.calls("chat.update");
    assert_eq!(update.len(), 1);
    assert_eq!(update[0].body["ts"], ts.as_str());
    assert_eq!(
        update[0].body["text"], "Hello _world_",
        "the part's final, formatted text"
    );
    assert!(stop[0].seq < update[0].seq);
    let posts = s.platforms.calls("chat.postMessage");
    assert_eq!(posts.len(), 1, "only the second part is posted: {posts:?}");
    assert_eq!(posts[0].body["text"], "second part");
    assert_eq!(posts[0].body["thread_ts"], user_ts);

    let parts = s.parts(id).await;
    assert_eq!(parts[0].platform_message_id.as_deref(), Some(ts.as_str()));
    assert!(parts.iter().all(|p| p.status.as_str() == "sent"));
    assert!(turn_row(&s).await.2, "delivered");
    // One message per part in the thread, each carrying its part key once.
    assert_eq!(
        s.platforms.slack_thread_keys(),
        [format!("{id}:0"), format!("{id}:1")]
    );
}

#[tokio::test]
async fn a_streamed_answer_offers_choices_in_its_final_event_on_the_message_it_leaves() {
    let s = setup().await;
    s.agent.script([Reply::Stream(vec![
        Chunk::delta("Approve the refund?"),
        Chunk::done(
            json!({"choices": [{"id": "approve", "label": "Approve", "style": "primary"},
                                       {"id": "reject", "label": "Reject"}]}),
        ),
    ])]);
    let id = executed(
        s.turn(Platform::Slack, slack_text("1718003200.000100", "refund"))
            .await,
    )
    .await;
    let update = s
        .platforms
        .calls("chat.update")
        .pop()
        .expect("the stream's message adopted");
    assert_eq!(update.body["text"], "Approve the refund?");
    assert_eq!(update.body["blocks"][0]["text"]["text"], "Approve the refund?");
    let buttons = &update.body["blocks"][1]["elements"];
    assert_eq!(
        (&buttons[0]["text"]["text"], &buttons[0]["style"]),
        (&json!("Approve"), &json!("primary"))
    );
    assert!(s.platforms.calls("chat.postMessage").is_empty(), "one message");
    let part = s.parts(id).await.pop().unwrap();
    assert_eq!(part.choices.map(|c| c.choices.items.len()), Some(2));

    // Choices no platform could show fail the turn at once.
    let s = setup().await;
    s.agent.script([Reply::Stream(vec![
        Chunk::delta("Pick one"),
        Chunk::done(json!({"choices": [{"label": "neither an id nor a url"}]})),
    ])]);
    let outcome = s.turn(Platform::Whatsapp, whatsapp_text()).await.await.unwrap();
    assert!(matches!(outcome, StepOutcome::Failed(_)), "{outcome:?}");
    assert!(s.platforms.sent_to(Platform::Whatsapp).is_empty());
}

#[tokio::test]
async fn a_worker_killed_mid_stream_is_recovered_into_the_same_slack_message() {
    let s = setup().await;
    s.agent.script([
        Reply::Stream(vec![Chunk::delta("Hel"), Chunk::Hang]),
        Reply::Stream(vec![
            Chunk::delta("Hello"),
            Chunk::done(json!({"messages": [{"content": "Hello again"}, {"content": "the tail"}]})),
        ]),
    ]);
    let step = s
        .turn(Platform::Slack, slack_text("1718003200.000100", "stream it"))
        .await;
    s.platforms.wait_for_calls("chat.startStream", 1).await;
    let ts = recorded_live_message(&s).await;
    kill(step).await;

    s.time_passes().await;
    let id = executed(s.step()).await;
    assert_eq!(s.agent.calls().len(), 2, "the agent was asked again");
    assert_eq!(
        s.platforms.calls("chat.startStream").len(),
        1,
        "no second stream is started"
    );
    let update = s.platforms.calls("chat.update");
    assert_eq!(update.len(), 1);
    assert_eq!(update[0].body["ts"], ts.as_str(), "the known stream is completed");
    assert_eq!(update[0].body["text"], "Hello again");
    assert_eq!(s.platforms.calls("chat.stopStream")[0].body["ts"], ts.as_str());
    let posts = s.platforms.calls("chat.postMessage");
    assert_eq!(posts.len(), 1);
    assert_eq!(posts[0].body["text"], "the tail");
    assert_eq!(
        s.platforms.slack_thread_keys(),
        [format!("{id}:0"), format!("{id}:1")],
        "exactly one final message per part"
    );
    assert!(turn_row(&s).await.2, "delivered");
}

#[tokio::test]
async fn a_worker_killed_while_the_first_part_completes_the_stream_completes_it_again_not_twice() {
    let s = setup().await;
    let end = gate();
    s.agent.script([Reply::Stream(vec![
        Chunk::delta("Hi"),
        Chunk::Wait(end.clone()),
        Chunk::done(json!({"content": "Hi there"})),
    ])]);
    s.platforms
        .script_method("chat.update", [Answer::HangAfterPosting]);
    let step = s
        .turn(Platform::Slack, slack_text("1718003300.000100", "stream it"))
        .await;
    recorded_live_message(&s).await;
    end.add_permits(1);
    s.platforms.wait_for_calls("chat.update", 1).await;
    let ts = turn_row(&s).await.1.expect("the stream was recorded");
    kill(step).await;

    s.time_passes().await;
    let id = match s.worker.step().await.unwrap() {
        StepOutcome::Delivered(id) => id,
        other => panic!("the reply job delivers, got {other:?}"),
    };
    let updates = s.platforms.calls("chat.update");
    assert_eq!(updates.len(), 2, "the in-doubt edit is simply made again");
    assert!(updates.iter().all(|u| u.body["ts"] == ts.as_str()));
    assert!(s.platforms.calls("chat.postMessage").is_empty());
    assert!(
        s.platforms.replies_calls().is_empty(),
        "an edit needs no thread search"
    );
    assert_eq!(s.platforms.slack_thread_keys(), [format!("{id}:0")]);
    assert_eq!(
        s.parts(id).await[0].platform_message_id.as_deref(),
        Some(ts.as_str())
    );
}

#[tokio::test]
async fn a_slack_stream_whose_agent_fails_for_good_is_stopped_not_left_open() {
    let s = setup().await;
    let worker = crate::support::worker(&s.app, &s.agent.url, |settings| {
        settings.dispatch.max_attempts = 1;
    });
    let fail = gate();
    s.agent.script([Reply::Stream(vec![
        Chunk::delta("I will"),
        Chunk::Wait(fail.clone()),
        Chunk::Event("event: error\ndata: {\"message\":\"overloaded\"}\n\n".into()),
    ])]);
    s.deliver(Platform::Slack, slack_text("1718003400.000100", "stream it"))
        .await;
    let step = tokio::spawn(async move { worker.step().await.unwrap() });
    let ts = recorded_live_message(&s).await;
    fail.add_permits(1);
    assert!(matches!(step.await.unwrap(), StepOutcome::Failed(_)));
    let stops = s.platforms.calls("chat.stopStream");
    assert_eq!(stops.len(), 1);
    assert_eq!(stops[0].body["ts"], ts.as_str());
    assert!(s.platforms.calls("chat.update").is_empty());
    assert!(s.platforms.calls("chat.postMessage").is_empty());
}

// --- Step 4: Telegram group: one message, edited, adopted -----------------------------------

#[tokio::test]
async fn a_telegram_group_sees_one_message_edited_as_it_grows_and_adopted_as_the_answer() {
    let s = setup().await;
    let (more, end) = (gate(), gate());
    s.agent.script([Reply::Stream(vec![
        Chunk::openai("Hel"),
        Chunk::Wait(more.clone()),
        Chunk::openai("lo there"),
        Chunk::Wait(end.clone()),
        Chunk::openai_done(),
    ])]);
    let step = s
        .turn(Platform::Telegram, telegram_group_text(42_000, "stream it"))
        .await;
    s.platforms.wait_for_calls("sendMessage", 1).await;
    let preview = &s.platforms.calls("sendMessage")[0];
    assert_eq!(preview.body["text"], "Hel");
    assert_eq!(preview.body["chat_id"], -1_001_276_785_818_i64);
    assert_eq!(preview.body["reply_parameters"]["message_id"], 42_000);
    let live = recorded_live_message(&s).await;
    assert_eq!(live, "5001");
    assert!(
        s.platforms.calls("sendMessageDraft").is_empty(),
        "no drafts in groups"
    );

    more.add_permits(1);
    s.platforms.wait_for_calls("editMessageText", 1).await;
    let edit = &s.platforms.calls("editMessageText")[0];
    assert_eq!(edit.body["message_id"], 5001);
    assert_eq!(edit.body["text"], "Hello there");

    end.add_permits(1);
    let id = executed(step).await;
    assert_eq!(
        s.platforms.calls("sendMessage").len(),
        1,
        "one message in the group"
    );
    let edits = s.platforms.calls("editMessageText");
    let last = edits.last().unwrap();
    assert_eq!(last.body["message_id"], 5001);
    assert_eq!(last.body["text"], "Hello there");
    assert_eq!(s.parts(id).await[0].platform_message_id.as_deref(), Some("5001"));
    assert!(turn_row(&s).await.2, "delivered");
}

#[tokio::test]
async fn an_unchanged_telegram_edit_counts_as_the_part_delivered() {
    let s = setup().await;
    let end = gate();
    s.agent.script([Reply::Stream(vec![
        Chunk::openai("same text"),
        Chunk::Wait(end.clone()),
        Chunk::openai_done(),
    ])]);
    s.platforms.script_method(
        "editMessageText",
        [Answer::Status(
            400,
            json!({"ok": false, "error_code": 400,
                   "description": "Bad Request: message is not modified: specified new message content and reply markup are exactly the same"}),
            None,
        )],
    );
    let step = s
        .turn(Platform::Telegram, telegram_group_text(42_100, "stream it"))
        .await;
    recorded_live_message(&s).await;
    end.add_permits(1);
    let id = executed(step).await;
    assert_eq!(s.platforms.calls("editMessageText").len(), 1);
    assert_eq!(s.platforms.calls("sendMessage").len(), 1);
    assert_eq!(s.parts(id).await[0].platform_message_id.as_deref(), Some("5001"));
    assert!(turn_row(&s).await.2, "delivered");
}
