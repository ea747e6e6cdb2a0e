//! The node's known inventory through the binary: a GPU that fell off the bus stays a fault on
//! every look until it is back or an admin accepts its absence.

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use serde_json::Value;

fn fixture(name: &str) -> PathBuf {
    fabric_testkit::shared_sysfs_root!(name)
}

fn run(args: &[&str]) -> (i32, String, String) {
    let out = Command::cargo_bin("fabric-check")
        .unwrap()
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// One probe of `tree` as node n1 with `state` as its state folder: exit code and document.
fn probe(tree: &Path, state: &Path) -> (i32, Value) {
    let (rc, out, err) = run(&[
        "probe",
        "--node",
        "n1",
        "--sysfs-root",
        s(tree),
        "--state-dir",
        s(state),
        "--second-look-ms",
        "0",
    ]);
    (
        rc,
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out} {err}")),
    )
}

#[test]
fn a_gpu_that_fell_off_the_bus_fails_every_look_until_it_is_back() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let (healthy, gone) = (fixture("ib8-healthy"), fixture("ib8-gpu-gone"));
    let rcs: Vec<i32> = [&healthy, &gone, &gone, &gone, &healthy]
        .iter()
        .map(|t| probe(t, &state).0)
        .collect();
    // Before the known inventory: 0 2 0 0 0 (the second look compared with a last.json
    // that no longer had the GPU).
    assert_eq!(rcs, [0, 2, 2, 2, 0]);
    assert!(state.join("known.json").is_file());
}

#[test]
fn a_node_without_a_record_that_finds_a_gpu_gone_keeps_failing_from_its_last_probe() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let (healthy, gone) = (fixture("ib8-healthy"), fixture("ib8-gpu-gone"));
    assert_eq!(probe(&healthy, &state).0, 0);
    // A node upgraded from a release without the record: only last.json is there.
    std::fs::remove_file(state.join("known.json")).unwrap();
    let (rc, doc) = probe(&gone, &state);
    assert_eq!(rc, 2);
    let seeded = doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f["message"].as_str().unwrap().contains("seeded"));
    assert!(seeded, "{doc}");
    assert_eq!(probe(&gone, &state).0, 2);
}

#[test]
fn an_accepted_inventory_says_who_and_what_changed_and_ends_the_fault() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let (healthy, gone) = (fixture("ib8-healthy"), fixture("ib8-gpu-gone"));
    assert_eq!(probe(&healthy, &state).0, 0);
    assert_eq!(probe(&gone, &state).0, 2);
    let (rc, out, err) = run(&[
        "inventory",
        "accept",
        "--node",
        "n1",
        "--sysfs-root",
        s(&gone),
        "--state-dir",
        s(&state),
        "--by",
        "alice",
        "--note",
        "GPU RMA 4711",
    ]);
    assert_eq!(rc, 0, "{err}");
    assert!(out.contains("by alice"), "{out}");
    assert!(out.contains("- GPU 0000:"), "{out}");
    assert_eq!(probe(&gone, &state).0, 0);
    let (rc, out, _) = run(&[
        "inventory",
        "show",
        "--node",
        "n1",
        "--state-dir",
        s(&state),
        "--json",
    ]);
    assert_eq!(rc, 0);
    let k: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (k["how"].as_str(), k["by"].as_str(), k["note"].as_str()),
        (Some("accepted"), Some("alice"), Some("GPU RMA 4711"))
    );
}

#[test]
fn show_without_a_record_says_how_one_is_made() {
    let dir = tempfile::tempdir().unwrap();
    let (rc, _, err) = run(&[
        "inventory",
        "show",
        "--node",
        "n1",
        "--state-dir",
        s(dir.path()),
    ]);
    assert_eq!(rc, 1);
    assert!(err.contains("inventory accept"), "{err}");
}

#[test]
fn a_record_of_another_node_is_a_warning_and_is_never_overwritten_by_a_probe() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let healthy = fixture("ib8-healthy");
    assert_eq!(probe(&healthy, &state).0, 0);
    let path = state.join("known.json");
    let text = std::fs::read_to_string(&path)
        .unwrap()
        .replace("\"node\": \"n1\"", "\"node\": \"n7\"");
    std::fs::write(&path, &text).unwrap();
    let (rc, doc) = probe(&healthy, &state);
    assert_eq!(rc, 1, "{doc}");
    let msg = doc["findings"][0]["message"].as_str().unwrap();
    assert!(
        msg.contains("n7") && msg.contains("inventory accept"),
        "{msg}"
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
}
