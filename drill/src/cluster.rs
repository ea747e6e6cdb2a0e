//! The [`Cluster`] seam: what the drill asks of Slurm (submit, watch, cancel, resume, run
//! `health`), and [`SlurmCluster`], the real one over Slurm's commands, each call bounded.
//!
//! The drill's jobs are submitted as a user would: `sbatch --fabric-check[=full]`, optionally
//! through a prefix that changes user (on the testbed, `setpriv` to the unprivileged job user),
//! into the drill's reservation when it has one.

use std::path::{Path, PathBuf};
use std::time::Duration;

use fabric_base::exec::{run_bounded, safe_command};
use fabric_proto::job_state::JobState;
use fabric_proto::tag::JobTag;

use crate::observe::{JobView, NodeView};
use crate::plan::JobSpec;

/// A Slurm call that failed.
#[derive(Debug, thiserror::Error)]
#[error("{command}: {message}")]
pub struct ClusterError {
    /// The command.
    pub command: String,
    /// What went wrong.
    pub message: String,
}

/// What the drill asks of the cluster.
pub trait Cluster {
    /// Every node with state and reason.
    fn nodes(&mut self) -> Result<Vec<NodeView>, ClusterError>;
    /// Submits the batch `script` for `job`; returns the job id.
    fn submit(&mut self, script: &Path, job: &JobSpec) -> Result<u32, ClusterError>;
    /// Submits `script` for `job` into `partition` (the workload's fabrics).
    fn submit_to(
        &mut self,
        script: &Path,
        job: &JobSpec,
        partition: &str,
    ) -> Result<u32, ClusterError>;
    /// Submits the batch `script` for `job` held (`sbatch --hold`): it does not start until
    /// [`Cluster::release`]; returns the job id.
    fn submit_held(&mut self, script: &Path, job: &JobSpec) -> Result<u32, ClusterError>;
    /// Releases a held job (`scontrol release`).
    fn release(&mut self, id: u32) -> Result<(), ClusterError>;
    /// The nodes of `partition`.
    fn nodes_of(&mut self, partition: &str) -> Result<Vec<String>, ClusterError>;
    /// The job's state while Slurm still holds it (`squeue`), `None` once it is gone.
    fn queue_state(&mut self, id: u32) -> Result<Option<String>, ClusterError>;
    /// The job's accounting record and tag.
    fn job(&mut self, id: u32) -> Result<JobView, ClusterError>;
    /// The job's tag as it is now: while slurmctld holds the job, its live `AdminComment`
    /// (what the in-job watch writes as it goes), else accounting's; `None` without a tag.
    fn live_tag(&mut self, id: u32) -> Result<Option<JobTag>, ClusterError>;
    /// Cancels a job.
    fn cancel(&mut self, id: u32) -> Result<(), ClusterError>;
    /// Resumes a node.
    fn resume(&mut self, node: &str) -> Result<(), ClusterError>;
    /// Runs `fabric-check health` for `node`; its exit code.
    fn health(&mut self, node: &str) -> Result<i32, ClusterError>;
    /// Every job running (or configuring, or completing) on any of `nodes`, whoever submitted it
    /// and whatever its name: [`crate::gate::Gates`] decides which are the drill's own, by id.
    fn jobs_on(&mut self, nodes: &[String]) -> Result<Vec<QueuedJob>, ClusterError>;
    /// The nodes reservation `name` holds now: an error when it does not exist or is not active.
    fn reservation_nodes(&mut self, name: &str) -> Result<Vec<String>, ClusterError>;
    /// Unix milliseconds now.
    fn now_ms(&self) -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64)
    }
    /// Waits.
    fn sleep(&mut self, d: Duration) {
        std::thread::sleep(d);
    }
}

/// The job name the drill's jobs carry, for people reading `squeue`. It proves nothing: any user
/// can name a job so. The drill's own jobs are the ids it submitted ([`crate::gate::Gates`]).
pub const JOB_NAME: &str = "fabric-drill";

/// A job on the drill's nodes, as `squeue` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuedJob {
    /// The job id (`%i`: `123`, `123_4` for an array task, `123+1` for a het component).
    pub id: String,
    /// Its user.
    pub user: String,
    /// Its name (shown, never trusted).
    pub name: String,
}

impl QueuedJob {
    /// The plain job id, when it is one (the drill submits neither arrays nor het jobs).
    pub fn plain_id(&self) -> Option<u32> {
        self.id.parse().ok()
    }
}

