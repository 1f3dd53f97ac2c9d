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
