//! fabric-run is transparent: exit status, start failures, signals, output bytes.

mod common;

use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{bin, fabric_run, of, path_env, records, step_end};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use predicates::str::contains;

#[test]
fn true_exits_zero_and_is_recorded_as_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("r.jsonl");
    fabric_run()
        .arg("--record")
        .arg(&rec)
        .args(["--", "true"])
        .assert()
        .code(0);
    let recs = records(&rec);
    let kinds: Vec<&str> = recs.iter().map(|r| r.kind.as_str()).collect();
    assert_eq!(kinds, ["step_start", "attempt", "step_end"]);
    assert!(recs.iter().all(|r| r.v == 1 && r.run == recs[0].run));
    assert_eq!(recs[0].cmd.as_deref(), Some(&["true".to_owned()][..]));
    let end = step_end(&recs);
    assert_eq!(end.outcome.as_deref(), Some("accepted"));
    assert_eq!(end.exit_code, Some(0));
    assert_eq!(end.signal, None);
    assert!(end.duration_s.unwrap() >= 0.0);
}

#[test]
fn false_exits_one_and_is_recorded_as_failed() {
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("r.jsonl");
    fabric_run()
        .arg("--record")
        .arg(&rec)
        .args(["--", "false"])
        .assert()
        .code(1);
    let end = step_end(&records(&rec));
    assert_eq!(end.outcome.as_deref(), Some("failed"));
    assert_eq!(end.exit_code, Some(1));
}

#[test]
fn any_exit_status_passes_through() {
    for code in [2, 42, 255] {
        fabric_run()
            .args(["--", "sh", "-c", &format!("exit {code}")])
            .assert()
            .code(code);
    }
}

#[test]
fn a_command_that_kills_itself_gives_128_plus_the_signal() {
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("r.jsonl");
    fabric_run()
        .arg("--record")
        .arg(&rec)
        .args(["--", "sh", "-c", "kill -KILL $$"])
        .assert()
        .code(137);
    let end = step_end(&records(&rec));
    assert_eq!(end.signal, Some(9));
    assert_eq!(end.exit_code, None);
    assert_eq!(end.outcome.as_deref(), Some("killed"));
    fabric_run()
        .args(["--", "sh", "-c", "kill -SEGV $$"])
        .assert()
        .code(139);
}

#[test]
fn a_missing_command_gives_127_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("r.jsonl");
    fabric_run()
        .arg("--record")
        .arg(&rec)
        .args(["--", "no-such-command-anywhere"])
        .assert()
        .code(127)
        .stderr(contains("cannot run `no-such-command-anywhere`"));
    let end = step_end(&records(&rec));
    assert_eq!(end.exit_code, Some(127));
    assert_eq!(end.outcome.as_deref(), Some("failed"));
}

#[test]
fn a_non_executable_file_gives_126() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("script.sh");
    std::fs::write(&script, "#!/bin/sh\necho hi\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o644)).unwrap();
    fabric_run()
        .arg("--")
        .arg(&script)
        .assert()
        .code(126)
        .stderr(contains("executable"));
}

#[test]
fn a_command_is_required_after_the_double_dash() {
    fabric_run().assert().code(2).stderr(contains("CMD"));
}

#[test]
fn unwritable_records_are_a_warning_not_a_failure() {
    fabric_run()
        .args([
            "--record",
            "/proc/version/cannot/records.jsonl",
            "--",
            "sh",
            "-c",
            "exit 3",
        ])
        .assert()
        .code(3)
        .stderr(contains("warning"));
}

#[test]
fn stdin_stdout_and_stderr_pass_through() {
    fabric_run()
        .args(["--", "sh", "-c", "read x; echo out:$x; echo err:$x >&2"])
        .write_stdin("hello\n")
        .assert()
        .code(0)
        .stdout("out:hello\n")
        .stderr("err:hello\n");
}

#[test]
fn output_bytes_pass_unchanged_through_the_regex_pump() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    // Binary noise plus long and short lines, some matching, some cut across reads.
    let mut bytes: Vec<u8> = (0..600_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    for i in 0..2000 {
        bytes.extend_from_slice(format!("step {i} saving checkpoint\n").as_bytes());
    }
    bytes.extend_from_slice(b"no newline at the end");
    std::fs::write(&data, &bytes).unwrap();
    let out = fabric_run()
        .args([
            "--checkpoint-regex",
            "saving",
            "saved",
            "--step-regex",
            r"^step (\d+)",
        ])
        .arg("--")
        .arg("cat")
        .arg(&data)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(out.stdout == bytes, "stdout differs from the child's bytes");
}

