//! `fabric-drill`: measures how well fabric-check finds a bad fabric.
//!
//! On a set of nodes (a real cluster's reservation, or the testbed's virtual nodes) the drill
//! repeats: pick a fault class, a node and a moment from a seed; inject; run `--fabric-check`
//! jobs as a user would; watch what the prolog, the collective, the epilog and `health` say and
//! do; restore; wait until the node is clean. Clean rounds and two loads that must not drain are
//! interleaved as controls. Then it scores recall, precision, false drains, time to detect and
//! what the jobs paid, and names what to change. See docs/drill.md.
//!
//! | module | what it holds |
//! |---|---|
//! | [`class`] | the fault classes, what each injects and restores, where it applies |
//! | [`grade`] | graded faults: sizes, the thresholds they are multiples of, the detection curve |
//! | [`plan`] | the seeded plan of rounds (`--dry-run` prints it) |
//! | [`journal`] | the restore journal, replayed by `--restore` and at the next start (only when root's alone) |
//! | [`gate`] | the gates every injection passes through: classes, nodes, reservation, others' jobs, in service |
//! | [`refusal`] | why the drill refuses to go on: what the gates latch and an injection carries |
//! | [`halt`] | SIGINT, SIGTERM, SIGHUP: the flag that stops the rounds, restores and says so |
//! | [`job_age`] | `--job-age-s`: a `during` round's job dated back for its watch, through root's file on its nodes |
//! | [`folder`] | the round folders handed to the job user, written so that no link redirects root |
//! | [`inject`] | the [`inject::Injector`] seam: testbed and real-cluster injectors |
//! | [`cluster`] | the [`cluster::Cluster`] seam over Slurm's commands |
//! | [`observe`] | drains, tag verdicts and health results as timed signals |
//! | [`run`] | the round loop |
//! | [`session`] | a whole drill from a plain spec: open, undo what is pending, check, set up, rounds, restore, score |
//! | [`score`] | recall, precision, false drains, time to detect, job cost, findings (pure) |
//! | [`workload`] | step 3: the admin's own job script per fabric, clean and faulted |
//! | [`stragglers`] | `--stragglers`: one node's training steps slowed three ways and the controls, scored against the in-job straggler verdict |
//! | [`render`] | text table, JSON, Prometheus gauges, the HTML section with charts |
//!
//! Dependencies point inward: `fabric-proto` (tags, verdicts, check ids), `fabric-base` (the
//! percentile, bounded commands), `fabric-report` (the cost file and its model).

pub mod class;
pub mod cluster;
#[cfg(test)]
mod fakes;
pub mod folder;
pub mod gate;
pub mod grade;
pub mod halt;
pub mod inject;
pub mod job_age;
pub mod journal;
pub mod observe;
pub mod plan;
pub mod refusal;
pub mod render;
pub mod run;
pub mod score;
pub mod session;
pub mod stragglers;
pub mod workload;
