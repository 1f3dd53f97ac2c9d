//! The agent's Markdown in each platform's own formatting (docs/configuration.md#formatted-replies):
//! parsed once by pulldown-cmark, rendered by [`render::render`] with each platform's
//! `format.rs` as its [`render::Style`]. Parts are stored as Markdown and rendered only when
//! sent, so a part the platform refuses as formatted can still go as plain text.
//!
//! Telegram gets HTML rather than message entities: a mistake in HTML is refused whole,
//! whereas a wrong entity offset silently formats the wrong UTF-16 range.

pub mod render;
pub mod split;

/// A reply part as it is sent: the text, and Telegram's `parse_mode` when it is HTML.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Formatted {
    pub text: String,
    pub parse_mode: Option<&'static str>,
}

/// One platform's formatting, and how it counts rendered text against its message limit.
pub trait Renderer: Sync {
    fn render(&self, markdown: &str) -> String;
    fn measure(&self, rendered: &str) -> usize {
        rendered.encode_utf16().count()
    }
    /// Telegram's `parse_mode` for rendered text; `None` elsewhere.
    fn parse_mode(&self) -> Option<&'static str> {
        None
    }
    /// `None` when it renders to nothing visible (only a link definition, say): better sent
    /// as it is.
    fn format(&self, markdown: &str) -> Option<Formatted> {
        let text = self.render(markdown);
        (!text.trim().is_empty()).then(|| Formatted {
            text,
            parse_mode: self.parse_mode(),
        })
    }
}

/// CommonMark plus `~~strike~~`, for every renderer and the splitter.
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
