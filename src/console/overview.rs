//! The console's first page: the tenant's last 24 hours, hour by hour (`db::overview`), as
//! a chart (`templates/console/overview.html`), with the same figures as text for whoever
//! cannot see it. No script: each bar and point has its hour and value as a `<title>` and
//! as data attributes.

use std::fmt::Write;

use askama::Template;
use axum::extract::State;
use chrono::{DateTime, Utc};

use super::error::PageResult;
use super::html::RenderPage;
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
    ok_page("/console/overview", "Overview", &signed_in, &render(&overview))
}

fn render(overview: &Overview) -> String {
    let t = &overview.total;
    OverviewHtml {
        total: t,
        median: latency(t.median_ms),
        p95: latency(t.p95_ms),
        feedback: feedback(&overview.feedback),
        title: title(&overview.hours),
        desc: description(overview),
        bands: vec![
            volume_band(&overview.hours),
            trouble_band(&overview.hours),
            latency_band(&overview.hours),
        ],
        axis: axis(&overview.hours),
        rows: overview.hours.iter().rev().map(row).collect(),
    }
    .render_page()
}

#[derive(Template)]
#[template(path = "console/overview.html")]
struct OverviewHtml<'a> {
    total: &'a Figures,
    median: String,
    p95: String,
    feedback: FeedbackView,
    title: String,
    desc: String,
    bands: Vec<BandView>,
    axis: Vec<AxisLabel>,
    rows: Vec<RowView>,
}

struct FeedbackView {
    share: String,
    /// `None`: no answer was rated.
    counts: Option<(i64, i64, i64)>,
}

/// One hour of the table, newest first.
struct RowView {
    key: String,
    label: String,
    figures: Figures,
    median: String,
    p95: String,
}

