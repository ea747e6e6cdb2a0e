//! The drill's dated-back job, as the watch reads it when it opens
//! ([`fabric_proto::drill_age`]): `<state_dir>/drill-job-age.json`, written by `fabric-check
//! drill --job-age-s S` (root, the testbed) for a `during` round's job, moves that job's start
//! (the prolog's snapshot's time) back by `age_s`, so the watch meets the round's fault late in a
//! long job.
//!
//! Only root may date a job back. The file is taken only when the state folder is root's and
//! nobody else can write it, and the file itself is a plain file of root's with one link that
//! nobody else can write, opened without following a link; it applies only to the job it names
//! and only before its expiry (at most [`MAX_VALID_S`](fabric_proto::drill_age::MAX_VALID_S)
//! ahead). Anything else is refused, said in the watch's log, and the job keeps its real start.
//!
//! What moves is the baseline's time alone ([`super::QuickSampler::dated_back`]): the counters
//! stay the values the prolog read, the snapshot on disk is not touched (the epilog judges the
//! job as it really ran), and the sliding hour starts at the snapshot as it was taken, so the
//! emulated day of silence is never a per-hour bound's span.

use std::io::Read;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use fabric_proto::drill_age::{DrillJobAge, FILE_NAME, MAX_FILE_BYTES, NotApplied};
use rustix::fs::{CWD, FileType, Mode, OFlags, fstat, openat};

/// What the watch of one job found in its node's state folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DatedBack {
    /// No file: the job keeps its real start.
    No,
    /// The job is dated back this many seconds.
    By {
        /// Seconds.
        age_s: u64,
        /// The file.
        path: PathBuf,
    },
    /// A file that does not apply (another job's, or expired): the job keeps its real start.
    NotApplied {
        /// Why.
        why: NotApplied,
        /// The file.
        path: PathBuf,
    },
    /// A file that is not to be trusted or read: the job keeps its real start.
    Refused {
        /// Why.
        why: String,
        /// The file.
        path: PathBuf,
    },
}

impl DatedBack {
    /// The age to apply, seconds (0 unless [`DatedBack::By`]).
    pub fn age_s(&self) -> u64 {
        match self {
            DatedBack::By { age_s, .. } => *age_s,
            _ => 0,
        }
    }

    /// The line the watch says of it, if any.
    pub fn line(&self, job: u32) -> Option<String> {
        match self {
            DatedBack::No => None,
            DatedBack::By { age_s, path } => Some(format!(
                "watch: job {job}'s start is dated back {age_s} s by a fault drill ({}): the watch judges it as a job that has run that long (a drill, not the job's real age)",
                path.display()
            )),
            DatedBack::NotApplied { why, path } => Some(format!(
                "watch: {} does not apply: {why}; job {job} keeps its real start",
                path.display()
            )),
            DatedBack::Refused { why, path } => Some(format!(
                "watch: {} is refused: {why}; job {job} keeps its real start",
                path.display()
            )),
        }
    }
}

/// The drill's file in `state_dir`.
pub fn path(state_dir: &Path) -> PathBuf {
    state_dir.join(FILE_NAME)
}

/// Reads the drill's file in `state_dir` for `job` at `now_unix_s` (root's, see the module doc).
pub fn read(state_dir: &Path, job: u32, now_unix_s: u64) -> DatedBack {
    // Root's alone. A unit test trusts the user that runs it (root, or a developer), whose
    // temporary folders it writes; its refusals are tested with another owner.
    #[cfg(not(test))]
    let owner = 0;
    #[cfg(test)]
    let owner = nix::unistd::geteuid().as_raw();
    read_owned_by(state_dir, job, now_unix_s, owner)
}

