//! The soak's loop: every node lives its emulated days in its own thread (jobs with their
//! prolog, in-job watch and epilog; periodic health checks; noise), side by side, waiting for
//! each other at each emulated day's end. The cluster's node states (drains, the mass-drain
//! guard's count) are one [`SharedCluster`] every node's steps see. Each node draws from its
//! own seeded generator, so a seed repeats a run; only the order of two drains racing the
//! mass-drain guard within one emulated day can differ, as it can on a real cluster.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::node::{Hardware, HardwareError};
use crate::noise::{Kind, Model};
use crate::seams::{SoakAct, SoakPace, SoakRunner, SoakSampler, slurm_view};
use crate::stats::{log_uniform, poisson};
use fabric_core::jobstep::health::{self, HealthSetup};
use fabric_core::jobstep::{JobStep, Relay, Seams, Setup, epilog, prolog, watch};
use fabric_core::probe::ProbeInput;
use fabric_core::probe::gather::Roots;
use fabric_core::testing::{FakeMeet, SharedCluster};
use fabric_proto::fabric_option::FabricMode;
use fabric_proto::invocation::{Invocation, JobStepExit, Script};
use fabric_proto::plugin_args::PluginArgs;

/// One emulated hour, the soak's tick.
pub const HOUR_MS: u64 = 3_600_000;

/// When the emulated cluster's clock starts (2026-01-01T00:00:00Z).
pub const EPOCH_MS: u64 = 1_767_225_600_000;

/// What to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// Node-days to emulate (rounded up to whole days of the whole cluster).
    pub node_days: u64,
    /// The seed of every draw.
    pub seed: u64,
    /// Nodes in the cluster.
    pub nodes: usize,
    /// Hours between two periodic health checks of a node.
    pub health_every_h: u64,
    /// Hours between two samples of the in-job watch.
    pub watch_every_h: u64,
    /// Real faults injected as controls (spread over the run).
    pub controls: usize,
    /// The noise.
    pub model: Model,
}

impl Options {
    /// The defaults for `node_days` and `seed`.
    pub fn new(node_days: u64, seed: u64) -> Self {
        Self {
            node_days,
            seed,
            nodes: 20,
            health_every_h: 8,
            watch_every_h: 8,
            controls: (node_days / 2000).max(3) as usize,
            model: Model::default(),
        }
    }
}

/// Why the soak could not run.
#[derive(Debug, thiserror::Error)]
pub enum SoakError {
    /// A node's tree.
    #[error(transparent)]
    Hardware(#[from] HardwareError),
    /// A folder of the run.
    #[error("cannot make the soak's folder {path}: {source}")]
    Folder {
        /// The folder.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A node's thread died.
    #[error("node {0}'s emulation panicked")]
    Panicked(String),
}

/// A real fault injected to show the harness sees a drain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    /// A fabric port goes down.
    PortDown,
    /// A fabric link retrains (`link_downed` +1).
    LinkFlap,
    /// A marginal link: thousands of symbol errors an hour.
    SymbolStorm,
}

impl Control {
    const ALL: [Control; 3] = [Control::PortDown, Control::LinkFlap, Control::SymbolStorm];

    /// Its name.
    pub fn as_str(self) -> &'static str {
        match self {
            Control::PortDown => "port_down",
            Control::LinkFlap => "link_flap",
            Control::SymbolStorm => "symbol_storm",
        }
    }
}

/// One drain that fabric-check made.
#[derive(Debug, Clone)]
pub struct Drain {
    /// The node.
    pub node: String,
    /// The emulated hour it happened in.
    pub hour: u64,
    /// Which step drained: prolog, epilog, health, watch.
    pub phase: &'static str,
    /// The reason Slurm holds.
    pub reason: String,
    /// The noise the node saw in the 24 hours before.
    pub recent: BTreeSet<Kind>,
    /// The control fault it had, if any (then it is no false drain).
    pub control: Option<Control>,
}

/// What one soak found.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// Node-days emulated.
    pub node_days: u64,
    /// Drains of nodes with no real fault.
    pub false_drains: Vec<Drain>,
    /// Drains of nodes with a control fault.
    pub control_drains: Vec<Drain>,
    /// Control faults injected, by kind.
    pub controls_injected: Vec<(String, Control)>,
    /// Control faults never drained within two days.
    pub controls_missed: Vec<(String, Control)>,
    /// Noise events, by kind.
    pub events: BTreeMap<Kind, u64>,
    /// Jobs run (prologs).
    pub jobs: u64,
    /// Periodic and boot-time health checks.
    pub health_runs: u64,
    /// In-job watch samples.
    pub watch_samples: u64,
    /// Probe runs of the prolog, the epilog and health.
    pub probes: u64,
    /// Times the mass-drain guard refused or undid a drain.
    pub guard_refusals: u64,
    /// Resumes by health after its clean-probe streak.
    pub resumes: u64,
    /// Wall time of the run.
    pub elapsed: Duration,
}

