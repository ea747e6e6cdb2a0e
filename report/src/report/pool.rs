//! The worker pool shared by the JSON and text readers: one thread frames the input into batches
//! of whole records, `threads` workers parse and fold them into their own accumulators.
//!
//! The batches travel on a bounded `crossbeam-channel` (many receivers, no lock around the
//! queue); spent buffers come back on a second one for the reader to reuse.
//!
//! A record the parser refuses either stops the run ([`OnBad::Stop`], the JSON reader: a broken
//! document has no trustworthy rest) or is left out and counted ([`OnBad::Skip`], the text
//! reader: one cut line does not spoil the others); the count and the first few records come
//! back as [`InputNotes`] for the report to show.

use crossbeam_channel::{Receiver, Sender, bounded};

use serde::Serialize;

use super::{JobRecord, ReportError};

/// How many skipped or padded records are named one by one; the rest are counted.
pub const NAMED: usize = 5;

/// What a parser made of one record.
pub(crate) enum Parsed {
    /// Nothing to fold (a comment, a blank line, a step).
    Nothing,
    /// A job.
    Job(JobRecord),
    /// A job read from a line shorter than the header, its trailing columns taken as empty.
    Padded(JobRecord),
}

/// What to do with a record the parser refuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnBad {
    /// Stop the run with the earliest such record's error.
    Stop,
    /// Leave it out, count it and name the first [`NAMED`].
    Skip,
}

/// Records of an input that were not read as they stand: left out, or read with their trailing
/// columns empty. Positions are 1-based lines of the input.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct InputNotes {
    /// Records left out because they could not be read.
    pub skipped: u64,
    /// The first [`NAMED`] of them: `(line, why)`, earliest first.
    pub skipped_first: Vec<(u64, String)>,
    /// Lines with fewer fields than the header, read with the missing trailing columns empty.
    pub padded: u64,
    /// The first [`NAMED`] of those lines.
    pub padded_first: Vec<u64>,
    /// Records that repeat one already read (same cluster, JobID, submit, start and end time
    /// and state: a capture that lists every job twice), counted once.
    pub duplicates: u64,
    /// The first [`NAMED`] of them: `(position, JobID)`, earliest first.
    pub duplicates_first: Vec<(u64, String)>,
    /// Columns the input lacks whose figures the report shows, each with what it means for
    /// the report (`no AllocTRES column: GPU-hours are unknown ...`).
    pub missing_columns: Vec<String>,
}

impl InputNotes {
    /// Nothing to say: every record was read as it stands.
    pub fn is_clean(&self) -> bool {
        self.skipped == 0
            && self.padded == 0
            && self.duplicates == 0
            && self.missing_columns.is_empty()
    }

    fn duplicate(&mut self, at: u64, job_id: &str) {
        self.duplicates += 1;
        self.duplicates_first.push((at, job_id.to_string()));
        self.duplicates_first.sort_by_key(|(l, _)| *l);
        self.duplicates_first.truncate(NAMED);
    }

    fn skip(&mut self, line: u64, why: String) {
        self.skipped += 1;
        self.skipped_first.push((line, why));
        self.skipped_first.sort_by_key(|(l, _)| *l);
        self.skipped_first.truncate(NAMED);
    }

    fn pad(&mut self, line: u64) {
        self.padded += 1;
        self.padded_first.push(line);
        self.padded_first.sort_unstable();
        self.padded_first.truncate(NAMED);
    }

    /// Adds another worker's notes.
    pub fn merge(&mut self, o: InputNotes) {
        self.skipped += o.skipped;
        self.skipped_first.extend(o.skipped_first);
        self.skipped_first.sort_by_key(|(l, _)| *l);
        self.skipped_first.truncate(NAMED);
        self.padded += o.padded;
        self.padded_first.extend(o.padded_first);
        self.padded_first.sort_unstable();
        self.padded_first.truncate(NAMED);
        self.duplicates += o.duplicates;
        self.duplicates_first.extend(o.duplicates_first);
        self.duplicates_first.sort_by_key(|(l, _)| *l);
        self.duplicates_first.truncate(NAMED);
        for m in o.missing_columns {
            if !self.missing_columns.contains(&m) {
                self.missing_columns.push(m);
            }
        }
    }

