//! A drill stopped by a signal restores before it exits.
//!
//! SIGINT (Ctrl-C), SIGTERM and SIGHUP only set a flag ([`Halt::on_signals`]; the handler is
//! signal-hook's, which does nothing else). The drill looks at the flag between its steps and
//! inside every wait ([`crate::gate::Gates::halted`] latches it as the gates' stop): no round
//! starts, no fault goes in, the round under way cancels its job, restores its fault and resumes
//! the node its fault drained; then the journal's pending undos run, and the drill names what it
//! resumed and what it left out of service. SIGKILL cannot be caught: the journal stays, and
//! `fabric-check drill --restore` (or the next drill, at its start) replays it.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The signals that stop a drill.
pub const SIGNALS: [i32; 3] = [
    signal_hook::consts::SIGINT,
    signal_hook::consts::SIGTERM,
    signal_hook::consts::SIGHUP,
];

/// The flag a stopping signal sets: the signal's number, 0 while none came.
#[derive(Debug, Clone, Default)]
pub struct Halt(Arc<AtomicUsize>);

impl Halt {
    /// A flag that SIGINT, SIGTERM and SIGHUP set from now on (their default action, ending the
    /// process, is replaced).
    pub fn on_signals() -> std::io::Result<Halt> {
        let halt = Halt::default();
        for sig in SIGNALS {
            signal_hook::flag::register_usize(sig, halt.0.clone(), sig as usize)?;
        }
        Ok(halt)
    }

    /// The signal that asked the drill to stop, if one did.
    pub fn signal(&self) -> Option<i32> {
        match self.0.load(Ordering::Relaxed) {
            0 => None,
            n => i32::try_from(n).ok(),
        }
    }

    /// Asks the drill to stop as `signal` would (for callers that stop it otherwise).
    pub fn ask(&self, signal: i32) {
        self.0
            .store(usize::try_from(signal).unwrap_or(1), Ordering::Relaxed);
    }
}

/// The name of a stopping signal (`SIGTERM`), or its number.
pub fn signal_name(signal: i32) -> String {
    match signal {
        signal_hook::consts::SIGINT => "SIGINT".into(),
        signal_hook::consts::SIGTERM => "SIGTERM".into(),
        signal_hook::consts::SIGHUP => "SIGHUP".into(),
        n => format!("signal {n}"),
    }
}