impl Outcome {
    fn absorb(&mut self, o: NodeTally) {
        self.false_drains.extend(o.false_drains);
        self.control_drains.extend(o.control_drains);
        self.controls_injected.extend(o.controls_injected);
        self.controls_missed.extend(o.controls_missed);
        for (k, n) in o.events {
            *self.events.entry(k).or_default() += n;
        }
        self.jobs += o.jobs;
        self.health_runs += o.health_runs;
        self.watch_samples += o.watch_samples;
        self.probes += o.probes;
        self.guard_refusals += o.guard_refusals;
        self.resumes += o.resumes;
    }
}

#[derive(Debug, Default)]
struct NodeTally {
    false_drains: Vec<Drain>,
    control_drains: Vec<Drain>,
    controls_injected: Vec<(String, Control)>,
    controls_missed: Vec<(String, Control)>,
    events: BTreeMap<Kind, u64>,
    jobs: u64,
    health_runs: u64,
    watch_samples: u64,
    probes: u64,
    guard_refusals: u64,
    resumes: u64,
}

/// The day's end: node threads run their day side by side and wait here for each other, so
/// no node runs more than a day ahead of another (the mass-drain guard sees the cluster's
/// drains of the same day). A thread that ends, also by a panic, leaves it.
#[derive(Debug)]
struct Baton {
    /// (generation, waiting, alive).
    state: Mutex<(u64, usize, usize)>,
    wake: Condvar,
}

impl Baton {
    fn new(n: usize) -> Self {
        Self {
            state: Mutex::new((0, 0, n)),
            wake: Condvar::new(),
        }
    }

    fn release_if_all(&self, s: &mut (u64, usize, usize)) {
        if s.1 >= s.2 && s.1 > 0 {
            s.0 += 1;
            s.1 = 0;
            self.wake.notify_all();
        }
    }

    /// Waits until every live node has ended its day.
    fn wait_day(&self) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let generation = s.0;
        s.1 += 1;
        self.release_if_all(&mut s);
        while s.0 == generation {
            s = self.wake.wait(s).unwrap_or_else(|p| p.into_inner());
        }
    }

    fn leave(&self) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.2 -= 1;
        self.release_if_all(&mut s);
    }
}

/// Leaves the baton when the node's thread ends, also by a panic.
struct Leave<'a>(&'a Baton);

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        self.0.leave();
    }
}

/// The lines of the job steps: only what the soak counts is kept.
#[derive(Debug, Default)]
struct SoakRelay {
    guard: Cell<u64>,
    last: RefCell<VecDeque<String>>,
}

impl Relay for SoakRelay {
    fn line(&self, text: &str) {
        if text.contains("MASS-DRAIN GUARD") {
            self.guard.set(self.guard.get() + 1);
        }
        let mut l = self.last.borrow_mut();
        if l.len() == 16 {
            l.pop_front();
        }
        l.push_back(text.to_owned());
    }
}

/// What every node shares.
struct Shared<'a> {
    opts: &'a Options,
    base: &'a Path,
    cluster: SharedCluster,
    baton: Baton,
    hours: u64,
    controller_down: BTreeSet<u64>,
    /// (node index, hour, kind) of each control.
    controls: Vec<(usize, u64, Control)>,
}

/// One node's life.
struct Life<'a> {
    sh: &'a Shared<'a>,
    index: usize,
    name: String,
    hw: RefCell<Hardware>,
    rng: RefCell<ChaCha8Rng>,
    hour: Cell<u64>,
    /// The node's wall clock (emulated).
    now_ms: &'a Cell<u64>,
    clock_error_ms: Cell<i64>,
    controller_down: Cell<bool>,
    words: Vec<String>,
    plugin: PluginArgs,
    proc_root: PathBuf,
    relay: SoakRelay,
    runner: SoakRunner<'a>,
    meet: FakeMeet,
    tally: RefCell<NodeTally>,
    recent: RefCell<VecDeque<(u64, Kind)>>,
    drained: Cell<bool>,
    in_job: Cell<bool>,
    pending_maintenance: Cell<Option<Kind>>,
    util: Cell<f64>,
    ber: Vec<f64>,
    control: Cell<Option<(Control, u64, usize)>>,
    control_due: Cell<Option<u64>>,
    /// The last control fault and the hour it was repaired.
    last_control: Cell<Option<(Control, u64)>>,
    /// The hour the running job started.
    job_start: Cell<u64>,
    jobs: Cell<u32>,
    over: Cell<bool>,
}

