//! Reader of `sacct -P` (parsable) text: a header line of field names, then one `|`-separated line
//! per job or step.
//!
//! The columns are found by name in the header, so any order works; [`FIELDS`] is what
//! `fabric-check report` asks for when it runs sacct itself. Output made with `--noheader` is
//! read when the caller names its columns ([`TextLayout::columns`], the `--format` list that
//! produced it); without them such input is refused with the command to rerun. Layouts seen on
//! real clusters and read: any delimiter (`--delimiter=☃`; found from the header, or given),
//! `--parsable` (a trailing delimiter on every line) as well as `--parsable2`, `#` comment and
//! blank lines (skipped), `None`/`Unknown` times, `CANCELLED by <uid>`, `Elapsed` as
//! `[D-]HH:MM:SS`, typed GPU TRES (`gres/gpu:a100=8` beside `gres/gpu=8`, counted once).
//! Without an `Elapsed`/`ElapsedRaw` column an ended job's duration is End − Start; without
//! `AllocTRES` the GPUs come from `AllocGRES` (`gpu:a100:4`); a column whose absence leaves a
//! figure unknown (no duration, no GPUs, no node count) is named in the report's input
//! warnings rather than read as a silent 0. A record listed twice is counted once and said so
//! (see the pool's duplicate check).
//! Steps (`123.batch`, `123.extern`, `123.0`, `123.interactive`) are
//! skipped. Times are read as `sacct` prints them: Unix seconds (when `SLURM_TIME_FORMAT=%s`,
//! which the command sets) or `YYYY-MM-DDTHH:MM:SS` (taken as UTC: only differences are used);
//! `Unknown`/`None` are unset.
//!
//! sacct prints every value as it is, delimiter and line breaks included, so what a value can
//! hold decides whether the lines of an export can be trusted ([`column_form`]):
//!
//! * a header naming a column a job's user writes as free text (`JobName`, `Comment`,
//!   `WorkDir`, `SubmitLine`, `StdOut`, ...), or a column this reader does not know, is refused:
//!   such a value can hold the delimiter and line breaks, and so frame a whole line that reads as
//!   a row of root's (a FAILED job with a `fail` verdict passing for COMPLETED and `pass`), with
//!   every line still as wide as the header. `sacct --json` quotes every string and is read
//!   instead.
//! * `AdminComment` may itself contain `|` (other tools write free text there), so when it is the
//!   last column and every column before it has a fixed form ([`ColumnForm::Fixed`]), every
//!   extra field is joined back into it. When a column before it can hold the delimiter as well
//!   (`Constraints` `a|b`, `Licenses`), which field holds the extra ones cannot be told, and a
//!   line with extra fields refuses the whole input.

use std::io::BufRead;

use super::pool::{
    BATCH_BYTES, Batch, InputNotes, OnBad, Parsed, Recycler, Streamed, read_full, run,
};
use super::{JobDetail, JobRecord, JobState, ReportError, gpus_from_tres, tag_state};

/// The `--format` list used when fabric-check runs sacct (AdminComment last, see above).
pub const FIELDS: &str = "JobID,Partition,Account,User,Cluster,QOS,State,Submit,Eligible,Start,End,ElapsedRaw,NNodes,AllocTRES,AdminComment";

/// How a `sacct -P` text is laid out when it cannot say so itself.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TextLayout {
    /// The `--format` list the output was made with, for output without a header line
    /// (`sacct -n`/`--noheader`): `State,JobID,ReqCPUS,...`.
    pub columns: Option<String>,
    /// sacct's `--delimiter` (default `|`; found from the header when there is one).
    pub delimiter: Option<String>,
    /// Keep each job's [`JobDetail`] (`JobIDRaw`, the state as printed, `NodeList`, the whole
    /// `AdminComment`): `fabric-check jobs` shows them, the report does not.
    pub detail: bool,
    /// The caller shows no GPU figures (`fabric-check jobs`): an input without `AllocTRES` (or
    /// `AllocGRES`) leaves nothing it shows unknown, so that is not warned about.
    pub gpus_unused: bool,
}

#[derive(Debug, Clone, Default)]
struct Columns {
    /// The field separator.
    delim: String,
    n: usize,
    /// The header's names as written, for messages.
    names: Vec<String>,
    job_id: usize,
    partition: Option<usize>,
    account: Option<usize>,
    user: Option<usize>,
    cluster: Option<usize>,
    qos: Option<usize>,
    state: usize,
    submit: Option<usize>,
    eligible: Option<usize>,
    start: Option<usize>,
    end: Option<usize>,
    elapsed_raw: Option<usize>,
    elapsed: Option<usize>,
    nnodes: Option<usize>,
    alloc_tres: Option<usize>,
    /// `AllocGRES` (`gpu:4`, `gpu:a100:4(IDX:0-3)`), read where `AllocTRES` is absent.
    alloc_gres: Option<usize>,
    admin_comment: Option<usize>,
    job_id_raw: Option<usize>,
    nodelist: Option<usize>,
    /// Fill [`JobRecord::detail`].
    detail: bool,
    /// What a line with more fields than the header means.
    surplus: Surplus,
}

