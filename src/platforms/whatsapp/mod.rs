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
use crate::platforms::contract::{LivePreview, Pending, PlatformApi, Reconciled};
use crate::retry::window_left;

/// Meta Graph API version every WhatsApp call is pinned to.
pub const GRAPH_VERSION: &str = "v25.0";

pub struct Whatsapp;

impl PlatformApi for Whatsapp {
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
