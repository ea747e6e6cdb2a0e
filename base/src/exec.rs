//! Running other programs safely: by absolute path with separate arguments (never a shell),
//! with a scrubbed environment, and bounded in time; on expiry the program and every process it
//! started are killed.
//!
//! Children stay in the caller's process group: the SPANK plugin starts the job step in a group
//! of its own and ends that whole group (TERM, a grace, KILL) when it times out or returns, and
//! Slurm's `PrologEpilogTimeout` does the same, so a grandchild (probe, `scontrol`, `sinfo`,
//! `sacctmgr`, `munge`, the collective) can never outlive the job step or land a write after the
//! plugin said "job proceeds".
//!
//! Used by the `fabric-check` binary (never by the SPANK plugin, which must not start threads:
//! it has its own thread-free spawner).

use std::ffi::OsStr;
use std::io::{Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// The only `PATH` a child sees.
use fabric_proto::invocation::SAFE_PATH;

/// Most bytes kept of a child's stdout and of its stderr.
pub const MAX_OUTPUT_BYTES: u64 = 8 << 20;

/// Environment variables passed through to children, when set in our own environment.
/// `SLURM_CONF` comes from slurmd (the daemon's configuration), never from the job.
pub const PASS_THROUGH: &[&str] = &["SLURM_CONF"];

/// Why a bounded run failed.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// The program could not be started.
    #[error("cannot run {program}: {source}")]
    Spawn {
        /// The program.
        program: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The program ran past its time limit and its process group was killed.
    #[error("{program} did not finish within {limit_ms} ms and was killed")]
    Timeout {
        /// The program.
        program: String,
        /// The limit.
        limit_ms: u128,
    },
    /// Waiting for it failed.
    #[error("waiting for {program}: {source}")]
    Wait {
        /// The program.
        program: String,
        /// The OS error.
        source: std::io::Error,
    },
}

/// What a finished program left.
#[derive(Debug, Clone)]
pub struct Finished {
    /// Its exit status.
    pub status: ExitStatus,
    /// Its stdout (bounded by [`MAX_OUTPUT_BYTES`]).
    pub stdout: Vec<u8>,
    /// Its stderr (bounded).
    pub stderr: Vec<u8>,
    /// Wall time.
    pub duration: Duration,
}

impl Finished {
    /// Exit code, or 128 + signal number for a signal (shell convention).
    pub fn code(&self) -> i32 {
        self.status
            .code()
            .or_else(|| self.status.signal().map(|s| 128 + s))
            .unwrap_or(255)
    }

    /// Stdout as lossy UTF-8.
    pub fn stdout_text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    /// Stderr as lossy UTF-8, trimmed.
    pub fn stderr_text(&self) -> String {
        String::from_utf8_lossy(&self.stderr).trim().to_owned()
    }
}

/// A command for `program` with a scrubbed environment: only [`SAFE_PATH`], `LANG=C` and the
/// [`PASS_THROUGH`] variables; stdin from `/dev/null`; in the caller's process group (see the
/// module docs).
pub fn safe_command(program: impl AsRef<OsStr>) -> Command {
    let mut cmd = Command::new(program);
    cmd.env_clear().env("PATH", SAFE_PATH).env("LANG", "C");
    for key in PASS_THROUGH {
        if let Some(v) = std::env::var_os(key) {
            cmd.env(key, v);
        }
    }
    cmd.stdin(Stdio::null());
    cmd
}

/// Reads `r` into a shared, bounded buffer until end of file, then keeps draining.
fn pump(mut r: impl Read + Send + 'static) -> Pump {
    let buf = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let out = buf.clone();
    let handle = std::thread::spawn(move || {
        let mut chunk = [0u8; 8192];
        loop {
            match r.read(&mut chunk) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    // Keep draining past the bound so a chatty child never blocks on a full pipe.
                    if let Ok(mut b) = out.lock() {
                        let room = (MAX_OUTPUT_BYTES as usize).saturating_sub(b.len());
                        b.extend_from_slice(&chunk[..n.min(room)]);
                    }
                }
            }
        }
    });
    Pump { buf, handle }
}

