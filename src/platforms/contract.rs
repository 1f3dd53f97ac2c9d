//! What every platform implements, and the types those calls exchange with the pipeline
//! above (`delivery`, `http`). Platform folders import this file, never `platforms::of`.

use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::Value;
use sqlx::PgPool;

use super::files::FetchError;
use super::inbound::Channel;
use super::live::{LiveStep, LiveTarget, Shown, Surface};
use super::send::Outbound;
use crate::choices::{Choices, InvalidChoices};
use crate::db::messages::MessageRow;
use crate::db::parts::ReplyPart;
use crate::domain::Connector;
use crate::egress::GuardedClient;
use crate::markdown::Renderer;
use crate::media::FileSource;
use crate::settings::DispatchSettings;

pub trait PlatformApi: Channel + Outbound + Renderer + TypingIndicator + LivePreview + Files {
    /// In UTF-16 units.
    fn part_limit(&self) -> usize;

    /// Whether the platform can show `choices` (counts, label lengths), so an answer it
    /// would refuse is refused when it arrives, never by the platform later.
    fn check_choices(&self, choices: &Choices) -> Result<(), InvalidChoices> {
        let _ = choices;
        Ok(())
    }

    /// How long (in UTF-16 units) the text that carries `choices` may be, where shorter
    /// than `part_limit` (a WhatsApp button message's body, a Slack section).
    fn choices_text_limit(&self, choices: &Choices) -> Option<usize> {
        let _ = choices;
        None
    }

    /// The largest file of type `mime` this platform takes, or why it takes none (WhatsApp
    /// lists its types). Checked when an answer arrives, against an inline file's size, and
    /// before each upload, against the fetched file's length.
    fn file_limit(&self, mime: &str) -> Result<u64, String>;

    /// Whether a file of type `mime` is shown with a caption (WhatsApp's audio is not): a
    /// caption that would be dropped is refused when the answer arrives.
    fn takes_caption(&self, mime: &str) -> bool {
        let _ = mime;
        true
    }

    /// `emoji` (a character, or a name such as `eyes`) as the platform's reaction call takes
    /// it: Slack a name, the others a character; refused when the platform has no such
    /// reaction (Telegram's fixed set).
    fn reaction_name(&self, emoji: &str) -> Result<String, String>;

    /// Whether webhooks come as large batches (Meta's), read up to `CB_WHATSAPP_BODY_LIMIT`.
    fn batches_webhooks(&self) -> bool {
        false
    }

    /// The chat in which to write first to the person with this account: by default the
    /// account itself (a private chat's id is the user's on Telegram, the number on
    /// WhatsApp); Slack opens a direct message. The error is for the log only.
    fn open_direct_chat<'a>(
        &'a self,
        client: &'a GuardedClient,
        connector: &'a Connector,
        account: &'a str,
    ) -> BoxFuture<'a, Result<String, String>> {
        let _ = (client, connector);
        Box::pin(async move { Ok(account.to_owned()) })
    }

    /// `Some(window)`: the platform delivers a free-form message only within `window` of the
    /// person's last message, and an approved template outside it (WhatsApp's
    /// customer-service window); `None`: any message at any time, and no templates.
    fn template_window(&self) -> Option<chrono::TimeDelta> {
        None
    }

    /// Whether the part an interrupted send left `sending` was posted, as far as this pass can tell.
    fn reconcile<'a>(
        &'a self,
        pending: &'a Pending<'a>,
        part: &'a ReplyPart,
    ) -> BoxFuture<'a, anyhow::Result<Reconciled>>;
}

/// A turn whose part was left `sending`, and what settling it may use.
pub struct Pending<'a> {
    pub connector: &'a Connector,
    pub message: &'a MessageRow,
    /// For the short transactions of a Slack thread search (budget, cursor).
    pub pool: &'a PgPool,
    pub client: &'a GuardedClient,
    pub settings: &'a DispatchSettings,
}

pub enum Reconciled {
    /// Posted, with its platform id.
    Found(String),
    /// It certainly was not posted (or the connector accepts a possible duplicate): send.
    Absent,
    /// Look again after this long (why, for the part's `last_error`).
    Later(Duration, String),
    /// Not knowable, and the connector prefers a lost reply to a doubled one.
    Unknowable(String),
}

/// The connector's API base URL, without a trailing slash.
pub(crate) fn api_base(connector: &Connector) -> &str {
    connector
        .profile
        .api_base_url
        .as_deref()
        .unwrap_or(connector.profile.platform.default_api_base())
        .trim_end_matches('/')
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    /// The chat, or the number that answers (WhatsApp `phone_number_id`).
    pub chat: String,
    /// The Telegram forum topic, the Slack assistant thread, the WhatsApp message marked read.
    pub within: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Show<'a> {
    Working,
    /// What the agent says it is doing (Slack shows the text; the others their indicator).
    Status(&'a str),
    /// Slack only: the status is removed.
    Nothing,
}

/// The typing indicator as the platform shows it (`crate::delivery::typing` runs it).
pub trait TypingIndicator: Sync {
    /// `None` where the platform has no indicator for `message`.
    fn typing_place(&self, connector: &Connector, message: &MessageRow) -> Option<Place>;

    /// How many `CB_TYPING_INTERVAL_MS` intervals the indicator outlasts comfortably.
    fn typing_refresh_intervals(&self) -> u32;

    fn typing_request(
        &self,
        client: &GuardedClient,
        base: &str,
        token: &str,
        place: &Place,
        show: Show<'_>,
    ) -> reqwest::RequestBuilder;

    fn typing_shown(&self, body: &Value) -> bool;

    /// Whether the answer asks to slow down beyond a 429 or Slack's `ratelimited`.
    fn typing_slowed(&self, body: &Value) -> bool {
        let _ = body;
        false
    }

    /// Whether a 2xx answer is a refusal (Slack answers `ok: false` with 200).
    fn typing_refused(&self, body: &Value) -> bool {
        let _ = body;
        false
    }

    /// Whether a turn that ends without a reply must clear it (Slack's status stays).
    fn typing_stays(&self) -> bool {
        false
    }
}

/// A streamed answer's live view. Without one, the typing indicator goes on until the reply.
pub trait LivePreview: Sync {
    fn live_surface(&self, message: &MessageRow) -> Option<Surface> {
        let _ = message;
        None
    }

    fn show_live<'a>(
        &'a self,
        target: &'a LiveTarget<'a>,
        surface: Surface,
        text: &'a str,
        shown: &'a mut Shown,
    ) -> BoxFuture<'a, Result<LiveStep, &'static str>> {
        let _ = (target, surface, text, shown);
        Box::pin(async { Err("the platform shows no live view") })
    }

    /// Ends a preview no reply part will adopt (best effort).
    fn end_live<'a>(
        &'a self,
        client: &'a GuardedClient,
        connector: &'a Connector,
        message: &'a MessageRow,
        live_id: &'a str,
        token: &'a str,
    ) -> BoxFuture<'a, ()> {
        let _ = (client, connector, message, live_id, token);
        Box::pin(async {})
    }
}

pub trait Files: Sync {
    /// After any lookup the platform needs first.
    fn download<'a>(
        &'a self,
        client: &'a GuardedClient,
        connector: &'a Connector,
        token: &'a str,
        source: &'a FileSource,
    ) -> BoxFuture<'a, Result<reqwest::RequestBuilder, FetchError>>;

    /// Refuses a successful answer that is not the file.
    fn check_download(&self, response: &reqwest::Response) -> Result<(), FetchError> {
        let _ = response;
        Ok(())
    }
}
