//! Retries, deadlines and validation decide attempts and the outcome.

mod common;

use common::{fabric_run, fake_train, of, records, step_end};
use predicates::str::contains;

#[test]
fn an_nccl_error_is_retried_until_the_run_succeeds() {
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("r.jsonl");
    fabric_run()
        .arg("--record")
        .arg(&rec)
        .args([
            "--retries",
            "3",
            "--retry-on",
            "output=NCCL error",
            "--backoff",
            "10ms",
            "--",
        ])
        .arg(fake_train())
        .args(["--fail-attempts", "2", "--steps", "1"])
        .assert()
        .code(0)
        .stderr(contains("relaunching"));
    let recs = records(&rec);
    let attempts = of(&recs, "attempt");
    let seen: Vec<(u32, Option<i32>, bool)> = attempts
        .iter()
        .map(|a| (a.attempt.unwrap(), a.exit_code, a.retry.unwrap()))
        .collect();
    assert_eq!(
        seen,
        [(1, Some(3), true), (2, Some(3), true), (3, Some(0), false)]
    );
    let end = step_end(&recs);
    assert_eq!(end.attempts, Some(3));
    assert_eq!(end.outcome.as_deref(), Some("accepted"));
    let s = fabric_core::record::summarize_records(&rec, &Default::default()).unwrap();
    assert_eq!(s.retries, 2);
}

#[test]
fn a_failure_that_matches_no_retry_condition_is_not_retried() {
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("r.jsonl");
    fabric_run()
        .arg("--record")
        .arg(&rec)
        .args([
            "--retries",
            "3",
            "--retry-on",
            "exit=5",
            "--backoff",
            "10ms",
            "--",
        ])
        .arg(fake_train())
        .args(["--fail-attempts", "1"])
        .assert()
        .code(3);
    let recs = records(&rec);
    assert_eq!(of(&recs, "attempt").len(), 1);
    assert_eq!(step_end(&recs).outcome.as_deref(), Some("failed"));
}

#[test]
fn exhausted_retries_pass_on_the_last_status() {
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("r.jsonl");
    fabric_run()
        .arg("--record")
        .arg(&rec)
        .args([
            "--retries",
            "1",
            "--backoff",
            "10ms",
            "--",
            "sh",
            "-c",
            "exit 9",
        ])
        .assert()
        .code(9);
    let recs = records(&rec);
    assert_eq!(of(&recs, "attempt").len(), 2);
    assert_eq!(step_end(&recs).attempts, Some(2));
}

#[test]
fn a_run_past_its_deadline_is_a_timeout_with_the_childs_status() {
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("r.jsonl");
    fabric_run()
        .arg("--record")
        .arg(&rec)
        .args([
            "--deadline",
            "100ms",
            "--accept-cmd",
            "true",
            "--",
            "sleep",
            "0.3",
        ])
        .assert()
        .code(0);
    let end = step_end(&records(&rec));
    assert_eq!(end.outcome.as_deref(), Some("timeout"));
    assert_eq!(end.on_time, Some(false));
    assert_eq!(end.validated, None, "a late run is not validated");
}

#[test]
fn an_rfc3339_deadline_in_the_future_is_met() {
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("r.jsonl");
    fabric_run()
        .arg("--record")
        .arg(&rec)
        .args(["--deadline", "2999-01-01T00:00:00+01:00", "--", "true"])
        .assert()
        .code(0);
    let end = step_end(&records(&rec));
    assert_eq!(end.outcome.as_deref(), Some("accepted"));
    assert_eq!(end.on_time, Some(true));
}

#[test]
fn a_failed_validation_makes_a_clean_run_failed_without_changing_its_status() {
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("r.jsonl");
    fabric_run()
        .arg("--record")
        .arg(&rec)
        .args(["--accept-cmd", "test -e /nonexistent/output", "--", "true"])
        .assert()
        .code(0);
    let end = step_end(&records(&rec));
    assert_eq!(end.validated, Some(false));
    assert_eq!(end.outcome.as_deref(), Some("failed"));
}

#[test]
fn bad_options_are_refused_before_anything_runs() {
    for (args, says) in [
        (&["--deadline", "tomorrow-ish"][..], "--deadline"),
        (&["--retry-on", "exit=abc"][..], "0 to 255"),
        (&["--step-regex", "("][..], "--step-regex"),
        (&["--checkpoint-quiet", "soon"][..], "duration"),
    ] {
        fabric_run()
            .args(args)
            .args(["--", "sh", "-c", "echo ran"])
            .assert()
            .code(2)
            .stdout("")
            .stderr(contains(says));
    }
}
