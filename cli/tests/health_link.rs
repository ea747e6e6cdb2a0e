//! Slurm's `HealthCheckProgram` runs a program without arguments: a link named
//! `fabric-check-health` must select the health mode.

use std::process::Command;

#[test]
fn a_link_named_fabric_check_health_runs_the_health_mode() {
    let dir = tempfile::tempdir().unwrap();
    let link = dir.path().join("fabric-check-health");
    std::os::unix::fs::symlink(assert_cmd::cargo::cargo_bin("fabric-check"), &link).unwrap();
    let out = Command::new(&link)
        .env("SLURMD_NODENAME", "n1")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    // Health mode reads the plugin's settings from plugstack.conf: its error names that file.
    assert!(
        err.contains("plugstack.conf") || String::from_utf8_lossy(&out.stdout).contains("n1"),
        "not the health mode: {err}"
    );
    assert!(
        !err.contains("Usage:"),
        "the link fell through to argument parsing: {err}"
    );
}

#[test]
fn the_plain_binary_without_arguments_still_asks_for_a_subcommand() {
    let out = Command::new(assert_cmd::cargo::cargo_bin("fabric-check"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("Usage:"));
}
