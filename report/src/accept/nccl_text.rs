//! nccl-tests' text output, of every binary and version.
//!
//! Layout facts (from nccl-tests `src/common.cu` and `src/util.cu`, versions 2.0 to 2.19, and
//! outputs captured on real clusters):
//!
//! * a header names the columns: `size count type redop root time algbw busbw #wrong time algbw
//!   busbw #wrong` since 2.13 (one header shared by every test); before that each test printed
//!   its own, with `redop` only for reducing tests and `root` only for rooted ones (broadcast,
//!   reduce, scatter, gather), and the last column was `error`, a max error printed `%6.0e`
//!   (`1e-06`, `0e+00`) rather than a count of wrong elements. `-I 1` adds `i_min i_max i_p99
//!   i_cv%` after each half; `-C 1` prints `cputime` for `time`; a timestamp column, when
//!   asked for, is passed over whether it leads the row or follows the halves. The columns are read by name from the
//!   header; a table whose header is missing is read by the shape of its rows (with a warning).
//! * numbers are printed by `getFloatStr`: `%.2f`, falling back to fewer decimals and then to
//!   scientific notation (`1.2e+03`) when the column is too narrow, or overflowing it
//!   (`43046.10`); `#wrong` is `%6g` (a count, or `1.23457e+06`) or `N/A` (validation off, or
//!   in-place alltoall).
//! * trace replay leaves the out-of-place half blank.
//! * rank lines: `#  Rank  0 Group  0 Pid  1234 on host device  0 [0x07] NVIDIA ...` (`Group`
//!   appeared in 2.11; the bus id became `[0000:07:00]` later; 3- and 4-digit ranks widen the
//!   field). A list elided with `...` leaves gaps; a build without MPI run under mpirun lists
//!   `Rank 0` once per process, on different hosts.
//! * footer: `# Out of bounds values : 0 OK` and `# Avg bus bandwidth    : 12.34` (the mean
//!   busbw over every row's out-of-place and in-place halves). rccl-tests (AMD's fork) prints
//!   `# Errors with asterisks indicate errors that have exceeded the maximum threshold.` before
//!   it on every validated run (not a note that rows were cut), marks such a result `1e-06*`,
//!   and names its version `# rccl-tests version 2.17.9-develop:... rccl-headers=...` (older
//!   builds: `rccl-tests: Version develop:448c4c7`). A run that fails prints
//!   `host: Test NCCL failure common.cu:1204 '...'` and no footer; a truncated or elided
//!   output simply stops or has `...` rows. What is there is used: the run is kept and the
//!   problem is a warning naming the line where it stops.
//! * launchers prefix lines: Open MPI `--tag-output` writes `[1,0]<stdout>:`, `srun -l`
//!   writes `0: `, pdsh `host: `, `mpirun -prepend-rank` writes `[0] `, Ray (SkyPilot)
//!   `(head, rank=0, pid=N) ` before any of these, and per-write tagging inserts `[0]` in the
//!   middle of a line before each column group. The prefix is learned from the lines that
//!   carry nccl-tests' own markers ([`learn_prefix`]) and removed from every line that has it,
//!   then the known forms ([`strip_prefix`]) and rank tags are removed; NCCL `INFO`/`WARN`
//!   lines, Open MPI banners and doc comments anywhere are skipped.
//! * the sizes asked for (the `# nThread ... minBytes ... maxBytes ... step:` line, or a
//!   command line's `-b/-e/-f`) are compared with the rows ([`Sweep`]): an excerpt whose rows
//!   leave some out is a warning naming them, and its footer's average is not the run's.

use super::sweep::Sweep;
use super::{Device, IterStats, Measure, NcclRun, Problem, SizeRow};

/// Stands for a run of digits in a learned prefix: ranks, pids and host numbers vary from line
/// to line while the prefix's shape repeats.
const DIGITS: char = '\u{1}';

/// Where nccl-tests' own text starts in a line: the `#` of `# nThread`, `#  Rank 0`, the
/// column header (`#  size  count ...`), `# Using devices`, its version and collective lines
/// or its footer.
fn marker_at(line: &str) -> Option<usize> {
    line.match_indices('#').map(|(i, _)| i).find(|&i| {
        let c = line[i + 1..].trim_start();
        let mut words = c.split_whitespace();
        [
            "nThread ",
            "Using devices",
            "Avg bus bandwidth",
            "Out of bounds values",
            "nccl-tests version",
            "rccl-tests version",
            "Collective test ",
        ]
        .iter()
        .any(|m| c.starts_with(m))
            || c.strip_prefix("Rank")
                .is_some_and(|r| r.trim_start().starts_with(|d: char| d.is_ascii_digit()))
            || (words.next() == Some("size") && words.next() == Some("count"))
    })
}

