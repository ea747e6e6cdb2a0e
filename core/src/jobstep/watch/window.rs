//! The watch's sliding hour: a short history of counter snapshots, so that a per-hour bound is
//! judged over the last hour of a job instead of over all of it.
//!
//! The epilog judges a per-hour bound over the whole job, with an allowance of
//! `per_hour × max(1 h, job age)`: fair for a verdict on the job, blind inside a long one. A
//! storm of 1,440 `symbol_error`s an hour (bound 120/h) that starts 23 h into a job has 2,760
//! errors of allowance to eat before that window fails: about two hours. The watch therefore
//! keeps a [`CounterRing`]: the prolog's snapshot, then one snapshot of each full sample at most
//! every [`ENTRY_EVERY_MS`]. A full sample judges the per-hour bounds against the oldest entry
//! no older than [`RATE_WINDOW_MS`] ([`CounterRing::window_start`]; the prolog's snapshot while
//! the job is younger than that): the allowance is one hour's, never scaled by the job's age and
//! never below the one-hour floor that keeps a single error from draining. The same storm is then
//! seen after the same few minutes (120 errors at 24 a minute) wherever in the job it starts.
//! The `*_delta` bounds (`link_downed`: any increase fails) stay judged over the whole job, from
//! the prolog's snapshot, and so does everything else the prolog's snapshot holds (the
//! inventory): only the per-hour bounds' window start moves.
//!
//! Memory stays bounded: entries keep only the counters that have a per-hour bound, come at most
//! one a minute, and those older than the hour are dropped as soon as a younger one covers the
//! window (at most [`MAX_ENTRIES`]). A counter that goes back (a reset) lowers every entry
//! ([`CounterRing::rebase`]), so the reset is not a storm and later errors still count.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::config::NodeExpectations;
use crate::probe::CounterSnapshot;
use crate::probe::checks::threshold_key;

/// How far back a per-hour bound looks in the watch.
pub const RATE_WINDOW_MS: u64 = 3_600_000;

/// At most one entry per this long.
pub const ENTRY_EVERY_MS: u64 = 60_000;

/// The most entries the ring holds: an hour's worth, and the one just older than the hour.
pub const MAX_ENTRIES: usize = (RATE_WINDOW_MS / ENTRY_EVERY_MS) as usize + 2;

/// Where the watch's sampler takes the time its counters are dated with.
#[derive(Debug, Clone, Default)]
pub enum Clock {
    /// The system's wall clock.
    #[default]
    System,
    /// An emulated wall clock (ms since the Unix epoch), moved by whoever holds it: a test.
    Emulated(Arc<AtomicU64>),
}

impl Clock {
    /// Now, in ms since the Unix epoch.
    pub fn now_unix_ms(&self) -> u64 {
        match self {
            Clock::System => std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            Clock::Emulated(ms) => ms.load(Ordering::Relaxed),
        }
    }
}

/// Whether `name` has a per-hour bound under `expect` (the counters the ring keeps).
pub fn has_rate_bound(expect: &NodeExpectations, name: &str) -> bool {
    expect
        .thresholds
        .get(&*threshold_key(name))
        .is_some_and(|t| t.warn_per_hour.is_some() || t.fail_per_hour.is_some())
}

/// `snap` with only the counters `keep` keeps.
fn pruned(snap: &CounterSnapshot, keep: &dyn Fn(&str) -> bool) -> CounterSnapshot {
    let mut out = snap.clone();
    for pc in out.ports.values_mut() {
        pc.counters.retain(|n, _| keep(n));
        pc.hw_counters.retain(|n, _| keep(n));
    }
    for nd in out.netdevs.values_mut() {
        nd.ethtool.retain(|n, _| keep(n));
    }
    out
}

/// The watch's counter snapshots, oldest first (see the module doc).
#[derive(Debug, Clone, Default)]
pub struct CounterRing {
    entries: VecDeque<CounterSnapshot>,
}

