//! The values of a `sacct -P` line that need more than a number parse: times (Unix seconds or
//! `YYYY-MM-DDTHH:MM:SS`, taken as UTC), `Elapsed` (`[D-]HH:MM:SS`) and GPUs from `AllocGRES`.

/// GPUs from `AllocGRES` as older Slurm prints it: `gpu:4`, `gpu:a100:4`, `gpu:a100:4(IDX:0-3)`,
/// several entries comma-separated; `None` when no entry is a GPU. An untyped `gpu:N` is the
/// total (typed entries beside it count the same GPUs, as in [`gpus_from_tres`]); otherwise
/// the typed entries add up.
///
/// [`gpus_from_tres`]: super::super::gpus_from_tres
pub fn gpus_from_gres(gres: &str) -> Option<u32> {
    let mut typed: Option<u32> = None;
    for item in gres.split(',') {
        let item = item.split('(').next().unwrap_or(item).trim();
        let parts: Vec<&str> = item.split(':').collect();
        match parts.as_slice() {
            ["gpu", n] => return n.parse().ok(),
            ["gpu", _, n] => {
                typed = Some(typed.unwrap_or(0).saturating_add(n.parse().unwrap_or(0)));
            }
            _ => {}
        }
    }
    typed
}

/// Unix seconds as `YYYY-MM-DDTHH:MM:SS` in UTC, the inverse of [`parse_time`] and the form
/// sacct's `-S`/`-E` accept (clamped to the years -9999 to 9999).
pub fn utc_text(secs: i64) -> String {
    utc_datetime(secs).strftime("%Y-%m-%dT%H:%M:%S").to_string()
}

/// The UTC calendar date of a day number (days since 1970-01-01) as `YYYY-MM-DD`.
pub fn utc_date(day: i64) -> String {
    utc_datetime(day.saturating_mul(86_400)).date().to_string()
}

/// The UTC date and time of Unix seconds, clamped to what the calendar covers.
pub(super) fn utc_datetime(secs: i64) -> jiff::civil::DateTime {
    let t = jiff::Timestamp::from_second(secs).unwrap_or(if secs < 0 {
        jiff::Timestamp::MIN
    } else {
        jiff::Timestamp::MAX
    });
    jiff::tz::Offset::UTC.to_datetime(t)
}

/// Whether sacct printed a value as "not set": empty, `Unknown`, `None`, `INVALID` (a time or
/// duration of `NO_VAL`), `UNLIMITED` (`INFINITE`), in any case.
pub(super) fn is_unset_word(s: &str) -> bool {
    let s = s.trim();
    s.is_empty()
        || ["unknown", "none", "invalid", "unlimited"]
            .iter()
            .any(|w| s.eq_ignore_ascii_case(w))
}

/// Unix seconds from `1700000000` or `2024-05-01T10:00:00` (taken as UTC); 0 ("not set") for
/// `Unknown`, `None`, `INVALID`, empty, and for Slurm's sentinels printed as numbers
/// (`4294967294`, see [`crate::report::unset`]).
pub fn parse_time(s: &str) -> Result<i64, String> {
    let s = s.trim();
    if is_unset_word(s) {
        return Ok(0);
    }
    if let Some(n) = crate::report::unset::text_number(s) {
        return Ok(n);
    }
    s.parse::<jiff::civil::DateTime>()
        .ok()
        .filter(|_| s.len() >= 19 && s.as_bytes()[10] == b'T')
        .and_then(|dt| jiff::tz::Offset::UTC.to_timestamp(dt).ok())
        .map(|t| t.as_second())
        .ok_or_else(|| format!("`{s}` is not a time (want Unix seconds or YYYY-MM-DDTHH:MM:SS)"))
}

/// A time a person gives on the command line (`--start`, `--since`): Unix seconds,
/// `YYYY-MM-DD`, `YYYY-MM-DDTHH:MM` or `YYYY-MM-DDTHH:MM:SS`, taken as UTC. The error is a whole
/// sentence about `flag`: `--start `yesterday` is not a time: write ...`.
pub fn parse_when(s: &str, flag: &str) -> Result<i64, String> {
    let full = match s.len() {
        10 if s.as_bytes().get(4) == Some(&b'-') => format!("{s}T00:00:00"),
        16 => format!("{s}:00"),
        _ => s.to_string(),
    };
    match parse_time(&full) {
        Ok(t) if !s.trim().is_empty() && t > 0 => Ok(t),
        _ => Err(format!(
            "{flag} `{s}` is not a time: write YYYY-MM-DD, YYYY-MM-DDTHH:MM[:SS] (UTC) or Unix seconds"
        )),
    }
}

/// `[D-]HH:MM:SS`, `MM:SS` or `MM:SS.mmm` to seconds.
pub(super) fn parse_elapsed(s: &str) -> Option<u64> {
    let (days, rest) = match s.split_once('-') {
        Some((d, r)) => (d.parse::<u64>().ok()?, r),
        None => (0, s),
    };
    let parts: Vec<f64> = rest
        .split(':')
        .map(|p| p.parse::<f64>().ok())
        .collect::<Option<_>>()?;
    let secs = match parts.as_slice() {
        [h, m, s] => h * 3600.0 + m * 60.0 + s,
        [m, s] => m * 60.0 + s,
        [s] => *s,
        _ => return None,
    };
    Some(days * 86_400 + secs as u64)
}