/// A prefix's shape: each run of digits becomes [`DIGITS`].
fn shape(prefix: &str) -> String {
    let mut out = String::with_capacity(prefix.len());
    for ch in prefix.chars() {
        if !ch.is_ascii_digit() {
            out.push(ch);
        } else if !out.ends_with(DIGITS) {
            out.push(DIGITS);
        }
    }
    out
}

/// The bytes of `line` that a learned prefix `shape` covers, when the line starts with it.
fn shape_len(line: &str, shape: &str) -> Option<usize> {
    let b = line.as_bytes();
    let mut at = 0;
    for ch in shape.chars() {
        if ch == DIGITS {
            let n = b[at..].iter().take_while(|c| c.is_ascii_digit()).count();
            if n == 0 {
                return None;
            }
            at += n;
        } else if line[at..].starts_with(ch) {
            at += ch.len_utf8();
        } else {
            return None;
        }
    }
    Some(at)
}

/// The launcher prefix of a log, learned from the lines themselves: what precedes nccl-tests'
/// own markers (`# nThread`, `#  Rank N`, the column header, `# Using devices`, the version,
/// collective and footer lines) on every line that has one, digits standing for any digits
/// (`(head, rank=0, pid=N) [1,0]<stdout>:`, `node07: `, `out/1/rank.0/stdout:`). Where the
/// marker lines disagree, their common start up to its last blank (an outer prefix whose
/// inner ones differ); empty when nothing precedes the markers or nothing is common.
pub fn learn_prefix(lines: &[&str]) -> String {
    let mut shapes = lines
        .iter()
        .filter_map(|l| marker_at(l).map(|i| shape(&l[..i])));
    let Some(mut common) = shapes.next() else {
        return String::new();
    };
    let mut agree = true;
    for s in shapes {
        if s != common {
            agree = false;
            let n: usize = common
                .chars()
                .zip(s.chars())
                .take_while(|(a, b)| a == b)
                .map(|(a, _)| a.len_utf8())
                .sum();
            common.truncate(n);
        }
    }
    if !agree {
        let keep = common.rfind(char::is_whitespace).map_or(0, |i| i + 1);
        common.truncate(keep);
    }
    common
}

/// Removes a launcher prefix.
pub fn strip_prefix(line: &str) -> &str {
    let t = line;
    if t.starts_with('[') {
        if let Some(i) = t.find("]<stdout>:").or_else(|| t.find("]<stderr>:")) {
            return &t[i + 10..];
        }
        // `[0] ` from -prepend-rank, `[host:12345] ` from some wrappers.
        if let Some(end) = t.find("] ")
            && end > 1
            && !t[1..end].contains(' ')
        {
            return &t[end + 2..];
        }
    }
    // `srun -l`: `12: `
    if let Some(i) = t.find(": ")
        && i > 0
        && i <= 6
        && t[..i].trim_start().chars().all(|c| c.is_ascii_digit())
        && !t[..i].trim_start().is_empty()
    {
        return &t[i + 2..];
    }
    t
}

/// Replaces rank tags (`[0]`, `[1,0]`) anywhere in a line by a space: per-write tagging puts
/// them in the middle of a result line (`-1[0]    1626.5`). PCI ids (`[0x3d]`,
/// `[0000:04:00]`) are not rank tags and stay.
pub fn strip_rank_tags(line: &str) -> std::borrow::Cow<'_, str> {
    if !line.contains('[') {
        return line.into();
    }
    let b = line.as_bytes();
    let mut out = String::with_capacity(line.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'[' {
            let mut j = i + 1;
            while j < b.len() && (b[j].is_ascii_digit() || b[j] == b',') {
                j += 1;
            }
            if j > i + 1 && j < b.len() && b[j] == b']' && b[i + 1].is_ascii_digit() {
                out.push(' ');
                i = j + 1;
                continue;
            }
        }
        let ch = line[i..].chars().next().unwrap_or(' ');
        out.push(ch);
        i += ch.len_utf8();
    }
    out.into()
}

