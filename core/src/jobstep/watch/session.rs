//! One watch from a plain spec: [`Session::open`] (its pid file, the prolog's snapshot, a fault
//! drill's dated-back start ([`super::drill_age`]), the sampler, the job's notice file),
//! [`Session::run`] (the loop, [`super::run`]), and [`Session::stop`] (its pid file removed
//! while it is still its own). The binary's `watch` command only parses its words, builds a
//! [`Spec`] and says the lines.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use super::acting::{Act, WatchSummary};
use super::life::{PidFile, RealPace};
use super::outputs::NoticeFile;
use super::sampling::QuickSampler;
use crate::config::NodeExpectations;
use crate::jobstep::Setup;
use crate::probe::ProbeInput;
use crate::probe::gather::Roots;
use crate::probe::known::Known;
use crate::relay::Relay;
use fabric_proto::verdict::Finding;

/// What a watch is opened from.
#[derive(Debug)]
pub struct Spec {
    /// The job step's setup (`watch_interval=` set).
    pub setup: Setup,
    /// How often it samples.
    pub interval: Duration,
    /// `/proc`.
    pub proc_root: PathBuf,
    /// The prolog's snapshot of the node ([`crate::jobstep::snapshot_path`]).
    pub snapshot: PathBuf,
    /// The node's expectations (its configuration).
    pub expect: NodeExpectations,
    /// Where the node's files are read.
    pub roots: Roots,
    /// The known inventory the prolog judged with (read only: the watch never records one).
    pub known: Option<Known>,
    /// Whether to tell the job through its notice file (created in the job's verified spool
    /// folder once the snapshot is read).
    pub notice: bool,
    /// The watch's Prometheus textfile, if any.
    pub metrics: Option<PathBuf>,
    /// Set by the SIGTERM handler: the loop ends within a slice of its sleep.
    pub term: Arc<AtomicBool>,
}

/// Why a watch did not open.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// This process's start time cannot be read (its pid file needs it).
    #[error("cannot read this process's start time in {0}")]
    NoStartTime(String),
    /// The pid file cannot be written.
    #[error("cannot write the watch's pid file {path}: {source}")]
    PidFile {
        /// The pid file.
        path: String,
        /// What the system said.
        source: std::io::Error,
    },
    /// The prolog left no snapshot: the watch does not run (its pid file is removed).
    #[error("no prolog snapshot ({0}); the watch does not run for job {1}")]
    NoSnapshot(crate::probe::BaselineError, u32),
}

/// An open watch.
#[derive(Debug)]
pub struct Session {
    setup: Setup,
    interval: Duration,
    started_at_s: u64,
    dated_back_s: u64,
    at_start: Vec<Finding>,
    sampler: QuickSampler,
    pace: RealPace,
    notice: Option<NoticeFile>,
    metrics: Option<PathBuf>,
}

