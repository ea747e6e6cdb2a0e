//! What the job step asks of Slurm ([`Slurm`]), and the real adapter ([`SlurmCli`]): `scontrol`,
//! `sinfo`, `sacct`, `sacctmgr`, run by absolute path with separate arguments and a time bound
//! (calls from a prolog can hang when slurmctld is busy), never past the job step's
//! [`Deadline`]. The fake for tests is `testing::FakeSlurm`.

use std::path::PathBuf;
use std::time::Duration;

use crate::deadline::Deadline;
use crate::exec::{ExecError, run_bounded, safe_command};

/// What fabric-check's job step, health check and node commands ask of Slurm.
///
/// Each call is bounded by the implementation (the real one by its per-call limit and its
/// deadline); none may block past it.
pub trait Slurm {
    /// Every node (deduplicated across partitions), with state and reason.
    fn nodes(&self) -> Result<Vec<NodeInfo>, SlurmError>;
    /// Each node's `NodeAddr`, for the rendezvous.
    fn node_addrs(&self, nodes: &[String]) -> Result<Vec<(String, String)>, SlurmError>;
    /// Drains `node` with `reason`.
    fn drain(&self, node: &str, reason: &str) -> Result<(), SlurmError>;
    /// Resumes `node`.
    fn resume(&self, node: &str) -> Result<(), SlurmError>;
    /// The job's `AdminComment` (empty when none).
    fn admin_comment(&self, job_id: u32) -> Result<String, SlurmError>;
    /// Writes the `AdminComment` of a live job.
    fn set_admin_comment(&self, job_id: u32, text: &str) -> Result<(), SlurmError>;
    /// Writes the `AdminComment` of a finished job, in the accounting database.
    fn set_admin_comment_db(&self, job_id: u32, text: &str) -> Result<(), SlurmError>;
    /// How finely `sinfo` tells when a reason was set (`%H`: whole seconds). The drain's settle
    /// step waits one and a half of these (see `drain::settle_wait`).
    fn reason_time_resolution(&self) -> Duration {
        Duration::from_secs(1)
    }
}

/// Why a Slurm command failed.
#[derive(Debug, thiserror::Error)]
pub enum SlurmError {
    /// It could not run or ran too long.
    #[error(transparent)]
    Exec(#[from] ExecError),
    /// It ran and said no.
    #[error("{command} failed ({code}): {stderr}")]
    Failed {
        /// The command line (program and arguments).
        command: String,
        /// Its exit code.
        code: i32,
        /// What it said.
        stderr: String,
    },
    /// The job step's deadline left no time for it.
    #[error("no time left for {command} before the job step's deadline")]
    NoTimeLeft {
        /// The command.
        command: String,
    },
    /// Its output could not be understood.
    #[error("cannot understand the output of {command}: {reason}")]
    Parse {
        /// The command.
        command: String,
        /// Why.
        reason: String,
    },
}

/// One node as `sinfo` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeInfo {
    /// The node name.
    pub name: String,
    /// Long state (`idle`, `drained`, `draining`, `mixed`, `down*`, ...).
    pub state: String,
    /// The reason (empty when none).
    pub reason: String,
    /// When the reason was set (`2026-11-29T23:10:00`), empty when none.
    pub reason_time: String,
}

impl NodeInfo {
    /// Drained, draining, or set to drain.
    pub fn is_drained(&self) -> bool {
        self.state.starts_with("drain")
    }
}

/// Where the Slurm commands are and how long each may take.
#[derive(Debug, Clone)]
pub struct SlurmCli {
    /// Folder holding `scontrol`, `squeue`, `sinfo`, `sacctmgr`.
    pub bin_dir: PathBuf,
    /// Bound of each call.
    pub timeout: Duration,
    /// No call runs past this (the job step's deadline), whatever `timeout` says.
    pub deadline: Option<Deadline>,
}

impl Default for SlurmCli {
    fn default() -> Self {
        Self {
            bin_dir: PathBuf::from("/usr/bin"),
            timeout: Duration::from_secs(10),
            deadline: None,
        }
    }
}

impl SlurmCli {
    /// The adapter of a job step: each call bounded by `per_call` and by `deadline`.
    pub fn bounded(per_call: Duration, deadline: Deadline) -> Self {
        Self {
            timeout: per_call,
            deadline: Some(deadline),
            ..Self::default()
        }
    }

