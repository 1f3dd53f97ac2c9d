//! Tables on a terminal, else the API's JSON unchanged. Table cells are made safe for a
//! terminal: control characters a chat user typed become spaces.

use std::io::Write;

use serde_json::Value;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Table,
    Json,
}

impl Format {
    pub fn choose(json: bool, table: bool, stdout_is_terminal: bool) -> Self {
        match (json, table) {
            (true, _) => Self::Json,
            (false, true) => Self::Table,
            (false, false) if stdout_is_terminal => Self::Table,
            (false, false) => Self::Json,
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub enum Show {
    /// As text, cut at this many characters.
    Text(usize),
    /// An RFC 3339 time as `YYYY-MM-DD HH:MM:SS` (UTC).
    Time,
    /// As text; this instead of `-` when null.
    OrElse(&'static str),
}

/// A column of a table, or a line of a record.
#[derive(Debug, Clone, Copy)]
pub struct Field {
    pub header: &'static str,
    pub pointer: &'static str,
    pub show: Show,
}

pub const fn text(header: &'static str, pointer: &'static str) -> Field {
    Field {
        header,
        pointer,
        show: Show::Text(60),
    }
}

pub const fn cut(header: &'static str, pointer: &'static str, max: usize) -> Field {
    Field {
        header,
        pointer,
        show: Show::Text(max),
    }
}

pub const fn time(header: &'static str, pointer: &'static str) -> Field {
    Field {
        header,
        pointer,
        show: Show::Time,
    }
}

pub const fn or_else(header: &'static str, pointer: &'static str, null: &'static str) -> Field {
    Field {
        header,
        pointer,
        show: Show::OrElse(null),
    }
}

pub fn cell(value: Option<&Value>, show: Show) -> String {
    let raw = match value {
        None | Some(Value::Null) => {
            return match show {
                Show::OrElse(null) => null.to_owned(),
                _ => "-".to_owned(),
            }
        }
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    };
    let clean: String = raw.chars().map(|c| if is_unsafe(c) { ' ' } else { c }).collect();
    match show {
        Show::Time => chrono::DateTime::parse_from_rfc3339(&clean)
            .map(|t| t.naive_utc().format("%Y-%m-%d %H:%M:%S").to_string())
            .unwrap_or(clean),
        Show::Text(max) => shorten(clean.trim(), max),
        Show::OrElse(_) => clean,
    }
}

/// Control characters and the bidirectional overrides that could reorder what follows.
fn is_unsafe(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

fn shorten(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut short: String = text.chars().take(max.saturating_sub(1)).collect();
    short.push('…');
    short
}

pub fn table(rows: &[Value], fields: &[Field]) -> String {
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|row| {
            fields
                .iter()
                .map(|f| cell(row.pointer(f.pointer), f.show))
                .collect()
        })
        .collect();
    let widths: Vec<usize> = fields
        .iter()
        .enumerate()
        .map(|(i, f)| {
            cells
                .iter()
                .map(|row| row[i].chars().count())
                .chain([f.header.chars().count()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let headers = fields.iter().map(|f| f.header.to_owned()).collect();
    std::iter::once(headers)
        .chain(cells)
        .map(|row| aligned(&row, &widths))
        .collect()
}

fn aligned(row: &[String], widths: &[usize]) -> String {
    let mut line = String::new();
    for (i, (text, width)) in row.iter().zip(widths).enumerate() {
        if i + 1 == row.len() {
            line.push_str(text);
        } else {
            line.push_str(text);
            line.push_str(&" ".repeat(width - text.chars().count() + 2));
        }
    }
    line.push('\n');
    line
}

pub fn record(value: &Value, fields: &[Field]) -> String {
    let width = fields.iter().map(|f| f.header.chars().count()).max().unwrap_or(0);
    fields
        .iter()
        .map(|f| {
            let name = f.header;
            let value = cell(value.pointer(f.pointer), f.show);
            format!("{name}{}  {value}\n", " ".repeat(width - name.chars().count()))
        })
        .collect()
}

pub struct Output {
    pub format: Format,
}

impl Output {
    /// `items` as a table, or `whole` (the API's answer) as JSON.
    pub fn list(&self, whole: &Value, items: &Value, fields: &[Field]) -> anyhow::Result<()> {
        match self.format {
            Format::Json => self.json(whole),
            Format::Table => {
                let rows = items.as_array().map(Vec::as_slice).unwrap_or_default();
                if rows.is_empty() {
                    return print("(none)\n");
                }
                print(&table(rows, fields))
            }
        }
    }

    pub fn record(&self, value: &Value, fields: &[Field]) -> anyhow::Result<()> {
        match self.format {
            Format::Json => self.json(value),
            Format::Table => print(&record(value, fields)),
        }
    }

    pub fn json(&self, value: &Value) -> anyhow::Result<()> {
        print(&format!("{}\n", serde_json::to_string_pretty(value)?))
    }

    pub fn done(&self, sentence: &str, value: &Value) -> anyhow::Result<()> {
        match self.format {
            Format::Json => self.json(value),
            Format::Table => print(&format!("{sentence}\n")),
        }
    }
}

/// Writes to stdout; a reader that went away (`| head`) is not an error.
pub fn print(text: &str) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(text.as_bytes()).and_then(|()| stdout.flush()) {
        Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => Ok(other?),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_terminal_gets_a_table_and_a_pipe_json_unless_a_flag_says_otherwise() {
        assert_eq!(Format::choose(false, false, true), Format::Table);
        assert_eq!(Format::choose(false, false, false), Format::Json);
        assert_eq!(Format::choose(true, false, true), Format::Json);
        assert_eq!(Format::choose(false, true, false), Format::Table);
    }

    #[test]
    fn columns_are_aligned_and_cells_are_cut_and_made_safe_for_a_terminal() {
        let rows = [
            json!({"id": "a", "text": "hello\n\u{1b}[31mred", "at": "2026-11-22T09:30:00.123456Z", "n": null}),
            json!({"id": "bbbb", "text": "x".repeat(50), "at": null, "n": 3}),
        ];
        let fields = [
            text("ID", "/id"),
            cut("TEXT", "/text", 14),
            time("AT", "/at"),
            or_else("N", "/n", "default"),
        ];
        let printed = table(&rows, &fields);
        let lines: Vec<&str> = printed.lines().collect();
        assert_eq!(lines[0], "ID    TEXT            AT                   N");
        assert_eq!(lines[1], "a     hello  [31mred  2026-11-22 09:30:00  default");
        assert_eq!(lines[2], "bbbb  xxxxxxxxxxxxx…  -                    3");
        assert!(!printed.contains('\u{1b}'));
    }

    #[test]
    fn a_record_lines_up_its_values() {
        let value = json!({"slug": "acme", "max_in_flight": null});
        let printed = record(
            &value,
            &[
                text("slug", "/slug"),
                or_else("max_in_flight", "/max_in_flight", "default"),
            ],
        );
        assert_eq!(printed, "slug           acme\nmax_in_flight  default\n");
    }
}
