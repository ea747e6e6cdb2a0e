//! The HTML report opened in headless Chromium: it renders, the three charts are in the DOM,
//! and a screenshot is kept under target/ as a test artefact.
//!
//! Skips only when no Chromium is installed and FABRIC_REQUIRE_CHROMIUM is unset (CI sets it).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

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

#[test]
fn the_html_report_renders_with_its_three_charts() {
    let Some(bin) = chromium() else {
        assert!(
            std::env::var_os("FABRIC_REQUIRE_CHROMIUM").is_none(),
            "FABRIC_REQUIRE_CHROMIUM is set but no chromium is installed (apt-get install chromium)"
        );
        eprintln!("chromium is not installed; skipping the browser test");
        return;
    };
    let artefacts = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("report-html");
    std::fs::create_dir_all(&artefacts).unwrap();
    let html = artefacts.join("report.html");
    let root = format!("{}/..", env!("CARGO_MANIFEST_DIR"));
    let status = assert_cmd::Command::cargo_bin("fabric-check")
        .unwrap()
        .current_dir(&root)
        .args([
            "report",
            "-i",
            "tests/fixtures/sacct/generated/history.txt",
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

    let profile = tempfile::tempdir().unwrap();
    let url = format!("file://{}", html.display());
    let dom = headless(
        &bin,
        profile.path(),
        &["--dump-dom".into()],
        &url,
        Duration::from_secs(90),
    );
    for id in ["chart-cost", "chart-steps", "chart-drains"] {
        let at = dom
            .find(&format!("id=\"{id}\""))
            .unwrap_or_else(|| panic!("no #{id} in the rendered DOM"));
        let after = &dom[at..];
        let svg = after.find("<svg").expect("an svg in the figure");
        assert!(
            svg < after.find("</figure>").unwrap(),
            "#{id} holds its svg"
        );
    }
    assert!(
        dom.contains("Cost breakdown per fabric"),
        "the cost chart has its caption"
    );
    assert!(dom.contains("<rect"), "the bars are drawn");
    assert!(
        dom.contains("<polyline") || dom.contains("<path"),
        "the lines are drawn"
    );
    assert!(dom.contains("Fabrics side by side"));

    let shot = artefacts.join("report.png");
    let _ = std::fs::remove_file(&shot);
    let profile2 = tempfile::tempdir().unwrap();
    headless(
        &bin,
        profile2.path(),
        &[
            format!("--screenshot={}", shot.display()),
            "--window-size=1280,2400".into(),
        ],
        &url,
        Duration::from_secs(90),
    );
    let png = std::fs::read(&shot).expect("a screenshot was written");
    assert!(
        png.len() > 10_000 && png.starts_with(b"\x89PNG"),
        "the screenshot is a real PNG ({} bytes)",
        png.len()
    );
}

#[test]
fn the_html_acceptance_report_renders_with_its_bandwidth_chart() {
    let Some(bin) = chromium() else {
        assert!(
            std::env::var_os("FABRIC_REQUIRE_CHROMIUM").is_none(),
            "FABRIC_REQUIRE_CHROMIUM is set but no chromium is installed (apt-get install chromium)"
        );
        eprintln!("chromium is not installed; skipping the browser test");
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
