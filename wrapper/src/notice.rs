//! Fabric fault notices from the in-job watch: following `fabric-notice-<node>.jsonl`.
//!
//! The watch (root) appends one [`FabricNotice`] line per fault it sees on the node while the job
//! runs (`fabric_proto::notice`). The wrapper looks at the file about once a second from its one
//! `poll(2)` loop: one `lstat` when nothing changed; when the file grew, it opens it
//! (`O_NOFOLLOW|O_NONBLOCK`: the job's folder is the user's, a name there may be anything),
//! checks it is the same regular file, and reads only the new bytes, at most [`READ_CAP`] a look.
//! Complete lines are parsed; a line over [`MAX_NOTICE_LINE_BYTES`], not UTF-8 or not a notice is
//! skipped. Memory is bounded by one line.
//!
//! Lines already in the file when the wrapper starts are history (an earlier step's faults): it
//! starts at the file's end. A file that appears later, or replaces the one followed, is read
//! from its start.
//!
//! `--on-fabric-fault=ACTION` says what else happens for each notice ([`FaultAction`]).

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use fabric_proto::notice::{FabricNotice, MAX_NOTICE_LINE_BYTES};
use fabric_proto::record::O_NOFOLLOW;
use nix::sys::signal::Signal;

use crate::policy::parse_signal;

/// How often the notice file is looked at.
pub const INTERVAL: Duration = Duration::from_secs(1);

/// The most bytes read in one look (the rest waits for the next).
pub const READ_CAP: usize = 64 << 10;

/// `--on-fabric-fault=ACTION`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FaultAction {
    /// `none`: print and record only.
    #[default]
    None,
    /// `signal:SIG`: also send SIG to the command's process group, once per notice.
    Signal(Signal),
    /// `requeue`: ask to be requeued when the watch drains this node (the job's
    /// [`fabric_proto::notice::requeue_wish_path`] file); root does it where `on_fault=requeue`
    /// in plugstack.conf allows it.
    Requeue,
}

/// The forms `--on-fabric-fault` takes, for messages.
const FORMS: &str = "none, requeue, or signal:SIG with SIG a name (USR1, SIGUSR1) or a number (10)";

/// Parses `--on-fabric-fault`'s value.
pub fn parse_action(s: &str) -> Result<FaultAction, String> {
    let v = s.trim();
    if v == "none" {
        return Ok(FaultAction::None);
    }
    if v == "requeue" {
        return Ok(FaultAction::Requeue);
    }
    match v.split_once(':') {
        Some(("signal", sig)) if !sig.trim().is_empty() => parse_signal(sig.trim())
            .ok()
            .and_then(|n| Signal::try_from(n).ok())
            .map(FaultAction::Signal)
            .ok_or_else(|| {
                format!(
                    "--on-fabric-fault=`{s}`: `{}` is not a signal: write {FORMS}",
                    sig.trim()
                )
            }),
        _ => Err(format!("--on-fabric-fault=`{s}`: write {FORMS}")),
    }
}

/// Follows one notice file.
#[derive(Debug)]
pub struct NoticeFollower {
    path: PathBuf,
    /// The file followed (device, inode), `None` while there is none.
    file: Option<(u64, u64)>,
    /// Bytes of it already taken.
    offset: u64,
    /// The start of a line whose newline has not come yet.
    partial: Vec<u8>,
    /// An over-long line is being dropped up to its newline.
    dropping: bool,
    next_look: Instant,
    /// Lines skipped (too long, not UTF-8, not a notice).
    skipped: u64,
}

impl NoticeFollower {
    /// Follows `path` from now on: what the file already holds is skipped.
    pub fn new(path: PathBuf, now: Instant) -> Self {
        let mut f = Self {
            path,
            file: None,
            offset: 0,
            partial: Vec::new(),
            dropping: false,
            next_look: now + INTERVAL,
            skipped: 0,
        };
        if let Ok(md) = std::fs::symlink_metadata(&f.path)
            && md.file_type().is_file()
        {
            f.file = Some((md.dev(), md.ino()));
            f.offset = md.len();
            // A line still being written when we started is not ours to read half of.
            let ends_clean = md.len() == 0
                || f.open(&md)
                    .and_then(|file| {
                        let mut last = [0u8; 1];
                        file.read_exact_at(&mut last, md.len() - 1)?;
                        Ok(last[0] == b'\n')
                    })
                    .unwrap_or(true);
            f.dropping = !ends_clean;
        }
        f
    }

    /// The file followed.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// When the next look is due.
    pub fn next_look(&self) -> Instant {
        self.next_look
    }

