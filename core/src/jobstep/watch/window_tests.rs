//! The watch's sliding hour and its in-place reads of warn-bound counters, on a fixture tree
//! and an emulated clock: the prolog's snapshot is dated where the test says, and every sample
//! is dated by the clock the test moves.
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::vitals::WARN_EVERY;
use super::window::{Clock, MAX_ENTRIES};
use super::{QuickSampler, Sample, Sampler};
use crate::config::Config;
use crate::probe::gather::Roots;
use crate::probe::{Baseline, ProbeInput, RunWith, SCHEMA};
use fabric_proto::verdict::Severity;

/// The prolog's time on the emulated clock.
const PROLOG_MS: u64 = 1_800_000_000_000;
const MIN_S: u64 = 60;
const HOUR_S: u64 = 3600;
const DAY_S: u64 = 86_400;
/// The storm of the issue: 1,440 `symbol_error`s an hour (bound: 120/h), 24 a minute.
const STORM_PER_HOUR: u64 = 1440;
/// The time the storm takes to pass one hour's allowance of 120: 121 errors at 0.4 a second.
const STORM_FOUND_BY_S: u64 = 121 * HOUR_S / STORM_PER_HOUR + 1;

/// A healthy 8-HCA node whose job's prolog took its snapshot at [`PROLOG_MS`], watched by a
/// [`QuickSampler`] on an emulated clock.
struct Node {
    _dir: tempfile::TempDir,
    root: PathBuf,
    now_ms: Arc<AtomicU64>,
    sampler: QuickSampler,
}

impl Node {
    fn new() -> Self {
        Self::with_tree(|_| {})
    }

    /// A node whose tree `edit` changes before the prolog's snapshot.
    fn with_tree(edit: impl FnOnce(&std::path::Path)) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("sysfs");
        fabric_testkit::sysfs::write("ib8-healthy", &root).unwrap();
        edit(&root);
        let mut input = ProbeInput {
            node: "n1".into(),
            roots: Roots::for_sysfs(root.clone(), dir.path().join("proc"), None),
            expect: Config::default().for_node("n1"),
            baseline: None,
            bom_pin: None,
            known: None,
            second_look: None,
        };
        let prolog = crate::probe::run_with(
            &input,
            RunWith {
                taken_unix_ms: Some(PROLOG_MS),
                rate_window: None,
            },
        );
        input.baseline = Some(Baseline {
            schema: SCHEMA.into(),
            node: "n1".into(),
            counters: prolog.counters,
            inventory: Some(prolog.inventory),
        });
        let now_ms = Arc::new(AtomicU64::new(PROLOG_MS));
        let sampler = QuickSampler::new(input).on_clock(Clock::Emulated(now_ms.clone()));
        Self {
            _dir: dir,
            root,
            now_ms,
            sampler,
        }
    }

    /// The same node, its job's start dated back `age_s` as a fault drill's file does.
    fn dated_back(self, age_s: u64) -> Self {
        Self {
            sampler: self.sampler.dated_back(age_s),
            ..self
        }
    }

    /// Seconds since the prolog.
    fn job_age_s(&self) -> u64 {
        (self.now_ms.load(Ordering::Relaxed) - PROLOG_MS) / 1000
    }

    fn counter_path(&self, dev: &str, name: &str) -> PathBuf {
        self.root
            .join("class/infiniband")
            .join(dev)
            .join("ports/1/counters")
            .join(name)
    }

    fn counter(&self, dev: &str, name: &str) -> u64 {
        std::fs::read_to_string(self.counter_path(dev, name))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }

    /// Writes a counter in place, as the driver does.
    fn set_counter(&self, dev: &str, name: &str, v: u64) {
        if self.counter(dev, name) != v {
            std::fs::write(self.counter_path(dev, name), format!("{v}\n")).unwrap();
        }
    }

    /// Moves the clock on `step_s` and takes one sample.
    fn sample_after(&mut self, step_s: u64) -> Option<Sample> {
        self.now_ms.fetch_add(step_s * 1000, Ordering::Relaxed);
        self.sampler.sample()
    }

    /// Samples until the job is `age_s` old, a sample every `step_s`; whether any sample
    /// failed `ib.counters`.
    fn run_until(&mut self, age_s: u64, step_s: u64) -> bool {
        let mut failed = false;
        while self.job_age_s() < age_s {
            let step = step_s.min(age_s - self.job_age_s());
            failed |= self
                .sample_after(step)
                .is_some_and(|s| has(&s, Severity::Fail));
        }
        failed
    }
}

