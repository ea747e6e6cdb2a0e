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
//! * a line as wide as the header has no delimiter inside any value, and reads where the
//!   header says. A line with more fields reads when one column alone can hold the delimiter
//!   (`AdminComment`, `Constraints`, a free-text column, ...): the extra fields are joined back
//!   into it. When two can, which one holds them cannot be told and the line is skipped with
//!   its line and job id; the input is refused only when no line reads.
//! * a column a job's user writes as free text (`JobName`, `Comment`, `WorkDir`, `SubmitLine`,
//!   `StdOut`, ...), or a column this reader does not know, can hold line breaks as well, and so
//!   frame a whole line that reads as a row, with every line still as wide as the header. Beside
//!   `AdminComment` that line could carry a verdict of the user's (a FAILED job with a `fail`
//!   verdict passing for COMPLETED and `pass`), so such a header is refused; without it the
//!   export is read with a warning naming those columns, and a line shorter than the header is
//!   skipped (it may be a piece of a broken value). `sacct --json` quotes every string and is
//!   read instead.

use std::io::BufRead;

use super::pool::{
    BATCH_BYTES, Batch, InputNotes, OnBad, Parsed, Recycler, Streamed, read_full, run,
};
use super::{JobDetail, JobRecord, JobState, ReportError, gpus_from_tres, tag_state, unset};

mod columns;
mod values;

pub use columns::{ColumnForm, column_form, header_names};
use columns::{Columns, Surplus, ambiguous_line};
pub use values::{gpus_from_gres, parse_time, parse_when, utc_date, utc_text};
use values::{is_unset_word, parse_elapsed};

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
        let f: Vec<&str> = line.split(delim).collect();
        if f.len() > cols.n {
            return surplus_line(cols, line);
        }
        return finish_line(cols, &f);
    }
    let mut f: [&str; MAX_FIELDS] = [""; MAX_FIELDS];
    let mut count = 0;
    let mut at = 0;
    for i in memchr::memchr_iter(b'|', line.as_bytes()) {
        if count < MAX_FIELDS {
            f[count] = &line[at..i];
        }
        count += 1;
        at = i + 1;
    }
    if count < MAX_FIELDS {
        f[count] = &line[at..];
    }
    count += 1;
    if count > cols.n {
        return surplus_line(cols, line);
    }
    finish_line(cols, &f[..count])
}

/// A line with more fields than the header (rare: the slow path). A line as wide as the
/// header has no delimiter inside any value, so only such a line can have a value that holds
/// one; it is read when one column alone can hold the delimiter ([`Surplus::JoinInto`]) and
/// skipped with the reason otherwise.
fn surplus_line(cols: &Columns, line: &str) -> Result<Parsed, String> {
    let delim = cols.delim.as_str();
    let line = match (cols.trailing, line.strip_suffix(delim)) {
        // `--parsable`, as the header showed: the last delimiter ends the line.
        (Some(true), Some(l)) => l,
        // Unknown (no header): the last delimiter may end the line or a value, which moves
        // every field after the one column that holds the extra ones.
        (None, Some(_)) if cols.surplus != Surplus::JoinInto(cols.n - 1) => {
            return Err(ambiguous_line(
                None,
                line.matches(delim).count() + 1,
                cols.n,
                &[cols.names[match cols.surplus {
                    Surplus::JoinInto(i) => i,
                    _ => cols.n - 1,
                }]
                .clone()],
            ));
        }
        _ => line,
    };
    let f: Vec<&str> = line.split(delim).collect();
    if f.len() <= cols.n {
        return finish_line(cols, &f);
    }
    let extra = f.len() - cols.n;
    match &cols.surplus {
        Surplus::Skip => Err(field_count_error(f.len(), cols.n)),
        Surplus::Ambiguous(loose) => {
            // The JobID is where the header says when no column before it can hold the
            // delimiter, or counted from the end when none after it can.
            let first = cols.names.iter().position(|n| loose.contains(n));
            let last = cols.names.iter().rposition(|n| loose.contains(n));
            let job = if first.is_none_or(|i| cols.job_id < i) {
                f.get(cols.job_id)
            } else if last.is_none_or(|i| cols.job_id > i) {
                f.get(cols.job_id + extra)
            } else {
                None
            };
            Err(ambiguous_line(
                job.copied().filter(|j| !j.is_empty()),
                f.len(),
                cols.n,
                loose,
            ))
        }
        &Surplus::JoinInto(i) => {
            // The value of column `i` runs from its first field to the one `extra` further.
            let bars: Vec<usize> = line.match_indices(delim).map(|(p, _)| p).collect();
            let from = if i == 0 { 0 } else { bars[i - 1] + delim.len() };
            let to = bars.get(i + extra).copied().unwrap_or(line.len());
            let mut g: Vec<&str> = Vec::with_capacity(cols.n);
            g.extend_from_slice(&f[..i]);
            g.push(&line[from..to]);
            g.extend_from_slice(&f[i + extra + 1..]);
            finish_line(cols, &g)
        }
    }
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
/// of a cut line may itself be cut short), and no column holds a job's user's free text (a
/// line break in such a value leaves pieces of a line). Then the columns after it were left off
/// whole (an output made with a shorter `--format`, or a line cut just after a delimiter's
/// field) and are read as empty. Otherwise the error says why the line cannot be read.
fn short_line(cols: &Columns, count: usize) -> Result<(), String> {
    let last = count.saturating_sub(1);
    let name = |i: usize| cols.names.get(i).map_or("?", String::as_str);
    if !cols.free_text.is_empty() {
        return Err(short_error(
            count,
            cols.n,
            &format!(
                "{} can hold a line break, so it may be a piece of a line",
                columns::and_list(&cols.free_text)
            ),
        ));
    }
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
        (Some(i), _) if !is_unset_word(f[i]) => f[i]
            .parse::<u64>()
            .map(unset::value)
            .map(|v| v as u64)
            .map_err(|_| format!("ElapsedRaw `{}` is not a number of seconds", f[i]))?,
        (_, Some(i)) if !is_unset_word(f[i]) => {
            parse_elapsed(f[i]).ok_or_else(|| format!("Elapsed `{}` is not [D-]HH:MM:SS", f[i]))?
        }
        // Without an elapsed column, an ended job lasted from its Start to its End.
        _ if start_s > 0 && end_s > start_s => (end_s - start_s) as u64,
        _ => 0,
    };
    let nnodes = match cols.nnodes {
        Some(i) if !is_unset_word(f[i]) => f[i]
            .parse::<u64>()
            .ok()
            .and_then(|n| u32::try_from(unset::value(n)).ok())
            .ok_or_else(|| format!("NNodes `{}` is not a count", f[i]))?,
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
mod tests;
