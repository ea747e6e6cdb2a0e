//! Runs the `fabric-check` child from inside a SPANK callback without threads: spawn by absolute
//! path with a scrubbed environment in a new process group, poll for its exit while draining its
//! output through a non-blocking pipe, and end the whole group at the deadline: `SIGTERM`, a
//! grace of [`KILL_GRACE`], then `SIGKILL`. Every grandchild of the job step (probe, `scontrol`,
//! `sinfo`, `sacctmgr`, `munge`, the collective) stays in that group, so none outlives the
//! callback; the group is ended the same way after a normal exit, for anything left behind.
//!
//! slurmstepd may reap children itself (`wait3`); if our `waitpid` loses that race the exit
//! status is unknown, so the child also prints its decision as its last line
//! ([`JobStepExit::line`]), which is used instead.

use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::fcntl::{FcntlArg, OFlag, fcntl};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

use fabric_proto::invocation::{JobStepExit, MAX_CHILD_OUTPUT, SAFE_PATH, spawn_retrying_busy};

/// Most output kept from the child (its first bytes).
const MAX_OUTPUT: usize = MAX_CHILD_OUTPUT;

/// How long the group has between `SIGTERM` and `SIGKILL`.
pub const KILL_GRACE: Duration = Duration::from_millis(500);

/// Ends every process of group `pgid`: `SIGTERM`, then `SIGKILL` to whatever is still there
/// after [`KILL_GRACE`]. `child` (the group's leader, ours to reap) is reaped meanwhile, so a
/// zombie leader does not count as alive. Returns at once when the group is empty.
fn end_group(pgid: Pid, child: &mut std::process::Child) {
    if killpg(pgid, Signal::SIGTERM).is_err() {
        return; // no process left in the group
    }
    let until = Instant::now() + KILL_GRACE;
    while Instant::now() < until {
        let _ = child.try_wait();
        if killpg(pgid, None).is_err() {
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let _ = killpg(pgid, Signal::SIGKILL);
}

/// How the child ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// It exited with this code.
    Exited(i32),
    /// A signal ended it.
    Signalled(i32),
    /// It ran past the limit; its process group was killed.
    TimedOut,
    /// It could not be started.
    SpawnFailed(String),
}

/// The child's end and what it printed.
#[derive(Debug, Clone)]
pub struct Ran {
    /// How it ended.
    pub outcome: Outcome,
    /// Its stdout and stderr, interleaved, bounded.
    pub output: String,
    /// Wall time.
    pub elapsed: Duration,
}

fn pipe_pair() -> std::io::Result<(std::fs::File, OwnedFd)> {
    let (r, w) = nix::unistd::pipe().map_err(std::io::Error::from)?;
    let fd = r.as_raw_fd();
    let flags = fcntl(fd, FcntlArg::F_GETFL).map_err(std::io::Error::from)?;
    fcntl(
        fd,
        FcntlArg::F_SETFL(OFlag::from_bits_truncate(flags) | OFlag::O_NONBLOCK),
    )
    .map_err(std::io::Error::from)?;
    Ok((std::fs::File::from(r), w))
}

fn drain(reader: &mut std::fs::File, buf: &mut Vec<u8>) {
    let mut chunk = [0u8; 4096];
    loop {
        match reader.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let room = MAX_OUTPUT.saturating_sub(buf.len());
                buf.extend_from_slice(&chunk[..n.min(room)]);
            }
        }
    }
}

