//! The tag's types: [`JobTag`] and what it holds, as they go into the JSON.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::hostlist::Hostlist;
use crate::verdict::Verdict;

/// One node's result as recorded in the tag.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeResult {
    /// The node's verdict.
    pub verdict: Verdict,
    /// Check ids that failed or warned (or `probe.timeout`, `probe.error`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checks: Vec<String>,
    /// Probe wall time on this node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe_ms: Option<u64>,
    /// Whether this node was drained because of this job's probe.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub drained: bool,
}

/// A fault the in-job watch saw while the job ran.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WatchEvent {
    /// The check that failed (`ib.port_state`, `ib.counters`, ...).
    pub check: String,
    /// What it found (bounded, as a drain reason's message).
    pub message: String,
    /// When the watch first saw it (seconds since the epoch).
    pub seen_at_s: u64,
    /// How long into the job (since the prolog) that was, in seconds.
    pub into_job_s: u64,
    /// When it was no longer seen (a flap that cleared), if it cleared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cleared_at_s: Option<u64>,
    /// Whether the watch drained the node for it.
    #[serde(default)]
    pub drained: bool,
    /// Whether the watch then requeued the job, as it asked (`fabric-run
    /// --on-fabric-fault=requeue`) and `on_fault=requeue` allows; written only when true.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub requeued: bool,
    /// A `warn` finding (a pause storm, a counter over its warning rate): recorded at once,
    /// never drained; written only when true (a `fail` otherwise).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub warn: bool,
}

/// The most watch events one node keeps in the tag (the first ones: a flapping link repeats).
pub const MAX_WATCH_EVENTS: usize = 8;

/// Counter rises seen between prolog and epilog on one node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DuringJob {
    /// The node.
    pub node: String,
    /// `"<device>/<port>/<counter>"` → increase during the job.
    pub rises: BTreeMap<String, u64>,
    /// Worst verdict of the epilog's judgement of those rises (and of the watch's faults).
    pub verdict: Verdict,
    /// Faults the in-job watch saw on this node while the job ran, written into the live tag
    /// when seen (`fabric-check watch`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub watch: Vec<WatchEvent>,
}

/// The `fabric-run` summary of a job, merged by the epilog (all durations in seconds).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunSummary {
    /// Training steps observed.
    pub steps: u64,
    /// Median step time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_p50_s: Option<f64>,
    /// 95th percentile step time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_p95_s: Option<f64>,
    /// Longest step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_max_s: Option<f64>,
    /// Checkpoints written.
    pub ckpt_n: u64,
    /// Total checkpoint write time.
    pub ckpt_total_s: f64,
    /// Longest checkpoint write.
    pub ckpt_max_s: f64,
    /// Checkpoint restores.
    #[serde(default)]
    pub restore_n: u64,
    /// Total restore time.
    #[serde(default)]
    pub restore_total_s: f64,
    /// Wrapper-level relaunches (attempts − 1).
    pub retries: u64,
    /// Slurm requeues (the job's restart count).
    pub requeues: u64,
    /// Accepted inference outputs, when counted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outputs: Option<u64>,
    /// Wall time of the wrapped run, all attempts.
    pub duration_s: f64,
    /// `accepted|failed|timeout|preempted|killed`.
    pub outcome: String,
    /// Finished, validated and on time.
    pub accepted: bool,
    /// Met the deadline (true when none was set).
    pub on_time: bool,
    /// Record lines that could not be parsed and were skipped.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub malformed_lines: u64,
    /// Ranks (wrappers running side by side) seen in the final launch on this node.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub ranks: u32,
    /// The lowest rank (`SLURM_PROCID`) whose steps and checkpoints this summary carries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lead_rank: Option<u32>,
    /// The records file exceeded the read bound; only its head and tail were summarised.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
    /// Who wrote the records: always the job (`fabric-run` runs as the job's user). Shown,
    /// never a reason to drain.
    #[serde(default)]
    pub reported_by: Reporter,
    /// Distinct fabric fault notices of the in-job watch that `fabric-run` saw while the
    /// command ran (`fabric_fault` records); the nodes' add up. Absent when none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fabric_faults: Option<u64>,
    /// Step-time regressions `fabric-run` flagged within the run (`slow_steps` records; the
    /// most of any rank, and of any node). Evidence, never a reason to drain. Absent when none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slow_step_events: Option<u64>,
    /// The lead rank's timeline reduced to what effective training time needs
    /// ([`crate::ett::timeline`]); absent in tags written before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ett: Option<EttFacts>,
}

/// The most failures an [`EttFacts`] lists (the first ones; [`EttFacts::failures_n`] counts all).
pub const MAX_ETT_FAILURES: usize = 16;

/// What effective training time needs from one run's records (`docs/cost-model.md`, "Effective
/// training time"): when training first stepped, the step time whose progress was kept and lost,
/// and each failure. Times are Unix seconds, durations seconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EttFacts {
    /// When the first step boundary of the run was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_step_at_s: Option<f64>,
    /// Step time whose progress was kept: steps before a checkpoint, and every step of an
    /// attempt that ended accepted.
    pub kept_s: f64,
    /// Step time whose progress was lost: steps after the last checkpoint at a failure.
    pub lost_s: f64,
    /// Failures counted (the list keeps the first [`MAX_ETT_FAILURES`]).
    pub failures_n: u64,
    /// The failures, in time order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failures: Vec<RunFailure>,
}