/// Whether a sample has an `ib.counters` finding of `severity`.
fn has(s: &Sample, severity: Severity) -> bool {
    s.report
        .findings
        .iter()
        .any(|f| f.check == "ib.counters" && f.severity == severity)
}

/// A job whose node is quiet until `storm_at_s` into it, then sees the storm on mlx5_1, sampled
/// every second as the watch does: how many seconds into the storm its first `fail` came, if it
/// came within `give_up_s`. Before the storm the clock moves a minute a sample (the full sample
/// then comes every hour: what matters is that the ring is filled as the sampler fills it).
fn storm_found_after_s(node: &mut Node, storm_at_s: u64, give_up_s: u64) -> Option<u64> {
    assert!(!node.run_until(storm_at_s, MIN_S), "quiet before the storm");
    let before = node.counter("mlx5_1", "symbol_error");
    for s in 1..=give_up_s {
        node.set_counter(
            "mlx5_1",
            "symbol_error",
            before + s * STORM_PER_HOUR / HOUR_S,
        );
        if node
            .sample_after(1)
            .is_some_and(|x| has(&x, Severity::Fail))
        {
            return Some(s);
        }
    }
    None
}

#[test]
fn a_symbol_error_storm_23_hours_into_a_day_old_job_is_found_as_fast_as_one_a_minute_in() {
    let give_up_s = 15 * MIN_S;
    let early = storm_found_after_s(&mut Node::new(), MIN_S, give_up_s);
    let late = storm_found_after_s(&mut Node::new(), 23 * HOUR_S, give_up_s);
    let early = early.expect("a storm one minute in is found");
    assert!(early <= STORM_FOUND_BY_S, "{early} s");
    // Over the job window, 23 h allow 2,760 errors: the storm was found after two hours.
    assert_eq!(
        late,
        Some(early),
        "the late storm within {give_up_s} s, at the same time as the early one"
    );
}

#[test]
fn a_single_symbol_error_never_fails_early_or_late_in_a_job() {
    for at_s in [MIN_S, 23 * HOUR_S] {
        let mut node = Node::new();
        assert!(!node.run_until(at_s, MIN_S));
        let v = node.counter("mlx5_1", "symbol_error");
        node.set_counter("mlx5_1", "symbol_error", v + 1);
        assert!(
            !node.run_until(at_s + 2 * HOUR_S, 10),
            "one error {at_s} s into the job"
        );
    }
}

#[test]
fn bursts_above_the_floor_that_stay_under_the_bound_over_any_sliding_hour_never_fail() {
    // 100 errors in a second (a rate far above 120/h, were it scaled to the burst's length),
    // every 62 minutes: never more than 100 in any hour. A sample every 10 s.
    let mut node = Node::new();
    for burst in 0..4 {
        assert!(!node.run_until(5 * MIN_S + burst * 62 * MIN_S, 10));
        let v = node.counter("mlx5_1", "symbol_error");
        node.set_counter("mlx5_1", "symbol_error", v + 100);
    }
    // Over the job window the second burst failed: 200 errors in 67 minutes, 134 allowed.
    assert!(!node.run_until(4 * HOUR_S, 10), "never a fail");
}

