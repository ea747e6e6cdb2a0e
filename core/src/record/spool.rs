//! The per-job spool folder, `<spool_dir>/<job>/`, as root sees it.
//!
//! The spool root may be writable by every job user (mode `1777`, like `/tmp`), so any name in it
//! can be planted, and a job's own folder is its user's to rename or replace at any moment. Root
//! therefore never works by path below the spool root:
//!
//! - **The prolog** ([`prepare_job_dir`]) makes the folder itself, for the job's uid, mode
//!   `0700`. A folder already there is kept only when it is exactly what root would have made (a
//!   real directory, owned by the job's uid or by root, writable by its owner alone): a job's
//!   other nodes sharing the spool, or a requeued run of the job, find it so. Anything else (a
//!   folder of another user made for a future job id, a symlink, a file) is **replaced**: root
//!   makes a fresh folder under a private name and swaps it into place atomically
//!   (`renameat2(RENAME_EXCHANGE)`), then removes what it swapped out when that is a plain file,
//!   a symlink or an empty folder, and otherwise leaves it under the `.fabric-check-foreign-*`
//!   name it now has (its owner's files; never read). A squatter cannot make the job unrecorded.
//! - **The epilog** ([`JobDir::open`]) opens the folder once (`O_DIRECTORY | O_NOFOLLOW`,
//!   relative to the spool root's descriptor), checks its owner and mode on the descriptor, and
//!   from then on reads ([`JobDir::read_records`]) and deletes ([`JobDir::remove`]) only relative
//!   to that descriptor: swapping the folder for a symlink to another job's folder after the
//!   check changes nothing root reads or deletes. A file is opened `O_PATH | O_NOFOLLOW`,
//!   checked with `fstat` (a regular file, one link, the job user's) and only then reopened for
//!   reading through `/proc/self/fd`, so a device node (or a hard link to one) is never opened.
//!
//! The epilog deletes a node's files only once they were delivered (the leader has them or the
//! tag is written); see `docs/records.md`.

use std::ffi::OsStr;
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use rustix::fs::{
    AtFlags, CWD, Dir, FileType, Gid, Mode, OFlags, RenameFlags, Stat, Uid, fchmod, fchown, fstat,
    mkdirat, openat, renameat_with, statat, unlinkat,
};
use rustix::io::Errno;

use super::summary::{open_in_dir, read_records_from, read_user_bytes};
use super::{ReadLimits, RecordError, Records};

/// The mode of a job's folder: its user alone.
pub const JOB_DIR_MODE: u32 = 0o700;

/// The prefix of what the prolog swapped out of a job's place (another user's folder).
pub const FOREIGN_PREFIX: &str = ".fabric-check-foreign-";

/// Why the job's spool folder cannot be prepared or opened.
#[derive(Debug, thiserror::Error)]
pub enum SpoolError {
    /// The job id cannot name a folder (empty, `.`, `..`, a `/` or a NUL byte).
    #[error("job id {0:?} cannot name a spool folder")]
    BadJob(String),
    /// The spool root cannot be opened.
    #[error(
        "spool root {path}: {source}; create it (root-owned, mode 0755 or 1777) or fix spool_dir= in plugstack.conf"
    )]
    Root {
        /// The root.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// The spool root lets others rename what root makes in it.
    #[error(
        "spool root {path}: {why}; make it root-owned, mode 0755 (or 1777: the sticky bit keeps root's folders root's)"
    )]
    UnsafeRoot {
        /// The root.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
    /// The job's folder is not one root would read from.
    #[error("{path}: {why}: its records are not read")]
    Refused {
        /// The folder.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
    /// Any other I/O error.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
}

/// What the prolog found in the job's place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Prepared {
    /// Nothing: root made the folder.
    Created,
    /// A folder as root makes it (another node of the job, or an earlier run of it).
    Kept,
    /// Something root did not make (described), swapped out for a fresh folder.
    Replaced {
        /// What it was: `a folder of uid 1501`, `a symlink`, ...
        what: String,
        /// Where it now is, when it was kept (a non-empty folder); `None` when removed.
        moved_to: Option<String>,
    },
}

