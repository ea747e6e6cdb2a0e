//! Cross-node step times: what each node's in-job watch sends the job's first node at every
//! hop ([`WindowSteps`], over the job's MUNGE-authenticated rendezvous), and the settings of the
//! first node's straggler verdict (docs/checks.md, "Stragglers").
//!
//! A node's figure for a hop is the median of the training steps (`fabric-run`'s `step`
//! records, checkpoint time already taken out) that ended in the last [`DEFAULT_WINDOW_S`]
//! seconds; the first node compares every node's figure with the job's median.

use serde::{Deserialize, Serialize};

/// The default `straggler_window=` (seconds of steps each figure covers).
pub const DEFAULT_WINDOW_S: u64 = 10;
/// How a node's steps must compare with the job's median to count as slow in a window.
pub const SLOW_RATIO: f64 = 1.10;
/// How many consecutive slow windows name a node.
pub const WINDOWS_TO_NAME: u32 = 3;
/// The most step times a node keeps for one window (a job faster than this many steps a
/// window keeps every n-th: bounded memory whatever the job's pace).
pub const MAX_STEPS_PER_WINDOW: usize = 4_096;

/// The hop between two figures: half a window, so that consecutive windows overlap by half
/// and three of them span two windows' time (a slowdown is named about 20 s after it starts
/// with the default window, wherever in a window it starts).
pub fn hop_ms(window_s: u64) -> u64 {
    (window_s * 1000 / 2).max(500)
}

/// One node's steps in one window, sent to the job's first node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WindowSteps {
    /// The hop this window ends at: Unix milliseconds / [`hop_ms`] (the same on every node
    /// whose clock is synchronised).
    pub hop: u64,
    /// Steps that ended in the window (every rank of the node).
    pub steps: u32,
    /// Their median, milliseconds (`None` without steps).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub median_ms: Option<u64>,
    /// Whether a checkpoint or restore ended in the window: its steps are the job's pattern,
    /// not the node's speed, and the window is not judged for this node.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub checkpoint: bool,
    /// The fabric fault the node's own watch holds now (a check id), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fault: Option<String>,
}

/// The largest payload a node sends (the rendezvous refuses longer lines).
pub const MAX_WINDOW_STEPS_BYTES: usize = 512;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_figure_round_trips_and_stays_small() {
        let w = WindowSteps {
            hop: u64::MAX,
            steps: u32::MAX,
            median_ms: Some(u64::MAX),
            checkpoint: true,
            fault: Some("ib.port_state".into()),
        };
        let line = serde_json::to_string(&w).unwrap();
        assert!(line.len() < MAX_WINDOW_STEPS_BYTES, "{line}");
        assert_eq!(serde_json::from_str::<WindowSteps>(&line).unwrap(), w);
    }

    #[test]
    fn the_hop_is_half_a_window_and_never_under_half_a_second() {
        assert_eq!(hop_ms(10), 5_000);
        assert_eq!(hop_ms(0), 500);
        assert_eq!(hop_ms(1), 500);
    }
}
