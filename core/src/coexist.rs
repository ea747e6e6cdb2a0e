//! Sharing `AdminComment` with another tool that rewrites it whole after the job, such as
//! Princeton's jobstats (`EpilogSlurmctld`: `sleep 5`, then `sacctmgr -i update job where
//! jobid=N set AdminComment=JS1:<base64>`, the database only).
//!
//! Each tool owns a segment: ours starts at [`fabric_proto::tag::MARKER`] (the epilog appends it at the end),
//! the other tool's is everything before it. The supported setup (`docs/operations.md`,
//! "Next to jobstats") runs the other tool's `EpilogSlurmctld` under `fabric-check
//! epilog-slurmctld -- PROGRAM`:
//!
//! 1. the program runs with a `sacctmgr` of ours first on its `PATH` ([`shim_write`]): a write of
//!    one job's `AdminComment` keeps our segment from the database copy ([`merge_foreign`]) and
//!    is recorded (the value, and the form the database stored it in);
//! 2. once the job's nodes have finished their epilogs (our tag is written by then), the
//!    database copy is checked and repaired ([`reconcile`]): the other tool's segment is put back
//!    in front of ours if our epilog's write erased it, and checked again a few times, since a
//!    late job-complete record from slurmctld can still overwrite the field.
//!
//! Every loss found (either segment missing) is logged, with what was done about it.

use std::time::Duration;

use fabric_proto::tag::MARKER;

/// The other tools' part of a comment: everything before our segment, trailing blanks trimmed.
pub fn foreign_part(comment: &str) -> &str {
    comment
        .find(MARKER)
        .map_or(comment, |i| &comment[..i])
        .trim_end()
}

/// Our segment and whatever follows it, if the comment holds one.
pub fn ours_part(comment: &str) -> Option<&str> {
    comment.find(MARKER).map(|i| &comment[i..])
}

/// What another tool's wholesale write of `value` becomes when our segment of `current` is kept:
/// `value`, a space, our segment.
pub fn merge_foreign(value: &str, current: &str) -> String {
    let value = value.trim_end();
    match ours_part(current) {
        Some(ours) if value.is_empty() => ours.to_owned(),
        Some(ours) => format!("{value} {ours}"),
        None => value.to_owned(),
    }
}

/// The accounting database copy of one job's `AdminComment`, as the shim and the repair see it.
///
/// Why a seam of its own and not [`crate::slurm::Slurm`]: its write replays **the other tool's
/// own `sacctmgr` command line** with only the value replaced (the job addressed exactly as that
/// tool addressed it, `N` or `A_T`), which `Slurm::set_admin_comment_db` must not do (it writes
/// our form, addressed our way); and its `sleep` lets the tests run the repair's later looks
/// without waiting. Its read goes through the same door as every other read of accounting
/// ([`crate::slurm::Sacct`], bounded, and [`crate::slurm::comment_of_named_job`]).
pub trait AccountingDb {
    /// Reads it.
    fn read(&self, job: &str) -> Result<String, String>;
    /// Replaces it (`sacctmgr`, which stores `"` and `'` as backticks, and before 23.02
    /// lower-cases the value).
    fn write(&self, job: &str, text: &str) -> Result<(), String>;
    /// Waits `d` (tests do not).
    fn sleep(&self, d: Duration) {
        std::thread::sleep(d);
    }
}

/// What the shim recorded of the other tool's write.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Captured {
    /// The job written.
    pub job: String,
    /// The value the tool gave.
    pub value: String,
    /// The value as the database stored it (read back), the bytes to keep.
    pub stored: String,
    /// Our segment as the shim found it in the database copy (after the job's epilogs), the
    /// source of ours should a later write drop it.
    #[serde(default)]
    pub ours: Option<String>,
}

/// A `sacctmgr` command line that replaces one job's `AdminComment`: `[-i] modify|update job
/// where jobid=N set AdminComment=V` (keywords in any case). Returns the job, the value and the
/// index of the `AdminComment=` word.
pub fn parse_admin_comment_write(args: &[String]) -> Option<(String, String, usize)> {
    let words: Vec<String> = args.iter().map(|a| a.to_ascii_lowercase()).collect();
    let verb = words.iter().position(|w| w == "modify" || w == "update")?;
    if words.get(verb + 1).map(String::as_str) != Some("job") {
        return None;
    }
    let job = words.iter().find_map(|w| {
        w.strip_prefix("jobid=")
            .or_else(|| w.strip_prefix("jobids="))
    })?;
    if job.is_empty() || job.contains(',') {
        return None;
    }
    let set = words.iter().position(|w| w == "set")?;
    let at = (set + 1..args.len()).find(|&i| words[i].starts_with("admincomment="))?;
    let value = args[at]["admincomment=".len()..].to_owned();
    Some((job.to_owned(), value, at))
}

