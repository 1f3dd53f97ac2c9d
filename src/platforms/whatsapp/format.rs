//! WhatsApp's text formatting: `*bold*`, `_italic_`, `~strike~`,
//! `` `inline code` ``, ```` ``` ```` monospace blocks (no language), `- ` and `1. ` lists,
//! `> ` quotes. Links are not markup on WhatsApp: `text (url)`, or the address alone when
//! it is its own text. Nothing is escaped (WhatsApp has no escapes); literal formatting
//! characters are set apart with zero-width spaces, as for Slack
//! ([`crate::markdown::render::neutralize_markers`]).

use super::Whatsapp;
use crate::markdown::render::{self, neutralize_markers, wrap, Style};
use crate::markdown::Renderer;

impl Renderer for Whatsapp {
    fn render(&self, markdown: &str) -> String {
        render::render(self, markdown)
    }
}

impl Style for Whatsapp {
    fn text(&self, text: &str, out: &mut String) {
        neutralize_markers(text, out, |ch, out| out.push(ch));
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
        format!("`{code}`")
    }
    fn code_block(&self, _language: Option<&str>, code: &str) -> String {
        let code = code.replace("```", "`\u{200B}``");
        format!("```\n{code}\n```")
    }
    fn link(&self, url: &str, inner: &str, bare: bool) -> String {
        if bare || inner.is_empty() || inner == url {
            url.to_owned()
        } else {
            format!("{inner} ({url})")
        }
    }
    fn quote(&self, inner: &str, _depth: usize) -> String {
        inner
            .lines()
            .map(|line| format!("> {line}").trim_end().to_owned())
            .collect::<Vec<_>>()
            .join("\n")
    }
    fn bullet(&self) -> &'static str {
        "- "
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn whatsapp(markdown: &str) -> String {
        Whatsapp.render(markdown)
    }

    #[test]
    fn emphasis_uses_whatsapp_markers() {
        assert_eq!(
            whatsapp("**Sure!** this is *it* and ~~not~~ `x < y`"),
            "*Sure!* this is _it_ and ~not~ `x < y`"
        );
        assert_eq!(whatsapp("***both***"), "_*both*_");
    }

    #[test]
    fn links_are_text_with_the_address() {
        assert_eq!(
            whatsapp("read [the guide](https://e.com/g) or https://e.com/raw or <https://e.com/a>"),
            "read the guide (https://e.com/g) or https://e.com/raw or https://e.com/a"
        );
    }

    #[test]
    fn literal_characters_stay_literal() {
        assert_eq!(whatsapp("a < b & c"), "a < b & c");
        assert_eq!(
            whatsapp(r"\*not bold\* my_var"),
            "\u{200B}*\u{200B}not bold\u{200B}*\u{200B} my_var"
        );
    }

    #[test]
    fn code_blocks_lists_and_quotes() {
        assert_eq!(
            whatsapp("Run:\n\n```sh\nls *.rs\n```"),
            "Run:\n\n```\nls *.rs\n```"
        );
        assert_eq!(whatsapp("* a\n* b\n\n3. c\n4. d"), "- a\n- b\n\n3. c\n4. d");
        assert_eq!(whatsapp("> **note**"), "> *note*");
    }
}
