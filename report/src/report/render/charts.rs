//! The report's SVG charts, drawn with `plotters` for the HTML page: cost per accepted run, cost
//! over time, step time and drains per day.

use plotters::chart::MeshStyle;
use plotters::coord::ranged1d::{Ranged, ValueFormatter};
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

/// Which pass of a chart plotters draws: the frame (white ground, caption, axes, grid, tick
/// labels) or the marks (bars, boxes, dots, lines). Both passes lay the chart out alike, so the
/// page stacks them in one `<svg>` as `<g class="frame">` and `<g class="marks">`, with the
/// legend beside the plot area in `<g class="legend">`: data and legend are told apart by
/// their group, and no legend sits on the data at any scale.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pass {
    Frame,
    Marks,
}

/// What a legend entry shows before its label.
#[derive(Debug, Clone, Copy)]
enum Swatch {
    /// A filled square: a bar's or a box's colour.
    Block(RGBColor),
    /// A short thick line: a line series.
    Line(RGBColor),
    /// A translucent dot: one run of a strip.
    Dot(RGBColor),
}

/// A chart's layout, the same in both passes: its size in pixels, its plot area (x, y, width,
/// height) and its legend entries.
struct Drawn {
    size: (u32, u32),
    plot: [i32; 4],
    legend: Vec<(Swatch, String)>,
}

type ChartResult = Result<Drawn, Box<dyn std::error::Error>>;

/// Height of the band above the plot that holds a chart's caption.
const CAPTION_H: u32 = 34;

/// The area under a chart's caption; the frame pass fills the ground white and writes the
/// caption (the marks pass leaves both to it, so the marks hold data only).
fn under_caption<'a>(
    root: &DrawingArea<SVGBackend<'a>, plotters::coord::Shift>,
    pass: Pass,
    caption: &str,
) -> Result<DrawingArea<SVGBackend<'a>, plotters::coord::Shift>, Box<dyn std::error::Error>> {
    let (top, body) = root.split_vertically(CAPTION_H);
    if pass == Pass::Frame {
        root.fill(&WHITE)?;
        top.titled(caption, ("sans-serif", 18))?;
    }
    Ok(body)
}

/// A plot area's pixel ranges as (x, y, width, height).
fn plot_rect((x, y): (std::ops::Range<i32>, std::ops::Range<i32>)) -> [i32; 4] {
    [x.start, y.start, x.end - x.start, y.end - y.start]
}

/// Height of one legend entry in pixels.
const LEGEND_ROW: i32 = 20;

/// Width of the legend's column: its longest label at about 7.5 px a character (13 px
/// sans-serif), the swatch and the padding; none without entries.
fn legend_width(entries: &[(Swatch, String)]) -> u32 {
    match entries.iter().map(|(_, l)| l.chars().count()).max() {
        Some(chars) => (chars as u32 * 15 / 2 + 48).clamp(100, 440),
        None => 0,
    }
}

fn hex(c: RGBColor) -> String {
    format!("#{:02X}{:02X}{:02X}", c.0, c.1, c.2)
}

/// The legend as SVG: a white box with a black border at (`x`, `y`), `w` wide with a 10 px
/// gutter on its right, one entry a row.
fn legend_svg(entries: &[(Swatch, String)], x: i32, y: i32, w: u32) -> String {
    use std::fmt::Write as _;
    let h = 10 + LEGEND_ROW * entries.len() as i32;
    let mut s = format!(
        "<g class=\"legend\">\n<rect class=\"legend-box\" x=\"{x}\" y=\"{y}\" width=\"{}\" height=\"{h}\" fill=\"#FFFFFF\" stroke=\"#000000\"/>\n",
        w.saturating_sub(10)
    );
    for (i, (swatch, label)) in entries.iter().enumerate() {
        let cy = y + 5 + LEGEND_ROW * i as i32 + LEGEND_ROW / 2;
        let _ = match swatch {
            Swatch::Block(c) => writeln!(
                s,
                "<rect x=\"{}\" y=\"{}\" width=\"10\" height=\"10\" fill=\"{}\"/>",
                x + 10,
                cy - 5,
                hex(*c)
            ),
            Swatch::Line(c) => writeln!(
                s,
                "<line x1=\"{}\" y1=\"{cy}\" x2=\"{}\" y2=\"{cy}\" stroke=\"{}\" stroke-width=\"3\"/>",
                x + 8,
                x + 24,
                hex(*c)
            ),
            Swatch::Dot(c) => writeln!(
                s,
                "<circle cx=\"{}\" cy=\"{cy}\" r=\"3\" fill=\"{}\" opacity=\"0.5\"/>",
                x + 15,
                hex(*c)
            ),
        };
        let _ = writeln!(
            s,
            "<text x=\"{}\" y=\"{cy}\" dy=\"0.35em\" font-family=\"sans-serif\" font-size=\"13\" fill=\"#000000\">{}</text>",
            x + 30,
            html_escape(label)
        );
    }
    s.push_str("</g>\n");
    s
}

