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

use crate::report::sacct_text::utc_text;
use crate::report::{InputNotes, JobRecord, ReportError, sacct_json, sacct_text};

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
}

impl JobFilter {
    /// Whether `row` passes every filter given.
    pub fn keep(&self, row: &JobRow) -> bool {
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
        let verdict = row.verdict.map_or("none", Verdict::as_str);
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
            && list_ok(&self.verdicts, verdict)
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
    for rec in records {
        let r = row(rec);
        if r.state.starts_with("RESIZING") {
            out.resizing += 1;
            continue;
        }
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
    Ok(out)
}

fn row(rec: JobRecord) -> JobRow {
    let detail = rec.detail.map(|d| *d).unwrap_or_default();
    let (tag_status, tag, tag_error) = match extract(&detail.admin_comment) {
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
    }
}

/// The headings of the table and CSV forms.
pub const COLUMNS: [&str; 11] = [
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
];

fn cells(r: &JobRow) -> [String; 11] {
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
        match (r.verdict, r.tag_status) {
            (Some(v), _) => v.as_str().to_string(),
            (None, "unreadable") => "unreadable".into(),
            (None, "tagged") => "no probe".into(),
            _ => "-".into(),
        },
        failing.join("; "),
        r.drained.join(","),
        r.run_summary(),
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
    let rows: Vec<[String; 11]> = list.jobs.iter().map(cells).collect();
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
    fn the_output_of_its_own_query_leaves_nothing_to_warn_about() {
        let header = FIELDS.replace(',', "|");
        let text = format!("{header}\n7|7|ann|ib|COMPLETED|100|160|60|1|n1|\n");
        let list = read(&text, "sacct", &JobFilter::default()).unwrap();
        assert_eq!(list.jobs.len(), 1);
        assert!(list.notes.is_clean(), "{:?}", list.notes.warnings());
    }

    #[test]
    fn negative_zero_never_reaches_the_summary() {
        assert_eq!(round3(-0.0).to_string(), "0");
        assert_eq!(round3(1.23456), 1.235);
    }
}
