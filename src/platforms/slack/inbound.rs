//! Slack Events API over HTTP (<https://docs.slack.dev/apis/events-api/>; what is forwarded
//! or dropped: docs/platforms.md#what-is-forwarded-recorded-or-dropped). Besides turns, a
//! `message_metadata_posted` event carrying our part key is a [`PostedPart`]: Slack's word
//! that a reply part left in doubt was posted, and `reaction_added`/`reaction_removed` on a
//! message is a [`Reaction`].

use serde::Deserialize;
use serde_json::{json, Value};

use super::Slack;
use axum::http::HeaderName;

use crate::db::replies::parse_part_key;
use crate::domain::{Address, Connector, Platform};
use crate::media::{Attachment, AttachmentKind, FileSource};
use crate::platforms::inbound::{
    hmac_sha256_hex, hmac_sha256_matches, parse_json, required_header, Channel, HandshakeReply, HookError,
    HookRequest, Inbound, InboundKind, InboundMessage, Parsed, PostedPart, Reaction, ReactionChange,
};

/// The metadata `event_type` of every reply part, which the app's manifest subscribes to
/// (docs/platforms.md#registering-the-webhook-with-each-platform).
pub const REPLY_METADATA_EVENT_TYPE: &str = "channel_bridge_reply";

const SIGNATURE_HEADER: &str = "x-slack-signature";
const TIMESTAMP_HEADER: &str = "x-slack-request-timestamp";
pub const SIGNATURE: HeaderName = HeaderName::from_static(SIGNATURE_HEADER);
pub const TIMESTAMP: HeaderName = HeaderName::from_static(TIMESTAMP_HEADER);
/// Slack's replay rule: "more than five minutes from local time", in either direction
/// (<https://docs.slack.dev/authentication/verifying-requests-from-slack>).
const MAX_CLOCK_SKEW_SECS: u64 = 300;

impl Channel for Slack {
    fn platform(&self) -> Platform {
        Platform::Slack
    }

    fn sign(&self, secret: &str, body: &[u8], now: i64) -> Vec<(HeaderName, String)> {
        let timestamp = now.to_string();
        let signature = hmac_sha256_hex(secret, &[b"v0:", timestamp.as_bytes(), b":", body]);
        vec![(TIMESTAMP, timestamp), (SIGNATURE, format!("v0={signature}"))]
    }

    fn signing_note(&self, now: i64, _secret_env: &str) -> Option<String> {
        let window = i64::try_from(MAX_CLOCK_SKEW_SECS).unwrap_or(i64::MAX);
        Some(format!(
            "the Slack signature covers timestamp {now}: the command is accepted for {window} s \
             (until unix time {})",
            now + window
        ))
    }

    /// `X-Slack-Signature: v0=hex(HMAC-SHA256(secret, "v0:{ts}:{raw body}"))` with a fresh
    /// `X-Slack-Request-Timestamp`
    /// (<https://docs.slack.dev/authentication/verifying-requests-from-slack>).
    fn verify(&self, connector: &Connector, request: &HookRequest<'_>) -> Result<(), HookError> {
        let signature = required_header(request.headers, SIGNATURE_HEADER)?;
        let timestamp = required_header(request.headers, TIMESTAMP_HEADER)?;
        check_freshness(timestamp, request.now)?;
        let hex = signature.strip_prefix("v0=").ok_or(HookError::BadSignature)?;
        // The base string uses the header text as sent, not a re-formatted number.
        let parts: [&[u8]; 4] = [b"v0:", timestamp.as_bytes(), b":", request.body];
        if hmac_sha256_matches(connector, &parts, hex) {
            Ok(())
        } else {
            Err(HookError::BadSignature)
        }
    }

    /// Taps (a `payload` field) and slash commands (a `command` field) come as forms.
    fn parse_interaction(&self, _connector: &Connector, body: &[u8]) -> Result<Parsed, HookError> {
        if super::command::is_command(body) {
            super::command::parse(body)
        } else {
            super::interactive::parse(body)
        }
    }

    fn parse(&self, connector: &Connector, body: &[u8]) -> Result<Parsed, HookError> {
        let envelope: EnvelopeIn = parse_json(body)?;
        match envelope.kind.as_str() {
            "url_verification" => challenge_reply(envelope.challenge).map(Parsed::Handshake),
            "event_callback" => Ok(Parsed::Events(event_callback(connector, envelope))),
            "app_rate_limited" => Ok(Parsed::Events(Inbound::only_dropped("app_rate_limited"))),
            _ => Ok(Parsed::Events(Inbound::only_dropped("other_envelope"))),
        }
    }
}

/// A timestamp that is not a number is refused like a bad signature.
fn check_freshness(timestamp: &str, now: i64) -> Result<(), HookError> {
    let sent: i64 = timestamp.parse().map_err(|_| HookError::BadSignature)?;
    if now.abs_diff(sent) > MAX_CLOCK_SKEW_SECS {
        return Err(HookError::StaleTimestamp);
    }
    Ok(())
}

/// The outer `event_callback` / `url_verification` / `app_rate_limited` envelope.
#[derive(Deserialize)]
struct EnvelopeIn {
    #[serde(rename = "type")]
    kind: String,
    challenge: Option<String>,
    team_id: Option<String>,
    context_team_id: Option<String>,
    authorizations: Option<Vec<AuthorizationIn>>,
    api_app_id: Option<String>,
    event_id: Option<String>,
    /// Kept as a `Value` until its type is known: other event types reuse field names with
    /// other shapes (`user` is an object in `user_change`, `channel` in `channel_created`).
    event: Option<Value>,
}

