//! The fault matrix (docs/operations.md, "Faults and what to expect"), end to end on the testbed:
//! slurmctld, slurmdbd or munged stopped; the state and spool folders full or read-only; the
//! probe hanging or crashing; the clock stepped back; a node's slurmd killed mid-rendezvous.
//!
//! For each: the job runs or fails as documented, nothing of ours is left running, no healthy
//! node is drained, and what was already recorded is still there. Each scenario restores the
//! cluster (daemons started again, mounts undone, plugstack and nodes healed), also on failure.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fabric_e2e::{Testbed, heal_all, wait_for, wait_job_end, wait_tag};
use serde_json::Value;

const LONG: Duration = Duration::from_secs(120);
const NODES: [&str; 4] = ["n1", "n2", "n3", "n4"];
/// The hanging stand-in probe sleeps this long: a number no other process here uses.
const HANG_S: &str = "6017";

/// Processes of ours still alive: anything run from the testbed's `bin/` (fabric-check, the
/// stand-in probes, fabric-run) and the stand-in probe's `sleep`.
fn ours_running(tb: &Testbed) -> Vec<String> {
    let bin = tb.dir.join("bin");
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if pid == std::process::id() {
            continue;
        }
        let Ok(raw) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let argv: Vec<String> = raw
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        let first = argv.first().map(String::as_str).unwrap_or("");
        let second = argv.get(1).map(String::as_str).unwrap_or("");
        let from_bin = Path::new(first).starts_with(&bin) || Path::new(second).starts_with(&bin);
        let hang = first.ends_with("sleep") && second == HANG_S;
        if from_bin || hang {
            out.push(format!("{pid}: {}", argv.join(" ")));
        }
    }
    out
}

/// Waits (up to 40 s: the plugin's timeout plus its kill grace) until nothing of ours runs.
fn nothing_of_ours_left(tb: &Testbed, what: &str) {
    let gone = wait_for(Duration::from_secs(40), || {
        ours_running(tb).is_empty().then_some(())
    });
    assert!(
        gone.is_some(),
        "{what}: still running: {:?}",
        ours_running(tb)
    );
}

fn no_node_drained(tb: &Testbed, what: &str) {
    for n in NODES {
        let (state, reason) = tb.node_state(n);
        assert!(
            !state.contains("drain"),
            "{what}: {n} is {state} ({reason})"
        );
    }
}

fn job_state(tb: &Testbed, job: u32) -> String {
    tb.ok("squeue", &["-h", "-j", &job.to_string(), "-o", "%T"])
        .trim()
        .to_owned()
}

fn wait_running(tb: &Testbed, job: u32) {
    let up = wait_for(LONG, || (job_state(tb, job) == "RUNNING").then_some(()));
    assert!(up.is_some(), "job {job} never ran: {}", job_state(tb, job));
}

fn tagged(tb: &Testbed, job: u32) -> Value {
    wait_tag(tb, job, LONG, |t| t["verdict"].is_string())
        .unwrap_or_else(|| panic!("job {job} has no tag"))
}

/// Stops `daemon` for the length of `f`, then starts it again (also when `f` panics).
fn with_stopped(tb: &Testbed, daemon: &str, f: impl FnOnce()) {
    tb.script(&["stop", daemon])
        .unwrap_or_else(|e| panic!("stop {daemon}: {e}"));
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    tb.script(&["start", daemon])
        .unwrap_or_else(|e| panic!("start {daemon}: {e}"));
    if let Err(p) = r {
        std::panic::resume_unwind(p);
    }
}

fn run(cmd: &str, args: &[&str]) {
    let st = Command::new(cmd)
        .args(args)
        .status()
        .unwrap_or_else(|e| panic!("{cmd}: {e}"));
    assert!(st.success(), "{cmd} {args:?}: {st}");
}

fn umount(path: &Path) {
    let _ = Command::new("umount").arg(path).status();
}

#[test]
fn a_job_ending_while_slurmctld_is_stopped_completes_tagged_once_it_is_back() {
    let tb = Testbed::get();
    tb.healing(|| {
        let job = tb.sbatch(&["-N1", "-w", "n1", "--fabric-check", "--wrap", "sleep 3"]);
        wait_running(&tb, job);
        // RUNNING comes before the prolog ends: the prolog's tag first, then slurmctld stops.
        tagged(&tb, job);
        with_stopped(&tb, "slurmctld", || {
            // The job ends and its epilog runs while slurmctld is away.
            std::thread::sleep(Duration::from_secs(8));
        });
        assert_eq!(wait_job_end(&tb, job, LONG).as_deref(), Some("COMPLETED"));
        tagged(&tb, job);
        nothing_of_ours_left(&tb, "slurmctld stopped");
        no_node_drained(&tb, "slurmctld stopped");
    });
}

