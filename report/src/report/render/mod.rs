//! Output formats shared by `report` and `accept`: a [`Table`] model rendered as a terminal
//! table, markdown or CSV; JSON comes straight from the serde types; HTML is the tables plus SVG
//! charts drawn with `plotters` and embedded inline, so the page is one self-contained file.

use std::fmt::Write as _;

use plotters::prelude::*;
use rust_decimal::Decimal;
use rust_decimal::prelude::ToPrimitive;

use super::aggregate::{GroupReport, Report, Sampled};

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

/// `YYYY-MM-DDTHH:MM:SSZ` of Unix seconds.
fn iso(t: i64) -> String {
    format!("{}Z", super::sacct_text::utc_text(t))
}

fn money(d: Decimal, cur: &str) -> String {
    format!("{:.2} {cur}", d.round_dp(2))
}

fn sampled(s: &Sampled, digits: usize) -> Option<(f64, String)> {
    s.value.map(|v| (v, format!("{v:.digits$} (n={})", s.n)))
}

fn dnum(d: Decimal, dp: u32) -> (f64, String) {
    (
        d.to_f64().unwrap_or(0.0),
        format!("{:.*}", dp as usize, d.round_dp(dp)),
    )
}

/// The report as tables: the side-by-side worksheet, the cost breakdown and drain reasons.
pub fn report_tables(r: &Report) -> Vec<Table> {
    // A group whose field is empty in accounting (no partition recorded) gets a visible heading.
    let cols: Vec<String> = r
        .groups
        .iter()
        .map(|g| {
            if g.name.is_empty() {
                "(none)".to_string()
            } else {
                g.name.clone()
            }
        })
        .collect();
    let cur = r.currency.as_str();
    let per = |f: &dyn Fn(&GroupReport) -> Option<(f64, String)>| {
        r.groups.iter().map(f).collect::<Vec<_>>()
    };
    let mut rows = vec![
        Row::compare(
            "cost per accepted run",
            cur,
            Better::Lower,
            per(&|g| {
                g.cost
                    .as_ref()?
                    .per_accepted_run
                    .map(|d| (d.to_f64().unwrap_or(0.0), money(d, cur)))
            }),
        ),
        Row::compare(
            "cost per accepted output",
            cur,
            Better::Lower,
            per(&|g| {
                g.cost.as_ref()?.per_accepted_output.map(|d| {
                    (
                        d.to_f64().unwrap_or(0.0),
                        format!("{:.6} {cur}", d.round_dp(6)),
                    )
                })
            }),
        ),
        Row::compare(
            "fabric-adjusted cost",
            cur,
            Better::Neither,
            per(&|g| {
                g.cost
                    .as_ref()
                    .map(|c| (c.total.to_f64().unwrap_or(0.0), money(c.total, cur)))
            }),
        ),
        Row::compare(
            "accepted runs",
            "runs",
            Better::Neither,
            per(&|g| {
                Some((
                    g.accepted_runs as f64,
                    format!("{} of {}", g.accepted_runs, g.runs),
                ))
            }),
        ),
        Row::compare(
            "acceptance rate",
            "%",
            Better::Higher,
            per(&|g| sampled(&g.acceptance_rate_pct, 1)),
        ),
        Row::compare(
            "useful GPU utilisation",
            "%",
            Better::Higher,
            per(&|g| g.useful_utilisation_pct.map(|d| dnum(d, 1))),
        ),
        Row::compare(
            "failed-job and retry waste",
            "GPU-h",
            Better::Lower,
            per(&|g| {
                Some((
                    g.waste_gpu_h.to_f64().unwrap_or(0.0),
                    format!(
                        "{:.1} ({})",
                        g.waste_gpu_h.round_dp(1),
                        g.waste_pct
                            .map_or("n/a".into(), |p| format!("{:.1}%", p.round_dp(1)))
                    ),
                ))
            }),
        ),
        Row::compare(
            "idle GPU time",
            "GPU-h",
            Better::Lower,
            per(&|g| g.idle_gpu_h.map(|d| dnum(d, 1))),
        ),
        Row::compare(
            "drains per 1000 node-hours",
            "drains",
            Better::Lower,
            per(&|g| {
                g.drains_per_1000_node_h.map(|d| {
                    (
                        d.to_f64().unwrap_or(0.0),
                        format!("{:.2} (n={})", d.round_dp(2), g.drains),
                    )
                })
            }),
        ),
        Row::compare(
            "top drain reason",
            "check",
            Better::Neither,
            per(&|g| {
                g.top_drain_reasons
                    .first()
                    .map(|(k, n)| (0.0, format!("{k} ({n})")))
            }),
        ),
        Row::compare(
            "operations hours",
            "h",
            Better::Lower,
            per(&|g| g.cost.as_ref().map(|c| dnum(c.operations_h, 1))),
        ),
        Row::compare(
            "step time p50",
            "s",
            Better::Lower,
            per(&|g| sampled(&g.step_p50_s, 3)),
        ),
        Row::compare(
            "step time p95",
            "s",
            Better::Lower,
            per(&|g| sampled(&g.step_p95_s, 3)),
        ),
        Row::compare(
            "checkpoint share of wall time",
            "%",
            Better::Lower,
            per(&|g| sampled(&g.checkpoint_share_pct, 1)),
        ),
        Row::compare(
            "mean queue wait",
            "h",
            Better::Lower,
            per(&|g| sampled(&g.mean_queue_wait_h, 2)),
        ),
        Row::compare(
            "allocated GPU time",
            "GPU-h",
            Better::Neither,
            per(&|g| Some(dnum(g.allocated_gpu_h, 1))),
        ),
        Row::compare(
            "jobs read (untagged, unreadable tag)",
            "jobs",
            Better::Neither,
            per(&|g| {
                Some((
                    0.0,
                    format!("{} ({}, {})", g.records, g.untagged, g.unreadable_tags),
                ))
            }),
        ),
    ];
    rows.retain(|row| row.cells.iter().any(|c| c.text != "n/a"));
    let notes = side_by_side_notes(r);
    let mut tables = vec![Table {
        title: "Fabrics side by side".into(),
        columns: cols.clone(),
        rows,
        notes,
    }];
    tables.extend(cost_table(r, &cols, cur));
    tables.extend(drain_table(r, &cols));
    tables
}