fn valid_name(job: &str) -> bool {
    !job.is_empty() && job != "." && job != ".." && !job.contains(['/', '\0'])
}

fn io_at(path: &Path) -> impl Fn(Errno) -> SpoolError + '_ {
    move |e| SpoolError::Io {
        path: path.to_owned(),
        source: e.into(),
    }
}

/// Opens and checks the spool root: root's (or this process's owner's, for tests run as
/// another user), and when others may write in it, sticky.
fn open_root(root: &Path) -> Result<OwnedFd, SpoolError> {
    let fd = openat(
        CWD,
        root,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| SpoolError::Root {
        path: root.to_owned(),
        source: e.into(),
    })?;
    let st = fstat(&fd).map_err(io_at(root))?;
    let me = nix::unistd::geteuid().as_raw();
    if st.st_uid != 0 && st.st_uid != me {
        return Err(SpoolError::UnsafeRoot {
            path: root.to_owned(),
            why: format!("owned by uid {}", st.st_uid),
        });
    }
    let mode = st.st_mode;
    if mode & 0o022 != 0 && mode & 0o1000 == 0 {
        return Err(SpoolError::UnsafeRoot {
            path: root.to_owned(),
            why: format!(
                "mode {:o}: writable by others and not sticky",
                mode & 0o7777
            ),
        });
    }
    Ok(fd)
}

/// Whether `st` is a folder as root makes it for `uid`.
fn is_ours(st: &Stat, uid: u32) -> bool {
    FileType::from_raw_mode(st.st_mode) == FileType::Directory
        && (st.st_uid == uid || st.st_uid == 0)
        && st.st_mode & 0o022 == 0
}

fn describe(st: &Stat) -> String {
    match FileType::from_raw_mode(st.st_mode) {
        FileType::Directory => format!(
            "a folder of uid {} mode {:o}",
            st.st_uid,
            st.st_mode & 0o7777
        ),
        FileType::Symlink => "a symlink".to_owned(),
        FileType::RegularFile => format!("a file of uid {}", st.st_uid),
        _ => format!("a special file of uid {}", st.st_uid),
    }
}

