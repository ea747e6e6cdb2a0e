//! The folders the drill hands to its job user, made so that nothing the job user plants can
//! redirect a write of root's.
//!
//! A round's (or a workload run's) folder `WORK/round-NNN/` is made fresh for the round (what an
//! earlier drill left under that name is removed first, following no link), owned by the drill
//! (root) with mode `0755`: the job reads its script there and can add nothing. Inside it,
//! [`JOB_SUBDIR`] (`job/`) is handed to the job user (mode `0700`): the job's working and
//! checkpoint folder. Root writes nothing there; the checkpoint burst is written as the job user
//! ([`crate::inject::Loads::checkpoint_burst`]). Every file root writes is created
//! `O_CREAT|O_EXCL|O_NOFOLLOW` relative to a folder it opened `O_NOFOLLOW` and checked.
//!
//! `WORK` itself (`--work-dir`) must be root's (or the drill's user's) and not writable by group
//! or others unless sticky: otherwise the job user could swap a round's folder for one of theirs.

use std::io::Write;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use rustix::fs::{
    AtFlags, CWD, FileType, Gid, Mode, OFlags, Stat, Uid, fchmod, fchown, fstat, mkdirat, openat,
    statat, unlinkat,
};
use rustix::io::Errno;

/// The job's own folder inside a round's folder: its working and checkpoint folder.
pub const JOB_SUBDIR: &str = "job";

/// A folder that could not be made or written.
#[derive(Debug, thiserror::Error)]
pub enum FolderError {
    /// A file operation failed.
    #[error("cannot {what} {}: {source}", path.display())]
    Io {
        /// What was being done.
        what: &'static str,
        /// The path.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// The folder is not safe for root to write in.
    #[error(
        "{}: {why}; root would write where someone else can redirect it: give the drill a --work-dir only root can write",
        path.display()
    )]
    Unsafe {
        /// The folder.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
}

fn io<'a>(what: &'static str, path: &'a Path) -> impl Fn(Errno) -> FolderError + 'a {
    move |e| FolderError::Io {
        what,
        path: path.to_owned(),
        source: e.into(),
    }
}

/// A round's folder: root's, with the job's folder inside.
#[derive(Debug)]
pub struct RunDir {
    /// `WORK/round-NNN`, root's, mode `0755`.
    pub path: PathBuf,
    /// `WORK/round-NNN/job`, the job user's, mode `0700`.
    pub job_dir: PathBuf,
    fd: OwnedFd,
}

fn trusted_owner(st: &Stat) -> bool {
    st.st_uid == 0 || st.st_uid == nix::unistd::geteuid().as_raw()
}

/// The job user's primary group (the uid itself when the user is unknown here).
pub fn group_of(uid: u32) -> u32 {
    nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
        .ok()
        .flatten()
        .map_or(uid, |u| u.gid.as_raw())
}

