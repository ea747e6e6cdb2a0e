//! The SPANK plugin starts `fabric-check prolog` in a process group of its own and ends that
//! group with `SIGTERM`, a grace, then `SIGKILL` (`spank-plugin/src/spawn.rs`). Every grandchild
//! the job step starts must be in that group, so none outlives the kill: here the probe ignores
//! `SIGTERM` and hangs, and the kill is the plugin's sequence, sent to the group.

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fabric_proto::invocation::{Invocation, Script};

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit(')')
            .next()
            .and_then(|r| r.split_whitespace().next())
            != Some("Z")
    })
}

fn signal_group(pgid: u32, sig: &str) {
    let _ = Command::new("/bin/sh")
        .args(["-c", &format!("kill -{sig} -{pgid}")])
        .status();
}

#[test]
fn after_the_plugins_group_kill_no_process_of_the_job_step_is_alive() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("probe.pid");
    let probe = dir.path().join("probe");
    std::fs::write(
        &probe,
        format!(
            "#!/bin/sh\ntrap '' TERM\necho $$ > {}\nwhile :; do sleep 1; done\n",
            pidfile.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&probe, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let argv = Invocation {
        script: Script::Prolog,
        job_id: 7,
        node: "n1".into(),
        nodes: "n1".into(),
        option: fabric_proto::fabric_option::FabricMode::Quick,
        job_uid: None,
        step_id: None,
        spares: 0,
        plugin_args: vec![
            format!("probe={}", probe.display()),
            "timeout=30".into(),
            format!("state_dir={}/state/%n", dir.path().display()),
            format!("spool_dir={}/spool", dir.path().display()),
        ],
    }
    .to_argv();
    let mut child = Command::new(env!("CARGO_BIN_EXE_fabric-check"))
        .args(&argv)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .unwrap();
    let pgid = child.id();
    let until = Instant::now() + Duration::from_secs(20);
    while !pidfile.exists() || std::fs::read_to_string(&pidfile).unwrap().trim().is_empty() {
        assert!(Instant::now() < until, "the probe never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    let probe_pid: u32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // The plugin's sequence: TERM to the group, a grace, KILL to the group.
    signal_group(pgid, "TERM");
    std::thread::sleep(Duration::from_millis(500));
    signal_group(pgid, "KILL");
    let _ = child.wait();
    let until = Instant::now() + Duration::from_secs(2);
    while alive(probe_pid) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    let still = alive(probe_pid);
    if still {
        // Do not leave it behind when the test fails.
        let _ = Command::new("/bin/kill")
            .args(["-KILL", &probe_pid.to_string()])
            .status();
    }
    assert!(!still, "the probe {probe_pid} outlived the group kill");
}
