//! One absolute deadline for a whole job step.
//!
//! The SPANK plugin kills its child at `timeout=`. The child takes that limit, less a margin
//! ([`Deadline::for_job_step`]), as one [`Instant`] that every phase draws from: the probe, each
//! Slurm call, the rendezvous, the collective and the tag write ask for `limit(cap)` (their own cap,
//! never more than what is left), so no phase can run past the deadline and the phases cannot add
//! up past it. [`Deadline::left_ms`] goes into each phase's log line.
//!
//! [`Budget`] is the one place that cuts `timeout=` into shares: every phase asks it for its
//! cap by name, and every share and fixed cap of the job step is a constant here (the table
//! in `docs/architecture.md` lists them). [`Budget::settle_call`] sizes the calls of a drain's
//! settle step so that the whole of it (drain, wait, re-check, undo) fits before the deadline.

use std::time::{Duration, Instant};

/// The probe's share of `timeout=`.
pub const PROBE_SHARE: f64 = 0.4;
/// One Slurm call's share of `timeout=` ...
pub const SLURM_CALL_SHARE: f64 = 0.25;
/// ... and its least.
pub const MIN_SLURM_CALL: Duration = Duration::from_secs(2);
/// The rendezvous waits until this share of `timeout=` has passed since the start ...
pub const RENDEZVOUS_SHARE: f64 = 0.8;
/// ... and at least this long.
pub const MIN_RENDEZVOUS: Duration = Duration::from_millis(500);
/// The prolog collective's own budget (all in) ...
pub const COLLECTIVE: Duration = Duration::from_millis(3000);
/// ... and what its process may take beyond it.
pub const COLLECTIVE_SLACK: Duration = Duration::from_millis(2000);
/// The longest wait for the node's tag lock (never past the deadline, leaving two Slurm calls).
pub const TAG_LOCK_WAIT: Duration = Duration::from_secs(10);
/// The longest the epilog waits for the in-job watch to end after its SIGTERM (a watch in the
/// middle of a drain or a tag write finishes it) ...
pub const WATCH_STOP: Duration = Duration::from_secs(5);
/// ... and the least, whatever is left.
pub const MIN_WATCH_STOP: Duration = Duration::from_millis(500);
/// `health`: what its Slurm calls may take after the probe's `timeout=`, all together.
pub const HEALTH_SLURM: Duration = Duration::from_secs(20);
/// A drain's settle step: time kept beyond its calls and its wait, for its own work and the
/// undo's pauses between tries.
pub const SETTLE_SLACK: Duration = Duration::from_millis(500);
/// A drain's settle step: the least a drain or re-check call may be given; with less, no
/// drain starts.
pub const MIN_SETTLE_CALL: Duration = Duration::from_millis(300);

/// `timeout=` cut into each phase's share (see the module docs and the table in
/// `docs/architecture.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    timeout: Duration,
}

impl Budget {
    /// The budget of a plugin `timeout=`.
    pub const fn new(timeout: Duration) -> Self {
        Self { timeout }
    }

    /// `timeout=` itself.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// What the child keeps between its deadline and the plugin's kill: a tenth of `timeout=`,
    /// between [`MIN_MARGIN`] and [`MAX_MARGIN`], never more than half of it.
    pub fn margin(&self) -> Duration {
        (self.timeout / 10)
            .clamp(MIN_MARGIN, MAX_MARGIN)
            .min(self.timeout / 2)
    }

    /// The job step's deadline, counted from `started`: `timeout=` less [`Budget::margin`].
    pub fn job_step(&self, started: Instant) -> Deadline {
        Deadline {
            started,
            at: started + self.timeout.saturating_sub(self.margin()),
        }
    }

    /// `health`'s deadline from now: `timeout=` for the probe and [`HEALTH_SLURM`].
    pub fn health(&self) -> Deadline {
        Deadline::after(self.timeout + HEALTH_SLURM)
    }

    /// The probe's cap: [`PROBE_SHARE`] of `timeout=`.
    pub fn probe(&self) -> Duration {
        self.timeout.mul_f64(PROBE_SHARE)
    }

    /// One Slurm call's cap: [`SLURM_CALL_SHARE`] of `timeout=`, at least [`MIN_SLURM_CALL`].
    pub fn slurm_call(&self) -> Duration {
        self.timeout.mul_f64(SLURM_CALL_SHARE).max(MIN_SLURM_CALL)
    }

