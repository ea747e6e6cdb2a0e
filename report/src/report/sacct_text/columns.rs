//! The columns of a `sacct -P` text: found by name in the header (or named by the caller),
//! what each column's values can hold ([`column_form`]), and what a line with more fields than
//! the header means.

use super::{FIELDS, TextLayout};

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
    /// The columns of a job's user's free text (or unknown), as the header names them: read
    /// only without `AdminComment`, and then a line shorter than the header is not read.
    pub(super) free_text: Vec<String>,
    /// Whether every line ends with the delimiter (`--parsable`, seen on the header line);
    /// `None` when the columns were given, not read from a header.
    pub(super) trailing: Option<bool>,
}

/// What a line with more fields than the header is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) enum Surplus {
    /// Not readable: no column can hold the delimiter, so the line is cut or mixed with other
    /// text and is skipped.
    #[default]
    Skip,
    /// The extra fields belong to the one column that can hold the delimiter (at this index):
    /// every other column has a fixed form, so the fields before it and after it are where the
    /// header says.
    JoinInto(usize),
    /// Several columns can hold the delimiter (named here): which of them holds the extra
    /// fields cannot be told, so such a line is skipped (the lines as wide as the header read).
    Ambiguous(Vec<String>),
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

/// `` `a` `` and the words for one or several: (`it`, `is`) or (`them`, `are`).
fn them(v: &[String]) -> (&'static str, &'static str) {
    if v.len() == 1 {
        ("it", "is")
    } else {
        ("them", "are")
    }
}

/// Splits column names into the known free-text ones and those this reader does not know.
fn known_and_unknown(names: &[String]) -> (Vec<String>, Vec<String>) {
    names
        .iter()
        .cloned()
        .partition(|n| FREE_TEXT.contains(&n.to_ascii_lowercase().as_str()))
}

/// ` (`X` is not a sacct column this reader knows (misspelt?), so it is taken for free text
/// too)`, or nothing.
fn unknown_note(unknown: &[String], too: bool) -> String {
    if unknown.is_empty() {
        return String::new();
    }
    format!(
        " ({} {} not a sacct column this reader knows (misspelt?), so {} taken for free text{})",
        and_list(unknown),
        them(unknown).1,
        if unknown.len() == 1 {
            "it is"
        } else {
            "they are"
        },
        if too { " too" } else { "" },
    )
}

/// Why a layout naming columns of free text (or columns this reader does not know) beside
/// `AdminComment` is not read, and what to export instead: a line break in such a value can
/// frame a whole row with a verdict of the user's, and no count of fields shows it.
pub(super) fn free_text_refusal(origin: &str, names: &[String]) -> String {
    let (known, unknown) = known_and_unknown(names);
    let why = "such a value can hold line breaks as well as the delimiter, so beside AdminComment a line of this export cannot be told from one the user wrote (a FAILED job could read as COMPLETED with a passing fabric verdict) and none is read; export with `sacct --json` instead (it quotes every string)";
    if known.is_empty() {
        return format!(
            "{origin} names {}, {} a sacct column this reader knows (misspelt?): {} could hold a job's user's free text, and {why}, or correct or drop {}",
            and_list(&unknown),
            if unknown.len() == 1 {
                "not"
            } else {
                "none of them"
            },
            them(&unknown).0,
            them(&unknown).0,
        );
    }
    format!(
        "{origin} names {}, {} a job's user writes as free text: {why}, or again with a --format that leaves {} out{}",
        and_list(&known),
        if known.len() == 1 {
            "a column"
        } else {
            "columns"
        },
        them(&known).0,
        unknown_note(&unknown, true),
    )
}

/// The warning an export with free-text columns (and no `AdminComment`) is read with: its
/// lines are read, but a line break in such a value could still frame a row of its own.
pub(super) fn free_text_caution(names: &[String]) -> String {
    let (known, unknown) = known_and_unknown(names);
    let all: Vec<String> = known.iter().chain(&unknown).cloned().collect();
    format!(
        "{} {} a job's user's free text{}: the lines as wide as the header were read, but a line break in such a value could frame a line that reads as a row of its own, which no count of fields shows; for figures you rely on, export with `sacct --json` (it quotes every string) or with a --format that leaves {} out",
        and_list(&all),
        if all.len() == 1 { "holds" } else { "hold" },
        unknown_note(&unknown, false),
        them(&all).0,
    )
}

/// Why a line with more fields than the header is skipped when several columns can hold the
/// delimiter: `job 12: 7 fields where the header has 6, and ...`.
pub(super) fn ambiguous_line(
    job: Option<&str>,
    got: usize,
    want: usize,
    loose: &[String],
) -> String {
    format!(
        "{}{got} fields where the header has {want}, and {}: which field holds the extra ones cannot be told, so the line is not read; export with `sacct --json`, or with `--parsable2 --delimiter=` a character no value holds, or with a --format that keeps one of them only",
        job.map_or(String::new(), |j| format!("job {j}: ")),
        if loose.len() == 1 {
            format!(
                "{} can hold the delimiter while the line may end with --parsable's",
                and_list(loose)
            )
        } else {
            format!("{} can each hold the delimiter", and_list(loose))
        },
    )
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
        let mut trailing = Some(false);
        if shown.len() > 1 && shown.last().is_some_and(String::is_empty) {
            shown.pop();
            trailing = Some(true);
        }
        if origin == "--input-columns" {
            trailing = None;
        }
        let names: Vec<String> = shown.iter().map(|s| s.to_ascii_lowercase()).collect();
        let loose: Vec<usize> = (0..shown.len())
            .filter(|&i| column_form(&shown[i]) != ColumnForm::Fixed)
            .collect();
        let surplus = match loose.as_slice() {
            [] => Surplus::Skip,
            [one] => Surplus::JoinInto(*one),
            many => Surplus::Ambiguous(many.iter().map(|&i| shown[i].clone()).collect()),
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
        if !free.is_empty() && names.iter().any(|n| n == "admincomment") {
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
            free_text: free,
            trailing,
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
        if !self.free_text.is_empty() {
            out.push(free_text_caution(&self.free_text));
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
