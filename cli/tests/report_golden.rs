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

/// Captured from the testbed's real Slurm 22.05.8 (`sacct --json` and `sacct -P`; only the
/// working directory was replaced by a neutral path): the JSON reads and finds the one job that
/// `fabric-run` tagged (after another tool's `JS1:` segment). The text form names `JobName`, the
/// users' free text, and is refused; without that column it reads and agrees with the JSON.
#[test]
fn the_testbed_capture_reads_in_both_forms_and_agrees() {
    let out = Command::cargo_bin("fabric-check")
        .unwrap()
        .current_dir(root())
        .args([
            "report",
            "-i",
            "tests/fixtures/sacct/testbed/sacct-22.05.txt",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(
        err.contains("sacct-22.05.txt:1: the header names `JobName`"),
        "{err}"
    );
    let text = std::fs::read_to_string(format!(
        "{}/tests/fixtures/sacct/testbed/sacct-22.05.txt",
        root()
    ))
    .unwrap();
    let without_name: String = text
        .lines()
        .map(|l| {
            let mut f: Vec<&str> = l.split('|').collect();
            f.remove(1);
            f.join("|") + "\n"
        })
        .collect();
    assert!(
        without_name.starts_with("JobID|Partition|"),
        "{without_name}"
    );
    let dir = tempfile::tempdir().unwrap();
    let txt = dir.path().join("sacct-22.05-without-jobname.txt");
    std::fs::write(&txt, without_name).unwrap();
    let summary = |input: &str| {
        let v: serde_json::Value =
            serde_json::from_str(&run(&["-i", input, "-f", "json"])).unwrap();
        let g = &v["groups"][0];
        (
            g["name"].clone(),
            g["records"].clone(),
            g["runs"].clone(),
            g["accepted_runs"].clone(),
            g["untagged"].clone(),
            g["step_p50_s"].clone(),
            g["checkpoint_share_pct"].clone(),
        )
    };
    let json = summary("tests/fixtures/sacct/testbed/sacct-22.05.json");
    assert_eq!(json, summary(txt.to_str().unwrap()));
    assert_eq!(json.0, "main");
    assert_eq!(json.3, 1, "one accepted run");
    insta::assert_snapshot!(run(&[
        "-i",
        "tests/fixtures/sacct/testbed/sacct-22.05.json",
        "--cost",
        "etc/cost.toml"
    ]));
}
