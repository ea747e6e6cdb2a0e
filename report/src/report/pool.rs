//! The worker pool shared by the JSON and text readers: one thread frames the input into batches
//! of whole records, `threads` workers parse and fold them into their own accumulators.
//!
//! The batches travel on a bounded `crossbeam-channel` (many receivers, no lock around the
//! queue); spent buffers come back on a second one for the reader to reuse.

use crossbeam_channel::{Receiver, Sender, bounded};

use super::{JobRecord, ReportError};

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
    std::thread::scope(|scope| {
        let mut handles = Vec::new();
        for _ in 0..threads {
            let rx = rx.clone();
            let back = back_tx.clone();
            let (init, each, parse) = (&init, &each, &parse);
            handles.push(scope.spawn(move || -> Result<A, (u64, String)> {
                let mut acc = init();
                for batch in rx.iter() {
                    for &(a, b, at, index) in &batch.items {
                        match parse(&batch.data[a..b], index) {
                            Ok(Some(job)) => each(&mut acc, job),
                            Ok(None) => {}
                            Err(message) => return Err((at, message)),
                        }
                    }
                    // A full return channel just means enough spares: drop this one.
                    let _ = back.try_send((batch.data, batch.items));
                }
                Ok(acc)
            }));
        }
        // Only the workers receive: the reader's send fails (and it stops) once they all quit.
        drop(rx);
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
