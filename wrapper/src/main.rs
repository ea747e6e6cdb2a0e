//! `fabric-run [options] -- CMD [ARGS...]`: the job-step wrapper.
//!
//! Runs the command transparently (same exit status, 128+N for a signal; forwarded signals;
//! output passed through unchanged) and records step start/end, attempts, checkpoints, restores,
//! training steps and outputs as JSON lines (`docs/records.md`). Nothing the wrapper fails at on
//! its own account (records, socket, inotify) changes what happens to the job: it warns and runs.
//!
//! Layout, after hyperfine: [`cli`] (clap), [`policy`] (pure decisions), [`runner`] (the
//! `Runner` trait and the process runner), [`supervise`] (the retry loop), and the detectors
//! [`mark`], [`pump`], [`dirwatch`], feeding [`tracker`] (with [`slow`], the slow-step
//! detector); [`notice`] follows the in-job watch's fabric fault notices.

mod cli;
mod dirwatch;
mod mark;
mod notice;
mod policy;
mod pump;
mod runner;
mod slow;
mod supervise;
mod tracker;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, anyhow};
use clap::Parser;
use fabric_proto::record::{
    Body, DEFAULT_SPOOL_ROOT, Meta, PLUGIN_SPOOL_ENV, RecordWriter, SPOOL_ENV, VERSION,
    node_records_path, run_events_path,
};

use crate::cli::{Cli, RunArgs, Sub};
use crate::notice::{FaultAction, NoticeFollower};
use crate::policy::RetryPolicy;
use crate::pump::{Kind, Patterns, compile};
use crate::runner::{FaultWatch, ProcessRunner, Runner};
use crate::slow::SlowSteps;
use crate::supervise::{Plan, run_all};
use crate::tracker::{EventsFile, Sink, Tracker};

fn env_u32(name: &str) -> Option<u32> {
    std::env::var(name).ok()?.trim().parse().ok()
}

fn env_str(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|s| !s.is_empty())
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "localhost".to_owned())
}

/// The fields every record carries, from Slurm's task environment.
fn meta_from_env() -> Meta {
    let node = env_str("SLURMD_NODENAME").unwrap_or_else(hostname);
    let start_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let job_id = env_str("SLURM_JOB_ID");
    Meta {
        v: VERSION,
        ts: 0.0,
        run: format!("{node}:{}:{start_ms}", std::process::id()),
        rank: env_u32("SLURM_PROCID"),
        local_rank: env_u32("SLURM_LOCALID"),
        step_id: env_str("SLURM_STEP_ID").or_else(|| env_str("SLURM_STEPID")),
        restart_count: env_u32("SLURM_RESTART_COUNT").or(job_id.as_ref().map(|_| 0)),
        job_id,
        node,
    }
}

/// Where records go: `--record FILE`, or under Slurm `<spool>/<job id>/<node>.jsonl`, or nowhere.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Target {
    /// `--record FILE`: the user's own file.
    File(PathBuf),
    /// The job's spool file; `prolog_made`: the spool came from the plugin
    /// ([`PLUGIN_SPOOL_ENV`]), whose prolog made the job's folder.
    Spool { path: PathBuf, prolog_made: bool },
}

/// The spool root: the plugin's [`PLUGIN_SPOOL_ENV`], else the user's [`SPOOL_ENV`], else the
/// default; and whether it is the plugin's. `warn`: say so when the user's is ignored.
fn spool_root(warn: bool) -> (PathBuf, bool) {
    let plugin = std::env::var_os(PLUGIN_SPOOL_ENV).filter(|v| !v.is_empty());
    let user = std::env::var_os(SPOOL_ENV).filter(|v| !v.is_empty());
    match (plugin, user) {
        (Some(p), user) => {
            if let Some(u) = user.filter(|u| warn && *u != p) {
                tracing::warn!(
                    "fabric-run: {SPOOL_ENV}={} ignored: the cluster's fabric-check plugin \
                     names the job's spool ({PLUGIN_SPOOL_ENV}={}); use --record FILE for a file \
                     of your own",
                    PathBuf::from(u).display(),
                    PathBuf::from(&p).display()
                );
            }
            (PathBuf::from(p), true)
        }
        (None, Some(u)) => (PathBuf::from(u), false),
        (None, None) => (PathBuf::from(DEFAULT_SPOOL_ROOT), false),
    }
}

/// Under Slurm, the spool root and whether it is the plugin's ([`spool_root`], once per run).
type Spool = Option<(PathBuf, bool)>;

fn record_path(args: &RunArgs, meta: &Meta, spool: &Spool) -> anyhow::Result<Option<Target>> {
    if let Some(p) = &args.record {
        return Ok(Some(Target::File(p.clone())));
    }
    let (Some(job), Some((root, prolog_made))) = (&meta.job_id, spool) else {
        return Ok(None);
    };
    let prolog_made = *prolog_made;
    if !root.is_dir() {
        return Err(anyhow!(
            "the spool directory {} does not exist: ask the admin to create it (mode 1777) or \
             pass --record FILE",
            root.display()
        ));
    }
    let path = node_records_path(root, job, &meta.node).ok_or_else(|| {
        anyhow!(
            "job id `{job}` or node `{}` cannot name a spool file",
            meta.node
        )
    })?;
    Ok(Some(Target::Spool { path, prolog_made }))
}

