//! The straggler drill (`fabric-check drill --testbed --stragglers`): how well the in-job
//! watches' straggler verdict (`core/src/jobstep/stragglers/`) names a slow node, how fast, and
//! whether it leaves the workload's own slowdowns alone (docs/drill.md, "Stragglers").
//!
//! Each round runs one checked job on every drill node, a synthetic trainer under `fabric-run
//! --step-regex` ([`trainer`]); once the job's first windows set its baseline, the round slows
//! one node (a fault class at a size: 1.1×, 1.25×, 1.5×, 2× its usual step) or runs a control,
//! reads the live tag every second for `job.straggler` and `job.workload_slow`, and cancels the
//! job after a bounded wait.
//!
//! | file | what it holds |
//! |---|---|
//! | [`plan`] | the classes and controls, the seeded plan |
//! | [`trainer`] | the synthetic trainer (`fabric-check drill-trainer`), its control and status files |
//! | [`cgroup`] | `cpu_capped`: the CPU cgroup (v2 `cpu.max`, or v1's CFS quota) and its undo |
//! | [`levers`] | the [`levers::Lever`] seam: CPU caps, shaped paths, the path relays through the testbed's namespaces |
//! | [`run`] | the round loop |
//! | [`score`] | recall by class and size, time to name, controls and clean jobs, the table and the benchmark's line |

pub mod cgroup;
pub mod levers;
pub mod plan;
pub mod run;
pub mod score;
pub mod trainer;

#[cfg(test)]
mod tests;
