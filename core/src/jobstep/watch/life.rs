//! The watch's life: started by the prolog ([`start`]), its pid file ([`PidFile`]), its pace
//! and its end ([`Pace`], [`RealPace`]), stopped by the epilog ([`stop`], [`finish`]).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::outputs::{events_path, read_events};
use crate::jobstep::{JobStep, now_unix};
use fabric_proto::tag::WatchEvent;

/// With no `slurmstepd` of the job seen for this long, the watch ends on its own.
pub const JOB_GONE_AFTER: Duration = Duration::from_secs(180);

/// How often the watch looks for its job's `slurmstepd` (a scan of `/proc`).
pub const JOB_SCAN_EVERY: Duration = Duration::from_secs(60);

/// What the watch does between samples and when to stop.
pub trait Pace {
    /// Waits `d`.
    fn sleep(&mut self, d: Duration);
    /// Now, in seconds since the epoch (the hold-down's clock).
    fn now_s(&self) -> u64 {
        now_unix()
    }
    /// Whether the watch should end (its pid file gone, its job gone).
    fn should_stop(&mut self) -> bool;
    /// Whether a `slurmstepd` of the job runs on this host, asked right before the watch acts
    /// (`false` sends the question to slurmctld): a watch whose epilog never stopped it (the
    /// epilog failed, timed out, or never ran) must not drain a node, or tag a job, for what it
    /// sees after its job ended.
    fn job_still_here(&mut self) -> bool {
        true
    }
    /// slurmctld was asked whether the job runs (the next question waits another
    /// [`JOB_GONE_AFTER`]).
    fn asked_slurm(&mut self) {}
    /// Whether no `slurmstepd` of the job has been seen on this host for [`JOB_GONE_AFTER`]:
    /// the loop then asks slurmctld whether the job still runs (a node of a batch job that runs
    /// no step here has no `slurmstepd` without `PrologFlags=Contain`).
    fn job_unseen_for_long(&mut self) -> bool {
        false
    }
}

/// The watch's pid file for `job` in a node's state folder.
pub fn pid_path(state_dir: &Path, job: u32) -> PathBuf {
    state_dir.join(format!("watch-{job}.pid"))
}

/// A process's start time (clock ticks since boot, field 22 of `/proc/<pid>/stat`); `None` when
/// it is gone or a zombie.
pub fn start_time(proc_root: &Path, pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(proc_root.join(pid.to_string()).join("stat")).ok()?;
    // The command name is in parentheses and may hold spaces: fields follow the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    // A zombie has ended; only its parent's wait is left.
    if fields.next()? == "Z" {
        return None;
    }
    fields.nth(18)?.parse().ok()
}

/// What a pid file names: `pid start_time`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PidFile {
    /// The watch's pid (also its process group).
    pub pid: u32,
    /// Its start time, so that a reused pid is never signalled.
    pub start: u64,
}

impl PidFile {
    /// Reads a pid file (`None` when absent or not ours).
    pub fn read(path: &Path) -> Option<Self> {
        let text = std::fs::read_to_string(path).ok()?;
        let mut w = text.split_whitespace();
        Some(Self {
            pid: w.next()?.parse().ok()?,
            start: w.next()?.parse().ok()?,
        })
    }

    /// Writes it (atomically).
    pub fn write(self, path: &Path) -> std::io::Result<()> {
        crate::probe::output::write_atomic(
            path,
            format!("{} {}\n", self.pid, self.start).as_bytes(),
        )
    }

    /// Whether the process it names is alive and is the one that wrote it.
    pub fn is_alive(self, proc_root: &Path) -> bool {
        start_time(proc_root, self.pid) == Some(self.start)
    }
}

/// How the epilog's stop of the watch went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopped {
    /// No watch was started for this job on this node.
    NoWatch,
    /// The watch was running and was ended.
    Ended,
    /// The watch had died before the epilog (killed, crashed): faults after that were not seen.
    Lost,
}

