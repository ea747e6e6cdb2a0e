//! `fabric-run` under a real `srun`: the probe verdict and the run summary in one job tag, with
//! no spool configuration of the user's (the plugin tells the tasks its `spool_dir=`, which on
//! the testbed is not the default).

use std::time::Duration;

use fabric_e2e::{Testbed, heal_all, wait_for, wait_job_end, wait_tag};

#[test]
fn srun_with_fabric_run_and_no_user_configuration_puts_the_verdict_and_the_run_summary_in_one_tag()
{
    let tb = Testbed::get();
    heal_all(&tb);
    let work = tb.work_dir("run");
    let fake = tb.dir.join("bin/fake-train");
    let spool = tb.dir.join("runs");
    let path = format!(
        "{}:/usr/sbin:/usr/bin:/sbin:/bin",
        tb.dir.join("bin").display()
    );
    let script = format!(
        "#!/bin/sh\nexport PATH={path}\nunset FABRIC_RUN_SPOOL\n\
         srun -N2 fabric-run --checkpoint-dir {ck} --checkpoint-quiet 200ms --step-regex '^step ([0-9]+)' -- \
         {fake} --steps 7 --ckpt-every 3 --ckpt-dir {ck} --step-sleep 0.3\n",
        ck = work.display(),
        fake = fake.display(),
    );
    let batch = work.join("job.sh");
    std::fs::write(&batch, script).unwrap();
    let job = tb.sbatch(&[
        "-N2",
        "--fabric-check",
        "-o",
        "/dev/null",
        batch.to_str().unwrap(),
    ]);
    assert_eq!(
        wait_job_end(&tb, job, Duration::from_secs(120)).as_deref(),
        Some("COMPLETED")
    );
    let tag = wait_tag(&tb, job, Duration::from_secs(60), |t| t["run"].is_object())
        .expect("tag with a run summary");
    assert_eq!(tag["verdict"], "pass", "{tag}");
    assert_eq!(tag["nnodes"], 2, "{tag}");
    let run = &tag["run"];
    assert_eq!(run["steps"], 7, "{tag}");
    assert_eq!(run["outcome"], "accepted", "{tag}");
    assert_eq!(run["accepted"], true, "{tag}");
    assert_eq!(run["ckpt_n"], 2, "checkpoints after steps 3 and 6: {tag}");
    assert!(run["step_p50_s"].as_f64().unwrap_or(0.0) > 0.0, "{tag}");
    // Delivered, so the epilogs removed the records, and the last one the job's folder.
    let folder = spool.join(job.to_string());
    assert!(
        wait_for(Duration::from_secs(20), || (!folder.exists()).then_some(())).is_some(),
        "{} is left",
        folder.display()
    );
    let _ = std::fs::remove_dir_all(&work);
}

#[test]
fn a_folder_another_user_made_for_the_jobs_id_does_not_leave_the_job_unrecorded() {
    use std::os::unix::fs::MetadataExt;
    let tb = Testbed::get();
    heal_all(&tb);
    let work = tb.work_dir("squat");
    let path = format!(
        "{}:/usr/sbin:/usr/bin:/sbin:/bin",
        tb.dir.join("bin").display()
    );
    let batch = work.join("job.sh");
    std::fs::write(
        &batch,
        format!(
            "#!/bin/sh\nexport PATH={path}\nsrun fabric-run --step-regex '^step ([0-9]+)' -- {} --steps 2 --step-sleep 0.1\n",
            tb.dir.join("bin/fake-train").display()
        ),
    )
    .unwrap();
    // Held, so the folder is in place before the job's prolog runs.
    let job = tb.sbatch(&["-H", "-N1", "--fabric-check", batch.to_str().unwrap()]);
    let squat = tb.dir.join("runs").join(job.to_string());
    std::fs::create_dir(&squat).unwrap();
    std::fs::write(squat.join("n1.jsonl"), "planted\n").unwrap();
    let other = tb.job_uid().unwrap_or(0) + 1;
    for p in [squat.join("n1.jsonl"), squat.clone()] {
        std::os::unix::fs::chown(&p, Some(other), Some(other)).unwrap();
    }
    tb.ok("scontrol", &["release", &job.to_string()]);
    assert_eq!(
        wait_job_end(&tb, job, Duration::from_secs(90)).as_deref(),
        Some("COMPLETED")
    );
    let tag = wait_tag(&tb, job, Duration::from_secs(60), |t| t["run"].is_object())
        .expect("the run summary despite the planted folder");
    assert_eq!(tag["run"]["steps"], 2, "{tag}");
    // What was planted is kept aside, unread, under the prefix root gives it.
    let aside: Vec<_> = std::fs::read_dir(tb.dir.join("runs"))
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(&format!(".fabric-check-foreign-{job}."))
        })
        .collect();
    assert_eq!(aside.len(), 1, "{aside:?}");
    assert_eq!(aside[0].metadata().unwrap().uid(), other);
    let _ = std::fs::remove_dir_all(aside[0].path());
    let _ = std::fs::remove_dir_all(&work);
}