/// [`read`], trusting files and folders of `owner` (root's, 0, outside tests).
pub(crate) fn read_owned_by(state_dir: &Path, job: u32, now_unix_s: u64, owner: u32) -> DatedBack {
    let at = path(state_dir);
    let refused = |why: String| DatedBack::Refused {
        why,
        path: at.clone(),
    };
    let dir = match openat(
        CWD,
        state_dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT) => return DatedBack::No,
        Err(e) => return refused(format!("its folder cannot be opened ({e})")),
    };
    if let Err(why) = trusted(&dir, owner, "its folder", false) {
        // Without the file there is nothing to refuse: a state folder that is not root's is
        // said elsewhere.
        return match openat(
            &dir,
            FILE_NAME,
            OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Err(rustix::io::Errno::NOENT) => DatedBack::No,
            _ => refused(why),
        };
    }
    let fd = match openat(
        &dir,
        FILE_NAME,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT) => return DatedBack::No,
        Err(rustix::io::Errno::LOOP) => return refused("it is a symbolic link".into()),
        Err(e) => return refused(format!("it cannot be opened ({e})")),
    };
    if let Err(why) = trusted(&fd, owner, "it", true) {
        return refused(why);
    }
    let mut text = Vec::new();
    if let Err(e) = std::fs::File::from(fd)
        .take(MAX_FILE_BYTES as u64 + 1)
        .read_to_end(&mut text)
    {
        return refused(format!("it cannot be read ({e})"));
    }
    if text.len() > MAX_FILE_BYTES {
        return refused(format!("it is larger than {MAX_FILE_BYTES} bytes"));
    }
    let file: DrillJobAge = match serde_json::from_slice(&text) {
        Ok(f) => f,
        Err(e) => return refused(format!("it is not a drill's job age ({e})")),
    };
    match file.age_for(job, now_unix_s) {
        Ok(age_s) => DatedBack::By { age_s, path: at },
        Err(why) => DatedBack::NotApplied { why, path: at },
    }
}