#[test]
fn a_partial_line_appears_before_its_newline() {
    // A prompt without a newline must not wait in a line buffer.
    let mut child = Command::new(bin())
        .env("PATH", path_env())
        .args([
            "--step-regex",
            "x",
            "--",
            "sh",
            "-c",
            "printf 'prompt> '; sleep 5; echo",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut buf = [0u8; 8];
    let t0 = Instant::now();
    stdout.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"prompt> ");
    assert!(
        t0.elapsed() < Duration::from_secs(4),
        "partial line was held back"
    );
    kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM).unwrap();
    child.wait().unwrap();
}

/// Starts fabric-run around a shell that traps every forwarded signal and prints its name.
fn trapping_child(
    rec: &std::path::Path,
    extra: &[&str],
) -> (std::process::Child, BufReader<std::process::ChildStdout>) {
    let script = r#"
        for s in INT HUP USR1 USR2 CONT; do trap "echo got $s" $s; done
        trap 'echo got TERM; exit 0' TERM
        echo ready
        while :; do sleep 0.02; done
    "#;
    let mut child = Command::new(bin())
        .env("PATH", path_env())
        .arg("--record")
        .arg(rec)
        .args(extra)
        .args(["--", "sh", "-c", script])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line, "ready\n");
    (child, out)
}

#[test]
fn every_forwardable_signal_reaches_the_child_and_sigterm_means_preempted() {
    for extra in [&[][..], &["--step-regex", "never"][..]] {
        let dir = tempfile::tempdir().unwrap();
        let rec = dir.path().join("r.jsonl");
        let (mut child, mut out) = trapping_child(&rec, extra);
        let pid = Pid::from_raw(child.id() as i32);
        for (sig, name) in [
            (Signal::SIGINT, "INT"),
            (Signal::SIGHUP, "HUP"),
            (Signal::SIGUSR1, "USR1"),
            (Signal::SIGUSR2, "USR2"),
            (Signal::SIGCONT, "CONT"),
            (Signal::SIGTERM, "TERM"),
        ] {
            kill(pid, sig).unwrap();
            let mut line = String::new();
            out.read_line(&mut line).unwrap();
            assert_eq!(line, format!("got {name}\n"), "with {extra:?}");
        }
        let status = child.wait().unwrap();
        assert_eq!(
            status.code(),
            Some(0),
            "the child's own status after its TERM trap"
        );
        let end = step_end(&records(&rec));
        assert_eq!(end.outcome.as_deref(), Some("preempted"));
        assert_eq!(end.sigterm, Some(true));
    }
}

#[test]
fn sigterm_to_a_child_that_does_not_trap_it_gives_143() {
    let mut child = Command::new(bin())
        .args(["--", "sh", "-c", "echo ready; exec sleep 30"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM).unwrap();
    assert_eq!(child.wait().unwrap().code(), Some(143));
}

#[test]
fn a_wrapper_killed_with_sigkill_leaves_its_step_start() {
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("r.jsonl");
    let pidfile = dir.path().join("child.pid");
    let mut child = Command::new(bin())
        .arg("--record")
        .arg(&rec)
        .args(["--", "sh", "-c"])
        .arg(format!(
            "echo $$ > {}; echo ready; exec sleep 30",
            pidfile.display()
        ))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    kill(Pid::from_raw(child.id() as i32), Signal::SIGKILL).unwrap();
    child.wait().unwrap();
    // The orphaned command is ours to stop.
    let grandchild: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let _ = kill(Pid::from_raw(grandchild), Signal::SIGKILL);
    let recs = records(&rec);
    assert_eq!(of(&recs, "step_start").len(), 1);
    assert!(of(&recs, "step_end").is_empty());
    let s = fabric_core::record::summarize_records(&rec, &Default::default()).unwrap();
    assert_eq!(s.outcome, "killed");
}

#[test]
fn the_child_starts_with_no_signal_blocked() {
    // A mask inherited from the wrapper would make the child deaf to SIGTERM.
    fabric_run()
        .args(["--", "grep", "SigBlk", "/proc/self/status"])
        .assert()
        .code(0)
        .stdout("SigBlk:\t0000000000000000\n");
}
