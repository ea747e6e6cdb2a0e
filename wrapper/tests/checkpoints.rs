//! Checkpoints, restores, steps and outputs, each way, with the fake trainer.

mod common;

use std::process::Command;

use common::{fabric_run, fake_train, of, path_env, records, step_end};

fn sources(recs: &[common::Rec], kind: &str) -> Vec<String> {
    of(recs, kind)
        .into_iter()
        .map(|r| r.source.unwrap())
        .collect()
}

#[test]
fn markers_time_checkpoints_restores_steps_and_outputs() {
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("r.jsonl");
    let ckpt = dir.path().join("ckpt");
    std::fs::create_dir(&ckpt).unwrap();
    std::fs::write(ckpt.join("old"), b"state").unwrap();
    fabric_run()
        .arg("--record")
        .arg(&rec)
        .arg("--")
        .arg(fake_train())
        .args([
            "--markers",
            "--restore",
            "--steps",
            "4",
            "--ckpt-every",
            "2",
        ])
        .args(["--ckpt-sleep", "0.4", "--ckpt-dir"])
        .arg(&ckpt)
        .assert()
        .code(0);
    let recs = records(&rec);
    assert_eq!(sources(&recs, "checkpoint"), ["marker", "marker"]);
    for c in of(&recs, "checkpoint") {
        let d = c.duration_s.unwrap();
        assert!(
            (0.2..5.0).contains(&d),
            "checkpoint of {d} s around a 0.4 s write (less a late wake-up)"
        );
    }
    assert_eq!(sources(&recs, "restore"), ["marker"]);
    let steps = of(&recs, "step");
    assert_eq!(
        steps.iter().map(|s| s.n.unwrap()).collect::<Vec<_>>(),
        [1, 2, 3, 4]
    );
    assert_eq!(
        steps[0].duration_s, None,
        "the first boundary only starts the clock"
    );
    let outputs: u64 = of(&recs, "output").iter().map(|o| o.n.unwrap()).sum();
    assert_eq!(outputs, 8);
    let s = fabric_core::record::summarize_records(&rec, &Default::default()).unwrap();
    assert_eq!(
        (s.steps, s.ckpt_n, s.restore_n, s.outputs),
        (4, 2, 1, Some(8))
    );
    assert!(s.accepted);
}

#[test]
fn a_checkpoint_directory_burst_is_one_checkpoint_with_its_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("r.jsonl");
    let ckpt = dir.path().join("ckpt");
    fabric_run()
        .arg("--record")
        .arg(&rec)
        .arg("--checkpoint-dir")
        .arg(&ckpt)
        // Margins for a loaded machine: 0.1 s inside a checkpoint, 1.2 s between them.
        .args(["--checkpoint-quiet", "600ms", "--"])
        .arg(fake_train())
        .args(["--steps", "4", "--step-sleep", "1.2", "--ckpt-every", "2"])
        .args(["--ckpt-sleep", "0.1", "--ckpt-bytes", "10000", "--ckpt-dir"])
        .arg(&ckpt)
        .assert()
        .code(0);
    let recs = records(&rec);
    let ckpts = of(&recs, "checkpoint");
    assert_eq!(sources(&recs, "checkpoint"), ["dir", "dir"], "{recs:#?}");
    for c in &ckpts {
        let d = c.duration_s.unwrap();
        assert!((0.05..1.2).contains(&d), "{d} s for two writes 0.1 s apart");
        assert_eq!(
            c.bytes,
            Some(10_000),
            "a file written in two halves counts once"
        );
    }
    assert!(of(&recs, "restore").is_empty());
}

#[test]
fn reading_the_checkpoint_directory_at_start_up_is_a_restore() {
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("r.jsonl");
    let ckpt = dir.path().join("ckpt");
    std::fs::create_dir(&ckpt).unwrap();
    std::fs::write(ckpt.join("ckpt-2"), vec![7u8; 5000]).unwrap();
    std::fs::write(ckpt.join("ckpt-4"), vec![7u8; 3000]).unwrap();
    fabric_run()
        .arg("--record")
        .arg(&rec)
        .arg("--checkpoint-dir")
        .arg(&ckpt)
        .args(["--checkpoint-quiet", "600ms", "--"])
        .arg(fake_train())
        .args([
            "--restore",
            "--steps",
            "2",
            "--step-sleep",
            "0.5",
            "--ckpt-dir",
        ])
        .arg(&ckpt)
        .assert()
        .code(0);
    let recs = records(&rec);
    let restores = of(&recs, "restore");
    assert_eq!(restores.len(), 1, "{recs:#?}");
    assert_eq!(restores[0].source.as_deref(), Some("dir"));
    assert_eq!(restores[0].bytes, Some(8000));
    assert!(of(&recs, "checkpoint").is_empty());
}

