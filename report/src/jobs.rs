//! `fabric-check jobs`: which jobs ran on a degraded fabric, on which nodes — one row per job
//! from `sacct -X -P` with its tag decoded.
//!
//! The input is `sacct -X -P -o` [`FIELDS`] (with its header; columns are found by name, so any
//! order and any subset that has `JobID`, `State` and `AdminComment` reads) or the
//! `sacct --json` history that `report` reads: both go through the report's readers. Every job's
//! `AdminComment` is decoded with the tag module's entry point ([`fabric_proto::tag::extract`]),
//! so whatever forms it reads (the JSON written live, the backtick form `sacctmgr` leaves) this
//! reads too. Array tasks (`123_4`, a pending `123_[1-9]`) and heterogeneous components
//! (`123+1`) keep their own id, and [`JobFilter::job_ids`] addresses them exactly: `123_4` is one
//! task, `123` the whole array or het job (as `sacct -j 123` means it).

use serde::Serialize;

use fabric_proto::hostlist::Hostlist;
use fabric_proto::tag::{JobTag, Verdict, extract};

use crate::report::ett::{FabricEvidence, JobEtt};
use crate::report::sacct_text::utc_text;
use crate::report::{InputNotes, JobRecord, JobState, ReportError, sacct_json, sacct_text};

/// The `--format` list `fabric-check jobs` asks sacct for (AdminComment last: other tools'
/// free text there may hold the delimiter, and extra fields are joined back into it).
pub const FIELDS: &str =
    "JobID,JobIDRaw,User,Partition,State,Start,End,ElapsedRaw,NNodes,NodeList,AdminComment";

/// Errors reading sacct output for `jobs`.
#[derive(Debug, thiserror::Error)]
pub enum JobsError {
    /// The header lacks a column `jobs` needs.
    #[error(
        "{source_name}:1: the header has no `{column}` column; run `sacct -X -P -o {FIELDS}` (with the header, without -n)"
    )]
    MissingColumn {
        /// The input's name.
        source_name: String,
        /// The column.
        column: &'static str,
    },
    /// The input has no header line.
    #[error(
        "{source_name}: the input is empty; did sacct print anything? (run `sacct -X -P -o {FIELDS}`)"
    )]
    Empty {
        /// The input's name.
        source_name: String,
    },
    /// The input is not sacct output the readers accept (the message names where and why).
    #[error(transparent)]
    Input(#[from] ReportError),
}

/// How a job id is composed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum JobId {
    /// A plain job: `123`.
    Plain {
        /// The id.
        id: u64,
    },
    /// An array task `123_4` (or a pending, unsplit `123_[1-9]`).
    Array {
        /// The array's job id (`ArrayJobId`).
        array_job_id: u64,
        /// The task: `4`, or `[1-9]` while pending.
        task: String,
    },
    /// A heterogeneous job component `123+1`.
    Het {
        /// The het leader's id (`HetJobId`).
        het_job_id: u64,
        /// The component's offset.
        offset: u32,
    },
    /// Anything else sacct printed.
    Other,
}

impl JobId {
    /// Parses sacct's `JobID` column.
    pub fn parse(s: &str) -> Self {
        if let Some((a, t)) = s.split_once('_') {
            if let (Ok(array_job_id), false) = (a.parse(), t.is_empty()) {
                return Self::Array {
                    array_job_id,
                    task: t.to_string(),
                };
            }
        } else if let Some((h, o)) = s.split_once('+') {
            if let (Ok(het_job_id), Ok(offset)) = (h.parse(), o.parse()) {
                return Self::Het { het_job_id, offset };
            }
        } else if let Ok(id) = s.parse() {
            return Self::Plain { id };
        }
        Self::Other
    }

    /// The id sacct's `-j` takes to find this job with its siblings (the array or het leader).
    pub fn base(&self) -> Option<u64> {
        match self {
            Self::Plain { id } => Some(*id),
            Self::Array { array_job_id, .. } => Some(*array_job_id),
            Self::Het { het_job_id, .. } => Some(*het_job_id),
            Self::Other => None,
        }
    }
}

/// A node of the job that did not pass.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FailingNode {
    /// The node.
    pub node: String,
    /// Its verdict (`warn`, `fail` or `error`; a node whose verdict never arrived is `error`).
    pub verdict: Verdict,
    /// Its failing or warning checks.
    pub checks: Vec<String>,
    /// Drained because of this job's probe.
    pub drained: bool,
}