#[derive(Deserialize)]
struct AuthorizationIn {
    team_id: Option<String>,
}

#[derive(Deserialize)]
struct MessageEventIn {
    #[serde(rename = "type")]
    kind: String,
    subtype: Option<String>,
    channel: Option<String>,
    channel_type: Option<String>,
    user: Option<String>,
    bot_id: Option<String>,
    text: Option<String>,
    ts: Option<String>,
    thread_ts: Option<String>,
    #[serde(default)]
    hidden: bool,
    #[serde(default)]
    files: Vec<FileIn>,
}

#[derive(Deserialize)]
struct FileIn {
    id: Option<String>,
    name: Option<String>,
    mimetype: Option<String>,
    size: Option<i64>,
    url_private_download: Option<String>,
    /// Only `hosted` has bytes the bot token can fetch (not `external`, `tombstone`).
    mode: Option<String>,
}

/// Answered as JSON `{"challenge": …}`, one of the forms Slack accepts
/// (<https://docs.slack.dev/reference/events/url_verification>).
fn challenge_reply(challenge: Option<String>) -> Result<HandshakeReply, HookError> {
    let challenge =
        challenge.ok_or_else(|| HookError::Malformed("url_verification without challenge".into()))?;
    Ok(HandshakeReply {
        content_type: "application/json",
        body: json!({ "challenge": challenge }).to_string(),
    })
}

#[derive(Deserialize)]
struct MetadataPostedIn {
    app_id: Option<String>,
    bot_id: Option<String>,
    channel_id: Option<String>,
    message_ts: Option<String>,
    metadata: Option<MetadataIn>,
}

#[derive(Deserialize)]
struct MetadataIn {
    event_type: Option<String>,
    event_payload: Option<Value>,
}

fn event_callback(connector: &Connector, envelope: EnvelopeIn) -> Inbound {
    if !is_for_our_workspace(connector, &envelope) {
        return Inbound::only_dropped("other_team");
    }
    let Some(event) = envelope.event.as_ref() else {
        return Inbound::only_dropped("no_event");
    };
    let read = match event.get("type").and_then(Value::as_str) {
        Some("message_metadata_posted") => posted_part(connector, event).map(|posted| Inbound {
            posted: vec![posted],
            ..Inbound::default()
        }),
        Some(kind @ ("reaction_added" | "reaction_removed")) => {
            reaction(connector, kind, event).map(|reaction| Inbound {
                reactions: vec![reaction],
                ..Inbound::default()
            })
        }
        _ => message_event(event)
            .and_then(|event| inbound_message(connector, &envelope, event))
            .map(|message| Inbound {
                messages: vec![message],
                ..Inbound::default()
            }),
    };
    read.unwrap_or_else(Inbound::only_dropped)
}

/// A distributed app sends every workspace's events to one Request URL; only the connector's
/// belongs to this tenant. In Slack Connect the envelope's `team_id` may name the other side,
/// so `authorizations` and `context_team_id` count too.
fn is_for_our_workspace(connector: &Connector, envelope: &EnvelopeIn) -> bool {
    let Some(ours) = connector.profile.external_id.as_deref() else {
        return true;
    };
    let installed = envelope.authorizations.iter().flatten();
    [&envelope.team_id, &envelope.context_team_id]
        .into_iter()
        .chain(installed.map(|a| &a.team_id))
        .any(|team| team.as_deref() == Some(ours))
}

/// `message` and `app_mention` events; any other type (lifecycle, channels…) is not a turn.
/// A signed event we cannot read is dropped, not refused: a 400 would only make Slack retry it.
fn message_event(event: &Value) -> Result<MessageEventIn, &'static str> {
    match event.get("type").and_then(Value::as_str) {
        Some("message" | "app_mention") => {
            serde_json::from_value(event.clone()).map_err(|_| "unreadable_event")
        }
        _ => Err("non_message_event"),
    }
}

fn inbound_message(
    connector: &Connector,
    envelope: &EnvelopeIn,
    event: MessageEventIn,
) -> Result<InboundMessage, &'static str> {
    check_sender(connector, &event)?;
    let attachments = attachments(&event);
    let kind = content_kind(&event, !attachments.is_empty())?;
    let (Some(team), Some(channel), Some(ts), Some(user)) = (
        envelope.team_id.as_deref(),
        event.channel.as_deref(),
        event.ts.as_deref(),
        event.user.as_deref(),
    ) else {
        return Err("missing_ids");
    };
    Ok(InboundMessage {
        // The message identity, not `event_id`: one @mention arrives as both `message` and
        // `app_mention` with different event ids (docs/platforms.md#dedupe-keys).
        idempotency_key: format!("{team}:{channel}:{ts}"),
        kind,
        platform_message_id: ts.to_owned(),
        address: Address {
            chat_id: channel.to_owned(),
            thread_id: event.thread_ts.clone(),
            space: shared_space(&event, channel),
            platform_user_id: user.to_owned(),
        },
        reply_to_id: event.thread_ts.clone(),
        text: message_text(kind, &event),
        attachments,
        metadata: metadata(envelope, &event),
        tap: None,
        command: None,
    })
}

