//! `fabric-check report --drill FILE`: the fault drill's section joins the HTML report.

use assert_cmd::Command;
use fabric_drill::class::{FaultClass, Moment, NodeKind};
use fabric_drill::observe::{Detector, Signal, Strength};
use fabric_drill::plan::Round;
use fabric_drill::score::{Prices, RoundOutcome, score};

fn history() -> String {
    format!(
        "{}/../tests/fixtures/sacct/hand/history-22.05.json",
        env!("CARGO_MANIFEST_DIR")
    )
}

fn drill_json(dir: &std::path::Path) -> std::path::PathBuf {
    let o = RoundOutcome {
        round: Round {
            index: 1,
            class: FaultClass::EcnOff,
            node: "n3".into(),
            kind: NodeKind::Roce,
            moment: Moment::Before,
            job: None,
            during_at_permille: None,
            size: None,
        },
        injected_at_ms: Some(1_000),
        signals: vec![Signal {
            node: "n3".into(),
            at_ms: 2_500,
            detector: Detector::Prolog,
            strength: Strength::Drain,
            check: "roce.ecn".into(),
            job: Some(7),
        }],
        job: None,
        error: None,
        measured_pct: None,
    };
    let s = score(5, &[o], &Prices::default());
    let p = dir.join("drill.json");
    std::fs::write(&p, serde_json::to_string(&s).unwrap()).unwrap();
    p
}

#[test]
fn the_html_report_carries_the_drill_section_inside_its_page() {
    let dir = tempfile::tempdir().unwrap();
    let d = drill_json(dir.path());
    let out = Command::cargo_bin("fabric-check")
        .unwrap()
        .args(["report", "-i", &history(), "-f", "html", "--drill"])
        .arg(&d)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let html = String::from_utf8_lossy(&out.stdout);
    let section = html
        .find("<section id=\"drill\">")
        .expect("the drill section");
    let body_end = html.rfind("</body>").expect("one page");
    assert!(section < body_end, "the section is inside the page");
    assert!(html[section..].contains("ecn_off"), "its class row");
    assert_eq!(html.matches("<html").count(), 1, "one page, not two");
}

#[test]
fn the_drill_section_is_refused_outside_html_and_a_wrong_file_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let d = drill_json(dir.path());
    let out = Command::cargo_bin("fabric-check")
        .unwrap()
        .args(["report", "-i", &history(), "--drill"])
        .arg(&d)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--format html"));
    let bad = dir.path().join("not-drill.json");
    std::fs::write(&bad, "{}").unwrap();
    let out = Command::cargo_bin("fabric-check")
        .unwrap()
        .args(["report", "-i", &history(), "-f", "html", "--drill"])
        .arg(&bad)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("not-drill.json is not a drill document"),
        "{err}"
    );
}
