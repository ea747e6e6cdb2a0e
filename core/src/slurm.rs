//! What the job step asks of Slurm ([`Slurm`]), and the real adapter ([`SlurmCli`]): `scontrol`,
//! `sinfo`, `sacct`, `sacctmgr`, run by absolute path with separate arguments and a time bound
//! (calls from a prolog can hang when slurmctld is busy), never past the job step's
//! [`Deadline`]. The fake for tests is `testing::FakeSlurm`.

use std::path::PathBuf;
use std::time::Duration;

use crate::deadline::Deadline;
use fabric_base::exec::{
    ExecError, MAX_OUTPUT_BYTES, run_bounded, run_bounded_reading, safe_command,
};

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
    /// The `AdminComment` of the job whose id (`SLURM_JOB_ID`) is `job_id`, read from structured
    /// output only, with the name that addresses that job alone ([`JobComment::job`]).
    fn admin_comment(&self, job_id: u32) -> Result<JobComment, SlurmError>;
    /// Writes the `AdminComment` of a live job; `job` as [`JobComment::job`] names it.
    fn set_admin_comment(&self, job: &str, text: &str) -> Result<(), SlurmError>;
    /// Writes the `AdminComment` of a finished job, in the accounting database; `job` as
    /// [`JobComment::job`] names it.
    fn set_admin_comment_db(&self, job: &str, text: &str) -> Result<(), SlurmError>;
    /// Accounting's record of each of `jobs` (exact names, as [`JobComment::job`]), for the
    /// check that finds lost tags ([`crate::tag_ledger`]): one call, never from a prolog.
    fn job_records(&self, jobs: &[String]) -> Result<Vec<JobRecord>, SlurmError> {
        let _ = jobs;
        Err(SlurmError::Failed {
            command: "sacct".into(),
            code: -1,
            stderr: "this Slurm adapter does not read accounting".into(),
        })
    }
    /// Whether slurmctld still has `job_id` running (or suspended, or completing); the in-job
    /// watch asks before it acts when no `slurmstepd` of the job runs on its host.
    fn job_running(&self, job_id: u32) -> Result<bool, SlurmError> {
        let _ = job_id;
        Err(SlurmError::Failed {
            command: "squeue".into(),
            code: -1,
            stderr: "this Slurm adapter does not read job states".into(),
        })
    }
    /// Requeues the running job `job_id` (the in-job watch, for a job that asked and where
    /// `on_fault=requeue` allows it).
    fn requeue(&self, job_id: u32) -> Result<(), SlurmError> {
        Err(SlurmError::Failed {
            command: format!("scontrol requeue {job_id}"),
            code: -1,
            stderr: "this Slurm adapter does not requeue jobs".into(),
        })
    }
    /// Shrinks the running job `job` (as [`JobComment::job`] names it: `A_T`, `H+O`, else the
    /// id, so an array's first task never addresses the whole array) to `nodes` (a Slurm
    /// hostlist, a subset of its nodes that keeps its batch host): the prolog leader of a job
    /// with spares (`--fabric-check-spares`), with the job's own id only.
    fn shrink(&self, job: &str, nodes: &str) -> Result<(), SlurmError> {
        Err(SlurmError::Failed {
            command: format!("scontrol update JobId={job} NodeList={nodes}"),
            code: -1,
            stderr: "this Slurm adapter does not resize jobs".into(),
        })
    }
    /// The nodes the job `job_id` holds now, as a Slurm hostlist (`squeue -o %N`); `None` when
    /// slurmctld no longer knows it. A spare-giving follower asks this to see its node given
    /// back before its prolog lets the job go on.
    fn job_nodes(&self, job_id: u32) -> Result<Option<String>, SlurmError> {
        Err(SlurmError::Failed {
            command: format!("squeue --jobs={job_id} -o %N"),
            code: -1,
            stderr: "this Slurm adapter does not list a job's nodes".into(),
        })
    }
    /// Requeues the running job `job`, named as for [`Slurm::shrink`].
    fn requeue_named(&self, job: &str) -> Result<(), SlurmError> {
        match job.parse::<u32>() {
            Ok(id) => self.requeue(id),
            Err(_) => Err(SlurmError::Failed {
                command: format!("scontrol requeue {job}"),
                code: -1,
                stderr: "this Slurm adapter requeues jobs by their id only".into(),
            }),
        }
    }
    /// How finely `sinfo` tells when a reason was set (`%H`: whole seconds). The drain's settle
    /// step waits one and a half of these (see `drain::settle_wait`).
    fn reason_time_resolution(&self) -> Duration {
        Duration::from_secs(1)
    }
    /// The most one call may take (the real adapter's per-call limit; its deadline may cut a
    /// call shorter still).
    fn call_limit(&self) -> Duration;
    /// This Slurm with every call bounded by `cap` as well: the drain's settle step runs its
    /// drain and re-check on the share it reserved for them
    /// ([`crate::deadline::Budget::settle_call`]).
    fn capped(&self, cap: Duration) -> Box<dyn Slurm + '_>;
}

