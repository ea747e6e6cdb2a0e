//! The probe in the prolog, verdicts in sacct, drain and resume with etiquette, job-window
//! counters: on the real testbed (slurmctld, four slurmd, slurmdbd with MariaDB, munge).
//!
//! Each test starts from and returns to a healthy cluster (`heal_all`).

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use fabric_e2e::{Testbed, heal_all, job_tag, wait_for, wait_job_end, wait_tag};
use serde_json::Value;

const LONG: Duration = Duration::from_secs(120);

fn verdict(tag: &Value) -> &str {
    tag["verdict"].as_str().unwrap_or("")
}

/// Runs the testbed's `fabric-check` with the testbed's environment (inside the cluster's root
/// on the matrix, where it talks to that Slurm's own commands).
fn fabric_check(tb: &Testbed, args: &[&str]) -> std::process::Output {
    let bin = tb.dir.join("bin/fabric-check");
    tb.cmd(bin.to_str().expect("utf-8 path"), args)
}

fn health(tb: &Testbed, node: &str) -> std::process::Output {
    let plugstack = tb.dir.join("etc/plugstack.conf");
    fabric_check(
        tb,
        &[
            "health",
            "--plugstack",
            plugstack.to_str().unwrap(),
            "--node",
            node,
            "--clean-probes",
            "3",
        ],
    )
}

/// A stand-in `fabric-check` that misbehaves only as the probe, written next to the real one.
fn misbehaving_probe(tb: &Testbed, name: &str, probe_body: &str) -> PathBuf {
    let real = tb.dir.join("bin/fabric-check");
    let path = tb.dir.join(format!("bin/{name}"));
    let script = format!(
        "#!/bin/sh\nif [ \"$1\" = probe ]; then\n{probe_body}\nfi\nexec {} \"$@\"\n",
        real.display()
    );
    std::fs::write(&path, script).expect("write stand-in");
    Command::new("chmod")
        .arg("755")
        .arg(&path)
        .status()
        .expect("chmod");
    path
}

fn with_plugin_words(tb: &Testbed, extra: &str, probe: Option<&PathBuf>, f: impl FnOnce()) {
    tb.with_plugstack(None, probe.map(PathBuf::as_path), extra, f);
}

#[test]
fn a_healthy_four_node_job_is_tagged_pass_for_all_four_nodes() {
    let tb = Testbed::get();
    heal_all(&tb);
    let job = tb.sbatch_wait(&["-N4", "--fabric-check", "--wrap", "true"]);
    let tag = wait_tag(&tb, job, LONG, |t| t["nnodes"] == 4).expect("a tag in sacct");
    assert_eq!(verdict(&tag), "pass", "{tag}");
    assert_eq!(tag["counts"]["pass"], 4, "{tag}");
    for n in ["n1", "n2", "n3", "n4"] {
        assert_eq!(tag["nodes"][n]["verdict"], "pass", "{n}: {tag}");
    }
    let listed = tb.ok(
        "sacct",
        &[
            "-n",
            "-P",
            "-X",
            "-j",
            &job.to_string(),
            "-o",
            "JobID,AdminComment",
        ],
    );
    assert!(
        listed.contains(&format!("{job}|fabric-check/v1 {{")),
        "{listed}"
    );
}

#[test]
fn a_faulty_node_is_drained_and_the_job_is_requeued_onto_healthy_nodes() {
    let tb = Testbed::get();
    heal_all(&tb);
    tb.script(&["node", "n3", "ib8-port-down"]).unwrap();
    tb.healing(|| {
        // Three nodes: the scheduler picks n[1-3] first; n3 fails and the job moves to n4.
        let job = tb.sbatch(&["-N3", "--fabric-check", "--wrap", "true"]);
        // A requeued job waits cred_expire + 1 s (10 s on the testbed) before it may restart.
        let state = wait_job_end(&tb, job, Duration::from_secs(300)).expect("job ends");
        assert_eq!(state, "COMPLETED");
        let (st, reason) = tb.node_state("n3");
        assert!(st.starts_with("drain"), "n3 is {st}");
        assert!(
            reason.starts_with("fabric-check: ib.port_state: mlx5_3 port 1"),
            "{reason}"
        );
        let nodes = tb.ok(
            "sacct",
            &["-n", "-P", "-X", "-j", &job.to_string(), "-o", "NodeList"],
        );
        assert!(
            !nodes.contains('3') || nodes.contains("n[1-2,4]"),
            "ran on {nodes}"
        );
        let tag =
            wait_tag(&tb, job, LONG, |t| t["earlier"]["n3"].is_object()).expect("tag names n3");
        assert_eq!(tag["earlier"]["n3"]["verdict"], "fail", "{tag}");
        assert_eq!(tag["earlier"]["n3"]["checks"][0], "ib.port_state", "{tag}");
        assert_eq!(tag["earlier"]["n3"]["drained"], true, "{tag}");
    });
}

