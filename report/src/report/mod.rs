//! `fabric-check report`: Slurm accounting in, cost per accepted run out, fabrics side by side.
//!
//! The pipeline is *parse → accumulate → finish → render*:
//!
//! * [`sacct_json`] streams `sacct --json` output (Slurm 22.05's `dbv0.0.38` layout and the newer
//!   `data_parser` v0.0.40+ layout) one job at a time, on worker threads, without ever holding the
//!   document; [`sacct_text`] reads `sacct -P` (parsable, `|`-separated) text.
//! * Both yield [`JobRecord`]s, normalised so nothing downstream knows which form it came from.
//! * [`aggregate`] folds records into per-group accumulators (mergeable across threads) and turns
//!   them, with a [`crate::cost::CostFile`], into a [`aggregate::Report`].
//! * [`render`] writes the report as a terminal table, markdown, CSV, JSON or a self-contained HTML
//!   page with charts.

pub mod aggregate;
mod decimal;
pub mod ett;
mod pool;
pub use pool::{InputNotes, NAMED, Streamed};
pub mod render;
pub mod sacct_json;
pub mod sacct_text;
pub mod unset;

use serde::Serialize;

use std::borrow::Cow;

use serde::Deserialize;

use fabric_proto::tag::{RunSummary, Verdict};

/// Errors reading accounting data.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// Reading the input failed.
    #[error("cannot read {source_name}: {source}")]
    Io {
        /// The input's name (a path or `-`).
        source_name: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The JSON is not `sacct --json` output or is broken.
    #[error("{source_name}:{}: {message}", line.map_or(format!("byte {offset}"), |l| format!("line {l}")))]
    Json {
        /// The input's name.
        source_name: String,
        /// Byte offset of the offending job (or of the point where reading stopped).
        offset: u64,
        /// That offset as a 1-based line, when the input could be read again to count.
        line: Option<u64>,
        /// What is wrong and what to do.
        message: String,
    },
    /// The `-P` text is not what was expected.
    #[error("{source_name}:{line}: {message}")]
    Text {
        /// The input's name.
        source_name: String,
        /// 1-based line.
        line: u64,
        /// What is wrong and what to do.
        message: String,
    },
}

pub use fabric_proto::job_state::JobState;

/// What the job's `AdminComment` says about fabric-check.
#[derive(Debug, Clone, PartialEq)]
pub enum TagState {
    /// No `fabric-check/v1` segment.
    Absent,
    /// A segment that cannot be decoded (the message says why).
    Unreadable(String),
    /// What the report needs from the decoded tag.
    Present(Box<TagFacts>),
}

/// The parts of a [`fabric_proto::tag::JobTag`] the report uses, decoded without building the per-node
/// map (a tag may list every node of a large job): the verdict, the probe time, the nodes this
/// job's probe drained with their first failing check, and the run summary. Field names are the
/// tag's (the contract in `proto/src/tag/`); a test checks both decoders agree.
#[derive(Debug, Clone, PartialEq)]
pub struct TagFacts {
    /// The job's verdict.
    pub verdict: Option<Verdict>,
    /// Probe time, Unix seconds.
    pub probed_at: Option<u64>,
    /// Nodes in the job.
    pub nnodes: u32,
    /// `(node, first failing check)` of nodes drained because of this job's probe.
    pub drained: Vec<(String, String)>,
    /// The `fabric-run` summary.
    pub run: Option<RunSummary>,
    /// What spare nodes did (`--fabric-check-spares`).
    pub spares: Option<fabric_proto::spares::SparesRecord>,
    /// When the fabric failed on the job's nodes while it ran (the tag's verdict and `during`).
    pub fabric: ett::FabricEvidence,
}

#[derive(Deserialize)]
struct LeanNode<'a> {
    #[serde(default)]
    drained: bool,
    #[serde(default, borrow)]
    checks: Vec<Cow<'a, str>>,
}

/// The drained nodes of the tag's `nodes` map, collected while it streams by.
#[derive(Default)]
struct Drained(Vec<(String, String)>);