#[test]
fn a_counter_reset_mid_window_is_not_a_storm_and_does_not_hide_one() {
    let mut node = Node::with_tree(|root| {
        let at = root.join("class/infiniband/mlx5_1/ports/1/counters/symbol_error");
        std::fs::write(at, "5000\n").unwrap();
    });
    let reset_at_s = 23 * HOUR_S + 30 * MIN_S;
    assert!(!node.run_until(reset_at_s, MIN_S));
    // Counters cleared (perfquery -R) half-way through a sliding hour whose start saw 5000.
    node.set_counter("mlx5_1", "symbol_error", 0);
    let reset = node.sample_after(1).expect("a counter changed");
    assert!(!has(&reset, Severity::Fail), "{:?}", reset.report.findings);
    assert!(has(&reset, Severity::Info), "the reset is said");
    // A storm that starts a few minutes after the reset is found as soon as on a fresh job.
    let found = storm_found_after_s(&mut node, reset_at_s + 3 * MIN_S, 15 * MIN_S);
    assert!(
        found.is_some_and(|s| s <= STORM_FOUND_BY_S),
        "the storm after the reset: {found:?}"
    );
}

#[test]
fn a_warn_bound_counter_rise_is_a_watch_warn_within_seconds_not_at_the_next_full_sample() {
    // link_error_recovery: warn above 10/h, no fail bound.
    let mut node = Node::new();
    assert!(!node.run_until(2 * HOUR_S, MIN_S));
    // Past the full sample that may be due now.
    assert!(
        (0..2).any(|_| node.sample_after(1).is_none()),
        "quick samples"
    );
    let v = node.counter("mlx5_2", "link_error_recovery");
    node.set_counter("mlx5_2", "link_error_recovery", v + 10);
    assert!(
        (0..2 * WARN_EVERY).all(|_| node.sample_after(1).is_none()),
        "a rise within the bound costs no full sample"
    );
    node.set_counter("mlx5_2", "link_error_recovery", v + 11);
    let next = (0..WARN_EVERY)
        .find_map(|_| node.sample_after(1))
        .expect("the rise past the bound is seen within a turn of reads, not a minute later");
    assert!(has(&next, Severity::Warn), "{:?}", next.report.findings);
    assert!(!has(&next, Severity::Fail));
}

#[test]
fn the_watchs_ring_stays_bounded_over_48_hours_of_samples() {
    let mut node = Node::new();
    let mut most = 0;
    // A full sample every 10 minutes (an error each time, 6/h, makes each one full; a sample a
    // minute would gather 2,880 times): an entry each, the hour's worth kept.
    for step in 1..=48 * 6 {
        node.set_counter("mlx5_0", "symbol_error", step);
        node.sample_after(10 * MIN_S).expect("a counter changed");
        most = most.max(node.sampler.window_entries());
    }
    assert!(
        most <= 6 + 2,
        "{most} entries for an hour of 10-minute samples"
    );
    assert!(node.sampler.window_entries() >= 6);
    assert!(most <= MAX_ENTRIES);
}

#[test]
fn a_link_downed_stays_a_failure_after_the_hour_slides_past_it() {
    // A `*_delta` bound is judged over the whole job, not over the sliding hour.
    let mut node = Node::new();
    assert!(!node.run_until(HOUR_S, MIN_S));
    let v = node.counter("mlx5_3", "link_downed");
    node.set_counter("mlx5_3", "link_downed", v + 1);
    assert!(
        node.sample_after(1)
            .is_some_and(|s| has(&s, Severity::Fail))
    );
    let mut last = None;
    while node.job_age_s() < 3 * HOUR_S {
        if let Some(s) = node.sample_after(MIN_S) {
            last = Some(s);
        }
    }
    let last = last.expect("full samples every hour");
    assert!(has(&last, Severity::Fail), "{:?}", last.report.findings);
}

/// The `ib.counters` failure of a sample, if any.
fn counter_failure(s: &Sample) -> Option<&fabric_proto::verdict::Finding> {
    s.report
        .findings
        .iter()
        .find(|f| f.check == "ib.counters" && f.severity == Severity::Fail)
}

