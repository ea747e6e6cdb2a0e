//! The columns of a `sacct -P` text: found by name in the header (or named by the caller),
//! what each column's values can hold ([`column_form`]), and what a line with more fields than
//! the header means.

use super::super::pool::Parsed;
use super::{FIELDS, TextLayout, field_count_error};

#[derive(Debug, Clone, Default)]
pub(super) struct Columns {
    /// The field separator.
    pub(super) delim: String,
    pub(super) n: usize,
    /// The header's names as written, for messages.
    pub(super) names: Vec<String>,
    pub(super) job_id: usize,
    pub(super) partition: Option<usize>,
    pub(super) account: Option<usize>,
    pub(super) user: Option<usize>,
    pub(super) cluster: Option<usize>,
    pub(super) qos: Option<usize>,
    pub(super) state: usize,
    pub(super) submit: Option<usize>,
    pub(super) eligible: Option<usize>,
    pub(super) start: Option<usize>,
    pub(super) end: Option<usize>,
    pub(super) elapsed_raw: Option<usize>,
    pub(super) elapsed: Option<usize>,
    pub(super) nnodes: Option<usize>,
    pub(super) alloc_tres: Option<usize>,
    /// `AllocGRES` (`gpu:4`, `gpu:a100:4(IDX:0-3)`), read where `AllocTRES` is absent.
    pub(super) alloc_gres: Option<usize>,
    pub(super) admin_comment: Option<usize>,
    pub(super) job_id_raw: Option<usize>,
    pub(super) nodelist: Option<usize>,
    /// Fill [`JobRecord::detail`].
    pub(super) detail: bool,
    /// What a line with more fields than the header means.
    pub(super) surplus: Surplus,
}

/// What a line with more fields than the header is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) enum Surplus {
    /// Not readable: the line is skipped (no `AdminComment` last to hold them).
    #[default]
    Skip,
    /// The extra fields belong to the last column, `AdminComment`: every column before it has
    /// a fixed form.
    JoinIntoAdminComment,
    /// A column before the last `AdminComment` can hold the delimiter too (named here): which
    /// field holds the extra ones cannot be told, so the whole input is refused.
    Refuse(Vec<String>),
}

/// What a value of a `sacct -P` column can hold, as far as the framing of a line goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnForm {
    /// Numbers, states, times, job ids, node lists, TRES, and names only the administrator
    /// defines (partitions, accounts, QOS, reservations, users): never the delimiter `|`, never a
    /// line break, never text a job's user chooses.
    Fixed,
    /// May hold `|` but never text a job's user writes as they like: the administrator's
    /// feature and license names joined by operators (`Constraints` `a|b`, `Licenses`), and
    /// what administrators and Slurm write (`AdminComment`, `SystemComment`, `McsLabel`).
    MayHoldDelimiter,
    /// Text a job's user writes as they like (`JobName`, `Comment`, `WorkDir`, `SubmitLine`,
    /// `StdOut`, `StdErr`, `StdIn`, `Extra`, `Container`, `WCKey`), and any column this reader
    /// does not know: may hold the delimiter and line breaks.
    FreeText,
}

