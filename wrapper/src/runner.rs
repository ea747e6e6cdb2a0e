//! Launching the command: the [`Runner`] trait and the real [`ProcessRunner`].
//!
//! Like hyperfine's executors, the retry loop ([`crate::supervise`]) only sees the trait, so its
//! decisions are tested with a scripted runner; `ProcessRunner` is exercised by the integration
//! tests against real processes.
//!
//! Signals: SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGUSR2, SIGCONT and SIGCHLD are caught with
//! signal-hook's self-pipe (one socket pair for all of them, written by an async-signal-safe
//! handler with `SA_RESTART`; which signals arrived is kept in signal-hook's pending set), and read in one `poll(2)` loop together with the marker socket and inotify.
//! The same loop looks at the in-job watch's notice file about once a second (a timeout, no
//! descriptor: [`crate::notice`]); `--on-fabric-fault=signal:SIG` sends SIG for each new notice
//! down the very path forwarded signals take.
//! They are caught, not blocked: a blocked mask would be inherited by the child across `exec`,
//! while caught signals reset to their default action there. The child is spawned in its own
//! process group, and each forwardable signal is sent to that group with `killpg(2)`, reaching
//! the whole launcher tree (`torchrun` and its workers).
//!
//! Start-up: the program is looked up in `PATH` once ([`resolve_program`]), so each attempt makes
//! one `execve`. std spawns with glibc's `posix_spawn` (`CLONE_VM|CLONE_VFORK`), whose child
//! checks the disposition of all 64 signals (the ~120 `rt_sigaction` calls strace shows); a
//! `fork` with a `pre_exec` that resets only the seven caught signals was measured slower
//! (perf task-clock of `fabric-run -- /usr/bin/true`: 1.52 and 1.61 ms against 1.43 and 1.43 ms):
//! copying the page tables costs more than the 120 system calls, so the spawn stays as it is.

use std::ffi::OsString;
use std::io::IsTerminal;
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use std::os::unix::net::UnixStream;

use nix::sys::signal::{SigSet, Signal, killpg};
use nix::unistd::{Pid, getpgrp, tcgetpgrp, tcsetpgrp};
use signal_hook::iterator::backend::SignalDelivery;
use signal_hook::iterator::exfiltrator::SignalOnly;

use crate::dirwatch::DirWatch;
use crate::mark::{MarkSocket, SOCKET_ENV};
use crate::notice::{FaultAction, NoticeFollower};
use crate::policy::Status;
use crate::pump::{Patterns, Target, pump};
use crate::tracker::Tracker;

/// Signals forwarded to the child's process group (docs/records.md, "Signals and exit status").
pub const FORWARDED: [Signal; 6] = [
    Signal::SIGTERM,
    Signal::SIGINT,
    Signal::SIGHUP,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
    Signal::SIGCONT,
];

/// Sends `sig` to the command's process group: forwarded signals and `--on-fabric-fault`'s.
fn forward(pgid: Pid, sig: Signal) {
    // ESRCH: the group is already gone; nothing to forward to.
    let _ = killpg(pgid, sig);
}

/// The in-job watch's notices: the file followed and `--on-fabric-fault`.
#[derive(Debug)]
pub struct FaultWatch {
    /// The node's notice file.
    pub follower: NoticeFollower,
    /// What to do for each new notice besides printing and recording it.
    pub action: FaultAction,
}

/// How long to wait, after the child exits, for its output pipes to close (a background
/// grandchild may hold them open); then the wrapper moves on and the pumps keep running.
const PIPE_GRACE: Duration = Duration::from_secs(2);

/// How one attempt went.
#[derive(Debug, Clone)]
pub struct AttemptResult {
    /// How it ended.
    pub status: Status,
    /// Wall time.
    pub duration: Duration,
    /// When it ended.
    pub end: SystemTime,
    /// A `--retry-on output=` pattern matched.
    pub output_matched: bool,
}

