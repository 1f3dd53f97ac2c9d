//! Splitting the agent's Markdown into reply parts that each fit the platform's limit once
//! rendered (docs/configuration.md#formatted-replies). Parts are cut from the source, where
//! its structure is known, never from rendered text, so each is a complete Markdown document
//! that fits both rendered ([`Renderer::measure`]) and as its plain-text fallback.

use std::ops::Range;

use pulldown_cmark::{CodeBlockKind, Event, Parser, Tag};

use super::Renderer;

/// Splits `markdown` into parts within `max_units`, trimmed, none empty.
pub fn split(markdown: &str, renderer: &dyn Renderer, max_units: usize) -> Vec<String> {
    let text = markdown.trim();
    if text.is_empty() {
        return Vec::new();
    }
    let splitter = Splitter::new(text, renderer, max_units);
    if splitter.fits(text) {
        return vec![text.to_owned()];
    }
    splitter.split()
}

/// A range of the source, or text made for the part (code lines in a fence of their own).
#[derive(Debug, Clone)]
enum Piece {
    Source(Range<usize>),
    Made(String),
}

#[derive(Debug)]
enum Kind {
    Code { language: Option<String>, code: String },
    List { items: Vec<Range<usize>> },
    Other,
}

#[derive(Debug)]
struct Block {
    range: Range<usize>,
    kind: Kind,
}

struct Splitter<'a> {
    text: &'a str,
    renderer: &'a dyn Renderer,
    max_units: usize,
    blocks: Vec<Block>,
    /// Links, images and inline code: never cut inside.
    atoms: Vec<Range<usize>>,
    /// Bold, italic and struck text: cut inside only when nothing else fits.
    spans: Vec<Range<usize>>,
    /// Link reference definitions, copied into the parts that lack them.
    definitions: Vec<Range<usize>>,
}

impl<'a> Splitter<'a> {
    fn new(text: &'a str, renderer: &'a dyn Renderer, max_units: usize) -> Self {
        let mut splitter = Self {
            text,
            renderer,
            max_units,
            blocks: Vec::new(),
            atoms: Vec::new(),
            spans: Vec::new(),
            definitions: Vec::new(),
        };
        splitter.parse();
        splitter
    }

