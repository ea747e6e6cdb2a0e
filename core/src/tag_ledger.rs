//! Tags that vanished are found, never lost in silence.
//!
//! Every tag write (prolog, epilog, run summary: [`crate::jobstep::tag_write`]) appends one line
//! to the writing node's state folder, `<state_dir>/`[`LEDGER`]: the job's exact name, when, in
//! which form, the verdict and the segment's length. It is a local file: the prolog gains no
//! Slurm call.
//!
//! Later, a root context that talks to slurmdbd anyway (`fabric-check health`, Slurm's
//! `HealthCheckProgram`, see [`crate::jobstep::health`]) asks accounting once for the jobs of
//! the ledger that ended at least a grace period ago ([`Slurm::job_records`], one `sacct` call
//! for at most [`MAX_ASKED`] jobs) and logs an error for every job whose `AdminComment` no
//! longer holds a readable `fabric-check/v1` segment, naming the job, what holds the field now
//! (a jobstats `JS1:` segment, another text, nothing) and the setup that prevents it
//! (`fabric-check epilog-slurmctld`, docs/operations.md). Checked jobs leave the ledger; jobs
//! accounting does not know are dropped after [`FORGET_AFTER_S`].
//!
//! What is detected: the segment erased or replaced wholesale (jobstats' database-only write
//! without the wrapper, any tool that sets the whole field). What is not: a segment that is
//! still readable but older than the last write (the job-complete record restoring the
//! prolog-time tag over a later run summary); the ledger keeps the verdict and length to make
//! that comparison possible on the node that wrote last.

use std::collections::{HashMap, HashSet};
use std::io::{Read, Seek, Write};
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::slurm::{JobRecord, Slurm, SlurmError};
use fabric_proto::job_state::JobState;
use fabric_proto::tag;

/// The ledger's file name in the node's state folder.
pub const LEDGER: &str = "tags-written.jsonl";

/// The ledger stops growing at this size (a node whose health check never runs); a write past
/// it is logged and not recorded.
pub const MAX_LEDGER_BYTES: u64 = 4 << 20;

/// At most this many jobs are asked of accounting per check.
pub const MAX_ASKED: usize = 100;

/// Entries accounting does not know are dropped after this long (7 days).
pub const FORGET_AFTER_S: u64 = 7 * 24 * 3600;

/// The section of docs/operations.md that names the setup.
pub const SETUP_DOC: &str = "docs/operations.md#next-to-jobstats-the-supported-setup";

/// One tag write.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Written {
    /// The job's exact name (`123`, `123_4`, `123+1`).
    pub job: String,
    /// When, Unix seconds.
    pub at_s: u64,
    /// `live` (scontrol) or `database` (sacctmgr).
    pub form: String,
    /// The verdict written (`none` when the tag had none).
    pub verdict: String,
    /// Length of the segment written, in bytes.
    pub bytes: usize,
}

/// A job whose tag disappeared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Loss {
    /// The job's exact name.
    pub job: String,
    /// What was written last on this node.
    pub written: Written,
    /// What holds the field now, in words.
    pub found: String,
}

impl std::fmt::Display for Loss {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "TAG LOST: job {}: the fabric-check tag written at {} (verdict {}, {} bytes, {}) is gone from accounting: {}; another AdminComment writer replaced the whole field. Run it through `fabric-check epilog-slurmctld -- PROGRAM` ({SETUP_DOC})",
            self.job,
            self.written.at_s,
            self.written.verdict,
            self.written.bytes,
            self.written.form,
            self.found
        )
    }
}

/// Why the ledger could not be used.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    /// Its file.
    #[error("{path}: {source}; check state_dir= in plugstack.conf")]
    Io {
        /// The file.
        path: std::path::PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The ledger is full.
    #[error(
        "{path} holds {bytes} bytes, over {MAX_LEDGER_BYTES}: is `fabric-check health` (HealthCheckProgram) running on this node?"
    )]
    Full {
        /// The file.
        path: std::path::PathBuf,
        /// Its size.
        bytes: u64,
    },
    /// Accounting could not be asked.
    #[error(transparent)]
    Slurm(#[from] SlurmError),
}