/// Launches attempts and waits between them.
pub trait Runner {
    /// Runs attempt `attempt` (1-based) to its end.
    fn run(&mut self, attempt: u32) -> AttemptResult;
    /// Waits `d` before a relaunch; `false` when a signal (SIGTERM, SIGINT, SIGHUP) says stop.
    fn backoff(&mut self, d: Duration) -> bool;
    /// Whether SIGTERM has been received so far.
    fn sigterm_seen(&self) -> bool;
    /// Runs the `--accept-cmd` validation; `true` when it exits 0.
    fn validate(&mut self, shell_cmd: &str) -> bool;
    /// The run is over: pending detector state (an open directory burst) is flushed.
    fn finish(&mut self);
}

/// The caught signals: one self-pipe for all of them, and which arrived in signal-hook's
/// pending set (its iterator backend), so start-up costs one socket pair instead of one per signal.
pub struct SignalPipes {
    delivery: SignalDelivery<UnixStream, SignalOnly>,
}

impl std::fmt::Debug for SignalPipes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SignalPipes")
            .field("read", self.delivery.get_read())
            .finish_non_exhaustive()
    }
}

impl SignalPipes {
    /// Installs the handlers (forwarded signals and SIGCHLD).
    pub fn install() -> std::io::Result<Self> {
        let (rx, tx) = UnixStream::pair()?;
        rx.set_nonblocking(true)?;
        tx.set_nonblocking(true)?;
        let signals = FORWARDED
            .into_iter()
            .chain([Signal::SIGCHLD])
            .map(|s| s as i32);
        let delivery = SignalDelivery::with_pipe(rx, tx, SignalOnly, signals)?;
        Ok(Self { delivery })
    }

    /// What `poll` waits on.
    fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.delivery.get_read().as_fd()
    }

    /// Signals that arrived since the last call (each at most once per call).
    fn drain(&mut self) -> Vec<Signal> {
        let mut out: Vec<Signal> = self
            .delivery
            .pending()
            .filter_map(|n| Signal::try_from(n).ok())
            .collect();
        out.sort_by_key(|s| *s as i32);
        out.dedup();
        out
    }
}

/// Runs `f` with SIGTTOU blocked in this thread, so a background group may set the terminal's
/// foreground group (tcsetpgrp(3): otherwise the caller is stopped).
fn without_sigttou<T>(f: impl FnOnce() -> T) -> T {
    let mut set = SigSet::empty();
    set.add(Signal::SIGTTOU);
    let blocked = set.thread_block().is_ok();
    let out = f();
    if blocked {
        let _ = set.thread_unblock();
    }
    out
}

/// Gives the terminal to the child's group while it runs, when the wrapper holds it.
#[derive(Debug)]
struct Foreground {
    ours: Pid,
}

impl Foreground {
    fn take(child_pgid: Pid) -> Option<Self> {
        let stdin = std::io::stdin();
        if !stdin.is_terminal() {
            return None;
        }
        let ours = getpgrp();
        if tcgetpgrp(stdin.as_fd()).ok()? != ours {
            return None;
        }
        without_sigttou(|| tcsetpgrp(stdin.as_fd(), child_pgid)).ok()?;
        // The child may have touched the terminal before it was its own and been stopped.
        let _ = killpg(child_pgid, Signal::SIGCONT);
        Some(Self { ours })
    }
}

impl Drop for Foreground {
    fn drop(&mut self) {
        let _ = without_sigttou(|| tcsetpgrp(std::io::stdin().as_fd(), self.ours));
    }
}

/// The real runner: processes, pipes, a signalfd, the marker socket and inotify.
#[derive(Debug)]
pub struct ProcessRunner {
    cmd: Vec<OsString>,
    /// `cmd[0]` resolved against `PATH` once, so every attempt makes one `execve`.
    program: OsString,
    signals: SignalPipes,
    marks: Option<MarkSocket>,
    dirwatch: Option<DirWatch>,
    faults: Option<FaultWatch>,
    patterns: Arc<Patterns>,
    tracker: Arc<Mutex<Tracker>>,
    sigterm: bool,
    /// An attempt's command is running (a notice's signal has somewhere to go).
    running: bool,
    /// Signals `--on-fabric-fault` owes the running command.
    fault_signals: Vec<Signal>,
}

