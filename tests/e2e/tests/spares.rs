//! Spare nodes on a real Slurm (`--fabric-check-spares`, `spares_max=`): a four-node batch job
//! with one spare and a port down on a node that is not its batch host runs on the three good
//! nodes without a requeue, its batch script and a bare `srun` see only them, the bad node is
//! drained, and the tag and `sacct` say what happened; when the batch host itself fails, the job
//! falls back to the requeue and the tag of that attempt says why. A request above the
//! cluster's `spares_max=` is refused at submission.

use std::time::Instant;

use std::time::Duration;

use fabric_e2e::{Testbed, strict_tag, wait_for};
use fabric_proto::job_state::JobState;

/// `sacct -X -D` rows of the job (every allocation record, the requeued ones too): state,
/// node list, node count, comment.
fn records(tb: &Testbed, job: u32) -> Vec<Vec<String>> {
    tb.ok(
        "sacct",
        &[
            "-n",
            "-P",
            "-X",
            "-D",
            "-j",
            &job.to_string(),
            "-o",
            "State,NodeList,AllocNodes,AdminComment",
        ],
    )
    .lines()
    .map(|l| l.splitn(4, '|').map(str::to_owned).collect::<Vec<_>>())
    .filter(|r| r.len() == 4)
    .collect()
}

/// Waits (polling accounting, not `sbatch --wait`, whose polls back off to seconds) until the
/// job's last record has ended; returns its records.
fn ended(tb: &Testbed, job: u32) -> Vec<Vec<String>> {
    wait_for(Duration::from_secs(120), || {
        let rows = records(tb, job);
        rows.last()
            .is_some_and(|r| JobState::parse(&r[0]).has_ended())
            .then_some(rows)
    })
    .unwrap_or_else(|| panic!("job {job} did not end: {:?}", records(tb, job)))
}

const SCRIPT: &str = "echo NODELIST=$SLURM_JOB_NODELIST NNODES=$SLURM_NNODES; \
                      srun bash -c 'echo step $SLURMD_NODENAME $SLURM_NNODES' 2>&1 | sort";

#[test]
fn a_job_with_one_spare_and_a_port_down_on_a_non_batch_host_runs_on_three_good_nodes_without_a_requeue()
 {
    let tb = Testbed::get();
    tb.healing(|| {
        tb.with_plugstack(None, None, "spares_max=1", || {
            let work = tb.work_dir("spares");
            // Above spares_max=: refused at submission, with the limit named.
            let refused = tb.cmd(
                "sbatch",
                &["-N4", "--fabric-check-spares=2", "--wrap", "true"],
            );
            let said = String::from_utf8_lossy(&refused.stderr);
            assert!(!refused.status.success(), "{said}");
            assert!(said.contains("at most 1 spare node(s)"), "{said}");

            tb.script(&["node", "n3", "ib8-port-down"]).unwrap();
            let out = work.join("out");
            let t0 = Instant::now();
            let job = tb.sbatch(&[
                "-N4",
                "--fabric-check-spares=1",
                &format!("--output={}", out.display()),
                "--wrap",
                SCRIPT,
            ]);
            let rows = ended(&tb, job);
            let took = t0.elapsed().as_secs_f64();
            let text = std::fs::read_to_string(&out).unwrap_or_default();
            assert!(
                text.contains("NODELIST=n[1-2,4] NNODES=3"),
                "the batch script sees the kept nodes: {text}\n{}",
                tb.slurmd_log("n1")
            );
            assert!(
                text.contains("step n1 3\nstep n2 3\nstep n4 3\n"),
                "a bare srun runs on them: {text}"
            );
            assert!(!text.contains("conflicts"), "{text}");
            assert!(
                rows.iter().all(|r| r[0] != "REQUEUED"),
                "no requeue: {rows:?}"
            );
            let last = rows.last().expect("the job's record");
            assert_eq!(last[0], "COMPLETED", "{rows:?}");
            assert_eq!((last[1].as_str(), last[2].as_str()), ("n[1-2,4]", "3"));
            let tag = strict_tag(&job.to_string(), &last[3]);
            let sp = &tag["spares"];
            assert_eq!(sp["outcome"], "shrunk", "{tag}");
            assert_eq!(sp["kept"], "n[1-2,4]");
            assert_eq!(sp["failed"][0]["node"], "n3");
            assert_eq!(sp["failed"][0]["checks"][0], "ib.port_state");
            // The allocation's first record (RESIZING, all four nodes) holds the tag too (live
            // JSON, or the database form when the epilog rewrote it after a short job).
            for r in &rows {
                let t = strict_tag(&job.to_string(), &r[3]);
                assert_eq!(t["spares"]["outcome"], "shrunk", "{rows:?}");
            }
            let (state, reason) = tb.node_state("n3");
            assert!(state.contains("drain"), "{state}");
            assert!(
                reason.starts_with("fabric-check: ib.port_state"),
                "{reason}"
            );
            eprintln!("spares: job {job} ran on n[1-2,4] in {took:.1} s, no requeue");
        });
    });
}

