//! The numbers the soak publishes: a rate per 1,000 node-days and its exact (Garwood) one-sided
//! upper 95 % confidence bound for a Poisson count, and the Poisson draws the noise uses.

use rand::Rng;

/// The confidence of the published upper bound.
pub const CONFIDENCE: f64 = 0.95;

/// P(X ≤ k) for X ~ Poisson(`mean`), summed in log space so large counts do not overflow.
pub fn poisson_cdf(k: u64, mean: f64) -> f64 {
    if mean <= 0.0 {
        return 1.0;
    }
    let mut log_term = -mean;
    let mut sum = 0.0;
    for i in 0..=k {
        if i > 0 {
            log_term += mean.ln() - (i as f64).ln();
        }
        sum += log_term.exp();
    }
    sum.min(1.0)
}

/// The exact one-sided upper confidence bound on a Poisson mean after observing `count`
/// events: the mean `m` with P(X ≤ count | m) = 1 − `confidence`. This is Garwood's (1936)
/// chi-square form, χ²(confidence; 2·count + 2) / 2, found here by bisection on the Poisson
/// sum it equals. For `count` = 0 and 95 % it is −ln 0.05 ≈ 3.0 (the "rule of three").
pub fn poisson_upper(count: u64, confidence: f64) -> f64 {
    let alpha = 1.0 - confidence;
    let (mut lo, mut hi) = (count as f64, count as f64 * 2.0 + 10.0);
    while poisson_cdf(count, hi) > alpha {
        hi *= 2.0;
    }
    for _ in 0..200 {
        let mid = (lo + hi) / 2.0;
        if poisson_cdf(count, mid) > alpha {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    (lo + hi) / 2.0
}

/// `count` events in `node_days` as a rate per 1,000 node-days and its upper 95 % bound.
pub fn per_1000_node_days(count: u64, node_days: u64) -> (f64, f64) {
    if node_days == 0 {
        return (0.0, f64::INFINITY);
    }
    let scale = 1000.0 / node_days as f64;
    (
        count as f64 * scale,
        poisson_upper(count, CONFIDENCE) * scale,
    )
}

/// One draw of a Poisson count of mean `mean` (Knuth's product method for small means, a
/// rounded normal approximation above 30, where the difference is far below the noise model's
/// own uncertainty).
pub fn poisson(rng: &mut impl Rng, mean: f64) -> u64 {
    if mean <= 0.0 {
        return 0;
    }
    if mean > 30.0 {
        // Box-Muller.
        let u1: f64 = rng.random_range(f64::MIN_POSITIVE..1.0);
        let u2: f64 = rng.random();
        let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
        return (mean + z * mean.sqrt()).round().max(0.0) as u64;
    }
    let limit = (-mean).exp();
    let mut k = 0;
    let mut p: f64 = rng.random();
    while p > limit {
        k += 1;
        p *= rng.random::<f64>();
    }
    k
}

/// A draw log-uniform between `lo` and `hi` (both > 0): sizes spread over decades.
pub fn log_uniform(rng: &mut impl Rng, lo: f64, hi: f64) -> f64 {
    (lo.ln() + rng.random::<f64>() * (hi.ln() - lo.ln())).exp()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    /// One-sided 95 % upper limits of a Poisson mean (chi-square tables, e.g. Gehrels 1986,
    /// table 1, S = 1.645 column; or `scipy.stats.chi2.ppf(0.95, 2k+2) / 2`).
    const KNOWN: &[(u64, f64)] = &[
        (0, 2.9957),
        (1, 4.7439),
        (2, 6.2958),
        (3, 7.7537),
        (5, 10.5130),
        (10, 16.9622),
        (20, 29.0620),
    ];

    #[test]
    fn the_upper_bound_matches_the_chi_square_tables() {
        for &(k, want) in KNOWN {
            let got = poisson_upper(k, 0.95);
            assert!((got - want).abs() < 5e-4, "k={k}: {got} vs {want}");
        }
    }

    #[test]
    fn no_event_in_ten_thousand_node_days_bounds_the_rate_at_three_tenths() {
        let (rate, upper) = per_1000_node_days(0, 10_000);
        assert_eq!(rate, 0.0);
        assert!((upper - 0.29957).abs() < 1e-4, "{upper}");
    }

    #[test]
    fn poisson_draws_have_the_mean_they_were_asked_for() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
        for mean in [0.3, 4.0, 200.0] {
            let n = 20_000;
            let sum: u64 = (0..n).map(|_| poisson(&mut rng, mean)).sum();
            let got = sum as f64 / n as f64;
            assert!((got - mean).abs() < 0.05 * mean + 0.02, "{mean}: {got}");
        }
    }
}