#[derive(Debug, Clone, Default)]
struct Layout {
    has_redop: bool,
    has_root: bool,
    /// Columns per half: time algbw busbw wrong [i_min i_max i_p99 i_cv%].
    per_iter: bool,
    /// The last column of a half is `error` (a max error), not `#wrong` (a count).
    error_is_max: bool,
}

impl Layout {
    fn half(&self) -> usize {
        if self.per_iter { 8 } else { 4 }
    }
    fn pre(&self) -> usize {
        3 + usize::from(self.has_redop) + usize::from(self.has_root)
    }
}

fn header_layout(tokens: &[&str]) -> Option<Layout> {
    let t: Vec<&str> = tokens
        .iter()
        .map(|s| s.trim_start_matches('#'))
        .filter(|s| !s.is_empty())
        .collect();
    // A timestamp column may come first (`timestamp size count ...`).
    let at = t.iter().position(|c| *c == "size")?;
    if at > 1 || t.get(at + 1) != Some(&"count") {
        return None;
    }
    let t = &t[at..];
    let first_time = t
        .iter()
        .position(|c| *c == "time" || *c == "cputime")
        .unwrap_or(t.len());
    let pre = &t[..first_time];
    Some(Layout {
        has_redop: pre.contains(&"redop"),
        has_root: pre.contains(&"root"),
        per_iter: t.contains(&"i_min"),
        error_is_max: t.contains(&"error") && !t.contains(&"wrong"),
    })
}

/// The layout a header-less result line implies: `size count type [redop] [root]` then
/// halves of 4 (or 8 with per-iteration columns).
fn infer_layout(tokens: &[&str]) -> Option<Layout> {
    if tokens.len() < 7 || tokens[2].parse::<f64>().is_ok() {
        return None;
    }
    let has_redop = tokens[3].parse::<f64>().is_err() && tokens[3] != "N/A";
    let rest = tokens.len() - 3 - usize::from(has_redop);
    let has_root = rest % 4 == 1;
    let body = rest - usize::from(has_root);
    if !body.is_multiple_of(4) {
        return None;
    }
    Some(Layout {
        has_redop,
        has_root,
        per_iter: body == 16,
        error_is_max: false,
    })
}

fn num(s: &str) -> Option<f64> {
    match s {
        "N/A" => None,
        "nan" | "-nan" => Some(f64::NAN),
        "inf" => Some(f64::INFINITY),
        _ => s.parse::<f64>().ok(),
    }
}

fn measure(t: &[&str], layout: &Layout) -> Result<Measure, String> {
    let f = |i: usize, name: &str| -> Result<f64, String> {
        num(t[i]).ok_or_else(|| format!("{name} `{}` is not a number", t[i]))
    };
    let last = match t[3] {
        "N/A" => None,
        s => Some(num(s).ok_or_else(|| format!("#wrong `{s}` is not a number or N/A"))?),
    };
    let (wrong, max_error) = if layout.error_is_max {
        (None, last)
    } else {
        (last, None)
    };
    let iter = if layout.per_iter {
        Some(IterStats {
            min_us: Some(f(4, "i_min")?),
            max_us: Some(f(5, "i_max")?),
            p95_us: None,
            p99_us: Some(f(6, "i_p99")?),
            cv_pct: Some(f(7, "i_cv%")?),
        })
    } else {
        None
    };
    Ok(Measure {
        time_us: f(0, "time")?,
        algbw_gbps: f(1, "algbw")?,
        busbw_gbps: f(2, "busbw")?,
        wrong,
        max_error,
        iter,
        per_process_mean_us: Vec::new(),
    })
}