    /// How long the rendezvous may wait, `elapsed` into the step: until [`RENDEZVOUS_SHARE`] of
    /// `timeout=`, at least [`MIN_RENDEZVOUS`].
    pub fn rendezvous(&self, elapsed: Duration) -> Duration {
        self.timeout
            .mul_f64(RENDEZVOUS_SHARE)
            .saturating_sub(elapsed)
            .max(MIN_RENDEZVOUS)
    }

    /// The prolog collective's own budget ([`COLLECTIVE`]).
    pub fn collective(&self) -> Duration {
        COLLECTIVE
    }

    /// The collective process's cap: its budget and [`COLLECTIVE_SLACK`].
    pub fn collective_process(&self) -> Duration {
        COLLECTIVE + COLLECTIVE_SLACK
    }

    /// The tag lock's wait: [`TAG_LOCK_WAIT`], less the two Slurm calls of the write after it.
    pub fn tag_lock_wait(&self, deadline: &Deadline) -> Duration {
        deadline.limit_leaving(TAG_LOCK_WAIT, self.slurm_call() * 2, Duration::ZERO)
    }

    /// How long the epilog waits for the watch to end: up to [`WATCH_STOP`], leaving its own
    /// probe and one Slurm call, at least [`MIN_WATCH_STOP`].
    pub fn watch_stop(&self, deadline: &Deadline) -> Duration {
        deadline.limit_leaving(WATCH_STOP, self.probe() + self.slurm_call(), MIN_WATCH_STOP)
    }

    /// How long the batch script's `step-end` may wait for its node's step ends still in
    /// flight: until the deadline, less the two Slurm calls of its own write after it.
    pub fn step_end_wait(&self, deadline: &Deadline) -> Duration {
        deadline.limit_leaving(deadline.remaining(), self.slurm_call() * 2, Duration::ZERO)
    }

    /// The cap of each call of a drain's settle step, with `left` before the deadline, a settle
    /// `wait` and Slurm calls of at most `call_limit`: the drain call and the re-check share
    /// what is left after the wait, a whole `call_limit` kept for the undo and
    /// [`SETTLE_SLACK`]; `None` when that share is under [`MIN_SETTLE_CALL`] (no drain starts).
    ///
    /// So the whole settle cost is reserved before a drain: a drain (at most the share), the
    /// wait, a re-check (at most the share) and an undo with a full call's time all end before
    /// the deadline, whatever Slurm's latency up to `call_limit`.
    pub fn settle_call(left: Duration, wait: Duration, call_limit: Duration) -> Option<Duration> {
        let for_two = left
            .checked_sub(wait + call_limit + SETTLE_SLACK)
            .unwrap_or_default();
        let share = (for_two / 2).min(call_limit);
        (share >= MIN_SETTLE_CALL).then_some(share)
    }
}

/// The least margin kept between the child's deadline and the plugin's kill.
pub const MIN_MARGIN: Duration = Duration::from_millis(200);
/// The most margin kept.
pub const MAX_MARGIN: Duration = Duration::from_secs(2);

/// An absolute point in time that bounds a job step, with the budget it started from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadline {
    started: Instant,
    at: Instant,
}

impl Deadline {
    /// A deadline `budget` after now.
    pub fn after(budget: Duration) -> Self {
        let started = Instant::now();
        Self {
            started,
            at: started + budget,
        }
    }

    /// The job step's deadline: `timeout` (the plugin's `timeout=`, counted from `started`) less a
    /// margin of a tenth of it, between [`MIN_MARGIN`] and [`MAX_MARGIN`] (never more than half of
    /// it), so the child answers before the plugin kills it.
    pub fn for_job_step(started: Instant, timeout: Duration) -> Self {
        Budget::new(timeout).job_step(started)
    }

    /// The instant itself.
    pub fn at(&self) -> Instant {
        self.at
    }

    /// The whole budget, from start to deadline.
    pub fn total(&self) -> Duration {
        self.at.saturating_duration_since(self.started)
    }

    /// Time since the start.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// What is left (zero once past).
    pub fn remaining(&self) -> Duration {
        self.at.saturating_duration_since(Instant::now())
    }

