//! The output pump: forwards the child's bytes at once and matches lines as they pass.
//!
//! Each read from the child's pipe (grown to 1 MiB) is written to our own stdout/stderr descriptor with raw
//! `write(2)` calls before anything else happens (no line buffering, so a prompt without a newline
//! shows immediately), then the complete lines in it are matched. Matching searches the whole
//! chunk once per pattern (the regex engine's literal prefilters make that memchr-fast) and
//! confirms each hit against its own line, so the per-line cost is nil for lines that match
//! nothing. A line split across reads is reassembled (up to [`MAX_LINE`] bytes).

use std::io::{ErrorKind, Read};
use std::os::fd::AsFd;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use fabric_proto::record::Source;
use regex::bytes::{Regex, RegexBuilder};

use crate::tracker::{Event, Tracker};

/// Longest line matched; the rest of a longer line passes through unmatched.
pub const MAX_LINE: usize = 64 << 10;

/// What a matching line means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `--checkpoint-regex` BEGIN.
    CkptBegin,
    /// `--checkpoint-regex` END.
    CkptEnd,
    /// `--restore-regex` BEGIN.
    RestoreBegin,
    /// `--restore-regex` END.
    RestoreEnd,
    /// `--step-regex`.
    Step,
    /// `--output-regex`.
    Output,
    /// `--retry-on output=`.
    Retry,
}

impl Kind {
    fn event(self, n: Option<u64>) -> Event {
        match self {
            Self::CkptBegin => Event::CheckpointBegin(Source::Regex),
            Self::CkptEnd => Event::CheckpointEnd(Source::Regex),
            Self::RestoreBegin => Event::RestoreBegin(Source::Regex),
            Self::RestoreEnd => Event::RestoreEnd(Source::Regex),
            Self::Step => Event::Step(n),
            Self::Output => Event::Output(1),
            Self::Retry => Event::RetryPattern,
        }
    }
}

/// Compiles a user pattern with `^`/`$` matching at line ends.
pub fn compile(pattern: &str, flag: &str) -> Result<Regex, String> {
    RegexBuilder::new(pattern)
        .multi_line(true)
        .build()
        .map_err(|e| format!("{flag} `{pattern}`: bad regular expression: {e}"))
}

/// The patterns matched on output, in a fixed order.
#[derive(Debug, Clone, Default)]
pub struct Patterns {
    list: Vec<(Kind, Regex)>,
}

impl Patterns {
    /// Adds a pattern.
    pub fn push(&mut self, kind: Kind, re: Regex) {
        self.list.push((kind, re));
    }

    /// No patterns: the child's output can be inherited directly.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }
}

/// Line assembly and matching for one stream.
#[derive(Debug)]
pub struct LineMatcher {
    patterns: Arc<Patterns>,
    carry: Vec<u8>,
    carry_overflow: bool,
}

fn find_nl(b: &[u8]) -> Option<usize> {
    b.iter().position(|&c| c == b'\n')
}

impl LineMatcher {
    /// A matcher over `patterns`.
    pub fn new(patterns: Arc<Patterns>) -> Self {
        Self {
            patterns,
            carry: Vec::new(),
            carry_overflow: false,
        }
    }

    fn push_carry(&mut self, b: &[u8]) {
        let room = MAX_LINE.saturating_sub(self.carry.len());
        if b.len() > room {
            self.carry_overflow = true;
        }
        self.carry.extend_from_slice(&b[..b.len().min(room)]);
    }

    fn step_number(re: &Regex, line: &[u8]) -> Option<u64> {
        if re.captures_len() < 2 {
            return None;
        }
        let caps = re.captures(line)?;
        let m = caps.iter().skip(1).flatten().next()?;
        std::str::from_utf8(m.as_bytes()).ok()?.parse().ok()
    }

    fn match_line(&self, line: &[u8], out: &mut Vec<Event>) {
        for (kind, re) in &self.patterns.list {
            if re.is_match(line) {
                let n = (*kind == Kind::Step)
                    .then(|| Self::step_number(re, line))
                    .flatten();
                out.push(kind.event(n));
            }
        }
    }

    /// Matches every complete line in `region` (which ends with a newline), in line order.
    fn match_region(&self, region: &[u8], out: &mut Vec<Event>) {
        let mut hits: Vec<(usize, usize, Event)> = Vec::new();
        for (order, (kind, re)) in self.patterns.list.iter().enumerate() {
            let mut pos = 0;
            while pos < region.len() {
                let Some(m) = re.find_at(region, pos) else {
                    break;
                };
                let line_start = region[..m.start()]
                    .iter()
                    .rposition(|&c| c == b'\n')
                    .map_or(0, |i| i + 1)
                    .max(pos);
                let line_end =
                    find_nl(&region[m.start()..]).map_or(region.len(), |i| m.start() + i);
                let line = &region[line_start..line_end];
                // A hit that runs past its line (a pattern matching `\n`) must match the line alone.
                if m.end() <= line_end || re.is_match(line) {
                    let n = (*kind == Kind::Step)
                        .then(|| Self::step_number(re, line))
                        .flatten();
                    hits.push((line_start, order, kind.event(n)));
                }
                pos = line_end + 1;
            }
        }
        hits.sort_by_key(|h| (h.0, h.1));
        out.extend(hits.into_iter().map(|h| h.2));
    }

