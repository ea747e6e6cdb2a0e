//! A rolling plugin upgrade under a stream of jobs, done as config management does it
//! (docs/upgrade.md): the new `.so` installed by rename, the new plugstack line written to a
//! temporary file and renamed, slurmd restarted node by node while jobs start and end. No node
//! may be drained with "Epilog error" and every job keeps its tag.
//!
//! The test restores the normal plugstack and a healthy cluster at the end.

use std::path::Path;
use std::time::{Duration, Instant};

use fabric_e2e::{Testbed, heal_all, wait_job_end, wait_tag};

const LONG: Duration = Duration::from_secs(120);
const NODES: [&str; 4] = ["n1", "n2", "n3", "n4"];

/// Writes `text` to `path` as config management does: a temporary file in the same folder,
/// then `rename(2)`, so a reader sees the old file or the new one.
fn replace_by_rename(path: &Path, text: &[u8]) {
    let tmp = path.with_extension("upgrade-tmp");
    std::fs::write(&tmp, text).expect("write the temporary file");
    std::fs::rename(&tmp, path).expect("rename over the live file");
}

/// Epilog drains seen so far, with their reason.
fn epilog_error_drains(tb: &Testbed) -> Vec<String> {
    NODES
        .iter()
        .map(|n| (n, tb.node_state(n)))
        .filter(|(_, (_, reason))| reason.contains("Epilog error"))
        .map(|(n, (state, reason))| format!("{n}: {state} {reason}"))
        .collect()
}

#[test]
fn a_rolling_plugin_upgrade_under_a_stream_of_jobs_drains_no_node_and_keeps_every_tag() {
    let tb = Testbed::get();
    heal_all(&tb);
    tb.script(&["plugstack", "plugin"])
        .expect("normal plugstack");
    let plugstack = tb.dir.join("etc/plugstack.conf");
    let old_line = std::fs::read_to_string(&plugstack).expect("read plugstack");
    let so = tb.dir.join("lib/spank_fabric_check.so");
    let new_build = std::fs::read(&so).expect("read the installed plugin");

    let r = std::panic::catch_unwind(|| {
        let mut jobs = Vec::new();
        let submit = |jobs: &mut Vec<u32>| {
            for nodes in ["-N2", "-N1"] {
                jobs.push(tb.sbatch(&[nodes, "--fabric-check", "--wrap", "sleep 1"]));
            }
        };
        submit(&mut jobs);
        // 1. The new build, by rename: running slurmds and slurmstepds keep the old mapping.
        replace_by_rename(&so, &new_build);
        submit(&mut jobs);
        // 2. The new plugstack line (a changed argument), by rename.
        let new_line = old_line.replace("timeout=10", "timeout=11");
        assert_ne!(new_line, old_line, "the plugstack line has timeout=10");
        replace_by_rename(&plugstack, new_line.as_bytes());
        // 3. slurmd restarted node by node, jobs starting and ending in between.
        for n in NODES {
            submit(&mut jobs);
            tb.script(&["restart-slurmd", n])
                .unwrap_or_else(|e| panic!("restart slurmd {n}: {e}"));
        }
        submit(&mut jobs);
        let deadline = Instant::now() + Duration::from_secs(150);
        for &job in &jobs {
            let left = deadline.saturating_duration_since(Instant::now());
            let end = wait_job_end(&tb, job, left.max(Duration::from_secs(1)));
            assert_eq!(end.as_deref(), Some("COMPLETED"), "job {job} of {jobs:?}");
        }
        let drains = epilog_error_drains(&tb);
        assert!(drains.is_empty(), "drained by the upgrade: {drains:?}");
        for &job in &jobs {
            let tag = wait_tag(&tb, job, LONG, |t| t["verdict"].is_string());
            assert!(tag.is_some(), "job {job} lost its tag");
        }
    });
    replace_by_rename(&plugstack, old_line.as_bytes());
    tb.script(&["plugstack", "plugin"])
        .expect("restore plugstack");
    heal_all(&tb);
    if let Err(p) = r {
        std::panic::resume_unwind(p);
    }
}