impl<'a> Life<'a> {
    fn note(&self, kind: Kind) {
        *self.tally.borrow_mut().events.entry(kind).or_default() += 1;
        let hour = self.hour.get();
        let mut recent = self.recent.borrow_mut();
        while recent.front().is_some_and(|(h, _)| h + 24 < hour) {
            recent.pop_front();
        }
        recent.push_back((hour, kind));
    }

    fn set_clock(&self) {
        let t = EPOCH_MS + self.hour.get() * HOUR_MS;
        self.now_ms
            .set((t as i64 + self.clock_error_ms.get()).max(0) as u64);
    }

    fn setup(&self, script: Script, job_id: u32) -> Setup {
        let inv = Invocation {
            script,
            job_id,
            node: self.name.clone(),
            nodes: self.name.clone(),
            option: FabricMode::Quick,
            job_uid: Some(nix::unistd::getuid().as_raw()),
            step_id: None,
            spares: 0,
            plugin_args: self.words.clone(),
        };
        Setup::resolve(inv, Instant::now(), &self.relay).expect("the soak's setup resolves")
    }

    /// Runs `f` on a job step of `setup`, then notes a drain or a resume.
    fn step(&self, setup: &Setup, phase: &'static str, f: impl FnOnce(&JobStep<'_>)) {
        let slurm = slurm_view(&self.sh.cluster, self.controller_down.get(), setup);
        let step = JobStep {
            setup,
            seams: Seams {
                slurm: &slurm,
                runner: &self.runner,
                meet: &self.meet,
                relay: &self.relay,
            },
        };
        f(&step);
        self.observe(phase);
    }

    /// Whether the node is drained by fabric-check now; notes a new drain or a resume.
    fn observe(&self, phase: &'static str) {
        let me = self
            .sh
            .cluster
            .nodes()
            .into_iter()
            .find(|n| n.name == self.name);
        let Some(me) = me else { return };
        let ours = me.is_drained() && fabric_core::drain::is_ours(&me.reason);
        let was = self.drained.replace(ours);
        if ours && !was {
            let hour = self.hour.get();
            let recent = self
                .recent
                .borrow()
                .iter()
                .filter(|(h, _)| h + 24 >= hour)
                .map(|(_, k)| *k)
                .collect();
            // A job that ran through a control fault holds its evidence until its end: a
            // drain by its watch or epilog after the repair is the same fault's.
            let spanned = self.last_control.get().filter(|&(_, repaired)| {
                matches!(phase, "watch" | "epilog") && self.job_start.get() <= repaired
            });
            let control = self
                .control
                .get()
                .map(|(c, _, _)| c)
                .or(spanned.map(|(c, _)| c));
            let d = Drain {
                node: self.name.clone(),
                hour,
                phase,
                reason: me.reason.clone(),
                recent,
                control,
            };
            let mut t = self.tally.borrow_mut();
            if control.is_some() {
                t.control_drains.push(d);
            } else {
                t.false_drains.push(d);
            }
        } else if was && !ours {
            self.tally.borrow_mut().resumes += 1;
        }
    }

    fn health(&self) {
        let Ok(mut setup) = HealthSetup::new(self.name.clone(), self.plugin.clone(), 3) else {
            return;
        };
        setup.tag_grace = Duration::from_secs(3600);
        let inv_setup = self.setup(Script::Prolog, 0);
        let slurm = slurm_view(&self.sh.cluster, self.controller_down.get(), &inv_setup);
        let _ = health::run(&setup, &slurm, &self.runner, &self.relay);
        self.tally.borrow_mut().health_runs += 1;
        self.observe("health");
    }

    /// The noise of one emulated hour, then the hour's maintenance and health check.
    fn hour_passes(&self) -> Result<(), SoakError> {
        let m = &self.sh.opts.model;
        let hour = self.hour.get();
        self.controller_down
            .set(self.sh.controller_down.contains(&hour));
        if self.controller_down.get() && self.index == 0 {
            self.note(Kind::ControllerRestart);
        }
        {
            let mut rng = self.rng.borrow_mut();
            let mut hw = self.hw.borrow_mut();
            let util = self.util.get();
            let mut any_symbols = false;
            let mut any_burst = false;
            for (i, p) in hw.ports.clone().iter().enumerate() {
                let bits = p.gbps * 1e9 * util * 3600.0;
                let n = poisson(&mut *rng, self.ber[i] * bits);
                any_symbols |= n > 0;
                hw.rise(i, "counters/symbol_error", n);
                if rng.random_bool(m.bursts_per_port_day / 24.0) {
                    let size = log_uniform(&mut *rng, m.burst_size.0, m.burst_size.1).round();
                    hw.rise(i, "counters/symbol_error", size as u64);
                    any_burst = true;
                }
                // Traffic, in the 4-octet units of the data counters.
                let words = (p.gbps * 1e9 / 32.0 * util * 3600.0) as u64;
                hw.rise(i, "counters/port_xmit_data", words);
                hw.rise(i, "counters/port_rcv_data", words);
                hw.rise(i, "counters/port_xmit_wait", words / 1000);
            }
            drop(hw);
            drop(rng);
            if any_symbols {
                self.note(Kind::SymbolErrors);
            }
            if any_burst {
                self.note(Kind::SymbolBurst);
            }
            if util > m.util_idle {
                self.note(Kind::BackgroundLoad);
            }
        }
        if self.in_job.get() {
            let n = poisson(&mut *self.rng.borrow_mut(), m.checkpoints_per_job_hour);
            for _ in 0..n {
                self.checkpoint();
            }
        }
        // Clock steps.
        if self
            .rng
            .borrow_mut()
            .random_bool(m.clock_steps_per_day / 24.0)
        {
            let mut rng = self.rng.borrow_mut();
            let s = log_uniform(&mut *rng, m.clock_step_s.0, m.clock_step_s.1);
            let sign = if rng.random_bool(0.5) { 1.0 } else { -1.0 };
            drop(rng);
            self.clock_error_ms
                .set(self.clock_error_ms.get() + (sign * s * 1000.0) as i64);
            self.note(Kind::ClockStep);
        }
        // Maintenance: reboots and reloads wait for the node to be idle (`scontrol reboot ASAP`).
        {
            let mut rng = self.rng.borrow_mut();
            if self.pending_maintenance.get().is_none() {
                if rng.random_bool(m.reboots_per_day / 24.0) {
                    self.pending_maintenance.set(Some(Kind::Reboot));
                } else if rng.random_bool(m.reloads_per_day / 24.0) {
                    self.pending_maintenance.set(Some(Kind::DriverReload));
                }
            }
        }
        if !self.in_job.get()
            && let Some(kind) = self.pending_maintenance.take()
        {
            self.maintenance(kind)?;
        }
        self.control_tick()?;
        self.set_clock();
        self.hw.borrow_mut().flush()?;
        let phase = (self.index as u64) % self.sh.opts.health_every_h;
        if hour % self.sh.opts.health_every_h == phase {
            self.health();
        }
        Ok(())
    }

    fn checkpoint(&self) {
        let m = &self.sh.opts.model;
        let mut rng = self.rng.borrow_mut();
        let pauses = log_uniform(&mut *rng, m.checkpoint_pauses.0, m.checkpoint_pauses.1) as u64;
        let cnps = log_uniform(&mut *rng, m.checkpoint_pauses.0, m.checkpoint_pauses.1) as u64;
        drop(rng);
        let mut hw = self.hw.borrow_mut();
        hw.rise_ethtool("rx_prio3_pause", pauses);
        hw.rise_ethtool("tx_prio3_pause", pauses / 2);
        hw.rise_ethtool("rx_prio3_pause_duration", pauses * 20);
        hw.rise_ethtool("tx_prio3_pause_duration", pauses * 10);
        for (i, p) in hw.ports.clone().iter().enumerate() {
            if p.infiniband {
                hw.rise(i, "counters/port_xmit_wait", pauses * 100);
            } else {
                hw.rise(i, "hw_counters/np_cnp_sent", cnps);
                hw.rise(i, "hw_counters/rp_cnp_handled", cnps / 2);
            }
        }
        drop(hw);
        self.note(Kind::CheckpointBurst);
    }

    /// A reboot or a driver reload of an idle node.
    fn maintenance(&self, kind: Kind) -> Result<(), SoakError> {
        let m = &self.sh.opts.model;
        self.note(kind);
        self.hw.borrow_mut().reset_counters()?;
        let race = m.boot_race
            && match kind {
                Kind::Reboot => true,
                _ => self.rng.borrow_mut().random_bool(m.reload_race),
            };
        if kind == Kind::Reboot {
            // The clock comes up off by the RTC's error; the health check at slurmd's start
            // runs before NTP steps it.
            let mut rng = self.rng.borrow_mut();
            let e = rng.random_range(-m.boot_clock_error_s..=m.boot_clock_error_s);
            drop(rng);
            self.clock_error_ms.set((e * 1000.0) as i64);
        }
        if !race && kind == Kind::Reboot {
            // The health check at slurmd's start, every port ACTIVE by then.
            self.set_clock();
            self.health();
        }
        if race {
            let mut rng = self.rng.borrow_mut();
            let at = rng.random_range(m.boot_health_at_s.0..=m.boot_health_at_s.1);
            let hw = self.hw.borrow();
            let mut training = Vec::new();
            for (i, p) in hw.ports.iter().enumerate() {
                let active_at = rng.random_range(m.port_active_at_s.0..=m.port_active_at_s.1);
                if p.infiniband && active_at > at {
                    training.push(i);
                }
            }
            drop(rng);
            for &i in &training {
                hw.set_state(i, "2: INIT", "5: LinkUp")?;
            }
            drop(hw);
            if !training.is_empty() {
                self.note(Kind::BootRace);
            }
            // After a reboot, slurmd's start `at` seconds after boot: the health check sees that
            // uptime. A driver reload leaves the uptime long: its race is not a boot's.
            if kind == Kind::Reboot {
                set_uptime(&self.proc_root, at)?;
            }
            self.set_clock();
            self.health();
            set_uptime(&self.proc_root, LONG_UP_S)?;
            let hw = self.hw.borrow();
            for &i in &training {
                hw.set_state(i, "4: ACTIVE", "5: LinkUp")?;
            }
        }
        if kind == Kind::Reboot {
            self.clock_error_ms.set(0);
            self.note(Kind::ClockStep);
        }
        Ok(())
    }

    /// Injects, repairs or gives up on this node's control fault.
    fn control_tick(&self) -> Result<(), SoakError> {
        let hour = self.hour.get();
        if let Some((c, since, port)) = self.control.get() {
            let caught = self.drained.get();
            if caught || hour >= since + 48 {
                if !caught {
                    self.tally
                        .borrow_mut()
                        .controls_missed
                        .push((self.name.clone(), c));
                }
                if c == Control::PortDown {
                    self.hw.borrow().set_state(port, "4: ACTIVE", "5: LinkUp")?;
                }
                self.control.set(None);
                self.last_control.set(Some((c, hour)));
            } else if c == Control::SymbolStorm {
                self.hw
                    .borrow_mut()
                    .rise(port, "counters/symbol_error", 3000);
            }
            return Ok(());
        }
        for &(node, at, c) in &self.sh.controls {
            // On a node drained already, the fault waits for its resume.
            let due = at <= hour && self.control_due.get() == Some(at);
            if node == self.index && (at == hour || due) {
                if self.drained.get() {
                    self.control_due.set(Some(at));
                    continue;
                }
                self.control_due.set(None);
                let port = self.rng.borrow_mut().random_range(0..8);
                match c {
                    Control::PortDown => {
                        self.hw.borrow().set_state(port, "1: DOWN", "3: Disabled")?
                    }
                    Control::LinkFlap => self.hw.borrow_mut().rise(port, "counters/link_downed", 1),
                    Control::SymbolStorm => {
                        self.hw
                            .borrow_mut()
                            .rise(port, "counters/symbol_error", 3000);
                    }
                }
                self.control.set(Some((c, hour, port)));
                self.tally
                    .borrow_mut()
                    .controls_injected
                    .push((self.name.clone(), c));
            }
        }
        Ok(())
    }

    /// Moves this node to its next hour (waiting at the day's end for the others); `false` at
    /// the end of the soak.
    fn next_hour(&self) -> Result<bool, SoakError> {
        let next = self.hour.get() + 1;
        if next >= self.sh.hours {
            self.over.set(true);
            return Ok(false);
        }
        if next.is_multiple_of(24) {
            self.sh.baton.wait_day();
        }
        self.hour.set(next);
        self.hour_passes()?;
        Ok(true)
    }

    /// One job: prolog, the watch through its hours, epilog.
    fn job(&self, hours: u64) -> Result<(), SoakError> {
        let n = self.jobs.get() + 1;
        self.jobs.set(n);
        let job_id = (self.index as u32 + 1) * 1_000_000 + n;
        self.tally.borrow_mut().jobs += 1;
        let setup = self.setup(Script::Prolog, job_id);
        let mut exit = JobStepExit::Proceed;
        self.step(&setup, "prolog", |s| exit = prolog::run(s));
        if exit != JobStepExit::Proceed {
            // The job is requeued elsewhere; this node's snapshot goes with the epilog that
            // Slurm still runs.
            let setup = self.setup(Script::Epilog, job_id);
            self.step(&setup, "epilog", |s| {
                epilog::run(s);
            });
            self.remove_spool(job_id);
            return Ok(());
        }
        self.in_job.set(true);
        self.job_start.set(self.hour.get());
        {
            let m = &self.sh.opts.model;
            let u = self
                .rng
                .borrow_mut()
                .random_range(m.util_job.0..=m.util_job.1);
            self.util.set(u);
        }
        let end = self.hour.get() + hours;
        self.watch(&setup, end)?;
        self.in_job.set(false);
        self.util.set(self.sh.opts.model.util_idle);
        if self.over.get() {
            return Ok(());
        }
        let setup = self.setup(Script::Epilog, job_id);
        self.step(&setup, "epilog", |s| {
            epilog::run(s);
        });
        self.remove_spool(job_id);
        Ok(())
    }

    fn remove_spool(&self, job_id: u32) {
        let _ = std::fs::remove_dir_all(self.plugin.spool_dir.join(job_id.to_string()));
    }

    /// The in-job watch over the job's hours, through the real loop and its decisions.
    fn watch(&self, setup: &Setup, end: u64) -> Result<(), SoakError> {
        let snapshot = setup
            .state_dir
            .join(format!("job-{}.json", setup.inv.job_id));
        let Ok((base, at_start)) = watch::load_start(&snapshot) else {
            while self.hour.get() < end {
                if !self.next_hour()? {
                    return Ok(());
                }
            }
            return Ok(());
        };
        let started_at_s = base.counters.taken_unix_ms / 1000;
        let mut sampler = SoakSampler {
            input: ProbeInput {
                node: self.name.clone(),
                roots: Roots::for_sysfs(
                    self.hw.borrow().root.clone(),
                    self.proc_root.clone(),
                    None,
                ),
                expect: fabric_core::config::Config::default().for_node(&self.name),
                baseline: None,
                bom_pin: None,
                // As `fabric-check watch` does: the prolog's known inventory, read only.
                known: fabric_core::probe::known::load_for_probe(
                    &fabric_core::probe::known::known_path(&setup.state_dir),
                    &self.name,
                )
                .0,
                second_look: None,
            },
            base,
            now_ms: self.now_ms,
            samples: 0,
        };
        let act = SoakAct {
            cluster: &self.sh.cluster,
            controller_down: &self.controller_down,
            runner: &self.runner,
            meet: &self.meet,
            relay: &self.relay,
        };
        let failure: RefCell<Option<SoakError>> = RefCell::new(None);
        let mut advance = || {
            self.observe("watch");
            for _ in 0..self.sh.opts.watch_every_h {
                if self.hour.get() >= end {
                    return false;
                }
                match self.next_hour() {
                    Ok(true) => {}
                    Ok(false) => return false,
                    Err(e) => {
                        *failure.borrow_mut() = Some(e);
                        return false;
                    }
                }
            }
            self.hour.get() < end
        };
        let mut pace = SoakPace {
            advance: &mut advance,
            ended: false,
        };
        watch::run(
            setup,
            Duration::from_secs(1),
            started_at_s,
            &at_start,
            &mut sampler,
            &act,
            &mut pace,
            None,
            None,
        );
        self.observe("watch");
        self.tally.borrow_mut().watch_samples += sampler.samples;
        if let Some(e) = failure.into_inner() {
            return Err(e);
        }
        // Hours left over when the job's end fell between two samples.
        while self.hour.get() < end && !self.over.get() {
            if !self.next_hour()? {
                break;
            }
        }
        Ok(())
    }

    fn live(&self) -> Result<(), SoakError> {
        self.hour_passes()?;
        let mut next_job = self.rng.borrow_mut().random_range(0..4u64);
        loop {
            if !self.drained.get() && self.hour.get() >= next_job {
                // Job lengths from 2 to 48 hours, log-uniform.
                let hours = log_uniform(&mut *self.rng.borrow_mut(), 2.0, 48.0).round() as u64;
                self.job(hours)?;
                if self.over.get() {
                    break;
                }
                next_job = self.hour.get() + self.rng.borrow_mut().random_range(0..3u64);
                continue;
            }
            if !self.next_hour()? {
                break;
            }
        }
        let mut t = self.tally.borrow_mut();
        t.probes = self.runner.probes.get();
        t.guard_refusals = self.relay.guard.get();
        Ok(())
    }
}