/// `program` as `execvp(3)` would find it in this process's `PATH` (see [`resolve_in`]).
pub fn resolve_program(program: &OsString) -> OsString {
    resolve_in(program, std::env::var_os("PATH").as_deref())
}

/// `program` as `execvp(3)` would find it in `path`, looked up once so that each attempt makes a
/// single `execve` (std's `posix_spawnp` tries every `PATH` entry in the child, one failed
/// `execve` each). A name with a `/` is used as is; otherwise the first `path` entry holding a
/// regular file this process may execute wins (an empty entry is the current folder; no `PATH`
/// means `/usr/local/bin:/usr/bin:/bin`). A name found nowhere comes back unchanged, so the spawn
/// fails with "not found" as before.
pub fn resolve_in(program: &OsString, path: Option<&std::ffi::OsStr>) -> OsString {
    use std::os::unix::ffi::OsStrExt;
    use std::path::PathBuf;
    if program.is_empty() || program.as_bytes().contains(&b'/') {
        return program.clone();
    }
    let path = path.unwrap_or("/usr/local/bin:/usr/bin:/bin".as_ref());
    std::env::split_paths(path)
        .map(|dir| {
            if dir.as_os_str().is_empty() {
                PathBuf::from(".").join(program)
            } else {
                dir.join(program)
            }
        })
        .find(|c| {
            c.is_file() && nix::unistd::access(c.as_path(), nix::unistd::AccessFlags::X_OK).is_ok()
        })
        .map_or_else(|| program.clone(), PathBuf::into_os_string)
}

fn not_started(program: &OsString, e: &std::io::Error) -> Status {
    let name = program.to_string_lossy();
    let (code, hint) = match e.kind() {
        std::io::ErrorKind::NotFound => (127, "check the name and PATH"),
        std::io::ErrorKind::PermissionDenied => (126, "check that it is an executable file"),
        _ => (126, "check that it is an executable for this machine"),
    };
    Status::NotStarted {
        code,
        message: format!("fabric-run: cannot run `{name}`: {e}: {hint}"),
    }
}

impl ProcessRunner {
    /// A runner for `cmd`; installs the signal handlers.
    pub fn new(
        cmd: Vec<OsString>,
        marks: Option<MarkSocket>,
        dirwatch: Option<DirWatch>,
        faults: Option<FaultWatch>,
        patterns: Arc<Patterns>,
        tracker: Arc<Mutex<Tracker>>,
    ) -> std::io::Result<Self> {
        Ok(Self {
            program: resolve_program(&cmd[0]),
            cmd,
            signals: SignalPipes::install()?,
            marks,
            dirwatch,
            faults,
            patterns,
            tracker,
            sigterm: false,
            running: false,
            fault_signals: Vec::new(),
        })
    }

