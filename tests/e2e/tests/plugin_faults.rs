//! Faults inside the plugin never take a Slurm daemon down: a forced panic in each callback
//! (a hook compiled only into a test build of the plugin) fails that callback cleanly, and a
//! misspelt plugin argument is named in the slurmd log.
//!
//! These tests swap plugstack.conf and restart the slurmds; each restores the normal plugin.

use std::path::PathBuf;
use std::process::Command;
use std::sync::Once;

use fabric_e2e::{Testbed, wait_for};

static BUILD: Once = Once::new();

/// Builds the plugin with `--features test-hooks` and keeps it as
/// `target/test-hooks/libspank_fabric_check.so`.
///
/// It is built in the workspace's own target folder, where every dependency is compiled
/// already: a target folder of its own rebuilt them all (bindgen and clang-sys included), a
/// minute or two on a cold CI machine. Cargo writes the result where the normal plugin goes,
/// so it is copied aside (by rename, never over a file a slurmd may have mapped) and the
/// normal build is put back at once.
fn test_hooks_so(tb: &Testbed) -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or(tb.repo.join("target"), PathBuf::from);
    let kept = target.join("test-hooks/libspank_fabric_check.so");
    BUILD.call_once(|| {
        let cargo = |extra: &[&str]| {
            Command::new(env!("CARGO"))
                .current_dir(&tb.repo)
                .args(["build", "-q", "--locked", "-p", "fabric-spank"])
                .args(extra)
                .status()
                .expect("run cargo")
        };
        assert!(
            cargo(&["--features", "test-hooks"]).success(),
            "building the test-hooks plugin failed"
        );
        std::fs::create_dir_all(kept.parent().unwrap()).expect("make target/test-hooks");
        let fresh = kept.with_extension("so.new");
        std::fs::copy(target.join("debug/libspank_fabric_check.so"), &fresh)
            .expect("copy the test-hooks plugin aside");
        std::fs::rename(&fresh, &kept).expect("keep the test-hooks plugin");
        assert!(cargo(&[]).success(), "rebuilding the normal plugin failed");
    });
    kept
}

fn with_plugstack(tb: &Testbed, so: Option<PathBuf>, words: &str, f: impl FnOnce()) {
    tb.with_plugstack(so.as_deref(), None, words, f);
}

fn daemons_alive(tb: &Testbed) {
    assert_eq!(tb.live_slurmds().len(), 4, "a slurmd died");
    assert!(
        tb.cmd("scontrol", &["ping"]).status.success(),
        "slurmctld stopped answering"
    );
}

#[test]
fn a_panic_in_init_fails_srun_cleanly_and_slurmd_keeps_running() {
    let tb = Testbed::get();
    let so = test_hooks_so(&tb);
    with_plugstack(&tb, Some(so), "test_panic=init:local", || {
        let out = tb.cmd("srun", &["-N1", "true"]);
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("internal error in slurm_spank_init"), "{err}");
        daemons_alive(&tb);
    });
}

#[test]
fn a_panic_in_slurmstepd_init_is_caught_and_the_daemons_survive() {
    let tb = Testbed::get();
    let so = test_hooks_so(&tb);
    let before = tb.slurmd_log("n1").len();
    with_plugstack(&tb, Some(so), "test_panic=init:remote", || {
        // slurmstepd refuses to launch the task ("Plugin initialization failed").
        let out = tb.cmd("srun", &["-N1", "-w", "n1", "true"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("launch failed: Plugin initialization failed"),
            "{err}"
        );
        let log = tb.slurmd_log("n1").split_off(before);
        assert!(
            log.lines()
                .any(|l| l.contains(".0] error: fabric-check: internal error in slurm_spank_init")),
            "the stepd's caught panic is not in the n1 log:\n{log}"
        );
        daemons_alive(&tb);
    });
    tb.ok("srun", &["-N4", "true"]);
}

#[test]
fn a_panic_in_init_inside_slurmd_does_not_stop_the_node() {
    let tb = Testbed::get();
    let so = test_hooks_so(&tb);
    let before = tb.slurmd_log("n1").len();
    // The plugstack swap restarts the slurmds: they must come up despite the panic.
    with_plugstack(&tb, Some(so), "test_panic=init:slurmd", || {
        daemons_alive(&tb);
        let log = tb.slurmd_log("n1").split_off(before);
        assert!(
            log.contains("internal error in slurm_spank_init"),
            "no panic logged in slurmd"
        );
        tb.ok("srun", &["-N4", "--fabric-check", "true"]);
    });
}

#[test]
fn a_panic_in_the_option_callback_refuses_the_value_without_a_crash() {
    let tb = Testbed::get();
    let so = test_hooks_so(&tb);
    with_plugstack(&tb, Some(so), "test_panic=option", || {
        let out = tb.cmd("srun", &["-N1", "--fabric-check=quick", "true"]);
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("internal error in the --fabric-check option"),
            "{err}"
        );
        assert!(!err.to_lowercase().contains("core dumped"), "{err}");
        daemons_alive(&tb);
    });
}

