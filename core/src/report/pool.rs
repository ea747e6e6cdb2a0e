//! The worker pool shared by the JSON and text readers: one thread frames the input into batches
//! of whole records, `threads` workers parse and fold them into their own accumulators.

use std::sync::{Arc, Mutex, mpsc};

use super::{JobRecord, ReportError};

/// Bytes per batch before it is handed to a worker.
pub(crate) const BATCH_BYTES: usize = 4 << 20;

/// Whole records copied out of the input.
pub(crate) struct Batch {
    /// The records' bytes, back to back.
    pub data: Vec<u8>,
    /// `(start, end, position in the input, record index)`; the position is a byte offset for
    /// JSON and a line number for text.
    pub items: Vec<(usize, usize, u64, u64)>,
}

/// Buffers handed back by the workers once a batch is done, so the reader reuses them instead
/// of faulting in fresh pages for every chunk.
pub(crate) struct Recycler {
    rx: mpsc::Receiver<Vec<u8>>,
}

impl Recycler {
    /// An empty buffer with at least `cap` bytes of capacity.
    pub(crate) fn get(&self, cap: usize) -> Vec<u8> {
        match self.rx.try_recv() {
            Ok(mut v) => {
                v.clear();
                v.reserve(cap);
                v
            }
            Err(_) => Vec::with_capacity(cap),
        }
    }
}

/// Runs `produce` on this thread and `threads` workers; a record that `parse` refuses stops the
/// run with `err(position, message)` for the earliest such record.
pub(crate) fn run<A, I, F, P, G, E>(
    threads: usize,
    init: I,
    each: F,
    parse: P,
    produce: G,
    err: E,
) -> Result<Vec<A>, ReportError>
where
    A: Send,
    I: Fn() -> A + Sync,
    F: Fn(&mut A, JobRecord) + Sync,
    P: Fn(&[u8], u64) -> Result<Option<JobRecord>, String> + Sync,
    G: FnOnce(&mpsc::SyncSender<Batch>, &Recycler) -> Result<(), ReportError>,
    E: Fn(u64, String) -> ReportError,
{
    let threads = threads.max(1);
    let (tx, rx) = mpsc::sync_channel::<Batch>(threads * 2);
    let rx = Arc::new(Mutex::new(rx));
    let (back_tx, back_rx) = mpsc::sync_channel::<Vec<u8>>(threads * 2 + 2);
    let recycler = Recycler { rx: back_rx };
    std::thread::scope(|scope| {
        let mut handles = Vec::new();
        for _ in 0..threads {
            let rx = Arc::clone(&rx);
            let back = back_tx.clone();
            let (init, each, parse) = (&init, &each, &parse);
            handles.push(scope.spawn(move || -> Result<A, (u64, String)> {
                let mut acc = init();
                loop {
                    let next = match rx.lock() {
                        Ok(r) => r.recv(),
                        Err(_) => return Err((0, "a worker thread failed".into())),
                    };
                    let Ok(batch) = next else { break };
                    for &(a, b, at, index) in &batch.items {
                        match parse(&batch.data[a..b], index) {
                            Ok(Some(job)) => each(&mut acc, job),
                            Ok(None) => {}
                            Err(message) => return Err((at, message)),
                        }
                    }
                    // A full return channel just means enough spares: drop this one.
                    let _ = back.try_send(batch.data);
                }
                Ok(acc)
            }));
        }
        let produced = produce(&tx, &recycler);
        drop(tx);
        let mut accs = Vec::new();
        let mut first_err: Option<(u64, String)> = None;
        for h in handles {
            match h.join() {
                Ok(Ok(a)) => accs.push(a),
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
        Ok(accs)
    })
}
