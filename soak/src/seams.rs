//! The soak's stand-ins for the hardware and the clock, plugged into the job step's real seams.
//!
//! - [`SoakRunner`] is a [`ProbeRunner`] that runs the real probe ([`probe::run`]: gather from
//!   the node's sysfs tree, every check, the thresholds) in this process instead of as a child,
//!   and saves its document where `fabric-check probe --save/--state-dir` would.
//! - [`ClockedSampler`] is the in-job watch's real [`QuickSampler`] with the prolog's snapshot
//!   moved onto the node's emulated clock before each sample.
//! - [`SoakAct`] and [`SoakPace`] give the watch's loop a job step per action and a window of
//!   1 s samples on the emulated clock, the tree's scheduled changes happening as it passes.
//!
//! Compressed time: the probe stamps its counters with the real clock, so judging a job's
//! 12 hours that passed in 2 ms would scale every per-hour bound wrongly. Each node has an
//! emulated wall clock (the cluster's time plus the node's own clock error); before a probe
//! runs, the baseline's time is moved so that its age on the real clock equals its age on the
//! node's emulated clock, and the new document is stamped with the emulated time. A node whose
//! clock stepped back sees a baseline "newer than this run", as a real one would.

use std::cell::{Cell, RefCell};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use fabric_core::config::Config;
use fabric_core::jobstep::runner::{Against, CollectiveRequest, ProbeRequest};
use fabric_core::jobstep::watch::QuickSampler;
use fabric_core::jobstep::watch::{Act, Pace, Sample, Sampler};
use fabric_core::jobstep::{
    Budget, JobStep, Meet, ProbeRunError, ProbeRunner, Relay, Seams, Setup,
};
use fabric_core::probe::gather::Snapshot;
use fabric_core::probe::gather::{self, Roots};
use fabric_core::probe::{self, Baseline, ProbeInput, Report, known, output};
use fabric_core::slurm::Slurm;
use fabric_core::testing::{FaultPlan, SharedCluster};

use crate::node::{Timeline, tree_generation};

/// The cluster's time of a node whose clock reads `node_ms` with error `error_ms`.
pub fn cluster_ms(node_ms: u64, error_ms: i64) -> u64 {
    (node_ms as i64 - error_ms).max(0) as u64
}

/// Milliseconds since the epoch on the real clock.
pub fn real_unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// `b` with its time moved onto the real clock: as old, on the real clock now, as it is on the
/// node's emulated clock at `node_now_ms` (younger than zero when that clock went back).
pub fn on_real_clock(mut b: Baseline, node_now_ms: u64) -> Baseline {
    b.counters.taken_unix_ms = real_clock_ms(b.counters.taken_unix_ms, node_now_ms);
    b
}

/// The real clock's time that is as old now as `taken_ms` is on the node's emulated clock at
/// `node_now_ms` ([`on_real_clock`] of a baseline taken then).
pub fn real_clock_ms(taken_ms: u64, node_now_ms: u64) -> u64 {
    let age_ms = i128::from(node_now_ms) - i128::from(taken_ms);
    let moved = i128::from(real_unix_ms()) - age_ms;
    moved.clamp(0, i128::from(u64::MAX)) as u64
}

/// The second look's settle, as `fabric-check probe` waits by default (`--second-look-ms`).
pub const SETTLE: Duration = Duration::from_millis(1000);

/// The real probe in this process, on a node's emulated clock.
#[derive(Debug)]
pub struct SoakRunner<'a> {
    /// The node's wall clock now (ms since the epoch, emulated).
    pub now_ms: &'a Cell<u64>,
    /// The node's tree changes still to come (a reload's devices coming back while the probe
    /// waits for its second look), on the node's emulated clock less its error.
    pub timeline: &'a Timeline,
    /// The node's clock error (ms), so that the timeline's moments are the cluster's.
    pub clock_error_ms: &'a Cell<i64>,
    /// An empty procfs (kernel release and driver versions are not what the soak varies).
    pub proc_root: &'a Path,
    /// Watches the prolog asked to start (the soak runs them itself).
    pub watches_started: Cell<u32>,
    /// Probes run.
    pub probes: Cell<u64>,
    /// Looks taken, and those of them that reused the last look's snapshot.
    pub looks: Cell<(u64, u64)>,
    /// The last look: the node's tree generation and the roots it was taken at, and what it
    /// read.
    pub last_look: RefCell<Option<(u64, String, Snapshot)>>,
}

