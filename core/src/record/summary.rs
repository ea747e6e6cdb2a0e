//! Reading one node's records safely and reducing them to a [`RunSummary`].
//!
//! The reader runs as root (in the SPANK `job_epilog`) on a file the job's user wrote, so it
//! trusts nothing in it: the file and its directory are opened without following symlinks
//! (`O_NOFOLLOW`, via `openat(2)` on the directory's descriptor so neither can be swapped
//! between check and use), only a regular file with one link is read (optionally only one owned
//! by the job's user), at most [`ReadLimits::max_bytes`] bytes are read (the head and the tail
//! half each, so both `step_start` and `step_end` survive), and lines that are too long, not
//! UTF-8, not JSON or not version 1 are skipped and counted in `malformed_lines`.
//!
//! How records combine (see `docs/records.md`): records group by `run` (one wrapper); within a run,
//! checkpoints (and restores) come from one source, the first present of marker, regex, dir, so a
//! checkpoint seen two ways counts once; runs of one
//! rank in one launch (same `step_id` and restart count) add up in sequence; the ranks of a launch
//! run in parallel, so steps and checkpoints are the lead (lowest) rank's, outputs add up, and
//! retries, duration and the outcome take the maximum (the outcome order is [`Outcome`]'s);
//! launches add up, and the outcome and `on_time` come from the launches of the highest restart
//! count, which is also `requeues`. Fabric fault notices count once each however many ranks
//! recorded them (the ranks of a node follow the one notice file); slow-step events are the most
//! any rank flagged, added up over attempts and launches.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::fd::{AsFd, AsRawFd};
use std::path::{Path, PathBuf};

use rustix::fs::{CWD, FileType, Mode, OFlags, fstat, openat};

use fabric_base::stats::percentile_of_sorted;
use fabric_proto::record::{Body, Outcome, Record, Source, VERSION};
use fabric_proto::tag::RunSummary;

/// Default bound on the bytes read from one records file: 16 MiB (about 100 000 records; a
/// one-week run marking a step per second on 8 ranks exceeds it and is read head and tail).
pub const DEFAULT_MAX_BYTES: u64 = 16 << 20;

/// Default bound on one line: 64 KiB (a `step_start` with a long command line is under 8 KiB).
pub const DEFAULT_MAX_LINE_BYTES: usize = 64 << 10;

/// Bounds and ownership rules for reading a user-writable records file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadLimits {
    /// Most bytes read from the file: the first and the last half of it when larger.
    pub max_bytes: u64,
    /// Longer lines are skipped and counted as malformed.
    pub max_line_bytes: usize,
    /// When set, a file (or directory) not owned by this uid is refused: pass the job's uid.
    pub owner_uid: Option<u32>,
}

impl Default for ReadLimits {
    fn default() -> Self {
        Self {
            max_bytes: DEFAULT_MAX_BYTES,
            max_line_bytes: DEFAULT_MAX_LINE_BYTES,
            owner_uid: None,
        }
    }
}

/// Why a records file could not be summarised.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// The path has no file name.
    #[error("{0}: not a records file path: give the path of a .jsonl file")]
    BadPath(PathBuf),
    /// The file or its directory is a symlink.
    #[error("{0}: is a symlink (or lies in one): records are never read through symlinks")]
    Symlink(PathBuf),
    /// Not a regular file.
    #[error("{path}: is a {kind}, not a regular file: records files are plain files")]
    NotRegular {
        /// The path.
        path: PathBuf,
        /// What it is instead.
        kind: &'static str,
    },
    /// A regular file with more than one hard link.
    #[error("{0}: has more than one hard link: refused (it may be a link to another file)")]
    HardLinked(PathBuf),
    /// Owned by someone other than the job's user.
    #[error("{path}: is owned by uid {uid}, not the job's uid {expected}: refused")]
    WrongOwner {
        /// The path.
        path: PathBuf,
        /// Its owner.
        uid: u32,
        /// The expected owner.
        expected: u32,
    },
    /// The file does not exist (the job did not use fabric-run on this node).
    #[error("{0}: no records (the job did not run fabric-run on this node)")]
    Missing(PathBuf),
    /// Any other I/O error.
    #[error("{path}: cannot read records: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
    /// The file holds no usable record.
    #[error("{path}: no usable record ({malformed} malformed lines)")]
    Empty {
        /// The path.
        path: PathBuf,
        /// Lines skipped.
        malformed: u64,
    },
}

/// The decoded content of a records file.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Records {
    /// Usable records, in file order.
    pub records: Vec<Record>,
    /// Lines skipped: too long, not UTF-8, not JSON, or another schema version.
    pub malformed: u64,
    /// The file exceeded the byte bound and only its head and tail were read.
    pub truncated: bool,
}

fn io_err(path: &Path, e: impl Into<io::Error>) -> RecordError {
    let source: io::Error = e.into();
    match source.raw_os_error() {
        Some(libc_eloop) if libc_eloop == rustix::io::Errno::LOOP.raw_os_error() => {
            RecordError::Symlink(path.to_owned())
        }
        Some(e) if e == rustix::io::Errno::NOENT.raw_os_error() => {
            RecordError::Missing(path.to_owned())
        }
        _ => RecordError::Io {
            path: path.to_owned(),
            source,
        },
    }
}

