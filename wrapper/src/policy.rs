//! Pure decisions: parsing `--deadline` and `--retry-on`, whether to relaunch, and the outcome.

use std::time::{Duration, SystemTime};

use fabric_proto::record::Outcome;
use nix::sys::signal::Signal;

/// How one attempt ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    /// It exited with this status.
    Exit(i32),
    /// A signal ended it.
    Signal(i32),
    /// It could not be started: 127 when not found, 126 otherwise (shell convention).
    NotStarted {
        /// 126 or 127.
        code: i32,
        /// What went wrong, for the user.
        message: String,
    },
}

impl Status {
    /// The wrapper's own exit status for this end.
    pub fn exit_code(&self) -> i32 {
        match self {
            Self::Exit(c) => *c,
            Self::Signal(n) => 128 + n,
            Self::NotStarted { code, .. } => *code,
        }
    }

    /// `(exit_code, signal)` as recorded.
    pub fn recorded(&self) -> (Option<i32>, Option<i32>) {
        match self {
            Self::Exit(c) => (Some(*c), None),
            Self::Signal(n) => (None, Some(*n)),
            Self::NotStarted { code, .. } => (Some(*code), None),
        }
    }

    fn succeeded(&self) -> bool {
        *self == Self::Exit(0)
    }
}

/// Parses `--deadline`: a duration from `now` (`2h30m`) or an RFC 3339 time
/// (`2026-11-30T06:00:00Z`, `2026-11-30T08:00:00+02:00`).
pub fn parse_deadline(s: &str, now: SystemTime) -> Result<SystemTime, String> {
    if let Ok(d) = humantime::parse_duration(s) {
        return Ok(now + d);
    }
    let bad = || {
        format!(
            "`{s}` is neither a duration nor an RFC 3339 time: write e.g. 2h30m or \
             2026-11-30T06:00:00Z"
        )
    };
    let b = s.as_bytes();
    // Offset `±HH:MM` at the end: humantime knows only `Z`, so apply the offset ourselves.
    if b.len() > 6 && (b[b.len() - 6] == b'+' || b[b.len() - 6] == b'-') && b[b.len() - 3] == b':' {
        let (local, off) = s.split_at(s.len() - 6);
        let hours: u64 = off[1..3].parse().map_err(|_| bad())?;
        let mins: u64 = off[4..6].parse().map_err(|_| bad())?;
        let shift = Duration::from_secs(hours * 3600 + mins * 60);
        let t = humantime::parse_rfc3339_weak(local).map_err(|_| bad())?;
        return Ok(if off.starts_with('+') {
            t - shift
        } else {
            t + shift
        });
    }
    if !s.ends_with(['Z', 'z']) {
        return Err(format!(
            "`{s}` has no time zone: end it with Z or an offset like +02:00"
        ));
    }
    humantime::parse_rfc3339_weak(&s[..s.len() - 1]).map_err(|_| bad())
}

/// `--retries` and `--retry-on`.
#[derive(Debug, Clone, Default)]
pub struct RetryPolicy {
    /// Relaunches allowed.
    pub max: u32,
    /// Exit codes that are retried.
    pub exit_codes: Vec<i32>,
    /// Signals that are retried.
    pub signals: Vec<i32>,
    /// Output patterns that make a failure retryable (matched elsewhere; this says some exist).
    pub output_patterns: Vec<String>,
    /// First backoff.
    pub backoff: Duration,
    /// Longest backoff.
    pub backoff_max: Duration,
}

/// A signal by number, or by name with or without `SIG` (any case).
pub fn parse_signal(s: &str) -> Result<i32, String> {
    if let Ok(n) = s.parse::<i32>() {
        return Signal::try_from(n)
            .map(|sig| sig as i32)
            .map_err(|_| format!("`{s}` is not a signal number"));
    }
    let up = s.to_ascii_uppercase();
    let name = if up.starts_with("SIG") {
        up
    } else {
        format!("SIG{up}")
    };
    name.parse::<Signal>()
        .map(|sig| sig as i32)
        .map_err(|_| format!("`{s}` is not a signal name: write e.g. SIGSEGV, BUS or 7"))
}