/// The notes under the side-by-side table: the window, input warnings, small samples, groups
/// without a price or a drain rate, a short window, GPUs counted from the cost file.
fn side_by_side_notes(r: &Report) -> Vec<String> {
    let mut notes = vec![format!(
        "window: {} h ({} to {}, from the {}); grouped by {}; n = sample size.",
        r.window.hours.round_dp(2),
        iso(r.window.start_s),
        iso(r.window.end_s),
        if r.window.source == "given" {
            "command line"
        } else {
            "span of the jobs"
        },
        serde_json::to_value(r.group_by)
            .ok()
            .and_then(|v| v.as_str().map(String::from))
            .unwrap_or_default()
    )];
    for w in &r.inputs.warnings {
        notes.push(format!("input warning: {w}"));
    }
    let small: Vec<&str> = r
        .groups
        .iter()
        .filter(|g| g.runs < 30)
        .map(|g| g.name.as_str())
        .collect();
    if !small.is_empty() {
        notes.push(format!(
            "small sample (fewer than 30 runs): {}; read these columns as indications, not verdicts.",
            small.join(", ")
        ));
    }
    let unpriced: Vec<&str> = r
        .groups
        .iter()
        .filter(|g| g.cost.is_none())
        .map(|g| g.name.as_str())
        .collect();
    if !unpriced.is_empty() {
        notes.push(format!(
            "no cost entry for: {} (add one to the cost file to price them).",
            unpriced.join(", ")
        ));
    }
    let no_rate: Vec<String> = r
        .groups
        .iter()
        .filter(|g| g.drains_per_1000_node_h.is_none() && !g.node_h.is_zero())
        .map(|g| {
            format!(
                "{} ({} node-h, {} drains)",
                g.name,
                g.node_h.round_dp(2),
                g.drains
            )
        })
        .collect();
    if !no_rate.is_empty() {
        notes.push(format!(
            "no drain rate for {}: fewer than {} node-hours in the window, too few to give drains per 1000 node-hours; the counts are shown instead.",
            no_rate.join(", "),
            super::aggregate::MIN_NODE_H_FOR_RATE
        ));
    }
    if r.window.hours < Decimal::from(24) && r.groups.iter().any(|g| g.cost.is_some()) {
        notes.push(format!(
            "the window is {} h: fixed costs (operations hours per week, per drain) weigh on so little work that costs per run compare the window, not the fabrics; compare over weeks.",
            r.window.hours.round_dp(2)
        ));
    }
    if r.groups.iter().any(|g| g.gpus_from_cost_file) {
        notes.push("some jobs had no gres/gpu in their TRES; their GPUs were counted as nodes × gpus_per_node from the cost file.".into());
    }
    notes
}

