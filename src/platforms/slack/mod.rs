//! Slack: the Events API in (`inbound`), `chat.postMessage` out (`send`), mrkdwn (`format`),
//! `assistant.threads.setStatus` while the agent works (`typing`), native streaming of
//! streamed answers (`live`), files with the bot token (`files`), and an interrupted send
//! settled by Slack's metadata event or a read of the thread (`reconcile`, `thread`).

pub mod files;
pub mod format;
pub mod inbound;
pub mod live;
pub mod reconcile;
pub mod send;
pub mod thread;
pub mod typing;

use super::{BoxFuture, LivePreview, PlatformApi};
use crate::db::messages::{MessageRow, ReplyPart};
use crate::delivery::live::{LiveContext, Shown, Surface};
use crate::delivery::{Delivery, Outgoing, Reconciled};
use crate::domain::Connector;
use crate::egress::GuardedClient as Client;
use crate::platforms::send::{Outbound, OutboundPart, SendOutcome};

pub struct Slack;

impl PlatformApi for Slack {
    fn default_api_base(&self) -> &'static str {
        "https://slack.com"
    }

    /// Slack truncates at 40,000 characters but recommends about 4,000 for readability.
    fn part_limit(&self) -> usize {
        4000
    }

    fn reconcile<'a>(
        &'a self,
        delivery: &'a Delivery<'a>,
        outgoing: &'a Outgoing,
        part: &'a ReplyPart,
    ) -> BoxFuture<'a, anyhow::Result<Reconciled>> {
        Box::pin(async move {
            let search = reconcile::ThreadSearch {
                pool: delivery.pool,
                client: delivery.client,
                settings: delivery.settings,
            };
            search.reconcile(outgoing, part).await
        })
    }
}

impl Outbound for Slack {
    fn send<'a>(
        &'a self,
        client: &'a Client,
        part: &'a OutboundPart<'a>,
        token: &'a str,
    ) -> BoxFuture<'a, SendOutcome> {
        Box::pin(send::post(client, part, token))
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

impl LivePreview for Slack {
    fn live_surface(&self, _message: &MessageRow) -> Option<Surface> {
        Some(Surface {
            pace: 1,
            ephemeral: false,
        })
    }

    fn show_live<'a>(
        &'a self,
        context: &'a LiveContext,
        _surface: Surface,
        text: &'a str,
        shown: &'a mut Shown,
    ) -> BoxFuture<'a, Result<bool, &'static str>> {
        Box::pin(live::show(context, text, shown))
    }

    fn end_live<'a>(
        &'a self,
        client: &'a Client,
        connector: &'a Connector,
        message: &'a MessageRow,
        live_id: &'a str,
        token: &'a str,
    ) -> BoxFuture<'a, ()> {
        Box::pin(live::end(client, connector, message, live_id, token))
    }
}
