//! HTML building blocks: the layout every page shares, and the small templates pages put
//! together (a badge, a recovery button). Templates escape every value; a type here that is
//! `HtmlSafe` is one rendered by its own template, so it is not escaped twice.

use std::fmt::Write;

use askama::filters::HtmlSafe;
use askama::Template;

use axum::http::HeaderValue;
use axum::response::{IntoResponse, Response};

pub fn query_value(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-_.~".contains(&byte) {
            out.push(char::from(byte));
        } else {
            let _ = write!(out, "%{byte:02X}");
        }
    }
    out
}

/// A moment as every page shows it.
pub fn when(at: chrono::DateTime<chrono::Utc>) -> String {
    at.format("%Y-%m-%d %H:%M:%S UTC").to_string()
}

pub fn excerpt(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

pub struct Nav<'a> {
    pub key_prefix: &'a str,
    pub csrf: &'a str,
    /// The page's place in the navigation (an entry of [`NAV`]'s), marked as the current one.
    pub here: &'a str,
    /// How many conversations are held, counted up to [`HELD_CAP`].
    pub held: i64,
}

/// The navigation counts held conversations up to this, then shows `99+`.
pub const HELD_CAP: i64 = 100;

/// The navigation's entries: where each leads, and its name.
pub const NAV: [(&str, &str); 7] = [
    ("/console/overview", "Overview"),
    ("/console/held", "Held"),
    ("/console/turns", "Turns"),
    ("/console/users", "Users"),
    ("/console/failed", "Failed"),
    ("/console/connectors", "Connectors"),
    ("/console/links", "Links"),
];

struct NavItem {
    href: &'static str,
    label: &'static str,
    current: bool,
    /// Held carries the count of held conversations.
    held: bool,
}

impl Nav<'_> {
    fn items(&self) -> Vec<NavItem> {
        NAV.iter()
            .map(|&(href, label)| NavItem {
                href,
                label,
                current: href == self.here,
                held: href == "/console/held",
            })
            .collect()
    }

    fn held_shown(&self) -> String {
        if self.held >= HELD_CAP {
            format!("{}+", HELD_CAP - 1)
        } else {
            self.held.to_string()
        }
    }
}

const STYLE: &str = include_str!("static/console.css");

#[derive(Template)]
#[template(path = "console/layout.html")]
struct Layout<'a> {
    title: &'a str,
    nav: Option<&'a Nav<'a>>,
    /// Markup rendered by the page's own template (or code), where values are escaped.
    body: &'a str,
    /// The conversation's chat uses the whole width of a laptop's screen.
    wide: bool,
    style: &'static str,
    script: String,
}

/// A whole page around `body`, markup rendered by the caller's template.
pub fn page(title: &str, nav: Option<&Nav>, body: &str) -> String {
    layout(title, nav, body, false)
}

pub fn layout(title: &str, nav: Option<&Nav>, body: &str, wide: bool) -> String {
    Layout {
        title,
        nav,
        body,
        wide,
        style: STYLE,
        script: super::script::url(),
    }
    .render_page()
}

/// Renders a page's template. A template's only failure is a value's `Display` failing,
/// which none of the console's does: the page is then an error text, never half a page.
pub trait RenderPage {
    fn render_page(&self) -> String;
}

impl<T: Template> RenderPage for T {
    fn render_page(&self) -> String {
        self.render().unwrap_or_else(|err| {
            tracing::error!(error = %err, "a console template failed to render");
            "<!doctype html><title>Error</title><p>This page could not be shown.</p>".to_owned()
        })
    }
}

/// Kept out of frames and caches; styles only from the page, script only from this origin's
/// files (the console's one, `script.rs`): no inline script, no eval.
pub fn respond(status: axum::http::StatusCode, html: String) -> Response {
    let mut response = (status, axum::response::Html(html)).into_response();
    let headers = response.headers_mut();
    headers.insert(
        "content-security-policy",
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; connect-src 'self'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    headers.insert("x-frame-options", HeaderValue::from_static("DENY"));
    headers.insert("cache-control", HeaderValue::from_static("no-store"));
    headers.insert("x-content-type-options", HeaderValue::from_static("nosniff"));
    response
}

/// An error's body: what went wrong, and the way back.
#[derive(Template)]
#[template(path = "console/alert.html")]
pub struct Alert<'a> {
    pub text: &'a str,
    pub back: &'a str,
    pub back_label: &'a str,
}

/// A status as a coloured badge.
#[derive(Template)]
#[template(
    source = r#"<span class="badge {{ tone }}">{{ status }}</span>"#,
    ext = "html"
)]
pub struct Badge {
    tone: &'static str,
    status: String,
}

/// Rendered by its own template, which escapes every value.
impl HtmlSafe for Badge {}

pub fn badge(status: &str) -> Badge {
    let tone = match status {
        "executed" | "sent" | "delivered" | "read" => "ok",
        "dispatch_failed" | "delivery_failed" | "failed" => "bad",
        "unknown" | "denied_unlinked" | "held" => "warn",
        _ => "neutral",
    };
    Badge {
        tone,
        status: status.to_owned(),
    }
}

/// A failed turn's recovery button: *Redispatch* or *Resend*.
#[derive(Template)]
#[template(
    source = r#"<form method="post" action="/console/turns/{{ id }}/{{ action }}"><input type="hidden" name="csrf" value="{{ csrf }}"><button type="submit" class="{{ action }}">{{ label }}</button></form>"#,
    ext = "html"
)]
pub struct ActionForm {
    id: uuid::Uuid,
    action: &'static str,
    label: &'static str,
    csrf: String,
}

impl HtmlSafe for ActionForm {}

/// `None` for a turn that has nothing to recover.
pub fn action_form(id: uuid::Uuid, status: &str, csrf: &str) -> Option<ActionForm> {
    let (action, label) = match status {
        "dispatch_failed" => ("redispatch", "Redispatch"),
        "delivery_failed" => ("resend", "Resend"),
        _ => return None,
    };
    Some(ActionForm {
        id,
        action,
        label,
        csrf: csrf.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn excerpts_cut_on_characters_not_bytes() {
        assert_eq!(excerpt("héllo wörld", 5), "héllo…");
        assert_eq!(excerpt("short", 10), "short");
    }

    #[test]
    fn query_values_are_percent_encoded() {
        assert_eq!(query_value("a b&c=é"), "a%20b%26c%3D%C3%A9");
    }
}
