//! The probe and the collective as bounded grandchildren: `<probe> probe --format json ...` and
//! `<probe> collective --format json ...`, each killed (its whole process group) at its limit.

use std::path::PathBuf;
use std::time::Duration;

use crate::probe::Report;
use fabric_base::exec::{ExecError, Finished, run_bounded, safe_command};
use fabric_net::collective;
use fabric_proto::check_id;

/// Why the probe (or the collective) gave no document. None of these is a node failure.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProbeRunError {
    /// It ran past its limit and was killed.
    #[error("{what} timed out after {limit_ms} ms")]
    Timeout {
        /// `probe` or `collective`.
        what: &'static str,
        /// The limit.
        limit_ms: u128,
    },
    /// It died of a signal without a document.
    #[error("{what} crashed (exit {code}): {stderr}")]
    Crashed {
        /// `probe` or `collective`.
        what: &'static str,
        /// 128 + the signal.
        code: i32,
        /// What it said on stderr.
        stderr: String,
    },
    /// It exited without printing a document we can read.
    #[error("{what} gave no {what} document (exit {code}): {reason}; {stderr}")]
    NoDocument {
        /// `probe` or `collective`.
        what: &'static str,
        /// Its exit code.
        code: i32,
        /// Why stdout is not a document.
        reason: String,
        /// What it said on stderr.
        stderr: String,
    },
    /// It could not be started.
    #[error("{what} could not run: {reason}")]
    CannotRun {
        /// `probe` or `collective`.
        what: &'static str,
        /// Why.
        reason: String,
    },
    /// The job step's deadline left it no time.
    #[error("no time left for the {what} before the job step's deadline")]
    NoTimeLeft {
        /// `probe` or `collective`.
        what: &'static str,
    },
}

impl ProbeRunError {
    /// The check id the tag names: `probe.timeout` for a timeout (or no time), else
    /// `probe.error`.
    pub fn check_id(&self) -> &'static str {
        match self {
            ProbeRunError::Timeout { .. } | ProbeRunError::NoTimeLeft { .. } => {
                check_id::PROBE_TIMEOUT
            }
            _ => check_id::PROBE_ERROR,
        }
    }
}

/// What the probe compares against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Against {
    /// The node's state folder (the probe keeps its own last snapshot there).
    StateDir(PathBuf),
    /// The prolog's snapshot of this job (the epilog).
    Baseline(PathBuf),
}

/// One probe run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeRequest {
    /// The node name.
    pub node: String,
    /// A sysfs root other than `/sys` (the testbed).
    pub sysfs_root: Option<PathBuf>,
    /// The TOML configuration, when it exists.
    pub config: Option<PathBuf>,
    /// What to compare against.
    pub against: Against,
    /// Where to save this run's counters (the prolog's snapshot).
    pub save: Option<PathBuf>,
    /// The node's known inventory, when it is not the state folder's own
    /// (`--known`: the epilog compares with the prolog's snapshot and the known inventory).
    pub known: Option<PathBuf>,
}

/// One rank of the prolog's collective (`--fabric-check=full`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CollectiveRequest {
    /// The job's nodes, as a hostlist.
    pub nodes: String,
    /// This node.
    pub node: String,
    /// The job id.
    pub job_id: u32,
    /// The collective's window (`--port-base` is its first port; the collective lays out the
    /// standard window from it, [`fabric_proto::ports::Window::standard`]).
    pub window: fabric_proto::ports::Window,
    /// The collective's own budget, all in.
    pub budget_ms: u64,
    /// MUNGE's socket, when not the default.
    pub munge_socket: Option<PathBuf>,
    /// The network namespace to run in.
    pub netns: Option<String>,
    /// Data addresses by node.
    pub addrs: Vec<(String, String)>,
}

/// Runs the probe and the collective.
pub trait ProbeRunner {
    /// Runs the probe, bounded by `limit`.
    fn probe(&self, req: &ProbeRequest, limit: Duration) -> Result<Report, ProbeRunError>;
    /// Runs this node's rank of the collective, bounded by `limit`.
    fn collective(
        &self,
        req: &CollectiveRequest,
        limit: Duration,
    ) -> Result<collective::Report, ProbeRunError>;
    /// Starts the in-job watch (`<probe> <argv>`) detached: a process group of its own, stdin
    /// on `/dev/null`, stdout and stderr into `log`; not waited for. Returns its pid.
    fn start_watch(&self, argv: &[String], log: &std::path::Path) -> std::io::Result<u32>;
}

