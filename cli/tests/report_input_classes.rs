//! `report` on sacct captures in shapes seen on real clusters that earlier versions misread
//! silently (written here in those shapes, the figures made up): every job listed twice, no
//! `Elapsed` column, no TRES column.

use assert_cmd::Command;
use serde_json::Value;

fn report(text: &str) -> (Value, String) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("sacct.txt");
    std::fs::write(&p, text).unwrap();
    let out = Command::cargo_bin("fabric-check")
        .unwrap()
        .args(["report", "-f", "json", "-i"])
        .arg(&p)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    (
        serde_json::from_slice(&out.stdout).unwrap(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn group<'a>(doc: &'a Value, name: &str) -> &'a Value {
    doc["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["name"] == name)
        .unwrap()
}

const JOBS: &str = "101|ib|ann|COMPLETED|2024-05-01T10:00:00|2024-05-01T12:00:00|2|billing=16,cpu=16,gres/gpu=8,node=2\n\
                    102|roce|bob|FAILED|2024-05-01T10:00:00|2024-05-01T11:00:00|1|cpu=8,gres/gpu=4,node=1\n";

#[test]
fn a_capture_listing_every_job_twice_gives_the_node_hours_of_one_copy_and_a_warning() {
    let header = "JobID|Partition|User|State|Start|End|NNodes|AllocTRES\n";
    let (doc, stderr) = report(&format!("{header}{JOBS}{JOBS}"));
    // 2 nodes × 2 h from Start to End (no Elapsed column), counted once.
    assert_eq!(group(&doc, "ib")["node_h"], "4");
    assert_eq!(group(&doc, "ib")["allocated_gpu_h"], "16");
    assert_eq!(group(&doc, "roce")["records"], 1);
    assert_eq!(doc["inputs"]["readable"], "warn");
    let w = doc["inputs"]["warnings"][0].as_str().unwrap();
    assert!(w.contains("2 records listed a second time"), "{w}");
    assert!(stderr.contains("counted once: job 101, 102"), "{stderr}");
}

#[test]
fn a_capture_without_a_tres_column_names_it_instead_of_a_silent_zero() {
    // ReqTRES is what was asked for, not what was allocated: the report does not read it.
    let header = "JobID|Partition|User|State|Start|End|NNodes|ReqTRES\n";
    let (doc, _) = report(&format!("{header}{JOBS}"));
    assert_eq!(group(&doc, "ib")["node_h"], "4");
    assert_eq!(doc["inputs"]["readable"], "warn");
    let w = doc["inputs"]["warnings"].to_string();
    assert!(w.contains("no AllocTRES (or AllocGRES) column"), "{w}");
}
