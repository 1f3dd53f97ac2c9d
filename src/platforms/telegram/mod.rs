//! Telegram: Bot API webhooks in (`inbound`), `sendMessage` out (`send`), HTML parse mode
//! (`format`), `sendChatAction` while the agent works (`typing`), drafts or an edited
//! message for streamed answers (`live`), and `getFile` downloads (`files`).

pub mod files;
pub mod format;
pub mod inbound;
pub mod live;
pub mod send;
pub mod typing;

use super::{BoxFuture, LivePreview, PlatformApi};
use crate::db::messages::{MessageRow, ReplyPart};
use crate::delivery::live::{LiveContext, Shown, Surface};
use crate::delivery::{Delivery, Outgoing, Reconciled};
use crate::domain::TelegramDelivery;
use crate::egress::GuardedClient as Client;
use crate::platforms::send::{Outbound, OutboundPart, SendOutcome};

pub struct Telegram;

impl PlatformApi for Telegram {
    fn default_api_base(&self) -> &'static str {
        "https://api.telegram.org"
    }

    fn part_limit(&self) -> usize {
        4096
    }

    /// Telegram offers no way to look: the connector's choice decides (at-most-once: the
    /// part is `unknown` and the parts after it go on; at-least-once: it is resent).
    fn reconcile<'a>(
        &'a self,
        _delivery: &'a Delivery<'a>,
        outgoing: &'a Outgoing,
        _part: &'a ReplyPart,
    ) -> BoxFuture<'a, anyhow::Result<Reconciled>> {
        let reconciled = match outgoing.connector.telegram_delivery {
            TelegramDelivery::AtLeastOnce => Reconciled::Absent,
            TelegramDelivery::AtMostOnce => {
                Reconciled::Unknowable("send interrupted, outcome unknown; not resent (at-most-once)".into())
            }
        };
        Box::pin(async { Ok(reconciled) })
    }
}

impl Outbound for Telegram {
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

impl LivePreview for Telegram {
    /// A draft in a private chat; elsewhere a message, edited at a third of the pace (a bot
    /// may send about 20 messages a minute to a group, edits included).
    fn live_surface(&self, message: &MessageRow) -> Option<Surface> {
        let private = message.space.is_none();
        Some(Surface {
            pace: if private { 1 } else { 3 },
            ephemeral: private,
        })
    }

    fn show_live<'a>(
        &'a self,
        context: &'a LiveContext,
        surface: Surface,
        text: &'a str,
        shown: &'a mut Shown,
    ) -> BoxFuture<'a, Result<bool, &'static str>> {
        if surface.ephemeral {
            Box::pin(live::draft(context, text, shown))
        } else {
            Box::pin(live::show(context, text, shown))
        }
    }
}
