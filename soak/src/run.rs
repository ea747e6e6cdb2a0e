//! The soak's loop: every node lives its emulated days in its own thread (jobs with their
//! prolog, in-job watch and epilog; periodic health checks; noise), side by side (as many at
//! once as [`Options::cores`]), waiting for each other at each emulated day's end. The cluster's node states (drains, the mass-drain
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

use crate::node::{Change, Hardware, HardwareError, Timeline};
use crate::noise::{Kind, Model};
use crate::seams::{ClockedSampler, SoakAct, SoakPace, SoakRunner, slurm_view};
use crate::stats::{log_uniform, poisson};
use fabric_core::jobstep::health::{self, HealthSetup};
use fabric_core::jobstep::watch::QuickSampler;
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
    /// Node threads that run at once (the others wait for a turn): the cores to use.
    pub cores: usize,
    /// Hours between two periodic health checks of a quiet node (no event in the last
    /// [`Options::hot_min`] minutes).
    pub health_every_h: u64,
    /// Minutes between two health checks after an event (`HealthCheckInterval`), each node on
    /// its own phase.
    pub health_grid_min: u64,
    /// How long after an event health runs at [`Options::health_grid_min`].
    pub hot_min: u64,
    /// Seconds of 1 s watch samples from an event during a job (and from a job's start).
    pub watch_window_s: u64,
    /// Real faults injected as controls (spread over the run).
    pub controls: usize,
    /// Whether the admin accepts the inventory of a node with an unprovisioned port at its
    /// installation (else it drains at its first probe and stays drained).
    pub accept_unprovisioned: bool,
    /// Runs this node's life alone (`gpu017`, as the report names it), the others' left out: to
    /// repeat one node's days of a run with the same seed (its draws do not depend on the
    /// others').
    pub only_node: Option<String>,
    /// Ends every node's life at this emulated day (the run's schedule stays that of
    /// `node_days`): with [`Options::only_node`], to look at one finding again quickly.
    pub until_day: Option<u64>,
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
            cores: std::thread::available_parallelism().map_or(2, usize::from),
            health_every_h: 4,
            health_grid_min: 5,
            hot_min: 15,
            watch_window_s: 60,
            accept_unprovisioned: true,
            controls: (node_days / 1000).max(Control::ALL.len() as u64) as usize,
            only_node: None,
            until_day: None,
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
    /// A node's thread could not have a file table of its own.
    #[error("cannot give a node's thread its own file table: {0}")]
    Thread(String),
    /// `only_node` names no node of the run.
    #[error("no node {name:?} in this run: name one of gpu001 to {last}")]
    NoSuchNode {
        /// The name asked for.
        name: String,
        /// The run's last node.
        last: String,
    },
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
    /// A GPU fell off the bus and stays gone (its `bus/pci/devices` entry and function folder).
    GpuGone,
    /// A compute rail flipped to Ethernet and down.
    RailEthernet,
    /// A symbol-error storm late in a long job (12 h or more into it).
    LateStorm,
    /// A compute rail's PCIe link trained x8 in its x16 slot.
    PcieDegraded,
}

impl Control {
    /// Every kind, injected in turn.
    pub const ALL: [Control; 7] = [
        Control::PortDown,
        Control::LinkFlap,
        Control::SymbolStorm,
        Control::GpuGone,
        Control::RailEthernet,
        Control::LateStorm,
        Control::PcieDegraded,
    ];

    /// Its name.
    pub fn as_str(self) -> &'static str {
        match self {
            Control::PortDown => "port_down",
            Control::LinkFlap => "link_flap",
            Control::SymbolStorm => "symbol_storm",
            Control::GpuGone => "gpu_gone",
            Control::RailEthernet => "rail_ethernet",
            Control::LateStorm => "late_storm",
            Control::PcieDegraded => "pcie_degraded",
        }
    }

    /// Whether the fault stays until repaired (a flap is over once it happened): the node must
    /// stay drained through health checks while it is there.
    pub fn lasting(self) -> bool {
        self != Control::LinkFlap
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
    /// Drains while a driver reload really had the node's fabric out (`class/infiniband`
    /// empty, or a port not yet ACTIVE again): the prolog or health failed as it should (issue
    /// 40: "a driver reload that outlasts the budget fails the prolog"). Not false drains as
    /// long as the node came back by itself; one still drained a day after its reload was over
    /// is counted false as well.
    pub outage_drains: Vec<Drain>,
    /// For each outage drain that ended, minutes from the reload's end (every port ACTIVE) to
    /// the resume by `health`.
    pub outage_back_min: Vec<f64>,
    /// Outage drains still held a day after their reload was over (among the false drains).
    pub outage_overdue: u64,
    /// Control faults injected, by kind.
    pub controls_injected: Vec<(String, Control)>,
    /// Control faults never drained within two days: node, fault, the hour it was injected,
    /// its port.
    pub controls_missed: Vec<(String, Control, u64, usize)>,
    /// Nodes put back into service by health while their control fault was still there.
    pub false_resumes: Vec<(String, Control, u64)>,
    /// Noise events, by kind.
    pub events: BTreeMap<Kind, u64>,
    /// Jobs run (prologs).
    pub jobs: u64,
    /// Periodic and boot-time health checks.
    pub health_runs: u64,
    /// In-job watch samples.
    pub watch_samples: u64,
    /// Of those, quick samples that read nothing: the tree as the last full sample found it.
    pub watch_unread: u64,
    /// Probe runs of the prolog, the epilog and health.
    pub probes: u64,
    /// Their looks (a second look is a look), and those whose tree had not changed since the
    /// node's last look, which took that look's snapshot ([`SoakRunner`]).
    pub looks: (u64, u64),
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
        self.outage_drains.extend(o.outage_drains);
        self.outage_back_min.extend(o.outage_back_min);
        self.outage_overdue += o.outage_overdue;
        self.controls_injected.extend(o.controls_injected);
        self.controls_missed.extend(o.controls_missed);
        self.false_resumes.extend(o.false_resumes);
        for (k, n) in o.events {
            *self.events.entry(k).or_default() += n;
        }
        self.jobs += o.jobs;
        self.health_runs += o.health_runs;
        self.watch_samples += o.watch_samples;
        self.watch_unread += o.watch_unread;
        self.probes += o.probes;
        self.looks.0 += o.looks.0;
        self.looks.1 += o.looks.1;
        self.guard_refusals += o.guard_refusals;
        self.resumes += o.resumes;
    }
}

