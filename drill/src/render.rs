//! The drill's outputs: a text table, JSON (`fabric-check/drill/v1`), Prometheus gauges, and an
//! HTML section with two charts (time to detect per class, recall and precision per class) in
//! the report's page style.

use std::fmt::Write as _;

use fabric_report::report::render::{html_escape, html_page};
use plotters::prelude::*;

use crate::grade::ClassCurve;
use crate::score::{ClassScore, Scores};

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "-".to_owned(), |v| format!("{v:.digits$}"))
}

/// The text table: one row per class, the overall row, then the findings.
pub fn table(s: &Scores) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<17} {:>4} {:>4} {:>4} {:>6} {:>6} {:>3} {:>3} {:>6} {:>6} {:>6}  {:<22} {:>4} {:>7} {:>7}",
        "class",
        "runs",
        "inj",
        "det",
        "recall",
        "prec",
        "fp",
        "fd",
        "p50_s",
        "p95_s",
        "max_s",
        "detectors",
        "rq",
        "dstep_s",
        "gpu_h"
    );
    let row = |out: &mut String, c: &ClassScore| {
        let det: Vec<String> = c
            .detectors
            .iter()
            .map(|(d, n)| format!("{d}:{n}"))
            .collect();
        let _ = writeln!(
            out,
            "{:<17} {:>4} {:>4} {:>4} {:>6} {:>6} {:>3} {:>3} {:>6} {:>6} {:>6}  {:<22} {:>4} {:>7} {:>7.3}",
            if c.control {
                format!("{} (ctl)", c.class)
            } else {
                c.class.clone()
            },
            c.rounds,
            c.injections,
            c.detected,
            opt(c.recall, 2),
            opt(c.precision, 2),
            c.false_positives,
            c.false_drains,
            opt(c.ttd.p50_s, 1),
            opt(c.ttd.p95_s, 1),
            opt(c.ttd.max_s, 1),
            if det.is_empty() {
                "-".to_owned()
            } else {
                det.join(",")
            },
            c.requeues,
            opt(c.step_time_change_s, 3),
            c.gpu_h_lost
        );
    };
    for c in &s.per_class {
        row(&mut out, c);
    }
    let _ = writeln!(
        out,
        "{:<17} {:>4} {:>4} {:>4} {:>6} {:>6} {:>3} {:>3} {:>6} {:>6} {:>6}",
        "all",
        s.per_class.iter().map(|c| c.rounds).sum::<usize>(),
        s.injections,
        s.detected,
        opt(s.recall, 2),
        opt(s.precision, 2),
        s.false_positives,
        s.false_drains,
        opt(s.ttd.p50_s, 1),
        opt(s.ttd.p95_s, 1),
        opt(s.ttd.max_s, 1),
    );
    let lost: f64 = s.per_class.iter().filter_map(|c| c.cost_lost).sum();
    if let Some(cur) = &s.currency {
        let _ = writeln!(out, "GPU time lost to the drill's faults: {lost:.2} {cur}");
    }
    if !s.graded.is_empty() {
        out.push('\n');
        out.push_str(&graded_table(s));
    }
    out.push_str("\nfindings:\n");
    for f in &s.findings {
        let _ = writeln!(out, "- {f}");
    }
    out
}

/// The graded rounds' curves as text: per class and size, the rounds, the signals on the node
/// (recall at a fault size; at a control size, how many stayed quiet), drains, false positives
/// elsewhere and the measured bandwidth share.
pub fn graded_table(s: &Scores) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<17} {:>6} {:<7} {:>4} {:>4} {:>4} {:>6} {:>6} {:>3} {:>3} {:>9}",
        "graded class", "size", "", "inj", "sig", "drn", "recall", "quiet", "fp", "fd", "measured"
    );
    for c in &s.graded {
        for p in &c.points {
            let _ = writeln!(
                out,
                "{:<17} {:>6} {:<7} {:>4} {:>4} {:>4} {:>6} {:>6} {:>3} {:>3} {:>9}",
                c.class,
                p.size,
                if p.control { "control" } else { "fault" },
                p.injections,
                p.detected,
                p.drained,
                opt(p.recall, 2),
                opt(p.quiet, 2),
                p.false_positives,
                p.false_drains,
                p.measured_pct
                    .map_or_else(|| "-".to_owned(), |m| format!("{m:.0}%"))
            );
        }
    }
    out
}

