//! `--job-age-s S`: a `during` round's job as a long one. The drill submits the round's job held
//! (`sbatch --hold`), writes [`fabric_proto::drill_age::DrillJobAge`] (that job id, `S`, an
//! expiry ten minutes on) as `drill-job-age.json` into the state folder of each of the job's
//! nodes, releases the job, and removes the files when the round ends. The watch that the job's
//! prolog starts reads its node's file once, when it opens, and takes the job's start (the
//! prolog's snapshot's time) as `S` seconds earlier: the round's fault is met late in a job
//! that has run that long (fabric-core's `jobstep::watch::drill_age`).
//!
//! Only root may date a job back: the files are root's (the drill runs as root), mode 0644, in a
//! folder only root can write, and the watch refuses any other. Each file's undo (remove it) is
//! in the restore journal before it is written, so a round's end, a signal's restore and
//! `--restore` after a crash all remove it; its expiry keeps even a file nothing removed from
//! dating any later job back. Testbed only: a real cluster's node state folders are not the
//! drill's to write.

use std::io::Write;
use std::path::{Path, PathBuf};

use fabric_proto::drill_age::{DrillJobAge, FILE_NAME};
use fabric_proto::plugin_args::{PluginArgs, expand_node, plugstack_lines};

use crate::inject::InjectError;
use crate::journal::{Journal, Undo};

/// What the journal calls the change.
pub const WHAT: &str = "job_age";

/// Where and how far a `during` round's job is dated back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobAge {
    /// Seconds.
    pub age_s: u64,
    /// The `plugstack.conf` whose fabric-check line names the nodes' `state_dir=` (`%n`).
    pub plugstack: PathBuf,
}

impl JobAge {
    /// The state folder of `node`, from the plugstack's `state_dir=`.
    pub fn state_dir(&self, node: &str) -> Result<PathBuf, InjectError> {
        let unreadable = |why: String| InjectError::Unsupported {
            class: WHAT,
            place: "the testbed",
            why,
        };
        let text = std::fs::read_to_string(&self.plugstack).map_err(|source| InjectError::Io {
            what: "read",
            path: self.plugstack.clone(),
            source,
        })?;
        let line = plugstack_lines(&text).into_iter().next().ok_or_else(|| {
            unreadable(format!(
                "{} loads no fabric-check plugin",
                self.plugstack.display()
            ))
        })?;
        let (args, _) = PluginArgs::parse(line.args.iter().map(String::as_str));
        expand_node(&args.state_dir, node)
            .ok_or_else(|| unreadable(format!("{node:?} is not a node name for state_dir=")))
    }

    /// Writes the file for `job` on each of `nodes` at `now_unix_s`, each undo journaled first
    /// and its entry pushed to `ids` (to undo when the round ends, also after an error here).
    pub fn write(
        &self,
        nodes: &[String],
        job: u32,
        now_unix_s: u64,
        journal: &mut Journal,
        ids: &mut Vec<u64>,
    ) -> Result<(), InjectError> {
        let file = DrillJobAge::new(job, self.age_s, now_unix_s);
        for node in nodes {
            let dir = self.state_dir(node)?;
            let path = dir.join(FILE_NAME);
            ids.push(journal.record(node, WHAT, Undo::Remove { path: path.clone() })?);
            write_file(&dir, &file).map_err(|source| InjectError::Io {
                what: "write",
                path,
                source,
            })?;
        }
        Ok(())
    }
}

/// Writes `file` into `dir` as [`FILE_NAME`]: a fresh temporary file (`O_EXCL|O_NOFOLLOW`, mode
/// 0644, synced), renamed over the name, so a reader sees the whole file or none.
fn write_file(dir: &Path, file: &DrillJobAge) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = dir.join(format!(".{FILE_NAME}.{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
        .open(&tmp)?;
    f.write_all(&serde_json::to_vec(file).map_err(std::io::Error::other)?)?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, dir.join(FILE_NAME))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plugstack(dir: &Path) -> PathBuf {
        let p = dir.join("plugstack.conf");
        std::fs::write(
            &p,
            format!(
                "required {0}/lib/spank_fabric_check.so probe={0}/bin/fabric-check state_dir={0}/state/%n timeout=10\n",
                dir.display()
            ),
        )
        .unwrap();
        p
    }

    #[test]
    fn a_job_is_dated_back_on_each_of_its_nodes_and_the_journal_removes_every_file() {
        let dir = tempfile::tempdir().unwrap();
        for n in ["n1", "n2"] {
            std::fs::create_dir_all(dir.path().join("state").join(n)).unwrap();
        }
        let age = JobAge {
            age_s: 86_400,
            plugstack: plugstack(dir.path()),
        };
        let mut j = Journal::open(&dir.path().join("journal.jsonl")).unwrap();
        let mut ids = Vec::new();
        age.write(
            &["n1".into(), "n2".into()],
            42,
            1_800_000_000,
            &mut j,
            &mut ids,
        )
        .unwrap();
        assert_eq!(ids.len(), 2);
        for n in ["n1", "n2"] {
            let at = dir.path().join("state").join(n).join(FILE_NAME);
            let f: DrillJobAge = serde_json::from_slice(&std::fs::read(&at).unwrap()).unwrap();
            assert_eq!(f, DrillJobAge::new(42, 86_400, 1_800_000_000));
            let mode = std::os::unix::fs::PermissionsExt::mode(
                &std::fs::metadata(&at).unwrap().permissions(),
            );
            assert_eq!(mode & 0o777, 0o644);
        }
        let pending = j.pending().unwrap();
        assert!(
            pending.iter().all(|p| p.what == WHAT
                && matches!(&p.undo, Undo::Remove { path } if path.ends_with(FILE_NAME))),
            "{pending:?}"
        );
        let mut inj = crate::inject::Loads::default();
        for p in &pending {
            inj.undo(&p.node, &p.undo).unwrap();
        }
        for n in ["n1", "n2"] {
            assert!(!dir.path().join("state").join(n).join(FILE_NAME).exists());
        }
    }

    #[test]
    fn a_plugstack_without_fabric_check_names_no_state_folder() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("plugstack.conf");
        std::fs::write(&p, "# no SPANK plugins\n").unwrap();
        let age = JobAge {
            age_s: 60,
            plugstack: p,
        };
        let e = age.state_dir("n1").unwrap_err().to_string();
        assert!(e.contains("loads no fabric-check plugin"), "{e}");
    }
}
