//! Slow steps as evidence: a step-time regression within the run, judged live.
//!
//! The median of the last `window` step times is compared with the median of every step time
//! of the run so far; above `factor` times it, the run is in a *slow episode*, flagged once when
//! it starts and again only after the window's median has come back to or below the threshold.
//! Nothing is judged before `2 × window` step times were seen (the run's median needs a
//! history), nor while the run's median is under [`MIN_JUDGED_S`] (a child that block-buffers
//! its output prints its steps in bursts, whose "times" are near zero and mean nothing).
//!
//! Memory is bounded whatever the run's length: the window holds `window` times, and the run's
//! median comes from a log-scale histogram (buckets 1 % wide from 1 µs to 10⁷ s, about 24 KiB),
//! so it is exact to within 1 %.

use std::collections::VecDeque;

/// `--slow-step-window` default (the CLI's literal; a test checks they agree).
#[cfg_attr(not(test), allow(dead_code))]
pub const DEFAULT_WINDOW: u32 = 20;

/// `--slow-step-factor` default (the CLI's literal; a test checks they agree).
#[cfg_attr(not(test), allow(dead_code))]
pub const DEFAULT_FACTOR: f64 = 1.5;

/// Below this run median (seconds) nothing is judged.
pub const MIN_JUDGED_S: f64 = 0.001;

/// The largest `--slow-step-window`.
pub const MAX_WINDOW: u32 = 100_000;

/// Histogram: the lowest bucket's lower edge, the bucket ratio, and the bucket count (up to
/// 10⁷ s; longer times land in the last bucket).
const LOW_S: f64 = 1e-6;
const RATIO: f64 = 1.01;
const BUCKETS: usize = 3010;

/// A flagged regression: what the `slow_steps` record carries.
#[derive(Debug, Clone, PartialEq)]
pub struct Regression {
    /// Median of the last `window` step times, seconds.
    pub window_median_s: f64,
    /// Median of the run's step times so far, seconds (to within 1 %).
    pub run_median_s: f64,
    /// The factor the window's median exceeded.
    pub factor: f64,
    /// The window's length, steps.
    pub window: u32,
    /// Step times seen so far.
    pub steps: u64,
}

impl Regression {
    /// The one line printed on stderr.
    pub fn summary(&self) -> String {
        format!(
            "fabric-run: slow steps: the median of the last {} steps, {:.3}s, is over {} x this \
             run's median of {:.3}s ({} steps so far); evidence only, nothing is drained",
            self.window, self.window_median_s, self.factor, self.run_median_s, self.steps
        )
    }
}

/// Counts of step times in log-scale buckets; allocated at the first time.
#[derive(Debug, Default)]
struct LogHistogram {
    counts: Vec<u64>,
    n: u64,
}

impl LogHistogram {
    fn bucket(x: f64) -> usize {
        if x <= LOW_S {
            return 0;
        }
        let i = ((x / LOW_S).ln() / RATIO.ln()).floor();
        (i as usize).min(BUCKETS - 1)
    }

    /// The bucket's geometric middle.
    fn value(i: usize) -> f64 {
        LOW_S * RATIO.powf(i as f64 + 0.5)
    }

    fn add(&mut self, x: f64) {
        if self.counts.is_empty() {
            self.counts = vec![0; BUCKETS];
        }
        self.counts[Self::bucket(x)] += 1;
        self.n += 1;
    }

    /// The value of the `k`-th smallest time (1-based).
    fn nth(&self, k: u64) -> f64 {
        let mut seen = 0;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= k {
                return Self::value(i);
            }
        }
        Self::value(BUCKETS - 1)
    }

    fn median(&self) -> Option<f64> {
        match self.n {
            0 => None,
            n if n % 2 == 1 => Some(self.nth(n / 2 + 1)),
            n => Some((self.nth(n / 2) + self.nth(n / 2 + 1)) / 2.0),
        }
    }
}

fn median(xs: &VecDeque<f64>) -> Option<f64> {
    let mut v: Vec<f64> = xs.iter().copied().collect();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => None,
        n if n % 2 == 1 => Some(v[n / 2]),
        n => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
    }
}

/// The detector: feed it each step time, in order.
#[derive(Debug)]
pub struct SlowSteps {
    window: usize,
    factor: f64,
    recent: VecDeque<f64>,
    all: LogHistogram,
    steps: u64,
    slow: bool,
}

impl SlowSteps {
    /// A detector over the last `window` steps and `factor`; `None` when `window` is 0 (off).
    pub fn new(window: u32, factor: f64) -> Option<Self> {
        (window > 0).then(|| Self {
            window: window as usize,
            factor,
            recent: VecDeque::with_capacity(window as usize),
            all: LogHistogram::default(),
            steps: 0,
            slow: false,
        })
    }

    /// One more step time (seconds); `Some` when it starts a slow episode. Times that are not
    /// finite or are negative are ignored.
    pub fn observe(&mut self, step_s: f64) -> Option<Regression> {
        if !step_s.is_finite() || step_s < 0.0 {
            return None;
        }
        self.steps += 1;
        self.all.add(step_s);
        if self.recent.len() == self.window {
            self.recent.pop_front();
        }
        self.recent.push_back(step_s);
        if self.steps < 2 * self.window as u64 {
            return None;
        }
        let run_median_s = self.all.median()?;
        if run_median_s < MIN_JUDGED_S {
            return None;
        }
        let window_median_s = median(&self.recent)?;
        let over = window_median_s > self.factor * run_median_s;
        let starts = over && !self.slow;
        self.slow = over;
        starts.then_some(Regression {
            window_median_s,
            run_median_s,
            factor: self.factor,
            window: self.window as u32,
            steps: self.steps,
        })
    }
}

