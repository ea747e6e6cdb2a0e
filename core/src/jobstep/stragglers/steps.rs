//! A node's side: follow the node's `fabric-run` records (`<spool>/<job>/<node>.jsonl`, the
//! job's user's file, read by root through the verified job folder) and make the figure of each
//! hop ([`StepTail::figure`]). Every byte is the job's user's: lines are bounded, anything that
//! does not decode is counted and skipped, and at most [`MAX_STEPS_KEPT`] step times are kept
//! whatever the job's pace.

use std::collections::VecDeque;

use fabric_proto::record::{Body, Record};
use fabric_proto::straggler::{MAX_STEPS_PER_WINDOW, WindowSteps};

/// The most step times kept (two windows' worth at the most a window keeps).
pub const MAX_STEPS_KEPT: usize = 2 * MAX_STEPS_PER_WINDOW;
/// The most bytes read from the records at one hop (the rest is read at the next).
pub const MAX_READ_BYTES: u64 = 1 << 20;
/// A line longer than this is skipped (a record is a few hundred bytes).
pub const MAX_LINE_BYTES: usize = 64 * 1024;

/// What a node's records said so far, for its figures.
#[derive(Debug, Default)]
pub struct StepTail {
    /// Where the next read starts.
    pub offset: u64,
    partial: Vec<u8>,
    skipping: bool,
    /// Step ends and durations, milliseconds (end time is the record's `ts`).
    steps: VecDeque<(u64, u64)>,
    /// Checkpoint and restore ends, milliseconds.
    pauses: VecDeque<u64>,
    /// Lines that did not decode, or were too long.
    pub malformed: u64,
}

impl StepTail {
    /// Feeds bytes read from the records file (at [`StepTail::offset`]); a line cut by the end
    /// of the read waits for the rest.
    pub fn feed(&mut self, bytes: &[u8]) {
        self.offset += bytes.len() as u64;
        let mut rest = bytes;
        while let Some(nl) = rest.iter().position(|b| *b == b'\n') {
            let (line, after) = rest.split_at(nl);
            rest = &after[1..];
            if self.skipping {
                self.skipping = false;
                self.malformed += 1;
                self.partial.clear();
                continue;
            }
            if self.partial.is_empty() {
                self.take_line(line);
            } else {
                let mut whole = std::mem::take(&mut self.partial);
                whole.extend_from_slice(line);
                self.take_line(&whole);
            }
        }
        if !self.skipping {
            self.partial.extend_from_slice(rest);
            if self.partial.len() > MAX_LINE_BYTES {
                self.partial.clear();
                self.skipping = true;
            }
        }
    }

    /// The file was cut or replaced: start again from its first byte (what was kept stays).
    pub fn restart(&mut self) {
        self.offset = 0;
        self.partial.clear();
        self.skipping = false;
    }

    fn take_line(&mut self, line: &[u8]) {
        if line.iter().all(u8::is_ascii_whitespace) {
            return;
        }
        if line.len() > MAX_LINE_BYTES {
            self.malformed += 1;
            return;
        }
        let Ok(rec) = serde_json::from_slice::<Record>(line) else {
            self.malformed += 1;
            return;
        };
        let ts = rec.meta.ts;
        if !ts.is_finite() || ts <= 0.0 || ts > 1.0e11 {
            self.malformed += 1;
            return;
        }
        let end_ms = (ts * 1000.0) as u64;
        match rec.body {
            Body::Step {
                duration_s: Some(d),
                ..
            } if d.is_finite() && d > 0.0 && d < 1.0e7 => {
                if self.steps.len() >= MAX_STEPS_KEPT {
                    self.steps.pop_front();
                }
                self.steps
                    .push_back((end_ms, (d * 1000.0).round().max(1.0) as u64));
            }
            Body::Checkpoint { .. } | Body::Restore { .. } => {
                if self.pauses.len() >= MAX_STEPS_KEPT {
                    self.pauses.pop_front();
                }
                self.pauses.push_back(end_ms);
            }
            _ => {}
        }
    }