    /// Feeds one chunk; returns the events of the lines it completed, in order.
    pub fn feed(&mut self, chunk: &[u8]) -> Vec<Event> {
        let mut out = Vec::new();
        let Some(first) = find_nl(chunk) else {
            self.push_carry(chunk);
            return out;
        };
        self.push_carry(&chunk[..first]);
        let line = std::mem::take(&mut self.carry);
        self.match_line(&line, &mut out);
        self.carry = line;
        self.carry.clear();
        self.carry_overflow = false;
        let last = chunk.iter().rposition(|&c| c == b'\n').unwrap_or(first);
        if last > first {
            self.match_region(&chunk[first + 1..=last], &mut out);
        }
        self.push_carry(&chunk[last + 1..]);
        out
    }

    /// The stream ended: a last line without a newline still counts.
    pub fn finish(&mut self) -> Vec<Event> {
        let mut out = Vec::new();
        if !self.carry.is_empty() {
            let line = std::mem::take(&mut self.carry);
            self.match_line(&line, &mut out);
        }
        out
    }
}

/// Writes all of `buf` to `fd`; `false` when the reader is gone (EPIPE) or the fd is broken.
fn write_all(fd: std::os::fd::BorrowedFd<'_>, mut buf: &[u8]) -> bool {
    while !buf.is_empty() {
        match nix::unistd::write(fd, buf) {
            Ok(0) => return false,
            Ok(n) => buf = &buf[n..],
            Err(nix::errno::Errno::EINTR | nix::errno::Errno::EAGAIN) => continue,
            Err(_) => return false,
        }
    }
    true
}

/// Our own stream the child's stream goes to.
#[derive(Debug, Clone, Copy)]
pub enum Target {
    /// File descriptor 1.
    Stdout,
    /// File descriptor 2.
    Stderr,
}

/// Pumps `src` to `target` until EOF, feeding lines to the tracker.
///
/// When our own output is gone (EPIPE) the pump stops and drops the pipe, so the child sees the
/// same broken pipe it would have seen without the wrapper.
pub fn pump(
    mut src: impl Read,
    target: Target,
    patterns: Arc<Patterns>,
    tracker: Arc<Mutex<Tracker>>,
) {
    let stdout = std::io::stdout();
    let stderr = std::io::stderr();
    let fd = match target {
        Target::Stdout => stdout.as_fd(),
        Target::Stderr => stderr.as_fd(),
    };
    let mut matcher = LineMatcher::new(patterns);
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = match src.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        if !write_all(fd, &buf[..n]) {
            return;
        }
        let now = Instant::now();
        let events = matcher.feed(&buf[..n]);
        if !events.is_empty() {
            let mut t = tracker.lock().unwrap_or_else(|p| p.into_inner());
            for e in events {
                t.apply(e, now);
            }
        }
    }
    let events = matcher.finish();
    if !events.is_empty() {
        let now = Instant::now();
        let mut t = tracker.lock().unwrap_or_else(|p| p.into_inner());
        for e in events {
            t.apply(e, now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matcher(specs: &[(Kind, &str)]) -> LineMatcher {
        let mut p = Patterns::default();
        for (k, s) in specs {
            p.push(*k, compile(s, "--test").unwrap());
        }
        LineMatcher::new(Arc::new(p))
    }

    #[test]
    fn events_come_in_line_order_across_patterns() {
        let mut m = matcher(&[(Kind::CkptEnd, "saved"), (Kind::CkptBegin, "saving")]);
        let ev = m.feed(b"x\nsaving a\nnoise\nsaved a\nsaving b\n");
        assert_eq!(
            ev,
            vec![
                Event::CheckpointBegin(Source::Regex),
                Event::CheckpointEnd(Source::Regex),
                Event::CheckpointBegin(Source::Regex),
            ]
        );
    }

    #[test]
    fn a_line_split_across_reads_is_matched_once() {
        let mut m = matcher(&[(Kind::Step, r"step (\d+) done")]);
        assert!(m.feed(b"step 1").is_empty());
        assert_eq!(m.feed(b"2 done\nstep 13 d"), vec![Event::Step(Some(12))]);
        assert_eq!(m.feed(b"one\n"), vec![Event::Step(Some(13))]);
        assert_eq!(m.finish(), vec![]);
    }

    #[test]
    fn each_matching_line_counts_once_even_with_several_hits() {
        let mut m = matcher(&[(Kind::Output, "ok")]);
        assert_eq!(m.feed(b"ok ok ok\nno\nok\n").len(), 2);
    }

    #[test]
    fn a_pattern_cannot_match_across_a_line_break() {
        let mut m = matcher(&[(Kind::Output, r"a\s+b")]);
        assert!(m.feed(b"first\nxa\nb\nlast\n").is_empty());
        assert_eq!(m.feed(b"first\na  b\n").len(), 1);
    }

    #[test]
    fn anchors_work_per_line() {
        let mut m = matcher(&[(Kind::Output, r"^done$")]);
        assert_eq!(m.feed(b"zero\ndone\nnot done\ndone\n").len(), 2);
    }

    #[test]
    fn a_last_line_without_newline_counts_at_the_end() {
        let mut m = matcher(&[(Kind::Output, "end")]);
        assert!(m.feed(b"the end").is_empty());
        assert_eq!(m.finish().len(), 1);
    }
}
