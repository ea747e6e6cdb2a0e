//! Running other programs safely: by absolute path with separate arguments (never a shell),
//! with a scrubbed environment, in their own process group, and bounded in time; on expiry the
//! whole group is killed.
//!
//! Used by the `fabric-check` binary (never by the SPANK plugin, which must not start threads:
//! it has its own thread-free spawner).

use std::ffi::OsStr;
use std::io::{Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// The only `PATH` a child sees.
pub use fabric_proto::invocation::SAFE_PATH;

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
/// [`PASS_THROUGH`] variables; stdin from `/dev/null`; its own process group.
pub fn safe_command(program: impl AsRef<OsStr>) -> Command {
    let mut cmd = Command::new(program);
    cmd.env_clear().env("PATH", SAFE_PATH).env("LANG", "C");
    for key in PASS_THROUGH {
        if let Some(v) = std::env::var_os(key) {
            cmd.env(key, v);
        }
    }
    cmd.stdin(Stdio::null()).process_group(0);
    cmd
}

fn pump(mut r: impl Read + Send + 'static) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = (&mut r).take(MAX_OUTPUT_BYTES).read_to_end(&mut buf);
        // Keep draining so a chatty child never blocks on a full pipe.
        let _ = std::io::copy(&mut r, &mut std::io::sink());
        buf
    })
}

/// `ETXTBSY`: the program is open for writing somewhere (a package upgrade replacing it, or any
/// process forked between another thread's write and its `exec`, which briefly holds the file).
const TEXT_FILE_BUSY: i32 = nix::errno::Errno::ETXTBSY as i32;

/// Spawns `cmd`, trying again every 5 ms while the program is busy, within `limit`.
fn spawn_retrying_busy(
    cmd: &mut Command,
    start: Instant,
    limit: Duration,
) -> std::io::Result<std::process::Child> {
    loop {
        match cmd.spawn() {
            Err(e) if e.raw_os_error() == Some(TEXT_FILE_BUSY) && start.elapsed() < limit => {
                std::thread::sleep(Duration::from_millis(5));
            }
            other => return other,
        }
    }
}

/// Runs `cmd` to completion or until `limit`, then kills its whole process group.
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
                kill_group(pid);
                let _ = child.wait();
                return Err(ExecError::Timeout {
                    program,
                    limit_ms: limit.as_millis(),
                });
            }
            Err(source) => return Err(ExecError::Wait { program, source }),
        }
    };
    // The group may hold children that still keep the pipes open: end them too.
    kill_group(pid);
    Ok(Finished {
        status,
        stdout: out.and_then(|h| h.join().ok()).unwrap_or_default(),
        stderr: err.and_then(|h| h.join().ok()).unwrap_or_default(),
        duration: start.elapsed(),
    })
}

fn kill_group(pgid: i32) {
    use nix::sys::signal::{Signal, killpg};
    use nix::unistd::Pid;
    let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
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

    #[test]
    fn a_hanging_program_and_its_children_are_killed_at_the_limit() {
        let mut c = safe_command("/bin/sh");
        c.args(["-c", "sleep 30 & sleep 30"]);
        let start = Instant::now();
        let err = run_bounded(c, None, Duration::from_millis(300)).unwrap_err();
        assert!(matches!(err, ExecError::Timeout { .. }), "{err}");
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{:?}",
            start.elapsed()
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
