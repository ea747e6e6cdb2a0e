//! The connections a leader turned away, counted per reason: anyone who can reach the port can
//! open connections, so each is not a line of its own (a flood would fill the slurmd log's cap
//! of one prolog, cutting off its own tag and timing lines) nor an entry of an unbounded list.

use std::collections::BTreeMap;
use std::fmt::Display;

/// The most distinct reasons kept; rejections for any further reason are counted together.
pub const MAX_REASONS: usize = 16;

/// Rejections by reason, each with its count and the first peer that earned it.
#[derive(Debug, Default)]
pub struct Rejections {
    by_reason: BTreeMap<String, (u64, String)>,
    /// Reasons in the order first seen.
    order: Vec<String>,
    /// Rejections beyond [`MAX_REASONS`] distinct reasons.
    other: u64,
}

impl Rejections {
    /// One connection from `peer` turned away for `reason` (already sanitised).
    pub fn add(&mut self, peer: impl Display, reason: impl Into<String>) {
        let reason = reason.into();
        if let Some((n, _)) = self.by_reason.get_mut(&reason) {
            *n = n.saturating_add(1);
        } else if self.by_reason.len() < MAX_REASONS {
            self.order.push(reason.clone());
            self.by_reason.insert(reason, (1, peer.to_string()));
        } else {
            self.other = self.other.saturating_add(1);
        }
    }

    /// A line not about one connection (`accept` failing, workers not started, a count).
    pub fn note(&mut self, text: impl Into<String>) {
        self.add("", text);
    }

    /// Whether nothing was turned away.
    pub fn is_empty(&self) -> bool {
        self.by_reason.is_empty() && self.other == 0
    }

    /// One line per reason, in the order first seen: `peer: reason` for a reason seen once,
    /// `reason (N connections, the first from peer)` otherwise; at most [`MAX_REASONS`] + 1.
    pub fn into_lines(mut self) -> Vec<String> {
        let mut out: Vec<String> = self
            .order
            .iter()
            .filter_map(|r| {
                let (n, peer) = self.by_reason.remove(r)?;
                Some(match (n, peer.is_empty()) {
                    (1, true) => r.clone(),
                    (1, false) => format!("{peer}: {r}"),
                    (n, true) => format!("{r} ({n} times)"),
                    (n, false) => format!("{r} ({n} connections, the first from {peer})"),
                })
            })
            .collect();
        if self.other > 0 {
            out.push(format!(
                "{} connection(s) for {MAX_REASONS}+ other reasons",
                self.other
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flood_of_connections_is_counted_per_reason_in_a_bounded_number_of_lines() {
        let mut r = Rejections::default();
        for i in 0..900 {
            r.add(
                format!("10.0.0.9:{}", 40_000 + i),
                "not an address of this job's nodes",
            );
        }
        for i in 0..100 {
            r.add("10.0.0.8:1", format!("malformed message: {i}"));
        }
        r.add("10.0.0.7:2", "reused nonce");
        r.note("accept: Too many open files");
        let lines = r.into_lines();
        assert_eq!(lines.len(), MAX_REASONS + 1, "{lines:?}");
        assert_eq!(
            lines[0],
            "not an address of this job's nodes (900 connections, the first from 10.0.0.9:40000)"
        );
        assert_eq!(lines[1], "10.0.0.8:1: malformed message: 0");
        assert_eq!(
            lines.last().unwrap(),
            "87 connection(s) for 16+ other reasons"
        );
    }
}