#[test]
fn a_job_run_while_slurmdbd_is_stopped_is_tagged_in_accounting_once_it_is_back() {
    let tb = Testbed::get();
    tb.healing(|| {
        let earlier = tb.sbatch_wait(&["-N1", "-w", "n2", "--fabric-check", "--wrap", "true"]);
        let earlier_tag = tagged(&tb, earlier);
        let mut job = 0;
        with_stopped(&tb, "slurmdbd", || {
            job = tb.sbatch_wait(&["-N2", "--fabric-check", "--wrap", "true"]);
        });
        assert_eq!(wait_job_end(&tb, job, LONG).as_deref(), Some("COMPLETED"));
        let tag = tagged(&tb, job);
        assert_eq!(tag["nnodes"], 2, "{tag}");
        assert_eq!(
            tagged(&tb, earlier),
            earlier_tag,
            "the earlier record changed"
        );
        nothing_of_ours_left(&tb, "slurmdbd stopped");
        no_node_drained(&tb, "slurmdbd stopped");
    });
}

#[test]
fn a_job_ending_while_munged_is_stopped_completes_once_it_is_back_and_drains_nothing() {
    let tb = Testbed::get();
    tb.healing(|| {
        let job = tb.sbatch(&["-N1", "-w", "n2", "--fabric-check", "--wrap", "sleep 3"]);
        wait_running(&tb, job);
        // RUNNING comes before the prolog ends: the prolog's tag first, then munged stops.
        tagged(&tb, job);
        with_stopped(&tb, "munged", || {
            std::thread::sleep(Duration::from_secs(8));
        });
        assert_eq!(wait_job_end(&tb, job, LONG).as_deref(), Some("COMPLETED"));
        tagged(&tb, job);
        nothing_of_ours_left(&tb, "munged stopped");
        no_node_drained(&tb, "munged stopped");
    });
}

#[test]
fn a_prolog_tag_write_cut_off_by_munged_stopping_is_written_by_the_epilog_once_it_is_back() {
    let tb = Testbed::get();
    let mode = tb.dir.join("state/faulty-probe-mode");
    let started = tb.dir.join("state/faulty-probe-started");
    let _ = std::fs::remove_file(&started);
    std::fs::write(&mode, "held").expect("write the mode");
    let probe = faulty_probe(&tb, &mode);
    // timeout=30: the probe may take 12 s, so the hold (at most 10 s) outlasts a slow stop.
    tb.with_plugstack(None, Some(&probe), "timeout=30", || {
        let job = tb.sbatch(&["-N1", "-w", "n2", "--fabric-check", "--wrap", "sleep 2"]);
        // The prolog's probe is held until munged is stopped, so its tag write meets no munged.
        let held = wait_for(LONG, || started.exists().then_some(()));
        assert!(
            held.is_some(),
            "the prolog's probe of job {job} never started"
        );
        with_stopped(&tb, "munged", || {
            std::fs::write(&mode, "go").expect("release the probe");
            let kept = format!("job {job}: the prolog's verdict is kept in");
            let said = wait_for(Duration::from_secs(30), || {
                tb.slurmd_log("n2").contains(&kept).then_some(())
            });
            assert!(said.is_some(), "{:?}", tb.prolog_lines("n2", job));
        });
        assert_eq!(wait_job_end(&tb, job, LONG).as_deref(), Some("COMPLETED"));
        let tag = tagged(&tb, job);
        assert_eq!(tag["verdict"], "pass", "{tag}");
        assert_eq!(tag["nnodes"], 1, "{tag}");
        let file = tb.dir.join(format!("state/n2/prolog-tag-{job}.json"));
        let gone = wait_for(Duration::from_secs(30), || (!file.exists()).then_some(()));
        assert!(gone.is_some(), "{} is still there", file.display());
        nothing_of_ours_left(&tb, "munged stopped in the prolog");
        no_node_drained(&tb, "munged stopped in the prolog");
    });
    let _ = std::fs::remove_file(&mode);
    let _ = std::fs::remove_file(&started);
}

