//! The in-job watch's notice to the running job: one JSON line per fault, in a file the job's
//! user can read and only root writes.
//!
//! The watch (`fabric-check watch`, root) appends a [`FabricNotice`] line to
//! `<spool_dir>/<job>/fabric-notice-<node>.jsonl` ([`notice_path`]) the moment it sees a fault
//! on its node while the job runs; `fabric-run` reads new lines as they come, prints one line to
//! stderr, records it in the run summary and, with `--on-fabric-fault=signal:SIG`, signals the
//! training process so that it can checkpoint now.
//!
//! The file is root's (mode 0644) inside the job's own spool folder: the watch creates it with
//! `O_EXCL|O_NOFOLLOW` and writes only through the descriptor it opened, so a name the job user
//! plants or replaces there never redirects root's write. The job's user can delete the file
//! (the folder is theirs); they then lose their own notices, nothing else.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The record type of a notice line (`"type":"fabric_fault"`).
pub const NOTICE_TYPE: &str = "fabric_fault";

/// The version of the notice line.
pub const NOTICE_VERSION: u32 = 1;

/// The longest notice line a reader takes; longer lines are not ours and are skipped.
pub const MAX_NOTICE_LINE_BYTES: usize = 4096;

/// One fault the watch saw on its node while the job ran.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FabricNotice {
    /// Always [`NOTICE_TYPE`].
    #[serde(rename = "type")]
    pub kind: String,
    /// Always [`NOTICE_VERSION`].
    pub v: u32,
    /// The job.
    pub job: u32,
    /// The node the fault is on.
    pub node: String,
    /// The check that failed (`ib.port_state`, ...).
    pub check: String,
    /// What it found.
    pub message: String,
    /// When it was seen (seconds since the epoch).
    pub seen_at_s: u64,
    /// How long into the job that was (seconds since the prolog).
    pub into_job_s: u64,
    /// Whether the node was drained for it (no new jobs land there; this job is not killed).
    pub drained: bool,
    /// Whether root requeued the job for it (the job asked, `on_fault=requeue` allowed it).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub requeued: bool,
    /// A warning (a counter over its warn bound, a pause storm), not a fault: never drained,
    /// and `fabric-run --on-fabric-fault` sends no signal for it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub warn: bool,
}

impl FabricNotice {
    /// A notice of the current version.
    pub fn new(job: u32, node: &str, check: &str, message: &str, seen_at_s: u64) -> Self {
        Self {
            kind: NOTICE_TYPE.to_owned(),
            v: NOTICE_VERSION,
            job,
            node: node.to_owned(),
            check: check.to_owned(),
            message: message.to_owned(),
            seen_at_s,
            into_job_s: 0,
            drained: false,
            requeued: false,
            warn: false,
        }
    }

    /// The JSON line, newline included.
    pub fn to_line(&self) -> String {
        let mut s = serde_json::to_string(self).unwrap_or_default();
        s.push('\n');
        s
    }

    /// Reads one line; `None` for anything that is not a notice of this version (or too long).
    pub fn parse_line(line: &str) -> Option<Self> {
        if line.len() > MAX_NOTICE_LINE_BYTES {
            return None;
        }
        serde_json::from_str::<Self>(line.trim())
            .ok()
            .filter(|n| n.kind == NOTICE_TYPE && n.v == NOTICE_VERSION)
    }

    /// Whether it tells of the job's own steps (a straggler, a slowdown that is the
    /// workload's: `fabric_proto::straggler`) rather than a fabric fault: said to the job, never
    /// counted as a fabric fault, never signalled.
    pub fn is_about_steps(&self) -> bool {
        self.check == crate::check_id::JOB_STRAGGLER
            || self.check == crate::check_id::JOB_WORKLOAD_SLOW
    }

    /// The one line `fabric-run` prints to stderr.
    pub fn summary(&self) -> String {
        if self.is_about_steps() {
            return format!(
                "fabric-check: job {}'s steps {}s in: {} on {}: {}",
                self.job, self.into_job_s, self.check, self.node, self.message
            );
        }
        format!(
            "fabric-check: fabric {} on {} {}s into job {}: {}: {}{}",
            if self.warn { "warning" } else { "fault" },
            self.node,
            self.into_job_s,
            self.job,
            self.check,
            self.message,
            if self.drained {
                " (node drained: no new jobs land there; this job keeps running)"
            } else {
                ""
            }
        )
    }
}