/// One job with its fabric verdict.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JobRow {
    /// As sacct prints it (`123`, `123_4`, `123+1`).
    pub job_id: String,
    /// `JobIDRaw`, when read (the database id: an array task's own id).
    pub job_id_raw: Option<String>,
    /// How the id is composed.
    pub id: JobId,
    /// User.
    pub user: String,
    /// Partition.
    pub partition: String,
    /// Final (or current) state, as sacct prints it.
    pub state: String,
    /// Start, Unix seconds (None when not started or unknown).
    pub start_s: Option<i64>,
    /// End, Unix seconds (None while running or unknown).
    pub end_s: Option<i64>,
    /// Elapsed seconds.
    pub elapsed_s: Option<u64>,
    /// Allocated nodes.
    pub nnodes: Option<u32>,
    /// NodeList as sacct prints it (`n[1-4]`).
    pub nodelist: String,
    /// The job's fabric verdict (None without a readable tag).
    pub verdict: Option<Verdict>,
    /// Nodes that did not pass, with their checks.
    pub failing: Vec<FailingNode>,
    /// Nodes drained because of this job's probe.
    pub drained: Vec<String>,
    /// Nodes that did not pass in earlier attempts of this job (before a requeue).
    pub earlier_failing: Vec<FailingNode>,
    /// `tagged`, `untagged` or `unreadable`.
    pub tag_status: &'static str,
    /// Why the tag could not be decoded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tag_error: Option<String>,
    /// The decoded tag.
    pub tag: Option<JobTag>,
    /// Where the tag was read: `sacct` (accounting) or `slurmctld` (the live job, for a job
    /// still running or pending: accounting has its tag only once it ends).
    pub tag_source: &'static str,
    /// Effective training time and failures ([`crate::report::ett`]); `"not measured"` without
    /// `fabric-run` records.
    #[serde(serialize_with = "crate::report::ett::measured")]
    pub ett: Option<JobEtt>,
}

impl JobRow {
    /// Whether the job ran on `node`: NodeList (the tag's nodes when NodeList is unknown), or an
    /// earlier attempt's failing node.
    pub fn ran_on(&self, node: &str) -> bool {
        let listed = !self.nodelist.is_empty() && self.nodelist != "None assigned";
        // A key of the tag's maps may be a hostlist standing for several nodes.
        let names = |key: &str| key == node || Hostlist::parse(key).is_ok_and(|h| h.matches(node));
        // An earlier attempt (before a requeue) ran where the tag's `earlier` says.
        if self.earlier_failing.iter().any(|f| names(&f.node)) {
            return true;
        }
        if let (true, Ok(h)) = (listed, Hostlist::parse(&self.nodelist)) {
            return h.matches(node);
        }
        self.tag
            .as_ref()
            .is_some_and(|t| t.nodes.keys().any(|k| names(k)) || t.missing.iter().any(|m| names(m)))
    }

    /// A one-line summary of the `fabric-run` record: `412 steps p50 1.2 s, accepted`.
    pub fn run_summary(&self) -> String {
        let Some(run) = self.tag.as_ref().and_then(|t| t.run.as_ref()) else {
            return String::new();
        };
        let mut s = format!("{} steps", run.steps);
        if let Some(p50) = run.step_p50_s {
            s.push_str(&format!(" p50 {} s", round3(p50)));
        }
        if run.retries > 0 {
            s.push_str(&format!(", {} retries", run.retries));
        }
        if !run.outcome.is_empty() {
            s.push_str(&format!(", {}", run.outcome));
        }
        s
    }
}

/// `x` rounded to 3 decimals, shortest form.
fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0 + 0.0
}

/// Which jobs to keep.
#[derive(Debug, Clone, Default)]
pub struct JobFilter {
    /// Keep jobs running at some time in `[since, until)` (Unix seconds).
    pub since_s: Option<i64>,
    /// See `since_s`.
    pub until_s: Option<i64>,
    /// Exact ids: `123_4` one task, `123+1` one component, `123` the job with all its tasks or
    /// components.
    pub job_ids: Vec<String>,
    /// Jobs that ran on this node.
    pub node: Option<String>,
    /// Partitions.
    pub partitions: Vec<String>,
    /// Users.
    pub users: Vec<String>,
    /// Verdicts (`pass`, `warn`, `fail`, `error`, or `none` for jobs without a readable tag).
    pub verdicts: Vec<String>,
    /// States, lower case (`running`, `pending`, `completed`, ...): the first word of the state.
    pub states: Vec<String>,
}

impl JobFilter {
    /// Whether `row` passes every filter given.
    pub fn keep(&self, row: &JobRow) -> bool {
        let verdict = row.verdict.map_or("none", Verdict::as_str);
        self.keep_whatever_verdict(row)
            && (self.verdicts.is_empty() || self.verdicts.iter().any(|x| x == verdict))
    }

