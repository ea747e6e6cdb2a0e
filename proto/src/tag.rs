//! The job tag: one `fabric-check/v1 {json}` segment inside a job's `AdminComment`.
//!
//! The field is shared with other tools (Princeton's jobstats writes `JS1:...`), so the tag is a
//! *segment*: the marker [`MARKER`] followed by one compact JSON object. [`splice`] replaces our
//! segment in place or appends it after a space, keeping every other byte; [`extract`] finds and
//! decodes it. The JSON is bounded to [`MAX_TAG_BYTES`] by [`JobTag::bounded`], which drops
//! per-node detail before anything else (counts and failing nodes are always kept).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The segment marker, followed by one space and the JSON object.
pub const MARKER: &str = "fabric-check/v1 ";

/// Upper bound of the JSON part of the segment, in bytes.
pub const MAX_TAG_BYTES: usize = 4096;

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

/// Counter rises seen between prolog and epilog on one node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DuringJob {
    /// The node.
    pub node: String,
    /// `"<device>/<port>/<counter>"` → increase during the job.
    pub rises: BTreeMap<String, u64>,
    /// Worst verdict of the epilog's judgement of those rises.
    pub verdict: Verdict,
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
    /// Per-node results; dropped for passing nodes when the tag would exceed its bound.
    #[serde(default)]
    pub nodes: BTreeMap<String, NodeResult>,
    /// True when per-node results of passing nodes were dropped to respect [`MAX_TAG_BYTES`].
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
    /// Non-passing node results of earlier attempts of this job (before a requeue).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub earlier: BTreeMap<String, NodeResult>,
    /// Nodes whose verdict never reached the writer (rendezvous timeout).
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

    /// Compact JSON within [`MAX_TAG_BYTES`]: passing nodes' detail goes first, then notes and
    /// counter detail, then other nodes beyond the first 32 by name. Backticks in notes become
    /// quotes' stand-ins elsewhere (see [`extract`]), so notes never carry them.
    pub fn bounded(&self) -> String {
        let mut tag = self.clone();
        for n in &mut tag.notes {
            *n = n.replace('`', "'");
        }
        let mut json = serde_json::to_string(&tag).unwrap_or_default();
        if json.len() <= MAX_TAG_BYTES {
            return json;
        }
        tag.truncated = true;
        tag.nodes.retain(|_, r| r.verdict != Verdict::Pass);
        json = serde_json::to_string(&tag).unwrap_or_default();
        if json.len() <= MAX_TAG_BYTES {
            return json;
        }
        tag.notes.truncate(2);
        for d in &mut tag.during {
            d.rises = d
                .rises
                .iter()
                .take(4)
                .map(|(k, v)| (k.clone(), *v))
                .collect();
        }
        tag.during.truncate(8);
        tag.job_reported.slow.truncate(4);
        json = serde_json::to_string(&tag).unwrap_or_default();
        while json.len() > MAX_TAG_BYTES && !tag.nodes.is_empty() {
            let keep = tag.nodes.len() / 2;
            tag.nodes = tag.nodes.into_iter().take(keep).collect();
            json = serde_json::to_string(&tag).unwrap_or_default();
        }
        json
    }
}

/// Finds our segment in a comment: the byte range of marker + JSON, and the decoded tag.
///
/// The first occurrence of the marker that decodes wins; when none decodes, the first one is
/// reported unreadable. So a comment where another tool (or a user's text copied into a field)
/// left a bare or broken marker ahead of ours still yields our tag, and a splice replaces ours.
fn locate(comment: &str) -> Option<(std::ops::Range<usize>, Result<JobTag, TagDecodeError>)> {
    let mut first_unreadable = None;
    for (start, _) in comment.match_indices(MARKER) {
        let found = locate_at(comment, start);
        if found.1.is_ok() {
            return Some(found);
        }
        first_unreadable.get_or_insert(found);
    }
    first_unreadable
}

/// The segment whose marker starts at byte `start`.
fn locate_at(
    comment: &str,
    start: usize,
) -> (std::ops::Range<usize>, Result<JobTag, TagDecodeError>) {
    let json_start = start + MARKER.len();
    let rest = &comment[json_start..];
    // `sacctmgr modify job ... set AdminComment=` stores every `"` as a backtick; our JSON never
    // contains backticks itself, so they are read back as quotes (same length, same offsets).
    let rest = if rest.starts_with("{`") {
        std::borrow::Cow::Owned(rest.replace('`', "\""))
    } else {
        std::borrow::Cow::Borrowed(rest)
    };
    let mut stream = serde_json::Deserializer::from_str(&rest).into_iter::<JobTag>();
    match stream.next() {
        Some(Ok(tag)) => (start..json_start + stream.byte_offset(), Ok(tag)),
        Some(Err(e)) => {
            // Unreadable segment: it runs to the next space-separated segment or the end.
            let end = comment[json_start..]
                .find(' ')
                .map_or(comment.len(), |i| json_start + i);
            (start..end, Err(e.into()))
        }
        None => (
            start..comment.len(),
            Err(TagDecodeError(serde::de::Error::custom("empty"))),
        ),
    }
}

/// Decodes the fabric-check segment of an `AdminComment`, if there is one.
pub fn extract(comment: &str) -> Option<Result<JobTag, TagDecodeError>> {
    locate(comment).map(|(_, t)| t)
}

/// Writes `tag` into `comment`: replaces an existing segment in place, else appends it after a
/// space. Every byte outside our segment is kept.
pub fn splice(comment: &str, tag: &JobTag) -> String {
    let segment = format!("{MARKER}{}", tag.bounded());
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
        ] {
            let spliced = splice(comment, &tag);
            let back = extract(&spliced)
                .expect("a segment")
                .expect("our segment decodes");
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
        assert_eq!(back.nodes.keys().collect::<Vec<_>>(), vec!["gpu9999"]);
        assert_eq!(back.verdict, Some(Verdict::Fail));
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
}
