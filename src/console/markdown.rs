//! The agent's and a person's Markdown as the console shows it: the platforms' renderer
//! (`markdown::render`) with HTML as its style, so the rules are the platforms' own — raw
//! HTML in the Markdown is shown as text, and only `http`, `https` and `mailto` links are
//! links. Blocks are separated by newlines, which the page keeps (`white-space: pre-wrap`).

use crate::markdown::render::{self, Style};

struct ConsoleHtml;

fn escape(text: &str, out: &mut String) {
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
}

fn escaped(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    escape(text, &mut out);
    out
}

impl Style for ConsoleHtml {
    fn text(&self, text: &str, out: &mut String) {
        escape(text, out);
    }
    fn bold(&self, inner: &str) -> String {
        format!("<strong>{inner}</strong>")
    }
    fn italic(&self, inner: &str) -> String {
        format!("<em>{inner}</em>")
    }
    fn strike(&self, inner: &str) -> String {
        format!("<s>{inner}</s>")
    }
    fn code(&self, code: &str, _in_link: bool) -> String {
        format!("<code>{}</code>", escaped(code))
    }
    fn code_block(&self, _language: Option<&str>, code: &str) -> String {
        format!("<pre><code>{}</code></pre>", escaped(code))
    }
    /// The agent's links leave the console: no referrer, no opener.
    fn link(&self, url: &str, inner: &str, _bare: bool) -> String {
        format!(
            r#"<a href="{}" rel="noopener noreferrer nofollow">{inner}</a>"#,
            escaped(url)
        )
    }
    fn quote(&self, inner: &str, _depth: usize) -> String {
        format!("<blockquote>{inner}</blockquote>")
    }
}

/// The words alone, for a line that names a message (the inbox's): no markers, a link's
/// text without its target. Text, for a template to escape.
struct PlainText;

impl Style for PlainText {
    fn text(&self, text: &str, out: &mut String) {
        out.push_str(text);
    }
    fn bold(&self, inner: &str) -> String {
        inner.to_owned()
    }
    fn italic(&self, inner: &str) -> String {
        inner.to_owned()
    }
    fn strike(&self, inner: &str) -> String {
        inner.to_owned()
    }
    fn code(&self, code: &str, _in_link: bool) -> String {
        code.to_owned()
    }
    fn code_block(&self, _language: Option<&str>, code: &str) -> String {
        code.to_owned()
    }
    fn link(&self, _url: &str, inner: &str, _bare: bool) -> String {
        inner.to_owned()
    }
    fn quote(&self, inner: &str, _depth: usize) -> String {
        inner.to_owned()
    }
}

pub fn to_text(markdown: &str) -> String {
    render::render(&PlainText, markdown)
}

/// Markup for a template's `|safe`: every character of `markdown` is escaped or one of the
/// style's own tags.
pub fn to_html(markdown: &str) -> String {
    render::render(&ConsoleHtml, markdown)
}

#[cfg(test)]
mod tests {
    use super::to_html;

    #[test]
    fn emphasis_code_and_links_become_markup() {
        assert_eq!(
            to_html("Hi, this is **Dana**: see [the docs](https://e.com/?a=1&b=2) and `x<y`"),
            "Hi, this is <strong>Dana</strong>: see <a href=\"https://e.com/?a=1&amp;b=2\" rel=\"noopener noreferrer nofollow\">the docs</a> and <code>x&lt;y</code>"
        );
    }

    #[test]
    fn plain_text_keeps_the_words_and_drops_the_markers() {
        assert_eq!(
            super::to_text("Hi, this is **Dana** <b>x</b>: [docs](https://e.com)"),
            "Hi, this is Dana <b>x</b>: docs"
        );
    }

    #[test]
    fn raw_html_and_script_links_stay_text() {
        let html = to_html("<script>alert(1)</script> <img src=x onerror=alert(2)>");
        assert!(!html.contains("<script") && !html.contains("<img"), "{html}");
        assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"), "{html}");
        assert_eq!(to_html("[x](javascript:alert)"), "x (javascript:alert)");
    }
}
