//! The agent's Markdown in each platform's own formatting.
//!
//! Agents (LLMs) answer in CommonMark: `**bold**`, fenced code, lists, links. Sent as it is,
//! Telegram and WhatsApp show the asterisks and backticks. This module parses the answer
//! with a real CommonMark parser (pulldown-cmark, strikethrough enabled, nothing else) and
//! renders it per platform: each platform's `format.rs` (`crate::platforms::slack::format`…)
//! is a small [`render::Style`] that says how bold, code, links and quotes look there;
//! [`render::render`] walks the document once for all of them.
//!
//! Where it happens: reply parts are stored as the agent's Markdown, split by [`split`] into
//! parts that are each a complete Markdown document (a code block cut in two is closed and
//! reopened with its language), and each part is rendered only when it is sent
//! (`crate::platforms::send`). So what is stored does not depend on the connector's
//! `format_markdown` setting at the time, the rendering and Telegram's `parse_mode` are
//! always decided together, and a part the platform refuses as formatted can still be sent
//! as the plain text it was stored as.
//!
//! Telegram: HTML parse mode rather than message entities. Both express the same nesting;
//! HTML needs only `<`, `>`, `&` (and `"` in attributes) escaped, reads in logs and tests as
//! what the user sees, and a mistake in it is refused by Telegram as a whole ("can't parse
//! entities", answered by sending the part as plain text) instead of silently formatting the
//! wrong UTF-16 range, which is what a wrong entity offset does. The limit is counted as
//! Telegram counts it: the text after entity parsing, in UTF-16 units
//! (`crate::platforms::telegram::format::visible_units`).

pub mod render;
pub mod split;

/// A reply part as it is sent: the text, and Telegram's `parse_mode` when it is HTML.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Formatted {
    pub text: String,
    pub parse_mode: Option<&'static str>,
}

/// One platform's formatting: how a Markdown document renders, and how the platform counts
/// the rendered text against its message limit.
pub trait Renderer: Sync {
    /// Renders one complete Markdown document.
    fn render(&self, markdown: &str) -> String;
    /// The length the platform's limit applies to, of a text `render` produced.
    fn measure(&self, rendered: &str) -> usize {
        rendered.encode_utf16().count()
    }
    /// Telegram's `parse_mode` for rendered text; `None` elsewhere.
    fn parse_mode(&self) -> Option<&'static str> {
        None
    }
    /// `markdown` in this formatting; `None` when it renders to nothing visible (a part
    /// holding only a link definition, say), which is then better sent as it is.
    fn format(&self, markdown: &str) -> Option<Formatted> {
        let text = self.render(markdown);
        (!text.trim().is_empty()).then(|| Formatted {
            text,
            parse_mode: self.parse_mode(),
        })
    }
}

/// The parser every renderer and the splitter use: CommonMark plus `~~strike~~`.
pub(crate) fn options() -> pulldown_cmark::Options {
    pulldown_cmark::Options::ENABLE_STRIKETHROUGH
}

/// Link schemes rendered as links; anything else (`javascript:`, `tg://`, `file:`) is shown
/// as text with its target, so an answer cannot make a clickable mention or script.
pub(crate) fn linkable(url: &str) -> bool {
    let lower = url.trim_start().to_ascii_lowercase();
    ["http://", "https://", "mailto:"]
        .iter()
        .any(|scheme| lower.starts_with(scheme))
}
