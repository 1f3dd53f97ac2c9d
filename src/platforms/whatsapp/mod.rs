//! WhatsApp (Cloud API, <https://developers.facebook.com/docs/whatsapp/cloud-api>). No live
//! view of a streamed answer: the typing indicator goes on until the reply.

mod choices;
pub mod files;
pub mod format;
pub mod inbound;
pub mod send;
pub mod typing;
mod upload;

use std::time::Duration;

use futures::future::BoxFuture;

use crate::choices::{Choices, InvalidChoices};
use crate::db::parts::ReplyPart;
use crate::egress::GuardedClient as Client;
use crate::media::outgoing::OutgoingFile;
use crate::platforms::contract::{LivePreview, Pending, PlatformApi, Reconciled};
use crate::platforms::send::{Outbound, OutboundPart, SendOutcome};
use crate::retry::window_left;

/// Meta Graph API version every WhatsApp call is pinned to.
pub const GRAPH_VERSION: &str = "v25.0";

pub struct Whatsapp;

impl PlatformApi for Whatsapp {
    /// Meta refuses a free-form message past it with error 131047
    /// (<https://developers.facebook.com/docs/whatsapp/cloud-api/guides/send-messages#customer-service-windows>).
    fn template_window(&self) -> Option<chrono::TimeDelta> {
        Some(chrono::TimeDelta::hours(24))
    }

    fn file_limit(&self, mime: &str) -> Result<u64, String> {
        upload::file_limit(mime)
    }

    fn takes_caption(&self, mime: &str) -> bool {
        upload::takes_caption(mime)
    }

    fn reaction_name(&self, emoji: &str) -> Result<String, String> {
        upload::reaction_name(emoji)
    }

    fn part_limit(&self) -> usize {
        4096
    }

    fn batches_webhooks(&self) -> bool {
        true
    }

    fn check_choices(&self, choices: &Choices) -> Result<(), InvalidChoices> {
        choices::check(choices)
    }

    fn choices_text_limit(&self, choices: &Choices) -> Option<usize> {
        choices::text_limit(choices)
    }

    /// The status callback that echoes the part key settles it (ingress); the part is
    /// resent only when none came within `CB_WHATSAPP_CONFIRM_SECS`. A file part that has no
    /// media id recorded was in doubt over its upload, which shows the user nothing: it is
    /// uploaded again (Meta deletes the unused media id after 30 days).
    fn reconcile<'a>(
        &'a self,
        pending: &'a Pending<'a>,
        part: &'a ReplyPart,
    ) -> BoxFuture<'a, anyhow::Result<Reconciled>> {
        if part.attachment.is_some() && part.upload_ref.is_none() {
            return Box::pin(async { Ok(Reconciled::Absent) });
        }
        let now = chrono::Utc::now();
        let window = Duration::from_secs(pending.settings.whatsapp_confirm_secs);
        let reconciled = match window_left(window, part.sending_since.unwrap_or(now), now) {
            Some(left) => Reconciled::Later(
                left.min(Duration::from_secs(15)),
                "send outcome not known yet".into(),
            ),
            None => Reconciled::Absent,
        };
        Box::pin(async { Ok(reconciled) })
    }
}

impl LivePreview for Whatsapp {}

/// Each kind of part goes to the file that knows it: text to `send`, files and reactions
/// to `upload`.
impl Outbound for Whatsapp {
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

    /// A sent message cannot be edited: its buttons stay, and a late tap is recorded only.
    fn closes_choices(&self) -> bool {
        false
    }

    fn send<'a>(
        &'a self,
        client: &'a Client,
        part: &'a OutboundPart<'a>,
        token: &'a str,
    ) -> BoxFuture<'a, SendOutcome> {
        Box::pin(send::send(client, part, token))
    }
}