fn kind_name(t: FileType) -> &'static str {
    match t {
        FileType::RegularFile => "regular file",
        FileType::Directory => "directory",
        FileType::Symlink => "symlink",
        FileType::Fifo => "FIFO",
        FileType::Socket => "socket",
        FileType::CharacterDevice => "character device",
        FileType::BlockDevice => "block device",
        FileType::Unknown => "file of unknown type",
    }
}

/// Opens `path` for reading as described in the module docs; returns the file and its size.
fn open_safely(path: &Path, limits: &ReadLimits) -> Result<(File, u64), RecordError> {
    let name = path
        .file_name()
        .ok_or_else(|| RecordError::BadPath(path.to_owned()))?;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let dir_fd = openat(
        CWD,
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| match e {
        rustix::io::Errno::NOTDIR => RecordError::Symlink(path.to_owned()),
        e => io_err(path, e),
    })?;
    if let Some(expected) = limits.owner_uid {
        let st = fstat(&dir_fd).map_err(|e| io_err(path, e))?;
        if st.st_uid != expected && st.st_uid != 0 {
            return Err(RecordError::WrongOwner {
                path: dir.to_owned(),
                uid: st.st_uid,
                expected,
            });
        }
    }
    open_in_dir(&dir_fd, name, path, limits)
}

/// Opens `name` in the verified folder `dir_fd` for reading, never opening anything but the
/// regular file it checked: `O_PATH | O_NOFOLLOW` first (which opens nothing: no device's open
/// routine runs, a FIFO does not block), `fstat` that descriptor (a regular file, one link, the
/// job user's), then reopen that very inode for reading through `/proc/self/fd` and check it is
/// still the same one. `path` is only for messages.
pub(super) fn open_in_dir(
    dir_fd: &impl AsFd,
    name: &OsStr,
    path: &Path,
    limits: &ReadLimits,
) -> Result<(File, u64), RecordError> {
    let handle = openat(
        dir_fd,
        name,
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| io_err(path, e))?;
    let st = fstat(&handle).map_err(|e| io_err(path, e))?;
    let kind = FileType::from_raw_mode(st.st_mode);
    if kind == FileType::Symlink {
        return Err(RecordError::Symlink(path.to_owned()));
    }
    if kind != FileType::RegularFile {
        return Err(RecordError::NotRegular {
            path: path.to_owned(),
            kind: kind_name(kind),
        });
    }
    if st.st_nlink != 1 {
        return Err(RecordError::HardLinked(path.to_owned()));
    }
    if let Some(expected) = limits.owner_uid
        && st.st_uid != expected
    {
        return Err(RecordError::WrongOwner {
            path: path.to_owned(),
            uid: st.st_uid,
            expected,
        });
    }
    // The magic link names the inode `handle` holds, whatever happened to `name` since.
    let magic = format!("/proc/self/fd/{}", handle.as_fd().as_raw_fd());
    let fd = openat(
        CWD,
        magic.as_str(),
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| RecordError::Io {
        path: path.to_owned(),
        source: io::Error::other(format!(
            "cannot reopen it through {magic} ({e}); is /proc mounted?"
        )),
    })?;
    let again = fstat(&fd).map_err(|e| io_err(path, e))?;
    if (again.st_dev, again.st_ino) != (st.st_dev, st.st_ino) {
        return Err(RecordError::Io {
            path: path.to_owned(),
            source: io::Error::other("reopened through /proc/self/fd as another file: refused"),
        });
    }
    Ok((File::from(fd), u64::try_from(again.st_size).unwrap_or(0)))
}

/// Reads a small user-written file of the spool (such as the step gate's results) with the same
/// rules as a records file: no symlinks, a regular file with one link, the job user's, and at
/// most `limits.max_bytes` (a larger file is refused rather than cut).
pub fn read_user_file(path: &Path, limits: &ReadLimits) -> Result<Vec<u8>, RecordError> {
    let (file, size) = open_safely(path, limits)?;
    read_user_bytes(file, size, path, limits)
}

/// [`read_user_file`] on a file already opened safely.
pub(super) fn read_user_bytes(
    file: File,
    size: u64,
    path: &Path,
    limits: &ReadLimits,
) -> Result<Vec<u8>, RecordError> {
    if size > limits.max_bytes {
        return Err(RecordError::Io {
            path: path.to_owned(),
            source: io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{size} bytes is over the {} byte bound", limits.max_bytes),
            ),
        });
    }
    let mut buf = Vec::new();
    file.take(limits.max_bytes)
        .read_to_end(&mut buf)
        .map_err(|e| io_err(path, e))?;
    Ok(buf)
}

/// Reads and decodes one records file within `limits` (see the module docs for the rules).
pub fn read_records(path: &Path, limits: &ReadLimits) -> Result<Records, RecordError> {
    let (file, size) = open_safely(path, limits)?;
    read_records_from(file, size, path, limits)
}