/// How long a probe bounded by `limit` waits before its second look
/// ([`crate::probe::second_look`]): 1 s, or a quarter of the limit when that is less (a probe
/// under a small `timeout=` still has time for both looks).
pub fn second_look_settle(limit: Duration) -> Duration {
    (limit / 4).min(Duration::from_secs(1))
}

/// The real runner: `program` (the plugin's `probe=`) as a subprocess with a scrubbed
/// environment, in the job step's process group (see [`fabric_base::exec`]).
#[derive(Debug, Clone)]
pub struct SubprocessRunner {
    /// The `fabric-check` binary.
    pub program: PathBuf,
}

fn classify<T: serde::de::DeserializeOwned>(
    what: &'static str,
    limit: Duration,
    ran: Result<Finished, ExecError>,
) -> Result<T, ProbeRunError> {
    match ran {
        Ok(done) => match serde_json::from_slice::<T>(&done.stdout) {
            Ok(r) => Ok(r),
            Err(_) if done.status.code().is_none() => Err(ProbeRunError::Crashed {
                what,
                code: done.code(),
                stderr: done.stderr_text(),
            }),
            Err(e) => Err(ProbeRunError::NoDocument {
                what,
                code: done.code(),
                reason: e.to_string(),
                stderr: done.stderr_text(),
            }),
        },
        Err(ExecError::Timeout { .. }) => Err(ProbeRunError::Timeout {
            what,
            limit_ms: limit.as_millis(),
        }),
        Err(e) => Err(ProbeRunError::CannotRun {
            what,
            reason: e.to_string(),
        }),
    }
}

impl ProbeRunner for SubprocessRunner {
    fn start_watch(&self, argv: &[String], log: &std::path::Path) -> std::io::Result<u32> {
        use std::os::unix::process::CommandExt;
        let out = std::fs::File::create(log)?;
        let err = out.try_clone()?;
        // The job step's own environment, which the plugin already scrubbed (`SLURM_CONF`, the
        // safe `PATH`, ...): the watch calls the same Slurm commands the job step does.
        let child = std::process::Command::new(&self.program)
            .args(argv)
            .stdin(std::process::Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0)
            .spawn()?;
        Ok(child.id())
    }

    fn probe(&self, req: &ProbeRequest, limit: Duration) -> Result<Report, ProbeRunError> {
        if limit.is_zero() {
            return Err(ProbeRunError::NoTimeLeft { what: "probe" });
        }
        let mut cmd = safe_command(&self.program);
        cmd.args(["probe", "--format", "json", "--node", &req.node]);
        if let Some(root) = &req.sysfs_root {
            cmd.arg("--sysfs-root").arg(root);
        }
        if let Some(conf) = &req.config {
            cmd.arg("--config").arg(conf);
        }
        match &req.against {
            Against::Baseline(b) => cmd.arg("--baseline").arg(b),
            Against::StateDir(d) => cmd.arg("--state-dir").arg(d),
        };
        if let Some(s) = &req.save {
            cmd.arg("--save").arg(s);
        }
        if let Some(k) = &req.known {
            cmd.arg("--known").arg(k);
        }
        // The second look's settle comes out of this run's own limit: two looks and the wait
        // between them fit in it.
        cmd.arg("--second-look-ms")
            .arg(second_look_settle(limit).as_millis().to_string());
        classify("probe", limit, run_bounded(cmd, None, limit))
    }

