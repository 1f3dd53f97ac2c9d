//! People's reactions to an answer as the console shows them (docs/console.md#reactions):
//! each person's current emoji with who and when, a tally where there are several, and the
//! meaning in words beside the emoji (a screen reader, or a Slack name, says little alone).

use askama::filters::HtmlSafe;
use askama::Template;

use super::html::when;
use crate::admin::messages::{ReactionOut, ReplyPartOut};

/// The emoji as text: Unicode as it is; a name spelled in ASCII (Slack sends names, never
/// characters: `thumbsup`, `+1::skin-tone-2`, `tada`) as Slack writes it, `:name:`.
pub fn emoji_text(emoji: &str) -> String {
    if emoji.is_ascii() {
        format!(":{emoji}:")
    } else {
        emoji.to_owned()
    }
}

/// What a value means, in words.
fn meaning(value: i16) -> &'static str {
    match value {
        1 => "positive",
        -1 => "negative",
        _ => "other",
    }
}

/// The tally's entries: 👍 and 👎 whatever their spelling, then each other emoji as shown,
/// each with its count; removed reactions are not counted.
fn tally(current: &[&ReactionOut]) -> Vec<(String, &'static str, usize)> {
    let mut entries: Vec<(String, &'static str, usize)> = Vec::new();
    let mut add = |shown: String, value: i16| match entries.iter_mut().find(|e| e.0 == shown) {
        Some(entry) => entry.2 += 1,
        None => entries.push((shown, meaning(value), 1)),
    };
    for value in [1, -1] {
        let shown = if value == 1 { "👍" } else { "👎" };
        for _ in current.iter().filter(|r| r.value == value) {
            add(shown.to_owned(), value);
        }
    }
    for reaction in current.iter().filter(|r| r.value == 0) {
        if let Some(emoji) = &reaction.emoji {
            add(emoji_text(emoji), 0);
        }
    }
    entries
}

/// One person's reaction: "👍 positive 408258968 · 2026-03-10 12:04:07 UTC", the part it is
/// on when the answer has several; a removed one muted, "removed" in place of the emoji.
struct Line {
    emoji: Option<String>,
    meaning: &'static str,
    value: i16,
    by: String,
    at: String,
    at_key: String,
    part: Option<i32>,
}

/// An answer's reactions: a tally where there are several ("👍 2 · 👎 1", with "2 positive,
/// 1 negative" as visually hidden text), then each person's.
#[derive(Template)]
#[template(path = "console/reactions.html")]
pub struct Reactions {
    tally: Option<(Vec<(String, usize)>, String)>,
    lines: Vec<Line>,
}

/// Rendered by its own template, which escapes every value.
impl HtmlSafe for Reactions {}

fn summary(current: &[&ReactionOut]) -> (Vec<(String, usize)>, String) {
    let entries = tally(current);
    let words: Vec<String> = entries
        .iter()
        .map(|(emoji, meaning, n)| match *meaning {
            "other" => format!("{n} {emoji}"),
            meaning => format!("{n} {meaning}"),
        })
        .collect();
    let shown = entries.into_iter().map(|(emoji, _, n)| (emoji, n)).collect();
    (shown, words.join(", "))
}

fn line(reaction: &ReactionOut, several_parts: bool) -> Line {
    Line {
        emoji: reaction.emoji.as_deref().map(emoji_text),
        meaning: meaning(reaction.value),
        value: reaction.value,
        by: reaction.by.clone(),
        at: when(reaction.at),
        at_key: reaction.at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        part: several_parts.then_some(reaction.part_index),
    }
}

/// Whether the answer was posted as more than one message (an edit is not one).
pub fn several(parts: &[ReplyPartOut]) -> bool {
    parts.iter().filter(|p| p.edit_of.is_none()).count() > 1
}

/// An answer's reactions, or `None` when nobody reacted. `several_parts`: the answer was
/// posted as more than one message, so each line says which one was reacted to.
pub fn of_answer(reactions: &[ReactionOut], several_parts: bool) -> Option<Reactions> {
    if reactions.is_empty() {
        return None;
    }
    let current: Vec<&ReactionOut> = reactions.iter().filter(|r| r.emoji.is_some()).collect();
    let tally = (current.len() > 1).then(|| summary(&current));
    // Current ones first, removed ones after them.
    let (current, removed): (Vec<&ReactionOut>, Vec<&ReactionOut>) =
        reactions.iter().partition(|r| r.emoji.is_some());
    let lines = current
        .into_iter()
        .chain(removed)
        .map(|reaction| line(reaction, several_parts))
        .collect();
    Some(Reactions { tally, lines })
}

#[cfg(test)]
mod tests {
    use super::super::html::RenderPage;
    use super::*;

    fn of_answer(reactions: &[ReactionOut], several: bool) -> String {
        super::of_answer(reactions, several)
            .map(|r| r.render_page())
            .unwrap_or_default()
    }

    fn reaction(by: &str, emoji: Option<&str>, value: i16) -> ReactionOut {
        ReactionOut {
            by: by.into(),
            emoji: emoji.map(Into::into),
            value,
            part_index: 0,
            at: "2026-03-10T12:04:07Z".parse().unwrap(),
        }
    }

    #[test]
    fn slack_names_read_as_names_and_unicode_as_it_is() {
        assert_eq!(emoji_text("thumbsup"), ":thumbsup:");
        assert_eq!(emoji_text("+1::skin-tone-2"), ":+1::skin-tone-2:");
        assert_eq!(emoji_text("👍🏽"), "👍🏽");
    }

    #[test]
    fn the_tally_counts_every_spelling_of_thumbs_up_as_one_and_skips_removed_ones() {
        let all = [
            reaction("a", Some("+1::skin-tone-2"), 1),
            reaction("b", Some("👍"), 1),
            reaction("c", Some("👎"), -1),
            reaction("d", Some("tada"), 0),
            reaction("e", None, 0),
        ];
        let html = of_answer(&all, false);
        assert!(html.contains(r#"<span class="emoji">👍</span> 2 · <span class="emoji">👎</span> 1 · <span class="emoji">:tada:</span> 1"#), "{html}");
        assert!(html.contains("2 positive, 1 negative, 1 :tada:"), "{html}");
        assert_eq!(html.matches("<li").count(), 5);
        assert!(html.contains(r#"<li class="reaction removed" data-value="0" data-by="e">"#));
        assert!(html.contains("· <time datetime=\"2026-03-10T12:04:07Z\">2026-03-10 12:04:07 UTC</time>"));
    }

    #[test]
    fn one_reaction_has_no_tally_and_names_and_emoji_are_escaped() {
        let html = of_answer(&[reaction("<b>", Some("<i>"), 0)], true);
        assert!(!html.contains("tally"));
        assert!(!html.contains("<b>") && !html.contains("<i>"));
        assert!(
            html.contains(":&#60;i&#62;:") && html.contains("on part #0"),
            "{html}"
        );
        assert_eq!(of_answer(&[], false), "");
    }
}