/// Parses `squeue -h -o %i|%u|%j`: every job, whatever its name (a name may hold `|`).
pub fn parse_squeue_jobs(text: &str) -> Vec<QueuedJob> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let mut it = l.splitn(3, '|');
            QueuedJob {
                id: it.next().unwrap_or_default().trim().to_owned(),
                user: it.next().unwrap_or("?").to_owned(),
                name: it.next().unwrap_or_default().to_owned(),
            }
        })
        .collect()
}

/// Parses `scontrol show reservation NAME -o`: the nodes it holds now. A reservation that is not
/// active (not started yet) holds none; one that does not exist is an error.
pub fn parse_reservation(name: &str, text: &str) -> Result<Vec<String>, String> {
    let line = text
        .lines()
        .find(|l| {
            l.split_whitespace()
                .any(|w| w.strip_prefix("ReservationName=") == Some(name))
        })
        .ok_or_else(|| format!("no reservation {name}"))?;
    let field = |key: &str| {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(key).map(str::to_owned))
    };
    if let Some(state) = field("State=")
        && state != "ACTIVE"
    {
        return Err(format!(
            "reservation {name} is not active (State={state}): it holds no node now"
        ));
    }
    let nodes = field("Nodes=").unwrap_or_default();
    if nodes.is_empty() || nodes == "(null)" {
        return Ok(Vec::new());
    }
    fabric_proto::hostlist::Hostlist::parse(&nodes)
        .and_then(|h| h.expand())
        .map_err(|e| format!("reservation {name}'s Nodes={nodes} is not a hostlist: {e}"))
}

/// The `AdminComment` of job `id` in `squeue -h -O jobid:0|,admin_comment:0` output (squeue
/// prints an unset one as `(null)`); `None` when the job is not listed.
pub fn parse_squeue_comment(id: u32, text: &str) -> Option<String> {
    let want = id.to_string();
    text.lines().find_map(|l| {
        let (job, comment) = l.split_once('|')?;
        (job.trim() == want).then(|| {
            let c = comment.trim_end_matches(['\n', '\r']);
            if c == "(null)" {
                String::new()
            } else {
                c.to_owned()
            }
        })
    })
}

/// The real cluster, through `sbatch`, `squeue`, `sacct`, `sinfo`, `scontrol` and `scancel`.
#[derive(Debug, Clone)]
pub struct SlurmCluster {
    /// Folder of the Slurm commands.
    pub bin_dir: PathBuf,
    /// Words put before `sbatch` (e.g. `setpriv --reuid=1500 ...`); empty to submit as self.
    pub submit_prefix: Vec<String>,
    /// `--reservation` for every job.
    pub reservation: Option<String>,
    /// `--partition` for every job.
    pub partition: Option<String>,
    /// `health`'s command; `{node}` is replaced by the node's name. Empty: no health runs.
    pub health_cmd: Vec<String>,
    /// Bound of each call.
    pub timeout: Duration,
}

impl SlurmCluster {
    /// Commands in `/usr/bin`, 30 s per call, nothing else set.
    pub fn new() -> SlurmCluster {
        SlurmCluster {
            bin_dir: PathBuf::from("/usr/bin"),
            submit_prefix: Vec::new(),
            reservation: None,
            partition: None,
            health_cmd: Vec::new(),
            timeout: Duration::from_secs(30),
        }
    }

    fn run(&self, argv: &[String], env: &[(&str, &str)]) -> Result<(i32, String), ClusterError> {
        let (program, args) = argv.split_first().ok_or_else(|| ClusterError {
            command: String::new(),
            message: "empty command".into(),
        })?;
        let path = if program.contains('/') {
            PathBuf::from(program)
        } else {
            self.bin_dir.join(program)
        };
        let mut cmd = safe_command(&path);
        cmd.args(args);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let shown = argv.join(" ");
        let done = run_bounded(cmd, None, self.timeout).map_err(|e| ClusterError {
            command: shown.clone(),
            message: e.to_string(),
        })?;
        let code = done.code();
        if code != 0 {
            return Ok((
                code,
                format!("{} {}", done.stderr_text(), done.stdout_text()),
            ));
        }
        Ok((code, done.stdout_text()))
    }

    fn ok(&self, argv: &[&str]) -> Result<String, ClusterError> {
        self.ok_env(argv, &[])
    }

