//! Bad inputs to `fabric-check report` get an error naming the file, the place and what to do.

use assert_cmd::Command;

fn report(args: &[&str]) -> (i32, String) {
    let out = Command::cargo_bin("fabric-check")
        .unwrap()
        .arg("report")
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn hand(p: &str) -> String {
    format!(
        "{}/../tests/fixtures/sacct/hand/{p}",
        env!("CARGO_MANIFEST_DIR")
    )
}

#[test]
fn a_truncated_json_file_is_reported_with_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let full = std::fs::read_to_string(hand("history-22.05.json")).unwrap();
    let cut = dir.path().join("cut.json");
    std::fs::write(&cut, &full[..full.len() * 2 / 3]).unwrap();
    let (code, err) = report(&["-i", cut.to_str().unwrap()]);
    assert_eq!(code, 3);
    assert!(err.contains("cut.json:line "), "{err}");
    assert!(
        err.contains("the input ends early (truncated after 3 complete jobs, inside a job)"),
        "{err}"
    );
}

#[test]
fn a_text_file_with_a_broken_line_names_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let mut text = std::fs::read_to_string(hand("history.txt")).unwrap();
    text.push_str("999|ib|ml\n");
    let p = dir.path().join("bad.txt");
    std::fs::write(&p, &text).unwrap();
    let (code, err) = report(&["-i", p.to_str().unwrap()]);
    assert_eq!(code, 0, "the other lines are read: {err}");
    assert!(
        err.contains("bad.txt: 1 line skipped: line 13: 3 fields where the header has 15"),
        "{err}"
    );
    // When no line at all reads, the input is not sacct output of this layout: an error.
    let header = text.lines().next().unwrap();
    let p = dir.path().join("none.txt");
    std::fs::write(&p, format!("{header}\n999|ib|ml\n1000|ib\n")).unwrap();
    let (code, err) = report(&["-i", p.to_str().unwrap()]);
    assert_eq!(code, 3);
    assert!(
        err.contains("none.txt:2: 3 fields where the header has 15"),
        "{err}"
    );
}

#[test]
fn binary_garbage_is_not_sacct_output() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("junk.bin");
    std::fs::write(&p, [0u8, 159, 146, 150, 10, 1, 2]).unwrap();
    let (code, err) = report(&["-i", p.to_str().unwrap(), "--input-format", "json"]);
    assert_eq!(code, 3);
    assert!(err.contains("is not `sacct --json` output"), "{err}");
}

#[test]
fn a_cost_file_with_a_float_amount_says_how_to_write_it() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("cost.toml");
    std::fs::write(
        &p,
        "[fabric.ib]\ngpus = 8\n[fabric.ib.running]\nrack_power_and_space = 10.5\n",
    )
    .unwrap();
    let (code, err) = report(&["-i", &hand("history.txt"), "--cost", p.to_str().unwrap()]);
    assert_eq!(code, 3);
    assert!(err.contains("write amounts as strings"), "{err}");
}

#[test]
fn a_missing_sacct_binary_is_reported_not_a_panic() {
    let (code, err) = report(&["--sacct", "/nonexistent/sacct"]);
    assert_eq!(code, 3);
    assert!(err.contains("cannot run /nonexistent/sacct"), "{err}");
}

#[test]
fn a_job_with_a_field_of_the_wrong_type_is_named_with_its_line_and_index() {
    let dir = tempfile::tempdir().unwrap();
    let full = std::fs::read_to_string(hand("history-22.05.json")).unwrap();
    let at: Vec<usize> = full
        .match_indices("\n      \"partition\": \"")
        .map(|(i, _)| i)
        .collect();
    assert!(at.len() > 2);
    let bad = format!(
        "{}\n      \"partition\": 42, \"p\": \"{}",
        &full[..at[1]],
        &full[at[1] + "\n      \"partition\": \"".len()..]
    );
    // The second job opens on the line after the first one's closing `},`.
    let second_open = 1 + full[..at[1]].rfind("\n    {").unwrap();
    let line = 1 + full[..second_open].matches('\n').count();
    let p = dir.path().join("bad.json");
    std::fs::write(&p, bad).unwrap();
    let (code, err) = report(&["-i", p.to_str().unwrap()]);
    assert_eq!(code, 3);
    assert!(
        err.contains(&format!(
            "bad.json:line {line}: job #2 of the jobs array is not a Slurm job record: invalid type: integer `42`"
        )),
        "{err}"
    );
    assert!(err.contains("is this `sacct --json` output?"), "{err}");
}

#[test]
fn a_cut_line_in_the_middle_of_a_text_history_is_skipped_and_counted_not_fatal() {
    let full = std::fs::read_to_string(hand("history.txt")).unwrap();
    let mut lines: Vec<&str> = full.lines().collect();
    let is_job = |l: &str| !l.split('|').next().unwrap().contains('.');
    let whole_jobs = lines.iter().skip(1).filter(|l| is_job(l)).count();
    let cut_line = lines[2][..lines[2].len() / 3].to_string();
    lines[2] = &cut_line;
    let dir = tempfile::tempdir().unwrap();
    let cut = dir.path().join("cut.txt");
    std::fs::write(&cut, lines.join("\n") + "\n").unwrap();
    let out = Command::cargo_bin("fabric-check")
        .unwrap()
        .args(["report", "-i", cut.to_str().unwrap(), "--format", "json"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["inputs"]["readable"], "warn");
    assert_eq!(doc["inputs"]["skipped_lines"], 1);
    let warning = doc["inputs"]["warnings"][0].as_str().unwrap();
    assert!(
        warning.contains("cut.txt: 1 line skipped: line 3: "),
        "{warning}"
    );
    assert!(err.contains("1 line skipped: line 3"), "{err}");
    let records: u64 = doc["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["records"].as_u64().unwrap())
        .sum();
    let cut_was_a_job = is_job(lines[2]);
    assert_eq!(records as usize, whole_jobs - usize::from(cut_was_a_job));
}

#[test]
fn a_saved_history_with_a_free_text_column_beside_admin_comment_is_refused_with_the_export_to_use_instead()
 {
    // A comment holding the delimiter and a line break frames rows as wide as the header, with
    // a fabric verdict of the user's: the reader cannot tell them from root's, so it reads none.
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("history.txt");
    std::fs::write(
        &p,
        "JobID|Partition|State|ElapsedRaw|NNodes|Comment|AdminComment\n5|ib|FAILED|60|2|x|\n6|ib|COMPLETED|60|2|y|\n",
    )
    .unwrap();
    let (code, err) = report(&["-i", p.to_str().unwrap()]);
    assert_eq!(code, 3, "{err}");
    assert!(
        err.contains(
            "history.txt:1: the header names `Comment`, a column a job's user writes as free text"
        ),
        "{err}"
    );
    assert!(
        err.contains("export with `sacct --json` instead (it quotes every string), or again with a --format that leaves it out"),
        "{err}"
    );
}
