//! The HTML report opened in headless Chromium and looked at: the four charts' captions, axes
//! and legends are in the rendered DOM; a screenshot is taken, and its pixels, read back by the
//! browser from a canvas, show that each chart's region is inked and that the fabrics' colours
//! are there. The screenshot stays under target/ as a test artefact (docs/report.png is one).
//!
//! Skips only when no Chromium is installed and FABRIC_REQUIRE_CHROMIUM is unset (CI sets it).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod chart_support;

use chart_support::CHARTS;

fn chromium() -> Option<PathBuf> {
    [
        "/usr/bin/chromium",
        "/usr/bin/chromium-browser",
        "/usr/bin/google-chrome",
    ]
    .iter()
    .map(PathBuf::from)
    .find(|p| p.exists())
}

/// The installed Chromium; `None` (the test skips) only when FABRIC_REQUIRE_CHROMIUM is unset.
fn chromium_or_skip() -> Option<PathBuf> {
    let bin = chromium();
    if bin.is_none() {
        assert!(
            std::env::var_os("FABRIC_REQUIRE_CHROMIUM").is_none(),
            "FABRIC_REQUIRE_CHROMIUM is set but no chromium is installed (apt-get install chromium)"
        );
        eprintln!("chromium is not installed; skipping the browser test");
    }
    bin
}

/// Runs Chromium headless with a fresh profile; kills it after `limit`.
fn headless(bin: &Path, profile: &Path, extra: &[String], url: &str, limit: Duration) -> String {
    let mut child = Command::new(bin)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(extra)
        .arg(url)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromium starts");
    let mut out = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut out, &mut s);
        s
    });
    let start = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    reader.join().unwrap()
}

/// The value of `<pre id="ID">...</pre>` in a dumped DOM.
fn pre(dom: &str, id: &str) -> String {
    let open = format!("<pre id=\"{id}\"");
    let at = dom
        .find(&open)
        .unwrap_or_else(|| panic!("no #{id} in the DOM"));
    let body = &dom[at..];
    let start = body.find('>').unwrap() + 1;
    let end = body.find("</pre>").unwrap();
    body[start..end].replace("&quot;", "\"")
}

/// Screenshots one chart alone, at its own size, into `png`: a page holding only its `<svg>`.
fn screenshot_chart(bin: &Path, svg: &str, png: &Path) {
    let attr = |name: &str| -> u32 {
        let key = format!(" {name}=\"");
        let at = svg.find(&key).unwrap() + key.len();
        svg[at..].split('"').next().unwrap().parse().unwrap()
    };
    let (w, h) = (attr("width"), attr("height"));
    let page = png.with_extension("html");
    std::fs::write(
        &page,
        format!(
            "<!DOCTYPE html><html><body style=\"margin:0;background:#fff\">{svg}</body></html>"
        ),
    )
    .unwrap();
    let _ = std::fs::remove_file(png);
    let profile = tempfile::tempdir().unwrap();
    headless(
        bin,
        profile.path(),
        &[
            format!("--screenshot={}", png.display()),
            format!("--window-size={w},{h}"),
        ],
        &format!("file://{}", page.display()),
        Duration::from_secs(90),
    );
    let bytes = std::fs::read(png).unwrap();
    assert!(bytes.starts_with(b"\x89PNG"), "{} is a PNG", png.display());
    // The IHDR chunk's width: the chart's own.
    let width = u32::from_be_bytes(bytes[16..20].try_into().unwrap());
    assert_eq!(width, w, "{} is the chart's width", png.display());
}

#[test]
fn each_chart_is_screenshotted_alone_at_ten_and_at_ten_thousand_runs_a_fabric() {
    let Some(bin) = chromium_or_skip() else {
        return;
    };
    // The screenshots stay under target/ as artefacts to look at.
    let artefacts = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("report-charts");
    std::fs::create_dir_all(&artefacts).unwrap();
    for (runs, days) in [(10, 3), (10_000, 90)] {
        let dir = tempfile::tempdir().unwrap();
        let html = chart_support::render(
            &chart_support::history(runs, &["ib", "roce"], days),
            dir.path(),
        );
        for id in CHARTS {
            screenshot_chart(
                &bin,
                chart_support::chart_svg(&html, id),
                &artefacts.join(format!("{id}-{runs}-runs.png")),
            );
        }
    }
}