    fn ok_env(&self, argv: &[&str], env: &[(&str, &str)]) -> Result<String, ClusterError> {
        let words: Vec<String> = argv.iter().map(|s| (*s).to_owned()).collect();
        let (code, text) = self.run(&words, env)?;
        if code != 0 {
            return Err(ClusterError {
                command: words.join(" "),
                message: format!(
                    "exit {code}: {}",
                    text.chars().take(300).collect::<String>()
                ),
            });
        }
        Ok(text)
    }
}

impl Default for SlurmCluster {
    fn default() -> Self {
        Self::new()
    }
}

/// The `sbatch` words for `job` (without the program and the script).
pub fn sbatch_args(
    job: &JobSpec,
    reservation: Option<&str>,
    partition: Option<&str>,
) -> Vec<String> {
    let mut a = vec![
        "--parsable".to_owned(),
        format!("--job-name={JOB_NAME}"),
        format!("--nodes={}", job.nodes.len()),
        format!("--nodelist={}", job.nodes.join(",")),
        if job.full {
            "--fabric-check=full".to_owned()
        } else {
            "--fabric-check=quick".to_owned()
        },
        "--output=/dev/null".to_owned(),
        "--time=5".to_owned(),
    ];
    if job.spares > 0 {
        a.push(format!("--fabric-check-spares={}", job.spares));
    }
    if let Some(r) = reservation {
        a.push(format!("--reservation={r}"));
    }
    if let Some(p) = partition {
        a.push(format!("--partition={p}"));
    }
    a
}

/// Parses `sacct -D -X -n -P -o JobID,State,ElapsedRaw,NNodes,Start,End,AdminComment` (with
/// `SLURM_TIME_FORMAT=%s`): the last attempt's row, and the requeued attempts before it.
pub fn parse_sacct(id: u32, text: &str) -> JobView {
    let rows: Vec<Vec<&str>> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.splitn(7, '|').collect::<Vec<_>>())
        .filter(|r| r.len() == 7)
        .collect();
    let requeues = rows.iter().filter(|r| r[1].starts_with("REQUEUED")).count() as u32;
    let mut view = JobView {
        id,
        requeues,
        ..JobView::default()
    };
    // The tag lives on the job, whatever attempt's row carries it last.
    if let Some(last) = rows.last() {
        view.state = last[1].to_owned();
        view.elapsed_s = last[2].parse().unwrap_or(0.0);
        view.nnodes = last[3].parse().unwrap_or(0);
        view.start_ms = last[4].parse::<u64>().map_or(0, |s| s * 1000);
        view.end_ms = last[5].parse::<u64>().map_or(0, |s| s * 1000);
    }
    view.tag = rows
        .iter()
        .rev()
        .find_map(|r| fabric_proto::tag::extract(r[6]).and_then(Result::ok));
    view
}

impl SlurmCluster {
    fn submit_in(
        &mut self,
        script: &Path,
        job: &JobSpec,
        partition: Option<&str>,
        hold: bool,
    ) -> Result<u32, ClusterError> {
        let mut argv: Vec<String> = self.submit_prefix.clone();
        argv.push(self.bin_dir.join("sbatch").display().to_string());
        argv.extend(sbatch_args(job, self.reservation.as_deref(), partition));
        if hold {
            argv.push("--hold".to_owned());
        }
        argv.push(script.display().to_string());
        let (code, text) = self.run(&argv, &[])?;
        let id = text.trim().split(';').next().and_then(|s| s.parse().ok());
        match (code, id) {
            (0, Some(id)) => Ok(id),
            _ => Err(ClusterError {
                command: argv.join(" "),
                message: format!("exit {code}: {}", text.trim()),
            }),
        }
    }
}