    fn collective(
        &self,
        req: &CollectiveRequest,
        limit: Duration,
    ) -> Result<collective::Report, ProbeRunError> {
        if limit.is_zero() {
            return Err(ProbeRunError::NoTimeLeft { what: "collective" });
        }
        let mut cmd = safe_command(&self.program);
        cmd.args([
            "collective",
            "--format",
            "json",
            "--nodes",
            &req.nodes,
            "--node",
            &req.node,
            "--job-id",
            &req.job_id.to_string(),
            "--allow-uid",
            "0",
            "--port-base",
            &req.window.first().to_string(),
            "--budget-ms",
            &req.budget_ms.to_string(),
        ]);
        if let Some(sock) = &req.munge_socket {
            cmd.arg("--munge-socket").arg(sock);
        }
        if let Some(ns) = &req.netns {
            cmd.args(["--netns", ns]);
        }
        for (n, a) in &req.addrs {
            cmd.args(["--addr", &format!("{n}={a}")]);
        }
        classify("collective", limit, run_bounded(cmd, None, limit))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn stand_in(body: &str) -> (tempfile::TempDir, SubprocessRunner) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fabric-check");
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        (dir, SubprocessRunner { program: path })
    }

    fn req() -> ProbeRequest {
        ProbeRequest {
            node: "n1".into(),
            sysfs_root: None,
            config: None,
            against: Against::StateDir("/nonexistent".into()),
            save: None,
            known: None,
        }
    }

    #[test]
    fn a_probe_that_hangs_is_killed_at_its_limit_and_reads_as_a_timeout() {
        let (_d, runner) = stand_in("sleep 30");
        let t0 = std::time::Instant::now();
        let err = runner
            .probe(&req(), Duration::from_millis(200))
            .unwrap_err();
        assert_eq!(
            err,
            ProbeRunError::Timeout {
                what: "probe",
                limit_ms: 200
            }
        );
        assert_eq!(err.check_id(), check_id::PROBE_TIMEOUT);
        assert!(err.to_string().starts_with("probe timed out"), "{err}");
        assert!(t0.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn a_probe_killed_by_a_signal_reads_as_a_crash() {
        let (_d, runner) = stand_in("echo oops >&2; kill -SEGV $$");
        let err = runner.probe(&req(), Duration::from_secs(5)).unwrap_err();
        assert!(
            matches!(err, ProbeRunError::Crashed { code: 139, .. }),
            "{err}"
        );
        assert_eq!(err.check_id(), check_id::PROBE_ERROR);
        assert!(err.to_string().starts_with("probe crashed"), "{err}");
    }

    #[test]
    fn a_probe_that_prints_no_json_reads_as_no_document() {
        let (_d, runner) = stand_in("echo hello; exit 3");
        let err = runner.probe(&req(), Duration::from_secs(5)).unwrap_err();
        assert!(
            matches!(err, ProbeRunError::NoDocument { code: 3, .. }),
            "{err}"
        );
        assert!(err.to_string().contains("gave no probe document"), "{err}");
    }

    #[test]
    fn a_missing_probe_binary_cannot_run_and_no_time_left_runs_nothing() {
        let runner = SubprocessRunner {
            program: "/nonexistent/fabric-check".into(),
        };
        let err = runner.probe(&req(), Duration::from_secs(1)).unwrap_err();
        assert!(matches!(err, ProbeRunError::CannotRun { .. }), "{err}");
        let err = runner.probe(&req(), Duration::ZERO).unwrap_err();
        assert_eq!(err, ProbeRunError::NoTimeLeft { what: "probe" });
    }

    #[test]
    fn the_probe_gets_its_request_as_words() {
        let (_d, runner) = stand_in("echo \"$@\" >&2; exit 3");
        let mut r = req();
        r.against = Against::Baseline("/s/job-7.json".into());
        r.sysfs_root = Some("/tb/n1/sysfs".into());
        r.known = Some("/s/known.json".into());
        let err = runner.probe(&r, Duration::from_secs(5)).unwrap_err();
        let ProbeRunError::NoDocument { stderr, .. } = err else {
            panic!("{err}")
        };
        assert_eq!(
            stderr,
            "probe --format json --node n1 --sysfs-root /tb/n1/sysfs --baseline /s/job-7.json --known /s/known.json --second-look-ms 1000"
        );
    }

    #[test]
    fn the_second_look_fits_in_the_probes_limit() {
        assert_eq!(
            second_look_settle(Duration::from_secs(8)),
            Duration::from_secs(1)
        );
        assert_eq!(
            second_look_settle(Duration::from_millis(800)),
            Duration::from_millis(200)
        );
    }
}