fn parse_row(tokens: &[&str], layout: &Layout) -> Result<SizeRow, String> {
    // Some builds print the `redop` column blank for tests that do not reduce (alltoall,
    // broadcast): the header names it, but the row goes straight from the type to the root or
    // the time. A reduction is a name (`sum`, `none`), so a number there is the next column.
    let blank_redop = layout.has_redop && tokens.get(3).is_some_and(|t| t.parse::<f64>().is_ok());
    let layout = &Layout {
        has_redop: layout.has_redop && !blank_redop,
        ..layout.clone()
    };
    let pre = layout.pre();
    let half = layout.half();
    if tokens.len() < pre + half {
        return Err(format!(
            "{} fields where a result line has at least {}; is the line cut?",
            tokens.len(),
            pre + half
        ));
    }
    // A timestamp may follow: anything after the two halves is ignored.
    let body = &tokens[pre..];
    let size_b = tokens[0]
        .parse::<u64>()
        .map_err(|_| format!("size `{}` is not a byte count", tokens[0]))?;
    let count = tokens[1]
        .parse::<u64>()
        .map_err(|_| format!("count `{}` is not an element count", tokens[1]))?;
    let redop = if layout.has_redop {
        tokens[3].to_string()
    } else {
        "none".to_string()
    };
    let root = if layout.has_root {
        let i = pre - 1;
        Some(
            tokens[i]
                .parse::<i64>()
                .map_err(|_| format!("root `{}` is not a rank", tokens[i]))?,
        )
    } else {
        None
    };
    let (oop, ip) = if body.len() >= 2 * half && num(body[half]).is_some() {
        (
            Some(measure(&body[..half], layout)?),
            Some(measure(&body[half..2 * half], layout)?),
        )
    } else {
        // Trace replay: only the in-place half is printed.
        (None, Some(measure(&body[..half], layout)?))
    };
    Ok(SizeRow {
        size_b,
        count,
        dtype: tokens[2].to_string(),
        redop,
        root,
        out_of_place: oop,
        in_place: ip,
        line: 0,
    })
}

fn parse_device(rest: &str) -> Option<Device> {
    let t: Vec<&str> = rest.split_whitespace().collect();
    let at = |k: &str| t.iter().position(|x| *x == k);
    let rank = t.get(at("Rank")? + 1)?.parse().ok()?;
    let host = t.get(at("on")? + 1)?.to_string();
    let device = t.get(at("device")? + 1)?.parse().ok()?;
    let name = rest
        .find(']')
        .map_or(String::new(), |i| rest[i + 1..].trim().to_string());
    Some(Device {
        rank,
        host,
        device,
        name,
    })
}

/// Whether a line is a failure nccl-tests prints before it exits: `host: Test NCCL failure
/// common.cu:1204 '...'`, ` .. host pid N: Test failure common.cu:915`, `Test CUDA failure`.
fn is_failure(line: &str) -> bool {
    line.contains("Test NCCL failure")
        || line.contains("Test CUDA failure")
        || line.contains(": Test failure ")
}

/// What one run's reading has gathered so far.
struct Segment {
    /// The file, as problems name it.
    path: String,
    run: NcclRun,
    /// The run's first line.
    first_line: u64,
    problems: Vec<Problem>,
    layout: Option<Layout>,
    last_row_line: u64,
    saw_footer: bool,
    elided: Option<u64>,
    failure: Option<(u64, String)>,
    /// Results rccl-tests marked with `*` (an error over its threshold).
    flagged: u64,
    /// The sizes asked for.
    sweep: Option<Sweep>,
    /// A command line read after this run ended: it starts the next one.
    next_command: Option<(String, Sweep)>,
}

impl Segment {
    fn new(file: &str, first_line: u64) -> Self {
        Self {
            path: file.to_string(),
            run: NcclRun {
                file: file.to_string(),
                form: "text",
                ..NcclRun::default()
            },
            first_line,
            problems: Vec::new(),
            layout: None,
            last_row_line: 0,
            saw_footer: false,
            elided: None,
            failure: None,
            flagged: 0,
            sweep: None,
            next_command: None,
        }
    }

    /// A command line that starts this run: its binary names the test when nothing else does,
    /// its sizes count until the header's line says them.
    fn command(&mut self, binary: String, sweep: Sweep) {
        if self.run.test.is_none() {
            let base = binary.rsplit('/').next().unwrap_or(&binary);
            self.run.test = Some(base.to_string());
        }
        if self.sweep.is_none() {
            self.sweep = Some(sweep);
        }
    }

    fn problem(&mut self, line: u64, severity: &'static str, message: String) {
        self.problems.push(Problem {
            file: self.path.clone(),
            line,
            message,
            severity,
        });
    }

    /// Whether this run has ended: it printed result lines, its footer or a failure. A header
    /// line that starts a run after this begins the next run of the same file.
    fn has_ended_or_has_rows(&self) -> bool {
        !self.run.rows.is_empty() || self.saw_footer || self.failure.is_some()
    }
}

/// Whether a `#` comment is one nccl-tests prints once at the start of each invocation:
/// `# nThread ...`, `# nccl-tests version ...` (rccl-tests: `# rccl-tests version ...`),
/// `# Collective test starting: ...`.
fn starts_a_run(comment: &str) -> bool {
    comment.starts_with("nThread")
        || comment.starts_with("nccl-tests version")
        || comment.starts_with("rccl-tests version")
        || comment.starts_with("Collective test starting:")
}