impl CounterRing {
    /// A ring that starts with the prolog's snapshot `prolog` (its counters with a per-hour
    /// bound under `expect`).
    pub fn starting_at(prolog: &CounterSnapshot, expect: &NodeExpectations) -> Self {
        let mut r = Self::default();
        r.entries
            .push_back(pruned(prolog, &|n| has_rate_bound(expect, n)));
        r
    }

    /// How many snapshots it holds.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether it holds none (the job has no baseline).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Where the per-hour bounds' window starts at `now_ms`: the oldest entry no older than
    /// [`RATE_WINDOW_MS`]; when none is that young (no full sample for an hour), the newest
    /// (its allowance is then scaled to its age, as over a job window). Entries newer than
    /// `now_ms` (the clock went back) are never a window's start.
    pub fn window_start(&self, now_ms: u64) -> Option<&CounterSnapshot> {
        let since = now_ms.saturating_sub(RATE_WINDOW_MS);
        let past = || self.entries.iter().filter(|e| e.taken_unix_ms <= now_ms);
        past()
            .find(|e| e.taken_unix_ms >= since)
            .or_else(|| past().next_back())
    }

    /// Keeps `snap` (its counters with a per-hour bound under `expect`) when the newest entry is
    /// at least [`ENTRY_EVERY_MS`] older, and drops what no window can start at any more.
    pub fn record(&mut self, snap: &CounterSnapshot, expect: &NodeExpectations) {
        let now_ms = snap.taken_unix_ms;
        // The clock went back: entries from "the future" would never start a window.
        while self
            .entries
            .back()
            .is_some_and(|e| e.taken_unix_ms > now_ms)
        {
            self.entries.pop_back();
        }
        let due = self
            .entries
            .back()
            .is_none_or(|e| now_ms - e.taken_unix_ms >= ENTRY_EVERY_MS);
        if due {
            self.entries
                .push_back(pruned(snap, &|n| has_rate_bound(expect, n)));
        }
        // The oldest entry is dropped once the next one is also older than the hour: a window
        // now starts at that one or later.
        let since = now_ms.saturating_sub(RATE_WINDOW_MS);
        while self.entries.len() > MAX_ENTRIES
            || (self.entries.len() > 1 && self.entries[1].taken_unix_ms < since)
        {
            self.entries.pop_front();
        }
    }

    /// Lowers every entry's value of a counter that went down in `now` (see
    /// [`rebase`]).
    pub fn rebase(&mut self, now: &CounterSnapshot) {
        for e in &mut self.entries {
            rebase(e, now);
        }
    }
}

