//! Samples stored as `f32` read as the decimals they were written as: a leaf that the
//! aggregate and the ETT figures both use.

/// An `f32` sample as the `f64` of its shortest decimal form, so that a step time stored as
/// `1.2f32` reports as `1.2`, not as `1.2000000476837158` (its exact binary value).
pub fn widen(x: f32) -> f64 {
    x.to_string().parse().unwrap_or(f64::from(x))
}