    /// Whether `row` passes every filter but the verdict's (which a live tag may change).
    fn keep_whatever_verdict(&self, row: &JobRow) -> bool {
        let id_ok = self.job_ids.is_empty()
            || self.job_ids.iter().any(|want| {
                want == &row.job_id
                    || row.job_id_raw.as_deref() == Some(want.as_str())
                    || want
                        .parse::<u64>()
                        .ok()
                        .is_some_and(|b| row.id.base() == Some(b))
            });
        let list_ok = |list: &[String], v: &str| list.is_empty() || list.iter().any(|x| x == v);
        let state = row
            .state
            .split_whitespace()
            .next()
            .unwrap_or("")
            .to_ascii_lowercase();
        let window_ok = {
            let started_before_until = match (self.until_s, row.start_s) {
                (Some(u), Some(s)) => s < u,
                (Some(_), None) => false,
                (None, _) => true,
            };
            let ended_after_since = match (self.since_s, row.end_s) {
                (Some(s), Some(e)) => e > s,
                _ => true,
            };
            started_before_until && ended_after_since
        };
        id_ok
            && window_ok
            && list_ok(&self.partitions, &row.partition)
            && list_ok(&self.users, &row.user)
            && list_ok(&self.states, &state)
            && self.node.as_deref().is_none_or(|n| row.ran_on(n))
    }
}

/// The jobs read, and how many had no tag or an unreadable one.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct JobList {
    /// The jobs kept, in input order.
    pub jobs: Vec<JobRow>,
    /// Kept jobs without a fabric-check segment.
    pub untagged: u64,
    /// Kept jobs whose segment does not decode.
    pub unreadable: u64,
    /// `RESIZING` records passed over: a job shrunk while it ran (spares give nodes back before
    /// the first task) has one per shrink, with the allocation before it, beside its final one.
    pub resizing: u64,
    /// Jobs that spare nodes saved from a requeue (`--fabric-check-spares`: shrunk past a
    /// failed node).
    pub saved_by_spares: u64,
    /// What reading the input left out, padded or counted once (see [`InputNotes`]).
    #[serde(skip)]
    pub notes: InputNotes,
}

/// Reads `sacct -X -P` text (with its header) or `sacct --json` output, through the report's
/// readers (so `jobs` and `report` read the same inputs, with the same leniency and the same
/// duplicate check), and keeps the jobs `filter` passes. Steps (`123.batch`) are passed over;
/// a text line that cannot be read is skipped and noted.
pub fn read(text: &str, source_name: &str, filter: &JobFilter) -> Result<JobList, JobsError> {
    read_with_live(text, source_name, filter, None).map(|(list, _)| list)
}

/// The one live query of [`read_with_live`]: sacct's `-j` ids in, `squeue -O`
/// [`SQUEUE_FIELDS`] output (or why it failed) out.
pub type LiveQuery<'a> = dyn FnMut(&[u64]) -> Result<String, String> + 'a;

/// [`read`], then for the jobs kept that are still running or pending ([`is_live`]) the tag
/// slurmctld holds now, through `live` — called at most once, with every such job's id for
/// sacct's `-j` (the array or het leader), and never when there is none. It returns
/// `squeue -h --local --states=all -O` [`SQUEUE_FIELDS`] output ([`parse_live`]). A job that
/// slurmctld lists takes its state and its tag from there (`tag_source` `slurmctld`), before
/// the verdict filter is applied; the others keep accounting's. Returns the list and the live
/// query's error, if it failed (the jobs then keep accounting's tags).
pub fn read_with_live(
    text: &str,
    source_name: &str,
    filter: &JobFilter,
    live: Option<&mut LiveQuery<'_>>,
) -> Result<(JobList, Option<String>), JobsError> {
    let empty = || JobsError::Empty {
        source_name: source_name.to_string(),
    };
    let body = text.trim_start();
    if body.is_empty()
        || text
            .lines()
            .all(|l| l.trim().is_empty() || l.starts_with('#'))
    {
        return Err(empty());
    }
    let (records, notes) = if body.starts_with('{') {
        sacct_json::read_all_detailed(text.as_bytes(), source_name)?
    } else {
        if !sacct_text::header_names(text, "AdminComment") {
            return Err(JobsError::MissingColumn {
                source_name: source_name.to_string(),
                column: "AdminComment",
            });
        }
        let layout = sacct_text::TextLayout {
            detail: true,
            gpus_unused: true,
            ..sacct_text::TextLayout::default()
        };
        sacct_text::read_all_noting(text.as_bytes(), source_name, &layout)?
    };
    let mut out = JobList {
        notes,
        ..JobList::default()
    };
    let mut rows = Vec::new();
    for rec in records {
        let r = row(rec);
        if r.state.starts_with("RESIZING") {
            out.resizing += 1;
            continue;
        }
        if filter.keep_whatever_verdict(&r) {
            rows.push(r);
        }
    }
    let mut live_error = None;
    if let Some(query) = live {
        let mut ids: Vec<u64> = rows
            .iter()
            .filter(|r| is_live(&r.state))
            .filter_map(|r| r.id.base())
            .collect();
        ids.sort_unstable();
        ids.dedup();
        if !ids.is_empty() {
            match query(&ids) {
                Ok(text) => apply_live(&mut rows, &parse_live(&text)),
                Err(e) => live_error = Some(e),
            }
        }
    }
    for r in rows {
        if filter.keep(&r) {
            if r.tag
                .as_ref()
                .and_then(|t| t.spares.as_ref())
                .is_some_and(|s| s.saved())
            {
                out.saved_by_spares += 1;
            }
            match r.tag_status {
                "untagged" => out.untagged += 1,
                "unreadable" => out.unreadable += 1,
                _ => {}
            }
            out.jobs.push(r);
        }
    }
    Ok((out, live_error))
}

