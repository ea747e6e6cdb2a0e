//! The restore journal: before the drill changes anything, it appends how to undo the change to
//! a JSON-lines file and syncs it; after the undo it appends that the entry is done. A drill that
//! crashed or was stopped with Ctrl-C leaves entries without their `done`: `fabric-check drill
//! --restore`, and every drill at its start, replays them, newest first.
//!
//! An entry's undo can be a command root runs, so the journal is opened only when it and its
//! folder are root's (or, for a drill run as another user, that user's) and neither is writable by
//! group or others; it is opened relative to its folder, following no link ([`Journal::open`]).
//!
//! ```text
//! {"op":"do","id":3,"node":"n3","what":"ecn_off","undo":{"rename":{"from":"...","to":"..."}}}
//! {"op":"done","id":3}
//! ```

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use rustix::fs::{CWD, FileType, Mode, OFlags, fstat, openat};

use serde::{Deserialize, Serialize};

/// How to undo one change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Undo {
    /// Put a saved copy back: remove `to`, rename `from` to `to` (a node's sysfs fixture tree).
    Rename {
        /// The saved copy.
        from: PathBuf,
        /// Where it goes back.
        to: PathBuf,
    },
    /// Run this command (argv, no shell); it must succeed.
    Run {
        /// The words.
        argv: Vec<String>,
    },
    /// End the process group a process the drill started leads, if it is still the same
    /// process (its start time in
    /// clock ticks since boot, field 22 of `/proc/PID/stat`, matches).
    Kill {
        /// The pid.
        pid: u32,
        /// Its start time, so a reused pid is never killed.
        start_ticks: u64,
    },
    /// Remove a file or folder the drill wrote (a folder with what it holds; a link itself).
    Remove {
        /// The path.
        path: PathBuf,
    },
    /// Move every process of the CPU cgroup `dir` back into the cgroup `back`, then remove
    /// `dir` (and its parent, the drill's own folder, once that is empty): a node's CPU cap
    /// (`drill --stragglers`, `cpu_capped`).
    Cgroup {
        /// The cgroup the drill made.
        dir: PathBuf,
        /// The cgroup its processes came from.
        back: PathBuf,
    },
}

/// One line of the journal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Line {
    /// A change about to be made, and its undo.
    Do {
        /// Entry id, increasing.
        id: u64,
        /// The node changed.
        node: String,
        /// What was changed (a class id, or a setup step).
        what: String,
        /// How to undo it.
        undo: Undo,
    },
    /// The entry's undo ran.
    Done {
        /// Entry id.
        id: u64,
    },
}

/// A journal error.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    /// The file could not be read or written.
    #[error("restore journal {}: {source}; check the drill's --state-dir", path.display())]
    Io {
        /// The journal.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// The journal or its folder could have been written by someone else: nothing in it is run.
    #[error(
        "restore journal {}: {why}; nothing in it was run, since its undos run as root: check who wrote it, undo its changes by hand (docs/drill.md) and remove it, or give the drill a --state-dir only root can write",
        path.display()
    )]
    Untrusted {
        /// The journal.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
    /// A line is not a journal line.
    #[error("restore journal {} line {line}: {message}; undo its changes by hand (docs/drill.md) and remove the file", path.display())]
    Corrupt {
        /// The journal.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// What was wrong.
        message: String,
    },
}

/// The open journal.
#[derive(Debug)]
pub struct Journal {
    path: PathBuf,
    file: File,
    next: u64,
}

/// An entry not yet undone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pending {
    /// Entry id.
    pub id: u64,
    /// The node.
    pub node: String,
    /// What was changed.
    pub what: String,
    /// How to undo it.
    pub undo: Undo,
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> JournalError + '_ {
    move |source| JournalError::Io {
        path: path.to_owned(),
        source,
    }
}

/// Reads every line of the journal at `path` (none when it does not exist).
pub fn read(path: &Path) -> Result<Vec<Line>, JournalError> {
    match std::fs::read_to_string(path) {
        Ok(text) => parse(path, &text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(io(path)(e)),
    }
}

/// Parses the journal's text (`path` names it in errors).
fn parse(path: &Path, text: &str) -> Result<Vec<Line>, JournalError> {
    let count = text.lines().count();
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Line>(line) {
            Ok(l) => out.push(l),
            // A crash in the middle of an append leaves a torn last line: the change it
            // announced was never started (the drill syncs before it changes anything).
            Err(_) if i + 1 == count => break,
            Err(e) => {
                return Err(JournalError::Corrupt {
                    path: path.to_owned(),
                    line: i + 1,
                    message: e.to_string(),
                });
            }
        }
    }
    Ok(out)
}

/// Whether a journal (or its folder) of owner `uid` and mode `mode` may be trusted by a drill
/// running as `euid`: root's or `euid`'s, not writable by group or others. `Err` says why not.
pub fn trust(what: &str, uid: u32, mode: u32, euid: u32) -> Result<(), String> {
    if uid != 0 && uid != euid {
        return Err(format!("{what} is owned by uid {uid}, not root"));
    }
    if mode & 0o022 != 0 {
        return Err(format!(
            "{what} has mode {:o}: group or others can write it",
            mode & 0o7777
        ));
    }
    Ok(())
}

