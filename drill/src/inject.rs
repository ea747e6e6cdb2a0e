//! The injectors: the [`Injector`] seam and its two implementations.
//!
//! - [`TestbedInjector`]: the project's testbed. Sysfs faults replace the node's fixture tree
//!   (written by the testbed's `fabric-fixtures`) by the class's scenario, keeping the old tree
//!   to put back; congestion is `tc tbf` on both ends of the node's veth in its network
//!   namespace; node removal stops the node's slurmd with `scripts/testbed stop slurmd-NODE`.
//! - [`NodeExecInjector`]: a real cluster. Commands run on the node through a prefix the admin
//!   gives (`ssh {node}`, `pdsh -w {node}`); only the classes that can be made on real hardware
//!   exist there, each needs `--allow-hardware CLASS`, and the value before the change is read
//!   first so the undo puts that value back.
//!
//! Both write the undo into the [`Journal`] (synced) before they change anything, so that a
//! drill stopped half-way is restored by `fabric-check drill --restore` or by the next drill.
//! The two controls that load the node (`checkpoint_burst`, `background_load`) are shared: a
//! writer into the job's checkpoint folder (as the job user, never through a link), CPU hogs
//! (bounded by `timeout`) and a loopback TCP stream.

use std::collections::BTreeMap;
use std::io::Write;
use std::os::fd::OwnedFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use fabric_base::exec::ExecError;

use crate::class::FaultClass;
use crate::grade::{Size, Thresholds};
use crate::journal::{Journal, JournalError, Undo};
use crate::plan::Round;

