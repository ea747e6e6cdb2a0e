//! `fabric-check drill` end to end on the testbed (docs/drill.md): a short drill of three fault
//! classes, two injections each, and two clean control rounds, its jobs submitted as the
//! unprivileged job user. Every injection is caught, nothing is drained that had no fault, and
//! the drill leaves the cluster as it found it: every node in service, every fixture tree put
//! back, its restore journal empty.

use std::process::Command;
use std::time::Instant;

use fabric_e2e::Testbed;
use serde_json::Value;

fn tree_listing(tb: &Testbed, node: &str) -> String {
    let out = Command::new("find")
        .arg(tb.dir.join(format!("nodes/{node}/sysfs")))
        .arg("-printf")
        .arg("%P %s\n")
        .output()
        .expect("find");
    let mut lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    lines.sort();
    lines.join("\n")
}

/// `fabric-check drill --testbed` with `args`, against this testbed, as its `scripts/testbed`.
fn run_drill(tb: &Testbed, args: &[&str]) -> std::process::Output {
    Command::new(tb.dir.join("bin/fabric-check"))
        .args([
            "drill",
            "--testbed",
            "--testbed-script",
            tb.repo
                .join("scripts/testbed")
                .to_str()
                .expect("utf-8 path"),
        ])
        .args(args)
        .env("SLURM_CONF", &tb.slurm_conf)
        .env("FABRIC_TESTBED_DIR", &tb.dir)
        .current_dir(&tb.repo)
        .output()
        .expect("run fabric-check drill")
}

#[test]
fn a_short_drill_catches_every_injection_drains_nothing_else_and_restores_the_cluster() {
    let tb = Testbed::get();
    tb.healing(|| {
        let nodes = ["n1", "n2", "n3", "n4"];
        let before: Vec<String> = nodes.iter().map(|n| tree_listing(&tb, n)).collect();
        let t0 = Instant::now();
        let out = run_drill(
            &tb,
            &[
                "--seed",
                "21",
                "--classes",
                "port_down,ecn_off,link_flap",
                "--per-class",
                "2",
                "--controls",
                "2",
                // Long enough that a `during` fault lands in a running job and the watch, not
                // the job's end, finds it; short enough for CI.
                "--during-job-s",
                "10",
                "--format",
                "json",
                "--summary-line",
            ],
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "drill failed:\n{stdout}\n{stderr}");
        let elapsed = t0.elapsed();
        // The JSON document, then the summary line last.
        let (json, last) = stdout.trim_end().rsplit_once('\n').expect("two parts");
        let s: Value = serde_json::from_str(json).expect("the drill's JSON");
        assert_eq!(s["schema"], "fabric-check/drill/v1");
        assert_eq!(s["injections"], 6, "{stderr}");
        assert_eq!(s["classes"], 3, "{stderr}");
        assert_eq!(s["detected"], 6, "every injection caught:\n{stderr}");
        assert_eq!(s["false_drains"], 0, "{stderr}");
        assert_eq!(s["false_positives"], 0, "{stderr}");
        assert_eq!(s["controls"], 2, "{stderr}");
        for c in s["per_class"].as_array().expect("per class") {
            if c["control"] == false {
                assert_eq!(c["recall"], 1.0, "{c}");
                assert!(c["ttd"]["max_s"].is_number(), "{c}");
            }
        }
        assert!(
            last.starts_with("drill: classes 3, injections 6, recall 1.000, precision 1.000, false_drains 0, p95_detect_s "),
            "{last}"
        );
        assert!(last.contains(", p95_during_s "), "{last}");
        // link_flap goes in only while a job runs: the in-job watch finds it.
        let flap = s["per_class"]
            .as_array()
            .and_then(|v| v.iter().find(|c| c["class"] == "link_flap"))
            .expect("link_flap's scores");
        assert!(
            flap["detectors"]["watch"].as_u64().unwrap_or(0) >= 1,
            "the watch caught no link flap: {flap}\n{stderr}"
        );
        // Left as found.
        for (n, b) in nodes.iter().zip(&before) {
            let (state, reason) = tb.node_state(n);
            assert!(
                state.starts_with("idle"),
                "{n} is {state} ({reason}) after the drill"
            );
            assert_eq!(&tree_listing(&tb, n), b, "{n}'s fixture tree was not put back");
        }
        let journal = tb.dir.join("state/drill/journal.jsonl");
        let left = std::fs::read_to_string(&journal).unwrap_or_default();
        assert!(left.trim().is_empty(), "journal not empty: {left}");
        eprintln!("drill took {:.0} s\n{stderr}", elapsed.as_secs_f64());
    });
}