    fn run(&self, program: &str, args: &[&str]) -> Result<String, SlurmError> {
        let limit = self
            .deadline
            .map_or(self.timeout, |d| d.limit(self.timeout));
        if limit.is_zero() {
            return Err(SlurmError::NoTimeLeft {
                command: program.to_owned(),
            });
        }
        let mut cmd = safe_command(self.bin_dir.join(program));
        cmd.args(args);
        let done = run_bounded(cmd, None, limit)?;
        if !done.status.success() {
            return Err(SlurmError::Failed {
                command: format!("{program} {}", args.join(" ")),
                code: done.code(),
                stderr: done.stderr_text().chars().take(500).collect(),
            });
        }
        Ok(done.stdout_text())
    }

    /// Every node (deduplicated across partitions), with state and reason.
    pub fn nodes(&self) -> Result<Vec<NodeInfo>, SlurmError> {
        // The reason goes last: foreign reasons may contain the separator.
        let text = self.run("sinfo", &["-h", "-N", "-o", "%N|%T|%H|%E"])?;
        let mut out: Vec<NodeInfo> = Vec::new();
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let mut it = line.splitn(4, '|');
            let (Some(name), Some(state), Some(time), Some(reason)) =
                (it.next(), it.next(), it.next(), it.next())
            else {
                return Err(SlurmError::Parse {
                    command: "sinfo".into(),
                    reason: format!("line {line:?}"),
                });
            };
            if out.iter().any(|n| n.name == name) {
                continue;
            }
            let none = |s: &str| {
                if s == "none" || s == "Unknown" || s == "n/a" {
                    String::new()
                } else {
                    s.to_owned()
                }
            };
            out.push(NodeInfo {
                name: name.to_owned(),
                state: state.to_owned(),
                reason: none(reason),
                reason_time: none(time),
            });
        }
        Ok(out)
    }

    /// One node.
    pub fn node(&self, name: &str) -> Result<NodeInfo, SlurmError> {
        self.nodes()?
            .into_iter()
            .find(|n| n.name == name)
            .ok_or_else(|| SlurmError::Parse {
                command: "sinfo".into(),
                reason: format!("no node named {name}"),
            })
    }

    /// Each node's `NodeAddr` (`scontrol show node -o`), for the rendezvous.
    pub fn node_addrs(&self, nodes: &[String]) -> Result<Vec<(String, String)>, SlurmError> {
        let list = nodes.join(",");
        let text = self.run("scontrol", &["show", "node", "-o", &list])?;
        let mut out = Vec::new();
        for line in text.lines() {
            let field = |key: &str| {
                line.split_whitespace()
                    .find_map(|w| w.strip_prefix(key))
                    .map(str::to_owned)
            };
            if let (Some(n), Some(a)) = (field("NodeName="), field("NodeAddr=")) {
                out.push((n, a));
            }
        }
        Ok(out)
    }

    /// `scontrol update NodeName=N State=DRAIN Reason=R`.
    pub fn drain(&self, node: &str, reason: &str) -> Result<(), SlurmError> {
        self.run(
            "scontrol",
            &[
                "update",
                &format!("NodeName={node}"),
                "State=DRAIN",
                &format!("Reason={reason}"),
            ],
        )
        .map(drop)
    }

    /// `scontrol update NodeName=N State=RESUME`.
    pub fn resume(&self, node: &str) -> Result<(), SlurmError> {
        self.run(
            "scontrol",
            &["update", &format!("NodeName={node}"), "State=RESUME"],
        )
        .map(drop)
    }

    /// The job's `AdminComment`: from slurmctld (`scontrol show job`, which prints it on a line
    /// of its own) while it knows the job, else from accounting (`sacct`). Empty when none.
    pub fn admin_comment(&self, job_id: u32) -> Result<String, SlurmError> {
        match self.run("scontrol", &["show", "job", &job_id.to_string()]) {
            Ok(text) => Ok(admin_comment_of(&text)),
            Err(SlurmError::Failed { .. }) => {
                let text = self.run(
                    "sacct",
                    &[
                        "-n",
                        "-P",
                        "-X",
                        "-j",
                        &job_id.to_string(),
                        "-o",
                        "AdminComment",
                    ],
                )?;
                Ok(text.lines().next().unwrap_or_default().to_owned())
            }
            Err(e) => Err(e),
        }
    }

    /// `scontrol update JobId=N AdminComment=TEXT` (live jobs).
    pub fn set_admin_comment(&self, job_id: u32, text: &str) -> Result<(), SlurmError> {
        self.run(
            "scontrol",
            &[
                "update",
                &format!("JobId={job_id}"),
                &format!("AdminComment={text}"),
            ],
        )
        .map(drop)
    }

    /// `sacctmgr -i modify job where jobid=N set AdminComment=TEXT` (finished jobs).
    pub fn set_admin_comment_db(&self, job_id: u32, text: &str) -> Result<(), SlurmError> {
        self.run(
            "sacctmgr",
            &[
                "-i",
                "modify",
                "job",
                "where",
                &format!("jobid={job_id}"),
                "set",
                &format!("AdminComment={text}"),
            ],
        )
        .map(drop)
    }
}

