//! Slack. An interrupted send is settled by Slack's metadata event or a read of the thread
//! (`reconcile`, `thread`).

mod command;
pub mod dm;
pub mod files;
pub mod format;
pub mod inbound;
mod interactive;
pub mod live;
pub mod reconcile;
pub mod send;
pub mod thread;
pub mod typing;

use futures::future::BoxFuture;

use crate::choices::Choices;
use crate::db::messages::ReplyPart;
use crate::platforms::contract::{Pending, PlatformApi, Reconciled};

pub struct Slack;

impl PlatformApi for Slack {
    /// Slack truncates at 40,000 characters but recommends about 4,000 for readability.
    fn part_limit(&self) -> usize {
        4000
    }

    /// The text that carries buttons is a section block's.
    fn choices_text_limit(&self, _choices: &Choices) -> Option<usize> {
        Some(send::SECTION_TEXT_CHARS)
    }

    fn reconcile<'a>(
        &'a self,
        pending: &'a Pending<'a>,
        part: &'a ReplyPart,
    ) -> BoxFuture<'a, anyhow::Result<Reconciled>> {
        Box::pin(reconcile::reconcile(pending, part))
    }
}
