//! What both injectors share: the undo of a generic [`Undo`], and the two loads that must not
//! drain (`checkpoint_burst` as the job user, never through a link; `background_load`: CPU hogs
//! and a loopback stream).

use std::collections::BTreeMap;
use std::io::Write;
use std::os::fd::OwnedFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::{COMMAND_LIMIT, InjectError, run, words};
use crate::journal::{Journal, Undo};
use crate::plan::Round;

/// The start time of `pid` in clock ticks since boot (field 22 of `/proc/PID/stat`).
pub fn start_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: count from the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// What both injectors share: the undo of a generic [`Undo`], and the two load controls.
#[derive(Debug, Default)]
pub struct Loads {
    pub(super) streams: BTreeMap<String, Arc<AtomicBool>>,
    pub(super) bursts: Vec<std::thread::JoinHandle<()>>,
    /// The job user the checkpoint burst writes as (its uid; its primary group); `None`: as the
    /// drill's own user.
    pub job_uid: Option<u32>,
    /// CPU hogs per round (default: half the CPUs, at least 2).
    pub hogs: Option<usize>,
    /// Bytes the checkpoint burst writes (default 256 MiB).
    pub burst_bytes: Option<u64>,
    /// How long one command on a node may run before it is killed (default [`COMMAND_LIMIT`]).
    pub command_limit: Option<Duration>,
    /// Words that run a hog on the node (`ssh {node}`); empty when the drill runs on the node
    /// itself (the testbed). Through a prefix the remote hog ends by its own `timeout` (60 s),
    /// and no loopback stream runs.
    pub remote: Vec<String>,
}

impl Loads {
    /// Loads whose hogs run on the node through `remote` (`ssh {node}`).
    pub fn remote(remote: Vec<String>) -> Loads {
        Loads {
            remote,
            ..Loads::default()
        }
    }

    /// How long one command on a node may run ([`COMMAND_LIMIT`] unless set).
    pub fn command_limit(&self) -> Duration {
        self.command_limit.unwrap_or(COMMAND_LIMIT)
    }