/// Parses one file's text: one run per invocation of a test binary the file holds (a log of
/// the same binary started three times gives three runs, each with its own rows and footer).
/// With several runs each run's `file` names its place in the file (`log.txt (run 2 of 3,
/// from line 41)`) so that the per-size table and the outlier list can tell them apart.
pub fn parse(file: &str, text: &str) -> (Vec<NcclRun>, Vec<Problem>) {
    let mut done: Vec<Segment> = Vec::new();
    let mut seg = Segment::new(file, 1);
    let lines: Vec<&str> = text.lines().map(|l| l.trim_end_matches('\r')).collect();
    let prefix = learn_prefix(&lines);
    for (i, raw) in lines.iter().enumerate() {
        let no = i as u64 + 1;
        let learned = shape_len(raw, &prefix).map_or(*raw, |n| &raw[n..]);
        let unprefixed = strip_prefix(learned);
        let line = strip_rank_tags(unprefixed);
        let trimmed = line.trim();
        if trimmed.is_empty() {
            continue;
        }
        if let Some(c) = trimmed.strip_prefix('#').map(str::trim)
            && starts_a_run(c)
            && seg.has_ended_or_has_rows()
        {
            let next = seg.next_command.take();
            done.push(std::mem::replace(&mut seg, Segment::new(file, no)));
            if let Some((binary, sweep)) = next {
                seg.command(binary, sweep);
            }
        }
        read_line(&mut seg, no, trimmed);
    }
    done.push(seg);
    // A trailing segment with nothing in it (a file that ends in a banner) is not a run.
    if done.len() > 1
        && done.last().is_some_and(|s| {
            s.run.rows.is_empty() && s.run.devices.is_empty() && s.failure.is_none()
        })
    {
        done.pop();
    }
    let n = done.len();
    let mut runs = Vec::new();
    let mut problems = Vec::new();
    for (k, mut seg) in done.into_iter().enumerate() {
        let label = format!("run {} of {n}, from line {}", k + 1, seg.first_line);
        if n > 1 {
            seg.run.file = format!("{file} ({label})");
        }
        let (run, mut p) = finish(seg);
        if n > 1 {
            // A remark on the whole run names which run of the file it is about.
            for q in p.iter_mut().filter(|q| q.line == 0) {
                q.message = format!("{label}: {}", q.message);
            }
        }
        problems.extend(p);
        runs.extend(run);
    }
    (runs, problems)
}

