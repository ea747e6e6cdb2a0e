//! The drill's dated-back job: a root-owned file in a node's state folder that tells the in-job
//! watch of one job to take that job as older than it is, so that the fault drill can measure a
//! fault met late in a long job (`fabric-check drill --job-age-s S`, docs/drill.md).
//!
//! `fabric-check drill` (root, on the testbed) writes `<state_dir>/drill-job-age.json`
//! ([`FILE_NAME`]) on each node of a `during` round's job while the job is held, releases the
//! job, and removes the file when the round ends (its restore journal removes it after a stop).
//! The watch reads it once, when it opens: it applies only to its [`DrillJobAge::job`], only
//! before [`DrillJobAge::expires_unix_s`] (a leftover never outlives [`MAX_VALID_S`]), and only
//! when root owns it and nobody else can write it or its folder (the reader's check, in
//! `fabric-core`). Every byte a job's user controls is hostile: nothing the job's user writes
//! can date a job back, and the job's user learns nothing from the file.

use serde::{Deserialize, Serialize};

/// The file's name in a node's state folder.
pub const FILE_NAME: &str = "drill-job-age.json";

/// The oldest a job can be made: a week.
pub const MAX_AGE_S: u64 = 7 * 86_400;

/// How long after it is written a file is valid ([`DrillJobAge::new`]): enough for the held job
/// to be released and to start; the watch reads it as the job starts.
pub const VALID_FOR_S: u64 = 600;

/// The furthest ahead an expiry may lie when the watch reads it: a file that claims more is
/// refused, so no file can date jobs back for longer than this.
pub const MAX_VALID_S: u64 = 3600;

/// The largest file the watch reads.
pub const MAX_FILE_BYTES: usize = 4096;

/// The file's content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DrillJobAge {
    /// The one job it applies to.
    pub job: u32,
    /// How far the job's start (the prolog's snapshot's time) is moved back, seconds.
    pub age_s: u64,
    /// When it stops applying (seconds since the epoch).
    pub expires_unix_s: u64,
}

/// Why a file does not date the watch's job back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotApplied {
    /// It names another job.
    #[error("it is for job {for_job}, not job {job}")]
    OtherJob {
        /// The job it names.
        for_job: u32,
        /// The watch's job.
        job: u32,
    },
    /// Its expiry has passed.
    #[error("it expired {ago_s} s ago (a leftover of a stopped drill)")]
    Expired {
        /// How long ago.
        ago_s: u64,
    },
    /// Its expiry lies too far ahead.
    #[error("its expiry lies {ahead_s} s ahead, more than the {MAX_VALID_S} s a drill's file may")]
    ExpiresTooLate {
        /// How far.
        ahead_s: u64,
    },
    /// An age of 0 or above [`MAX_AGE_S`].
    #[error("its age of {age_s} s is not between 1 and {MAX_AGE_S} s")]
    AgeOutOfRange {
        /// The age it names.
        age_s: u64,
    },
}

impl DrillJobAge {
    /// A file for `job`, dated back `age_s`, valid for [`VALID_FOR_S`] from `now_unix_s`.
    pub fn new(job: u32, age_s: u64, now_unix_s: u64) -> Self {
        Self {
            job,
            age_s,
            expires_unix_s: now_unix_s.saturating_add(VALID_FOR_S),
        }
    }

    /// The age to apply to `job`'s watch at `now_unix_s`, or why none is.
    pub fn age_for(&self, job: u32, now_unix_s: u64) -> Result<u64, NotApplied> {
        if self.job != job {
            return Err(NotApplied::OtherJob {
                for_job: self.job,
                job,
            });
        }
        if now_unix_s >= self.expires_unix_s {
            return Err(NotApplied::Expired {
                ago_s: now_unix_s - self.expires_unix_s,
            });
        }
        let ahead_s = self.expires_unix_s - now_unix_s;
        if ahead_s > MAX_VALID_S {
            return Err(NotApplied::ExpiresTooLate { ahead_s });
        }
        if !(1..=MAX_AGE_S).contains(&self.age_s) {
            return Err(NotApplied::AgeOutOfRange { age_s: self.age_s });
        }
        Ok(self.age_s)
    }
}

/// Parses a job age given on a command line (`--job-age-s`): whole seconds, 1 to [`MAX_AGE_S`].
pub fn parse_age_s(s: &str) -> Result<u64, String> {
    match s.trim().parse::<u64>() {
        Ok(v) if (1..=MAX_AGE_S).contains(&v) => Ok(v),
        _ => Err(format!(
            "{s:?} is not a job age in whole seconds between 1 and {MAX_AGE_S} (a week); a day-old job is 86400"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_800_000_000;

    #[test]
    fn a_fresh_file_dates_back_its_own_job_and_no_other() {
        let f = DrillJobAge::new(42, 86_400, NOW);
        assert_eq!(f.age_for(42, NOW + 5), Ok(86_400));
        assert_eq!(
            f.age_for(43, NOW + 5),
            Err(NotApplied::OtherJob {
                for_job: 42,
                job: 43
            })
        );
    }

    #[test]
    fn an_expired_file_and_one_that_claims_to_last_past_the_limit_are_refused() {
        let f = DrillJobAge::new(42, 86_400, NOW);
        assert_eq!(
            f.age_for(42, NOW + VALID_FOR_S + 3),
            Err(NotApplied::Expired { ago_s: 3 })
        );
        let forever = DrillJobAge {
            expires_unix_s: u64::MAX,
            ..f.clone()
        };
        assert!(matches!(
            forever.age_for(42, NOW),
            Err(NotApplied::ExpiresTooLate { .. })
        ));
        let zero = DrillJobAge { age_s: 0, ..f };
        assert_eq!(
            zero.age_for(42, NOW),
            Err(NotApplied::AgeOutOfRange { age_s: 0 })
        );
    }

    #[test]
    fn the_file_is_a_plain_json_object_and_unknown_fields_are_refused() {
        let f = DrillJobAge::new(7, 3600, NOW);
        let text = serde_json::to_string(&f).unwrap();
        assert_eq!(
            text,
            format!(
                "{{\"job\":7,\"age_s\":3600,\"expires_unix_s\":{}}}",
                NOW + VALID_FOR_S
            )
        );
        assert_eq!(serde_json::from_str::<DrillJobAge>(&text).unwrap(), f);
        assert!(
            serde_json::from_str::<DrillJobAge>(
                "{\"job\":7,\"age_s\":3600,\"expires_unix_s\":1,\"x\":1}"
            )
            .is_err()
        );
    }

    #[test]
    fn a_command_line_age_is_whole_seconds_from_one_to_a_week() {
        assert_eq!(parse_age_s("86400"), Ok(86_400));
        for bad in ["0", "-5", "1.5", "day", "", "604801"] {
            let e = parse_age_s(bad).unwrap_err();
            assert!(
                e.contains("between 1 and 604800") && e.contains("86400"),
                "{e}"
            );
        }
    }
}