impl SoakRunner<'_> {
    fn input(&self, req: &ProbeRequest) -> Result<(ProbeInput, Option<PathBuf>), String> {
        let sysfs = req
            .sysfs_root
            .clone()
            .ok_or("the soak's plugin settings name no sysfs_root")?;
        let expect = match &req.config {
            Some(p) => Config::load(p).map_err(|e| e.to_string())?,
            None => Config::default(),
        }
        .for_node(&req.node);
        let (baseline, state_dir) = match &req.against {
            Against::Baseline(p) => (Some(Baseline::load(p).map_err(|e| e.to_string())?), None),
            Against::StateDir(d) => (Baseline::load(&d.join("last.json")).ok(), Some(d.clone())),
        };
        // As `fabric-check probe` does: `--known`, else the state folder's own record.
        let known = req
            .known
            .clone()
            .or_else(|| state_dir.as_deref().map(known::known_path))
            .and_then(|p| known::load_for_probe(&p, &req.node).0);
        let now = self.now_ms.get();
        Ok((
            ProbeInput {
                node: req.node.clone(),
                roots: Roots::for_sysfs(sysfs, self.proc_root.to_owned(), None),
                expect,
                baseline: baseline.map(|b| on_real_clock(b, now)),
                bom_pin: None,
                known,
                // As `fabric-check probe` runs by default: a second look after the settle.
                second_look: Some(SETTLE),
            },
            state_dir,
        ))
    }
}

impl SoakRunner<'_> {
    /// The probe's gather, or, when nothing in the node's trees has changed since its last look
    /// (its [`tree_generation`] is the same), that look's snapshot with its two readings of the
    /// real clock taken again: `taken_unix_ms` and each device's `age_s` (the age of its
    /// `ports/`, one `stat` each). The soak is the only writer to its trees and notes every
    /// write, so the gather would have read the same bytes: the snapshot is the same. Measured
    /// (issue 40, seed 1, 10,000 node-days): 24 % of the looks of prolog, epilog and health find
    /// the tree as the last look left it (a second look, health's 5-min grid inside an hour),
    /// a gather is ~1,100 files, and the soak's CPU per node-day fell from 97 to 86 ms. The
    /// watch's quick samples skip their reads alike ([`ClockedSampler`]); its full samples read.
    fn look(&self, roots: &Roots, expect: &fabric_core::config::NodeExpectations) -> Snapshot {
        let (looks, reused) = self.looks.get();
        let generation = tree_generation();
        let key = format!("{roots:?} {:?}", expect.ignore_devices);
        if let Some((g, k, snap)) = &*self.last_look.borrow()
            && *g == generation
            && *k == key
        {
            self.looks.set((looks + 1, reused + 1));
            let mut snap = snap.clone();
            snap.taken_unix_ms = real_unix_ms();
            let class = roots.sysfs.join("class").join("infiniband");
            for dev in &mut snap.devices {
                dev.age_s = gather::device_age_s(&class.join(&dev.name));
            }
            return snap;
        }
        self.looks.set((looks + 1, reused));
        let snap = gather::gather(roots, |d| expect.ignores(d));
        *self.last_look.borrow_mut() = Some((generation, key, snap.clone()));
        snap
    }
}

impl ProbeRunner for SoakRunner<'_> {
    fn probe(&self, req: &ProbeRequest, limit: Duration) -> Result<Report, ProbeRunError> {
        if limit.is_zero() {
            return Err(ProbeRunError::NoTimeLeft { what: "probe" });
        }
        self.probes.set(self.probes.get() + 1);
        let (input, state_dir) = match self.input(req) {
            Ok(x) => x,
            // As `fabric-check probe` does: a document with verdict `error`.
            Err(why) => return Ok(Report::error(&req.node, 0.0, why)),
        };
        let expect = &input.expect;
        let mut failure = None;
        let mut report = probe::run_looks(
            &input,
            probe::RunWith::default(),
            &mut || self.look(&input.roots, expect),
            // The settle passes on the node's clock, and what the tree does meanwhile happens.
            &mut |d| {
                let t = self.now_ms.get() + d.as_millis() as u64;
                self.now_ms.set(t);
                if let Err(e) = self
                    .timeline
                    .until(cluster_ms(t, self.clock_error_ms.get()))
                {
                    failure = Some(e);
                }
            },
        );
        if let Some(e) = failure {
            return Err(ProbeRunError::CannotRun {
                what: "probe",
                reason: e.to_string(),
            });
        }
        let now = self.now_ms.get();
        report.counters.taken_unix_ms = now;
        if let Some(dir) = &state_dir
            && let Some(f) =
                known::record_after_probe(&known::known_path(dir), &input, &report, now / 1000)
        {
            report.push(f);
        }
        let doc = output::json(&report);
        let saves = req
            .save
            .iter()
            .cloned()
            .chain(state_dir.map(|d| d.join("last.json")));
        for path in saves {
            if let Err(e) = output::write_atomic(&path, doc.as_bytes()) {
                return Err(ProbeRunError::CannotRun {
                    what: "probe",
                    reason: format!("cannot save {}: {e}", path.display()),
                });
            }
        }
        Ok(report)
    }

    fn collective(
        &self,
        _req: &CollectiveRequest,
        _limit: Duration,
    ) -> Result<fabric_net::collective::Report, ProbeRunError> {
        // The soak runs `--fabric-check=quick` jobs: no collective.
        Err(ProbeRunError::CannotRun {
            what: "collective",
            reason: "the soak runs no collective".into(),
        })
    }

    fn start_watch(&self, _argv: &[String], _log: &Path) -> std::io::Result<u32> {
        self.watches_started.set(self.watches_started.get() + 1);
        Ok(0)
    }
}