/// The cost breakdown over the window, when any group is priced.
fn cost_table(r: &Report, cols: &[String], cur: &str) -> Option<Table> {
    if !r.groups.iter().any(|g| g.cost.is_some()) {
        return None;
    }
    let items: Vec<(&'static str, &'static str)> = r
        .groups
        .iter()
        .find_map(|g| g.cost.as_ref())
        .map(|c| c.lines.iter().map(|l| (l.item, l.kind)).collect())
        .unwrap_or_default();
    let mut rows: Vec<Row> = items
        .iter()
        .map(|(item, kind)| {
            let label = if *kind == "share" {
                format!("  of which {item}")
            } else {
                (*item).to_string()
            };
            Row::text(
                &label,
                cur,
                r.groups
                    .iter()
                    .map(|g| {
                        g.cost
                            .as_ref()
                            .and_then(|c| c.lines.iter().find(|l| l.item == *item))
                            .map_or("n/a".into(), |l| money(l.amount, cur))
                    })
                    .collect(),
            )
        })
        .collect();
    rows.push(Row::text(
        "total (spend lines only)",
        cur,
        r.groups
            .iter()
            .map(|g| {
                g.cost
                    .as_ref()
                    .map_or("n/a".into(), |c| money(c.total, cur))
            })
            .collect(),
    ));
    rows.push(Row::text(
        "capacity cost per GPU-hour",
        cur,
        r.groups
            .iter()
            .map(|g| {
                g.cost.as_ref().map_or("n/a".into(), |c| {
                    format!("{:.4} {cur}", c.capacity_cost_per_gpu_h.round_dp(4))
                })
            })
            .collect(),
    ));
    Some(Table {
        title: "Cost breakdown over the window".into(),
        columns: cols.to_vec(),
        rows,
        notes: vec!["\"of which\" lines are shares of the capital and running spend above, not added to the total (docs/cost-model.md).".into()],
    })
}

/// Drain reasons (first failing check) per group, when any group drained.
fn drain_table(r: &Report, cols: &[String]) -> Option<Table> {
    if !r.groups.iter().any(|g| g.drains > 0) {
        return None;
    }
    let mut reasons: Vec<String> = r
        .groups
        .iter()
        .flat_map(|g| g.top_drain_reasons.iter().map(|(k, _)| k.clone()))
        .collect();
    reasons.sort();
    reasons.dedup();
    let rows = reasons
        .iter()
        .map(|k| {
            Row::text(
                k,
                "drains",
                r.groups
                    .iter()
                    .map(|g| {
                        g.top_drain_reasons
                            .iter()
                            .find(|(x, _)| x == k)
                            .map_or("0".into(), |(_, n)| n.to_string())
                    })
                    .collect(),
            )
        })
        .collect();
    Some(Table {
        title: "Drain reasons (first failing check)".into(),
        columns: cols.to_vec(),
        rows,
        notes: vec![],
    })
}

const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

type ChartResult = Result<(), Box<dyn std::error::Error>>;

/// Labels on a value axis: plotters' default count, set explicitly so that [`AxisScale`]
/// computes the same ticks the chart draws.
const Y_LABELS: usize = 10;

/// How a value axis writes its tick labels so that they fit the data at every scale: the unit
/// that keeps the numbers short (`USD` below 10,000, `k USD` below 10 million, `M USD` below
/// 10 billion, `bn USD` above),
/// and the decimals the tick spacing needs. plotters puts ticks 1, 2 or 5 × 10^k apart, so
/// `k` decimals (for k < 0) make every label distinct: no "0k, 0k, 0k" under a thousand, no
/// "0.20, 0.20" on a narrow step-time range.
#[derive(Debug, Clone, PartialEq)]
pub struct AxisScale {
    /// What the values are divided by (1, 1000 or 1,000,000).
    pub divisor: f64,
    /// Decimals of every label.
    pub decimals: usize,
    /// The unit of the labels, for the axis description (`k USD`, `s`).
    pub unit: String,
}

