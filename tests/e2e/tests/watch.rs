//! The in-job watch on a real Slurm: a port that goes down while a checked two-node job runs is
//! found in seconds; the node is drained with a reason of its own, the job's live tag has the
//! `during` entry while the job still runs, the job is told through its notice file, and the
//! job itself runs to its end.

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

#[test]
fn a_port_that_goes_down_mid_job_is_drained_and_tagged_live_while_the_job_runs_on() {
    let tb = Testbed::get();
    tb.healing(|| {
        let job = tb.sbatch(&["-N2", "-w", "n1,n2", "--fabric-check", "--wrap", "sleep 30"]);
        let running = wait_for(Duration::from_secs(30), || {
            let s = tb.ok("squeue", &["-h", "-j", &job.to_string(), "-o", "%T"]);
            (s.trim() == "RUNNING").then_some(())
        });
        assert!(running.is_some(), "job {job} never ran");
        std::thread::sleep(Duration::from_secs(10));
        let port = tb
            .dir
            .join("nodes/n2/sysfs/class/infiniband/mlx5_3/ports/1");
        std::fs::write(port.join("state"), "1: DOWN\n").unwrap();
        std::fs::write(port.join("phys_state"), "3: Disabled\n").unwrap();
        let t0 = Instant::now();
        let reason = wait_for(Duration::from_secs(10), || {
            let (state, reason) = tb.node_state("n2");
            state.to_lowercase().contains("drain").then_some(reason)
        })
        .unwrap_or_else(|| panic!("n2 not drained: {}", tb.slurmd_log("n2")));
        let drained_s = t0.elapsed().as_secs_f64();
        assert!(
            reason.starts_with(&format!(
                "fabric-check: ib.port_state: during job {job}: mlx5_3 port 1"
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