/// The watch's real sampler ([`QuickSampler`]: the files that can make a `fail` read in place
/// every second, the whole probe when one changed or every minute) on the soak's clock: before
/// each sample the prolog's snapshot is moved onto the real clock as old as it is on the node's
/// emulated clock, so per-hour bounds see the job's emulated age.
#[derive(Debug)]
pub struct ClockedSampler<'a> {
    /// The real sampler.
    pub inner: QuickSampler,
    /// When the prolog's snapshot was taken, on the node's emulated clock.
    pub base_taken_ms: u64,
    /// The node's wall clock now.
    pub now_ms: &'a Cell<u64>,
    /// Samples taken (quick and full).
    pub samples: u64,
    /// The node's scheduled changes: none pending means no file of the tree is broken now.
    pub timeline: &'a Timeline,
    /// The tree's generation at the last full sample, when its files were opened and read.
    pub full_at: Option<u64>,
    /// Quick samples that read nothing: the tree was as the last full sample found it.
    pub unread: u64,
}

impl Sampler for ClockedSampler<'_> {
    fn sample(&mut self) -> Option<Sample> {
        // Nothing written to the tree since the full sample read every file the quick samples
        // read (the soak is the only writer and notes each write), and no file broken now:
        // each would read what it read then, so the quick sample would find no change.
        // Measured (issue 40, seed 1, 2,000 node-days): the quick samples' `pread`s were an
        // eighth of the soak's CPU.
        if self.full_at == Some(tree_generation())
            && self.timeline.is_idle()
            && self.inner.unchanged_sample()
        {
            self.samples += 1;
            self.unread += 1;
            return None;
        }
        let now = self.now_ms.get();
        if let Some(b) = self.inner.baseline_mut() {
            // Only its time moves (it was cloned whole each sample: 5 % of the soak's CPU).
            b.counters.taken_unix_ms = real_clock_ms(self.base_taken_ms, now);
        }
        self.samples += 1;
        let full = self.inner.full_samples;
        let sample = self.inner.sample();
        if self.inner.full_samples != full {
            self.full_at = Some(tree_generation());
        }
        let mut s = sample?;
        s.report.counters.taken_unix_ms = now;
        Some(s)
    }
}

/// Slurm as a node sees it: its view of the shared cluster, failing every call while the
/// controller is away.
pub fn slurm_view(cluster: &SharedCluster, controller_down: bool, setup: &Setup) -> impl Slurm {
    let plan: FaultPlan = Box::new(move |_method| {
        let fault = if controller_down {
            fabric_core::testing::Fault::Fail
        } else {
            fabric_core::testing::Fault::None
        };
        (Duration::ZERO, fault)
    });
    cluster.view_bounded(plan, setup.deadline, setup.slurm_call_limit())
}

/// The watch's actions: each on a job step with a fresh deadline and a fresh Slurm view.
pub struct SoakAct<'a> {
    /// The cluster.
    pub cluster: &'a SharedCluster,
    /// Whether the controller is away now.
    pub controller_down: &'a Cell<bool>,
    /// The probe runner.
    pub runner: &'a dyn ProbeRunner,
    /// The rendezvous.
    pub meet: &'a dyn Meet,
    /// The lines.
    pub relay: &'a dyn Relay,
}

impl std::fmt::Debug for SoakAct<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SoakAct")
    }
}

impl Act for SoakAct<'_> {
    fn with_step(&self, setup: &Setup, f: &mut dyn FnMut(&JobStep<'_>)) {
        let mut fresh = setup.clone();
        fresh.deadline = Budget::new(setup.plugin.timeout).job_step(Instant::now());
        let slurm = slurm_view(self.cluster, self.controller_down.get(), &fresh);
        let step = JobStep {
            setup: &fresh,
            seams: Seams {
                slurm: &slurm,
                runner: self.runner,
                meet: self.meet,
                relay: self.relay,
            },
        };
        f(&step);
    }
}

/// The watch's pace: between samples, the soak's time moves on (a second of its window, the
/// tree's scheduled changes, health checks that fall due).
pub struct SoakPace<'a> {
    /// Moves time to the next sample; `false` when the window has ended.
    pub advance: &'a mut dyn FnMut() -> bool,
    /// Whether the window has ended.
    pub ended: bool,
}

impl std::fmt::Debug for SoakPace<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SoakPace")
    }
}

impl Pace for SoakPace<'_> {
    fn sleep(&mut self, _d: Duration) {
        self.ended = !(self.advance)();
    }

    fn should_stop(&mut self) -> bool {
        self.ended
    }
}