    /// Performs a generic undo of a change on `node`.
    pub fn undo(&mut self, node: &str, undo: &Undo) -> Result<(), InjectError> {
        match undo {
            Undo::Rename { from, to } => {
                if !from.exists() {
                    // Already put back (an undo replayed twice): nothing to do.
                    return Ok(());
                }
                if to.exists() {
                    std::fs::remove_dir_all(to).map_err(|source| InjectError::Io {
                        what: "remove",
                        path: to.clone(),
                        source,
                    })?;
                }
                std::fs::rename(from, to).map_err(|source| InjectError::Io {
                    what: "rename back",
                    path: from.clone(),
                    source,
                })
            }
            Undo::Run { argv } => {
                if argv.first().map(String::as_str) == Some("drill:stop-stream") {
                    if let Some(flag) = argv.get(1).and_then(|k| self.streams.remove(k)) {
                        flag.store(true, Ordering::Relaxed);
                    }
                    return Ok(());
                }
                run(node, argv, self.command_limit()).map(|_| ())
            }
            Undo::Kill {
                pid,
                start_ticks: t,
            } => {
                // The hog leads its own process group (see `background_load`): end the group,
                // `timeout` and its shell together.
                if start_ticks(*pid) == Some(*t) {
                    let _ = nix::sys::signal::killpg(
                        nix::unistd::Pid::from_raw(*pid as i32),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                }
                Ok(())
            }
            Undo::Cgroup { dir, back } => {
                crate::stragglers::cgroup::put_back(dir, back).map_err(|source| InjectError::Io {
                    what: "put back the processes of the CPU cgroup",
                    path: dir.clone(),
                    source,
                })
            }
            // A folder with what is in it; a file (or a link: never followed) by itself.
            Undo::Remove { path } => match std::fs::symlink_metadata(path).and_then(|m| {
                if m.is_dir() {
                    std::fs::remove_dir_all(path)
                } else {
                    std::fs::remove_file(path)
                }
            }) {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Err(source) => Err(InjectError::Io {
                    what: "remove",
                    path: path.clone(),
                    source,
                }),
            },
        }
    }

    /// `checkpoint_burst`: writes `burst_bytes` in 4 MiB synced files into `ckpt_dir/drill-burst`
    /// from a thread (so the round's job runs while it writes). The job user owns `ckpt_dir`, so
    /// the thread writes as that user ([`Loads::job_uid`], its file-system ids), into a folder it
    /// makes (`mkdirat`, refused when the name exists) and files it creates
    /// `O_EXCL|O_NOFOLLOW`, each relative to a folder opened without following a link: a link
    /// the job planted redirects nothing.
    pub fn checkpoint_burst(
        &mut self,
        round: &Round,
        ckpt_dir: &Path,
        journal: &mut Journal,
    ) -> Result<Vec<u64>, InjectError> {
        use rustix::fs::{Mode, OFlags, mkdirat, openat};
        let dir = ckpt_dir.join("drill-burst");
        let ckpt_fd = openat(
            rustix::fs::CWD,
            ckpt_dir,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| InjectError::Io {
            what: "open the job's folder",
            path: ckpt_dir.to_owned(),
            source: e.into(),
        })?;
        let id = journal.record(
            &round.node,
            round.class.id(),
            Undo::Remove { path: dir.clone() },
        )?;
        let total = self.burst_bytes.unwrap_or(256 << 20);
        let owner = self.job_uid.map(|uid| (uid, crate::folder::group_of(uid)));
        let (ready_tx, ready_rx) = std::sync::mpsc::sync_channel::<Result<(), InjectError>>(1);
        let where_ = dir.clone();
        let handle = std::thread::spawn(move || {
            let setup = || -> Result<OwnedFd, InjectError> {
                if let Some((uid, gid)) = owner {
                    as_user(uid, gid).map_err(|why| InjectError::Command {
                        command: format!("write the checkpoint burst as uid {uid}"),
                        message: why,
                    })?;
                }
                let io = |what: &'static str| {
                    let path = where_.clone();
                    move |e: rustix::io::Errno| InjectError::Io {
                        what,
                        path,
                        source: e.into(),
                    }
                };
                mkdirat(&ckpt_fd, "drill-burst", Mode::from_raw_mode(0o700))
                    .map_err(io("create (it must not exist yet)"))?;
                openat(
                    &ckpt_fd,
                    "drill-burst",
                    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    Mode::empty(),
                )
                .map_err(io("open"))
            };
            let burst_fd = match setup() {
                Ok(fd) => {
                    let _ = ready_tx.send(Ok(()));
                    fd
                }
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                    return;
                }
            };
            let chunk = vec![0x5au8; 4 << 20];
            let mut written = 0u64;
            let mut k = 0;
            while written < total {
                let Ok(fd) = openat(
                    &burst_fd,
                    format!("shard-{k:04}").as_str(),
                    OFlags::WRONLY
                        | OFlags::CREATE
                        | OFlags::EXCL
                        | OFlags::NOFOLLOW
                        | OFlags::CLOEXEC,
                    Mode::from_raw_mode(0o600),
                ) else {
                    return;
                };
                let mut f = std::fs::File::from(fd);
                if f.write_all(&chunk).is_err() || f.sync_data().is_err() {
                    return;
                }
                written += chunk.len() as u64;
                k += 1;
            }
        });
        let ready = ready_rx.recv().unwrap_or_else(|_| {
            Err(InjectError::Command {
                command: "the checkpoint burst".into(),
                message: "its writer ended before it started".into(),
            })
        });
        match ready {
            Ok(()) => {
                self.bursts.push(handle);
                Ok(vec![id])
            }
            Err(e) => {
                let _ = handle.join();
                // Nothing was made: the entry's undo must not remove what is at that name.
                journal.done(id)?;
                Err(e)
            }
        }
    }

    /// Waits until every checkpoint burst started so far has written all it writes.
    pub fn wait_bursts(&mut self) {
        for h in self.bursts.drain(..) {
            let _ = h.join();
        }
    }

    /// `background_load`: CPU hogs (each ended by `timeout` after 120 s at the latest, and
    /// killed by pid at the round's end) and a loopback TCP stream.
    pub fn background_load(
        &mut self,
        round: &Round,
        journal: &mut Journal,
    ) -> Result<Vec<u64>, InjectError> {
        let mut ids = Vec::new();
        let n = self.hogs.unwrap_or_else(|| {
            std::thread::available_parallelism().map_or(2, |n| (n.get() / 2).max(2))
        });
        for _ in 0..n {
            let mut argv: Vec<String> = self
                .remote
                .iter()
                .map(|w| w.replace("{node}", &round.node))
                .collect();
            let limit = if self.remote.is_empty() { "120" } else { "60" };
            argv.extend(words(&[
                "timeout",
                limit,
                "sh",
                "-c",
                "while :; do :; done",
            ]));
            let child = Command::new(&argv[0])
                .args(&argv[1..])
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .process_group(0)
                .spawn()
                .map_err(|e| InjectError::Command {
                    command: argv.join(" "),
                    message: e.to_string(),
                })?;
            let pid = child.id();
            // The hog outlives this handle; the journal holds its pid and start time.
            std::mem::forget(child);
            let t = start_ticks(pid).unwrap_or(0);
            ids.push(journal.record(
                &round.node,
                round.class.id(),
                Undo::Kill {
                    pid,
                    start_ticks: t,
                },
            )?);
        }
        if !self.remote.is_empty() {
            return Ok(ids);
        }
        let listener =
            std::net::TcpListener::bind("127.0.0.1:0").map_err(|source| InjectError::Io {
                what: "listen on loopback for",
                path: PathBuf::from("127.0.0.1"),
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| InjectError::Io {
            what: "address of",
            path: PathBuf::from("127.0.0.1"),
            source,
        })?;
        let key = addr.port().to_string();
        let stop = Arc::new(AtomicBool::new(false));
        self.streams.insert(key.clone(), stop.clone());
        ids.push(journal.record(
            &round.node,
            round.class.id(),
            Undo::Run {
                argv: vec!["drill:stop-stream".into(), key],
            },
        )?);
        let stop_rx = stop.clone();
        std::thread::spawn(move || {
            if let Ok((mut s, _)) = listener.accept() {
                let mut buf = vec![0u8; 1 << 16];
                let deadline = Instant::now() + Duration::from_secs(120);
                while !stop_rx.load(Ordering::Relaxed) && Instant::now() < deadline {
                    if std::io::Read::read(&mut s, &mut buf).map_or(true, |n| n == 0) {
                        break;
                    }
                }
            }
        });
        std::thread::spawn(move || {
            if let Ok(mut s) = std::net::TcpStream::connect(addr) {
                let buf = vec![0u8; 1 << 16];
                let deadline = Instant::now() + Duration::from_secs(120);
                while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                    if s.write_all(&buf).is_err() {
                        break;
                    }
                }
            }
        });
        Ok(ids)
    }
}

/// Makes this thread's file-system ids `uid` and `gid` (Linux's per-thread `setfsuid`), so that
/// its writes are the job user's; checks that both took.
pub(super) fn as_user(uid: u32, gid: u32) -> Result<(), String> {
    use nix::unistd::{Gid, Uid, setfsgid, setfsuid};
    setfsgid(Gid::from_raw(gid));
    setfsuid(Uid::from_raw(uid));
    // Each call returns the id before it: asking again says which one is in force.
    let now_gid = setfsgid(Gid::from_raw(gid));
    let now_uid = setfsuid(Uid::from_raw(uid));
    if now_uid.as_raw() != uid || now_gid.as_raw() != gid {
        return Err(format!(
            "this process cannot take uid {uid} and gid {gid} for its writes (it is uid {}, gid {}): run the drill as root",
            now_uid.as_raw(),
            now_gid.as_raw()
        ));
    }
    Ok(())
}
