//! Telegram's HTML parse mode (Bot API "Formatting options"). Nesting follows Telegram's
//! rules: code inside a link's text is plain text (links and code cannot contain each
//! other), and a quote within a quote is flattened (blockquotes cannot be nested).

use super::Telegram;
use crate::markdown::render::{self, Style};
use crate::markdown::Renderer;

impl Renderer for Telegram {
    fn render(&self, markdown: &str) -> String {
        render::render(self, markdown)
    }
    fn measure(&self, rendered: &str) -> usize {
        visible_units(rendered)
    }
    fn parse_mode(&self) -> Option<&'static str> {
        Some("HTML")
    }
}

fn escape(text: &str, out: &mut String) {
    for ch in text.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            ch => out.push(ch),
        }
    }
}

fn escaped(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    escape(text, &mut out);
    out
}

/// A fence's language as a class name: Telegram takes it as given, so only the characters
/// language names use are kept (`c++`, `objective-c`, `c#`, `shell.session`).
fn language_class(language: &str) -> String {
    language
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '#' | '_' | '.'))
        .collect()
}

impl Style for Telegram {
    fn text(&self, text: &str, out: &mut String) {
        escape(text, out);
    }
    fn bold(&self, inner: &str) -> String {
        format!("<b>{inner}</b>")
    }
    fn italic(&self, inner: &str) -> String {
        format!("<i>{inner}</i>")
    }
    fn strike(&self, inner: &str) -> String {
        format!("<s>{inner}</s>")
    }
    fn code(&self, code: &str, in_link: bool) -> String {
        if in_link {
            escaped(code)
        } else {
            format!("<code>{}</code>", escaped(code))
        }
    }
    fn code_block(&self, language: Option<&str>, code: &str) -> String {
        match language.map(language_class).filter(|l| !l.is_empty()) {
            Some(class) => format!(
                "<pre><code class=\"language-{class}\">{}</code></pre>",
                escaped(code)
            ),
            None => format!("<pre>{}</pre>", escaped(code)),
        }
    }
    fn link(&self, url: &str, inner: &str, _bare: bool) -> String {
        format!("<a href=\"{}\">{inner}</a>", escaped(url))
    }
    fn quote(&self, inner: &str, depth: usize) -> String {
        if depth > 1 {
            inner.to_owned()
        } else {
            format!("<blockquote>{inner}</blockquote>")
        }
    }
}

/// The length Telegram's 4096 applies to, "after entities parsing": the text without its
/// tags, each entity (`&lt;`, `&#39;`) one character, in UTF-16 units (as entity offsets
/// are counted; whether the limit counts so is not confirmed, so the larger count is used).
pub fn visible_units(html: &str) -> usize {
    let mut units = 0;
    let mut chars = html.chars();
    while let Some(ch) = chars.next() {
        match ch {
            '<' => {
                chars.by_ref().find(|&c| c == '>');
            }
            '&' => {
                let rest = chars.as_str();
                match rest.find(';').filter(|&end| end <= 10) {
                    Some(end) => {
                        chars = rest[end + 1..].chars();
                        units += 1;
                    }
                    None => units += 1,
                }
            }
            ch => units += ch.len_utf16(),
        }
    }
    units
}

#[cfg(test)]
mod tests {
    use super::*;

    fn telegram(markdown: &str) -> String {
        Telegram.render(markdown)
    }

    #[test]
    fn emphasis_becomes_nested_tags() {
        assert_eq!(
            telegram("**bold *both* bold** ~~old~~"),
            "<b>bold <i>both</i> bold</b> <s>old</s>"
        );
        assert_eq!(telegram("## Heading\ntext"), "<b>Heading</b>\n\ntext");
    }

    #[test]
    fn html_characters_are_escaped_and_literals_stay_literal() {
        assert_eq!(
            telegram(r"if a < b && c > d then <b>not bold</b> 2 \* 3 snake_case *_x"),
            "if a &lt; b &amp;&amp; c &gt; d then &lt;b&gt;not bold&lt;/b&gt; 2 * 3 snake_case *_x"
        );
        assert_eq!(telegram("`a<b>&c`"), "<code>a&lt;b&gt;&amp;c</code>");
    }

    #[test]
    fn code_blocks_keep_their_language() {
        assert_eq!(
            telegram("```python\nprint(\"<hi>\")\n```"),
            "<pre><code class=\"language-python\">print(&quot;&lt;hi&gt;&quot;)</code></pre>"
        );
        assert_eq!(telegram("    indented\n    code"), "<pre>indented\ncode</pre>");
        assert_eq!(
            telegram("```js\"><b>\nint a;\n```"),
            "<pre><code class=\"language-jsb\">int a;</code></pre>"
        );
    }

    #[test]
    fn links_are_anchors_and_code_inside_them_is_plain() {
        assert_eq!(
            telegram("[the `docs`](https://e.com/?a=1&b=\"2\")"),
            "<a href=\"https://e.com/?a=1&amp;b=&quot;2&quot;\">the docs</a>"
        );
        assert_eq!(
            telegram("<https://x.org>"),
            "<a href=\"https://x.org\">https://x.org</a>"
        );
        assert_eq!(telegram("[me](tg://user?id=1)"), "me (tg://user?id=1)");
    }

    #[test]
    fn quotes_are_never_nested_and_lists_are_marked() {
        assert_eq!(
            telegram("> outer\n>> inner"),
            "<blockquote>outer\n\ninner</blockquote>"
        );
        assert_eq!(
            telegram("1. one\n2. **two**\n   - sub"),
            "1. one\n2. <b>two</b>\n   • sub"
        );
    }

    #[test]
    fn visible_length_counts_text_after_entity_parsing_in_utf16() {
        assert_eq!(visible_units("<b>ab</b>&lt;&amp;"), 4);
        assert_eq!(visible_units("<a href=\"https://x\">😀</a>"), 2);
        assert_eq!(visible_units("a & b"), 5);
    }
}
