//! `channel-bridge demo` inside the test suite: the real gateway, echo bridge and platform
//! stand-ins, on a database of its own.

use channel_bridge::demo::{self, DemoConfig, DemoSummary, Outcome, Step, Turn};
use channel_bridge::domain::Platform;

use crate::support::TestDb;

#[tokio::test]
async fn the_demo_answers_every_turn_on_its_platform_hears_a_tap_and_posts_a_picture() {
    // The demo drops and re-creates the database it is given; this one is the test's own.
    let db = TestDb::empty().await;
    let mut printed = Vec::new();

    let summary = demo::run(
        &DemoConfig {
            database_url: db.url(),
            log_file: None,
        },
        &mut printed,
    )
    .await
    .expect("the demo runs to completion");

    assert_eq!(
        kinds(&summary),
        [
            (Platform::Slack, "replied"),
            (Platform::Slack, "duplicate"),
            (Platform::Slack, "dropped"),
            (Platform::Telegram, "replied"),
            (Platform::Telegram, "tapped"),
            (Platform::Telegram, "replied"),
            (Platform::Whatsapp, "replied"),
            (Platform::Slack, "replied"),
        ]
    );
    assert_eq!(summary.duplicates(), 1);
    assert_eq!(summary.dropped(), 1);
    assert_eq!(summary.taps(), 1);
    assert_eq!(summary.pictures(), 1);
    assert_eq!(summary.recorded_turns, 6, "the retry added no row, the tap one");
    let turns: Vec<_> = summary.turns().collect();
    assert_eq!(turns.len(), 6);
    for (step, turn) in &turns {
        assert_eq!(turn.reply.platform, step.platform, "answered where it was asked");
        let echoed = match turn.action {
            Some(_) => format!("echo: tapped {}", step.text),
            None => format!("echo: {}", step.text),
        };
        assert!(turn.reply.text.starts_with(&echoed), "{}", turn.reply.text);
        assert_eq!(step.webhook.status, 200);
    }
    the_question_was_tapped(turns[1].1, turns[2].1);
    the_picture_came_after_the_text(turns[3]);
    assert_eq!(turns[0].1.reply.buttons, [], "the other answers stay plain");
    assert!(turns
        .iter()
        .enumerate()
        .all(|(i, (_, t))| i == 3 || t.pictures.is_empty()));
    the_histories_are_each_persons(&turns);

    let printed = String::from_utf8(printed).unwrap();
    assert!(printed.contains(&summary.tenant_id.to_string()), "{printed}");
    assert!(printed.contains("export DATABASE_URL="), "{printed}");
    for line in [
        "[Yes] [No]",
        "answerCallbackQuery",
        "editMessageReplyMarkup",
        "picture    echo.png (image/png, ",
        "1 picture posted",
    ] {
        assert!(printed.contains(line), "{printed}");
    }

    // The database is left in place to explore.
    let mut owner = db.owner_conn().await;
    let rows: i64 = sqlx::query_scalar("select count(*) from channel_messages where status = 'executed'")
        .fetch_one(&mut owner)
        .await
        .unwrap();
    assert_eq!(rows, 6);
}

fn kinds(summary: &DemoSummary) -> Vec<(Platform, &'static str)> {
    let kind = |outcome: &Outcome| match outcome {
        Outcome::Replied(_) => "replied",
        Outcome::Tapped(_) => "tapped",
        Outcome::Duplicate => "duplicate",
        Outcome::Dropped => "dropped",
    };
    summary
        .steps
        .iter()
        .map(|s| (s.platform, kind(&s.outcome)))
        .collect()
}

/// Alice's Telegram question was offered Yes/No, and she tapped Yes on that message.
fn the_question_was_tapped(question: &Turn, tap: &Turn) {
    let labels: Vec<&str> = question.reply.buttons.iter().map(|b| b.label.as_str()).collect();
    assert_eq!(labels, ["Yes", "No"]);
    let action = tap.action.as_ref().expect("the agent got the tap as its action");
    assert_eq!((action.id.as_str(), action.label.as_str()), ("yes", "Yes"));
    assert!(tap.reply.buttons.is_empty(), "a tap's answer offers nothing new");
    assert_eq!(
        tap.reply.reply_to, question.reply.message_id,
        "the answer to a tap replies to the tapped message"
    );
    assert!(
        tap.reply.text.ends_with("(history: 2 turns)"),
        "{}",
        tap.reply.text
    );
}