/// The shim's write: `value` for `job`, keeping our segment of the database copy. Returns what
/// was recorded. The caller first waits for the job's epilogs (ours writes the database copy
/// there): a read before our write and a write after it would erase our segment.
pub fn shim_write(
    db: &dyn AccountingDb,
    job: &str,
    value: &str,
    log: &dyn Fn(&str),
) -> Result<Captured, String> {
    let current = db.read(job).unwrap_or_else(|e| {
        log(&format!(
            "job {job}: cannot read AdminComment from the database ({e}); writing the value alone"
        ));
        String::new()
    });
    let merged = merge_foreign(value, &current);
    if merged != value.trim_end() {
        log(&format!(
            "job {job}: kept the fabric-check segment next to the new AdminComment"
        ));
    }
    db.write(job, &merged)?;
    let back = db.read(job).unwrap_or_default();
    let stored = if foreign_part(&back).eq_ignore_ascii_case(&stored_guess(value)) {
        foreign_part(&back).to_owned()
    } else {
        stored_guess(value)
    };
    Ok(Captured {
        job: job.to_owned(),
        value: value.to_owned(),
        stored,
        ours: ours_part(&current).map(str::to_owned),
    })
}

/// What `sacctmgr` makes of a value (its `strip_quotes`), leaving the case as it is.
fn stored_guess(value: &str) -> String {
    value.trim_end().replace(['"', '\''], "`")
}

/// What [`reconcile`] found and did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reconciled {
    /// Both segments were there, every time it looked.
    Intact,
    /// A segment was missing and was put back (that many writes); the final copy holds both.
    Repaired(u32),
    /// A segment is still missing (said why).
    Lost(String),
}

