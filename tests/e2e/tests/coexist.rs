//! Next to Princeton's jobstats: an `EpilogSlurmctld` that behaves as its
//! `slurmctldepilog.sh` does (sleep, then a wholesale `sacctmgr` write of `JS1:<base64>` into the
//! database only), run under the supported setup (`fabric-check epilog-slurmctld -- PROGRAM`,
//! docs/operations.md), leaves both its segment and our tag in `sacct`, byte for byte, whichever
//! writes first.

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use fabric_e2e::{Testbed, heal_all, job_tag, wait_for, wait_job_end};

/// jobstats' payload: gzip'd JSON in base64, upper-case letters included.
const JS1: &str = "JS1:H4sIAAAAAAAAA6tWSkktLlGyUlAqS8wpTVWqBQCb1RwVEQAAAA==";

fn write_script(path: &std::path::Path, text: &str) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Runs one `--fabric-check` job with a `fabric-run` step and returns its `AdminComment`, once
/// the `EpilogSlurmctld` has finished (the job has left slurmctld's completing state).
fn job_next_to_jobstats(tb: &Testbed, sleep_s: u32) -> (u32, String) {
    std::fs::write(tb.dir.join("etc/jobstats-sleep"), sleep_s.to_string()).unwrap();
    let work = tb.work_dir("coexist");
    let batch = work.join("job.sh");
    let fake = tb.dir.join("bin/fake-train");
    let path = format!(
        "{}:/usr/sbin:/usr/bin:/sbin:/bin",
        tb.dir.join("bin").display()
    );
    std::fs::write(
        &batch,
        format!(
            "#!/bin/sh\nexport PATH={path}\nsrun fabric-run --step-regex '^step ([0-9]+)' -- {} --steps 3 --step-sleep 0.2\n",
            fake.display()
        ),
    )
    .unwrap();
    let job = tb.sbatch(&["-N1", "--fabric-check", batch.to_str().unwrap()]);
    assert_eq!(
        wait_job_end(tb, job, Duration::from_secs(90)).as_deref(),
        Some("COMPLETED")
    );
    // The wrapper is done when slurmctld no longer lists the job as completing.
    let id = job.to_string();
    wait_for(Duration::from_secs(90), || {
        let out = tb.ok("squeue", &["-h", "-j", &id, "-t", "all", "-o", "%T"]);
        (!out.contains("COMPLETING")).then_some(())
    })
    .expect("the EpilogSlurmctld finishes");
    let _ = std::fs::remove_dir_all(&work);
    (job, tb.admin_comment(job))
}

#[test]
fn with_the_epilog_slurmctld_wrapper_jobstats_segment_and_our_tag_both_survive_in_either_order() {
    let tb = Testbed::get();
    heal_all(&tb);
    let etc = tb.dir.join("etc");
    write_script(
        &etc.join("jobstats-standin"),
        &format!(
            "#!/bin/sh\n# As jobstats' slurmctldepilog.sh: wait, then replace AdminComment in the database.\n\
             sleep \"$(cat {}/etc/jobstats-sleep)\"\n\
             sacctmgr -i update job where jobid=$SLURM_JOB_ID set AdminComment={JS1}\n",
            tb.dir.display()
        ),
    );
    let active = etc.join("epilog-slurmctld.active");
    write_script(
        &active,
        &format!(
            // slurmctld gives EpilogSlurmctld no SLURM_CONF: name the testbed's, as a real
            // cluster's default /etc/slurm/slurm.conf would be found.
            "#!/bin/sh\nexport SLURM_CONF={d}/etc/slurm.conf\nexec {d}/bin/fabric-check epilog-slurmctld --check-every 1s -- {d}/etc/jobstats-standin 2>>{d}/log/epilog-slurmctld.log\n",
            d = tb.dir.display()
        ),
    );
    // Slurm before 23.02 stores sacctmgr's AdminComment in lower case: jobstats' segment is
    // what its own write stored, kept byte for byte.
    let stored = if tb.slurm_version() < (23, 2) {
        JS1.to_lowercase()
    } else {
        JS1.to_owned()
    };
    let outcome = std::panic::catch_unwind(|| {
        // jobstats' own timing (our epilog writes first), then the reverse.
        for sleep_s in [5, 0] {
            let (job, comment) = job_next_to_jobstats(&tb, sleep_s);
            let theirs = comment.split(" fabric-check/v1 ").next().unwrap_or("");
            assert_eq!(
                theirs, stored,
                "job {job} (jobstats after {sleep_s} s): {comment:?}"
            );
            let tag =
                job_tag(&tb, job).unwrap_or_else(|| panic!("job {job}: no tag in {comment:?}"));
            assert_eq!(tag["verdict"], "pass", "{tag}");
            assert_eq!(tag["run"]["steps"], 3, "the epilog's run summary: {tag}");
        }
    });
    let _ = std::fs::remove_file(&active);
    if let Err(p) = outcome {
        std::panic::resume_unwind(p);
    }
}