impl Cluster for SlurmCluster {
    fn nodes(&mut self) -> Result<Vec<NodeView>, ClusterError> {
        let text = self.ok(&["sinfo", "-h", "-N", "-o", "%N|%T|%E"])?;
        let mut out: Vec<NodeView> = Vec::new();
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let mut it = line.splitn(3, '|');
            let (Some(name), Some(state), Some(reason)) = (it.next(), it.next(), it.next()) else {
                continue;
            };
            if out.iter().any(|n| n.name == name) {
                continue;
            }
            out.push(NodeView {
                name: name.to_owned(),
                state: state.to_lowercase(),
                reason: if reason == "none" {
                    String::new()
                } else {
                    reason.to_owned()
                },
            });
        }
        Ok(out)
    }

    fn submit(&mut self, script: &Path, job: &JobSpec) -> Result<u32, ClusterError> {
        let p = self.partition.clone();
        self.submit_in(script, job, p.as_deref(), false)
    }

    fn submit_to(
        &mut self,
        script: &Path,
        job: &JobSpec,
        partition: &str,
    ) -> Result<u32, ClusterError> {
        self.submit_in(script, job, Some(partition), false)
    }

    fn submit_held(&mut self, script: &Path, job: &JobSpec) -> Result<u32, ClusterError> {
        let p = self.partition.clone();
        self.submit_in(script, job, p.as_deref(), true)
    }

    fn release(&mut self, id: u32) -> Result<(), ClusterError> {
        self.ok(&["scontrol", "release", &id.to_string()])
            .map(|_| ())
    }

    fn nodes_of(&mut self, partition: &str) -> Result<Vec<String>, ClusterError> {
        let text = self.ok(&["sinfo", "-h", "-N", "-p", partition, "-o", "%N"])?;
        let mut out: Vec<String> = Vec::new();
        for l in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
            if !out.iter().any(|n| n == l) {
                out.push(l.to_owned());
            }
        }
        if out.is_empty() {
            return Err(ClusterError {
                command: format!("sinfo -p {partition}"),
                message: format!("no partition {partition}, or it has no nodes"),
            });
        }
        Ok(out)
    }

    fn queue_state(&mut self, id: u32) -> Result<Option<String>, ClusterError> {
        let words: Vec<String> = ["squeue", "-h", "-j", &id.to_string(), "-o", "%T"]
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        let (code, text) = self.run(&words, &[])?;
        // squeue says "Invalid job id specified" (exit 1) once the job left slurmctld's memory.
        let s = text.trim();
        if code != 0 || s.is_empty() {
            return Ok(None);
        }
        let st = JobState::parse(s);
        Ok((!st.has_ended()).then(|| s.to_owned()))
    }

    fn job(&mut self, id: u32) -> Result<JobView, ClusterError> {
        let text = self.ok_env(
            &[
                "sacct",
                "-D",
                "-X",
                "-n",
                "-P",
                "-j",
                &id.to_string(),
                "-o",
                "JobID,State,ElapsedRaw,NNodes,Start,End,AdminComment",
            ],
            &[("SLURM_TIME_FORMAT", "%s")],
        )?;
        Ok(parse_sacct(id, &text))
    }

    fn live_tag(&mut self, id: u32) -> Result<Option<JobTag>, ClusterError> {
        // One job's record, no field its owner controls before the comment (squeue's -O, as
        // on Slurm 22.05, which has no `scontrol --json`).
        let text = self.ok(&[
            "squeue",
            "-h",
            "--local",
            &format!("--jobs={id}"),
            "--states=all",
            "-O",
            "jobid:0|,admin_comment:0",
        ]);
        if let Ok(text) = text
            && let Some(comment) = parse_squeue_comment(id, &text)
        {
            return Ok(fabric_proto::tag::extract(&comment).and_then(Result::ok));
        }
        Ok(self.job(id)?.tag)
    }

    fn cancel(&mut self, id: u32) -> Result<(), ClusterError> {
        self.ok(&["scancel", &id.to_string()]).map(|_| ())
    }

    fn resume(&mut self, node: &str) -> Result<(), ClusterError> {
        self.ok(&[
            "scontrol",
            "update",
            &format!("NodeName={node}"),
            "State=RESUME",
        ])
        .map(|_| ())
    }

    fn health(&mut self, node: &str) -> Result<i32, ClusterError> {
        if self.health_cmd.is_empty() {
            return Err(ClusterError {
                command: "health".into(),
                message: "no health command for this cluster".into(),
            });
        }
        let argv: Vec<String> = self
            .health_cmd
            .iter()
            .map(|w| w.replace("{node}", node))
            .collect();
        let (program, args) = argv.split_first().expect("not empty");
        let mut cmd = safe_command(program);
        cmd.args(args);
        let done = run_bounded(cmd, None, self.timeout).map_err(|e| ClusterError {
            command: argv.join(" "),
            message: e.to_string(),
        })?;
        Ok(done.code())
    }

    fn jobs_on(&mut self, nodes: &[String]) -> Result<Vec<QueuedJob>, ClusterError> {
        let text = self.ok(&[
            "squeue",
            "-h",
            "-t",
            "RUNNING,CONFIGURING,COMPLETING",
            "-w",
            &nodes.join(","),
            "-o",
            "%i|%u|%j",
        ])?;
        Ok(parse_squeue_jobs(&text))
    }

    fn reservation_nodes(&mut self, name: &str) -> Result<Vec<String>, ClusterError> {
        let text = self.ok(&["scontrol", "show", "reservation", name, "-o"])?;
        parse_reservation(name, &text).map_err(|message| ClusterError {
            command: format!("scontrol show reservation {name}"),
            message: format!(
                "{message}; create one with scontrol create reservation ... Nodes=... Users=root Flags=maint,ignore_jobs"
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sacct_rows_give_the_last_attempt_its_requeues_and_the_tag() {
        let text = "41|REQUEUED|0|2|1700000001|1700000003|\n\
                    41|COMPLETED|6|2|1700000006|1700000012|fabric-check/v1 {\"verdict\":\"fail\",\"probed_at\":1700000002,\"nnodes\":2,\"nodes\":{\"n1\":{\"verdict\":\"fail\",\"checks\":[\"ib.port_state\"]}}}\n";
        let v = parse_sacct(41, text);
        assert_eq!(v.requeues, 1);
        assert_eq!(v.state, "COMPLETED");
        assert_eq!(v.elapsed_s, 6.0);
        assert_eq!(v.nnodes, 2);
        assert_eq!(v.end_ms, 1_700_000_012_000);
        assert_eq!(v.start_ms, 1_700_000_006_000);
        let tag = v.tag.unwrap();
        assert_eq!(tag.probed_at, Some(1_700_000_002));
        assert!(tag.nodes.contains_key("n1"));
    }

    #[test]
    fn the_live_comment_is_the_asked_jobs_whatever_it_holds_and_null_is_none() {
        let text = "41|fabric-check/v1 {\"a\":\"x|y\"}\n412|other\n";
        assert_eq!(
            parse_squeue_comment(41, text).as_deref(),
            Some("fabric-check/v1 {\"a\":\"x|y\"}")
        );
        assert_eq!(
            parse_squeue_comment(412, "412|(null)\n").as_deref(),
            Some("")
        );
        assert_eq!(parse_squeue_comment(4, text), None);
    }

    #[test]
    fn a_running_job_has_no_end_and_a_missing_tag_is_none() {
        let v = parse_sacct(7, "7|RUNNING|3|1|1700000000|Unknown|\n");
        assert_eq!((v.end_ms, v.tag.is_none()), (0, true));
    }

    #[test]
    fn sbatch_words_name_the_nodes_the_mode_and_the_reservation() {
        let job = JobSpec {
            nodes: vec!["n3".into(), "n1".into(), "n4".into()],
            full: true,
            fabric_run: false,
            spares: 0,
        };
        let a = sbatch_args(&job, Some("drill"), None).join(" ");
        assert!(
            a.contains("--nodes=3 --nodelist=n3,n1,n4 --fabric-check=full"),
            "{a}"
        );
        assert!(a.contains("--reservation=drill"), "{a}");
        assert!(a.contains("--job-name=fabric-drill"), "{a}");
    }

    #[test]
    fn every_job_on_the_nodes_is_listed_whatever_its_name() {
        let jobs =
            parse_squeue_jobs("41|root|fabric-drill\n777|mallory|fabric-drill\n12_3|bob|a|b\n");
        let ids: Vec<&str> = jobs.iter().map(|j| j.id.as_str()).collect();
        assert_eq!(ids, ["41", "777", "12_3"], "the name decides nothing");
        assert_eq!(jobs[1].user, "mallory");
        assert_eq!(jobs[2].name, "a|b");
        assert_eq!((jobs[0].plain_id(), jobs[2].plain_id()), (Some(41), None));
    }

    #[test]
    fn a_reservation_holds_its_nodes_only_while_it_is_active() {
        let active = "ReservationName=drill StartTime=2024-01-01T00:00:00 EndTime=2024-01-01T02:00:00 Duration=02:00:00 Nodes=gpu[001-003],gpu007 NodeCnt=4 CoreCnt=0 Features=(null) PartitionName=(null) Flags=MAINT,IGNORE_JOBS State=ACTIVE\n";
        assert_eq!(
            parse_reservation("drill", active).unwrap(),
            ["gpu001", "gpu002", "gpu003", "gpu007"]
        );
        let later = active.replace("State=ACTIVE", "State=INACTIVE");
        let e = parse_reservation("drill", &later).unwrap_err();
        assert!(e.contains("not active (State=INACTIVE)"), "{e}");
        let e = parse_reservation("other", active).unwrap_err();
        assert!(e.contains("no reservation other"), "{e}");
    }
}