/// One failure of a run: an attempt that did not succeed, or a launch that vanished.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunFailure {
    /// When it failed (the attempt's end as recorded).
    pub at_s: f64,
    /// From the failure to the first step boundary after it (after the restore); absent when the
    /// run never stepped again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recover_s: Option<f64>,
    /// Steps since the last checkpoint, lost.
    pub lost_steps: u64,
    /// Their step time.
    pub lost_s: f64,
    /// `fabric-run` had seen the in-job watch's fabric fault notice in the failed attempt.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fabric_notice: bool,
}

/// Who produced a part of the tag that root did not gather itself.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Reporter {
    /// The job's own processes (its user's files in the spool, its step gates): shown in the
    /// tag, never a reason to drain a node, never counted by the mass-drain guard.
    #[default]
    Job,
}

/// The longest message kept in a [`SlowClaim`], in characters.
pub const MAX_CLAIM_CHARS: usize = 200;

/// A node that the job's own step gate named slow.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SlowClaim {
    /// The node named slow.
    pub node: String,
    /// The step whose gate named it.
    pub step: u32,
    /// The gate's message, bounded to [`MAX_CLAIM_CHARS`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// What the job reported about itself: the step gates run as the job's user and write their
/// results into the user-writable spool, so none of it is evidence root gathered. It is shown
/// in the tag, marked `"reported_by":"job"`, and never drains a node or counts toward the
/// mass-drain guard.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct JobReported {
    /// Always [`Reporter::Job`].
    #[serde(default)]
    pub reported_by: Reporter,
    /// The worst of the job's step gate collectives.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps: Option<CollectiveSummary>,
    /// Nodes the job's step gates named slow.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub slow: Vec<SlowClaim>,
}

impl JobReported {
    /// Whether it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.steps.is_none() && self.slow.is_empty()
    }
}

fn is_zero_u32(n: &u32) -> bool {
    *n == 0
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The cross-node collective's result (`--fabric-check=full`), condensed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CollectiveSummary {
    /// The collective's verdict.
    pub verdict: Option<Verdict>,
    /// Best bus bandwidth over the size sweep, GB/s (nccl-tests' busbw).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub busbw_gb_s: Option<f64>,
    /// Mean time of the smallest size, microseconds (latency).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub small_time_us: Option<f64>,
    /// Wrong elements (nccl-tests' `#wrong`).
    #[serde(default)]
    pub wrong: u64,
    /// Nodes named as slow.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub outliers: Vec<String>,
    /// Nodes named with a latency tail (both ring links' p99 round trip far above the typical
    /// node's).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tails: Vec<String>,
    /// Nodes that never joined.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missing: Vec<String>,
}

/// The whole tag.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct JobTag {
    /// The job's verdict: the worst node verdict (`None` before any probe result).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict: Option<Verdict>,
    /// `quick` or `full`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// Probe time as Unix seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probed_at: Option<u64>,
    /// Nodes in the job.
    #[serde(default)]
    pub nnodes: u32,
    /// Count of nodes per verdict.
    #[serde(default)]
    pub counts: BTreeMap<Verdict, u32>,
    /// Per-node results. A key is a node name or, when the bound made the tag summarise, a Slurm
    /// hostlist of nodes with the same result (`"n[1-1023]":{"verdict":"pass"}`); see
    /// [`JobTag::result_of`].
    #[serde(default)]
    pub nodes: BTreeMap<String, NodeResult>,
    /// True when the tag was summarised to respect its bound (hostlist keys, timings, notes or
    /// counter detail dropped; `counts` are then the truth, not a recount of `nodes`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
    /// Non-passing node results of earlier attempts of this job (before a requeue).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub earlier: BTreeMap<String, NodeResult>,
    /// Nodes whose verdict never reached the writer (rendezvous timeout); names or, when
    /// summarised, Slurm hostlists.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missing: Vec<String>,
    /// Counter rises during the job.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub during: Vec<DuringJob>,
    /// The cross-node collective the prolog ran as root (`--fabric-check=full`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collective: Option<CollectiveSummary>,
    /// What the job reported about itself (step gates): shown, never trusted for a drain.
    #[serde(default, skip_serializing_if = "JobReported::is_empty")]
    pub job_reported: JobReported,
    /// The fabric-run summary (written by the job: `reported_by` is `job`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<RunSummary>,
    /// What the job's spare nodes did (`--fabric-check-spares`): nodes given up and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spares: Option<crate::spares::SparesRecord>,
    /// Free-form notes from the writer (e.g. "probe timed out"), bounded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// A tag segment that is present but cannot be decoded.
#[derive(Debug, thiserror::Error)]
#[error("the fabric-check/v1 segment of the comment is not valid JSON: {0}")]
pub struct TagDecodeError(#[from] pub(super) serde_json::Error);

impl JobTag {
    /// Recomputes `counts` and `verdict` from `nodes` (and `missing`, which count as errors).
    pub fn recount(&mut self) {
        let mut counts = BTreeMap::new();
        for r in self.nodes.values() {
            *counts.entry(r.verdict).or_insert(0) += 1;
        }
        if !self.missing.is_empty() {
            *counts.entry(Verdict::Error).or_insert(0) += self.missing.len() as u32;
        }
        if !self.truncated {
            self.counts = counts;
        }
        self.verdict = self.counts.keys().max().copied();
    }

    /// The result recorded for `node`: its own entry, or the hostlist entry that names it.
    pub fn result_of(&self, node: &str) -> Option<&NodeResult> {
        self.nodes.get(node).or_else(|| {
            self.nodes.iter().find_map(|(key, r)| {
                (key.contains('[') && Hostlist::parse(key).is_ok_and(|h| h.matches(node)))
                    .then_some(r)
            })
        })
    }
}
