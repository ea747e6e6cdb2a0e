//! `--checkpoint-dir`: checkpoint writes and restores seen through inotify(7).
//!
//! A *burst* is activity in the directory tree with no gap longer than the quiet period. A burst
//! with writes is one checkpoint, timed from its first write event (`IN_CREATE`/`IN_MODIFY` of a
//! file) to its last `IN_CLOSE_WRITE` — the moment the data was handed to the kernel — so the
//! quiet period itself is never counted. Bytes are the sizes of the files written in the burst, taken
//! at each one's last close-after-write (a file reopened to append is counted once).
//! A burst of file reads only (`IN_ACCESS`, no writes) is a restore, timed from the first
//! `IN_OPEN` of a file that was read to its last `IN_CLOSE_NOWRITE`. Directory listings alone
//! (`IN_OPEN|IN_ISDIR`) are neither. inotify is not recursive: subdirectories are watched as they
//! appear (a file written in the instant before its directory's watch is added can be missed).

use std::collections::{HashMap, HashSet};
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use inotify::{EventMask, Inotify, WatchDescriptor, WatchMask};

use crate::tracker::Event;

#[derive(Debug, Default)]
struct Burst {
    last_event: Option<Instant>,
    first_write: Option<Instant>,
    end_write: Option<Instant>,
    /// File → its size at its last close-after-write in this burst.
    written: HashMap<PathBuf, u64>,
    first_open: Option<Instant>,
    end_read: Option<Instant>,
    read: bool,
    bytes_read: u64,
    accessed: HashSet<PathBuf>,
}

/// The watcher.
#[derive(Debug)]
pub struct DirWatch {
    inotify: Inotify,
    dirs: HashMap<WatchDescriptor, PathBuf>,
    quiet: Duration,
    burst: Burst,
    buf: Vec<u8>,
}

fn mask() -> WatchMask {
    WatchMask::CREATE
        | WatchMask::MODIFY
        | WatchMask::CLOSE_WRITE
        | WatchMask::CLOSE_NOWRITE
        | WatchMask::OPEN
        | WatchMask::ACCESS
        | WatchMask::MOVED_TO
}

impl DirWatch {
    /// Watches `root` (created if missing, so a job that makes it later is still seen).
    pub fn new(root: &Path, quiet: Duration) -> io::Result<Self> {
        std::fs::create_dir_all(root)?;
        let mut w = Self {
            inotify: Inotify::init()?,
            dirs: HashMap::new(),
            quiet,
            burst: Burst::default(),
            buf: vec![0u8; 64 << 10],
        };
        w.watch_tree(root)?;
        Ok(w)
    }

    /// The descriptor to poll.
    pub fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        std::os::fd::AsFd::as_fd(&self.inotify)
    }

    fn watch_tree(&mut self, dir: &Path) -> io::Result<()> {
        let wd = self
            .inotify
            .watches()
            .add(dir, mask() | WatchMask::ONLYDIR)?;
        self.dirs.insert(wd, dir.to_owned());
        if let Ok(entries) = std::fs::read_dir(dir) {
            for e in entries.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    // Best effort: a subdirectory we cannot watch is skipped, not fatal.
                    let _ = self.watch_tree(&e.path());
                }
            }
        }
        Ok(())
    }

    /// Reads pending events (non-blocking) and updates the burst.
    pub fn read(&mut self, now: Instant) {
        let mut raw = Vec::new();
        loop {
            match self.inotify.read_events(&mut self.buf) {
                Ok(events) => {
                    let before = raw.len();
                    for e in events {
                        raw.push((e.wd.clone(), e.mask, e.name.map(|n| n.to_owned())));
                    }
                    if raw.len() == before {
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            }
        }
        for (wd, m, name) in raw {
            let path = match (self.dirs.get(&wd), name) {
                (Some(d), Some(n)) => d.join(n),
                (Some(d), None) => d.clone(),
                _ => continue,
            };
            self.event(m, &path, now);
        }
    }

    fn event(&mut self, m: EventMask, path: &Path, now: Instant) {
        let is_dir = m.contains(EventMask::ISDIR);
        if is_dir {
            if m.intersects(EventMask::CREATE | EventMask::MOVED_TO) {
                let _ = self.watch_tree(path);
                self.burst.last_event = Some(now);
            }
            return;
        }
        let b = &mut self.burst;
        if m.intersects(EventMask::CREATE | EventMask::MODIFY | EventMask::MOVED_TO) {
            b.first_write.get_or_insert(now);
            b.end_write = Some(now);
            b.last_event = Some(now);
        }
        if m.contains(EventMask::CLOSE_WRITE) {
            b.first_write.get_or_insert(now);
            b.end_write = Some(now);
            b.last_event = Some(now);
            let size = std::fs::metadata(path).map_or(0, |md| md.len());
            b.written.insert(path.to_owned(), size);
        }
        if m.contains(EventMask::OPEN) {
            b.first_open.get_or_insert(now);
            b.last_event = Some(now);
        }
        if m.contains(EventMask::ACCESS) {
            b.read = true;
            b.first_open.get_or_insert(now);
            b.end_read = Some(now);
            b.last_event = Some(now);
            b.accessed.insert(path.to_owned());
        }
        if m.contains(EventMask::CLOSE_NOWRITE) {
            b.last_event = Some(now);
            if b.accessed.remove(path) {
                b.end_read = Some(now);
                b.bytes_read += std::fs::metadata(path).map_or(0, |md| md.len());
            }
        }
    }

    /// When the current burst ends if nothing else happens.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.burst.last_event.map(|t| t + self.quiet)
    }

    /// Closes the burst if it has been quiet long enough (or `force`), returning its event.
    pub fn tick(&mut self, now: Instant, force: bool) -> Option<Event> {
        let last = self.burst.last_event?;
        if !force && now < last + self.quiet {
            return None;
        }
        let b = std::mem::take(&mut self.burst);
        if let (Some(first), Some(end)) = (b.first_write, b.end_write) {
            return Some(Event::Checkpoint {
                duration: end.saturating_duration_since(first),
                bytes: b.written.values().sum(),
            });
        }
        if let (true, Some(first), Some(end)) = (b.read, b.first_open, b.end_read) {
            return Some(Event::Restore {
                duration: end.saturating_duration_since(first),
                bytes: b.bytes_read,
            });
        }
        None
    }
}