fn open_locked(state_dir: &Path) -> Result<std::fs::File, LedgerError> {
    let path = state_dir.join(LEDGER);
    let io = |source| LedgerError::Io {
        path: path.clone(),
        source,
    };
    let f = std::fs::OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .open(&path)
        .map_err(io)?;
    // Released when the file is closed.
    rustix::fs::flock(&f, rustix::fs::FlockOperation::LockExclusive)
        .map_err(|e| io(std::io::Error::from(e)))?;
    Ok(f)
}

/// Appends `w` to the node's ledger (an exclusive lock around the one write).
pub fn record(state_dir: &Path, w: &Written) -> Result<(), LedgerError> {
    let path = state_dir.join(LEDGER);
    let mut f = open_locked(state_dir)?;
    let bytes = f.metadata().map(|m| m.len()).unwrap_or(0);
    if bytes > MAX_LEDGER_BYTES {
        return Err(LedgerError::Full { path, bytes });
    }
    let mut line = serde_json::to_string(w).expect("a ledger entry serializes");
    line.push('\n');
    f.write_all(line.as_bytes())
        .map_err(|source| LedgerError::Io { path, source })
}

/// The ledger's entries (unreadable lines are skipped: the file is ours, but a torn write must
/// not stop the check).
pub fn entries(state_dir: &Path) -> Result<Vec<Written>, LedgerError> {
    let path = state_dir.join(LEDGER);
    match std::fs::read_to_string(&path) {
        Ok(text) => Ok(parse(&text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(source) => Err(LedgerError::Io { path, source }),
    }
}

fn parse(text: &str) -> Vec<Written> {
    text.lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// What holds `comment` instead of our segment, in words (bounded).
fn describe(comment: &str) -> String {
    let shown: String = comment.chars().take(60).collect();
    let more = if comment.chars().count() > 60 {
        "..."
    } else {
        ""
    };
    if comment.trim().is_empty() {
        "AdminComment is empty".to_owned()
    } else if comment.to_ascii_uppercase().starts_with("JS1:") {
        format!("a jobstats `JS1:` segment holds the field ({shown:?}{more})")
    } else {
        format!("AdminComment now holds {shown:?}{more}")
    }
}

/// The outcome of comparing the ledger with accounting.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Jobs whose tag is gone.
    pub losses: Vec<Loss>,
    /// Entries to keep for a later check.
    pub keep: Vec<Written>,
    /// Jobs found with their tag in place.
    pub intact: Vec<String>,
}

/// Compares the latest entry of each job with accounting's `records`, at `now_s`: a job that
/// ended `grace_s` ago or more is checked and leaves the ledger; one still running, just ended
/// or not asked is kept; one accounting does not know is kept until [`FORGET_AFTER_S`].
pub fn compare(
    entries: &[Written],
    asked: &[String],
    records: &[JobRecord],
    now_s: u64,
    grace_s: u64,
) -> Outcome {
    // Keyed by job, in first-write order: a full ledger (4 MiB, ~40,000 lines) is compared
    // in one pass, where a search of the list for each line was quadratic.
    let mut latest: Vec<&Written> = Vec::new();
    let mut slot: HashMap<&str, usize> = HashMap::new();
    for w in entries {
        match slot.get(w.job.as_str()) {
            Some(&i) if latest[i].at_s <= w.at_s => latest[i] = w,
            Some(_) => {}
            None => {
                slot.insert(&w.job, latest.len());
                latest.push(w);
            }
        }
    }
    let asked: HashSet<&str> = asked.iter().map(String::as_str).collect();
    let mut last_record: HashMap<&str, &JobRecord> = HashMap::new();
    for r in records {
        last_record.insert(&r.job, r);
    }
    let mut out = Outcome::default();
    for w in latest {
        if !asked.contains(w.job.as_str()) {
            out.keep.push(w.clone());
            continue;
        }
        // The job's last record: a job shrunk while it ran (spare nodes) has a `RESIZING`
        // record of the same id before its own.
        let Some(&r) = last_record.get(w.job.as_str()) else {
            if now_s.saturating_sub(w.at_s) < FORGET_AFTER_S {
                out.keep.push(w.clone());
            }
            continue;
        };
        let settled =
            JobState::parse(&r.state).has_ended() && r.end_s.is_some_and(|e| e + grace_s <= now_s);
        if !settled {
            out.keep.push(w.clone());
            continue;
        }
        match tag::extract(&r.comment) {
            Some(Ok(_)) => out.intact.push(w.job.clone()),
            Some(Err(e)) => out.losses.push(Loss {
                job: w.job.clone(),
                written: w.clone(),
                found: format!("the fabric-check segment is unreadable ({e})"),
            }),
            None => out.losses.push(Loss {
                job: w.job.clone(),
                written: w.clone(),
                found: describe(&r.comment),
            }),
        }
    }
    out
}

/// Checks the ledger of `state_dir` against accounting at `now_s` (see the module docs) and
/// returns the losses found; the caller logs them. The ledger keeps what is not settled yet.
pub fn check(
    state_dir: &Path,
    slurm: &dyn Slurm,
    now_s: u64,
    grace_s: u64,
) -> Result<Vec<Loss>, LedgerError> {
    let all = entries(state_dir)?;
    let mut asked: Vec<String> = Vec::new();
    let mut seen: HashSet<&str> = HashSet::new();
    for w in &all {
        if asked.len() >= MAX_ASKED {
            break;
        }
        if w.at_s + grace_s <= now_s && seen.insert(&w.job) {
            asked.push(w.job.clone());
        }
    }
    if asked.is_empty() {
        return Ok(Vec::new());
    }
    let records = slurm.job_records(&asked)?;
    let outcome = compare(&all, &asked, &records, now_s, grace_s);
    // Rewrite in place under the lock: entries appended since the read above stay.
    let path = state_dir.join(LEDGER);
    let io = |source| LedgerError::Io {
        path: path.clone(),
        source,
    };
    let mut f = open_locked(state_dir)?;
    let mut text = String::new();
    f.rewind().map_err(io)?;
    f.read_to_string(&mut text).map_err(io)?;
    let kept_at: HashMap<&str, u64> = outcome
        .keep
        .iter()
        .map(|k| (k.job.as_str(), k.at_s))
        .collect();
    let settled: HashSet<&str> = asked
        .iter()
        .map(String::as_str)
        .filter(|j| !kept_at.contains_key(j))
        .collect();
    let mut kept = String::new();
    for w in parse(&text) {
        let written_before_check = w.at_s + grace_s <= now_s;
        if settled.contains(w.job.as_str()) && written_before_check {
            continue;
        }
        if kept_at
            .get(w.job.as_str())
            .is_some_and(|&at_s| at_s > w.at_s)
        {
            continue; // an older write of a job kept for later: its latest stands for it
        }
        kept.push_str(&serde_json::to_string(&w).expect("a ledger entry serializes"));
        kept.push('\n');
    }
    f.set_len(0).map_err(io)?;
    f.write_all(kept.as_bytes()).map_err(io)?;
    Ok(outcome.losses)
}

#[cfg(test)]
mod tests {
    use super::*;
    use fabric_proto::tag::{Form, JobTag, Verdict};

    fn w(job: &str, at_s: u64) -> Written {
        Written {
            job: job.into(),
            at_s,
            form: "live".into(),
            verdict: "pass".into(),
            bytes: 120,
        }
    }

    fn rec(job: &str, state: &str, end_s: Option<u64>, comment: &str) -> JobRecord {
        JobRecord {
            job: job.into(),
            state: state.into(),
            end_s,
            comment: comment.into(),
        }
    }

    fn ours() -> String {
        let t = JobTag {
            verdict: Some(Verdict::Pass),
            ..JobTag::default()
        };
        tag::segment(&t, Form::Live)
    }

    #[test]
    fn a_tag_replaced_by_jobstats_is_a_loss_that_names_the_job_the_writer_and_the_setup() {
        let entries = [w("8_3", 100), w("9", 100)];
        let asked = vec!["8_3".to_owned(), "9".to_owned()];
        let records = [
            rec("8_3", "COMPLETED", Some(150), "JS1:H4sIAAAA"),
            rec("9", "COMPLETED", Some(150), &format!("JS1:Ab {}", ours())),
        ];
        let o = compare(&entries, &asked, &records, 300, 60);
        assert_eq!(o.intact, ["9"]);
        assert_eq!(o.losses.len(), 1);
        let text = o.losses[0].to_string();
        assert!(text.contains("job 8_3"), "{text}");
        assert!(text.contains("jobstats `JS1:` segment"), "{text}");
        assert!(text.contains("fabric-check epilog-slurmctld"), "{text}");
        assert!(text.contains(SETUP_DOC), "{text}");
        assert!(o.keep.is_empty());
    }

    #[test]
    fn a_job_still_running_or_just_ended_is_kept_for_a_later_check_not_judged() {
        let entries = [w("1", 100), w("2", 100), w("3", 100)];
        let asked: Vec<String> = ["1", "2", "3"].map(String::from).to_vec();
        let records = [
            rec("1", "RUNNING", None, ""),
            rec("2", "COMPLETED", Some(290), ""),
            rec("3", "CANCELLED by 0", Some(100), ""),
        ];
        let o = compare(&entries, &asked, &records, 300, 60);
        assert_eq!(
            o.keep.iter().map(|k| k.job.as_str()).collect::<Vec<_>>(),
            ["1", "2"]
        );
        assert_eq!(o.losses.len(), 1);
        assert_eq!(o.losses[0].found, "AdminComment is empty");
    }

    #[test]
    fn a_job_shrunk_by_spares_is_judged_by_its_last_record_not_its_resizing_one() {
        let asked = vec!["6".to_owned()];
        let records = [
            rec("6", "RESIZING", Some(120), &ours()),
            rec("6", "COMPLETED", Some(150), &ours()),
        ];
        let o = compare(&[w("6", 100)], &asked, &records, 300, 60);
        assert_eq!(o.intact, ["6"]);
        assert!(o.keep.is_empty());
    }

    #[test]
    fn a_job_accounting_does_not_know_is_forgotten_only_after_a_week() {
        let asked = vec!["5".to_owned()];
        let o = compare(&[w("5", 100)], &asked, &[], 200, 60);
        assert_eq!(o.keep.len(), 1);
        let o = compare(&[w("5", 100)], &asked, &[], 100 + FORGET_AFTER_S, 60);
        assert_eq!(o, Outcome::default());
    }

    #[test]
    fn the_check_asks_accounting_once_logs_the_loss_and_keeps_only_what_is_unsettled() {
        use crate::testing::FakeSlurm;
        let dir = tempfile::tempdir().unwrap();
        for e in [w("7", 100), w("8", 100), w("9", 290)] {
            record(dir.path(), &e).unwrap();
        }
        let slurm = FakeSlurm::with_nodes(&["n1"]);
        slurm.set_job_records(vec![
            rec("7", "COMPLETED", Some(150), "JS1:Zm9v"),
            rec("8", "RUNNING", None, &ours()),
        ]);
        let losses = check(dir.path(), &slurm, 300, 60).unwrap();
        assert_eq!(losses.len(), 1);
        assert_eq!(losses[0].job, "7");
        assert_eq!(
            slurm.asked_job_records(),
            [vec!["7".to_owned(), "8".to_owned()]]
        );
        let left: Vec<String> = entries(dir.path())
            .unwrap()
            .into_iter()
            .map(|e| e.job)
            .collect();
        assert_eq!(
            left,
            ["8", "9"],
            "the running job and the one written just now"
        );
        // Nothing due: accounting is not asked.
        let losses = check(dir.path(), &slurm, 300, 1000).unwrap();
        assert!(losses.is_empty());
        assert_eq!(slurm.asked_job_records().len(), 1);
    }
}
