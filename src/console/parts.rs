//! What every page shows of a reply part: its place in the answer, its state as posted and
//! as the platform reported it, the message an edit changed, and why it failed.

use super::choices::{self, EditNote};
use super::html::{badge, Badge};
use crate::admin::messages::ReplyPartOut;

pub(super) struct PartFacts {
    pub(super) index: i32,
    pub(super) status: String,
    pub(super) badge: Badge,
    /// What the platform reported later.
    pub(super) delivery: Option<Badge>,
    /// For an edit: the part whose message it changed.
    pub(super) edit: Option<EditNote>,
    pub(super) error: Option<String>,
}

impl PartFacts {
    pub(super) fn of(part: &ReplyPartOut) -> Self {
        Self {
            index: part.part_index,
            status: part.status.clone(),
            badge: badge(&part.status),
            delivery: part.delivery_status.as_deref().map(badge),
            edit: choices::edit_note(part),
            error: part.last_error.clone(),
        }
    }
}
