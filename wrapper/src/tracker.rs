//! Turns timed events (markers, output lines, directory bursts) into records.
//!
//! One [`Tracker`] per wrapper, shared by the supervisor and the output pumps behind a mutex.
//! Records go through a [`Sink`] that never fails the job: the first write error is reported
//! once on stderr and later records are dropped. Step times also feed the slow-step detector
//! ([`crate::slow`]), whose flags go to stderr, the records and the job's events file
//! ([`EventsFile`]).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use fabric_proto::notice::FabricNotice;
use fabric_proto::record::{
    Body, Meta, Record, RecordWriter, Source, VERSION, append_in_spool, check_job_dir, unix_now,
};

use crate::slow::{Regression, SlowSteps};

/// Something the job did, as seen by one of the detectors.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// A checkpoint write begins.
    CheckpointBegin(Source),
    /// The checkpoint write ended.
    CheckpointEnd(Source),
    /// A restore begins.
    RestoreBegin(Source),
    /// The restore ended.
    RestoreEnd(Source),
    /// A finished checkpoint measured elsewhere (directory bursts).
    Checkpoint {
        /// Seconds.
        duration: Duration,
        /// Bytes written.
        bytes: u64,
    },
    /// A finished restore measured elsewhere (directory bursts).
    Restore {
        /// Seconds.
        duration: Duration,
        /// Bytes read.
        bytes: u64,
    },
    /// A training step ended.
    Step(Option<u64>),
    /// Accepted outputs.
    Output(u64),
    /// A `--retry-on output=` pattern matched.
    RetryPattern,
}

/// Where records go; write errors become one warning.
#[derive(Debug)]
pub struct Sink {
    writer: Option<RecordWriter>,
    path: Option<PathBuf>,
}

impl Sink {
    /// A sink writing to `writer`, or dropping everything when `None`.
    pub fn new(writer: Option<RecordWriter>) -> Self {
        let path = writer.as_ref().map(|w| w.path().to_owned());
        Self { writer, path }
    }

    /// Writes one record; on failure warns once and stops writing.
    pub fn write(&mut self, body: Body) {
        if let Some(w) = &mut self.writer
            && let Err(e) = w.write(body)
        {
            self.fail(&e);
        }
    }

    /// Syncs the file (end of the run).
    pub fn sync(&mut self) {
        if let Some(w) = &self.writer
            && let Err(e) = w.sync()
        {
            self.fail(&e);
        }
    }

    fn fail(&mut self, e: &std::io::Error) {
        let p = self.path.as_ref().map(|p| p.display().to_string());
        tracing::warn!(
            "fabric-run: warning: cannot write records to {}: {e}; the job continues unrecorded",
            p.unwrap_or_default()
        );
        self.writer = None;
    }
}

/// The job's events file, `<spool>/<job>/fabric-run-events-<node>.jsonl`
/// ([`fabric_proto::record::run_events_path`]): live events as record lines, appended as the job's
/// user with the spool's safe append, for the job to read while it runs. The first failure
/// warns once; later events go to stderr and the records only.
#[derive(Debug)]
pub struct EventsFile {
    path: PathBuf,
    meta: Meta,
    uid: u32,
    /// The prolog made the job's folder: never make it here.
    prolog_made: bool,
    failed: bool,
}

impl EventsFile {
    /// The events file `path`, its lines stamped with `meta`.
    pub fn new(path: PathBuf, meta: Meta, prolog_made: bool) -> Self {
        Self {
            path,
            meta,
            uid: nix::unistd::getuid().as_raw(),
            prolog_made,
            failed: false,
        }
    }

    /// Appends one record line (one `write(2)`).
    pub fn append(&mut self, body: Body) {
        if self.failed {
            return;
        }
        let mut meta = self.meta.clone();
        meta.v = VERSION;
        meta.ts = unix_now();
        let mut line = Record { meta, body }.to_line();
        line.push('\n');
        let dir_ok = match self.path.parent() {
            Some(dir) if self.prolog_made => check_job_dir(dir, self.uid),
            _ => Ok(()),
        };
        if let Err(e) = dir_ok.and_then(|()| append_in_spool(&self.path, line.as_bytes(), self.uid))
        {
            tracing::warn!(
                "fabric-run: warning: cannot append to {}: {e}; events go to stderr and the \
                 records only",
                self.path.display()
            );
            self.failed = true;
        }
    }
}