/// Runs the soak in `base` (an empty folder).
pub fn run_in(opts: &Options, base: &Path) -> Result<Outcome, SoakError> {
    let t0 = Instant::now();
    let folder = |p: PathBuf| {
        std::fs::create_dir_all(&p).map_err(|source| SoakError::Folder {
            path: p.clone(),
            source,
        })?;
        Ok::<PathBuf, SoakError>(p)
    };
    folder(base.join("spool"))?;
    let proc_root = folder(base.join("proc"))?;
    let nodes = opts.nodes.max(1);
    let days = opts.node_days.div_ceil(nodes as u64).max(1);
    let hours = days * 24;
    let names: Vec<String> = (1..=nodes).map(|i| format!("gpu{i:03}")).collect();
    let name_refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let mut rng = ChaCha8Rng::seed_from_u64(opts.seed);
    let mut controller_down = BTreeSet::new();
    for h in 0..hours {
        if rng.random_bool(opts.model.controller_restarts_per_day / 24.0) {
            controller_down.insert(h);
        }
    }
    let controls = (0..opts.controls)
        .map(|i| {
            let span = hours / opts.controls.max(1) as u64;
            let at = span * i as u64
                + rng
                    .random_range(0..span.max(1))
                    .min(span.saturating_sub(49));
            (
                rng.random_range(0..nodes),
                at,
                Control::ALL[i % Control::ALL.len()],
            )
        })
        .collect();
    let sh = Shared {
        opts,
        base,
        cluster: SharedCluster::new(&name_refs, Duration::from_millis(1)),
        baton: Baton::new(nodes),
        hours,
        controller_down,
        controls,
    };
    let seeds: Vec<u64> = (0..nodes).map(|_| rng.random()).collect();
    let mut out = Outcome {
        node_days: days * nodes as u64,
        ..Outcome::default()
    };
    let results: Vec<Result<NodeTally, SoakError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = names
            .iter()
            .enumerate()
            .map(|(i, name)| {
                let sh = &sh;
                let proc_root = proc_root.clone();
                let seed = seeds[i];
                std::thread::Builder::new()
                    .name(name.clone())
                    .spawn_scoped(scope, move || {
                        let _leave = Leave(&sh.baton);
                        node_life(sh, i, name, seed, &proc_root)
                    })
                    .expect("a thread for each node")
            })
            .collect();
        handles
            .into_iter()
            .zip(&names)
            .map(|(h, n)| {
                h.join()
                    .unwrap_or_else(|_| Err(SoakError::Panicked(n.clone())))
            })
            .collect()
    });
    for r in results {
        out.absorb(r?);
    }
    out.elapsed = t0.elapsed();
    Ok(out)
}