/// A thread reading one of a child's pipes.
struct Pump {
    buf: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
    handle: std::thread::JoinHandle<()>,
}

/// How long the pipes may stay open after the program exited (a process it left behind holds
/// them; it is in the job step's process group, which the plugin ends).
const PIPE_LINGER: Duration = Duration::from_millis(200);

impl Pump {
    /// What was read, waiting for end of file until `until` at most.
    fn take(self, until: Instant) -> Vec<u8> {
        while !self.handle.is_finished() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(1));
        }
        let out = self.buf.lock().map(|b| b.clone()).unwrap_or_default();
        if self.handle.is_finished() {
            let _ = self.handle.join();
        }
        out
    }
}

pub use fabric_proto::invocation::spawn_retrying_busy;

/// Runs `cmd` to completion or until `limit`, then kills it and every process it started.
/// `input`, when given, is written to its stdin.
pub fn run_bounded(
    mut cmd: Command,
    input: Option<&[u8]>,
    limit: Duration,
) -> Result<Finished, ExecError> {
    let program = Path::new(cmd.get_program()).display().to_string();
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    if input.is_some() {
        cmd.stdin(Stdio::piped());
    }
    let start = Instant::now();
    let mut child =
        spawn_retrying_busy(&mut cmd, start, limit).map_err(|source| ExecError::Spawn {
            program: program.clone(),
            source,
        })?;
    if let (Some(data), Some(mut stdin)) = (input, child.stdin.take()) {
        let _ = stdin.write_all(data);
    }
    let out = child.stdout.take().map(pump);
    let err = child.stderr.take().map(pump);
    let pid = child.id() as i32;
    // Short programs (munge, scontrol) answer in a few ms: look often at first, then every 2 ms.
    let mut nap = Duration::from_micros(100);
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if start.elapsed() < limit => {
                std::thread::sleep(nap);
                nap = (nap * 2).min(Duration::from_millis(2));
            }
            Ok(None) => {
                kill_tree(pid);
                let _ = child.wait();
                return Err(ExecError::Timeout {
                    program,
                    limit_ms: limit.as_millis(),
                });
            }
            Err(source) => return Err(ExecError::Wait { program, source }),
        }
    };
    let until = Instant::now() + PIPE_LINGER.min(limit.saturating_sub(start.elapsed()));
    Ok(Finished {
        status,
        stdout: out.map(|p| p.take(until)).unwrap_or_default(),
        stderr: err.map(|p| p.take(until)).unwrap_or_default(),
        duration: start.elapsed(),
    })
}

/// Runs `cmd` with its stdout handed to `read` as it comes (for output too large to hold, such
/// as `sacct` over months of jobs), bounded like [`run_bounded`]: at `limit` the program and
/// every process it started are killed, which ends its stdout, and the answer is
/// [`ExecError::Timeout`] naming the program, whatever `read` made of the part it saw. The
/// returned [`Finished`] holds the stderr (bounded); its stdout is empty (it went to `read`).
pub fn run_bounded_reading<T: Send>(
    mut cmd: Command,
    limit: Duration,
    read: impl FnOnce(&mut (dyn Read + Send)) -> T + Send,
) -> Result<(T, Finished), ExecError> {
    let program = Path::new(cmd.get_program()).display().to_string();
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let start = Instant::now();
    let mut child =
        spawn_retrying_busy(&mut cmd, start, limit).map_err(|source| ExecError::Spawn {
            program: program.clone(),
            source,
        })?;
    let err = child.stderr.take().map(pump);
    let mut stdout = child.stdout.take();
    let pid = child.id() as i32;
    std::thread::scope(|scope| {
        let reader = scope.spawn(move || match stdout.as_mut() {
            Some(out) => read(out),
            None => read(&mut std::io::empty()),
        });
        let mut nap = Duration::from_micros(100);
        let status = loop {
            match child.try_wait() {
                Ok(Some(s)) => break Ok(s),
                Ok(None) if start.elapsed() < limit => {
                    std::thread::sleep(nap);
                    nap = (nap * 2).min(Duration::from_millis(2));
                }
                Ok(None) => {
                    // Killed before it is reaped: its pid cannot have been reused.
                    kill_tree(pid);
                    let _ = child.wait();
                    break Err(ExecError::Timeout {
                        program: program.clone(),
                        limit_ms: limit.as_millis(),
                    });
                }
                Err(source) => {
                    kill_tree(pid);
                    let _ = child.wait();
                    break Err(ExecError::Wait {
                        program: program.clone(),
                        source,
                    });
                }
            }
        };
        // The program is gone, so its stdout has ended and the reader returns.
        let value = match reader.join() {
            Ok(v) => v,
            Err(panic) => std::panic::resume_unwind(panic),
        };
        let status = status?;
        let until = Instant::now() + PIPE_LINGER.min(limit.saturating_sub(start.elapsed()));
        Ok((
            value,
            Finished {
                status,
                stdout: Vec::new(),
                stderr: err.map(|p| p.take(until)).unwrap_or_default(),
                duration: start.elapsed(),
            },
        ))
    })
}