const SOURCES: [Source; 3] = [Source::Marker, Source::Regex, Source::Dir];

fn idx(s: Source) -> usize {
    match s {
        Source::Marker => 0,
        Source::Regex => 1,
        Source::Dir => 2,
    }
}

/// The state between events.
#[derive(Debug)]
pub struct Tracker {
    sink: Sink,
    attempt: u32,
    last_boundary: Option<Instant>,
    /// Checkpoint/restore seconds per source since the last step boundary.
    ckpt_since_boundary: [f64; 3],
    open_ckpt: [Option<Instant>; 3],
    open_restore: [Option<Instant>; 3],
    retry_pattern_seen: bool,
    /// Outputs not yet written, and when they were last written.
    pending_outputs: u64,
    outputs_written_at: Option<Instant>,
    /// `--slow-step-window`/`--slow-step-factor` (`None`: off).
    slow: Option<SlowSteps>,
    /// Where slow-step flags go besides stderr and the records.
    events: Option<EventsFile>,
}

/// Outputs are written at most this often (an `--output-regex` can match thousands of lines a
/// second; one record each would cost more than the job's own logging).
const OUTPUT_EVERY: Duration = Duration::from_secs(1);

impl Tracker {
    /// A tracker writing to `sink`.
    pub fn new(sink: Sink) -> Self {
        Self {
            sink,
            attempt: 0,
            last_boundary: None,
            ckpt_since_boundary: [0.0; 3],
            open_ckpt: [None; 3],
            open_restore: [None; 3],
            retry_pattern_seen: false,
            pending_outputs: 0,
            outputs_written_at: None,
            slow: None,
            events: None,
        }
    }

    /// Judges step times with `slow` and appends its flags to `events` too.
    pub fn with_slow_steps(mut self, slow: Option<SlowSteps>, events: Option<EventsFile>) -> Self {
        self.slow = slow;
        self.events = events;
        self
    }

    /// Records a fabric fault notice; `sent_signal`: what `--on-fabric-fault` sent for it.
    pub fn fabric_fault(&mut self, n: &FabricNotice, sent_signal: Option<i32>) {
        self.sink.write(Body::FabricFault {
            check: n.check.clone(),
            message: n.message.clone(),
            seen_at_s: n.seen_at_s,
            into_job_s: n.into_job_s,
            drained: n.drained,
            sent_signal,
            attempt: self.attempt,
        });
    }

    fn slow_steps(&mut self, r: &Regression) {
        tracing::warn!("{}", r.summary());
        let body = Body::SlowSteps {
            window_median_s: r.window_median_s,
            run_median_s: r.run_median_s,
            factor: r.factor,
            window: r.window,
            steps: r.steps,
            attempt: self.attempt,
        };
        if let Some(e) = &mut self.events {
            e.append(body.clone());
        }
        self.sink.write(body);
    }

    /// Writes outputs counted but not yet recorded (end of an attempt).
    pub fn flush_outputs(&mut self) {
        if self.pending_outputs > 0 {
            let n = std::mem::take(&mut self.pending_outputs);
            self.sink.write(Body::Output {
                n,
                attempt: self.attempt,
            });
        }
    }

    /// Writes a record that is not an event (step_start, attempt, step_end).
    pub fn write(&mut self, body: Body) {
        self.sink.write(body);
    }

    /// Syncs the records file.
    pub fn sync(&mut self) {
        self.sink.sync();
    }

    /// A new attempt starts: step timing and open begins start afresh.
    pub fn start_attempt(&mut self, attempt: u32) {
        self.flush_outputs();
        self.outputs_written_at = None;
        self.attempt = attempt;
        self.last_boundary = None;
        self.ckpt_since_boundary = [0.0; 3];
        self.open_ckpt = [None; 3];
        self.open_restore = [None; 3];
        self.retry_pattern_seen = false;
    }

