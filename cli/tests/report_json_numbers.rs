//! The JSON report's numbers read as a person writes them: a step time recorded as `1.2` is
//! `1.2`, not the `1.2000000476837158` of its `f32` sample, and nothing is `-0.0`.

use assert_cmd::Command;
use serde_json::Value;

fn report_json(input: &std::path::Path) -> (String, Value) {
    let out = Command::cargo_bin("fabric-check")
        .unwrap()
        .args(["report", "-i", input.to_str().unwrap(), "--format", "json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let doc = serde_json::from_str(&text).unwrap();
    (text, doc)
}

fn raw_value<'a>(text: &'a str, group: &str, key: &str) -> &'a str {
    let g = text.find(&format!("\"name\": \"{group}\"")).unwrap();
    let k = g + text[g..].find(&format!("\"{key}\": {{")).unwrap();
    let v = k + text[k..].find("\"value\": ").unwrap() + "\"value\": ".len();
    let end = v + text[v..].find([',', '\n']).unwrap();
    &text[v..end]
}

#[test]
fn step_time_medians_are_written_as_the_decimals_of_the_tags() {
    // Medians of the 112 runs per fabric of tests/fixtures/sacct/charts/history.txt, worked out
    // from the tags' three-decimal step times (Python's statistics.median).
    let input = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/sacct/charts/history.txt");
    let (text, _) = report_json(&input);
    assert_eq!(raw_value(&text, "ib", "step_p50_s"), "0.9935");
    assert_eq!(raw_value(&text, "ib", "step_p95_s"), "1.2915");
    assert_eq!(raw_value(&text, "roce", "step_p50_s"), "1.15");
    assert_eq!(raw_value(&text, "roce", "step_p95_s"), "1.495");
}

#[test]
fn a_lone_step_time_keeps_its_decimal_form_and_a_negative_zero_loses_its_sign() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("h.txt");
    let run = |p50: &str| {
        format!(
            r#"fabric-check/v1 {{"verdict":"pass","nnodes":1,"nodes":{{}},"run":{{"steps":10,"step_p50_s":{p50},"step_p95_s":{p50},"ckpt_n":0,"ckpt_total_s":-0.0,"ckpt_max_s":0.0,"retries":0,"requeues":0,"duration_s":60.0,"outcome":"accepted","accepted":true,"on_time":true}}}}"#
        )
    };
    std::fs::write(
        &p,
        format!(
            "JobID|Partition|State|Start|End|ElapsedRaw|NNodes|AllocTRES|AdminComment\n\
             1|ib|COMPLETED|100|160|60|1|gres/gpu=8|{}\n\
             2|roce|COMPLETED|100|160|60|1|gres/gpu=8|{}\n",
            run("1.2"),
            run("-0.0")
        ),
    )
    .unwrap();
    let (text, doc) = report_json(&p);
    assert_eq!(raw_value(&text, "ib", "step_p50_s"), "1.2");
    assert_eq!(raw_value(&text, "roce", "step_p50_s"), "0.0");
    assert_eq!(raw_value(&text, "roce", "checkpoint_share_pct"), "0.0");
    assert!(!text.contains("-0.0") && !text.contains("-0,"), "{text}");
    assert!(!text.contains("0000000"), "no f32 noise: {text}");
    assert_eq!(doc["groups"][0]["step_p50_s"]["n"], 1);
}