#[test]
fn an_ntasks_per_node_job_shrunk_by_a_spare_runs_its_tasks_on_the_kept_nodes_only() {
    let tb = Testbed::get();
    tb.healing(|| {
        tb.with_plugstack(None, None, "spares_max=1", || {
            tb.script(&["node", "n3", "ib8-port-down"]).unwrap();
            let out = tb.work_dir("spares-tasks").join("out");
            let job = tb.sbatch(&[
                "-N4",
                "--ntasks-per-node=2",
                "--fabric-check-spares=1",
                &format!("--output={}", out.display()),
                "--wrap",
                // A bare srun (the job's task count as its -n) and what each task sees as the
                // job's size, as an MPI or torchrun launch reads it.
                "echo NTASKS=$SLURM_NTASKS; \
                 srun bash -c 'echo task $SLURMD_NODENAME of $SLURM_NTASKS' 2>&1 | sort | uniq -c",
            ]);
            let rows = ended(&tb, job);
            let text = std::fs::read_to_string(&out).unwrap_or_default();
            assert_eq!(
                rows.last().map(|r| r[0].as_str()),
                Some("COMPLETED"),
                "{rows:?} {text}"
            );
            assert!(text.contains("NTASKS=6"), "{text}");
            for n in ["n1", "n2", "n4"] {
                assert!(text.contains(&format!("2 task {n} of 6")), "{n}: {text}");
            }
            assert!(!text.contains("task n3"), "{text}");
        });
    });
}

#[test]
fn a_job_whose_batch_host_fails_falls_back_to_the_requeue_and_its_tag_says_why() {
    let tb = Testbed::get();
    tb.healing(|| {
        tb.with_plugstack(None, None, "spares_max=1", || {
            tb.script(&["node", "n1", "ib8-port-down"]).unwrap();
            let t0 = Instant::now();
            let job = tb.sbatch(&["-N3", "--fabric-check-spares=1", "--wrap", "srun true"]);
            let rows = ended(&tb, job);
            let took = t0.elapsed().as_secs_f64();
            let first = rows
                .iter()
                .find(|r| r[0] == "REQUEUED")
                .unwrap_or_else(|| panic!("the first attempt is requeued: {rows:?}"));
            let tag = strict_tag(&job.to_string(), &first[3]);
            assert_eq!(tag["spares"]["outcome"], "requeued", "{tag}");
            assert_eq!(tag["spares"]["fallback"], "batch_host_failed", "{tag}");
            let last = rows.last().unwrap();
            assert_eq!(last[0], "COMPLETED", "{rows:?}");
            assert!(!last[1].contains("n1"), "the rerun keeps off n1: {rows:?}");
            let (state, _) = tb.node_state("n1");
            assert!(state.contains("drain"), "{state}");
            eprintln!("spares: job {job} requeued off its batch host, done in {took:.1} s");
        });
    });
}
