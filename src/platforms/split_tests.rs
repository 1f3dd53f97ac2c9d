//! The Markdown splitter with each platform's renderer: every part fits the platform's
//! limit as the platform counts it, and stays well-formed.

use crate::markdown::split::split;
use crate::markdown::Renderer;
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