/// The uptime of a node that has not rebooted lately.
const LONG_UP_S: f64 = 30.0 * 86_400.0;

/// Writes `<proc>/uptime` as the kernel does (`SECONDS IDLE_SECONDS`).
fn set_uptime(proc_root: &Path, up_s: f64) -> Result<(), SoakError> {
    let path = proc_root.join("uptime");
    std::fs::write(&path, format!("{up_s:.2} 0.00\n"))
        .map_err(|source| SoakError::Folder { path, source })
}

fn node_life(
    sh: &Shared<'_>,
    index: usize,
    name: &str,
    seed: u64,
    procs: &Path,
) -> Result<NodeTally, SoakError> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let node_dir = sh.base.join(name);
    // The node's own procfs: its `uptime`, which the probe reads (a port still training within
    // `ib_port_state::BOOT_GRACE_S` of boot is a warn) and the soak sets around a reboot.
    let proc_root = procs.join(name);
    std::fs::create_dir_all(&proc_root).map_err(|source| SoakError::Folder {
        path: proc_root.clone(),
        source,
    })?;
    set_uptime(&proc_root, LONG_UP_S)?;
    let proc_root = proc_root.as_path();
    let mut hw = Hardware::write("ib8-healthy", &node_dir.join("sysfs"))?;
    let m = &sh.opts.model;
    let ber = hw
        .ports
        .iter()
        .map(|_| log_uniform(&mut rng, m.ber_range.0, m.ber_range.1))
        .collect();
    let saturated = rng.random_bool(m.saturated_nodes);
    if saturated {
        // What a ConnectX-7 port showed in the wild (gpud PR 943's counter dump).
        let port = rng.random_range(0..hw.ports.len());
        hw.set_counter(port, "counters/link_downed", 255)?;
        hw.set_counter(port, "counters/port_xmit_discards", 65_535)?;
        hw.set_counter(port, "counters/port_xmit_wait", 4_294_967_295)?;
    }
    let base = sh.base.display();
    let words = vec![
        format!("state_dir={base}/%n/state"),
        format!("spool_dir={base}/spool"),
        format!("sysfs_root={base}/%n/sysfs"),
        format!("config={base}/%n/none.toml"),
        "policy=enforce".to_owned(),
    ];
    let (plugin, problems) = PluginArgs::parse(words.iter().map(String::as_str));
    assert!(problems.is_empty(), "the soak's plugin words: {problems:?}");
    let now_ms = Cell::new(EPOCH_MS);
    let life = Life {
        sh,
        index,
        name: name.to_owned(),
        hw: RefCell::new(hw),
        rng: RefCell::new(rng),
        hour: Cell::new(0),
        now_ms: &now_ms,
        clock_error_ms: Cell::new(0),
        controller_down: Cell::new(false),
        words,
        plugin,
        proc_root: proc_root.to_owned(),
        relay: SoakRelay::default(),
        runner: SoakRunner {
            now_ms: &now_ms,
            proc_root,
            watches_started: Cell::new(0),
            probes: Cell::new(0),
        },
        meet: FakeMeet::default(),
        tally: RefCell::new(NodeTally::default()),
        recent: RefCell::new(VecDeque::new()),
        drained: Cell::new(false),
        in_job: Cell::new(false),
        pending_maintenance: Cell::new(None),
        util: Cell::new(m.util_idle),
        ber,
        control: Cell::new(None),
        control_due: Cell::new(None),
        last_control: Cell::new(None),
        job_start: Cell::new(0),
        jobs: Cell::new(0),
        over: Cell::new(false),
    };
    if saturated {
        life.note(Kind::Saturation);
    }
    life.live()?;
    Ok(life.tally.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn short(seed: u64) -> Options {
        let mut o = Options::new(8, seed);
        o.nodes = 2;
        o.controls = 2;
        o
    }

    #[test]
    fn a_short_soak_of_benign_noise_drains_nothing_and_drains_every_control_fault() {
        let mut opts = short(7);
        // The boot race is the one noise the product drains on today (docs/checks.md); the
        // rest must never drain.
        opts.model.boot_race = false;
        opts.model.reboots_per_day = 0.5;
        opts.model.reloads_per_day = 0.25;
        opts.model.controller_restarts_per_day = 1.0;
        opts.model.clock_steps_per_day = 1.0;
        let dir = tempfile::tempdir().unwrap();
        let out = run_in(&opts, dir.path()).unwrap();
        let report = crate::report::text(&out);
        assert_eq!(out.node_days, 8, "{report}");
        assert!(out.false_drains.is_empty(), "{report}");
        assert_eq!(out.controls_injected.len(), 2, "{report}");
        assert!(out.control_drains.len() >= 2, "{report}");
        assert!(out.controls_missed.is_empty(), "{report}");
        for k in [Kind::SymbolErrors, Kind::CheckpointBurst, Kind::Reboot] {
            assert!(
                out.events.get(&k).copied().unwrap_or(0) > 0,
                "no {k:?}: {report}"
            );
        }
        assert!(
            report.ends_with(
                "soak: node_days 8, false_drains 0, per_1000_node_days 0.000, upper95 374.467\n"
            ),
            "{report}"
        );
    }

    #[test]
    fn the_same_seed_gives_the_same_soak() {
        let run = || {
            let dir = tempfile::tempdir().unwrap();
            let mut o = short(3);
            o.node_days = 4;
            o.controls = 1;
            let out = run_in(&o, dir.path()).unwrap();
            (
                out.jobs,
                out.probes,
                out.watch_samples,
                out.events,
                out.control_drains.len(),
            )
        };
        assert_eq!(run(), run());
    }
}