impl AxisScale {
    /// An axis of money from `lo` to `hi` in `currency`.
    pub fn money(lo: f64, hi: f64, currency: &str) -> Self {
        let top = lo.abs().max(hi.abs());
        let (divisor, unit) = if top >= 1e10 {
            (1e9, format!("bn {currency}"))
        } else if top >= 1e7 {
            (1e6, format!("M {currency}"))
        } else if top >= 1e4 {
            (1e3, format!("k {currency}"))
        } else {
            (1.0, currency.to_string())
        };
        Self::with(lo, hi, divisor, unit)
    }

    /// An axis of plain values in `unit` (seconds).
    pub fn plain(lo: f64, hi: f64, unit: &str) -> Self {
        Self::with(lo, hi, 1.0, unit.to_string())
    }

    fn with(lo: f64, hi: f64, divisor: f64, unit: String) -> Self {
        let ticks = Self::ticks(lo, hi);
        let step = ticks
            .windows(2)
            .map(|w| w[1] - w[0])
            .fold(f64::INFINITY, f64::min)
            / divisor;
        let decimals = if step.is_finite() && step > 0.0 {
            (-step.log10() - 1e-9).ceil().clamp(0.0, 12.0) as usize
        } else {
            0
        };
        Self {
            divisor,
            decimals,
            unit,
        }
    }

    /// The values plotters puts ticks at on a value axis from `lo` to `hi`.
    pub fn ticks(lo: f64, hi: f64) -> Vec<f64> {
        use plotters::coord::ranged1d::Ranged;
        if !(lo.is_finite() && hi.is_finite() && hi > lo) {
            return Vec::new();
        }
        plotters::coord::types::RangedCoordf64::from(lo..hi).key_points(Y_LABELS)
    }

    /// The label of a value.
    pub fn label(&self, v: f64) -> String {
        let x = v / self.divisor;
        // No `-0`: a tick at zero reads 0.
        let x = if x.abs() < 0.5 * 10f64.powi(-(self.decimals as i32)) {
            0.0
        } else {
            x
        };
        format!("{x:.*}", self.decimals)
    }

    /// Every tick's label, as the chart draws them.
    pub fn labels(&self, lo: f64, hi: f64) -> Vec<String> {
        Self::ticks(lo, hi).iter().map(|v| self.label(*v)).collect()
    }
}

/// The tick count and the label of a day axis from day `d0` to `d1` (day numbers): ticks on
/// whole days only (a window of one day once drew "05-01, 05-01, 05-02"), at most eight.
fn day_axis(d0: i64, d1: i64) -> usize {
    ((d1 - d0 + 1).max(1) as usize + 1).min(8)
}

fn day_label(d: &f64) -> String {
    if (d - d.round()).abs() > 1e-6 {
        return String::new();
    }
    super::sacct_text::utc_date(d.round() as i64)[5..].to_string()
}

