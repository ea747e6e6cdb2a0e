//! What the prolog leader keeps in root's state folder for the epilog leader, the same first
//! node:
//!
//! - its tag that could not be written (munged or slurmctld away at that moment),
//!   `<state_dir>/prolog-tag-<job>.json` ([`PendingPrologTag`]): the epilog writes it with its
//!   own merge once Slurm answers again;
//! - why its rendezvous failed (no port free, no follower in time...),
//!   `<state_dir>/rendezvous-failed-<job>.json` ([`RendezvousFailed`]): the job then has no tag,
//!   and the epilog writes one with its own verdicts and a note that says why
//!   ([`super::tag_update::Untagged`]).
//!
//! What is kept is the prolog's result, not a finished tag: the epilog rebuilds the prolog's
//! part of the tag from the comment it reads then ([`PendingPrologTag::apply`], in
//! [`super::tag_update`]), so an earlier
//! attempt's verdict (a requeue) still moves to `earlier` and a step end's live `run` is merged.
//! The file is root's, in root's folder; the job never writes it.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use serde::de::DeserializeOwned;

use super::JobStep;
use fabric_proto::tag::{CollectiveSummary, NodeResult};

const PREFIX: &str = "prolog-tag-";
const SUFFIX: &str = ".json";
const FAILED_PREFIX: &str = "rendezvous-failed-";

/// The most characters of a failed rendezvous's reason kept.
const MAX_REASON_CHARS: usize = 1_000;

/// How long a kept result whose epilog could not write it either stays in the state folder.
pub const KEEP_AT_MOST: Duration = Duration::from_secs(7 * 86_400);

/// The largest pending file read back: a 1,000-node result is about 100 KiB.
const MAX_PENDING_BYTES: u64 = 4 << 20;

/// The prolog leader's result, as it would have gone into the tag.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PendingPrologTag {
    /// `quick` or `full`.
    pub mode: String,
    /// When the prolog probed, Unix seconds.
    pub probed_at_s: u64,
    /// Every node's result that reached the leader.
    pub nodes: BTreeMap<String, NodeResult>,
    /// Nodes whose verdict never reached it.
    pub missing: Vec<String>,
    /// The prolog's notes.
    pub notes: Vec<String>,
    /// The collective's report (`--fabric-check=full`).
    pub collective: Option<CollectiveSummary>,
    /// What the job's spare nodes did (`--fabric-check-spares`).
    #[serde(default)]
    pub spares: Option<fabric_proto::spares::SparesRecord>,
}

impl PendingPrologTag {
    fn path(step: &JobStep<'_>) -> PathBuf {
        step.setup
            .state_dir
            .join(format!("{PREFIX}{}{SUFFIX}", step.job_id()))
    }

    /// Keeps this result for the epilog (said; a failure to keep it is said too).
    pub fn keep(&self, step: &JobStep<'_>) {
        let path = Self::path(step);
        match write_json(&path, self) {
            Ok(()) => step.say(&format!(
                "job {}: the prolog's verdict is kept in {}; the epilog writes it",
                step.job_id(),
                path.display()
            )),
            Err(e) => step.say(&format!(
                "job {}: the prolog's verdict could not be kept in {} ({e}); the job stays untagged",
                step.job_id(),
                path.display()
            )),
        }
    }

    /// The result a prolog kept for this job, if any (an unreadable file is said and dropped).
    pub fn load(step: &JobStep<'_>) -> Option<Self> {
        read_json(step, &Self::path(step), "the prolog's kept verdict")
    }

    /// Removes the kept result of this job (once the tag holds it).
    pub fn remove(step: &JobStep<'_>) {
        let _ = std::fs::remove_file(Self::path(step));
    }
}

/// Writes `value` to `path` through a temporary file beside it (never half a file).
fn write_json(path: &Path, value: &impl Serialize) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    let done = serde_json::to_vec(value)
        .map_err(std::io::Error::other)
        .and_then(|bytes| std::fs::write(&tmp, bytes))
        .and_then(|()| std::fs::rename(&tmp, path));
    if done.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    done
}

/// What `path` holds, if anything; an unreadable file (`what`) is said and removed.
fn read_json<T: DeserializeOwned>(step: &JobStep<'_>, path: &Path, what: &str) -> Option<T> {
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => {
            step.say(&format!("cannot read {} ({e}); skipped", path.display()));
            return None;
        }
    };
    let mut bytes = Vec::new();
    let read = file
        .take(MAX_PENDING_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())
        .and_then(|n| {
            if n as u64 > MAX_PENDING_BYTES {
                Err(format!("over {MAX_PENDING_BYTES} bytes"))
            } else {
                serde_json::from_slice(&bytes).map_err(|e| e.to_string())
            }
        });
    match read {
        Ok(p) => Some(p),
        Err(e) => {
            step.say(&format!(
                "{what} {} is unreadable ({e}); removed",
                path.display()
            ));
            let _ = std::fs::remove_file(path);
            None
        }
    }
}

