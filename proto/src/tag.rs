//! The job tag: one `fabric-check/v1 ...` segment inside a job's `AdminComment`.
//!
//! The field is shared with other tools (Princeton's jobstats writes `JS1:...`), so the tag is a
//! *segment*: the marker [`MARKER`] followed by the tag in one of two [`Form`]s. Written to a
//! live job (`scontrol`, which stores the bytes as given) it is one compact JSON object; written
//! after the job ended (`sacctmgr`, whose `strip_quotes` turns `"` and `'` into backticks and
//! which lower-cases the value in Slurm 22.05) it is [`DB_FORM_PREFIX`] followed by the same JSON
//! in lower-case, padded base32 (RFC 4648), which both manglings leave intact. [`extract`] reads
//! either (and the backtick-mangled JSON older releases wrote); [`splice`] and [`splice_as`]
//! replace our segment in place or append it after a space, keeping every other byte. Both
//! read in time linear in the comment's length, however many markers it holds.
//!
//! [`JobTag::bounded_to`] keeps the JSON within a byte bound (4 KiB, [`MAX_TAG_BYTES`]): it
//! summarises passing nodes as a Slurm hostlist (`"n[1-1023]":{"verdict":"pass"}`) first, then
//! drops timings, notes and counter detail, then groups nodes with identical results under
//! hostlist keys; failing and missing nodes are kept to the last.
//!
//! What the job contributed ([`JobTag::job_reported`], [`JobTag::run`]) is bounded apart from
//! root's evidence and shrunk first: [`JobTag::scrub`] (run by every bound) caps it to its
//! share of the bound, makes every number finite (JSON has no `inf`: `serde_json` would write
//! `null`, which does not decode) and strips segment markers, backticks and control characters
//! from every string, so nothing written into the tag can end, forge or hide a segment.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::hostlist::{self, Hostlist};

/// The reader as it was before it was made linear: the reference the tests compare it with (and
/// the baseline of `scripts/bench-tag-reader`, whose example holds the file).
#[cfg(test)]
#[path = "../examples/tag_reader/quadratic.rs"]
mod quadratic;

/// The segment marker, followed by one space and the JSON object.
pub const MARKER: &str = "fabric-check/v1 ";

/// Upper bound of the segment's text after the marker, in bytes (the JSON of the live form, the
/// prefix and base32 of the database form).
pub const MAX_TAG_BYTES: usize = 4096;

/// What follows the marker in the database form: `fabric-check/v1 b32:<base32 of the JSON>`.
pub const DB_FORM_PREFIX: &str = "b32:";

/// Bound of the JSON of the database form, so that its base32 (8 characters per 5 bytes) and
/// prefix stay within [`MAX_TAG_BYTES`].
pub const MAX_DB_JSON_BYTES: usize = (MAX_TAG_BYTES - DB_FORM_PREFIX.len()) / 8 * 5;

/// How the tag is written after the marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// Compact JSON, for `scontrol update` of a live job (stored as given).
    Live,
    /// [`DB_FORM_PREFIX`] and lower-case padded base32 of the JSON, for `sacctmgr modify job`
    /// (no quotes, no upper case: nothing its quote stripping or lower-casing changes).
    Database,
}

pub use crate::verdict::Verdict;

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
    /// Free-form notes from the writer (e.g. "probe timed out"), bounded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// A tag segment that is present but cannot be decoded.
#[derive(Debug, thiserror::Error)]
#[error("the fabric-check/v1 segment of the comment is not valid JSON: {0}")]
pub struct TagDecodeError(#[from] serde_json::Error);

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

    /// Compact JSON within [`MAX_TAG_BYTES`] (see [`JobTag::bounded_to`]).
    pub fn bounded(&self) -> String {
        self.bounded_to(MAX_TAG_BYTES)
    }

    /// Compact JSON within `limit` bytes, summarised in steps until it fits:
    ///
    /// 1. passing nodes become one hostlist entry (`"n[1-1023]":{"verdict":"pass"}`);
    /// 2. probe times, notes beyond two, counter rises beyond four per node and the collective's
    ///    outlier detail go; counter entries of more than eight nodes collapse per verdict;
    /// 3. nodes with the same result (`nodes` and `earlier`), `missing` and the collective's
    ///    lists become hostlists;
    /// 4. notes and failing checks go (every failing node is still named, by hostlist).
    ///
    /// Failing, erroring and missing nodes are never dropped before passing ones; only a tag
    /// whose failing node names cannot be compressed into `limit` (thousands of unrelated
    /// names) loses some, and then says so in `counts` (always kept) and `truncated`.
    pub fn bounded_to(&self, limit: usize) -> String {
        let fits = |t: &JobTag| {
            let json = serde_json::to_string(t).unwrap_or_default();
            (json.len() <= limit).then_some(json)
        };
        let mut tag = self.clone();
        tag.scrub(limit / JOB_SHARE_DIVISOR);
        if let Some(json) = fits(&tag) {
            return json;
        }
        tag.truncated = true;
        let passing = |r: &NodeResult| r.verdict == Verdict::Pass && !r.drained;
        for r in tag.nodes.values_mut().filter(|r| passing(r)) {
            r.probe_ms = None;
        }
        group_nodes(&mut tag.nodes, passing);
        if let Some(json) = fits(&tag) {
            return json;
        }
        // The job's part goes before any of root's evidence: its detail, then all of it.
        tag.job_reported.shrink();
        if let Some(json) = fits(&tag) {
            return json;
        }
        tag.job_reported = JobReported::default();
        tag.run = None;
        if let Some(json) = fits(&tag) {
            return json;
        }
        // 2. timings, notes and counter detail.
        for r in tag.nodes.values_mut().chain(tag.earlier.values_mut()) {
            r.probe_ms = None;
        }
        tag.notes.truncate(2);
        for d in &mut tag.during {
            d.rises = std::mem::take(&mut d.rises).into_iter().take(4).collect();
        }
        tag.job_reported.slow.truncate(4);
        if tag.during.len() > 8 {
            tag.during = collapse_during(&tag.during);
        }
        if let Some(json) = fits(&tag) {
            return json;
        }
        // 3. hostlists of nodes with the same result, and of the name lists.
        group_nodes(&mut tag.nodes, |r| !r.drained);
        group_nodes(&mut tag.earlier, |r| !r.drained);
        tag.missing = compress_list(&tag.missing);
        if let Some(c) = &mut tag.collective {
            c.missing = compress_list(&c.missing);
            c.outliers = compress_list(&c.outliers);
        }
        if let Some(json) = fits(&tag) {
            return json;
        }
        // 4. notes and checks; drained nodes join their verdict's hostlist.
        tag.notes.clear();
        tag.during = collapse_during(&tag.during);
        for r in tag.nodes.values_mut().chain(tag.earlier.values_mut()) {
            r.checks.clear();
            r.drained = false;
        }
        group_nodes(&mut tag.nodes, |_| true);
        group_nodes(&mut tag.earlier, |_| true);
        if let Some(json) = fits(&tag) {
            return json;
        }
        // Names that do not compress: the bound wins, earlier attempts and passing nodes first.
        tag.earlier.clear();
        tag.nodes.retain(|_, r| r.verdict != Verdict::Pass);
        tag.during.clear();
        loop {
            if let Some(json) = fits(&tag) {
                return json;
            }
            if tag.nodes.is_empty() && tag.missing.is_empty() && tag.collective.is_none() {
                // Only the job-wide fields are left: the verdict and the counts, which always fit.
                let least = JobTag {
                    verdict: tag.verdict,
                    nnodes: tag.nnodes,
                    counts: tag.counts.clone(),
                    truncated: true,
                    ..JobTag::default()
                };
                return fits(&least).unwrap_or_default();
            }
            if tag.missing.len() > tag.nodes.len() {
                tag.missing.truncate(tag.missing.len() / 2);
            } else if !tag.nodes.is_empty() {
                let keep = tag.nodes.len() / 2;
                tag.nodes = std::mem::take(&mut tag.nodes)
                    .into_iter()
                    .take(keep)
                    .collect();
            } else {
                tag.collective = None;
            }
        }
    }
}