    /// New notices: each printed on stderr, recorded, and, under `--on-fabric-fault=signal:SIG`
    /// while a command runs, owed a signal (sent by the attempt's loop).
    fn take_notices(&mut self, notices: Vec<fabric_proto::notice::FabricNotice>) {
        let action = self.faults.as_ref().map_or(FaultAction::None, |f| f.action);
        for n in notices {
            tracing::warn!("{}", n.summary());
            if n.is_about_steps() {
                // The job's own steps compared across its nodes: said, not a fabric fault.
                continue;
            }
            if n.warn {
                // A warning is said and recorded; the command is not disturbed for it.
                self.lock().fabric_fault(&n, None);
                continue;
            }
            let sent = match action {
                FaultAction::Signal(sig) if self.running => {
                    tracing::warn!("fabric-run: sending {sig} to the command (--on-fabric-fault)");
                    self.fault_signals.push(sig);
                    Some(sig as i32)
                }
                FaultAction::Signal(sig) => {
                    tracing::warn!(
                        "fabric-run: no command is running: {sig} not sent (--on-fabric-fault)"
                    );
                    None
                }
                FaultAction::Requeue if n.requeued => {
                    tracing::warn!(
                        "fabric-run: the job is being requeued for it, as it asked (--on-fabric-fault=requeue)"
                    );
                    None
                }
                FaultAction::Requeue => {
                    tracing::warn!(
                        "fabric-run: the job asked to be requeued, but it was not (the node was not drained, or plugstack.conf does not allow it: on_fault=requeue)"
                    );
                    None
                }
                FaultAction::None => None,
            };
            self.lock().fabric_fault(&n, sent);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Tracker> {
        self.tracker.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Pending signals.
    fn signals(&mut self) -> Vec<Signal> {
        let out = self.signals.drain();
        if out.contains(&Signal::SIGTERM) {
            self.sigterm = true;
        }
        out
    }

    /// One round of `poll` over the signal pipes, markers and inotify; returns the signals seen.
    fn wait_once(&mut self, limit: Option<Instant>) -> Vec<Signal> {
        let now = Instant::now();
        let wake = [
            limit,
            self.dirwatch.as_ref().and_then(DirWatch::next_deadline),
            self.faults.as_ref().map(|f| f.follower.next_look()),
        ]
        .into_iter()
        .flatten()
        .min();
        let timeout = match wake {
            Some(t) => {
                let ms = t.saturating_duration_since(now).as_millis().min(60_000) as i32;
                PollTimeout::try_from(ms.max(0) + 1).unwrap_or(PollTimeout::NONE)
            }
            None => PollTimeout::NONE,
        };
        {
            let mut fds: Vec<PollFd<'_>> = vec![PollFd::new(self.signals.fd(), PollFlags::POLLIN)];
            if let Some(m) = &self.marks {
                fds.push(PollFd::new(m.socket.as_fd(), PollFlags::POLLIN));
            }
            if let Some(d) = &self.dirwatch {
                fds.push(PollFd::new(d.fd(), PollFlags::POLLIN));
            }
            // EINTR or an error: fall through and look at everything anyway.
            let _ = poll(&mut fds, timeout);
        }
        let now = Instant::now();
        if let Some(m) = &self.marks {
            let events = m.drain();
            if !events.is_empty() {
                let mut t = self.lock();
                for e in events {
                    t.apply(e, now);
                }
            }
        }
        if let Some(d) = &mut self.dirwatch {
            d.read(now);
            if let Some(e) = d.tick(now, false) {
                self.lock().apply(e, now);
            }
        }
        if let Some(f) = &mut self.faults {
            let notices = f.follower.poll(now);
            self.take_notices(notices);
        }
        self.signals()
    }

    fn reap(child: &mut Child) -> Option<Status> {
        match child.try_wait() {
            Ok(Some(st)) => Some(match (st.code(), st.signal()) {
                (Some(c), _) => Status::Exit(c),
                (None, Some(s)) => Status::Signal(s),
                _ => Status::Exit(1),
            }),
            Ok(None) => None,
            // Cannot happen for our own child; report a failure rather than spin.
            Err(_) => Some(Status::Exit(1)),
        }
    }

    fn start_pumps(&self, child: &mut Child) -> Vec<Receiver<()>> {
        let mut done = Vec::new();
        // A 1 MiB pipe (the unprivileged maximum, pipe(7)) halves the wake-ups of a chatty child.
        let grow = |fd: std::os::fd::RawFd| {
            let _ = nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_SETPIPE_SZ(1 << 20));
        };
        let out = child.stdout.take().map(|s| {
            grow(s.as_raw_fd());
            Box::new(s) as Box<dyn std::io::Read + Send>
        });
        let err = child.stderr.take().map(|s| {
            grow(s.as_raw_fd());
            Box::new(s) as Box<dyn std::io::Read + Send>
        });
        let streams = [(out, Target::Stdout), (err, Target::Stderr)];
        for (src, target) in streams {
            let Some(src) = src else { continue };
            let (tx, rx) = channel();
            let patterns = Arc::clone(&self.patterns);
            let tracker = Arc::clone(&self.tracker);
            std::thread::spawn(move || {
                pump(src, target, patterns, tracker);
                let _ = tx.send(());
            });
            done.push(rx);
        }
        done
    }
}

impl Runner for ProcessRunner {
    fn run(&mut self, attempt: u32) -> AttemptResult {
        self.lock().start_attempt(attempt);
        let started = Instant::now();
        let mut cmd = Command::new(&self.program);
        cmd.arg0(&self.cmd[0]).args(&self.cmd[1..]).process_group(0);
        cmd.env("FABRIC_RUN_ATTEMPT", attempt.to_string());
        if let Some(m) = &self.marks {
            cmd.env(SOCKET_ENV, &m.path);
        }
        if !self.patterns.is_empty() {
            cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        }
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                return AttemptResult {
                    status: not_started(&self.cmd[0], &e),
                    duration: started.elapsed(),
                    end: SystemTime::now(),
                    output_matched: false,
                };
            }
        };
        let pgid = Pid::from_raw(child.id() as i32);
        let foreground = Foreground::take(pgid);
        let pumps = self.start_pumps(&mut child);
        self.running = true;
        let status = loop {
            // Reap first: SIGCHLD may have been consumed in an earlier round.
            if let Some(st) = Self::reap(&mut child) {
                break st;
            }
            for s in self.wait_once(None) {
                if FORWARDED.contains(&s) {
                    forward(pgid, s);
                }
            }
            for s in std::mem::take(&mut self.fault_signals) {
                forward(pgid, s);
            }
        };
        self.running = false;
        self.fault_signals.clear();
        let end = SystemTime::now();
        let duration = started.elapsed();
        drop(foreground);
        let grace = Instant::now() + PIPE_GRACE;
        for rx in pumps {
            let _ = rx.recv_timeout(grace.saturating_duration_since(Instant::now()));
        }
        AttemptResult {
            status,
            duration,
            end,
            output_matched: self.lock().retry_pattern_seen(),
        }
    }

