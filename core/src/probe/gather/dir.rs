//! Reading sysfs attributes through directory descriptors: each directory the gather walks is
//! opened once and everything below it opened relative to it (`openat`), so the kernel walks
//! one or two path components per file instead of the whole path from the root.
//!
//! Measured on the false-drain soak (issue 40): the kernel's path walk was the largest single
//! cost of the probe's gather (`/sys/class/infiniband/mlx5_0/ports/1/counters` is eight
//! components and a link into `devices/`, itself eight more); every directory and file is now
//! reached from its parent's descriptor. What is read, and how each outcome reads ("missing",
//! "cannot open", "cannot read", too long, not UTF-8), is as before: a directory that cannot be
//! opened falls back to reads by whole path.

use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags};

use super::MAX_ATTR_BYTES;

/// How one attribute read went.
#[derive(Debug)]
pub(crate) enum Read1<T = String> {
    Missing,
    Text(T),
    /// The file is there but could not be opened or read (permissions, EINVAL, EIO): the
    /// probe could not look, which says nothing about the port.
    Unreadable(String),
    /// The file was read but is not what the attribute holds (too long, not UTF-8).
    Bad(String),
}

/// The flags of an attribute's open. `O_NONBLOCK`: a FIFO planted in the tree must not hang the
/// probe (no effect on files).
fn file_flags() -> OFlags {
    OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC
}

/// The flags of a directory opened to be listed, as `opendir(3)` opens one.
fn listing_flags() -> OFlags {
    OFlags::RDONLY | OFlags::NONBLOCK | OFlags::DIRECTORY | OFlags::CLOEXEC
}

/// The flags of a directory opened only to open what is below it.
fn path_flags() -> OFlags {
    OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC
}

/// Reads the file at `path`: at most `cap` bytes, trimmed.
pub(crate) fn read_capped(path: &Path, cap: usize) -> Read1 {
    match rustix::fs::open(path, file_flags(), Mode::empty()) {
        Ok(fd) => read_fd(fd, cap, str::to_string),
        Err(e) => open_failed(e.into()),
    }
}

pub(crate) fn open_failed<T>(e: std::io::Error) -> Read1<T> {
    if e.kind() == std::io::ErrorKind::NotFound {
        Read1::Missing
    } else {
        Read1::Unreadable(format!("cannot open: {e}"))
    }
}

/// Reads an opened attribute: at most `cap` bytes, trimmed, then `f` of the text.
fn read_fd<T>(fd: OwnedFd, cap: usize, f: impl FnOnce(&str) -> T) -> Read1<T> {
    if cap <= MAX_ATTR_BYTES {
        // One read: sysfs hands an attribute over whole (at most a page) and a regular file's
        // read returns everything up to the size asked for; one syscall fewer per file. The
        // buffer is not zeroed first (it was, a page per file).
        let mut page = [MaybeUninit::<u8>::uninit(); MAX_ATTR_BYTES + 1];
        match rustix::io::read(&fd, &mut page[..cap + 1]) {
            Ok((bytes, _)) => text_of(bytes, cap, f),
            Err(e) => Read1::Unreadable(format!("cannot read: {}", std::io::Error::from(e))),
        }
    } else {
        use std::io::Read;
        let mut v = Vec::new();
        if let Err(e) = std::fs::File::from(fd)
            .take(cap as u64 + 1)
            .read_to_end(&mut v)
        {
            return Read1::Unreadable(format!("cannot read: {e}"));
        }
        text_of(&v, cap, f)
    }
}

/// `f` of the trimmed text of an attribute's bytes.
fn text_of<T>(buf: &[u8], cap: usize, f: impl FnOnce(&str) -> T) -> Read1<T> {
    if buf.len() > cap {
        return Read1::Bad(format!(
            "longer than {cap} bytes, which no sysfs attribute is"
        ));
    }
    match std::str::from_utf8(buf) {
        Ok(s) => Read1::Text(f(s.trim())),
        Err(_) => Read1::Bad("not UTF-8 text".to_string()),
    }
}

