//! What the watch writes: the job's notice file ([`NoticeFile`]), the events kept on the node
//! for the epilog ([`events_path`]), and the node's fault counters as a Prometheus textfile.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use fabric_proto::notice::FabricNotice;
use fabric_proto::tag::WatchEvent;

/// The watch's notice file, created once by root in the job's verified spool folder
/// ([`crate::record::JobDir::create_root_file`]: relative to the folder's descriptor,
/// `O_CREAT|O_EXCL|O_NOFOLLOW`) and written only through that descriptor.
#[derive(Debug)]
pub struct NoticeFile {
    file: std::fs::File,
    path: PathBuf,
}

impl NoticeFile {
    /// Creates the notice file of `node` (mode 0644, root's) in the job's spool folder `dir`;
    /// fails if anything is already there.
    pub fn create(dir: &crate::record::JobDir, node: &str) -> std::io::Result<Self> {
        let name = fabric_proto::notice::notice_name(node);
        let file = dir.create_root_file(&name, 0o644)?;
        Ok(Self {
            file,
            path: dir.path().join(name),
        })
    }

    /// Another handle on the same file, for another thread of the watch (each notice is one
    /// `write(2)` in append mode, so two writers never interleave inside a line).
    pub fn try_clone(&self) -> std::io::Result<Self> {
        Ok(Self {
            file: self.file.try_clone()?,
            path: self.path.clone(),
        })
    }

    /// Appends one notice with one `write(2)`.
    pub fn append(&mut self, n: &FabricNotice) -> std::io::Result<()> {
        self.file.write_all(n.to_line().as_bytes())
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Adds one fault of `check` to the node's watch counters (`<state_dir>/watch-faults.json`,
/// kept across jobs under a lock, since several jobs' watches may share a node) and rewrites
/// the textfile `path` from them.
pub fn bump_metrics(state_dir: &Path, path: &Path, node: &str, check: &str) {
    use rustix::fs::{FlockOperation, flock};
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(state_dir.join("watch-faults.lock"));
    let _held = lock
        .ok()
        .filter(|f| flock(f, FlockOperation::LockExclusive).is_ok());
    let counts_path = state_dir.join("watch-faults.json");
    let mut counts: BTreeMap<String, u64> = std::fs::read_to_string(&counts_path)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default();
    *counts.entry(check.to_owned()).or_default() += 1;
    if let Ok(text) = serde_json::to_vec(&counts)
        && let Err(e) = crate::probe::output::write_atomic(&counts_path, &text)
    {
        tracing::warn!("cannot write {}: {e}", counts_path.display());
    }
    write_metrics(path, node, &counts);
}

/// Writes the watch's counters for node_exporter's textfile collector (atomically: a temporary
/// file renamed over the old one): `fabric_check_watch_faults_total{node,check}`.
pub fn write_metrics(path: &Path, node: &str, counts: &BTreeMap<String, u64>) {
    let mut text = String::from(
        "# HELP fabric_check_watch_faults_total Faults the in-job watch saw appear while a job ran, by check.\n\
         # TYPE fabric_check_watch_faults_total counter\n",
    );
    for (check, n) in counts {
        text.push_str(&format!(
            "fabric_check_watch_faults_total{{node=\"{node}\",check=\"{check}\"}} {n}\n"
        ));
    }
    if let Err(e) = crate::probe::output::write_atomic(path, text.as_bytes()) {
        tracing::warn!("cannot write {}: {e}", path.display());
    }
}

/// The watch's events of `job` kept on the node (`<state_dir>/watch-<job>.events`, one JSON
/// [`WatchEvent`] a line, root's): what it saw, written before it acts, so that the epilog puts
/// every event into the tag even when the job ended before the watch's own tag write landed.
pub fn events_path(state_dir: &Path, job: u32) -> PathBuf {
    state_dir.join(format!("watch-{job}.events"))
}

/// The most of an events file the epilog reads.
pub(super) const MAX_EVENTS_BYTES: u64 = 64 * 1024;

/// The watch's half of [`events_path`]: each event when it appears, again when the watch
/// drained or requeued for it, and when it cleared; at most [`fabric_proto::tag::MAX_WATCH_EVENTS`]
/// events (the tag keeps the first ones), so a flapping link cannot fill the disk.
#[derive(Debug)]
pub(super) struct EventLog {
    path: PathBuf,
    /// The open event of each fault, by [`Fault::key`] (two ports failing one check at once are
    /// two events).
    open: BTreeMap<String, WatchEvent>,
    kept: usize,
}

impl EventLog {
    /// Starts over (a requeued job runs again under its id).
    pub(super) fn start(path: PathBuf) -> Self {
        let _ = std::fs::remove_file(&path);
        Self {
            path,
            open: BTreeMap::new(),
            kept: 0,
        }
    }

    /// A new event of the fault `key`, or a new state of its open event.
    pub(super) fn record(&mut self, key: &str, ev: &WatchEvent) {
        let known = self
            .open
            .get(key)
            .is_some_and(|o| crate::jobstep::tag_update::same_watch_event(o, ev));
        if !known {
            if self.kept >= fabric_proto::tag::MAX_WATCH_EVENTS {
                return;
            }
            self.kept += 1;
        }
        self.open.insert(key.to_owned(), ev.clone());
        self.append(ev);
    }

    /// The open event of the fault `key` cleared at `at_s`; that event as it was open, when
    /// there was one.
    pub(super) fn clear(&mut self, key: &str, at_s: u64) -> Option<WatchEvent> {
        let open = self.open.remove(key)?;
        let mut ev = open.clone();
        ev.cleared_at_s = Some(at_s);
        self.append(&ev);
        Some(open)
    }

    fn append(&self, ev: &WatchEvent) {
        use std::os::unix::fs::OpenOptionsExt;
        let Ok(mut line) = serde_json::to_string(ev) else {
            return;
        };
        line.push('\n');
        let written = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o600)
            .custom_flags(fabric_proto::record::O_NOFOLLOW)
            .open(&self.path)
            .and_then(|mut f| f.write_all(line.as_bytes()));
        if let Err(e) = written {
            tracing::warn!("cannot keep the event in {}: {e}", self.path.display());
        }
    }
}

/// The events an events file holds ([`events_path`]): the last state of each
/// ([`crate::jobstep::tag_update::same_watch_event`]), in the order they appeared, at most
/// [`fabric_proto::tag::MAX_WATCH_EVENTS`]; lines that do not read are skipped.
pub fn read_events(path: &Path) -> Vec<WatchEvent> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let mut text = String::new();
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(fabric_proto::record::O_NOFOLLOW)
        .open(path);
    let Ok(f) = opened else {
        return Vec::new();
    };
    let _ = f.take(MAX_EVENTS_BYTES).read_to_string(&mut text);
    let mut out: Vec<WatchEvent> = Vec::new();
    for mut ev in text
        .lines()
        .filter_map(|l| serde_json::from_str::<WatchEvent>(l).ok())
    {
        ev.check = fabric_proto::tag::scrub_text(&ev.check, 64);
        ev.message = fabric_proto::tag::scrub_text(&ev.message, 160);
        match out
            .iter()
            .position(|o| crate::jobstep::tag_update::same_watch_event(o, &ev))
        {
            Some(i) => out[i] = ev,
            None if out.len() < fabric_proto::tag::MAX_WATCH_EVENTS => out.push(ev),
            None => {}
        }
    }
    out
}