/// Longest note kept, in bytes.
pub const MAX_NOTE_BYTES: usize = 200;

/// The job's part of the tag ([`JobTag::job_reported`] and [`JobTag::run`]) may take at most
/// this fraction (one over it) of the bound, whatever the job wrote.
pub const JOB_SHARE_DIVISOR: usize = 4;

/// The most slow-node claims of the whole job the tag keeps.
pub const MAX_SLOW_CLAIMS: usize = 16;

/// The most node names a job-reported list (a step's outliers or missing nodes) keeps.
pub const MAX_REPORTED_NAMES: usize = 16;

/// The longest node name or short word the job can put into the tag, in characters.
pub const MAX_NAME_CHARS: usize = 64;

/// The largest number of seconds a duration in the tag may say (about 31 years); larger, negative
/// and non-finite values are clamped into `0..=MAX_SECONDS`.
pub const MAX_SECONDS: f64 = 1e9;

/// Text fit for the tag: at most `max_chars` characters; control characters (newlines, escape
/// sequences, NUL) become spaces; and every segment marker is broken
/// (`fabric-check/v1` becomes `fabric-check-v1`), so no text inside the tag, and no text a job
/// wrote, can be read as a segment of its own.
pub fn scrub_text(text: &str, max_chars: usize) -> String {
    let marker = MARKER.trim_end();
    let mut out: String = text
        .chars()
        .take(max_chars)
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    while let Some(i) = out.find(marker) {
        out.replace_range(i..i + marker.len(), "fabric-check-v1");
    }
    out
}

/// `x` if finite, within `0..=MAX_SECONDS`, else clamped (non-finite: 0).
pub fn clamp_seconds(x: f64) -> f64 {
    if x.is_finite() {
        // `+ 0.0` turns the `-0.0` of an empty sum into `0.0`.
        x.clamp(0.0, MAX_SECONDS) + 0.0
    } else {
        0.0
    }
}

/// `x` if finite and not negative, else `None` (a measure without a meaningful value).
fn finite_measure(x: Option<f64>) -> Option<f64> {
    x.filter(|v| v.is_finite() && *v >= 0.0)
}

impl RunSummary {
    /// Makes every number finite and in range, and the outcome a short clean word.
    pub fn scrub(&mut self) {
        for d in [
            &mut self.step_p50_s,
            &mut self.step_p95_s,
            &mut self.step_max_s,
        ] {
            *d = d.map(clamp_seconds);
        }
        for d in [
            &mut self.ckpt_total_s,
            &mut self.ckpt_max_s,
            &mut self.restore_total_s,
            &mut self.duration_s,
        ] {
            *d = clamp_seconds(*d);
        }
        self.outcome = scrub_text(&self.outcome, 16);
    }
}

impl CollectiveSummary {
    /// Makes every number finite and bounds the name lists (to `max_names` names of
    /// [`MAX_NAME_CHARS`]): for the job's step results, whose every byte the job wrote.
    pub fn scrub(&mut self, max_names: usize) {
        self.busbw_gb_s = finite_measure(self.busbw_gb_s);
        self.small_time_us = finite_measure(self.small_time_us);
        for list in [&mut self.outliers, &mut self.missing] {
            list.truncate(max_names);
            for n in list.iter_mut() {
                *n = scrub_text(n, MAX_NAME_CHARS);
            }
        }
    }
}

impl SlowClaim {
    /// Bounds and cleans the job's words in it.
    pub fn scrub(&mut self) {
        self.node = scrub_text(&self.node, MAX_NAME_CHARS);
        self.message = self
            .message
            .as_deref()
            .map(|m| scrub_text(m, MAX_CLAIM_CHARS));
    }
}

impl JobReported {
    /// Bounds and cleans what the job reported: at most [`MAX_SLOW_CLAIMS`] claims and
    /// [`MAX_REPORTED_NAMES`] names per list, every string scrubbed, every number finite.
    pub fn scrub(&mut self) {
        self.slow.truncate(MAX_SLOW_CLAIMS);
        for c in &mut self.slow {
            c.scrub();
        }
        if let Some(s) = &mut self.steps {
            s.scrub(MAX_REPORTED_NAMES);
        }
    }

    /// The least of it worth keeping: the step's verdict and figures, four claims without
    /// messages, no name lists.
    pub fn shrink(&mut self) {
        self.slow.truncate(4);
        for c in &mut self.slow {
            c.message = None;
        }
        if let Some(s) = &mut self.steps {
            s.outliers.truncate(4);
            s.missing.truncate(4);
        }
    }
}

impl JobTag {
    /// Makes the tag safe to write, whatever the job contributed: every number finite, every
    /// string scrubbed ([`scrub_text`]; notes to [`MAX_NOTE_BYTES`]), and the job's part
    /// ([`JobTag::job_reported`], [`JobTag::run`]) bounded and, when its JSON is over
    /// `job_bytes`, shrunk and then dropped (said in `truncated`). Root's evidence is not
    /// shortened here.
    pub fn scrub(&mut self, job_bytes: usize) {
        for n in &mut self.notes {
            *n = scrub_text(n, MAX_NOTE_BYTES);
            if n.len() > MAX_NOTE_BYTES {
                let mut end = MAX_NOTE_BYTES;
                while !n.is_char_boundary(end) {
                    end -= 1;
                }
                n.truncate(end);
            }
        }
        if let Some(m) = &mut self.mode {
            *m = scrub_text(m, 16);
        }
        for r in self.nodes.values_mut().chain(self.earlier.values_mut()) {
            for c in &mut r.checks {
                *c = scrub_text(c, MAX_NAME_CHARS);
            }
        }
        if self
            .nodes
            .keys()
            .chain(self.earlier.keys())
            .any(|k| scrub_text(k, usize::MAX) != *k)
        {
            for map in [&mut self.nodes, &mut self.earlier] {
                *map = std::mem::take(map)
                    .into_iter()
                    .map(|(k, r)| (scrub_text(&k, usize::MAX), r))
                    .collect();
            }
        }
        for d in &mut self.during {
            d.node = scrub_text(&d.node, usize::MAX);
            if d.rises.keys().any(|k| scrub_text(k, usize::MAX) != *k) {
                d.rises = std::mem::take(&mut d.rises)
                    .into_iter()
                    .map(|(k, v)| (scrub_text(&k, usize::MAX), v))
                    .collect();
            }
        }
        for n in self.missing.iter_mut() {
            *n = scrub_text(n, usize::MAX);
        }
        if let Some(c) = &mut self.collective {
            // Root's: its lists are not shortened, only cleaned.
            c.scrub(usize::MAX);
        }
        self.job_reported.scrub();
        if let Some(r) = &mut self.run {
            r.scrub();
        }
        let job_len = |t: &JobTag| {
            serde_json::to_string(&t.job_reported).map_or(usize::MAX, |s| s.len())
                + serde_json::to_string(&t.run).map_or(usize::MAX, |s| s.len())
        };
        if job_len(self) > job_bytes {
            self.truncated = true;
            self.job_reported.shrink();
            if job_len(self) > job_bytes {
                self.job_reported = JobReported::default();
            }
            if job_len(self) > job_bytes {
                self.run = None;
            }
        }
    }
}