/// The elements of a plotters SVG document, without its `<svg>` element around them.
fn svg_inner(svg: &str) -> &str {
    let body = svg.split_once('\n').map_or("", |(_, b)| b);
    let body = body.trim_end();
    body.strip_suffix("</svg>").unwrap_or(body)
}

/// One chart's `<svg>`: the frame, the marks and, right of the plot, the legend.
fn compose(frame: &str, marks: &str, d: &Drawn) -> String {
    let lw = legend_width(&d.legend);
    let (w, h) = (d.size.0 + lw, d.size.1);
    let [px, py, pw, ph] = d.plot;
    let legend = if d.legend.is_empty() {
        String::new()
    } else {
        legend_svg(&d.legend, d.size.0 as i32, py, lw)
    };
    let h = h.max((py + 20 + LEGEND_ROW * d.legend.len() as i32).max(0) as u32);
    format!(
        "<svg width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" xmlns=\"http://www.w3.org/2000/svg\">\n\
         <g class=\"frame\">\n{}\n</g>\n<g class=\"marks\" data-plot=\"{px} {py} {pw} {ph}\">\n{}\n</g>\n{legend}</svg>",
        svg_inner(frame),
        svg_inner(marks)
    )
}

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

/// A chart's mesh in the page's fonts: 13 px tick labels, 14 px axis titles.
fn mesh<'a, 'b, DB, XT, YT, X, Y>(
    chart: &'b mut ChartContext<'a, DB, Cartesian2d<X, Y>>,
) -> MeshStyle<'a, 'b, X, Y, DB>
where
    DB: DrawingBackend,
    X: Ranged<ValueType = XT> + ValueFormatter<XT>,
    Y: Ranged<ValueType = YT> + ValueFormatter<YT>,
{
    let mut m = chart.configure_mesh();
    m.label_style(("sans-serif", 13))
        .axis_desc_style(("sans-serif", 14));
    m
}

/// An axis of fabric slots: slot `i` spans `i..i + 1` and is labelled under its centre,
/// `i + 0.5`. (plotters' segmented axes over `0..n - 1` draw a lone fabric off centre with
/// bars of no width, and over `0..n` leave an empty slot at the end.)
struct Slots(u32);

impl Ranged for Slots {
    type FormatOption = plotters::coord::ranged1d::DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        let share = value / f64::from(self.0.max(1));
        (f64::from(limit.0) + share * f64::from(limit.1 - limit.0)).round() as i32
    }

    fn key_points<Hint: plotters::coord::ranged1d::KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            return Vec::new();
        }
        (0..self.0).map(|i| f64::from(i) + 0.5).collect()
    }

    fn range(&self) -> std::ops::Range<f64> {
        0.0..f64::from(self.0.max(1))
    }
}

/// The label of a fabric's slot: its name under the slot's centre.
fn slot_label(names: &[String], x: &f64) -> String {
    names.get(x.floor() as usize).cloned().unwrap_or_default()
}

