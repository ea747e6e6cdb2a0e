//! A private `munged` for tests: its own key, socket, pid, log and seed files in a temp dir.
//!
//! As root it runs as the `munge` user (the state directory owned by munge, mode 0700; the socket
//! directory 0755, since munged insists its socket directory be searchable by all). Tests that
//! need MUNGE fail when munged cannot start, unless `FABRIC_SKIP_MUNGE_TESTS=1` is set, in which
//! case [`Munged::start`] returns `None` and the test returns early.
#![allow(dead_code)]

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// A running private munged, stopped (by the pid in its pid file) on drop.
#[derive(Debug)]
pub struct Munged {
    dir: tempfile::TempDir,
    /// Its socket, for `munge -S` / `--munge-socket`.
    pub socket: PathBuf,
    pid_file: PathBuf,
}

fn user_ids(name: &str) -> Option<(u32, u32)> {
    let u = nix::unistd::User::from_name(name).ok()??;
    Some((u.uid.as_raw(), u.gid.as_raw()))
}

fn run_as(cmd: &mut Command, ids: Option<(u32, u32)>) -> &mut Command {
    if let Some((uid, gid)) = ids {
        cmd.uid(uid).gid(gid);
    }
    cmd
}

impl Munged {
    /// Starts one, or returns `None` when `FABRIC_SKIP_MUNGE_TESTS=1`; panics (fails the test)
    /// when it cannot start otherwise.
    pub fn start() -> Option<Self> {
        match Self::try_start() {
            Ok(m) => Some(m),
            Err(e) if std::env::var("FABRIC_SKIP_MUNGE_TESTS").as_deref() == Ok("1") => {
                eprintln!("skipping: {e} (FABRIC_SKIP_MUNGE_TESTS=1)");
                None
            }
            Err(e) => panic!(
                "cannot start a private munged: {e}; install munge (munged, mungekey) or set FABRIC_SKIP_MUNGE_TESTS=1"
            ),
        }
    }

    fn try_start() -> Result<Self, String> {
        let ids = if nix::unistd::geteuid().is_root() {
            Some(user_ids("munge").ok_or("no `munge` user")?)
        } else {
            None
        };
        let dir = tempfile::Builder::new()
            .prefix("fc-munged")
            .tempdir()
            .map_err(|e| e.to_string())?;
        let state = dir.path().join("state");
        let run = dir.path().join("run");
        for (d, mode) in [(&state, 0o700), (&run, 0o755)] {
            std::fs::create_dir(d).map_err(|e| e.to_string())?;
            if let Some((uid, gid)) = ids {
                nix::unistd::chown(
                    d.as_path(),
                    Some(nix::unistd::Uid::from_raw(uid)),
                    Some(nix::unistd::Gid::from_raw(gid)),
                )
                .map_err(|e| e.to_string())?;
            }
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(mode))
                .map_err(|e| e.to_string())?;
        }
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
            .map_err(|e| e.to_string())?;
        let key = state.join("munge.key");
        let out = run_as(
            Command::new(find("mungekey")?)
                .arg("-c")
                .arg("-k")
                .arg(&key),
            ids,
        )
        .output()
        .map_err(|e| format!("mungekey: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "mungekey: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let socket = run.join("munge.socket");
        let pid_file = run.join("munged.pid");
        let out = run_as(
            Command::new(find("munged")?)
                .arg(format!("--socket={}", socket.display()))
                .arg(format!("--key-file={}", key.display()))
                .arg(format!("--pid-file={}", pid_file.display()))
                .arg(format!("--log-file={}", state.join("munged.log").display()))
                .arg(format!(
                    "--seed-file={}",
                    state.join("munged.seed").display()
                )),
            ids,
        )
        .output()
        .map_err(|e| format!("munged: {e}"))?;
        if !out.status.success() {
            return Err(format!("munged: {}", String::from_utf8_lossy(&out.stderr)));
        }
        let t = Instant::now();
        while !(socket.exists() && pid_file.exists()) {
            if t.elapsed() > Duration::from_secs(5) {
                return Err("munged did not create its socket within 5 s".into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(Self {
            dir,
            socket,
            pid_file,
        })
    }

    /// The temp dir holding everything.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

fn find(prog: &str) -> Result<PathBuf, String> {
    ["/usr/sbin", "/usr/bin", "/sbin", "/bin"]
        .iter()
        .map(|d| Path::new(d).join(prog))
        .find(|p| p.exists())
        .ok_or_else(|| format!("{prog} not found"))
}

impl Drop for Munged {
    fn drop(&mut self) {
        let Ok(pid) = std::fs::read_to_string(&self.pid_file) else {
            return;
        };
        let Ok(pid) = pid.trim().parse::<i32>() else {
            return;
        };
        let pid = nix::unistd::Pid::from_raw(pid);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let t = Instant::now();
        while nix::sys::signal::kill(pid, None).is_ok() && t.elapsed() < Duration::from_secs(3) {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