impl RetryPolicy {
    /// Adds one `--retry-on` spec: `exit=1,2`, `signal=SEGV,BUS`, `output=REGEX`.
    pub fn add_spec(&mut self, spec: &str) -> Result<(), String> {
        let (kind, value) = spec.split_once('=').ok_or_else(|| {
            format!(
                "--retry-on `{spec}`: write exit=CODE[,CODE], signal=NAME[,NAME] or output=REGEX"
            )
        })?;
        match kind {
            "exit" => {
                for c in value.split(',') {
                    let code = c
                        .trim()
                        .parse::<i32>()
                        .ok()
                        .filter(|c| (0..=255).contains(c));
                    self.exit_codes.push(code.ok_or_else(|| {
                        format!("--retry-on exit=`{c}`: an exit code is a number from 0 to 255")
                    })?);
                }
            }
            "signal" => {
                for s in value.split(',') {
                    self.signals.push(parse_signal(s.trim())?);
                }
            }
            "output" => {
                regex::bytes::Regex::new(value)
                    .map_err(|e| format!("--retry-on output=`{value}`: bad regex: {e}"))?;
                self.output_patterns.push(value.to_owned());
            }
            other => {
                return Err(format!(
                    "--retry-on `{other}=`: the kinds are exit=, signal= and output="
                ));
            }
        }
        Ok(())
    }

    fn any_condition(&self) -> bool {
        !(self.exit_codes.is_empty() && self.signals.is_empty() && self.output_patterns.is_empty())
    }

    /// Whether to relaunch after attempt `attempt` (1-based) ended with `status`, and why.
    pub fn decide(
        &self,
        attempt: u32,
        status: &Status,
        output_matched: bool,
        sigterm: bool,
        past_deadline: bool,
    ) -> (bool, Option<String>) {
        if status.succeeded() {
            return (false, None);
        }
        let no = |why: &str| (false, Some(why.to_owned()));
        if self.max == 0 {
            return (false, None);
        }
        if let Status::NotStarted { .. } = status {
            return no("the command could not start: not retried");
        }
        if sigterm {
            return no("SIGTERM received: not retried");
        }
        if past_deadline {
            return no("past the deadline: not retried");
        }
        let why = match status {
            Status::Exit(c) if self.exit_codes.contains(c) => {
                format!("exit {c} matched --retry-on")
            }
            Status::Signal(n) if self.signals.contains(n) => {
                format!("signal {n} matched --retry-on")
            }
            _ if output_matched => "output matched --retry-on".to_owned(),
            Status::Exit(c) if !self.any_condition() => format!("exit {c}"),
            Status::Signal(n) if !self.any_condition() => format!("signal {n}"),
            _ => return no("no --retry-on condition matched"),
        };
        if attempt > self.max {
            return (
                false,
                Some(format!("{why}; retries exhausted ({})", self.max)),
            );
        }
        (true, Some(why))
    }

    /// Wait before relaunch number `retry` (1-based): backoff × 2^(retry−1), at most backoff_max.
    pub fn backoff_for(&self, retry: u32) -> Duration {
        let factor = 1u32
            .checked_shl(retry.saturating_sub(1))
            .unwrap_or(u32::MAX);
        self.backoff
            .checked_mul(factor)
            .unwrap_or(self.backoff_max)
            .min(self.backoff_max)
    }
}

/// Everything that decides the outcome of a run.
#[derive(Debug, Clone)]
pub struct Finish {
    /// How the last attempt ended.
    pub last: Status,
    /// The wrapper received SIGTERM during the run.
    pub sigterm: bool,
    /// When the last attempt ended.
    pub end: SystemTime,
    /// `--deadline`.
    pub deadline: Option<SystemTime>,
}

impl Finish {
    /// Met the deadline (true when there is none).
    pub fn on_time(&self) -> bool {
        self.deadline.is_none_or(|d| self.end <= d)
    }

    /// Whether `--accept-cmd` should run: only a run that is accepted but for validation.
    pub fn wants_validation(&self) -> bool {
        self.last.succeeded() && !self.sigterm && self.on_time()
    }

