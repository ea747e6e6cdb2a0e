//! A job user forges a step gate result naming every node slow, in the spool it may write to:
//! under `policy=enforce` the epilog reports it in the tag as the job's and drains nothing.

use std::time::Duration;

use fabric_e2e::{Testbed, heal_all, wait_job_end, wait_tag};

#[test]
fn a_forged_slow_step_result_drains_no_node_and_is_tagged_as_reported_by_the_job() {
    let tb = Testbed::get();
    heal_all(&tb);
    let spool = tb.dir.join("runs");
    let work = tb.work_dir("forged-drain");
    // Each node's task writes `<spool>/<job>/<node>.steps.jsonl` as the job's user.
    let forge = work.join("forge.sh");
    std::fs::write(
        &forge,
        format!(
            "#!/bin/sh\nd={spool}/$SLURM_JOB_ID\nmkdir -p \"$d\"\nn=$SLURMD_NODENAME\n\
             printf '{{\"step\":0,\"node\":\"%s\",\"collective\":{{\"verdict\":\"fail\",\"wrong\":0,\"outliers\":[\"%s\"]}},\"slow_here\":true,\"message\":\"forged by the job\"}}\\n' \"$n\" \"$n\" > \"$d/$n.steps.jsonl\"\n",
            spool = spool.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&forge, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let wrap = format!("srun -N2 --ntasks-per-node=1 {}", forge.display());
    tb.healing(|| {
        let job = tb.sbatch(&["-N2", "--fabric-check", "--wrap", &wrap]);
        assert_eq!(
            wait_job_end(&tb, job, Duration::from_secs(120)).as_deref(),
            Some("COMPLETED")
        );
        let tag = wait_tag(&tb, job, Duration::from_secs(60), |t| {
            t["job_reported"]["slow"].is_array()
        })
        .unwrap_or_else(|| panic!("job {job}: no job_reported section in the tag"));
        assert_eq!(tag["job_reported"]["reported_by"], "job", "{tag}");
        assert_eq!(
            tag["job_reported"]["slow"].as_array().map(Vec::len),
            Some(2),
            "{tag}"
        );
        assert!(tag.get("collective").is_none(), "{tag}");
        let _ = std::fs::remove_dir_all(&work);
        std::thread::sleep(Duration::from_secs(2));
        for n in ["n1", "n2", "n3", "n4"] {
            let (st, reason) = tb.node_state(n);
            assert!(
                !st.starts_with("drain"),
                "{n} drained for a forged claim: {st} {reason}"
            );
        }
    });
}