/// Metadata of our type, by our app and bot when known (another app could post our event
/// type), naming a part key of ours. Anything else is dropped, never refused (a 4xx is retried).
fn posted_part(connector: &Connector, event: &Value) -> Result<PostedPart, &'static str> {
    let event: MetadataPostedIn = serde_json::from_value(event.clone()).map_err(|_| "unreadable_event")?;
    let metadata = event.metadata.ok_or("unreadable_event")?;
    if metadata.event_type.as_deref() != Some(REPLY_METADATA_EVENT_TYPE) {
        return Err("other_metadata");
    }
    let same_app = matches_when_known(event.app_id.as_deref(), connector.profile.app_id.as_deref());
    let same_bot = matches_when_known(event.bot_id.as_deref(), connector.profile.bot_id.as_deref());
    if !(same_app && same_bot) {
        return Err("other_app");
    }
    let key = metadata
        .event_payload
        .as_ref()
        .and_then(|payload| payload.get("part_key"))
        .and_then(Value::as_str)
        .ok_or("unreadable_event")?;
    let (message, part_index) = parse_part_key(key).ok_or("unknown_part_key")?;
    let ts = event.message_ts.filter(|ts| is_slack_ts(ts));
    let channel = event.channel_id.filter(|id| is_slack_id(id));
    let (Some(ts), Some(channel)) = (ts, channel) else {
        return Err("missing_ids");
    };
    Ok(PostedPart {
        message,
        part_index,
        platform_message_id: ts,
        chat_id: channel,
    })
}

#[derive(Deserialize)]
struct ReactionEventIn {
    user: Option<String>,
    reaction: Option<String>,
    item: Option<ReactionItemIn>,
    event_ts: Option<String>,
}

#[derive(Deserialize)]
struct ReactionItemIn {
    #[serde(rename = "type")]
    kind: Option<String>,
    channel: Option<String>,
    ts: Option<String>,
}

/// `reaction_added`/`reaction_removed` (docs.slack.dev/reference/events/reaction_added):
/// only a reaction on a message can be on one of our answers (not on a `file` or
/// `file_comment`). Our bot's own reactions come back as events too, with its user id.
fn reaction(connector: &Connector, kind: &str, event: &Value) -> Result<Reaction, &'static str> {
    let event: ReactionEventIn = serde_json::from_value(event.clone()).map_err(|_| "unreadable_event")?;
    let item = event.item.ok_or("unreadable_event")?;
    if item.kind.as_deref() != Some("message") {
        return Err("reaction_not_on_message");
    }
    if is_ours(event.user.as_deref(), connector.profile.bot_user_id.as_deref()) {
        return Err("own_reaction");
    }
    let channel = item.channel.filter(|id| is_slack_id(id));
    let ts = item.ts.filter(|ts| is_slack_ts(ts));
    let user = event.user.filter(|id| is_slack_id(id));
    let (Some(channel), Some(ts), Some(user)) = (channel, ts, user) else {
        return Err("missing_ids");
    };
    let name = event
        .reaction
        .filter(|name| !name.is_empty())
        .ok_or("unreadable_event")?;
    let at = event
        .event_ts
        .as_deref()
        .and_then(ts_time)
        .ok_or("unreadable_event")?;
    let change = if kind == "reaction_added" {
        ReactionChange::Set(name)
    } else {
        // Slack removes one emoji of the several a person may have left.
        ReactionChange::Removed(Some(name))
    };
    Ok(Reaction {
        platform_message_id: ts,
        chat_id: channel,
        platform_user_id: user,
        change,
        at,
    })
}

/// A Slack timestamp (`"1360782804.083113"`: seconds, then a fraction) as a time.
fn ts_time(ts: &str) -> Option<chrono::DateTime<chrono::Utc>> {
    if !is_slack_ts(ts) {
        return None;
    }
    let (secs, fraction) = ts.split_once('.')?;
    let digits: String = fraction.chars().chain(std::iter::repeat('0')).take(9).collect();
    chrono::DateTime::from_timestamp(secs.parse().ok()?, digits.parse().ok()?)
}

fn matches_when_known(field: Option<&str>, ours: Option<&str>) -> bool {
    ours.is_none() || field == ours
}

fn is_slack_ts(ts: &str) -> bool {
    let digits =
        |part: &str| !part.is_empty() && part.len() <= 20 && part.bytes().all(|b| b.is_ascii_digit());
    ts.split_once('.')
        .is_some_and(|(secs, fraction)| digits(secs) && digits(fraction))
}

fn is_slack_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 64 && id.bytes().all(|b| b.is_ascii_alphanumeric())
}

/// Loop safety (no bot's post reaches the agent): modern app posts have no subtype but carry
/// `bot_id` and the bot user as `user`; classic bots use `subtype: bot_message`.
fn check_sender(connector: &Connector, event: &MessageEventIn) -> Result<(), &'static str> {
    let by_our_bot = is_ours(event.bot_id.as_deref(), connector.profile.bot_id.as_deref());
    let by_our_user = is_ours(event.user.as_deref(), connector.profile.bot_user_id.as_deref());
    if by_our_bot || by_our_user {
        return Err("own_message");
    }
    if event.bot_id.is_some() || event.subtype.as_deref() == Some("bot_message") {
        return Err("bot_message");
    }
    Ok(())
}

