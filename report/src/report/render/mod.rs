//! Output formats shared by `report` and `accept`: a [`Table`] model rendered as a terminal
//! table, markdown or CSV; JSON comes straight from the serde types; HTML is the tables plus SVG
//! charts drawn with `plotters` and embedded inline, so the page is one self-contained file.
//!
//! Here: the [`Table`] model and its formats; `tables.rs`: the report's tables
//! ([`report_tables`]); `charts.rs`: its SVG charts ([`AxisScale`], [`fabric_colour`]).

use std::fmt::Write as _;

use super::aggregate::Report;

mod charts;
mod tables;

pub use charts::{AxisScale, fabric_colour};
pub use tables::report_tables;

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Aligned text for a terminal.
    Table,
    /// GitHub-flavoured markdown.
    Markdown,
    /// Comma-separated values (RFC 4180 quoting).
    Csv,
    /// Pretty JSON.
    Json,
    /// A self-contained HTML page with charts.
    Html,
}

impl std::str::FromStr for Format {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "table" => Ok(Self::Table),
            "markdown" | "md" => Ok(Self::Markdown),
            "csv" => Ok(Self::Csv),
            "json" => Ok(Self::Json),
            "html" => Ok(Self::Html),
            _ => Err(format!(
                "unknown format `{s}`; use table, markdown, csv, json or html"
            )),
        }
    }
}

/// Which value of a row is the better one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Better {
    /// Smaller is better.
    Lower,
    /// Larger is better.
    Higher,
    /// Not comparable.
    Neither,
}

/// One cell.
#[derive(Debug, Clone, PartialEq)]
pub struct Cell {
    /// What is shown.
    pub text: String,
    /// Marked as the better value of its row.
    pub better: bool,
}

/// One row: a metric with its unit and one cell per column.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// Metric name.
    pub label: String,
    /// Unit (`USD`, `%`, `GPU-h`, `s`...).
    pub unit: String,
    /// Cells.
    pub cells: Vec<Cell>,
}

impl Row {
    /// A row whose better value (by `better`) is marked when at least two values differ.
    pub fn compare(
        label: &str,
        unit: &str,
        better: Better,
        values: Vec<Option<(f64, String)>>,
    ) -> Self {
        let nums: Vec<f64> = values.iter().flatten().map(|(v, _)| *v).collect();
        let best = match better {
            Better::Lower => nums.iter().copied().reduce(f64::min),
            Better::Higher => nums.iter().copied().reduce(f64::max),
            Better::Neither => None,
        };
        let differ = nums.iter().any(|v| Some(*v) != best);
        let cells = values
            .into_iter()
            .map(|v| match v {
                Some((x, text)) => Cell {
                    text,
                    better: differ && nums.len() >= 2 && Some(x) == best,
                },
                None => Cell {
                    text: "n/a".into(),
                    better: false,
                },
            })
            .collect();
        Self {
            label: label.into(),
            unit: unit.into(),
            cells,
        }
    }

    /// A row of plain text cells.
    pub fn text(label: &str, unit: &str, cells: Vec<String>) -> Self {
        Self {
            label: label.into(),
            unit: unit.into(),
            cells: cells
                .into_iter()
                .map(|text| Cell {
                    text,
                    better: false,
                })
                .collect(),
        }
    }
}

/// A titled table with notes.
#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    /// Title.
    pub title: String,
    /// Column headings after `metric` and `unit`.
    pub columns: Vec<String>,
    /// Rows.
    pub rows: Vec<Row>,
    /// Lines printed under the table.
    pub notes: Vec<String>,
}

impl Table {
    fn has_marks(&self) -> bool {
        self.rows.iter().any(|r| r.cells.iter().any(|c| c.better))
    }