fn cost_chart(r: &Report, pass: Pass, svg: &mut String) -> ChartResult {
    const SIZE: (u32, u32) = (760, 360);
    let priced: Vec<&GroupReport> = r.groups.iter().filter(|g| g.cost.is_some()).collect();
    let root = SVGBackend::with_string(svg, SIZE).into_drawing_area();
    let body = under_caption(
        &root,
        pass,
        &format!("Cost breakdown per fabric ({})", r.currency),
    )?;
    let max = priced
        .iter()
        .filter_map(|g| g.cost.as_ref())
        .map(|c| c.total.to_f64().unwrap_or(0.0))
        .fold(0.0, f64::max);
    // An empty or all-zero chart still gets an axis.
    let max = if max > 0.0 { max } else { 1.0 };
    let top = max * 1.1;
    let n = priced.len().max(1) as u32;
    let names: Vec<String> = priced.iter().map(|g| g.name.clone()).collect();
    let mut chart = ChartBuilder::on(&body)
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(80)
        .build_cartesian_2d(Slots(n), 0f64..top)?;
    let plot = plot_rect(chart.plotting_area().get_pixel_range());
    if pass == Pass::Frame {
        let axis = AxisScale::money(0.0, top, &r.currency);
        mesh(&mut chart)
            .disable_x_mesh()
            .x_label_formatter(&|x| slot_label(&names, x))
            .y_labels(Y_LABELS)
            .y_label_formatter(&|v| axis.label(*v))
            .y_desc(format!("{} over the window", axis.unit))
            .x_desc("fabric")
            .draw()?;
    }
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
    let mut legend = Vec::new();
    for (k, item) in items.iter().enumerate() {
        let colour = PART_PALETTE[k % PART_PALETTE.len()];
        legend.push((Swatch::Block(colour), item.to_string()));
        if pass == Pass::Frame {
            continue;
        }
        let bars: Vec<Rectangle<(f64, f64)>> = priced
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
                    [(i as f64, below), (i as f64 + 1.0, below + this)],
                    colour.filled(),
                );
                bar.set_margin(0, 0, 20, 20);
                Some(bar)
            })
            .collect();
        chart.draw_series(bars)?;
    }
    drop(chart);
    root.present()?;
    Ok(Drawn {
        size: SIZE,
        plot,
        legend,
    })
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

/// At most this many runs of a fabric are dotted beside its box, whatever the history's size:
/// a strip of thousands of dots reads as a solid bar and makes the page heavy.
pub const MAX_DOTS: usize = 300;

/// The runs dotted beside a box: all of them, sorted, up to [`MAX_DOTS`]; beyond, `MAX_DOTS`
/// of them evenly spaced in rank (the ((j + ½) / MAX_DOTS)-quantiles), so the strip keeps the
/// distribution's shape and the same history always draws the same dots.
pub fn dot_sample(values: &[f32]) -> Vec<f32> {
    let mut sorted = values.to_vec();
    sorted.sort_unstable_by(f32::total_cmp);
    if sorted.len() <= MAX_DOTS {
        return sorted;
    }
    let n = sorted.len();
    (0..MAX_DOTS)
        .map(|j| sorted[((2 * j + 1) * n / (2 * MAX_DOTS)).min(n - 1)])
        .collect()
}

/// The `j`-th dot's horizontal offset within ±`half` pixels: the golden-ratio sequence, which
/// spreads neighbours in rank apart without randomness.
fn jitter(j: usize, half: i32) -> i32 {
    let u = (j as f64 * 0.618_033_988_749_895).fract();
    ((u * 2.0 - 1.0) * f64::from(half)).round() as i32
}

