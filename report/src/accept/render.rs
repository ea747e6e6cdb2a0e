//! The acceptance report in the shared formats (see [`crate::report::render`]).

use plotters::prelude::*;

use super::analyse::AcceptReport;
use super::fmt_size;
use crate::report::render::{Format, Row, Table, html_escape, html_page, tables_to};

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or("n/a".into(), |x| format!("{x:.digits$}"))
}

/// The report as tables.
pub fn accept_tables(r: &AcceptReport) -> Vec<Table> {
    let mut tables = vec![checks_table(r), sizes_table(r)];
    tables.extend(slow_ranks_table(r));
    tables.extend(bom_drift_table(r));
    tables.push(questions_table(r));
    tables
}

/// The checks with the verdict, and the input problems as notes.
fn checks_table(r: &AcceptReport) -> Table {
    Table {
        title: format!("Acceptance: {}", r.verdict.to_uppercase()),
        columns: vec!["status".into(), "observed".into(), "expected".into()],
        rows: r
            .checks
            .iter()
            .map(|c| {
                Row::text(
                    &c.id,
                    "",
                    vec![c.status.into(), c.observed.clone(), c.expected.clone()],
                )
            })
            .collect(),
        notes: r
            .problems
            .iter()
            .map(|p| format!("input problem: {p}"))
            .collect(),
    }
}

/// One row per collective and size (dtype, redop, root) over every run, the runs as a note.
fn sizes_table(r: &AcceptReport) -> Table {
    Table {
        title: "Per size, across runs".into(),
        columns: [
            "runs",
            "busbw mean",
            "busbw min",
            "busbw max",
            "in-place busbw",
            "algbw mean",
            "time min",
            "time avg",
            "time max",
            "p95",
            "p99",
            "wrong",
            "CV %",
            "outlier runs",
        ]
        .map(String::from)
        .to_vec(),
        rows: r
            .sizes
            .iter()
            .map(|s| {
                Row::text(
                    &format!(
                        "{} {} {} {}{}",
                        s.collective_name(),
                        fmt_size(s.size_b),
                        s.dtype,
                        s.redop,
                        s.root
                            .filter(|r| *r >= 0)
                            .map_or(String::new(), |r| format!(" root {r}"))
                    ),
                    "GB/s, µs",
                    vec![
                        s.runs.to_string(),
                        format!("{:.2}", s.busbw_mean_gbps),
                        format!("{:.2}", s.busbw_min_gbps),
                        format!("{:.2}", s.busbw_max_gbps),
                        opt(s.busbw_in_place_mean_gbps, 2),
                        format!("{:.2}", s.algbw_mean_gbps),
                        format!("{:.2}", s.time_min_us),
                        format!("{:.2}", s.time_avg_us),
                        format!("{:.2}", s.time_max_us),
                        opt(s.p95_us, 2),
                        opt(s.p99_us, 2),
                        s.wrong.map_or("N/A".into(), |w| format!("{w}")),
                        opt(s.cv_pct, 2),
                        s.outlier_runs.len().to_string(),
                    ],
                )
            })
            .collect(),
        notes: vec![format!(
            "{} run(s): {}",
            r.runs.len(),
            r.runs
                .iter()
                .map(|x| format!(
                    "{} ({}, {}, {} ranks on {} hosts)",
                    x.file,
                    x.form,
                    x.collective.as_deref().unwrap_or("collective unknown"),
                    x.ranks,
                    x.hosts
                ))
                .collect::<Vec<_>>()
                .join("; ")
        )],
    }
}

/// The ranks slower than the median rank, when there are any.
fn slow_ranks_table(r: &AcceptReport) -> Option<Table> {
    if r.outlier_ranks.is_empty() {
        return None;
    }
    Some(Table {
        title: "Slow ranks".into(),
        columns: vec!["host".into(), "sizes".into(), "worst excess %".into()],
        rows: r
            .outlier_ranks
            .iter()
            .map(|o| {
                Row::text(
                    &format!("{} rank {}", o.file, o.rank),
                    "",
                    vec![
                        o.host.clone().unwrap_or_default(),
                        o.sizes.to_string(),
                        format!("{:.1}", o.worst_skew_pct),
                    ],
                )
            })
            .collect(),
        notes: vec![],
    })
}