#[test]
fn checkpoint_regexes_time_checkpoints_from_log_lines() {
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("r.jsonl");
    let out = fabric_run()
        .arg("--record")
        .arg(&rec)
        .args([
            "--checkpoint-regex",
            "^saving checkpoint",
            "^checkpoint saved",
        ])
        .args(["--restore-regex", "^restoring", "^restored"])
        .arg("--")
        .arg(fake_train())
        .args(["--steps", "3", "--ckpt-every", "1", "--ckpt-sleep", "0.5"])
        .assert()
        .code(0)
        .get_output()
        .stdout
        .clone();
    let text = String::from_utf8(out).unwrap();
    assert_eq!(
        text.matches("checkpoint saved").count(),
        3,
        "output still passes through"
    );
    let recs = records(&rec);
    assert_eq!(sources(&recs, "checkpoint"), ["regex", "regex", "regex"]);
    for c in of(&recs, "checkpoint") {
        // Lines are timed when the pump reads them: allow for a late wake-up on a busy machine.
        let d = c.duration_s.unwrap();
        assert!((0.3..5.0).contains(&d), "{d} s for a 0.5 s checkpoint");
    }
}

#[test]
fn step_regex_gives_step_times_and_percentiles() {
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("r.jsonl");
    fabric_run()
        .arg("--record")
        .arg(&rec)
        .args([
            "--step-regex",
            r"^step (\d+) loss",
            "--output-regex",
            "^step",
            "--",
        ])
        .arg(fake_train())
        .args(["--steps", "6", "--step-sleep", "0.1"])
        .assert()
        .code(0);
    let recs = records(&rec);
    let steps = of(&recs, "step");
    assert_eq!(
        steps.iter().map(|s| s.n.unwrap()).collect::<Vec<_>>(),
        [1, 2, 3, 4, 5, 6]
    );
    let s = fabric_core::record::summarize_records(&rec, &Default::default()).unwrap();
    assert_eq!(s.steps, 6);
    assert_eq!(s.outputs, Some(6));
    let p50 = s.step_p50_s.unwrap();
    assert!((0.05..2.0).contains(&p50), "p50 {p50} s for 0.1 s steps");
    assert!(s.step_max_s.unwrap() >= s.step_p95_s.unwrap());
    assert!(s.step_p95_s.unwrap() >= p50);
}

#[test]
fn step_time_leaves_out_a_checkpoint_between_boundaries() {
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("r.jsonl");
    fabric_run()
        .arg("--record")
        .arg(&rec)
        .arg("--")
        .arg(fake_train())
        .args([
            "--markers",
            "--steps",
            "3",
            "--step-sleep",
            "0.05",
            "--ckpt-every",
            "2",
        ])
        .args(["--ckpt-sleep", "1.0"])
        .assert()
        .code(0);
    let step3 = of(&records(&rec), "step").pop().unwrap();
    assert_eq!(step3.n, Some(3));
    let d = step3.duration_s.unwrap();
    assert!(d < 0.9, "step 3 took {d} s net of a 1 s checkpoint");
}

#[test]
fn the_python_three_liner_reaches_the_wrapper() {
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("r.jsonl");
    let py = "import os, socket\n\
              s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)\n\
              s.sendto(b\"step 42\", os.environ[\"FABRIC_RUN_SOCKET\"])\n";
    fabric_run()
        .arg("--record")
        .arg(&rec)
        .args(["--", "python3", "-c", py])
        .assert()
        .code(0);
    let steps = of(&records(&rec), "step");
    assert_eq!(steps.len(), 1);
    assert_eq!(steps[0].n, Some(42));
}

#[test]
fn mark_outside_fabric_run_does_nothing_successfully() {
    fabric_run()
        .args(["mark", "step", "3"])
        .assert()
        .code(0)
        .stderr("");
    let status = Command::new(common::bin())
        .env("PATH", path_env())
        .env("FABRIC_RUN_SOCKET", "/nonexistent/sock")
        .args(["mark", "checkpoint-begin"])
        .output()
        .unwrap();
    assert_eq!(status.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&status.stderr).contains("warning"));
}

#[test]
fn an_unknown_marker_is_refused_by_the_cli() {
    fabric_run().args(["mark", "nap"]).assert().code(2);
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("r.jsonl");
    fabric_run()
        .arg("--record")
        .arg(&rec)
        .args([
            "--",
            "sh",
            "-c",
            "fabric-run mark checkpoint-end; fabric-run mark output",
        ])
        .assert()
        .code(0);
    let recs = records(&rec);
    assert!(
        of(&recs, "checkpoint").is_empty(),
        "an end without a begin measures nothing"
    );
    assert_eq!(of(&recs, "output")[0].n, Some(1));
    assert_eq!(step_end(&recs).outcome.as_deref(), Some("accepted"));
}
