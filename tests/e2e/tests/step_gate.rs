//! The step gate: what the plugin prepends to the tasks of a `--fabric-check=full` step on Slurm
//! 23.11 and newer (`spank_prepend_task_argv`). The first test writes the prepended words itself,
//! exactly as the plugin builds them (`<probe> step-gate --plugin-arg=WORD ... -- COMMAND`), so it
//! runs on the host testbed's Slurm 22.05 too, where real slurmstepds run them as the tasks'
//! command lines and the job epilog reads the gate's results as it would on 23.11. The second
//! leaves the prepending to the plugin and expects it exactly from 23.11 (`scripts/matrix`).

use std::time::Duration;

use fabric_e2e::{Testbed, heal_all, wait_job_end, wait_tag};

/// Submits `script` as a 4-node batch job (2 tasks a node) with `option`, waits for it, and
/// checks that it completed; returns its id and its output.
fn run_to_completion(
    tb: &Testbed,
    work: &std::path::Path,
    script: &str,
    option: &str,
) -> (u32, String) {
    let batch = work.join("job.sh");
    std::fs::write(&batch, script).unwrap();
    let out = work.join("out.txt");
    let job = tb.sbatch(&[
        "-N4",
        "--ntasks-per-node=2",
        option,
        "-o",
        out.to_str().unwrap(),
        batch.to_str().unwrap(),
    ]);
    let state = wait_job_end(tb, job, Duration::from_secs(180));
    let output = std::fs::read_to_string(&out).unwrap_or_default();
    assert_eq!(state.as_deref(), Some("COMPLETED"), "{output}");
    (job, output)
}

#[test]
fn a_gated_step_checks_its_nodes_then_runs_every_task_and_the_epilog_tags_the_result() {
    let tb = Testbed::get();
    heal_all(&tb);
    let work = tb.work_dir("gate");
    let plugstack = std::fs::read_to_string(tb.dir.join("etc/plugstack.conf")).unwrap();
    let gate_args: Vec<String> = plugstack
        .split_whitespace()
        .skip(2)
        .map(|w| format!("--plugin-arg={w}"))
        .collect();
    let bin = tb.dir.join("bin/fabric-check");
    let script = format!(
        "#!/bin/sh\n\
         srun -N4 true\n\
         srun -N4 --ntasks-per-node=2 {bin} step-gate {args} -- \
         /bin/sh -c 'touch {work}/ran-$SLURMD_NODENAME-$SLURM_LOCALID'\n",
        bin = bin.display(),
        args = gate_args.join(" "),
        work = work.display(),
    );
    let (job, output) = run_to_completion(&tb, &work, &script, "--fabric-check");
    for n in ["n1", "n2", "n3", "n4"] {
        for local in [0, 1] {
            assert!(
                work.join(format!("ran-{n}-{local}")).exists(),
                "task {local} on {n} did not run after the gate: {output}"
            );
        }
    }
    assert!(
        output.contains(&format!("step {job}.1 collective among 4 nodes: pass")),
        "the first node's gate reports the step's collective: {output}"
    );
    let tag = wait_tag(&tb, job, Duration::from_secs(60), |t| {
        t["job_reported"]["steps"].is_object()
    })
    .expect("the epilog puts the step's collective into the tag, as reported by the job");
    assert_eq!(tag["job_reported"]["reported_by"], "job", "{tag}");
    let c = &tag["job_reported"]["steps"];
    assert_eq!(c["verdict"], "pass", "{tag}");
    assert_eq!(c["wrong"], 0, "{tag}");
    assert!(c["busbw_gb_s"].as_f64().unwrap_or(0.0) > 0.0, "{tag}");
    // The epilog took the results and the gate's markers out of the spool.
    let spool_job = tb.dir.join("runs").join(job.to_string());
    let left: Vec<_> = std::fs::read_dir(&spool_job)
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "left in the spool: {left:?}");
    let _ = std::fs::remove_dir_all(&work);
}

/// From Slurm 23.11 the plugin prepends the gate itself (`spank_prepend_task_argv`) to a
/// `--fabric-check=full` step on fewer nodes than the job; before 23.11 the host has no such call,
/// the step runs ungated and the prolog's check stands alone.
#[test]
fn a_full_step_on_part_of_the_job_is_gated_by_the_plugin_from_slurm_23_11_only() {
    let tb = Testbed::get();
    heal_all(&tb);
    let version = tb.slurm_version();
    let prepends = version >= (23, 11);
    let work = tb.work_dir("plugin-gate");
    let script = format!(
        "#!/bin/sh\n\
         srun -N4 --fabric-check=full true\n\
         srun -N2 -n4 --ntasks-per-node=2 --fabric-check=full \
         /bin/sh -c 'touch {work}/ran-$SLURMD_NODENAME-$SLURM_LOCALID'\n",
        work = work.display(),
    );
    let (job, output) = run_to_completion(&tb, &work, &script, "--fabric-check=full");
    let ran = std::fs::read_dir(&work)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("ran-"))
        .count();
    assert_eq!(
        ran, 4,
        "two tasks on each of the step's two nodes: {output}"
    );
    let gate_line = format!("step {job}.1 collective among 2 nodes: pass");
    assert_eq!(
        output.contains(&gate_line),
        prepends,
        "Slurm {version:?}: the gate line {gate_line:?} is expected exactly from 23.11: {output}"
    );
    assert!(
        !output.contains(&format!("step {job}.0 ")),
        "step {job}.0 spans the job's nodes, which the prolog checked: {output}"
    );
    if prepends {
        let tag = wait_tag(&tb, job, Duration::from_secs(60), |t| {
            t["job_reported"]["steps"].is_object()
        })
        .expect("the epilog puts the step's collective into the tag, as reported by the job");
        assert_eq!(tag["job_reported"]["steps"]["verdict"], "pass", "{tag}");
    }
    let _ = std::fs::remove_dir_all(&work);
}
