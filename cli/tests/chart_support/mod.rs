//! Shared by the chart tests: synthetic `sacct -P` histories at any scale, the HTML report of
//! one, and the parts of a chart's SVG (the report draws each chart as `<g class="frame">`,
//! `<g class="marks" data-plot="x y w h">` and `<g class="legend">` with its
//! `<rect class="legend-box">`).

#![allow(dead_code)]

use std::fmt::Write as _;
use std::path::Path;

/// The charts of the HTML report, in the page's order.
pub const CHARTS: [&str; 4] = [
    "chart-cost",
    "chart-cost-time",
    "chart-steps",
    "chart-drains",
];

fn iso(t: i64) -> String {
    let d = t.div_euclid(86_400);
    let s = t.rem_euclid(86_400);
    // Civil from days (Howard Hinnant's algorithm).
    let z = d + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}",
        s / 3600,
        s / 60 % 60,
        s % 60
    )
}

/// A deterministic history of `runs` tagged runs a fabric on `fabrics` (names from `ib`,
/// `roce`, `eth`: the first two priced by the generated cost file) over `days` days from
/// 2024-05-01: step medians spread around each fabric's own, a drain every 17th run by one of
/// three checks, a failure every 23rd.
pub fn history(runs: usize, fabrics: &[&str], days: i64) -> String {
    const START: i64 = 1_714_521_600;
    let mut out = String::from(
        "JobID|Partition|Account|User|Cluster|QOS|State|Submit|Eligible|Start|End|ElapsedRaw|NNodes|AllocTRES|AdminComment\n",
    );
    let mut job = 5000u64;
    let span = days * 86_400 - 12_000;
    for (f, name) in fabrics.iter().enumerate() {
        let step = 1.0 + 0.15 * f as f64;
        for i in 0..runs {
            job += 1;
            let nn = [1, 2, 4][i % 3];
            let submit = START + (i as i64 * span) / runs as i64 + (job % 600) as i64;
            let start = submit + 60;
            let dur = 3600 + (job * 37 % 5400) as i64;
            let end = start + dur;
            // A spread of ±10 % from a fixed hash of the run.
            let u = ((job.wrapping_mul(2_654_435_761) >> 8) % 1000) as f64 / 1000.0;
            let p50 = step * (0.9 + 0.2 * u * u);
            let drained = i % 17 == 5;
            let failed = i % 23 == 7;
            let mut nodes = String::new();
            for n in 0..nn {
                if n > 0 {
                    nodes.push(',');
                }
                let verdict = if drained && n == 0 {
                    format!(
                        "{{\"verdict\":\"fail\",\"checks\":[\"{name}.check{}\"],\"probe_ms\":41,\"drained\":true}}",
                        i % 3
                    )
                } else {
                    "{\"verdict\":\"pass\",\"probe_ms\":30}".to_string()
                };
                let _ = write!(
                    nodes,
                    "\"{name}{:02}\":{verdict}",
                    (job as usize + n) % 16 + 1
                );
            }
            let counts = if drained {
                if nn > 1 {
                    format!("{{\"fail\":1,\"pass\":{}}}", nn - 1)
                } else {
                    "{\"fail\":1}".to_string()
                }
            } else {
                format!("{{\"pass\":{nn}}}")
            };
            let run = format!(
                "{{\"steps\":{},\"step_p50_s\":{p50:.3},\"step_p95_s\":{:.3},\"ckpt_n\":2,\"ckpt_total_s\":120.0,\"ckpt_max_s\":60.0,\"retries\":0,\"requeues\":0,\"duration_s\":{dur}.0,\"outcome\":\"{}\",\"accepted\":{},\"on_time\":true}}",
                (dur as f64 / p50 * 0.9) as u64,
                p50 * 1.3,
                if failed { "failed" } else { "accepted" },
                !failed
            );
            let tag = format!(
                "fabric-check/v1 {{\"verdict\":\"{}\",\"mode\":\"quick\",\"probed_at\":{},\"nnodes\":{nn},\"counts\":{counts},\"nodes\":{{{nodes}}},\"run\":{run}}}",
                if drained { "fail" } else { "pass" },
                start - 20
            );
            let gpus = 8 * nn;
            let _ = writeln!(
                out,
                "{job}|{name}|research|user{}|gpucluster|normal|{}|{}|{}|{}|{}|{dur}|{nn}|billing={},cpu={},gres/gpu={gpus},node={nn}|{tag}",
                job % 7,
                if failed { "FAILED" } else { "COMPLETED" },
                iso(submit),
                iso(submit),
                iso(start),
                iso(end),
                gpus * 8,
                gpus * 8
            );
        }
    }
    out
}

/// The HTML report of `history` priced with the generated history's cost file.
pub fn render(history: &str, dir: &Path) -> String {
    let input = dir.join("history.txt");
    std::fs::write(&input, history).unwrap();
    let cost = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/fixtures/sacct/generated/cost.toml"
    );
    let out = assert_cmd::Command::cargo_bin("fabric-check")
        .unwrap()
        .args(["report", "-f", "html", "-i"])
        .arg(&input)
        .args(["--cost", cost])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The `<svg>` of chart `id` in a report page.