    /// The figure of the window `(end_ms - window_ms, end_ms]` (hop `hop`); older steps are
    /// forgotten. `fault` is what the node's own watch holds now.
    pub fn figure(
        &mut self,
        hop: u64,
        end_ms: u64,
        window_ms: u64,
        fault: Option<String>,
    ) -> WindowSteps {
        let from = end_ms.saturating_sub(window_ms);
        while self.steps.front().is_some_and(|(t, _)| *t <= from) {
            self.steps.pop_front();
        }
        while self.pauses.front().is_some_and(|t| *t <= from) {
            self.pauses.pop_front();
        }
        let mut times: Vec<u64> = self
            .steps
            .iter()
            .filter(|(t, _)| *t <= end_ms)
            .map(|(_, d)| *d)
            .collect();
        let checkpoint = self.pauses.iter().any(|t| *t <= end_ms);
        let steps = u32::try_from(times.len()).unwrap_or(u32::MAX);
        let median_ms = if times.is_empty() {
            None
        } else {
            if times.len() > MAX_STEPS_PER_WINDOW {
                // Every n-th: the window's spread, within the bound.
                let n = times.len().div_ceil(MAX_STEPS_PER_WINDOW);
                times = times.into_iter().step_by(n).collect();
            }
            times.sort_unstable();
            Some(times[(times.len() - 1) / 2])
        };
        WindowSteps {
            hop,
            steps,
            median_ms,
            checkpoint,
            fault,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step_line(ts: f64, d: f64) -> String {
        format!(
            "{{\"v\":1,\"ts\":{ts},\"run\":\"n1:1:1\",\"node\":\"n1\",\"type\":\"step\",\"duration_s\":{d}}}\n"
        )
    }

    #[test]
    fn a_window_figure_is_the_median_of_the_steps_that_ended_in_it() {
        let mut t = StepTail::default();
        let mut text = String::new();
        for (i, d) in [1.0, 1.0, 3.0, 1.2, 0.9].iter().enumerate() {
            text += &step_line(1000.0 + i as f64, *d);
        }
        t.feed(text.as_bytes());
        let f = t.figure(7, 1_004_000, 10_000, None);
        assert_eq!(f.steps, 5);
        assert_eq!(f.median_ms, Some(1000));
        assert!(!f.checkpoint);
        // Later, the window has moved past them.
        let f = t.figure(9, 1_020_000, 10_000, None);
        assert_eq!((f.steps, f.median_ms), (0, None));
    }

    #[test]
    fn a_line_cut_by_a_read_is_taken_whole_at_the_next() {
        let mut t = StepTail::default();
        let line = step_line(1000.0, 2.0);
        let (a, b) = line.as_bytes().split_at(20);
        t.feed(a);
        assert_eq!(t.figure(1, 1_000_500, 10_000, None).steps, 0);
        t.feed(b);
        assert_eq!(t.figure(1, 1_000_500, 10_000, None).median_ms, Some(2000));
        assert_eq!(t.offset, line.len() as u64);
    }

    #[test]
    fn what_the_job_user_wrote_that_is_not_a_record_is_counted_and_skipped() {
        let mut t = StepTail::default();
        let mut junk = "not json\n{\"type\":\"step\"}\n".to_owned();
        junk += &"x".repeat(MAX_LINE_BYTES + 10);
        junk += "\n";
        junk += &step_line(f64::NAN, 1.0).replace("NaN", "1e300");
        junk += &step_line(1000.0, -3.0);
        junk += &step_line(1000.0, 1.5);
        t.feed(junk.as_bytes());
        assert_eq!(t.malformed, 4, "{t:?}");
        let f = t.figure(1, 1_001_000, 10_000, None);
        assert_eq!((f.steps, f.median_ms), (1, Some(1500)));
    }

    #[test]
    fn a_checkpoint_in_the_window_marks_it_and_ages_out_with_it() {
        let mut t = StepTail::default();
        let ck = "{\"v\":1,\"ts\":1003.0,\"run\":\"r\",\"node\":\"n1\",\"type\":\"checkpoint\",\"duration_s\":4.0,\"source\":\"marker\"}\n";
        t.feed(ck.as_bytes());
        t.feed(step_line(1004.0, 5.0).as_bytes());
        assert!(t.figure(1, 1_005_000, 10_000, None).checkpoint);
        assert!(!t.figure(3, 1_014_000, 10_000, None).checkpoint);
    }

    #[test]
    fn memory_stays_bounded_however_fast_the_job_steps() {
        let mut t = StepTail::default();
        let mut text = String::new();
        for i in 0..(3 * MAX_STEPS_KEPT) {
            text += &step_line(1000.0 + i as f64 / 10_000.0, 0.001);
        }
        t.feed(text.as_bytes());
        assert!(t.steps.len() <= MAX_STEPS_KEPT);
        let f = t.figure(1, 1_010_000, 10_000, None);
        assert_eq!(f.median_ms, Some(1));
    }
}