    fn parse(&mut self) {
        let parser = Parser::new_ext(self.text, super::options());
        let mut definitions: Vec<Range<usize>> = parser
            .reference_definitions()
            .iter()
            .map(|(_, definition)| definition.span.clone())
            .collect();
        definitions.sort_by_key(|span| span.start);
        // Definitions far too long to copy around are left where they are.
        let total: usize = definitions.iter().map(|span| span.len()).sum();
        if total <= self.max_units / 4 {
            self.definitions = definitions;
        }
        let mut depth = 0usize;
        let mut current: Option<Block> = None;
        for (event, range) in parser.into_offset_iter() {
            match event {
                Event::Start(tag) => {
                    match &tag {
                        Tag::Link { .. } | Tag::Image { .. } => self.atoms.push(range.clone()),
                        Tag::Emphasis | Tag::Strong | Tag::Strikethrough => self.spans.push(range.clone()),
                        _ => {}
                    }
                    if depth == 0 {
                        current = Some(Block {
                            range: range.clone(),
                            kind: match tag {
                                Tag::CodeBlock(kind) => Kind::Code {
                                    language: match kind {
                                        CodeBlockKind::Fenced(info) => {
                                            info.split_whitespace().next().map(str::to_owned)
                                        }
                                        CodeBlockKind::Indented => None,
                                    },
                                    code: String::new(),
                                },
                                Tag::List(_) => Kind::List { items: Vec::new() },
                                _ => Kind::Other,
                            },
                        });
                    } else if depth == 1 && matches!(tag, Tag::Item) {
                        if let Some(Block {
                            kind: Kind::List { items },
                            ..
                        }) = current.as_mut()
                        {
                            items.push(range.clone());
                        }
                    }
                    depth += 1;
                }
                Event::End(_) => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        self.blocks.extend(current.take());
                    }
                }
                Event::Text(text) if depth == 1 => {
                    if let Some(Block {
                        kind: Kind::Code { code, .. },
                        ..
                    }) = current.as_mut()
                    {
                        code.push_str(&text);
                    }
                }
                Event::Code(_) => self.atoms.push(range),
                // A thematic break, or anything else standing alone at the top.
                _ if depth == 0 => self.blocks.push(Block {
                    range,
                    kind: Kind::Other,
                }),
                _ => {}
            }
        }
    }

    fn split(&self) -> Vec<String> {
        let mut pieces = Vec::new();
        for block in &self.blocks {
            self.block_pieces(block, &mut pieces);
        }
        self.pack(pieces)
    }

    fn fits(&self, part: &str) -> bool {
        part.encode_utf16().count() <= self.max_units
            && self.renderer.measure(&self.renderer.render(part)) <= self.max_units
    }

    fn fits_pieces(&self, pieces: &[Piece]) -> bool {
        self.fits(&self.assemble(pieces))
    }

    fn block_pieces(&self, block: &Block, pieces: &mut Vec<Piece>) {
        let whole = Piece::Source(block.range.clone());
        if self.fits_pieces(std::slice::from_ref(&whole)) {
            pieces.push(whole);
            return;
        }
        match &block.kind {
            Kind::Code { language, code } => self.code_pieces(language.as_deref(), code, pieces),
            Kind::List { items } => {
                for item in items {
                    let piece = Piece::Source(item.clone());
                    if self.fits_pieces(std::slice::from_ref(&piece)) {
                        pieces.push(piece);
                    } else {
                        self.text_pieces(item.clone(), pieces);
                    }
                }
            }
            Kind::Other => self.text_pieces(block.range.clone(), pieces),
        }
    }

    fn code_pieces(&self, language: Option<&str>, code: &str, pieces: &mut Vec<Piece>) {
        let fenced = |lines: &[&str]| fence(language, &lines.join("\n"));
        let lines: Vec<&str> = code.trim_end_matches('\n').split('\n').collect();
        let mut rest = &lines[..];
        while !rest.is_empty() {
            // Plain text must fit too, so no part holds more lines than `max_units` units of
            // them: the search for the longest run that fits looks no further.
            let mut units = 0;
            let most = rest
                .iter()
                .take_while(|line| {
                    units += line.encode_utf16().count() + 1;
                    units <= self.max_units
                })
                .count();
            let count = (1..=most)
                .collect::<Vec<_>>()
                .partition_point(|&n| self.fits(&fenced(&rest[..n])));
            if count > 0 {
                pieces.push(Piece::Made(fenced(&rest[..count])));
                rest = &rest[count..];
                continue;
            }
            let mut line = rest[0];
            while !line.is_empty() {
                let cut = self.longest_fitting(line, |head| fence(language, head));
                pieces.push(Piece::Made(fence(language, &line[..cut])));
                line = &line[cut..];
            }
            rest = &rest[1..];
        }
    }

    /// Cuts at whitespace outside links and inline code, and outside emphasis while that fits;
    /// emphasis that is cut is closed in one piece and reopened in the next.
    fn text_pieces(&self, range: Range<usize>, pieces: &mut Vec<Piece>) {
        let mut start = range.start;
        while start < range.end {
            let rest = self.piece(start, range.end);
            if self.fits_pieces(std::slice::from_ref(&rest)) {
                pieces.push(rest);
                return;
            }
            let cut = self
                .best_cut(start, range.end, true)
                .or_else(|| self.best_cut(start, range.end, false))
                .unwrap_or_else(|| {
                    start + self.longest_fitting(&self.text[start..range.end], |head| head.to_owned())
                });
            pieces.push(self.piece(start, cut));
            start = cut;
            // The whitespace at the cut belongs to neither part.
            while let Some(ch) = self.text[start..range.end]
                .chars()
                .next()
                .filter(|c| c.is_whitespace())
            {
                start += ch.len_utf8();
            }
        }
    }

    /// The source range as a piece, with the markers of emphasis it cuts put back around it.
    fn piece(&self, start: usize, end: usize) -> Piece {
        let open_at = |at: usize| -> Vec<&Range<usize>> {
            let mut open: Vec<&Range<usize>> =
                self.spans.iter().filter(|s| s.start < at && at < s.end).collect();
            // Outermost first: earlier start, then the longer of two that start together.
            open.sort_by_key(|s| (s.start, std::cmp::Reverse(s.end)));
            open
        };
        let (before, after) = (open_at(start), open_at(end));
        if before.is_empty() && after.is_empty() {
            return Piece::Source(start..end);
        }
        let mut made = String::new();
        before.iter().for_each(|s| made.push_str(self.marker(s)));
        made.push_str(self.text[start..end].trim());
        after.iter().rev().for_each(|s| made.push_str(self.marker(s)));
        Piece::Made(made)
    }

    /// The marker (`**`, `_`, `~~`…) that opens and closes an emphasis span.
    fn marker(&self, span: &Range<usize>) -> &str {
        let source = &self.text[span.clone()];
        let Some(first) = source.chars().next() else {
            return "";
        };
        let run = source.chars().take_while(|&c| c == first).count();
        // A strong span starts with two markers, emphasis with one; `***x***` is both, and
        // each gets its own share.
        let closing = source.chars().rev().take_while(|&c| c == first).count();
        &source[..run.min(closing).min(2) * first.len_utf8()]
    }

    /// The latest whitespace at which the text before it fits, preferring a line break, then a
    /// sentence end, in the second half of what fits (so no tiny part).
    fn best_cut(&self, start: usize, end: usize, avoid_spans: bool) -> Option<usize> {
        let inside = |ranges: &[Range<usize>], at: usize| ranges.iter().any(|r| r.start < at && at < r.end);
        // A part that fits holds at most `max_units` characters of source: look no further.
        let window = self.text[start..end]
            .char_indices()
            .nth(self.max_units + 1)
            .map_or(end, |(offset, _)| start + offset);
        let near = |ranges: &[Range<usize>]| -> Vec<Range<usize>> {
            ranges
                .iter()
                .filter(|r| r.end > start && r.start < window)
                .cloned()
                .collect()
        };
        let (atoms, spans) = (near(&self.atoms), near(&self.spans));
        let candidates: Vec<usize> = self.text[start..window]
            .char_indices()
            .filter(|(_, ch)| ch.is_whitespace())
            .map(|(offset, _)| start + offset)
            .filter(|&at| at > start)
            .filter(|&at| {
                let in_span = avoid_spans && inside(&spans, at);
                !inside(&atoms, at) && !in_span
            })
            .collect();
        let fits_at = |at: usize| self.fits_pieces(&[self.piece(start, at)]);
        // The longest prefix that fits: fitting is monotone in the cut's position.
        let count = candidates.partition_point(|&at| fits_at(at));
        let best = *candidates.get(count.checked_sub(1)?)?;
        let half = start + (best - start) / 2;
        let late: Vec<usize> = candidates[..count]
            .iter()
            .copied()
            .filter(|&at| at > half)
            .collect();
        let line_break = late.iter().rev().find(|&&at| self.text[at..].starts_with('\n'));
        let sentence_end = late.iter().rev().find(|&&at| {
            self.text[..at]
                .chars()
                .next_back()
                .is_some_and(|c| matches!(c, '.' | '!' | '?' | '。'))
        });
        Some(line_break.or(sentence_end).copied().unwrap_or(best))
    }

    /// Byte length of the longest prefix of `text` that fits; at least one character, so a
    /// split always goes forward.
    fn longest_fitting(&self, text: &str, make: impl Fn(&str) -> String) -> usize {
        let bounds: Vec<usize> = text
            .char_indices()
            .map(|(i, _)| i)
            .skip(1)
            .chain([text.len()])
            .collect();
        let count = bounds.partition_point(|&at| self.fits(&make(&text[..at])));
        bounds[count.saturating_sub(1)]
    }

    fn pack(&self, pieces: Vec<Piece>) -> Vec<String> {
        let mut parts = Vec::new();
        let mut current: Vec<Piece> = Vec::new();
        for piece in pieces {
            current.push(piece);
            if current.len() > 1 && !self.fits_pieces(&current) {
                let piece = current.pop();
                parts.push(self.assemble(&current));
                current = piece.into_iter().collect();
            }
        }
        if !current.is_empty() {
            parts.push(self.assemble(&current));
        }
        parts.retain(|part| !part.is_empty());
        parts
    }

    /// Consecutive source pieces as the source has them, others after a blank line, then the
    /// link definitions the part lacks (so `[text][x]` still resolves).
    fn assemble(&self, pieces: &[Piece]) -> String {
        let mut segments: Vec<String> = Vec::new();
        let mut spans: Vec<Range<usize>> = Vec::new();
        let mut open: Option<Range<usize>> = None;
        for piece in pieces {
            match piece {
                Piece::Source(range) => match open.as_mut() {
                    Some(span) if span.end <= range.start => span.end = range.end,
                    _ => {
                        if let Some(span) = open.take() {
                            segments.push(self.text[span.clone()].trim().to_owned());
                            spans.push(span);
                        }
                        open = Some(range.clone());
                    }
                },
                Piece::Made(text) => {
                    if let Some(span) = open.take() {
                        segments.push(self.text[span.clone()].trim().to_owned());
                        spans.push(span);
                    }
                    segments.push(text.clone());
                }
            }
        }
        if let Some(span) = open.take() {
            segments.push(self.text[span.clone()].trim().to_owned());
            spans.push(span);
        }
        let missing: Vec<&str> = self
            .definitions
            .iter()
            .filter(|d| !spans.iter().any(|s| s.start <= d.start && d.end <= s.end))
            .map(|d| self.text[d.clone()].trim())
            .collect();
        if !missing.is_empty() && !segments.is_empty() {
            segments.push(missing.join("\n"));
        }
        segments.join("\n\n")
    }
}

