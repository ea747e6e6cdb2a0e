//! The in-job watch of a job that a fault drill dated back a day (`fabric-check drill
//! --job-age-s 86400`: a root-owned `drill-job-age.json` in each node's state folder, written
//! while the job is held): a `symbol_error` storm met a day into the job as the watch sees it is
//! drained within seconds, judged over the sliding hour and not over the day; the quiet node of
//! the same job is neither drained nor failed by its epilog, and the watch's log says the start
//! was dated back by a drill. The job runs as the unprivileged job user, as every test's does.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use fabric_e2e::{Testbed, job_tag, wait_for, wait_job_end};
use fabric_proto::drill_age::{DrillJobAge, FILE_NAME};

const DAY_S: u64 = 86_400;

fn now_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs()
}

/// The drill's files this test wrote, removed when it ends (also when it fails).
struct Hooks(Vec<PathBuf>);

impl Drop for Hooks {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Writes the drill's file for `job` into `node`'s state folder, as `fabric-check drill` does:
/// root's, mode 0644.
fn date_back(tb: &Testbed, node: &str, job: u32, hooks: &mut Hooks) {
    let at = tb.dir.join("state").join(node).join(FILE_NAME);
    let f = DrillJobAge::new(job, DAY_S, now_s());
    std::fs::write(&at, serde_json::to_vec(&f).expect("JSON")).expect("write the drill's file");
    std::fs::set_permissions(&at, std::os::unix::fs::PermissionsExt::from_mode(0o644))
        .expect("mode 0644");
    hooks.0.push(at);
}

fn squeue_state(tb: &Testbed, job: u32) -> String {
    tb.ok("squeue", &["-h", "-j", &job.to_string(), "-o", "%T"])
        .trim()
        .to_owned()
}

fn live_comment(tb: &Testbed, job: u32) -> String {
    let out = tb.cmd("scontrol", &["show", "job", &job.to_string()]);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.trim().strip_prefix("AdminComment="))
        .unwrap_or("")
        .to_owned()
}

#[test]
fn a_symbol_error_storm_in_a_job_dated_back_a_day_is_drained_within_seconds_by_the_watch() {
    let tb = Testbed::get();
    let mut hooks = Hooks(Vec::new());
    tb.healing(|| {
        // Held, so that its nodes' files are in place before its prolog starts the watch.
        let job = tb.sbatch(&[
            "-N2",
            "-w",
            "n1,n2",
            "--fabric-check",
            "--hold",
            "--wrap",
            "sleep 40",
        ]);
        for n in ["n1", "n2"] {
            date_back(&tb, n, job, &mut hooks);
        }
        tb.ok("scontrol", &["release", &job.to_string()]);
        let ran = wait_for(Duration::from_secs(30), || {
            (squeue_state(&tb, job) == "RUNNING").then_some(())
        });
        assert!(ran.is_some(), "job {job} never ran");
        let pid = tb.dir.join(format!("state/n2/watch-{job}.pid"));
        assert!(
            wait_for(Duration::from_secs(15), || pid.exists().then_some(())).is_some(),
            "no watch started on n2: {}",
            tb.slurmd_log("n2")
        );
        // Some seconds of the "day-old" job pass quietly first.
        std::thread::sleep(Duration::from_secs(5));
        let counter = tb
            .dir
            .join("nodes/n2/sysfs/class/infiniband/mlx5_1/ports/1/counters/symbol_error");
        let before: u64 = std::fs::read_to_string(&counter)
            .expect("n2's symbol_error")
            .trim()
            .parse()
            .expect("a number");
        // The drill's `error_counters`: +500 (the bound is 120 an hour; a day would allow 2,880).
        std::fs::write(&counter, format!("{}\n", before + 500)).expect("raise symbol_error");
        let t0 = Instant::now();
        let reason = wait_for(Duration::from_secs(15), || {
            let (state, reason) = tb.node_state("n2");
            state.to_lowercase().contains("drain").then_some(reason)
        })
        .unwrap_or_else(|| panic!("n2 not drained: {}", tb.slurmd_log("n2")));
        let drained_s = t0.elapsed().as_secs_f64();
        assert_eq!(
            squeue_state(&tb, job),
            "RUNNING",
            "drained by the watch while the job runs, not by its epilog"
        );
        assert!(
            drained_s < 5.0,
            "drained {drained_s:.2} s after the storm, not within seconds"
        );
        assert!(
            reason.starts_with(&format!(
                "fabric-check: ib.counters: during job {job} (watch): mlx5_1 port 1"
            )) && reason.contains("symbol_error rose by 500"),
            "{reason}"
        );
        // The watch's live entry: it saw the fault a day into the job.
        let comment = wait_for(Duration::from_secs(10), || {
            let c = live_comment(&tb, job);
            c.contains("\"watch\":[").then_some(c)
        })
        .unwrap_or_else(|| panic!("no live during entry: {}", live_comment(&tb, job)));
        let tag: serde_json::Value = serde_json::from_str(
            comment
                .split_once("fabric-check/v1 ")
                .map(|(_, t)| t.trim())
                .expect("our segment"),
        )
        .expect("the live tag is JSON");
        let ev = tag["during"]
            .as_array()
            .and_then(|d| d.iter().find(|r| r["node"] == "n2"))
            .map(|r| r["watch"][0].clone())
            .expect("n2's during entry");
        assert_eq!(ev["check"], "ib.counters", "{ev}");
        assert_eq!(ev["drained"], true, "{ev}");
        let into = ev["into_job_s"].as_u64().expect("into_job_s");
        assert!((DAY_S..DAY_S + 120).contains(&into), "{ev}");
        assert!(
            ev["message"]
                .as_str()
                .is_some_and(|m| m.contains("over the sliding hour")),
            "judged over the sliding hour, not the dated-back day: {ev}"
        );
        let (n1_state, _) = tb.node_state("n1");
        assert!(
            !n1_state.to_lowercase().contains("drain"),
            "the quiet node of the day-old job: {n1_state}"
        );
        eprintln!(
            "watch: a day-old job's storm drained {drained_s:.2} s after it began ({into} s into the job as the watch saw it)"
        );
        tb.ok("scancel", &[&job.to_string()]);
        wait_job_end(&tb, job, Duration::from_secs(60)).expect("the job ends");
        let log = wait_for(Duration::from_secs(30), || {
            let l = tb.slurmd_log("n2");
            l.contains(&format!("epilog job={job} node=n2: watch: ended after"))
                .then_some(l)
        })
        .expect("the epilog relays the watch's log");
        assert!(
            log.contains(&format!(
                "watch: job {job}'s start is dated back 86400 s by a fault drill"
            )),
            "the watch's log says it was a drill"
        );
        // The epilog judges the job as it ran (the snapshot as the prolog wrote it): n2's storm
        // is a failure, quiet n1 is none.
        let row = |t: &serde_json::Value, node: &str| {
            t["during"]
                .as_array()
                .and_then(|d| d.iter().find(|r| r["node"] == node).cloned())
        };
        let tag = wait_for(Duration::from_secs(20), || {
            job_tag(&tb, job).filter(|t| row(t, "n2").is_some_and(|r| r["verdict"] == "fail"))
        })
        .unwrap_or_else(|| panic!("no failing epilog row for n2: {:?}", job_tag(&tb, job)));
        assert!(
            row(&tag, "n1").is_none_or(|r| r["verdict"] == "pass"),
            "the quiet node's epilog: {tag}"
        );
    });
    drop(hooks);
}
