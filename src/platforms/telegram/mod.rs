//! Telegram (Bot API, core.telegram.org/bots/api).

pub mod files;
pub mod format;
pub mod inbound;
pub mod live;
pub mod send;
pub mod typing;
pub mod upload;

use futures::future::BoxFuture;

use crate::db::parts::ReplyPart;
use crate::domain::TelegramDelivery;
use crate::platforms::contract::{Pending, PlatformApi, Reconciled};

pub struct Telegram;

impl PlatformApi for Telegram {
    fn part_limit(&self) -> usize {
        4096
    }

    fn file_limit(&self, mime: &str) -> Result<u64, String> {
        Ok(upload::file_limit(mime))
    }

    fn reaction_name(&self, emoji: &str) -> Result<String, String> {
        upload::reaction_name(emoji)
    }

    /// Telegram offers no way to look: the connector's choice decides (at-most-once: the
    /// part is `unknown` and the parts after it go on; at-least-once: it is resent).
    fn reconcile<'a>(
        &'a self,
        pending: &'a Pending<'a>,
        _part: &'a ReplyPart,
    ) -> BoxFuture<'a, anyhow::Result<Reconciled>> {
        let reconciled = match pending.connector.profile.telegram_delivery {
            TelegramDelivery::AtLeastOnce => Reconciled::Absent,
            TelegramDelivery::AtMostOnce => {
                Reconciled::Unknowable("send interrupted, outcome unknown; not resent (at-most-once)".into())
            }
        };
        Box::pin(async { Ok(reconciled) })
    }
}
