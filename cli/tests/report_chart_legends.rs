//! The report's charts read at a glance at every scale: rendered from histories of 10 runs (on
//! one fabric and on two), 300 and 10,000 runs a fabric, each chart keeps its legend beside the
//! plot area, off every data mark; every mark lies in the plot area; the step-time strip dots a
//! bounded sample of the runs; the cost breakdown has one centred slot a priced fabric and no
//! empty one.
//!
//! The SVG says which is which: the report draws a chart's data in `<g class="marks">` (with
//! its plot area in `data-plot`) and its legend in `<g class="legend">` around a
//! `<rect class="legend-box">`.

mod chart_support;

use chart_support::{CHARTS, chart, chart_svg, history, overlap, render};

/// Stroke widths and circle radii may reach this far past the plot area's edge.
const EDGE: f64 = 4.0;

/// The scales: (runs a fabric, fabrics, days).
const SCALES: [(usize, &[&str], i64); 4] = [
    (10, &["ib"], 3),
    (10, &["ib", "roce"], 3),
    (300, &["ib", "roce", "eth"], 30),
    (10_000, &["ib", "roce"], 90),
];

#[test]
fn no_legend_covers_a_data_mark_and_every_mark_lies_in_its_plot_from_ten_to_ten_thousand_runs() {
    for (runs, fabrics, days) in SCALES {
        let dir = tempfile::tempdir().unwrap();
        let html = render(&history(runs, fabrics, days), dir.path());
        for id in CHARTS {
            let c = chart(chart_svg(&html, id));
            let at = format!("#{id} at {runs} runs a fabric");
            assert!(!c.marks.is_empty(), "{at} draws data");
            let legend = c.legend.unwrap_or_else(|| panic!("{at} has a legend"));
            assert!(
                !overlap(legend, c.plot),
                "{at}: the legend {legend:?} lies outside the plot area {:?}",
                c.plot
            );
            assert!(legend[2] <= c.width, "{at}: the legend fits the chart");
            for (tag, b) in &c.marks {
                assert!(
                    !overlap(legend, *b),
                    "{at}: a {tag} at {b:?} is under the legend {legend:?}"
                );
                assert!(
                    b[0] >= c.plot[0] - EDGE
                        && b[1] >= c.plot[1] - EDGE
                        && b[2] <= c.plot[2] + EDGE
                        && b[3] <= c.plot[3] + EDGE,
                    "{at}: a {tag} at {b:?} lies in the plot area {:?}",
                    c.plot
                );
            }
        }
    }
}

#[test]
fn the_step_time_strip_dots_every_run_at_ten_and_at_most_three_hundred_at_ten_thousand() {
    for (runs, fabrics, days) in [SCALES[1], SCALES[3]] {
        let dir = tempfile::tempdir().unwrap();
        let html = render(&history(runs, fabrics, days), dir.path());
        let c = chart(chart_svg(&html, "chart-steps"));
        let dots = c.marks.iter().filter(|(t, _)| t == "circle").count();
        assert_eq!(
            dots,
            fabrics.len() * runs.min(300),
            "one dot a run, at most 300 a fabric, at {runs} runs a fabric"
        );
        assert!(
            chart_svg(&html, "chart-steps").contains("opacity=\"0.35\""),
            "the dots are translucent"
        );
    }
}

#[test]
fn the_cost_breakdown_has_one_centred_slot_a_priced_fabric_and_no_empty_one() {
    for (runs, fabrics, days) in SCALES {
        let dir = tempfile::tempdir().unwrap();
        let html = render(&history(runs, fabrics, days), dir.path());
        let c = chart(chart_svg(&html, "chart-cost"));
        // ib and roce are priced; eth is not.
        let priced = fabrics.iter().filter(|f| **f != "eth").count();
        let mut columns: Vec<(f64, f64)> = c.marks.iter().map(|(_, b)| (b[0], b[2])).collect();
        columns.sort_by(|a, b| a.0.total_cmp(&b.0));
        columns.dedup();
        assert_eq!(
            columns.len(),
            priced,
            "one column of bars a priced fabric at {runs} runs on {fabrics:?}: {columns:?}"
        );
        let slot = (c.plot[2] - c.plot[0]) / priced as f64;
        for (k, (left, right)) in columns.iter().enumerate() {
            let centre = c.plot[0] + (k as f64 + 0.5) * slot;
            assert!(
                right - left > slot / 2.0 && ((left + right) / 2.0 - centre).abs() <= 2.0,
                "column {k} ({left}..{right}) fills slot {k}, centred at {centre}, at {runs} runs on {fabrics:?}"
            );
        }
    }
}
