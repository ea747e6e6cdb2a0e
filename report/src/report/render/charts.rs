//! The report's SVG charts, drawn with `plotters` for the HTML page: cost per accepted run, cost
//! over time, step time and drains per day.

use plotters::prelude::*;
use rust_decimal::prelude::ToPrimitive;

use super::super::aggregate::{GroupReport, Report};
use super::html_escape;
use super::tables::money;

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
    super::super::sacct_text::utc_date(d.round() as i64)[5..].to_string()
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
    super::super::sacct_text::parse_time(&format!("{s}T00:00:00")).unwrap_or(0) / 86_400
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

/// The four charts of the HTML page, each a `<figure>` (or a note saying why it could not be
/// drawn), in the page's order.
pub(super) fn figures(r: &Report) -> String {
    let mut body = String::new();
    body.push_str(&figure("chart-cost", |s| cost_chart(r, s)));
    body.push_str(&figure("chart-cost-time", |s| cost_time_chart(r, s)));
    body.push_str(&figure("chart-steps", |s| step_chart(r, s)));
    body.push_str(&figure("chart-drains", |s| drains_chart(r, s)));
    body
}