fn row(hour: &Hour) -> RowView {
    RowView {
        key: hour_key(hour.start),
        label: hour_label(hour.start),
        figures: hour.figures.clone(),
        median: latency(hour.figures.median_ms),
        p95: latency(hour.figures.p95_ms),
    }
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

/// "67 %" of 👍 among 👍 and 👎; the template adds the counts and how many answers were rated.
fn feedback(feedback: &Feedback) -> FeedbackView {
    FeedbackView {
        share: feedback
            .positive_share()
            .map(|share| format!("{share:.0} % positive"))
            .unwrap_or_else(|| "—".to_owned()),
        counts: (feedback.rated > 0).then_some((feedback.positive, feedback.negative, feedback.rated)),
    }
}

/// The chart's name: "… from 23:00 on 30 November to the current hour, 22:00 on 1 December
/// 2026 (UTC)".
fn title(hours: &[Hour]) -> String {
    let span = match (hours.first(), hours.last()) {
        (Some(first), Some(last)) => format!(
            "from {} to the current hour, {} (UTC)",
            first.start.format("%H:00 on %-d %B"),
            last.start.format("%H:00 on %-d %B %Y")
        ),
        _ => "over the last 24 hours".to_owned(),
    };
    format!("Turns, failures and answer times, hour by hour {span}")
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

// ---------------------------------------------------------------------------------------
// The chart: three bands over one hour axis. Each band's shapes are an SVG stretched to the
// card's width (`preserveAspectRatio="none"`, one unit an hour, 100 units high; lines and
// dots keep their stroke in pixels); its legend, scale and the hour axis are HTML text, so
// they keep their size at every width and a phone shows fewer hour labels, not smaller ones.

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

/// A band of the chart: its legend, its scale's top, and its shapes.
struct BandView {
    id: &'static str,
    /// `line` for the answer times, else `bars`.
    kind: &'static str,
    legend: Vec<Legend>,
    top: String,
    bars: Vec<Bar>,
    lines: Vec<Line>,
    points: Vec<Point>,
}

struct Legend {
    name: &'static str,
    color: &'static str,
    dashed: bool,
}

/// How one series' bars sit within an hour's slot (fractions of the hour).
struct Series {
    name: &'static str,
    offset: f64,
    width: f64,
    color: &'static str,
}

struct Bar {
    series: &'static str,
    key: String,
    value: i64,
    x: String,
    y: String,
    width: String,
    height: String,
    color: &'static str,
    title: String,
}

struct Line {
    points: String,
    color: &'static str,
    dashed: bool,
}

struct Point {
    series: &'static str,
    key: String,
    value: String,
    x: String,
    x2: String,
    y: String,
    color: &'static str,
    title: String,
}

/// Where `value` is on a band 100 units high whose top is `scale`.
fn y_of(value: f64, scale: f64) -> f64 {
    100.0 - value / scale * 100.0
}

fn bar(series: &Series, slot: usize, hour: &Hour, value: i64, scale: f64) -> Bar {
    let y = y_of(value as f64, scale);
    Bar {
        series: series.name,
        key: hour_key(hour.start),
        value,
        x: format!("{:.3}", slot as f64 + series.offset),
        y: format!("{y:.2}"),
        width: format!("{:.3}", series.width),
        height: format!("{:.2}", 100.0 - y),
        color: series.color,
        title: format!("{} UTC · {}: {value}", hour_label(hour.start), series.name),
    }
}

fn legend(items: &[(&'static str, &'static str)], dashed: &str) -> Vec<Legend> {
    items
        .iter()
        .map(|&(name, color)| Legend {
            name,
            color,
            dashed: name == dashed,
        })
        .collect()
}

/// Two series of bars from `pick`, on one scale.
fn bar_band(
    id: &'static str,
    hours: &[Hour],
    series: [Series; 2],
    pick: fn(&Figures) -> (i64, i64),
) -> BandView {
    let max = hours
        .iter()
        .map(|h| pick(&h.figures))
        .map(|(a, b)| a.max(b) as f64)
        .fold(0.0, f64::max);
    let scale = nice_max(max);
    let mut bars = Vec::new();
    for (slot, hour) in hours.iter().enumerate() {
        let (first, second) = pick(&hour.figures);
        bars.push(bar(&series[0], slot, hour, first, scale));
        bars.push(bar(&series[1], slot, hour, second, scale));
    }
    BandView {
        id,
        kind: "bars",
        legend: legend(
            &[
                (series[0].name, series[0].color),
                (series[1].name, series[1].color),
            ],
            "",
        ),
        top: scale.to_string(),
        bars,
        lines: Vec::new(),
        points: Vec::new(),
    }
}

fn volume_band(hours: &[Hour]) -> BandView {
    let turns = Series {
        name: "turns",
        offset: 0.1,
        width: 0.8,
        color: TURNS,
    };
    let answers = Series {
        name: "answers",
        offset: 0.25,
        width: 0.5,
        color: ANSWERS,
    };
    bar_band("band-volume", hours, [turns, answers], |f| (f.turns, f.answers))
}

fn trouble_band(hours: &[Hour]) -> BandView {
    let failures = Series {
        name: "failures",
        offset: 0.1,
        width: 0.4,
        color: FAILURES,
    };
    let held = Series {
        name: "held",
        offset: 0.5,
        width: 0.4,
        color: HELD,
    };
    bar_band("band-trouble", hours, [failures, held], |f| (f.failures, f.held))
}

/// Median and p95 as lines, broken where an hour has no timed answer, a dot per hour that has.
fn latency_band(hours: &[Hour]) -> BandView {
    let max = hours
        .iter()
        .filter_map(|h| h.figures.p95_ms.or(h.figures.median_ms))
        .fold(0.0, f64::max);
    let scale = nice_max(max);
    let median: fn(&Figures) -> Option<f64> = |f| f.median_ms;
    let p95: fn(&Figures) -> Option<f64> = |f| f.p95_ms;
    let mut band = BandView {
        id: "band-latency",
        kind: "line",
        legend: legend(&[("median", MEDIAN), ("p95", P95)], "p95"),
        top: scale_latency(scale),
        bars: Vec::new(),
        lines: Vec::new(),
        points: Vec::new(),
    };
    for (series, color, pick) in [("median", MEDIAN, median), ("p95", P95, p95)] {
        // Points of consecutive timed hours, `|` where an hour has none.
        let mut line = String::new();
        for (slot, hour) in hours.iter().enumerate() {
            let Some(ms) = pick(&hour.figures) else {
                line.push('|');
                continue;
            };
            let (x, y) = (slot as f64 + 0.5, y_of(ms, scale));
            let _ = write!(line, "{x:.2},{y:.2} ");
            band.points.push(Point {
                series,
                key: hour_key(hour.start),
                value: format!("{ms:.0}"),
                x: format!("{x:.2}"),
                x2: format!("{:.3}", x + 0.001),
                y: format!("{y:.2}"),
                color,
                title: format!("{} UTC · {series}: {}", hour_label(hour.start), latency(Some(ms))),
            });
        }
        for run in line.split('|').map(str::trim).filter(|run| run.contains(' ')) {
            band.lines.push(Line {
                points: run.to_owned(),
                color,
                dashed: series == "p95",
            });
        }
    }
    band
}

/// An hour under the axis: every third is named on a laptop, every sixth on a phone, counted
/// back from the current hour (so it is always named).
struct AxisLabel {
    label: String,
    every: u8,
}

fn axis(hours: &[Hour]) -> Vec<AxisLabel> {
    let last = hours.len().saturating_sub(1);
    hours
        .iter()
        .enumerate()
        .map(|(slot, hour)| AxisLabel {
            label: hour_label(hour.start),
            every: match last - slot {
                back if back % 6 == 0 => 6,
                back if back % 3 == 0 => 3,
                _ => 0,
            },
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use chrono::TimeDelta;

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
        let page = render(&overview);
        for series in ["turns", "answers", "failures", "held"] {
            let bars = page
                .matches(&format!(r#"class="bar" data-series="{series}""#))
                .count();
            assert_eq!(bars, 24, "{series}");
        }
        assert!(page.contains(r#"data-series="turns" data-hour="2026-03-10T07:00:00Z" data-value="7""#));
        assert_eq!(page.matches(r#"class="point" data-series="median""#).count(), 2);
        assert_eq!(page.matches("<polyline").count(), 2, "one run per series");
        assert!(page.contains("<title>05:00 UTC · p95: 1.5 s</title>"));
    }

    #[test]
    fn the_chart_names_its_span_in_words_and_the_axis_its_hours_back_from_now() {
        let overview = hours(|_| Figures::default());
        assert_eq!(
            title(&overview.hours),
            "Turns, failures and answer times, hour by hour from 00:00 on 10 March to the current hour, 23:00 on 10 March 2026 (UTC)"
        );
        let named: Vec<(String, u8)> = axis(&overview.hours)
            .into_iter()
            .filter(|a| a.every == 6)
            .map(|a| (a.label, a.every))
            .collect();
        let labels: Vec<&str> = named.iter().map(|(l, _)| l.as_str()).collect();
        assert_eq!(labels, ["05:00", "11:00", "17:00", "23:00"]);
    }

    #[test]
    fn feedback_reads_as_a_share_of_thumbs_up_with_its_counts() {
        let mut overview = hours(|_| Figures::default());
        overview.total.answers = 5;
        overview.feedback = Feedback {
            rated: 3,
            positive: 2,
            negative: 1,
        };
        let html = render(&overview);
        assert!(
            html.contains(r#"<span id="feedback-share">67 % positive</span>"#),
            "{html}"
        );
        assert!(
            html.contains("2 👍 · 1 👎") && html.contains("3 of 5 answers rated"),
            "{html}"
        );
        overview.feedback = Feedback::default();
        let none = render(&overview);
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