/// The `--summary-line` lines of a graded drill: one per class (its curve), then, last, the
/// benchmark's `drill-graded:` line. Empty when no round was graded.
pub fn graded_lines(s: &Scores) -> Vec<String> {
    let mut out: Vec<String> = s.graded.iter().map(crate::grade::class_line).collect();
    if let Some(g) = &s.graded_summary {
        out.push(g.line());
    }
    out
}

/// The JSON document.
pub fn json(s: &Scores) -> String {
    serde_json::to_string_pretty(s).unwrap_or_default() + "\n"
}

/// Prometheus text-format gauges (for the node exporter's textfile collector).
pub fn prometheus(s: &Scores) -> String {
    let mut out = String::new();
    let gauge = |out: &mut String, name: &str, help: &str| {
        let _ = writeln!(
            out,
            "# HELP fabric_check_drill_{name} {help}\n# TYPE fabric_check_drill_{name} gauge"
        );
    };
    let overall: [(&str, &str, Option<f64>); 6] = [
        (
            "injections",
            "Faults injected by the last drill.",
            Some(s.injections as f64),
        ),
        (
            "recall_ratio",
            "Injected faults detected / injected.",
            s.recall,
        ),
        (
            "precision_ratio",
            "Detections on a faulted node / all detections.",
            s.precision,
        ),
        (
            "false_drains",
            "Drains of nodes without an injected fault.",
            Some(s.false_drains as f64),
        ),
        (
            "detect_p95_seconds",
            "95th percentile of injection-to-verdict time.",
            s.ttd.p95_s,
        ),
        ("classes", "Fault classes injected.", Some(s.classes as f64)),
    ];
    for (name, help, v) in overall {
        if let Some(v) = v {
            gauge(&mut out, name, help);
            let _ = writeln!(out, "fabric_check_drill_{name} {v}");
        }
    }
    let per: [(&str, &str, ClassFigure); 5] = [
        ("class_injections", "Faults of this class injected.", |c| {
            Some(c.injections as f64)
        }),
        ("class_recall_ratio", "Recall of this class.", |c| c.recall),
        ("class_precision_ratio", "Precision of this class.", |c| {
            c.precision
        }),
        (
            "class_false_drains",
            "False drains in rounds of this class.",
            |c| Some(c.false_drains as f64),
        ),
        (
            "class_detect_p50_seconds",
            "Median time to detect this class.",
            |c| c.ttd.p50_s,
        ),
    ];
    for (name, help, f) in per {
        gauge(&mut out, name, help);
        for c in &s.per_class {
            if let Some(v) = f(c) {
                let _ = writeln!(
                    out,
                    "fabric_check_drill_{name}{{class=\"{}\"}} {v}",
                    c.class
                );
            }
        }
    }
    out
}

type ChartResult = Result<(), Box<dyn std::error::Error>>;

/// One per-class figure of the Prometheus output.
type ClassFigure = fn(&ClassScore) -> Option<f64>;

const BLUE_: RGBColor = RGBColor(31, 119, 180);
const ORANGE_: RGBColor = RGBColor(255, 127, 14);

/// Time to detect per class: every sample as a dot, the median as a bar.
fn ttd_chart(s: &Scores, svg: &mut String) -> ChartResult {
    let classes: Vec<&ClassScore> = s.per_class.iter().filter(|c| !c.control).collect();
    let root = SVGBackend::with_string(svg, (760, 360)).into_drawing_area();
    root.fill(&WHITE)?;
    let hi = classes
        .iter()
        .flat_map(|c| c.ttd.samples_s.iter().copied())
        .fold(1.0f64, f64::max)
        * 1.15;
    let n = classes.len().max(1) as u32;
    let names: Vec<String> = classes.iter().map(|c| c.class.clone()).collect();
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Time to detect per class (dots: injections, bar: median)",
            ("sans-serif", 18),
        )
        .margin(10)
        .x_label_area_size(70)
        .y_label_area_size(50)
        .build_cartesian_2d((0..n - 1).into_segmented(), 0.0..hi)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .label_style(("sans-serif", 11))
        .x_label_formatter(&|x| match x {
            SegmentValue::CenterOf(i) => names.get(*i as usize).cloned().unwrap_or_default(),
            _ => String::new(),
        })
        .y_desc("seconds from injection to verdict or drain")
        .draw()?;
    for (i, c) in classes.iter().enumerate() {
        let x = SegmentValue::CenterOf(i as u32);
        if let Some(m) = c.ttd.p50_s {
            chart.draw_series(std::iter::once(Rectangle::new(
                [
                    (SegmentValue::Exact(i as u32), 0.0),
                    (SegmentValue::Exact(i as u32 + 1), m),
                ],
                BLUE_.mix(0.25).filled(),
            )))?;
        }
        chart.draw_series(
            c.ttd
                .samples_s
                .iter()
                .map(|v| Circle::new((x.clone(), *v), 3, BLUE_.filled())),
        )?;
    }
    root.present()?;
    Ok(())
}