    /// The warnings a person should see, one per kind (empty when clean):
    /// `2 lines skipped: line 12: ...; line 30: ...`.
    pub fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        let plural = |n: u64| if n == 1 { "line" } else { "lines" };
        if self.skipped > 0 {
            let named: Vec<String> = self
                .skipped_first
                .iter()
                .map(|(l, why)| format!("line {l}: {why}"))
                .collect();
            let more = self.skipped - self.skipped_first.len() as u64;
            out.push(format!(
                "{} {} skipped: {}{}",
                self.skipped,
                plural(self.skipped),
                named.join("; "),
                if more > 0 {
                    format!("; and {more} more")
                } else {
                    String::new()
                }
            ));
        }
        if self.padded > 0 {
            let named: Vec<String> = self.padded_first.iter().map(u64::to_string).collect();
            let more = self.padded - self.padded_first.len() as u64;
            out.push(format!(
                "{} {} shorter than the header, read with the missing trailing columns empty: line {}{}",
                self.padded,
                plural(self.padded),
                named.join(", "),
                if more > 0 {
                    format!(" and {more} more")
                } else {
                    String::new()
                }
            ));
        }
        if self.duplicates > 0 {
            let named: Vec<&str> = self
                .duplicates_first
                .iter()
                .map(|(_, id)| id.as_str())
                .collect();
            let more = self.duplicates - self.duplicates_first.len() as u64;
            out.push(format!(
                "{} {} listed a second time (same JobID, cluster, times and state) and counted once: job {}{}; was the capture concatenated with itself or taken twice?",
                self.duplicates,
                if self.duplicates == 1 { "record" } else { "records" },
                named.join(", "),
                if more > 0 {
                    format!(" and {more} more")
                } else {
                    String::new()
                }
            ));
        }
        out.extend(self.missing_columns.iter().cloned());
        out
    }
}

/// The records read so far, shared by the workers: a 64-bit hash of each record's identity
/// (cluster, JobID, submit, start and end time, state), in shards so that workers seldom wait
/// for one another. A job requeued under `sacct -D` starts again, so its attempts stay apart, and
/// two records of one JobID that say different things (a `CANCELLED` and an `INVALID` record,
/// seen on real clusters) are both kept; only a repeat of the same record is dropped, the first
/// copy read being kept. A false match needs two of some billions of records to share a hash.
struct Seen {
    shards: Vec<std::sync::Mutex<std::collections::HashSet<u64>>>,
}

impl Seen {
    fn new() -> Self {
        Self {
            shards: (0..64).map(|_| Default::default()).collect(),
        }
    }

    /// Whether `job` is read for the first time (and remembers it).
    fn first(&self, job: &JobRecord) -> bool {
        use std::hash::{Hash, Hasher};
        let mut h = std::hash::DefaultHasher::new();
        (
            job.cluster.as_str(),
            job.job_id.as_str(),
            job.submit_s,
            job.start_s,
            job.end_s,
            job.state,
        )
            .hash(&mut h);
        let key = h.finish();
        let shard = &self.shards[(key % self.shards.len() as u64) as usize];
        // A poisoned shard only means another worker panicked, which fails the run anyway.
        shard.lock().map_or(true, |mut set| set.insert(key))
    }
}

/// The per-worker accumulators and what was noted about the input.
#[derive(Debug)]
pub struct Streamed<A> {
    /// One accumulator per worker: merge them.
    pub accs: Vec<A>,
    /// Records skipped or padded.
    pub notes: InputNotes,
}

/// Bytes per batch before it is handed to a worker.
pub(crate) const BATCH_BYTES: usize = 4 << 20;

/// `(start, end, position in the input, record index)`; the position is a byte offset for JSON
/// and a line number for text.
pub(crate) type Item = (usize, usize, u64, u64);

/// Whole records copied out of the input.
pub(crate) struct Batch {
    /// The records' bytes, back to back.
    pub data: Vec<u8>,
    /// Where each record is.
    pub items: Vec<Item>,
}

/// Buffers handed back by the workers once a batch is done, so the reader reuses them instead
/// of faulting in fresh pages for every chunk.
pub(crate) struct Recycler {
    rx: Receiver<(Vec<u8>, Vec<Item>)>,
    spare_items: std::cell::RefCell<Vec<Vec<Item>>>,
}

impl Recycler {
    /// An empty item list (a used one when there is one).
    pub(crate) fn items(&self) -> Vec<Item> {
        let mut spare = self.spare_items.borrow_mut();
        match spare.pop() {
            Some(mut v) => {
                v.clear();
                v
            }
            None => Vec::with_capacity(1024),
        }
    }