    fn backoff(&mut self, d: Duration) -> bool {
        let until = Instant::now() + d;
        while Instant::now() < until {
            let sigs = self.wait_once(Some(until));
            if sigs
                .iter()
                .any(|s| matches!(s, Signal::SIGTERM | Signal::SIGINT | Signal::SIGHUP))
            {
                return false;
            }
        }
        true
    }

    fn sigterm_seen(&self) -> bool {
        self.sigterm
    }

    fn validate(&mut self, shell_cmd: &str) -> bool {
        Command::new("/bin/sh")
            .arg("-c")
            .arg(shell_cmd)
            .status()
            .is_ok_and(|s| s.success())
    }

    fn finish(&mut self) {
        if let Some(f) = &mut self.faults {
            // A notice of the last second: recorded, with no command left to signal.
            let notices = f.follower.look();
            self.take_notices(notices);
        }
        let now = Instant::now();
        if let Some(d) = &mut self.dirwatch {
            d.read(now);
            if let Some(e) = d.tick(now, true) {
                self.lock().apply(e, now);
            }
        }
        if let Some(m) = &self.marks {
            let events = m.drain();
            let mut t = self.lock();
            for e in events {
                t.apply(e, now);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn file(path: &std::path::Path, mode: u32) {
        std::fs::write(path, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn a_bare_name_resolves_to_the_first_executable_file_on_the_path() {
        let t = tempfile::tempdir().unwrap();
        let (a, b, c) = (t.path().join("a"), t.path().join("b"), t.path().join("c"));
        for d in [&a, &b, &c] {
            std::fs::create_dir(d).unwrap();
        }
        std::fs::create_dir(a.join("tool")).unwrap(); // a folder is not a program
        file(&b.join("tool"), 0o644); // neither is a file without the x bit
        file(&c.join("tool"), 0o755);
        let path = std::env::join_paths([&a, &b, &c]).unwrap();
        assert_eq!(
            resolve_in(&"tool".into(), Some(&path)),
            c.join("tool").into_os_string()
        );
    }

    #[test]
    fn names_with_a_slash_or_found_nowhere_are_left_for_exec_to_judge() {
        let t = tempfile::tempdir().unwrap();
        let path = t.path().as_os_str();
        for name in ["./tool", "/usr/bin/env", "no-such-program-here", ""] {
            assert_eq!(resolve_in(&name.into(), Some(path)), OsString::from(name));
        }
    }
}
