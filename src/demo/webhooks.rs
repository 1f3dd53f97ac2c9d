//! What the demo's "platforms" post: the webhook bodies of `fixtures/` with the demo's ids
//! and text, signed as each platform signs.

use serde_json::Value;

use crate::domain::Platform;

/// Fixed (README points here) so that anyone exploring afterwards can sign requests of
/// their own: they guard a throw-away local database.
pub const SLACK_SIGNING_SECRET: &str = "demo-slack-signing-secret";
pub const WHATSAPP_APP_SECRET: &str = "demo-meta-app-secret";
pub const TELEGRAM_SECRET_TOKEN: &str = "demo-telegram-secret-token";

/// The fixtures' ids (fixtures/README.md), reused so the payloads stay real-shaped.
pub const SLACK_TEAM: &str = "T0001";
pub const SLACK_APP: &str = "A0001";
pub const SLACK_BOT_USER: &str = "UBOT1";
pub const SLACK_BOT_ID: &str = "BBOT1";
pub const SLACK_DM_CHANNEL: &str = "D0DM00001";
pub const SLACK_ALICE: &str = "U0USER1";
pub const TELEGRAM_BOT: &str = "7000000001";
pub const TELEGRAM_ALICE: &str = "408258968";
pub const WHATSAPP_PHONE_NUMBER_ID: &str = "106540352242922";
pub const WHATSAPP_BOB: &str = "16505551234";

const SLACK_DM: &str = include_str!("../../fixtures/slack/dm_text.json");
const SLACK_BOT_ECHO: &str = include_str!("../../fixtures/slack/bot_echo.json");
const TELEGRAM_TEXT: &str = include_str!("../../fixtures/telegram/private_text.json");
const TELEGRAM_TAP: &str = include_str!("../../fixtures/telegram/callback_query.json");
const WHATSAPP_TEXT: &str = include_str!("../../fixtures/whatsapp/text.json");

fn fixture(text: &str) -> Value {
    serde_json::from_str(text).expect("the fixtures are valid JSON (checked by their own tests)")
}

fn to_bytes(value: &Value) -> Vec<u8> {
    serde_json::to_vec(value).expect("a JSON value always serialises")
}

/// Alice's Slack DM; `thread_ts` makes it a reply in the thread of an earlier message.
pub fn slack_dm(ts: &str, thread_ts: Option<&str>, text: &str) -> Vec<u8> {
    let mut event = fixture(SLACK_DM);
    event["event_id"] = format!("Ev{}", ts.replace('.', "")).into();
    event["event"]["ts"] = ts.into();
    event["event"]["event_ts"] = ts.into();
    event["event"]["text"] = text.into();
    event["event"]["blocks"] = Value::Array(Vec::new());
    if let Some(thread) = thread_ts {
        event["event"]["thread_ts"] = thread.into();
        event["event"]["parent_user_id"] = SLACK_ALICE.into();
    }
    to_bytes(&event)
}

/// Slack sends the bot's own messages to the app too (`bot_id` and `user` are the app's).
pub fn slack_bot_echo(ts: &str, thread_ts: &str, text: &str) -> Vec<u8> {
    let mut event = fixture(SLACK_BOT_ECHO);
    event["event_id"] = format!("Ev{}", ts.replace('.', "")).into();
    event["event"]["ts"] = ts.into();
    event["event"]["event_ts"] = ts.into();
    event["event"]["thread_ts"] = thread_ts.into();
    event["event"]["channel"] = SLACK_DM_CHANNEL.into();
    event["event"]["channel_type"] = "im".into();
    event["event"]["text"] = text.into();
    event["event"]["blocks"] = Value::Array(Vec::new());
    to_bytes(&event)
}

/// Alice writing to the Telegram bot in a private chat.
pub fn telegram_text(update_id: i64, message_id: i64, text: &str) -> Vec<u8> {
    let mut update = fixture(TELEGRAM_TEXT);
    update["update_id"] = update_id.into();
    update["message"]["message_id"] = message_id.into();
    update["message"]["date"] = chrono::Utc::now().timestamp().into();
    update["message"]["text"] = text.into();
    to_bytes(&update)
}

/// Alice tapping a button of the bot's message `message_id` in her private chat: Telegram
/// sends the button's `callback_data` as `data`, with the message it belongs to.
pub fn telegram_tap(update_id: i64, message_id: &str, text: &str, data: &str) -> Vec<u8> {
    let mut update = fixture(TELEGRAM_TAP);
    update["update_id"] = update_id.into();
    let callback = &mut update["callback_query"];
    callback["id"] = format!("{update_id}000").into();
    callback["message"]["message_id"] = message_id.parse::<i64>().map_or(Value::Null, Into::into);
    callback["message"]["date"] = chrono::Utc::now().timestamp().into();
    callback["message"]["text"] = text.into();
    callback["data"] = data.into();
    to_bytes(&update)
}

/// Bob's WhatsApp text, one message in one change of one entry.
pub fn whatsapp_text(wamid: &str, text: &str) -> Vec<u8> {
    let mut batch = fixture(WHATSAPP_TEXT);
    let message = &mut batch["entry"][0]["changes"][0]["value"]["messages"][0];
    message["id"] = wamid.into();
    message["timestamp"] = chrono::Utc::now().timestamp().to_string().into();
    message["text"]["body"] = text.into();
    to_bytes(&batch)
}

/// The same signer as `send-fixture` (`crate::sign`).
pub fn signed_headers(platform: Platform, body: &[u8]) -> Vec<(axum::http::HeaderName, String)> {
    let secret = match platform {
        Platform::Slack => SLACK_SIGNING_SECRET,
        Platform::Whatsapp => WHATSAPP_APP_SECRET,
        Platform::Telegram => TELEGRAM_SECRET_TOKEN,
    };
    crate::sign::sign_headers(platform, secret, body, chrono::Utc::now().timestamp())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_keep_the_fixture_shape_with_the_demo_values() {
        let dm: Value = serde_json::from_slice(&slack_dm("1.2", Some("1.1"), "hi")).unwrap();
        assert_eq!(dm["event"]["text"], "hi");
        assert_eq!(dm["event"]["thread_ts"], "1.1");
        assert_eq!(dm["event"]["user"], SLACK_ALICE);
        let echo: Value = serde_json::from_slice(&slack_bot_echo("1.3", "1.1", "x")).unwrap();
        assert_eq!(echo["event"]["bot_id"], SLACK_BOT_ID);
        let update: Value = serde_json::from_slice(&telegram_text(7, 8, "t")).unwrap();
        assert_eq!(update["message"]["from"]["id"].to_string(), TELEGRAM_ALICE);
        let tap: Value = serde_json::from_slice(&telegram_tap(9, "9002", "q", "abcdefghij.0")).unwrap();
        assert_eq!(tap["callback_query"]["from"]["id"].to_string(), TELEGRAM_ALICE);
        assert_eq!(tap["callback_query"]["message"]["message_id"], 9002);
        assert_eq!(tap["callback_query"]["data"], "abcdefghij.0");
        let batch: Value = serde_json::from_slice(&whatsapp_text("wamid.X", "w")).unwrap();
        assert_eq!(
            batch["entry"][0]["changes"][0]["value"]["metadata"]["phone_number_id"],
            WHATSAPP_PHONE_NUMBER_ID
        );
        assert_eq!(
            batch["entry"][0]["changes"][0]["value"]["messages"][0]["from"],
            WHATSAPP_BOB
        );
    }
}