impl<'de> Deserialize<'de> for Drained {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Drained;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a map of node results")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut m: A,
            ) -> Result<Drained, A::Error> {
                let mut out = Vec::new();
                while let Some((node, r)) = m.next_entry::<Cow<'de, str>, LeanNode<'de>>()? {
                    if r.drained {
                        let check = r
                            .checks
                            .first()
                            .map_or("unspecified".to_string(), |c| c.to_string());
                        out.push((node.into_owned(), check));
                    }
                }
                Ok(Drained(out))
            }
        }
        d.deserialize_map(V)
    }
}

#[derive(Deserialize)]
struct LeanTag {
    #[serde(default)]
    verdict: Option<Verdict>,
    #[serde(default)]
    probed_at: Option<u64>,
    #[serde(default)]
    nnodes: u32,
    #[serde(default)]
    nodes: Drained,
    #[serde(default)]
    run: Option<RunSummary>,
    #[serde(default)]
    spares: Option<fabric_proto::spares::SparesRecord>,
    #[serde(default)]
    during: Vec<fabric_proto::tag::DuringJob>,
}

/// One job (allocation) from accounting, whatever form it was read from. Times are Unix seconds
/// (0 when unknown).
#[derive(Debug, Clone, PartialEq)]
pub struct JobRecord {
    /// Job id as sacct prints it (`123`, `123_4` for an array task, `123+0` for a het component).
    pub job_id: String,
    /// Partition.
    pub partition: String,
    /// Account.
    pub account: String,
    /// User.
    pub user: String,
    /// Cluster.
    pub cluster: String,
    /// QOS.
    pub qos: String,
    /// Final state.
    pub state: JobState,
    /// Submission time.
    pub submit_s: i64,
    /// Eligible time.
    pub eligible_s: i64,
    /// Start time.
    pub start_s: i64,
    /// End time.
    pub end_s: i64,
    /// Elapsed wall time.
    pub elapsed_s: u64,
    /// Allocated nodes.
    pub nnodes: u32,
    /// Allocated GPUs from the TRES (`gres/gpu`), none when the TRES carry no GPU.
    pub gpus: Option<u32>,
    /// Requeues Slurm counted (`restart_cnt`; the 22.05 JSON and `-P` text lack it: 0).
    pub restarts: u32,
    /// The fabric-check tag.
    pub tag: TagState,
    /// What `fabric-check jobs` shows beside the figures, read only when asked
    /// ([`sacct_text::TextLayout::detail`], [`sacct_json::read_all_detailed`]): the report
    /// does not pay for copying every job's comment.
    pub detail: Option<Box<JobDetail>>,
}

/// The fields of a job that `fabric-check jobs` shows and the report does not need.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JobDetail {
    /// The database's own id (`JobIDRaw`; an array task's own id), empty when not read.
    pub job_id_raw: String,
    /// The state as sacct printed it (`CANCELLED by 0`, `INVALID`).
    pub state: String,
    /// The nodes (`n[1-4]`, `None assigned`).
    pub nodelist: String,
    /// The whole `AdminComment` (every tool's segments).
    pub admin_comment: String,
}

impl JobRecord {
    /// The value of a grouping field.
    pub fn field(&self, by: GroupBy) -> &str {
        match by {
            GroupBy::Partition => &self.partition,
            GroupBy::Account => &self.account,
            GroupBy::User => &self.user,
            GroupBy::Cluster => &self.cluster,
            GroupBy::Qos => &self.qos,
        }
    }
}

/// The sacct field reports are grouped by (one column per value).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum GroupBy {
    /// `Partition` (the default: one partition per fabric).
    Partition,
    /// `Account`.
    Account,
    /// `User`.
    User,
    /// `Cluster`.
    Cluster,
    /// `QOS`.
    Qos,
}

impl std::str::FromStr for GroupBy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "partition" => Ok(Self::Partition),
            "account" => Ok(Self::Account),
            "user" => Ok(Self::User),
            "cluster" => Ok(Self::Cluster),
            "qos" => Ok(Self::Qos),
            _ => Err(format!(
                "cannot group by `{s}`; use partition, account, user, cluster or qos"
            )),
        }
    }
}

