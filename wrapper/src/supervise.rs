//! The run: attempts, retries with backoff, validation and the outcome, over any [`Runner`].

use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime};

use fabric_proto::record::{Body, Outcome};

use crate::policy::{Finish, RetryPolicy, Status};
use crate::runner::Runner;
use crate::tracker::Tracker;

/// What the run needs besides the runner.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    /// Retries and backoff.
    pub retry: RetryPolicy,
    /// `--deadline`.
    pub deadline: Option<SystemTime>,
    /// `--accept-cmd`.
    pub accept_cmd: Option<String>,
}

/// How the run ended.
#[derive(Debug, Clone)]
#[cfg_attr(not(test), allow(dead_code))] // outcome and attempts are asserted by tests
pub struct RunEnd {
    /// The last attempt's end (its exit status is the wrapper's).
    pub last: Status,
    /// The outcome.
    pub outcome: Outcome,
    /// Attempts made.
    pub attempts: u32,
}

/// Runs attempts until one succeeds or no retry is due; writes `attempt` and `step_end`.
pub fn run_all(runner: &mut dyn Runner, plan: &Plan, tracker: &Arc<Mutex<Tracker>>) -> RunEnd {
    let lock = || tracker.lock().unwrap_or_else(|p| p.into_inner());
    let started = Instant::now();
    let mut attempt = 1;
    let result = loop {
        let r = runner.run(attempt);
        lock().flush_outputs();
        if let Status::NotStarted { message, .. } = &r.status {
            tracing::warn!("{message}");
        }
        let past_deadline = plan.deadline.is_some_and(|d| r.end > d);
        let (retry, reason) = plan.retry.decide(
            attempt,
            &r.status,
            r.output_matched,
            runner.sigterm_seen(),
            past_deadline,
        );
        let (exit_code, signal) = r.status.recorded();
        lock().write(Body::Attempt {
            attempt,
            duration_s: r.duration.as_secs_f64(),
            exit_code,
            signal,
            retry,
            reason: reason.clone(),
        });
        if !retry {
            break r;
        }
        let wait = plan.retry.backoff_for(attempt);
        tracing::info!(
            "fabric-run: attempt {attempt} failed ({}); relaunching in {}",
            reason.unwrap_or_default(),
            humantime::format_duration(wait)
        );
        if !runner.backoff(wait) || plan.deadline.is_some_and(|d| SystemTime::now() > d) {
            break r;
        }
        attempt += 1;
    };
    runner.finish();
    lock().flush_outputs();
    let finish = Finish {
        last: result.status.clone(),
        sigterm: runner.sigterm_seen(),
        end: result.end,
        deadline: plan.deadline,
    };
    let validated = match &plan.accept_cmd {
        Some(cmd) if finish.wants_validation() => Some(runner.validate(cmd)),
        _ => None,
    };
    let outcome = finish.outcome(validated);
    let (exit_code, signal) = result.status.recorded();
    let mut t = lock();
    t.write(Body::StepEnd {
        duration_s: started.elapsed().as_secs_f64(),
        exit_code,
        signal,
        outcome,
        attempts: attempt,
        on_time: finish.on_time(),
        validated,
        sigterm: finish.sigterm,
    });
    t.sync();
    RunEnd {
        last: result.status,
        outcome,
        attempts: attempt,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runner::AttemptResult;
    use crate::tracker::Sink;
    use std::collections::VecDeque;
    use std::time::Duration;

    /// Plays back scripted attempt results (hyperfine's mock-executor idea).
    struct Scripted {
        results: VecDeque<Status>,
        waits: Vec<Duration>,
        sigterm: bool,
        validated: Option<bool>,
        validations: u32,
    }

    impl Runner for Scripted {
        fn run(&mut self, _attempt: u32) -> AttemptResult {
            AttemptResult {
                status: self.results.pop_front().expect("no more scripted attempts"),
                duration: Duration::from_millis(5),
                end: SystemTime::now(),
                output_matched: false,
            }
        }
        fn backoff(&mut self, d: Duration) -> bool {
            self.waits.push(d);
            true
        }
        fn sigterm_seen(&self) -> bool {
            self.sigterm
        }
        fn validate(&mut self, _: &str) -> bool {
            self.validations += 1;
            self.validated.unwrap_or(true)
        }
        fn finish(&mut self) {}
    }

    fn scripted(results: &[Status]) -> Scripted {
        Scripted {
            results: results.iter().cloned().collect(),
            waits: vec![],
            sigterm: false,
            validated: None,
            validations: 0,
        }
    }

    fn plan(retries: u32) -> Plan {
        Plan {
            retry: RetryPolicy {
                max: retries,
                backoff: Duration::from_secs(1),
                backoff_max: Duration::from_secs(60),
                ..RetryPolicy::default()
            },
            ..Plan::default()
        }
    }

    fn tracker() -> Arc<Mutex<Tracker>> {
        Arc::new(Mutex::new(Tracker::new(Sink::new(None))))
    }

    #[test]
    fn failures_are_relaunched_with_doubling_backoff_until_success() {
        let mut r = scripted(&[Status::Exit(1), Status::Signal(11), Status::Exit(0)]);
        let end = run_all(&mut r, &plan(3), &tracker());
        assert_eq!(end.attempts, 3);
        assert_eq!(end.outcome, Outcome::Accepted);
        assert_eq!(r.waits, [Duration::from_secs(1), Duration::from_secs(2)]);
    }

    #[test]
    fn retries_stop_when_exhausted_and_the_last_status_is_passed_on() {
        let mut r = scripted(&[Status::Exit(1), Status::Exit(2)]);
        let end = run_all(&mut r, &plan(1), &tracker());
        assert_eq!(end.attempts, 2);
        assert_eq!(end.last.exit_code(), 2);
        assert_eq!(end.outcome, Outcome::Failed);
    }

    #[test]
    fn a_failed_validation_fails_a_clean_exit() {
        let mut r = scripted(&[Status::Exit(0)]);
        r.validated = Some(false);
        let mut p = plan(0);
        p.accept_cmd = Some("false".into());
        let end = run_all(&mut r, &p, &tracker());
        assert_eq!(end.outcome, Outcome::Failed);
        assert_eq!(end.last.exit_code(), 0);
        assert_eq!(r.validations, 1);
    }

    #[test]
    fn a_preempted_run_is_neither_retried_nor_validated() {
        let mut r = scripted(&[Status::Signal(15)]);
        r.sigterm = true;
        let mut p = plan(3);
        p.accept_cmd = Some("true".into());
        let end = run_all(&mut r, &p, &tracker());
        assert_eq!(end.attempts, 1);
        assert_eq!(end.outcome, Outcome::Preempted);
        assert_eq!(r.validations, 0);
    }
}