/// Why an injection or an undo failed.
#[derive(Debug, thiserror::Error)]
pub enum InjectError {
    /// The journal could not be written: nothing was changed.
    #[error(transparent)]
    Journal(#[from] JournalError),
    /// A command failed.
    #[error("{command} failed: {message}")]
    Command {
        /// The command.
        command: String,
        /// What it said.
        message: String,
    },
    /// A command on a node ran past its limit and was killed with every process it started.
    #[error("{command} on {node} did not finish within {limit_ms} ms and was killed")]
    TimedOut {
        /// The node it ran for.
        node: String,
        /// The command.
        command: String,
        /// The limit.
        limit_ms: u128,
    },
    /// A file operation failed.
    #[error("{what} {}: {source}", path.display())]
    Io {
        /// What was being done.
        what: &'static str,
        /// The path.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// The gates refused the injection: nothing was changed, and the drill stops.
    #[error("refused: {0}")]
    Refused(#[from] crate::refusal::GateError),
    /// The class cannot be injected here.
    #[error("class {class} cannot be injected on {place}: {why}")]
    Unsupported {
        /// The class id.
        class: &'static str,
        /// Where.
        place: &'static str,
        /// Why, and what to do.
        why: String,
    },
}

/// Injects a round's fault and undoes it.
pub trait Injector {
    /// Injects the round's fault on its node, journaling every undo before the change; returns
    /// the journal entries to undo when the round ends. `ckpt_dir` is the job's checkpoint
    /// folder (for `checkpoint_burst`).
    fn inject(
        &mut self,
        round: &Round,
        ckpt_dir: &Path,
        journal: &mut Journal,
    ) -> Result<Vec<u64>, InjectError>;
    /// Performs one undo of a change on `node`.
    fn undo(&mut self, node: &str, undo: &Undo) -> Result<(), InjectError>;
    /// For a graded `congestion` round just injected: the share of its peers' bandwidth the
    /// node's path carried through the cap, measured, percent (taken: asked once per round).
    fn take_measured_pct(&mut self) -> Option<f64> {
        None
    }
}

/// Undoes the journal entries `ids` (newest first) and marks each done; the first error is
/// returned after every entry was tried.
pub fn restore(
    injector: &mut dyn Injector,
    journal: &mut Journal,
    ids: &[u64],
) -> Result<(), InjectError> {
    let pending = journal.pending()?;
    let mut first = None;
    for p in pending.iter().filter(|p| ids.contains(&p.id)) {
        match injector.undo(&p.node, &p.undo) {
            Ok(()) => journal.done(p.id)?,
            Err(e) => {
                tracing::error!(node = %p.node, what = %p.what, "undo failed: {e}");
                first.get_or_insert(e);
            }
        }
    }
    first.map_or(Ok(()), Err)
}

/// Undoes every pending entry of the journal (`--restore`, and the start of every drill);
/// returns how many were undone.
pub fn replay(injector: &mut dyn Injector, journal: &mut Journal) -> Result<usize, InjectError> {
    let pending = journal.pending()?;
    let ids: Vec<u64> = pending.iter().map(|p| p.id).collect();
    restore(injector, journal, &ids)?;
    Ok(ids.len())
}

/// How long one command on a node may run by default before it is killed (`ssh`, `dcb`, `tc`,
/// a fixture writer): a hung node fails its command instead of hanging the drill.
pub const COMMAND_LIMIT: Duration = Duration::from_secs(20);

/// Runs `argv` for `node` to completion or until `limit`, then kills it and every process it
/// started. Its environment is the drill's own (`ssh` needs its agent and its home); stdin is
/// `/dev/null`. Its stdout, or why it failed.
fn run(node: &str, argv: &[String], limit: Duration) -> Result<String, InjectError> {
    let (program, args) = argv.split_first().ok_or_else(|| InjectError::Command {
        command: String::new(),
        message: "empty command".into(),
    })?;
    let mut cmd = Command::new(program);
    cmd.args(args).stdin(std::process::Stdio::null());
    // A fixture writer or tool just written (or being replaced) can be busy for a moment: the
    // bounded runner retries a busy program within the limit.
    let out = fabric_base::exec::run_bounded(cmd, None, limit).map_err(|e| match e {
        ExecError::Timeout { .. } => InjectError::TimedOut {
            node: node.to_owned(),
            command: argv.join(" "),
            limit_ms: limit.as_millis(),
        },
        e => InjectError::Command {
            command: argv.join(" "),
            message: e.to_string(),
        },
    })?;
    if !out.status.success() {
        return Err(InjectError::Command {
            command: argv.join(" "),
            message: format!("{}: {}", out.status, out.stderr_text()),
        });
    }
    Ok(out.stdout_text())
}

fn words(w: &[&str]) -> Vec<String> {
    w.iter().map(|s| (*s).to_owned()).collect()
}

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
    streams: BTreeMap<String, Arc<AtomicBool>>,
    bursts: Vec<std::thread::JoinHandle<()>>,
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
            Undo::Remove { path } => match std::fs::remove_dir_all(path) {
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
fn as_user(uid: u32, gid: u32) -> Result<(), String> {
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

/// The testbed's injector.
#[derive(Debug)]
pub struct TestbedInjector {
    /// The testbed's state folder (`nodes/<n>/sysfs`, `bin/fabric-fixtures`).
    pub dir: PathBuf,
    /// `scripts/testbed` (for `stop|start slurmd-NODE`).
    pub script: PathBuf,
    /// The network namespace prefix (`fc`: `fc-n3`, `fc-hub`).
    pub netns_prefix: String,
    /// The tbf rate of `congestion`.
    pub congestion_rate: String,
    /// Shared loads.
    pub loads: Loads,
    /// The thresholds a graded counter fault is a multiple of.
    pub thresholds: Thresholds,
    /// How long one bandwidth measurement of a graded `congestion` round sends.
    pub measure_for: Duration,
    /// The last graded `congestion` round's measured share, percent.
    measured_pct: Option<f64>,
}

impl TestbedInjector {
    /// The testbed at `dir`, controlled by `script`. Its network namespaces are its slot's
    /// (`dir/slot`: slot 0 is `fc-*`, slot N `fcN-*`; docs/testing.md).
    pub fn new(dir: PathBuf, script: PathBuf) -> TestbedInjector {
        let slot = std::fs::read_to_string(dir.join("slot"))
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok())
            .unwrap_or(0);
        TestbedInjector {
            dir,
            script,
            netns_prefix: if slot == 0 {
                "fc".into()
            } else {
                format!("fc{slot}")
            },
            congestion_rate: "100mbit".into(),
            loads: Loads::default(),
            thresholds: Thresholds::default(),
            measure_for: Duration::from_millis(400),
            measured_pct: None,
        }
    }

    /// A node's address on the collective's path (`etc/collective-hosts`: `n3 10.77.2.3`).
    fn address(&self, node: &str) -> Result<std::net::Ipv4Addr, InjectError> {
        let path = self.dir.join("etc/collective-hosts");
        let text = std::fs::read_to_string(&path).map_err(|source| InjectError::Io {
            what: "read",
            path: path.clone(),
            source,
        })?;
        text.lines()
            .filter_map(|l| l.split_once(char::is_whitespace))
            .find(|(n, _)| *n == node)
            .and_then(|(_, a)| a.trim().parse().ok())
            .ok_or_else(|| InjectError::Unsupported {
                class: "congestion",
                place: "the testbed",
                why: format!("{} names no address for {node}", path.display()),
            })
    }

    /// The bandwidth from `from`'s namespace to `to`'s, bits per second: one TCP stream for
    /// [`TestbedInjector::measure_for`] over the testbed's own veths (loopback of no namespace
    /// but the testbed's).
    fn measure(&self, from: &str, to: &str) -> Result<f64, InjectError> {
        let ns = |n: &str| -> Result<String, InjectError> {
            Ok(format!("{}-n{}", self.netns_prefix, Self::index(n)?))
        };
        let addr = self.address(to)?;
        bandwidth_bps(&ns(from)?, &ns(to)?, addr, self.measure_for).map_err(|e| {
            InjectError::Command {
                command: format!("measure the path from {from} to {to}"),
                message: e.to_string(),
            }
        })
    }

    fn node_dir(&self, node: &str) -> PathBuf {
        self.dir.join("nodes").join(node)
    }

    /// Writes `scenario` as node's fixture tree, keeping the tree it replaces; the undo puts it
    /// back.
    pub fn write_tree(
        &mut self,
        node: &str,
        what: &str,
        scenario: &str,
        journal: &mut Journal,
    ) -> Result<u64, InjectError> {
        self.write_tree_raised(node, what, scenario, &[], journal)
    }

    /// [`TestbedInjector::write_tree`] with the scenario's counters raised by the amounts
    /// given (`fabric-fixtures --raise COUNTER=N`): a fault of graded size.
    pub fn write_tree_raised(
        &mut self,
        node: &str,
        what: &str,
        scenario: &str,
        raises: &[(String, u64)],
        journal: &mut Journal,
    ) -> Result<u64, InjectError> {
        let nd = self.node_dir(node);
        // One saved tree per change: a fault over the drill's own setup tree nests.
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let fresh = nd.join(format!(".drill-new-sysfs-{stamp}"));
        let saved = nd.join(format!(".drill-saved-sysfs-{stamp}"));
        let live = nd.join("sysfs");
        let _ = std::fs::remove_dir_all(&fresh);
        let mut argv = vec![
            self.dir.join("bin/fabric-fixtures").display().to_string(),
            scenario.to_owned(),
            fresh.display().to_string(),
        ];
        for (counter, n) in raises {
            argv.push(format!("--raise={counter}={n}"));
        }
        run(node, &argv, self.loads.command_limit())?;
        let id = journal.record(
            node,
            what,
            Undo::Rename {
                from: saved.clone(),
                to: live.clone(),
            },
        )?;
        std::fs::rename(&live, &saved).map_err(|source| InjectError::Io {
            what: "save",
            path: live.clone(),
            source,
        })?;
        std::fs::rename(&fresh, &live).map_err(|source| InjectError::Io {
            what: "install",
            path: fresh.clone(),
            source,
        })?;
        Ok(id)
    }

    fn index(node: &str) -> Result<String, InjectError> {
        node.strip_prefix('n')
            .filter(|i| !i.is_empty() && i.bytes().all(|b| b.is_ascii_digit()))
            .map(str::to_owned)
            .ok_or_else(|| InjectError::Unsupported {
                class: "congestion",
                place: "the testbed",
                why: format!("node {node} is not a testbed node n<i>"),
            })
    }
}

/// The token bucket of a graded congestion cap below 100 % (`scripts/bench-collective --curve`
/// uses the same).
const GRADED_BURST_BYTES: u64 = 64 * 1024;

/// tbf's burst for `rate` as `scripts/netns` computes it: 5 ms worth, at least 16 KiB.
fn burst_for(rate: &str) -> String {
    let digits: String = rate.chars().take_while(|c| c.is_ascii_digit()).collect();
    let n: f64 = digits.parse().unwrap_or(100.0);
    let bps = match &rate[digits.len()..] {
        "kbit" => n * 1e3,
        "gbit" => n * 1e9,
        "bit" => n,
        _ => n * 1e6,
    };
    format!("{}", ((bps / 8.0 * 0.005) as u64).max(16384))
}

impl Injector for TestbedInjector {
    fn inject(
        &mut self,
        round: &Round,
        ckpt_dir: &Path,
        journal: &mut Journal,
    ) -> Result<Vec<u64>, InjectError> {
        let node = round.node.as_str();
        match round.class {
            FaultClass::Clean => Ok(Vec::new()),
            FaultClass::CheckpointBurst => self.loads.checkpoint_burst(round, ckpt_dir, journal),
            FaultClass::BackgroundLoad => self.loads.background_load(round, journal),
            FaultClass::Congestion => {
                let i = Self::index(node)?;
                let p = &self.netns_prefix;
                let (ns, hub) = (format!("{p}-n{i}"), format!("{p}-hub"));
                // A graded round: the share of the peers' path, measured between two of the
                // round's other nodes just before.
                let peers: Vec<&String> = round
                    .job
                    .as_ref()
                    .map(|j| j.nodes.iter().filter(|n| n.as_str() != node).collect())
                    .unwrap_or_default();
                let graded = match (round.size, peers.as_slice()) {
                    (Some(Size::BandwidthPct(pct)), [a, b, ..]) => {
                        let peer_bps = self.measure(a, b)?;
                        Some((peer_bps, pct, a.to_string()))
                    }
                    (Some(s), _) => {
                        return Err(InjectError::Unsupported {
                            class: "congestion",
                            place: "the testbed",
                            why: format!(
                                "size {s} is a share of the peers' bandwidth (50%): it needs a job with two more nodes to measure them"
                            ),
                        });
                    }
                    (None, _) => None,
                };
                let rate = match &graded {
                    Some((peer_bps, pct, _)) => {
                        format!(
                            "{}kbit",
                            ((peer_bps * f64::from(*pct) / 100.0) / 1e3).max(8.0) as u64
                        )
                    }
                    None => self.congestion_rate.clone(),
                };
                // A graded fault's cap gets a small bucket: 5 ms of tokens is megabytes at these
                // rates, and the collective's 1 MiB link probes would pass whole at the veth's
                // speed (a NIC that trained low has no burst). A control's cap (100 % and more)
                // keeps the 5 ms bucket: with a small one even a cap at the peers' own rate
                // delivered about half of it (measured 47 to 59 %), a fault and not a control.
                // The cap's measured share is kept per round either way.
                let burst = match &graded {
                    Some((_, pct, _)) if *pct < 100 => GRADED_BURST_BYTES.to_string(),
                    _ => burst_for(&rate),
                };
                let mut ids = Vec::new();
                for (ns, dev) in [
                    (hub.as_str(), format!("h{i}")),
                    (ns.as_str(), "eth0".into()),
                ] {
                    ids.push(journal.record(
                        node,
                        "congestion",
                        Undo::Run {
                            argv: words(&[
                                "ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", &dev,
                                "root",
                            ]),
                        },
                    )?);
                    run(
                        node,
                        &words(&[
                            "ip", "netns", "exec", ns, "tc", "qdisc", "replace", "dev", &dev,
                            "root", "tbf", "rate", &rate, "burst", &burst, "latency", "100ms",
                        ]),
                        self.loads.command_limit(),
                    )?;
                }
                if let Some((peer_bps, _, from)) = graded {
                    let capped = self.measure(&from, node)?;
                    self.measured_pct = Some(100.0 * capped / peer_bps.max(1.0));
                }
                Ok(ids)
            }
            FaultClass::NodeRemoved => {
                let script = self.script.display().to_string();
                let unit = format!("slurmd-{node}");
                let id = journal.record(
                    node,
                    "node_removed",
                    Undo::Run {
                        argv: words(&[&script, "start", &unit]),
                    },
                )?;
                run(
                    node,
                    &words(&[&script, "stop", &unit]),
                    self.loads.command_limit(),
                )?;
                Ok(vec![id])
            }
            class @ (FaultClass::PortDown
            | FaultClass::RateDowngrade
            | FaultClass::MtuDrift
            | FaultClass::PfcOff
            | FaultClass::EcnOff
            | FaultClass::RoceGidMissing
            | FaultClass::LinkFlap
            | FaultClass::ErrorCounters
            | FaultClass::PauseStorm
            | FaultClass::CnpStorm) => {
                let scenario =
                    class
                        .fixture(round.kind)
                        .ok_or_else(|| InjectError::Unsupported {
                            class: class.id(),
                            place: "the testbed",
                            why: format!("no fixture for a {} node", round.kind.id()),
                        })?;
                let raises = match round.size {
                    Some(size) => graded_raises(class, round.kind, size, &self.thresholds)?,
                    None => Vec::new(),
                };
                Ok(vec![self.write_tree_raised(
                    node,
                    class.id(),
                    scenario,
                    &raises,
                    journal,
                )?])
            }
        }
    }

    fn undo(&mut self, node: &str, undo: &Undo) -> Result<(), InjectError> {
        self.loads.undo(node, undo)
    }

    fn take_measured_pct(&mut self) -> Option<f64> {
        self.measured_pct.take()
    }
}

/// The counters a graded round of `class` raises on a node of `kind`, and by how much: each
/// of the class's counters by `size` times its threshold's allowance (a flap count: itself).
pub fn graded_raises(
    class: FaultClass,
    kind: crate::class::NodeKind,
    size: Size,
    thresholds: &Thresholds,
) -> Result<Vec<(String, u64)>, InjectError> {
    let unsupported = |why: String| InjectError::Unsupported {
        class: class.id(),
        place: "the testbed",
        why,
    };
    class
        .check_size(size)
        .map_err(|e| unsupported(e.to_string()))?;
    let counters = class.graded_counters(kind);
    if counters.is_empty() {
        return Err(unsupported(format!(
            "it has no graded counters on a {} node",
            kind.id()
        )));
    }
    counters
        .iter()
        .map(|(name, key)| {
            let allowance = match size {
                Size::Flaps(_) => 0,
                _ => thresholds
                    .allowance(key)
                    .map_err(|e| unsupported(e.to_string()))?,
            };
            Ok(((*name).to_owned(), size.raise(allowance)))
        })
        .collect()
}

/// One TCP stream from namespace `from_ns` to `addr` in namespace `to_ns` for `dur`: the
/// receiver's bytes over the time from its first byte to the end, bits per second. Each end is
/// a thread that entered its namespace (`setns(2)` moves the calling thread only), so nothing
/// outside the testbed's namespaces is touched.
pub fn bandwidth_bps(
    from_ns: &str,
    to_ns: &str,
    addr: std::net::Ipv4Addr,
    dur: Duration,
) -> std::io::Result<f64> {
    use std::io::{Error, Read};
    use std::net::{SocketAddr, TcpListener, TcpStream};
    fn enter(ns: &str) -> std::io::Result<()> {
        let f = std::fs::File::open(format!("/run/netns/{ns}"))?;
        nix::sched::setns(&f, nix::sched::CloneFlags::CLONE_NEWNET).map_err(Error::from)
    }
    let (port_tx, port_rx) = std::sync::mpsc::sync_channel::<std::io::Result<u16>>(1);
    let to = to_ns.to_owned();
    let receiver = std::thread::spawn(move || -> std::io::Result<f64> {
        let bound = enter(&to).and_then(|()| TcpListener::bind((addr, 0)));
        let listener = match bound {
            Ok(l) => l,
            Err(e) => {
                let _ = port_tx.send(Err(Error::new(e.kind(), e.to_string())));
                return Err(e);
            }
        };
        let _ = port_tx.send(listener.local_addr().map(|a| a.port()));
        listener.set_nonblocking(true)?;
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut s = loop {
            match listener.accept() {
                Ok((s, _)) => break s,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if Instant::now() > deadline {
                        return Err(Error::new(e.kind(), "no sender connected within 5 s"));
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e) => return Err(e),
            }
        };
        s.set_nonblocking(false)?;
        s.set_read_timeout(Some(Duration::from_secs(5)))?;
        let mut buf = vec![0u8; 1 << 16];
        let (mut bytes, mut first) = (0u64, None);
        loop {
            let n = s.read(&mut buf)?;
            if n == 0 {
                break;
            }
            first.get_or_insert_with(Instant::now);
            bytes += n as u64;
        }
        let secs = first.map_or(0.0, |t| t.elapsed().as_secs_f64());
        if secs <= 0.0 {
            return Err(Error::other("nothing arrived"));
        }
        Ok(bytes as f64 * 8.0 / secs)
    });
    let port = port_rx
        .recv()
        .map_err(|_| Error::other("the receiver ended before it listened"))??;
    let from = from_ns.to_owned();
    let sender = std::thread::spawn(move || -> std::io::Result<()> {
        enter(&from)?;
        let mut s =
            TcpStream::connect_timeout(&SocketAddr::from((addr, port)), Duration::from_secs(2))?;
        let buf = vec![0x5au8; 1 << 16];
        let end = Instant::now() + dur;
        while Instant::now() < end {
            s.write_all(&buf)?;
        }
        s.shutdown(std::net::Shutdown::Write)
    });
    let sent = sender
        .join()
        .map_err(|_| Error::other("the sender panicked"))?;
    let got = receiver
        .join()
        .map_err(|_| Error::other("the receiver panicked"))?;
    sent?;
    got
}

/// A real cluster's injector: commands on the node through a prefix (`ssh {node}`).
#[derive(Debug)]
pub struct NodeExecInjector {
    /// The prefix; `{node}` is replaced by the node's name.
    pub prefix: Vec<String>,
    /// The RoCE/IB netdev the network classes change (`--interface`).
    pub interface: String,
    /// The lossless priority (PFC and ECN classes).
    pub priority: u8,
    /// The tbf rate of `congestion`.
    pub congestion_rate: String,
    /// Shared loads.
    pub loads: Loads,
}

impl NodeExecInjector {
    fn on(&self, node: &str, cmd: &[&str]) -> Vec<String> {
        let mut v: Vec<String> = self
            .prefix
            .iter()
            .map(|w| w.replace("{node}", node))
            .collect();
        v.extend(cmd.iter().map(|s| (*s).to_owned()));
        v
    }

    /// The commands that change and undo `class` on `node`, given what `read` returns for the
    /// value before the change (pure, for the tests and `--dry-run`).
    pub fn commands(
        &self,
        class: FaultClass,
        node: &str,
        before: &str,
    ) -> Result<(Vec<String>, Vec<String>), InjectError> {
        let i = self.interface.as_str();
        let prio = self.priority;
        let both = |set: &str| {
            format!(
                "echo {set} > /sys/class/net/{i}/ecn/roce_np/enable/{prio} && echo {set} > /sys/class/net/{i}/ecn/roce_rp/enable/{prio}"
            )
        };
        Ok(match class {
            FaultClass::PortDown => (
                self.on(node, &["ip", "link", "set", "dev", i, "down"]),
                self.on(node, &["ip", "link", "set", "dev", i, "up"]),
            ),
            FaultClass::MtuDrift => {
                let old = before.trim();
                if old.is_empty() || !old.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(InjectError::Command {
                        command: format!("cat /sys/class/net/{i}/mtu"),
                        message: format!("not an MTU: {old:?}"),
                    });
                }
                (
                    self.on(node, &["ip", "link", "set", "dev", i, "mtu", "1500"]),
                    self.on(node, &["ip", "link", "set", "dev", i, "mtu", old]),
                )
            }
            FaultClass::EcnOff => (
                self.on(node, &["sh", "-c", &both("0")]),
                self.on(node, &["sh", "-c", &both(before.trim())]),
            ),
            FaultClass::PfcOff => {
                // `dcb pfc show dev IF prio-pfc` prints `prio-pfc 0:off 1:off 2:off 3:on ...`.
                let old: Vec<&str> = before
                    .split_whitespace()
                    .filter(|w| w.contains(':') && w.as_bytes()[0].is_ascii_digit())
                    .collect();
                if old.len() != 8 {
                    return Err(InjectError::Command {
                        command: format!("dcb pfc show dev {i} prio-pfc"),
                        message: format!("not eight priorities: {before:?}"),
                    });
                }
                let off = format!("{prio}:off");
                let mut undo = self.on(node, &["dcb", "pfc", "set", "dev", i, "prio-pfc"]);
                undo.extend(old.iter().map(|s| (*s).to_owned()));
                (
                    self.on(node, &["dcb", "pfc", "set", "dev", i, "prio-pfc", &off]),
                    undo,
                )
            }
            FaultClass::Congestion => {
                if before.contains("tbf") || before.contains("htb") || before.contains("mqprio") {
                    return Err(InjectError::Unsupported {
                        class: "congestion",
                        place: "this interface",
                        why: format!(
                            "{i} has a root qdisc of its own ({}); the drill would not put it back",
                            before.trim()
                        ),
                    });
                }
                let burst = burst_for(&self.congestion_rate);
                (
                    self.on(
                        node,
                        &[
                            "tc",
                            "qdisc",
                            "replace",
                            "dev",
                            i,
                            "root",
                            "tbf",
                            "rate",
                            &self.congestion_rate,
                            "burst",
                            &burst,
                            "latency",
                            "100ms",
                        ],
                    ),
                    self.on(node, &["tc", "qdisc", "del", "dev", i, "root"]),
                )
            }
            FaultClass::NodeRemoved => (
                self.on(node, &["systemctl", "stop", "slurmd"]),
                self.on(node, &["systemctl", "start", "slurmd"]),
            ),
            // The counter classes (and the controls, which inject() handles before).
            c @ (FaultClass::RateDowngrade
            | FaultClass::RoceGidMissing
            | FaultClass::LinkFlap
            | FaultClass::ErrorCounters
            | FaultClass::PauseStorm
            | FaultClass::CnpStorm
            | FaultClass::CheckpointBurst
            | FaultClass::BackgroundLoad
            | FaultClass::Clean) => {
                return Err(InjectError::Unsupported {
                    class: c.id(),
                    place: "a real cluster",
                    why: "it exists only on the testbed (counters rise only when the fault is real); leave it out with --classes".into(),
                });
            }
        })
    }

    fn read_before(&self, class: FaultClass, node: &str) -> Result<String, InjectError> {
        let i = self.interface.as_str();
        let prio = self.priority.to_string();
        let read = |cmd: &[&str]| run(node, &self.on(node, cmd), self.loads.command_limit());
        match class {
            FaultClass::MtuDrift => read(&["cat", &format!("/sys/class/net/{i}/mtu")]),
            FaultClass::EcnOff => read(&[
                "cat",
                &format!("/sys/class/net/{i}/ecn/roce_np/enable/{prio}"),
            ]),
            FaultClass::PfcOff => read(&["dcb", "pfc", "show", "dev", i, "prio-pfc"]),
            FaultClass::Congestion => read(&["tc", "qdisc", "show", "dev", i, "root"]),
            // Nothing to read first: the undo does not depend on what was there.
            FaultClass::PortDown
            | FaultClass::RateDowngrade
            | FaultClass::RoceGidMissing
            | FaultClass::LinkFlap
            | FaultClass::ErrorCounters
            | FaultClass::PauseStorm
            | FaultClass::CnpStorm
            | FaultClass::NodeRemoved
            | FaultClass::CheckpointBurst
            | FaultClass::BackgroundLoad
            | FaultClass::Clean => Ok(String::new()),
        }
    }
}

impl Injector for NodeExecInjector {
    fn inject(
        &mut self,
        round: &Round,
        ckpt_dir: &Path,
        journal: &mut Journal,
    ) -> Result<Vec<u64>, InjectError> {
        if let Some(size) = round.size {
            // Nothing would apply the size: the real congestion cap is a fixed rate, and the
            // counter classes exist only on the testbed.
            return Err(InjectError::Unsupported {
                class: round.class.id(),
                place: "a real cluster",
                why: format!(
                    "a graded size ({size}) runs on the testbed only; drop --graded and --size here"
                ),
            });
        }
        match round.class {
            FaultClass::Clean => Ok(Vec::new()),
            FaultClass::CheckpointBurst => self.loads.checkpoint_burst(round, ckpt_dir, journal),
            FaultClass::BackgroundLoad => self.loads.background_load(round, journal),
            class => {
                let before = self.read_before(class, &round.node)?;
                let (change, undo) = self.commands(class, &round.node, &before)?;
                let id = journal.record(&round.node, class.id(), Undo::Run { argv: undo })?;
                run(&round.node, &change, self.loads.command_limit())?;
                Ok(vec![id])
            }
        }
    }

    fn undo(&mut self, node: &str, undo: &Undo) -> Result<(), InjectError> {
        self.loads.undo(node, undo)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::class::{Moment, NodeKind};

    fn round(class: FaultClass) -> Round {
        Round {
            index: 1,
            class,
            node: "gpu07".into(),
            kind: NodeKind::Roce,
            moment: Moment::Before,
            job: None,
            during_at_permille: None,
            size: None,
        }
    }

    #[test]
    fn a_graded_counter_fault_raises_each_of_its_counters_by_the_multiple_of_its_threshold() {
        let t = Thresholds(
            [
                ("symbol_error", 120),
                ("rx_prio_pause", 1_000_000),
                ("tx_prio_pause", 1_000_000),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect(),
        );
        let z = |s| Size::parse(s).unwrap();
        assert_eq!(
            graded_raises(FaultClass::ErrorCounters, NodeKind::Ib, z("2x"), &t).unwrap(),
            vec![("symbol_error".to_owned(), 240)]
        );
        assert_eq!(
            graded_raises(FaultClass::PauseStorm, NodeKind::Roce, z("0.5x"), &t).unwrap(),
            vec![
                ("rx_prio3_pause".to_owned(), 500_000),
                ("tx_prio3_pause".to_owned(), 500_000)
            ]
        );
        assert_eq!(
            graded_raises(FaultClass::LinkFlap, NodeKind::Ib, z("3"), &t).unwrap(),
            vec![("link_downed".to_owned(), 3)]
        );
        // The InfiniBand storm also raises the pause duration, whose threshold is missing here.
        let e = graded_raises(FaultClass::PauseStorm, NodeKind::Ib, z("2x"), &t)
            .unwrap_err()
            .to_string();
        assert!(e.contains("no threshold for rx_prio_pause_duration"), "{e}");
        let e = graded_raises(FaultClass::ErrorCounters, NodeKind::Ib, z("50%"), &t)
            .unwrap_err()
            .to_string();
        assert!(e.contains("error_counters takes"), "{e}");
    }

    #[test]
    fn a_real_cluster_refuses_a_graded_size_and_says_where_it_runs() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = Journal::open(&dir.path().join("journal.jsonl")).unwrap();
        let mut r = round(FaultClass::Congestion);
        r.size = Some(Size::BandwidthPct(50));
        let e = real()
            .inject(&r, dir.path(), &mut j)
            .unwrap_err()
            .to_string();
        assert!(e.contains("testbed only") && e.contains("50%"), "{e}");
        assert!(j.pending().unwrap().is_empty(), "nothing was journaled");
    }

    fn real() -> NodeExecInjector {
        NodeExecInjector {
            prefix: vec!["ssh".into(), "{node}".into()],
            interface: "ens4np0".into(),
            priority: 3,
            congestion_rate: "1gbit".into(),
            loads: Loads::default(),
        }
    }

    /// A node whose every command hangs: the prefix stands in for an `ssh` that never answers.
    fn hung(limit: Duration) -> NodeExecInjector {
        let mut loads = Loads::remote(Vec::new());
        loads.command_limit = Some(limit);
        NodeExecInjector {
            prefix: vec!["sh".into(), "-c".into(), "sleep 30".into(), "{node}".into()],
            loads,
            ..real()
        }
    }

    #[test]
    fn a_hung_node_fails_its_command_at_the_limit_naming_the_node_and_the_command() {
        let dir = tempfile::tempdir().unwrap();
        let mut journal = Journal::open(&dir.path().join("journal.jsonl")).unwrap();
        let mut inj = hung(Duration::from_millis(300));
        let start = Instant::now();
        let err = inj
            .inject(&round(FaultClass::MtuDrift), dir.path(), &mut journal)
            .unwrap_err();
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{:?}",
            start.elapsed()
        );
        match &err {
            InjectError::TimedOut {
                node,
                command,
                limit_ms,
            } => {
                assert_eq!(node, "gpu07");
                assert!(command.contains("/sys/class/net/ens4np0/mtu"), "{command}");
                assert_eq!(*limit_ms, 300);
            }
            other => panic!("not a timeout: {other:?}"),
        }
        let text = err.to_string();
        assert!(
            text.contains("gpu07") && text.contains("sleep 30"),
            "{text}"
        );
        assert!(journal.pending().unwrap().is_empty(), "nothing was changed");
    }

    #[test]
    fn a_hung_undo_fails_at_the_limit_naming_the_node() {
        let mut loads = Loads {
            command_limit: Some(Duration::from_millis(300)),
            ..Loads::default()
        };
        let start = Instant::now();
        let err = loads
            .undo(
                "gpu09",
                &Undo::Run {
                    argv: words(&["sleep", "30"]),
                },
            )
            .unwrap_err();
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{:?}",
            start.elapsed()
        );
        assert!(
            matches!(&err, InjectError::TimedOut { node, command, .. } if node == "gpu09" && command == "sleep 30"),
            "{err:?}"
        );
    }

    #[test]
    fn a_command_on_a_node_is_limited_to_twenty_seconds_unless_set() {
        assert_eq!(Loads::default().command_limit(), Duration::from_secs(20));
    }

    #[test]
    fn a_real_mtu_change_is_undone_to_the_mtu_read_before() {
        let (change, undo) = real()
            .commands(FaultClass::MtuDrift, "gpu07", "4200\n")
            .unwrap();
        assert_eq!(
            change.join(" "),
            "ssh gpu07 ip link set dev ens4np0 mtu 1500"
        );
        assert_eq!(undo.join(" "), "ssh gpu07 ip link set dev ens4np0 mtu 4200");
        assert!(real().commands(FaultClass::MtuDrift, "gpu07", "").is_err());
    }

    #[test]
    fn a_real_pfc_change_puts_back_all_eight_priorities_as_they_were() {
        let before = "prio-pfc 0:off 1:off 2:off 3:on 4:off 5:off 6:off 7:off\n";
        let (change, undo) = real()
            .commands(FaultClass::PfcOff, "gpu07", before)
            .unwrap();
        assert_eq!(
            change.join(" "),
            "ssh gpu07 dcb pfc set dev ens4np0 prio-pfc 3:off"
        );
        assert_eq!(
            undo.join(" "),
            "ssh gpu07 dcb pfc set dev ens4np0 prio-pfc 0:off 1:off 2:off 3:on 4:off 5:off 6:off 7:off"
        );
    }

    #[test]
    fn congestion_refuses_an_interface_with_a_root_qdisc_of_its_own() {
        let e = real()
            .commands(
                FaultClass::Congestion,
                "gpu07",
                "qdisc htb 1: root refcnt 2",
            )
            .unwrap_err();
        assert!(e.to_string().contains("would not put it back"), "{e}");
        let (c, u) = real()
            .commands(FaultClass::Congestion, "gpu07", "qdisc mq 0: root")
            .unwrap();
        assert!(c.join(" ").contains("tbf rate 1gbit burst 625000"), "{c:?}");
        assert_eq!(u.join(" "), "ssh gpu07 tc qdisc del dev ens4np0 root");
    }

    #[test]
    fn counter_classes_are_refused_on_a_real_cluster() {
        let e = real()
            .commands(FaultClass::ErrorCounters, "gpu07", "")
            .unwrap_err();
        assert!(e.to_string().contains("only on the testbed"), "{e}");
    }

    #[test]
    fn a_testbed_tree_is_replaced_and_put_back_through_the_journal() {
        let dir = tempfile::tempdir().unwrap();
        let tb = dir.path();
        std::fs::create_dir_all(tb.join("nodes/n3/sysfs")).unwrap();
        std::fs::write(tb.join("nodes/n3/sysfs/marker"), "healthy").unwrap();
        crate::fakes::stand_in_fixture_writer(tb);
        let mut inj = TestbedInjector::new(tb.to_owned(), tb.join("testbed"));
        let marker = || std::fs::read_to_string(tb.join("nodes/n3/sysfs/marker")).unwrap();
        let mut r = round(FaultClass::EcnOff);
        r.node = "n3".into();
        let mut j = Journal::open(&tb.join("journal.jsonl")).unwrap();
        let ids = inj.inject(&r, tb, &mut j).unwrap();
        assert_eq!(marker().trim(), "roce8-ecn-off");
        assert_eq!(j.pending().unwrap().len(), 1);
        restore(&mut inj, &mut j, &ids).unwrap();
        assert_eq!(marker(), "healthy");
        assert!(j.pending().unwrap().is_empty());
        let left: Vec<_> = std::fs::read_dir(tb.join("nodes/n3"))
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(
            left,
            vec![std::ffi::OsString::from("sysfs")],
            "nothing saved is left"
        );
    }

    #[test]
    fn a_crashed_drill_is_restored_by_replaying_its_journal() {
        let dir = tempfile::tempdir().unwrap();
        let tb = dir.path();
        std::fs::create_dir_all(tb.join("nodes/n1/.drill-saved-sysfs")).unwrap();
        std::fs::write(tb.join("nodes/n1/.drill-saved-sysfs/marker"), "healthy").unwrap();
        std::fs::create_dir_all(tb.join("nodes/n1/sysfs")).unwrap();
        std::fs::write(tb.join("nodes/n1/sysfs/marker"), "port down").unwrap();
        let path = tb.join("journal.jsonl");
        {
            let mut j = Journal::open(&path).unwrap();
            j.record(
                "n1",
                "port_down",
                Undo::Rename {
                    from: tb.join("nodes/n1/.drill-saved-sysfs"),
                    to: tb.join("nodes/n1/sysfs"),
                },
            )
            .unwrap();
        }
        let mut inj = TestbedInjector::new(tb.to_owned(), tb.join("testbed"));
        let mut j = Journal::open(&path).unwrap();
        assert_eq!(replay(&mut inj, &mut j).unwrap(), 1);
        assert_eq!(
            std::fs::read_to_string(tb.join("nodes/n1/sysfs/marker")).unwrap(),
            "healthy"
        );
        assert_eq!(replay(&mut inj, &mut j).unwrap(), 0, "nothing left to undo");
    }

    #[test]
    fn remote_hogs_go_through_the_prefix_journaled_and_ended_with_no_loopback_stream() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = Journal::open(&dir.path().join("j.jsonl")).unwrap();
        // `env` stands in for `ssh {node}`: the words before the hog's own.
        let mut loads = Loads::remote(vec!["env".into()]);
        loads.hogs = Some(1);
        let ids = loads
            .background_load(&round(FaultClass::BackgroundLoad), &mut j)
            .unwrap();
        assert_eq!(ids.len(), 1, "one hog, no stream");
        let p = j.pending().unwrap();
        let Undo::Kill {
            pid,
            start_ticks: t,
        } = p[0].undo
        else {
            panic!("{p:?}")
        };
        assert_eq!(start_ticks(pid), Some(t), "the hog runs");
        restore(
            &mut TestbedInjector::new(dir.path().into(), dir.path().into()),
            &mut j,
            &ids,
        )
        .unwrap();
        let gone = (0..50).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(20));
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .map_or(true, |s| s.contains(") Z "))
        });
        assert!(gone, "the hog's group was ended");
    }

    #[test]
    fn a_hog_is_killed_by_pid_only_while_it_is_the_same_process() {
        let mut child = Command::new("sleep")
            .arg("30")
            .process_group(0)
            .spawn()
            .unwrap();
        let pid = child.id();
        let t = start_ticks(pid).unwrap();
        let mut loads = Loads::default();
        loads
            .undo(
                "n1",
                &Undo::Kill {
                    pid,
                    start_ticks: t + 1,
                },
            )
            .unwrap();
        assert!(
            child.try_wait().unwrap().is_none(),
            "another start time: left alone"
        );
        loads
            .undo(
                "n1",
                &Undo::Kill {
                    pid,
                    start_ticks: t,
                },
            )
            .unwrap();
        let st = child.wait().unwrap();
        assert!(!st.success());
    }

    #[test]
    fn the_checkpoint_burst_never_writes_through_a_link_planted_in_the_jobs_folder() {
        let dir = tempfile::tempdir().unwrap();
        let job = dir.path().join("job");
        let victim = dir.path().join("victim");
        std::fs::create_dir_all(&job).unwrap();
        std::fs::create_dir_all(&victim).unwrap();
        // The job, running in its folder, plants the burst's name as a link to a folder of root's.
        std::os::unix::fs::symlink(&victim, job.join("drill-burst")).unwrap();
        let mut j = Journal::open(&dir.path().join("j.jsonl")).unwrap();
        let mut loads = Loads {
            burst_bytes: Some(1),
            ..Loads::default()
        };
        let e = loads
            .checkpoint_burst(&round(FaultClass::CheckpointBurst), &job, &mut j)
            .unwrap_err()
            .to_string();
        loads.wait_bursts();
        assert!(e.contains("must not exist yet"), "{e}");
        assert_eq!(
            std::fs::read_dir(&victim).unwrap().count(),
            0,
            "nothing written there"
        );
        assert!(
            j.pending().unwrap().is_empty(),
            "no undo left to remove the job's link"
        );
        assert!(std::fs::symlink_metadata(job.join("drill-burst")).is_ok());
        // The job's folder itself swapped for a link: refused too.
        let swapped = dir.path().join("swapped");
        std::os::unix::fs::symlink(&victim, &swapped).unwrap();
        assert!(
            loads
                .checkpoint_burst(&round(FaultClass::CheckpointBurst), &swapped, &mut j)
                .is_err()
        );
        assert_eq!(std::fs::read_dir(&victim).unwrap().count(), 0);
    }

    #[test]
    fn the_checkpoint_burst_is_written_as_the_job_user() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let mut j = Journal::open(&dir.path().join("j.jsonl")).unwrap();
        let me = nix::unistd::geteuid().as_raw();
        if me == 0 {
            let d =
                crate::folder::prepare(&dir.path().join("work"), "round-001", Some(1500)).unwrap();
            let mut loads = Loads {
                burst_bytes: Some(1),
                job_uid: Some(1500),
                ..Loads::default()
            };
            let ids = loads
                .checkpoint_burst(&round(FaultClass::CheckpointBurst), &d.job_dir, &mut j)
                .unwrap();
            loads.wait_bursts();
            let burst = d.job_dir.join("drill-burst");
            assert_eq!(std::fs::metadata(&burst).unwrap().uid(), 1500);
            let shard = std::fs::metadata(burst.join("shard-0000")).unwrap();
            assert_eq!((shard.uid(), shard.len()), (1500, 4 << 20));
            restore(
                &mut TestbedInjector::new(dir.path().into(), dir.path().into()),
                &mut j,
                &ids,
            )
            .unwrap();
            assert!(!burst.exists(), "the undo removed the burst");
        } else {
            // Not root: writing as another user is impossible, so the burst is refused.
            let job = dir.path().join("job");
            std::fs::create_dir(&job).unwrap();
            let mut loads = Loads {
                burst_bytes: Some(1),
                job_uid: Some(me + 1),
                ..Loads::default()
            };
            let e = loads
                .checkpoint_burst(&round(FaultClass::CheckpointBurst), &job, &mut j)
                .unwrap_err()
                .to_string();
            assert!(e.contains(&format!("cannot take uid {}", me + 1)), "{e}");
            assert_eq!(std::fs::read_dir(&job).unwrap().count(), 0);
        }
    }
}