/// Recall and precision per class, two bars each.
fn rp_chart(s: &Scores, svg: &mut String) -> ChartResult {
    let classes: Vec<&ClassScore> = s.per_class.iter().collect();
    let root = SVGBackend::with_string(svg, (760, 360)).into_drawing_area();
    root.fill(&WHITE)?;
    let n = classes.len().max(1) as u32;
    let names: Vec<String> = classes.iter().map(|c| c.class.clone()).collect();
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Recall (blue) and precision (orange) per class",
            ("sans-serif", 18),
        )
        .margin(10)
        .x_label_area_size(70)
        .y_label_area_size(50)
        .build_cartesian_2d(-0.5..f64::from(n) - 0.5, 0.0..1.05)?;
    // One tick per class at its centre, the class's two bars either side of it.
    chart
        .configure_mesh()
        .disable_x_mesh()
        .label_style(("sans-serif", 10))
        .x_labels(n as usize)
        .x_label_formatter(&|x| {
            let i = x.round();
            if (x - i).abs() < 0.01 && i >= 0.0 {
                names.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .y_desc("ratio")
        .draw()?;
    for (i, c) in classes.iter().enumerate() {
        let x = i as f64;
        if let Some(r) = c.recall {
            chart.draw_series(std::iter::once(Rectangle::new(
                [(x - 0.4, 0.0), (x - 0.02, r)],
                BLUE_.filled(),
            )))?;
        }
        if let Some(p) = c.precision {
            chart.draw_series(std::iter::once(Rectangle::new(
                [(x + 0.02, 0.0), (x + 0.4, p)],
                ORANGE_.filled(),
            )))?;
        }
    }
    root.present()?;
    Ok(())
}

/// One graded class's curve: per size, mildest first, the share of rounds that signalled on
/// the node: blue for a fault size (recall, should reach 1), orange for a control size (a
/// false positive rate, should stay 0).
fn curve_chart(c: &ClassCurve, svg: &mut String) -> ChartResult {
    let root = SVGBackend::with_string(svg, (480, 280)).into_drawing_area();
    root.fill(&WHITE)?;
    let n = c.points.len().max(1) as u32;
    let names: Vec<String> = c.points.iter().map(|p| p.size.clone()).collect();
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!(
                "{}: rounds that signalled, by size (blue: fault, orange: control)",
                c.class
            ),
            ("sans-serif", 13),
        )
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(45)
        .build_cartesian_2d((0..n - 1).into_segmented(), 0.0..1.05)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .label_style(("sans-serif", 11))
        .x_label_formatter(&|x| match x {
            SegmentValue::CenterOf(i) => names.get(*i as usize).cloned().unwrap_or_default(),
            _ => String::new(),
        })
        .y_desc("signalled / injected")
        .draw()?;
    for (i, p) in c.points.iter().enumerate() {
        if p.injections == 0 {
            continue;
        }
        let rate = p.detected as f64 / p.injections as f64;
        let color = if p.control { ORANGE_ } else { BLUE_ };
        chart.draw_series(std::iter::once(Rectangle::new(
            [
                (SegmentValue::Exact(i as u32), 0.0),
                (SegmentValue::Exact(i as u32 + 1), rate),
            ],
            color.filled(),
        )))?;
    }
    root.present()?;
    Ok(())
}

/// The graded part of the HTML section: the curves' table and one chart per class.
fn graded_html(s: &Scores, out: &mut String) {
    if s.graded.is_empty() {
        return;
    }
    out.push_str("<h3>Graded faults: recall by size</h3>\n");
    if let Some(g) = &s.graded_summary {
        let _ = writeln!(out, "<p>{}</p>", html_escape(&g.line()));
    }
    out.push_str("<table><thead><tr><th>class</th><th>size</th><th>kind</th><th>injections</th><th>signalled</th><th>drained</th><th>recall</th><th>quiet</th><th>false positives</th><th>false drains</th><th>measured share</th></tr></thead><tbody>\n");
    for c in &s.graded {
        for p in &c.points {
            let _ = writeln!(
                out,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                html_escape(&c.class),
                html_escape(&p.size),
                if p.control { "control" } else { "fault" },
                p.injections,
                p.detected,
                p.drained,
                opt(p.recall, 2),
                opt(p.quiet, 2),
                p.false_positives,
                p.false_drains,
                p.measured_pct
                    .map_or_else(|| "-".to_owned(), |m| format!("{m:.0} %"))
            );
        }
    }
    out.push_str("</tbody></table>\n");
    for c in &s.graded {
        let mut svg = String::new();
        match curve_chart(c, &mut svg) {
            Ok(()) => {
                let _ = writeln!(out, "<figure>{svg}</figure>");
            }
            Err(e) => {
                let _ = writeln!(
                    out,
                    "<p class=\"note\">no chart for {}: {}</p>",
                    html_escape(&c.class),
                    html_escape(&e.to_string())
                );
            }
        }
    }
}

/// The drill's HTML section: summary, the table, both charts, the graded curves, the findings.
pub fn html_section(s: &Scores) -> String {
    let mut out = String::from("<section id=\"drill\">\n<h2>Fault drill</h2>\n");
    let _ = writeln!(
        out,
        "<p>seed {}: {} classes, {} injections, recall {}, precision {}, false drains {}, time to detect p50 {} s, p95 {} s.</p>",
        s.seed,
        s.classes,
        s.injections,
        opt(s.recall, 3),
        opt(s.precision, 3),
        s.false_drains,
        opt(s.ttd.p50_s, 1),
        opt(s.ttd.p95_s, 1)
    );
    out.push_str("<table><thead><tr><th>class</th><th>rounds</th><th>injections</th><th>detected</th><th>recall</th><th>precision</th><th>false drains</th><th>p50 s</th><th>p95 s</th><th>max s</th><th>detectors</th><th>requeues</th><th>GPU-h lost</th></tr></thead><tbody>\n");
    for c in &s.per_class {
        let det: Vec<String> = c
            .detectors
            .iter()
            .map(|(d, n)| format!("{d} {n}"))
            .collect();
        let _ = writeln!(
            out,
            "<tr><td>{}{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.3}</td></tr>",
            html_escape(&c.class),
            if c.control { " (control)" } else { "" },
            c.rounds,
            c.injections,
            c.detected,
            opt(c.recall, 2),
            opt(c.precision, 2),
            c.false_drains,
            opt(c.ttd.p50_s, 1),
            opt(c.ttd.p95_s, 1),
            opt(c.ttd.max_s, 1),
            html_escape(&det.join(", ")),
            c.requeues,
            c.gpu_h_lost
        );
    }
    out.push_str("</tbody></table>\n");
    for (what, chart) in [
        (
            "time to detect",
            ttd_chart as fn(&Scores, &mut String) -> ChartResult,
        ),
        ("recall and precision", rp_chart),
    ] {
        let mut svg = String::new();
        match chart(s, &mut svg) {
            Ok(()) => {
                let _ = writeln!(out, "<figure>{svg}</figure>");
            }
            Err(e) => {
                let _ = writeln!(
                    out,
                    "<p class=\"note\">no {what} chart: {}</p>",
                    html_escape(&e.to_string())
                );
            }
        }
    }
    graded_html(s, &mut out);
    out.push_str("<h3>Findings</h3>\n<ul>\n");
    for f in &s.findings {
        let _ = writeln!(out, "<li>{}</li>", html_escape(f));
    }
    out.push_str("</ul>\n</section>\n");
    out
}

/// A whole page holding only the drill's section.
pub fn html(s: &Scores) -> String {
    html_page("fabric-check drill", &html_section(s))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::score::Ttd;

    fn scores() -> Scores {
        let c = |class: &str, control: bool, recall: Option<f64>, samples: Vec<f64>| ClassScore {
            class: class.into(),
            control,
            rounds: 5,
            injections: if control { 0 } else { 5 },
            detected: if control { 0 } else { 5 },
            recall,
            precision: Some(1.0),
            ttd: Ttd {
                p50_s: samples.get(samples.len() / 2).copied(),
                p95_s: samples.last().copied(),
                max_s: samples.last().copied(),
                samples_s: samples,
            },
            detectors: [("prolog".to_owned(), 5)].into(),
            ..ClassScore::default()
        };
        Scores {
            schema: crate::score::SCHEMA.into(),
            seed: 4,
            classes: 2,
            injections: 10,
            detected: 10,
            recall: Some(1.0),
            precision: Some(1.0),
            per_class: vec![
                c("port_down", false, Some(1.0), vec![1.0, 2.0, 3.0]),
                c("ecn_off", false, Some(1.0), vec![4.0, 5.0]),
                c("clean", true, None, vec![]),
            ],
            findings: vec!["ecn_off caught only by the epilog: 4.5 s median".into()],
            ..Scores::default()
        }
    }

    #[test]
    fn the_table_has_a_row_per_class_an_overall_row_and_the_findings() {
        let t = table(&scores());
        assert!(t.lines().any(|l| l.starts_with("port_down ")), "{t}");
        assert!(t.lines().any(|l| l.starts_with("clean (ctl)")), "{t}");
        assert!(t.lines().any(|l| l.starts_with("all ")), "{t}");
        assert!(t.contains("- ecn_off caught only by the epilog"), "{t}");
    }

    #[test]
    fn prometheus_gauges_carry_the_class_label_and_skip_what_is_unknown() {
        let p = prometheus(&scores());
        assert!(p.contains("fabric_check_drill_recall_ratio 1\n"), "{p}");
        assert!(
            p.contains("fabric_check_drill_class_recall_ratio{class=\"port_down\"} 1\n"),
            "{p}"
        );
        assert!(!p.contains("class_recall_ratio{class=\"clean\"}"), "{p}");
        for l in p.lines().filter(|l| !l.starts_with('#')) {
            let v = l.rsplit(' ').next().unwrap();
            assert!(v.parse::<f64>().is_ok(), "{l}");
        }
    }

    #[test]
    fn the_json_reads_back_as_the_same_scores() {
        let s = scores();
        let back: Scores = serde_json::from_str(&json(&s)).unwrap();
        assert_eq!(back, s);
    }

    #[test]
    fn the_html_section_holds_two_charts_and_escapes_text() {
        let mut s = scores();
        s.findings.push("a <b> finding".into());
        let h = html(&s);
        assert_eq!(h.matches("<svg").count(), 2, "two charts");
        // The table, the time-to-detect chart and the recall/precision chart each name it.
        assert_eq!(h.matches("port_down").count(), 3, "{h}");
        assert!(h.contains("a &lt;b&gt; finding"));
        assert!(h.contains("<section id=\"drill\">"));
    }

    fn graded_scores() -> Scores {
        use crate::grade::{GradedSummary, SizeKind, SizePoint};
        let pt = |size: &str, control: bool, detected: usize| SizePoint {
            size: size.into(),
            control,
            rounds: 4,
            injections: 4,
            detected,
            recall: (!control).then_some(detected as f64 / 4.0),
            quiet: control.then_some((4 - detected) as f64 / 4.0),
            measured_pct: size.ends_with('%').then_some(51.0),
            ..SizePoint::default()
        };
        let mut s = scores();
        s.graded = vec![
            ClassCurve {
                class: "error_counters".into(),
                kind: Some(SizeKind::Threshold),
                points: vec![pt("0.5x", true, 0), pt("2x", false, 4)],
            },
            ClassCurve {
                class: "congestion".into(),
                kind: Some(SizeKind::Bandwidth),
                points: vec![pt("100%", true, 0), pt("50%", false, 3)],
            },
        ];
        s.graded_summary = Some(GradedSummary {
            classes: 2,
            sizes: 4,
            recall_at_half_bw: Some(0.75),
            quiet_below_threshold: Some(1.0),
            false_drains: 0,
        });
        s
    }

    #[test]
    fn a_graded_drill_adds_a_curve_chart_per_class_a_table_row_per_size_and_summary_lines() {
        let s = graded_scores();
        let h = html(&s);
        assert_eq!(
            h.matches("<svg").count(),
            4,
            "two charts and one per graded class"
        );
        assert!(h.contains("Graded faults: recall by size"), "{h}");
        assert!(
            h.contains("<td>congestion</td><td>50%</td><td>fault</td>"),
            "{h}"
        );
        let t = table(&s);
        assert!(
            t.lines()
                .any(|l| l.starts_with("congestion") && l.contains("50%") && l.contains("51%")),
            "{t}"
        );
        let lines = graded_lines(&s);
        assert_eq!(lines.len(), 3);
        assert_eq!(
            lines[0],
            "drill-graded error_counters: 0.5x quiet 4/4, 2x recall 4/4"
        );
        assert!(
            lines[1].contains("50% recall 3/4 (measured 51%)"),
            "{}",
            lines[1]
        );
        assert!(lines[2].starts_with("drill-graded: classes 2, sizes 4, recall_at_half_bw 0.75"));
        let back: Scores = serde_json::from_str(&json(&s)).unwrap();
        assert_eq!(back, s);
        assert!(graded_lines(&scores()).is_empty());
    }
}