/// Moves `baseline`'s value of every counter that went down in `now` (counters cleared, driver
/// reloaded, a port retrained) to the new value, so later rises are counted from the reset
/// instead of being hidden below the old total. The baseline's time stays the job's start.
pub fn rebase(baseline: &mut CounterSnapshot, now: &CounterSnapshot) {
    for (port, after) in &now.ports {
        let Some(before) = baseline.ports.get_mut(port) else {
            continue;
        };
        for (set_before, set_after) in [
            (&mut before.counters, &after.counters),
            (&mut before.hw_counters, &after.hw_counters),
        ] {
            for (name, v) in set_after {
                if let Some(old) = set_before.get_mut(name)
                    && *v < *old
                {
                    *old = *v;
                }
            }
        }
    }
    for (dev, after) in &now.netdevs {
        let Some(before) = baseline.netdevs.get_mut(dev) else {
            continue;
        };
        for (name, v) in &after.ethtool {
            if let Some(old) = before.ethtool.get_mut(name)
                && *v < *old
            {
                *old = *v;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    const HOUR_MS: u64 = 3_600_000;
    const T0_MS: u64 = 1_800_000_000_000;

    fn snap_at(taken_unix_ms: u64, symbol_error: u64) -> CounterSnapshot {
        let mut s = CounterSnapshot {
            taken_unix_ms,
            ..CounterSnapshot::default()
        };
        let port = s.ports.entry("mlx5_0/1".into()).or_default();
        port.counters.insert("symbol_error".into(), symbol_error);
        port.counters.insert("link_downed".into(), 0);
        port.counters.insert("port_rcv_data".into(), taken_unix_ms);
        s
    }

    #[test]
    fn the_window_starts_at_the_prolog_while_the_job_is_younger_than_an_hour_then_slides() {
        let expect = Config::default().for_node("n1");
        let mut r = CounterRing::starting_at(&snap_at(T0_MS, 0), &expect);
        for min in 1..=30 {
            r.record(&snap_at(T0_MS + min * 60_000, 0), &expect);
        }
        let start = |r: &CounterRing, at| r.window_start(at).unwrap().taken_unix_ms;
        assert_eq!(start(&r, T0_MS + 30 * 60_000), T0_MS, "the prolog's");
        for min in 31..=180 {
            r.record(&snap_at(T0_MS + min * 60_000, 0), &expect);
        }
        let now = T0_MS + 180 * 60_000;
        assert_eq!(
            start(&r, now),
            now - HOUR_MS,
            "the oldest entry of the last hour"
        );
    }

    #[test]
    fn the_ring_keeps_at_most_one_entry_a_minute_and_one_hours_worth_over_a_48_hour_run() {
        let expect = Config::default().for_node("n1");
        let mut r = CounterRing::starting_at(&snap_at(T0_MS, 0), &expect);
        let mut most = r.len();
        // A sample a second for 48 emulated hours.
        for s in 1..=48 * 3600 {
            r.record(&snap_at(T0_MS + s * 1000, s / 100), &expect);
            most = most.max(r.len());
        }
        assert!(most <= MAX_ENTRIES, "{most} entries at most");
        assert!(r.len() >= 60, "an hour's worth is kept: {}", r.len());
        let now = T0_MS + 48 * HOUR_MS;
        let start = r.window_start(now).unwrap().taken_unix_ms;
        assert!(now - start <= HOUR_MS, "{} ms", now - start);
    }

    #[test]
    fn entries_keep_only_the_counters_with_a_per_hour_bound() {
        let expect = Config::default().for_node("n1");
        let r = CounterRing::starting_at(&snap_at(T0_MS, 5), &expect);
        let kept = &r.window_start(T0_MS).unwrap().ports["mlx5_0/1"].counters;
        assert_eq!(kept.keys().collect::<Vec<_>>(), ["symbol_error"]);
    }

    #[test]
    fn a_reset_lowers_every_entry_and_a_clock_that_went_back_never_starts_a_window_in_the_future() {
        let expect = Config::default().for_node("n1");
        let mut r = CounterRing::starting_at(&snap_at(T0_MS, 100), &expect);
        r.record(&snap_at(T0_MS + 120_000, 300), &expect);
        r.rebase(&snap_at(T0_MS + 180_000, 7));
        let values: Vec<u64> = r
            .entries
            .iter()
            .map(|e| e.ports["mlx5_0/1"].counters["symbol_error"])
            .collect();
        assert_eq!(values, [7, 7]);
        assert_eq!(
            r.window_start(T0_MS + 60_000).unwrap().taken_unix_ms,
            T0_MS,
            "the entry two minutes in is not yet"
        );
        r.record(&snap_at(T0_MS + 60_000, 7), &expect);
        assert!(r.entries.iter().all(|e| e.taken_unix_ms <= T0_MS + 60_000));
    }

    #[test]
    fn with_no_entry_in_the_last_hour_the_window_starts_at_the_newest() {
        let expect = Config::default().for_node("n1");
        let r = CounterRing::starting_at(&snap_at(T0_MS, 0), &expect);
        assert_eq!(
            r.window_start(T0_MS + 5 * HOUR_MS).unwrap().taken_unix_ms,
            T0_MS
        );
        assert!(CounterRing::default().window_start(T0_MS).is_none());
    }
}
