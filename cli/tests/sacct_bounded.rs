//! `jobs` and `report` run sacct through the one bounded door to accounting: a sacct that hangs
//! (a slurmdbd that never answers) is killed at `--sacct-timeout`, with what it started, and
//! the error names it and says what to do.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use assert_cmd::Command;

/// A stand-in sacct that prints one line, starts a child that ignores TERM, writes its pid to
/// `pid` and then hangs.
fn hanging_sacct(dir: &Path) -> (PathBuf, PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let pid = dir.join("pid");
    let sacct = dir.join("sacct");
    std::fs::write(
        &sacct,
        format!(
            "#!/bin/sh\necho 'JobID|State'\n(trap '' TERM; exec sleep 60) & echo $! > '{}'\nsleep 60\n",
            pid.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&sacct, std::fs::Permissions::from_mode(0o755)).unwrap();
    (sacct, pid)
}

/// Whether `pid` is gone (or a zombie nobody reaped yet).
fn is_dead(pid: &Path) -> bool {
    let pid = std::fs::read_to_string(pid).unwrap();
    match std::fs::read_to_string(format!("/proc/{}/stat", pid.trim())) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with(['Z', 'X'])),
    }
}

/// Runs `fabric-check ARGS` and returns its exit code, stderr and wall time.
fn run(args: &[&str]) -> (i32, String, Duration) {
    let start = Instant::now();
    let out = Command::cargo_bin("fabric-check")
        .unwrap()
        .args(args)
        .timeout(Duration::from_secs(50))
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        start.elapsed(),
    )
}

fn assert_killed_and_named(sacct: &Path, pid: &Path, code: i32, err: &str, took: Duration) {
    assert_ne!(code, 0, "{err}");
    assert!(
        err.contains(&format!(
            "{} did not finish within 500 ms and was killed",
            sacct.display()
        )),
        "{err}"
    );
    assert!(err.contains("--sacct-timeout"), "says what to do: {err}");
    assert!(took < Duration::from_secs(30), "took {took:?}");
    assert!(is_dead(pid), "the stand-in's child outlived the kill");
}

#[test]
fn jobs_kills_a_hanging_sacct_at_its_timeout_and_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let (sacct, pid) = hanging_sacct(dir.path());
    let (code, err, took) = run(&[
        "jobs",
        "--sacct",
        sacct.to_str().unwrap(),
        "--sacct-timeout",
        "500ms",
        "--job",
        "7",
    ]);
    assert_killed_and_named(&sacct, &pid, code, &err, took);
}

#[test]
fn report_kills_a_hanging_sacct_at_its_timeout_and_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let (sacct, pid) = hanging_sacct(dir.path());
    let (code, err, took) = run(&[
        "report",
        "--sacct",
        sacct.to_str().unwrap(),
        "--sacct-timeout",
        "500ms",
    ]);
    assert_killed_and_named(&sacct, &pid, code, &err, took);
}