/// `mlx5_2` before `mlx5_10`: the name without its trailing digits, then their value, then the
/// whole name.
pub fn natural_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    // Compared in place (each comparison allocated four strings before).
    fn split(s: &str) -> (&str, u64) {
        let cut = s.trim_end_matches(|c: char| c.is_ascii_digit()).len();
        let (head, tail) = s.split_at(cut);
        (head, tail.parse::<u64>().unwrap_or(0))
    }
    let (ha, na) = split(a);
    let (hb, nb) = split(b);
    ha.cmp(hb).then(na.cmp(&nb)).then_with(|| a.cmp(b))
}

/// The names in the directory open at `fd` (not `.` and `..`; names that are not UTF-8 are
/// left out), in the order the kernel gives them.
fn names_of(fd: impl AsFd) -> Vec<String> {
    let mut buf = [MaybeUninit::<u8>::uninit(); 8192];
    let mut dir = rustix::fs::RawDir::new(fd, &mut buf);
    let mut names = Vec::new();
    while let Some(Ok(entry)) = dir.next() {
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        if let Ok(s) = std::str::from_utf8(name) {
            names.push(s.to_string());
        }
    }
    names
}

/// A directory whose attributes are read by name: opened once, each file then opened
/// relative to it. When the directory cannot be opened, each read goes by path as before, so
/// every "missing" and "cannot open" reads exactly as it did.
#[derive(Debug)]
pub(crate) struct Dir {
    path: PathBuf,
    fd: Option<OwnedFd>,
}

impl Dir {
    /// The directory at `path`, to open what is below it (`O_PATH`).
    pub(crate) fn open(path: PathBuf) -> Self {
        let fd = rustix::fs::open(&path, path_flags(), Mode::empty()).ok();
        Self { path, fd }
    }

    /// The directory `name` (a short relative path) below this one, opened relative to it.
    pub(crate) fn sub(&self, name: &str) -> Self {
        let path = self.join(name);
        match &self.fd {
            Some(fd) => Self {
                fd: rustix::fs::openat(fd, name, path_flags(), Mode::empty()).ok(),
                path,
            },
            None => Self::open(path),
        }
    }

    /// The directory at `path` and its names, naturally sorted ([`natural_cmp`]); it is opened
    /// once, for the listing and the reads below it. Fails as `std::fs::read_dir` does.
    pub(crate) fn list(path: PathBuf) -> std::io::Result<(Self, Vec<String>)> {
        let fd = rustix::fs::open(&path, listing_flags(), Mode::empty())?;
        Ok(Self::listed(path, fd))
    }

    /// [`Dir::list`] of the directory `name` (a short relative path) below this one.
    pub(crate) fn list_sub(&self, name: &str) -> std::io::Result<(Self, Vec<String>)> {
        let Some(fd) = &self.fd else {
            return Self::list(self.join(name));
        };
        let sub = rustix::fs::openat(fd, name, listing_flags(), Mode::empty())?;
        Ok(Self::listed(self.join(name), sub))
    }

    fn listed(path: PathBuf, fd: OwnedFd) -> (Self, Vec<String>) {
        let mut names = names_of(&fd);
        names.sort_by(|a, b| natural_cmp(a, b));
        (Self { path, fd: Some(fd) }, names)
    }