#[test]
fn a_panic_in_the_job_prolog_fails_the_prolog_and_slurmd_keeps_running() {
    let tb = Testbed::get();
    let so = test_hooks_so(&tb);
    with_plugstack(&tb, Some(so), "test_panic=job_prolog", || {
        // n2 must be in service before the job can reach its prolog.
        tb.resume_all();
        let idle = wait_for(std::time::Duration::from_secs(60), || {
            tb.node_state("n2").0.starts_with("idle").then_some(())
        });
        assert!(
            idle.is_some(),
            "n2 never became idle: {:?}",
            tb.node_state("n2")
        );
        let before = tb.slurmd_log("n2").len();
        let job = tb.sbatch(&["-N1", "-w", "n2", "--wrap", "true"]);
        let logged = wait_for(std::time::Duration::from_secs(90), || {
            tb.slurmd_log("n2")
                .split_off(before)
                .contains("internal error in slurm_spank_job_prolog")
                .then_some(())
        });
        assert!(logged.is_some(), "no panic message in the n2 slurmd log");
        // Slurm drains the node ("Prolog error") and requeues the job held: it never ran.
        let state = wait_for(std::time::Duration::from_secs(30), || {
            let s = tb.ok("squeue", &["-h", "-j", &job.to_string(), "-o", "%T|%r"]);
            (!s.trim().is_empty() && !s.contains("RUNNING") && !s.contains("CONFIGURING"))
                .then_some(s)
        });
        assert!(state.is_some(), "job {job} did not end up held or pending");
        daemons_alive(&tb);
        let _ = tb.cmd("scancel", &[&job.to_string()]);
    });
}

#[test]
fn a_misspelt_plugin_argument_is_named_in_the_slurmd_log() {
    let tb = Testbed::get();
    let before = tb.slurmd_log("n1").len();
    with_plugstack(&tb, None, "timout=5", || {
        let job = tb.sbatch_wait(&["-N1", "-w", "n1", "--fabric-check", "--wrap", "true"]);
        let log = tb.slurmd_log("n1").split_off(before);
        assert!(
            log.contains("fabric-check: plugstack.conf: unknown plugin argument \"timout\""),
            "job {job}: no complaint about timout in the n1 slurmd log"
        );
    });
}

#[test]
fn a_panic_in_the_job_epilog_is_logged_and_drains_no_node() {
    let tb = Testbed::get();
    let so = test_hooks_so(&tb);
    with_plugstack(&tb, Some(so), "test_panic=job_epilog", || {
        let before = tb.slurmd_log("n3").len();
        let job = tb.sbatch_wait(&["-N1", "-w", "n3", "--fabric-check", "--wrap", "true"]);
        let logged = wait_for(std::time::Duration::from_secs(60), || {
            tb.slurmd_log("n3")
                .split_off(before)
                .contains("internal error in slurm_spank_job_epilog")
                .then_some(())
        });
        assert!(logged.is_some(), "no panic message in the n3 slurmd log");
        // Give slurmctld the epilog-complete message it would drain on.
        std::thread::sleep(std::time::Duration::from_secs(3));
        let (state, reason) = tb.node_state("n3");
        assert!(
            !state.contains("drain") && !reason.contains("Epilog error"),
            "job {job}: n3 is {state} ({reason})"
        );
        daemons_alive(&tb);
    });
}
