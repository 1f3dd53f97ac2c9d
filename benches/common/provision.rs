//! Provisioning as the benches do it through the library: the run's secrets key and the
//! bench's Telegram bot connector.

use channel_bridge::domain::{Platform, TelegramDelivery, UnlinkedPolicy};
use channel_bridge::secrets::Keyring;
use channel_bridge::shapes::{ConnectorSettings, NewConnector};
use secrecy::{ExposeSecret, SecretString};
use std::sync::OnceLock;

/// The Telegram connectors' webhook secret (`X-Telegram-Bot-Api-Secret-Token`).
pub const TELEGRAM_SECRET: &str = "bench-telegram-secret_token";
/// The part of a bench bot's token after `<bot id>:`.
pub const BOT_SECRET: &str = "bench-bot-token";
/// The bench bot's id when there is one bot.
pub const BOT_ID: u64 = 7_000_000_001;

/// The key the stored secrets are sealed with, as a keyring and as `CB_SECRETS_KEY` for the
/// gateway processes: one per run, as in production.
pub fn bench_keys() -> &'static (Keyring, SecretString) {
    static KEYS: OnceLock<(Keyring, SecretString)> = OnceLock::new();
    KEYS.get_or_init(|| {
        let entry = Keyring::generate_entry("bench").expect("the system random source works");
        let keys = Keyring::parse(entry.expose_secret()).expect("a generated key parses");
        (keys, entry)
    })
}

/// A Telegram connector for bot `bot` named `name` on the API at `api_base_url`, at most
/// once delivery, with `TELEGRAM_SECRET` and the token `<bot>:BOT_SECRET`.
pub fn telegram_connector(
    bot: u64,
    name: String,
    api_base_url: String,
    unlinked: UnlinkedPolicy,
) -> NewConnector {
    let bot = bot.to_string();
    let mut new = NewConnector::new(Platform::Telegram, SecretString::from(TELEGRAM_SECRET));
    new.secrets.outbound_token = Some(SecretString::from(format!("{bot}:{BOT_SECRET}")));
    new.settings = ConnectorSettings {
        name: Some(name),
        external_id: Some(bot.clone()),
        bot_user_id: Some(bot),
        api_base_url: Some(api_base_url),
        unlinked_policy: Some(unlinked),
        telegram_delivery: Some(TelegramDelivery::AtMostOnce),
        ..ConnectorSettings::default()
    };
    new
}
