//! The in-job watch on a real Slurm: a port that goes down while a checked two-node job runs is
//! found in seconds; the node is drained with a reason of its own, the job's live tag has the
//! `during` entry while the job still runs, the job is told through its notice file, and the
//! job itself runs to its end, also after the node's slurmd was restarted under it. `fabric-run --on-fabric-fault=signal:USR1` hands the notice to
//! the training process as a signal. A healthy job's watch makes no Slurm call at all (slurmctld's
//! own statistics, `sdiag`, by message type).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use fabric_e2e::{Testbed, wait_for, wait_job_end};

fn live_comment(tb: &Testbed, job: u32) -> String {
    let out = tb.cmd("scontrol", &["show", "job", &job.to_string()]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.lines()
        .find_map(|l| l.trim().strip_prefix("AdminComment="))
        .unwrap_or("")
        .to_owned()
}

/// n2's mlx5_3 port 1 goes DOWN (its link disabled), as a fault mid-job.
fn n2_port_down(tb: &Testbed) {
    let port = tb
        .dir
        .join("nodes/n2/sysfs/class/infiniband/mlx5_3/ports/1");
    std::fs::write(port.join("state"), "1: DOWN\n").unwrap();
    std::fs::write(port.join("phys_state"), "3: Disabled\n").unwrap();
}

#[test]
fn a_port_that_goes_down_mid_job_after_a_slurmd_restart_is_drained_and_tagged_live_while_the_job_runs_on()
 {
    let tb = Testbed::get();
    tb.healing(|| {
        let job = tb.sbatch(&["-N2", "-w", "n1,n2", "--fabric-check", "--wrap", "sleep 30"]);
        let running = wait_for(Duration::from_secs(30), || {
            let s = tb.ok("squeue", &["-h", "-j", &job.to_string(), "-o", "%T"]);
            (s.trim() == "RUNNING").then_some(())
        });
        assert!(running.is_some(), "job {job} never ran");
        // Running jobs survive a slurmd restart, and so does their watch: it is not slurmd's
        // child.
        std::thread::sleep(Duration::from_secs(3));
        tb.script(&["restart-slurmd", "n2"])
            .expect("restart n2's slurmd under the running job");
        std::thread::sleep(Duration::from_secs(7));
        n2_port_down(&tb);
        let t0 = Instant::now();
        let reason = wait_for(Duration::from_secs(10), || {
            let (state, reason) = tb.node_state("n2");
            state.to_lowercase().contains("drain").then_some(reason)
        })
        .unwrap_or_else(|| panic!("n2 not drained: {}", tb.slurmd_log("n2")));
        let drained_s = t0.elapsed().as_secs_f64();
        assert!(
            reason.starts_with(&format!(
                "fabric-check: ib.port_state: during job {job} (watch): mlx5_3 port 1"
            )),
            "{reason}"
        );
        let comment = wait_for(Duration::from_secs(10), || {
            let c = live_comment(&tb, job);
            c.contains("\"watch\":[").then_some(c)
        })
        .unwrap_or_else(|| panic!("no live during entry: {}", live_comment(&tb, job)));
        let tagged_s = t0.elapsed().as_secs_f64();
        let tag: serde_json::Value = serde_json::from_str(
            comment
                .split_once("fabric-check/v1 ")
                .map(|(_, t)| t.trim())
                .expect("our segment"),
        )
        .expect("the live tag is JSON");
        let row = tag["during"]
            .as_array()
            .and_then(|d| d.iter().find(|r| r["node"] == "n2"))
            .expect("n2's during entry");
        let ev = &row["watch"][0];
        assert_eq!(ev["check"], "ib.port_state");
        assert_eq!(ev["drained"], true);
        assert!(ev["into_job_s"].as_u64().unwrap() >= 9, "{ev}");
        let state = tb.ok("squeue", &["-h", "-j", &job.to_string(), "-o", "%T"]);
        assert_eq!(state.trim(), "RUNNING", "the job runs on after the drain");
        let notice =
            std::fs::read_to_string(tb.dir.join(format!("runs/{job}/fabric-notice-n2.jsonl")))
                .expect("the job's notice file");
        assert!(notice.contains("\"check\":\"ib.port_state\""), "{notice}");
        eprintln!(
            "watch: drained {drained_s:.2} s and tagged {tagged_s:.2} s after the port went down"
        );
        let end = wait_job_end(&tb, job, Duration::from_secs(60)).expect("the job ends");
        assert_eq!(end, "COMPLETED", "a drain does not kill the running job");
        let relayed = wait_for(Duration::from_secs(30), || {
            tb.slurmd_log("n2")
                .contains(&format!(
                    "epilog job={job} node=n2: watch: started for job {job}"
                ))
                .then_some(())
        });
        assert!(relayed.is_some(), "the epilog relays the watch's log");
    });
}

fn running(tb: &Testbed, job: u32) {
    let ran = wait_for(Duration::from_secs(30), || {
        let s = tb.ok("squeue", &["-h", "-j", &job.to_string(), "-o", "%T"]);
        (s.trim() == "RUNNING").then_some(())
    });
    assert!(ran.is_some(), "job {job} never ran");
}

#[test]
fn fabric_run_hands_a_mid_job_fault_to_the_training_process_as_the_signal_it_was_asked_for() {
    let tb = Testbed::get();
    tb.healing(|| {
        let work = tb.work_dir("usr1");
        let path = format!(
            "{}:/usr/sbin:/usr/bin:/sbin:/bin",
            tb.dir.join("bin").display()
        );
        // The "training process": on USR1 it writes a marker naming its node and ends well.
        let train = work.join("train.sh");
        std::fs::write(
            &train,
            format!(
                "#!/bin/sh\ntrap 'echo usr1 > {w}/got-usr1-$SLURMD_NODENAME; exit 0' USR1\n\
                 i=0\nwhile [ $i -lt 60 ]; do sleep 0.5; i=$((i+1)); done\n",
                w = work.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&train, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let script = format!(
            "#!/bin/sh\nexport PATH={path}\n\
             srun -N2 fabric-run --on-fabric-fault=signal:USR1 -- {}\n",
            train.display()
        );
        let batch = work.join("job.sh");
        std::fs::write(&batch, script).unwrap();
        let job = tb.sbatch(&[
            "-N2",
            "-w",
            "n1,n2",
            "--fabric-check",
            batch.to_str().unwrap(),
        ]);
        running(&tb, job);
        std::thread::sleep(Duration::from_secs(6));
        let port = tb
            .dir
            .join("nodes/n2/sysfs/class/infiniband/mlx5_3/ports/1");
        std::fs::write(port.join("state"), "1: DOWN\n").unwrap();
        let t0 = Instant::now();
        let marker = work.join("got-usr1-n2");
        let got = wait_for(Duration::from_secs(15), || marker.exists().then_some(()));
        assert!(
            got.is_some(),
            "no USR1 reached n2's training process: {}",
            tb.slurmd_log("n2")
        );
        eprintln!(
            "watch: USR1 delivered {:.2} s after the port went down",
            t0.elapsed().as_secs_f64()
        );
        assert!(
            !work.join("got-usr1-n1").exists(),
            "n1 had no fault: its process is not signalled"
        );
        assert_eq!(
            wait_job_end(&tb, job, Duration::from_secs(90)).as_deref(),
            Some("COMPLETED"),
            "the process that caught the signal ended well, the other ran out its loop"
        );
        let _ = std::fs::remove_dir_all(&work);
    });
}

/// The RPCs slurmctld counted since the last `sdiag -r`, by message type.
fn rpcs_by_type(tb: &Testbed) -> BTreeMap<String, i64> {
    let text = tb.ok("sdiag", &[]);
    let section = text
        .split("statistics by message type")
        .nth(1)
        .and_then(|s| s.split("statistics by user").next())
        .unwrap_or_else(|| panic!("sdiag printed no RPC statistics by message type:\n{text}"));
    section
        .lines()
        .filter_map(|l| {
            let name = l.split_whitespace().next()?;
            let count = l.split("count:").nth(1)?.split_whitespace().next()?;
            Some((name.to_owned(), count.parse().ok()?))
        })
        .collect()
}

/// What fabric-check asks slurmctld when it acts: job and node reads, job and node updates.
const FABRIC_CHECKS_RPCS: &[&str] = &[
    "REQUEST_JOB_INFO",
    "REQUEST_JOB_INFO_SINGLE",
    "REQUEST_UPDATE_JOB",
    "REQUEST_NODE_INFO",
    "REQUEST_NODE_INFO_SINGLE",
    "REQUEST_UPDATE_NODE",
    "REQUEST_PARTITION_INFO",
];

#[test]
fn a_healthy_jobs_watch_makes_no_slurm_call_while_it_samples() {
    let tb = Testbed::get();
    tb.healing(|| {
        let job = tb.sbatch(&["-N2", "-w", "n1,n2", "--fabric-check", "--wrap", "sleep 30"]);
        running(&tb, job);
        // The prolog's own calls (the tag's read and write) are over once its watch has started.
        let pid = tb.dir.join(format!("state/n2/watch-{job}.pid"));
        assert!(
            wait_for(Duration::from_secs(15), || pid.exists().then_some(())).is_some(),
            "no watch started on n2: {}",
            tb.slurmd_log("n2")
        );
        std::thread::sleep(Duration::from_secs(3));
        tb.ok("sdiag", &["-r"]);
        std::thread::sleep(Duration::from_secs(15));
        let rpcs = rpcs_by_type(&tb);
        let ours: BTreeMap<&str, i64> = FABRIC_CHECKS_RPCS
            .iter()
            .filter_map(|t| rpcs.get(*t).map(|c| (*t, *c)))
            .filter(|(_, c)| *c > 0)
            .collect();
        assert!(
            ours.is_empty(),
            "slurmctld counted {ours:?} in 15 s of a healthy job's watch (all: {rpcs:?})"
        );
        assert!(pid.exists(), "the watch ran through the window");
        assert_eq!(
            wait_job_end(&tb, job, Duration::from_secs(60)).as_deref(),
            Some("COMPLETED")
        );
        let log = wait_for(Duration::from_secs(30), || {
            let l = tb.slurmd_log("n2");
            l.contains(&format!("epilog job={job} node=n2: watch: ended after"))
                .then_some(l)
        })
        .expect("the epilog relays the watch's last line");
        assert!(
            log.contains("faults seen: none"),
            "a healthy job's watch saw nothing"
        );
    });
}

/// `fabric-check jobs --job JOB --format json` on the testbed: the job's row.
fn jobs_row(tb: &Testbed, job: u32) -> Option<serde_json::Value> {
    let bin = tb.dir.join("bin/fabric-check");
    let out = tb.cmd(
        bin.to_str().expect("utf-8 path"),
        &["jobs", "--job", &job.to_string(), "--format", "json"],
    );
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).ok()?;
    rows.into_iter()
        .find(|r| r["job_id"].as_str() == Some(job.to_string().as_str()))
}

#[test]
fn a_fault_written_ten_seconds_into_a_running_job_shows_in_jobs_within_five_seconds_from_slurmctld()
{
    let tb = Testbed::get();
    tb.healing(|| {
        let job = tb.sbatch(&["-N2", "-w", "n1,n2", "--fabric-check", "--wrap", "sleep 60"]);
        running(&tb, job);
        std::thread::sleep(Duration::from_secs(10));
        n2_port_down(&tb);
        let t0 = Instant::now();
        let row = wait_for(Duration::from_secs(5), || {
            jobs_row(&tb, job).filter(|r| {
                r["tag_source"] == "slurmctld"
                    && r["drained"]
                        .as_array()
                        .is_some_and(|d| d.iter().any(|n| n == "n2"))
            })
        });
        let shown_s = t0.elapsed().as_secs_f64();
        let row = row.unwrap_or_else(|| {
            panic!(
                "jobs did not show the live entry within 5 s: {:?}; tag {}",
                jobs_row(&tb, job),
                live_comment(&tb, job)
            )
        });
        assert_eq!(row["state"], "RUNNING", "{row}");
        let failing = row["failing"].to_string();
        assert!(failing.contains("ib.port_state"), "{row}");
        let listed = {
            let bin = tb.dir.join("bin/fabric-check");
            tb.ok(
                bin.to_str().expect("utf-8 path"),
                &["jobs", "--state", "running", "--job", &job.to_string()],
            )
        };
        assert!(listed.contains("(live)"), "{listed}");
        eprintln!("jobs: the watch's entry shown {shown_s:.2} s after the port went down");
        tb.ok("scancel", &[&job.to_string()]);
        wait_job_end(&tb, job, Duration::from_secs(60)).expect("the job ends");
    });
}