    /// The path of `name` in it (for problems and fallbacks).
    pub(crate) fn join(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Its descriptor, when it could be opened.
    #[cfg(test)]
    pub(crate) fn fd(&self) -> Option<&OwnedFd> {
        self.fd.as_ref()
    }

    /// Reads attribute `name` (one component, or a short relative path) as [`read_capped`].
    pub(crate) fn read(&self, name: &str, cap: usize) -> Read1 {
        self.read_map(name, cap, str::to_string)
    }

    /// Reads attribute `name` as [`Dir::read`], giving `f` of its trimmed text (a counter is
    /// parsed without a copy of its text).
    pub(crate) fn read_map<T>(
        &self,
        name: &str,
        cap: usize,
        f: impl FnOnce(&str) -> T,
    ) -> Read1<T> {
        match self.open_fd(name) {
            Ok(fd) => read_fd(fd, cap, f),
            Err(e) => open_failed(e.into()),
        }
    }

    /// Opens file `name` for reading, relative to this directory (by path when it could not
    /// be opened), with an attribute's flags.
    fn open_fd(&self, name: &str) -> rustix::io::Result<OwnedFd> {
        match &self.fd {
            Some(dir) => rustix::fs::openat(dir, name, file_flags(), Mode::empty()),
            None => rustix::fs::open(self.join(name), file_flags(), Mode::empty()),
        }
    }

    /// File `name` opened for reading as [`Dir::read`] opens it, kept to be read again in
    /// place (the watch's counters).
    pub(crate) fn open_file(&self, name: &str) -> std::io::Result<std::fs::File> {
        self.open_fd(name)
            .map(std::fs::File::from)
            .map_err(Into::into)
    }

    /// Whether `name` can be resolved (`stat`, following links): the error when not.
    pub(crate) fn stat(&self, name: &str) -> std::io::Result<()> {
        match &self.fd {
            Some(dir) => rustix::fs::statat(dir, name, rustix::fs::AtFlags::empty())
                .map(|_| ())
                .map_err(Into::into),
            None => std::fs::metadata(self.join(name)).map(|_| ()),
        }
    }

    /// Where the link `name` points (its text).
    pub(crate) fn read_link(&self, name: &str) -> Option<PathBuf> {
        match &self.fd {
            Some(dir) => {
                let target = rustix::fs::readlinkat(dir, name, Vec::new()).ok()?;
                use std::os::unix::ffi::OsStringExt;
                Some(PathBuf::from(std::ffi::OsString::from_vec(
                    target.into_bytes(),
                )))
            }
            None => std::fs::read_link(self.join(name)).ok(),
        }
    }

    /// When this directory was last modified (`fstat` of its descriptor).
    pub(crate) fn modified(&self) -> Option<std::time::SystemTime> {
        let st = rustix::fs::fstat(self.fd.as_ref()?).ok()?;
        let since = std::time::Duration::new(
            u64::try_from(st.st_mtime).ok()?,
            u32::try_from(st.st_mtime_nsec).ok()?,
        );
        std::time::UNIX_EPOCH.checked_add(since)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listing_is_naturally_sorted_and_reads_below_it_go_relative_to_it() {
        let d = tempfile::tempdir().unwrap();
        for n in ["mlx5_10", "mlx5_2", "mlx5_1"] {
            std::fs::create_dir(d.path().join(n)).unwrap();
            std::fs::write(d.path().join(n).join("fw_ver"), format!("{n}\n")).unwrap();
        }
        let (dir, names) = Dir::list(d.path().to_owned()).unwrap();
        assert_eq!(names, ["mlx5_1", "mlx5_2", "mlx5_10"]);
        assert!(
            matches!(dir.read("mlx5_10/fw_ver", MAX_ATTR_BYTES), Read1::Text(t) if t == "mlx5_10")
        );
        let sub = dir.sub("mlx5_2");
        assert!(sub.fd().is_some());
        assert!(matches!(sub.read("fw_ver", MAX_ATTR_BYTES), Read1::Text(t) if t == "mlx5_2"));
        assert!(matches!(sub.read("nope", MAX_ATTR_BYTES), Read1::Missing));
        assert_eq!(
            Dir::list(d.path().join("nope")).unwrap_err().kind(),
            std::io::ErrorKind::NotFound
        );
        assert!(dir.modified().is_some());
    }

    #[test]
    fn a_directory_that_cannot_be_opened_reads_by_path() {
        let d = tempfile::tempdir().unwrap();
        let gone = Dir::open(d.path().join("gone"));
        assert!(gone.fd().is_none());
        std::fs::create_dir(d.path().join("gone")).unwrap();
        std::fs::write(d.path().join("gone/state"), "4: ACTIVE\n").unwrap();
        assert!(matches!(gone.read("state", MAX_ATTR_BYTES), Read1::Text(t) if t == "4: ACTIVE"));
        assert!(gone.stat("state").is_ok());
    }

    #[test]
    fn natural_order_is_head_then_number_then_name() {
        let mut v = vec!["b1", "a10", "a2", "a", "a02", "x"];
        v.sort_by(|a, b| natural_cmp(a, b));
        assert_eq!(v, ["a", "a02", "a2", "a10", "b1", "x"]);
    }
}
