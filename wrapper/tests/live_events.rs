//! Live events while the command runs: the in-job watch's fabric fault notices (printed,
//! recorded, and with `--on-fabric-fault=signal:SIG` signalled to the command) and step-time
//! regressions (printed, recorded, appended to the job's events file), both counted in the run
//! summary the epilog reads.

mod common;

use std::os::unix::fs::DirBuilderExt;
use std::path::PathBuf;

use common::{fabric_run, of, records};
use fabric_proto::notice::{FabricNotice, MAX_NOTICE_LINE_BYTES};
use predicates::prelude::PredicateBooleanExt;
use predicates::str::contains;

/// Job 7's folder on node n1 in a spool of its own.
struct Job {
    spool: tempfile::TempDir,
}

impl Job {
    fn new() -> Self {
        let spool = tempfile::tempdir().unwrap();
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(spool.path().join("7"))
            .unwrap();
        Self { spool }
    }

    fn dir(&self) -> PathBuf {
        self.spool.path().join("7")
    }

    fn notices(&self) -> PathBuf {
        self.dir().join("fabric-notice-n1.jsonl")
    }

    fn records(&self) -> PathBuf {
        self.dir().join("n1.jsonl")
    }

    /// fabric-run as a task of job 7 on n1, `NOTICE_FILE` naming the notice file for the child.
    fn fabric_run(&self) -> assert_cmd::Command {
        let mut c = fabric_run();
        c.env("FABRIC_RUN_SPOOL", self.spool.path())
            .env("SLURM_JOB_ID", "7")
            .env("SLURMD_NODENAME", "n1")
            .env("NOTICE_FILE", self.notices());
        c
    }
}

/// A notice of the watch, as it writes it (without the newline).
fn notice(check: &str) -> (FabricNotice, String) {
    let mut n = FabricNotice::new(7, "n1", check, "mlx5_0 port 1 is DOWN", 1_700_000_000);
    n.into_job_s = 30;
    n.drained = true;
    let line = n.to_line().trim_end().to_owned();
    (n, line)
}

