//! The console's first page: the tenant's last 24 hours, hour by hour (`db::overview`), as
//! an SVG chart built here, with the same figures as text for whoever cannot see it. No
//! script: the SVG is markup, each bar and point with its hour and value as a `<title>` and
//! as data attributes.

use std::fmt::Write;

use axum::extract::State;
use chrono::{DateTime, TimeDelta, Utc};

use super::error::PageResult;
use super::pages::ok_page;
use super::session::SignedIn;
use crate::db::overview::{Feedback, Figures, Hour, Overview};
use crate::error::AppError;
use crate::http::state::AppState;

pub async fn overview(State(state): State<AppState>, signed_in: SignedIn) -> PageResult {
    let mut tx = crate::db::TenantTx::begin(&state.pool, signed_in.session.tenant)
        .await
        .map_err(AppError::from)?;
    let overview = crate::db::overview::last_day(&mut tx, Utc::now())
        .await
        .map_err(AppError::from)?;
    tx.commit().await.map_err(AppError::from)?;
    ok_page("Overview", &signed_in, &render(&overview))
}

fn render(overview: &Overview) -> String {
    let mut body = String::from(
        r#"<p class="empty">The last 24 hours, hour by hour (UTC): turns from users, answers, failures, turns held for a person, and how long the agent took.</p>"#,
    );
    body.push_str(&totals(&overview.total, &overview.feedback));
    body.push_str(&chart(overview));
    body.push_str(&table(&overview.hours));
    body
}

// ---------------------------------------------------------------------------------------
// Text

fn latency(ms: Option<f64>) -> String {
    match ms {
        None => "—".to_owned(),
        Some(ms) if ms < 1000.0 => format!("{ms:.0} ms"),
        Some(ms) => format!("{:.1} s", ms / 1000.0),
    }
}

/// A latency scale's top (a round number of milliseconds), short enough for the margin.
fn scale_latency(ms: f64) -> String {
    if ms < 1000.0 {
        format!("{ms:.0}ms")
    } else {
        format!("{:.0}s", ms / 1000.0)
    }
}

fn hour_label(start: DateTime<Utc>) -> String {
    start.format("%H:00").to_string()
}