/// The epilog's half: removes the pid file (so a watch between samples ends by itself), sends
/// the watch SIGTERM (the watch alone: a Slurm call it is making, a drain's settle step, is
/// left to finish), waits up to `grace` for it to go, then SIGKILLs its whole process group.
pub fn stop(state_dir: &Path, proc_root: &Path, job: u32, grace: Duration) -> Stopped {
    use nix::sys::signal::{Signal, kill, killpg};
    use nix::unistd::Pid;
    let path = pid_path(state_dir, job);
    let Some(pf) = PidFile::read(&path) else {
        return Stopped::NoWatch;
    };
    let _ = std::fs::remove_file(&path);
    if !pf.is_alive(proc_root) {
        return Stopped::Lost;
    }
    let Ok(raw) = i32::try_from(pf.pid) else {
        return Stopped::Lost;
    };
    let pid = Pid::from_raw(raw);
    let _ = kill(pid, Signal::SIGTERM);
    let until = Instant::now() + grace;
    while Instant::now() < until {
        if !pf.is_alive(proc_root) {
            return Stopped::Ended;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    if pf.is_alive(proc_root) {
        let _ = killpg(pid, Signal::SIGKILL);
    }
    Stopped::Ended
}

/// Whether a `slurmstepd` of `job` runs on this host: a process of root's (the real uid of its
/// `/proc/<pid>/status`) named `slurmstepd` whose command line reads `slurmstepd: [<job>.…]`.
/// The job's user can name a process so, and set its `comm`; they cannot make it root's, so a
/// process of theirs never keeps an orphaned watch alive.
pub fn job_has_stepd(proc_root: &Path, job: u32) -> bool {
    let want = format!("slurmstepd: [{job}.");
    let Ok(dir) = std::fs::read_dir(proc_root) else {
        return true;
    };
    dir.flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
        })
        .any(|e| {
            std::fs::read(e.path().join("cmdline"))
                .is_ok_and(|c| c.windows(want.len()).any(|w| w == want.as_bytes()))
                && is_roots_slurmstepd(&e.path())
        })
}

/// Whether the process of `/proc/<pid>` (`pid_dir`) is named `slurmstepd` and runs as root
/// (real uid 0, from its `status`).
pub(super) fn is_roots_slurmstepd(pid_dir: &Path) -> bool {
    let Ok(status) = std::fs::read_to_string(pid_dir.join("status")) else {
        return false;
    };
    let field = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .map(str::trim)
    };
    let real_uid = field("Uid:").and_then(|v| v.split_whitespace().next());
    field("Name:") == Some("slurmstepd") && real_uid == Some("0")
}

/// The real pace: sleeps, stops when the pid file is gone or no longer names this process, and
/// says when no `slurmstepd` of the job has been seen for [`JOB_GONE_AFTER`].
#[derive(Debug)]
pub struct RealPace {
    /// The pid file.
    pub pid_path: PathBuf,
    /// This process.
    pub me: PidFile,
    /// `/proc`.
    pub proc_root: PathBuf,
    /// The job.
    pub job: u32,
    /// When a `slurmstepd` of the job was last seen.
    pub last_seen: Instant,
    /// When `/proc` was last scanned.
    pub last_scan: Instant,
    /// Set by the SIGTERM handler (the epilog's stop): the watch ends within a slice of its
    /// sleep and writes its last line, instead of dying in the middle of a sleep.
    pub term: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

/// The longest the watch sleeps at once (SIGTERM cuts a sleep short).
pub const SLEEP_SLICE: Duration = Duration::from_secs(1);

impl Pace for RealPace {
    fn sleep(&mut self, d: Duration) {
        use nix::sys::time::TimeSpec;
        use nix::time::{ClockId, ClockNanosleepFlags, clock_nanosleep};
        let until = Instant::now() + d;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() || self.term.load(std::sync::atomic::Ordering::Relaxed) {
                return;
            }
            // One wake-up per interval (a sliced sleep cost more CPU than the sample itself):
            // the SIGTERM handler interrupts it, since nanosleep is never restarted after a
            // handler (signal(7)); a signal that lands just before the call waits this sleep.
            let _ = clock_nanosleep(
                ClockId::CLOCK_MONOTONIC,
                ClockNanosleepFlags::empty(),
                &TimeSpec::from_duration(left.min(SLEEP_SLICE)),
            );
        }
    }

    fn should_stop(&mut self) -> bool {
        if self.term.load(std::sync::atomic::Ordering::Relaxed) {
            return true;
        }
        if PidFile::read(&self.pid_path) != Some(self.me) {
            return true;
        }
        false
    }

    fn asked_slurm(&mut self) {
        self.last_seen = Instant::now();
    }