    /// What is left, in whole milliseconds (for log lines).
    pub fn left_ms(&self) -> u128 {
        self.remaining().as_millis()
    }

    /// Whether the deadline has passed.
    pub fn is_past(&self) -> bool {
        self.remaining().is_zero()
    }

    /// A phase's limit: its own `cap`, or what is left if less.
    pub fn limit(&self, cap: Duration) -> Duration {
        cap.min(self.remaining())
    }

    /// A phase's limit that leaves `reserve` for the phases after it (but never less than `floor`,
    /// and never past the deadline).
    pub fn limit_leaving(&self, cap: Duration, reserve: Duration, floor: Duration) -> Duration {
        let left = self.remaining();
        cap.min(left.saturating_sub(reserve)).max(floor).min(left)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_job_step_deadline_keeps_a_tenth_of_the_timeout_as_margin_within_bounds() {
        let t0 = Instant::now();
        assert_eq!(
            Deadline::for_job_step(t0, Duration::from_secs(20)).total(),
            Duration::from_secs(18)
        );
        assert_eq!(
            Deadline::for_job_step(t0, Duration::from_secs(60)).total(),
            Duration::from_secs(58)
        );
        assert_eq!(
            Deadline::for_job_step(t0, Duration::from_secs(1)).total(),
            Duration::from_millis(800)
        );
        assert_eq!(
            Deadline::for_job_step(t0, Duration::from_millis(300)).total(),
            Duration::from_millis(150)
        );
    }

    #[test]
    fn the_budget_hands_each_phase_its_share_of_the_timeout_by_name() {
        let b = Budget::new(Duration::from_secs(20));
        assert_eq!(b.probe(), Duration::from_secs(8));
        assert_eq!(b.slurm_call(), Duration::from_secs(5));
        assert_eq!(
            Budget::new(Duration::from_secs(4)).slurm_call(),
            MIN_SLURM_CALL
        );
        assert_eq!(
            b.rendezvous(Duration::from_secs(10)),
            Duration::from_secs(6)
        );
        assert_eq!(b.rendezvous(Duration::from_secs(19)), MIN_RENDEZVOUS);
        assert_eq!(b.collective_process(), Duration::from_secs(5));
        assert_eq!(b.margin(), Duration::from_secs(2));
    }

    #[test]
    fn a_settle_share_leaves_a_whole_call_for_the_undo_or_none_at_all() {
        let wait = Duration::from_millis(1500);
        let call = Duration::from_secs(2);
        // 7 s left: (7 - 1.5 - 2 - 0.5) / 2 = 1.5 s for the drain and the re-check each.
        let share = Budget::settle_call(Duration::from_secs(7), wait, call).unwrap();
        assert_eq!(share, Duration::from_millis(1500));
        assert!(2 * share + wait + call + SETTLE_SLACK <= Duration::from_secs(7));
        // Plenty left: never more than a call's own limit.
        assert_eq!(
            Budget::settle_call(Duration::from_secs(60), wait, call),
            Some(call)
        );
        // Too little: no drain.
        assert_eq!(
            Budget::settle_call(Duration::from_secs(4), wait, call),
            None
        );
        assert_eq!(Budget::settle_call(Duration::ZERO, wait, call), None);
    }

    #[test]
    fn a_phase_never_gets_more_than_what_is_left() {
        let d = Deadline::after(Duration::from_secs(10));
        assert_eq!(d.limit(Duration::from_secs(2)), Duration::from_secs(2));
        assert!(d.limit(Duration::from_secs(60)) <= Duration::from_secs(10));
        let leaving = d.limit_leaving(
            Duration::from_secs(60),
            Duration::from_secs(4),
            Duration::from_millis(500),
        );
        assert!(leaving <= Duration::from_secs(6), "{leaving:?}");
        assert!(leaving > Duration::from_secs(5), "{leaving:?}");
    }

    #[test]
    fn a_passed_deadline_leaves_nothing_even_to_the_floor() {
        let d = Deadline::after(Duration::ZERO);
        assert!(d.is_past());
        assert_eq!(d.limit(Duration::from_secs(1)), Duration::ZERO);
        assert_eq!(
            d.limit_leaving(
                Duration::from_secs(1),
                Duration::ZERO,
                Duration::from_secs(1)
            ),
            Duration::ZERO
        );
    }
}