fn open_records(args: &RunArgs, meta: &Meta, spool: &Spool) -> Sink {
    let opened = record_path(args, meta, spool).and_then(|t| {
        let uid = nix::unistd::getuid().as_raw();
        let (w, p) = match t {
            None => return Ok(None),
            Some(Target::File(p)) => (RecordWriter::open(&p, meta.clone()), p),
            Some(Target::Spool {
                path,
                prolog_made: true,
            }) => (
                RecordWriter::open_in_prolog_spool(&path, meta.clone(), uid),
                path,
            ),
            Some(Target::Spool { path, .. }) => {
                (RecordWriter::open_in_spool(&path, meta.clone(), uid), path)
            }
        };
        w.map(Some)
            .with_context(|| format!("cannot open {}", p.display()))
    });
    match opened {
        Ok(w) => {
            match &w {
                Some(w) => tracing::debug!("fabric-run: records go to {}", w.path().display()),
                None => tracing::debug!("fabric-run: not under Slurm and no --record: no records"),
            }
            Sink::new(w)
        }
        Err(e) => {
            tracing::warn!("fabric-run: warning: {e:#}; the job runs unrecorded");
            Sink::new(None)
        }
    }
}

fn patterns(args: &RunArgs, retry: &RetryPolicy) -> Result<Patterns, String> {
    let mut p = Patterns::default();
    if let Some(v) = &args.checkpoint_regex {
        p.push(Kind::CkptBegin, compile(&v[0], "--checkpoint-regex")?);
        p.push(Kind::CkptEnd, compile(&v[1], "--checkpoint-regex")?);
    }
    if let Some(v) = &args.restore_regex {
        p.push(Kind::RestoreBegin, compile(&v[0], "--restore-regex")?);
        p.push(Kind::RestoreEnd, compile(&v[1], "--restore-regex")?);
    }
    if let Some(s) = &args.step_regex {
        p.push(Kind::Step, compile(s, "--step-regex")?);
    }
    if let Some(s) = &args.output_regex {
        p.push(Kind::Output, compile(s, "--output-regex")?);
    }
    for s in &retry.output_patterns {
        p.push(Kind::Retry, compile(s, "--retry-on output=")?);
    }
    Ok(p)
}

/// Validated options; every error names the flag and the fix. Nothing has run yet.
fn plan(args: &RunArgs) -> Result<(Plan, Patterns, FaultAction), String> {
    let mut retry = RetryPolicy {
        max: args.retries,
        backoff: args.backoff,
        backoff_max: args.backoff_max.max(args.backoff),
        ..RetryPolicy::default()
    };
    for spec in &args.retry_on {
        retry.add_spec(spec)?;
    }
    let deadline = match &args.deadline {
        Some(s) => Some(
            policy::parse_deadline(s, SystemTime::now()).map_err(|e| format!("--deadline: {e}"))?,
        ),
        None => None,
    };
    let patterns = patterns(args, &retry)?;
    let on_fault = notice::parse_action(&args.on_fabric_fault)?;
    slow::check_options(args.slow_step_window, args.slow_step_factor)?;
    Ok((
        Plan {
            retry,
            deadline,
            accept_cmd: args.accept_cmd.clone(),
        },
        patterns,
        on_fault,
    ))
}

/// The job's live files in the spool (under Slurm, with a spool root that exists): the
/// watch's notice file, followed, and the wrapper's events file.
fn live_files(
    meta: &Meta,
    spool: &Spool,
    on_fault: FaultAction,
) -> (Option<FaultWatch>, Option<EventsFile>) {
    let (Some(job), Some((root, prolog_made))) = (&meta.job_id, spool) else {
        if on_fault != FaultAction::None {
            tracing::debug!("fabric-run: not under Slurm: no fabric fault notices to act on");
        }
        return (None, None);
    };
    if !root.is_dir() {
        return (None, None);
    }
    if on_fault == FaultAction::Requeue {
        ask_for_requeue(root, job, &meta.node);
    }
    let faults = fabric_proto::notice::notice_path(root, job, &meta.node).map(|p| FaultWatch {
        follower: NoticeFollower::new(p, Instant::now()),
        action: on_fault,
    });
    if let Some(f) = &faults {
        tracing::debug!(
            "fabric-run: following fabric fault notices in {}",
            f.follower.path().display()
        );
    }
    let events = run_events_path(root, job, &meta.node)
        .map(|p| EventsFile::new(p, meta.clone(), *prolog_made));
    (faults, events)
}