/// Reads one non-blank line (launcher prefix and rank tags removed) into the run.
fn read_line(seg: &mut Segment, no: u64, trimmed: &str) {
    if is_failure(trimmed) {
        if seg.failure.is_none() {
            seg.failure = Some((no, trimmed.chars().take(160).collect()));
        }
        return;
    }
    if trimmed == "..." || trimmed == "…" {
        seg.elided.get_or_insert(no);
        return;
    }
    let comment = trimmed.strip_prefix('#').map(str::trim);
    let tokens: Vec<&str> = trimmed.split_whitespace().collect();
    if let Some(l) = header_layout(&tokens) {
        seg.layout = Some(l);
        return;
    }
    if let Some(c) = comment {
        let run = &mut seg.run;
        if let Some(v) = c.strip_prefix("nccl-tests version") {
            run.version = Some(format!("nccl-tests {}", v.trim()));
        } else if let Some(v) = c.strip_prefix("rccl-tests version") {
            run.version = Some(format!("rccl-tests {}", v.trim()));
        } else if let Some(v) = c.strip_prefix("Collective test starting:") {
            run.test = Some(v.trim().to_string());
        } else if c.starts_with("nThread") {
            if let Some(s) = Sweep::from_header(c, no) {
                seg.sweep = Some(s);
            }
        } else if let Some(v) = c.strip_prefix("Reducing maxBytes to") {
            let to = v.split_whitespace().next().and_then(|x| x.parse().ok());
            if let (Some(s), Some(to)) = (seg.sweep.as_mut(), to) {
                s.max_b = to;
            }
        } else if c.starts_with("Rank") {
            match parse_device(c) {
                Some(d) => run.devices.push(d),
                None => seg.problem(
                    no,
                    "warn",
                    "a rank line without `Rank N ... on HOST device N`; is the header cut?".into(),
                ),
            }
        } else if let Some(v) = c.strip_prefix("Out of bounds values") {
            run.out_of_bounds = v
                .trim_start_matches([' ', ':'])
                .split_whitespace()
                .next()
                .and_then(|x| x.parse().ok());
        } else if let Some(v) = c.strip_prefix("Avg bus bandwidth") {
            seg.saw_footer = true;
            run.avg_busbw_gbps = v
                .trim_start_matches([' ', ':'])
                .split_whitespace()
                .next()
                .and_then(num);
        } else if c == "..." {
            seg.elided.get_or_insert(no);
        } else if seg.layout.is_some() && !seg.saw_footer && table_note(c) {
            // `# Truncated  smaller message sizes`: a person's note that rows were left out.
            seg.problem(
                no,
                "warn",
                format!(
                    "a note inside the table (`# {c}`): rows were left out, so the footer's average covers sizes not shown"
                ),
            );
        }
        return;
    }
    if version_line(trimmed, &mut seg.run) {
        return;
    }
    if let Some((binary, sweep)) = Sweep::from_command(trimmed, no) {
        if seg.has_ended_or_has_rows() {
            seg.next_command = Some((binary, sweep));
        } else {
            seg.command(binary, sweep);
        }
        return;
    }
    // A result line starts with the size in bytes and has the data type third; a leading
    // timestamp (one or two tokens) is passed over.
    let mut tokens = tokens;
    if let Some(i) = (1..=2).find(|&i| {
        tokens.len() > i + 3
            && !tokens[0].chars().all(|c| c.is_ascii_digit())
            && tokens[0].chars().next().is_some_and(|c| c.is_ascii_digit())
            && tokens[i].chars().all(|c| c.is_ascii_digit())
            && tokens[i + 1].chars().all(|c| c.is_ascii_digit())
            && tokens[i + 2].chars().any(|c| c.is_ascii_alphabetic())
    }) {
        tokens.drain(..i);
    }
    let looks_like_row = tokens.len() >= 4
        && tokens[0].chars().all(|c| c.is_ascii_digit())
        && tokens[1].chars().all(|c| c.is_ascii_digit())
        && tokens[2].chars().any(|c| c.is_ascii_alphabetic());
    if !looks_like_row {
        // Anything else (NCCL INFO lines, MPI banners, prompts) is not ours to judge.
        return;
    }
    if seg.layout.is_none() {
        match infer_layout(&tokens) {
            Some(l) => {
                seg.problem(
                    no,
                    "warn",
                    "a result line before any column header (an excerpt?); the columns were inferred from the row's shape".into(),
                );
                seg.layout = Some(l);
            }
            None => {
                seg.problem(
                    no,
                    "fail",
                    "a result line before any column header; is the start of the output missing?"
                        .into(),
                );
                return;
            }
        }
    }
    let Some(l) = &seg.layout else { return };
    // rccl-tests marks a result whose error exceeds its threshold with `*` (`1e-06*`), as its
    // `# Errors with asterisks ...` line says: the number is read, the mark counted.
    for t in tokens.iter_mut() {
        if let Some(v) = t.strip_suffix('*')
            && num(v).is_some()
        {
            *t = v;
            seg.flagged += 1;
        }
    }
    match parse_row(&tokens, l) {
        Ok(mut r) => {
            r.line = no;
            seg.last_row_line = no;
            seg.run.rows.push(r);
        }
        Err(e) => seg.problem(no, "warn", e),
    }
}

