//! One walk over a parsed Markdown document for every platform; a [`Style`] supplies each
//! platform's markers and escaping. Every container collects its content in a buffer of its
//! own, rendered whole when it ends, so a tag is only ever written with its closing tag.

use pulldown_cmark::{CodeBlockKind, Event, LinkType, Parser, Tag, TagEnd};

pub trait Style {
    /// Text that is not code, escaped as the platform needs.
    fn text(&self, text: &str, out: &mut String);
    fn bold(&self, inner: &str) -> String;
    fn italic(&self, inner: &str) -> String;
    fn strike(&self, inner: &str) -> String;
    /// Inline code; `in_link` when it is part of a link's text.
    fn code(&self, code: &str, in_link: bool) -> String;
    fn code_block(&self, language: Option<&str>, code: &str) -> String;
    /// `url` is raw, of a scheme [`super::linkable`] allows; `bare` when the text is the
    /// address itself (`<https://…>`).
    fn link(&self, url: &str, inner: &str, bare: bool) -> String;
    /// `depth` is 1 for the outermost quote.
    fn quote(&self, inner: &str, depth: usize) -> String;
    /// Chat platforms have no headings: bold by default.
    fn heading(&self, inner: &str) -> String {
        self.bold(inner)
    }
    fn bullet(&self) -> &'static str {
        "• "
    }
}

pub fn render(style: &dyn Style, markdown: &str) -> String {
    let mut walk = Walk {
        style,
        stack: vec![(Frame::Root, String::new())],
        lists: Vec::new(),
        quotes: 0,
        links: 0,
    };
    for event in Parser::new_ext(markdown, super::options()) {
        walk.event(event);
    }
    // Every Start pushed a frame and every End popped one: only the root is left.
    let root = walk.stack.swap_remove(0).1;
    root.trim_end().to_owned()
}

enum Frame {
    Root,
    Paragraph,
    Heading,
    Html,
    Item,
    List,
    Quote,
    Code(Option<String>),
    Bold,
    Italic,
    Strike,
    Link {
        url: String,
        bare: bool,
    },
    Image {
        url: String,
    },
    /// A construct the parser options never produce; its content is kept as it is.
    Other,
}

struct Walk<'s> {
    style: &'s dyn Style,
    stack: Vec<(Frame, String)>,
    /// The next number of each open list (`None`: bulleted).
    lists: Vec<Option<u64>>,
    quotes: usize,
    links: usize,
}

