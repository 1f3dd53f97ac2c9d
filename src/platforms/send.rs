//! What every platform's send shares (Slack `chat.postMessage`, WhatsApp `messages`, Telegram
//! `sendMessage`): the part to post, the classified outcome (posted, refused, or in doubt) and
//! the [`Outbound`] trait.
//!
//! The client retries nothing itself: a send whose outcome is unknown must be reconciled,
//! never blindly repeated by a library underneath.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::Value;

use futures::future::BoxFuture;

use crate::choices::{Chosen, Offered};
use crate::db::messages::MessageRow;
use crate::domain::Connector;
use crate::egress::{self, GuardedClient as Client, SendError};
use crate::markdown::{Formatted, Renderer};
use crate::media::outgoing::{self, FileBody, OpenError, OutgoingFile};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SendOutcome {
    /// Posted, with the platform's id of the new message.
    Sent(String),
    /// Refused for now, certainly not posted; try again after the platform's delay.
    RateLimited { retry_after: Duration, error: String },
    /// Certainly not posted (no connection); try again later.
    NotSent { error: String },
    /// A file's bytes are with the platform under this id (Slack's file id, WhatsApp's media
    /// id), and the post that shows them is still to make: record it, then send again.
    Staged(String),
    /// Maybe posted (timeout, 5xx, the platform's own "internal error"): reconcile first.
    Unknown { error: String },
    /// Refused for good: `<platform code>: <message>`.
    Permanent { error: String },
}

pub struct OutboundPart<'a> {
    pub connector: &'a Connector,
    pub message: &'a MessageRow,
    /// `{message_id}:{part_index}`, sent where the platform keeps it so an interrupted send
    /// can be found.
    pub part_key: &'a str,
    pub text: &'a str,
    /// The buttons that go with this part (an answer's last).
    pub choices: Option<&'a Offered>,
    /// Which of them was tapped, when the part is being closed.
    pub chosen: Option<&'a Chosen>,
    /// The file the part posts (`text` its caption).
    pub file: Option<&'a OutgoingFile>,
    /// What an earlier attempt's upload left (`SendOutcome::Staged`).
    pub staged: Option<&'a str>,
    /// How long fetching the file, and one upload of it, may take (`CB_FILE_TIMEOUT_SECS`).
    pub transfer_timeout: Duration,
}

impl OutboundPart<'_> {
    /// The part in its platform's formatting, when its connector formats Markdown.
    pub(crate) fn formatted(&self, renderer: &dyn Renderer) -> Option<Formatted> {
        self.connector
            .profile
            .format_markdown
            .then(|| renderer.format(self.text))
            .flatten()
    }
}

/// One platform's send API.
pub trait Outbound: Sync {
    fn send<'a>(
        &'a self,
        client: &'a Client,
        part: &'a OutboundPart<'a>,
        token: &'a str,
    ) -> BoxFuture<'a, SendOutcome>;

    /// Whether a message's buttons can be changed once one is tapped (WhatsApp's cannot).
    fn closes_choices(&self) -> bool {
        true
    }

    /// Changes the message `target`, which carried `part`'s text and choices, now that one
    /// was made (`part.choices`' `chosen`): its buttons go. Repeating it changes nothing.
    fn close_choices<'a>(
        &'a self,
        client: &'a Client,
        part: &'a OutboundPart<'a>,
        token: &'a str,
        target: &'a str,
    ) -> BoxFuture<'a, SendOutcome> {
        let _ = (client, part, token);
        Box::pin(async move { SendOutcome::Sent(target.to_owned()) })
    }

    /// Posts `part.file` with its caption, uploading its bytes unless `part.staged` says an
    /// earlier attempt did. A platform that uploads apart from posting answers `Staged` first.
    fn send_file<'a>(
        &'a self,
        client: &'a Client,
        part: &'a OutboundPart<'a>,
        token: &'a str,
        file: &'a OutgoingFile,
    ) -> BoxFuture<'a, SendOutcome>;

    /// Sets `part.text` (as `PlatformApi::reaction_name` gave it) as the bot's reaction on
    /// the user's message `target`. Setting it again changes nothing.
    fn react<'a>(
        &'a self,
        client: &'a Client,
        part: &'a OutboundPart<'a>,
        token: &'a str,
        target: &'a str,
    ) -> BoxFuture<'a, SendOutcome>;

    /// Delivers `part` into the message the live view left (`live_id`) instead of a new one;
    /// platforms without live messages post it.
    fn adopt<'a>(
        &'a self,
        client: &'a Client,
        part: &'a OutboundPart<'a>,
        token: &'a str,
        live_id: &'a str,
    ) -> BoxFuture<'a, SendOutcome> {
        let _ = live_id;
        self.send(client, part, token)
    }
}

/// The file's bytes for one upload within `limit`: a file that cannot be had is refused
/// for good, one whose host is away is tried again.
pub(crate) async fn open_file(
    client: &Client,
    part: &OutboundPart<'_>,
    file: &OutgoingFile,
    limit: u64,
) -> Result<FileBody, SendOutcome> {
    let opened = outgoing::open(client, file, limit, part.transfer_timeout).await;
    opened.map_err(|err| match err {
        OpenError::Refused(error) => SendOutcome::Permanent { error },
        OpenError::Unavailable(error) => SendOutcome::NotSent { error },
    })
}

/// The emoji a reaction names: a character (with or without its variation selector) or a
/// name such as `eyes` or `:white_check_mark:`.
pub(crate) fn emoji_of(text: &str) -> Option<&'static emojis::Emoji> {
    let text = text.trim();
    let name = text.trim_matches(':');
    emojis::get(text)
        .or_else(|| emojis::get(&text.replace('\u{fe0f}', "")))
        .or_else(|| emojis::get_by_shortcode(name))
}

pub(crate) fn no_token() -> SendOutcome {
    SendOutcome::Permanent {
        error: "connector has no outbound token".into(),
    }
}

/// A refused connection certainly posted nothing, nor did an upload whose file's download
/// broke off (the platform got a body shorter than announced); anything else after the
/// request left may have. The error text loses the URL, which can hold a Telegram token. An
/// egress refusal is permanent: a retry would be refused the same way.
pub(crate) fn transport_error(err: SendError) -> SendOutcome {
    let err = match err {
        SendError::Refused(_) => {
            return SendOutcome::Permanent {
                error: egress::PLATFORM_REFUSED.into(),
            }
        }
        SendError::Transport(err) => err,
    };
    if let Some(broke) = outgoing::download_broke(&err) {
        return SendOutcome::NotSent {
            error: format!("not posted: {broke}"),
        };
    }
    let connect = err.is_connect();
    let error = err.without_url().to_string();
    if connect {
        SendOutcome::NotSent { error }
    } else {
        SendOutcome::Unknown { error }
    }
}

pub(crate) async fn read_json(response: reqwest::Response) -> (StatusCode, Option<Value>, Option<Duration>) {
    let status = response.status();
    let retry_after = response
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Duration::from_secs);
    let body = response.json::<Value>().await.ok();
    (status, body, retry_after)
}
