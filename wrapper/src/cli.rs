//! Command-line interface (clap derive): `fabric-run [options] -- CMD [ARGS...]` and
//! `fabric-run mark KIND [N]`.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// Runs a job step's command and records step time, checkpoint duration, retries and outcome.
///
/// The exit status is the command's (128+N when a signal ended it); SIGTERM, SIGINT, SIGHUP,
/// SIGUSR1, SIGUSR2 and SIGCONT are forwarded to its process group. Records are JSON lines (see
/// docs/records.md) written to --record FILE or, under Slurm, to SPOOL/JOBID/NODE.jsonl, SPOOL
/// being $FABRIC_CHECK_SPOOL_DIR (set by the fabric-check plugin), else $FABRIC_RUN_SPOOL, else
/// /var/spool/fabric-check/jobs.
///
/// Under Slurm it also follows SPOOL/JOBID/fabric-notice-NODE.jsonl, where the in-job watch
/// reports fabric faults on the node: each new one is printed on stderr and recorded (see
/// --on-fabric-fault). Step-time regressions within the run (see --slow-step-window) are printed,
/// recorded and appended to SPOOL/JOBID/fabric-run-events-NODE.jsonl for the job to read.
#[derive(Debug, Parser)]
#[command(
    name = "fabric-run",
    version,
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true
)]
pub struct Cli {
    /// Say more about what fabric-run does (on stderr; twice: trace).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    /// Say less: no retry notices (twice: no warnings either). The command's own output is
    /// never touched.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub quiet: u8,
    /// `mark`: send a marker to the enclosing fabric-run from inside the job.
    #[command(subcommand)]
    pub command: Option<Sub>,
    /// Options of a run.
    #[command(flatten)]
    pub run: RunArgs,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Sub {
    /// Send a marker (checkpoint-begin, step 12, output 3, ...) to the enclosing fabric-run
    /// through $FABRIC_RUN_SOCKET. Does nothing, successfully, outside fabric-run.
    Mark(MarkArgs),
}

/// `fabric-run mark KIND [N]`.
#[derive(Debug, Args)]
pub struct MarkArgs {
    /// What happened.
    pub kind: MarkKind,
    /// The step number (`step`) or the number of outputs (`output`, default 1).
    pub n: Option<u64>,
}

/// Marker kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum MarkKind {
    /// A checkpoint write begins.
    CheckpointBegin,
    /// The checkpoint write ended.
    CheckpointEnd,
    /// A checkpoint read (restore) begins.
    RestoreBegin,
    /// The restore ended.
    RestoreEnd,
    /// A training step ended (N: its number).
    Step,
    /// N inference outputs were accepted (default 1).
    Output,
}

/// Options of a run.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Append records to FILE instead of the job's spool file.
    #[arg(long, value_name = "FILE")]
    pub record: Option<PathBuf>,

    /// Watch DIR (inotify, recursively): a burst of writes is one checkpoint, reads one restore.
    #[arg(long, value_name = "DIR")]
    pub checkpoint_dir: Option<PathBuf>,

    /// Silence that ends a burst in --checkpoint-dir (e.g. 2s, 500ms).
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = parse_duration)]
    pub checkpoint_quiet: Duration,

    /// Output lines that begin and end a checkpoint write (regular expressions).
    #[arg(long, num_args = 2, value_names = ["BEGIN", "END"])]
    pub checkpoint_regex: Option<Vec<String>>,

    /// Output lines that begin and end a checkpoint restore (regular expressions).
    #[arg(long, num_args = 2, value_names = ["BEGIN", "END"])]
    pub restore_regex: Option<Vec<String>>,

    /// Output lines that end a training step; a capture group, if any, is the step number.
    #[arg(long, value_name = "REGEX")]
    pub step_regex: Option<String>,

    /// Output lines that each count one accepted inference output.
    #[arg(long, value_name = "REGEX")]
    pub output_regex: Option<String>,

    /// Relaunch the command up to N times when it fails (see --retry-on).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub retries: u32,

    /// Retry only on: exit=CODE[,CODE..], signal=NAME|N[,..], or output=REGEX (repeatable).
    /// Without it, --retries retries any failure. SIGTERM and a passed deadline are never retried.
    #[arg(long, value_name = "SPEC")]
    pub retry_on: Vec<String>,

    /// Wait before the first relaunch; doubles each time.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_duration)]
    pub backoff: Duration,

    /// Longest wait between relaunches.
    #[arg(long, value_name = "DURATION", default_value = "10m", value_parser = parse_duration)]
    pub backoff_max: Duration,

    /// The run must end by then: a duration from now (2h30m) or an RFC 3339 time.
    #[arg(long, value_name = "WHEN")]
    pub deadline: Option<String>,

    /// Validation command (run with sh -c after a successful run); exit 0 accepts the run.
    #[arg(long, value_name = "SHELL-COMMAND")]
    pub accept_cmd: Option<String>,

    /// For each fabric fault the in-job watch reports on this node: none (print and record it),
    /// signal:SIG to also send SIG (USR1, SIGUSR2, 10, ...) to the command's process group,
    /// e.g. so that it saves a checkpoint now, or requeue: when the watch drains this node the
    /// job is requeued onto other nodes, where plugstack.conf allows it (on_fault=requeue).
    #[arg(long, value_name = "ACTION", default_value = "none")]
    pub on_fabric_fault: String,

    /// Flag slow steps when the median of the last K step times is over --slow-step-factor times
    /// the run's median so far (judged from 2K steps on; once per episode). 0 turns it off.
    /// Evidence for the job and the admin: it never drains a node.
    #[arg(long, value_name = "K", default_value_t = 20)]
    pub slow_step_window: u32,

    /// The factor of --slow-step-window (more than 1).
    #[arg(long, value_name = "F", default_value_t = 1.5)]
    pub slow_step_factor: f64,

    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub cmd: Vec<OsString>,
}

/// Parses `2s`, `500ms`, `2h30m`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s)
        .map_err(|e| format!("`{s}` is not a duration ({e}): write e.g. 90s, 500ms or 2h30m"))
}
