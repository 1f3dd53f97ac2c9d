//! The bot's reaction on the user's message: `reactions.add`
//! (<https://docs.slack.dev/reference/methods/reactions.add>), which takes an emoji's
//! **name** (`eyes`, `white_check_mark`, a workspace's custom emoji), never the character.

use emojis::{Emoji, SkinTone};
use reqwest::StatusCode;
use serde_json::Value;

use super::send::{ok_body, Refusal};
use crate::egress::GuardedClient as Client;
use crate::platforms::contract::api_base;
use crate::platforms::send::{read_json, transport_error, OutboundPart, SendOutcome};

const METHOD: &str = "reactions.add";

/// Longest name a reaction is given by (a custom emoji's included).
const NAME_MAX_CHARS: usize = 100;

/// Refusals of `reactions.add` a repeat cannot fix (beyond the auth and channel ones).
const REACTION_PERMANENT: &[&str] = &[
    "invalid_name",
    "too_many_emoji",
    "too_many_reactions",
    "message_not_found",
    "bad_timestamp",
    "no_item_specified",
    "thread_locked",
    "not_reactable",
];

/// `emoji` as Slack names it: a character by its shortcode (GitHub's gemoji names, which
/// are Slack's for the common set: `+1`, `eyes`, `white_check_mark`; a rarer one where the
/// two differ is refused by Slack with `invalid_name`), a skin tone as `name::skin-tone-N`;
/// a name (`eyes`, `:eyes:`, a custom emoji's) as it is, without colons.
pub(super) fn reaction_name(emoji: &str) -> Result<String, String> {
    let given = emoji.trim();
    if let Some(found) = emojis::get(given).or_else(|| emojis::get(&given.replace('\u{fe0f}', ""))) {
        return name_of(found).ok_or_else(|| format!("Slack has no name for the emoji `{given}`"));
    }
    let name = given
        .strip_prefix(':')
        .and_then(|name| name.strip_suffix(':'))
        .unwrap_or(given);
    match valid_name(name) {
        true => Ok(name.to_owned()),
        false => Err(format!(
            "`{given}` is neither an emoji nor a Slack emoji name (lowercase letters, digits, \
             `_`, `-`, `+`, `'`, up to {NAME_MAX_CHARS} characters, such as `eyes`)"
        )),
    }
}

fn name_of(emoji: &Emoji) -> Option<String> {
    if let Some(name) = emoji.shortcode() {
        return Some(name.to_owned());
    }
    let tone = match emoji.skin_tone()? {
        SkinTone::Light => 2,
        SkinTone::MediumLight => 3,
        SkinTone::Medium => 4,
        SkinTone::MediumDark => 5,
        SkinTone::Dark => 6,
        // Two tones (couples): Slack's name for them is not known here.
        _ => return None,
    };
    let base = emoji.with_skin_tone(SkinTone::Default)?.shortcode()?;
    Some(format!("{base}::skin-tone-{tone}"))
}

/// A custom emoji's name, or a standard one with its skin tone.
fn valid_name(name: &str) -> bool {
    let (base, tone) = match name.split_once("::") {
        Some((base, tone)) => (base, Some(tone)),
        None => (name, None),
    };
    let tone_ok = tone.is_none_or(|tone| {
        matches!(
            tone,
            "skin-tone-2" | "skin-tone-3" | "skin-tone-4" | "skin-tone-5" | "skin-tone-6"
        )
    });
    let allowed =
        |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '_' | '-' | '+' | '\'');
    tone_ok && (1..=NAME_MAX_CHARS).contains(&base.chars().count()) && base.chars().all(allowed)
}

/// `part.text` (a name `reaction_name` gave) on the user's message `target`. Setting it
/// again answers `already_reacted`, which is success.
pub(super) async fn react(
    client: &Client,
    part: &OutboundPart<'_>,
    token: &str,
    target: &str,
) -> SendOutcome {
    let form = [
        ("channel", part.message.address.chat_id.as_str()),
        ("timestamp", target),
        ("name", part.text),
    ];
    let request = client
        .post(format!("{}/api/{METHOD}", api_base(part.connector)))
        .bearer_auth(token)
        .form(&form);
    match client.send(request).await {
        Ok(response) => {
            let (status, body, retry_after) = read_json(response).await;
            classify(status, body, retry_after, target)
        }
        Err(err) => transport_error(err),
    }
}