fn cost_chart(r: &Report, svg: &mut String) -> ChartResult {
    let priced: Vec<&GroupReport> = r.groups.iter().filter(|g| g.cost.is_some()).collect();
    let root = SVGBackend::with_string(svg, (760, 360)).into_drawing_area();
    root.fill(&WHITE)?;
    let max = priced
        .iter()
        .filter_map(|g| g.cost.as_ref())
        .map(|c| c.total.to_f64().unwrap_or(0.0))
        .fold(0.0, f64::max);
    // An empty or all-zero chart still gets an axis.
    let max = if max > 0.0 { max } else { 1.0 };
    let n = priced.len().max(1);
    let names: Vec<String> = priced.iter().map(|g| g.name.clone()).collect();
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("Cost breakdown per fabric ({})", r.currency),
            ("sans-serif", 18),
        )
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(80)
        .build_cartesian_2d((0..n as u32).into_segmented(), 0f64..max * 1.35)?;
    let axis = AxisScale::money(0.0, max * 1.35, &r.currency);
    chart
        .configure_mesh()
        .label_style(("sans-serif", 13))
        .axis_desc_style(("sans-serif", 14))
        .disable_x_mesh()
        .x_label_formatter(&|x| match x {
            SegmentValue::CenterOf(i) => names.get(*i as usize).cloned().unwrap_or_default(),
            _ => String::new(),
        })
        .y_labels(Y_LABELS)
        .y_label_formatter(&|v| axis.label(*v))
        .y_desc(format!("{} over the window", axis.unit))
        .x_desc("fabric")
        .draw()?;
    let items: Vec<&'static str> = priced
        .first()
        .and_then(|g| g.cost.as_ref())
        .map(|c| {
            c.lines
                .iter()
                .filter(|l| l.kind == "spend")
                .map(|l| l.item)
                .collect()
        })
        .unwrap_or_default();
    for (k, item) in items.iter().enumerate() {
        let colour = PART_PALETTE[k % PART_PALETTE.len()];
        let bars: Vec<Rectangle<(SegmentValue<u32>, f64)>> = priced
            .iter()
            .enumerate()
            .filter_map(|(i, g)| {
                let c = g.cost.as_ref()?;
                let below: f64 = c
                    .lines
                    .iter()
                    .filter(|l| l.kind == "spend")
                    .take(k)
                    .map(|l| l.amount.to_f64().unwrap_or(0.0))
                    .sum();
                let this = c
                    .lines
                    .iter()
                    .find(|l| l.item == *item)?
                    .amount
                    .to_f64()
                    .unwrap_or(0.0);
                let mut bar = Rectangle::new(
                    [
                        (SegmentValue::Exact(i as u32), below),
                        (SegmentValue::Exact(i as u32 + 1), below + this),
                    ],
                    colour.filled(),
                );
                bar.set_margin(0, 0, 20, 20);
                Some(bar)
            })
            .collect();
        chart
            .draw_series(bars)?
            .label(*item)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], colour.filled()));
    }
    chart
        .configure_series_labels()
        .label_font(("sans-serif", 13))
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

/// Colours of the parts of a whole (cost items, drain checks): none is a fabric's colour, so a
/// fabric's colour means that fabric on every chart.
const PART_PALETTE: [RGBColor; 9] = [
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(127, 127, 127),
    RGBColor(23, 190, 207),
    RGBColor(188, 189, 34),
    RGBColor(227, 119, 194),
    RGBColor(214, 39, 40),
    RGBColor(174, 199, 232),
];

/// The colour of the `k`-th fabric (group) on every chart.
pub fn fabric_colour(k: usize) -> (u8, u8, u8) {
    let c = PALETTE[k % PALETTE.len()];
    (c.0, c.1, c.2)
}

/// A fabric's median step times as a box plot each: the box is the middle half of the runs,
/// the whiskers the rest (1.5 IQR, plotters' Tukey rule), a fabric's colour per box.
fn step_chart(r: &Report, svg: &mut String) -> ChartResult {
    let root = SVGBackend::with_string(svg, (760, 340)).into_drawing_area();
    root.fill(&WHITE)?;
    let with: Vec<(usize, &GroupReport)> = r
        .groups
        .iter()
        .enumerate()
        .filter(|(_, g)| !g.step_samples_s.is_empty())
        .collect();
    let all: Vec<f32> = with
        .iter()
        .flat_map(|(_, g)| g.step_samples_s.iter().copied())
        .collect();
    let lo = all.iter().copied().fold(f32::INFINITY, f32::min);
    let hi = all.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let (lo, hi) = if lo.is_finite() && hi > lo {
        let pad = (hi - lo) * 0.15;
        ((lo - pad).max(0.0), hi + pad)
    } else if lo.is_finite() {
        ((lo * 0.8).max(0.0), lo * 1.2 + 0.1)
    } else {
        (0.0, 1.0)
    };
    let n = with.len().max(1) as u32;
    let names: Vec<String> = with
        .iter()
        .map(|(_, g)| format!("{} (n={} runs)", g.name, g.step_samples_s.len()))
        .collect();
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Step time per run (each run's median), by fabric",
            ("sans-serif", 18),
        )
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(60)
        .build_cartesian_2d((0..n - 1).into_segmented(), lo..hi)?;
    let axis = AxisScale::plain(f64::from(lo), f64::from(hi), "s");
    chart
        .configure_mesh()
        .label_style(("sans-serif", 13))
        .axis_desc_style(("sans-serif", 14))
        .disable_x_mesh()
        .x_label_formatter(&|x| match x {
            SegmentValue::CenterOf(i) => names.get(*i as usize).cloned().unwrap_or_default(),
            _ => String::new(),
        })
        .y_labels(Y_LABELS)
        .y_label_formatter(&|v| axis.label(f64::from(*v)))
        .y_desc("step time (s)")
        .x_desc("fabric")
        .draw()?;
    for (i, (k, g)) in with.iter().enumerate() {
        let colour = PALETTE[k % PALETTE.len()];
        let q = Quartiles::new(&g.step_samples_s);
        chart
            .draw_series(std::iter::once(
                Boxplot::new_vertical(SegmentValue::CenterOf(i as u32), &q)
                    .width(60)
                    .whisker_width(0.5)
                    .style(colour.stroke_width(2)),
            ))?
            .label(format!("{} median {:.3} s", g.name, q.median()))
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], colour.filled()));
        // The runs themselves, faint, beside the box.
        chart.draw_series(g.step_samples_s.iter().enumerate().map(|(j, v)| {
            let jitter = (j % 7) as i32 * 3 - 9;
            EmptyElement::at((SegmentValue::CenterOf(i as u32), *v))
                + Circle::new((jitter + 45, 0), 2, colour.mix(0.5).filled())
        }))?;
    }
    chart
        .configure_series_labels()
        .label_font(("sans-serif", 13))
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