/// The names a key of `nodes` stands for (itself unless it is a hostlist).
fn names_of(key: &str) -> Vec<String> {
    if key.contains('[')
        && let Ok(names) = Hostlist::parse(key).and_then(|h| h.expand())
    {
        return names;
    }
    vec![key.to_owned()]
}

/// Replaces the entries `which` selects by one hostlist entry per distinct result.
fn group_nodes(map: &mut BTreeMap<String, NodeResult>, which: impl Fn(&NodeResult) -> bool) {
    let mut by_result: Vec<(NodeResult, Vec<String>)> = Vec::new();
    let mut kept = BTreeMap::new();
    for (key, r) in std::mem::take(map) {
        if !which(&r) {
            kept.insert(key, r);
            continue;
        }
        match by_result.iter_mut().find(|(res, _)| *res == r) {
            Some((_, names)) => names.extend(names_of(&key)),
            None => by_result.push((r, names_of(&key))),
        }
    }
    for (r, names) in by_result {
        match hostlist::compress(&names) {
            Some(key) => {
                kept.insert(key, r);
            }
            None => kept.extend(names.into_iter().map(|n| (n, r.clone()))),
        }
    }
    *map = kept;
}

/// A list of names (or hostlists) as one hostlist entry, when it compresses.
fn compress_list(list: &[String]) -> Vec<String> {
    let names: Vec<String> = list.iter().flat_map(|k| names_of(k)).collect();
    match hostlist::compress(&names) {
        Some(h) if !names.is_empty() => vec![h],
        _ => list.to_vec(),
    }
}

/// One counter entry per verdict, its node a hostlist, its rises dropped.
fn collapse_during(during: &[DuringJob]) -> Vec<DuringJob> {
    let mut by_verdict: BTreeMap<Verdict, Vec<String>> = BTreeMap::new();
    for d in during {
        by_verdict
            .entry(d.verdict)
            .or_default()
            .extend(names_of(&d.node));
    }
    by_verdict
        .into_iter()
        .map(|(verdict, names)| DuringJob {
            node: hostlist::compress(&names).unwrap_or_else(|| names.join(",")),
            rises: BTreeMap::new(),
            verdict,
            watch: Vec::new(),
        })
        .collect()
}

/// Finds our segment in a comment: the byte range of marker + JSON, and the decoded tag.
///
/// The first occurrence of the marker that decodes wins; when none decodes, the first one is
/// reported unreadable. So a comment where another tool (or a user's text copied into a field)
/// left a bare or broken marker ahead of ours still yields our tag, and a splice replaces ours.
///
/// A marker inside the extent of an earlier segment is text of that segment, never a segment
/// of its own: when our segment is unreadable, nothing quoted inside it (a note, a job's
/// message) is read in its place.
fn locate(comment: &str) -> Option<(std::ops::Range<usize>, Result<JobTag, TagDecodeError>)> {
    locate_as(comment)
}

/// [`locate`] decoding the segment as `T`: a reader's own view of the tag.
///
/// Linear in the comment's length however many markers it holds: no marker copies or rescans
/// the rest of the comment. What a segment needs of the whole comment (the backtick repairs,
/// where each `{` closes) is made once, by [`Whole`], and only when a segment first needs it;
/// what a marker still reads on its own ends at the next marker (its trailing space), or is a
/// JSON parse, which can only run past a later marker inside a JSON string, so at most two
/// parses ever cover one byte.
fn locate_as<T: serde::de::DeserializeOwned>(
    comment: &str,
) -> Option<(std::ops::Range<usize>, Result<T, TagDecodeError>)> {
    let mut whole = Whole::new(comment);
    let mut first_unreadable = None;
    let mut covered_until = 0;
    for (start, _) in comment.match_indices(MARKER) {
        if start < covered_until {
            continue;
        }
        let found = locate_at::<T>(&mut whole, start);
        if found.1.is_ok() {
            return Some(found);
        }
        if comment[start + MARKER.len()..].starts_with('{') {
            // An object of ours, however broken: what it quotes is its own text.
            covered_until = found.0.end;
        }
        first_unreadable.get_or_insert(found);
    }
    first_unreadable
}

/// What reading a comment's segments needs of the whole comment, each made at most once and
/// only when a segment first needs it.
struct Whole<'a> {
    comment: &'a str,
    /// The comment with its backticks repaired as [`unmangle_backticks`] repairs them (every
    /// byte at its offset).
    unmangled: Option<String>,
    /// The comment with every backtick taken for a quote.
    requoted: Option<String>,
    /// From the first segment that asked on: for each marker followed by `{`, the length of
    /// its extent up to the bracket that closes that `{` ([`bracket_closers`]).
    closers: Option<(usize, std::collections::HashMap<usize, usize>)>,
}

impl<'a> Whole<'a> {
    fn new(comment: &'a str) -> Self {
        Self {
            comment,
            unmangled: None,
            requoted: None,
            closers: None,
        }
    }

    /// The repaired text from `at`, which starts with `{`: [`unmangle_backticks`] of the rest
    /// of the comment is this slice of its repair of the whole (a byte's repair depends on its
    /// neighbours alone, and the `{` at `at` is none of the repaired bytes).
    fn unmangled_from(&mut self, at: usize) -> &str {
        let comment = self.comment;
        &self
            .unmangled
            .get_or_insert_with(|| unmangle_backticks(comment))[at..]
    }

    /// The rest of the comment from `at` with every backtick taken for a quote.
    fn requoted_from(&mut self, at: usize) -> &str {
        let comment = self.comment;
        &self
            .requoted
            .get_or_insert_with(|| comment.replace('`', "\""))[at..]
    }

    /// Where the unreadable segment whose text starts at `at` (just after its marker) ends:
    /// after the bracket that closes its opening `{` (counted without regard to strings, which
    /// may be the broken part), else at the next space.
    fn unreadable_len(&mut self, at: usize) -> usize {
        let rest = &self.comment[at..];
        // The next space is at the latest the one ending the next marker.
        let next_space = rest.find(' ').unwrap_or(rest.len());
        if !rest.starts_with('{') {
            return next_space;
        }
        let comment = self.comment;
        let (from, closers) = match &mut self.closers {
            Some(made) if made.0 <= at => made,
            slot => slot.insert((at, bracket_closers(comment, at))),
        };
        debug_assert!(*from <= at, "segments are read in order");
        closers.get(&at).copied().unwrap_or(next_space)
    }
}

/// For every marker followed by `{` at or after byte `from`: the length from that `{` to just
/// after the bracket that closes it, counting `{` and `[` in, `}` and `]` out, without regard to
/// strings, as [`Whole::unreadable_len`] counts. One pass: the open `{`s still waiting for their
/// bracket sit on a stack, deepest last.
fn bracket_closers(comment: &str, from: usize) -> std::collections::HashMap<usize, usize> {
    let bytes = comment.as_bytes();
    let mut closers = std::collections::HashMap::new();
    // (depth before the `{`, where it is), for the `{`s after a marker not closed yet.
    let mut waiting: Vec<(usize, usize)> = Vec::new();
    let mut depth = 0usize;
    for (i, &b) in bytes.iter().enumerate().skip(from) {
        match b {
            b'{' | b'[' => {
                if b == b'{' && bytes[..i].ends_with(MARKER.as_bytes()) {
                    waiting.push((depth, i));
                }
                depth += 1;
            }
            b'}' | b']' => {
                // A bracket closing one opened before `from` leaves the depth at 0: no `{`
                // after `from` waits that low.
                depth = depth.saturating_sub(1);
                while let Some(&(opened_at, at)) = waiting.last() {
                    if opened_at < depth {
                        break;
                    }
                    closers.insert(at, i + 1 - at);
                    waiting.pop();
                }
            }
            _ => {}
        }
    }
    closers
}