#[test]
fn a_notice_appended_while_the_command_runs_is_printed_on_stderr_and_recorded() {
    let job = Job::new();
    std::fs::write(job.notices(), "").unwrap();
    let (n, line) = notice("ib.port_state");
    job.fabric_run()
        .env("NOTICE_LINE", &line)
        .args(["--", "sh", "-c"])
        .arg(r#"printf '%s\n' "$NOTICE_LINE" >> "$NOTICE_FILE"; sleep 2.5"#)
        .assert()
        .code(0)
        .stderr(contains(n.summary()));
    let recs = records(&job.records());
    let faults = of(&recs, "fabric_fault");
    assert_eq!(faults.len(), 1, "{recs:#?}");
    let f = &faults[0];
    assert_eq!(f.check.as_deref(), Some("ib.port_state"));
    assert_eq!(f.message.as_deref(), Some("mlx5_0 port 1 is DOWN"));
    assert_eq!(f.seen_at_s, Some(1_700_000_000));
    assert_eq!(f.into_job_s, Some(30));
    assert_eq!(f.drained, Some(true));
    assert_eq!(f.sent_signal, None);
    assert_eq!(f.attempt, Some(1));
    let attempt = &of(&recs, "attempt")[0];
    assert!(
        f.ts < attempt.ts,
        "seen while the command ran, not only at the end: {recs:#?}"
    );
}

#[test]
fn with_on_fabric_fault_signal_usr1_a_command_that_traps_usr1_receives_it() {
    let job = Job::new();
    let got = job.spool.path().join("got");
    let (_, line) = notice("ib.port_state");
    job.fabric_run()
        .env("NOTICE_LINE", &line)
        .env("GOT", &got)
        .args(["--on-fabric-fault=signal:USR1", "--", "sh", "-c"])
        .arg(
            r#"trap 'echo got > "$GOT"; exit 0' USR1
               printf '%s\n' "$NOTICE_LINE" >> "$NOTICE_FILE"
               i=0; while [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
               exit 3"#,
        )
        .assert()
        .code(0)
        .stderr(contains("sending SIGUSR1 to the command"));
    assert_eq!(std::fs::read_to_string(&got).unwrap(), "got\n");
    let faults = of(&records(&job.records()), "fabric_fault");
    assert_eq!(faults.len(), 1);
    assert_eq!(faults[0].sent_signal, Some(10));
}

#[test]
fn a_warning_notice_is_said_and_recorded_but_never_signalled_to_the_command() {
    let job = Job::new();
    let got = job.spool.path().join("got");
    let (mut n, _) = notice("roce.congestion");
    n.warn = true;
    n.drained = false;
    let line = n.to_line().trim_end().to_owned();
    job.fabric_run()
        .env("NOTICE_LINE", &line)
        .env("GOT", &got)
        .args(["--on-fabric-fault=signal:USR1", "--", "sh", "-c"])
        .arg(
            r#"trap 'echo got > "$GOT"' USR1
               printf '%s\n' "$NOTICE_LINE" >> "$NOTICE_FILE"
               sleep 2.5"#,
        )
        .assert()
        .code(0)
        .stderr(contains("fabric warning on n1"))
        .stderr(contains("sending SIGUSR1").not());
    assert!(!got.exists(), "a warning was signalled");
    let faults = of(&records(&job.records()), "fabric_fault");
    assert_eq!(faults.len(), 1);
    assert_eq!(faults[0].sent_signal, None);
}

#[test]
fn a_straggler_notice_is_said_but_neither_recorded_as_a_fabric_fault_nor_signalled() {
    let job = Job::new();
    let got = job.spool.path().join("got");
    let (mut n, _) = notice(fabric_proto::check_id::JOB_STRAGGLER);
    n.node = "n3".into();
    n.message = "steps 1.52x the job's median since 12:00:05 UTC".into();
    n.warn = true;
    n.drained = false;
    let line = n.to_line().trim_end().to_owned();
    job.fabric_run()
        .env("NOTICE_LINE", &line)
        .env("GOT", &got)
        .args(["--on-fabric-fault=signal:USR1", "--", "sh", "-c"])
        .arg(
            r#"trap 'echo got > "$GOT"' USR1
               printf '%s\n' "$NOTICE_LINE" >> "$NOTICE_FILE"
               sleep 2.5"#,
        )
        .assert()
        .code(0)
        .stderr(contains("job.straggler on n3: steps 1.52x"))
        .stderr(contains("fabric fault").not())
        .stderr(contains("sending SIGUSR1").not());
    assert!(!got.exists(), "a straggler was signalled");
    assert!(of(&records(&job.records()), "fabric_fault").is_empty());
}

#[test]
fn a_notice_line_that_is_garbage_or_too_long_is_skipped() {
    let job = Job::new();
    std::fs::write(job.notices(), "").unwrap();
    let (_, good) = notice("ib.port_state");
    let (_, long) = notice(&"x".repeat(MAX_NOTICE_LINE_BYTES));
    job.fabric_run()
        .env("GOOD", &good)
        .env("LONG", &long)
        .env("JUNK", "y".repeat(3 * MAX_NOTICE_LINE_BYTES))
        .args(["--", "sh", "-c"])
        .arg(
            r#"printf 'garbage\n{"type":"fabric_fault","v":1}\n%s\n%s\n%s\n' "$LONG" "$JUNK" "$GOOD" >> "$NOTICE_FILE"
               sleep 1.5"#,
        )
        .assert()
        .code(0)
        .stderr(contains("fabric fault on n1").count(1));
    let faults = of(&records(&job.records()), "fabric_fault");
    assert_eq!(faults.len(), 1);
    assert_eq!(faults[0].check.as_deref(), Some("ib.port_state"));
}

#[test]
fn a_notice_file_that_appears_after_the_start_is_followed() {
    let job = Job::new();
    let (n, line) = notice("ib.counters");
    job.fabric_run()
        .env("NOTICE_LINE", &line)
        .args(["--", "sh", "-c"])
        .arg(r#"sleep 1.2; printf '%s\n' "$NOTICE_LINE" > "$NOTICE_FILE"; sleep 2"#)
        .assert()
        .code(0)
        .stderr(contains(n.summary()));
    let recs = records(&job.records());
    let faults = of(&recs, "fabric_fault");
    assert_eq!(faults.len(), 1);
    assert_eq!(faults[0].check.as_deref(), Some("ib.counters"));
    assert!(faults[0].ts < of(&recs, "attempt")[0].ts);
}

#[test]
fn notices_already_in_the_file_when_the_wrapper_starts_are_not_acted_on_again() {
    let job = Job::new();
    let (_, line) = notice("ib.port_state");
    std::fs::write(job.notices(), format!("{line}\n")).unwrap();
    let got = job.spool.path().join("got");
    job.fabric_run()
        .env("GOT", &got)
        .args(["--on-fabric-fault=signal:USR1", "--", "sh", "-c"])
        .arg(r#"trap 'echo got > "$GOT"' USR1; sleep 2.5"#)
        .assert()
        .code(0)
        .stderr(contains("fabric fault").not());
    assert!(
        !got.exists(),
        "an earlier step's notice was signalled again"
    );
    assert!(of(&records(&job.records()), "fabric_fault").is_empty());
}

#[test]
fn on_fabric_fault_requeue_leaves_the_jobs_wish_beside_its_notice_file_and_says_what_happened() {
    let job = Job::new();
    let wish = job.dir().join("fabric-run-requeue-n1");
    let (mut n, _) = notice("ib.port_state");
    n.requeued = true;
    // The notice arrives while the command runs: the watch requeued the job as it asked.
    job.fabric_run()
        .env("NOTICE_LINE", n.to_line().trim_end())
        .args(["--on-fabric-fault=requeue", "--", "sh", "-c"])
        .arg(r#"printf '%s\n' "$NOTICE_LINE" >> "$NOTICE_FILE"; sleep 1.5"#)
        .assert()
        .code(0)
        .stderr(contains("being requeued"));
    assert!(
        std::fs::symlink_metadata(&wish).is_ok_and(|m| m.file_type().is_file()),
        "{} is the job's wish",
        wish.display()
    );
}

#[test]
fn bad_on_fabric_fault_and_slow_step_values_are_refused_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    let ran = dir.path().join("ran");
    let touch = format!("touch {}", ran.display());
    fabric_run()
        .args(["--on-fabric-fault=signal:BOGUS", "--", "sh", "-c", &touch])
        .assert()
        .code(2)
        .stderr(contains("`signal:BOGUS`").and(contains("signal:SIG")));
    fabric_run()
        .args(["--on-fabric-fault=kill", "--", "sh", "-c", &touch])
        .assert()
        .code(2)
        .stderr(contains("`kill`").and(contains("none, requeue, or signal:SIG")));
    fabric_run()
        .args(["--slow-step-factor", "1", "--", "sh", "-c", &touch])
        .assert()
        .code(2)
        .stderr(contains("--slow-step-factor"));
    assert!(!ran.exists());
}

#[test]
fn a_step_time_regression_is_flagged_live_and_the_summary_counts_it_with_the_fabric_fault() {
    let job = Job::new();
    let (_, line) = notice("ib.port_state");
    job.fabric_run()
        .env("NOTICE_LINE", &line)
        .args(["--step-regex", "^step$", "--slow-step-window", "3"])
        .args(["--slow-step-factor", "2.5", "--", "sh", "-c"])
        .arg(
            r#"i=0; while [ $i -lt 8 ]; do sleep 0.05; echo step; i=$((i+1)); done
               printf '%s\n' "$NOTICE_LINE" >> "$NOTICE_FILE"
               j=0; while [ $j -lt 3 ]; do sleep 1; echo step; j=$((j+1)); done"#,
        )
        .assert()
        .code(0)
        .stderr(contains("slow steps: the median of the last 3 steps").count(1));
    let recs = records(&job.records());
    let slow = of(&recs, "slow_steps");
    assert_eq!(slow.len(), 1, "one episode, flagged once: {recs:#?}");
    let s = &slow[0];
    assert_eq!((s.window, s.factor, s.steps), (Some(3), Some(2.5), Some(9)));
    assert!(s.window_median_s.unwrap() > 2.5 * s.run_median_s.unwrap());
    let events = records(&job.dir().join("fabric-run-events-n1.jsonl"));
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].kind, "slow_steps");
    assert_eq!(events[0].steps, Some(9));
    let summary =
        fabric_core::record::summarize_records(&job.records(), &Default::default()).unwrap();
    assert_eq!(summary.slow_step_events, Some(1));
    assert_eq!(summary.fabric_faults, Some(1));
    assert_eq!(summary.steps, 11);
}
