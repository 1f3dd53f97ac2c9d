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
use crate::egress::GuardedClient as Client;
use crate::media::outgoing::OutgoingFile;
use crate::platforms::contract::{Pending, PlatformApi, Reconciled};
use crate::platforms::send::{Outbound, OutboundPart, SendOutcome};

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

/// Each kind of part goes to the file that knows it: text to `send`, files and reactions
/// to `upload`.
impl Outbound for Telegram {
    fn send_file<'a>(
        &'a self,
        client: &'a Client,
        part: &'a OutboundPart<'a>,
        token: &'a str,
        file: &'a OutgoingFile,
    ) -> BoxFuture<'a, SendOutcome> {
        Box::pin(upload::send_file(client, part, token, file))
    }

    fn react<'a>(
        &'a self,
        client: &'a Client,
        part: &'a OutboundPart<'a>,
        token: &'a str,
        target: &'a str,
    ) -> BoxFuture<'a, SendOutcome> {
        Box::pin(upload::react(client, part, token, target))
    }

    fn close_choices<'a>(
        &'a self,
        client: &'a Client,
        part: &'a OutboundPart<'a>,
        token: &'a str,
        target: &'a str,
    ) -> BoxFuture<'a, SendOutcome> {
        Box::pin(send::close_choices(client, part, token, target))
    }

    fn send<'a>(
        &'a self,
        client: &'a Client,
        part: &'a OutboundPart<'a>,
        token: &'a str,
    ) -> BoxFuture<'a, SendOutcome> {
        Box::pin(send::send(client, part, token))
    }

    fn adopt<'a>(
        &'a self,
        client: &'a Client,
        part: &'a OutboundPart<'a>,
        token: &'a str,
        live_id: &'a str,
    ) -> BoxFuture<'a, SendOutcome> {
        Box::pin(send::adopt(client, part, token, live_id))
    }
}
