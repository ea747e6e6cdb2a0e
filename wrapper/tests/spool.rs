//! Records under Slurm: the spool path, the task's identity, and many writers on one file.

mod common;

use std::process::{Command, Stdio};

use common::{bin, fabric_run, of, path_env, records};

#[test]
fn under_srun_records_go_to_the_spool_with_the_tasks_identity() {
    let spool = tempfile::tempdir().unwrap();
    fabric_run()
        .env("FABRIC_RUN_SPOOL", spool.path())
        .env("SLURM_JOB_ID", "4242")
        .env("SLURMD_NODENAME", "gpu007")
        .env("SLURM_PROCID", "5")
        .env("SLURM_LOCALID", "1")
        .env("SLURM_STEP_ID", "3")
        .env("SLURM_RESTART_COUNT", "2")
        .args(["--", "true"])
        .assert()
        .code(0);
    let path = spool.path().join("4242").join("gpu007.jsonl");
    let recs = records(&path);
    assert_eq!(recs.len(), 3);
    for r in &recs {
        assert_eq!(r.node, "gpu007");
        assert_eq!(r.rank, Some(5));
        assert_eq!(r.local_rank, Some(1));
        assert_eq!(r.job_id.as_deref(), Some("4242"));
        assert_eq!(r.step_id.as_deref(), Some("3"));
        assert_eq!(r.restart_count, Some(2));
    }
    let s = fabric_core::record::summarize_records(&path, &Default::default()).unwrap();
    assert_eq!(s.requeues, 2);
}

#[test]
fn the_plugins_spool_variable_wins_and_records_land_in_the_folder_the_prolog_made() {
    use std::os::unix::fs::DirBuilderExt;
    let plugin = tempfile::tempdir().unwrap();
    let users = tempfile::tempdir().unwrap();
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(plugin.path().join("77"))
        .unwrap();
    fabric_run()
        .env(fabric_proto::record::PLUGIN_SPOOL_ENV, plugin.path())
        .env("FABRIC_RUN_SPOOL", users.path())
        .env("SLURM_JOB_ID", "77")
        .env("SLURMD_NODENAME", "n3")
        .args(["--", "true"])
        .assert()
        .code(0)
        .stderr(predicates::str::contains("FABRIC_RUN_SPOOL="));
    assert_eq!(records(&plugin.path().join("77/n3.jsonl")).len(), 3);
    assert_eq!(std::fs::read_dir(users.path()).unwrap().count(), 0);
}

#[test]
fn under_the_plugins_spool_the_wrapper_never_makes_the_jobs_folder() {
    let plugin = tempfile::tempdir().unwrap();
    fabric_run()
        .env(fabric_proto::record::PLUGIN_SPOOL_ENV, plugin.path())
        .env("SLURM_JOB_ID", "78")
        .env("SLURMD_NODENAME", "n3")
        .args(["--", "sh", "-c", "exit 5"])
        .assert()
        .code(5)
        .stderr(predicates::str::contains("the job's prolog makes it"));
    assert!(!plugin.path().join("78").exists());
}

#[test]
fn a_missing_spool_is_a_warning_and_the_job_still_runs() {
    fabric_run()
        .env("FABRIC_RUN_SPOOL", "/nonexistent/spool")
        .env("SLURM_JOB_ID", "1")
        .args(["--", "sh", "-c", "exit 4"])
        .assert()
        .code(4)
        .stderr(predicates::str::contains("ask the admin"));
}

#[test]
fn sixty_four_wrappers_appending_to_one_file_never_interleave() {
    const WRITERS: usize = 64;
    const STEPS: usize = 300;
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("shared.jsonl");
    // Each child prints its steps as fast as it can; each wrapper turns every line into a record.
    let script = format!("i=0; while [ $i -lt {STEPS} ]; do i=$((i+1)); echo \"step $i\"; done");
    let children: Vec<_> = (0..WRITERS)
        .map(|rank| {
            Command::new(bin())
                .env("PATH", path_env())
                .env("SLURM_PROCID", rank.to_string())
                .env("SLURM_JOB_ID", "9")
                .env("SLURM_STEP_ID", "0")
                .arg("--record")
                .arg(&rec)
                .args(["--step-regex", r"^step (\d+)", "--", "sh", "-c", &script])
                .stdout(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut c in children {
        assert!(c.wait().unwrap().success());
    }
    // `records` panics on any line that is not one whole JSON object.
    let recs = records(&rec);
    assert_eq!(recs.len(), WRITERS * (STEPS + 3));
    assert_eq!(of(&recs, "step_end").len(), WRITERS);
    for rank in 0..WRITERS as u32 {
        let mine = recs
            .iter()
            .filter(|r| r.rank == Some(rank) && r.kind == "step")
            .count();
        assert_eq!(mine, STEPS, "rank {rank}");
    }
    let s = fabric_core::record::summarize_records(&rec, &Default::default()).unwrap();
    assert_eq!(s.ranks, WRITERS as u32);
    assert_eq!(s.steps, STEPS as u64, "steps are the lead rank's");
    assert_eq!(s.malformed_lines, 0);
}