/// The hour as a data attribute: RFC 3339, UTC, to the second.
fn hour_key(start: DateTime<Utc>) -> String {
    start.format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// "67 %" of 👍 among 👍 and 👎, under it the counts and how many answers were rated.
fn feedback(feedback: &Feedback, answers: i64) -> String {
    let share = feedback
        .positive_share()
        .map(|share| format!("{share:.0} % positive"))
        .unwrap_or_else(|| "—".to_owned());
    let counts = match feedback.rated {
        0 => "no rated answers".to_owned(),
        rated => format!(
            r#"<span aria-hidden="true">{positive} 👍 · {negative} 👎</span><span class="vh">{positive} positive, {negative} negative</span> · {rated} of {answers} answers rated"#,
            positive = feedback.positive,
            negative = feedback.negative,
        ),
    };
    format!(
        r#"<div class="feedback"><dt>Feedback</dt><dd id="total-feedback"><span id="feedback-share">{share}</span><small id="feedback-counts">{counts}</small></dd></div>"#
    )
}

fn totals(total: &Figures, feedback_figures: &Feedback) -> String {
    format!(
        r#"<dl class="totals" id="totals">
<div><dt>Turns</dt><dd id="total-turns">{turns}</dd></div>
<div><dt>Answers</dt><dd id="total-answers">{answers}</dd></div>
<div><dt>Failures</dt><dd id="total-failures"><a href="/console/failed" id="to-failed">{failures}</a></dd></div>
<div><dt>Held</dt><dd id="total-held"><a href="/console/held" id="to-held">{held}</a></dd></div>
<div><dt>Median answer time</dt><dd id="total-median">{median}</dd></div>
<div><dt>95th percentile</dt><dd id="total-p95">{p95}</dd></div>{feedback}</dl>"#,
        turns = total.turns,
        answers = total.answers,
        failures = total.failures,
        held = total.held,
        median = latency(total.median_ms),
        p95 = latency(total.p95_ms),
        feedback = feedback(feedback_figures, total.answers),
    )
}

/// What a screen reader says for the chart.
fn description(overview: &Overview) -> String {
    let t = &overview.total;
    let busiest = overview
        .hours
        .iter()
        .filter(|h| h.figures.turns > 0)
        .max_by_key(|h| h.figures.turns)
        .map(|h| {
            format!(
                " The busiest hour was {} UTC, with {} turns.",
                hour_label(h.start),
                h.figures.turns
            )
        })
        .unwrap_or_default();
    format!(
        "In the last 24 hours: {} turns, {} answers, {} failures, {} held; the agent's median answer time {}, 95th percentile {}.{busiest}",
        t.turns,
        t.answers,
        t.failures,
        t.held,
        latency(t.median_ms),
        latency(t.p95_ms),
    )
}

fn table(hours: &[Hour]) -> String {
    let mut rows = String::new();
    for hour in hours.iter().rev() {
        let f = &hour.figures;
        let _ = write!(
            rows,
            r#"<tr data-hour="{key}"><th scope="row">{label}</th><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>"#,
            f.turns,
            f.answers,
            f.failures,
            f.held,
            latency(f.median_ms),
            latency(f.p95_ms),
            key = hour_key(hour.start),
            label = hour_label(hour.start),
        );
    }
    format!(
        r#"<details class="card" id="by-hour"><summary>Hour by hour, newest first</summary>
<div class="scroll"><table class="hours"><thead><tr><th scope="col">UTC</th><th scope="col">Turns</th><th scope="col"><abbr title="Answers">Ans.</abbr></th><th scope="col"><abbr title="Failures">Fail.</abbr></th><th scope="col">Held</th><th scope="col"><abbr title="Median answer time">p50</abbr></th><th scope="col"><abbr title="95th percentile answer time">p95</abbr></th></tr></thead>
<tbody>{rows}</tbody></table></div></details>"#
    )
}

// ---------------------------------------------------------------------------------------
// The chart: three bands over one hour axis, in a 480-wide view box that scales to the page
// (about 0.77 on a 390-pixel phone, so 13-unit text stays near 10 pixels).

const WIDTH: f64 = 480.0;
const LEFT: f64 = 48.0;
const RIGHT: f64 = 8.0;
const SLOT: f64 = (WIDTH - LEFT - RIGHT) / crate::db::overview::HOURS as f64;
const TURNS_TOP: f64 = 28.0;
const TURNS_HEIGHT: f64 = 110.0;
const TROUBLE_TOP: f64 = 172.0;
const TROUBLE_HEIGHT: f64 = 60.0;
const LATENCY_TOP: f64 = 266.0;
const LATENCY_HEIGHT: f64 = 80.0;
const AXIS: f64 = LATENCY_TOP + LATENCY_HEIGHT;
const HEIGHT: f64 = AXIS + 22.0;

const TURNS: &str = "#b9cdef";
const ANSWERS: &str = "#1f5fbf";
const FAILURES: &str = "#b42318";
const HELD: &str = "#b7791f";
const MEDIAN: &str = "#1c6b34";
const P95: &str = "#6b3fa0";

/// The scale's top: 1, 2 or 5 times a power of ten, at least `max` (and at least 1).
fn nice_max(max: f64) -> f64 {
    let max = max.max(1.0);
    let power = 10f64.powf(max.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|step| step * power)
        .find(|top| *top >= max)
        .unwrap_or(10.0 * power)
}

/// A horizontal band of the chart and its scale.
struct Band {
    top: f64,
    height: f64,
    scale: f64,
}

/// How one series' bars look within an hour's slot.
struct Series {
    name: &'static str,
    offset: f64,
    width: f64,
    color: &'static str,
}

impl Band {
    fn y(&self, value: f64) -> f64 {
        self.top + self.height - value / self.scale * self.height
    }

    /// Its legend above, its scale's top and zero at the left.
    fn frame(&self, svg: &mut String, legend: &[(&str, &str)], scale_top: &str) {
        let mut x = LEFT;
        for (color, name) in legend {
            let _ = write!(
                svg,
                r#"<rect x="{x:.1}" y="{y:.1}" width="10" height="10" fill="{color}"/><text x="{tx:.1}" y="{ty:.1}">{name}</text>"#,
                y = self.top - 20.0,
                tx = x + 14.0,
                ty = self.top - 11.0,
            );
            x += 28.0 + 7.5 * name.len() as f64;
        }
        let (top, bottom) = (self.top, self.top + self.height);
        let _ = write!(
            svg,
            r##"<line x1="{LEFT}" y1="{top:.1}" x2="{right:.1}" y2="{top:.1}" stroke="#e3e7ee"/><line x1="{LEFT}" y1="{bottom:.1}" x2="{right:.1}" y2="{bottom:.1}" stroke="#8a93a3"/><text x="{label_x:.1}" y="{top_y:.1}" text-anchor="end" font-size="11">{scale_top}</text><text x="{label_x:.1}" y="{bottom_y:.1}" text-anchor="end" font-size="11">0</text>"##,
            right = WIDTH - RIGHT,
            label_x = LEFT - 4.0,
            top_y = top + 4.0,
            bottom_y = bottom + 4.0,
        );
    }

    /// One bar of `series` in the hour's slot, its value in a data attribute and a title.
    fn bar(&self, svg: &mut String, series: &Series, slot: usize, hour: &Hour, value: i64) {
        let y = self.y(value as f64);
        let _ = write!(
            svg,
            r#"<rect class="bar" data-series="{name}" data-hour="{key}" data-value="{value}" x="{x:.1}" y="{y:.1}" width="{width:.1}" height="{h:.1}" fill="{color}"><title>{label} UTC · {name}: {value}</title></rect>"#,
            name = series.name,
            key = hour_key(hour.start),
            label = hour_label(hour.start),
            x = LEFT + slot as f64 * SLOT + series.offset,
            width = series.width,
            h = self.top + self.height - y,
            color = series.color,
        );
    }
}

fn volume_bars(svg: &mut String, hours: &[Hour]) {
    let max = hours.iter().map(|h| h.figures.turns as f64).fold(0.0, f64::max);
    let band = Band {
        top: TURNS_TOP,
        height: TURNS_HEIGHT,
        scale: nice_max(max),
    };
    band.frame(
        svg,
        &[(TURNS, "turns"), (ANSWERS, "answers")],
        &band.scale.to_string(),
    );
    let turns = Series {
        name: "turns",
        offset: 2.0,
        width: SLOT - 4.0,
        color: TURNS,
    };
    let answers = Series {
        name: "answers",
        offset: 5.0,
        width: SLOT - 10.0,
        color: ANSWERS,
    };
    for (slot, hour) in hours.iter().enumerate() {
        band.bar(svg, &turns, slot, hour, hour.figures.turns);
        band.bar(svg, &answers, slot, hour, hour.figures.answers);
    }
}

fn trouble_bars(svg: &mut String, hours: &[Hour]) {
    let max = hours
        .iter()
        .map(|h| h.figures.failures.max(h.figures.held) as f64)
        .fold(0.0, f64::max);
    let band = Band {
        top: TROUBLE_TOP,
        height: TROUBLE_HEIGHT,
        scale: nice_max(max),
    };
    band.frame(
        svg,
        &[(FAILURES, "failures"), (HELD, "held")],
        &band.scale.to_string(),
    );
    let half = (SLOT - 4.0) / 2.0;
    let failures = Series {
        name: "failures",
        offset: 2.0,
        width: half,
        color: FAILURES,
    };
    let held = Series {
        name: "held",
        offset: 2.0 + half,
        width: half,
        color: HELD,
    };
    for (slot, hour) in hours.iter().enumerate() {
        band.bar(svg, &failures, slot, hour, hour.figures.failures);
        band.bar(svg, &held, slot, hour, hour.figures.held);
    }
}

/// Median and p95 as lines, broken where an hour has no timed answer, a dot per hour that has.
fn latency_lines(svg: &mut String, hours: &[Hour]) {
    let max = hours
        .iter()
        .filter_map(|h| h.figures.p95_ms.or(h.figures.median_ms))
        .fold(0.0, f64::max);
    let band = Band {
        top: LATENCY_TOP,
        height: LATENCY_HEIGHT,
        scale: nice_max(max),
    };
    band.frame(
        svg,
        &[(MEDIAN, "median"), (P95, "p95")],
        &scale_latency(band.scale),
    );
    let median: fn(&Figures) -> Option<f64> = |f| f.median_ms;
    let p95: fn(&Figures) -> Option<f64> = |f| f.p95_ms;
    for (series, color, dash, pick) in [
        ("median", MEDIAN, "", median),
        ("p95", P95, r#" stroke-dasharray="4 3""#, p95),
    ] {
        // Points of consecutive timed hours, `|` where an hour has none.
        let mut line = String::new();
        let mut dots = String::new();
        for (slot, hour) in hours.iter().enumerate() {
            let Some(ms) = pick(&hour.figures) else {
                line.push('|');
                continue;
            };
            let (x, y) = (LEFT + (slot as f64 + 0.5) * SLOT, band.y(ms));
            let _ = write!(line, "{x:.1},{y:.1} ");
            let _ = write!(
                dots,
                r#"<circle class="point" data-series="{series}" data-hour="{key}" data-value="{ms:.0}" cx="{x:.1}" cy="{y:.1}" r="2.5" fill="{color}"><title>{label} UTC · {series}: {shown}</title></circle>"#,
                key = hour_key(hour.start),
                label = hour_label(hour.start),
                shown = latency(Some(ms)),
            );
        }
        for run in line.split('|').map(str::trim).filter(|run| run.contains(' ')) {
            let _ = write!(
                svg,
                r#"<polyline points="{run}" fill="none" stroke="{color}" stroke-width="1.5"{dash}/>"#
            );
        }
        svg.push_str(&dots);
    }
}

/// Every sixth hour is named under the axis, and the current one (ending at the edge).
fn hour_axis(svg: &mut String, hours: &[Hour]) {
    let last = hours.len().saturating_sub(1);
    for (slot, hour) in hours.iter().enumerate() {
        let (x, anchor) = match slot {
            _ if slot == last => (WIDTH - RIGHT, "end"),
            _ if slot % 6 == 0 && slot + 3 < last => (LEFT + (slot as f64 + 0.5) * SLOT, "middle"),
            _ => continue,
        };
        let _ = write!(
            svg,
            r#"<text x="{x:.1}" y="{y:.1}" text-anchor="{anchor}">{label}</text>"#,
            y = AXIS + 17.0,
            label = hour_label(hour.start),
        );
    }
}

fn chart(overview: &Overview) -> String {
    let hours = &overview.hours;
    let span = match (hours.first(), hours.last()) {
        (Some(first), Some(last)) => format!(
            "{} to {} UTC",
            first.start.format("%Y-%m-%d %H:00"),
            (last.start + TimeDelta::hours(1)).format("%H:00")
        ),
        _ => "the last 24 hours".to_owned(),
    };
    let mut svg = format!(
        r##"<figure class="chart"><svg id="overview-chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-labelledby="chart-title chart-desc" font-family="system-ui, sans-serif" font-size="13" fill="#3a4356" xmlns="http://www.w3.org/2000/svg">
<title id="chart-title">Turns, failures and answer times per hour, {span}</title>
<desc id="chart-desc">{desc}</desc>"##,
        desc = super::html::esc(&description(overview)),
    );
    volume_bars(&mut svg, hours);
    trouble_bars(&mut svg, hours);
    latency_lines(&mut svg, hours);
    hour_axis(&mut svg, hours);
    svg.push_str("</svg></figure>");
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hours(figures: impl Fn(usize) -> Figures) -> Overview {
        let first: DateTime<Utc> = "2026-03-10T00:00:00Z".parse().unwrap();
        Overview {
            hours: (0..24)
                .map(|i| Hour {
                    start: first + TimeDelta::hours(i as i64),
                    figures: figures(i),
                })
                .collect(),
            total: Figures::default(),
            feedback: Feedback::default(),
        }
    }

    #[test]
    fn scales_end_on_a_round_number() {
        let tops: Vec<f64> = [0.0, 1.0, 3.0, 7.0, 10.0, 11.0, 240.0, 5001.0]
            .into_iter()
            .map(nice_max)
            .collect();
        assert_eq!(tops, [1.0, 1.0, 5.0, 10.0, 10.0, 20.0, 500.0, 10_000.0]);
    }

    #[test]
    fn every_hour_has_a_bar_per_series_and_a_point_only_where_answers_were_timed() {
        let overview = hours(|i| Figures {
            turns: i as i64,
            median_ms: (i == 5 || i == 6).then_some(800.0),
            p95_ms: (i == 5 || i == 6).then_some(1500.0),
            ..Figures::default()
        });
        let svg = chart(&overview);
        for series in ["turns", "answers", "failures", "held"] {
            let bars = svg.matches(&format!(r#"data-series="{series}""#)).count();
            assert_eq!(bars, 24, "{series}");
        }
        assert!(svg.contains(r#"data-series="turns" data-hour="2026-03-10T07:00:00Z" data-value="7""#));
        assert_eq!(svg.matches(r#"class="point" data-series="median""#).count(), 2);
        assert_eq!(svg.matches("<polyline").count(), 2, "one run per series");
        assert!(svg.contains("<title>05:00 UTC · p95: 1.5 s</title>"));
    }

    #[test]
    fn feedback_reads_as_a_share_of_thumbs_up_with_its_counts() {
        let rated = Feedback {
            rated: 3,
            positive: 2,
            negative: 1,
        };
        let html = feedback(&rated, 5);
        assert!(
            html.contains(r#"<span id="feedback-share">67 % positive</span>"#),
            "{html}"
        );
        assert!(
            html.contains("2 👍 · 1 👎") && html.contains("3 of 5 answers rated"),
            "{html}"
        );
        let none = feedback(&Feedback::default(), 5);
        assert!(
            none.contains(">—<") && none.contains("no rated answers"),
            "{none}"
        );
    }

    #[test]
    fn latency_reads_in_milliseconds_then_seconds() {
        assert_eq!(latency(Some(812.4)), "812 ms");
        assert_eq!(latency(Some(2140.0)), "2.1 s");
        assert_eq!(latency(None), "—");
    }
}
