//! Every platform the gateway speaks, one folder each, behind traits; [`of`] is the one place
//! they are listed.
//!
//! A platform's folder holds everything the gateway knows about it, one job per file:
//! `inbound.rs` (verify a webhook over its raw bytes, answer a handshake, parse it into
//! turns: [`inbound::Channel`]), `send.rs` (post a reply part and classify the answer:
//! [`send::Outbound`]), `format.rs` (the agent's Markdown in the platform's own formatting:
//! [`crate::markdown::Renderer`]), `typing.rs` ([`TypingIndicator`]), `live.rs` (a streamed
//! answer's preview: [`LivePreview`]), `files.rs` (downloading an attachment: [`Files`]) and
//! `mod.rs` (the platform's type, its limits and how an interrupted send is settled:
//! [`PlatformApi`]); Slack adds `thread.rs` and `reconcile.rs` for its thread search.
//!
//! What does not depend on the platform stays where it is: the delivery state machine
//! (`crate::delivery`), the typing and live-view machinery that drives these traits
//! (`crate::delivery::typing`, `crate::delivery::live`), Markdown parsing, rendering and
//! splitting (`crate::markdown`), and media tokens (`crate::media`).
//!
//! Each platform is one zero-sized type implementing every trait, reached through
//! `&'static dyn PlatformApi`. Calls that go to the network return boxed futures: one small
//! allocation per HTTP request, next to the several the request itself makes.

pub mod inbound;
pub mod send;
pub mod slack;
pub mod telegram;
pub mod whatsapp;

use std::future::Future;
use std::pin::Pin;

use serde_json::Value;

use crate::db::messages::{MessageRow, ReplyPart};
use crate::delivery::live::{LiveContext, Shown, Surface};
use crate::delivery::typing::{Place, Show};
use crate::delivery::{Delivery, Outgoing, Reconciled};
use crate::domain::{Connector, Platform};
use crate::egress::GuardedClient;
use crate::markdown::Renderer;
use crate::media::fetch::FetchError;
use crate::media::FileSource;

use self::inbound::Channel;
use self::send::Outbound;

/// A future a platform's network call returns.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The module that speaks `platform`. Adding a platform: a folder beside `slack/` and one
/// line here (and its name in `crate::domain::Platform`).
pub fn of(platform: Platform) -> &'static dyn PlatformApi {
    match platform {
        Platform::Slack => &slack::Slack,
        Platform::Whatsapp => &whatsapp::Whatsapp,
        Platform::Telegram => &telegram::Telegram,
    }
}

/// Everything one platform does: each job its own trait, and what is left here.
pub trait PlatformApi: Channel + Outbound + Renderer + TypingIndicator + LivePreview + Files {
    /// The platform's API, for connectors that name none of their own.
    fn default_api_base(&self) -> &'static str;

    /// Longest reply part, in UTF-16 units (`crate::delivery::split`).
    fn part_limit(&self) -> usize;

    /// Whether webhooks come as large batches, read up to `CB_WHATSAPP_BODY_LIMIT` rather
    /// than `CB_BODY_LIMIT` (Meta's run to about 3 MB).
    fn batches_webhooks(&self) -> bool {
        false
    }

    /// Whether the part left `sending` by an interrupted send was posted, as far as this
    /// pass can tell (`crate::delivery`).
    fn reconcile<'a>(
        &'a self,
        delivery: &'a Delivery<'a>,
        outgoing: &'a Outgoing,
        part: &'a ReplyPart,
    ) -> BoxFuture<'a, anyhow::Result<Reconciled>>;
}

/// The connector's API base URL (a stand-in's, in tests and the demo), without a trailing
/// slash.
pub(crate) fn api_base(connector: &Connector) -> &str {
    connector
        .api_base_url
        .as_deref()
        .unwrap_or(of(connector.platform).default_api_base())
        .trim_end_matches('/')
}

/// The typing indicator as the platform shows it (`crate::delivery::typing` runs it).
pub trait TypingIndicator: Sync {
    /// Where `message`'s indicator shows, or `None` where the platform has none for it or
    /// it cannot be addressed.
    fn typing_place(&self, connector: &Connector, message: &MessageRow) -> Option<Place>;

    /// How many refresh intervals (`CB_TYPING_INTERVAL_MS`) the indicator outlasts
    /// comfortably.
    fn typing_refresh_intervals(&self) -> u32;

    /// The request that shows (or clears) the indicator.
    fn typing_request(
        &self,
        client: &GuardedClient,
        base: &str,
        token: &str,
        place: &Place,
        show: Show,
    ) -> reqwest::RequestBuilder;

    /// Whether a 2xx answer's body says the indicator is shown.
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

    /// Whether the indicator stays until cleared, so a turn that ends without a reply must
    /// clear it (Slack's status).
    fn typing_stays(&self) -> bool {
        false
    }
}

/// A streamed answer's live view as the platform shows it (`crate::delivery::live` runs it).
/// Platforms without one keep the defaults: the typing indicator goes on until the reply.
pub trait LivePreview: Sync {
    /// How `message`'s stream shows, or `None`.
    fn live_surface(&self, message: &MessageRow) -> Option<Surface> {
        let _ = message;
        None
    }

    /// One call showing `text`: `Ok(false)` ends the view.
    fn show_live<'a>(
        &'a self,
        context: &'a LiveContext,
        surface: Surface,
        text: &'a str,
        shown: &'a mut Shown,
    ) -> BoxFuture<'a, Result<bool, &'static str>> {
        let _ = (context, surface, text, shown);
        Box::pin(async { Err("the platform shows no live view") })
    }

    /// Ends a preview no reply part will adopt (best effort); nothing where there is
    /// nothing to end.
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

/// Downloading an attachment with the connector's credentials (`crate::media::fetch`).
pub trait Files: Sync {
    /// The request that downloads `source`, after any lookup the platform needs first.
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

/// The source of another platform's file, which a connector's token cannot fetch (media
/// tokens name the connector whose turn holds the file, so this does not happen).
pub(crate) fn foreign_file() -> FetchError {
    FetchError::Refused("the file belongs to another platform")
}