/// The segment whose marker starts at byte `start`.
fn locate_at<T: serde::de::DeserializeOwned>(
    whole: &mut Whole<'_>,
    start: usize,
) -> (std::ops::Range<usize>, Result<T, TagDecodeError>) {
    let comment = whole.comment;
    let json_start = start + MARKER.len();
    let rest = &comment[json_start..];
    if let Some(encoded) = rest.strip_prefix(DB_FORM_PREFIX) {
        // Ends at the latest at the space that ends the next marker.
        let len = encoded
            .find(|c: char| c.is_ascii_whitespace())
            .unwrap_or(encoded.len());
        let end = json_start + DB_FORM_PREFIX.len() + len;
        let decoded = base32::decode(&encoded[..len])
            .ok_or_else(|| custom("the b32: form holds a character outside base32"))
            .and_then(|bytes| {
                String::from_utf8(bytes)
                    .map_err(|_| custom("the b32: form does not decode to UTF-8 text"))
            })
            .and_then(|json| serde_json::from_str::<T>(&json).map_err(TagDecodeError));
        return (start..end, decoded);
    }
    let parse = |text: &str| {
        let mut stream = serde_json::Deserializer::from_str(text).into_iter::<T>();
        match stream.next() {
            Some(Ok(tag)) => Ok((tag, stream.byte_offset())),
            Some(Err(e)) => Err(TagDecodeError(e)),
            None => Err(custom("nothing follows the marker")),
        }
    };
    let mut found = parse(rest);
    if found.is_err() && rest.starts_with("{`") {
        // JSON that went through sacctmgr (older releases of fabric-check wrote it): every `"`
        // and `'` became a backtick. Quotes are put back where JSON's structure needs them and
        // apostrophes elsewhere; failing that, every backtick is taken for a quote. Both
        // repairs keep every byte offset.
        found = parse(whole.unmangled_from(json_start))
            .or_else(|_| parse(whole.requoted_from(json_start)));
    }
    match found {
        Ok((tag, len)) => (start..json_start + len, Ok(tag)),
        Err(e) => (start..json_start + whole.unreadable_len(json_start), Err(e)),
    }
}

fn custom(msg: &str) -> TagDecodeError {
    TagDecodeError(serde::de::Error::custom(msg))
}

/// `"` for each backtick that stands where JSON needs a quote (next to `{ [ , :` or `} ] , :`,
/// or escaped), `'` for the others.
fn unmangle_backticks(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    for (i, c) in text.char_indices() {
        if c != '`' {
            out.push(c);
            continue;
        }
        let before = i.checked_sub(1).map(|j| b[j]);
        let after = b.get(i + 1).copied();
        let structural = matches!(before, Some(b'{' | b'[' | b',' | b':' | b'\\'))
            || matches!(after, Some(b':' | b',' | b'}' | b']'));
        out.push(if structural { '"' } else { '\'' });
    }
    out
}

/// Decodes the fabric-check segment of an `AdminComment`, if there is one (either [`Form`], and
/// the backtick-mangled JSON of older releases).
pub fn extract(comment: &str) -> Option<Result<JobTag, TagDecodeError>> {
    locate(comment).map(|(_, t)| t)
}

/// [`extract`] decoding the segment as `T`, a reader's own view of the tag (a subset of
/// [`JobTag`]'s fields, as the report reads a million of them): the segment is found exactly as
/// [`extract`] finds it, so every reader agrees on which segment is the tag.
pub fn extract_as<T: serde::de::DeserializeOwned>(
    comment: &str,
) -> Option<Result<T, TagDecodeError>> {
    locate_as(comment).map(|(_, t)| t)
}

/// The whole segment (marker and tag) in `form`, bounded.
pub fn segment(tag: &JobTag, form: Form) -> String {
    match form {
        Form::Live => format!("{MARKER}{}", tag.bounded()),
        Form::Database => format!(
            "{MARKER}{DB_FORM_PREFIX}{}",
            base32::encode(tag.bounded_to(MAX_DB_JSON_BYTES).as_bytes())
        ),
    }
}

/// Writes `tag` into `comment` in the live form (see [`splice_as`]).
pub fn splice(comment: &str, tag: &JobTag) -> String {
    splice_as(comment, tag, Form::Live)
}

/// Writes `tag` into `comment` in `form`: replaces an existing segment in place (a readable one,
/// else the first unreadable one, its whole extent), else appends it after a space. Every byte
/// outside our segment is kept.
pub fn splice_as(comment: &str, tag: &JobTag, form: Form) -> String {
    let segment = segment(tag, form);
    match locate(comment) {
        Some((range, _)) => {
            let mut out = String::with_capacity(comment.len() + segment.len());
            out.push_str(&comment[..range.start]);
            out.push_str(&segment);
            out.push_str(&comment[range.end..]);
            out
        }
        None if comment.trim().is_empty() => segment,
        None => format!("{} {segment}", comment.trim_end()),
    }
}

/// RFC 4648 base32, lower-case alphabet, padded (`base32 -d` of coreutils reads it after
/// `tr a-z A-Z`). Hand-written: this crate depends on serde and thiserror only.
mod base32 {
    const ALPHABET: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";

    pub fn encode(data: &[u8]) -> String {
        let mut out = String::with_capacity(data.len().div_ceil(5) * 8);
        for chunk in data.chunks(5) {
            let mut block = [0u8; 5];
            block[..chunk.len()].copy_from_slice(chunk);
            let bits = block.iter().fold(0u64, |acc, &b| (acc << 8) | u64::from(b));
            let chars = (chunk.len() * 8).div_ceil(5);
            for i in 0..8 {
                if i < chars {
                    out.push(ALPHABET[((bits >> (35 - 5 * i)) & 31) as usize] as char);
                } else {
                    out.push('=');
                }
            }
        }
        out
    }