#[test]
fn a_symbol_error_storm_in_a_job_dated_back_a_day_is_found_as_fast_as_in_a_fresh_job() {
    let give_up_s = 15 * MIN_S;
    let fresh = storm_found_after_s(&mut Node::new(), MIN_S, give_up_s);
    let day_old = storm_found_after_s(&mut Node::new().dated_back(DAY_S), MIN_S, give_up_s);
    let fresh = fresh.expect("a storm one minute in is found");
    assert!(fresh <= STORM_FOUND_BY_S, "{fresh} s");
    // Judged over the dated-back job window, a day allows 2,880 errors: two hours of storm.
    assert_eq!(day_old, Some(fresh), "the dated-back job's storm, as fast");
}

#[test]
fn a_drills_error_jump_in_a_job_dated_back_a_day_fails_at_the_next_sample_over_the_sliding_hour() {
    // `error_counters`: symbol_error +500 at once, 20 s into the job as the watch sees it
    // 86,420 s.
    let mut node = Node::new().dated_back(DAY_S);
    assert!(!node.run_until(20, 1), "quiet before the jump");
    let v = node.counter("mlx5_1", "symbol_error");
    node.set_counter("mlx5_1", "symbol_error", v + 500);
    let s = node
        .sample_after(1)
        .expect("a counter that can fail changed");
    let f = counter_failure(&s).expect("a fail at the next sample");
    assert!(
        f.message.contains("symbol_error rose by 500")
            && f.message.contains("over the sliding hour"),
        "{}",
        f.message
    );
    let elapsed_s = f.observed["elapsed_s"].as_f64().unwrap();
    assert!(
        elapsed_s < 60.0,
        "judged since the snapshot as taken, not over the dated-back day: {elapsed_s} s"
    );
}

#[test]
fn a_storm_already_there_at_the_first_sample_of_a_dated_back_job_is_found_at_that_sample() {
    // Had the sliding hour started at the dated-back snapshot, the first sample would allow a
    // day's 2,880 errors, and the next one would start its window past the storm.
    let mut node = Node::new().dated_back(DAY_S);
    let v = node.counter("mlx5_1", "symbol_error");
    node.set_counter("mlx5_1", "symbol_error", v + 200);
    let first = node
        .sample_after(1)
        .expect("the first sample is a full one");
    assert!(
        counter_failure(&first).is_some(),
        "{:?}",
        first.report.findings
    );
}

#[test]
fn the_dated_back_day_of_silence_is_no_finding_and_one_error_or_a_burst_within_the_bound_are_none()
{
    let mut node = Node::new().dated_back(DAY_S);
    let mut any = Vec::new();
    let mut run = |node: &mut Node, until_s: u64| {
        while node.job_age_s() < until_s {
            if let Some(s) = node.sample_after(10) {
                any.extend(
                    s.report
                        .findings
                        .iter()
                        .filter(|f| f.severity >= Severity::Warn)
                        .cloned(),
                );
            }
        }
    };
    run(&mut node, 10 * MIN_S);
    let v = node.counter("mlx5_1", "symbol_error");
    node.set_counter("mlx5_1", "symbol_error", v + 1);
    run(&mut node, HOUR_S);
    // 100 errors in a second, under the hour's 120 with the one before.
    node.set_counter("mlx5_1", "symbol_error", v + 101);
    run(&mut node, 3 * HOUR_S);
    assert!(any.is_empty(), "{any:?}");
}

#[test]
fn a_link_downed_in_a_dated_back_job_is_a_failure_over_the_whole_job() {
    let mut node = Node::new().dated_back(DAY_S);
    assert!(!node.run_until(2 * HOUR_S, MIN_S));
    let v = node.counter("mlx5_3", "link_downed");
    node.set_counter("mlx5_3", "link_downed", v + 1);
    let s = node
        .sample_after(1)
        .expect("a counter that can fail changed");
    let f = counter_failure(&s).expect("link_downed: any rise fails");
    assert!(f.message.contains("link_downed rose by 1"), "{}", f.message);
}