#[test]
fn drain_keeps_a_foreign_reason_and_resume_leaves_it_alone() {
    let tb = Testbed::get();
    heal_all(&tb);
    tb.ok(
        "scontrol",
        &[
            "update",
            "NodeName=n2",
            "State=DRAIN",
            "Reason=dimm replaced, ticket 42",
        ],
    );
    tb.script(&["node", "n2", "ib8-port-down"]).unwrap();
    tb.healing(|| {
        let out = health(&tb, "n2");
        assert_eq!(
            out.status.code(),
            Some(2),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
        assert_eq!(tb.node_state("n2").1, "dimm replaced, ticket 42");
        let out = fabric_check(&tb, &["resume", "n2"]);
        assert_eq!(out.status.code(), Some(1));
        assert!(String::from_utf8_lossy(&out.stdout).contains("drained for another reason"));
        let (st, reason) = tb.node_state("n2");
        assert!(st.starts_with("drain"), "{st}");
        assert_eq!(reason, "dimm replaced, ticket 42");
    });
}

#[test]
fn a_recovered_node_returns_only_through_our_resume_after_clean_probes() {
    let tb = Testbed::get();
    heal_all(&tb);
    tb.script(&["node", "n4", "ib8-port-down"]).unwrap();
    tb.healing(|| {
        assert_eq!(health(&tb, "n4").status.code(), Some(2));
        let (st, reason) = tb.node_state("n4");
        assert!(
            st.starts_with("drain") && reason.starts_with("fabric-check: ib.port_state"),
            "{st} {reason}"
        );
        tb.script(&["node", "n4", "ib8-healthy"]).unwrap();
        // Slurm itself does not return a drained node to service.
        std::thread::sleep(Duration::from_secs(2));
        assert!(tb.node_state("n4").0.starts_with("drain"));
        for i in 1..=2 {
            let out = health(&tb, "n4");
            assert!(
                String::from_utf8_lossy(&out.stdout).contains(&format!("clean probe {i} of 3"))
            );
            assert!(
                tb.node_state("n4").0.starts_with("drain"),
                "resumed too early, after {i}"
            );
        }
        let out = health(&tb, "n4");
        assert!(String::from_utf8_lossy(&out.stdout).contains("resumed n4 after 3 clean probes"));
        let st = wait_for(Duration::from_secs(20), || {
            let s = tb.node_state("n4").0;
            (!s.starts_with("drain")).then_some(s)
        });
        assert!(st.is_some(), "n4 still drained");
    });
}

#[test]
fn a_node_whose_gpu_fell_off_the_bus_stays_drained_through_health_until_the_gpu_is_back() {
    let tb = Testbed::get();
    heal_all(&tb);
    // The node's first whole probe records its known inventory (eight GPUs).
    let out = health(&tb, "n3");
    assert_ne!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(tb.dir.join("state/n3/known.json").is_file());
    tb.script(&["node", "n3", "ib8-gpu-gone"]).unwrap();
    tb.healing(|| {
        assert_eq!(health(&tb, "n3").status.code(), Some(2));
        let (st, reason) = tb.node_state("n3");
        assert!(
            st.starts_with("drain") && reason.starts_with("fabric-check: inventory.gone"),
            "{st} {reason}"
        );
        // Before the known inventory, these three compared with a last.json that no longer had
        // the GPU, counted as clean, and the third put the node back.
        for i in 1..=3 {
            let out = health(&tb, "n3");
            assert_eq!(
                out.status.code(),
                Some(2),
                "look {i}: {}",
                String::from_utf8_lossy(&out.stdout)
            );
            assert!(
                tb.node_state("n3").0.starts_with("drain"),
                "resumed after look {i}"
            );
        }
        tb.script(&["node", "n3", "ib8-healthy"]).unwrap();
        for _ in 1..=2 {
            assert_ne!(health(&tb, "n3").status.code(), Some(2));
        }
        let out = health(&tb, "n3");
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("resumed n3 after 3 clean probes"),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
    });
}

#[test]
fn a_hanging_probe_is_killed_and_the_job_proceeds_tagged_probe_timed_out() {
    let tb = Testbed::get();
    heal_all(&tb);
    let probe = misbehaving_probe(&tb, "hanging-fabric-check", "sleep 600");
    with_plugin_words(&tb, "", Some(&probe), || {
        let job = tb.sbatch_wait(&["-N2", "--fabric-check", "--wrap", "true"]);
        assert_eq!(wait_job_end(&tb, job, LONG).as_deref(), Some("COMPLETED"));
        let tag = wait_tag(&tb, job, LONG, |t| t["nnodes"] == 2).expect("tag");
        assert_eq!(verdict(&tag), "error", "{tag}");
        let notes = tag["notes"].to_string();
        assert!(notes.contains("probe timed out"), "{tag}");
        assert_eq!(tag["nodes"]["n1"]["checks"][0], "probe.timeout", "{tag}");
        assert_eq!(tb.live_slurmds().len(), 4);
        for n in ["n1", "n2"] {
            assert!(
                !tb.node_state(n).0.starts_with("drain"),
                "{n} drained for a probe timeout"
            );
        }
    });
}

#[test]
fn a_crashing_or_missing_probe_is_a_probe_error_and_drains_nothing() {
    let tb = Testbed::get();
    heal_all(&tb);
    let probe = misbehaving_probe(&tb, "crashing-fabric-check", "kill -SEGV $$");
    with_plugin_words(&tb, "", Some(&probe), || {
        let job = tb.sbatch_wait(&["-N2", "--fabric-check", "--wrap", "true"]);
        assert_eq!(wait_job_end(&tb, job, LONG).as_deref(), Some("COMPLETED"));
        let tag = wait_tag(&tb, job, LONG, |t| t["nnodes"] == 2).expect("tag");
        assert_eq!(verdict(&tag), "error", "{tag}");
        assert!(tag["notes"].to_string().contains("probe crashed"), "{tag}");
        assert_eq!(tag["nodes"]["n1"]["checks"][0], "probe.error", "{tag}");
        assert!(!tb.node_state("n1").0.starts_with("drain"));
    });
    let missing = PathBuf::from("/nonexistent/fabric-check");
    let before = tb.slurmd_log("n1").len();
    with_plugin_words(&tb, "", Some(&missing), || {
        let job = tb.sbatch_wait(&["-N1", "-w", "n1", "--fabric-check", "--wrap", "true"]);
        assert_eq!(wait_job_end(&tb, job, LONG).as_deref(), Some("COMPLETED"));
        let log = tb.slurmd_log("n1").split_off(before);
        assert!(
            log.contains("cannot run /nonexistent/fabric-check"),
            "{log}"
        );
        assert!(
            log.contains("probe error, the job proceeds unchecked"),
            "{log}"
        );
        assert!(!tb.node_state("n1").0.starts_with("drain"));
    });
}

#[test]
fn counters_that_rise_during_the_job_are_named_in_its_tag() {
    let tb = Testbed::get();
    heal_all(&tb);
    tb.healing(|| {
        // The job runs until the test has seen the watch keep its event (or 90 s): on a loaded
        // machine a job of fixed length can end before its watch took a sample.
        let release = tb.work_dir("rises").join("release");
        let wrap = format!(
            "i=0; while [ ! -e {r} ] && [ $i -lt 900 ]; do sleep 0.1; i=$((i+1)); done",
            r = release.display()
        );
        let job = tb.sbatch(&["-N1", "-w", "n2", "--fabric-check", "--wrap", &wrap]);
        let running = wait_for(LONG, || {
            let s = tb.ok("squeue", &["-h", "-j", &job.to_string(), "-o", "%T"]);
            (s.trim() == "RUNNING").then_some(())
        });
        assert!(running.is_some(), "job {job} never ran");
        // RUNNING comes before the prolog's snapshot (PrologFlags=Alloc): raise the counters only
        // once the snapshot exists, or the rise is in the baseline.
        let snapshot = tb.dir.join(format!("state/n2/job-{job}.json"));
        assert!(
            wait_for(LONG, || snapshot.exists().then_some(())).is_some(),
            "the prolog never saved {}",
            snapshot.display()
        );
        let counter = tb
            .dir
            .join("nodes/n2/sysfs/class/infiniband/mlx5_1/ports/1/counters/symbol_error");
        let was: u64 = std::fs::read_to_string(&counter)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        std::fs::write(&counter, format!("{}\n", was + 40)).unwrap();
        let downed = tb
            .dir
            .join("nodes/n2/sysfs/class/infiniband/mlx5_1/ports/1/counters/link_downed");
        let d: u64 = std::fs::read_to_string(&downed)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        std::fs::write(&downed, format!("{}\n", d + 1)).unwrap();
        let events = tb.dir.join(format!("state/n2/watch-{job}.events"));
        let kept = wait_for(LONG, || {
            let text = std::fs::read_to_string(&events).ok()?;
            text.contains("ib.counters").then_some(text)
        });
        std::fs::write(&release, "").unwrap();
        assert!(
            kept.is_some(),
            "the watch kept no ib.counters event in {} while job {job} ran; n2's log: {:?}",
            events.display(),
            tb.prolog_lines("n2", job)
        );
        assert_eq!(wait_job_end(&tb, job, LONG).as_deref(), Some("COMPLETED"));
        // The in-job watch writes a live `during` row (no rises) as soon as link_downed rises;
        // the epilog's rises come later.
        let tag = wait_tag(&tb, job, LONG, |t| {
            t["during"][0]["rises"]["mlx5_1/1/symbol_error"].is_number()
        })
        .expect("tag with the epilog's rises");
        let during = &tag["during"][0];
        assert_eq!(during["node"], "n2", "{tag}");
        assert_eq!(during["rises"]["mlx5_1/1/symbol_error"], 40, "{tag}");
        assert_eq!(during["rises"]["mlx5_1/1/link_downed"], 1, "{tag}");
        assert_eq!(during["verdict"], "fail", "{tag}");
        assert_eq!(
            during["watch"][0]["check"], "ib.counters",
            "the watch saw the link_downed rise while the job ran: {tag}"
        );
        // A link_downed rise is fatal: the node is drained by policy.
        let (st, reason) = tb.node_state("n2");
        assert!(st.starts_with("drain"), "{st}");
        assert!(
            reason.starts_with("fabric-check: ib.counters: during job"),
            "{reason}"
        );
    });
}

#[test]
fn the_mass_drain_guard_drains_one_of_three_faulty_nodes_and_says_so() {
    let tb = Testbed::get();
    heal_all(&tb);
    for n in ["n1", "n2", "n3"] {
        tb.script(&["node", n, "ib8-port-down"]).unwrap();
    }
    let before: Vec<usize> = ["n1", "n2", "n3"]
        .iter()
        .map(|n| tb.slurmd_log(n).len())
        .collect();
    with_plugin_words(&tb, "max_drain=1", None, || {
        let job = tb.sbatch(&["-N4", "--fabric-check", "--wrap", "true"]);
        let drained = wait_for(LONG, || {
            let logs: String = ["n1", "n2", "n3"]
                .iter()
                .zip(&before)
                .map(|(n, b)| tb.slurmd_log(n).split_off(*b))
                .collect();
            (logs.matches("MASS-DRAIN GUARD").count() >= 2).then_some(logs)
        });
        let _ = tb.cmd("scancel", &[&job.to_string()]);
        assert!(drained.is_some(), "the guard was not logged on two nodes");
        std::thread::sleep(Duration::from_secs(3));
        let ours: Vec<&str> = ["n1", "n2", "n3", "n4"]
            .into_iter()
            .filter(|n| {
                let (st, r) = tb.node_state(n);
                st.starts_with("drain") && r.starts_with("fabric-check:")
            })
            .collect();
        assert_eq!(ours.len(), 1, "drained by fabric-check: {ours:?}");
    });
}

#[test]
fn twenty_concurrent_multi_node_jobs_each_get_every_node_verdict() {
    let tb = Testbed::get();
    heal_all(&tb);
    let jobs: Vec<(u32, u32)> = (0..20)
        .map(|i| {
            let n = 2 + (i % 3);
            let nn = format!("-N{n}");
            (tb.sbatch(&[&nn, "--fabric-check", "--wrap", "sleep 1"]), n)
        })
        .collect();
    for (job, n) in &jobs {
        assert_eq!(
            wait_job_end(&tb, *job, Duration::from_secs(300)).as_deref(),
            Some("COMPLETED"),
            "job {job}"
        );
        let tag = wait_tag(&tb, *job, LONG, |t| t["nnodes"] == *n).unwrap_or_else(|| {
            panic!("job {job}: no tag with {n} nodes: {:?}", job_tag(&tb, *job))
        });
        assert_eq!(verdict(&tag), "pass", "job {job}: {tag}");
        assert_eq!(tag["counts"]["pass"], *n, "job {job}: {tag}");
        assert_eq!(
            tag["nodes"].as_object().map(|o| o.len()),
            Some(*n as usize),
            "job {job}: {tag}"
        );
        assert!(tag.get("missing").is_none(), "job {job}: {tag}");
    }
}

/// Issue 41 item 5: jobs whose rendezvous windows overlap (consecutive ids) all start at once;
/// every one ends tagged. The matrix runs this on two clusters of one host side by side, whose
/// plugins share the host's loopback ports.
#[test]
fn forty_checked_jobs_released_at_once_all_end_with_every_nodes_verdict() {
    let tb = Testbed::get();
    heal_all(&tb);
    let jobs: Vec<u32> = (0..40)
        .map(|_| tb.sbatch(&["-N2", "--hold", "--fabric-check", "--wrap", "sleep 1"]))
        .collect();
    let ids: Vec<String> = jobs.iter().map(u32::to_string).collect();
    tb.ok("scontrol", &["release", &ids.join(",")]);
    for job in &jobs {
        assert_eq!(
            wait_job_end(&tb, *job, Duration::from_secs(600)).as_deref(),
            Some("COMPLETED"),
            "job {job}"
        );
        let tag = wait_tag(&tb, *job, LONG, |t| t["nnodes"] == 2)
            .unwrap_or_else(|| panic!("job {job}: no tag with 2 nodes: {:?}", job_tag(&tb, *job)));
        assert_eq!(verdict(&tag), "pass", "job {job}: {tag}");
        assert!(tag.get("missing").is_none(), "job {job}: {tag}");
    }
}

#[test]
fn foreign_admin_comment_content_survives_our_write() {
    let tb = Testbed::get();
    heal_all(&tb);
    let job = tb.sbatch(&["-N2", "--hold", "--fabric-check", "--wrap", "true"]);
    tb.ok(
        "scontrol",
        &[
            "update",
            &format!("JobId={job}"),
            "AdminComment=JS1:eyJub2RlcyI6IHt9fQ==",
        ],
    );
    tb.ok("scontrol", &["release", &job.to_string()]);
    assert_eq!(wait_job_end(&tb, job, LONG).as_deref(), Some("COMPLETED"));
    let tag = wait_tag(&tb, job, LONG, |t| t["nnodes"] == 2).expect("tag");
    assert_eq!(verdict(&tag), "pass");
    let comment = tb.admin_comment(job);
    assert!(
        comment.starts_with("JS1:eyJub2RlcyI6IHt9fQ== fabric-check/v1 {"),
        "{comment}"
    );
}