    /// Either case, with or without padding; `None` on any other character.
    pub fn decode(text: &str) -> Option<Vec<u8>> {
        let text = text.trim_end_matches('=');
        let mut out = Vec::with_capacity(text.len() * 5 / 8);
        let (mut acc, mut nbits) = (0u32, 0u32);
        for c in text.bytes() {
            let v = match c.to_ascii_lowercase() {
                c @ b'a'..=b'z' => c - b'a',
                c @ b'2'..=b'7' => c - b'2' + 26,
                _ => return None,
            };
            acc = (acc << 5) | u32::from(v);
            nbits += 5;
            if nbits >= 8 {
                nbits -= 8;
                out.push((acc >> nbits) as u8);
                acc &= (1 << nbits) - 1;
            }
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_marker_ahead_of_ours_does_not_hide_our_tag() {
        let tag = JobTag::default();
        for comment in [
            "fabric-check/v1",
            "x fabric-check/v1 {broken",
            "fabric-check/v1 fabric-check/v1",
            "fabric-check/v1 b32:",
            "fabric-check/v1 b32:zz\u{e9} fabric-check/v1 {",
            "fabric-check/v1 {`a` \u{fc}} x",
            "fabric-check/v1 {[}]\u{fc}",
            "fabric-check/v1 b32:mzxw6=== tail",
        ] {
            let spliced = splice(comment, &tag);
            let back = extract(&spliced)
                .expect("a segment")
                .unwrap_or_else(|e| panic!("{comment:?} -> {spliced:?}: {e}"));
            assert_eq!(back.verdict, tag.verdict, "{spliced:?}");
            let again = splice(&spliced, &tag);
            assert_eq!(again, spliced, "a second splice replaces ours in place");
        }
    }

    fn node(v: Verdict) -> NodeResult {
        NodeResult {
            verdict: v,
            checks: vec![],
            probe_ms: Some(3),
            drained: false,
        }
    }

    fn tag_with(nodes: &[(&str, Verdict)]) -> JobTag {
        let mut t = JobTag {
            nnodes: nodes.len() as u32,
            nodes: nodes
                .iter()
                .map(|(n, v)| (n.to_string(), node(*v)))
                .collect(),
            ..JobTag::default()
        };
        t.recount();
        t
    }

    #[test]
    fn the_job_verdict_is_the_worst_node_verdict() {
        let t = tag_with(&[
            ("n1", Verdict::Pass),
            ("n2", Verdict::Fail),
            ("n3", Verdict::Warn),
        ]);
        assert_eq!(t.verdict, Some(Verdict::Fail));
        assert_eq!(t.counts[&Verdict::Pass], 1);
        assert_eq!(t.counts[&Verdict::Fail], 1);
    }

    #[test]
    fn a_missing_node_counts_as_an_error() {
        let mut t = tag_with(&[("n1", Verdict::Pass)]);
        t.missing = vec!["n2".into()];
        t.recount();
        assert_eq!(t.verdict, Some(Verdict::Error));
    }

    #[test]
    fn splice_keeps_a_foreign_prefix_and_suffix() {
        let t = tag_with(&[("n1", Verdict::Pass)]);
        let first = splice("JS1:abcd", &t);
        assert!(first.starts_with("JS1:abcd fabric-check/v1 {"), "{first}");
        let with_suffix = format!("{first} other:xyz");
        let mut t2 = t.clone();
        t2.notes.push("second write".into());
        let second = splice(&with_suffix, &t2);
        assert!(second.starts_with("JS1:abcd fabric-check/v1 {"), "{second}");
        assert!(second.ends_with(" other:xyz"), "{second}");
        assert_eq!(second.matches(MARKER).count(), 1);
        assert_eq!(extract(&second).unwrap().unwrap(), t2);
    }

    #[test]
    fn splice_into_an_empty_comment_is_just_the_segment() {
        let t = tag_with(&[("n1", Verdict::Warn)]);
        let s = splice("", &t);
        assert!(s.starts_with(MARKER));
        assert_eq!(extract(&s).unwrap().unwrap().verdict, Some(Verdict::Warn));
    }

    #[test]
    fn a_broken_segment_is_reported_and_replaced_without_touching_the_rest() {
        let comment = "JS1:aa fabric-check/v1 {broken tail:zz";
        assert!(extract(comment).unwrap().is_err());
        let t = tag_with(&[("n1", Verdict::Pass)]);
        let s = splice(comment, &t);
        assert!(s.starts_with("JS1:aa fabric-check/v1 {"));
        assert!(s.ends_with(" tail:zz"), "{s}");
    }

    #[test]
    fn a_tag_mangled_by_sacctmgr_quoting_is_still_read_and_replaced_in_place() {
        let t = tag_with(&[("n1", Verdict::Pass), ("n2", Verdict::Fail)]);
        let mangled = splice("JS1:aa", &t).replace('"', "`") + " tail:zz";
        assert_eq!(extract(&mangled).unwrap().unwrap(), t);
        let again = splice(&mangled, &t);
        assert_eq!(again, format!("{} tail:zz", splice("JS1:aa", &t)));
    }

    #[test]
    fn a_comment_without_our_marker_has_no_tag() {
        assert!(extract("JS1:abc").is_none());
    }

    #[test]
    fn a_huge_job_tag_stays_within_bound_and_keeps_failing_nodes() {
        let mut nodes: Vec<(String, Verdict)> = (0..2000)
            .map(|i| (format!("gpu{i:04}"), Verdict::Pass))
            .collect();
        nodes.push(("gpu9999".into(), Verdict::Fail));
        let refs: Vec<(&str, Verdict)> = nodes.iter().map(|(n, v)| (n.as_str(), *v)).collect();
        let t = tag_with(&refs);
        let json = t.bounded();
        assert!(json.len() <= MAX_TAG_BYTES, "{}", json.len());
        let back: JobTag = serde_json::from_str(&json).unwrap();
        assert!(back.truncated);
        assert_eq!(back.counts[&Verdict::Pass], 2000);
        assert_eq!(back.nodes["gpu9999"].verdict, Verdict::Fail);
        assert_eq!(back.nodes["gpu[0000-1999]"].verdict, Verdict::Pass);
        assert_eq!(back.result_of("gpu0042").unwrap().verdict, Verdict::Pass);
        assert_eq!(back.verdict, Some(Verdict::Fail));
    }

    /// Every node the tag names for `verdict`, hostlist keys expanded.
    fn named(map: &BTreeMap<String, NodeResult>, verdict: Verdict) -> Vec<String> {
        let mut out: Vec<String> = map
            .iter()
            .filter(|(_, r)| r.verdict == verdict)
            .flat_map(|(k, _)| names_of(k))
            .collect();
        out.sort();
        out
    }

    fn expanded(list: &[String]) -> Vec<String> {
        let mut out: Vec<String> = list.iter().flat_map(|k| names_of(k)).collect();
        out.sort();
        out
    }

    /// A `n`-node job: nodes `fail_every`th fail with a check of their own kind, the last
    /// `unreachable` never reported (missing, and missing from the collective).
    fn big_job(n: u32, fail_every: u32, unreachable: u32) -> JobTag {
        let mut t = JobTag {
            nnodes: n,
            mode: Some("full".into()),
            ..JobTag::default()
        };
        for i in 1..=n - unreachable {
            let failing = i % fail_every == 0;
            t.nodes.insert(
                format!("gpu{i:04}"),
                NodeResult {
                    verdict: if failing {
                        Verdict::Fail
                    } else {
                        Verdict::Pass
                    },
                    checks: if failing {
                        vec![format!("ib.check_{}", i % 3)]
                    } else {
                        vec![]
                    },
                    probe_ms: Some(u64::from(i % 97)),
                    drained: false,
                },
            );
        }
        t.missing = (n - unreachable + 1..=n)
            .map(|i| format!("gpu{i:04}"))
            .collect();
        for i in (1..=n).step_by(7) {
            t.earlier.insert(format!("gpu{i:04}"), node(Verdict::Fail));
        }
        t.collective = Some(CollectiveSummary {
            verdict: Some(Verdict::Error),
            missing: t.missing.clone(),
            outliers: (1..=40).map(|i| format!("gpu{:04}", i * 13)).collect(),
            ..CollectiveSummary::default()
        });
        t.notes = (0..30)
            .map(|i| format!("gpu{i:04}: probe took long"))
            .collect();
        t.recount();
        t
    }

    fn assert_bounded_keeps_failing(t: &JobTag, limit: usize) -> JobTag {
        let json = t.bounded_to(limit);
        assert!(json.len() <= limit, "{} bytes > {limit}", json.len());
        let back: JobTag = serde_json::from_str(&json).unwrap();
        assert!(back.truncated);
        assert_eq!(back.counts, t.counts, "counts are always kept");
        assert_eq!(back.verdict, t.verdict);
        for v in [Verdict::Fail, Verdict::Error, Verdict::Warn] {
            assert_eq!(named(&back.nodes, v), named(&t.nodes, v), "{v:?} nodes");
            assert_eq!(
                named(&back.earlier, v),
                named(&t.earlier, v),
                "earlier {v:?}"
            );
        }
        assert_eq!(expanded(&back.missing), expanded(&t.missing));
        let (c, c0) = (
            back.collective.as_ref().unwrap(),
            t.collective.as_ref().unwrap(),
        );
        assert_eq!(expanded(&c.missing), expanded(&c0.missing));
        assert_eq!(expanded(&c.outliers), expanded(&c0.outliers));
        back
    }

    #[test]
    fn a_600_node_tag_with_unreachable_followers_stays_within_the_bound_naming_every_failing_and_missing_node()
     {
        let t = big_job(600, 11, 150);
        assert!(serde_json::to_string(&t).unwrap().len() > 3 * MAX_TAG_BYTES);
        let back = assert_bounded_keeps_failing(&t, MAX_TAG_BYTES);
        assert_eq!(back.result_of("gpu0001").unwrap().verdict, Verdict::Pass);
        assert_bounded_keeps_failing(&t, MAX_DB_JSON_BYTES);
    }

    #[test]
    fn a_1024_node_tag_summarises_passing_nodes_as_a_hostlist_and_keeps_every_failing_node() {
        let t = big_job(1024, 37, 3);
        let back = assert_bounded_keeps_failing(&t, MAX_TAG_BYTES);
        let pass_key = back
            .nodes
            .iter()
            .find(|(_, r)| r.verdict == Verdict::Pass)
            .map(|(k, _)| k.clone())
            .unwrap();
        assert!(pass_key.starts_with("gpu[0001-0036,0038-"), "{pass_key}");
        assert_bounded_keeps_failing(&t, MAX_DB_JSON_BYTES);
        let segment = segment(&t, Form::Database);
        assert!(
            segment.len() - MARKER.len() <= MAX_TAG_BYTES,
            "{}",
            segment.len()
        );
    }

    #[test]
    fn failing_nodes_keep_their_checks_before_passing_detail_is_dropped() {
        let mut t = big_job(300, 10, 0);
        t.earlier.clear();
        t.collective = None;
        t.notes.clear();
        let back: JobTag = serde_json::from_str(&t.bounded()).unwrap();
        assert_eq!(back.nodes["gpu0010"].checks, vec!["ib.check_1".to_string()]);
        assert!(
            back.nodes["gpu0010"].probe_ms.is_some(),
            "timings go second"
        );
        assert_eq!(named(&back.nodes, Verdict::Pass).len(), 270);
    }

    /// What `sacctmgr -i modify job ... set AdminComment=` of Slurm 22.05 stores: every `"` and
    /// `'` a backtick (`strip_quotes`), and everything lower case (`make_lower`).
    fn through_sacctmgr_2205(value: &str) -> String {
        value.replace(['"', '\''], "`").to_lowercase()
    }

    #[test]
    fn the_database_form_survives_sacctmgr_and_a_note_with_both_quotes_round_trips_in_original_case()
     {
        let mut t = tag_with(&[("GPU-A1", Verdict::Pass), ("GPU-B2", Verdict::Fail)]);
        t.notes
            .push("GPU-B2: probe panicked: thread 'main' said \"No Port\" `x`".into());
        let written = splice_as("js1:aa", &t, Form::Database);
        assert!(
            written.starts_with("js1:aa fabric-check/v1 b32:"),
            "{written}"
        );
        let stored = through_sacctmgr_2205(&written);
        assert_eq!(
            stored, written,
            "nothing in the database form is changed by sacctmgr"
        );
        assert_eq!(extract(&stored).unwrap().unwrap(), t);
        let value: serde_json::Value = extract_as(&stored).unwrap().unwrap();
        assert_eq!(value["notes"][0], t.notes[0].as_str());
        // A later live write replaces it in place, and a database write replaces that.
        let live = splice(&format!("{stored} tail:zz"), &t);
        assert_eq!(live, format!("js1:aa {MARKER}{} tail:zz", t.bounded()));
        assert_eq!(
            splice_as(&live, &t, Form::Database),
            format!("{written} tail:zz")
        );
    }

    #[test]
    fn the_live_form_is_one_json_object_a_standard_parser_reads_to_the_tag() {
        let mut t = tag_with(&[("Node-1", Verdict::Warn)]);
        t.notes.push("it's \"quoted\"".into());
        let s = splice("JS1:Ab", &t);
        let json = &s[s.find(MARKER).unwrap() + MARKER.len()..];
        let value: serde_json::Value = serde_json::from_str(json).unwrap();
        assert_eq!(serde_json::from_value::<JobTag>(value).unwrap(), t);
    }

    #[test]
    fn a_mangled_tag_whose_note_had_an_apostrophe_is_read_and_replaced_without_leaving_its_tail() {
        let mut t = tag_with(&[("n1", Verdict::Fail)]);
        t.notes
            .push("n1: thread 'main' panicked at probe.rs".into());
        let mangled = format!("JS1:aa {} tail:zz", through_sacctmgr_2205(&splice("", &t)));
        assert_eq!(extract(&mangled).unwrap().unwrap(), t);
        // Unreadable beyond repair (a note with `', ` in it): the whole segment is replaced.
        let broken = "JS1:aa fabric-check/v1 {`verdict`:`fail`,`notes`:[`a `b`, c d`]} tail:zz";
        assert!(extract(broken).unwrap().is_err());
        let fixed = splice(broken, &t);
        assert_eq!(fixed, format!("JS1:aa {MARKER}{} tail:zz", t.bounded()));
    }

    #[test]
    fn base32_matches_rfc_4648_in_lower_case() {
        for (plain, coded) in [
            ("", ""),
            ("f", "my======"),
            ("fo", "mzxq===="),
            ("foo", "mzxw6==="),
            ("foob", "mzxw6yq="),
            ("fooba", "mzxw6ytb"),
            ("foobar", "mzxw6ytboi======"),
        ] {
            assert_eq!(base32::encode(plain.as_bytes()), coded);
            assert_eq!(base32::decode(coded).unwrap(), plain.as_bytes());
            assert_eq!(
                base32::decode(&coded.to_uppercase()).unwrap(),
                plain.as_bytes()
            );
        }
        assert_eq!(base32::decode("mzx`"), None);
    }

    /// A segment in the form the reader repairs (sacctmgr's backticks), saying `pass`.
    const FORGED: &str = "x fabric-check/v1 {`verdict`:`pass`,`nnodes`:1,`counts`:{`pass`:1},`nodes`:{`n9`:{`verdict`:`pass`}}}";

    fn roots_fail_with(job: impl FnOnce(&mut JobTag)) -> JobTag {
        let mut t = tag_with(&[("n1", Verdict::Fail), ("n2", Verdict::Pass)]);
        job(&mut t);
        t
    }

    #[test]
    fn a_forged_segment_in_a_jobs_message_is_never_read_in_place_of_roots_verdict() {
        let t = roots_fail_with(|t| {
            t.job_reported.slow.push(SlowClaim {
                node: "n2".into(),
                step: 1,
                message: Some(FORGED.into()),
            });
            // Numbers that once made root's own segment unreadable.
            t.run = Some(RunSummary {
                ckpt_total_s: f64::INFINITY,
                duration_s: f64::NAN,
                ..RunSummary::default()
            });
        });
        for form in [Form::Live, Form::Database] {
            let comment = splice_as("JS1:aa", &t, form);
            assert_eq!(comment.matches(MARKER).count(), 1, "{comment}");
            let back = extract(&comment).unwrap().expect("root's segment decodes");
            assert_eq!(back.verdict, Some(Verdict::Fail));
            assert_eq!(back.result_of("n1").unwrap().verdict, Verdict::Fail);
            assert!(back.result_of("n9").is_none());
            let msg = back.job_reported.slow[0].message.clone().unwrap();
            assert!(!msg.contains(MARKER.trim_end()), "{msg}");
        }
    }

    #[test]
    fn a_marker_inside_an_unreadable_segment_of_ours_is_not_a_segment_of_its_own() {
        let comment = format!(
            "JS1:aa fabric-check/v1 {{\"verdict\":\"fail\",\"run\":{{\"duration_s\":null}},\"notes\":[\"{FORGED}\"]}} tail:zz"
        );
        let found = extract(&comment).expect("a segment");
        assert!(found.is_err(), "the forgery was read: {found:?}");
        let t = roots_fail_with(|_| {});
        let fixed = splice(&comment, &t);
        assert_eq!(fixed, format!("JS1:aa {MARKER}{} tail:zz", t.bounded()));
    }

    #[test]
    fn non_finite_and_huge_numbers_are_clamped_so_the_tag_always_decodes() {
        let t = roots_fail_with(|t| {
            t.run = Some(RunSummary {
                step_p50_s: Some(f64::NAN),
                step_max_s: Some(f64::INFINITY),
                ckpt_total_s: f64::INFINITY,
                ckpt_max_s: -f64::INFINITY,
                restore_total_s: 1e300,
                duration_s: f64::NAN,
                ..RunSummary::default()
            });
            t.job_reported.steps = Some(CollectiveSummary {
                busbw_gb_s: Some(f64::INFINITY),
                small_time_us: Some(f64::NAN),
                ..CollectiveSummary::default()
            });
        });
        let back: JobTag = serde_json::from_str(&t.bounded()).expect("decodes");
        let run = back.run.unwrap();
        assert_eq!(run.ckpt_total_s, 0.0);
        assert_eq!(run.restore_total_s, MAX_SECONDS);
        assert_eq!(run.step_max_s, Some(0.0));
        assert_eq!(back.job_reported.steps.unwrap().busbw_gb_s, None);
        assert_eq!(back.verdict, Some(Verdict::Fail));
    }

    #[test]
    fn an_endless_job_report_is_shrunk_before_any_of_roots_verdicts_or_counter_rises() {
        let nodes: Vec<(String, Verdict)> = (1..=40)
            .map(|i| {
                let v = if i % 5 == 0 {
                    Verdict::Fail
                } else {
                    Verdict::Pass
                };
                (format!("n{i}"), v)
            })
            .collect();
        let refs: Vec<(&str, Verdict)> = nodes.iter().map(|(n, v)| (n.as_str(), *v)).collect();
        let mut t = tag_with(&refs);
        t.during = (1..=6)
            .map(|i| DuringJob {
                node: format!("n{i}"),
                rises: [("mlx5_0/1/link_downed".to_owned(), 1)].into(),
                verdict: Verdict::Fail,
                watch: Vec::new(),
            })
            .collect();
        let root_only = serde_json::from_str::<JobTag>(&t.bounded()).unwrap();
        t.job_reported.steps = Some(CollectiveSummary {
            verdict: Some(Verdict::Fail),
            outliers: (0..20_000).map(|i| format!("slow{i}")).collect(),
            missing: (0..20_000).map(|i| format!("gone{i}")).collect(),
            ..CollectiveSummary::default()
        });
        t.job_reported.slow = (0..5_000)
            .map(|i| SlowClaim {
                node: format!("n{i}"),
                step: i,
                message: Some("m".repeat(500)),
            })
            .collect();
        for limit in [MAX_TAG_BYTES, MAX_DB_JSON_BYTES] {
            let json = t.bounded_to(limit);
            assert!(json.len() <= limit, "{} > {limit}", json.len());
            let back: JobTag = serde_json::from_str(&json).unwrap();
            assert_eq!(back.verdict, Some(Verdict::Fail));
            assert_eq!(back.counts, t.counts);
            for (n, v) in &refs {
                assert_eq!(back.result_of(n).map(|r| r.verdict), Some(*v), "{n}");
            }
            assert_eq!(
                back.during, root_only.during,
                "root's counter rises are whole"
            );
        }
    }

    /// A small seeded generator (xorshift), so the properties below need no extra crate.
    struct Gen(u64);

    impl Gen {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n.max(1)
        }
        /// Any number a job could make the summary hold, non-finite ones included.
        fn number(&mut self) -> f64 {
            match self.below(6) {
                0 => f64::INFINITY,
                1 => f64::NAN,
                2 => -f64::MAX,
                3 => f64::MAX,
                4 => f64::from_bits(self.next()),
                _ => self.below(1_000_000) as f64 / 7.0,
            }
        }
        /// Text with markers, backticks, quotes, control bytes and any characters.
        fn text(&mut self, max: u64) -> String {
            let len = self.below(max);
            let mut out = String::new();
            while (out.len() as u64) < len {
                match self.below(8) {
                    0 => out.push_str(FORGED),
                    1 => out.push_str("\"}`{'\\"),
                    2 => out.push(char::from(self.below(32) as u8)),
                    3 => out.push_str(MARKER),
                    _ => out.push(char::from_u32(self.below(0x3000) as u32).unwrap_or('?')),
                }
            }
            out
        }
    }

    /// Root's part of a tag: `n` nodes, some failing, some missing, some with counter rises.
    fn roots_part(g: &mut Gen) -> (JobTag, Vec<String>) {
        let n = 1 + g.below(48) as u32;
        let mut t = JobTag {
            nnodes: n,
            mode: Some("full".into()),
            probed_at: Some(1_700_000_000),
            ..JobTag::default()
        };
        let mut rises = Vec::new();
        for i in 1..=n {
            let name = format!("gpu{i:03}");
            match g.below(10) {
                0 => t.missing.push(name),
                1 | 2 => {
                    t.nodes.insert(
                        name.clone(),
                        NodeResult {
                            verdict: Verdict::Fail,
                            checks: vec!["ib.port_state".into()],
                            probe_ms: Some(g.below(900)),
                            drained: g.below(2) == 0,
                        },
                    );
                    rises.push(name);
                }
                _ => {
                    t.nodes.insert(name, node(Verdict::Pass));
                }
            }
        }
        t.during = rises
            .iter()
            .map(|n| DuringJob {
                node: n.clone(),
                rises: [("mlx5_0/1/link_downed".to_owned(), 1 + g.below(5))].into(),
                verdict: Verdict::Fail,
                watch: Vec::new(),
            })
            .collect();
        t.recount();
        (t, rises)
    }

    fn jobs_part(g: &mut Gen, t: &mut JobTag) {
        let names =
            |g: &mut Gen, n: u64| -> Vec<String> { (0..g.below(n)).map(|_| g.text(80)).collect() };
        t.job_reported.steps = Some(CollectiveSummary {
            verdict: Some(Verdict::Pass),
            busbw_gb_s: Some(g.number()),
            small_time_us: Some(g.number()),
            wrong: g.next(),
            outliers: names(g, 3000),
            missing: names(g, 300),
        });
        t.job_reported.slow = (0..g.below(400))
            .map(|_| SlowClaim {
                node: g.text(100),
                step: g.next() as u32,
                message: Some(g.text(2000)),
            })
            .collect();
        t.run = Some(RunSummary {
            steps: g.next(),
            step_p50_s: Some(g.number()),
            step_p95_s: Some(g.number()),
            step_max_s: Some(g.number()),
            ckpt_n: g.next(),
            ckpt_total_s: g.number(),
            ckpt_max_s: g.number(),
            restore_total_s: g.number(),
            duration_s: g.number(),
            outcome: g.text(300),
            ..RunSummary::default()
        });
    }

    #[test]
    fn whatever_a_job_writes_the_stored_tag_fits_decodes_and_holds_roots_verdict_for_every_node() {
        for seed in 1..=300u64 {
            let mut g = Gen(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
            let (root, rises) = roots_part(&mut g);
            let mut t = root.clone();
            jobs_part(&mut g, &mut t);
            for form in [Form::Live, Form::Database] {
                let comment = splice_as("JS1:aa", &t, form);
                let segment = &comment[comment.find(MARKER).unwrap() + MARKER.len()..];
                assert!(
                    segment.len() <= MAX_TAG_BYTES,
                    "seed {seed}: {} bytes",
                    segment.len()
                );
                assert_eq!(comment.matches(MARKER).count(), 1, "seed {seed}: {comment}");
                let back = extract(&comment)
                    .unwrap()
                    .unwrap_or_else(|e| panic!("seed {seed} {form:?}: {e}: {comment}"));
                assert_eq!(back.verdict, root.verdict, "seed {seed}");
                assert_eq!(back.counts, root.counts, "seed {seed}");
                for (n, r) in &root.nodes {
                    assert_eq!(
                        back.result_of(n).map(|b| b.verdict),
                        Some(r.verdict),
                        "seed {seed}: {n}"
                    );
                }
                assert_eq!(
                    expanded(&back.missing),
                    expanded(&root.missing),
                    "seed {seed}"
                );
                let named: Vec<String> =
                    back.during.iter().flat_map(|d| names_of(&d.node)).collect();
                for n in &rises {
                    assert!(named.contains(n), "seed {seed}: {n}'s rise is gone");
                }
            }
        }
    }

    #[test]
    fn the_run_summary_round_trips() {
        let mut t = tag_with(&[("n1", Verdict::Pass)]);
        t.run = Some(RunSummary {
            steps: 10,
            step_p50_s: Some(1.5),
            ckpt_n: 2,
            ckpt_total_s: 4.0,
            ckpt_max_s: 3.0,
            outcome: "accepted".into(),
            accepted: true,
            on_time: true,
            ..RunSummary::default()
        });
        let s = splice("", &t);
        assert_eq!(extract(&s).unwrap().unwrap(), t);
    }

    #[test]
    fn fabric_faults_and_slow_step_events_are_carried_and_a_summary_without_them_still_decodes() {
        let mut t = tag_with(&[("n1", Verdict::Pass)]);
        t.run = Some(RunSummary {
            steps: 10,
            outcome: "accepted".into(),
            fabric_faults: Some(2),
            slow_step_events: Some(1),
            ..RunSummary::default()
        });
        let s = splice("", &t);
        assert!(s.contains(r#""fabric_faults":2"#), "{s}");
        assert!(s.contains(r#""slow_step_events":1"#), "{s}");
        assert_eq!(extract(&s).unwrap().unwrap(), t);
        let old = r#"{"steps":3,"ckpt_n":0,"ckpt_total_s":0.0,"ckpt_max_s":0.0,"retries":0,"requeues":0,"duration_s":1.0,"outcome":"accepted","accepted":true,"on_time":true}"#;
        let back: RunSummary = serde_json::from_str(old).unwrap();
        assert_eq!((back.fabric_faults, back.slow_step_events), (None, None));
        let quiet = serde_json::to_string(&back).unwrap();
        assert!(
            !quiet.contains("fabric_faults") && !quiet.contains("slow_step"),
            "{quiet}"
        );
    }

    /// A comment of `bytes` of `fabric-check/v1 ` markers, each followed by `follow`, then
    /// `ours`.
    fn markers_then(follow: &str, bytes: usize, ours: &str) -> String {
        let unit = format!("{MARKER}{follow}");
        format!("{} {ours}", unit.repeat(bytes / unit.len()))
    }

    #[test]
    fn a_megabyte_of_markers_is_read_through_to_our_segment_and_spliced_in_place() {
        // Every marker used to copy or rescan the rest of the comment: a megabyte of these took
        // minutes. Each shape starts a segment that never decodes.
        let t = tag_with(&[("n1", Verdict::Pass), ("n2", Verdict::Fail)]);
        let newer = tag_with(&[("n1", Verdict::Fail), ("n2", Verdict::Fail)]);
        for follow in [
            "{",
            "{`",
            "",
            "b32:",
            "{\"a\":\"",
            "{\"a\":[",
            "[`{",
            "{`a`:`",
        ] {
            for form in [Form::Live, Form::Database] {
                let comment = markers_then(follow, 1 << 20, &segment(&t, form));
                assert!(comment.len() >= 1 << 20);
                let found = extract(&comment).expect("a segment");
                assert_eq!(found.unwrap(), t, "{follow:?} {form:?}");
                let spliced = splice_as(&comment, &newer, form);
                let ours_at = comment.len() - segment(&t, form).len();
                assert!(
                    spliced[..ours_at] == comment[..ours_at],
                    "{follow:?}: the markers are kept as they were"
                );
                assert_eq!(spliced[ours_at..], segment(&newer, form), "{follow:?}");
                assert_eq!(extract(&spliced).unwrap().unwrap(), newer);
            }
            // None of them decodes: the first is reported unreadable and replaced.
            let comment = markers_then(follow, 1 << 20, "JS1:aa");
            assert!(extract(&comment).expect("a segment").is_err(), "{follow:?}");
            let spliced = splice(&comment, &t);
            assert_eq!(extract(&spliced).unwrap().unwrap(), t, "{follow:?}");
            assert!(spliced.ends_with(" JS1:aa"), "{follow:?}");
        }
    }

    #[test]
    fn the_reader_finds_the_segment_and_extent_the_old_reader_found_in_every_generated_comment() {
        let t = tag_with(&[("n1", Verdict::Pass), ("n2", Verdict::Warn)]);
        let live = segment(&t, Form::Live);
        let pieces = [
            MARKER.to_owned(),
            MARKER.to_owned(),
            live.clone(),
            live.replace('"', "`"),
            live[..live.len() / 2].to_owned(),
            segment(&t, Form::Database),
            DB_FORM_PREFIX.to_owned(),
            "mzxw6===".to_owned(),
            "{".into(),
            "}".into(),
            "[".into(),
            "]".into(),
            "`".into(),
            "\"".into(),
            "'".into(),
            "\\".into(),
            ":".into(),
            ",".into(),
            " ".into(),
            "\n".into(),
            "{`".into(),
            "`:`".into(),
            "{\"a\":".into(),
            "{\"mode\":\"quick\"}".into(),
            "JS1:aa".into(),
            "1".into(),
            "\u{e9}".into(),
            "\u{1f600}".into(),
        ];
        let mut g = Gen(0x5eed_1e55_f00d_cafe);
        for case in 0..20_000 {
            let n = 1 + g.below(24);
            let comment: String = (0..n)
                .map(|_| pieces[g.below(pieces.len() as u64) as usize].as_str())
                .collect();
            let new = locate_as::<JobTag>(&comment);
            let old = quadratic::locate_as::<JobTag>(&comment);
            match (&new, &old) {
                (None, None) => {}
                (Some((r, a)), Some((s, b))) => {
                    assert_eq!(r, s, "case {case}: {comment:?}");
                    match (a, b) {
                        (Ok(a), Ok(b)) => assert_eq!(a, b, "case {case}: {comment:?}"),
                        (Err(a), Err(b)) => {
                            assert_eq!(a.to_string(), b.to_string(), "case {case}: {comment:?}")
                        }
                        _ => panic!("case {case}: {comment:?}: {a:?} against {b:?}"),
                    }
                }
                _ => panic!("case {case}: {comment:?}: {new:?} against {old:?}"),
            }
        }
    }
}