/// A fabric's median step times as a box plot each: the box is the middle half of the runs,
/// the whiskers the rest (1.5 IQR, plotters' Tukey rule), a fabric's colour per box; beside it
/// a strip of small translucent dots, one a run ([`dot_sample`] beyond [`MAX_DOTS`] runs).
fn step_chart(r: &Report, pass: Pass, svg: &mut String) -> ChartResult {
    const SIZE: (u32, u32) = (760, 340);
    let with: Vec<(usize, &GroupReport)> = r
        .groups
        .iter()
        .enumerate()
        .filter(|(_, g)| !g.step_samples_s.is_empty())
        .collect();
    // The axis spans the runs and the whiskers (plotters draws them at the Tukey fences, which
    // may lie past the fastest or slowest run).
    let all: Vec<f32> = with
        .iter()
        .flat_map(|(_, g)| {
            let q = Quartiles::new(&g.step_samples_s).values();
            g.step_samples_s.iter().copied().chain([q[0], q[4]])
        })
        .collect();
    let lo = all.iter().copied().fold(f32::INFINITY, f32::min);
    let hi = all.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let (lo, hi) = if lo.is_finite() && hi > lo {
        let pad = (hi - lo) * 0.08;
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
    let root = SVGBackend::with_string(svg, SIZE).into_drawing_area();
    let body = under_caption(
        &root,
        pass,
        "Step time per run (each run's median), by fabric",
    )?;
    let mut chart = ChartBuilder::on(&body)
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(60)
        .build_cartesian_2d(Slots(n), lo..hi)?;
    let plot = plot_rect(chart.plotting_area().get_pixel_range());
    if pass == Pass::Frame {
        let axis = AxisScale::plain(f64::from(lo), f64::from(hi), "s");
        mesh(&mut chart)
            .disable_x_mesh()
            .x_label_formatter(&|x| slot_label(&names, x))
            .y_labels(Y_LABELS)
            .y_label_formatter(&|v| axis.label(f64::from(*v)))
            .y_desc("step time (s)")
            .x_desc("fabric")
            .draw()?;
    }
    // Each fabric's slot: the box left of its centre, the strip right of it.
    let slot = plot[2] / n as i32;
    let box_w = (slot / 4).clamp(8, 60);
    let half = (slot / 8).clamp(3, 24);
    let mut legend = Vec::new();
    for (i, (k, g)) in with.iter().enumerate() {
        let colour = PALETTE[k % PALETTE.len()];
        let q = Quartiles::new(&g.step_samples_s);
        legend.push((
            Swatch::Block(colour),
            format!("{} median {:.3} s", g.name, q.median()),
        ));
        if pass == Pass::Frame {
            continue;
        }
        let at = i as f64 + 0.5;
        chart.draw_series(std::iter::once(
            Boxplot::new_vertical(at, &q)
                .width(box_w as u32)
                .whisker_width(0.5)
                .style(colour.stroke_width(2))
                .offset(-(box_w / 2 + 4)),
        ))?;
        let dots = dot_sample(&g.step_samples_s);
        chart.draw_series(dots.iter().enumerate().map(|(j, v)| {
            EmptyElement::at((at, *v))
                + Circle::new(
                    (half + 6 + jitter(j, half), 0),
                    2,
                    colour.mix(0.35).filled(),
                )
        }))?;
    }
    if !with.is_empty() {
        legend.push((
            Swatch::Dot(RGBColor(90, 90, 90)),
            format!("a run (at most {MAX_DOTS} a fabric)"),
        ));
    }
    drop(chart);
    root.present()?;
    Ok(Drawn {
        size: SIZE,
        plot,
        legend,
    })
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
fn drains_chart(r: &Report, pass: Pass, svg: &mut String) -> ChartResult {
    const SIZE: (u32, u32) = (760, 340);
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
    let root = SVGBackend::with_string(svg, SIZE).into_drawing_area();
    let body = under_caption(
        &root,
        pass,
        "Nodes drained per day, by first failing check (all fabrics)",
    )?;
    let mut chart = ChartBuilder::on(&body)
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(50)
        .build_cartesian_2d(d0 as f64..(d1 + 1) as f64, 0u64..ymax + ymax / 10 + 1)?;
    let plot = plot_rect(chart.plotting_area().get_pixel_range());
    if pass == Pass::Frame {
        mesh(&mut chart)
            .disable_x_mesh()
            .x_labels(day_axis(d0, d1))
            .x_label_formatter(&day_label)
            .y_label_formatter(&|v| v.to_string())
            .x_desc("day (UTC, MM-DD)")
            .y_desc("nodes drained")
            .draw()?;
    }
    let mut legend = Vec::new();
    for (k, check) in checks.iter().enumerate() {
        let colour = PART_PALETTE[k % PART_PALETTE.len()];
        let total: u64 = by
            .iter()
            .filter(|((_, c), _)| c == check)
            .map(|(_, n)| n)
            .sum();
        legend.push((Swatch::Block(colour), format!("{check} ({total})")));
        if pass == Pass::Frame {
            continue;
        }
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
        chart.draw_series(bars)?;
    }
    drop(chart);
    root.present()?;
    Ok(Drawn {
        size: SIZE,
        plot,
        legend,
    })
}

/// A fabric's index (its colour), its figures and its points.
type FabricLine<'a> = (usize, &'a GroupReport, Vec<(f64, f64)>);

/// Cost per accepted run period by period, one line per priced fabric in its colour.
fn cost_time_chart(r: &Report, pass: Pass, svg: &mut String) -> ChartResult {
    const SIZE: (u32, u32) = (760, 340);
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
    let top = ymax * 1.1;
    let period = series
        .first()
        .and_then(|(_, g, _)| g.cost_over_time.first())
        .map_or(1, |p| p.days);
    let root = SVGBackend::with_string(svg, SIZE).into_drawing_area();
    let body = under_caption(
        &root,
        pass,
        &format!(
            "Cost per accepted run over time ({}, per {})",
            r.currency,
            if period == 1 {
                "day".to_string()
            } else {
                format!("{period} days")
            }
        ),
    )?;
    let mut chart = ChartBuilder::on(&body)
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(70)
        .build_cartesian_2d(d0 as f64..(d1 + 1) as f64, 0f64..top)?;
    let plot = plot_rect(chart.plotting_area().get_pixel_range());
    if pass == Pass::Frame {
        let axis = AxisScale::money(0.0, top, &r.currency);
        mesh(&mut chart)
            .x_labels(day_axis(d0, d1))
            .x_label_formatter(&day_label)
            .y_labels(Y_LABELS)
            .y_label_formatter(&|v| axis.label(*v))
            .x_desc("day (UTC, MM-DD)")
            .y_desc(format!("{} per accepted run", axis.unit))
            .draw()?;
    }
    let mut legend = Vec::new();
    for (k, g, pts) in &series {
        let colour = PALETTE[k % PALETTE.len()];
        legend.push((
            Swatch::Line(colour),
            format!(
                "{} (window: {})",
                g.name,
                g.cost
                    .as_ref()
                    .and_then(|c| c.per_accepted_run)
                    .map_or("n/a".to_string(), |d| money(d, &r.currency))
            ),
        ));
        if pass == Pass::Frame {
            continue;
        }
        chart.draw_series(LineSeries::new(pts.clone(), colour.stroke_width(3)))?;
        chart.draw_series(pts.iter().map(|p| Circle::new(*p, 4, colour.filled())))?;
    }
    drop(chart);
    root.present()?;
    Ok(Drawn {
        size: SIZE,
        plot,
        legend,
    })
}

/// A chart as a `<figure>`: plotters draws its frame and its marks in two passes, composed with
/// its legend into one `<svg>` ([`compose`]); a note says why if it could not be drawn.
fn figure(id: &str, draw: impl Fn(Pass, &mut String) -> ChartResult) -> String {
    let mut frame = String::new();
    let mut marks = String::new();
    let drawn = draw(Pass::Frame, &mut frame).and_then(|_| draw(Pass::Marks, &mut marks));
    match drawn {
        Ok(d) => format!(
            "<figure id=\"{id}\" class=\"chart\">\n{}\n</figure>\n",
            compose(&frame, &marks, &d)
        ),
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
    body.push_str(&figure("chart-cost", |p, s| cost_chart(r, p, s)));
    body.push_str(&figure("chart-cost-time", |p, s| cost_time_chart(r, p, s)));
    body.push_str(&figure("chart-steps", |p, s| step_chart(r, p, s)));
    body.push_str(&figure("chart-drains", |p, s| drains_chart(r, p, s)));
    body
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_strip_of_ten_thousand_runs_dots_a_bounded_sample_spread_evenly_in_rank() {
        let runs: Vec<f32> = (0..10_000).map(|i| (i * 7919 % 10_000) as f32).collect();
        let dots = dot_sample(&runs);
        assert_eq!(dots.len(), MAX_DOTS);
        assert!(dots.windows(2).all(|w| w[0] <= w[1]), "sorted by value");
        // Evenly spaced in rank: the median dot is the median run, the ends near the ends.
        assert!(
            (dots[MAX_DOTS / 2] - 5000.0).abs() < 40.0,
            "{}",
            dots[MAX_DOTS / 2]
        );
        assert!(dots[0] < 40.0 && dots[MAX_DOTS - 1] > 9960.0);
        assert_eq!(dots, dot_sample(&runs), "the same runs draw the same dots");
    }

    #[test]
    fn a_strip_of_ten_runs_dots_every_run() {
        let runs = [3.0, 1.0, 2.0, 5.0, 4.0, 9.0, 8.0, 7.0, 6.0, 0.5];
        assert_eq!(dot_sample(&runs).len(), 10);
    }

    #[test]
    fn the_jitter_stays_within_its_half_width_and_spreads_neighbours_apart() {
        let xs: Vec<i32> = (0..1000).map(|j| jitter(j, 12)).collect();
        assert!(xs.iter().all(|x| x.abs() <= 12));
        assert!(
            xs.windows(2).all(|w| w[0] != w[1]),
            "neighbours in rank not on one column"
        );
    }
}
