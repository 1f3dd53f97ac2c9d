//! Splitting an answer into parts that fit a platform's message limit, counted in UTF-16
//! units: Telegram counts offsets that way and neither Telegram nor Meta says what its 4096
//! counts. A connector that formats Markdown is split by the document's structure instead
//! (`crate::markdown::split`).

use crate::choices::{Choices, InvalidChoices, Offered};
use crate::db::parts::Reply;
use crate::domain::Platform;
use crate::media::outgoing::{self, FileIn, FilePart};

pub fn limit(platform: Platform) -> usize {
    crate::platforms::of(platform).part_limit()
}

/// `markdown`: the connector's `format_markdown`.
pub fn split_parts(platform: Platform, markdown: bool, parts: &[String]) -> Vec<String> {
    let max = limit(platform);
    parts
        .iter()
        .flat_map(|part| split_one(platform, markdown, part, max))
        .collect()
}

/// As [`split_parts`], the last part also within what may carry `choices` on `platform`.
pub fn split_with_choices(
    platform: Platform,
    markdown: bool,
    parts: &[String],
    choices: Option<&Choices>,
) -> Vec<String> {
    let mut split = split_parts(platform, markdown, parts);
    let Some(max) = choices.and_then(|c| crate::platforms::of(platform).choices_text_limit(c)) else {
        return split;
    };
    if let Some(last) = split.pop() {
        split.extend(split_one(platform, markdown, &last, max));
    }
    split
}

/// An answer's text and choices made ready to post on `platform`: the choices checked for
/// it and named, the text split so that its last part can carry them.
pub fn with_choices(
    platform: Platform,
    markdown: bool,
    parts: &[String],
    choices: Option<Choices>,
) -> Result<(Vec<String>, Option<Offered>), InvalidChoices> {
    if let Some(choices) = &choices {
        choices.check()?;
        crate::platforms::of(platform).check_choices(choices)?;
    }
    let split = split_with_choices(platform, markdown, parts, choices.as_ref());
    if choices.is_some() && split.is_empty() {
        return Err(InvalidChoices("choices need text to go with".into()));
    }
    Ok((split, choices.map(Offered::new)))
}

/// What an answer asks to post, whichever way it came (an agent's answer or event, a
/// proactive message, a person's message), before its platform is known.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ask {
    pub texts: Vec<String>,
    pub choices: Option<Choices>,
    pub files: Vec<FileIn>,
    /// An emoji (or its name) to set on the user's message.
    pub react: Option<String>,
}

impl Ask {
    pub fn text(text: &str) -> Self {
        Self {
            texts: vec![text.to_owned()],
            ..Self::default()
        }
    }

    /// The answer as history and the admin API show it: its texts, then a line per file
    /// (`[report.pdf]`).
    pub fn shown(&self) -> String {
        let files = self.files.iter().map(|file| format!("[{}]", file.shown_name()));
        let lines: Vec<String> = self.texts.iter().cloned().chain(files).collect();
        lines.join("\n\n")
    }
}

/// Why an answer cannot be posted on its platform; the same answer would fail again.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unfit {
    #[error("the choices cannot be shown on {0}: {1}")]
    Choices(Platform, InvalidChoices),
    #[error("a file cannot be sent on {0}: {1}")]
    File(Platform, String),
    #[error("the reaction cannot be set on {0}: {1}")]
    Reaction(Platform, String),
}

/// The one way an answer is made ready for its connector: the text split to fit (its last
/// part within what may carry the choices), the choices checked and named, each file checked
/// against what the platform takes, and the reaction named as the platform names it.
pub fn reply(platform: Platform, markdown: bool, ask: Ask) -> Result<Reply, Unfit> {
    let (texts, choices) =
        with_choices(platform, markdown, &ask.texts, ask.choices).map_err(|e| Unfit::Choices(platform, e))?;
    let files = outgoing::check_all(ask.files).map_err(|e| Unfit::File(platform, e.0))?;
    for file in &files {
        check_file(platform, file).map_err(|e| Unfit::File(platform, e))?;
    }
    let api = crate::platforms::of(platform);
    let react = match ask.react {
        Some(emoji) => Some(
            api.reaction_name(&emoji)
                .map_err(|e| Unfit::Reaction(platform, e))?,
        ),
        None => None,
    };
    Ok(Reply {
        texts,
        choices,
        files,
        react,
    })
}

/// What can be known before fetching: the type, and an inline file's size.
fn check_file(platform: Platform, part: &FilePart) -> Result<(), String> {
    let api = crate::platforms::of(platform);
    let limit = api.file_limit(&part.file.mime)?;
    if !part.caption.is_empty() && !api.takes_caption(&part.file.mime) {
        return Err(format!(
            "{} ({}) is shown without a caption on {platform}: send the caption as text",
            part.file.name, part.file.mime
        ));
    }
    match part.file.inline_len() {
        Some(len) if len > limit => Err(format!(
            "{} is {len} bytes, more than the {limit} {platform} takes for {}",
            part.file.name, part.file.mime
        )),
        _ => Ok(()),
    }
}

fn split_one(platform: Platform, markdown: bool, part: &str, max: usize) -> Vec<String> {
    match markdown {
        true => crate::markdown::split::split(part, crate::platforms::of(platform), max),
        false => split(part, max),
    }
}