/// The `squeue -O` fields of the live read: the raw job id, the name as sacct prints it
/// (`A_T`, `H+O`, else the id), the state and the `AdminComment`, unpadded and ended by `|`, the
/// comment last (it may hold `|`). Every one of them exists in Slurm 22.05 to 26.05
/// (`src/squeue/opts.c`); none is text the job's owner writes.
pub const SQUEUE_FIELDS: &str = "jobid:0|,jobarrayid:0|,state:0|,admin_comment:0";

/// The arguments of the one live query for `ids` (sacct's `-j` ids, leaders of arrays and het
/// jobs): `squeue -h --local --states=all --jobs=IDS -O` [`SQUEUE_FIELDS`]. One request to
/// slurmctld whatever the number of ids (squeue loads the jobs once and keeps those asked for).
pub fn live_query_args(ids: &[u64]) -> Vec<String> {
    let list: Vec<String> = ids.iter().map(u64::to_string).collect();
    vec![
        "-h".into(),
        "--local".into(),
        "--states=all".into(),
        format!("--jobs={}", list.join(",")),
        "-O".into(),
        SQUEUE_FIELDS.into(),
    ]
}

/// One job as slurmctld holds it now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveJob {
    /// The raw id (`JobIDRaw`).
    pub raw: String,
    /// The name sacct prints (`123`, `123_4`, `123+1`).
    pub name: String,
    /// The state (`RUNNING`, `PENDING`, ...).
    pub state: String,
    /// The `AdminComment` (empty when unset: squeue prints `(null)`).
    pub comment: String,
}

/// The lines of `squeue -h -O` [`SQUEUE_FIELDS`] output.
pub fn parse_live(text: &str) -> Vec<LiveJob> {
    text.lines()
        .filter_map(|line| {
            let mut it = line.splitn(4, '|');
            let (raw, name, state, comment) = (it.next()?, it.next()?, it.next()?, it.next()?);
            let comment = if comment == "(null)" { "" } else { comment };
            Some(LiveJob {
                raw: raw.trim().into(),
                name: name.trim().into(),
                state: state.trim().into(),
                comment: comment.into(),
            })
        })
        .collect()
}

/// Whether a job in state `state` (as sacct prints it) may still change its tag: running,
/// pending, suspended, requeued and the like, not a job that ended.
pub fn is_live(state: &str) -> bool {
    let word = state.split_whitespace().next().unwrap_or("");
    JobState::parse(word).is_live()
        || matches!(
            word,
            "CONFIGURING" | "REQUEUE_HOLD" | "RESV_DEL_HOLD" | "STOPPED" | "SIGNALING"
        )
}

/// Gives each live row slurmctld's state and tag, the row matched by its name or its raw id.
fn apply_live(rows: &mut [JobRow], live: &[LiveJob]) {
    for r in rows.iter_mut().filter(|r| is_live(&r.state)) {
        let Some(l) = live.iter().find(|l| {
            l.name == r.job_id || r.job_id_raw.as_deref().is_some_and(|raw| raw == l.raw)
        }) else {
            continue;
        };
        let decoded = decode_tag(&l.comment);
        r.state = l.state.clone();
        r.tag_source = "slurmctld";
        (
            r.tag_status,
            r.tag,
            r.tag_error,
            r.verdict,
            r.failing,
            r.drained,
            r.earlier_failing,
        ) = decoded;
        // A live job has no allocation to measure yet.
        r.ett = None;
    }
}