/// The form of a `sacct -P` column by its name (case-insensitive; sacct's `--helpformat` list,
/// Slurm 20.11 to 25.05, with the older `AllocGRES`/`ReqGRES`).
pub fn column_form(name: &str) -> ColumnForm {
    const MAY_HOLD_DELIMITER: &[&str] = &[
        "constraints",
        "licenses",
        "admincomment",
        "systemcomment",
        "mcslabel",
    ];
    const FIXED: &[&str] = &[
        "account",
        "alloccpus",
        "allocgres",
        "allocnodes",
        "alloctres",
        "associd",
        "avecpu",
        "avecpufreq",
        "avediskread",
        "avediskwrite",
        "avepages",
        "averss",
        "avevmsize",
        "blockid",
        "cluster",
        "consumedenergy",
        "consumedenergyraw",
        "cputime",
        "cputimeraw",
        "dbindex",
        "derivedexitcode",
        "elapsed",
        "elapsedraw",
        "eligible",
        "end",
        "exitcode",
        "failednode",
        "flags",
        "gid",
        "group",
        "jobid",
        "jobidraw",
        "layout",
        "maxdiskread",
        "maxdiskreadnode",
        "maxdiskreadtask",
        "maxdiskwrite",
        "maxdiskwritenode",
        "maxdiskwritetask",
        "maxpages",
        "maxpagesnode",
        "maxpagestask",
        "maxrss",
        "maxrssnode",
        "maxrsstask",
        "maxvmsize",
        "maxvmsizenode",
        "maxvmsizetask",
        "mincpu",
        "mincpunode",
        "mincputask",
        "ncpus",
        "nnodes",
        "nodelist",
        "ntasks",
        "partition",
        "planned",
        "plannedcpu",
        "plannedcpuraw",
        "priority",
        "qos",
        "qosraw",
        "qosreq",
        "reason",
        "reqcpufreq",
        "reqcpufreqgov",
        "reqcpufreqmax",
        "reqcpufreqmin",
        "reqcpus",
        "reqgres",
        "reqmem",
        "reqnodes",
        "reqtres",
        "reservation",
        "reservationid",
        "restarts",
        "segmentsize",
        "sluid",
        "start",
        "state",
        "submit",
        "suspended",
        "systemcpu",
        "timelimit",
        "timelimitraw",
        "totalcpu",
        "tresusageinave",
        "tresusageinmax",
        "tresusageinmaxnode",
        "tresusageinmaxtask",
        "tresusageinmin",
        "tresusageinminnode",
        "tresusageinmintask",
        "tresusageintot",
        "tresusageoutave",
        "tresusageoutmax",
        "tresusageoutmaxnode",
        "tresusageoutmaxtask",
        "tresusageoutmin",
        "tresusageoutminnode",
        "tresusageoutmintask",
        "tresusageouttot",
        "uid",
        "user",
        "usercpu",
        "wckeyid",
    ];
    let n = name.trim().to_ascii_lowercase();
    if FIXED.contains(&n.as_str()) {
        ColumnForm::Fixed
    } else if MAY_HOLD_DELIMITER.contains(&n.as_str()) {
        ColumnForm::MayHoldDelimiter
    } else {
        ColumnForm::FreeText
    }
}

/// The columns sacct fills with text a job's user writes as they like.
pub(super) const FREE_TEXT: &[&str] = &[
    "jobname",
    "comment",
    "workdir",
    "submitline",
    "stdout",
    "stderr",
    "stdin",
    "extra",
    "container",
    "wckey",
];