#[test]
fn the_html_report_charts_are_drawn_in_the_fabrics_colours_with_their_legends() {
    let Some(bin) = chromium_or_skip() else {
        return;
    };
    let artefacts = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("report-html");
    std::fs::create_dir_all(&artefacts).unwrap();
    let html = artefacts.join("report.html");
    let root = format!("{}/..", env!("CARGO_MANIFEST_DIR"));
    // Two weeks on two fabrics, drains by three checks (tests/fixtures/sacct/charts).
    let status = assert_cmd::Command::cargo_bin("fabric-check")
        .unwrap()
        .current_dir(&root)
        .args([
            "report",
            "-i",
            "tests/fixtures/sacct/charts/history.txt",
            "--cost",
            "tests/fixtures/sacct/generated/cost.toml",
        ])
        .args(["--format", "html", "--output", html.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(
        !page.contains("src=\"http") && !page.contains("href=\"http"),
        "the page must be self-contained"
    );
    // The same page with a script that records where each chart was laid out.
    let probe_page = artefacts.join("report-probe.html");
    std::fs::write(
        &probe_page,
        page.replace(
            "</body>",
            "<pre id=\"rects\" style=\"display:none\"></pre><script>\
             window.addEventListener('load',()=>{const o={};\
             for(const f of document.querySelectorAll('figure.chart')){\
             const r=f.querySelector('svg').getBoundingClientRect();\
             o[f.id]=[Math.round(r.left+scrollX),Math.round(r.top+scrollY),Math.floor(r.width),Math.floor(r.height)];}\
             document.getElementById('rects').textContent=JSON.stringify(o);});</script></body>",
        ),
    )
    .unwrap();
    let size = "--window-size=1280,3200".to_string();
    let url = format!("file://{}", probe_page.display());
    let limit = Duration::from_secs(90);
    let profile = tempfile::tempdir().unwrap();
    let dom = headless(
        &bin,
        profile.path(),
        &["--dump-dom".into(), size.clone()],
        &url,
        limit,
    );
    // What a reader sees named: captions, axes with units, every legend entry.
    for text in [
        "Cost breakdown per fabric (USD)",
        "k USD over the window",
        "compute_capacity",
        "fabric_operations",
        "Cost per accepted run over time (USD, per day)",
        "k USD per accepted run",
        "ib (window: ",
        "roce (window: ",
        "Step time per run (each run",
        "step time (s)",
        "ib (n=112 runs)",
        "ib median 0.993 s",
        "roce median 1.150 s",
        "Nodes drained per day, by first failing check",
        "nodes drained",
        "ib.counters (4)",
        "roce.ecn (6)",
        "roce.mtu (7)",
        "roce.pfc (5)",
        "day (UTC, MM-DD)",
    ] {
        assert!(dom.contains(text), "the rendered page shows `{text}`");
    }
    let rects: serde_json::Value = serde_json::from_str(&pre(&dom, "rects")).unwrap();
    for id in CHARTS {
        assert!(
            rects[id][2].as_u64().unwrap() > 300,
            "#{id} is laid out: {rects}"
        );
    }

    let shot = artefacts.join("report.png");
    let _ = std::fs::remove_file(&shot);
    let profile2 = tempfile::tempdir().unwrap();
    headless(
        &bin,
        profile2.path(),
        &[format!("--screenshot={}", shot.display()), size],
        &url,
        limit,
    );
    assert!(std::fs::read(&shot).unwrap().starts_with(b"\x89PNG"));

    // The screenshot's pixels, read back by the browser: per chart region, how many are
    // coloured (not white, grey or black: axes, grid and text are; bars, boxes and lines are
    // not) and how many are each fabric's colour.
    let fabric = |k| {
        let (r, g, b) = fabric_report::report::render::fabric_colour(k);
        format!("[{r},{g},{b}]")
    };
    let pixels_page = artefacts.join("pixels.html");
    std::fs::write(
        &pixels_page,
        format!(
            "<!DOCTYPE html><html><body><pre id=\"out\">pending</pre><script>\
             const rects={rects};const colours=[{},{}];const img=new Image();\
             img.onload=()=>{{const c=document.createElement('canvas');c.width=img.width;c.height=img.height;\
             const x=c.getContext('2d');x.drawImage(img,0,0);const res={{}};\
             for(const [id,[l,t,w,h]] of Object.entries(rects)){{const d=x.getImageData(l,t,w,h).data;\
             let ink=0;const hit=colours.map(()=>0);\
             for(let i=0;i<d.length;i+=4){{const r=d[i],g=d[i+1],b=d[i+2];if(Math.max(r,g,b)-Math.min(r,g,b)>40)ink++;\
             colours.forEach((k,j)=>{{if(Math.abs(r-k[0])<=8&&Math.abs(g-k[1])<=8&&Math.abs(b-k[2])<=8)hit[j]++;}});}}\
             res[id]={{pixels:d.length/4,ink:ink,fabric_pixels:hit}};}}\
             document.getElementById('out').textContent=JSON.stringify(res);}};\
             img.onerror=()=>{{document.getElementById('out').textContent='unloadable';}};\
             img.src='report.png';</script></body></html>",
            fabric(0),
            fabric(1)
        ),
    )
    .unwrap();
    let profile3 = tempfile::tempdir().unwrap();
    let dom = headless(
        &bin,
        profile3.path(),
        &[
            "--dump-dom".into(),
            "--allow-file-access-from-files".into(),
            "--virtual-time-budget=10000".into(),
        ],
        &format!("file://{}", pixels_page.display()),
        limit,
    );
    let stats: serde_json::Value = serde_json::from_str(&pre(&dom, "out"))
        .unwrap_or_else(|e| panic!("pixel read-back failed ({e}): {}", pre(&dom, "out")));
    for id in CHARTS {
        let s = &stats[id];
        let share = s["ink"].as_f64().unwrap() / s["pixels"].as_f64().unwrap();
        assert!(
            share > 0.01,
            "#{id} has data drawn in the screenshot: {share:.4} of it coloured ({s})"
        );
    }
    // ib's blue and roce's orange mark their boxes and lines.
    for id in ["chart-cost-time", "chart-steps"] {
        for k in 0..2 {
            let n = stats[id]["fabric_pixels"][k].as_u64().unwrap();
            assert!(n > 100, "#{id} shows fabric {k}'s colour ({n} pixels)");
        }
    }
    // The cost and drain charts stack parts of a whole: their colours are not a fabric's.
    for id in ["chart-cost", "chart-drains"] {
        let n: u64 = (0..2)
            .map(|k| stats[id]["fabric_pixels"][k].as_u64().unwrap())
            .sum();
        assert!(
            n < 50,
            "#{id} uses no fabric colour for its parts ({n} pixels)"
        );
    }
}

#[test]
fn the_html_acceptance_report_renders_with_its_bandwidth_chart() {
    let Some(bin) = chromium_or_skip() else {
        return;
    };
    let artefacts = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("accept-html");
    std::fs::create_dir_all(&artefacts).unwrap();
    let html = artefacts.join("accept.html");
    let root = format!("{}/..", env!("CARGO_MANIFEST_DIR"));
    let out = assert_cmd::Command::cargo_bin("fabric-check")
        .unwrap()
        .current_dir(&root)
        .args([
            "accept",
            "tests/fixtures/nccl-tests/json/allreduce-2x8-per-rank.json",
        ])
        .args(["--format", "html", "--output", html.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "the slow rank fails acceptance");
    let profile = tempfile::tempdir().unwrap();
    let url = format!("file://{}", html.display());
    let dom = headless(
        &bin,
        profile.path(),
        &["--dump-dom".into()],
        &url,
        Duration::from_secs(90),
    );
    let at = dom
        .find("id=\"chart-busbw\"")
        .expect("the bandwidth chart is in the DOM");
    assert!(dom[at..].contains("<svg"), "the chart holds an svg");
    assert!(dom.contains("Acceptance: FAIL") && dom.contains("Purchase questions"));
}