/// Makes a root-owned folder under a fresh private name in the spool root and opens it.
fn make_private(
    root_fd: &OwnedFd,
    root: &Path,
    job: &str,
) -> Result<(String, OwnedFd), SpoolError> {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    for n in 0..16u32 {
        let name = format!(".fabric-check-new-{job}.{}.{stamp}.{n}", std::process::id());
        match mkdirat(root_fd, name.as_str(), Mode::from_raw_mode(JOB_DIR_MODE)) {
            Ok(()) => {}
            // Someone planted this name: take the next.
            Err(Errno::EXIST) => continue,
            Err(e) => return Err(io_at(&root.join(&name))(e)),
        }
        let fd = openat(
            root_fd,
            name.as_str(),
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(io_at(&root.join(&name)))?;
        return Ok((name, fd));
    }
    Err(SpoolError::Refused {
        path: root.join(job),
        why: "16 private names in a row were taken".into(),
    })
}

/// Gives the folder `fd` to the job's user, mode `0700`.
fn hand_over(fd: &OwnedFd, path: &Path, uid: u32, gid: Option<u32>) -> Result<(), SpoolError> {
    fchown(fd, Some(Uid::from_raw(uid)), gid.map(Gid::from_raw)).map_err(io_at(path))?;
    fchmod(fd, Mode::from_raw_mode(JOB_DIR_MODE)).map_err(io_at(path))
}

/// The prolog's half: makes sure `<spool_root>/<job>/` is a folder root made (or one exactly like
/// it) owned by `uid`, mode `0700`; see the module docs for what happens to anything else.
pub fn prepare_job_dir(
    spool_root: &Path,
    job: &str,
    uid: u32,
    gid: Option<u32>,
) -> Result<Prepared, SpoolError> {
    if !valid_name(job) {
        return Err(SpoolError::BadJob(job.to_owned()));
    }
    let root_fd = open_root(spool_root)?;
    let path = spool_root.join(job);
    for _ in 0..8 {
        match statat(&root_fd, job, AtFlags::SYMLINK_NOFOLLOW) {
            Err(Errno::NOENT) => {
                let (tmp, fd) = make_private(&root_fd, spool_root, job)?;
                match renameat_with(
                    &root_fd,
                    tmp.as_str(),
                    &root_fd,
                    job,
                    RenameFlags::NOREPLACE,
                ) {
                    Ok(()) => {
                        hand_over(&fd, &path, uid, gid)?;
                        return Ok(Prepared::Created);
                    }
                    Err(e) => {
                        let _ = unlinkat(&root_fd, tmp.as_str(), AtFlags::REMOVEDIR);
                        if e != Errno::EXIST {
                            return Err(io_at(&path)(e));
                        }
                        // Another node of the job (or a squatter) was first: look again.
                    }
                }
            }
            Err(e) => return Err(io_at(&path)(e)),
            Ok(st) if is_ours(&st, uid) => {
                let fd = match openat(
                    &root_fd,
                    job,
                    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    Mode::empty(),
                ) {
                    Ok(fd) => fd,
                    // Swapped since the look: look again.
                    Err(Errno::NOENT | Errno::NOTDIR | Errno::LOOP) => continue,
                    Err(e) => return Err(io_at(&path)(e)),
                };
                let now = fstat(&fd).map_err(io_at(&path))?;
                if !is_ours(&now, uid) {
                    continue;
                }
                if now.st_uid == 0 {
                    // Another node's prolog made it and has not handed it over yet.
                    hand_over(&fd, &path, uid, gid)?;
                }
                return Ok(Prepared::Kept);
            }
            Ok(st) => {
                let what = describe(&st);
                let (tmp, fd) = make_private(&root_fd, spool_root, job)?;
                match renameat_with(&root_fd, tmp.as_str(), &root_fd, job, RenameFlags::EXCHANGE) {
                    Ok(()) => {}
                    Err(Errno::NOENT) => {
                        // It went away meanwhile: start again.
                        let _ = unlinkat(&root_fd, tmp.as_str(), AtFlags::REMOVEDIR);
                        continue;
                    }
                    Err(e) => {
                        let _ = unlinkat(&root_fd, tmp.as_str(), AtFlags::REMOVEDIR);
                        return Err(io_at(&path)(e));
                    }
                }
                hand_over(&fd, &path, uid, gid)?;
                // `tmp` now names what was in the job's place; it was never opened.
                let gone = unlinkat(&root_fd, tmp.as_str(), AtFlags::empty()).is_ok()
                    || unlinkat(&root_fd, tmp.as_str(), AtFlags::REMOVEDIR).is_ok();
                let moved_to = if gone {
                    None
                } else {
                    let aside = format!("{FOREIGN_PREFIX}{}", &tmp[".fabric-check-new-".len()..]);
                    match renameat_with(
                        &root_fd,
                        tmp.as_str(),
                        &root_fd,
                        aside.as_str(),
                        RenameFlags::NOREPLACE,
                    ) {
                        Ok(()) => Some(aside),
                        Err(_) => Some(tmp),
                    }
                };
                return Ok(Prepared::Replaced { what, moved_to });
            }
        }
    }
    Err(SpoolError::Refused {
        path,
        why: "it kept changing while root made it (8 tries)".into(),
    })
}

/// The epilog's half: one job's folder, opened once and verified; every read and delete below
/// is relative to its descriptor.
#[derive(Debug)]
pub struct JobDir {
    root: OwnedFd,
    dir: OwnedFd,
    job: String,
    path: PathBuf,
    uid: Option<u32>,
}

impl JobDir {
    /// Opens `<spool_root>/<job>/` without following a symlink and checks, on the descriptor,
    /// that it is a folder owned by `uid` (or root) that only its owner may write. `Ok(None)`
    /// when there is no such folder (the job left nothing on this node).
    pub fn open(
        spool_root: &Path,
        job: &str,
        uid: Option<u32>,
    ) -> Result<Option<Self>, SpoolError> {
        if !valid_name(job) {
            return Err(SpoolError::BadJob(job.to_owned()));
        }
        let path = spool_root.join(job);
        let root = match open_root(spool_root) {
            Ok(fd) => fd,
            Err(SpoolError::Root { source, .. }) if source.kind() == io::ErrorKind::NotFound => {
                return Ok(None);
            }
            Err(e) => return Err(e),
        };
        let dir = match openat(
            &root,
            job,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Ok(None),
            Err(Errno::NOTDIR | Errno::LOOP) => {
                return Err(SpoolError::Refused {
                    path,
                    why: "not a folder (a symlink or a file)".into(),
                });
            }
            Err(e) => return Err(io_at(&path)(e)),
        };
        let st = fstat(&dir).map_err(io_at(&path))?;
        if let Some(uid) = uid
            && st.st_uid != uid
            && st.st_uid != 0
        {
            return Err(SpoolError::Refused {
                path,
                why: format!("owned by uid {}, not the job's uid {uid}", st.st_uid),
            });
        }
        if st.st_mode & 0o022 != 0 {
            return Err(SpoolError::Refused {
                path,
                why: format!("mode {:o}: others may write in it", st.st_mode & 0o7777),
            });
        }
        Ok(Some(Self {
            root,
            dir,
            job: job.to_owned(),
            path,
            uid,
        }))
    }

    /// The folder's path (for messages only).
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn limits(&self, limits: &ReadLimits) -> ReadLimits {
        ReadLimits {
            owner_uid: self.uid.or(limits.owner_uid),
            ..limits.clone()
        }
    }

    /// Reads and decodes the records file `name` of this folder (rules of
    /// [`super::read_records`]; the owner is the job's uid given to [`JobDir::open`]).
    pub fn read_records(&self, name: &str, limits: &ReadLimits) -> Result<Records, RecordError> {
        let limits = self.limits(limits);
        let path = self.path.join(name);
        let (file, size) = open_in_dir(&self.dir, OsStr::new(name), &path, &limits)?;
        read_records_from(file, size, &path, &limits)
    }

    /// Reads the small user file `name` of this folder (rules of [`super::read_user_file`]).
    pub fn read_user_file(&self, name: &str, limits: &ReadLimits) -> Result<Vec<u8>, RecordError> {
        let limits = self.limits(limits);
        let path = self.path.join(name);
        let (file, size) = open_in_dir(&self.dir, OsStr::new(name), &path, &limits)?;
        read_user_bytes(file, size, &path, &limits)
    }

    /// Reads at most `max_bytes` of the user file `name` from byte `from` on (the same checks
    /// as [`JobDir::read_user_file`]: no link, a regular file of the job's uid). Returns the
    /// bytes and the file's size: a size below `from` means the file was cut or replaced, and
    /// the caller starts again at 0. The in-job watch follows the node's records with it.
    pub fn read_user_tail(
        &self,
        name: &str,
        from: u64,
        max_bytes: u64,
        limits: &ReadLimits,
    ) -> Result<(Vec<u8>, u64), RecordError> {
        use std::io::{Read, Seek, SeekFrom};
        let limits = self.limits(limits);
        let path = self.path.join(name);
        let (mut file, size) = open_in_dir(&self.dir, OsStr::new(name), &path, &limits)?;
        if size <= from {
            return Ok((Vec::new(), size));
        }
        let io = |e: io::Error| RecordError::Io {
            path: path.clone(),
            source: e,
        };
        file.seek(SeekFrom::Start(from)).map_err(io)?;
        let mut buf = Vec::new();
        file.take(max_bytes.min(size - from))
            .read_to_end(&mut buf)
            .map_err(io)?;
        Ok((buf, size))
    }

    /// Creates root's own file `name` in this folder (mode `mode`, open for appending), relative
    /// to the verified descriptor, `O_CREAT | O_EXCL | O_NOFOLLOW`: a name the job's user planted
    /// there (a file, a symlink) makes it fail, and a folder swapped for a symlink since
    /// [`JobDir::open`] is never walked through. `name` is one component.
    pub fn create_root_file(&self, name: &str, mode: u32) -> io::Result<std::fs::File> {
        if !valid_name(name) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{name:?} is not a file name"),
            ));
        }
        let fd = openat(
            &self.dir,
            name,
            OFlags::WRONLY
                | OFlags::APPEND
                | OFlags::CREATE
                | OFlags::EXCL
                | OFlags::NOFOLLOW
                | OFlags::CLOEXEC,
            Mode::from_raw_mode(mode),
        )?;
        // The umask may have narrowed it.
        fchmod(&fd, Mode::from_raw_mode(mode))?;
        Ok(std::fs::File::from(fd))
    }

    /// Whether `name` is a regular file in this folder (looked at relative to the verified
    /// descriptor; a symlink is not followed and does not count).
    pub fn holds_regular_file(&self, name: &str) -> bool {
        valid_name(name)
            && statat(&self.dir, name, AtFlags::SYMLINK_NOFOLLOW)
                .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::RegularFile)
    }

    /// Unlinks every entry of this folder whose name `pick` accepts (never a folder), relative
    /// to the verified descriptor; returns how many went.
    pub fn remove(&self, pick: impl Fn(&str) -> bool) -> usize {
        let Ok(entries) = Dir::read_from(&self.dir) else {
            return 0;
        };
        let mut gone = 0;
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy();
            if name == "." || name == ".." || !pick(&name) {
                continue;
            }
            if unlinkat(&self.dir, e.file_name(), AtFlags::empty()).is_ok() {
                gone += 1;
            }
        }
        gone
    }

    /// Removes the folder when it is empty (the last node of the job to finish does), relative
    /// to the spool root's descriptor: what may be in its place by then is at worst another
    /// empty folder of the job's user, and a symlink is never followed.
    pub fn remove_if_empty(&self) -> bool {
        unlinkat(&self.root, self.job.as_str(), AtFlags::REMOVEDIR).is_ok()
    }
}