/// `` `a` ``, `` `a` and `b` ``, `` `a`, `b` and `c` ``.
pub(super) fn and_list(names: &[String]) -> String {
    let quoted: Vec<String> = names.iter().map(|n| format!("`{n}`")).collect();
    match quoted.as_slice() {
        [] => String::new(),
        [one] => one.clone(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
    }
}

/// Why a layout naming columns of free text (or columns this reader does not know) is not read,
/// and what to export instead.
pub(super) fn free_text_refusal(origin: &str, names: &[String]) -> String {
    let (known, unknown): (Vec<String>, Vec<String>) = names
        .iter()
        .cloned()
        .partition(|n| FREE_TEXT.contains(&n.to_ascii_lowercase().as_str()));
    let why = "such a value can hold the delimiter and line breaks, so a line of this export cannot be told from one the user wrote (a FAILED job could read as COMPLETED with a passing fabric verdict) and none is read; export with `sacct --json` instead (it quotes every string)";
    let them = |v: &[String]| if v.len() == 1 { "it" } else { "them" };
    if known.is_empty() {
        return format!(
            "{origin} names {}, {} a sacct column this reader knows (misspelt?): {} could hold a job's user's free text, and {why}, or correct or drop {}",
            and_list(&unknown),
            if unknown.len() == 1 {
                "not"
            } else {
                "none of them"
            },
            them(&unknown),
            them(&unknown),
        );
    }
    let mut m = format!(
        "{origin} names {}, {} a job's user writes as free text: {why}, or again with a --format that leaves {} out",
        and_list(&known),
        if known.len() == 1 {
            "a column"
        } else {
            "columns"
        },
        them(&known),
    );
    if !unknown.is_empty() {
        m.push_str(&format!(
            " ({} {} not a sacct column this reader knows, so it is taken for free text too)",
            and_list(&unknown),
            if unknown.len() == 1 { "is" } else { "are" }
        ));
    }
    m
}

/// Why a line with more fields than the header stops the reading when a column before the last
/// `AdminComment` can hold the delimiter too.
pub(super) fn surplus_refusal(got: usize, want: usize, loose: &[String]) -> String {
    format!(
        "{got} fields where the header has {want}, and {} before the last column, AdminComment, can hold the delimiter too: which field holds the extra ones cannot be told, so this export is not read; export with `sacct --json` instead, or again with a --format that leaves {} out or ends before AdminComment",
        and_list(loose),
        if loose.len() == 1 { "it" } else { "them" },
    )
}

/// What to do with a line of `count` fields, more than the header's: `Ok(None)` to join the
/// extra ones into the last column, `Ok(Some(refusal))` to stop reading, `Err` to skip the line.
pub(super) fn surplus(cols: &Columns, count: usize) -> Result<Option<Parsed>, String> {
    match &cols.surplus {
        Surplus::JoinIntoAdminComment => Ok(None),
        Surplus::Refuse(loose) => Ok(Some(Parsed::Refuse(surplus_refusal(count, cols.n, loose)))),
        Surplus::Skip => Err(field_count_error(count, cols.n)),
    }
}

/// The delimiter of a header line: the first character that cannot be part of a field name.
pub(super) fn header_delimiter(line: &str) -> Option<char> {
    line.trim()
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || c.is_whitespace()))
}

/// Whether a line is a header: it names the `State` or `JobID` column.
pub(super) fn looks_like_header(line: &str, delim: &str) -> bool {
    line.split(delim).any(|f| {
        let f = f.trim();
        f.eq_ignore_ascii_case("state")
            || f.eq_ignore_ascii_case("jobid")
            || f.eq_ignore_ascii_case("jobidraw")
    })
}