pub fn chart_svg<'a>(html: &'a str, id: &str) -> &'a str {
    let at = html
        .find(&format!("<figure id=\"{id}\""))
        .unwrap_or_else(|| panic!("no #{id} in the page"));
    let body = &html[at..];
    let start = body.find("<svg").unwrap();
    let end = body.find("</svg>").unwrap() + "</svg>".len();
    &body[start..end]
}

/// A box as (left, top, right, bottom).
pub type Bounds = [f64; 4];

/// Whether two boxes share any area (touching edges do not).
pub fn overlap(a: Bounds, b: Bounds) -> bool {
    a[0] < b[2] && b[0] < a[2] && a[1] < b[3] && b[1] < a[3]
}

fn attr(el: &str, name: &str) -> Option<f64> {
    let key = format!(" {name}=\"");
    let at = el.find(&key)? + key.len();
    el[at..].split('"').next()?.parse().ok()
}

fn attr_str<'a>(el: &'a str, name: &str) -> Option<&'a str> {
    let key = format!(" {name}=\"");
    let at = el.find(&key)? + key.len();
    el[at..].split('"').next()
}

/// The bounds of one drawn element (`rect`, `circle`, `line`, `polyline`, `polygon`), its
/// stroke left out; `None` for other elements (text).
pub fn bounds(el: &str) -> Option<Bounds> {
    let tag = el.trim_start_matches('<').split([' ', '/', '>']).next()?;
    match tag {
        "rect" => {
            let (x, y) = (attr(el, "x")?, attr(el, "y")?);
            Some([x, y, x + attr(el, "width")?, y + attr(el, "height")?])
        }
        "circle" => {
            let (x, y, r) = (attr(el, "cx")?, attr(el, "cy")?, attr(el, "r")?);
            Some([x - r, y - r, x + r, y + r])
        }
        "line" => {
            let (x1, y1) = (attr(el, "x1")?, attr(el, "y1")?);
            let (x2, y2) = (attr(el, "x2")?, attr(el, "y2")?);
            Some([x1.min(x2), y1.min(y2), x1.max(x2), y1.max(y2)])
        }
        "polyline" | "polygon" => {
            let pts: Vec<(f64, f64)> = attr_str(el, "points")?
                .split_whitespace()
                .filter_map(|p| {
                    let (x, y) = p.split_once(',')?;
                    Some((x.parse().ok()?, y.parse().ok()?))
                })
                .collect();
            let xs = pts.iter().map(|p| p.0);
            let ys = pts.iter().map(|p| p.1);
            Some([
                xs.clone().fold(f64::INFINITY, f64::min),
                ys.clone().fold(f64::INFINITY, f64::min),
                xs.fold(f64::NEG_INFINITY, f64::max),
                ys.fold(f64::NEG_INFINITY, f64::max),
            ])
        }
        _ => None,
    }
}

/// The elements of the group `<g class="CLASS"...>` of a chart's SVG, and the group's tag.
pub fn group<'a>(svg: &'a str, class: &str) -> (&'a str, Vec<&'a str>) {
    let at = svg
        .find(&format!("<g class=\"{class}\""))
        .unwrap_or_else(|| panic!("no group {class}"));
    let body = &svg[at..];
    let open_end = body.find('>').unwrap() + 1;
    let end = body.find("</g>").unwrap();
    let elements = body[open_end..end]
        .split('<')
        .filter(|e| !e.trim().is_empty() && !e.starts_with('/'))
        .collect();
    (&body[..open_end], elements)
}

/// What a test needs of one chart: its plot area, its legend box (if it has a legend) and the
/// bounds and tags of its data marks.
pub struct Chart {
    pub plot: Bounds,
    pub legend: Option<Bounds>,
    pub marks: Vec<(String, Bounds)>,
    pub width: f64,
}

pub fn chart(svg: &str) -> Chart {
    let (open, elements) = group(svg, "marks");
    let p: Vec<f64> = attr_str(open, "data-plot")
        .expect("the marks name their plot area")
        .split(' ')
        .map(|v| v.parse().unwrap())
        .collect();
    let marks = elements
        .iter()
        .filter_map(|e| {
            let b = bounds(e)?;
            Some((e.split(' ').next().unwrap().to_string(), b))
        })
        .collect();
    let legend = svg.contains("<g class=\"legend\"").then(|| {
        let (_, els) = group(svg, "legend");
        let rect = els
            .iter()
            .find(|e| e.contains("class=\"legend-box\""))
            .expect("a legend has its box");
        bounds(rect).unwrap()
    });
    Chart {
        plot: [p[0], p[1], p[0] + p[2], p[1] + p[3]],
        legend,
        marks,
        width: attr(svg, "width").unwrap(),
    }
}