/// A job's `AdminComment` and the name that reaches that job and no other.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobComment {
    /// `<ArrayJobId>_<TaskId>` for an array task, `<HetJobId>+<offset>` for a component of a
    /// heterogeneous job, else the job id. (`JobId=<ArrayJobId>` would update every task of the
    /// array, `JobId=<HetJobId>` every component, and `sacctmgr ... where jobid=N` matches
    /// `id_array_job` and `het_job_id` too.)
    pub job: String,
    /// The comment (empty when none).
    pub text: String,
}

impl JobComment {
    /// A plain job (neither array task nor het component) with this comment.
    pub fn plain(job_id: u32, text: &str) -> Self {
        Self {
            job: job_id.to_string(),
            text: text.to_owned(),
        }
    }
}

/// One job as accounting records it (`sacct -X`), for the lost-tag check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobRecord {
    /// `JobID` as sacct prints it (`123`, `123_4`, `123+1`).
    pub job: String,
    /// `State` (`COMPLETED`, `CANCELLED by 0`, `RUNNING`, ...).
    pub state: String,
    /// `End`, Unix seconds; `None` while the job runs.
    pub end_s: Option<u64>,
    /// `AdminComment`.
    pub comment: String,
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
    /// A call fabric-check never makes: a write of the job's `Comment` field, which belongs to
    /// the user and to other tools (their policy lives there; docs/operations.md).
    #[error("{command}: refused: fabric-check never writes a job's Comment field")]
    CommentWrite {
        /// The command.
        command: String,
    },
}