/// [`read_records`] on a file already opened safely.
pub(super) fn read_records_from(
    mut file: File,
    size: u64,
    path: &Path,
    limits: &ReadLimits,
) -> Result<Records, RecordError> {
    let mut out = Records::default();
    if size <= limits.max_bytes {
        let mut buf = Vec::new();
        (&mut file)
            .take(limits.max_bytes)
            .read_to_end(&mut buf)
            .map_err(|e| io_err(path, e))?;
        // A file that grew past the bound while we read: drop its last partial line.
        parse_into(&buf, limits, &mut out);
    } else {
        out.truncated = true;
        let half = limits.max_bytes / 2;
        let mut head = Vec::new();
        (&mut file)
            .take(half)
            .read_to_end(&mut head)
            .map_err(|e| io_err(path, e))?;
        let head_end = head.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        parse_into(&head[..head_end], limits, &mut out);
        file.seek(SeekFrom::Start(size - half))
            .map_err(|e| io_err(path, e))?;
        let mut tail = Vec::new();
        file.take(half)
            .read_to_end(&mut tail)
            .map_err(|e| io_err(path, e))?;
        let tail_start = tail
            .iter()
            .position(|&b| b == b'\n')
            .map_or(tail.len(), |i| i + 1);
        parse_into(&tail[tail_start..], limits, &mut out);
    }
    Ok(out)
}

/// Decodes records from bytes already read (what [`read_records`] does after its safe open):
/// lines over the bound, not UTF-8, not JSON or of another version are skipped and counted.
pub fn parse_records(buf: &[u8], limits: &ReadLimits) -> Records {
    let mut out = Records::default();
    parse_into(buf, limits, &mut out);
    out
}

fn parse_into(buf: &[u8], limits: &ReadLimits, out: &mut Records) {
    for line in buf.split(|&b| b == b'\n') {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        if line.len() > limits.max_line_bytes {
            out.malformed += 1;
            continue;
        }
        match serde_json::from_slice::<Record>(line) {
            Ok(r) if r.meta.v == VERSION && numbers_in_range(&r) => {
                if r.body != Body::Unknown {
                    out.records.push(r);
                }
            }
            _ => out.malformed = out.malformed.saturating_add(1),
        }
    }
}

/// The latest record time accepted, Unix seconds (the year 5138): beyond it, or negative, a
/// time is not one a clock gave.
pub const MAX_TS: f64 = 1e11;

/// Whether every number of a record is one a wrapper can have written: times within
/// `0..=`[`MAX_TS`], durations finite and at most [`fabric_proto::tag::MAX_SECONDS`] (negative ones are
/// clamped to zero where they are summed). A record with any other is malformed: the job wrote
/// it to make a sum overflow to infinity, which JSON cannot say.
fn numbers_in_range(r: &Record) -> bool {
    let secs = |d: f64| d.is_finite() && d <= fabric_proto::tag::MAX_SECONDS;
    let ts_ok = r.meta.ts.is_finite() && (0.0..=MAX_TS).contains(&r.meta.ts);
    ts_ok
        && match &r.body {
            Body::StepStart { deadline, .. } => {
                deadline.is_none_or(|d| d.is_finite() && (0.0..=MAX_TS).contains(&d))
            }
            Body::Attempt { duration_s, .. }
            | Body::Checkpoint { duration_s, .. }
            | Body::Restore { duration_s, .. }
            | Body::StepEnd { duration_s, .. } => secs(*duration_s),
            Body::Step {
                duration_s, ckpt_s, ..
            } => duration_s.is_none_or(secs) && secs(*ckpt_s),
            Body::SlowSteps {
                window_median_s,
                run_median_s,
                factor,
                ..
            } => secs(*window_median_s) && secs(*run_median_s) && factor.is_finite(),
            Body::Output { .. } | Body::FabricFault { .. } | Body::Unknown => true,
        }
}

/// Reads one node's records file safely and reduces it to a [`RunSummary`].
///
/// The epilog calls this with `node_records_path(spool_root, job_id, node)` and the job's uid in
/// `limits.owner_uid`. [`RecordError::Missing`] means the job did not use `fabric-run` here.
pub fn summarize_records(path: &Path, limits: &ReadLimits) -> Result<RunSummary, RecordError> {
    let recs = read_records(path, limits)?;
    summarize(&recs).ok_or(RecordError::Empty {
        path: path.to_owned(),
        malformed: recs.malformed,
    })
}

/// What one run, rank, launch or job adds up to.
#[derive(Debug, Clone)]
struct Agg {
    start_ts: f64,
    step_durs: Vec<f64>,
    steps: u64,
    ckpts: Vec<f64>,
    restores: Vec<f64>,
    outputs: Option<u64>,
    retries: u64,
    duration_s: f64,
    outcome: Outcome,
    on_time: bool,
    ranks: u32,
    lead_rank: Option<u32>,
    slow_events: u64,
}

/// Counts the job gave add up saturating: a sum of job-written numbers never overflows.
fn add_opt(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0).saturating_add(b.unwrap_or(0))),
    }
}