/// Why the prolog's rendezvous failed on the job's first node, and that node's own verdict,
/// kept for its epilog: the job has no tag then (the leader writes it, and had no meeting to
/// write), and the epilog writes one that says so.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RendezvousFailed {
    /// What the rendezvous answered (the ports tried, or the followers that never came).
    pub reason: String,
    /// `quick` or `full`.
    pub mode: String,
    /// When the prolog gave up on the rendezvous, Unix seconds.
    pub probed_at_s: u64,
    /// The first node's own prolog result.
    pub result: NodeResult,
}

impl RendezvousFailed {
    /// The record of a rendezvous that failed with `reason` (cut to a bounded length).
    pub fn new(reason: &str, mode: &str, probed_at_s: u64, result: NodeResult) -> Self {
        Self {
            reason: reason.chars().take(MAX_REASON_CHARS).collect(),
            mode: mode.to_owned(),
            probed_at_s,
            result,
        }
    }

    fn path(step: &JobStep<'_>) -> PathBuf {
        step.setup
            .state_dir
            .join(format!("{FAILED_PREFIX}{}{SUFFIX}", step.job_id()))
    }

    /// Keeps the record for the epilog (said, and a failure to keep it too).
    pub fn keep(&self, step: &JobStep<'_>) {
        let path = Self::path(step);
        match write_json(&path, self) {
            Ok(()) => step.say(&format!(
                "job {}: no tag now (the rendezvous failed); the epilog writes one, why kept in {}",
                step.job_id(),
                path.display()
            )),
            Err(e) => step.say(&format!(
                "job {}: why the rendezvous failed could not be kept in {} ({e}); the epilog \
                 still writes a tag if none is there",
                step.job_id(),
                path.display()
            )),
        }
    }

    /// The record the prolog kept for this job, if any.
    pub fn load(step: &JobStep<'_>) -> Option<Self> {
        read_json(step, &Self::path(step), "the failed rendezvous's record")
    }

    /// Removes the record (once the job has a tag).
    pub fn remove(step: &JobStep<'_>) {
        let _ = std::fs::remove_file(Self::path(step));
    }
}

/// A kept prolog result that has been there longer than the health check's grace: its epilog
/// could not write it either.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stranded {
    /// The job.
    pub job: String,
    /// The kept file.
    pub path: PathBuf,
    /// How long it has been there.
    pub age: Duration,
    /// Removed now: older than [`KEEP_AT_MOST`].
    pub removed: bool,
}

impl std::fmt::Display for Stranded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "job {}: its prolog's verdict never reached Slurm (munged or slurmctld were away at its prolog and its epilog); ",
            self.job
        )?;
        if self.removed {
            write!(
                f,
                "{} removed after {} days",
                self.path.display(),
                self.age.as_secs() / 86_400
            )
        } else {
            write!(
                f,
                "kept in {} for {} min, removed after {} days",
                self.path.display(),
                self.age.as_secs() / 60,
                KEEP_AT_MOST.as_secs() / 86_400
            )
        }
    }
}

/// Every kept result in `state_dir` older than `grace` (by its modification time against
/// `now`), sorted by job; those older than [`KEEP_AT_MOST`] are removed. A folder that cannot
/// be listed gives none.
pub fn stranded(state_dir: &Path, grace: Duration, now: SystemTime) -> Vec<Stranded> {
    let Ok(dir) = std::fs::read_dir(state_dir) else {
        return Vec::new();
    };
    let mut out: Vec<Stranded> = dir
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let job = name.strip_prefix(PREFIX)?.strip_suffix(SUFFIX)?.to_owned();
            let age = now
                .duration_since(e.metadata().ok()?.modified().ok()?)
                .unwrap_or_default();
            (age > grace).then(|| {
                let path = e.path();
                let removed = age > KEEP_AT_MOST && std::fs::remove_file(&path).is_ok();
                Stranded {
                    job,
                    path,
                    age,
                    removed,
                }
            })
        })
        .collect();
    out.sort_by(|a, b| a.job.cmp(&b.job));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_kept_results_older_than_the_grace_are_stranded_and_a_week_old_one_is_removed() {
        let dir = tempfile::tempdir().unwrap();
        for name in [
            "prolog-tag-7.json",
            "prolog-tag-8.json",
            "job-7.json",
            "last.json",
        ] {
            std::fs::write(dir.path().join(name), "{}").unwrap();
        }
        let now = SystemTime::now();
        assert!(stranded(dir.path(), Duration::from_secs(120), now).is_empty());

        let later = now + Duration::from_secs(3600);
        let found = stranded(dir.path(), Duration::from_secs(120), later);
        assert_eq!(
            found.iter().map(|s| s.job.as_str()).collect::<Vec<_>>(),
            ["7", "8"]
        );
        assert!(found.iter().all(|s| !s.removed));
        assert!(
            found[0].to_string().contains("never reached Slurm"),
            "{}",
            found[0]
        );

        let week = now + KEEP_AT_MOST + Duration::from_secs(60);
        let found = stranded(dir.path(), Duration::from_secs(120), week);
        assert!(found.iter().all(|s| s.removed), "{found:?}");
        assert!(!dir.path().join("prolog-tag-7.json").exists());
        assert!(dir.path().join("job-7.json").exists(), "other files stay");
        assert!(stranded(dir.path(), Duration::ZERO, week).is_empty());
    }
}