#[derive(Debug, Default)]
struct NodeTally {
    false_drains: Vec<Drain>,
    control_drains: Vec<Drain>,
    outage_drains: Vec<Drain>,
    outage_back_min: Vec<f64>,
    outage_overdue: u64,
    controls_injected: Vec<(String, Control)>,
    controls_missed: Vec<(String, Control, u64, usize)>,
    false_resumes: Vec<(String, Control, u64)>,
    events: BTreeMap<Kind, u64>,
    jobs: u64,
    health_runs: u64,
    watch_samples: u64,
    watch_unread: u64,
    probes: u64,
    looks: (u64, u64),
    guard_refusals: u64,
    resumes: u64,
}

/// The day's end: node threads run their day side by side and wait here for each other, so
/// no node runs more than a day ahead of another (the mass-drain guard sees the cluster's
/// drains of the same day). A thread that ends, also by a panic, leaves it.
///
/// It also hands out the **turns**: a node thread runs only while it holds one of
/// [`Options::cores`] turns, which it gives back while it waits for the day's end and when it
/// ends. With twenty node threads on two cores, all runnable at once, the kernel switched
/// between them every few milliseconds and each probe's thousand `openat`/`read`/`close`
/// went through a file table the running threads shared; with a turn each, a node runs its day
/// on its core (measured on the probe's gather, twenty threads on two cores: 3.0 ms of CPU a
/// gather free-running, 2.1 ms taking turns with a file table of its own, 1.9 ms alone).
#[derive(Debug)]
struct Baton {
    /// (generation, waiting, alive).
    state: Mutex<(u64, usize, usize)>,
    wake: Condvar,
    /// Turns not taken.
    turns: Mutex<usize>,
    turn_free: Condvar,
}

std::thread_local! {
    /// Whether this node thread holds a turn of the [`Baton`].
    static HOLDS_TURN: Cell<bool> = const { Cell::new(false) };
}

impl Baton {
    fn new(n: usize, turns: usize) -> Self {
        Self {
            state: Mutex::new((0, 0, n)),
            wake: Condvar::new(),
            turns: Mutex::new(turns.max(1)),
            turn_free: Condvar::new(),
        }
    }

    /// Waits for a turn to run.
    fn take_turn(&self) {
        if HOLDS_TURN.get() {
            return;
        }
        let mut free = self.turns.lock().unwrap_or_else(|p| p.into_inner());
        while *free == 0 {
            free = self.turn_free.wait(free).unwrap_or_else(|p| p.into_inner());
        }
        *free -= 1;
        HOLDS_TURN.set(true);
    }

    /// Gives this thread's turn back.
    fn give_turn(&self) {
        if !HOLDS_TURN.replace(false) {
            return;
        }
        *self.turns.lock().unwrap_or_else(|p| p.into_inner()) += 1;
        self.turn_free.notify_one();
    }

    fn release_if_all(&self, s: &mut (u64, usize, usize)) {
        if s.1 >= s.2 && s.1 > 0 {
            s.0 += 1;
            s.1 = 0;
            self.wake.notify_all();
        }
    }

    /// Waits until every live node has ended its day (its turn given back meanwhile).
    fn wait_day(&self) {
        self.give_turn();
        {
            let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
            let generation = s.0;
            s.1 += 1;
            self.release_if_all(&mut s);
            while s.0 == generation {
                s = self.wake.wait(s).unwrap_or_else(|p| p.into_inner());
            }
        }
        self.take_turn();
    }

    fn leave(&self) {
        self.give_turn();
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.2 -= 1;
        self.release_if_all(&mut s);
    }
}

/// Leaves the baton (and gives the turn back) when the node's thread ends, also by a panic.
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

/// The running job's watch between its windows.
#[derive(Clone)]
struct JobWatch {
    setup: Setup,
    base: fabric_core::probe::Baseline,
    base_taken_ms: u64,
    at_start: Vec<fabric_proto::verdict::Finding>,
    started_at_s: u64,
}

/// Something that happens at a moment of an hour.
#[derive(Debug, Clone, Copy)]
enum Event {
    /// A symbol-error burst on a port.
    Burst(usize, u64),
    /// Port counters cleared.
    Reset,
    /// The 32-bit hardware counter wraps.
    Wrap,
    /// One file fails to read for a while (ms).
    ReadError(u64),
    /// One HCA's files fail for a while (ms).
    FirmwareReset(u64),
    /// A driver reload of the idle node: `class/infiniband` empty for a while (ms).
    Reload(u64),
}