/// What a row shows of a tag: status, the tag, its error, verdict, failing nodes, drained
/// nodes and the failing nodes of earlier attempts.
type Decoded = (
    &'static str,
    Option<JobTag>,
    Option<String>,
    Option<Verdict>,
    Vec<FailingNode>,
    Vec<String>,
    Vec<FailingNode>,
);

fn row(rec: JobRecord) -> JobRow {
    let detail = rec.detail.map(|d| *d).unwrap_or_default();
    let (tag_status, tag, tag_error, verdict, failing, drained, earlier_failing) =
        decode_tag(&detail.admin_comment);
    let ett = if is_live(&detail.state) || rec.state.is_live() {
        None
    } else {
        let run = tag.as_ref().and_then(|t| t.run.as_ref());
        let evidence = tag
            .as_ref()
            .map(|t| FabricEvidence::of(t.verdict, &t.during))
            .unwrap_or_default();
        JobEtt::of(rec.elapsed_s, rec.submit_s, run, &evidence)
    };
    let set = |t: i64| (t > 0).then_some(t);
    JobRow {
        id: JobId::parse(&rec.job_id),
        job_id: rec.job_id,
        job_id_raw: (!detail.job_id_raw.is_empty()).then_some(detail.job_id_raw),
        user: rec.user,
        partition: rec.partition,
        state: detail.state,
        start_s: set(rec.start_s),
        end_s: set(rec.end_s),
        elapsed_s: Some(rec.elapsed_s),
        nnodes: Some(rec.nnodes),
        nodelist: detail.nodelist,
        verdict,
        failing,
        drained,
        earlier_failing,
        tag_status,
        tag_error,
        tag,
        tag_source: "sacct",
        ett,
    }
}

fn decode_tag(comment: &str) -> Decoded {
    let (tag_status, tag, tag_error) = match extract(comment) {
        None => ("untagged", None, None),
        Some(Ok(t)) => ("tagged", Some(t), None),
        Some(Err(e)) => ("unreadable", None, Some(e.to_string())),
    };
    let earlier_failing: Vec<FailingNode> = tag
        .iter()
        .flat_map(|t| t.earlier.iter())
        .map(|(n, r)| FailingNode {
            node: n.clone(),
            verdict: r.verdict,
            checks: r.checks.clone(),
            drained: r.drained,
        })
        .collect();
    let (verdict, failing, drained) = match &tag {
        Some(t) => {
            let mut failing: Vec<FailingNode> = t
                .nodes
                .iter()
                .filter(|(_, r)| r.verdict != Verdict::Pass)
                .map(|(n, r)| FailingNode {
                    node: n.clone(),
                    verdict: r.verdict,
                    checks: r.checks.clone(),
                    drained: r.drained,
                })
                .collect();
            failing.extend(t.missing.iter().map(|n| FailingNode {
                node: n.clone(),
                verdict: Verdict::Error,
                checks: vec![fabric_proto::check_id::RENDEZVOUS_MISSING.into()],
                drained: false,
            }));
            let mut drained: Vec<String> = t
                .nodes
                .iter()
                .filter(|(_, r)| r.drained)
                .map(|(n, _)| n.clone())
                .collect();
            // What the in-job watch saw while the job ran (live, before the epilog).
            for d in t.during.iter().filter(|d| !d.watch.is_empty()) {
                failing.push(FailingNode {
                    node: d.node.clone(),
                    verdict: d.verdict,
                    checks: d
                        .watch
                        .iter()
                        .map(|e| format!("{} ({} s into the job, watch)", e.check, e.into_job_s))
                        .collect(),
                    drained: d.watch.iter().any(|e| e.drained),
                });
                if d.watch.iter().any(|e| e.drained) && !drained.contains(&d.node) {
                    drained.push(d.node.clone());
                }
            }
            (t.verdict, failing, drained)
        }
        None => (None, Vec::new(), Vec::new()),
    };
    (
        tag_status,
        tag,
        tag_error,
        verdict,
        failing,
        drained,
        earlier_failing,
    )
}

/// The headings of the table and CSV forms.
pub const COLUMNS: [&str; 12] = [
    "job",
    "user",
    "partition",
    "state",
    "start (UTC)",
    "elapsed_s",
    "nodes",
    "verdict",
    "failing (node: checks)",
    "drained",
    "run",
    "effective training",
];