pub fn split(text: &str, max_units: usize) -> Vec<String> {
    let mut chunks = Vec::new();
    let mut rest = text.trim();
    while !rest.is_empty() {
        let fit = fitting_prefix_len(rest, max_units);
        if fit == rest.len() {
            chunks.push(rest.to_owned());
            break;
        }
        let cut = best_cut(&rest[..fit]).unwrap_or(fit);
        chunks.push(rest[..cut].trim_end().to_owned());
        rest = rest[cut..].trim_start();
    }
    chunks
}

fn fitting_prefix_len(text: &str, max_units: usize) -> usize {
    let mut units = 0;
    for (index, ch) in text.char_indices() {
        units += ch.len_utf16();
        if units > max_units {
            return index;
        }
    }
    text.len()
}

/// Only where the chunk keeps at least half the window, so a late break never makes a tiny
/// chunk.
fn best_cut(window: &str) -> Option<usize> {
    let min = window.len() / 2;
    let after = |pattern: &str| {
        window
            .rfind(pattern)
            .map(|i| i + pattern.len())
            .filter(|&i| i > min)
    };
    after("\n\n")
        .or_else(|| after("\n"))
        .or_else(|| [". ", "! ", "? ", "。"].iter().filter_map(|p| after(p)).max())
        .or_else(|| after(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn units(s: &str) -> usize {
        s.encode_utf16().count()
    }

    fn file(json: serde_json::Value) -> FileIn {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn an_answer_is_made_ready_for_its_platform_or_refused_saying_why() {
        let ask = Ask {
            texts: vec!["Here.".into()],
            files: vec![file(
                serde_json::json!({"url": "https://f.example/a.ogg", "caption": "listen"}),
            )],
            react: Some("eyes".into()),
            ..Ask::default()
        };
        let reply = reply(Platform::Telegram, false, ask.clone()).unwrap();
        assert_eq!(
            (reply.texts.len(), reply.files.len(), reply.react.as_deref()),
            (1, 1, Some("👀"))
        );
        assert_eq!(reply.len(), 3);
        let refused = reply_err(Platform::Whatsapp, ask.clone());
        assert!(
            refused.contains("shown without a caption on whatsapp"),
            "{refused}"
        );
        let gif = Ask {
            files: vec![file(serde_json::json!({"url": "https://f.example/a.gif"}))],
            ..Ask::default()
        };
        assert!(reply_err(Platform::Whatsapp, gif).contains("a file cannot be sent on whatsapp"));
        let check = Ask {
            react: Some("✅".into()),
            ..Ask::default()
        };
        assert!(reply_err(Platform::Telegram, check).contains("the reaction cannot be set on telegram"));
    }

    fn reply_err(platform: Platform, ask: Ask) -> String {
        reply(platform, false, ask).unwrap_err().to_string()
    }

    #[test]
    fn short_text_is_one_part_and_blank_text_none() {
        assert_eq!(split("hello", 10), ["hello"]);
        assert!(split("  \n ", 10).is_empty());
    }

    #[test]
    fn prefers_paragraph_then_sentence_then_word_boundaries() {
        assert_eq!(split("aaaa bbbb\n\ncccc", 12), ["aaaa bbbb", "cccc"]);
        assert_eq!(
            split("One two. Three four five", 16),
            ["One two.", "Three four five"]
        );
        assert_eq!(split("alpha beta gamma delta", 12), ["alpha beta", "gamma delta"]);
        assert_eq!(split("abcdefghij", 4), ["abcd", "efgh", "ij"]);
    }

    #[test]
    fn never_splits_a_character_and_counts_utf16_units() {
        // Each emoji is 2 UTF-16 units and 4 bytes.
        let text = "😀".repeat(5);
        let chunks = split(&text, 3);
        assert!(chunks.iter().all(|c| units(c) <= 3));
        assert_eq!(chunks.concat(), text);
    }

    #[test]
    fn a_10000_character_answer_fits_every_platform_and_loses_nothing() {
        let sentence = "The quick brown fox jumps over the lazy dog. ";
        let text: String = sentence
            .repeat(10_000 / sentence.len() + 1)
            .chars()
            .take(10_000)
            .collect();
        for platform in Platform::ALL {
            let chunks = split_parts(platform, false, std::slice::from_ref(&text));
            assert!(chunks.len() >= 3, "{platform}");
            assert!(chunks.iter().all(|c| units(c) <= limit(platform)), "{platform}");
            let (_, cut) = chunks.split_last().unwrap();
            assert!(
                cut.iter().all(|c| c.ends_with('.')),
                "{platform}: cut at sentence ends"
            );
            let rejoined: String = chunks.join(" ");
            assert_eq!(rejoined, text.trim());
        }
    }

    #[test]
    fn markdown_parts_are_split_by_structure_and_plain_parts_as_before() {
        let code: Vec<String> = (0..600).map(|i| format!("let x{i} = {i};")).collect();
        let answer = format!("Code:\n\n```rust\n{}\n```", code.join("\n"));
        let plain = split_parts(Platform::Telegram, false, std::slice::from_ref(&answer));
        let formatted = split_parts(Platform::Telegram, true, std::slice::from_ref(&answer));
        // The plain split leaves the fence open in the first part and closes nothing.
        assert_eq!(plain[0].matches("```").count(), 1);
        for part in &formatted[1..] {
            assert!(part.starts_with("```rust\n") && part.ends_with("\n```"), "{part}");
        }
    }
}
