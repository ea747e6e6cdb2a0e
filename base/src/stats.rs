//! The one percentile and the one median of the whole project (probe latencies, the collective's
//! figures, `fabric-run` step times, `report`, `accept`).
//!
//! The convention is **linear interpolation between closest ranks**: the `p`-th percentile of `n`
//! sorted values sits at rank `h = p/100 × (n − 1)` (0-based) and is `x[⌊h⌋] + (h − ⌊h⌋) ×
//! (x[⌊h⌋+1] − x[⌊h⌋])`. It is numpy's and pandas' default (`numpy.percentile`, method
//! `linear`; R's type 7; a spreadsheet's `PERCENTILE.INC`), so anyone can check a figure with the
//! tool at hand; the 0th percentile is the minimum, the 100th the maximum, and the 50th is the
//! usual median (the middle value, or the mean of the two middle ones), so [`median`] is
//! [`percentile`] at 50 and not a second definition. Values that are not finite (NaN, ±∞) are not
//! measurements and are left out; with none left there is no percentile (`None`).

/// The `p`-th percentile (0–100, clamped) of `samples` in any order; `None` when no finite
/// sample is left or `p` is NaN.
pub fn percentile(samples: &[f64], p: f64) -> Option<f64> {
    let mut s: Vec<f64> = samples.iter().copied().filter(|x| x.is_finite()).collect();
    s.sort_by(f64::total_cmp);
    percentile_of_sorted(&s, p)
}

/// [`percentile`] of values already sorted in ascending order and all finite (not checked: the
/// caller sorted them, typically to take several percentiles of one sample).
pub fn percentile_of_sorted(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() || p.is_nan() {
        return None;
    }
    let h = p.clamp(0.0, 100.0) / 100.0 * (sorted.len() - 1) as f64;
    let lo = h.floor() as usize;
    let hi = (lo + 1).min(sorted.len() - 1);
    let (a, b, w) = (sorted[lo], sorted[hi], h - lo as f64);
    // Written so that the midpoint is exactly (a + b) / 2 and equal neighbours give themselves.
    Some(if w == 0.0 || a == b {
        a
    } else {
        a * (1.0 - w) + b * w
    })
}

/// The median: [`percentile`] at 50 (the middle value, or the mean of the two middle ones).
pub fn median(samples: &[f64]) -> Option<f64> {
    percentile(samples, 50.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: Option<f64>, b: f64) -> bool {
        a.is_some_and(|a| (a - b).abs() < 1e-9)
    }

    #[test]
    fn percentiles_interpolate_between_closest_ranks_as_numpy_does() {
        let s: Vec<f64> = (1..=100).map(f64::from).collect();
        // numpy.percentile(range(1, 101), [0, 50, 95, 99, 100])
        assert_eq!(percentile(&s, 0.0), Some(1.0));
        assert_eq!(percentile(&s, 50.0), Some(50.5));
        assert!(close(percentile(&s, 95.0), 95.05));
        assert!(close(percentile(&s, 99.0), 99.01));
        assert_eq!(percentile(&s, 100.0), Some(100.0));
        // numpy.percentile([3, 1, 2, 10], 75) == 4.75
        assert_eq!(percentile(&[3.0, 1.0, 2.0, 10.0], 75.0), Some(4.75));
        assert_eq!(percentile(&[7.0], 99.0), Some(7.0));
    }

    #[test]
    fn the_median_is_the_middle_value_or_the_mean_of_the_two_middle_ones() {
        assert_eq!(median(&[5.0, 1.0, 3.0]), Some(3.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[0.1, 0.2]), Some((0.1 + 0.2) / 2.0));
        assert_eq!(median(&[2.0, 2.0]), Some(2.0));
    }

    #[test]
    fn no_finite_sample_gives_no_percentile() {
        assert_eq!(percentile(&[], 50.0), None);
        assert_eq!(median(&[f64::NAN, f64::INFINITY]), None);
        assert_eq!(median(&[f64::NAN, 4.0, f64::NEG_INFINITY]), Some(4.0));
        assert_eq!(percentile(&[1.0, 2.0], f64::NAN), None);
        assert_eq!(percentile(&[1.0, 2.0], 250.0), Some(2.0));
        assert_eq!(percentile(&[1.0, 2.0], -5.0), Some(1.0));
    }

    #[test]
    fn percentiles_never_fall_outside_their_neighbours() {
        let s = [0.1, 0.3, 0.3, 0.7, 1e9];
        let mut last = f64::NEG_INFINITY;
        for p in 0..=100 {
            let v = percentile_of_sorted(&s, f64::from(p)).unwrap();
            assert!(v >= last, "p{p}: {v} < {last}");
            assert!((0.1..=1e9).contains(&v));
            last = v;
        }
    }
}