    /// A buffer of at least `len` initialised bytes (their contents are stale: callers track how
    /// much they filled). Buffers stay initialised across uses, so reading into one needs no
    /// zeroing; a spare too short is dropped rather than grown (growing moves it to fresh pages,
    /// which the kernel must fault in and zero), and a new one gets a quarter more than asked, so
    /// that the next request, a little longer by a different carry-over, still fits.
    pub(crate) fn get(&self, len: usize) -> Vec<u8> {
        while let Ok((v, items)) = self.rx.try_recv() {
            let mut spare = self.spare_items.borrow_mut();
            if spare.len() < 8 {
                spare.push(items);
            }
            if v.len() >= len {
                return v;
            }
        }
        vec![0; len + len / 4]
    }
}

/// Reads until `out` is full or the input ends (one large read at a time, straight into `out`);
/// returns the bytes read.
pub(crate) fn read_full<R: std::io::Read + ?Sized>(
    r: &mut R,
    out: &mut [u8],
) -> std::io::Result<usize> {
    let mut n = 0;
    while n < out.len() {
        match r.read(&mut out[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// Runs `produce` on this thread and `threads` workers. A record that `parse` refuses stops the
/// run with `err(position, message)` for the earliest such record ([`OnBad::Stop`]), or is
/// noted and left out ([`OnBad::Skip`]; when every record was refused the earliest one's error
/// stops the run all the same: such an input is not this format at all).
#[allow(clippy::too_many_arguments)]
pub(crate) fn run<A, I, F, P, G, E>(
    threads: usize,
    on_bad: OnBad,
    init: I,
    each: F,
    parse: P,
    produce: G,
    err: E,
) -> Result<Streamed<A>, ReportError>
where
    A: Send,
    I: Fn() -> A + Sync,
    F: Fn(&mut A, JobRecord) + Sync,
    P: Fn(&[u8], u64) -> Result<Parsed, String> + Sync,
    G: FnOnce(&Sender<Batch>, &Recycler) -> Result<(), ReportError>,
    E: Fn(u64, String) -> ReportError,
{
    let threads = threads.max(1);
    let (tx, rx) = bounded::<Batch>(threads * 2);
    let (back_tx, back_rx) = bounded::<(Vec<u8>, Vec<Item>)>(threads * 2 + 2);
    let recycler = Recycler {
        rx: back_rx,
        spare_items: std::cell::RefCell::new(Vec::new()),
    };
    type Worker<A> = Result<(A, InputNotes, u64), (u64, String)>;
    let seen = Seen::new();
    std::thread::scope(|scope| {
        let mut handles = Vec::new();
        for _ in 0..threads {
            let rx = rx.clone();
            let back = back_tx.clone();
            let (init, each, parse, seen) = (&init, &each, &parse, &seen);
            handles.push(scope.spawn(move || -> Worker<A> {
                let mut acc = init();
                let mut notes = InputNotes::default();
                let mut jobs = 0u64;
                for batch in rx.iter() {
                    for &(a, b, at, index) in &batch.items {
                        match parse(&batch.data[a..b], index) {
                            Ok(Parsed::Job(job) | Parsed::Padded(job)) if !seen.first(&job) => {
                                notes.duplicate(at, &job.job_id);
                            }
                            Ok(Parsed::Job(job)) => {
                                jobs += 1;
                                each(&mut acc, job);
                            }
                            Ok(Parsed::Padded(job)) => {
                                jobs += 1;
                                notes.pad(at);
                                each(&mut acc, job);
                            }
                            Ok(Parsed::Nothing) => {}
                            Err(message) if on_bad == OnBad::Skip => notes.skip(at, message),
                            Err(message) => return Err((at, message)),
                        }
                    }
                    // A full return channel just means enough spares: drop this one.
                    let _ = back.try_send((batch.data, batch.items));
                }
                Ok((acc, notes, jobs))
            }));
        }
        // Only the workers receive: the reader's send fails (and it stops) once they all quit.
        drop(rx);
        let produced = produce(&tx, &recycler);
        drop(tx);
        let mut accs = Vec::new();
        let mut notes = InputNotes::default();
        let mut jobs = 0u64;
        let mut first_err: Option<(u64, String)> = None;
        for h in handles {
            match h.join() {
                Ok(Ok((a, n, j))) => {
                    accs.push(a);
                    notes.merge(n);
                    jobs += j;
                }
                Ok(Err(e)) => {
                    if first_err.as_ref().is_none_or(|f| e.0 < f.0) {
                        first_err = Some(e);
                    }
                }
                Err(_) => first_err = Some((0, "a worker thread panicked".into())),
            }
        }
        if let Some((at, message)) = first_err {
            return Err(err(at, message));
        }
        produced?;
        if let (0, Some((at, message))) = (jobs, notes.skipped_first.first()) {
            return Err(err(*at, message.clone()));
        }
        Ok(Streamed { accs, notes })
    })
}