/// A short graded drill: one class at three sizes, one below its threshold (a control that
/// must stay quiet) and two above (which must be caught), read back as the class's curve.
#[test]
fn a_graded_drill_finds_the_sizes_above_the_threshold_and_stays_quiet_below_it() {
    let tb = Testbed::get();
    tb.healing(|| {
        let nodes = ["n1", "n2", "n3", "n4"];
        let before: Vec<String> = nodes.iter().map(|n| tree_listing(&tb, n)).collect();
        let t0 = Instant::now();
        let out = run_drill(
            &tb,
            &[
                "--seed",
                "31",
                "--graded",
                "--classes",
                "error_counters",
                "--size",
                "error_counters=0.5x,2x,10x",
                "--per-class",
                "1",
                "--controls",
                "0",
                "--during-job-s",
                "6",
                "--format",
                "json",
                "--summary-line",
            ],
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "drill failed:\n{stdout}\n{stderr}");
        let elapsed = t0.elapsed();
        // The JSON document, the `drill:` line, a line per graded class, the `drill-graded:` line.
        let lines: Vec<&str> = stdout.trim_end().lines().collect();
        let n = lines.len();
        assert!(n > 3, "{stdout}");
        let s: Value = serde_json::from_str(&lines[..n - 3].join("\n")).expect("the drill's JSON");
        let curve = &s["graded"][0];
        assert_eq!(curve["class"], "error_counters", "{s}");
        let points = curve["points"].as_array().expect("points");
        let sizes: Vec<&str> = points.iter().filter_map(|p| p["size"].as_str()).collect();
        assert_eq!(sizes, vec!["0.5x", "2x", "10x"], "{stderr}");
        assert_eq!(points[0]["control"], true);
        assert_eq!(points[0]["detected"], 0, "a half-threshold stream signalled:\n{stderr}");
        for p in &points[1..] {
            assert_eq!(p["recall"], 1.0, "{p}\n{stderr}");
        }
        assert!(lines[n - 3].starts_with("drill: classes 1, injections 2, recall 1.000"), "{stdout}");
        assert_eq!(
            lines[n - 2],
            "drill-graded error_counters: 0.5x quiet 1/1, 2x recall 1/1, 10x recall 1/1"
        );
        assert_eq!(
            lines[n - 1],
            "drill-graded: classes 1, sizes 3, recall_at_half_bw none, quiet_below_threshold 1.00, false_drains 0"
        );
        for (n, b) in nodes.iter().zip(&before) {
            let (state, reason) = tb.node_state(n);
            assert!(
                state.starts_with("idle"),
                "{n} is {state} ({reason}) after the drill"
            );
            assert_eq!(&tree_listing(&tb, n), b, "{n}'s fixture tree was not put back");
        }
        eprintln!("graded drill took {:.0} s\n{stderr}", elapsed.as_secs_f64());
    });
}

#[test]
fn the_workload_runs_clean_and_faulted_on_each_fabric_and_reports_them_side_by_side() {
    let tb = Testbed::get();
    tb.healing(|| {
        let work = tb.work_dir("workload");
        let script = work.join("train.sh");
        std::fs::write(
            &script,
            format!(
                "#!/bin/sh\n#SBATCH -N 1\nexec {} --steps 4 --step-sleep 0.2 --ckpt-every 2 --ckpt-dir .\n",
                tb.dir.join("bin/fake-train").display()
            ),
        )
        .expect("write the job script");
        let out = run_drill(
            &tb,
            &[
                "--workload",
                script.to_str().expect("utf-8 path"),
                "--partitions",
                "ib,roce",
                "-n",
                "1",
                "--format",
                "json",
            ],
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let r: Value = serde_json::from_str(&stdout).expect("the workload's JSON");
        assert_eq!(r["fault"], "port_down");
        let fabrics = r["fabrics"].as_array().expect("fabrics");
        let names: Vec<&str> = fabrics.iter().filter_map(|f| f["partition"].as_str()).collect();
        assert_eq!(names, ["ib", "roce"]);
        for f in fabrics {
            assert_eq!((f["clean_runs"].as_u64(), f["faulted_runs"].as_u64()), (Some(1), Some(1)), "{f}");
            assert_eq!(f["accepted"], 2, "both runs accepted in the end: {f}");
            assert_eq!(f["faults_caught"], 1, "the injected port down drained its node: {f}");
            assert!(f["requeues"].as_u64().unwrap_or(0) >= 1, "the faulted run was requeued: {f}");
            assert!(f["recovery_p50_s"].as_f64().unwrap_or(0.0) > 0.0, "{f}");
            assert!(f["step_p50_s"].as_f64().unwrap_or(0.0) > 0.0, "{f}");
        }
        let left = std::fs::read_to_string(tb.dir.join("state/drill/journal.jsonl")).unwrap_or_default();
        assert!(left.trim().is_empty(), "journal not empty: {left}");
        let _ = std::fs::remove_dir_all(&work);
    });
}
