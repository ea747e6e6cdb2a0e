//! The all-reduce's data: each rank's input, a small-integer pattern whose float sums are exact,
//! and the check of every reduced element against the exact sum (`#wrong`).

/// The input of rank `rank` at element `i` in iteration `iter`: a small integer, so sums of up
/// to thousands of ranks are exact in f32.
pub fn input_value(rank: usize, i: usize, iter: u32) -> f32 {
    ((((rank as u64 + u64::from(iter)) % 7) + 1) * (i as u64 % 251 + 1)) as f32
}

/// The period of the input pattern: element `i` carries `i % INPUT_PERIOD + 1` times a rank's
/// coefficient.
pub(super) const INPUT_PERIOD: usize = 251;

/// `1.0, 2.0, …, 251.0`: one period of the input pattern.
pub(super) fn input_pattern() -> &'static [f32; INPUT_PERIOD] {
    static PATTERN: std::sync::OnceLock<[f32; INPUT_PERIOD]> = std::sync::OnceLock::new();
    PATTERN.get_or_init(|| std::array::from_fn(|i| (i + 1) as f32))
}

pub(super) fn rank_coefficient(rank: usize, iter: u32) -> f32 {
    (((rank as u64 + u64::from(iter)) % 7) + 1) as f32
}

/// Fills `out` with `count` inputs of `rank` in iteration `iter` (the values of
/// [`input_value`], period by period, with no division per element: the fill runs between
/// timed iterations on cores the other ranks may share).
pub fn fill_input(out: &mut Vec<f32>, count: usize, rank: usize, iter: u32) {
    let c = rank_coefficient(rank, iter);
    let pattern = input_pattern();
    out.clear();
    out.reserve(count);
    let mut left = count;
    while left > 0 {
        let k = left.min(INPUT_PERIOD);
        out.extend(pattern[..k].iter().map(|p| c * p));
        left -= k;
    }
}

/// How many elements of a reduced buffer differ from the exact sum `coef * (i % 251 + 1)`
/// (nccl-tests' `#wrong`).
pub fn count_wrong(data: &[f32], coef: f32) -> u64 {
    let pattern = input_pattern();
    data.chunks(INPUT_PERIOD)
        .map(|chunk| {
            let differ: u32 = chunk
                .iter()
                .zip(pattern.iter())
                .map(|(v, p)| u32::from(*v != coef * *p))
                .sum();
            u64::from(differ)
        })
        .sum()
}

pub(crate) fn expected_coefficient(ranks: &[usize], iter: u32) -> f32 {
    ranks
        .iter()
        .map(|r| ((*r as u64 + u64::from(iter)) % 7) + 1)
        .sum::<u64>() as f32
}