/// Whether `fd` (`what`: a folder, or with `plain_file` a regular file with one link) is
/// `owner`'s and not writable by group or others.
fn trusted(fd: &OwnedFd, owner: u32, what: &str, plain_file: bool) -> Result<(), String> {
    let st = fstat(fd).map_err(|e| format!("{what} cannot be looked at ({e})"))?;
    if plain_file {
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            return Err("it is not a plain file".into());
        }
        if st.st_nlink != 1 {
            return Err(format!("it has {} links", st.st_nlink));
        }
    }
    if st.st_uid != owner {
        return Err(format!(
            "{what} is owned by uid {}, not {}",
            st.st_uid,
            if owner == 0 {
                "root".to_owned()
            } else {
                format!("uid {owner}")
            }
        ));
    }
    if st.st_mode & 0o022 != 0 {
        return Err(format!(
            "{what} is writable by group or others (mode {:o})",
            st.st_mode & 0o7777
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    const NOW: u64 = 1_800_000_000;

    /// A state folder (mode 0755, the test user's) with the drill's file for `job`.
    fn state_with(job: u32) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        write(dir.path(), &DrillJobAge::new(job, 86_400, NOW));
        dir
    }

    fn write(dir: &Path, f: &DrillJobAge) {
        let at = path(dir);
        std::fs::write(&at, serde_json::to_vec(f).unwrap()).unwrap();
        std::fs::set_permissions(&at, std::fs::Permissions::from_mode(0o644)).unwrap();
    }

    fn me() -> u32 {
        nix::unistd::geteuid().as_raw()
    }

    #[test]
    fn a_file_of_the_trusted_owner_for_this_job_dates_it_back() {
        let dir = state_with(42);
        let got = read(dir.path(), 42, NOW + 5);
        assert_eq!(
            got,
            DatedBack::By {
                age_s: 86_400,
                path: path(dir.path())
            }
        );
        let line = got.line(42).unwrap();
        assert!(
            line.contains("job 42's start is dated back 86400 s by a fault drill"),
            "{line}"
        );
    }

    #[test]
    fn no_file_leaves_the_job_its_real_start_and_says_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let got = read(dir.path(), 42, NOW);
        assert_eq!((got.age_s(), got.line(42)), (0, None));
    }

    #[test]
    fn the_hook_is_refused_when_not_root_owned() {
        let dir = state_with(42);
        // Trusting another owner than the file's: the file (and its folder) are not its.
        let got = read_owned_by(dir.path(), 42, NOW, me() + 1);
        assert!(
            matches!(&got, DatedBack::Refused { why, .. } if why.contains("owned by uid")),
            "{got:?}"
        );
        assert_eq!(got.age_s(), 0);
        if me() == 0 {
            // Root's folder, the job user's file: refused by the reader the watch runs.
            let at = path(dir.path());
            nix::unistd::chown(&at, Some(1500.into()), Some(1500.into())).unwrap();
            let got = read(dir.path(), 42, NOW);
            assert!(
                matches!(&got, DatedBack::Refused { why, .. } if why == "it is owned by uid 1500, not root"),
                "{got:?}"
            );
        }
    }

    #[test]
    fn the_hook_is_refused_when_group_or_others_can_write_the_file_or_its_folder() {
        let dir = state_with(42);
        let at = path(dir.path());
        std::fs::set_permissions(&at, std::fs::Permissions::from_mode(0o666)).unwrap();
        let got = read(dir.path(), 42, NOW);
        assert!(
            matches!(&got, DatedBack::Refused { why, .. } if why.contains("it is writable by group or others (mode 666)")),
            "{got:?}"
        );
        std::fs::set_permissions(&at, std::fs::Permissions::from_mode(0o644)).unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
        let got = read(dir.path(), 42, NOW);
        assert!(
            matches!(&got, DatedBack::Refused { why, .. } if why.contains("its folder is writable")),
            "{got:?}"
        );
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::remove_file(&at).unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        assert_eq!(
            read(dir.path(), 42, NOW),
            DatedBack::No,
            "no file: nothing to refuse"
        );
    }

    #[test]
    fn the_hook_is_refused_for_a_link_a_second_link_or_what_is_not_a_plain_file() {
        let dir = state_with(42);
        let at = path(dir.path());
        let real = dir.path().join("elsewhere.json");
        std::fs::rename(&at, &real).unwrap();
        std::os::unix::fs::symlink(&real, &at).unwrap();
        let got = read(dir.path(), 42, NOW);
        assert!(
            matches!(&got, DatedBack::Refused { why, .. } if why == "it is a symbolic link"),
            "{got:?}"
        );
        std::fs::remove_file(&at).unwrap();
        std::fs::hard_link(&real, &at).unwrap();
        let got = read(dir.path(), 42, NOW);
        assert!(
            matches!(&got, DatedBack::Refused { why, .. } if why == "it has 2 links"),
            "{got:?}"
        );
        std::fs::remove_file(&at).unwrap();
        std::fs::create_dir(&at).unwrap();
        let got = read(dir.path(), 42, NOW);
        assert!(
            matches!(&got, DatedBack::Refused { why, .. } if why == "it is not a plain file"),
            "{got:?}"
        );
    }

    #[test]
    fn the_hook_does_not_apply_to_another_job() {
        let dir = state_with(42);
        let got = read(dir.path(), 43, NOW);
        assert_eq!(
            got,
            DatedBack::NotApplied {
                why: NotApplied::OtherJob {
                    for_job: 42,
                    job: 43
                },
                path: path(dir.path())
            }
        );
        assert_eq!(got.age_s(), 0);
        assert!(
            got.line(43)
                .unwrap()
                .contains("it is for job 42, not job 43; job 43 keeps its real start")
        );
    }

    #[test]
    fn an_expired_hook_or_one_that_claims_to_last_for_hours_does_not_apply() {
        let dir = state_with(42);
        let got = read(dir.path(), 42, NOW + 601);
        assert!(
            matches!(
                got,
                DatedBack::NotApplied {
                    why: NotApplied::Expired { ago_s: 1 },
                    ..
                }
            ),
            "{got:?}"
        );
        write(
            dir.path(),
            &DrillJobAge {
                job: 42,
                age_s: 86_400,
                expires_unix_s: NOW + 30 * 86_400,
            },
        );
        let got = read(dir.path(), 42, NOW);
        assert!(
            matches!(
                got,
                DatedBack::NotApplied {
                    why: NotApplied::ExpiresTooLate { .. },
                    ..
                }
            ),
            "{got:?}"
        );
    }

    #[test]
    fn a_file_that_is_not_a_drills_job_age_or_too_large_is_refused() {
        let dir = state_with(42);
        let at = path(dir.path());
        std::fs::write(&at, "{\"job\":42,\"age_s\":\"a day\"}").unwrap();
        let got = read(dir.path(), 42, NOW);
        assert!(
            matches!(&got, DatedBack::Refused { why, .. } if why.starts_with("it is not a drill's job age")),
            "{got:?}"
        );
        std::fs::write(&at, vec![b' '; MAX_FILE_BYTES + 1]).unwrap();
        let got = read(dir.path(), 42, NOW);
        assert!(
            matches!(&got, DatedBack::Refused { why, .. } if why.contains("larger than 4096 bytes")),
            "{got:?}"
        );
    }
}