/// A reaction in doubt is simply set again by the delivery, so `Unknown` costs one repeat.
fn classify(
    status: StatusCode,
    body: Option<Value>,
    retry_after: Option<std::time::Duration>,
    target: &str,
) -> SendOutcome {
    match ok_body(METHOD, REACTION_PERMANENT, status, body, retry_after) {
        Ok(_) => SendOutcome::Sent(target.to_owned()),
        Err(Refusal::Code { code, .. }) if code == "already_reacted" => SendOutcome::Sent(target.to_owned()),
        Err(refusal) => refusal.outcome(),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::*;

    #[test]
    fn emoji_characters_become_slacks_names() {
        for (emoji, name) in [
            ("👀", "eyes"),
            ("👍", "+1"),
            ("✅", "white_check_mark"),
            ("❤️", "heart"),
            ("❤", "heart"),
            ("🎉", "tada"),
            ("🔥", "fire"),
            ("🙏", "pray"),
            ("😂", "joy"),
            ("👍🏽", "+1::skin-tone-4"),
            (" 🚀 ", "rocket"),
        ] {
            assert_eq!(reaction_name(emoji).as_deref(), Ok(name), "{emoji}");
        }
    }

    #[test]
    fn names_pass_as_they_are_without_colons() {
        for (given, name) in [
            ("eyes", "eyes"),
            (":eyes:", "eyes"),
            ("thumbsup", "thumbsup"),
            (":party-parrot:", "party-parrot"),
            ("ship_it_v2", "ship_it_v2"),
            ("don't", "don't"),
            ("+1::skin-tone-2", "+1::skin-tone-2"),
        ] {
            assert_eq!(reaction_name(given).as_deref(), Ok(name), "{given}");
        }
    }

    #[test]
    fn anything_else_is_refused_saying_what_slack_takes() {
        let long = "a".repeat(NAME_MAX_CHARS + 1);
        for given in [
            "",
            "::",
            "Eyes",
            "two words",
            ":eyes",
            "eyes::skin-tone-9",
            "<!channel>",
            long.as_str(),
        ] {
            let error = reaction_name(given).unwrap_err();
            assert!(error.contains("Slack emoji name"), "{given}: {error}");
        }
        assert!(reaction_name("a".repeat(NAME_MAX_CHARS).as_str()).is_ok());
    }

    #[test]
    fn reactions_add_answers_are_classified() {
        let answer = |status, body| classify(status, body, Some(Duration::from_secs(2)), "1.2");
        assert_eq!(
            answer(StatusCode::OK, Some(json!({"ok": true}))),
            SendOutcome::Sent("1.2".into())
        );
        let again = answer(
            StatusCode::OK,
            Some(json!({"ok": false, "error": "already_reacted"})),
        );
        assert_eq!(again, SendOutcome::Sent("1.2".into()));
        for code in [
            "invalid_name",
            "message_not_found",
            "too_many_reactions",
            "not_in_channel",
            "missing_scope",
        ] {
            let outcome = answer(StatusCode::OK, Some(json!({"ok": false, "error": code})));
            let error = format!("slack reactions.add: {code}");
            assert_eq!(outcome, SendOutcome::Permanent { error });
        }
        assert!(matches!(
            answer(StatusCode::TOO_MANY_REQUESTS, None),
            SendOutcome::RateLimited { .. }
        ));
        assert!(matches!(
            answer(StatusCode::BAD_GATEWAY, None),
            SendOutcome::Unknown { .. }
        ));
        let internal = answer(
            StatusCode::OK,
            Some(json!({"ok": false, "error": "internal_error"})),
        );
        assert!(matches!(internal, SendOutcome::Unknown { .. }));
    }
}