impl Slurm for SlurmCli {
    fn nodes(&self) -> Result<Vec<NodeInfo>, SlurmError> {
        SlurmCli::nodes(self)
    }
    fn node_addrs(&self, nodes: &[String]) -> Result<Vec<(String, String)>, SlurmError> {
        SlurmCli::node_addrs(self, nodes)
    }
    fn drain(&self, node: &str, reason: &str) -> Result<(), SlurmError> {
        SlurmCli::drain(self, node, reason)
    }
    fn resume(&self, node: &str) -> Result<(), SlurmError> {
        SlurmCli::resume(self, node)
    }
    fn admin_comment(&self, job_id: u32) -> Result<String, SlurmError> {
        SlurmCli::admin_comment(self, job_id)
    }
    fn set_admin_comment(&self, job_id: u32, text: &str) -> Result<(), SlurmError> {
        SlurmCli::set_admin_comment(self, job_id, text)
    }
    fn set_admin_comment_db(&self, job_id: u32, text: &str) -> Result<(), SlurmError> {
        SlurmCli::set_admin_comment_db(self, job_id, text)
    }
}

/// The `AdminComment=` line of `scontrol show job` output (scontrol ends it with one space).
pub fn admin_comment_of(show_job: &str) -> String {
    show_job
        .lines()
        .find_map(|l| l.trim_start().strip_prefix("AdminComment="))
        .map(|v| v.strip_suffix(' ').unwrap_or(v).to_owned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_admin_comment_line_keeps_its_spaces_and_equals_signs() {
        let text = "JobId=7 JobName=wrap\n   Comment=x \n   AdminComment=JS1:a b  c=d Comment=x \n   Reason=None\n";
        assert_eq!(admin_comment_of(text), "JS1:a b  c=d Comment=x");
        assert_eq!(admin_comment_of("JobId=7 JobName=wrap\n"), "");
    }

    /// A folder holding a stand-in `scontrol` and `sinfo` that run `body`.
    fn stand_in(body: &str) -> tempfile::TempDir {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        for tool in ["scontrol", "sinfo"] {
            let path = dir.path().join(tool);
            std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        dir
    }

    #[test]
    fn a_hanging_scontrol_is_killed_at_the_deadline_not_at_the_per_call_limit() {
        let dir = stand_in("sleep 30");
        let cli = SlurmCli {
            bin_dir: dir.path().to_owned(),
            ..SlurmCli::bounded(
                Duration::from_secs(20),
                Deadline::after(Duration::from_millis(300)),
            )
        };
        let t0 = std::time::Instant::now();
        let err = cli.drain("n1", "fabric-check: x: y").unwrap_err();
        assert!(
            matches!(err, SlurmError::Exec(ExecError::Timeout { .. })),
            "{err}"
        );
        assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
        let err = cli.nodes().unwrap_err();
        assert!(matches!(err, SlurmError::NoTimeLeft { .. }), "{err}");
    }

    #[test]
    fn sinfo_lines_become_nodes_with_empty_placeholders() {
        let dir = stand_in(
            "echo 'n1|idle|Unknown|none'; echo 'n2|drained|2026-11-29T10:00:00|fabric-check: ib.mtu: a|b'; echo 'n1|idle|Unknown|none'",
        );
        let cli = SlurmCli {
            bin_dir: dir.path().to_owned(),
            ..SlurmCli::default()
        };
        let nodes = cli.nodes().unwrap();
        assert_eq!(nodes.len(), 2);
        assert_eq!(nodes[0].reason, "");
        assert_eq!(nodes[1].reason, "fabric-check: ib.mtu: a|b");
        assert_eq!(nodes[1].reason_time, "2026-11-29T10:00:00");
    }
}
