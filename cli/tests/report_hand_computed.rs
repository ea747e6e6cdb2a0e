//! The cost report over a six-job history small enough to check by hand.
//!
//! History (tests/fixtures/sacct/hand, made by make_history.py), window 2024-05-01 00:00–10:00
//! (10 h), every job on one node with 8 GPUs:
//!
//! | job | partition | state | hours | GPU-h | tag |
//! |---|---|---|---|---|---|
//! | 101 | ib | COMPLETED | 5 | 40 | accepted, step p50 1.0 s / p95 1.5 s, ckpt 900 s of 18000 s |
//! | 102 | ib | COMPLETED | 5 | 40 | accepted after 1 retry, p50 2.0 / p95 3.0, ckpt 900 of 18000 |
//! | 103 | ib | FAILED | 2.5 | 20 | not accepted, p50 3.0 / p95 4.0, ckpt 0 of 9000; ib002 drained (ib.port_rate) |
//! | 104 | ib | CANCELLED | 1 | 8 | tag without run summary |
//! | 105 | ib | REQUEUED | 0.5 | 4 | no tag |
//! | 201 | roce | COMPLETED | 10 | 80 | accepted, p50 1.2 / p95 1.4, ckpt 360 of 36000 |
//!
//! ib (cost entry: 16 GPUs; compute 876000 over 5 y, switches 87600 over 2 y, rack 10/h;
//! operations 16.8 h/week + 2 h per drain at 100/h):
//! * allocated 40+40+20+8+4 = 112 GPU-h; waste = retry 40×1/2 = 20 + failed 20 + requeued 4 = 44;
//!   cancelled 8 is neither; useful 112−44 = 68; capacity 16×10 = 160; idle 160−112 = 48;
//!   useful utilisation 68/160 = 42.5 %.
//! * spend: compute 876000/(5×8760)×10 = 200; switches 87600/(2×8760)×10 = 50; rack 10×10 = 100;
//!   operations (16.8×10/168 + 2×1 drain) = 3 h × 100 = 300; total 650.
//! * capacity cost per GPU-h (200+50+100)/160 = 2.1875; waste share 44×2.1875 = 96.25; idle
//!   share 48×2.1875 = 105 (both inside the 650, not added).
//! * runs with a summary: 101, 102, 103 → 3; accepted 2 → 66.7 %; 650/2 = 325 per accepted run.
//! * drains 1 over 5+5+2.5+1+0.5 = 14 node-h → 1000/14 = 71.43 per 1000 node-h.
//! * step p50 = median(1, 2, 3) = 2.0 s; p95 = median(1.5, 3, 4) = 3.0 s;
//!   checkpoint share (900+900+0)/(18000+18000+9000) = 4 %.
//!
//! roce (8 GPUs; compute 438000 over 5 y → 10/h): total 100, one accepted run → 100 per run,
//! utilisation 80/80 = 100 %.

use assert_cmd::Command;
use serde_json::Value;

fn fixture(p: &str) -> String {
    format!(
        "{}/../tests/fixtures/sacct/hand/{p}",
        env!("CARGO_MANIFEST_DIR")
    )
}

fn report(input: &str) -> Value {
    let out = Command::cargo_bin("fabric-check")
        .unwrap()
        .args([
            "report",
            "--format",
            "json",
            "--start",
            "2024-05-01",
            "--end",
            "2024-05-01T10:00",
        ])
        .args(["--cost", &fixture("cost.toml"), "--input", &fixture(input)])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn group<'a>(r: &'a Value, name: &str) -> &'a Value {
    r["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["name"] == name)
        .unwrap()
}

fn line(g: &Value, item: &str) -> String {
    let l = g["cost"]["lines"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["item"] == item)
        .unwrap();
    l["amount"].as_str().unwrap().to_string()
}

fn dec(v: &Value) -> f64 {
    v.as_str().unwrap().parse().unwrap()
}

#[test]
fn the_ib_partition_costs_what_the_arithmetic_says() {
    let r = report("history.txt");
    assert_eq!(r["window"]["hours"], "10");
    let ib = group(&r, "ib");
    assert_eq!(ib["allocated_gpu_h"], "112");
    assert_eq!(ib["retry_gpu_h"], "20");
    assert_eq!(ib["failed_gpu_h"], "20");
    assert_eq!(ib["requeued_gpu_h"], "4");
    assert_eq!(ib["waste_gpu_h"], "44");
    assert_eq!(ib["cancelled_gpu_h"], "8");
    assert_eq!(ib["useful_gpu_h"], "68");
    assert_eq!(ib["capacity_gpu_h"], "160");
    assert_eq!(ib["idle_gpu_h"], "48");
    assert_eq!(dec(&ib["useful_utilisation_pct"]), 42.5);
    assert_eq!(line(ib, "compute_capacity"), "200");
    assert_eq!(line(ib, "switches"), "50");
    assert_eq!(line(ib, "rack_power_and_space"), "100");
    assert_eq!(dec(&ib["cost"]["operations_h"]), 3.0);
    assert_eq!(dec(&Value::String(line(ib, "fabric_operations"))), 300.0);
    assert_eq!(dec(&ib["cost"]["total"]), 650.0);
    assert_eq!(ib["cost"]["capacity_cost_per_gpu_h"], "2.1875");
    assert_eq!(
        dec(&Value::String(line(ib, "failed_job_and_retry_waste"))),
        96.25
    );
    assert_eq!(
        dec(&Value::String(line(ib, "queue_delay_and_idle_gpu_time"))),
        105.0
    );
    assert_eq!(ib["runs"], 3);
    assert_eq!(ib["accepted_runs"], 2);
    assert_eq!(dec(&ib["cost"]["per_accepted_run"]), 325.0);
    assert_eq!(ib["drains"], 1);
    // 1 drain in 14 node-hours would be 71.43 per 1000 node-hours: too few node-hours (under
    // 100) to carry a rate per thousand, so none is given.
    assert_eq!(ib["node_h"], "14");
    assert_eq!(ib["drains_per_1000_node_h"], Value::Null);
    assert_eq!(ib["top_drain_reasons"][0][0], "ib.port_rate");
    assert_eq!(ib["step_p50_s"]["value"], 2.0);
    assert_eq!(ib["step_p95_s"]["value"], 3.0);
    assert_eq!(ib["checkpoint_share_pct"]["value"], 4.0);
}

#[test]
fn the_roce_partition_is_fully_used_and_cheaper_per_run() {
    let r = report("history.txt");
    let roce = group(&r, "roce");
    assert_eq!(dec(&roce["cost"]["total"]), 100.0);
    assert_eq!(dec(&roce["cost"]["per_accepted_run"]), 100.0);
    assert_eq!(dec(&roce["useful_utilisation_pct"]), 100.0);
}

#[test]
fn the_json_and_text_forms_of_one_history_give_the_same_report() {
    assert_eq!(report("history.txt"), report("history-22.05.json"));
}

#[test]
fn the_side_by_side_table_marks_the_cheaper_fabric() {
    let out = Command::cargo_bin("fabric-check")
        .unwrap()
        .args([
            "report",
            "--start",
            "2024-05-01",
            "--end",
            "2024-05-01T10:00",
        ])
        .args([
            "--cost",
            &fixture("cost.toml"),
            "--input",
            &fixture("history.txt"),
        ])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let row = text
        .lines()
        .find(|l| l.starts_with("cost per accepted run"))
        .unwrap();
    assert!(
        row.contains("325.00 EUR") && row.contains("100.00 EUR *"),
        "{row}"
    );
}