impl Agg {
    /// Runs one after the other: everything adds up; the worst outcome wins.
    fn sequence(mut parts: Vec<Agg>) -> Option<Agg> {
        parts.sort_by(|a, b| a.start_ts.total_cmp(&b.start_ts));
        let mut it = parts.into_iter();
        let mut acc = it.next()?;
        for p in it {
            acc.step_durs.extend(p.step_durs);
            acc.steps = acc.steps.saturating_add(p.steps);
            acc.ckpts.extend(p.ckpts);
            acc.restores.extend(p.restores);
            acc.outputs = add_opt(acc.outputs, p.outputs);
            acc.retries = acc.retries.saturating_add(p.retries);
            acc.slow_events = acc.slow_events.saturating_add(p.slow_events);
            acc.duration_s += p.duration_s;
            acc.outcome = acc.outcome.max(p.outcome);
            acc.on_time &= p.on_time;
            acc.ranks = acc.ranks.max(p.ranks);
            acc.lead_rank = match (acc.lead_rank, p.lead_rank) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        Some(acc)
    }

    /// Ranks side by side: the lead's (first) steps and checkpoints, outputs summed, the rest max.
    fn parallel(parts: Vec<Agg>) -> Option<Agg> {
        let mut it = parts.into_iter();
        let mut acc = it.next()?;
        for p in it {
            acc.start_ts = acc.start_ts.min(p.start_ts);
            acc.outputs = add_opt(acc.outputs, p.outputs);
            acc.retries = acc.retries.max(p.retries);
            acc.slow_events = acc.slow_events.max(p.slow_events);
            acc.duration_s = acc.duration_s.max(p.duration_s);
            acc.outcome = acc.outcome.max(p.outcome);
            acc.on_time &= p.on_time;
            acc.ranks = acc.ranks.saturating_add(p.ranks);
            acc.lead_rank = match (acc.lead_rank, p.lead_rank) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        Some(acc)
    }
}

/// Preference when one run saw checkpoints several ways: the job's own word first.
fn source_rank(s: Source) -> usize {
    match s {
        Source::Marker => 0,
        Source::Regex => 1,
        Source::Dir => 2,
    }
}

/// One wrapper's records reduced.
fn reduce_run(recs: &[&Record]) -> Agg {
    let first_ts = recs.iter().map(|r| r.meta.ts).fold(f64::INFINITY, f64::min);
    let last_ts = recs.iter().map(|r| r.meta.ts).fold(0.0, f64::max);
    let mut agg = Agg {
        start_ts: first_ts,
        step_durs: vec![],
        steps: 0,
        ckpts: vec![],
        restores: vec![],
        outputs: None,
        retries: 0,
        duration_s: (last_ts - first_ts).max(0.0),
        // No step_end: the wrapper itself was killed (kill -9, node crash, OOM).
        outcome: Outcome::Killed,
        on_time: false,
        ranks: 1,
        lead_rank: recs.first().and_then(|r| r.meta.rank),
        slow_events: 0,
    };
    let mut retried: u64 = 0;
    let mut start_ts = None;
    // Per source (marker, regex, dir): one checkpoint seen two ways must count once.
    let mut ckpts: [Vec<f64>; 3] = Default::default();
    let mut restores: [Vec<f64>; 3] = Default::default();
    for r in recs {
        match &r.body {
            Body::StepStart { .. } => start_ts = Some(r.meta.ts),
            Body::Attempt { retry, .. } => retried = retried.saturating_add(u64::from(*retry)),
            Body::Checkpoint {
                duration_s, source, ..
            } => ckpts[source_rank(*source)].push(duration_s.max(0.0)),
            Body::Restore {
                duration_s, source, ..
            } => restores[source_rank(*source)].push(duration_s.max(0.0)),
            Body::Step { duration_s, .. } => {
                agg.steps += 1;
                agg.step_durs
                    .extend(duration_s.filter(|d| d.is_finite() && *d >= 0.0));
            }
            Body::Output { n, .. } => agg.outputs = add_opt(agg.outputs, Some(*n)),
            Body::SlowSteps { .. } => agg.slow_events = agg.slow_events.saturating_add(1),
            Body::StepEnd {
                duration_s,
                outcome,
                attempts,
                on_time,
                ..
            } => {
                agg.duration_s = duration_s.max(0.0);
                agg.outcome = *outcome;
                agg.on_time = *on_time;
                retried = retried.max(u64::from(attempts.saturating_sub(1)));
            }
            // Counted over the whole file: every rank of the node records the same notice.
            Body::FabricFault { .. } | Body::Unknown => {}
        }
    }
    if let Some(ts) = start_ts {
        agg.start_ts = ts;
    }
    agg.ckpts = ckpts
        .into_iter()
        .find(|v| !v.is_empty())
        .unwrap_or_default();
    agg.restores = restores
        .into_iter()
        .find(|v| !v.is_empty())
        .unwrap_or_default();
    agg.retries = retried;
    agg
}

/// Reduces decoded records to a summary (rules in the module docs); `None` when there are none.
pub fn summarize(recs: &Records) -> Option<RunSummary> {
    // run → its records
    let mut runs: BTreeMap<&str, Vec<&Record>> = BTreeMap::new();
    for r in &recs.records {
        runs.entry(r.meta.run.as_str()).or_default().push(r);
    }
    // (restart, step_id) → rank → runs
    type LaunchKey<'a> = (u32, Option<&'a str>);
    let mut launches: BTreeMap<LaunchKey, BTreeMap<Option<u32>, Vec<Agg>>> = BTreeMap::new();
    for rs in runs.values() {
        let m = &rs[0].meta;
        let key = (m.restart_count.unwrap_or(0), m.step_id.as_deref());
        launches
            .entry(key)
            .or_default()
            .entry(m.rank)
            .or_default()
            .push(reduce_run(rs));
    }
    let requeues = launches.keys().map(|k| k.0).max()?;
    let mut all = Vec::new();
    let mut last = Vec::new();
    for ((restart, _), ranks) in launches {
        let per_rank: Vec<Agg> = ranks.into_values().filter_map(Agg::sequence).collect();
        let launch = Agg::parallel(per_rank)?;
        if restart == requeues {
            last.push(launch.clone());
        }
        all.push(launch);
    }
    let job = Agg::sequence(all)?;
    let fin = Agg::sequence(last)?;
    let mut durs = job.step_durs.clone();
    durs.sort_by(f64::total_cmp);
    let outcome = fin.outcome;
    let mut summary = RunSummary {
        steps: job.steps,
        step_p50_s: percentile_of_sorted(&durs, 50.0),
        step_p95_s: percentile_of_sorted(&durs, 95.0),
        step_max_s: durs.last().copied(),
        ckpt_n: job.ckpts.len() as u64,
        ckpt_total_s: job.ckpts.iter().sum(),
        ckpt_max_s: job.ckpts.iter().copied().fold(0.0, f64::max),
        restore_n: job.restores.len() as u64,
        restore_total_s: job.restores.iter().sum(),
        retries: job.retries,
        requeues: u64::from(requeues),
        outputs: job.outputs,
        duration_s: job.duration_s,
        outcome: outcome.as_str().to_owned(),
        accepted: outcome == Outcome::Accepted,
        on_time: fin.on_time,
        malformed_lines: recs.malformed,
        ranks: fin.ranks,
        lead_rank: job.lead_rank,
        truncated: recs.truncated,
        reported_by: fabric_proto::tag::Reporter::Job,
        fabric_faults: fabric_faults(recs),
        slow_step_events: Some(job.slow_events).filter(|n| *n > 0),
        ett: lead_timeline(recs),
    };
    // Each duration was bounded where it was read; their sums are clamped all the same.
    summary.scrub();
    Some(summary)
}

/// The lead (lowest) rank's records of the node reduced for effective training time
/// ([`fabric_proto::ett::timeline`]); records without a rank count as the lead's when no rank is
/// known. The node's fabric fault notices are every rank's (one notice file per node).
fn lead_timeline(recs: &Records) -> Option<fabric_proto::tag::EttFacts> {
    let lead = recs.records.iter().filter_map(|r| r.meta.rank).min();
    fabric_proto::ett::timeline(
        recs.records
            .iter()
            .filter(|r| r.meta.rank == lead || matches!(r.body, Body::FabricFault { .. })),
    )
}

/// Distinct fabric fault notices in the records (by node, check and time seen): each rank of a
/// node follows the node's one notice file, so one notice is recorded once per rank (and again
/// by a later step's wrappers only if they saw it too). `None` when there are none.
fn fabric_faults(recs: &Records) -> Option<u64> {
    let seen: BTreeSet<(&str, &str, u64)> = recs
        .records
        .iter()
        .filter_map(|r| match &r.body {
            Body::FabricFault {
                check, seen_at_s, ..
            } => Some((r.meta.node.as_str(), check.as_str(), *seen_at_s)),
            _ => None,
        })
        .collect();
    (!seen.is_empty()).then_some(seen.len() as u64)
}

/// Merges the summaries of a job's nodes (each from [`summarize_records`]) into the job's.
///
/// Nodes run side by side, so the rules are those for the ranks of one node: steps, step times,
/// checkpoints and restores are the lead node's (the one with the lowest `lead_rank`, i.e. rank 0's
/// node; the first given when no rank is known); outputs, ranks and malformed lines add up;
/// retries, requeues and duration take the maximum; the outcome is the worst (in [`Outcome`]'s
/// order); `accepted`, `on_time` need every node. Fabric faults add up (each node's are its
/// own); slow-step events take the maximum (a slow job slows every node's steps alike); the
/// effective-training-time facts are the lead node's.
/// `None` for no summaries.
pub fn merge_nodes(nodes: &[RunSummary]) -> Option<RunSummary> {
    let lead = nodes
        .iter()
        .enumerate()
        .min_by_key(|(i, s)| (s.lead_rank.unwrap_or(u32::MAX), *i))?
        .1;
    let mut out = lead.clone();
    let outcomes: Vec<Outcome> = nodes
        .iter()
        .map(|s| Outcome::parse(&s.outcome).unwrap_or(Outcome::Failed))
        .collect();
    let worst = outcomes.iter().copied().max()?;
    out.outcome = worst.as_str().to_owned();
    out.accepted = worst == Outcome::Accepted && nodes.iter().all(|s| s.accepted);
    out.on_time = nodes.iter().all(|s| s.on_time);
    out.retries = nodes.iter().map(|s| s.retries).max().unwrap_or(0);
    out.requeues = nodes.iter().map(|s| s.requeues).max().unwrap_or(0);
    out.duration_s = nodes.iter().map(|s| s.duration_s).fold(0.0, f64::max);
    out.outputs = nodes.iter().fold(None, |acc, s| add_opt(acc, s.outputs));
    out.ranks = nodes.iter().fold(0u32, |a, s| a.saturating_add(s.ranks));
    out.malformed_lines = nodes
        .iter()
        .fold(0u64, |a, s| a.saturating_add(s.malformed_lines));
    out.truncated = nodes.iter().any(|s| s.truncated);
    out.fabric_faults = nodes
        .iter()
        .fold(None, |acc, s| add_opt(acc, s.fabric_faults));
    out.slow_step_events = nodes.iter().filter_map(|s| s.slow_step_events).max();
    out.scrub();
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::OpenOptions;
    use std::io::Write;
    use std::os::unix::fs::MetadataExt;

    /// One record line for run `run` of `rank` (restart `restart`) at time `ts`.
    fn line(run: &str, rank: u32, restart: u32, ts: f64, body: &str) -> String {
        format!(
            r#"{{"v":1,"ts":{ts},"run":"{run}","node":"n1","rank":{rank},"job_id":"7","step_id":"0","restart_count":{restart},{body}}}"#
        )
    }

    fn start() -> &'static str {
        r#""type":"step_start","pid":1,"cmd":["train"]"#
    }

