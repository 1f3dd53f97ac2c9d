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

impl Kind {
    /// The kind of block a top-level tag opens.
    fn of(tag: Tag<'_>) -> Self {
        match tag {
            Tag::CodeBlock(kind) => Kind::Code {
                language: match kind {
                    CodeBlockKind::Fenced(info) => info.split_whitespace().next().map(str::to_owned),
                    CodeBlockKind::Indented => None,
                },
                code: String::new(),
            },
            Tag::List(_) => Kind::List { items: Vec::new() },
            _ => Kind::Other,
        }
    }
}

#[derive(Debug)]
struct Block {
    range: Range<usize>,
    kind: Kind,
}

/// The top-level block being read, and how deep the parser is inside it.
#[derive(Default)]
struct OpenBlock {
    block: Option<Block>,
    depth: usize,
}

impl OpenBlock {
    /// Adds text to the block if it is code.
    fn push_code(&mut self, text: &str) {
        if let Some(Block {
            kind: Kind::Code { code, .. },
            ..
        }) = self.block.as_mut()
        {
            code.push_str(text);
        }
    }

    /// Adds an item to the block if it is a list.
    fn push_item(&mut self, item: Range<usize>) {
        if let Some(Block {
            kind: Kind::List { items },
            ..
        }) = self.block.as_mut()
        {
            items.push(item);
        }
    }
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

    /// Reads the top-level blocks, the atoms, the spans and the definitions of the text.
    fn parse(&mut self) {
        let parser = Parser::new_ext(self.text, super::options());
        self.definitions = self.copied_definitions(&parser);
        let mut open = OpenBlock::default();
        for (event, range) in parser.into_offset_iter() {
            match event {
                Event::Start(tag) => self.start(tag, range, &mut open),
                Event::End(_) => {
                    open.depth = open.depth.saturating_sub(1);
                    if open.depth == 0 {
                        self.blocks.extend(open.block.take());
                    }
                }
                Event::Text(text) if open.depth == 1 => open.push_code(&text),
                Event::Code(_) => self.atoms.push(range),
                // A thematic break, or anything else standing alone at the top.
                _ if open.depth == 0 => self.blocks.push(Block {
                    range,
                    kind: Kind::Other,
                }),
                _ => {}
            }
        }
    }

    /// The link reference definitions, in source order; none when they are far too long
    /// to copy around (they are left where they are).
    fn copied_definitions(&self, parser: &Parser<'_>) -> Vec<Range<usize>> {
        let mut definitions: Vec<Range<usize>> = parser
            .reference_definitions()
            .iter()
            .map(|(_, definition)| definition.span.clone())
            .collect();
        definitions.sort_by_key(|span| span.start);
        let total: usize = definitions.iter().map(|span| span.len()).sum();
        if total <= self.max_units / 4 {
            definitions
        } else {
            Vec::new()
        }
    }

    /// A tag opens: an atom or a span to remember, a top-level block, or a list's item.
    fn start(&mut self, tag: Tag<'_>, range: Range<usize>, open: &mut OpenBlock) {
        match &tag {
            Tag::Link { .. } | Tag::Image { .. } => self.atoms.push(range.clone()),
            Tag::Emphasis | Tag::Strong | Tag::Strikethrough => self.spans.push(range.clone()),
            _ => {}
        }
        if open.depth == 0 {
            open.block = Some(Block {
                range,
                kind: Kind::of(tag),
            });
        } else if open.depth == 1 && matches!(tag, Tag::Item) {
            open.push_item(range);
        }
        open.depth += 1;
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