/// Checks, after the job's epilogs, that the database copy of `job`'s `AdminComment` holds the
/// other tool's segment (`captured.stored`) byte for byte and, when `expect_ours`, our segment;
/// puts the other tool's segment back in front of ours when it was erased. Looks again after
/// each of `checks` (a late job-complete record can overwrite the field).
pub fn reconcile(
    db: &dyn AccountingDb,
    captured: &Captured,
    checks: &[Duration],
    log: &dyn Fn(&str),
) -> Reconciled {
    let job = captured.job.as_str();
    let mut writes = 0;
    // The last copy seen with our segment: the source of ours if a later write drops it.
    let mut ours: Option<String> = captured.ours.clone();
    for (i, wait) in std::iter::once(&Duration::ZERO).chain(checks).enumerate() {
        db.sleep(*wait);
        let now = match db.read(job) {
            Ok(c) => c,
            Err(e) => {
                log(&format!("job {job}: cannot read AdminComment ({e})"));
                continue;
            }
        };
        if let Some(o) = ours_part(&now) {
            ours = Some(o.to_owned());
        }
        let has_theirs = foreign_part(&now) == captured.stored;
        let has_ours = ours_part(&now).is_some() || ours.is_none();
        if has_theirs && has_ours {
            continue;
        }
        let want = merge_foreign(&captured.stored, ours.as_deref().unwrap_or(""));
        log(&format!(
            "job {job}: AdminComment lost {} (look {i}); writing both back",
            if has_theirs {
                "the fabric-check segment"
            } else {
                "the other tool's segment"
            }
        ));
        match db.write(job, &want) {
            Ok(()) => writes += 1,
            Err(e) => {
                let why = format!("job {job}: cannot write AdminComment back: {e}");
                log(&why);
                return Reconciled::Lost(why);
            }
        }
    }
    let last = db.read(job).unwrap_or_default();
    let has_theirs = foreign_part(&last) == captured.stored;
    let has_ours = ours_part(&last).is_some() || ours.is_none();
    match (has_theirs && has_ours, writes) {
        (true, 0) => Reconciled::Intact,
        (true, n) => Reconciled::Repaired(n),
        (false, _) => {
            let why = format!(
                "job {job}: AdminComment still lacks {} after {writes} repair(s)",
                if has_theirs {
                    "the fabric-check segment"
                } else {
                    "the other tool's segment"
                }
            );
            log(&why);
            Reconciled::Lost(why)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    /// A database copy that stores like 22.05's sacctmgr (quotes → backticks, lower case) and
    /// can be overwritten behind our back, as a late job-complete record or our epilog would.
    #[derive(Default)]
    struct Db {
        text: RefCell<String>,
        lower: bool,
        /// Values written "by someone else" at the next read (one per read).
        behind: RefCell<Vec<String>>,
        writes: RefCell<u32>,
    }

    impl AccountingDb for Db {
        fn read(&self, _job: &str) -> Result<String, String> {
            if let Some(v) = self.behind.borrow_mut().pop() {
                *self.text.borrow_mut() = v;
            }
            Ok(self.text.borrow().clone())
        }
        fn write(&self, _job: &str, text: &str) -> Result<(), String> {
            let mut t = text.replace(['"', '\''], "`");
            if self.lower {
                t = t.to_lowercase();
            }
            *self.text.borrow_mut() = t;
            *self.writes.borrow_mut() += 1;
            Ok(())
        }
        fn sleep(&self, _d: Duration) {}
    }

    const JS: &str = "JS1:H4sIAAAAAAAAA6tWKkktLlGyUlAqS8wpTVWqBQCb1RwVEQAAAA==";
    const OURS: &str = "fabric-check/v1 {`verdict`:`pass`,`nnodes`:2}";

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn jobstats_own_command_line_is_recognised_and_others_are_not() {
        let js = words(&format!(
            "-i update job where jobid=123 set AdminComment={JS}"
        ));
        assert_eq!(
            parse_admin_comment_write(&js),
            Some(("123".into(), JS.into(), 6))
        );
        for other in [
            "show job 123",
            "-i update user where name=x set AdminComment=y",
            "-i modify job where jobid=1,2 set AdminComment=y",
            "-i modify job where jobid=1 set Comment=y",
        ] {
            assert_eq!(parse_admin_comment_write(&words(other)), None, "{other}");
        }
    }

    #[test]
    fn the_shims_write_keeps_our_segment_and_records_the_stored_form() {
        let db = Db {
            text: RefCell::new(format!("old {OURS}")),
            ..Db::default()
        };
        let c = shim_write(&db, "5", JS, &|_| {}).unwrap();
        assert_eq!(*db.text.borrow(), format!("{JS} {OURS}"));
        assert_eq!(c.stored, JS, "upper case kept where the database keeps it");
        let lower = Db {
            lower: true,
            ..Db::default()
        };
        let c = shim_write(&lower, "5", JS, &|_| {}).unwrap();
        assert_eq!(
            c.stored,
            JS.to_lowercase(),
            "what 22.05 stored, byte for byte"
        );
    }

    #[test]
    fn our_epilog_writing_after_jobstats_is_repaired_with_both_segments_byte_for_byte() {
        let db = Db::default();
        let c = shim_write(&db, "5", JS, &|_| {}).unwrap();
        // Our epilog then writes its tag over the in-memory copy, which never had JS1.
        db.behind.borrow_mut().push(format!("prolog {OURS}"));
        let lines = RefCell::new(Vec::new());
        let got = reconcile(&db, &c, &[Duration::from_secs(2)], &|l| {
            lines.borrow_mut().push(l.to_owned())
        });
        assert_eq!(got, Reconciled::Repaired(1));
        assert_eq!(*db.text.borrow(), format!("{JS} {OURS}"));
        assert!(lines.borrow()[0].contains("lost the other tool's segment"));
    }

    #[test]
    fn a_late_record_that_drops_our_segment_is_repaired_from_the_last_copy_that_had_it() {
        let db = Db {
            text: RefCell::new(format!("{JS} {OURS}")),
            ..Db::default()
        };
        let c = Captured {
            job: "5".into(),
            value: JS.into(),
            stored: JS.into(),
            ours: None,
        };
        // Read 1 sees both; read 2 a stale record with neither.
        db.behind.borrow_mut().push("fabric-check/v0".into());
        db.behind.borrow_mut().push(format!("{JS} {OURS}"));
        let got = reconcile(&db, &c, &[Duration::ZERO, Duration::ZERO], &|_| {});
        assert_eq!(got, Reconciled::Repaired(1));
        assert_eq!(*db.text.borrow(), format!("{JS} {OURS}"));
    }

    #[test]
    fn our_segment_dropped_before_the_first_look_comes_back_from_the_shims_read() {
        let db = Db {
            text: RefCell::new(format!("prolog {OURS}")),
            ..Db::default()
        };
        let c = shim_write(&db, "5", JS, &|_| {}).unwrap();
        assert_eq!(c.ours.as_deref(), Some(OURS));
        // A stale job-complete record lands before the repair looks: the other tool's alone.
        db.behind.borrow_mut().push(JS.into());
        let got = reconcile(&db, &c, &[], &|_| {});
        assert_eq!(got, Reconciled::Repaired(1));
        assert_eq!(*db.text.borrow(), format!("{JS} {OURS}"));
    }

    #[test]
    fn an_intact_copy_is_left_alone_and_a_lasting_loss_is_reported() {
        let db = Db {
            text: RefCell::new(format!("{JS} {OURS}")),
            ..Db::default()
        };
        let c = Captured {
            job: "5".into(),
            value: JS.into(),
            stored: JS.into(),
            ours: None,
        };
        assert_eq!(
            reconcile(&db, &c, &[Duration::ZERO], &|_| {}),
            Reconciled::Intact
        );
        assert_eq!(*db.writes.borrow(), 0);
        struct Broken;
        impl AccountingDb for Broken {
            fn read(&self, _: &str) -> Result<String, String> {
                Ok(String::new())
            }
            fn write(&self, _: &str, _: &str) -> Result<(), String> {
                Err("sacctmgr: no".into())
            }
            fn sleep(&self, _d: Duration) {}
        }
        let got = reconcile(&Broken, &c, &[], &|_| {});
        assert!(
            matches!(got, Reconciled::Lost(ref w) if w.contains("cannot write")),
            "{got:?}"
        );
    }
}