/// Opens `work_dir` (made when missing) and checks it: root's (or this process's owner's), and
/// when group or others may write in it, sticky.
fn open_work_dir(work_dir: &Path) -> Result<OwnedFd, FolderError> {
    std::fs::create_dir_all(work_dir).map_err(|source| FolderError::Io {
        what: "create",
        path: work_dir.to_owned(),
        source,
    })?;
    let fd = openat(
        CWD,
        work_dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(io("open", work_dir))?;
    let st = fstat(&fd).map_err(io("look at", work_dir))?;
    if !trusted_owner(&st) {
        return Err(FolderError::Unsafe {
            path: work_dir.to_owned(),
            why: format!("it is owned by uid {}", st.st_uid),
        });
    }
    if st.st_mode & 0o022 != 0 && st.st_mode & 0o1000 == 0 {
        return Err(FolderError::Unsafe {
            path: work_dir.to_owned(),
            why: format!(
                "its mode {:o} lets group or others write in it, and it is not sticky",
                st.st_mode & 0o7777
            ),
        });
    }
    Ok(fd)
}

/// Makes `work_dir/name` fresh for a round: root's, mode `0755`, with [`JOB_SUBDIR`] inside for
/// the job user `owner` (mode `0700`; the drill's own user when `None`). What an earlier drill
/// left under `name` is removed first, following no link.
pub fn prepare(work_dir: &Path, name: &str, owner: Option<u32>) -> Result<RunDir, FolderError> {
    if name.is_empty() || name.contains('/') || name == "." || name == ".." {
        return Err(FolderError::Unsafe {
            path: work_dir.join(name),
            why: "not a plain folder name".into(),
        });
    }
    let work_fd = open_work_dir(work_dir)?;
    let path = work_dir.join(name);
    match statat(&work_fd, name, AtFlags::SYMLINK_NOFOLLOW) {
        Err(Errno::NOENT) => {}
        Err(e) => return Err(io("look at", &path)(e)),
        Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Directory => {
            // std's remove_dir_all follows no link inside (it removes a link, not its target).
            std::fs::remove_dir_all(&path).map_err(|source| FolderError::Io {
                what: "remove the earlier",
                path: path.clone(),
                source,
            })?;
        }
        Ok(_) => {
            unlinkat(&work_fd, name, AtFlags::empty()).map_err(io("remove the earlier", &path))?
        }
    }
    mkdirat(&work_fd, name, Mode::from_raw_mode(0o755)).map_err(|e| match e {
        Errno::EXIST => FolderError::Unsafe {
            path: path.clone(),
            why: "it was made again by someone else while the drill replaced it".into(),
        },
        e => io("create", &path)(e),
    })?;
    let fd = openat(
        &work_fd,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(io("open", &path))?;
    let st = fstat(&fd).map_err(io("look at", &path))?;
    if st.st_uid != nix::unistd::geteuid().as_raw() {
        return Err(FolderError::Unsafe {
            path,
            why: format!(
                "the folder just made is owned by uid {}, not the drill",
                st.st_uid
            ),
        });
    }
    fchmod(&fd, Mode::from_raw_mode(0o755)).map_err(io("set the mode of", &path))?;
    let job_dir = path.join(JOB_SUBDIR);
    mkdirat(&fd, JOB_SUBDIR, Mode::from_raw_mode(0o700)).map_err(io("create", &job_dir))?;
    let job_fd = openat(
        &fd,
        JOB_SUBDIR,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(io("open", &job_dir))?;
    if let Some(uid) = owner {
        fchown(
            &job_fd,
            Some(Uid::from_raw(uid)),
            Some(Gid::from_raw(group_of(uid))),
        )
        .map_err(io("give the job user", &job_dir))?;
    }
    fchmod(&job_fd, Mode::from_raw_mode(0o700)).map_err(io("set the mode of", &job_dir))?;
    Ok(RunDir { path, job_dir, fd })
}

impl RunDir {
    /// Writes `text` as the new file `name` (mode `0644`) in the round's folder, never through a
    /// link; returns its path.
    pub fn write_script(&self, name: &str, text: &str) -> Result<PathBuf, FolderError> {
        let path = self.path.join(name);
        let fd = openat(
            &self.fd,
            name,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o644),
        )
        .map_err(io("create", &path))?;
        fchmod(&fd, Mode::from_raw_mode(0o644)).map_err(io("set the mode of", &path))?;
        let mut f = std::fs::File::from(fd);
        f.write_all(text.as_bytes())
            .map_err(|source| FolderError::Io {
                what: "write",
                path: path.clone(),
                source,
            })?;
        Ok(path)
    }

    /// Writes `text` as `name` in the round's folder, replacing what is there by rename (a
    /// reader sees the old text or the new, never half): a file the drill changes while the
    /// job runs (a straggler round's `ctl-<node>`). Never through a link.
    pub fn replace_file(&self, name: &str, text: &str) -> Result<PathBuf, FolderError> {
        let tmp = format!(".{name}.new");
        match unlinkat(&self.fd, tmp.as_str(), AtFlags::empty()) {
            Ok(()) | Err(Errno::NOENT) => {}
            Err(e) => return Err(io("remove", &self.path.join(&tmp))(e)),
        }
        self.write_script(&tmp, text)?;
        let path = self.path.join(name);
        rustix::fs::renameat(&self.fd, tmp.as_str(), &self.fd, name)
            .map_err(io("replace", &path))?;
        Ok(path)
    }

    /// Reads the file `name` of the job's folder (the job user's): a plain file opened without
    /// following a link (the folder too), at most `max` bytes. `None` when it is missing or is
    /// not such a file.
    pub fn read_job_file(&self, name: &str, max: u64) -> Option<String> {
        use std::io::Read;
        let job = openat(
            &self.fd,
            JOB_SUBDIR,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .ok()?;
        let fd = openat(
            &job,
            name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .ok()?;
        let st = fstat(&fd).ok()?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            return None;
        }
        let mut text = String::new();
        std::fs::File::from(fd)
            .take(max)
            .read_to_string(&mut text)
            .ok()?;
        Some(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    #[test]
    fn a_link_left_in_an_earlier_round_folder_never_redirects_roots_script_write() {
        let dir = tempfile::tempdir().unwrap();
        let work = dir.path().join("work");
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        // An earlier drill's round-001, where the job user planted links.
        std::fs::create_dir_all(work.join("round-001/job")).unwrap();
        std::os::unix::fs::symlink(&victim, work.join("round-001/job.sh")).unwrap();
        std::os::unix::fs::symlink(&victim, work.join("round-001/job/ckpt")).unwrap();
        let d = prepare(&work, "round-001", None).unwrap();
        let script = d.write_script("job.sh", "#!/bin/sh\n").unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        let m = std::fs::symlink_metadata(&script).unwrap();
        assert!(m.file_type().is_file(), "a file of its own, not a link");
        assert_eq!(std::fs::read_to_string(&script).unwrap(), "#!/bin/sh\n");
        let round = std::fs::symlink_metadata(&d.path).unwrap();
        assert_eq!(round.permissions().mode() & 0o7777, 0o755);
        assert_eq!(round.uid(), nix::unistd::geteuid().as_raw());
        let job = std::fs::symlink_metadata(&d.job_dir).unwrap();
        assert!(job.is_dir());
        assert_eq!(job.permissions().mode() & 0o7777, 0o700);
        assert_eq!(
            std::fs::read_dir(&d.job_dir).unwrap().count(),
            0,
            "nothing of the earlier round is left"
        );
        // A second write of the same name is refused: never over a file already there.
        assert!(d.write_script("job.sh", "x").is_err());
    }

    #[test]
    fn a_replaced_file_is_whole_and_a_job_file_is_never_read_through_a_link() {
        let dir = tempfile::tempdir().unwrap();
        let d = prepare(&dir.path().join("work"), "stragglers-001", None).unwrap();
        d.replace_file("ctl-n1", "factor=1\n").unwrap();
        d.replace_file("ctl-n1", "factor=1.5\n").unwrap();
        assert_eq!(
            std::fs::read_to_string(d.path.join("ctl-n1")).unwrap(),
            "factor=1.5\n"
        );
        let secret = dir.path().join("secret");
        std::fs::write(&secret, "root's").unwrap();
        std::fs::write(d.job_dir.join("trainer-n1"), "pid=7\n").unwrap();
        std::os::unix::fs::symlink(&secret, d.job_dir.join("trainer-n2")).unwrap();
        assert_eq!(
            d.read_job_file("trainer-n1", 64).as_deref(),
            Some("pid=7\n")
        );
        assert_eq!(
            d.read_job_file("trainer-n2", 64),
            None,
            "a link is not read"
        );
        assert_eq!(d.read_job_file("trainer-n1", 3).as_deref(), Some("pid"));
        assert_eq!(d.read_job_file("missing", 64), None);
    }

    #[test]
    fn a_work_folder_group_or_others_can_write_is_refused_before_anything_is_made_in_it() {
        let dir = tempfile::tempdir().unwrap();
        let work = dir.path().join("work");
        std::fs::create_dir(&work).unwrap();
        std::fs::set_permissions(&work, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = prepare(&work, "round-001", None).unwrap_err().to_string();
        assert!(e.contains("not sticky") && e.contains("--work-dir"), "{e}");
        assert!(!work.join("round-001").exists());
        // Sticky, like /tmp: others cannot move or remove what root made there.
        std::fs::set_permissions(&work, std::fs::Permissions::from_mode(0o1777)).unwrap();
        prepare(&work, "round-001", None).unwrap();
    }
}