    fn step(d: Option<f64>) -> String {
        let d = d.map_or("null".to_owned(), |d| d.to_string());
        format!(r#""type":"step","duration_s":{d}"#)
    }

    fn ckpt(d: f64, source: &str) -> String {
        format!(r#""type":"checkpoint","duration_s":{d},"source":"{source}""#)
    }

    fn end(outcome: &str, attempts: u32, d: f64) -> String {
        format!(
            r#""type":"step_end","duration_s":{d},"exit_code":0,"signal":null,"outcome":"{outcome}","attempts":{attempts},"on_time":true"#
        )
    }

    fn file(dir: &tempfile::TempDir, lines: &[String]) -> PathBuf {
        let path = dir.path().join("n1.jsonl");
        let mut f = File::create(&path).unwrap();
        for l in lines {
            writeln!(f, "{l}").unwrap();
        }
        path
    }

    fn two_ranks() -> Vec<String> {
        vec![
            line("a", 0, 0, 10.0, start()),
            line("b", 1, 0, 10.0, start()),
            line("a", 0, 0, 11.0, &step(None)),
            line("a", 0, 0, 12.0, &step(Some(1.0))),
            line("a", 0, 0, 14.0, &step(Some(2.0))),
            line("b", 1, 0, 11.0, &step(None)),
            line("a", 0, 0, 15.0, &ckpt(3.0, "marker")),
            line("a", 0, 0, 15.0, &ckpt(3.5, "dir")),
            line("a", 0, 0, 20.0, &end("accepted", 1, 10.0)),
            line("b", 1, 0, 21.0, &end("failed", 2, 11.0)),
        ]
    }

    fn parsed(lines: &[String]) -> Records {
        parse_records(lines.join("\n").as_bytes(), &ReadLimits::default())
    }

    #[test]
    fn durations_that_would_add_up_past_the_f64_range_are_refused_and_every_sum_stays_finite() {
        let huge = 1.7e308;
        let recs = parsed(&[
            line("a", 0, 0, 10.0, start()),
            line("a", 0, 0, 11.0, &ckpt(huge, "marker")),
            line("a", 0, 0, 12.0, &ckpt(huge, "marker")),
            line("a", 0, 0, 13.0, &ckpt(2.0, "marker")),
            line("a", 0, 0, 14.0, &step(Some(huge))),
            line("a", 0, 0, 1e300, &step(Some(1.0))),
            line("a", 0, 0, 20.0, &end("accepted", 1, huge)),
            line("b", 1, 0, 10.0, &end("accepted", 1, 5.0)),
        ]);
        assert_eq!(
            recs.malformed, 5,
            "each out-of-range record is counted malformed"
        );
        let s = summarize(&recs).unwrap();
        assert_eq!(s.ckpt_n, 1);
        assert_eq!(s.ckpt_total_s, 2.0);
        for x in [
            s.ckpt_total_s,
            s.ckpt_max_s,
            s.restore_total_s,
            s.duration_s,
        ] {
            assert!(x.is_finite(), "{s:?}");
        }
        let json = serde_json::to_string(&s).unwrap();
        assert!(!json.contains("null"), "{json}");
        let back: RunSummary = serde_json::from_str(&json).expect("the summary decodes");
        assert_eq!(back, s);
    }

    #[test]
    fn job_given_counts_add_up_saturating_without_a_panic() {
        let out = |n: u64| format!(r#""type":"output","n":{n}"#);
        let recs = parsed(&[
            line("a", 0, 0, 10.0, &out(u64::MAX)),
            line("a", 0, 0, 11.0, &out(u64::MAX)),
            line("b", 1, 0, 10.0, &out(u64::MAX)),
        ]);
        let s = summarize(&recs).unwrap();
        assert_eq!(s.outputs, Some(u64::MAX));
        let nodes = vec![
            RunSummary {
                ranks: u32::MAX,
                malformed_lines: u64::MAX,
                outputs: Some(u64::MAX),
                ..s.clone()
            };
            3
        ];
        let merged = merge_nodes(&nodes).unwrap();
        assert_eq!(merged.ranks, u32::MAX);
        assert_eq!(merged.malformed_lines, u64::MAX);
        assert_eq!(merged.outputs, Some(u64::MAX));
    }

    #[test]
    fn ranks_combine_lead_steps_and_the_worst_outcome() {
        let dir = tempfile::tempdir().unwrap();
        let s = summarize_records(&file(&dir, &two_ranks()), &ReadLimits::default()).unwrap();
        assert_eq!(s.steps, 3, "rank 0's steps only");
        // Two timed steps, 1 s and 2 s: the median is their mean (fabric_base::stats).
        assert_eq!(s.step_p50_s, Some(1.5));
        assert_eq!(s.step_max_s, Some(2.0));
        assert_eq!(
            s.ckpt_n, 1,
            "one checkpoint seen by marker and dir counts once"
        );
        assert_eq!(s.ckpt_total_s, 3.0, "the marker's measure wins");
        assert_eq!(s.outcome, "failed");
        assert!(!s.accepted);
        assert_eq!(s.retries, 1);
        assert_eq!(s.duration_s, 11.0);
        assert_eq!(s.ranks, 2);
        assert_eq!(s.lead_rank, Some(0));
    }

    #[test]
    fn a_run_without_step_end_counts_as_killed() {
        let dir = tempfile::tempdir().unwrap();
        let lines = vec![
            line("a", 0, 0, 10.0, start()),
            line("a", 0, 0, 13.0, &step(None)),
        ];
        let s = summarize_records(&file(&dir, &lines), &ReadLimits::default()).unwrap();
        assert_eq!(s.outcome, "killed");
        assert_eq!(s.duration_s, 3.0);
    }

    #[test]
    fn a_requeued_job_takes_its_outcome_from_the_last_restart() {
        let dir = tempfile::tempdir().unwrap();
        let lines = vec![
            line("a", 0, 0, 10.0, start()),
            line("a", 0, 0, 12.0, &step(Some(1.0))),
            line("a", 0, 0, 20.0, &end("preempted", 1, 10.0)),
            line("b", 0, 1, 30.0, start()),
            line("b", 0, 1, 32.0, &step(Some(1.0))),
            line("b", 0, 1, 40.0, &end("accepted", 1, 10.0)),
        ];
        let s = summarize_records(&file(&dir, &lines), &ReadLimits::default()).unwrap();
        assert_eq!(s.requeues, 1);
        assert_eq!(s.outcome, "accepted");
        assert!(s.accepted);
        assert_eq!(s.steps, 2);
        assert_eq!(s.duration_s, 20.0);
    }

    #[test]
    fn malformed_lines_are_skipped_and_counted() {
        let dir = tempfile::tempdir().unwrap();
        let mut lines = two_ranks();
        lines.insert(1, "not json".into());
        lines.insert(
            2,
            r#"{"type":"step","v":2,"ts":1,"run":"a","node":"n"}"#.into(),
        );
        lines.insert(3, format!(r#"{{"pad":"{}"}}"#, "x".repeat(400)));
        lines.push(r#"{"type":"step_end","v":1"#.into());
        let path = file(&dir, &lines);
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"\xff\xfe\n").unwrap();
        let limits = ReadLimits {
            max_line_bytes: 300,
            ..ReadLimits::default()
        };
        let s = summarize_records(&path, &limits).unwrap();
        assert_eq!(s.malformed_lines, 5);
        assert_eq!(s.steps, 3);
    }

    #[test]
    fn a_symlinked_file_or_directory_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let real = file(&dir, &two_ranks());
        let link = dir.path().join("link.jsonl");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let e = summarize_records(&link, &ReadLimits::default()).unwrap_err();
        assert!(matches!(e, RecordError::Symlink(_)), "{e}");
        let dlink = dir.path().join("dlink");
        std::os::unix::fs::symlink(dir.path(), &dlink).unwrap();
        let e = summarize_records(&dlink.join("n1.jsonl"), &ReadLimits::default()).unwrap_err();
        assert!(matches!(e, RecordError::Symlink(_)), "{e}");
    }

    #[test]
    fn a_fifo_a_directory_and_a_hard_link_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo.jsonl");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        let e = summarize_records(&fifo, &ReadLimits::default()).unwrap_err();
        assert!(
            matches!(e, RecordError::NotRegular { kind: "FIFO", .. }),
            "{e}"
        );
        let sub = dir.path().join("sub.jsonl");
        std::fs::create_dir(&sub).unwrap();
        let e = summarize_records(&sub, &ReadLimits::default()).unwrap_err();
        assert!(matches!(e, RecordError::NotRegular { .. }), "{e}");
        let real = file(&dir, &two_ranks());
        std::fs::hard_link(&real, dir.path().join("other")).unwrap();
        let e = summarize_records(&real, &ReadLimits::default()).unwrap_err();
        assert!(matches!(e, RecordError::HardLinked(_)), "{e}");
    }

    #[test]
    fn a_file_of_another_owner_is_refused_when_the_owner_is_given() {
        let dir = tempfile::tempdir().unwrap();
        let path = file(&dir, &two_ranks());
        let me = std::fs::metadata(&path).unwrap().uid();
        let limits = ReadLimits {
            owner_uid: Some(me + 1),
            ..ReadLimits::default()
        };
        let e = summarize_records(&path, &limits).unwrap_err();
        assert!(matches!(e, RecordError::WrongOwner { .. }), "{e}");
        let mine = ReadLimits {
            owner_uid: Some(me),
            ..ReadLimits::default()
        };
        assert!(summarize_records(&path, &mine).is_ok());
    }

    #[test]
    fn an_oversized_file_is_read_head_and_tail_within_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        let mut lines = vec![line("a", 0, 0, 1.0, start())];
        for i in 0..5000 {
            lines.push(line("a", 0, 0, 2.0 + f64::from(i), &step(Some(1.0))));
        }
        lines.push(line("a", 0, 0, 9000.0, &end("accepted", 1, 8999.0)));
        let path = file(&dir, &lines);
        let limits = ReadLimits {
            max_bytes: 64 << 10,
            ..ReadLimits::default()
        };
        let recs = read_records(&path, &limits).unwrap();
        assert!(recs.truncated);
        assert_eq!(
            recs.malformed, 0,
            "cut lines at the seams are dropped, not counted"
        );
        assert!(recs.records.len() < 5000);
        let s = summarize(&recs).unwrap();
        assert_eq!(s.outcome, "accepted", "step_end from the tail survives");
        assert!(s.truncated);
    }

    #[test]
    fn nodes_merge_with_the_lead_nodes_steps_and_the_worst_outcome() {
        let node = |lead: u32, steps: u64, outcome: &str, outputs: u64| RunSummary {
            steps,
            outputs: Some(outputs),
            outcome: outcome.into(),
            accepted: outcome == "accepted",
            on_time: true,
            ranks: 4,
            lead_rank: Some(lead),
            duration_s: f64::from(lead),
            ..RunSummary::default()
        };
        let merged = merge_nodes(&[
            node(4, 90, "accepted", 5),
            node(0, 100, "accepted", 7),
            node(8, 80, "preempted", 1),
        ])
        .unwrap();
        assert_eq!(merged.steps, 100, "rank 0's node leads");
        assert_eq!(merged.outputs, Some(13));
        assert_eq!(merged.outcome, "preempted");
        assert!(!merged.accepted);
        assert_eq!(merged.ranks, 12);
        assert_eq!(merged.duration_s, 8.0);
        assert!(merge_nodes(&[]).is_none());
    }

    fn fault(check: &str, seen_at_s: u64) -> String {
        format!(
            r#""type":"fabric_fault","check":"{check}","message":"port DOWN","seen_at_s":{seen_at_s},"into_job_s":5,"drained":true,"attempt":1"#
        )
    }

    fn slow(steps: u64) -> String {
        format!(
            r#""type":"slow_steps","window_median_s":3.0,"run_median_s":1.0,"factor":1.5,"window":20,"steps":{steps},"attempt":1"#
        )
    }

    #[test]
    fn the_summary_counts_fabric_faults_once_across_ranks_and_slow_step_events_per_rank() {
        let recs = parsed(&[
            line("a", 0, 0, 10.0, start()),
            line("b", 1, 0, 10.0, start()),
            // Both ranks followed the node's notice file: one fault, recorded twice.
            line("a", 0, 0, 20.0, &fault("ib.port_state", 1000)),
            line("b", 1, 0, 20.0, &fault("ib.port_state", 1000)),
            line("b", 1, 0, 30.0, &fault("ib.counters", 1010)),
            line("a", 0, 0, 40.0, &slow(40)),
            line("b", 1, 0, 41.0, &slow(40)),
            line("b", 1, 0, 90.0, &slow(120)),
            line("a", 0, 0, 99.0, &end("accepted", 1, 89.0)),
            line("b", 1, 0, 99.0, &end("accepted", 1, 89.0)),
            // A requeued launch flags its own.
            line("c", 0, 1, 200.0, start()),
            line("c", 0, 1, 240.0, &slow(40)),
            line("c", 0, 1, 299.0, &end("accepted", 1, 99.0)),
            // A type from a later wrapper is skipped, not malformed: new types stay additive.
            line("c", 0, 1, 299.5, r#""type":"a_later_record","x":1"#),
        ]);
        assert_eq!(recs.malformed, 0);
        assert_eq!(recs.records.len(), 13);
        let s = summarize(&recs).unwrap();
        assert_eq!(s.fabric_faults, Some(2), "distinct notices");
        assert_eq!(
            s.slow_step_events,
            Some(3),
            "the most of any rank (2), plus the requeued launch's"
        );
        let json = serde_json::to_string(&s).unwrap();
        assert!(json.contains(r#""fabric_faults":2"#), "{json}");
        assert!(json.contains(r#""slow_step_events":3"#), "{json}");

        let quiet = summarize(&parsed(&two_ranks())).unwrap();
        assert_eq!((quiet.fabric_faults, quiet.slow_step_events), (None, None));
        let merged = merge_nodes(&[s.clone(), quiet, s]).unwrap();
        assert_eq!(
            merged.fabric_faults,
            Some(4),
            "each node's faults are its own"
        );
        assert_eq!(merged.slow_step_events, Some(3));
    }

    #[test]
    fn a_slow_steps_record_with_a_number_no_wrapper_writes_is_malformed() {
        let bad = r#""type":"slow_steps","window_median_s":1e300,"run_median_s":1.0,"factor":1.5,"window":20,"steps":40"#;
        let recs = parsed(&[line("a", 0, 0, 10.0, start()), line("a", 0, 0, 11.0, bad)]);
        assert_eq!(recs.malformed, 1);
        assert_eq!(summarize(&recs).unwrap().slow_step_events, None);
    }

    #[test]
    fn a_missing_file_and_an_empty_file_say_so() {
        let dir = tempfile::tempdir().unwrap();
        let e = summarize_records(&dir.path().join("none.jsonl"), &ReadLimits::default());
        assert!(matches!(e, Err(RecordError::Missing(_))));
        let path = file(&dir, &["garbage".into()]);
        let e = summarize_records(&path, &ReadLimits::default()).unwrap_err();
        assert!(matches!(e, RecordError::Empty { malformed: 1, .. }), "{e}");
    }
}