/// The node's saved probe state (`last.json`), parsed.
fn saved_state(tb: &Testbed, node: &str) -> Value {
    let path = tb.dir.join(format!("state/{node}/last.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Mounts a small tmpfs over `dir` holding what `dir` held, then fills it.
fn full_tmpfs_over(dir: &Path) {
    let keep = dir.with_extension("keep");
    let _ = std::fs::remove_dir_all(&keep);
    std::fs::create_dir_all(&keep).expect("create the copy folder");
    run(
        "cp",
        &[
            "-a",
            &format!("{}/.", dir.display()),
            keep.to_str().unwrap(),
        ],
    );
    run(
        "mount",
        &[
            "-t",
            "tmpfs",
            "-o",
            "size=256k,mode=0755",
            "tmpfs",
            dir.to_str().unwrap(),
        ],
    );
    run(
        "cp",
        &[
            "-a",
            &format!("{}/.", keep.display()),
            dir.to_str().unwrap(),
        ],
    );
    let _ = std::fs::remove_dir_all(&keep);
    // Fill what is left (dd stops with "No space left on device").
    let _ = Command::new("dd")
        .args(["if=/dev/zero", "bs=4k"])
        .arg(format!("of={}/fill", dir.display()))
        .stderr(std::process::Stdio::null())
        .status();
}

#[test]
fn full_or_read_only_state_and_spool_folders_leave_the_job_running_and_the_saved_state_intact() {
    let tb = Testbed::get();
    let state_dir = tb.dir.join("state/n4");
    let spool = tb.dir.join("runs");
    let fabric_run = tb.dir.join("bin/fabric-run");
    let wrap = format!("{} -- true", fabric_run.display());
    tb.healing(|| {
        let first = tb.sbatch_wait(&["-N1", "-w", "n4", "--fabric-check", "--wrap", "true"]);
        let first_tag = tagged(&tb, first);
        let before = saved_state(&tb, "n4");
        let r = std::panic::catch_unwind(|| {
            full_tmpfs_over(&state_dir);
            run(
                "mount",
                &["--bind", spool.to_str().unwrap(), spool.to_str().unwrap()],
            );
            run("mount", &["-o", "remount,bind,ro", spool.to_str().unwrap()]);
            for fault in ["full", "read-only"] {
                if fault == "read-only" {
                    run("mount", &["-o", "remount,ro", state_dir.to_str().unwrap()]);
                }
                let log_at = tb.slurmd_log("n4").len();
                let job = tb.sbatch_wait(&["-N1", "-w", "n4", "--fabric-check", "--wrap", &wrap]);
                assert_eq!(
                    wait_job_end(&tb, job, LONG).as_deref(),
                    Some("COMPLETED"),
                    "state {fault}"
                );
                tagged(&tb, job);
                let log = tb.slurmd_log("n4").split_off(log_at);
                assert!(
                    log.lines()
                        .any(|l| l.contains(&format!("prolog job={job} "))
                            && l.contains("cannot save")),
                    "state {fault}: the prolog does not say it could not save its snapshot:\n{log}"
                );
                assert_eq!(
                    saved_state(&tb, "n4"),
                    before,
                    "state {fault}: last.json changed"
                );
                nothing_of_ours_left(&tb, fault);
                no_node_drained(&tb, fault);
            }
        });
        umount(&spool);
        umount(&state_dir);
        if let Err(p) = r {
            std::panic::resume_unwind(p);
        }
        assert_eq!(tagged(&tb, first), first_tag, "the earlier record changed");
    });
}

/// A stand-in `fabric-check` whose probe hangs or crashes as `mode_file` says.
fn faulty_probe(tb: &Testbed, mode_file: &Path) -> PathBuf {
    let real = tb.dir.join("bin/fabric-check");
    let path = tb.dir.join("bin/faulty-fabric-check");
    let script = format!(
        "#!/bin/sh\nif [ \"$1\" = probe ]; then\n  case $(cat {mode}) in\n    hang) sleep {HANG_S} ;;\n    crash) ulimit -c 0; kill -SEGV $$ ;;\n    held) : > {started}; i=0; while [ \"$(cat {mode})\" = held ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done ;;\n  esac\nfi\nexec {real} \"$@\"\n",
        mode = mode_file.display(),
        started = mode_file.with_file_name("faulty-probe-started").display(),
        real = real.display()
    );
    std::fs::write(&path, script).expect("write the stand-in probe");
    run("chmod", &["755", path.to_str().unwrap()]);
    path
}

#[test]
fn a_hanging_or_crashing_probe_leaves_no_process_behind_and_drains_nothing() {
    let tb = Testbed::get();
    let mode = tb.dir.join("state/faulty-probe-mode");
    let probe = faulty_probe(&tb, &mode);
    tb.with_plugstack(None, Some(&probe), "", || {
        for (fault, check) in [("hang", "probe.timeout"), ("crash", "probe.error")] {
            std::fs::write(&mode, fault).expect("write the mode");
            let job = tb.sbatch_wait(&["-N2", "--fabric-check", "--wrap", "true"]);
            assert_eq!(
                wait_job_end(&tb, job, LONG).as_deref(),
                Some("COMPLETED"),
                "{fault}"
            );
            let tag = tagged(&tb, job);
            assert_eq!(tag["verdict"], "error", "{fault}: {tag}");
            let first = tag["nodes"]
                .as_object()
                .and_then(|m| m.values().next())
                .cloned();
            assert_eq!(
                first.map(|n| n["checks"][0].clone()),
                Some(Value::from(check)),
                "{fault}: {tag}"
            );
            nothing_of_ours_left(&tb, fault);
            no_node_drained(&tb, fault);
        }
    });
    let _ = std::fs::remove_file(&mode);
}

/// Moves every `taken_unix_ms` in the saved state `by_ms` into the future: the same as the
/// clock having been stepped back by that much since the state was saved.
fn shift_saved_clock(v: &mut Value, by_ms: u64) {
    match v {
        Value::Object(m) => {
            for (k, x) in m.iter_mut() {
                if k == "taken_unix_ms" {
                    if let Some(t) = x.as_u64() {
                        *x = Value::from(t + by_ms);
                    }
                } else {
                    shift_saved_clock(x, by_ms);
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|x| shift_saved_clock(x, by_ms)),
        _ => {}
    }
}

#[test]
fn a_clock_stepped_back_since_the_last_probe_drains_nothing_and_the_next_baseline_is_current() {
    let tb = Testbed::get();
    // From a healthy cluster: it checks that nothing is drained, whatever ran before it.
    heal_all(&tb);
    tb.healing(|| {
        let first = tb.sbatch_wait(&["-N1", "-w", "n3", "--fabric-check", "--wrap", "true"]);
        tagged(&tb, first);
        let mut state = saved_state(&tb, "n3");
        let day_ms = 86_400_000;
        shift_saved_clock(&mut state, day_ms);
        std::fs::write(
            tb.dir.join("state/n3/last.json"),
            serde_json::to_vec(&state).unwrap(),
        )
        .expect("write the shifted state");
        let job = tb.sbatch_wait(&["-N1", "-w", "n3", "--fabric-check", "--wrap", "true"]);
        assert_eq!(wait_job_end(&tb, job, LONG).as_deref(), Some("COMPLETED"));
        let tag = tagged(&tb, job);
        assert_ne!(
            tag["verdict"], "fail",
            "a clock step is not a fabric fault: {tag}"
        );
        no_node_drained(&tb, "clock stepped back");
        nothing_of_ours_left(&tb, "clock stepped back");
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        let saved = saved_state(&tb, "n3").to_string();
        let future = saved
            .split("\"taken_unix_ms\":")
            .skip(1)
            .filter_map(|s| {
                s.split(|c: char| !c.is_ascii_digit())
                    .next()?
                    .parse::<u64>()
                    .ok()
            })
            .any(|t| t > now_ms + day_ms / 2);
        assert!(!future, "the baseline from the future was kept: {saved}");
    });
}

#[test]
fn a_slurmd_killed_mid_rendezvous_drains_no_healthy_node_and_leaves_nothing_running() {
    let tb = Testbed::get();
    tb.healing(|| {
        let job = tb.sbatch(&[
            "-N2",
            "-w",
            "n1,n2",
            "--fabric-check=full",
            "--wrap",
            "true",
        ]);
        // The prologs are in the rendezvous once the job is allocated and configuring.
        let configuring = wait_for(LONG, || {
            let s = job_state(&tb, job);
            (s == "CONFIGURING" || s == "RUNNING" || s.is_empty()).then_some(s)
        });
        assert!(configuring.is_some(), "job {job} was never allocated");
        let pid: i32 = std::fs::read_to_string(tb.dir.join("run/slurmd-n2.pid"))
            .expect("n2 pid file")
            .trim()
            .parse()
            .expect("a pid");
        run("kill", &["-KILL", &pid.to_string()]);
        std::thread::sleep(Duration::from_secs(5));
        tb.script(&["start", "slurmd-n2"])
            .expect("start slurmd n2 again");
        let end = wait_job_end(&tb, job, LONG);
        assert!(
            end.is_some(),
            "job {job} never ended: {}",
            job_state(&tb, job)
        );
        nothing_of_ours_left(&tb, "slurmd killed");
        no_node_drained(&tb, "slurmd killed");
    });
}