impl Session {
    /// Writes the pid file, reads the prolog's snapshot, and opens the job's notice file (a
    /// failure to is said through `relay`: the job is then not told).
    pub fn open(spec: Spec, relay: &dyn Relay) -> Result<Session, OpenError> {
        let Spec {
            setup,
            interval,
            proc_root,
            snapshot,
            expect,
            roots,
            known,
            notice,
            metrics,
            term,
        } = spec;
        let job = setup.inv.job_id;
        let node = setup.inv.node.clone();
        let pid = std::process::id();
        let start = super::life::start_time(&proc_root, pid)
            .ok_or_else(|| OpenError::NoStartTime(proc_root.display().to_string()))?;
        let me = PidFile { pid, start };
        let pid_path = super::life::pid_path(&setup.state_dir, job);
        me.write(&pid_path).map_err(|source| OpenError::PidFile {
            path: pid_path.display().to_string(),
            source,
        })?;
        let (baseline, at_start) = match super::sampling::load_start(&snapshot) {
            Ok(x) => x,
            Err(e) => {
                let _ = std::fs::remove_file(&pid_path);
                return Err(OpenError::NoSnapshot(e, job));
            }
        };
        // A fault drill may date this job's start back (root's file, for this job alone).
        let dated = super::drill_age::read(&setup.state_dir, job, crate::jobstep::now_unix());
        if let Some(line) = dated.line(job) {
            relay.line(&line);
        }
        let dated_back_s = dated.age_s();
        let started_at_s = (baseline.counters.taken_unix_ms / 1000).saturating_sub(dated_back_s);
        let sampler = QuickSampler::new(ProbeInput {
            node: node.clone(),
            roots,
            expect,
            baseline: Some(baseline),
            bom_pin: None,
            known,
            // The watch looks again every second: its next sample is its second look.
            second_look: None,
        })
        .dated_back(dated_back_s);
        // Created relative to the job's verified spool folder: a folder the job's user swapped
        // for a link is refused, never walked through.
        let notice = if notice {
            crate::record::open_job_dir(&setup.plugin.spool_dir, job, setup.inv.job_uid, relay)
                .and_then(|dir| match NoticeFile::create(&dir, &node) {
                    Ok(n) => Some(n),
                    Err(e) => {
                        relay.line(&format!(
                            "watch: cannot create the job's notice file in {} ({e}); the job is not told of faults",
                            dir.path().display()
                        ));
                        None
                    }
                })
        } else {
            None
        };
        let pace = RealPace {
            pid_path,
            me,
            proc_root,
            job,
            last_seen: Instant::now(),
            last_scan: Instant::now(),
            term,
        };
        Ok(Session {
            setup,
            interval,
            started_at_s,
            dated_back_s,
            at_start,
            sampler,
            pace,
            notice,
            metrics,
        })
    }

    /// The setup it watches for.
    pub fn setup(&self) -> &Setup {
        &self.setup
    }

    /// How often it samples.
    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// How far a fault drill dated its job's start back, seconds (0: not at all;
    /// [`super::drill_age`]).
    pub fn dated_back_s(&self) -> u64 {
        self.dated_back_s
    }

    /// The job's start as the watch sees it (seconds since the epoch): the prolog's snapshot's
    /// time, less [`Session::dated_back_s`].
    pub fn started_at_s(&self) -> u64 {
        self.started_at_s
    }

    /// Runs the loop until the pid file is gone or no longer its own, SIGTERM, or its job is
    /// gone; `act` makes the job step of each action.
    pub fn run(&mut self, act: &dyn Act) -> WatchSummary {
        // The job's steps compared across its nodes, in a thread of its own
        // (`crate::jobstep::stragglers`); it ends with the loop.
        let notice = self.notice.as_ref().and_then(|n| n.try_clone().ok());
        let stragglers = crate::jobstep::stragglers::link::Link::start(
            &self.setup,
            act,
            self.started_at_s,
            notice,
            &crate::relay::StdoutRelay,
        );
        let summary = super::acting::run(
            &self.setup,
            self.interval,
            self.started_at_s,
            &self.at_start,
            &mut self.sampler,
            act,
            &mut self.pace,
            self.notice.as_mut(),
            self.metrics.as_deref(),
        );
        if let Some(link) = stragglers {
            let counts = link.counts.clone();
            link.stop();
            let named = counts.named.load(std::sync::atomic::Ordering::Relaxed);
            let workload = counts.workload.load(std::sync::atomic::Ordering::Relaxed);
            if named + workload > 0 {
                crate::relay::Relay::line(
                    &crate::relay::StdoutRelay,
                    &format!(
                        "watch: stragglers: {named} named, {workload} slowdowns the workload's"
                    ),
                );
            }
        }
        summary
    }

    /// Ends the watch: its pid file is removed while it still names this process.
    pub fn stop(self) {
        if PidFile::read(&self.pace.pid_path) == Some(self.pace.me) {
            let _ = std::fs::remove_file(&self.pace.pid_path);
        }
    }
}