/// Every live descendant of `root`, by the parent ids in `/proc`.
fn descendants(root: i32) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let parents: Vec<(i32, i32)> = dir
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            // `pid (comm) state ppid ...`: comm may hold spaces and parentheses.
            let rest = &stat[stat.rfind(')')? + 1..];
            let ppid = rest.split_whitespace().nth(1)?.parse().ok()?;
            Some((pid, ppid))
        })
        .collect();
    let mut found = vec![root];
    let mut i = 0;
    while i < found.len() {
        let p = found[i];
        found.extend(parents.iter().filter(|(_, pp)| *pp == p).map(|(c, _)| *c));
        i += 1;
    }
    found.remove(0);
    found
}

/// Kills `pid` and its descendants: stops the program first so it starts no more, then kills
/// them all.
fn kill_tree(pid: i32) {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    let _ = kill(Pid::from_raw(pid), Signal::SIGSTOP);
    let mut all = descendants(pid);
    for d in &all {
        let _ = kill(Pid::from_raw(*d), Signal::SIGSTOP);
    }
    // Children forked between the first look and the stops.
    for d in descendants(pid) {
        if !all.contains(&d) {
            all.push(d);
        }
    }
    all.push(pid);
    for p in all {
        let _ = kill(Pid::from_raw(p), Signal::SIGKILL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_program_still_open_for_writing_is_run_once_it_is_closed() {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("busy");
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o755)
            .open(&path)
            .unwrap();
        f.write_all(b"#!/bin/sh\necho ran\n").unwrap();
        let writer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            drop(f);
        });
        let done = run_bounded(safe_command(&path), None, Duration::from_secs(5)).unwrap();
        writer.join().unwrap();
        assert_eq!(String::from_utf8_lossy(&done.stdout).trim(), "ran");
    }

    #[test]
    fn a_finished_program_returns_its_output_and_code() {
        let mut c = safe_command("/bin/sh");
        c.args(["-c", "echo out; echo err >&2; exit 3"]);
        let f = run_bounded(c, None, Duration::from_secs(5)).unwrap();
        assert_eq!(f.code(), 3);
        assert_eq!(f.stdout_text(), "out\n");
        assert_eq!(f.stderr_text(), "err");
    }

    /// Whether `pid` is gone or a zombie waiting for its reaper.
    fn is_dead(pid: i32) -> bool {
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            let gone = std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| {
                s.rsplit(')')
                    .next()
                    .and_then(|r| r.split_whitespace().next())
                    == Some("Z")
            });
            if gone || Instant::now() > deadline {
                return gone;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    #[test]
    fn a_streamed_output_reaches_the_reader_whole_and_the_stderr_is_kept() {
        let mut c = safe_command("/bin/sh");
        c.args(["-c", "seq 1 200000; echo done >&2"]);
        let (lines, done) = run_bounded_reading(c, Duration::from_secs(20), |r| {
            std::io::BufRead::lines(std::io::BufReader::new(r)).count()
        })
        .unwrap();
        assert_eq!(lines, 200_000);
        assert!(done.status.success());
        assert_eq!(done.stderr_text().trim(), "done");
    }

    #[test]
    fn a_hanging_streamed_program_and_its_children_are_killed_at_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("pid");
        let mut c = safe_command("/bin/sh");
        c.args([
            "-c",
            &format!(
                "echo first; (trap '' TERM; exec sleep 30) & echo $! > {}; sleep 30",
                pidfile.display()
            ),
        ]);
        let start = Instant::now();
        let err = run_bounded_reading(c, Duration::from_millis(300), |r| {
            let mut s = String::new();
            let _ = r.read_to_string(&mut s);
            s
        })
        .unwrap_err();
        assert!(
            matches!(&err, ExecError::Timeout { program, .. } if program == "/bin/sh"),
            "{err}"
        );
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{:?}",
            start.elapsed()
        );
        let grandchild: i32 = std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert!(
            is_dead(grandchild),
            "grandchild {grandchild} outlived the kill"
        );
    }

    #[test]
    fn a_hanging_program_and_its_children_are_killed_at_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("pid");
        let mut c = safe_command("/bin/sh");
        c.args([
            "-c",
            &format!(
                "(trap '' TERM; exec sleep 30) & echo $! > {}; sleep 30",
                pidfile.display()
            ),
        ]);
        let start = Instant::now();
        let err = run_bounded(c, None, Duration::from_millis(300)).unwrap_err();
        assert!(matches!(err, ExecError::Timeout { .. }), "{err}");
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{:?}",
            start.elapsed()
        );
        let grandchild: i32 = std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert!(
            is_dead(grandchild),
            "grandchild {grandchild} outlived the kill"
        );
    }

    #[test]
    fn a_child_stays_in_the_callers_process_group_so_the_plugin_can_end_it() {
        let mut c = safe_command("/bin/sh");
        c.args(["-c", "cut -d' ' -f5 /proc/$$/stat"]);
        let f = run_bounded(c, None, Duration::from_secs(5)).unwrap();
        let ours = nix::unistd::getpgrp().as_raw();
        assert_eq!(f.stdout_text().trim(), ours.to_string());
    }

    #[test]
    fn a_leftover_that_holds_the_pipes_does_not_hold_the_caller() {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("pid");
        let mut c = safe_command("/bin/sh");
        c.args([
            "-c",
            &format!("sleep 30 & echo $! > {}; echo done", pidfile.display()),
        ]);
        let start = Instant::now();
        let f = run_bounded(c, None, Duration::from_secs(10)).unwrap();
        assert_eq!(f.stdout_text(), "done\n");
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "{:?}",
            start.elapsed()
        );
        let left: i32 = std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // Here the test ends it; under the plugin its group kill does.
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(left),
            nix::sys::signal::Signal::SIGKILL,
        );
    }

    #[test]
    fn the_child_environment_is_scrubbed() {
        let mut c = safe_command("/usr/bin/env");
        c.env_remove("SLURM_CONF");
        let f = run_bounded(c, None, Duration::from_secs(5)).unwrap();
        let mut lines: Vec<String> = f.stdout_text().lines().map(str::to_owned).collect();
        lines.sort();
        assert_eq!(
            lines,
            vec!["LANG=C".to_owned(), format!("PATH={SAFE_PATH}")]
        );
    }

    #[test]
    fn a_missing_program_is_a_spawn_error_naming_it() {
        let err = run_bounded(
            safe_command("/nonexistent/tool"),
            None,
            Duration::from_secs(1),
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("cannot run /nonexistent/tool"),
            "{err}"
        );
    }

    #[test]
    fn a_killed_program_reports_128_plus_the_signal() {
        let mut c = safe_command("/bin/sh");
        c.args(["-c", "kill -SEGV $$"]);
        let f = run_bounded(c, None, Duration::from_secs(5)).unwrap();
        assert_eq!(f.code(), 128 + 11);
    }
}