/// The days of the report's window, `(first, last)` day numbers.
fn window_days(r: &Report) -> (i64, i64) {
    if r.window.end_s > r.window.start_s {
        (
            r.window.start_s.div_euclid(86_400),
            (r.window.end_s - 1).div_euclid(86_400),
        )
    } else {
        (0, 0)
    }
}

fn day_of(s: &str) -> i64 {
    super::sacct_text::parse_time(&format!("{s}T00:00:00")).unwrap_or(0) / 86_400
}

/// Drains per day over all fabrics, one bar a day stacked by the first failing check.
fn drains_chart(r: &Report, svg: &mut String) -> ChartResult {
    let root = SVGBackend::with_string(svg, (760, 340)).into_drawing_area();
    root.fill(&WHITE)?;
    let (d0, d1) = window_days(r);
    let mut by: std::collections::BTreeMap<(i64, &str), u64> = Default::default();
    for g in &r.groups {
        for (d, c, n) in &g.drains_by_day_and_check {
            *by.entry((day_of(d), c.as_str())).or_insert(0) += n;
        }
    }
    let mut checks: Vec<&str> = by.keys().map(|(_, c)| *c).collect();
    checks.sort_unstable();
    checks.dedup();
    let mut per_day: std::collections::BTreeMap<i64, u64> = Default::default();
    for ((d, _), n) in &by {
        *per_day.entry(*d).or_insert(0) += n;
    }
    let ymax = per_day.values().copied().max().unwrap_or(1).max(1);
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Nodes drained per day, by first failing check (all fabrics)",
            ("sans-serif", 18),
        )
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(50)
        .build_cartesian_2d(d0 as f64..(d1 + 1) as f64, 0u64..ymax + ymax / 3 + 1)?;
    chart
        .configure_mesh()
        .label_style(("sans-serif", 13))
        .axis_desc_style(("sans-serif", 14))
        .disable_x_mesh()
        .x_labels(day_axis(d0, d1))
        .x_label_formatter(&day_label)
        .y_label_formatter(&|v| v.to_string())
        .x_desc("day (UTC, MM-DD)")
        .y_desc("nodes drained")
        .draw()?;
    for (k, check) in checks.iter().enumerate() {
        let colour = PART_PALETTE[k % PART_PALETTE.len()];
        let bars: Vec<Rectangle<(f64, u64)>> = (d0..=d1)
            .filter_map(|d| {
                let this = *by.get(&(d, *check))?;
                let below: u64 = checks[..k].iter().filter_map(|c| by.get(&(d, *c))).sum();
                Some(Rectangle::new(
                    [(d as f64 + 0.15, below), (d as f64 + 0.85, below + this)],
                    colour.filled(),
                ))
            })
            .collect();
        let total: u64 = by
            .iter()
            .filter(|((_, c), _)| c == check)
            .map(|(_, n)| n)
            .sum();
        chart
            .draw_series(bars)?
            .label(format!("{check} ({total})"))
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], colour.filled()));
    }
    if !checks.is_empty() {
        chart
            .configure_series_labels()
            .label_font(("sans-serif", 13))
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()?;
    }
    root.present()?;
    Ok(())
}