    /// Aligned text; the better value carries a `*`.
    pub fn to_text(&self) -> String {
        let mut out = format!("{}\n", self.title);
        let head: Vec<String> = ["metric".to_string(), "unit".to_string()]
            .into_iter()
            .chain(self.columns.iter().cloned())
            .collect();
        let body: Vec<Vec<String>> = self
            .rows
            .iter()
            .map(|r| {
                [r.label.clone(), r.unit.clone()]
                    .into_iter()
                    .chain(r.cells.iter().map(|c| {
                        if c.better {
                            format!("{} *", c.text)
                        } else {
                            c.text.clone()
                        }
                    }))
                    .collect()
            })
            .collect();
        let mut w: Vec<usize> = head.iter().map(|h| h.chars().count()).collect();
        for r in &body {
            for (i, c) in r.iter().enumerate() {
                if i < w.len() {
                    w[i] = w[i].max(c.chars().count());
                }
            }
        }
        let line = |cells: &[String]| {
            let mut s = String::new();
            for (i, c) in cells.iter().enumerate() {
                let pad = w[i].saturating_sub(c.chars().count());
                if i < 2 {
                    s.push_str(c);
                    s.push_str(&" ".repeat(pad));
                } else {
                    s.push_str(&" ".repeat(pad));
                    s.push_str(c);
                }
                s.push_str("  ");
            }
            s.trim_end().to_string() + "\n"
        };
        out.push_str(&line(&head));
        out.push_str(
            &(w.iter()
                .map(|n| "-".repeat(*n))
                .collect::<Vec<_>>()
                .join("  ")
                + "\n"),
        );
        for r in &body {
            out.push_str(&line(r));
        }
        if self.has_marks() {
            out.push_str("* better value\n");
        }
        for n in &self.notes {
            out.push_str(n);
            out.push('\n');
        }
        out
    }

    /// Markdown; the better value is bold.
    pub fn to_markdown(&self) -> String {
        let esc = |s: &str| s.replace('|', "\\|");
        let mut out = format!("### {}\n\n| metric | unit |", esc(&self.title));
        for c in &self.columns {
            let _ = write!(out, " {} |", esc(c));
        }
        out.push_str("\n|---|---|");
        out.push_str(&"---:|".repeat(self.columns.len()));
        out.push('\n');
        for r in &self.rows {
            let _ = write!(out, "| {} | {} |", esc(&r.label), esc(&r.unit));
            for c in &r.cells {
                if c.better {
                    let _ = write!(out, " **{}** |", esc(&c.text));
                } else {
                    let _ = write!(out, " {} |", esc(&c.text));
                }
            }
            out.push('\n');
        }
        if self.has_marks() {
            out.push_str("\nBold: the better value.\n");
        }
        for n in &self.notes {
            let _ = write!(out, "\n{n}\n");
        }
        out
    }

    /// CSV with a `table` column so several tables share one file; `better` lists the column
    /// holding the better value.
    pub fn to_csv(&self, out: &mut String, with_header: bool, width: usize) {
        let q = |s: &str| {
            if s.contains([',', '"', '\n']) {
                format!("\"{}\"", s.replace('"', "\"\""))
            } else {
                s.to_string()
            }
        };
        if with_header {
            out.push_str("table,metric,unit");
            for c in &self.columns {
                let _ = write!(out, ",{}", q(c));
            }
            for _ in self.columns.len()..width {
                out.push(',');
            }
            out.push_str(",better\n");
        }
        for r in &self.rows {
            let _ = write!(out, "{},{},{}", q(&self.title), q(&r.label), q(&r.unit));
            for c in &r.cells {
                let _ = write!(out, ",{}", q(&c.text));
            }
            for _ in r.cells.len()..width {
                out.push(',');
            }
            let better: Vec<&str> = r
                .cells
                .iter()
                .zip(&self.columns)
                .filter(|(c, _)| c.better)
                .map(|(_, h)| h.as_str())
                .collect();
            let _ = writeln!(out, ",{}", q(&better.join(";")));
        }
    }

    /// An HTML `<table>`; the better value has class `better`.
    pub fn to_html(&self) -> String {
        let mut out = format!(
            "<h2>{}</h2>\n<table>\n<thead><tr><th>metric</th><th>unit</th>",
            html_escape(&self.title)
        );
        for c in &self.columns {
            let _ = write!(out, "<th>{}</th>", html_escape(c));
        }
        out.push_str("</tr></thead>\n<tbody>\n");
        for r in &self.rows {
            let _ = write!(
                out,
                "<tr><td>{}</td><td>{}</td>",
                html_escape(&r.label),
                html_escape(&r.unit)
            );
            for c in &r.cells {
                if c.better {
                    let _ = write!(
                        out,
                        "<td class=\"better\">{} &#9650;</td>",
                        html_escape(&c.text)
                    );
                } else {
                    let _ = write!(out, "<td>{}</td>", html_escape(&c.text));
                }
            }
            out.push_str("</tr>\n");
        }
        out.push_str("</tbody></table>\n");
        for n in &self.notes {
            let _ = writeln!(out, "<p class=\"note\">{}</p>", html_escape(n));
        }
        out
    }
}