/// Both present and equal: an id the connector does not know never matches a missing field.
fn is_ours(field: Option<&str>, ours: Option<&str>) -> bool {
    field.is_some() && field == ours
}

/// Which subtypes carry a user's words; edits, deletes, joins and the rest are dropped
/// (docs/platforms.md#what-is-forwarded-recorded-or-dropped).
fn content_kind(event: &MessageEventIn, has_files: bool) -> Result<InboundKind, &'static str> {
    let has_text = event.text.as_deref().is_some_and(|t| !t.trim().is_empty());
    match event.subtype.as_deref() {
        Some("message_changed") => return Err("message_changed"),
        Some("message_deleted") => return Err("message_deleted"),
        None | Some("thread_broadcast") | Some("file_share") => {}
        Some(_) => return Err("subtype"),
    }
    if event.hidden {
        return Err("hidden");
    }
    match (has_text, event.subtype.as_deref()) {
        (true, _) => Ok(InboundKind::Text),
        (false, Some("file_share")) if has_files => Ok(InboundKind::Text),
        (false, Some("file_share")) => Ok(InboundKind::NonText),
        (false, _) => Err("empty_text"),
    }
}

/// The channel, unless a direct message. `app_mention` carries no `channel_type`, but DM
/// channel ids start with `D`.
fn shared_space(event: &MessageEventIn, channel: &str) -> Option<String> {
    let direct = match event.channel_type.as_deref() {
        Some(kind) => matches!(kind, "im" | "app_home"),
        None => channel.starts_with('D'),
    };
    (!direct).then(|| channel.to_owned())
}

fn attachments(event: &MessageEventIn) -> Vec<Attachment> {
    event
        .files
        .iter()
        .filter(|file| {
            file.mode
                .as_deref()
                .is_none_or(|mode| mode == "hosted" || mode == "snippet")
        })
        .filter_map(|file| {
            let mime = file.mimetype.clone();
            let kind = match mime.as_deref().and_then(|m| m.split('/').next()) {
                Some("image") => AttachmentKind::Image,
                Some("audio") => AttachmentKind::Audio,
                Some("video") => AttachmentKind::Video,
                _ => AttachmentKind::Document,
            };
            Some(Attachment {
                kind,
                mime,
                size: file.size,
                name: file.name.clone(),
                source: FileSource::Slack {
                    file_id: file.id.clone()?,
                    url: file.url_private_download.clone(),
                },
            })
        })
        .collect()
}

fn message_text(kind: InboundKind, event: &MessageEventIn) -> String {
    match kind {
        InboundKind::Text => event.text.clone().unwrap_or_default(),
        InboundKind::NonText => "[file]".to_owned(),
    }
}

fn metadata(envelope: &EnvelopeIn, event: &MessageEventIn) -> Value {
    json!({
        "event_id": envelope.event_id,
        "event_type": event.kind,
        "subtype": event.subtype,
        "channel_type": event.channel_type,
        "team_id": envelope.team_id,
        "api_app_id": envelope.api_app_id,
    })
}

#[cfg(test)]
mod tests {
    use hmac::{Hmac, Mac};
    use sha2::Sha256;

    use super::*;
    use crate::platforms::inbound::testing;

    const OFFICIAL_SECRET: &str = "8f742231b10e8888abcd99yyyzzz85a5";
    const OFFICIAL_TS: i64 = 1_531_420_618;
    const OFFICIAL_BODY: &str = "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";
    const OFFICIAL_SIGNATURE: &str = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503";
    const URL_VERIFICATION_SIGNATURE: &str =
        "v0=f9bd80929259f3f6d5fe3a3186c453c89cd1ad4862815a15837584f31c993652";

    const DM_TEXT: &[u8] = include_bytes!("../../../fixtures/slack/dm_text.json");
    const CHANNEL_TEXT: &[u8] = include_bytes!("../../../fixtures/slack/channel_text.json");
    const THREAD_REPLY: &[u8] = include_bytes!("../../../fixtures/slack/thread_reply.json");
    const MESSAGE_CHANGED: &[u8] = include_bytes!("../../../fixtures/slack/message_changed.json");
    const MESSAGE_DELETED: &[u8] = include_bytes!("../../../fixtures/slack/message_deleted.json");
    const BOT_ECHO: &[u8] = include_bytes!("../../../fixtures/slack/bot_echo.json");
    const CLASSIC_BOT: &[u8] = include_bytes!("../../../fixtures/slack/bot_message_classic.json");
    const MENTION_MESSAGE: &[u8] = include_bytes!("../../../fixtures/slack/mention_message.json");
    const MENTION_APP_MENTION: &[u8] = include_bytes!("../../../fixtures/slack/mention_app_mention.json");
    const URL_VERIFICATION: &[u8] = include_bytes!("../../../fixtures/slack/url_verification.json");
    const CHANNEL_JOIN: &[u8] = include_bytes!("../../../fixtures/slack/channel_join.json");
    const APP_RATE_LIMITED: &[u8] = include_bytes!("../../../fixtures/slack/app_rate_limited.json");
    const REACTION_ADDED: &[u8] = include_bytes!("../../../fixtures/slack/reaction_added.json");
    const REACTION_REMOVED: &[u8] = include_bytes!("../../../fixtures/slack/reaction_removed.json");
    const FILE_SHARE_NO_TEXT: &[u8] = include_bytes!("../../../fixtures/slack/file_share_no_text.json");
    const METADATA_POSTED: &[u8] = include_bytes!("../../../fixtures/slack/message_metadata_posted.json");