impl Walk<'_> {
    fn event(&mut self, event: Event<'_>) {
        match event {
            Event::Start(tag) => self.start(tag),
            Event::End(tag) => self.end(tag),
            Event::Text(text) => match self.stack.last_mut() {
                Some((Frame::Code(_), buffer)) => buffer.push_str(&text),
                _ => self.text(&text),
            },
            Event::Code(code) => {
                let code = self.style.code(&code, self.links > 0);
                self.top().push_str(&code);
            }
            // Raw HTML is not passed through: it is shown as the text it is.
            Event::Html(html) | Event::InlineHtml(html) => self.text(&html),
            Event::SoftBreak | Event::HardBreak => self.top().push('\n'),
            Event::Rule => self.block("———".to_owned()),
            Event::TaskListMarker(done) => self.text(if done { "[x] " } else { "[ ] " }),
            Event::FootnoteReference(label) => self.text(&format!("[^{label}]")),
            Event::InlineMath(text) | Event::DisplayMath(text) => self.text(&text),
        }
    }

    fn start(&mut self, tag: Tag<'_>) {
        let frame = match tag {
            Tag::Paragraph => Frame::Paragraph,
            Tag::Heading { .. } => Frame::Heading,
            Tag::HtmlBlock => Frame::Html,
            Tag::BlockQuote(_) => {
                self.quotes += 1;
                Frame::Quote
            }
            Tag::CodeBlock(kind) => Frame::Code(match kind {
                CodeBlockKind::Fenced(info) => info.split_whitespace().next().map(str::to_owned),
                CodeBlockKind::Indented => None,
            }),
            Tag::List(first) => {
                self.lists.push(first);
                Frame::List
            }
            Tag::Item => Frame::Item,
            Tag::Emphasis => Frame::Italic,
            Tag::Strong => Frame::Bold,
            Tag::Strikethrough => Frame::Strike,
            Tag::Link {
                link_type, dest_url, ..
            } => {
                self.links += 1;
                let (url, bare) = match link_type {
                    LinkType::Email => (format!("mailto:{dest_url}"), true),
                    LinkType::Autolink => (dest_url.to_string(), true),
                    _ => (dest_url.to_string(), false),
                };
                Frame::Link { url, bare }
            }
            Tag::Image { dest_url, .. } => Frame::Image {
                url: dest_url.to_string(),
            },
            _ => Frame::Other,
        };
        self.stack.push((frame, String::new()));
    }

    fn end(&mut self, _tag: TagEnd) {
        // Ends always match the innermost open tag, whose frame is on top.
        let Some((frame, inner)) = self.stack.pop() else {
            return;
        };
        let style = self.style;
        match frame {
            Frame::Root => self.stack.push((Frame::Root, inner)),
            Frame::Paragraph => self.block(inner),
            Frame::Html => self.block(inner.trim_end().to_owned()),
            Frame::Heading => self.block(style.heading(&inner)),
            Frame::Quote => {
                let quoted = style.quote(inner.trim_end(), self.quotes);
                self.quotes = self.quotes.saturating_sub(1);
                self.block(quoted);
            }
            Frame::Code(language) => {
                let code = inner.strip_suffix('\n').unwrap_or(&inner);
                self.block(style.code_block(language.as_deref(), code));
            }
            Frame::List => {
                self.lists.pop();
                self.block(inner);
            }
            Frame::Item => self.item(&inner),
            Frame::Bold => self.inline(style.bold(&inner)),
            Frame::Italic => self.inline(style.italic(&inner)),
            Frame::Strike => self.inline(style.strike(&inner)),
            Frame::Link { url, bare } => {
                self.links = self.links.saturating_sub(1);
                self.link(&url, &inner, bare);
            }
            Frame::Image { url } => {
                let bare = inner.is_empty();
                let mut shown = inner;
                if bare {
                    style.text(&url, &mut shown);
                }
                self.link(&url, &shown, bare);
            }
            Frame::Other => self.inline(inner),
        }
    }

    fn top(&mut self) -> &mut String {
        match self.stack.last_mut() {
            Some((_, buffer)) => buffer,
            None => unreachable!("the root frame is never popped"),
        }
    }

    fn text(&mut self, text: &str) {
        let style = self.style;
        style.text(text, self.top());
    }

    fn inline(&mut self, rendered: String) {
        self.top().push_str(&rendered);
    }

    /// A finished block, after a blank line except inside a list item.
    fn block(&mut self, rendered: String) {
        if rendered.is_empty() {
            return;
        }
        let tight = matches!(self.stack.last(), Some((Frame::Item | Frame::List, _)));
        let parent = self.top();
        if !parent.is_empty() {
            parent.push_str(if tight { "\n" } else { "\n\n" });
        }
        parent.push_str(&rendered);
    }

    /// Later lines are indented by the marker's width, so nested blocks stay under their item.
    fn item(&mut self, inner: &str) {
        let marker = match self.lists.last_mut() {
            Some(Some(number)) => {
                let marker = format!("{number}. ");
                *number += 1;
                marker
            }
            _ => self.style.bullet().to_owned(),
        };
        let indent = " ".repeat(marker.chars().count());
        let mut rendered = String::new();
        for (index, line) in inner.trim_end().lines().enumerate() {
            if index == 0 {
                rendered.push_str(&marker);
            } else {
                rendered.push('\n');
                if !line.is_empty() {
                    rendered.push_str(&indent);
                }
            }
            rendered.push_str(line);
        }
        if rendered.is_empty() {
            rendered = marker.trim_end().to_owned();
        }
        self.block(rendered);
    }

    /// For a scheme that may not be a link, its text and its target as text.
    fn link(&mut self, url: &str, inner: &str, bare: bool) {
        let style = self.style;
        if super::linkable(url) {
            let rendered = style.link(url, inner, bare);
            self.inline(rendered);
            return;
        }
        let top = self.top();
        top.push_str(inner);
        if !bare {
            top.push_str(" (");
            style.text(url, top);
            top.push(')');
        }
    }
}

/// `inner` between `mark`s, with its outer whitespace moved outside them: Slack and
/// WhatsApp only see a marker that touches the text it formats.
pub(crate) fn wrap(inner: &str, mark: &str) -> String {
    let core = inner.trim();
    if core.is_empty() {
        return inner.to_owned();
    }
    let start = inner.len() - inner.trim_start().len();
    let end = start + core.len();
    format!("{}{mark}{core}{mark}{}", &inner[..start], &inner[end..])
}

/// Sets Slack's and WhatsApp's literal formatting characters apart by zero-width spaces so
/// none pairs up as formatting; within a word (`snake_case`) neither platform formats, so
/// identifiers are left as they are and copy cleanly.
pub(crate) fn neutralize_markers(text: &str, out: &mut String, escape: fn(char, &mut String)) {
    let chars: Vec<char> = text.chars().collect();
    for (index, &ch) in chars.iter().enumerate() {
        if matches!(ch, '*' | '_' | '~' | '`') {
            let before = index.checked_sub(1).and_then(|i| chars.get(i));
            let after = chars.get(index + 1);
            let inside_word =
                before.is_some_and(|c| c.is_alphanumeric()) && after.is_some_and(|c| c.is_alphanumeric());
            if !inside_word {
                out.push('\u{200B}');
                out.push(ch);
                out.push('\u{200B}');
                continue;
            }
        }
        escape(ch, out);
    }
}
