//! The watch's decisions, pure: what is news against what the job started with, what cleared,
//! and the hold-down of a flapping fault ([`Tracker`]).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use fabric_proto::verdict::{Finding, Severity};

/// Checks whose evidence comes from external tools (`ethtool -S`, `dcb`): a sample that did not
/// run the tools neither finds nor clears them.
pub(super) const TOOL_CHECKS: &[&str] = &["roce.pfc", "roce.congestion"];

/// One fault: a `fail` or `warn` finding, keyed by check, device, port and severity (a `warn`
/// that turns into a `fail` is a new fault: the `warn` clears and the `fail` appears).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    /// `check|device|port|severity`.
    pub key: String,
    /// The check id.
    pub check: String,
    /// The finding's message.
    pub message: String,
    /// A `warn` finding (recorded in the tag, never drained), not a `fail`.
    pub warn: bool,
}

impl Fault {
    pub(super) fn of(f: &Finding) -> Self {
        Self {
            key: key(f),
            check: f.check.clone(),
            message: f.message.clone(),
            warn: f.severity != Severity::Fail,
        }
    }
}

/// Findings the watch follows: `fail`s, which it acts on, and `warn`s, which it records.
pub(super) fn followed(f: &Finding) -> bool {
    matches!(f.severity, Severity::Fail | Severity::Warn)
}

pub(super) fn key(f: &Finding) -> String {
    format!(
        "{}|{}|{}|{}",
        f.check,
        f.device.as_deref().unwrap_or(""),
        f.port.map_or(String::new(), |p| p.to_string()),
        if f.severity == Severity::Fail {
            "fail"
        } else {
            "warn"
        }
    )
}

/// What changed between two samples.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// A fault the job did not start with.
    Appeared(Fault),
    /// A fault that is no longer seen.
    Cleared(Fault),
}

/// How long a fault must stay clear before the watch takes it as cleared: a fault that returns
/// within it is a flap of the same fault (counted, never acted on again), so a port that flaps
/// 40 times in 24 s costs one drain, one tag entry, one notice and one signal, not 40.
pub const HOLD_DOWN: Duration = Duration::from_secs(120);

/// One fault the watch follows, and its flaps.
#[derive(Debug, Clone)]
pub(super) struct Followed {
    fault: Fault,
    /// Since when it has been clear (seconds since the epoch), while it is.
    clear_since_s: Option<u64>,
    /// How often it came back within the hold-down.
    flaps: u32,
}

/// The watch's memory: which faults the job started with (the prolog's `fail` findings, never
/// reported again) and which it has seen appear and not clear for [`HOLD_DOWN`].
#[derive(Debug, Clone, Default)]
pub struct Tracker {
    at_start: BTreeSet<String>,
    active: BTreeMap<String, Followed>,
    hold_down_s: u64,
}

impl Tracker {
    /// A tracker that takes `at_start` (the prolog's findings) as the job's starting point; a
    /// fault is cleared as soon as a sample no longer sees it (see [`Tracker::hold_down`]).
    pub fn new(at_start: &[Finding]) -> Self {
        Self {
            at_start: at_start.iter().filter(|f| followed(f)).map(key).collect(),
            active: BTreeMap::new(),
            hold_down_s: 0,
        }
    }

    /// This tracker with a hold-down: a fault is cleared only once it has stayed clear for
    /// `d`, and one that returns before is a flap of the same fault.
    pub fn hold_down(mut self, d: Duration) -> Self {
        self.hold_down_s = d.as_secs();
        self
    }

    /// How often the fault `key` flapped (came back within the hold-down).
    pub fn flaps(&self, key: &str) -> u32 {
        self.active.get(key).map_or(0, |f| f.flaps)
    }

    /// The changes one sample's findings make, with no clock (no hold-down: a test's or a
    /// caller's that never flaps).
    pub fn observe(&mut self, findings: &[Finding], tools_ran: bool) -> Vec<Change> {
        self.observe_at(findings, tools_ran, 0)
    }

    /// The changes one sample's findings make at `now_s`. `tools_ran`: whether the sample ran
    /// the tools (else their checks are neither found nor cleared).
    pub fn observe_at(&mut self, findings: &[Finding], tools_ran: bool, now_s: u64) -> Vec<Change> {
        let judged = |check: &str| tools_ran || !TOOL_CHECKS.contains(&check);
        let now: BTreeMap<String, Fault> = findings
            .iter()
            .filter(|f| followed(f) && judged(&f.check))
            .map(|f| (key(f), Fault::of(f)))
            .collect();
        let mut out = Vec::new();
        let mut gone = Vec::new();
        for (k, f) in &mut self.active {
            if !judged(&f.fault.check) {
                continue;
            }
            if now.contains_key(k) {
                if f.clear_since_s.take().is_some() {
                    f.flaps += 1;
                    tracing::info!(
                        "watch: {} came back within the hold-down ({} flaps); not acted on again",
                        f.fault.check,
                        f.flaps
                    );
                }
                continue;
            }
            let since = *f.clear_since_s.get_or_insert(now_s);
            if now_s.saturating_sub(since) >= self.hold_down_s {
                gone.push(k.clone());
            }
        }
        for k in gone {
            if let Some(f) = self.active.remove(&k) {
                out.push(Change::Cleared(f.fault));
            }
        }
        // A fault the job started with that cleared is forgotten: its return is news.
        self.at_start
            .retain(|k| !judged(k.split('|').next().unwrap_or("")) || now.contains_key(k));
        for (k, f) in now {
            if self.at_start.contains(&k) || self.active.contains_key(&k) {
                continue;
            }
            self.active.insert(
                k,
                Followed {
                    fault: f.clone(),
                    clear_since_s: None,
                    flaps: 0,
                },
            );
            out.push(Change::Appeared(f));
        }
        out
    }

    /// Faults cleared but still in their hold-down.
    pub fn holding(&self) -> usize {
        self.active
            .values()
            .filter(|f| f.clear_since_s.is_some())
            .count()
    }
}