    /// Whether a `--retry-on output=` pattern matched during this attempt.
    pub fn retry_pattern_seen(&self) -> bool {
        self.retry_pattern_seen
    }

    /// Applies one event seen at `at`.
    pub fn apply(&mut self, event: Event, at: Instant) {
        let attempt = self.attempt;
        match event {
            Event::CheckpointBegin(s) => self.open_ckpt[idx(s)] = Some(at),
            Event::RestoreBegin(s) => self.open_restore[idx(s)] = Some(at),
            Event::CheckpointEnd(s) => {
                // An end without a begin is ignored: there is nothing to measure.
                if let Some(b) = self.open_ckpt[idx(s)].take() {
                    let d = at.saturating_duration_since(b);
                    self.ckpt_since_boundary[idx(s)] += d.as_secs_f64();
                    self.sink.write(Body::Checkpoint {
                        duration_s: d.as_secs_f64(),
                        source: s,
                        bytes: None,
                        attempt,
                    });
                }
            }
            Event::RestoreEnd(s) => {
                if let Some(b) = self.open_restore[idx(s)].take() {
                    let d = at.saturating_duration_since(b);
                    self.ckpt_since_boundary[idx(s)] += d.as_secs_f64();
                    self.sink.write(Body::Restore {
                        duration_s: d.as_secs_f64(),
                        source: s,
                        bytes: None,
                        attempt,
                    });
                }
            }
            Event::Checkpoint { duration, bytes } => {
                self.ckpt_since_boundary[idx(Source::Dir)] += duration.as_secs_f64();
                self.sink.write(Body::Checkpoint {
                    duration_s: duration.as_secs_f64(),
                    source: Source::Dir,
                    bytes: Some(bytes),
                    attempt,
                });
            }
            Event::Restore { duration, bytes } => {
                self.ckpt_since_boundary[idx(Source::Dir)] += duration.as_secs_f64();
                self.sink.write(Body::Restore {
                    duration_s: duration.as_secs_f64(),
                    source: Source::Dir,
                    bytes: Some(bytes),
                    attempt,
                });
            }
            Event::Step(n) => {
                // The same checkpoint may be seen by several detectors: subtract the largest.
                let ckpt_s = SOURCES
                    .iter()
                    .map(|s| self.ckpt_since_boundary[idx(*s)])
                    .fold(0.0, f64::max);
                let duration_s = self
                    .last_boundary
                    .map(|lb| (at.saturating_duration_since(lb).as_secs_f64() - ckpt_s).max(0.0));
                self.last_boundary = Some(at);
                self.ckpt_since_boundary = [0.0; 3];
                self.sink.write(Body::Step {
                    n,
                    duration_s,
                    ckpt_s: if duration_s.is_some() { ckpt_s } else { 0.0 },
                    attempt,
                });
                if let (Some(d), Some(slow)) = (duration_s, &mut self.slow)
                    && let Some(r) = slow.observe(d)
                {
                    self.slow_steps(&r);
                }
            }
            Event::Output(n) => {
                self.pending_outputs += n;
                let due = self
                    .outputs_written_at
                    .is_none_or(|t| at.saturating_duration_since(t) >= OUTPUT_EVERY);
                if due {
                    self.flush_outputs();
                    self.outputs_written_at = Some(at);
                }
            }
            Event::RetryPattern => self.retry_pattern_seen = true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fabric_core::record::read_records;
    use fabric_proto::record::Meta;

    fn tracker(dir: &tempfile::TempDir) -> (Tracker, PathBuf) {
        let path = dir.path().join("r.jsonl");
        let w = RecordWriter::open(&path, Meta::default()).unwrap();
        (Tracker::new(Sink::new(Some(w))), path)
    }

    fn bodies(path: &std::path::Path) -> Vec<Body> {
        read_records(path, &Default::default())
            .unwrap()
            .records
            .into_iter()
            .map(|r| r.body)
            .collect()
    }

    #[test]
    fn step_time_excludes_a_checkpoint_taken_between_boundaries() {
        let dir = tempfile::tempdir().unwrap();
        let (mut t, path) = tracker(&dir);
        let t0 = Instant::now();
        let s = |x: f64| t0 + Duration::from_secs_f64(x);
        t.start_attempt(1);
        t.apply(Event::Step(Some(1)), s(0.0));
        t.apply(Event::CheckpointBegin(Source::Marker), s(1.0));
        t.apply(Event::CheckpointEnd(Source::Marker), s(4.0));
        t.apply(Event::Step(Some(2)), s(5.0));
        let b = bodies(&path);
        assert_eq!(b.len(), 3);
        match &b[0] {
            Body::Step { duration_s, .. } => assert_eq!(*duration_s, None),
            other => panic!("{other:?}"),
        }
        match &b[1] {
            Body::Checkpoint {
                duration_s, source, ..
            } => {
                assert!((duration_s - 3.0).abs() < 1e-6);
                assert_eq!(*source, Source::Marker);
            }
            other => panic!("{other:?}"),
        }
        match &b[2] {
            Body::Step {
                duration_s, ckpt_s, ..
            } => {
                assert!((duration_s.unwrap() - 2.0).abs() < 1e-6);
                assert!((ckpt_s - 3.0).abs() < 1e-6);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn outputs_in_quick_succession_are_written_together() {
        let dir = tempfile::tempdir().unwrap();
        let (mut t, path) = tracker(&dir);
        let t0 = Instant::now();
        t.start_attempt(1);
        for i in 0..100 {
            t.apply(Event::Output(1), t0 + Duration::from_millis(i));
        }
        t.flush_outputs();
        let ns: Vec<u64> = bodies(&path)
            .into_iter()
            .map(|b| match b {
                Body::Output { n, .. } => n,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(ns, [1, 99]);
    }

    #[test]
    fn an_end_marker_without_a_begin_records_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let (mut t, path) = tracker(&dir);
        t.start_attempt(1);
        t.apply(Event::CheckpointEnd(Source::Regex), Instant::now());
        assert!(bodies(&path).is_empty());
    }

    #[test]
    fn a_step_time_regression_is_recorded_and_appended_to_the_jobs_events_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.jsonl");
        let w = RecordWriter::open(&path, Meta::default()).unwrap();
        let events = dir.path().join("7").join("fabric-run-events-n1.jsonl");
        let mut t = Tracker::new(Sink::new(Some(w))).with_slow_steps(
            SlowSteps::new(3, 1.5),
            Some(EventsFile::new(events.clone(), Meta::default(), false)),
        );
        t.start_attempt(1);
        let mut at = Instant::now();
        t.apply(Event::Step(None), at);
        for d in [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 3.0, 3.0, 3.0, 3.0] {
            at += Duration::from_secs_f64(d);
            t.apply(Event::Step(None), at);
        }
        let slow: Vec<Body> = bodies(&path)
            .into_iter()
            .filter(|b| matches!(b, Body::SlowSteps { .. }))
            .collect();
        assert_eq!(slow.len(), 1, "one episode, flagged once: {slow:?}");
        match &slow[0] {
            Body::SlowSteps {
                window_median_s,
                run_median_s,
                factor,
                window,
                steps,
                attempt,
            } => {
                assert!((window_median_s - 3.0).abs() < 1e-6);
                assert!((run_median_s - 1.0).abs() < 0.01);
                assert_eq!((*factor, *window, *steps, *attempt), (1.5, 3, 8, 1));
            }
            other => panic!("{other:?}"),
        }
        let lines = bodies(&events);
        assert_eq!(lines, slow, "the events file holds the same record");
    }

    #[test]
    fn a_new_attempt_restarts_the_step_clock() {
        let dir = tempfile::tempdir().unwrap();
        let (mut t, path) = tracker(&dir);
        let t0 = Instant::now();
        t.start_attempt(1);
        t.apply(Event::Step(None), t0);
        t.start_attempt(2);
        t.apply(Event::Step(None), t0 + Duration::from_secs(100));
        assert!(bodies(&path).iter().all(|b| matches!(
            b,
            Body::Step {
                duration_s: None,
                ..
            }
        )));
    }
}
