//! Slurm's "not set" and "unlimited" sentinels (`slurm.h`), which `sacct` prints as numbers
//! where a value was never set: a job that never started has `time/start` = `NO_VAL`.
//!
//! Every reader maps them to 0, the records' "not set" (a start of 0 is no start, a TRES count
//! of 0 no GPUs), so no sentinel is ever read as a time, a count or a duration.

/// `NO_VAL`: a 32-bit value not set.
pub const NO_VAL: u64 = 0xffff_fffe;
/// `INFINITE`: a 32-bit value without limit.
pub const INFINITE: u64 = 0xffff_ffff;
/// `NO_VAL16`: a 16-bit value not set.
pub const NO_VAL16: u64 = 0xfffe;
/// `INFINITE16`: a 16-bit value without limit.
pub const INFINITE16: u64 = 0xffff;
/// `NO_VAL64`: a 64-bit value not set.
pub const NO_VAL64: u64 = 0xffff_ffff_ffff_fffe;
/// `INFINITE64`: a 64-bit value without limit.
pub const INFINITE64: u64 = 0xffff_ffff_ffff_ffff;

/// Whether a 32- or 64-bit field's value is one of Slurm's sentinels rather than a value.
pub fn is_sentinel(v: u64) -> bool {
    matches!(v, NO_VAL | INFINITE | NO_VAL64 | INFINITE64)
}

/// A 32- or 64-bit field's value, 0 where it is a sentinel (or does not fit an `i64`).
pub fn value(v: u64) -> i64 {
    if is_sentinel(v) {
        0
    } else {
        i64::try_from(v).unwrap_or(0)
    }
}

/// A 16-bit field's value (`restart_cnt`), 0 where it is `NO_VAL16`/`INFINITE16` or a 32- or
/// 64-bit sentinel.
pub fn value16(v: i64) -> i64 {
    match u64::try_from(v) {
        Ok(NO_VAL16 | INFINITE16) => 0,
        Ok(u) => value(u),
        Err(_) => v,
    }
}

/// Unix seconds, a count or a duration from `sacct -P` text: `None` where the text is not a
/// whole number; `Some(0)` for a sentinel.
pub fn text_number(s: &str) -> Option<i64> {
    match s.parse::<u64>() {
        Ok(u) => Some(value(u)),
        Err(_) => s.parse::<i64>().ok(),
    }
}