    /// The connector the fixtures were written for (fixtures/README.md).
    fn connector() -> Connector {
        let mut connector = testing::connector(Platform::Slack, OFFICIAL_SECRET);
        connector.profile.external_id = Some("T0001".into());
        connector.profile.app_id = Some("A0001".into());
        connector.profile.bot_user_id = Some("UBOT1".into());
        connector.profile.bot_id = Some("BBOT1".into());
        connector
    }

    fn verify(
        connector: &Connector,
        ts: &str,
        signature: &str,
        body: &[u8],
        now: i64,
    ) -> Result<(), HookError> {
        let headers = testing::headers(&[(SIGNATURE_HEADER, signature), (TIMESTAMP_HEADER, ts)]);
        let request = HookRequest {
            headers: &headers,
            query: None,
            body,
            now,
        };
        Slack.verify(connector, &request)
    }

    fn sign(secret: &str, ts: i64, body: &[u8]) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("any key length");
        mac.update(format!("v0:{ts}:").as_bytes());
        mac.update(body);
        format!("v0={}", hex::encode(mac.finalize().into_bytes()))
    }

    fn events(body: &[u8]) -> Inbound {
        testing::events(&Slack, &connector(), body)
    }

    fn single_message(body: &[u8]) -> InboundMessage {
        testing::single_message(events(body))
    }

    fn dropped_reason(body: &[u8]) -> &'static str {
        testing::dropped_reason(events(body))
    }

    #[test]
    fn official_slack_vector_verifies() {
        let body = OFFICIAL_BODY.as_bytes();
        let ts = OFFICIAL_TS.to_string();
        assert_eq!(
            verify(&connector(), &ts, OFFICIAL_SIGNATURE, body, OFFICIAL_TS),
            Ok(())
        );
        assert_eq!(sign(OFFICIAL_SECRET, OFFICIAL_TS, body), OFFICIAL_SIGNATURE);
    }

    #[test]
    fn json_url_verification_vector_verifies() {
        assert_eq!(URL_VERIFICATION.len(), 129, "the fixture is the exact vector");
        let ts = OFFICIAL_TS.to_string();
        let result = verify(
            &connector(),
            &ts,
            URL_VERIFICATION_SIGNATURE,
            URL_VERIFICATION,
            OFFICIAL_TS,
        );
        assert_eq!(result, Ok(()));
    }

    #[test]
    fn timestamp_more_than_five_minutes_old_or_ahead_is_stale() {
        let ts = OFFICIAL_TS.to_string();
        let body = OFFICIAL_BODY.as_bytes();
        for now in [OFFICIAL_TS + 301, OFFICIAL_TS - 301] {
            let result = verify(&connector(), &ts, OFFICIAL_SIGNATURE, body, now);
            assert_eq!(result, Err(HookError::StaleTimestamp), "now = {now}");
        }
        for now in [OFFICIAL_TS + 300, OFFICIAL_TS - 300] {
            assert_eq!(verify(&connector(), &ts, OFFICIAL_SIGNATURE, body, now), Ok(()));
        }
    }

    #[test]
    fn non_numeric_timestamp_is_refused() {
        let result = verify(&connector(), "soon", OFFICIAL_SIGNATURE, b"{}", OFFICIAL_TS);
        assert_eq!(result, Err(HookError::BadSignature));
    }

    #[test]
    fn tampered_body_or_wrong_secret_is_refused() {
        let ts = OFFICIAL_TS.to_string();
        let tampered = OFFICIAL_BODY.replace("roadrunner", "coyote");
        let result = verify(
            &connector(),
            &ts,
            OFFICIAL_SIGNATURE,
            tampered.as_bytes(),
            OFFICIAL_TS,
        );
        assert_eq!(result, Err(HookError::BadSignature));
        let mut other = connector();
        other.secrets.verification_secret = "another-secret".into();
        let result = verify(
            &other,
            &ts,
            OFFICIAL_SIGNATURE,
            OFFICIAL_BODY.as_bytes(),
            OFFICIAL_TS,
        );
        assert_eq!(result, Err(HookError::BadSignature));
    }

    #[test]
    fn signature_without_v0_prefix_is_refused() {
        let ts = OFFICIAL_TS.to_string();
        let bare = OFFICIAL_SIGNATURE.trim_start_matches("v0=");
        let result = verify(&connector(), &ts, bare, OFFICIAL_BODY.as_bytes(), OFFICIAL_TS);
        assert_eq!(result, Err(HookError::BadSignature));
    }

    #[test]
    fn previous_secret_is_accepted_during_rotation() {
        let mut rotated = connector();
        rotated.secrets.verification_secret = "the-new-secret".into();
        rotated.secrets.previous_verification_secret = Some(OFFICIAL_SECRET.into());
        let ts = OFFICIAL_TS.to_string();
        let result = verify(
            &rotated,
            &ts,
            OFFICIAL_SIGNATURE,
            OFFICIAL_BODY.as_bytes(),
            OFFICIAL_TS,
        );
        assert_eq!(result, Ok(()));
    }

    #[test]
    fn missing_headers_are_reported_by_name() {
        let headers = testing::headers(&[(TIMESTAMP_HEADER, "1531420618")]);
        let request = HookRequest {
            headers: &headers,
            query: None,
            body: b"{}",
            now: OFFICIAL_TS,
        };
        let result = Slack.verify(&connector(), &request);
        assert_eq!(result, Err(HookError::MissingSignature(SIGNATURE_HEADER)));
        let headers = testing::headers(&[(SIGNATURE_HEADER, OFFICIAL_SIGNATURE)]);
        let request = HookRequest {
            headers: &headers,
            query: None,
            body: b"{}",
            now: OFFICIAL_TS,
        };
        let result = Slack.verify(&connector(), &request);
        assert_eq!(result, Err(HookError::MissingSignature(TIMESTAMP_HEADER)));
    }

    #[test]
    fn fixture_signed_at_test_time_verifies() {
        let now = 1_718_000_000;
        let signature = sign(OFFICIAL_SECRET, now, DM_TEXT);
        assert_eq!(
            verify(&connector(), &now.to_string(), &signature, DM_TEXT, now),
            Ok(())
        );
    }

    #[test]
    fn url_verification_is_answered_with_the_challenge_as_json() {
        let Ok(Parsed::Handshake(reply)) = Slack.parse(&connector(), URL_VERIFICATION) else {
            panic!("expected a handshake");
        };
        assert_eq!(reply.content_type, "application/json");
        let body: Value = serde_json::from_str(&reply.body).expect("reply is JSON");
        let expected = "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P";
        assert_eq!(body, json!({ "challenge": expected }));
    }

    #[test]
    fn dm_text_is_forwarded_with_its_message_identity() {
        let message = single_message(DM_TEXT);
        assert_eq!(message.kind, InboundKind::Text);
        assert_eq!(message.idempotency_key, "T0001:D0DM00001:1718000000.000100");
        assert_eq!(message.address.chat_id, "D0DM00001");
        assert_eq!(message.platform_message_id, "1718000000.000100");
        assert_eq!(message.address.platform_user_id, "U0USER1");
        assert_eq!(message.address.thread_id, None);
        assert_eq!(message.reply_to_id, None);
        assert_eq!(message.text, "Hello bridge, what can you do?");
        assert_eq!(message.metadata["channel_type"], "im");
        assert_eq!(message.address.space, None, "a DM is no shared space");
        assert_eq!(message.metadata["event_id"], "Ev0DM00001");
        assert_eq!(message.metadata["event_type"], "message");
        assert_eq!(message.metadata["team_id"], "T0001");
        assert_eq!(message.metadata["api_app_id"], "A0001");
    }

    #[test]
    fn channel_text_is_forwarded() {
        let message = single_message(CHANNEL_TEXT);
        assert_eq!(message.address.chat_id, "C0CHAN001");
        assert_eq!(message.metadata["channel_type"], "channel");
        assert_eq!(message.address.space.as_deref(), Some("C0CHAN001"));
    }

    #[test]
    fn thread_reply_carries_the_parent_ts_as_thread_and_reply_to() {
        let message = single_message(THREAD_REPLY);
        assert_eq!(message.address.thread_id.as_deref(), Some("1718000100.000200"));
        assert_eq!(message.reply_to_id.as_deref(), Some("1718000100.000200"));
        assert_eq!(message.platform_message_id, "1718000200.000300");
    }

    #[test]
    fn message_and_app_mention_of_one_message_share_the_idempotency_key() {
        let from_message = single_message(MENTION_MESSAGE);
        let from_mention = single_message(MENTION_APP_MENTION);
        assert_eq!(from_message.idempotency_key, from_mention.idempotency_key);
        assert_eq!(from_message.idempotency_key, "T0001:C0CHAN001:1718000300.000400");
        assert_ne!(
            from_message.metadata["event_id"],
            from_mention.metadata["event_id"]
        );
        assert_eq!(from_mention.metadata["event_type"], "app_mention");
    }

    #[test]
    fn edits_and_deletes_are_dropped() {
        assert_eq!(dropped_reason(MESSAGE_CHANGED), "message_changed");
        assert_eq!(dropped_reason(MESSAGE_DELETED), "message_deleted");
    }

    #[test]
    fn our_own_post_is_dropped_as_own_message() {
        assert_eq!(dropped_reason(BOT_ECHO), "own_message");
    }

    #[test]
    fn own_post_is_dropped_even_without_configured_bot_ids() {
        let mut bare = connector();
        bare.profile.bot_id = None;
        bare.profile.bot_user_id = None;
        let Ok(Parsed::Events(inbound)) = Slack.parse(&bare, BOT_ECHO) else {
            panic!("expected events");
        };
        assert!(inbound.messages.is_empty());
        assert_eq!(inbound.dropped, vec!["bot_message"]);
    }

    #[test]
    fn classic_bot_message_is_dropped() {
        assert_eq!(dropped_reason(CLASSIC_BOT), "bot_message");
    }

    #[test]
    fn channel_join_is_dropped_as_subtype() {
        assert_eq!(dropped_reason(CHANNEL_JOIN), "subtype");
    }

    #[test]
    fn non_message_events_and_envelopes_are_dropped() {
        let channel_created = br#"{"type":"event_callback","team_id":"T0001","event":{"type":"channel_created","channel":{"id":"C0NEW0001"}}}"#;
        assert_eq!(dropped_reason(channel_created), "non_message_event");
        assert_eq!(dropped_reason(APP_RATE_LIMITED), "app_rate_limited");
    }

    /// The one reaction of `body`, nothing else in it.
    fn single_reaction(body: &[u8]) -> Reaction {
        let inbound = events(body);
        assert!(
            inbound.messages.is_empty(),
            "never a turn: {:?}",
            inbound.messages
        );
        assert!(inbound.dropped.is_empty(), "dropped: {:?}", inbound.dropped);
        assert_eq!(inbound.reactions.len(), 1);
        inbound
            .reactions
            .into_iter()
            .next()
            .expect("one reaction, asserted above")
    }

    /// A reaction fixture with `change` applied to its event.
    fn reaction_event(body: &[u8], change: impl FnOnce(&mut Value)) -> Vec<u8> {
        let mut body: Value = serde_json::from_slice(body).expect("fixture is JSON");
        change(&mut body["event"]);
        serde_json::to_vec(&body).expect("serializes")
    }

    #[test]
    fn a_reaction_added_to_a_message_is_a_reaction_set_at_its_event_time() {
        let expected = Reaction {
            platform_message_id: "1718000105.000250".into(),
            chat_id: "C0CHAN001".into(),
            platform_user_id: "U0USER1".into(),
            change: ReactionChange::Set("thumbsup".into()),
            at: chrono::DateTime::from_timestamp(1_718_000_600, 900_000).expect("in range"),
        };
        assert_eq!(single_reaction(REACTION_ADDED), expected);
    }

    #[test]
    fn a_reaction_removed_names_the_emoji_taken_away() {
        let reaction = single_reaction(REACTION_REMOVED);
        assert_eq!(reaction.change, ReactionChange::Removed(Some("thumbsup".into())));
        assert_eq!(reaction.platform_message_id, "1718000105.000250");
        let later = chrono::DateTime::from_timestamp(1_718_000_660, 100_000).expect("in range");
        assert_eq!(reaction.at, later);
    }

    #[test]
    fn a_skin_tone_or_custom_emoji_keeps_its_slack_name() {
        for name in ["+1::skin-tone-2", "shipit"] {
            let body = reaction_event(REACTION_ADDED, |e| e["reaction"] = name.into());
            assert_eq!(single_reaction(&body).change, ReactionChange::Set(name.into()));
        }
    }

    #[test]
    fn our_bots_own_reaction_and_one_on_a_file_are_dropped() {
        let own = reaction_event(REACTION_ADDED, |e| e["user"] = "UBOT1".into());
        assert_eq!(dropped_reason(&own), "own_reaction");
        for kind in ["file", "file_comment"] {
            let body = reaction_event(REACTION_REMOVED, |e| {
                e["item"] = json!({"type": kind, "file": "F0FILE001"});
            });
            assert_eq!(dropped_reason(&body), "reaction_not_on_message", "{kind}");
        }
    }

    #[test]
    fn a_reaction_with_missing_or_odd_fields_is_dropped_not_refused() {
        let cases: [(&str, Value, &str); 8] = [
            ("item", Value::Null, "unreadable_event"),
            ("item", json!("C0CHAN001"), "unreadable_event"),
            ("reaction", json!(""), "unreadable_event"),
            ("reaction", json!(7), "unreadable_event"),
            ("event_ts", json!("soon"), "unreadable_event"),
            ("user", Value::Null, "missing_ids"),
            ("user", json!("U0 USER1"), "missing_ids"),
            (
                "item",
                json!({"type": "message", "channel": "C0CHAN001", "ts": "x"}),
                "missing_ids",
            ),
        ];
        for (field, value, reason) in cases {
            let body = reaction_event(REACTION_ADDED, |e| e[field] = value.clone());
            assert_eq!(dropped_reason(&body), reason, "{field} = {value}");
        }
    }

    #[test]
    fn a_reaction_in_another_workspace_is_dropped() {
        let mut other = connector();
        other.profile.external_id = Some("T0OTHER".into());
        let inbound = testing::events(&Slack, &other, REACTION_ADDED);
        assert!(inbound.reactions.is_empty());
        assert_eq!(inbound.dropped, vec!["other_team"]);
    }

    #[test]
    fn a_file_share_without_text_is_a_turn_with_the_file_attached() {
        let message = single_message(FILE_SHARE_NO_TEXT);
        assert_eq!(message.kind, InboundKind::Text);
        assert_eq!(message.text, "");
        assert_eq!(message.metadata["subtype"], "file_share");
        assert_eq!(
            message.attachments,
            vec![Attachment {
                kind: AttachmentKind::Image,
                mime: Some("image/png".into()),
                size: Some(48213),
                name: Some("diagram.png".into()),
                source: FileSource::Slack {
                    file_id: "F0FILE001".into(),
                    url: Some(
                        "https://files.slack.com/files-pri/T0001-F0FILE001/download/diagram.png".into()
                    ),
                },
            }]
        );
    }

    #[test]
    fn a_file_share_whose_files_are_all_external_keeps_its_placeholder() {
        let body = String::from_utf8(FILE_SHARE_NO_TEXT.to_vec())
            .unwrap()
            .replace(r#""mode": "hosted""#, r#""mode": "external""#);
        let message = single_message(body.as_bytes());
        assert_eq!(message.kind, InboundKind::NonText);
        assert_eq!(message.text, "[file]");
        assert!(message.attachments.is_empty());
    }

    #[test]
    fn event_of_another_workspace_is_dropped() {
        let mut other = connector();
        other.profile.external_id = Some("T0OTHER".into());
        let Ok(Parsed::Events(inbound)) = Slack.parse(&other, DM_TEXT) else {
            panic!("expected events");
        };
        assert!(inbound.messages.is_empty());
        assert_eq!(inbound.dropped, vec!["other_team"]);
    }

    #[test]
    fn slack_connect_message_from_the_other_side_is_ours_by_installation() {
        let body = br#"{"type":"event_callback","team_id":"T0PARTNER","context_team_id":"T0PARTNER","authorizations":[{"team_id":"T0001","user_id":"UBOT1","is_bot":true}],"event":{"type":"message","user":"U0PARTNER","channel":"C0SHARED1","ts":"1.2","text":"hi"}}"#;
        let message = single_message(body);
        assert_eq!(message.idempotency_key, "T0PARTNER:C0SHARED1:1.2");
    }

    #[test]
    fn hidden_and_empty_messages_are_dropped() {
        let hidden = br#"{"type":"event_callback","team_id":"T0001","event":{"type":"message","user":"U0USER1","channel":"C0CHAN001","ts":"1.2","text":"x","hidden":true}}"#;
        assert_eq!(dropped_reason(hidden), "hidden");
        let empty = br#"{"type":"event_callback","team_id":"T0001","event":{"type":"message","user":"U0USER1","channel":"C0CHAN001","ts":"1.2","text":"  "}}"#;
        assert_eq!(dropped_reason(empty), "empty_text");
    }

    #[test]
    fn odd_shapes_of_other_event_types_are_not_errors() {
        let user_change = br#"{"type":"event_callback","team_id":"T0001","event":{"type":"user_change","user":{"id":"U0USER1"}}}"#;
        assert_eq!(dropped_reason(user_change), "non_message_event");
    }

    /// The metadata fixture with `change` applied to its event.
    fn metadata_event(change: impl FnOnce(&mut Value)) -> Vec<u8> {
        let mut body: Value = serde_json::from_slice(METADATA_POSTED).expect("fixture is JSON");
        change(&mut body["event"]);
        serde_json::to_vec(&body).expect("serializes")
    }

    #[test]
    fn our_metadata_posted_event_confirms_the_part_it_names() {
        let inbound = events(METADATA_POSTED);
        assert!(inbound.messages.is_empty(), "never a user turn");
        assert!(inbound.dropped.is_empty(), "{:?}", inbound.dropped);
        let expected = PostedPart {
            message: "0193a5b0-7e1c-7cc0-9d3e-5f0a1b2c3d4e".parse().expect("uuid"),
            part_index: 1,
            platform_message_id: "1718000001.000200".into(),
            chat_id: "D0DM00001".into(),
        };
        assert_eq!(inbound.posted, vec![expected]);
    }

    #[test]
    fn metadata_of_another_type_app_or_bot_is_dropped() {
        let other_type = metadata_event(|e| e["metadata"]["event_type"] = "task_created".into());
        assert_eq!(dropped_reason(&other_type), "other_metadata");
        let other_app = metadata_event(|e| e["app_id"] = "A0OTHER".into());
        assert_eq!(dropped_reason(&other_app), "other_app");
        let other_bot = metadata_event(|e| e["bot_id"] = "B0OTHER".into());
        assert_eq!(dropped_reason(&other_bot), "other_app");
        let mut unknown_ids = connector();
        unknown_ids.profile.app_id = None;
        unknown_ids.profile.bot_id = None;
        let inbound = testing::events(&Slack, &unknown_ids, &other_app);
        assert_eq!(inbound.posted.len(), 1, "nothing to compare with: accepted");
    }

    #[test]
    fn metadata_event_with_a_key_or_ids_that_are_not_ours_is_dropped() {
        for (key, reason) in [
            (json!("not-a-key"), "unknown_part_key"),
            (
                json!("0193a5b0-7e1c-7cc0-9d3e-5f0a1b2c3d4e:x"),
                "unknown_part_key",
            ),
            (json!(42), "unreadable_event"),
        ] {
            let body = metadata_event(|e| e["metadata"]["event_payload"]["part_key"] = key);
            assert_eq!(dropped_reason(&body), reason);
        }
        for (field, value) in [
            ("message_ts", "1718000001.000200\0"),
            ("message_ts", "soon"),
            ("channel_id", "D0DM 00001"),
            ("channel_id", ""),
        ] {
            let body = metadata_event(|e| e[field] = value.into());
            assert_eq!(dropped_reason(&body), "missing_ids", "{field} = {value:?}");
        }
        let body = metadata_event(|e| e["metadata"] = "text".into());
        assert_eq!(dropped_reason(&body), "unreadable_event");
    }

    #[test]
    fn metadata_event_of_another_workspace_is_dropped() {
        let mut other = connector();
        other.profile.external_id = Some("T0OTHER".into());
        let inbound = testing::events(&Slack, &other, METADATA_POSTED);
        assert!(inbound.posted.is_empty());
        assert_eq!(inbound.dropped, vec!["other_team"]);
    }

    #[test]
    fn invalid_json_is_malformed() {
        assert!(matches!(
            Slack.parse(&connector(), b"{not json"),
            Err(HookError::Malformed(_))
        ));
        assert!(matches!(
            Slack.parse(&connector(), b"[]"),
            Err(HookError::Malformed(_))
        ));
    }
}
