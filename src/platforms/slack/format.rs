//! Slack mrkdwn (Slack's "Formatting text for app surfaces"). `&`, `<` and `>` are escaped
//! even in code: unescaped they would let an answer write `<!channel>` or `<@U…>` mentions.
//! Slack has no escape for `*`, `_`, `~` or `` ` ``, so literal ones are set apart with
//! zero-width spaces (not confirmed against the live platform).

use super::Slack;
use crate::markdown::render::{self, neutralize_markers, wrap, Style};
use crate::markdown::Renderer;

impl Renderer for Slack {
    fn render(&self, markdown: &str) -> String {
        render::render(self, markdown)
    }
}

/// Slack's three control characters.
fn escape(ch: char, out: &mut String) {
    match ch {
        '&' => out.push_str("&amp;"),
        '<' => out.push_str("&lt;"),
        '>' => out.push_str("&gt;"),
        ch => out.push(ch),
    }
}

fn escaped(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    text.chars().for_each(|ch| escape(ch, &mut out));
    out
}

impl Style for Slack {
    fn text(&self, text: &str, out: &mut String) {
        neutralize_markers(text, out, escape);
    }
    fn bold(&self, inner: &str) -> String {
        wrap(inner, "*")
    }
    fn italic(&self, inner: &str) -> String {
        wrap(inner, "_")
    }
    fn strike(&self, inner: &str) -> String {
        wrap(inner, "~")
    }
    fn code(&self, code: &str, _in_link: bool) -> String {
        format!("`{}`", escaped(code))
    }
    fn code_block(&self, _language: Option<&str>, code: &str) -> String {
        // A fence inside the code would end the block early: break it up invisibly.
        let code = escaped(code).replace("```", "`\u{200B}``");
        format!("```\n{code}\n```")
    }
    fn link(&self, url: &str, inner: &str, bare: bool) -> String {
        // `|` ends the address and `>` the link: neither may appear raw in the address.
        let url = escaped(url).replace('|', "%7C");
        if bare || inner.is_empty() {
            format!("<{url}>")
        } else {
            format!("<{url}|{inner}>")
        }
    }
    fn quote(&self, inner: &str, _depth: usize) -> String {
        inner
            .lines()
            .map(|line| format!("> {line}").trim_end().to_owned())
            .collect::<Vec<_>>()
            .join("\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slack(markdown: &str) -> String {
        Slack.render(markdown)
    }

    #[test]
    fn emphasis_nests_in_slack_markers() {
        assert_eq!(
            slack("**bold** and *italic* and ~~gone~~"),
            "*bold* and _italic_ and ~gone~"
        );
        assert_eq!(
            slack("**bold _and italic_ inside**"),
            "*bold _and italic_ inside*"
        );
        assert_eq!(slack("# Title\n\nBody"), "*Title*\n\nBody");
    }

    #[test]
    fn control_characters_are_escaped_everywhere_and_mentions_cannot_form() {
        assert_eq!(
            slack("a < b && c > d <!channel> <@U123>"),
            "a &lt; b &amp;&amp; c &gt; d &lt;!channel&gt; &lt;@U123&gt;"
        );
        assert_eq!(slack("`if a < b && c`"), "`if a &lt; b &amp;&amp; c`");
        assert_eq!(slack("```\n<b>&\n```"), "```\n&lt;b&gt;&amp;\n```");
    }

    #[test]
    fn literal_markers_do_not_become_formatting() {
        let rendered = slack(r"2 \* 3 \* 4 and \_x\_ but snake_case_name stays");
        assert_eq!(
            rendered,
            "2 \u{200B}*\u{200B} 3 \u{200B}*\u{200B} 4 and \u{200B}_\u{200B}x\u{200B}_\u{200B} but snake_case_name stays"
        );
    }

    #[test]
    fn links_use_slack_angle_brackets() {
        assert_eq!(
            slack("see [the docs](https://example.com/a?b=1&c=2) or <https://x.org>"),
            "see <https://example.com/a?b=1&amp;c=2|the docs> or <https://x.org>"
        );
        assert_eq!(slack("[x](https://e.com/a|b)"), "<https://e.com/a%7Cb|x>");
        assert_eq!(
            slack("[click](javascript:alert(1))"),
            "click (javascript:alert(1))"
        );
    }

    #[test]
    fn code_blocks_lists_and_quotes() {
        assert_eq!(slack("```rust\nfn main() {}\n```"), "```\nfn main() {}\n```");
        assert_eq!(
            slack("- one\n- two\n  - nested\n\n1. first\n2. second"),
            "• one\n• two\n  • nested\n\n1. first\n2. second"
        );
        assert_eq!(slack("> quoted *text*\n> more"), "> quoted _text_\n> more");
    }
}