/// Checks `--slow-step-window` and `--slow-step-factor`.
pub fn check_options(window: u32, factor: f64) -> Result<(), String> {
    if window > MAX_WINDOW {
        return Err(format!(
            "--slow-step-window {window}: at most {MAX_WINDOW} steps (0 turns the detector off)"
        ));
    }
    if !factor.is_finite() || factor <= 1.0 {
        return Err(format!(
            "--slow-step-factor {factor}: a number over 1 (e.g. 1.5: the recent steps' median \
             is over 1.5 x the run's)"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A deterministic jitter in [-1, 1] (an LCG), so that the series are noisy but repeatable.
    fn jitter(state: &mut u64) -> f64 {
        *state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((*state >> 33) as f64 / (1u64 << 31) as f64) * 2.0 - 1.0
    }

    /// Feeds `xs`, returning the 0-based indexes at which an episode was flagged.
    fn flags(d: &mut SlowSteps, xs: &[f64]) -> Vec<usize> {
        xs.iter()
            .enumerate()
            .filter_map(|(i, x)| d.observe(*x).map(|_| i))
            .collect()
    }

    fn noisy(n: usize, mean: f64, spread: f64, seed: u64) -> Vec<f64> {
        let mut s = seed;
        (0..n)
            .map(|_| mean * (1.0 + spread * jitter(&mut s)))
            .collect()
    }

    #[test]
    fn a_regression_is_flagged_once_when_the_windows_median_crosses_and_again_only_after_recovery()
    {
        let mut d = SlowSteps::new(20, 1.5).unwrap();
        let mut xs = noisy(200, 1.0, 0.2, 7);
        xs.extend(noisy(60, 3.0, 0.1, 8)); // steps 200..260: three times as slow
        xs.extend(noisy(100, 1.0, 0.2, 9)); // recovered
        xs.extend(noisy(40, 3.0, 0.1, 10)); // slow again
        let at = flags(&mut d, &xs);
        // The window's median (of 20: the mean of its 10th and 11th) passes 1.5 x the run's
        // once half the window is slow: the 10th slow step (index 209); while the episode lasts
        // nothing more; the second episode likewise (index 369).
        assert_eq!(at, [209, 369], "flagged at {at:?}");
    }

    #[test]
    fn the_flag_carries_the_window_and_run_medians() {
        let mut d = SlowSteps::new(4, 1.5).unwrap();
        let mut last = None;
        for x in [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 4.0, 4.0, 4.0] {
            last = d.observe(x).or(last);
        }
        let r = last.expect("flagged");
        assert_eq!(r.window_median_s, 2.5, "the median of 1, 1, 4, 4");
        assert!((r.run_median_s - 1.0).abs() < 0.01, "{r:?}");
        assert_eq!((r.window, r.steps, r.factor), (4, 10, 1.5));
        assert!(r.summary().contains("last 4 steps"), "{}", r.summary());
    }

    #[test]
    fn noise_and_lone_spikes_are_never_flagged() {
        let mut d = SlowSteps::new(20, 1.5).unwrap();
        let mut xs = noisy(5000, 1.0, 0.35, 11);
        for i in (50..5000).step_by(37) {
            xs[i] = 10.0; // a lone slow step (a checkpoint not subtracted, a GC pause)
        }
        assert_eq!(flags(&mut d, &xs), Vec::<usize>::new());
    }

    #[test]
    fn nothing_is_judged_before_twice_the_window_nor_on_bursts_of_zero_times() {
        let mut d = SlowSteps::new(20, 1.5).unwrap();
        let mut xs = vec![1.0; 25];
        xs.extend([5.0; 14]); // 39 steps: slow from the start of the window, still too early
        assert_eq!(flags(&mut d, &xs), Vec::<usize>::new());
        let mut burst = SlowSteps::new(5, 1.5).unwrap();
        let mut ys = vec![0.0; 40];
        ys.extend([0.5; 10]);
        assert_eq!(flags(&mut burst, &ys), Vec::<usize>::new());
        assert!(SlowSteps::new(0, 1.5).is_none(), "a window of 0 is off");
    }

    #[test]
    fn the_histogram_median_is_within_one_percent() {
        let mut h = LogHistogram::default();
        let xs: VecDeque<f64> = noisy(999, 0.25, 0.5, 3).into();
        for x in &xs {
            h.add(*x);
        }
        let (a, b) = (h.median().unwrap(), median(&xs).unwrap());
        assert!((a / b - 1.0).abs() < 0.01, "{a} vs {b}");
        h.add(1e12);
        h.add(0.0);
        assert!(h.median().unwrap().is_finite());
    }

    #[test]
    fn options_out_of_range_are_refused_with_the_flag_named() {
        assert!(check_options(20, 1.5).is_ok());
        assert!(check_options(0, 1.5).is_ok());
        for (w, f) in [(20, 1.0), (20, 0.5), (20, f64::NAN), (MAX_WINDOW + 1, 2.0)] {
            let e = check_options(w, f).unwrap_err();
            assert!(e.starts_with("--slow-step-"), "{e}");
        }
    }
}