/// `--on-fabric-fault=requeue`: leaves the job's wish where the watch looks for it (an empty
/// file, created afresh, never through a link). Says why when it cannot.
fn ask_for_requeue(root: &std::path::Path, job: &str, node: &str) {
    use std::os::unix::fs::OpenOptionsExt;
    let Some(path) = fabric_proto::notice::requeue_wish_path(root, job, node) else {
        eprintln!(
            "fabric-run: --on-fabric-fault=requeue: job {job:?} or node {node:?} cannot name a file in the spool; the job is not requeued on a fabric fault"
        );
        return;
    };
    let made = path
        .parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| {
            std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .custom_flags(nix::libc::O_NOFOLLOW)
                .open(&path)
                .map(drop)
        });
    match made {
        Ok(()) => tracing::debug!(
            "fabric-run: asked to be requeued on a fabric fault ({})",
            path.display()
        ),
        Err(e) => eprintln!(
            "fabric-run: --on-fabric-fault=requeue: cannot write {} ({e}); the job is not requeued on a fabric fault",
            path.display()
        ),
    }
}

fn run(args: RunArgs) -> u8 {
    let (plan, patterns, on_fault) = match plan(&args) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("fabric-run: {e}");
            return 2;
        }
    };
    let meta = meta_from_env();
    let spool: Spool = meta
        .job_id
        .as_ref()
        .map(|_| spool_root(args.record.is_none()));
    let mut sink = open_records(&args, &meta, &spool);
    sink.write(Body::StepStart {
        pid: std::process::id(),
        cmd: args
            .cmd
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect(),
        deadline: plan
            .deadline
            .and_then(|d| d.duration_since(UNIX_EPOCH).ok())
            .map(|d| d.as_secs_f64()),
        retries_max: plan.retry.max,
    });
    let (faults, events) = live_files(&meta, &spool, on_fault);
    let slow = SlowSteps::new(args.slow_step_window, args.slow_step_factor);
    let tracker = Arc::new(Mutex::new(Tracker::new(sink).with_slow_steps(slow, events)));
    let marks = match mark::MarkSocket::bind() {
        Ok(m) => Some(m),
        Err(e) => {
            tracing::warn!(
                "fabric-run: warning: no marker socket ({e}); `fabric-run mark` is ignored"
            );
            None
        }
    };
    let dirwatch = args.checkpoint_dir.as_deref().and_then(|d| {
        dirwatch::DirWatch::new(d, args.checkpoint_quiet)
            .map_err(|e| {
                tracing::warn!(
                    "fabric-run: warning: cannot watch {} ({e}); checkpoints there go unseen",
                    d.display()
                );
            })
            .ok()
    });
    let mut runner: Box<dyn Runner> = match ProcessRunner::new(
        args.cmd.clone(),
        marks,
        dirwatch,
        faults,
        Arc::new(patterns),
        Arc::clone(&tracker),
    ) {
        Ok(r) => Box::new(r),
        Err(e) => {
            // Without signal handlers we cannot supervise; run the command plainly instead.
            tracing::warn!("fabric-run: warning: cannot supervise ({e}); running the command bare");
            return bare(&args.cmd);
        }
    };
    let end = run_all(runner.as_mut(), &plan, &tracker);
    end.last.exit_code().clamp(0, 255) as u8
}

fn bare(cmd: &[std::ffi::OsString]) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match std::process::Command::new(&cmd[0]).args(&cmd[1..]).status() {
        Ok(s) => s
            .code()
            .or(s.signal().map(|n| 128 + n))
            .unwrap_or(1)
            .clamp(0, 255) as u8,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => 127,
        Err(_) => 126,
    }
}

/// fabric-run's own messages: `tracing` events on stderr, bare lines (they already say
/// `fabric-run: ...`), so they read as before between the command's output. Info by default
/// (retry notices), `-q` warnings only, `-qq` errors only, `-v` debug.
fn init_logging(verbose: u8, quiet: u8) {
    let level = match i16::from(verbose) - i16::from(quiet) {
        i16::MIN..=-2 => tracing::Level::ERROR,
        -1 => tracing::Level::WARN,
        0 => tracing::Level::INFO,
        1 => tracing::Level::DEBUG,
        _ => tracing::Level::TRACE,
    };
    let _ = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_writer(std::io::stderr)
        .without_time()
        .with_ansi(false)
        .with_target(false)
        .with_level(false)
        .try_init();
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.verbose, cli.quiet);
    match cli.command {
        Some(Sub::Mark(m)) => ExitCode::from(mark::send(&m) as u8),
        None => ExitCode::from(run(cli.run)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_slow_step_defaults_are_the_detectors() {
        let cli = Cli::parse_from(["fabric-run", "--", "true"]);
        assert_eq!(cli.run.slow_step_window, slow::DEFAULT_WINDOW);
        assert_eq!(cli.run.slow_step_factor, slow::DEFAULT_FACTOR);
        assert_eq!(cli.run.on_fabric_fault, "none");
    }
}