    /// Lines skipped so far.
    #[cfg_attr(not(test), allow(dead_code))]
    pub fn skipped(&self) -> u64 {
        self.skipped
    }

    /// Looks at the file when a look is due: the new notices.
    pub fn poll(&mut self, now: Instant) -> Vec<FabricNotice> {
        if now < self.next_look {
            return Vec::new();
        }
        self.next_look = now + INTERVAL;
        self.look()
    }

    /// Looks at the file now, whatever the schedule: the new notices.
    pub fn look(&mut self) -> Vec<FabricNotice> {
        let mut out = Vec::new();
        let md = match std::fs::symlink_metadata(&self.path) {
            Ok(md) if md.file_type().is_file() => md,
            // Gone (or replaced by something that is not a file): what comes next is new.
            _ => {
                self.forget();
                return out;
            }
        };
        let id = (md.dev(), md.ino());
        if self.file != Some(id) || md.len() < self.offset {
            // A new file, or this one was truncated: all of it is new.
            self.forget();
            self.file = Some(id);
        }
        if md.len() == self.offset {
            return out;
        }
        let Ok(file) = self.open(&md) else {
            return out;
        };
        let want = (md.len() - self.offset).min(READ_CAP as u64) as usize;
        let mut buf = vec![0u8; want];
        let n = match file.read_at(&mut buf, self.offset) {
            Ok(n) => n,
            Err(_) => return out,
        };
        self.offset += n as u64;
        self.feed(&buf[..n], &mut out);
        out
    }

    fn forget(&mut self) {
        self.file = None;
        self.offset = 0;
        self.partial.clear();
        self.dropping = false;
    }

    /// Opens the file without following a link or blocking on a FIFO, and checks it is the
    /// regular file `md` describes.
    fn open(&self, md: &std::fs::Metadata) -> io::Result<File> {
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(O_NOFOLLOW | nix::fcntl::OFlag::O_NONBLOCK.bits())
            .open(&self.path)?;
        let now = file.metadata()?;
        if !now.file_type().is_file() || (now.dev(), now.ino()) != (md.dev(), md.ino()) {
            return Err(io::Error::other("changed while opened"));
        }
        Ok(file)
    }

    /// Takes bytes read from the file: complete lines become notices (or are skipped).
    fn feed(&mut self, bytes: &[u8], out: &mut Vec<FabricNotice>) {
        let mut rest = bytes;
        while let Some(nl) = rest.iter().position(|&b| b == b'\n') {
            let piece = &rest[..nl];
            rest = &rest[nl + 1..];
            if std::mem::take(&mut self.dropping) {
                self.skipped += 1;
                continue;
            }
            let line = if self.partial.is_empty() {
                piece
            } else {
                self.partial.extend_from_slice(piece);
                &self.partial[..]
            };
            if line.len() > MAX_NOTICE_LINE_BYTES {
                self.skipped += 1;
            } else if !line.iter().all(u8::is_ascii_whitespace) {
                match std::str::from_utf8(line)
                    .ok()
                    .and_then(FabricNotice::parse_line)
                {
                    Some(n) => out.push(n),
                    None => self.skipped += 1,
                }
            }
            self.partial.clear();
        }
        if !self.dropping {
            self.partial.extend_from_slice(rest);
            if self.partial.len() > MAX_NOTICE_LINE_BYTES {
                self.partial = Vec::new();
                self.dropping = true;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn notice(check: &str) -> String {
        let mut n = FabricNotice::new(7, "n1", check, "mlx5_0 port 1 is DOWN", 1_000);
        n.into_job_s = 12;
        n.to_line()
    }

    fn append(path: &Path, bytes: &[u8]) {
        let mut f = OpenOptions::new()
            .append(true)
            .create(true)
            .open(path)
            .unwrap();
        f.write_all(bytes).unwrap();
    }

    fn checks(ns: &[FabricNotice]) -> Vec<&str> {
        ns.iter().map(|n| n.check.as_str()).collect()
    }

    #[test]
    fn lines_already_there_at_the_start_are_history_and_new_ones_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("fabric-notice-n1.jsonl");
        append(&p, notice("old").as_bytes());
        let mut f = NoticeFollower::new(p.clone(), Instant::now());
        assert!(f.look().is_empty());
        append(&p, notice("new").as_bytes());
        assert_eq!(checks(&f.look()), ["new"]);
        assert!(f.look().is_empty(), "each notice is read once");
    }

    #[test]
    fn a_file_that_appears_after_the_start_is_read_from_its_beginning() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("fabric-notice-n1.jsonl");
        let mut f = NoticeFollower::new(p.clone(), Instant::now());
        assert!(f.look().is_empty());
        append(&p, format!("{}{}", notice("a"), notice("b")).as_bytes());
        assert_eq!(checks(&f.look()), ["a", "b"]);
        // Deleted and made again (the watch of a requeued run): the new file is new.
        std::fs::remove_file(&p).unwrap();
        assert!(f.look().is_empty());
        append(&p, notice("c").as_bytes());
        assert_eq!(checks(&f.look()), ["c"]);
    }

    #[test]
    fn garbage_and_over_long_lines_are_skipped_and_the_notices_around_them_kept() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("fabric-notice-n1.jsonl");
        let mut f = NoticeFollower::new(p.clone(), Instant::now());
        let long_notice = notice(&"x".repeat(MAX_NOTICE_LINE_BYTES));
        let mut bytes = Vec::new();
        bytes.extend_from_slice(notice("first").as_bytes());
        bytes.extend_from_slice(b"garbage\n\xff\xfe\n{\"type\":\"fabric_fault\"}\n");
        bytes.extend_from_slice(long_notice.as_bytes());
        bytes.extend_from_slice(&[b'y'; 3 * MAX_NOTICE_LINE_BYTES]);
        bytes.extend_from_slice(b"\n\n");
        bytes.extend_from_slice(notice("last").as_bytes());
        append(&p, &bytes);
        let mut got = Vec::new();
        for _ in 0..4 {
            got.extend(f.look());
        }
        assert_eq!(checks(&got), ["first", "last"]);
        assert_eq!(f.skipped(), 5);
        assert!(f.partial.capacity() <= 2 * MAX_NOTICE_LINE_BYTES + READ_CAP);
    }