/// Escapes text for HTML.
pub fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Renders tables in a text format (not JSON or HTML).
pub fn tables_to(format: Format, tables: &[Table]) -> String {
    match format {
        Format::Markdown => tables
            .iter()
            .map(Table::to_markdown)
            .collect::<Vec<_>>()
            .join("\n"),
        Format::Csv => {
            let width = tables.iter().map(|t| t.columns.len()).max().unwrap_or(0);
            let mut out = String::new();
            for (i, t) in tables.iter().enumerate() {
                t.to_csv(&mut out, i == 0, width);
            }
            out
        }
        _ => tables
            .iter()
            .map(Table::to_text)
            .collect::<Vec<_>>()
            .join("\n"),
    }
}

/// Wraps body HTML into a self-contained page.
pub fn html_page(title: &str, body: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{}</title>\n<style>\n\
body{{font-family:sans-serif;margin:2em;color:#222}}table{{border-collapse:collapse;margin:1em 0}}\
td,th{{border:1px solid #ccc;padding:4px 8px;text-align:right}}td:first-child,td:nth-child(2),th:first-child{{text-align:left}}\
td.better{{background:#e3f5e1;font-weight:bold}}p.note{{color:#555;font-size:90%}}figure{{margin:1em 0}}\n</style>\n</head>\n<body>\n<h1>{}</h1>\n{}\n</body>\n</html>\n",
        html_escape(title),
        html_escape(title),
        body
    )
}

/// Renders the report in any format.
pub fn render_report(r: &Report, format: Format) -> String {
    match format {
        Format::Json => serde_json::to_string_pretty(r).unwrap_or_default() + "\n",
        Format::Html => {
            let mut body = String::new();
            for t in report_tables(r) {
                body.push_str(&t.to_html());
            }
            body.push_str(&charts::figures(r));
            html_page("fabric-check report: cost per accepted run", &body)
        }
        f => tables_to(f, &report_tables(r)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lower_cost_is_marked_and_a_lone_value_is_not() {
        let r = Row::compare(
            "c",
            "USD",
            Better::Lower,
            vec![Some((2.0, "2".into())), Some((1.0, "1".into())), None],
        );
        assert_eq!(
            r.cells.iter().map(|c| c.better).collect::<Vec<_>>(),
            [false, true, false]
        );
        let lone = Row::compare(
            "c",
            "USD",
            Better::Lower,
            vec![Some((2.0, "2".into())), None],
        );
        assert!(!lone.cells[0].better);
        let tie = Row::compare(
            "c",
            "USD",
            Better::Higher,
            vec![Some((2.0, "2".into())), Some((2.0, "2".into()))],
        );
        assert!(tie.cells.iter().all(|c| !c.better));
    }

    #[test]
    fn axis_labels_have_the_decimals_and_unit_their_range_needs() {
        // Step times a few milliseconds apart: ticks 0.0005 s apart need four decimals.
        let narrow = AxisScale::plain(0.2, 0.204, "s");
        let labels = narrow.labels(0.2, 0.204);
        assert_eq!(narrow.decimals, 4, "{labels:?}");
        assert_eq!(labels.first().map(String::as_str), Some("0.2000"));
        for (lo, hi, unit, first, second) in [
            (0.0, 877.5, "USD", "0", "100"),
            (0.0, 87_750.0, "k USD", "0", "10"),
            (0.0, 2_500.0, "USD", "0", "500"),
            (0.0, 8.775e7, "M USD", "0", "10"),
            (0.0, 0.9, "USD", "0.0", "0.1"),
            (0.0, 12_000.0, "k USD", "0", "2"),
        ] {
            let a = AxisScale::money(lo, hi, "USD");
            let labels = a.labels(lo, hi);
            assert_eq!(a.unit, unit, "{hi}");
            assert_eq!(&labels[..2], [first, second], "{hi}: {labels:?}");
            let mut d = labels.clone();
            d.dedup();
            assert_eq!(d, labels, "{hi}: no label twice");
        }
        assert_eq!(
            AxisScale::plain(1.0, 3.0, "s").labels(1.0, 3.0)[..2],
            ["1.0", "1.5"]
        );
        assert_eq!(
            AxisScale::plain(100.0, 500.0, "s").labels(100.0, 500.0)[..2],
            ["100", "150"]
        );
    }

    #[test]
    fn csv_quotes_commas_and_quotes() {
        let t = Table {
            title: "t".into(),
            columns: vec!["a,b".into()],
            rows: vec![Row::text("x \"y\"", "u", vec!["1".into()])],
            notes: vec![],
        };
        let mut out = String::new();
        t.to_csv(&mut out, true, 1);
        assert_eq!(
            out,
            "table,metric,unit,\"a,b\",better\nt,\"x \"\"y\"\"\",u,1,\n"
        );
    }
}