/// The entries of `lines` without a `done`, newest first (the order to undo them in).
pub fn pending(lines: &[Line]) -> Vec<Pending> {
    let done: std::collections::BTreeSet<u64> = lines
        .iter()
        .filter_map(|l| match l {
            Line::Done { id } => Some(*id),
            Line::Do { .. } => None,
        })
        .collect();
    let mut out: Vec<Pending> = lines
        .iter()
        .filter_map(|l| match l {
            Line::Do {
                id,
                node,
                what,
                undo,
            } if !done.contains(id) => Some(Pending {
                id: *id,
                node: node.clone(),
                what: what.clone(),
                undo: undo.clone(),
            }),
            _ => None,
        })
        .collect();
    out.reverse();
    out
}

impl Journal {
    /// Opens (creating) the journal at `path` for appending. Its folder is made (mode `0700`)
    /// when missing; the folder and the file must be root's and not writable by group or others
    /// ([`trust`]), the file a plain file with one link, opened relative to the folder without
    /// following a link. Otherwise nothing is read, and [`JournalError::Untrusted`] says why.
    pub fn open(path: &Path) -> Result<Journal, JournalError> {
        let untrusted = |why: String| JournalError::Untrusted {
            path: path.to_owned(),
            why,
        };
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let name = path
            .file_name()
            .ok_or_else(|| untrusted("it names no file".into()))?;
        if !dir.exists() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(io(path))?;
        }
        let euid = nix::unistd::geteuid().as_raw();
        let dir_fd = openat(
            CWD,
            dir,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| io(path)(e.into()))?;
        let st = fstat(&dir_fd).map_err(|e| io(path)(e.into()))?;
        trust(
            &format!("its folder {}", dir.display()),
            st.st_uid,
            st.st_mode,
            euid,
        )
        .map_err(untrusted)?;
        let fd = openat(
            &dir_fd,
            name,
            OFlags::RDWR | OFlags::CREATE | OFlags::APPEND | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .map_err(|e| match e {
            rustix::io::Errno::LOOP => untrusted("it is a symbolic link".into()),
            e => io(path)(e.into()),
        })?;
        let st = fstat(&fd).map_err(|e| io(path)(e.into()))?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            return Err(untrusted("it is not a plain file".into()));
        }
        if st.st_nlink != 1 {
            return Err(untrusted(format!("it has {} hard links", st.st_nlink)));
        }
        trust("it", st.st_uid, st.st_mode, euid).map_err(untrusted)?;
        let mut journal = Journal {
            path: path.to_owned(),
            file: File::from(fd),
            next: 1,
        };
        journal.next = journal
            .lines()?
            .iter()
            .map(|l| match l {
                Line::Do { id, .. } | Line::Done { id } => *id,
            })
            .max()
            .map_or(1, |m| m + 1);
        Ok(journal)
    }

    /// Every line, read through the journal's own open file (never its path again).
    fn lines(&self) -> Result<Vec<Line>, JournalError> {
        let mut f = &self.file;
        let mut text = String::new();
        f.seek(SeekFrom::Start(0)).map_err(io(&self.path))?;
        f.read_to_string(&mut text).map_err(io(&self.path))?;
        parse(&self.path, &text)
    }

    /// The journal's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn append(&mut self, line: &Line) -> Result<(), JournalError> {
        let mut text = serde_json::to_string(line).map_err(|e| JournalError::Corrupt {
            path: self.path.clone(),
            line: 0,
            message: e.to_string(),
        })?;
        text.push('\n');
        self.file
            .write_all(text.as_bytes())
            .map_err(io(&self.path))?;
        self.file.sync_data().map_err(io(&self.path))
    }

    /// Records (and syncs) an undo before the change is made; returns the entry id.
    pub fn record(&mut self, node: &str, what: &str, undo: Undo) -> Result<u64, JournalError> {
        let id = self.next;
        self.next += 1;
        self.append(&Line::Do {
            id,
            node: node.to_owned(),
            what: what.to_owned(),
            undo,
        })?;
        Ok(id)
    }

    /// Records that entry `id` was undone.
    pub fn done(&mut self, id: u64) -> Result<(), JournalError> {
        self.append(&Line::Done { id })
    }

    /// The entries not yet undone, newest first.
    pub fn pending(&self) -> Result<Vec<Pending>, JournalError> {
        Ok(pending(&self.lines()?))
    }

    /// Empties the journal when nothing is pending (after a clean drill).
    pub fn compact(&mut self) -> Result<(), JournalError> {
        if self.pending()?.is_empty() {
            self.file.set_len(0).map_err(io(&self.path))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(argv: &[&str]) -> Undo {
        Undo::Run {
            argv: argv.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn entries_without_done_are_pending_newest_first_also_after_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j/drill-journal.jsonl");
        let mut j = Journal::open(&path).unwrap();
        let a = j.record("n1", "port_down", run(&["a"])).unwrap();
        let b = j.record("n2", "congestion", run(&["b"])).unwrap();
        let c = j.record("n3", "ecn_off", run(&["c"])).unwrap();
        j.done(b).unwrap();
        drop(j);
        let j = Journal::open(&path).unwrap();
        let p = j.pending().unwrap();
        assert_eq!(p.iter().map(|p| p.id).collect::<Vec<_>>(), vec![c, a]);
        assert_eq!(p[0].undo, run(&["c"]));
        assert_eq!(p[1].node, "n1");
    }

    #[test]
    fn ids_keep_increasing_across_opens() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.jsonl");
        let mut j = Journal::open(&path).unwrap();
        let a = j.record("n1", "x", run(&["a"])).unwrap();
        drop(j);
        let mut j = Journal::open(&path).unwrap();
        let b = j.record("n1", "x", run(&["b"])).unwrap();
        assert!(b > a);
    }

    #[test]
    fn a_torn_last_line_is_ignored_and_a_torn_middle_line_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.jsonl");
        let mut j = Journal::open(&path).unwrap();
        j.record("n1", "x", run(&["a"])).unwrap();
        drop(j);
        let mut text = std::fs::read_to_string(&path).unwrap();
        text.push_str("{\"op\":\"do\",\"id\":2,\"no");
        std::fs::write(&path, &text).unwrap();
        assert_eq!(pending(&read(&path).unwrap()).len(), 1);
        text.push_str("\n{\"op\":\"done\",\"id\":1}\n");
        std::fs::write(&path, &text).unwrap();
        let e = read(&path).unwrap_err().to_string();
        assert!(e.contains("line 2"), "{e}");
    }

    #[test]
    fn compact_empties_a_journal_with_nothing_pending_only() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.jsonl");
        let mut j = Journal::open(&path).unwrap();
        let a = j.record("n1", "x", run(&["a"])).unwrap();
        j.compact().unwrap();
        assert_eq!(j.pending().unwrap().len(), 1);
        j.done(a).unwrap();
        j.compact().unwrap();
        assert!(read(&path).unwrap().is_empty());
    }

    /// A journal at `dir/j.jsonl` whose one pending undo would create `marker` if it ran.
    fn journal_that_would_touch(dir: &Path, marker: &Path) -> PathBuf {
        let path = dir.join("j.jsonl");
        let mut j = Journal::open(&path).unwrap();
        j.record(
            "n1",
            "port_down",
            run(&["touch", &marker.display().to_string()]),
        )
        .unwrap();
        path
    }

    #[test]
    fn a_journal_group_or_others_can_write_is_never_replayed() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("ran");
        let path = journal_that_would_touch(dir.path(), &marker);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o622)).unwrap();
        let e = Journal::open(&path).unwrap_err().to_string();
        assert!(
            e.contains("group or others can write it") && e.contains("nothing in it was run"),
            "{e}"
        );
        // The folder: anyone could have replaced the file.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = Journal::open(&path).unwrap_err().to_string();
        assert!(e.contains("its folder") && e.contains("mode 777"), "{e}");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        assert!(!marker.exists());
        assert_eq!(Journal::open(&path).unwrap().pending().unwrap().len(), 1);
    }

    #[test]
    fn a_journal_that_is_a_link_or_has_a_second_name_is_never_replayed() {
        let dir = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        let marker = dir.path().join("ran");
        let real = journal_that_would_touch(elsewhere.path(), &marker);
        let link = dir.path().join("journal.jsonl");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let e = Journal::open(&link).unwrap_err().to_string();
        assert!(e.contains("symbolic link"), "{e}");
        std::fs::remove_file(&link).unwrap();
        std::fs::hard_link(&real, &link).unwrap();
        let e = Journal::open(&link).unwrap_err().to_string();
        assert!(e.contains("2 hard links"), "{e}");
    }

    #[test]
    fn a_journal_or_folder_owned_by_another_user_is_not_trusted_even_when_only_they_can_write_it() {
        assert_eq!(trust("it", 0, 0o100600, 0), Ok(()));
        assert_eq!(
            trust("it", 1500, 0o100600, 1500),
            Ok(()),
            "a drill run as 1500"
        );
        let e = trust("it", 1500, 0o100600, 0).unwrap_err();
        assert!(e.contains("owned by uid 1500, not root"), "{e}");
        let e = trust("its folder /x", 0, 0o41777, 0).unwrap_err();
        assert!(e.contains("mode 1777"), "{e}");
    }

    #[test]
    fn a_new_journal_gets_a_folder_and_a_file_only_its_owner_can_write() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state/drill/journal.jsonl");
        Journal::open(&path).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(path.parent().unwrap()), 0o700);
        assert_eq!(mode(&path), 0o600);
    }
}
