//! Stragglers from the job's own steps on a real Slurm: four nodes run a checked job whose
//! training steps `fabric-run` records; when the third node's steps become 1.5× slower, the
//! first node's watch names it within 30 s (the live tag's `during` row, the job's notice), and
//! nothing is drained; the job runs to its end with the straggler in its final tag.

use std::time::{Duration, Instant};

use fabric_e2e::{Testbed, job_tag, wait_for, wait_job_end};

fn live_comment(tb: &Testbed, job: u32) -> String {
    let out = tb.cmd("scontrol", &["show", "job", &job.to_string()]);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.trim().strip_prefix("AdminComment="))
        .unwrap_or("")
        .to_owned()
}

/// The `during` row of `node` in a tag, if any.
fn during_row<'a>(tag: &'a serde_json::Value, node: &str) -> Option<&'a serde_json::Value> {
    tag["during"]
        .as_array()
        .and_then(|d| d.iter().find(|r| r["node"] == node))
}

fn has_straggler(tag: &serde_json::Value, node: &str) -> bool {
    during_row(tag, node)
        .and_then(|r| r["watch"].as_array())
        .is_some_and(|w| w.iter().any(|e| e["check"] == "job.straggler"))
}

#[test]
fn a_four_node_job_whose_third_nodes_steps_slow_to_one_and_a_half_names_it_within_thirty_seconds_and_drains_nothing()
 {
    let tb = Testbed::get();
    tb.healing(|| {
        let work = tb.work_dir("stragglers");
        let path = format!(
            "{}:/usr/sbin:/usr/bin:/sbin:/bin",
            tb.dir.join("bin").display()
        );
        // The "training": a step every 0.5 s, 0.75 s on n3 once the test says so.
        let train = work.join("train.sh");
        std::fs::write(
            &train,
            format!(
                "#!/bin/sh\ni=0\nwhile [ $i -lt 150 ]; do\n\
                 if [ \"$SLURMD_NODENAME\" = n3 ] && [ -e {w}/slow ]; then sleep 0.75; else sleep 0.5; fi\n\
                 i=$((i+1)); echo \"step $i\"\ndone\n",
                w = work.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&train, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let batch = work.join("job.sh");
        std::fs::write(
            &batch,
            format!(
                "#!/bin/sh\nexport PATH={path}\n\
                 srun -N4 --ntasks-per-node=1 fabric-run --step-regex '^step ([0-9]+)' -- {}\n",
                train.display()
            ),
        )
        .unwrap();
        let job = tb.sbatch(&["-N4", "--fabric-check", batch.to_str().unwrap()]);
        let ran = wait_for(Duration::from_secs(60), || {
            let s = tb.ok("squeue", &["-h", "-j", &job.to_string(), "-o", "%T"]);
            (s.trim() == "RUNNING").then_some(())
        });
        assert!(ran.is_some(), "job {job} never ran");
        // Some windows of the job as it is, then n3 slows down.
        std::thread::sleep(Duration::from_secs(20));
        let early = live_comment(&tb, job);
        assert!(
            !early.contains("job.straggler") && !early.contains("job.workload_slow"),
            "a job whose nodes step alike has nothing said: {early}"
        );
        std::fs::write(work.join("slow"), "").unwrap();
        let t0 = Instant::now();
        let tag = wait_for(Duration::from_secs(30), || {
            let c = live_comment(&tb, job);
            let text = c.split_once("fabric-check/v1 ")?.1.trim().to_owned();
            let tag: serde_json::Value = serde_json::from_str(&text).ok()?;
            has_straggler(&tag, "n3").then_some(tag)
        })
        .unwrap_or_else(|| {
            panic!(
                "n3 not named within 30 s: {}\n{}",
                live_comment(&tb, job),
                tb.slurmd_log("n1")
            )
        });
        let named_s = t0.elapsed().as_secs_f64();
        eprintln!("stragglers: n3 named {named_s:.1} s after its steps slowed");
        let ev = during_row(&tag, "n3").unwrap()["watch"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["check"] == "job.straggler")
            .unwrap()
            .clone();
        assert_eq!(ev["drained"], false, "{ev}");
        assert_eq!(ev["warn"], true, "{ev}");
        let message = ev["message"].as_str().unwrap();
        let ratio: f64 = message
            .strip_prefix("steps ")
            .and_then(|m| m.split('x').next())
            .and_then(|r| r.parse().ok())
            .unwrap_or_else(|| panic!("no ratio in {message:?}"));
        assert!((1.3..=1.7).contains(&ratio), "{message}");
        for n in ["n1", "n2", "n4"] {
            assert!(!has_straggler(&tag, n), "{n} was not slow: {tag}");
        }
        // Told to the job on the first node, and nothing drained.
        let notice =
            std::fs::read_to_string(tb.dir.join(format!("runs/{job}/fabric-notice-n1.jsonl")))
                .expect("the first node's notice file");
        assert!(
            notice.contains("\"check\":\"job.straggler\"") && notice.contains("\"node\":\"n3\""),
            "{notice}"
        );
        for n in ["n1", "n2", "n3", "n4"] {
            let (state, reason) = tb.node_state(n);
            assert!(
                !state.to_lowercase().contains("drain"),
                "{n} drained ({reason}): a straggler never drains"
            );
        }
        let end = wait_job_end(&tb, job, Duration::from_secs(180)).expect("the job ends");
        assert_eq!(end, "COMPLETED");
        let kept = wait_for(Duration::from_secs(30), || {
            job_tag(&tb, job).filter(|t| has_straggler(t, "n3"))
        });
        assert!(
            kept.is_some(),
            "the final tag keeps the straggler: {:?}",
            job_tag(&tb, job)
        );
        let _ = std::fs::remove_dir_all(&work);
    });
}