impl Columns {
    /// The columns the report reads.
    pub(super) fn used(&self) -> impl Iterator<Item = usize> + '_ {
        [
            Some(self.job_id),
            Some(self.state),
            self.partition,
            self.account,
            self.user,
            self.cluster,
            self.qos,
            self.submit,
            self.eligible,
            self.start,
            self.end,
            self.elapsed_raw,
            self.elapsed,
            self.nnodes,
            self.alloc_tres,
            self.alloc_gres,
            self.admin_comment,
        ]
        .into_iter()
        .flatten()
    }

    pub(super) fn from_header_with(line: &str, layout: &TextLayout) -> Result<Self, String> {
        let delim = match &layout.delimiter {
            Some(d) => d.clone(),
            None => header_delimiter(line).unwrap_or('|').to_string(),
        };
        if !looks_like_header(line, &delim) {
            let shown: String = line.chars().take(60).collect();
            return Err(format!(
                "`{shown}` is not a sacct header line (output made with --noheader/-n?): pass --input-columns with the --format list that produced it, or run `sacct -P -o {FIELDS}` without -n"
            ));
        }
        Self::from_names(
            line,
            &delim,
            "the header",
            "run `sacct -P -o FIELDS` (with the header, without -n)",
        )
    }

    pub(super) fn from_layout(columns: &str, layout: &TextLayout) -> Result<Self, String> {
        let delim = layout.delimiter.clone().unwrap_or_else(|| "|".to_string());
        let names = columns.replace(',', &delim);
        Self::from_names(
            &names,
            &delim,
            "--input-columns",
            "add it to sacct's --format and to --input-columns, or run `sacct -P -o FIELDS` (with the header, without -n)",
        )
    }

    pub(super) fn from_names(
        line: &str,
        delim: &str,
        origin: &str,
        fix: &str,
    ) -> Result<Self, String> {
        let mut shown: Vec<String> = line.split(delim).map(|s| s.trim().to_string()).collect();
        // `--parsable` ends the header with the delimiter too.
        if shown.len() > 1 && shown.last().is_some_and(String::is_empty) {
            shown.pop();
        }
        let names: Vec<String> = shown.iter().map(|s| s.to_ascii_lowercase()).collect();
        let surplus = match names.split_last() {
            Some((last, before)) if last == "admincomment" => {
                let loose: Vec<String> = shown[..before.len()]
                    .iter()
                    .filter(|n| column_form(n) != ColumnForm::Fixed)
                    .cloned()
                    .collect();
                if loose.is_empty() {
                    Surplus::JoinIntoAdminComment
                } else {
                    Surplus::Refuse(loose)
                }
            }
            _ => Surplus::Skip,
        };
        let fix = fix.replace("FIELDS", FIELDS);
        let find = |n: &str| names.iter().position(|x| x == n);
        let need = |n: &str, what: &str| {
            find(&n.to_ascii_lowercase())
                .ok_or_else(|| format!("{origin} has no {what} column; {fix}"))
        };
        let job_id =
            need("JobID", "`JobID` (or `JobIDRaw`)").or_else(|e| find("jobidraw").ok_or(e))?;
        let state = need("State", "`State`")?;
        let free: Vec<String> = shown
            .iter()
            .filter(|n| column_form(n) == ColumnForm::FreeText)
            .cloned()
            .collect();
        if !free.is_empty() {
            return Err(free_text_refusal(origin, &free));
        }
        Ok(Self {
            delim: delim.to_string(),
            n: names.len(),
            names: shown,
            job_id,
            partition: find("partition"),
            account: find("account"),
            user: find("user"),
            cluster: find("cluster"),
            qos: find("qos"),
            state,
            submit: find("submit"),
            eligible: find("eligible"),
            start: find("start"),
            end: find("end"),
            elapsed_raw: find("elapsedraw"),
            elapsed: find("elapsed"),
            nnodes: find("nnodes").or_else(|| find("allocnodes")),
            alloc_tres: find("alloctres"),
            alloc_gres: find("allocgres"),
            admin_comment: find("admincomment"),
            job_id_raw: find("jobidraw"),
            nodelist: find("nodelist"),
            detail: false,
            surplus,
        })
    }

    /// What the report cannot know because a column is absent, one sentence per gap naming the
    /// column and what to add to sacct's `--format` (GPUs only when the caller shows them).
    pub(super) fn missing(&self, gpus_shown: bool) -> Vec<String> {
        let mut out = Vec::new();
        if self.elapsed_raw.is_none()
            && self.elapsed.is_none()
            && (self.start.is_none() || self.end.is_none())
        {
            out.push(
                "no Elapsed (or ElapsedRaw) column, nor both Start and End: every job's duration, and so its node-hours and GPU-hours, is unknown and counted as 0; add ElapsedRaw to sacct's --format".to_string(),
            );
        }
        if gpus_shown && self.alloc_tres.is_none() && self.alloc_gres.is_none() {
            out.push(
                "no AllocTRES (or AllocGRES) column: the jobs' GPUs are unknown, so GPU-hours show 0; add AllocTRES to sacct's --format".to_string(),
            );
        }
        if self.nnodes.is_none() {
            out.push(
                "no NNodes (or AllocNodes) column: node-hours are unknown and counted as 0; add NNodes to sacct's --format".to_string(),
            );
        }
        out
    }
}

/// Whether the first header line of a `sacct -P` text (blank and `#` lines passed over) names
/// `column` (case-insensitive); `false` for a text without a header.
pub fn header_names(text: &str, column: &str) -> bool {
    let Some(line) = text
        .lines()
        .find(|l| !l.trim().is_empty() && !l.starts_with('#'))
    else {
        return false;
    };
    let delim = header_delimiter(line).unwrap_or('|').to_string();
    line.split(delim.as_str())
        .any(|f| f.trim().eq_ignore_ascii_case(column))
}