fn cells(r: &JobRow) -> [String; 12] {
    let show = |f: &FailingNode| {
        if f.checks.is_empty() {
            format!("{}: {}", f.node, f.verdict.as_str())
        } else {
            format!("{}: {}", f.node, f.checks.join(" "))
        }
    };
    let failing: Vec<String> = r
        .failing
        .iter()
        .map(show)
        .chain(
            r.earlier_failing
                .iter()
                .map(|f| format!("earlier attempt {}", show(f))),
        )
        .collect();
    [
        r.job_id.clone(),
        r.user.clone(),
        r.partition.clone(),
        r.state.clone(),
        r.start_s.map(utc_text).unwrap_or_default(),
        r.elapsed_s.map(|e| e.to_string()).unwrap_or_default(),
        r.nodelist.clone(),
        {
            let v = match (r.verdict, r.tag_status) {
                (Some(v), _) => v.as_str().to_string(),
                (None, "unreadable") => "unreadable".into(),
                (None, "tagged") => "no probe".into(),
                _ => "-".into(),
            };
            if r.tag_source == "slurmctld" {
                format!("{v} (live)")
            } else {
                v
            }
        },
        failing.join("; "),
        r.drained.join(","),
        r.run_summary(),
        if is_live(&r.state) {
            String::new()
        } else {
            JobEtt::cell(r.ett.as_ref())
        },
    ]
}

/// The summary line: `12 jobs, 3 without a tag, 1 with an unreadable tag`.
pub fn summary(list: &JobList) -> String {
    let mut s = format!(
        "{} job{}, {} without a fabric-check tag",
        list.jobs.len(),
        if list.jobs.len() == 1 { "" } else { "s" },
        list.untagged
    );
    if list.unreadable > 0 {
        s.push_str(&format!(", {} with an unreadable tag", list.unreadable));
    }
    if list.saved_by_spares > 0 {
        s.push_str(&format!(
            ", {} saved from a requeue by spare nodes",
            list.saved_by_spares
        ));
    }
    s
}

/// An aligned text table, the summary line under it.
pub fn to_table(list: &JobList) -> String {
    let rows: Vec<[String; 12]> = list.jobs.iter().map(cells).collect();
    let mut width: Vec<usize> = COLUMNS.iter().map(|c| c.chars().count()).collect();
    for r in &rows {
        for (w, c) in width.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut l = String::new();
        for (i, c) in cells.enumerate() {
            if i + 1 == COLUMNS.len() {
                l.push_str(c);
            } else {
                l.push_str(&format!("{c:<w$}  ", w = width[i]));
            }
        }
        out.push_str(l.trim_end());
        out.push('\n');
    };
    line(&mut COLUMNS.iter().copied());
    for r in &rows {
        line(&mut r.iter().map(String::as_str));
    }
    out.push_str(&summary(list));
    out.push('\n');
    out
}

/// CSV (RFC 4180 quoting), one row per job, the same columns as the table.
pub fn to_csv(list: &JobList) -> String {
    let quote = |s: &str| {
        if s.contains([',', '"', '\n', '\r']) {
            format!("\"{}\"", s.replace('"', "\"\""))
        } else {
            s.to_string()
        }
    };
    let mut out = COLUMNS.map(quote).join(",");
    out.push('\n');
    for r in &list.jobs {
        out.push_str(&cells(r).map(|c| quote(&c)).join(","));
        out.push('\n');
    }
    out
}

