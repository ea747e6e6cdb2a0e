//! One absolute deadline for a whole job step.
//!
//! The SPANK plugin kills its child at `timeout=`. The child takes that limit, less a margin
//! ([`Deadline::for_job_step`]), as one [`Instant`] that every phase draws from: the probe, each
//! Slurm call, the rendezvous, the collective and the tag write ask for `limit(cap)` (their own cap,
//! never more than what is left), so no phase can run past the deadline and the phases cannot add
//! up past it. [`Deadline::left_ms`] goes into each phase's log line.

use std::time::{Duration, Instant};

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
        let margin = (timeout / 10)
            .clamp(MIN_MARGIN, MAX_MARGIN)
            .min(timeout / 2);
        Self {
            started,
            at: started + timeout.saturating_sub(margin),
        }
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

    /// The earlier of the deadline and `now + d`.
    pub fn clamp_instant(&self, d: Duration) -> Instant {
        (Instant::now() + d).min(self.at)
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
