//! Slack. An interrupted send is settled by Slack's metadata event or a read of the thread
//! (`reconcile`, `thread`); an interrupted file upload by the file's shares (`shares`).

mod command;
mod dm;
pub mod files;
pub mod format;
pub mod inbound;
mod interactive;
pub mod live;
mod reaction;
pub mod reconcile;
pub mod send;
mod shares;
pub mod thread;
pub mod typing;
mod upload;

use futures::future::BoxFuture;

use crate::choices::Choices;
use crate::db::parts::ReplyPart;
use crate::egress::GuardedClient as Client;
use crate::media::outgoing::OutgoingFile;
use crate::platforms::contract::{Pending, PlatformApi, Reconciled};
use crate::platforms::send::{Outbound, OutboundPart, SendOutcome};

pub struct Slack;

impl PlatformApi for Slack {
    /// One limit for every type (`upload::FILE_MAX_BYTES`).
    fn file_limit(&self, _mime: &str) -> Result<u64, String> {
        Ok(upload::FILE_MAX_BYTES)
    }

    fn reaction_name(&self, emoji: &str) -> Result<String, String> {
        reaction::reaction_name(emoji)
    }

    /// Slack truncates at 40,000 characters but recommends about 4,000 for readability.
    fn part_limit(&self) -> usize {
        4000
    }

    /// The text that carries buttons is a section block's.
    fn choices_text_limit(&self, _choices: &Choices) -> Option<usize> {
        Some(send::SECTION_TEXT_CHARS)
    }

    /// `conversations.open` (`dm.rs`).
    fn open_direct_chat<'a>(
        &'a self,
        client: &'a Client,
        connector: &'a crate::domain::Connector,
        account: &'a str,
    ) -> BoxFuture<'a, Result<String, String>> {
        Box::pin(dm::open(client, connector, account))
    }

    fn reconcile<'a>(
        &'a self,
        pending: &'a Pending<'a>,
        part: &'a ReplyPart,
    ) -> BoxFuture<'a, anyhow::Result<Reconciled>> {
        // A file is found by its shares; the thread search is for text parts.
        match part.attachment {
            Some(_) => Box::pin(shares::reconcile(pending, part)),
            None => Box::pin(reconcile::reconcile(pending, part)),
        }
    }
}

/// Each kind of part goes to the file that knows it: text to `send`, files and reactions
/// to `upload`.
impl Outbound for Slack {
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
        Box::pin(reaction::react(client, part, token, target))
    }

    fn close_choices<'a>(
        &'a self,
        client: &'a Client,
        part: &'a OutboundPart<'a>,
        token: &'a str,
        target: &'a str,
    ) -> BoxFuture<'a, SendOutcome> {
        Box::pin(send::close(client, part, token, target))
    }

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