/// A JSON array, one object per job with its tag decoded.
pub fn to_json(list: &JobList) -> String {
    serde_json::to_string_pretty(&list.jobs).unwrap_or_default() + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_shrunk_by_spares_is_listed_once_and_counted_as_saved() {
        let tag = r#"fabric-check/v1 {"verdict":"fail","nnodes":4,"nodes":{"n3":{"verdict":"fail","checks":["ib.port_state"],"drained":true}},"spares":{"asked":1,"kept":"n[1-2,4]","outcome":"shrunk","failed":[{"node":"n3","checks":["ib.port_state"]}],"spare_node_s":1.5}}"#;
        let text = format!(
            "JobID|State|NodeList|AdminComment\n7|RESIZING|n[1-4]|{tag}\n7|COMPLETED|n[1-2,4]|{tag}\n8|COMPLETED|n1|\n"
        );
        let list = read(&text, "t", &JobFilter::default()).unwrap();
        assert_eq!(list.jobs.len(), 2, "{:?}", list.jobs);
        assert_eq!(list.jobs[0].nodelist, "n[1-2,4]");
        assert_eq!(list.resizing, 1);
        assert_eq!(list.saved_by_spares, 1);
        assert!(
            summary(&list).contains("1 saved from a requeue by spare nodes"),
            "{}",
            summary(&list)
        );
    }

    #[test]
    fn array_and_het_ids_keep_their_parts() {
        assert_eq!(JobId::parse("123"), JobId::Plain { id: 123 });
        assert_eq!(
            JobId::parse("123_4"),
            JobId::Array {
                array_job_id: 123,
                task: "4".into()
            }
        );
        assert_eq!(JobId::parse("123_[1-9%2]").base(), Some(123));
        assert_eq!(
            JobId::parse("123+1"),
            JobId::Het {
                het_job_id: 123,
                offset: 1
            }
        );
        assert_eq!(JobId::parse("x"), JobId::Other);
    }

    #[test]
    fn without_a_node_list_the_tag_says_where_the_job_ran_hostlist_keys_included() {
        let tag = |comment: &str| {
            let text = format!("JobID|State|AdminComment\n7|COMPLETED|{comment}\n");
            read(&text, "t", &JobFilter::default())
                .unwrap()
                .jobs
                .remove(0)
        };
        let j = tag(
            r#"fabric-check/v1 {"verdict":"pass","nnodes":3,"nodes":{"n[1-2]":{"verdict":"pass"}},"missing":["n9"]}"#,
        );
        assert!(j.ran_on("n2") && j.ran_on("n9"));
        assert!(!j.ran_on("n3"));
        assert!(!tag("JS1:abc").ran_on("n1"));
    }

    #[test]
    fn a_running_jobs_watch_fault_is_listed_with_the_node_it_drained() {
        let text = concat!(
            "JobID|State|AdminComment\n",
            r#"9|RUNNING|fabric-check/v1 {"verdict":"pass","nnodes":2,"nodes":{"n[1-2]":{"verdict":"pass"}},"#,
            r#""during":[{"node":"n2","rises":{},"verdict":"fail","watch":[{"check":"ib.port_state","#,
            r#""message":"mlx5_3 port 1 is DOWN","seen_at_s":100,"into_job_s":12,"drained":true}]}]}"#,
            "\n"
        );
        let list = read(text, "t", &JobFilter::default()).unwrap();
        let cells = cells(&list.jobs[0]);
        assert_eq!(cells[8], "n2: ib.port_state (12 s into the job, watch)");
        assert_eq!(cells[9], "n2");
    }

    #[test]
    fn a_straggler_the_first_nodes_watch_named_is_listed_on_its_node_and_drains_nothing() {
        let text = concat!(
            "JobID|State|AdminComment\n",
            r#"9|RUNNING|fabric-check/v1 {"verdict":"pass","nnodes":4,"nodes":{"n[1-4]":{"verdict":"pass"}},"#,
            r#""during":[{"node":"n3","rises":{},"verdict":"warn","watch":[{"check":"job.straggler","#,
            r#""message":"steps 1.52x the job's median since 12:00:05 UTC (10 s windows); evidence only, never drained","#,
            r#""seen_at_s":100,"into_job_s":45,"drained":false,"warn":true}]}]}"#,
            "\n"
        );
        let list = read(text, "t", &JobFilter::default()).unwrap();
        let cells = cells(&list.jobs[0]);
        assert_eq!(cells[8], "n3: job.straggler (45 s into the job, watch)");
        assert_eq!(cells[9], "", "a straggler drains nothing");
    }

    #[test]
    fn the_output_of_its_own_query_leaves_nothing_to_warn_about() {
        let header = FIELDS.replace(',', "|");
        let text = format!("{header}\n7|7|ann|ib|COMPLETED|100|160|60|1|n1|\n");
        let list = read(&text, "sacct", &JobFilter::default()).unwrap();
        assert_eq!(list.jobs.len(), 1);
        assert!(list.notes.is_clean(), "{:?}", list.notes.warnings());
    }

    /// A running job (sacct has no tag yet) and a finished one, as `jobs` reads them.
    const RUNNING_AND_DONE: &str = "JobID|JobIDRaw|State|NodeList|AdminComment\n\
        21|21|RUNNING|n[1-2]|\n\
        22|22|COMPLETED|n3|\n\
        23_1|24|PENDING|None assigned|\n";

    const LIVE_TAG: &str = r#"fabric-check/v1 {"verdict":"pass","nnodes":2,"nodes":{"n[1-2]":{"verdict":"pass"}},"during":[{"node":"n2","rises":{},"verdict":"fail","watch":[{"check":"ib.port_state","message":"mlx5_0 port 1 is DOWN","seen_at_s":100,"into_job_s":10,"drained":true}]}]}"#;

    #[test]
    fn a_running_jobs_tag_comes_from_slurmctld_in_one_query_for_all_live_jobs() {
        let mut calls = Vec::new();
        let mut query = |ids: &[u64]| {
            calls.push(ids.to_vec());
            Ok(format!(
                "21|21|RUNNING|{LIVE_TAG}\n24|23_1|PENDING|(null)\n"
            ))
        };
        let (list, err) = read_with_live(
            RUNNING_AND_DONE,
            "sacct",
            &JobFilter::default(),
            Some(&mut query),
        )
        .unwrap();
        assert_eq!(err, None);
        assert_eq!(calls, [vec![21, 23]], "one query, with every live job");
        let j = &list.jobs[0];
        assert_eq!((j.tag_source, j.tag_status), ("slurmctld", "tagged"));
        let c = cells(j);
        assert_eq!(c[7], "pass (live)");
        assert_eq!(c[8], "n2: ib.port_state (10 s into the job, watch)");
        assert_eq!(c[9], "n2");
        assert_eq!(list.jobs[1].tag_source, "sacct");
        assert_eq!(
            (list.jobs[2].tag_source, list.jobs[2].tag_status),
            ("slurmctld", "untagged")
        );
        let json: serde_json::Value = serde_json::from_str(&to_json(&list)).unwrap();
        assert_eq!(json[0]["tag_source"], "slurmctld");
        assert_eq!(json[1]["tag_source"], "sacct");
    }

    #[test]
    fn without_a_live_job_slurmctld_is_not_asked_and_a_failed_query_keeps_accountings_tags() {
        let done = "JobID|State|AdminComment\n22|COMPLETED|\n";
        let mut calls = 0;
        let mut query = |_: &[u64]| {
            calls += 1;
            Ok(String::new())
        };
        read_with_live(done, "sacct", &JobFilter::default(), Some(&mut query)).unwrap();
        assert_eq!(calls, 0);
        let mut failing = |_: &[u64]| Err("squeue timed out".to_string());
        let (list, err) = read_with_live(
            RUNNING_AND_DONE,
            "sacct",
            &JobFilter::default(),
            Some(&mut failing),
        )
        .unwrap();
        assert_eq!(err.as_deref(), Some("squeue timed out"));
        assert!(list.jobs.iter().all(|j| j.tag_source == "sacct"));
    }

    #[test]
    fn state_running_lists_the_running_jobs_and_a_verdict_filter_sees_the_live_tag() {
        let filter = JobFilter {
            states: vec!["running".into()],
            verdicts: vec!["pass".into()],
            ..JobFilter::default()
        };
        let mut query = |_: &[u64]| Ok(format!("21|21|RUNNING|{LIVE_TAG}\n"));
        let (list, _) =
            read_with_live(RUNNING_AND_DONE, "sacct", &filter, Some(&mut query)).unwrap();
        let ids: Vec<&str> = list.jobs.iter().map(|j| j.job_id.as_str()).collect();
        assert_eq!(ids, ["21"]);
    }

    #[test]
    fn the_live_query_asks_squeue_for_the_jobs_with_fields_every_release_has() {
        let a = live_query_args(&[21, 23]);
        assert_eq!(
            a,
            [
                "-h",
                "--local",
                "--states=all",
                "--jobs=21,23",
                "-O",
                SQUEUE_FIELDS
            ]
        );
        assert_eq!(
            parse_live("24|23_1|PENDING|a|b\n"),
            [LiveJob {
                raw: "24".into(),
                name: "23_1".into(),
                state: "PENDING".into(),
                comment: "a|b".into()
            }]
        );
    }

    #[test]
    fn a_finished_jobs_row_carries_its_effective_training_time_or_says_not_measured() {
        let tag = r#"fabric-check/v1 {"verdict":"pass","nnodes":1,"run":{"steps":9,"ckpt_n":1,"ckpt_total_s":1.0,"ckpt_max_s":1.0,"retries":1,"requeues":0,"duration_s":1000.0,"outcome":"accepted","accepted":true,"on_time":true,"ett":{"first_step_at_s":1100.0,"kept_s":750.0,"lost_s":50.0,"failures_n":1,"failures":[{"at_s":1500.0,"recover_s":40.0,"lost_steps":5,"lost_s":50.0,"fabric_notice":true}]}}}"#;
        let text = format!(
            "JobID|State|Submit|ElapsedRaw|AdminComment\n31|COMPLETED|1000|1000|{tag}\n32|COMPLETED|1000|1000|\n"
        );
        let list = read(&text, "t", &JobFilter::default()).unwrap();
        assert_eq!(cells(&list.jobs[0])[11], "ETT 75.0%, 1 failure (1 fabric)");
        assert_eq!(cells(&list.jobs[1])[11], "ETT not measured");
        let json: serde_json::Value = serde_json::from_str(&to_json(&list)).unwrap();
        assert_eq!(json[0]["ett"]["time_to_start_s"], 100.0);
        assert_eq!(json[0]["ett"]["failures"][0]["cause"], "fabric");
        assert_eq!(json[1]["ett"], "not measured");
    }

    #[test]
    fn negative_zero_never_reaches_the_summary() {
        assert_eq!(round3(-0.0).to_string(), "0");
        assert_eq!(round3(1.23456), 1.235);
    }
}
