//! `fabric-check step-end`: the run summary in the live tag at the end of each `fabric-run`
//! step, while the job still runs.
//!
//! The plugin spawns it as root from slurmstepd's `slurm_spank_exit` on the step's first node
//! (node id 0 of the step), after the step's tasks have ended and before slurmstepd tells
//! slurmctld the step is complete (`job_manager` in `src/slurmd/slurmstepd/mgr.c`), so the job
//! is live and `scontrol update` stores the tag as given: plain JSON (see
//! `docs/slurm-versions.md` for what each release allows at which callback).
//!
//! What it does, on this node only:
//!
//! - reads this node's `fabric-run` records (`<spool_dir>/<job>/<node>.jsonl`, the job user's
//!   file, read with the epilog's rules: no links, the job's owner, bounded sizes); when none of
//!   them names this step (`step_id`), it stops without one Slurm call (the batch script's step,
//!   [`BATCH_STEP_ID`], ends after every step it started and takes any record: a batch script
//!   whose last command is `srun fabric-run` ends, and the job with it, while that step's own
//!   end may still be running, which then finds the job completing);
//! - summarises the whole file (every step so far on this node: the summary is a function of the
//!   records, not a running sum, so writing it again never counts a step twice);
//! - writes it as the tag's `run` (reported by the job, never a reason to drain) through the
//!   tag writer's one read and one write, live only: a job that is already completing is left
//!   to its epilog, which merges every node's records and writes the job's summary over this
//!   one; the records stay for it.
//!
//! The other nodes' records of a multi-node step are not gathered here (the step's nodes have
//! no rendezvous at step end): the live summary is the first node's (rank 0's, whose steps and
//! checkpoints are the summary's), and the epilog completes it (`docs/records.md`).

use super::JobStep;
use super::tag_write::{TagWrite, Target, write_tag_to};
use crate::invocation::{BATCH_STEP_ID, JobStepExit};
use crate::plugin_args::Policy;
use crate::record;

/// What the step's end did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepEnd {
    /// No record of this step on this node (or none readable): no Slurm call was made.
    NoRecords,
    /// The summary went into the tag (or was already there).
    Written(TagWrite),
}

/// `fabric-check step-end`: always lets the step end normally.
pub fn run(step: &JobStep<'_>) -> JobStepExit {
    let _ = end_of_step(step);
    step.say(&JobStepExit::Proceed.line());
    JobStepExit::Proceed
}

/// The work of [`run`], with what came of it.
pub fn end_of_step(step: &JobStep<'_>) -> StepEnd {
    let setup = step.setup;
    let job = setup.inv.job_id;
    let step_id = setup.inv.step_id;
    let _span = tracing::info_span!("step_end", job, node = %setup.inv.node).entered();
    if setup.plugin.policy == Policy::Observe {
        return StepEnd::NoRecords;
    }
    let Some(step_id) = step_id else {
        step.say("step-end without --step-id: nothing to do");
        return StepEnd::NoRecords;
    };
    let Some(dir) = super::epilog::open_job_dir(step) else {
        return StepEnd::NoRecords;
    };
    let Some((_, recs)) = super::epilog::read_node_records(step, &dir) else {
        return StepEnd::NoRecords;
    };
    // The batch script's end comes after every step it started: any record will do there.
    let this_step = step_id.to_string();
    if step_id != BATCH_STEP_ID
        && !recs
            .records
            .iter()
            .any(|r| r.meta.step_id.as_deref() == Some(this_step.as_str()))
    {
        return StepEnd::NoRecords;
    }
    let Some(run) = record::summarize(&recs) else {
        return StepEnd::NoRecords;
    };
    let written = write_tag_to(step, Target::LiveOnly, |prev| {
        let mut t = prev.unwrap_or_default();
        t.run = Some(run);
        t
    });
    if matches!(written, TagWrite::Live | TagWrite::Unchanged) {
        step.say(&format!(
            "step {job}.{step_id}: run summary of {} in the live tag",
            step.node()
        ));
    }
    StepEnd::Written(written)
}