/// Whether an argument of `scontrol update` or `sacctmgr modify ... set` writes the job's
/// `Comment` field (not `AdminComment`, not `SystemComment`): `Comment=...`, any case.
pub fn writes_comment_field(arg: &str) -> bool {
    arg.split_once('=')
        .is_some_and(|(k, _)| k.trim().eq_ignore_ascii_case("comment"))
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

/// The one way fabric-check runs `sacct`: the job step's comment read and lost-tag check
/// ([`SlurmCli`]), `fabric-check jobs`, `fabric-check report` and the jobstats coexistence's
/// read of the database copy. By absolute path, separate arguments, stdin from `/dev/null`, and
/// bounded: at [`Sacct::timeout`] sacct and every process it started are killed and the error
/// ([`SlurmError::Exec`], [`ExecError::Timeout`]) names it.
#[derive(Debug, Clone)]
pub struct Sacct {
    /// The program (absolute path).
    pub program: PathBuf,
    /// Bound of each call.
    pub timeout: Duration,
    /// Whether sacct gets the caller's environment (`jobs` and `report`, run by a person whose
    /// `SLURM_CONF` or `SLURM_CLUSTERS` choose what accounting to ask) rather than the scrubbed
    /// one of [`safe_command`] (root's contexts).
    pub inherit_env: bool,
}

impl Sacct {
    /// Runs `sacct ARGS` with `env` added, handing its stdout to `read` as it comes.
    pub fn run<T: Send>(
        &self,
        args: &[&str],
        env: &[(&str, &str)],
        read: impl FnOnce(&mut (dyn std::io::Read + Send)) -> T + Send,
    ) -> Result<T, SlurmError> {
        let mut cmd = if self.inherit_env {
            let mut c = std::process::Command::new(&self.program);
            c.stdin(std::process::Stdio::null());
            c
        } else {
            safe_command(&self.program)
        };
        cmd.args(args);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let (value, done) = run_bounded_reading(cmd, self.timeout, read)?;
        if !done.status.success() {
            return Err(SlurmError::Failed {
                command: format!("{} {}", self.name(), args.join(" ")),
                code: done.code(),
                stderr: done.stderr_text().trim().chars().take(500).collect(),
            });
        }
        Ok(value)
    }

    /// The program's file name (`sacct`), as the other commands of [`SlurmError`] are named.
    fn name(&self) -> String {
        self.program
            .file_name()
            .unwrap_or(self.program.as_os_str())
            .to_string_lossy()
            .into_owned()
    }

    /// Runs `sacct ARGS` and returns its output (at most [`MAX_OUTPUT_BYTES`], the rest read
    /// and dropped).
    pub fn text(&self, args: &[&str], env: &[(&str, &str)]) -> Result<String, SlurmError> {
        self.run(args, env, |r| {
            let mut kept = Vec::new();
            let _ = std::io::Read::read_to_end(
                &mut std::io::Read::take(&mut *r, MAX_OUTPUT_BYTES),
                &mut kept,
            );
            let _ = std::io::copy(r, &mut std::io::sink());
            String::from_utf8_lossy(&kept).into_owned()
        })
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

    /// `sacct ARGS` through the one door ([`Sacct`]), bounded by the per-call limit and the
    /// deadline.
    fn sacct(&self, args: &[&str], env: &[(&str, &str)]) -> Result<String, SlurmError> {
        let limit = self
            .deadline
            .map_or(self.timeout, |d| d.limit(self.timeout));
        if limit.is_zero() {
            return Err(SlurmError::NoTimeLeft {
                command: "sacct".to_owned(),
            });
        }
        Sacct {
            program: self.bin_dir.join("sacct"),
            timeout: limit,
            inherit_env: false,
        }
        .text(args, env)
    }

    fn run(&self, program: &str, args: &[&str]) -> Result<String, SlurmError> {
        self.run_env(program, args, &[])
    }

    fn run_env(
        &self,
        program: &str,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Result<String, SlurmError> {
        if args.iter().any(|a| writes_comment_field(a)) {
            return Err(SlurmError::CommentWrite {
                command: program.to_owned(),
            });
        }
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
        for (k, v) in env {
            cmd.env(k, v);
        }
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

    /// The job's `AdminComment` and exact name, from structured output only: slurmctld's JSON
    /// (`scontrol --local --json show job`: `--local`, as the job runs on this cluster, spares
    /// the `REQUEST_FED_INFO` that `slurm_load_job` sends first without it, so the read is one
    /// `REQUEST_JOB_INFO_SINGLE`), the record whose `job_id` is `job_id`; on Slurm 22.05,
    /// which has no `scontrol --json` (and whose `squeue --json` ignores every filter and lists
    /// all the jobs slurmctld holds), `squeue -h --local --jobs=ID --states=all -O` [`SQUEUE_FIELDS`]:
    /// one job's records (one RPC for that job), the raw id, the exact name and the comment
    /// last, no field the job's owner controls; when slurmctld no longer knows the job,
    /// accounting (`sacct -P` of `JobIDRaw`, `JobID`, `AdminComment`, the same layout).
    pub fn admin_comment(&self, job_id: u32) -> Result<JobComment, SlurmError> {
        let id = job_id.to_string();
        let live = match self.run("scontrol", &["--local", "--json", "show", "job", &id]) {
            Err(SlurmError::Failed { stderr, .. }) if stderr.contains("unrecognized option") => {
                let jobs = format!("--jobs={id}");
                let text = self.run(
                    "squeue",
                    &["-h", "--local", &jobs, "--states=all", "-O", SQUEUE_FIELDS],
                );
                match text {
                    Ok(text) => {
                        if let Some(found) = comment_from_squeue(&text, job_id) {
                            return Ok(found);
                        }
                        Ok(("squeue", None))
                    }
                    Err(e) => Err(e),
                }
            }
            other => other.map(|text| ("scontrol --local --json show job", Some(text))),
        };
        match live {
            Ok((_, None)) => {}
            Ok((command, Some(text))) => match comment_from_json(&text, job_id) {
                Ok(Some(found)) => return Ok(found),
                Ok(None) => {}
                Err(reason) => {
                    return Err(SlurmError::Parse {
                        command: command.into(),
                        reason,
                    });
                }
            },
            // An unknown job (slurmctld has purged it) is asked of accounting.
            Err(SlurmError::Failed { .. }) => {}
            Err(e) => return Err(e),
        }
        let text = self.sacct(
            &[
                "-n",
                "-P",
                "-X",
                "-j",
                &id,
                "-o",
                "JobIDRaw,JobID,AdminComment",
            ],
            &[],
        )?;
        comment_from_sacct(&text, job_id).ok_or_else(|| SlurmError::Parse {
            command: "sacct".into(),
            reason: format!("neither slurmctld nor accounting knows job {job_id}"),
        })
    }

    /// `sacct -n -P -X -j JOBS -o JobID,State,End,AdminComment` (End in Unix seconds), the
    /// records whose `JobID` is one of `jobs` exactly.
    pub fn job_records(&self, jobs: &[String]) -> Result<Vec<JobRecord>, SlurmError> {
        let list = jobs.join(",");
        let text = self.sacct(
            &[
                "-n",
                "-P",
                "-X",
                "-j",
                &list,
                "-o",
                "JobID,State,End,AdminComment",
            ],
            &[("SLURM_TIME_FORMAT", "%s")],
        )?;
        Ok(records_from_sacct(&text, jobs))
    }

    /// `squeue -h --local --jobs=JOB -o %T`: whether the job is RUNNING, SUSPENDED, COMPLETING
    /// or CONFIGURING; a job slurmctld no longer lists (or calls invalid) is not.
    pub fn job_running(&self, job_id: u32) -> Result<bool, SlurmError> {
        let jobs = format!("--jobs={job_id}");
        match self.run("squeue", &["-h", "--local", &jobs, "-o", "%T"]) {
            Ok(text) => Ok(text.lines().any(|l| {
                matches!(
                    l.trim(),
                    "RUNNING" | "SUSPENDED" | "COMPLETING" | "CONFIGURING"
                )
            })),
            Err(SlurmError::Failed { stderr, .. }) if stderr.contains("Invalid job id") => {
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    /// `scontrol requeue JOB`: the job ends on its nodes and goes back to the queue.
    pub fn requeue(&self, job_id: u32) -> Result<(), SlurmError> {
        self.run("scontrol", &["requeue", &job_id.to_string()])
            .map(drop)
    }

    /// `scontrol update JobId=JOB NodeList=NODES`: the running job gives up every node not in
    /// NODES (slurmctld's `_update_job` refuses a list that drops the batch host or is not a
    /// subset, and any shrink under `SchedulerParameters=disable_job_shrink`).
    pub fn shrink(&self, job: &str, nodes: &str) -> Result<(), SlurmError> {
        self.run(
            "scontrol",
            &[
                "update",
                &format!("JobId={job}"),
                &format!("NodeList={nodes}"),
            ],
        )
        .map(drop)
    }

    /// `squeue -h --local --jobs=JOB -o %N`: the job's nodes now (`None`: unknown to slurmctld,
    /// or no nodes listed).
    pub fn job_nodes(&self, job_id: u32) -> Result<Option<String>, SlurmError> {
        let jobs = format!("--jobs={job_id}");
        match self.run("squeue", &["-h", "--local", &jobs, "-o", "%N"]) {
            Ok(text) => Ok(Some(text.trim().to_owned()).filter(|t| !t.is_empty())),
            // `Invalid job id specified`: slurmctld no longer knows it.
            Err(SlurmError::Failed { stderr, .. }) if stderr.contains("Invalid job id") => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// `scontrol requeue JOB` (`JOB` as [`JobComment::job`]).
    pub fn requeue_named(&self, job: &str) -> Result<(), SlurmError> {
        self.run("scontrol", &["requeue", job]).map(drop)
    }

    /// `scontrol update JobId=JOB AdminComment=TEXT` (live jobs; `JOB` as
    /// [`JobComment::job`]).
    pub fn set_admin_comment(&self, job: &str, text: &str) -> Result<(), SlurmError> {
        self.run(
            "scontrol",
            &[
                "update",
                &format!("JobId={job}"),
                &format!("AdminComment={text}"),
            ],
        )
        .map(drop)
    }

    /// `sacctmgr -i modify job where jobid=JOB set AdminComment=TEXT` (finished jobs; `JOB` as
    /// [`JobComment::job`]: `A_T` and `H+O` match that one record, where a bare id also matches
    /// the array's tasks and the het job's components).
    pub fn set_admin_comment_db(&self, job: &str, text: &str) -> Result<(), SlurmError> {
        self.run(
            "sacctmgr",
            &[
                "-i",
                "modify",
                "job",
                "where",
                &format!("jobid={job}"),
                "set",
                &format!("AdminComment={text}"),
            ],
        )
        .map(drop)
    }
}

/// The lines of `sacct -n -P -X -o JobID,State,End,AdminComment` (End as Unix seconds) whose
/// `JobID` is one of `jobs`.
pub fn records_from_sacct(text: &str, jobs: &[String]) -> Vec<JobRecord> {
    text.lines()
        .filter_map(|line| {
            let mut it = line.splitn(4, '|');
            let (job, state, end, comment) = (it.next()?, it.next()?, it.next()?, it.next()?);
            jobs.iter().any(|j| j == job).then(|| JobRecord {
                job: job.to_owned(),
                state: state.to_owned(),
                end_s: end.parse().ok(),
                comment: comment.to_owned(),
            })
        })
        .collect()
}

/// The `squeue -O` fields of the 22.05 live read: the raw job id, the exact name (`A_T`,
/// `H+O`, else the id) and the `AdminComment`, each unpadded (width 0) and ended by `|`, the
/// comment last (it may hold `|`).
pub const SQUEUE_FIELDS: &str = "jobid:0|,jobarrayid:0|,admin_comment:0";

/// The record of job `job_id` in `squeue -h -O` [`SQUEUE_FIELDS`] output (one line per record
/// of the job and its array or het siblings); squeue prints an unset comment as `(null)`.
pub fn comment_from_squeue(text: &str, job_id: u32) -> Option<JobComment> {
    let mut found = comment_from_sacct(text, job_id)?;
    if found.text == "(null)" {
        found.text.clear();
    }
    Some(found)
}

/// A number of Slurm's JSON: plain (data parser v0.0.38, Slurm 22.05) or
/// `{"set":true,"infinite":false,"number":N}` (v0.0.40 and later); `None` when unset, infinite
/// or `NO_VAL`-like.
fn json_u32(v: Option<&serde_json::Value>) -> Option<u32> {
    let v = v?;
    let n = match v {
        serde_json::Value::Object(o) => {
            if o.get("set").and_then(serde_json::Value::as_bool) == Some(false)
                || o.get("infinite").and_then(serde_json::Value::as_bool) == Some(true)
            {
                return None;
            }
            o.get("number")?.as_u64()?
        }
        other => other.as_u64()?,
    };
    u32::try_from(n).ok().filter(|n| *n < 0xffff_fff0)
}

/// The record of job `job_id` in `scontrol --json show job` or `squeue --json` output: its
/// `admin_comment` and exact name. `Ok(None)` when no record has that `job_id`.
pub fn comment_from_json(text: &str, job_id: u32) -> Result<Option<JobComment>, String> {
    let doc: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let jobs = doc
        .get("jobs")
        .and_then(serde_json::Value::as_array)
        .ok_or("no `jobs` array")?;
    let Some(job) = jobs
        .iter()
        .find(|j| json_u32(j.get("job_id")) == Some(job_id))
    else {
        return Ok(None);
    };
    let text = match job.get("admin_comment") {
        None | Some(serde_json::Value::Null) => String::new(),
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(other) => return Err(format!("`admin_comment` is not text: {other}")),
    };
    let array_job = json_u32(job.get("array_job_id")).filter(|n| *n != 0);
    let task = json_u32(job.get("array_task_id"));
    let het_job = json_u32(job.get("het_job_id")).filter(|n| *n != 0);
    let offset = json_u32(job.get("het_job_offset"));
    let name = match (array_job, task, het_job, offset) {
        (Some(a), Some(t), _, _) => format!("{a}_{t}"),
        (_, _, Some(h), Some(o)) => format!("{h}+{o}"),
        _ => job_id.to_string(),
    };
    Ok(Some(JobComment { job: name, text }))
}

/// The line of job `job_id` in `sacct -n -P -X -o JobIDRaw,JobID,AdminComment` output.
pub fn comment_from_sacct(text: &str, job_id: u32) -> Option<JobComment> {
    let raw = job_id.to_string();
    comment_line(text, |r, _| r == raw)
}

/// The line of job `job` in `sacct -n -P -X -o JobIDRaw,JobID,AdminComment` output, the job
/// named by its raw id (`N`) or as sacct names it (`A_T`, `H+O`): how the jobstats coexistence
/// addresses the job the other tool wrote.
pub fn comment_of_named_job(text: &str, job: &str) -> Option<JobComment> {
    comment_line(text, |raw, name| raw == job || name == job)
}

/// The one reader of `JobIDRaw|JobID|AdminComment` lines (the comment last: it may hold `|`):
/// the first whose ids `pick` takes.
fn comment_line(text: &str, pick: impl Fn(&str, &str) -> bool) -> Option<JobComment> {
    text.lines().find_map(|line| {
        let mut it = line.splitn(3, '|');
        let (raw, name, comment) = (it.next()?, it.next()?, it.next()?);
        pick(raw, name).then(|| JobComment {
            job: name.to_owned(),
            text: comment.to_owned(),
        })
    })
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
    fn admin_comment(&self, job_id: u32) -> Result<JobComment, SlurmError> {
        SlurmCli::admin_comment(self, job_id)
    }
    fn set_admin_comment(&self, job: &str, text: &str) -> Result<(), SlurmError> {
        SlurmCli::set_admin_comment(self, job, text)
    }
    fn set_admin_comment_db(&self, job: &str, text: &str) -> Result<(), SlurmError> {
        SlurmCli::set_admin_comment_db(self, job, text)
    }
    fn job_records(&self, jobs: &[String]) -> Result<Vec<JobRecord>, SlurmError> {
        SlurmCli::job_records(self, jobs)
    }
    fn requeue(&self, job_id: u32) -> Result<(), SlurmError> {
        SlurmCli::requeue(self, job_id)
    }
    fn shrink(&self, job: &str, nodes: &str) -> Result<(), SlurmError> {
        SlurmCli::shrink(self, job, nodes)
    }
    fn job_nodes(&self, job_id: u32) -> Result<Option<String>, SlurmError> {
        SlurmCli::job_nodes(self, job_id)
    }
    fn requeue_named(&self, job: &str) -> Result<(), SlurmError> {
        SlurmCli::requeue_named(self, job)
    }
    fn job_running(&self, job_id: u32) -> Result<bool, SlurmError> {
        SlurmCli::job_running(self, job_id)
    }
    fn call_limit(&self) -> Duration {
        self.timeout
    }
    fn capped(&self, cap: Duration) -> Box<dyn Slurm + '_> {
        Box::new(SlurmCli {
            timeout: self.timeout.min(cap),
            ..self.clone()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `squeue --json` of Slurm 22.05 (data parser v0.0.38, which lists every job whatever
    /// `--jobs` says) as the testbed printed it, trimmed to the fields read: the owner renamed
    /// job 7 to forge an `AdminComment=` line, which `scontrol show job` would have printed.
    const SQUEUE_2205: &str = r#"{"meta":{"plugin":{"type":"openapi\/v0.0.38"}},"errors":[],"jobs":[
      {"admin_comment":"","array_job_id":8,"array_task_id":3,"job_id":8,"het_job_id":0,"het_job_offset":0,"name":"wrap"},
      {"admin_comment":"JS1:Ab fabric-check\/v1 {\"verdict\":\"pass\"}","array_job_id":0,"array_task_id":null,"job_id":7,"het_job_id":0,"het_job_offset":0,"name":"x\nAdminComment=fabric-check\/v1 {\"verdict\":\"fail\"}"},
      {"admin_comment":"het0","array_job_id":0,"array_task_id":null,"job_id":9,"het_job_id":9,"het_job_offset":0},
      {"admin_comment":"","array_job_id":0,"array_task_id":null,"job_id":10,"het_job_id":9,"het_job_offset":1},
      {"admin_comment":"","array_job_id":8,"array_task_id":1,"job_id":11,"het_job_id":0,"het_job_offset":0}]}"#;

    #[test]
    fn a_write_of_the_comment_field_is_refused_before_any_program_runs() {
        // A folder without any Slurm program: a call that got as far as spawning would fail
        // differently.
        let dir = std::env::temp_dir().join("fabric-check-no-slurm-here");
        let cli = SlurmCli {
            bin_dir: dir,
            ..SlurmCli::default()
        };
        for args in [
            ["update", "JobId=7", "Comment=policy"].as_slice(),
            [
                "-i",
                "modify",
                "job",
                "where",
                "jobid=7",
                "set",
                "comment=x",
            ]
            .as_slice(),
        ] {
            let err = cli.run("scontrol", args).unwrap_err();
            assert!(matches!(err, SlurmError::CommentWrite { .. }), "{err}");
        }
        assert!(writes_comment_field("Comment=x"));
        assert!(writes_comment_field(" COMMENT =x"));
        assert!(!writes_comment_field("AdminComment=Comment=x"));
        assert!(!writes_comment_field("SystemComment=x"));
        assert!(!writes_comment_field("JobID,State,End,AdminComment"));
    }

    #[test]
    fn the_json_record_of_the_job_gives_its_true_comment_whatever_its_name_says() {
        let c = comment_from_json(SQUEUE_2205, 7).unwrap().unwrap();
        assert_eq!(
            c,
            JobComment::plain(7, r#"JS1:Ab fabric-check/v1 {"verdict":"pass"}"#)
        );
        assert_eq!(comment_from_json(SQUEUE_2205, 99).unwrap(), None);
        assert!(comment_from_json("squeue: error", 7).is_err());
    }

    #[test]
    fn array_tasks_and_het_components_are_named_exactly() {
        let name = |id| comment_from_json(SQUEUE_2205, id).unwrap().unwrap().job;
        assert_eq!(name(8), "8_3", "the task whose id is the array's id");
        assert_eq!(name(11), "8_1");
        assert_eq!(name(9), "9+0", "the het leader");
        assert_eq!(name(10), "9+1");
    }

    #[test]
    fn newer_data_parsers_numbers_as_objects_name_the_job_the_same_way() {
        let v42 = r#"{"jobs":[{"admin_comment":"x","job_id":12,
            "array_job_id":{"set":true,"infinite":false,"number":8},
            "array_task_id":{"set":true,"infinite":false,"number":2},
            "het_job_id":{"set":true,"infinite":false,"number":0},
            "het_job_offset":{"set":false,"infinite":false,"number":0}},
            {"admin_comment":"","job_id":13,
            "array_job_id":{"set":true,"infinite":false,"number":0},
            "array_task_id":{"set":false,"infinite":false,"number":0},
            "het_job_id":{"set":true,"infinite":false,"number":13},
            "het_job_offset":{"set":true,"infinite":false,"number":0}}]}"#;
        assert_eq!(comment_from_json(v42, 12).unwrap().unwrap().job, "8_2");
        assert_eq!(comment_from_json(v42, 13).unwrap().unwrap().job, "13+0");
    }

    #[test]
    fn accounting_records_are_those_of_the_jobs_asked_with_end_in_seconds() {
        let text = "8_1|COMPLETED|1764600000|JS1:a|b\n8_3|RUNNING|Unknown|\n9|FAILED|17|x\n";
        let r = records_from_sacct(text, &["8_1".into(), "8_3".into()]);
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].end_s, Some(1_764_600_000));
        assert_eq!(r[0].comment, "JS1:a|b");
        assert_eq!((r[1].state.as_str(), r[1].end_s), ("RUNNING", None));
    }

    #[test]
    fn the_sacct_line_of_the_job_itself_is_taken_not_a_siblings() {
        let text = "5|2_1|\n6|2_2|arr2 a|b\n2|2_3|x\n";
        assert_eq!(
            comment_from_sacct(text, 6).unwrap(),
            JobComment {
                job: "2_2".into(),
                text: "arr2 a|b".into()
            }
        );
        assert_eq!(comment_from_sacct(text, 2).unwrap().job, "2_3");
        assert_eq!(comment_from_sacct(text, 3), None);
    }

    /// A folder holding a stand-in `scontrol` and `sinfo` that run `body`.
    fn stand_in(body: &str) -> tempfile::TempDir {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        for tool in ["scontrol", "sinfo", "squeue", "sacct"] {
            let path = dir.path().join(tool);
            std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        dir
    }

    #[test]
    fn on_22_05_the_comment_comes_from_squeue_of_that_one_job_and_from_sacct_once_it_is_gone() {
        // scontrol refuses --json as 22.05's does. squeue answers only when asked for one job
        // with the -O fields (as 22.05 prints them: `(null)` for no comment), as every record of
        // an array whose id is asked; sacct knows 12.
        let dir = stand_in(
            r#"case "$0 $*" in
  */scontrol*) echo "scontrol: unrecognized option '--json'" >&2; exit 1 ;;
  */squeue*--json*) echo "squeue --json lists every job: not to be asked" >&2; exit 1 ;;
  *"/squeue -h --local --jobs=7 --states=all -O jobid:0|,jobarrayid:0|,admin_comment:0") echo '7|7|JS1:Ab|c' ;;
  *"/squeue -h --local --jobs=8 --states=all -O jobid:0|,jobarrayid:0|,admin_comment:0") printf '9|8_1|x\n8|8_3|(null)\n' ;;
  */squeue*) echo "squeue: error: Invalid job id specified" >&2; exit 1 ;;
  */sacct*) echo '11|2_1|x'; echo '12|2_2|JS1:b fabric-check/v1 {}' ;;
esac"#,
        );
        let cli = SlurmCli {
            bin_dir: dir.path().to_owned(),
            ..SlurmCli::default()
        };
        assert_eq!(
            cli.admin_comment(7).unwrap(),
            JobComment::plain(7, "JS1:Ab|c")
        );
        assert_eq!(
            cli.admin_comment(8).unwrap(),
            JobComment {
                job: "8_3".into(),
                text: String::new()
            }
        );
        let gone = cli.admin_comment(12).unwrap();
        assert_eq!(
            (gone.job.as_str(), gone.text.as_str()),
            ("2_2", "JS1:b fabric-check/v1 {}")
        );
        assert!(matches!(
            cli.admin_comment(13),
            Err(SlurmError::Parse { .. })
        ));
    }

    #[test]
    fn a_hanging_sacct_is_killed_at_its_limit_and_named_in_the_error() {
        let dir = stand_in("sleep 30");
        let sacct = Sacct {
            program: dir.path().join("sacct"),
            timeout: Duration::from_millis(300),
            inherit_env: false,
        };
        let start = std::time::Instant::now();
        let err = sacct.text(&["-n", "-P"], &[]).unwrap_err();
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{:?}",
            start.elapsed()
        );
        let text = err.to_string();
        assert!(
            text.contains(&dir.path().join("sacct").display().to_string())
                && text.contains("did not finish within 300 ms and was killed"),
            "{text}"
        );
    }

    #[test]
    fn the_database_copy_of_a_job_named_as_its_array_task_is_found_by_either_id() {
        let text = "11|2_1|x\n12|2_2|JS1:b fabric-check/v1 {}\n";
        assert_eq!(
            comment_of_named_job(text, "2_2").unwrap().text,
            "JS1:b fabric-check/v1 {}"
        );
        assert_eq!(comment_of_named_job(text, "11").unwrap().job, "2_1");
        assert_eq!(comment_of_named_job(text, "2"), None);
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