/// The notice file of `node` for `job_id`: `<spool_root>/<job_id>/fabric-notice-<node>.jsonl`;
/// `None` when the job id or node name would escape the spool (as
/// [`crate::record::node_records_path`]).
pub fn notice_path(spool_root: &Path, job_id: &str, node: &str) -> Option<PathBuf> {
    crate::record::node_records_path(spool_root, job_id, node)
        .map(|p| p.with_file_name(notice_name(node)))
}

/// The name of `node`'s notice file in the job's spool folder (root opens it relative to the
/// folder's verified descriptor, never by [`notice_path`]).
pub fn notice_name(node: &str) -> String {
    format!("fabric-notice-{node}.jsonl")
}

/// The file by which the job on `node` asks to be requeued when the in-job watch drains the
/// node under it (`fabric-run --on-fabric-fault=requeue` creates it):
/// `<spool_root>/<job_id>/fabric-run-requeue-<node>`. Only its being a regular file counts (it
/// is the job user's; root reads nothing from it), and only where the admin allows it
/// (`on_fault=requeue`); root then requeues that job alone, by the id of its own invocation.
pub fn requeue_wish_path(spool_root: &Path, job_id: &str, node: &str) -> Option<PathBuf> {
    crate::record::node_records_path(spool_root, job_id, node)
        .map(|p| p.with_file_name(requeue_wish_name(node)))
}

/// The name of `node`'s requeue wish in the job's spool folder ([`requeue_wish_path`]).
pub fn requeue_wish_name(node: &str) -> String {
    format!("fabric-run-requeue-{node}")
}

/// Whether the job asked to be requeued: `path` is a regular file (a link is not followed and
/// does not count).
pub fn requeue_wished(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_requeue_wish_is_a_regular_file_beside_the_notice_and_a_link_is_none() {
        let dir = std::env::temp_dir().join(format!("fc-wish-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("7")).unwrap();
        let p = requeue_wish_path(&dir, "7", "n2").unwrap();
        assert_eq!(p, dir.join("7/fabric-run-requeue-n2"));
        assert!(requeue_wish_path(&dir, "../7", "n2").is_none());
        assert!(!requeue_wished(&p));
        std::os::unix::fs::symlink("/etc/hostname", &p).unwrap();
        assert!(!requeue_wished(&p), "a link is not a wish");
        std::fs::remove_file(&p).unwrap();
        std::fs::write(&p, "").unwrap();
        assert!(requeue_wished(&p));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_notice_line_reads_back_as_written() {
        let mut n = FabricNotice::new(7, "n2", "ib.port_state", "mlx5_0 port 1 is DOWN", 100);
        n.into_job_s = 12;
        n.drained = true;
        let line = n.to_line();
        assert!(line.ends_with('\n') && !line[..line.len() - 1].contains('\n'));
        assert_eq!(FabricNotice::parse_line(&line), Some(n.clone()));
        assert!(n.summary().contains("n2 12s into job 7: ib.port_state"));
    }

    #[test]
    fn lines_of_another_type_or_version_are_not_notices() {
        let n = FabricNotice::new(7, "n2", "c", "m", 1);
        let other = n.to_line().replace("fabric_fault", "step_end");
        assert_eq!(FabricNotice::parse_line(&other), None);
        let newer = n.to_line().replace("\"v\":1", "\"v\":2");
        assert_eq!(FabricNotice::parse_line(&newer), None);
        assert_eq!(
            FabricNotice::parse_line(&"x".repeat(MAX_NOTICE_LINE_BYTES + 1)),
            None
        );
    }

    #[test]
    fn a_notice_path_never_leaves_the_spool() {
        let root = Path::new("/spool");
        assert_eq!(
            notice_path(root, "7", "n1"),
            Some(PathBuf::from("/spool/7/fabric-notice-n1.jsonl"))
        );
        assert_eq!(notice_path(root, "..", "n1"), None);
        assert_eq!(notice_path(root, "7", "a/b"), None);
    }
}