    fn job_unseen_for_long(&mut self) -> bool {
        if self.last_scan.elapsed() >= JOB_SCAN_EVERY {
            self.last_scan = Instant::now();
            if job_has_stepd(&self.proc_root, self.job) {
                self.last_seen = Instant::now();
            }
        }
        self.last_seen.elapsed() >= JOB_GONE_AFTER
    }

    fn job_still_here(&mut self) -> bool {
        let here = job_has_stepd(&self.proc_root, self.job);
        if here {
            self.last_seen = Instant::now();
        }
        here
    }
}

/// The watch's log (its lines, relayed by the epilog into the slurmd log).
pub fn log_path(state_dir: &Path, job: u32) -> PathBuf {
    state_dir.join(format!("watch-{job}.log"))
}

/// The most of the watch's log the epilog relays (its last lines).
pub const MAX_RELAYED_LOG_BYTES: usize = 8 * 1024;

/// How many watches of jobs other than `job` run on this node now: the pid files in
/// `state_dir` ([`pid_path`]) whose process is alive ([`PidFile::is_alive`]); a file left by a
/// watch that died does not count.
pub fn live_watches(state_dir: &Path, proc_root: &Path, job: u32) -> usize {
    let Ok(dir) = std::fs::read_dir(state_dir) else {
        return 0;
    };
    dir.flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .and_then(|n| n.strip_prefix("watch-")?.strip_suffix(".pid"))
                .and_then(|j| j.parse::<u32>().ok())
                .is_some_and(|j| j != job)
                && PidFile::read(&e.path()).is_some_and(|pf| pf.is_alive(proc_root))
        })
        .count()
}

/// Why the prolog starts no watch for this job although `watch_interval=` asks for one:
/// `max_watches=` watches of other jobs already run on this node (each is root's, charged to
/// no job). `None` when there is room (or the watch is off).
pub fn no_room(step: &JobStep<'_>) -> Option<String> {
    let setup = step.setup;
    setup.plugin.watch_interval?;
    let max = setup.plugin.max_watches;
    let live = live_watches(&setup.state_dir, Path::new("/proc"), setup.inv.job_id);
    (live >= max as usize).then(|| {
        format!(
            "job {} is not watched: {live} in-job watches already run on this node (max_watches={max}); faults during the job are found by its epilog",
            setup.inv.job_id
        )
    })
}

/// The prolog's half: starts the watch for this job and node through the runner, unless
/// `watch_interval=0` (the prolog asked [`no_room`] first). Says what it did.
pub fn start(step: &JobStep<'_>) {
    if step.setup.plugin.watch_interval.is_none() {
        return;
    }
    let mut inv = step.setup.inv.clone();
    inv.script = fabric_proto::invocation::Script::Watch;
    let log = log_path(&step.setup.state_dir, inv.job_id);
    match step.seams.runner.start_watch(&inv.to_argv(), &log) {
        Ok(pid) => step.say(&format!("watch started (pid {pid})")),
        Err(e) => step.say(&format!(
            "cannot start the in-job watch ({e}); faults during job {} are found at its end",
            inv.job_id
        )),
    }
}

/// The epilog's half: stops the watch ([`stop`]), relays the end of its log, and returns the
/// events it kept ([`read_events`]) for the epilog's tag write.
pub fn finish(step: &JobStep<'_>) -> Vec<WatchEvent> {
    let state = &step.setup.state_dir;
    let job = step.job_id();
    let grace = step.setup.budget().watch_stop(step.deadline());
    let stopped = stop(state, Path::new("/proc"), job, grace);
    let log = log_path(state, job);
    if let Ok(text) = std::fs::read(&log) {
        let from = text.len().saturating_sub(MAX_RELAYED_LOG_BYTES);
        let tail = String::from_utf8_lossy(&text[from..]);
        for line in tail.lines().skip(usize::from(from > 0)) {
            step.say(line);
        }
    }
    let _ = std::fs::remove_file(&log);
    match stopped {
        Stopped::NoWatch | Stopped::Ended => {}
        Stopped::Lost => step.say(&format!(
            "the in-job watch of job {job} ended before the epilog (killed?): faults after that were found only now"
        )),
    }
    let events_at = events_path(state, job);
    let events = read_events(&events_at);
    let _ = std::fs::remove_file(&events_at);
    events
}