/// `code` in a fence long enough that no backtick run inside it ends it early.
fn fence(language: Option<&str>, code: &str) -> String {
    let longest_run = code.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest_run.max(2) + 1);
    format!("{fence}{}\n{code}\n{fence}", language.unwrap_or(""))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platforms::telegram::format as telegram;
    use crate::platforms::{slack::Slack, telegram::Telegram, whatsapp::Whatsapp};

    fn units(s: &str) -> usize {
        s.encode_utf16().count()
    }

    /// Tags open and close in order in `html`, none left open.
    fn balanced(html: &str) -> bool {
        let mut open: Vec<String> = Vec::new();
        let mut rest = html;
        while let Some(at) = rest.find('<') {
            let Some(end) = rest[at..].find('>') else {
                return false;
            };
            let tag = &rest[at + 1..at + end];
            rest = &rest[at + end + 1..];
            if let Some(name) = tag.strip_prefix('/') {
                if open.pop().as_deref() != Some(name) {
                    return false;
                }
            } else {
                open.push(tag.split_whitespace().next().unwrap_or("").to_owned());
            }
        }
        open.is_empty()
    }

    fn long_code(lines: usize) -> String {
        let body: Vec<String> = (0..lines)
            .map(|i| format!("    print(\"line {i} < {i} & done\")"))
            .collect();
        format!(
            "Here it is:\n\n```python\ndef f():\n{}\n```\n\nThat is all.",
            body.join("\n")
        )
    }

    #[test]
    fn short_markdown_is_one_part_and_blank_is_none() {
        assert_eq!(split("**hi**", &Telegram, 100), ["**hi**"]);
        assert!(split(" \n ", &Telegram, 100).is_empty());
    }

    #[test]
    fn a_long_code_block_is_closed_and_reopened_with_its_language() {
        let markdown = long_code(400);
        let parts = split(&markdown, &Telegram, 4096);
        assert!(parts.len() >= 3, "{} parts", parts.len());
        for part in &parts {
            let html = Telegram.render(part);
            assert!(telegram::visible_units(&html) <= 4096);
            assert!(units(part) <= 4096);
            assert!(balanced(&html), "unbalanced: {html}");
        }
        // Every part holding code is a python block of its own.
        let code_parts: Vec<&String> = parts.iter().filter(|p| p.contains("print(")).collect();
        assert!(code_parts.len() >= 2);
        for part in &code_parts {
            let html = Telegram.render(part);
            assert!(html.contains("<pre><code class=\"language-python\">"), "{html}");
        }
        // Nothing lost, nothing doubled: every code line is in exactly one part.
        for i in 0..400 {
            let line = format!("print(\"line {i} < {i} & done\")");
            assert_eq!(parts.iter().filter(|p| p.contains(&line)).count(), 1, "{line}");
        }
        assert!(parts[0].starts_with("Here it is:"));
        assert!(parts.last().is_some_and(|p| p.ends_with("That is all.")));
    }

    #[test]
    fn code_parts_fit_slack_and_whatsapp_counting_their_fences() {
        let markdown = long_code(300);
        for (renderer, max) in [(&Slack as &dyn Renderer, 4000), (&Whatsapp, 4096)] {
            let parts = split(&markdown, renderer, max);
            assert!(parts.len() >= 2);
            for part in &parts {
                let rendered = renderer.render(part);
                assert!(units(&rendered) <= max);
                assert_eq!(rendered.matches("```").count() % 2, 0, "{rendered}");
            }
        }
    }

    #[test]
    fn a_link_is_never_cut_and_lands_whole_in_one_part() {
        let url = format!("https://example.com/{}", "a".repeat(150));
        let link = format!("[a link whose text is long enough to matter]({url})");
        let markdown = format!("{} {link} {}", "word ".repeat(70), "tail ".repeat(40));
        for renderer in [&Slack as &dyn Renderer, &Telegram, &Whatsapp] {
            let parts = split(&markdown, renderer, 400);
            assert!(parts.len() >= 2);
            let holding: Vec<&String> = parts.iter().filter(|p| p.contains("a link whose")).collect();
            assert_eq!(holding.len(), 1);
            assert!(holding[0].contains(&link), "{}", holding[0]);
            for part in &parts {
                assert!(renderer.measure(&renderer.render(part)) <= 400);
            }
        }
    }

    #[test]
    fn telegram_limit_counts_visible_text_not_tags() {
        // 30 links: each is 200 bytes of HTML but 10 visible characters.
        let url = format!("https://example.com/{}", "p".repeat(160));
        let markdown: Vec<String> = (0..30).map(|i| format!("- [item {i:04}]({url})")).collect();
        let markdown = markdown.join("\n");
        let parts = split(&markdown, &Telegram, 4096);
        // The plain text (over 5,000 units) does not fit one part, the rendered text would.
        assert!(units(&markdown) > 4096);
        assert_eq!(parts.len(), 2);
        for part in &parts {
            assert!(telegram::visible_units(&Telegram.render(part)) < 1000);
        }
    }

    #[test]
    fn utf16_units_are_counted_and_bold_is_reopened_in_each_part() {
        let sentence = "😀 emoji text here. ";
        let bold = "bold words ".repeat(60);
        let markdown = format!("Intro.\n\n{}\n\n**{}**", sentence.repeat(60), bold.trim_end());
        let parts = split(&markdown, &Telegram, 300);
        for part in &parts {
            let html = Telegram.render(part);
            assert!(telegram::visible_units(&html) <= 300, "{html}");
            assert!(units(part) <= 300);
            assert!(balanced(&html));
        }
        let rejoined: String = parts.concat();
        assert_eq!(rejoined.matches('😀').count(), 60);
        let bold_parts: Vec<&String> = parts.iter().filter(|p| p.contains("bold words")).collect();
        assert!(bold_parts.len() >= 2);
        for part in bold_parts {
            let html = Telegram.render(part);
            assert!(html.contains("<b>bold words"), "{html}");
            assert!(!html.contains('*'), "no marker shows as text: {html}");
        }
        assert_eq!(rejoined.matches("bold words").count(), 60);
    }

    #[test]
    fn a_long_list_is_split_between_items_keeping_the_numbers() {
        let items: Vec<String> = (1..=40).map(|i| format!("{i}. item number {i} text")).collect();
        let parts = split(&items.join("\n"), &Whatsapp, 300);
        assert!(parts.len() >= 3);
        for part in &parts {
            assert!(Whatsapp.render(part).lines().all(|l| l.contains(". item number")));
        }
        assert!(parts[1].starts_with(&format!("{}. item", parts[0].lines().count() + 1)));
    }

    #[test]
    fn reference_links_still_resolve_in_every_part() {
        let markdown = format!(
            "{}\n\nsee [the docs][d]\n\n[d]: https://example.com/docs",
            "filler words here. ".repeat(30)
        );
        let parts = split(&markdown, &Telegram, 300);
        assert!(parts.len() >= 2);
        let last = Telegram.render(parts.last().map_or("", String::as_str));
        assert!(
            last.contains("<a href=\"https://example.com/docs\">the docs</a>"),
            "{last}"
        );
    }

    /// The words a reader sees, in order, tags dropped and entities decoded.
    fn seen_words(html_or_text: &str) -> Vec<String> {
        let mut text = String::new();
        let mut in_tag = false;
        for ch in html_or_text.chars() {
            match ch {
                '<' => in_tag = true,
                '>' if in_tag => in_tag = false,
                ch if !in_tag => text.push(ch),
                _ => {}
            }
        }
        text.split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty() && *w != "amp" && *w != "lt" && *w != "gt" && *w != "quot")
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn every_word_arrives_once_in_order_whatever_the_structure_and_the_limit() {
        let paragraph = "Some *emphasis across\nlines* and **bold with `code` in it** and a \
                         [link text](https://example.com/path) then ~~gone~~ words.";
        let documents = [
            format!("# Heading\n\n{paragraph}\n\n{paragraph}"),
            format!("- {paragraph}\n  - nested {paragraph}\n- second item\n\n1. first\n2. second"),
            format!("> {paragraph}\n>\n> ```rust\n> let quoted = 1;\n> ```\n\n{paragraph}"),
            format!("| a | b |\n|---|---|\n| 1 | 2 |\n\n<div>raw html</div>\n\n{paragraph}"),
            format!("{paragraph} [ref][r]\n\n{paragraph}\n\n[r]: https://example.com/ref"),
            format!(
                "```\n{}\n```\n\n***\n\n{paragraph}",
                "code line here\n".repeat(30)
            ),
        ];
        for document in &documents {
            for renderer in [&Slack as &dyn Renderer, &Telegram, &Whatsapp] {
                let whole = seen_words(&renderer.render(document));
                for max in [120, 200, 333] {
                    let parts = split(document, renderer, max);
                    let mut seen = Vec::new();
                    for part in &parts {
                        let rendered = renderer.render(part);
                        assert!(renderer.measure(&rendered) <= max, "{max}: {rendered}");
                        assert!(units(part) <= max);
                        if renderer.parse_mode().is_some() {
                            assert!(balanced(&rendered), "{rendered}");
                        }
                        seen.extend(seen_words(&rendered));
                    }
                    assert_eq!(seen, whole, "{max}: {document}");
                }
            }
        }
    }

    #[test]
    fn an_unbroken_word_longer_than_a_part_is_cut_without_loss() {
        let word = "x".repeat(1000);
        let parts = split(&word, &Slack, 300);
        assert_eq!(parts.concat(), word);
        assert!(parts.iter().all(|p| units(p) <= 300));
    }
}
