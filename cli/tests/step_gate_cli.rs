//! `fabric-check step-gate` outside Slurm and with bad input: the task's command always runs or
//! the error names what to fix.

use assert_cmd::Command;

fn gate() -> Command {
    let mut c = Command::cargo_bin("fabric-check").unwrap();
    c.arg("step-gate");
    for v in [
        "SLURM_JOB_ID",
        "SLURM_STEP_ID",
        "SLURMD_NODENAME",
        "SLURM_STEP_NODELIST",
        "SLURM_NODELIST",
        "SLURM_JOB_NODELIST",
        "SLURM_LOCALID",
    ] {
        c.env_remove(v);
    }
    c
}

#[test]
fn outside_a_slurm_step_the_gate_runs_the_command_unchecked() {
    let out = gate()
        .args(["--", "/bin/echo", "hello from the task"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "hello from the task\n"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("not inside a Slurm step (SLURM_JOB_ID is not set"),
        "{err}"
    );
}

#[test]
fn a_one_node_step_runs_its_command_without_a_ring_and_keeps_its_exit_status() {
    let out = gate()
        .env("SLURM_JOB_ID", "12")
        .env("SLURM_STEP_ID", "3")
        .env("SLURMD_NODENAME", "n1")
        .env("SLURM_STEP_NODELIST", "n1")
        .env("SLURM_JOB_NODELIST", "n[1-2]")
        .env("SLURM_LOCALID", "0")
        .args(["--", "/bin/sh", "-c", "exit 7"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(7));
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_missing_command_is_a_usage_error_and_a_missing_program_exits_127() {
    let none = gate().output().unwrap();
    assert_eq!(none.status.code(), Some(2));
    let missing = gate()
        .args(["--", "/nonexistent/program"])
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(127));
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains("cannot run \"/nonexistent/program\""),
        "{}",
        String::from_utf8_lossy(&missing.stderr)
    );
}

#[test]
fn a_bad_plugin_argument_is_named_and_the_task_still_runs() {
    let out = gate()
        .args(["--plugin-arg=policy=sometimes", "--", "/bin/true"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("policy=\"sometimes\""), "{err}");
}