/// What a line with more fields than the header is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
enum Surplus {
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
const FREE_TEXT: &[&str] = &[
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
fn and_list(names: &[String]) -> String {
    let quoted: Vec<String> = names.iter().map(|n| format!("`{n}`")).collect();
    match quoted.as_slice() {
        [] => String::new(),
        [one] => one.clone(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
    }
}

/// Why a layout naming columns of free text (or columns this reader does not know) is not read,
/// and what to export instead.
fn free_text_refusal(origin: &str, names: &[String]) -> String {
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
fn surplus_refusal(got: usize, want: usize, loose: &[String]) -> String {
    format!(
        "{got} fields where the header has {want}, and {} before the last column, AdminComment, can hold the delimiter too: which field holds the extra ones cannot be told, so this export is not read; export with `sacct --json` instead, or again with a --format that leaves {} out or ends before AdminComment",
        and_list(loose),
        if loose.len() == 1 { "it" } else { "them" },
    )
}

/// What to do with a line of `count` fields, more than the header's: `Ok(None)` to join the
/// extra ones into the last column, `Ok(Some(refusal))` to stop reading, `Err` to skip the line.
fn surplus(cols: &Columns, count: usize) -> Result<Option<Parsed>, String> {
    match &cols.surplus {
        Surplus::JoinIntoAdminComment => Ok(None),
        Surplus::Refuse(loose) => Ok(Some(Parsed::Refuse(surplus_refusal(count, cols.n, loose)))),
        Surplus::Skip => Err(field_count_error(count, cols.n)),
    }
}

/// The delimiter of a header line: the first character that cannot be part of a field name.
fn header_delimiter(line: &str) -> Option<char> {
    line.trim()
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || c.is_whitespace()))
}

/// Whether a line is a header: it names the `State` or `JobID` column.
fn looks_like_header(line: &str, delim: &str) -> bool {
    line.split(delim).any(|f| {
        let f = f.trim();
        f.eq_ignore_ascii_case("state")
            || f.eq_ignore_ascii_case("jobid")
            || f.eq_ignore_ascii_case("jobidraw")
    })
}

impl Columns {
    /// The columns the report reads.
    fn used(&self) -> impl Iterator<Item = usize> + '_ {
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

    fn from_header_with(line: &str, layout: &TextLayout) -> Result<Self, String> {
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

    fn from_layout(columns: &str, layout: &TextLayout) -> Result<Self, String> {
        let delim = layout.delimiter.clone().unwrap_or_else(|| "|".to_string());
        let names = columns.replace(',', &delim);
        Self::from_names(
            &names,
            &delim,
            "--input-columns",
            "add it to sacct's --format and to --input-columns, or run `sacct -P -o FIELDS` (with the header, without -n)",
        )
    }

    fn from_names(line: &str, delim: &str, origin: &str, fix: &str) -> Result<Self, String> {
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
    fn missing(&self, gpus_shown: bool) -> Vec<String> {
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

/// GPUs from `AllocGRES` as older Slurm prints it: `gpu:4`, `gpu:a100:4`, `gpu:a100:4(IDX:0-3)`,
/// several entries comma-separated; `None` when no entry is a GPU. An untyped `gpu:N` is the
/// total (typed entries beside it count the same GPUs, as in [`gpus_from_tres`]); otherwise
/// the typed entries add up.
pub fn gpus_from_gres(gres: &str) -> Option<u32> {
    let mut typed: Option<u32> = None;
    for item in gres.split(',') {
        let item = item.split('(').next().unwrap_or(item).trim();
        let parts: Vec<&str> = item.split(':').collect();
        match parts.as_slice() {
            ["gpu", n] => return n.parse().ok(),
            ["gpu", _, n] => {
                typed = Some(typed.unwrap_or(0).saturating_add(n.parse().unwrap_or(0)));
            }
            _ => {}
        }
    }
    typed
}

/// Unix seconds as `YYYY-MM-DDTHH:MM:SS` in UTC, the inverse of [`parse_time`] and the form
/// sacct's `-S`/`-E` accept (clamped to the years -9999 to 9999).
pub fn utc_text(secs: i64) -> String {
    utc_datetime(secs).strftime("%Y-%m-%dT%H:%M:%S").to_string()
}

/// The UTC calendar date of a day number (days since 1970-01-01) as `YYYY-MM-DD`.
pub fn utc_date(day: i64) -> String {
    utc_datetime(day.saturating_mul(86_400)).date().to_string()
}

/// The UTC date and time of Unix seconds, clamped to what the calendar covers.
fn utc_datetime(secs: i64) -> jiff::civil::DateTime {
    let t = jiff::Timestamp::from_second(secs).unwrap_or(if secs < 0 {
        jiff::Timestamp::MIN
    } else {
        jiff::Timestamp::MAX
    });
    jiff::tz::Offset::UTC.to_datetime(t)
}

/// Unix seconds from `1700000000` or `2024-05-01T10:00:00` (taken as UTC); 0 for `Unknown`,
/// `None`, empty.
pub fn parse_time(s: &str) -> Result<i64, String> {
    let s = s.trim();
    if s.is_empty() || s == "Unknown" || s == "None" {
        return Ok(0);
    }
    if let Ok(n) = s.parse::<i64>() {
        return Ok(n);
    }
    s.parse::<jiff::civil::DateTime>()
        .ok()
        .filter(|_| s.len() >= 19 && s.as_bytes()[10] == b'T')
        .and_then(|dt| jiff::tz::Offset::UTC.to_timestamp(dt).ok())
        .map(|t| t.as_second())
        .ok_or_else(|| format!("`{s}` is not a time (want Unix seconds or YYYY-MM-DDTHH:MM:SS)"))
}

/// A time a person gives on the command line (`--start`, `--since`): Unix seconds,
/// `YYYY-MM-DD`, `YYYY-MM-DDTHH:MM` or `YYYY-MM-DDTHH:MM:SS`, taken as UTC. The error is a whole
/// sentence about `flag`: `--start `yesterday` is not a time: write ...`.
pub fn parse_when(s: &str, flag: &str) -> Result<i64, String> {
    let full = match s.len() {
        10 if s.as_bytes().get(4) == Some(&b'-') => format!("{s}T00:00:00"),
        16 => format!("{s}:00"),
        _ => s.to_string(),
    };
    match parse_time(&full) {
        Ok(t) if !s.trim().is_empty() && t > 0 => Ok(t),
        _ => Err(format!(
            "{flag} `{s}` is not a time: write YYYY-MM-DD, YYYY-MM-DDTHH:MM[:SS] (UTC) or Unix seconds"
        )),
    }
}

/// `[D-]HH:MM:SS`, `MM:SS` or `MM:SS.mmm` to seconds.
fn parse_elapsed(s: &str) -> Option<u64> {
    let (days, rest) = match s.split_once('-') {
        Some((d, r)) => (d.parse::<u64>().ok()?, r),
        None => (0, s),
    };
    let parts: Vec<f64> = rest
        .split(':')
        .map(|p| p.parse::<f64>().ok())
        .collect::<Option<_>>()?;
    let secs = match parts.as_slice() {
        [h, m, s] => h * 3600.0 + m * 60.0 + s,
        [m, s] => m * 60.0 + s,
        [s] => *s,
        _ => return None,
    };
    Some(days * 86_400 + secs as u64)
}

/// Fields a line is split into without allocating (more columns take a `Vec`).
const MAX_FIELDS: usize = 48;

fn parse_line(cols: &Columns, line: &str) -> Result<Parsed, String> {
    if line.starts_with('#') || line.trim().is_empty() {
        // Comments someone added to a saved output; sacct never starts a line with `#`.
        return Ok(Parsed::Nothing);
    }
    // `--parsable` ends every line with the delimiter: one empty field too many.
    let delim = cols.delim.as_str();
    let line = match line.strip_suffix(delim) {
        Some(l) if line.matches(delim).count() == cols.n => l,
        _ => line,
    };
    if delim != "|" || cols.n > MAX_FIELDS {
        let mut f: Vec<&str> = line.split(delim).collect();
        if f.len() > cols.n {
            if let Some(stop) = surplus(cols, f.len())? {
                return Ok(stop);
            }
            // The extra fields go back into the last column, AdminComment.
            let joined_start = line
                .match_indices(delim)
                .nth(cols.n - 2)
                .map_or(0, |(i, _)| i + delim.len());
            f.truncate(cols.n - 1);
            f.push(&line[joined_start..]);
        }
        return finish_line(cols, &f);
    }
    let mut f: [&str; MAX_FIELDS] = [""; MAX_FIELDS];
    let mut count = 0;
    let mut at = 0;
    // Where the last column starts if extra bars are joined back into it.
    let mut last_start = 0;
    for i in memchr::memchr_iter(b'|', line.as_bytes()) {
        if count < MAX_FIELDS {
            f[count] = &line[at..i];
        }
        count += 1;
        at = i + 1;
        if count == cols.n - 1 {
            last_start = at;
        }
    }
    if count < MAX_FIELDS {
        f[count] = &line[at..];
    }
    count += 1;
    if count > cols.n {
        if let Some(stop) = surplus(cols, count)? {
            return Ok(stop);
        }
        f[cols.n - 1] = &line[last_start..];
        count = cols.n;
    }
    finish_line(cols, &f[..count])
}

/// Reads the fields of a line; a line with fewer fields than the header is read with its
/// missing trailing columns empty when that cannot change what it says (see [`short_line`]).
fn finish_line(cols: &Columns, f: &[&str]) -> Result<Parsed, String> {
    if f.len() == cols.n {
        return Ok(match parse_fields(cols, f)? {
            Some(job) => Parsed::Job(job),
            None => Parsed::Nothing,
        });
    }
    short_line(cols, f.len())?;
    let mut padded: Vec<&str> = f.to_vec();
    padded.resize(cols.n, "");
    Ok(match parse_fields(cols, &padded)? {
        Some(job) => Parsed::Padded(job),
        None => Parsed::Nothing,
    })
}

/// Whether a line of `count < cols.n` fields is unambiguous: its JobID and State are there
/// and are not its last field, and neither is any other column the report reads (the last field
/// of a cut line may itself be cut short). Then the columns after it were left off whole (an
/// output made with a shorter `--format`, or a line cut just after a delimiter's field) and are
/// read as empty. Otherwise the error says why the line cannot be read.
fn short_line(cols: &Columns, count: usize) -> Result<(), String> {
    let last = count.saturating_sub(1);
    let name = |i: usize| cols.names.get(i).map_or("?", String::as_str);
    if cols.job_id >= last || cols.state >= last {
        return Err(short_error(
            count,
            cols.n,
            &format!(
                "its {} is missing or may be cut",
                if cols.job_id >= last {
                    "JobID"
                } else {
                    "State"
                }
            ),
        ));
    }
    if cols.used().any(|i| i == last) {
        return Err(short_error(
            count,
            cols.n,
            &format!("its last field, {}, may be cut", name(last)),
        ));
    }
    Ok(())
}

fn short_error(got: usize, want: usize, why: &str) -> String {
    format!(
        "{got} fields where the header has {want} and {why}; was the output cut or mixed with other text?"
    )
}

fn field_count_error(got: usize, want: usize) -> String {
    format!(
        "{got} fields where the header has {want}; was the output cut or mixed with other text?"
    )
}

fn parse_fields(cols: &Columns, f: &[&str]) -> Result<Option<JobRecord>, String> {
    let job_id = f[cols.job_id];
    if job_id.as_bytes().contains(&b'.') {
        return Ok(None);
    }
    if job_id.is_empty() {
        return Err("the JobID field is empty".into());
    }
    let get = |c: Option<usize>| c.map_or("", |i| f[i]);
    let time =
        |c: Option<usize>, name: &str| parse_time(get(c)).map_err(|e| format!("{name}: {e}"));
    let (start_s, end_s) = (time(cols.start, "Start")?, time(cols.end, "End")?);
    let elapsed_s = match (cols.elapsed_raw, cols.elapsed) {
        (Some(i), _) if !f[i].is_empty() => f[i]
            .parse::<u64>()
            .map_err(|_| format!("ElapsedRaw `{}` is not a number of seconds", f[i]))?,
        (_, Some(i)) if !f[i].is_empty() => {
            parse_elapsed(f[i]).ok_or_else(|| format!("Elapsed `{}` is not [D-]HH:MM:SS", f[i]))?
        }
        // Without an elapsed column, an ended job lasted from its Start to its End.
        _ if start_s > 0 && end_s > start_s => (end_s - start_s) as u64,
        _ => 0,
    };
    let nnodes = match cols.nnodes {
        Some(i) if !f[i].is_empty() => f[i]
            .parse::<u32>()
            .map_err(|_| format!("NNodes `{}` is not a count", f[i]))?,
        _ => 0,
    };
    let comment = get(cols.admin_comment);
    Ok(Some(JobRecord {
        job_id: job_id.to_string(),
        partition: get(cols.partition).to_string(),
        account: get(cols.account).to_string(),
        user: get(cols.user).to_string(),
        cluster: get(cols.cluster).to_string(),
        qos: get(cols.qos).to_string(),
        state: JobState::parse(f[cols.state]),
        submit_s: time(cols.submit, "Submit")?,
        eligible_s: time(cols.eligible, "Eligible")?,
        start_s,
        end_s,
        elapsed_s,
        nnodes,
        gpus: match cols.alloc_tres {
            Some(i) => gpus_from_tres(f[i]),
            None => gpus_from_gres(get(cols.alloc_gres)),
        },
        restarts: 0,
        tag: if comment.is_empty() {
            super::TagState::Absent
        } else {
            tag_state(comment)
        },
        detail: cols.detail.then(|| {
            Box::new(JobDetail {
                job_id_raw: get(cols.job_id_raw).to_string(),
                state: f[cols.state].to_string(),
                nodelist: get(cols.nodelist).to_string(),
                admin_comment: comment.to_string(),
            })
        }),
    }))
}

/// Streams `sacct -P` text like [`super::sacct_json::stream`]. A line that cannot be read is
/// left out and counted in [`Streamed::notes`] (with its 1-based line and why), so one cut line
/// does not hide the rest; the run stops only when the header is wrong or no line at all reads.
pub fn stream<R, A, I, F>(
    reader: R,
    source_name: &str,
    threads: usize,
    init: I,
    each: F,
) -> Result<Streamed<A>, ReportError>
where
    R: BufRead,
    A: Send,
    I: Fn() -> A + Sync,
    F: Fn(&mut A, JobRecord) + Sync,
{
    stream_with(
        reader,
        source_name,
        &TextLayout::default(),
        threads,
        init,
        each,
    )
}

/// [`stream`] with the columns and delimiter of output that does not say them itself.
pub fn stream_with<R, A, I, F>(
    mut reader: R,
    source_name: &str,
    layout: &TextLayout,
    threads: usize,
    init: I,
    each: F,
) -> Result<Streamed<A>, ReportError>
where
    R: BufRead,
    A: Send,
    I: Fn() -> A + Sync,
    F: Fn(&mut A, JobRecord) + Sync,
{
    let text_err = |line: u64, message: String| ReportError::Text {
        source_name: source_name.to_string(),
        line,
        message,
    };
    let mut header = String::new();
    let mut line_no = 0u64;
    let given = match &layout.columns {
        Some(c) => Some(Columns::from_layout(c, layout).map_err(|m| text_err(0, m))?),
        None => None,
    };
    while given.is_none() {
        header.clear();
        let n = reader
            .read_line(&mut header)
            .map_err(|source| ReportError::Io {
                source_name: source_name.to_string(),
                source,
            })?;
        line_no += 1;
        if n == 0 {
            return Err(text_err(
                line_no,
                "the input is empty; did sacct print anything?".into(),
            ));
        }
        if !header.trim().is_empty() && !header.starts_with('#') {
            break;
        }
    }
    let mut cols = match given {
        Some(c) => c,
        None => Columns::from_header_with(header.trim_end_matches(['\n', '\r']), layout)
            .map_err(|m| text_err(line_no, m))?,
    };
    cols.detail = layout.detail;
    let first_data_line = line_no + 1;
    let missing = cols.missing(!layout.gpus_unused);
    let streamed = run(
        threads,
        OnBad::Skip,
        init,
        each,
        |bytes: &[u8], _index: u64| {
            let line =
                std::str::from_utf8(bytes).map_err(|_| "the line is not UTF-8 text".to_string())?;
            parse_line(&cols, line)
        },
        |tx: &crossbeam_channel::Sender<Batch>, recycler: &Recycler| {
            // Whole chunks cut at their last newline are handed over; only the cut line is copied.
            // `store[..filled]` holds the input not yet handed over.
            let mut store = recycler.get(BATCH_BYTES);
            let mut filled = 0usize;
            let mut no = first_data_line;
            loop {
                if store.len() < filled + BATCH_BYTES {
                    store.resize(filled + BATCH_BYTES, 0);
                }
                let n = read_full(&mut reader, &mut store[filled..filled + BATCH_BYTES]).map_err(
                    |source| ReportError::Io {
                        source_name: source_name.to_string(),
                        source,
                    },
                )?;
                filled += n;
                let buf = &store[..filled];
                let end = if n == 0 {
                    buf.len()
                } else {
                    match memchr::memrchr(b'\n', buf) {
                        Some(i) => i + 1,
                        None => continue,
                    }
                };
                let mut items = recycler.items();
                let mut start = 0;
                while start < end {
                    let stop = memchr::memchr(b'\n', &buf[start..end]).map_or(end, |i| start + i);
                    let mut body_end = stop;
                    while body_end > start && matches!(buf[body_end - 1], b'\r') {
                        body_end -= 1;
                    }
                    if body_end > start {
                        items.push((start, body_end, no, no));
                    }
                    no += 1;
                    start = stop + 1;
                }
                let carry = buf.len() - end;
                let mut next = recycler.get(carry + BATCH_BYTES);
                next[..carry].copy_from_slice(&buf[end..]);
                filled = carry;
                let chunk = std::mem::replace(&mut store, next);
                if !items.is_empty() && tx.send(Batch { data: chunk, items }).is_err() {
                    return Ok(());
                }
                if n == 0 {
                    break;
                }
            }
            Ok(())
        },
        text_err,
    );
    streamed.map(|mut st| {
        st.notes.missing_columns.extend(missing);
        st
    })
}

/// Reads everything into [`JobRecord`]s (tests and small inputs); a line that cannot be read is
/// an error here (see [`read_all_noting`] for the lenient form the report uses).
pub fn read_all<R: BufRead>(reader: R, source_name: &str) -> Result<Vec<JobRecord>, ReportError> {
    read_all_with(reader, source_name, &TextLayout::default())
}

/// [`read_all`] with the columns and delimiter of output that does not say them itself.
pub fn read_all_with<R: BufRead>(
    reader: R,
    source_name: &str,
    layout: &TextLayout,
) -> Result<Vec<JobRecord>, ReportError> {
    let (jobs, notes) = read_all_noting(reader, source_name, layout)?;
    match notes.skipped_first.into_iter().next() {
        Some((line, message)) => Err(ReportError::Text {
            source_name: source_name.to_string(),
            line,
            message,
        }),
        None => Ok(jobs),
    }
}

/// Every job that reads, in input order, and what was skipped or padded on the way.
pub fn read_all_noting<R: BufRead>(
    reader: R,
    source_name: &str,
    layout: &TextLayout,
) -> Result<(Vec<JobRecord>, InputNotes), ReportError> {
    let mut s = stream_with(
        reader,
        source_name,
        layout,
        1,
        Vec::new,
        |v: &mut Vec<JobRecord>, j| v.push(j),
    )?;
    Ok((s.accs.pop().unwrap_or_default(), s.notes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{JobState, TagState};

    const HEADER: &str = "JobID|Partition|Account|User|Cluster|QOS|State|Submit|Eligible|Start|End|ElapsedRaw|NNodes|AllocTRES|AdminComment\n";

    #[test]
    fn steps_are_skipped_and_a_comment_with_bars_is_kept_whole() {
        let text = format!(
            "{HEADER}12|ib|ml|ann|c1|normal|COMPLETED|2024-05-01T10:00:00|2024-05-01T10:00:00|2024-05-01T10:01:00|2024-05-01T11:01:00|3600|2|billing=16,cpu=16,gres/gpu=16,node=2|JS1:a|b fabric-check/v1 {{\"nnodes\":2}}\n12.batch|||||||||||||||\n"
        );
        let jobs = read_all(text.as_bytes(), "t.txt").unwrap();
        assert_eq!(jobs.len(), 1);
        assert_eq!(jobs[0].gpus, Some(16));
        assert_eq!(jobs[0].start_s - jobs[0].submit_s, 60);
        assert!(matches!(&jobs[0].tag, TagState::Present(t) if t.nnodes == 2));
    }

    #[test]
    fn a_header_wider_than_the_split_array_reads_the_same() {
        let extra = 40;
        // Columns the report does not read (of a fixed form: any free text refuses the input).
        let pad = |s: &str| format!("{}{s}", "1|".repeat(extra));
        let header = format!("{}{HEADER}", "NTasks|".repeat(extra));
        let line = "12|ib|ml|ann|c1|normal|COMPLETED|100|100|160|3760|3600|2|gres/gpu=16|JS1:a|b fabric-check/v1 {\"nnodes\":2}\n";
        let narrow = read_all(format!("{HEADER}{line}").as_bytes(), "t.txt").unwrap();
        let wide = read_all(format!("{header}{}", pad(line)).as_bytes(), "t.txt").unwrap();
        assert_eq!(narrow, wide);
        assert!(matches!(&wide[0].tag, TagState::Present(t) if t.nnodes == 2));
        let err = read_all(format!("{header}12|ib\n").as_bytes(), "t.txt")
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "t.txt:2: 2 fields where the header has 55 and its JobID is missing or may be cut; was the output cut or mixed with other text?"
        );
    }

    /// A passing tag of ours, and a failing one (root's).
    const PASS: &str = r#"fabric-check/v1 {"verdict":"pass","nnodes":1,"counts":{"pass":1}}"#;
    const FAIL: &str = r#"fabric-check/v1 {"verdict":"fail","nnodes":1,"counts":{"fail":1}}"#;

    /// The verdicts read, by job: `(job, state, verdict)`.
    fn verdicts(jobs: &[JobRecord]) -> Vec<(String, JobState, Option<fabric_proto::tag::Verdict>)> {
        jobs.iter()
            .map(|j| {
                let v = match &j.tag {
                    TagState::Present(t) => t.verdict,
                    _ => None,
                };
                (j.job_id.clone(), j.state, v)
            })
            .collect()
    }

    #[test]
    fn a_job_name_holding_the_delimiter_cannot_pass_a_failed_job_off_as_completed_with_a_pass() {
        // Job 12 FAILED and root wrote `fail`; its user named it so that the fields after the
        // name shift and the user's segment comes first in the joined AdminComment.
        let header = "JobID|JobName|State|ElapsedRaw|NNodes|AdminComment
";
        let name = format!("train|COMPLETED|60|1|{PASS}");
        let text = format!(
            "{header}12|{name}|FAILED|60|1|{FAIL}
"
        );
        let read = read_all_noting(text.as_bytes(), "saved.txt", &TextLayout::default());
        if let Ok((jobs, _)) = &read {
            assert!(
                !verdicts(jobs)
                    .iter()
                    .any(|(_, s, _)| *s == JobState::Completed),
                "the user's text was read as the job's row: {:?}",
                verdicts(jobs)
            );
        }
        let err = read.unwrap_err().to_string();
        assert!(
            err.starts_with("saved.txt:1: the header names `JobName`, a column a job's user writes as free text: such a value can hold the delimiter and line breaks"),
            "{err}"
        );
        assert!(err.contains("export with `sacct --json` instead"), "{err}");
        assert!(err.contains("leaves it out"), "{err}");
    }

    #[test]
    fn a_work_dir_holding_a_line_break_cannot_forge_a_whole_row_as_wide_as_the_header() {
        // The user's text holds the delimiter and a line break, placed so that both lines have
        // exactly the header's six fields: a forged row for job 12, then job 12's real fields
        // (FAILED, root's `fail`) under a job id the user chose.
        let header = "JobID|WorkDir|State|ElapsedRaw|NNodes|AdminComment
";
        let dir = format!(
            "/home/ann|COMPLETED|60|1|{PASS}
13|/tmp"
        );
        let text = format!(
            "{header}12|{dir}|FAILED|60|1|{FAIL}
"
        );
        assert!(text.lines().skip(1).all(|l| l.split('|').count() == 6));
        let read = read_all_noting(text.as_bytes(), "saved.txt", &TextLayout::default());
        if let Ok((jobs, _)) = &read {
            panic!("a forged row was read: {:?}", verdicts(jobs));
        }
        let err = read.unwrap_err().to_string();
        assert!(
            err.contains("names `WorkDir`, a column a job's user writes"),
            "{err}"
        );
        // The same when the columns are given for output made without a header.
        let layout = TextLayout {
            columns: Some("JobID,Comment,SubmitLine,State".into()),
            ..TextLayout::default()
        };
        let err = read_all_with(
            &b"12|a|b|FAILED
"[..],
            "saved.txt",
            &layout,
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("--input-columns names `Comment` and `SubmitLine`, columns a job's user writes as free text"),
            "{err}"
        );
        assert!(err.contains("leaves them out"), "{err}");
    }

    #[test]
    fn extra_fields_join_a_last_admin_comment_only_when_every_column_before_it_has_a_fixed_form() {
        // Fixed columns only: another tool's `|` in AdminComment is joined back.
        let fixed = format!(
            "JobID|State|ElapsedRaw|AdminComment
12|FAILED|60|JS1:a|b {FAIL}
"
        );
        let jobs = read_all(fixed.as_bytes(), "t.txt").unwrap();
        assert_eq!(
            verdicts(&jobs),
            [(
                "12".to_string(),
                JobState::Failed,
                Some(fabric_proto::tag::Verdict::Fail)
            )]
        );
        // `Constraints` can hold `|` (`a|b`) as well: the extra fields could be either's, so
        // the input is refused, for `|` and for any other delimiter alike.
        for (d, text) in [
            (
                "|",
                format!(
                    "JobID|Constraints|State|AdminComment
11|a|COMPLETED|
12|a|b|FAILED|{FAIL}
"
                ),
            ),
            (
                "☃",
                format!(
                    "JobID☃Constraints☃State☃AdminComment
11☃a☃COMPLETED☃
12☃a☃b☃FAILED☃{FAIL}
"
                ),
            ),
        ] {
            let err = read_all_noting(text.as_bytes(), "t.txt", &TextLayout::default())
                .unwrap_err()
                .to_string();
            assert!(
                err.starts_with("t.txt:3: 5 fields where the header has 4, and `Constraints` before the last column, AdminComment, can hold the delimiter too"),
                "{d}: {err}"
            );
            assert!(err.contains("export with `sacct --json` instead"), "{err}");
        }
        // Without AdminComment last, a line with extra fields is skipped and counted as before.
        let text = "JobID|Constraints|State|ElapsedRaw
11|a|COMPLETED|60
12|a|b|FAILED|60
";
        let (jobs, notes) =
            read_all_noting(text.as_bytes(), "t.txt", &TextLayout::default()).unwrap();
        assert_eq!((jobs.len(), notes.skipped), (1, 1));
    }

    #[test]
    fn a_column_this_reader_does_not_know_is_taken_for_free_text() {
        let err = read_all(
            &b"JobID|State|Notes
1|COMPLETED|x
"[..],
            "t.txt",
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.starts_with("t.txt:1: the header names `Notes`, not a sacct column this reader knows (misspelt?): it could hold a job's user's free text"),
            "{err}"
        );
        assert!(err.contains("export with `sacct --json` instead"), "{err}");
        // A misspelt column the report needs is named as missing first.
        let err = read_all(&b"JobID|Stat\n1|COMPLETED\n"[..], "t.txt")
            .unwrap_err()
            .to_string();
        assert!(err.contains("the header has no `State` column"), "{err}");
        // Beside a known free-text column it is named too.
        let err = read_all(
            &b"JobID|State|JobName|Notes\n1|COMPLETED|a|b\n"[..],
            "t.txt",
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("names `JobName`, a column a job's user writes as free text")
                && err.ends_with("(`Notes` is not a sacct column this reader knows, so it is taken for free text too)"),
            "{err}"
        );
        assert_eq!(column_form("ALLOCTRES"), ColumnForm::Fixed);
        assert_eq!(column_form("Constraints"), ColumnForm::MayHoldDelimiter);
        assert_eq!(column_form("jobname"), ColumnForm::FreeText);
    }

    #[test]
    fn a_short_line_is_reported_with_its_line_number() {
        let text = format!("{HEADER}12|ib|ml\n");
        let err = read_all(text.as_bytes(), "t.txt").unwrap_err().to_string();
        assert_eq!(
            err,
            "t.txt:2: 3 fields where the header has 15 and its State is missing or may be cut; was the output cut or mixed with other text?"
        );
    }

    #[test]
    fn a_cut_line_is_skipped_and_counted_while_the_lines_around_it_are_read() {
        // Line 4 stops inside State, line 5 inside End (both read by the report): skipped.
        // Line 6 stops after ExitCode, which the report does not read: only NNodes is gone,
        // whole, and reads as empty.
        let header = "JobID|State|Start|End|ExitCode|NNodes\n";
        let text = format!(
            "{header}1|COMPLETED|100|200|0:0|2\n2|FAILED|100|200|0:0|\n3|FAIL\n4|COMPLETED|100|20\n5|TIMEOUT|100|900|0:0\n6|COMPLETED|100|300|0:0|1\n"
        );
        let (jobs, notes) =
            read_all_noting(text.as_bytes(), "t.txt", &TextLayout::default()).unwrap();
        let ids: Vec<&str> = jobs.iter().map(|j| j.job_id.as_str()).collect();
        assert_eq!(ids, ["1", "2", "5", "6"]);
        assert_eq!((jobs[2].state, jobs[2].nnodes), (JobState::Timeout, 0));
        assert_eq!(notes.skipped, 2);
        let lines: Vec<u64> = notes.skipped_first.iter().map(|(l, _)| *l).collect();
        assert_eq!(lines, [4, 5]);
        assert!(
            notes.skipped_first[0]
                .1
                .contains("its State is missing or may be cut")
        );
        assert!(
            notes.skipped_first[1]
                .1
                .contains("its last field, End, may be cut")
        );
        assert_eq!((notes.padded, notes.padded_first.clone()), (1, vec![6]));
        let w = notes.warnings();
        assert_eq!(w.len(), 3, "{w:?}");
        assert!(
            w[0].starts_with("2 lines skipped: line 4: 2 fields"),
            "{w:?}"
        );
        assert!(
            w[2].starts_with("no AllocTRES (or AllocGRES) column"),
            "{w:?}"
        );
        // The strict reader refuses the same input at the first cut line.
        let err = read_all(text.as_bytes(), "t.txt").unwrap_err().to_string();
        assert!(
            err.starts_with("t.txt:4: 2 fields where the header has 6"),
            "{err}"
        );
    }

    #[test]
    fn a_line_missing_only_trailing_columns_after_an_unread_one_is_read_with_them_empty() {
        // Partition added last to the --format halfway through a saved history.
        let header = "JobID|State|ElapsedRaw|TotalCPU|Partition\n";
        let text = format!("{header}1|COMPLETED|60|00:10|ib\n2|FAILED|30|00:05\n");
        let (jobs, notes) =
            read_all_noting(text.as_bytes(), "t.txt", &TextLayout::default()).unwrap();
        assert_eq!(jobs.len(), 2);
        assert_eq!((jobs[1].state, jobs[1].elapsed_s), (JobState::Failed, 30));
        assert_eq!(jobs[1].partition, "");
        assert_eq!(
            (notes.skipped, notes.padded, notes.padded_first.clone()),
            (0, 1, vec![3])
        );
        assert_eq!(
            notes.warnings(),
            [
                "1 line shorter than the header, read with the missing trailing columns empty: line 3",
                "no AllocTRES (or AllocGRES) column: the jobs' GPUs are unknown, so GPU-hours show 0; add AllocTRES to sacct's --format",
                "no NNodes (or AllocNodes) column: node-hours are unknown and counted as 0; add NNodes to sacct's --format",
            ]
        );
    }

    #[test]
    fn an_input_where_no_line_reads_is_an_error_not_an_empty_report() {
        let text = "JobID|State|End\n1|COMP\n2|FAIL\n";
        let err = stream(text.as_bytes(), "t.txt", 1, || (), |_: &mut (), _| {})
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("t.txt:2: 2 fields"), "{err}");
    }

    #[test]
    fn more_skipped_lines_than_are_named_are_counted() {
        let header = "JobID|State|End\n";
        let mut text = format!("{header}1|COMPLETED|5\n");
        for i in 0..8 {
            text.push_str(&format!("{i}|X\n"));
        }
        let (_, notes) = read_all_noting(text.as_bytes(), "t.txt", &TextLayout::default()).unwrap();
        assert_eq!(
            (notes.skipped, notes.skipped_first.len()),
            (8, crate::report::NAMED)
        );
        assert!(
            notes.warnings()[0].ends_with("; and 3 more"),
            "{:?}",
            notes.warnings()
        );
    }

    #[test]
    fn a_header_without_state_says_how_to_run_sacct() {
        let err = read_all(&b"JobID|Partition\n"[..], "t.txt")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("t.txt:1: the header has no `State` column; run `sacct -P -o JobID"),
            "{err}"
        );
    }

    #[test]
    fn a_capture_listing_every_job_twice_counts_each_job_once_and_says_so() {
        let header = "JobID|Partition|State|Start|End|ElapsedRaw|NNodes|AllocTRES\n";
        let once = "101|ib|COMPLETED|100|7300|7200|2|gres/gpu=8\n102|roce|FAILED|100|3700|3600|1|gres/gpu=4\n";
        // A requeued job's earlier attempt (`sacct -D`) has the same JobID but its own times:
        // it is another record, not a repeat.
        let requeue = "102|roce|REQUEUED|50|90|40|1|gres/gpu=4\n";
        let text = format!("{header}{once}{requeue}{once}");
        let (jobs, notes) =
            read_all_noting(text.as_bytes(), "t.txt", &TextLayout::default()).unwrap();
        let ids: Vec<&str> = jobs.iter().map(|j| j.job_id.as_str()).collect();
        assert_eq!(ids, ["101", "102", "102"]);
        assert_eq!(notes.duplicates, 2);
        let w = notes.warnings();
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].starts_with("2 records listed a second time (same JobID, cluster, times and state) and counted once: job 101, 102;"),
            "{w:?}"
        );
        assert!(!notes.is_clean());
    }

    #[test]
    fn without_an_elapsed_column_an_ended_jobs_duration_is_end_minus_start() {
        let header = "JobID|State|Start|End|NNodes|AllocTRES\n";
        let text = format!(
            "{header}7|COMPLETED|2024-05-01T10:00:00|2024-05-01T12:30:00|2|gres/gpu=8\n8|RUNNING|2024-05-01T10:00:00|Unknown|1|gres/gpu=8\n"
        );
        let (jobs, notes) =
            read_all_noting(text.as_bytes(), "t.txt", &TextLayout::default()).unwrap();
        assert_eq!(jobs[0].elapsed_s, 9000);
        assert_eq!(jobs[1].elapsed_s, 0);
        assert!(notes.is_clean(), "{:?}", notes.warnings());
    }

    #[test]
    fn a_history_without_durations_or_gpus_names_the_missing_columns() {
        let text = "JobID|State|Start|NNodes\n7|COMPLETED|2024-05-01T10:00:00|2\n";
        let (jobs, notes) =
            read_all_noting(text.as_bytes(), "t.txt", &TextLayout::default()).unwrap();
        assert_eq!((jobs[0].elapsed_s, jobs[0].gpus), (0, None));
        assert_eq!(
            notes.warnings(),
            [
                "no Elapsed (or ElapsedRaw) column, nor both Start and End: every job's duration, and so its node-hours and GPU-hours, is unknown and counted as 0; add ElapsedRaw to sacct's --format",
                "no AllocTRES (or AllocGRES) column: the jobs' GPUs are unknown, so GPU-hours show 0; add AllocTRES to sacct's --format",
            ]
        );
    }

    #[test]
    fn allocgres_gives_the_gpus_where_alloctres_is_absent() {
        let text = "JobID|State|ElapsedRaw|NNodes|AllocGRES\n7|COMPLETED|60|1|gpu:a100:4(IDX:0-3)\n8|COMPLETED|60|2|gpu:v100:1,gpu:a100:2\n10|COMPLETED|60|1|gpu:4,gpu:a100:4\n9|COMPLETED|60|1|\n";
        let (jobs, notes) =
            read_all_noting(text.as_bytes(), "t.txt", &TextLayout::default()).unwrap();
        let gpus: Vec<Option<u32>> = jobs.iter().map(|j| j.gpus).collect();
        assert_eq!(gpus, [Some(4), Some(3), Some(4), None]);
        assert!(notes.is_clean(), "{:?}", notes.warnings());
        assert_eq!(gpus_from_gres("mps:100"), None);
    }

    #[test]
    fn times_read_as_epoch_or_iso() {
        assert_eq!(parse_time("1700000000").unwrap(), 1_700_000_000);
        assert_eq!(parse_time("1970-01-02T00:00:01").unwrap(), 86_401);
        assert_eq!(parse_time("Unknown").unwrap(), 0);
        assert!(parse_time("yesterday").is_err());
        // The calendar is checked: no 30th of February, no 25th hour.
        assert!(parse_time("2023-02-30T00:00:00").is_err());
        assert!(parse_time("2024-05-01T25:00:00").is_err());
        assert_eq!(parse_time("2024-02-29T00:00:00").unwrap(), 1_709_164_800);
        assert_eq!(utc_text(1_709_164_800), "2024-02-29T00:00:00");
        assert_eq!(utc_text(-1), "1969-12-31T23:59:59");
        assert_eq!(parse_elapsed("1-02:00:05"), Some(93_605));
    }
}
