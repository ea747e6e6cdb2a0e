//! The soak's stand-ins for the hardware and the clock, plugged into the job step's real seams.
//!
//! - [`SoakRunner`] is a [`ProbeRunner`] that runs the real probe ([`probe::run`]: gather from
//!   the node's sysfs tree, every check, the thresholds) in this process instead of as a child,
//!   and saves its document where `fabric-check probe --save/--state-dir` would.
//! - [`SoakSampler`] is the in-job watch's [`Sampler`]: the same probe against the prolog's
//!   snapshot, rebased on a counter reset as the real sampler does.
//! - [`SoakAct`] and [`SoakPace`] give the watch's loop a job step per action and the soak's
//!   compressed time between samples.
//!
//! Compressed time: the probe stamps its counters with the real clock, so judging a job's
//! 12 hours that passed in 2 ms would scale every per-hour bound wrongly. Each node has an
//! emulated wall clock (the cluster's time plus the node's own clock error); before a probe
//! runs, the baseline's time is moved so that its age on the real clock equals its age on the
//! node's emulated clock, and the new document is stamped with the emulated time. A node whose
//! clock stepped back sees a baseline "newer than this run", as a real one would.

use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use fabric_core::config::Config;
use fabric_core::jobstep::runner::{Against, CollectiveRequest, ProbeRequest};
use fabric_core::jobstep::watch::{Act, Pace, Sample, Sampler, rebase};
use fabric_core::jobstep::{
    Budget, JobStep, Meet, ProbeRunError, ProbeRunner, Relay, Seams, Setup,
};
use fabric_core::probe::gather::Roots;
use fabric_core::probe::{self, Baseline, ProbeInput, Report, known, output};
use fabric_core::slurm::Slurm;
use fabric_core::testing::{FaultPlan, SharedCluster};

/// Milliseconds since the epoch on the real clock.
pub fn real_unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// `b` with its time moved onto the real clock: as old, on the real clock now, as it is on the
/// node's emulated clock at `node_now_ms` (younger than zero when that clock went back).
pub fn on_real_clock(mut b: Baseline, node_now_ms: u64) -> Baseline {
    let age_ms = i128::from(node_now_ms) - i128::from(b.counters.taken_unix_ms);
    let moved = i128::from(real_unix_ms()) - age_ms;
    b.counters.taken_unix_ms = moved.clamp(0, i128::from(u64::MAX)) as u64;
    b
}

/// The real probe in this process, on a node's emulated clock.
#[derive(Debug)]
pub struct SoakRunner<'a> {
    /// The node's wall clock now (ms since the epoch, emulated).
    pub now_ms: &'a Cell<u64>,
    /// An empty procfs (kernel release and driver versions are not what the soak varies).
    pub proc_root: &'a Path,
    /// Watches the prolog asked to start (the soak runs them itself).
    pub watches_started: Cell<u32>,
    /// Probes run.
    pub probes: Cell<u64>,
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
                // The soak's hardware does not change within one probe's look.
                second_look: None,
            },
            state_dir,
        ))
    }
}

impl ProbeRunner for SoakRunner<'_> {
    fn probe(&self, req: &ProbeRequest, limit: Duration) -> Result<Report, ProbeRunError> {
        if limit.is_zero() {
            return Err(ProbeRunError::NoTimeLeft { what: "probe" });
        }
        self.probes.set(self.probes.get() + 1);
        let now = self.now_ms.get();
        let (input, state_dir) = match self.input(req) {
            Ok(x) => x,
            // As `fabric-check probe` does: a document with verdict `error`.
            Err(why) => return Ok(Report::error(&req.node, 0.0, why)),
        };
        let mut report = probe::run(&input);
        report.counters.taken_unix_ms = now;
        if let Some(dir) = &state_dir {
            let last = input.baseline.as_ref().and_then(|b| b.inventory.as_ref());
            if let Some(f) = known::record_after_probe(
                &known::known_path(dir),
                input.known.as_ref(),
                &report,
                last,
                now / 1000,
            ) {
                report.push(f);
            }
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

/// The watch's sampler on the soak's clock.
#[derive(Debug)]
pub struct SoakSampler<'a> {
    /// What each sample probes (its baseline is set per sample).
    pub input: ProbeInput,
    /// The prolog's snapshot on the node's emulated clock, rebased on resets.
    pub base: Baseline,
    /// The node's wall clock now.
    pub now_ms: &'a Cell<u64>,
    /// Samples taken.
    pub samples: u64,
}

impl Sampler for SoakSampler<'_> {
    fn sample(&mut self) -> Option<Sample> {
        // Every sample is a whole look: the soak samples every few emulated hours, where the
        // watch's in-place reads (`QuickSampler`) would see a change anyway.
        let now = self.now_ms.get();
        self.input.baseline = Some(on_real_clock(self.base.clone(), now));
        let mut report = probe::run(&self.input);
        report.counters.taken_unix_ms = now;
        rebase(&mut self.base.counters, &report.counters);
        self.samples += 1;
        Some(Sample {
            report,
            tools_ran: true,
        })
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

/// The watch's pace: between samples, the soak's time moves on (noise, the job's end).
pub struct SoakPace<'a> {
    /// Moves time to the next sample; `false` when the job has ended.
    pub advance: &'a mut dyn FnMut() -> bool,
    /// Whether the job has ended.
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