/// A fabric's index (its colour), its figures and its points.
type FabricLine<'a> = (usize, &'a GroupReport, Vec<(f64, f64)>);

/// Cost per accepted run period by period, one line per priced fabric in its colour.
fn cost_time_chart(r: &Report, svg: &mut String) -> ChartResult {
    let root = SVGBackend::with_string(svg, (760, 340)).into_drawing_area();
    root.fill(&WHITE)?;
    let (d0, d1) = window_days(r);
    let series: Vec<FabricLine<'_>> = r
        .groups
        .iter()
        .enumerate()
        .filter(|(_, g)| !g.cost_over_time.is_empty())
        .map(|(k, g)| {
            let pts = g
                .cost_over_time
                .iter()
                .filter_map(|p| {
                    let v = p.per_accepted_run?.to_f64()?;
                    Some((day_of(&p.start) as f64 + f64::from(p.days) / 2.0, v))
                })
                .collect();
            (k, g, pts)
        })
        .collect();
    let ymax = series
        .iter()
        .flat_map(|(_, _, p)| p.iter().map(|(_, v)| *v))
        .fold(0.0, f64::max);
    let ymax = if ymax > 0.0 { ymax } else { 1.0 };
    let period = series
        .first()
        .and_then(|(_, g, _)| g.cost_over_time.first())
        .map_or(1, |p| p.days);
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!(
                "Cost per accepted run over time ({}, per {})",
                r.currency,
                if period == 1 {
                    "day".to_string()
                } else {
                    format!("{period} days")
                }
            ),
            ("sans-serif", 18),
        )
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(70)
        .build_cartesian_2d(d0 as f64..(d1 + 1) as f64, 0f64..ymax * 1.3)?;
    let axis = AxisScale::money(0.0, ymax * 1.3, &r.currency);
    chart
        .configure_mesh()
        .label_style(("sans-serif", 13))
        .axis_desc_style(("sans-serif", 14))
        .x_labels(day_axis(d0, d1))
        .x_label_formatter(&day_label)
        .y_labels(Y_LABELS)
        .y_label_formatter(&|v| axis.label(*v))
        .x_desc("day (UTC, MM-DD)")
        .y_desc(format!("{} per accepted run", axis.unit))
        .draw()?;
    for (k, g, pts) in &series {
        let colour = PALETTE[k % PALETTE.len()];
        chart
            .draw_series(LineSeries::new(pts.clone(), colour.stroke_width(3)))?
            .label(format!(
                "{} (window: {})",
                g.name,
                g.cost
                    .as_ref()
                    .and_then(|c| c.per_accepted_run)
                    .map_or("n/a".to_string(), |d| money(d, &r.currency))
            ))
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 14, y)], colour.stroke_width(3))
            });
        chart.draw_series(pts.iter().map(|p| Circle::new(*p, 4, colour.filled())))?;
    }
    if !series.is_empty() {
        chart
            .configure_series_labels()
            .label_font(("sans-serif", 13))
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()?;
    }
    root.present()?;
    Ok(())
}

fn figure(id: &str, draw: impl FnOnce(&mut String) -> ChartResult) -> String {
    let mut svg = String::new();
    match draw(&mut svg) {
        Ok(()) => format!("<figure id=\"{id}\" class=\"chart\">\n{svg}\n</figure>\n"),
        Err(e) => format!(
            "<p class=\"note\">chart {id} could not be drawn: {}</p>\n",
            html_escape(&e.to_string())
        ),
    }
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
            body.push_str(&figure("chart-cost", |s| cost_chart(r, s)));
            body.push_str(&figure("chart-cost-time", |s| cost_time_chart(r, s)));
            body.push_str(&figure("chart-steps", |s| step_chart(r, s)));
            body.push_str(&figure("chart-drains", |s| drains_chart(r, s)));
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