    /// The outcome, given the result of `--accept-cmd` (`None` when it did not run).
    pub fn outcome(&self, validated: Option<bool>) -> Outcome {
        if self.sigterm {
            // Slurm sends SIGTERM at the time limit as well as on preemption: past the deadline,
            // call it a timeout.
            return if self.on_time() {
                Outcome::Preempted
            } else {
                Outcome::Timeout
            };
        }
        if !self.on_time() {
            return Outcome::Timeout;
        }
        match &self.last {
            Status::Exit(0) if validated != Some(false) => Outcome::Accepted,
            Status::Signal(n) if *n == Signal::SIGKILL as i32 => Outcome::Killed,
            _ => Outcome::Failed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    fn at(s: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(s)
    }

    #[test]
    fn a_deadline_is_a_duration_from_now() {
        assert_eq!(parse_deadline("2h30m", at(100)).unwrap(), at(100 + 9000));
    }

    #[test]
    fn a_deadline_can_be_an_rfc3339_time_with_an_offset() {
        let z = parse_deadline("2026-11-30T06:00:00Z", at(0)).unwrap();
        let off = parse_deadline("2026-11-30T08:00:00+02:00", at(0)).unwrap();
        let neg = parse_deadline("2026-11-30T01:30:00-04:30", at(0)).unwrap();
        assert_eq!(z, off);
        assert_eq!(z, neg);
    }

    #[test]
    fn a_deadline_without_a_zone_is_refused_with_advice() {
        let e = parse_deadline("2026-11-30T06:00:00", at(0)).unwrap_err();
        assert!(e.contains("time zone"), "{e}");
        assert!(parse_deadline("soon", at(0)).is_err());
    }

    fn policy(specs: &[&str]) -> RetryPolicy {
        let mut p = RetryPolicy {
            max: 2,
            backoff: Duration::from_secs(1),
            backoff_max: Duration::from_secs(3),
            ..RetryPolicy::default()
        };
        for s in specs {
            p.add_spec(s).unwrap();
        }
        p
    }

    #[test]
    fn retry_on_exit_codes_only_retries_those() {
        let p = policy(&["exit=3,4"]);
        assert!(p.decide(1, &Status::Exit(3), false, false, false).0);
        assert!(!p.decide(1, &Status::Exit(1), false, false, false).0);
        assert!(!p.decide(3, &Status::Exit(3), false, false, false).0);
    }

    #[test]
    fn retry_on_signal_names_accept_short_and_long_forms() {
        let p = policy(&["signal=SEGV,SIGBUS"]);
        assert!(p.decide(1, &Status::Signal(11), false, false, false).0);
        assert!(p.decide(1, &Status::Signal(7), false, false, false).0);
        assert!(!p.decide(1, &Status::Signal(6), false, false, false).0);
    }

    #[test]
    fn without_conditions_any_failure_is_retried_but_never_after_sigterm() {
        let p = policy(&[]);
        assert!(p.decide(1, &Status::Exit(1), false, false, false).0);
        assert!(!p.decide(1, &Status::Exit(0), false, false, false).0);
        let (retry, why) = p.decide(1, &Status::Signal(15), false, true, false);
        assert!(!retry);
        assert!(why.unwrap().contains("SIGTERM"));
        assert!(!p.decide(1, &Status::Exit(1), false, false, true).0);
    }

    #[test]
    fn a_matched_output_pattern_makes_a_failure_retryable() {
        let p = policy(&["output=NCCL error"]);
        assert!(p.decide(1, &Status::Exit(1), true, false, false).0);
        assert!(!p.decide(1, &Status::Exit(1), false, false, false).0);
    }

    #[test]
    fn bad_retry_specs_name_the_fix() {
        let mut p = RetryPolicy::default();
        assert!(p.add_spec("exit=x").unwrap_err().contains("0 to 255"));
        assert!(
            p.add_spec("signal=NOPE")
                .unwrap_err()
                .contains("signal name")
        );
        assert!(p.add_spec("oops").unwrap_err().contains("exit="));
        assert!(p.add_spec("output=(").unwrap_err().contains("bad regex"));
    }

    #[test]
    fn backoff_doubles_up_to_its_cap() {
        let p = policy(&[]);
        let secs: Vec<u64> = (1..=4).map(|r| p.backoff_for(r).as_secs()).collect();
        assert_eq!(secs, [1, 2, 3, 3]);
    }

    fn finish(last: Status, sigterm: bool, end: u64, deadline: Option<u64>) -> Finish {
        Finish {
            last,
            sigterm,
            end: at(end),
            deadline: deadline.map(at),
        }
    }

    #[test]
    fn outcomes_follow_the_contract() {
        let ok = finish(Status::Exit(0), false, 10, Some(20));
        assert!(ok.wants_validation());
        assert_eq!(ok.outcome(None), Outcome::Accepted);
        assert_eq!(ok.outcome(Some(false)), Outcome::Failed);
        let late = finish(Status::Exit(0), false, 30, Some(20));
        assert!(!late.wants_validation());
        assert_eq!(late.outcome(None), Outcome::Timeout);
        let term = finish(Status::Exit(0), true, 10, None);
        assert_eq!(term.outcome(None), Outcome::Preempted);
        let term_late = finish(Status::Signal(15), true, 30, Some(20));
        assert_eq!(term_late.outcome(None), Outcome::Timeout);
        let oom = finish(Status::Signal(9), false, 10, None);
        assert_eq!(oom.outcome(None), Outcome::Killed);
        let bad = finish(Status::Exit(2), false, 10, None);
        assert_eq!(bad.outcome(None), Outcome::Failed);
    }
}
