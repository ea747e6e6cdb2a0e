//! Where the job step's lines go: the [`Relay`] seam and its real side, [`StdoutRelay`].
//!
//! A leaf: it names nothing else in the crate, so [`crate::drain`] and [`crate::jobstep`] both
//! use it without reaching each other. `crate::jobstep` re-exports all three names.

/// Where the job step's lines go: the plugin copies the child's stdout into the slurmd log.
pub trait Relay {
    /// One line.
    fn line(&self, text: &str);
}

/// Lines to stdout, which the plugin relays into the slurmd log (with stderr, where the `tracing`
/// subscriber writes). Each line is also a `debug` event in the current span (job id, node,
/// phase), seen with `-v`; at the default level the log holds each line once.
#[derive(Debug, Clone, Copy, Default)]
pub struct StdoutRelay;

/// The `tracing` target of the lines the plugin relays into the slurmd log.
///
/// The binary's subscriber writes events of this target to stdout as bare lines (no level, no
/// span: the plugin prefixes `fabric-check: <script> job=N node=X:` and slurmd stamps the time),
/// at every verbosity; every other event goes to stderr in the compact format.
pub const RELAY_TARGET: &str = "fabric_check::relay";

impl Relay for StdoutRelay {
    fn line(&self, text: &str) {
        tracing::info!(target: RELAY_TARGET, "{text}");
    }
}