/// Runs `program args` with only `PATH`, `LANG` and `pass_env`, bounded by `limit`.
pub fn run(program: &Path, args: &[String], pass_env: &[(&str, String)], limit: Duration) -> Ran {
    let start = Instant::now();
    let failed = |why: String| Ran {
        outcome: Outcome::SpawnFailed(why),
        output: String::new(),
        elapsed: start.elapsed(),
    };
    let (mut reader, writer) = match pipe_pair() {
        Ok(p) => p,
        Err(e) => return failed(format!("cannot make a pipe: {e}")),
    };
    let writer2 = match writer.try_clone() {
        Ok(w) => w,
        Err(e) => return failed(format!("cannot duplicate a pipe: {e}")),
    };
    let mut cmd = Command::new(program);
    cmd.args(args)
        .env_clear()
        .env("PATH", SAFE_PATH)
        .env("LANG", "C")
        .stdin(Stdio::null())
        .stdout(Stdio::from(writer))
        .stderr(Stdio::from(writer2))
        .process_group(0);
    for (k, v) in pass_env {
        cmd.env(k, v);
    }
    let spawned = spawn_retrying_busy(&mut cmd, start, limit);
    drop(cmd); // closes our copies of the pipe's write end
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => return failed(format!("cannot run {}: {e}", program.display())),
    };
    let pgid = Pid::from_raw(child.id() as i32);
    let mut buf = Vec::new();
    let outcome = loop {
        drain(&mut reader, &mut buf);
        match child.try_wait() {
            Ok(Some(status)) => {
                break match (status.code(), status.signal()) {
                    (Some(c), _) => Outcome::Exited(c),
                    (None, Some(s)) => Outcome::Signalled(s),
                    _ => Outcome::Exited(255),
                };
            }
            Ok(None) if start.elapsed() < limit => std::thread::sleep(Duration::from_millis(2)),
            Ok(None) => {
                end_group(pgid, &mut child);
                let _ = child.wait();
                break Outcome::TimedOut;
            }
            // Reaped by the host process: the decision line stands in for the status.
            Err(_) => break Outcome::Exited(-1),
        }
    };
    // Leftovers of the group (a probe the child started) must not outlive the callback.
    end_group(pgid, &mut child);
    drain(&mut reader, &mut buf);
    let output = String::from_utf8_lossy(&buf).into_owned();
    let outcome = match outcome {
        Outcome::Exited(-1) => JobStepExit::from_output(&output)
            .map_or(Outcome::Exited(255), |e| Outcome::Exited(e.code())),
        o => o,
    };
    Ran {
        outcome,
        output,
        elapsed: start.elapsed(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str, limit_ms: u64) -> Ran {
        run(
            Path::new("/bin/sh"),
            &["-c".into(), script.into()],
            &[],
            Duration::from_millis(limit_ms),
        )
    }

    #[test]
    fn the_exit_code_and_both_streams_come_back() {
        let r = sh("echo one; echo two >&2; exit 2", 5000);
        assert_eq!(r.outcome, Outcome::Exited(2));
        assert!(
            r.output.contains("one") && r.output.contains("two"),
            "{}",
            r.output
        );
    }

    #[test]
    fn a_child_another_process_holds_open_for_writing_is_run_once_it_lets_go() {
        use std::io::BufRead;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fabric-check");
        std::fs::write(&path, "#!/bin/sh\necho fabric-check-exit=2\n").unwrap();
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        // An install copying the program in place: another process has it open for writing
        // (and says so once it has), for 200 ms.
        let mut holder = Command::new("/bin/sh")
            .args(["-c", "exec 3>>\"$1\"; echo open; sleep 0.2", "sh"])
            .arg(&path)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut said = String::new();
        std::io::BufReader::new(holder.stdout.take().unwrap())
            .read_line(&mut said)
            .unwrap();
        assert_eq!(said.trim(), "open");
        let r = run(&path, &[], &[], Duration::from_secs(5));
        holder.wait().unwrap();
        assert_eq!(r.outcome, Outcome::Exited(0), "{}", r.output);
        assert_eq!(r.output.trim(), "fabric-check-exit=2");
    }

    #[test]
    fn a_hanging_child_and_its_group_are_killed_at_the_limit() {
        let r = sh("sleep 30 & sleep 30", 300);
        assert_eq!(r.outcome, Outcome::TimedOut);
        assert!(r.elapsed < Duration::from_secs(5), "{:?}", r.elapsed);
    }

    /// Whether `pid` is gone or a zombie waiting for its reaper.
    fn is_dead(pid: i32) -> bool {
        let until = Instant::now() + Duration::from_secs(2);
        loop {
            let gone = std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| {
                s.rsplit(')')
                    .next()
                    .and_then(|r| r.split_whitespace().next())
                    == Some("Z")
            });
            if gone || Instant::now() > until {
                return gone;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn pid_in(path: &Path) -> i32 {
        std::fs::read_to_string(path)
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }

    #[test]
    fn after_a_timeout_no_process_of_ours_is_alive_not_even_a_grandchild_that_ignores_term() {
        let dir = tempfile::tempdir().unwrap();
        let (child, grandchild) = (dir.path().join("child"), dir.path().join("grandchild"));
        let r = sh(
            &format!(
                "echo $$ > {c}; /bin/sh -c 'trap \"\" TERM; echo $$ > {g}; while :; do sleep 1; done' & sleep 30",
                c = child.display(),
                g = grandchild.display()
            ),
            300,
        );
        assert_eq!(r.outcome, Outcome::TimedOut);
        assert!(
            r.elapsed < KILL_GRACE + Duration::from_secs(2),
            "{:?}",
            r.elapsed
        );
        for pid in [pid_in(&child), pid_in(&grandchild)] {
            assert!(is_dead(pid), "process {pid} outlived the plugin's kill");
        }
    }

    #[test]
    fn a_grandchild_left_behind_by_a_child_that_exited_is_ended_too() {
        let dir = tempfile::tempdir().unwrap();
        let grandchild = dir.path().join("grandchild");
        let r = sh(
            &format!(
                "/bin/sh -c 'trap \"\" TERM; echo $$ > {g}; exec sleep 30' </dev/null >/dev/null 2>&1 & \
                 while [ ! -s {g} ]; do sleep 0.01; done; exit 0",
                g = grandchild.display()
            ),
            5000,
        );
        assert_eq!(r.outcome, Outcome::Exited(0));
        assert!(
            is_dead(pid_in(&grandchild)),
            "the leftover outlived the callback"
        );
    }

    #[test]
    fn a_crash_is_reported_as_its_signal() {
        assert_eq!(sh("kill -SEGV $$", 5000).outcome, Outcome::Signalled(11));
    }

    #[test]
    fn a_missing_program_is_a_spawn_failure() {
        let r = run(
            Path::new("/nonexistent/fabric-check"),
            &[],
            &[],
            Duration::from_secs(1),
        );
        assert!(
            matches!(r.outcome, Outcome::SpawnFailed(ref m) if m.contains("/nonexistent/fabric-check"))
        );
    }

    #[test]
    fn the_child_sees_only_the_scrubbed_environment() {
        let r = run(
            Path::new("/usr/bin/env"),
            &[],
            &[("SLURM_CONF", "/etc/slurm/slurm.conf".into())],
            Duration::from_secs(5),
        );
        let mut lines: Vec<&str> = r.output.lines().collect();
        lines.sort_unstable();
        assert_eq!(
            lines,
            vec![
                "LANG=C",
                "PATH=/usr/sbin:/usr/bin:/sbin:/bin",
                "SLURM_CONF=/etc/slurm/slurm.conf"
            ]
        );
    }

    #[test]
    fn endless_output_is_bounded_and_does_not_block_the_child() {
        let r = sh("head -c 1000000 /dev/zero | tr '\\0' x; exit 0", 5000);
        assert_eq!(r.outcome, Outcome::Exited(0));
        assert_eq!(r.output.len(), MAX_OUTPUT);
    }
}
