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
/// The figures' own jitter, taken off [`SLOW_RATIO`] where a window is judged (a window counts
/// as slow at 1.07 or more): a node that really is 1.10× slower measures 1.08–1.12× from window
/// to window (a median of about ten steps, on a loaded host; docs/drill.md), so at 1.10 exactly
/// three windows in a row above it were luck and it was named in one round of two, 21–43 s
/// after it slowed. A clean node's windows stay within ±3 % of the job's.
pub const SLOW_MARGIN: f64 = 0.03;
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

/// How often the job's nodes meet at the rendezvous (every this many hops: a minute with the
/// default window): between two meetings each node sends its figure in a datagram sealed with
/// the job's session key, which the last meeting handed out. A node that has no key yet meets
/// at every hop, and so does the first node while a node was not heard at the last hop.
pub const MEET_EVERY_HOPS: u64 = 12;

/// What a node brings to a straggler meeting.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HopMeet {
    /// Its figure for the hop.
    pub figure: WindowSteps,
    /// The first node's session (the first node only; in its signed answer to every node).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<SessionOffer>,
}

/// Where and how to send figures between meetings.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionOffer {
    /// The first node's UDP port.
    pub port: u16,
    /// The job's session key, hex (64 digits).
    pub key: String,
}

impl std::fmt::Debug for SessionOffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionOffer")
            .field("port", &self.port)
            .finish_non_exhaustive()
    }
}

/// The body of a node's sealed datagram: its figure, and whose and when it is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HopDatagram {
    /// The job.
    pub job: u32,
    /// The sender's rank.
    pub rank: usize,
    /// The figure (its `hop` is the hop it counts at).
    pub figure: WindowSteps,
}

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
    fn a_datagram_body_with_the_largest_figure_fits_a_sealed_datagram() {
        let d = HopDatagram {
            job: u32::MAX,
            rank: usize::MAX,
            figure: WindowSteps {
                hop: u64::MAX,
                steps: u32::MAX,
                median_ms: Some(u64::MAX),
                checkpoint: true,
                fault: Some("x".repeat(64)),
            },
        };
        // fabric_net::sealed::MAX_BODY_BYTES (1024).
        assert!(serde_json::to_vec(&d).unwrap().len() < 1024);
    }

    #[test]
    fn a_session_offer_never_prints_its_key() {
        let o = SessionOffer {
            port: 17001,
            key: "ab".repeat(32),
        };
        assert!(!format!("{o:?}").contains("abab"), "{o:?}");
    }

    #[test]
    fn the_hop_is_half_a_window_and_never_under_half_a_second() {
        assert_eq!(hop_ms(10), 5_000);
        assert_eq!(hop_ms(0), 500);
        assert_eq!(hop_ms(1), 500);
    }
}