/// Alice's request for a picture: the Telegram stand-in received the echo's PNG as a photo
/// upload to her chat, captioned with her words, besides the text.
fn the_picture_came_after_the_text((step, turn): (&Step, &Turn)) {
    let [picture] = &turn.pictures[..] else {
        panic!("one picture: {:?}", turn.pictures)
    };
    assert_eq!(picture.platform, Platform::Telegram);
    assert_eq!(picture.method, "sendPhoto");
    assert_eq!(picture.chat, turn.reply.chat, "in the same chat as the text");
    assert_eq!((picture.name.as_str(), picture.png), ("echo.png", true));
    assert_eq!(picture.caption, format!("echo: {}", step.text));
    assert!(turn.reply.text.starts_with(&format!("echo: {}", step.text)));
}

/// Alice's history spans Slack and Telegram, her tap included; Bob's is his own.
fn the_histories_are_each_persons(turns: &[(&Step, &Turn)]) {
    let seen: Vec<(Option<&str>, usize)> = turns
        .iter()
        .map(|(_, t)| (t.user_id.as_deref(), t.agent_saw.len()))
        .collect();
    assert_eq!(
        seen,
        [
            (Some("alice"), 1),
            (Some("alice"), 3),
            (Some("alice"), 5),
            (Some("alice"), 7),
            (Some("bob"), 1),
            (Some("alice"), 9)
        ]
    );
    let last = turns[5].1;
    let alternating: Vec<&str> = (0..9)
        .map(|i| if i % 2 == 0 { "user" } else { "assistant" })
        .collect();
    assert_eq!(last.agent_saw, alternating);
    assert!(
        last.reply.text.ends_with("(history: 4 turns)"),
        "{}",
        last.reply.text
    );
    // Threaded: the Slack thread reply goes under the first Slack message's thread.
    assert_eq!(turns[0].1.reply.reply_to, last.reply.reply_to);
    assert_eq!(turns[1].1.reply.reply_to, "201");
}

#[tokio::test]
async fn the_demo_binary_keeps_the_terminal_for_its_walkthrough_and_its_hints_work_when_pasted() {
    let db = TestDb::empty().await;
    let tmp = std::env::temp_dir().join(format!("cb-demo-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&tmp).unwrap();
    let repo = env!("CARGO_MANIFEST_DIR");
    let (name, tmp_dir) = (db.name.clone(), tmp.clone());
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_channel-bridge"))
            .args(["demo", "--database-name", &name])
            .env("DATABASE_URL", crate::support::admin_url())
            .env("TMPDIR", &tmp_dir)
            .current_dir(repo)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
    assert!(output.status.success(), "{stdout}\n{stderr}");
    // The walkthrough alone: the gateway's log lines are in the file it names.
    let log = tmp.join("channel-bridge-demo.log");
    assert!(
        stdout.contains(&format!("gateway log {}", log.display())),
        "{stdout}"
    );
    for line in stdout.lines().chain(stderr.lines()) {
        assert!(
            !line.contains("webhook accepted") && !line.contains(" INFO "),
            "a log line on the terminal: {line}"
        );
    }
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(logged.contains("webhook accepted"), "{logged}");
    // The hints: a database URL as it is (this one holds no password) and the binary's path.
    let hint = |prefix: &str| {
        stdout
            .lines()
            .find_map(|line| line.trim().strip_prefix(prefix).map(str::to_owned))
            .unwrap_or_else(|| panic!("no `{prefix}` hint in {stdout}"))
    };
    let url = hint("export DATABASE_URL=");
    assert!(!url.contains("****") && url.contains(&db.name), "{url}");
    let binary = hint("B=");
    assert!(
        std::path::Path::new(repo).join(&binary).is_file(),
        "{binary} is not the binary's path from the repository root"
    );
    std::fs::remove_dir_all(&tmp).unwrap();
}