/// The run's remarks once its last line is read; `None` when it has no result line.
fn finish(mut seg: Segment) -> (Option<NcclRun>, Vec<Problem>) {
    let mut dup = Vec::new();
    duplicate_ranks(&seg.run, &mut |line, severity, message| {
        dup.push((line, severity, message))
    });
    for (line, severity, message) in dup {
        seg.problem(line, severity, message);
    }
    if seg.run.rows.is_empty() {
        let hosts = seg.run.hosts().len();
        let what = if let Some((_, f)) = &seg.failure {
            format!("the test failed before any result line: {f}")
        } else if seg.layout.is_some() {
            "the column header is there but no result line follows; did the test crash?".into()
        } else if !seg.run.devices.is_empty() {
            format!(
                "only the header ({} ranks on {hosts} host(s)) and no result table; is the output cut?",
                seg.run.devices.len()
            )
        } else {
            "no nccl-tests result table found; is this nccl-tests output?".into()
        };
        seg.problem(0, "fail", what);
        return (None, seg.problems);
    }
    if let Some(at) = seg.elided {
        seg.problem(
            at,
            "warn",
            "`...` here: lines were left out of this output, so sizes or ranks are missing; the figures use what is there".into(),
        );
    }
    let listed = seg.run.devices.len();
    if let Some(max) = seg.run.devices.iter().map(|d| d.rank).max()
        && (max as usize + 1) > listed
    {
        seg.problem(
            0,
            "warn",
            format!(
                "the device list names {listed} rank(s) but goes up to rank {max}: it is incomplete, so hosts are counted from the ranks listed"
            ),
        );
    }
    if let Some((at, f)) = seg.failure.clone() {
        let (rows, last) = (seg.run.rows.len(), seg.last_row_line);
        seg.problem(
            at,
            "warn",
            format!(
                "the run failed here after {rows} result line(s) (last at line {last}): {f}; the sizes before it are used"
            ),
        );
    } else if !seg.saw_footer {
        let last = seg.last_row_line;
        seg.problem(
            last,
            "warn",
            "the output ends without the `Avg bus bandwidth` footer after this line (truncated or the test crashed); the rows up to here are used".into(),
        );
    }
    let rows_missing = rows_missing(&mut seg);
    // By line, whole-file remarks (line 0) last: the first is where the input first departs.
    seg.problems
        .sort_by_key(|p| if p.line == 0 { u64::MAX } else { p.line });
    let mut run = seg.run;
    if seg.flagged > 0 {
        // The footer counts them too; without it (a cut output) the marks are the count.
        run.out_of_bounds = Some(run.out_of_bounds.unwrap_or(0).max(seg.flagged));
    }
    run.avg_busbw_from_footer = seg.saw_footer && run.avg_busbw_gbps.is_some() && !rows_missing;
    if !run.avg_busbw_from_footer {
        run.avg_busbw_gbps = run.avg_busbw_from_rows();
    }
    (Some(run), seg.problems)
}

/// Whether the rows leave out sizes the run asked for (an excerpt), said as a warning at the
/// line that asks for them. In an output that stops early (no footer) the sizes after the last
/// row are the cut's, already named.
fn rows_missing(seg: &mut Segment) -> bool {
    let Some(sweep) = seg.sweep.clone() else {
        return false;
    };
    let ranks = seg.run.rank_count();
    let cut = !seg.saw_footer;
    let Some(missing) = sweep.missing(&seg.run.rows, ranks, cut) else {
        return false;
    };
    if missing.is_empty() {
        return false;
    }
    let asked = sweep.sizes().map_or(0, |v| v.len());
    let footer = match (seg.saw_footer, seg.run.avg_busbw_gbps) {
        (true, Some(f)) => format!(
            "; the footer's average ({f}) covers sizes not shown, so the run's average is the mean over the rows shown"
        ),
        _ => String::new(),
    };
    seg.problem(
        sweep.line,
        "warn",
        format!(
            "{} ask for {asked} size(s) ({}) but the rows leave out {}: {} (an excerpt?); keep the whole table{footer}",
            sweep.source,
            sweep.describe(),
            missing.len(),
            sweep.ranges(&missing),
        ),
    );
    true
}

/// Whether a `#` line inside the table is a note someone added rather than nccl-tests' own
/// (units row, the out-of-place/in-place banner, `Reducing maxBytes`, blank `#`, and
/// rccl-tests' `Errors with asterisks indicate errors that have exceeded the maximum
/// threshold.`, which it prints before the footer of every validated run).
fn table_note(c: &str) -> bool {
    let own = c.is_empty()
        || c.starts_with("Errors with asterisks")
        || c.starts_with("(B)")
        || c.contains("out-of-place")
        || c.starts_with("Reducing maxBytes")
        || c.starts_with("Collective test")
        || c.starts_with("nThread")
        || c.starts_with("Using devices");
    !own
}

/// `NCCL version 2.28.7+cuda13.0` (`RCCL version ...`) between the header and the table, kept
/// when the test printed no version of its own; rccl-tests before its `# rccl-tests version`
/// line printed `rccl-tests: Version develop:448c4c7` there.
fn version_line(line: &str, run: &mut NcclRun) -> bool {
    if let Some(v) = line.strip_prefix("rccl-tests: Version ") {
        run.version = Some(format!("rccl-tests {}", v.trim()));
        return true;
    }
    for (prefix, name) in [("NCCL version ", "NCCL"), ("RCCL version ", "RCCL")] {
        if let Some(v) = line.strip_prefix(prefix) {
            if run.version.is_none() {
                run.version = Some(format!("{name} {}", v.trim()));
            }
            return true;
        }
    }
    false
}