    #[test]
    fn a_line_split_across_looks_is_read_once_whole() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("fabric-notice-n1.jsonl");
        std::fs::write(&p, b"").unwrap();
        let mut f = NoticeFollower::new(p.clone(), Instant::now());
        let line = notice("split");
        let (a, b) = line.split_at(20);
        append(&p, a.as_bytes());
        assert!(f.look().is_empty());
        append(&p, b.as_bytes());
        assert_eq!(checks(&f.look()), ["split"]);
    }

    #[test]
    fn a_half_line_there_at_the_start_is_not_read_as_a_notice() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("fabric-notice-n1.jsonl");
        let line = notice("half");
        append(&p, &line.as_bytes()[..30]);
        let mut f = NoticeFollower::new(p.clone(), Instant::now());
        append(&p, &line.as_bytes()[30..]);
        append(&p, notice("whole").as_bytes());
        assert_eq!(checks(&f.look()), ["whole"]);
    }

    #[test]
    fn a_fifo_or_a_link_in_the_notices_place_is_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("fabric-notice-n1.jsonl");
        let target = dir.path().join("elsewhere");
        append(&target, notice("linked").as_bytes());
        std::os::unix::fs::symlink(&target, &p).unwrap();
        let mut f = NoticeFollower::new(p.clone(), Instant::now());
        assert!(f.look().is_empty());
        std::fs::remove_file(&p).unwrap();
        nix::unistd::mkfifo(&p, nix::sys::stat::Mode::S_IRWXU).unwrap();
        assert!(f.look().is_empty(), "and it did not block");
    }

    #[test]
    fn looks_are_spaced_by_the_interval() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("fabric-notice-n1.jsonl");
        let t0 = Instant::now();
        let mut f = NoticeFollower::new(p.clone(), t0);
        append(&p, notice("a").as_bytes());
        assert!(f.poll(t0).is_empty(), "not due yet");
        assert_eq!(f.next_look(), t0 + INTERVAL);
        assert_eq!(checks(&f.poll(t0 + INTERVAL)), ["a"]);
        assert_eq!(f.next_look(), t0 + 2 * INTERVAL);
    }

    #[test]
    fn on_fabric_fault_takes_none_or_a_signal_and_says_what_else_to_do() {
        assert_eq!(parse_action("none"), Ok(FaultAction::None));
        for v in ["signal:USR1", "signal:SIGUSR1", "signal:usr1", "signal:10"] {
            assert_eq!(
                parse_action(v),
                Ok(FaultAction::Signal(Signal::SIGUSR1)),
                "{v}"
            );
        }
        assert_eq!(parse_action("requeue"), Ok(FaultAction::Requeue));
        for bad in [
            "signal:NOPE",
            "signal:",
            "signal:0",
            "kill",
            "signal=USR1",
            "",
        ] {
            let e = parse_action(bad).unwrap_err();
            assert!(e.contains(&format!("`{bad}`")), "{e}");
            assert!(e.contains("signal:SIG"), "{e}");
        }
    }
}
