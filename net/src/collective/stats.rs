//! Statistics for the collective: coefficient of variation, nccl-tests' bandwidths and robust
//! (median absolute deviation) outlier detection. Percentiles and the median are
//! [`fabric_base::stats`]'s.

use fabric_base::stats::median;

/// The arithmetic mean.
pub fn mean(samples: &[f64]) -> Option<f64> {
    (!samples.is_empty()).then(|| samples.iter().sum::<f64>() / samples.len() as f64)
}

/// Coefficient of variation: sample standard deviation over the mean (0 for one sample).
pub fn coefficient_of_variation(samples: &[f64]) -> Option<f64> {
    let m = mean(samples)?;
    if samples.len() < 2 || m == 0.0 {
        return Some(0.0);
    }
    let var = samples.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (samples.len() - 1) as f64;
    Some(var.sqrt() / m)
}

/// nccl-tests' algorithm bandwidth, `S / t`, in GB/s (10^9 bytes per second).
pub fn algbw_gb_s(bytes: u64, time_s: f64) -> f64 {
    if time_s <= 0.0 {
        return 0.0;
    }
    bytes as f64 / time_s / 1e9
}

/// nccl-tests' bus bandwidth for all-reduce: `algbw × 2(n−1)/n` (doc/PERFORMANCE.md).
pub fn allreduce_busbw_gb_s(algbw_gb_s: f64, ranks: usize) -> f64 {
    if ranks == 0 {
        return 0.0;
    }
    algbw_gb_s * 2.0 * (ranks as f64 - 1.0) / ranks as f64
}

/// Robust z-scores: `(x − median) / (1.4826 × MAD)`. With a MAD of zero every value off the
/// median scores ±infinity and the rest zero.
pub fn robust_z(values: &[f64]) -> Vec<f64> {
    let Some(med) = median(values) else {
        return Vec::new();
    };
    let dev: Vec<f64> = values.iter().map(|x| (x - med).abs()).collect();
    let mad = median(&dev).unwrap_or(0.0) * 1.4826;
    values
        .iter()
        .map(|x| {
            let d = x - med;
            if mad > 0.0 {
                d / mad
            } else if d == 0.0 {
                0.0
            } else {
                d.signum() * f64::INFINITY
            }
        })
        .collect()
}

/// The threshold on the robust z-score (Iglewicz and Hoaglin's 3.5).
pub const Z_THRESHOLD: f64 = 3.5;
/// Indices of values that are high outliers: robust z above [`Z_THRESHOLD`] *and* more than
/// `ratio` times the median (with four to eight peers the MAD itself is noisy, so a statistical
/// outlier that is only a little off is not called out). Fewer than three values give no
/// outliers: with two, nothing says which one is the odd one.
pub fn high_outliers(values: &[f64], ratio: f64) -> Vec<usize> {
    if values.len() < 3 {
        return Vec::new();
    }
    let med = median(values).unwrap_or(0.0);
    robust_z(values)
        .iter()
        .enumerate()
        .filter(|(i, z)| **z > Z_THRESHOLD && values[*i] > ratio * med)
        .map(|(i, _)| i)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busbw_uses_the_all_reduce_correction_factor() {
        // 8 ranks: 2*7/8 = 1.75 (nccl-tests doc/PERFORMANCE.md).
        assert!((allreduce_busbw_gb_s(10.0, 8) - 17.5).abs() < 1e-9);
        assert!((algbw_gb_s(2_000_000_000, 2.0) - 1.0).abs() < 1e-9);
    }

    #[test]
    fn coefficient_of_variation_of_constant_samples_is_zero() {
        assert_eq!(coefficient_of_variation(&[3.0, 3.0, 3.0]), Some(0.0));
        let cv = coefficient_of_variation(&[1.0, 3.0]).unwrap();
        assert!((cv - std::f64::consts::SQRT_2 / 2.0).abs() < 1e-9);
    }

    #[test]
    fn one_slow_value_among_four_is_the_only_outlier() {
        assert_eq!(high_outliers(&[1.0, 1.3, 0.9, 10.0], 2.0), vec![3]);
        assert_eq!(high_outliers(&[1.0, 1.0, 1.0, 10.0], 2.0), vec![3]);
    }

    #[test]
    fn a_little_noise_is_not_an_outlier() {
        assert!(high_outliers(&[1.0, 1.0, 1.0, 1.6], 2.0).is_empty());
        assert!(high_outliers(&[1.0, 1.2, 0.8, 1.1, 0.95], 2.0).is_empty());
    }

    #[test]
    fn two_values_never_have_an_outlier() {
        assert!(high_outliers(&[1.0, 100.0], 2.0).is_empty());
    }
}