#[cfg(test)]
mod tests {
    //! These run as root where they make files for other uids (the prolog's and epilog's own
    //! setting); as another user those tests say so and stop at the first `chown`.
    use super::*;
    use std::io::Write;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    const JOB_UID: u32 = 1500;
    const OTHER_UID: u32 = 1501;

    fn as_root() -> bool {
        let root = nix::unistd::geteuid().is_root();
        if !root {
            eprintln!("not root: the spool's owner changes cannot be exercised");
        }
        root
    }

    fn spool() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
        d
    }

    /// A one-record file `name` in `dir`, owned by `uid`.
    fn records_file(dir: &Path, name: &str, uid: u32) -> PathBuf {
        let p = dir.join(name);
        let mut f = std::fs::File::create(&p).unwrap();
        writeln!(
            f,
            r#"{{"v":1,"ts":1,"run":"a","node":"n1","type":"step_start","pid":1,"cmd":["x"]}}"#
        )
        .unwrap();
        std::os::unix::fs::chown(&p, Some(uid), None).unwrap();
        p
    }

    fn opens(inotify: &OwnedFd) -> usize {
        let mut buf = [std::mem::MaybeUninit::uninit(); 4096];
        let mut r = rustix::fs::inotify::Reader::new(inotify, &mut buf);
        let mut n = 0;
        while let Ok(e) = r.next() {
            if e.events().contains(rustix::fs::inotify::ReadFlags::OPEN) {
                n += 1;
            }
        }
        n
    }

    #[test]
    fn the_prolog_makes_the_folder_for_the_jobs_uid_and_a_second_node_keeps_it() {
        if !as_root() {
            return;
        }
        let s = spool();
        assert_eq!(
            prepare_job_dir(s.path(), "42", JOB_UID, None).unwrap(),
            Prepared::Created
        );
        let md = std::fs::symlink_metadata(s.path().join("42")).unwrap();
        assert!(md.is_dir());
        assert_eq!(md.uid(), JOB_UID);
        assert_eq!(md.mode() & 0o7777, JOB_DIR_MODE);
        records_file(&s.path().join("42"), "n1.jsonl", JOB_UID);
        assert_eq!(
            prepare_job_dir(s.path(), "42", JOB_UID, None).unwrap(),
            Prepared::Kept
        );
        assert!(
            s.path().join("42/n1.jsonl").exists(),
            "another node's records stay"
        );
        let names: Vec<_> = std::fs::read_dir(s.path()).unwrap().collect();
        assert_eq!(names.len(), 1, "no private name left behind: {names:?}");
    }

    #[test]
    fn a_folder_another_user_made_for_a_future_job_does_not_leave_the_job_unrecorded() {
        if !as_root() {
            return;
        }
        let s = spool();
        let squat = s.path().join("43");
        std::fs::create_dir(&squat).unwrap();
        std::fs::write(squat.join("n1.jsonl"), "planted\n").unwrap();
        std::os::unix::fs::chown(&squat, Some(OTHER_UID), None).unwrap();
        let got = prepare_job_dir(s.path(), "43", JOB_UID, None).unwrap();
        let Prepared::Replaced { what, moved_to } = got else {
            panic!("{got:?}")
        };
        assert!(what.contains("uid 1501"), "{what}");
        let moved = moved_to.expect("a non-empty folder is moved aside, not deleted");
        assert!(moved.starts_with(FOREIGN_PREFIX), "{moved}");
        assert!(s.path().join(&moved).join("n1.jsonl").exists());
        // The job's user can now record, and the epilog reads it.
        let md = std::fs::symlink_metadata(&squat).unwrap();
        assert_eq!((md.uid(), md.mode() & 0o7777), (JOB_UID, JOB_DIR_MODE));
        assert_eq!(std::fs::read_dir(&squat).unwrap().count(), 0);
        records_file(&squat, "n1.jsonl", JOB_UID);
        let dir = JobDir::open(s.path(), "43", Some(JOB_UID))
            .unwrap()
            .unwrap();
        let recs = dir
            .read_records("n1.jsonl", &ReadLimits::default())
            .unwrap();
        assert_eq!(recs.records.len(), 1);
    }

    #[test]
    fn a_symlink_in_the_jobs_place_is_replaced_and_its_target_left_alone() {
        if !as_root() {
            return;
        }
        let s = spool();
        let victim = s.path().join("41");
        std::fs::create_dir(&victim).unwrap();
        records_file(&victim, "n1.jsonl", OTHER_UID);
        std::os::unix::fs::symlink(&victim, s.path().join("44")).unwrap();
        let got = prepare_job_dir(s.path(), "44", JOB_UID, None).unwrap();
        assert_eq!(
            got,
            Prepared::Replaced {
                what: "a symlink".into(),
                moved_to: None
            }
        );
        assert!(
            std::fs::symlink_metadata(s.path().join("44"))
                .unwrap()
                .is_dir()
        );
        assert_eq!(
            std::fs::metadata(&victim).unwrap().uid(),
            0,
            "never chowned"
        );
        assert!(victim.join("n1.jsonl").exists());
    }

    #[test]
    fn a_symlink_swapped_in_between_read_and_unlink_does_not_make_root_delete_another_jobs_files() {
        if !as_root() {
            return;
        }
        let s = spool();
        // Job 45's folder, root's, and job 46's (another user's) with its records.
        prepare_job_dir(s.path(), "45", JOB_UID, None).unwrap();
        records_file(&s.path().join("45"), "n1.jsonl", JOB_UID);
        prepare_job_dir(s.path(), "46", OTHER_UID, None).unwrap();
        let theirs = records_file(&s.path().join("46"), "n1.jsonl", OTHER_UID);
        let dir = JobDir::open(s.path(), "45", Some(JOB_UID))
            .unwrap()
            .unwrap();
        assert_eq!(
            dir.read_records("n1.jsonl", &ReadLimits::default())
                .unwrap()
                .records
                .len(),
            1
        );
        // The job's user (who owns 45/ and may rename it in the sticky spool) swaps it.
        std::fs::rename(s.path().join("45"), s.path().join("45.away")).unwrap();
        std::os::unix::fs::symlink(s.path().join("46"), s.path().join("45")).unwrap();
        assert_eq!(dir.remove(|n| n == "n1.jsonl"), 1);
        assert!(
            !dir.remove_if_empty(),
            "a symlink is not removed as a folder"
        );
        assert!(theirs.exists(), "job 46's records are untouched");
        assert!(
            !s.path().join("45.away/n1.jsonl").exists(),
            "the verified folder was emptied"
        );
    }

    #[test]
    fn a_hard_link_to_a_device_node_is_never_opened_for_reading() {
        if !as_root() {
            return;
        }
        let s = spool();
        prepare_job_dir(s.path(), "47", JOB_UID, None).unwrap();
        let job = s.path().join("47");
        let dev = s.path().join("null");
        let made = std::process::Command::new("mknod")
            .arg(&dev)
            .args(["c", "1", "3"])
            .status()
            .unwrap();
        assert!(made.success());
        std::os::unix::fs::chown(&dev, Some(JOB_UID), None).unwrap();
        std::fs::hard_link(&dev, job.join("n1.jsonl")).unwrap();
        let inotify = rustix::fs::inotify::init(
            rustix::fs::inotify::CreateFlags::NONBLOCK | rustix::fs::inotify::CreateFlags::CLOEXEC,
        )
        .unwrap();
        rustix::fs::inotify::add_watch(&inotify, &dev, rustix::fs::inotify::WatchFlags::OPEN)
            .unwrap();
        let dir = JobDir::open(s.path(), "47", Some(JOB_UID))
            .unwrap()
            .unwrap();
        let e = dir
            .read_records("n1.jsonl", &ReadLimits::default())
            .unwrap_err();
        assert!(
            matches!(
                e,
                RecordError::NotRegular {
                    kind: "character device",
                    ..
                }
            ),
            "{e}"
        );
        let e = dir
            .read_user_file("n1.jsonl", &ReadLimits::default())
            .unwrap_err();
        assert!(matches!(e, RecordError::NotRegular { .. }), "{e}");
        assert_eq!(opens(&inotify), 0, "the device was opened");
        // The watch does see an open: a plain read-only open of the same name.
        drop(std::fs::File::open(job.join("n1.jsonl")).unwrap());
        assert_eq!(opens(&inotify), 1);
    }

    #[test]
    fn the_epilog_refuses_a_folder_of_another_user_or_one_others_may_write() {
        if !as_root() {
            return;
        }
        let s = spool();
        prepare_job_dir(s.path(), "48", OTHER_UID, None).unwrap();
        let e = JobDir::open(s.path(), "48", Some(JOB_UID)).unwrap_err();
        assert!(e.to_string().contains("not the job's uid 1500"), "{e}");
        prepare_job_dir(s.path(), "49", JOB_UID, None).unwrap();
        std::fs::set_permissions(s.path().join("49"), std::fs::Permissions::from_mode(0o777))
            .unwrap();
        let e = JobDir::open(s.path(), "49", Some(JOB_UID)).unwrap_err();
        assert!(e.to_string().contains("others may write"), "{e}");
        std::os::unix::fs::symlink(s.path().join("49"), s.path().join("50")).unwrap();
        let e = JobDir::open(s.path(), "50", Some(JOB_UID)).unwrap_err();
        assert!(e.to_string().contains("not a folder"), "{e}");
        assert!(
            JobDir::open(s.path(), "51", Some(JOB_UID))
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn a_spool_root_others_may_write_without_the_sticky_bit_is_refused() {
        let s = tempfile::tempdir().unwrap();
        std::fs::set_permissions(s.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = prepare_job_dir(s.path(), "52", JOB_UID, None).unwrap_err();
        assert!(matches!(e, SpoolError::UnsafeRoot { .. }), "{e}");
        assert!(matches!(
            prepare_job_dir(s.path(), "..", JOB_UID, None),
            Err(SpoolError::BadJob(_))
        ));
    }
}
