//! Golden outputs of `fabric-check report` over the sacct fixtures, in every text format.

use assert_cmd::Command;

fn root() -> String {
    format!("{}/..", env!("CARGO_MANIFEST_DIR"))
}

fn run(args: &[&str]) -> String {
    let out = Command::cargo_bin("fabric-check")
        .unwrap()
        .current_dir(root())
        .arg("report")
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

const HAND: [&str; 8] = [
    "--input",
    "tests/fixtures/sacct/hand/history.txt",
    "--cost",
    "tests/fixtures/sacct/hand/cost.toml",
    "--start",
    "2024-05-01",
    "--end",
    "2024-05-01T10:00",
];

#[test]
fn the_hand_history_as_a_terminal_table() {
    insta::assert_snapshot!(run(&HAND));
}

#[test]
fn the_hand_history_as_markdown() {
    insta::assert_snapshot!(run(&[&HAND[..], &["--format", "markdown"]].concat()));
}

#[test]
fn the_hand_history_as_csv() {
    insta::assert_snapshot!(run(&[&HAND[..], &["--format", "csv"]].concat()));
}

#[test]
fn the_hand_history_as_json() {
    insta::assert_snapshot!(run(&[&HAND[..], &["--format", "json"]].concat()));
}

const GEN_COST: &str = "tests/fixtures/sacct/generated/cost.toml";

#[test]
fn a_generated_22_05_json_history() {
    insta::assert_snapshot!(run(&[
        "-i",
        "tests/fixtures/sacct/generated/history-22.05.json",
        "--cost",
        GEN_COST
    ]));
}

#[test]
fn a_generated_history_in_the_newer_json_schema_gives_the_same_report_as_22_05() {
    let old = run(&[
        "-i",
        "tests/fixtures/sacct/generated/history-22.05.json",
        "--cost",
        GEN_COST,
    ]);
    let new = run(&[
        "-i",
        "tests/fixtures/sacct/generated/history-v0.0.40.json",
        "--cost",
        GEN_COST,
    ]);
    assert_eq!(old, new);
}

#[test]
fn a_generated_history_as_sacct_p_text_gives_the_same_report_as_json() {
    let json = run(&[
        "-i",
        "tests/fixtures/sacct/generated/history-22.05.json",
        "--cost",
        GEN_COST,
        "-f",
        "json",
    ]);
    let text = run(&[
        "-i",
        "tests/fixtures/sacct/generated/history.txt",
        "--cost",
        GEN_COST,
        "-f",
        "json",
    ]);
    assert_eq!(json, text);
}

#[test]
fn grouping_by_account_makes_one_column_per_account() {
    insta::assert_snapshot!(run(&[
        "-i",
        "tests/fixtures/sacct/generated/history.txt",
        "--group-by",
        "account",
        "-f",
        "markdown"
    ]));
}

#[test]
fn the_testbed_capture_reads_when_present() {
    // Captured from the testbed's real Slurm 22.05 (sacct --json and sacct -P); present once the
    // testbed has run jobs. Both forms must read and agree on the job count.
    let dir = format!("{}/tests/fixtures/sacct/testbed", root());
    let json = format!("{dir}/sacct-22.05.json");
    if !std::path::Path::new(&json).exists() {
        eprintln!("no testbed capture in {dir}; nothing to compare");
        return;
    }
    let out = run(&[
        "-i",
        "tests/fixtures/sacct/testbed/sacct-22.05.json",
        "-f",
        "json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let records: u64 = v["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["records"].as_u64().unwrap())
        .sum();
    assert!(records > 0);
    insta::assert_snapshot!(run(&[
        "-i",
        "tests/fixtures/sacct/testbed/sacct-22.05.json"
    ]));
}
