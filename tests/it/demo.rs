//! `channel-bridge demo` inside the test suite: the real gateway, echo bridge and platform
//! stand-ins, on a database of its own.

use channel_bridge::demo::{self, DemoConfig, Outcome};
use channel_bridge::domain::Platform;

use crate::support::TestDb;

#[tokio::test]
async fn the_demo_answers_every_turn_on_its_platform_collapses_the_retry_and_drops_the_echo() {
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

    let kinds: Vec<(Platform, &str)> = summary
        .steps
        .iter()
        .map(|s| {
            let kind = match s.outcome {
                Outcome::Replied(_) => "replied",
                Outcome::Duplicate => "duplicate",
                Outcome::Dropped => "dropped",
            };
            (s.platform, kind)
        })
        .collect();
    assert_eq!(
        kinds,
        [
            (Platform::Slack, "replied"),
            (Platform::Slack, "duplicate"),
            (Platform::Slack, "dropped"),
            (Platform::Telegram, "replied"),
            (Platform::Whatsapp, "replied"),
            (Platform::Slack, "replied"),
        ]
    );
    assert_eq!(summary.duplicates(), 1);
    assert_eq!(summary.dropped(), 1);
    assert_eq!(summary.recorded_turns, 4, "the retry added no row");

    let turns: Vec<_> = summary.turns().collect();
    assert_eq!(turns.len(), 4);
    for (step, turn) in &turns {
        assert_eq!(turn.reply.platform, step.platform, "answered where it was asked");
        assert!(
            turn.reply.text.starts_with(&format!("echo: {}", step.text)),
            "{}",
            turn.reply.text
        );
        assert_eq!(step.webhook.status, 200);
    }
    // Alice's history spans Slack and Telegram; Bob's is his own.
    let seen: Vec<(Option<&str>, usize)> = turns
        .iter()
        .map(|(_, t)| (t.user_id.as_deref(), t.agent_saw.len()))
        .collect();
    assert_eq!(
        seen,
        [
            (Some("alice"), 1),
            (Some("alice"), 3),
            (Some("bob"), 1),
            (Some("alice"), 5)
        ]
    );
    let last = &turns[3].1;
    assert_eq!(last.agent_saw, ["user", "assistant", "user", "assistant", "user"]);
    assert!(
        last.reply.text.ends_with("(history: 2 turns)"),
        "{}",
        last.reply.text
    );
    // Threaded: the Slack thread reply goes under the first Slack message's thread.
    assert_eq!(turns[0].1.reply.reply_to, last.reply.reply_to);
    assert_eq!(turns[1].1.reply.reply_to, "201");

    let printed = String::from_utf8(printed).unwrap();
    assert!(printed.contains(&summary.tenant_id.to_string()), "{printed}");
    assert!(printed.contains("export DATABASE_URL="), "{printed}");

    // The database is left in place to explore.
    let mut owner = db.owner_conn().await;
    let rows: i64 = sqlx::query_scalar("select count(*) from channel_messages where status = 'executed'")
        .fetch_one(&mut owner)
        .await
        .unwrap();
    assert_eq!(rows, 4);
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