/// Decodes an `AdminComment` into a [`TagState`]: the segment is found by
/// [`fabric_proto::tag::extract_as`], so the report and every other reader agree on which segment
/// is the tag, and decoded as the lean view the report needs.
pub fn tag_state(comment: &str) -> TagState {
    match fabric_proto::tag::extract_as::<LeanTag>(comment) {
        None => TagState::Absent,
        Some(Ok(t)) => TagState::Present(Box::new(TagFacts {
            fabric: ett::FabricEvidence::of(t.verdict, &t.during),
            verdict: t.verdict,
            probed_at: t.probed_at,
            nnodes: t.nnodes,
            drained: t.nodes.0,
            run: t.run,
            spares: t.spares,
        })),
        Some(Err(e)) => TagState::Unreadable(format!(
            "the fabric-check/v1 segment of the comment is not valid JSON: {e}"
        )),
    }
}

/// Parses `sacct`'s GPU count out of a TRES string (`cpu=8,gres/gpu=8,node=1`).
pub fn gpus_from_tres(tres: &str) -> Option<u32> {
    let mut typed: Option<u32> = None;
    for item in tres.split(',') {
        let Some((k, v)) = item.split_once('=') else {
            continue;
        };
        if k == "gres/gpu" {
            return v.parse().ok();
        }
        if k.starts_with("gres/gpu:") {
            typed = Some(typed.unwrap_or(0) + v.parse::<u32>().unwrap_or(0));
        }
    }
    typed
}

impl ReportError {
    /// Turns a JSON error's byte offset into a line by counting newlines in the file `path`.
    pub fn with_line_from(self, path: &std::path::Path) -> Self {
        match self {
            Self::Json {
                source_name,
                offset,
                line: None,
                message,
            } => Self::Json {
                line: line_of_offset(path, offset),
                source_name,
                offset,
                message,
            },
            other => other,
        }
    }
}