/// A rank listed twice on different hosts: a build without MPI started by mpirun runs one
/// independent single-rank test per process.
fn duplicate_ranks(run: &NcclRun, problem: &mut impl FnMut(u64, &'static str, String)) {
    let mut seen: std::collections::BTreeMap<u32, &str> = std::collections::BTreeMap::new();
    for d in &run.devices {
        if let Some(h) = seen.insert(d.rank, &d.host)
            && h != d.host
        {
            problem(
                0,
                "warn",
                format!(
                    "rank {} is listed on {h} and on {}: nccl-tests built without MPI (MPI=1) and started by mpirun runs independent single-process tests, not one job",
                    d.rank, d.host
                ),
            );
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn launcher_prefixes_are_removed() {
        assert_eq!(strip_prefix("[1,0]<stdout>:#  Rank  0"), "#  Rank  0");
        assert_eq!(strip_prefix("0: #  Rank  0"), "#  Rank  0");
        assert_eq!(strip_prefix("[3] 1024 256 float"), "1024 256 float");
        assert_eq!(
            strip_prefix("#  Rank  0 on h device 0 [0x07] GPU"),
            "#  Rank  0 on h device 0 [0x07] GPU"
        );
    }

    #[test]
    fn rank_tags_in_the_middle_of_a_line_are_removed_but_pci_ids_stay() {
        assert_eq!(
            strip_rank_tags("[0]  1048576  262144  float  sum  -1[0]  1626.5  0.64").as_ref(),
            "   1048576  262144  float  sum  -1   1626.5  0.64"
        );
        assert_eq!(
            strip_rank_tags("device  0 [0x3d] GPU [0000:04:00]").as_ref(),
            "device  0 [0x3d] GPU [0000:04:00]"
        );
    }

    #[test]
    fn a_row_in_scientific_notation_parses() {
        let l = Layout {
            has_redop: true,
            ..Layout::default()
        };
        let t: Vec<&str> =
            "8589934592 2147483648 float sum 1.2e+05 71.40 133.88 0e+00 1.2e+05 71.45 133.97 0e+00"
                .split_whitespace()
                .collect();
        let r = parse_row(&t, &l).unwrap();
        assert_eq!(r.out_of_place.unwrap().time_us, 1.2e5);
        assert_eq!(r.in_place.unwrap().wrong, Some(0.0));
        assert_eq!(r.root, None);
    }

    #[test]
    fn old_per_test_headers_have_redop_only_when_reducing_and_root_only_when_rooted() {
        let h = |s: &str| header_layout(&s.split_whitespace().collect::<Vec<_>>()).unwrap();
        let ag = h("#  size  count  type  time  algbw  busbw  error  time  algbw  busbw  error");
        assert_eq!(
            (ag.has_redop, ag.has_root, ag.error_is_max),
            (false, false, true)
        );
        let bc = h("# size count type root time algbw busbw error time algbw busbw error");
        assert_eq!((bc.has_redop, bc.has_root), (false, true));
        let red = h("# size count type redop root time algbw busbw #wrong time algbw busbw #wrong");
        assert_eq!(
            (red.has_redop, red.has_root, red.error_is_max),
            (true, true, false)
        );
        let t: Vec<&str> = "1024 256 float 0 12.5 0.08 0.08 0e+00 12.1 0.08 0.08 0e+00"
            .split_whitespace()
            .collect();
        let r = parse_row(&t, &bc).unwrap();
        assert_eq!((r.root, r.redop.as_str()), (Some(0), "none"));
        assert_eq!(r.in_place.unwrap().max_error, Some(0.0));
    }

    #[test]
    fn a_header_less_row_implies_its_layout() {
        let t: Vec<&str> = "1048576 262144 float sum -1 1626.5 0.64 1.24 0 2302.3 0.46 0.87 0"
            .split_whitespace()
            .collect();
        let l = infer_layout(&t).unwrap();
        assert_eq!((l.has_redop, l.has_root, l.per_iter), (true, true, false));
        let t: Vec<&str> = "1024 256 float 12.5 0.08 0.08 0e+00 12.1 0.08 0.08 0e+00"
            .split_whitespace()
            .collect();
        let l = infer_layout(&t).unwrap();
        assert_eq!((l.has_redop, l.has_root), (false, false));
    }
}