/// The fields that differ across the nodes' BOMs, when any do.
fn bom_drift_table(r: &AcceptReport) -> Option<Table> {
    let b = r.bom.as_ref().filter(|b| !b.drift.is_empty())?;
    Some(Table {
        title: "BOM drift across nodes".into(),
        columns: vec!["values (nodes)".into()],
        rows: b
            .drift
            .iter()
            .map(|d| {
                Row::text(
                    &d.path,
                    "",
                    vec![
                        d.values
                            .iter()
                            .map(|(v, n)| format!("{v} ({})", n.join(",")))
                            .collect::<Vec<_>>()
                            .join(" | "),
                    ],
                )
            })
            .collect(),
        notes: vec![],
    })
}

/// The purchase questions that apply to the fabric seen.
fn questions_table(r: &AcceptReport) -> Table {
    Table {
        title: "Purchase questions".into(),
        columns: vec!["applies to".into(), "status".into(), "answer".into()],
        rows: r
            .questions
            .iter()
            .map(|q| {
                Row::text(
                    q.question,
                    q.id,
                    vec![q.applies_to.into(), q.status.into(), q.answer.clone()],
                )
            })
            .collect(),
        notes: vec![],
    }
}

/// The mean busbw by size, one line per collective (a log of several tests in turn has one
/// curve each, never a line jumping between them).
fn busbw_chart(r: &AcceptReport, svg: &mut String) -> Result<(), Box<dyn std::error::Error>> {
    let root = SVGBackend::with_string(svg, (760, 340)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut curves: std::collections::BTreeMap<&str, Vec<(f64, f64)>> = Default::default();
    for s in r.sizes.iter().filter(|s| s.size_b > 0) {
        curves
            .entry(s.collective_name())
            .or_default()
            .push(((s.size_b as f64).log2(), s.busbw_mean_gbps));
    }
    let pts = || curves.values().flatten();
    let (x0, x1) = pts().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), p| {
        (a.min(p.0), b.max(p.0))
    });
    let (x0, x1) = if x0.is_finite() && x1 > x0 {
        (x0, x1)
    } else {
        (0.0, 1.0)
    };
    let ymax = pts().map(|p| p.1).fold(1.0, f64::max);
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Bus bandwidth by message size (mean over runs)",
            ("sans-serif", 18),
        )
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(55)
        .build_cartesian_2d(x0..x1, 0f64..ymax * 1.1)?;
    chart
        .configure_mesh()
        .x_label_formatter(&|x| fmt_size(2f64.powf(x.round()) as u64))
        .x_desc("message size")
        .y_desc("busbw (GB/s)")
        .draw()?;
    for (i, (name, mut line)) in curves.clone().into_iter().enumerate() {
        line.sort_by(|a, b| a.0.total_cmp(&b.0));
        let color = if i == 0 {
            BLUE.to_rgba()
        } else {
            Palette99::pick(i).to_rgba()
        };
        chart
            .draw_series(LineSeries::new(line.clone(), color.stroke_width(2)))?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color));
        chart.draw_series(line.iter().map(|p| Circle::new(*p, 3, color.filled())))?;
    }
    if curves.len() > 1 {
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()?;
    }
    root.present()?;
    Ok(())
}

/// Renders the acceptance report.
pub fn render_accept(r: &AcceptReport, format: Format) -> String {
    match format {
        Format::Json => serde_json::to_string_pretty(r).unwrap_or_default() + "\n",
        Format::Html => {
            let mut body = String::new();
            for t in accept_tables(r) {
                body.push_str(&t.to_html());
            }
            let mut svg = String::new();
            match busbw_chart(r, &mut svg) {
                Ok(()) => body.push_str(&format!(
                    "<figure id=\"chart-busbw\" class=\"chart\">\n{svg}\n</figure>\n"
                )),
                Err(e) => body.push_str(&format!(
                    "<p class=\"note\">chart could not be drawn: {}</p>",
                    html_escape(&e.to_string())
                )),
            }
            html_page("fabric-check acceptance report", &body)
        }
        f => tables_to(f, &accept_tables(r)),
    }
}
