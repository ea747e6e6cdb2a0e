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
//! A step on several nodes: every node of the step runs `step-end` (the plugin passes the step's
//! nodes, in their order), and they meet at the step's first node as the prolog's nodes meet
//! at the job's ([`super::meet::deliver_to`], a meeting of this step's own): each sends its
//! records summarised ([`StepEndPayload`]; a follower makes no Slurm call), and the first node
//! merges them with the epilog's rule ([`record::merge_nodes`]) into the live tag. It keeps the
//! summaries it received in root's state folder (`<state_dir>/step-runs-<job>.json`), so that a
//! later one-node end (the batch script's, whose nodes are only the first) merges the same
//! nodes again instead of writing its own node's summary over theirs. The epilog, which merges
//! every node's records once more, then finds the tag already holding its result and writes
//! nothing: the tag stays plain JSON in `sacct`. It writes (in the `b32:` database form, the
//! job having ended) only when something changed after the last step's end: a counter rose, a
//! node's records grew, a node that no step end heard from.
//!
//! What a peer sends is the job's (its records are user-written): reported by the job, never a
//! reason to drain, bounded like the epilog's payload.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::PathBuf;

use super::JobStep;
use super::meet::{Delivery, deliver_to};
use super::payload::StepEndPayload;
use super::tag_write::{TagWrite, Target, write_tag_to};
use crate::record;
use fabric_proto::invocation::{BATCH_STEP_ID, JobStepExit};
use fabric_proto::plugin_args::Policy;
use fabric_proto::tag::RunSummary;

/// What the step's end did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepEnd {
    /// No record of this step on this node (or none readable): no Slurm call was made.
    NoRecords,
    /// The summary went into the tag (or was already there).
    Written(TagWrite),
    /// A follower of a multi-node step: its summary reached the step's first node.
    Delivered,
    /// A follower whose summary did not reach the first node (said why); the epilog has it.
    NotDelivered,
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
    let own = own_payload(step, step_id);
    if setup.nodes.len() < 2 {
        // A one-node step (or the batch script's): no meeting.
        if !own.this_step {
            return StepEnd::NoRecords;
        }
        let Some(run) = own.run else {
            return StepEnd::NoRecords;
        };
        return write(step, step_id, [(step.node().to_owned(), run)].into());
    }
    match deliver_to(step, own, Some(step_id)) {
        Delivery::Leader(met) => {
            if !met.payloads.values().any(|p| p.this_step) {
                return StepEnd::NoRecords;
            }
            let runs: BTreeMap<String, RunSummary> = met
                .payloads
                .into_iter()
                .filter_map(|(node, p)| Some((node, p.run?)))
                .collect();
            write(step, step_id, runs)
        }
        Delivery::Acknowledged => StepEnd::Delivered,
        Delivery::Failed => {
            step.say(&format!(
                "step {job}.{step_id}: this node's run summary did not reach the step's first node; the epilog gathers it"
            ));
            StepEnd::NotDelivered
        }
    }
}

/// This node's records, summarised, and whether one of them names step `step_id` (the batch
/// script's end comes after every step it started: any record will do there).
fn own_payload(step: &JobStep<'_>, step_id: u32) -> StepEndPayload {
    let Some(dir) = super::epilog::open_job_dir(step) else {
        return StepEndPayload::default();
    };
    let Some((_, recs)) = super::epilog::read_node_records(step, &dir) else {
        return StepEndPayload::default();
    };
    let this_step = step_id.to_string();
    let named = step_id == BATCH_STEP_ID
        || recs
            .records
            .iter()
            .any(|r| r.meta.step_id.as_deref() == Some(this_step.as_str()));
    let run = record::summarize(&recs);
    StepEndPayload {
        this_step: named && run.is_some(),
        run,
    }
}

/// Writes the summary of `fresh` (node → its summary now) and of the nodes earlier step ends
/// heard from into the live tag, keeping what was heard for the next end.
fn write(step: &JobStep<'_>, step_id: u32, fresh: BTreeMap<String, RunSummary>) -> StepEnd {
    let job = step.job_id();
    let heard = fresh.len();
    let written = write_tag_to(step, Target::LiveOnly, |prev| {
        // Under the node's tag lock: the read-modify-write of the kept summaries too.
        let mut all = PeerRuns::load(step);
        all.extend(fresh);
        PeerRuns::keep(step, &all);
        let runs: Vec<RunSummary> = all.into_values().collect();
        let mut t = prev.unwrap_or_default();
        if let Some(run) = record::merge_nodes(&runs) {
            t.run = Some(run);
        }
        t
    });
    if matches!(written, TagWrite::Live | TagWrite::Unchanged) {
        step.say(&format!(
            "step {job}.{step_id}: run summary of {} in the live tag ({heard} node(s) heard at this end)",
            step.node()
        ));
    }
    StepEnd::Written(written)
}

/// The run summaries earlier step ends on this node heard, by node (root's file in the state
/// folder; removed by the epilog).
struct PeerRuns;

/// The most bytes the kept summaries may take (a summary is well under 1 KiB; a job of 4096
/// nodes fits).
const MAX_PEER_RUNS_BYTES: u64 = 4 << 20;

impl PeerRuns {
    fn path(step: &JobStep<'_>) -> PathBuf {
        step.setup
            .state_dir
            .join(format!("step-runs-{}.json", step.job_id()))
    }

    /// What was kept; empty when nothing was, or when the file is unreadable (said).
    fn load(step: &JobStep<'_>) -> BTreeMap<String, RunSummary> {
        let path = Self::path(step);
        let Ok(file) = std::fs::File::open(&path) else {
            return BTreeMap::new();
        };
        let mut bytes = Vec::new();
        let read = file
            .take(MAX_PEER_RUNS_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| e.to_string())
            .and_then(|n| {
                if n as u64 > MAX_PEER_RUNS_BYTES {
                    Err(format!("over {MAX_PEER_RUNS_BYTES} bytes"))
                } else {
                    serde_json::from_slice(&bytes).map_err(|e| e.to_string())
                }
            });
        read.unwrap_or_else(|e| {
            step.say(&format!(
                "the kept run summaries {} are unreadable ({e}); starting again",
                path.display()
            ));
            BTreeMap::new()
        })
    }

    /// Keeps `runs` (written whole, then renamed); a failure is said and only costs the epilog
    /// a write.
    fn keep(step: &JobStep<'_>, runs: &BTreeMap<String, RunSummary>) {
        let path = Self::path(step);
        let tmp = path.with_extension("tmp");
        let done = serde_json::to_vec(runs)
            .map_err(std::io::Error::other)
            .and_then(|bytes| std::fs::write(&tmp, bytes))
            .and_then(|()| std::fs::rename(&tmp, &path));
        if let Err(e) = done {
            let _ = std::fs::remove_file(&tmp);
            step.say(&format!(
                "the run summaries heard at this step's end could not be kept in {} ({e})",
                path.display()
            ));
        }
    }
}

/// Removes the run summaries the step ends of the job kept on this node (the epilog, once the
/// job's summary is merged).
pub fn forget_peer_runs(step: &JobStep<'_>) {
    let _ = std::fs::remove_file(PeerRuns::path(step));
}
