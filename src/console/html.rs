//! HTML building blocks. Every value from data goes through `esc`, so a message containing
//! `<script>` shows as text; only the literals of this code are raw HTML.

use std::fmt::Write;

use axum::http::HeaderValue;
use axum::response::{IntoResponse, Response};

/// For an element body or a quoted attribute value: both quote kinds are escaped.
pub fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
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
    out
}

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
}

/// A whole page. `body` is HTML built by the caller from escaped values.
pub fn page(title: &str, nav: Option<&Nav>, body: &str) -> String {
    let header = match nav {
        Some(nav) => format!(
            r#"<header><a class="brand" href="/console/overview">channel-bridge</a>
<nav><a href="/console/overview">Overview</a><a href="/console/turns">Turns</a><a href="/console/users">Users</a><a href="/console/failed">Failed</a><a href="/console/held">Held</a><a href="/console/connectors">Connectors</a><a href="/console/links">Links</a></nav>
<form method="post" action="/console/sign-out" class="signout"><input type="hidden" name="csrf" value="{csrf}"><span class="key">cbk_{prefix}_…</span><button type="submit" id="sign-out">Sign out</button></form></header>"#,
            csrf = esc(nav.csrf),
            prefix = esc(nav.key_prefix),
        ),
        None => r#"<header><span class="brand">channel-bridge</span></header>"#.to_owned(),
    };
    format!(
        r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="same-origin">
<title>{title} · channel-bridge console</title>
<style>{STYLE}</style>
<script src="{script}" defer></script></head>
<body>{header}<main><h1>{title}</h1>
{body}</main></body></html>"#,
        title = esc(title),
        script = super::script::url(),
    )
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

pub fn badge(status: &str) -> String {
    let tone = match status {
        "executed" | "sent" | "delivered" | "read" => "ok",
        "dispatch_failed" | "delivery_failed" | "failed" => "bad",
        "unknown" | "denied_unlinked" | "held" => "warn",
        _ => "neutral",
    };
    format!(r#"<span class="badge {tone}">{}</span>"#, esc(status))
}

const STYLE: &str = r#"
*{box-sizing:border-box}
body{margin:0;font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1d2330;background:#f4f6f9}
header{display:flex;flex-wrap:wrap;align-items:center;gap:.5rem 1rem;padding:.6rem 1rem;background:#1d2330;color:#fff}
header a{color:#fff;text-decoration:none}
.brand{font-weight:600;margin-right:auto}
nav{display:flex;flex-wrap:wrap;gap:.8rem}
nav a{opacity:.85}nav a:hover{opacity:1;text-decoration:underline}
.signout{display:flex;align-items:center;gap:.5rem;margin:0}
.key{font-family:ui-monospace,monospace;font-size:.8rem;opacity:.7}
main{max-width:60rem;margin:0 auto;padding:1rem}
h1{font-size:1.3rem;margin:.2rem 0 1rem}h2{font-size:1.05rem;margin:1.4rem 0 .5rem}
a{color:#1f5fbf}
button,.button{font:inherit;padding:.4rem .8rem;border:0;border-radius:6px;background:#1f5fbf;color:#fff;cursor:pointer}
header button{background:#3a4356}
input,select{font:inherit;padding:.4rem .5rem;border:1px solid #c5ccd8;border-radius:6px;max-width:100%;background:#fff}
form.filters{display:flex;flex-wrap:wrap;gap:.5rem;margin-bottom:1rem}
form.filters input[type=search]{flex:1 1 12rem;min-width:0}
.card{background:#fff;border:1px solid #dde2ea;border-radius:8px;padding:.7rem .9rem;margin-bottom:.6rem;overflow-wrap:anywhere}
.card .meta{display:flex;flex-wrap:wrap;gap:.3rem .8rem;font-size:.85rem;color:#5b6475}
.card .text{margin:.3rem 0 0}
.card .answer{margin:.2rem 0 0;color:#3a4356}
.card form{margin:.5rem 0 0}
.badge{display:inline-block;padding:0 .45rem;border-radius:999px;font-size:.8rem;background:#e6e9ef;color:#3a4356}
.badge.ok{background:#dff3e4;color:#1c6b34}.badge.bad{background:#fde2e1;color:#9b1c1c}.badge.warn{background:#fff1cc;color:#7a5b00}
pre{white-space:pre-wrap;overflow-wrap:anywhere;background:#fff;border:1px solid #dde2ea;border-radius:8px;padding:.7rem;margin:0;font:inherit}
dl{display:grid;grid-template-columns:max-content minmax(0,1fr);gap:.25rem 1rem;margin:0}
dt{color:#5b6475}dd{margin:0;overflow-wrap:anywhere}
.error{color:#9b1c1c}.notice{background:#dff3e4;border-radius:8px;padding:.5rem .8rem}
.alert{background:#fde2e1;border-radius:8px;padding:.5rem .8rem}
.signin{max-width:26rem}.signin input{width:100%;margin:.3rem 0 .8rem}
.empty{color:#5b6475}
a.card{display:block;color:inherit;text-decoration:none}a.card:hover{border-color:#1f5fbf}
.card .who{display:block}.sub{font-size:.85rem;color:#5b6475;font-weight:normal}
.card.fresh{border-color:#1c6b34;box-shadow:0 0 0 2px #dff3e4}
.label{margin:.5rem 0 .15rem;font-size:.8rem;color:#5b6475;text-transform:uppercase;letter-spacing:.03em}
.exchange pre{padding:.45rem .6rem}.exchange pre.answer{background:#f4f8ff}
ol.parts{margin:.2rem 0 0;padding-left:1.4rem}ol.parts li{margin:.15rem 0;overflow-wrap:anywhere}
form.stack{display:grid;gap:.6rem;margin-top:.6rem;max-width:40rem}
form.stack label{display:grid;gap:.2rem;font-size:.9rem}
form.stack small{color:#5b6475;font-size:.8rem}
form.stack input,form.stack select,form.stack textarea{width:100%}
textarea{font:inherit;padding:.4rem .5rem;border:1px solid #c5ccd8;border-radius:6px;background:#fff;resize:vertical}
form.stack button{justify-self:start}
form.inline{display:inline-block;margin:.5rem .5rem 0 0}
button.danger{background:#9b1c1c}
details>summary{cursor:pointer;color:#1f5fbf}
details.card>summary{font-weight:600}
details.rotate{margin-top:.5rem}
code{font-family:ui-monospace,monospace;font-size:.85rem;overflow-wrap:anywhere}
.totals{display:flex;flex-wrap:wrap;gap:.5rem;margin:0 0 1rem}.totals>div{background:#fff;border:1px solid #dde2ea;border-radius:8px;padding:.4rem .7rem;flex:1 1 7rem}
.totals dt{font-size:.8rem}.totals dd{font-size:1.2rem;font-weight:600}
figure.chart{margin:0 0 1rem;background:#fff;border:1px solid #dde2ea;border-radius:8px;padding:.5rem}figure.chart svg{display:block;width:100%;max-width:42rem;height:auto}
.scroll{overflow-x:auto}table.hours{border-collapse:collapse;width:100%;font-size:.8rem;margin-top:.5rem;font-variant-numeric:tabular-nums;overflow-wrap:normal}
table.hours th,table.hours td{padding:.15rem .25rem;text-align:right;white-space:nowrap;border-bottom:1px solid #eef0f4}abbr{text-decoration:none}
.chips{list-style:none;display:flex;flex-wrap:wrap;gap:.35rem .5rem;padding:0;margin:.2rem 0 0}.chips li{display:flex;flex-wrap:wrap;align-items:baseline;gap:.3rem}
.chip{display:inline-block;padding:.05rem .55rem;border:1px solid #c5ccd8;border-radius:6px;background:#f4f6f9;font-size:.9rem}
.chip.primary{border-color:#1f5fbf;color:#1f5fbf}.chip.danger{border-color:#9b1c1c;color:#9b1c1c}
li[data-chosen] .chip{background:#dff3e4;border-color:#1c6b34;color:#1c6b34;font-weight:600}.chosen{color:#1c6b34;font-size:.85rem}
.url{font-family:ui-monospace,monospace;font-size:.8rem;color:#5b6475;overflow-wrap:anywhere}
.choices{margin:.3rem 0 0}.tap{margin:.2rem 0 0}.tap small{color:#5b6475}.edit{font-size:.8rem;color:#5b6475;margin-left:.3rem}
.vh{position:absolute;width:1px;height:1px;padding:0;margin:-1px;overflow:hidden;clip:rect(0 0 0 0);clip-path:inset(50%);white-space:nowrap;border:0}
.reactions{margin:.3rem 0 0}.card>.reactions{margin:0}.tally{margin:.1rem 0 .2rem;font-weight:600}.emoji{font-size:1.05rem;font-weight:normal}
.reaction-list{list-style:none;padding:0;margin:0;display:grid;gap:.15rem}.reaction-list li{overflow-wrap:anywhere}
.reaction .by{font-family:ui-monospace,monospace;font-size:.85rem}.reaction time,.reaction small{color:#5b6475;font-size:.85rem}
.reaction.removed{color:#5b6475}.removed-note{font-style:italic}
.totals>div.feedback{flex:2 1 14rem}.totals small{display:block;font-size:.8rem;font-weight:normal;color:#5b6475}
.copyable{display:flex;gap:.4rem}.copyable input{flex:1 1 auto;min-width:0;font-family:ui-monospace,monospace;font-size:.85rem}
@media (max-width:480px){main{padding:.6rem}dl{grid-template-columns:minmax(0,1fr)}dt{margin-top:.4rem}}
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_turns_markup_and_quotes_into_text() {
        assert_eq!(
            esc(r#"<script>alert("x")</script> & 'y'"#),
            "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &#39;y&#39;"
        );
    }

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