/// Symbol errors at most in any window (`ib.counters`: 120 an hour, a shorter window judged as
/// an hour), less a margin for the next hour's background lump.
fn symbol_bound(window_ms: u64) -> f64 {
    120.0 * (window_ms as f64 / HOUR_MS as f64).max(1.0) - 45.0
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
    clock_error_ms: &'a Cell<i64>,
    /// The cluster's time at this node now (ms since the epoch).
    cluster_ms: Cell<u64>,
    /// The node's tree changes still to come.
    timeline: &'a Timeline,
    /// Where this node's health checks fall in their grid (ms into it).
    grid_phase_ms: u64,
    /// Health runs on its grid until then (cluster ms): an event happened.
    hot_until: Cell<u64>,
    /// The hour of the last health check.
    last_health_hour: Cell<Option<u64>>,
    /// The running job's watch: its setup, the prolog's snapshot (rebased), findings at start.
    job_watch: RefCell<Option<JobWatch>>,
    /// Per port, symbol errors added in the last two hours: (cluster ms, count).
    ledger: RefCell<Vec<VecDeque<(u64, u64)>>>,
    /// The port playing a noisy management NIC, if any.
    mgmt_port: Option<usize>,
    /// The port whose 32-bit hardware counter wraps.
    wrap_port: usize,
    /// When the control fault was caught (drained), and whether a late storm waits for a job.
    caught_at: Cell<Option<u64>>,
    /// The running job's last hour.
    job_end: Cell<u64>,
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
    /// Per port: its symbol BER and whether it is a PAM4 background.
    ber: Vec<(f64, bool)>,
    control: Cell<Option<(Control, u64, usize)>>,
    /// Until when (cluster ms) a driver reload has the fabric out: its devices gone, then its
    /// ports training until the last is ACTIVE.
    out_until_ms: Cell<u64>,
    /// An outage drain not yet resumed: the drain, and the end of its reload (cluster ms).
    outage: RefCell<Option<(Drain, u64)>>,
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

    /// Sets the cluster's time (and the node's clock, with its error).
    fn set_cluster(&self, t: u64) {
        self.cluster_ms.set(t);
        self.now_ms
            .set((t as i64 + self.clock_error_ms.get()).max(0) as u64);
    }

    /// Moves time on to cluster time `to`: the tree's scheduled changes happen, and health runs
    /// at each point of its grid passed while the node is hot (after an event).
    fn pass_to(&self, to: u64) -> Result<(), SoakError> {
        let grid = self.sh.opts.health_grid_min.max(1) * 60_000;
        loop {
            let from = self.cluster_ms.get();
            let next =
                (from.saturating_sub(self.grid_phase_ms) / grid + 1) * grid + self.grid_phase_ms;
            if next > to || next >= self.hot_until.get() {
                break;
            }
            self.set_cluster(next);
            self.timeline.until(next)?;
            self.storm_goes_on(grid)?;
            self.health();
        }
        self.set_cluster(to.max(self.cluster_ms.get()));
        self.timeline.until(self.cluster_ms.get())?;
        Ok(())
    }

    /// A storm rises between the hour's lumps too (3000 an hour, pro rata over `ms`), so that
    /// health's 5-minute grid after it sees it as a real node would.
    fn storm_goes_on(&self, ms: u64) -> Result<(), SoakError> {
        if let Some((Control::SymbolStorm | Control::LateStorm, _, port)) = self.control.get() {
            let hw = self.hw.borrow();
            let rel = format!(
                "class/infiniband/{}/ports/1/counters/symbol_error",
                hw.ports[port].dev
            );
            let now: u64 = hw.read_rel(&rel)?.trim().parse().unwrap_or(0);
            let by = 3000 * ms / HOUR_MS;
            hw.write_rel(&rel, &format!("{}\n", (now + by).min(65_535)))?;
        }
        Ok(())
    }

    /// Symbol errors added to `port` at cluster time `t` (for the bursts' bound).
    fn ledger_add(&self, port: usize, t: u64, n: u64) {
        if n == 0 {
            return;
        }
        let mut l = self.ledger.borrow_mut();
        let q = &mut l[port];
        while q.front().is_some_and(|(at, _)| at + 49 * HOUR_MS < t) {
            q.pop_front();
        }
        q.push_back((t, n));
    }

    /// The largest burst `port` can take at `t` and stay under `ib.counters`' bound over every
    /// window that ends then.
    fn burst_room(&self, port: usize, t: u64) -> u64 {
        let l = self.ledger.borrow();
        let mut sum = 0u64;
        let mut room = symbol_bound(0);
        for &(at, n) in l[port].iter().rev() {
            sum += n;
            room = room.min(symbol_bound(t.saturating_sub(at)) - sum as f64);
        }
        room.max(0.0) as u64
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
        // This node only (every node's state was copied at each watch sample before).
        let Some(me) = self.sh.cluster.node(&self.name) else {
            return;
        };
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
            // A storm's counters stay in the delta of a probe whose baseline predates the
            // repair: a drain for them within a health period after it is the same fault's.
            let tail = self.last_control.get().filter(|&(c, repaired)| {
                matches!(
                    c,
                    Control::SymbolStorm | Control::LateStorm | Control::LinkFlap
                ) && hour <= repaired + self.sh.opts.health_every_h + 1
                    && me.reason.contains("ib.counters")
            });
            let control = self
                .control
                .get()
                .map(|(c, _, _)| c)
                .or(spanned.map(|(c, _)| c))
                .or(tail.map(|(c, _)| c));
            let d = Drain {
                node: self.name.clone(),
                hour,
                phase,
                reason: me.reason.clone(),
                recent,
                control,
            };
            // The fault in place now is caught.
            if self.control.get().is_some() && self.caught_at.get().is_none() {
                self.caught_at.set(Some(hour));
            }
            let mut t = self.tally.borrow_mut();
            if control.is_some() {
                t.control_drains.push(d);
            } else if self.cluster_ms.get() <= self.out_until_ms.get() {
                t.outage_drains.push(d.clone());
                *self.outage.borrow_mut() = Some((d, self.out_until_ms.get()));
            } else {
                t.false_drains.push(d);
            }
        } else if was && !ours {
            let mut t = self.tally.borrow_mut();
            t.resumes += 1;
            if let Some((_, over_ms)) = self.outage.borrow_mut().take() {
                t.outage_back_min
                    .push(self.cluster_ms.get().saturating_sub(over_ms) as f64 / 60_000.0);
            }
            if let Some((c, _, _)) = self.control.get()
                && c.lasting()
                && self.caught_at.get().is_some()
            {
                t.false_resumes
                    .push((self.name.clone(), c, self.hour.get()));
            }
        }
    }

    fn health(&self) {
        let Ok(mut setup) = HealthSetup::new(self.name.clone(), self.plugin.clone(), 3) else {
            return;
        };
        // The tag check judges ages on the real clock, and the soak's hours pass in
        // milliseconds: with any grace no tag written this run was ever old enough to be asked
        // of accounting, and every node's ledger grew for the whole run (950 KB a node an hour
        // into a 150,000 node-day run, read whole at each health check: the cost of a node-day
        // grew with the run's length). With none, each check asks accounting (the shared
        // cluster's, which knows every job) and the ledger keeps only the jobs since the last.
        setup.tag_grace = Duration::ZERO;
        let inv_setup = self.setup(Script::Prolog, 0);
        let slurm = slurm_view(&self.sh.cluster, self.controller_down.get(), &inv_setup);
        let _ = health::run(&setup, &slurm, &self.runner, &self.relay);
        self.last_health_hour.set(Some(self.hour.get()));
        self.tally.borrow_mut().health_runs += 1;
        self.observe("health");
    }

    /// The noise of one emulated hour, its events at their moments (with the watch's windows
    /// and health's grid around them), then the hour's maintenance and health check.
    fn hour_passes(&self) -> Result<(), SoakError> {
        let m = &self.sh.opts.model;
        let hour = self.hour.get();
        let start = EPOCH_MS + hour * HOUR_MS;
        if self.cluster_ms.get() < start {
            self.pass_to(start)?;
        }
        self.controller_down
            .set(self.sh.controller_down.contains(&hour));
        if self.controller_down.get() && self.index == 0 {
            self.note(Kind::ControllerRestart);
        }
        let mut events: Vec<(u64, Event)> = Vec::new();
        {
            let mut rng = self.rng.borrow_mut();
            let mut hw = self.hw.borrow_mut();
            let util = self.util.get();
            let mut any_symbols = false;
            let mut any_pam4 = false;
            for (i, p) in hw.ports.clone().iter().enumerate() {
                let bits = p.gbps * 1e9 * util * 3600.0;
                let (ber, pam4) = self.ber[i];
                let n = poisson(&mut *rng, ber * bits);
                any_symbols |= n > 0 && !pam4;
                any_pam4 |= n > 0 && pam4;
                hw.rise(i, "counters/symbol_error", n);
                self.ledger_add(i, start + HOUR_MS - 1, n);
                if rng.random_bool(m.bursts_per_port_day / 24.0) {
                    let size = log_uniform(&mut *rng, m.burst_size.0, m.burst_size.1).round();
                    let at = rng.random_range(0..HOUR_MS - 1);
                    events.push((at, Event::Burst(i, size as u64)));
                }
                // Traffic, in the 4-octet units of the data counters.
                let words = (p.gbps * 1e9 / 32.0 * util * 3600.0) as u64;
                hw.rise(i, "counters/port_xmit_data", words);
                hw.rise(i, "counters/port_rcv_data", words);
                hw.rise(i, "counters/port_xmit_wait", words / 1000);
                hw.rise(i, "hw_counters/out_of_buffer", (util * 50.0) as u64);
            }
            if let Some(mp) = self.mgmt_port {
                // A management NIC's day: drops, receive errors and link recoveries that a
                // busy, cheaply cabled 25/100 GbE port shows; its symbol errors stay healthy.
                let e = |rng: &mut ChaCha8Rng, mean: f64| poisson(rng, mean);
                let n = e(&mut rng, 40.0);
                hw.rise(mp, "counters/port_rcv_errors", n);
                let n = e(&mut rng, 300.0);
                hw.rise(mp, "counters/port_xmit_discards", n);
                let n = e(&mut rng, 3.0);
                hw.rise(mp, "counters/link_error_recovery", n);
                let n = e(&mut rng, 5_000.0);
                hw.rise(mp, "hw_counters/out_of_buffer", n);
                let n = e(&mut rng, 20.0);
                hw.rise(mp, "counters/symbol_error", n);
                self.ledger_add(mp, start + HOUR_MS - 1, n);
            }
            let day = |r: f64| r / 24.0;
            let at = |rng: &mut ChaCha8Rng| rng.random_range(0..HOUR_MS - 1);
            if rng.random_bool(day(m.counter_resets_per_day)) {
                events.push((at(&mut rng), Event::Reset));
            }
            if rng.random_bool(day(m.wraps_per_day)) {
                events.push((at(&mut rng), Event::Wrap));
            }
            if rng.random_bool(day(m.read_errors_per_day)) {
                let len = log_uniform(&mut *rng, m.read_error_s.0, m.read_error_s.1);
                events.push((at(&mut rng), Event::ReadError((len * 1000.0) as u64)));
            }
            if rng.random_bool(day(m.fw_resets_per_day)) {
                let len = log_uniform(&mut *rng, m.fw_reset_s.0, m.fw_reset_s.1);
                events.push((at(&mut rng), Event::FirmwareReset((len * 1000.0) as u64)));
            }
            if !self.in_job.get()
                && self.control.get().is_none()
                && rng.random_bool(day(m.reloads_per_day))
            {
                let len = log_uniform(&mut *rng, m.reload_gone_s.0, m.reload_gone_s.1);
                events.push((at(&mut rng), Event::Reload((len * 1000.0) as u64)));
            }
            drop(hw);
            drop(rng);
            if any_symbols {
                self.note(Kind::SymbolErrors);
            }
            if any_pam4 {
                self.note(Kind::Pam4Background);
            }
            if self.mgmt_port.is_some() {
                self.note(Kind::ManagementNoise);
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
        events.sort_by_key(|(t, _)| *t);
        for (at, ev) in events {
            let t = (start + at).max(self.cluster_ms.get());
            self.pass_to(t)?;
            self.event(ev)?;
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
        // Maintenance: reboots wait for the node to be idle (`scontrol reboot ASAP`).
        {
            let mut rng = self.rng.borrow_mut();
            if self.pending_maintenance.get().is_none() && rng.random_bool(m.reboots_per_day / 24.0)
            {
                self.pending_maintenance.set(Some(Kind::Reboot));
            }
        }
        let end = (start + HOUR_MS - 1).max(self.cluster_ms.get());
        self.pass_to(end)?;
        if !self.in_job.get()
            && let Some(kind) = self.pending_maintenance.take()
        {
            self.maintenance(kind)?;
        }
        self.control_tick()?;
        self.outage_tick();
        self.pass_to(end)?;
        self.hw.borrow_mut().flush()?;
        let every = self.sh.opts.health_every_h.max(1);
        let phase = (self.index as u64) % every;
        if hour % every == phase && self.last_health_hour.get() != Some(hour) {
            self.health();
        }
        Ok(())
    }

    /// One event of the hour, at the cluster's time now: the tree changes, the watch's window
    /// when a job runs, health's grid after it.
    fn event(&self, ev: Event) -> Result<(), SoakError> {
        let m = &self.sh.opts.model;
        let t = self.cluster_ms.get();
        self.hw.borrow_mut().flush()?;
        self.hot_until
            .set(self.hot_until.get().max(t + self.sh.opts.hot_min * 60_000));
        match ev {
            Event::Burst(port, size) => {
                let room = self.burst_room(port, t);
                let size = size.min(room);
                if size == 0 {
                    return Ok(());
                }
                self.ledger_add(port, t, size);
                let mut hw = self.hw.borrow_mut();
                hw.rise(port, "counters/symbol_error", size);
                hw.flush()?;
                drop(hw);
                self.note(Kind::SymbolBurst);
            }
            Event::Reset => {
                self.hw.borrow_mut().reset_counters()?;
                self.note(Kind::CounterReset);
            }
            Event::Wrap => {
                // Set near 2^32 at the node's start; now past it.
                let v = self.rng.borrow_mut().random_range(0..5_000u64);
                self.hw
                    .borrow_mut()
                    .set_counter(self.wrap_port, "hw_counters/np_cnp_sent", v)?;
                self.note(Kind::CounterWrap);
            }
            Event::ReadError(_) | Event::FirmwareReset(_) if !self.timeline.is_idle() => {
                // A reload under way: its own window covers this moment.
                return Ok(());
            }
            Event::ReadError(len) => {
                let file = {
                    let mut rng = self.rng.borrow_mut();
                    let port = rng.random_range(0..self.timeline.ports.len());
                    let names = [
                        "state",
                        "phys_state",
                        "rate",
                        "counters/symbol_error",
                        "counters/link_downed",
                        "link_layer",
                    ];
                    let f = names[rng.random_range(0..names.len())];
                    self.timeline.ports[port].dir.join(f)
                };
                self.timeline.break_for(vec![file], t, t + len.max(1))?;
                self.note(Kind::ReadError);
            }
            Event::FirmwareReset(len) => {
                let port = self
                    .rng
                    .borrow_mut()
                    .random_range(0..self.timeline.ports.len());
                let dir = &self.timeline.ports[port].dir;
                let dev = dir.parent().and_then(|p| p.parent()).map(Path::to_path_buf);
                let mut files: Vec<PathBuf> = ["state", "phys_state", "rate", "link_layer"]
                    .iter()
                    .map(|f| dir.join(f))
                    .collect();
                if let Some(dev) = dev {
                    files.push(dev.join("fw_ver"));
                    files.push(dev.join("hca_type"));
                }
                for sub in ["counters", "hw_counters"] {
                    if let Ok(rd) = std::fs::read_dir(dir.join(sub)) {
                        files.extend(rd.flatten().map(|e| e.path()));
                    }
                }
                files.retain(|f| f.is_file());
                self.timeline.break_for(files, t, t + len.max(1))?;
                self.note(Kind::FirmwareReset);
            }
            Event::Reload(len) => {
                self.hw.borrow_mut().reset_counters()?;
                self.timeline.at(t, Change::ClassEmpty(true));
                let back = t + len.max(1);
                self.timeline.at(back, Change::ClassEmpty(false));
                let mut rng = self.rng.borrow_mut();
                for (i, p) in self.timeline.ports.iter().enumerate() {
                    if !p.infiniband {
                        continue;
                    }
                    let active = rng.random_range(m.port_active_at_s.0..=m.port_active_at_s.1);
                    self.out_until_ms
                        .set(self.out_until_ms.get().max(back + (active * 1000.0) as u64));
                    self.timeline
                        .at(back, Change::PortState(i, "2: INIT", "5: LinkUp"));
                    self.timeline.at(
                        back + (active * 1000.0) as u64,
                        Change::PortState(i, "4: ACTIVE", "5: LinkUp"),
                    );
                }
                drop(rng);
                self.note(Kind::DriverReload);
            }
        }
        if self.in_job.get() {
            self.watch_window(t + self.sh.opts.watch_window_s * 1000)?;
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
            self.set_cluster(self.cluster_ms.get());
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
            self.set_cluster(self.cluster_ms.get());
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
            // Set by `observe` at the drain: a flap's drain can be resumed (the flap is over)
            // before the hour's end gets here.
            let caught = self.caught_at.get().is_some();
            let repair = match self.caught_at.get() {
                Some(at) => !c.lasting() || hour >= at + HOLD_H,
                None => hour >= since + 48,
            };
            if repair {
                if !caught {
                    self.tally.borrow_mut().controls_missed.push((
                        self.name.clone(),
                        c,
                        since,
                        port,
                    ));
                }
                self.repair(c, port)?;
                self.control.set(None);
                self.caught_at.set(None);
                self.last_control.set(Some((c, hour)));
            } else if matches!(c, Control::SymbolStorm | Control::LateStorm) {
                self.hw
                    .borrow_mut()
                    .rise(port, "counters/symbol_error", 3000);
            }
            return Ok(());
        }
        for &(node, at, c) in &self.sh.controls {
            // On a node drained already, the fault waits for its resume; a late storm waits
            // for a long job to be 12 hours in.
            let due = at <= hour && self.control_due.get() == Some(at);
            if node == self.index && (at == hour || due) {
                let late_ok = c != Control::LateStorm
                    || (self.in_job.get()
                        && hour >= self.job_start.get() + 12
                        && self.job_end.get() > hour + 1);
                if self.drained.get() || !late_ok || !self.timeline.is_idle() {
                    self.control_due.set(Some(at));
                    continue;
                }
                self.control_due.set(None);
                let port = self.rng.borrow_mut().random_range(0..8);
                self.inject(c, port)?;
                self.control.set(Some((c, hour, port)));
                self.tally
                    .borrow_mut()
                    .controls_injected
                    .push((self.name.clone(), c));
                self.hot_until
                    .set(self.cluster_ms.get() + self.sh.opts.hot_min * 60_000);
                if self.in_job.get() {
                    self.hw.borrow_mut().flush()?;
                    self.watch_window(self.cluster_ms.get() + self.sh.opts.watch_window_s * 1000)?;
                }
            }
        }
        Ok(())
    }

    /// An outage drain still held a day after its reload was over is a false drain as well:
    /// the node did not come back by itself.
    fn outage_tick(&self) {
        let late = self
            .outage
            .borrow()
            .as_ref()
            .is_some_and(|(_, over_ms)| self.cluster_ms.get() > over_ms + 24 * HOUR_MS);
        if late && let Some((d, _)) = self.outage.borrow_mut().take() {
            let mut t = self.tally.borrow_mut();
            t.false_drains.push(d);
            t.outage_overdue += 1;
        }
    }

    /// The GPU paired with compute rail `port`.
    fn gpu_of(&self, port: usize) -> Option<String> {
        self.hw.borrow().gpus().get(port).cloned()
    }

    fn inject(&self, c: Control, port: usize) -> Result<(), SoakError> {
        let hw = self.hw.borrow();
        let rel = |f: &str| format!("class/infiniband/{}/ports/1/{f}", hw.ports[port].dev);
        match c {
            Control::PortDown => hw.set_state(port, "1: DOWN", "3: Disabled")?,
            Control::LinkFlap => {
                drop(hw);
                self.hw.borrow_mut().rise(port, "counters/link_downed", 1);
            }
            Control::SymbolStorm | Control::LateStorm => {
                drop(hw);
                self.hw
                    .borrow_mut()
                    .rise(port, "counters/symbol_error", 3000);
            }
            Control::GpuGone => {
                drop(hw);
                if let Some(gpu) = self.gpu_of(port) {
                    self.hw.borrow().gpu_gone(&gpu, true)?;
                }
            }
            Control::RailEthernet => {
                hw.write_rel(&rel("link_layer"), "Ethernet\n")?;
                hw.set_state(port, "1: DOWN", "3: Disabled")?;
            }
            Control::PcieDegraded => {
                let dev = &hw.ports[port].dev;
                hw.write_rel(
                    &format!("class/infiniband/{dev}/device/current_link_width"),
                    "8\n",
                )?;
            }
        }
        Ok(())
    }

    fn repair(&self, c: Control, port: usize) -> Result<(), SoakError> {
        let hw = self.hw.borrow();
        match c {
            Control::PortDown => hw.set_state(port, "4: ACTIVE", "5: LinkUp")?,
            Control::LinkFlap | Control::SymbolStorm | Control::LateStorm => {}
            Control::GpuGone => {
                if let Some(gpu) = std::fs::read_dir(&hw.root)
                    .ok()
                    .into_iter()
                    .flat_map(|d| d.flatten())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .find_map(|n| {
                        n.strip_suffix(".link")
                            .and_then(|n| n.strip_prefix(".gone-"))
                            .map(str::to_owned)
                    })
                {
                    hw.gpu_gone(&gpu, false)?;
                }
            }
            Control::RailEthernet => {
                let dev = &hw.ports[port].dev;
                hw.write_rel(
                    &format!("class/infiniband/{dev}/ports/1/link_layer"),
                    "InfiniBand\n",
                )?;
                hw.set_state(port, "4: ACTIVE", "5: LinkUp")?;
            }
            Control::PcieDegraded => {
                let dev = &hw.ports[port].dev;
                hw.write_rel(
                    &format!("class/infiniband/{dev}/device/current_link_width"),
                    "16\n",
                )?;
            }
        }
        Ok(())
    }

    /// Moves this node to its next hour (waiting at the day's end for the others); `false` at
    /// the end of the soak.
    fn next_hour(&self) -> Result<bool, SoakError> {
        let next = self.hour.get() + 1;
        let until = self.sh.opts.until_day.map_or(u64::MAX, |d| d * 24);
        if next >= self.sh.hours.min(until) {
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
        self.job_end.set(end);
        // The watch starts with the job: its first minutes, then a window around each event.
        let snapshot = fabric_core::jobstep::snapshot_path(&setup.state_dir, setup.inv.job_id);
        if let Ok((base, at_start)) = watch::load_start(&snapshot) {
            *self.job_watch.borrow_mut() = Some(JobWatch {
                setup: setup.clone(),
                base_taken_ms: base.counters.taken_unix_ms,
                started_at_s: base.counters.taken_unix_ms / 1000,
                base,
                at_start,
            });
            self.watch_window(self.cluster_ms.get() + self.sh.opts.watch_window_s * 1000)?;
        }
        while self.hour.get() < end && !self.over.get() {
            if !self.next_hour()? {
                break;
            }
        }
        *self.job_watch.borrow_mut() = None;
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

    /// The in-job watch for a window: 1 s samples of the real sampler through the real loop
    /// and its decisions, from now until cluster time `until`.
    fn watch_window(&self, until: u64) -> Result<(), SoakError> {
        let Some(jw) = self.job_watch.borrow().clone() else {
            return Ok(());
        };
        let input = ProbeInput {
            node: self.name.clone(),
            roots: Roots::for_sysfs(self.hw.borrow().root.clone(), self.proc_root.clone(), None),
            expect: fabric_core::config::Config::default().for_node(&self.name),
            baseline: Some(jw.base.clone()),
            bom_pin: None,
            // As `fabric-check watch` does: the prolog's known inventory, read only.
            known: fabric_core::probe::known::load_for_probe(
                &fabric_core::probe::known::known_path(&jw.setup.state_dir),
                &self.name,
            )
            .0,
            second_look: None,
        };
        let mut sampler = ClockedSampler {
            inner: QuickSampler::new(input),
            base_taken_ms: jw.base_taken_ms,
            now_ms: self.now_ms,
            samples: 0,
            timeline: self.timeline,
            full_at: None,
            unread: 0,
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
            let t = self.cluster_ms.get() + 1000;
            if let Err(e) = self.pass_to(t) {
                *failure.borrow_mut() = Some(e);
                return false;
            }
            t < until
        };
        let mut pace = SoakPace {
            advance: &mut advance,
            ended: false,
        };
        watch::run(
            &jw.setup,
            Duration::from_secs(1),
            jw.started_at_s,
            &jw.at_start,
            &mut sampler,
            &act,
            &mut pace,
            None,
            None,
        );
        self.observe("watch");
        let mut tally = self.tally.borrow_mut();
        tally.watch_samples += sampler.samples;
        tally.watch_unread += sampler.unread;
        // The next window judges against the snapshot as this one left it (rebased on resets).
        if let Some(b) = sampler.inner.baseline_mut() {
            let mut b = b.clone();
            b.counters.taken_unix_ms = jw.base_taken_ms;
            if let Some(j) = self.job_watch.borrow_mut().as_mut() {
                j.base = b;
            }
        }
        match failure.into_inner() {
            Some(e) => Err(e),
            None => Ok(()),
        }
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
        t.looks = self.runner.looks.get();
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
    // The nodes whose lives run: all, or the one asked for.
    let lives: Vec<(usize, &String)> = match &opts.only_node {
        None => names.iter().enumerate().collect(),
        Some(only) => vec![
            names
                .iter()
                .enumerate()
                .find(|(_, n)| *n == only)
                .ok_or_else(|| SoakError::NoSuchNode {
                    name: only.clone(),
                    last: names.last().cloned().unwrap_or_default(),
                })?,
        ],
    };
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
        baton: Baton::new(lives.len(), opts.cores),
        hours,
        controller_down,
        controls,
    };
    let seeds: Vec<u64> = (0..nodes).map(|_| rng.random()).collect();
    let mut out = Outcome {
        node_days: opts.until_day.map_or(days, |d| d.min(days)) * lives.len() as u64,
        ..Outcome::default()
    };
    let results: Vec<Result<NodeTally, SoakError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = lives
            .iter()
            .map(|&(i, name)| {
                let sh = &sh;
                let proc_root = proc_root.clone();
                let seed = seeds[i];
                std::thread::Builder::new()
                    .name(name.clone())
                    .spawn_scoped(scope, move || {
                        let _leave = Leave(&sh.baton);
                        // Its own file table, as each real node's probe has: the node's opens
                        // and closes take no lock that another node's thread holds.
                        if let Err(e) = nix::sched::unshare(nix::sched::CloneFlags::CLONE_FILES) {
                            return Err(SoakError::Thread(e.to_string()));
                        }
                        sh.baton.take_turn();
                        node_life(sh, i, name, seed, &proc_root)
                    })
                    .expect("a thread for each node")
            })
            .collect();
        handles
            .into_iter()
            .zip(&lives)
            .map(|(h, (_, n))| {
                h.join()
                    .unwrap_or_else(|_| Err(SoakError::Panicked((*n).clone())))
            })
            .collect()
    });
    for r in results {
        out.absorb(r?);
    }
    out.elapsed = t0.elapsed();
    Ok(out)
}

/// What `fabric-check inventory accept` does: the node's inventory now, recorded as its known
/// inventory in its state folder.
fn accept_inventory(name: &str, node_dir: &Path, proc_root: &Path) -> Result<(), SoakError> {
    use fabric_core::probe::known;
    let input = ProbeInput {
        node: name.to_owned(),
        roots: Roots::for_sysfs(node_dir.join("sysfs"), proc_root.to_owned(), None),
        expect: fabric_core::config::Config::default().for_node(name),
        baseline: None,
        bom_pin: None,
        known: None,
        second_look: None,
    };
    let report = fabric_core::probe::run(&input);
    let state = node_dir.join("state");
    std::fs::create_dir_all(&state).map_err(|source| SoakError::Folder {
        path: state.clone(),
        source,
    })?;
    let k = known::Known::new(
        name,
        report.inventory,
        known::Recorded::Accepted,
        "admin",
        EPOCH_MS / 1000,
    );
    k.save(&known::known_path(&state))
        .map_err(|e| SoakError::Folder {
            path: state,
            source: std::io::Error::other(e.to_string()),
        })
}

/// Hours a caught lasting fault stays before its repair: health must keep the node drained.
const HOLD_H: u64 = 6;

/// The uptime of a node that has not rebooted lately.
const LONG_UP_S: f64 = 30.0 * 86_400.0;

/// Writes `<proc>/uptime` as the kernel does (`SECONDS IDLE_SECONDS`).
fn set_uptime(proc_root: &Path, up_s: f64) -> Result<(), SoakError> {
    let path = proc_root.join("uptime");
    crate::node::tree_changes();
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
    let ber: Vec<(f64, bool)> = hw
        .ports
        .iter()
        .map(|_| {
            if rng.random_bool(m.pam4_ports) {
                (log_uniform(&mut rng, m.pam4_ber.0, m.pam4_ber.1), true)
            } else {
                (log_uniform(&mut rng, m.ber_range.0, m.ber_range.1), false)
            }
        })
        .collect();
    // The node's make: one of a storage card's ports without a cable, or a noisy management
    // NIC there; a Gen5 storage card in a Gen4 slot. Port 9 is the storage card's second port.
    let profile = rng.random_range(0.0..1.0);
    let unprovisioned = profile < m.unprovisioned_nodes;
    let mgmt_port = (!unprovisioned && profile < m.unprovisioned_nodes + m.management_nodes)
        .then_some(hw.ports.len() - 1);
    if unprovisioned {
        hw.unprovisioned(hw.ports.len() - 1)?;
    }
    let gen4 = rng.random_bool(m.gen4_slot_nodes);
    if gen4 {
        hw.gen5_card_in_gen4_slot(&[hw.ports.len() - 2, hw.ports.len() - 1])?;
    }
    // The storage ports' 32-bit congestion counter, near its wrap.
    let wrap_port = hw.ports.len() - 2;
    hw.set_counter(
        wrap_port,
        "hw_counters/np_cnp_sent",
        u64::from(u32::MAX) - 10_000,
    )?;
    let timeline = Timeline::of(&hw);
    let clock_error_ms = Cell::new(0i64);
    let ledger = RefCell::new(vec![VecDeque::new(); hw.ports.len()]);
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
    if unprovisioned && sh.opts.accept_unprovisioned {
        // The port fails beside its cabled twin at the first probe, so no known inventory is
        // recorded by itself (docs/checks.md): the admin ran `fabric-check inventory accept`
        // when the node was installed.
        accept_inventory(name, &node_dir, proc_root)?;
    }
    let now_ms = Cell::new(EPOCH_MS);
    let grid_phase_ms = rng.random_range(0..sh.opts.health_grid_min.max(1) * 60_000);
    let life = Life {
        sh,
        index,
        name: name.to_owned(),
        hw: RefCell::new(hw),
        rng: RefCell::new(rng),
        hour: Cell::new(0),
        now_ms: &now_ms,
        clock_error_ms: &clock_error_ms,
        cluster_ms: Cell::new(EPOCH_MS),
        timeline: &timeline,
        grid_phase_ms,
        hot_until: Cell::new(0),
        last_health_hour: Cell::new(None),
        job_watch: RefCell::new(None),
        ledger,
        mgmt_port,
        wrap_port,
        caught_at: Cell::new(None),
        job_end: Cell::new(0),
        controller_down: Cell::new(false),
        words,
        plugin,
        proc_root: proc_root.to_owned(),
        relay: SoakRelay::default(),
        runner: SoakRunner {
            now_ms: &now_ms,
            timeline: &timeline,
            clock_error_ms: &clock_error_ms,
            proc_root,
            watches_started: Cell::new(0),
            probes: Cell::new(0),
            looks: Cell::new((0, 0)),
            last_look: RefCell::new(None),
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
        out_until_ms: Cell::new(0),
        outage: RefCell::new(None),
        control_due: Cell::new(None),
        last_control: Cell::new(None),
        job_start: Cell::new(0),
        jobs: Cell::new(0),
        over: Cell::new(false),
    };
    if saturated {
        life.note(Kind::Saturation);
    }
    if unprovisioned {
        life.note(Kind::UnprovisionedPort);
    }
    if gen4 {
        life.note(Kind::Gen4Slot);
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
                "soak: node_days 8, false_drains 0, false_resumes 0, per_1000_node_days 0.000, upper95 374.467, faults_caught 2/2\n"
            ),
            "{report}"
        );
    }

    #[test]
    fn a_drain_while_a_reload_has_the_fabric_out_is_no_false_drain_and_the_node_comes_back() {
        let mut opts = short(5);
        opts.node_days = 2 * 20;
        opts.controls = 0;
        opts.model.boot_race = false;
        opts.model.reboots_per_day = 0.0;
        // Reloads every few hours whose devices stay gone past the second look and whose
        // ports train for minutes: health's 5-min grid lands in them.
        opts.model.reloads_per_day = 6.0;
        opts.model.reload_gone_s = (20.0, 40.0);
        opts.model.port_active_at_s = (240.0, 300.0);
        let dir = tempfile::tempdir().unwrap();
        let out = run_in(&opts, dir.path()).unwrap();
        let report = crate::report::text(&out);
        assert!(!out.outage_drains.is_empty(), "{report}");
        assert!(out.false_drains.is_empty(), "{report}");
        assert_eq!(
            out.outage_back_min.len(),
            out.outage_drains.len(),
            "{report}"
        );
        assert!(
            report.contains("drains while a driver reload had the node's fabric out"),
            "{report}"
        );
    }

    #[test]
    fn one_node_alone_lives_the_life_it_lives_in_the_whole_run() {
        let drains = |only: Option<&str>| {
            let dir = tempfile::tempdir().unwrap();
            let mut o = short(13);
            o.nodes = 3;
            o.node_days = 3 * 30;
            o.controls = Control::ALL.len();
            o.only_node = only.map(str::to_owned);
            let out = run_in(&o, dir.path()).unwrap();
            let mut lines: Vec<String> = out
                .control_drains
                .iter()
                .chain(&out.false_drains)
                .filter(|d| d.node == "gpu002")
                .map(|d| format!("{} {} {}", d.hour, d.phase, d.reason))
                .collect();
            lines.sort();
            (lines, out.node_days)
        };
        let (whole, _) = drains(None);
        let (alone, days) = drains(Some("gpu002"));
        assert!(!whole.is_empty());
        assert_eq!(whole, alone);
        assert_eq!(days, 30);
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

    #[test]
    fn a_control_of_every_kind_is_caught_and_none_is_put_back_while_it_is_there() {
        let mut opts = short(11);
        opts.nodes = 7;
        opts.node_days = 7 * 12;
        opts.controls = Control::ALL.len();
        let dir = tempfile::tempdir().unwrap();
        let out = run_in(&opts, dir.path()).unwrap();
        let report = crate::report::text(&out);
        let kinds: BTreeSet<&str> = out
            .controls_injected
            .iter()
            .map(|(_, c)| c.as_str())
            .collect();
        assert_eq!(kinds.len(), Control::ALL.len(), "{report}");
        assert!(out.controls_missed.is_empty(), "{report}");
        assert!(out.false_resumes.is_empty(), "{report}");
        assert!(out.false_drains.is_empty(), "{report}");
    }
}
