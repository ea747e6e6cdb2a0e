//! The restore journal: before the drill changes anything, it appends how to undo the change to
//! a JSON-lines file and syncs it; after the undo it appends that the entry is done. A drill that
//! crashed or was stopped with Ctrl-C leaves entries without their `done`: `fabric-check drill
//! --restore`, and every drill at its start, replays them, newest first.
//!
//! ```text
//! {"op":"do","id":3,"node":"n3","what":"ecn_off","undo":{"rename":{"from":"...","to":"..."}}}
//! {"op":"done","id":3}
//! ```

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

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
    /// Remove a file or folder the drill wrote.
    Remove {
        /// The path.
        path: PathBuf,
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
    let f = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io(path)(e)),
    };
    let mut out = Vec::new();
    for (i, line) in BufReader::new(f).lines().enumerate() {
        let line = line.map_err(io(path))?;
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Line>(&line) {
            Ok(l) => out.push(l),
            // A crash in the middle of an append leaves a torn last line: the change it
            // announced was never started (the drill syncs before it changes anything).
            Err(_) if i + 1 == count_lines(path) => break,
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

fn count_lines(path: &Path) -> usize {
    std::fs::read_to_string(path).map_or(0, |s| s.lines().count())
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
    /// Opens (creating) the journal at `path` for appending.
    pub fn open(path: &Path) -> Result<Journal, JournalError> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(io(path))?;
        }
        let lines = read(path)?;
        let next = lines
            .iter()
            .map(|l| match l {
                Line::Do { id, .. } | Line::Done { id } => *id,
            })
            .max()
            .map_or(1, |m| m + 1);
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(io(path))?;
        Ok(Journal {
            path: path.to_owned(),
            file,
            next,
        })
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
        Ok(pending(&read(&self.path)?))
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
}