/// Counts newlines before `offset` in a file, to turn a byte offset into a 1-based line.
pub fn line_of_offset(path: &std::path::Path, offset: u64) -> Option<u64> {
    use std::io::Read;
    let f = std::fs::File::open(path).ok()?;
    let mut r = std::io::BufReader::with_capacity(1 << 20, f.take(offset));
    let mut buf = vec![0u8; 1 << 20];
    let mut lines = 1u64;
    loop {
        let n = r.read(&mut buf).ok()?;
        if n == 0 {
            return Some(lines);
        }
        lines += memchr::memchr_iter(b'\n', &buf[..n]).count() as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_broken_marker_ahead_of_ours_still_reads_our_tag_as_the_writer_does() {
        let tag = fabric_proto::tag::JobTag::default();
        let comment = fabric_proto::tag::splice("x fabric-check/v1 {broken", &tag);
        assert!(
            matches!(tag_state(&comment), TagState::Present(_)),
            "{comment:?}"
        );
        assert!(matches!(
            tag_state("fabric-check/v1 {broken"),
            TagState::Unreadable(_)
        ));
        assert!(matches!(tag_state("JS1:abc"), TagState::Absent));
    }

    #[test]
    fn a_marker_quoted_inside_an_unreadable_tag_of_ours_is_not_read_as_the_tag() {
        // Our segment is unreadable (a null where a number belongs); a note inside it quotes a
        // passing tag in the backtick form of older releases. The report, like the tag module,
        // takes the quote for text of our segment.
        let forged = "x fabric-check/v1 {`verdict`:`pass`,`nnodes`:1,`counts`:{`pass`:1}}";
        let comment = format!(
            "JS1:aa fabric-check/v1 {{\"verdict\":\"fail\",\"run\":{{\"duration_s\":null}},\"notes\":[\"{forged}\"]}} tail:zz"
        );
        assert!(fabric_proto::tag::extract(&comment).unwrap().is_err());
        assert!(
            matches!(tag_state(&comment), TagState::Unreadable(_)),
            "the quoted tag was read: {:?}",
            tag_state(&comment)
        );
    }

    #[test]
    fn the_lean_decoder_agrees_with_the_tag_module() {
        use fabric_proto::tag::{JobTag, NodeResult, extract, splice};
        let mut t = JobTag {
            nnodes: 3,
            probed_at: Some(1_700_000_000),
            ..JobTag::default()
        };
        for (n, v, drained, checks) in [
            ("a1", Verdict::Pass, false, vec![]),
            (
                "a2",
                Verdict::Fail,
                true,
                vec!["roce.pfc".to_string(), "roce.ecn".to_string()],
            ),
            ("a3", Verdict::Fail, true, vec![]),
        ] {
            t.nodes.insert(
                n.into(),
                NodeResult {
                    verdict: v,
                    checks,
                    probe_ms: Some(3),
                    drained,
                },
            );
        }
        t.recount();
        t.run = Some(RunSummary {
            steps: 5,
            step_p50_s: Some(1.5),
            accepted: true,
            on_time: true,
            ..RunSummary::default()
        });
        let comment = splice("JS1:xyz", &t);
        let full = extract(&comment).unwrap().unwrap();
        let TagState::Present(lean) = tag_state(&comment) else {
            panic!("no tag found")
        };
        assert_eq!(lean.verdict, full.verdict);
        assert_eq!(lean.probed_at, full.probed_at);
        assert_eq!(lean.nnodes, full.nnodes);
        assert_eq!(lean.run, full.run);
        let drained: Vec<(String, String)> = full
            .nodes
            .iter()
            .filter(|(_, r)| r.drained)
            .map(|(n, r)| {
                (
                    n.clone(),
                    r.checks
                        .first()
                        .cloned()
                        .unwrap_or_else(|| "unspecified".into()),
                )
            })
            .collect();
        assert_eq!(lean.drained, drained);
        assert!(matches!(
            tag_state("JS1:a fabric-check/v1 {broken"),
            TagState::Unreadable(_)
        ));
        assert_eq!(tag_state("JS1:a"), TagState::Absent);
    }

    #[test]
    fn the_report_reads_the_database_form_as_it_comes_out_of_sacctmgr_of_22_05() {
        use fabric_proto::tag::{Form, JobTag, NodeResult, splice, splice_as};
        let mut t = JobTag {
            nnodes: 2,
            ..JobTag::default()
        };
        t.nodes.insert(
            "GPU-A1".into(),
            NodeResult {
                verdict: Verdict::Fail,
                checks: vec!["ib.port_state".into()],
                probe_ms: None,
                drained: true,
            },
        );
        t.notes.push("thread 'main' said \"no\"".into());
        t.recount();
        let live = tag_state(&splice("js1:x", &t));
        // strip_quotes and make_lower of sacctmgr: the database form holds neither.
        let stored = splice_as("js1:x", &t, Form::Database)
            .replace(['"', '\''], "`")
            .to_lowercase();
        assert_eq!(tag_state(&stored), live);
        let TagState::Present(facts) = live else {
            panic!("no tag")
        };
        assert_eq!(
            facts.drained,
            [("GPU-A1".to_string(), "ib.port_state".to_string())]
        );
        assert!(matches!(
            tag_state("fabric-check/v1 b32:not`base32"),
            TagState::Unreadable(_)
        ));
    }

    #[test]
    fn a_typed_gpu_tres_counts_when_the_plain_one_is_absent() {
        assert_eq!(gpus_from_tres("cpu=8,gres/gpu=8,node=1"), Some(8));
        assert_eq!(
            gpus_from_tres("cpu=8,gres/gpu:h100=4,gres/gpu:a100=2"),
            Some(6)
        );
        assert_eq!(gpus_from_tres("cpu=2,mem=4000M,node=1,billing=2"), None);
    }

    #[test]
    fn a_cancelled_state_with_its_actor_is_cancelled() {
        assert_eq!(JobState::parse("CANCELLED by 1000"), JobState::Cancelled);
        assert_eq!(JobState::parse("NODE_FAIL"), JobState::NodeFail);
        assert!(JobState::parse("TIMEOUT").is_failure());
        assert!(!JobState::parse("CANCELLED").is_failure());
    }

    #[test]
    fn a_tag_written_through_sacctmgr_is_read_and_earlier_attempts_are_not_counted_twice() {
        let comment = "fabric-check/v1 {`verdict`:`pass`,`nnodes`:1,`nodes`:{`n3`:{`verdict`:`pass`}},\
                       `earlier`:{`n4`:{`verdict`:`fail`,`checks`:[`roce.mtu`],`drained`:true}}}";
        let TagState::Present(facts) = tag_state(comment) else {
            panic!("unreadable: {:?}", tag_state(comment));
        };
        // The requeued attempt has its own accounting record (sacct -D) whose tag names the
        // drain; the final record's `earlier` copy must not count it again.
        assert!(facts.drained.is_empty(), "{:?}", facts.drained);
        assert_eq!(facts.verdict, Some(Verdict::Pass));
    }
}
