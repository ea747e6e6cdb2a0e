//! The in-job watch: a fault that appears while a checked job runs is found in seconds, not
//! when the job ends.
//!
//! The prolog of a checked job starts `fabric-check watch` on its node ([`start`]): root, in a
//! process group of its own, stdin/stdout/stderr on `/dev/null`, so it neither holds up the
//! prolog nor dies with the prolog child's group. Every `watch_interval=` (default 1 s) it
//! reads the few files that can make a `fail` (or a counter's `warn`) in place ([`vitals`]), and
//! when one changed (or every [`vitals::FULL_EVERY`] samples) runs the probe's own gather and
//! checks, in this process (no child, no Slurm call), against the prolog's snapshot: port state
//! and rate, link layer, MTU, GID, PFC/ECN, and the health counters with the probe's thresholds,
//! a `*_delta` bound over the job window and a per-hour bound over the last hour ([`window`]: a
//! ring of counter snapshots; one hour's allowance, never scaled by the job's age and never less,
//! so a single error never drains and a storm late in a long job is seen as fast as an early
//! one). A `fail` or `warn` finding that the prolog did not already see is a fault; [`policy`] says what to do with it
//! ([`Phase::Watch`]): under `enforce` drain through the one drain path (etiquette, guard,
//! settle), write a live `during` entry into the job's tag, and tell the job through its notice
//! file ([`fabric_proto::notice`]); under `warn` the same without the drain. A fault that clears
//! (a flap) stays recorded, marked cleared.
//!
//! Its life: it writes `<state_dir>/watch-<job>.pid` (its pid and start time) and exits when
//! that file is gone or names another process; the epilog ([`stop`]) removes the file, sends the
//! watch SIGTERM (a drain or tag write under way finishes, within the epilog's
//! [`crate::deadline::WATCH_STOP`]), then SIGKILLs its process group, so it never outlives the
//! epilog. Each event is also kept on the node ([`events_path`]) before the watch acts on it; the
//! epilog puts those into its own tag write, so an event whose live write the job's end cut
//! short is still tagged. A watch that died before the epilog is said in the epilog's log
//! ("the watch was lost"). As a last
//! guard (an epilog that failed or never ran), it makes sure its job still runs before it acts,
//! and when no `slurmstepd` of its job has been seen on the host for [`JOB_GONE_AFTER`]: a
//! `slurmstepd` of the job says so at no cost; without one (a node of a batch job that runs no
//! step there, where `PrologFlags=Contain` is not set) slurmctld is asked, one `squeue`; a job
//! that no longer runs ends the watch without acting. A `slurmd` restart does not touch it (it
//! is not slurmd's child).
//!
//! The decisions are pure ([`Tracker`]); the sampling and the acting are seams ([`Sampler`],
//! [`Act`]), so the loop ([`run`]) is tested on fakes.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

mod session;
pub mod vitals;
pub mod window;

pub use session::{OpenError, Session, Spec};

use super::policy::{self, Found, Phase};
use super::tag_write::{TagWrite, Target, write_tag_to};
use super::{JobStep, Setup, now_unix};
use crate::probe::{Baseline, CounterSnapshot, ProbeInput, Report};
use fabric_proto::notice::FabricNotice;
use fabric_proto::tag::WatchEvent;
use fabric_proto::verdict::{Finding, Severity};

/// Checks whose evidence comes from external tools (`ethtool -S`, `dcb`): a sample that did not
/// run the tools neither finds nor clears them.
const TOOL_CHECKS: &[&str] = &["roce.pfc", "roce.congestion"];

/// With no `slurmstepd` of the job seen for this long, the watch ends on its own.
pub const JOB_GONE_AFTER: Duration = Duration::from_secs(180);

/// How often the watch looks for its job's `slurmstepd` (a scan of `/proc`).
pub const JOB_SCAN_EVERY: Duration = Duration::from_secs(60);

/// How often (in samples) a real node's tools (`ethtool -S`, `dcb`) are run: they are processes,
/// the rest of a sample is file reads.
pub const TOOLS_EVERY: u32 = 10;

/// One fault: a `fail` or `warn` finding, keyed by check, device, port and severity (a `warn`
/// that turns into a `fail` is a new fault: the `warn` clears and the `fail` appears).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    /// `check|device|port|severity`.
    pub key: String,
    /// The check id.
    pub check: String,
    /// The finding's message.
    pub message: String,
    /// A `warn` finding (recorded in the tag, never drained), not a `fail`.
    pub warn: bool,
}

impl Fault {
    fn of(f: &Finding) -> Self {
        Self {
            key: key(f),
            check: f.check.clone(),
            message: f.message.clone(),
            warn: f.severity != Severity::Fail,
        }
    }
}

/// Findings the watch follows: `fail`s, which it acts on, and `warn`s, which it records.
fn followed(f: &Finding) -> bool {
    matches!(f.severity, Severity::Fail | Severity::Warn)
}

fn key(f: &Finding) -> String {
    format!(
        "{}|{}|{}|{}",
        f.check,
        f.device.as_deref().unwrap_or(""),
        f.port.map_or(String::new(), |p| p.to_string()),
        if f.severity == Severity::Fail {
            "fail"
        } else {
            "warn"
        }
    )
}

/// What changed between two samples.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// A fault the job did not start with.
    Appeared(Fault),
    /// A fault that is no longer seen.
    Cleared(Fault),
}

/// How long a fault must stay clear before the watch takes it as cleared: a fault that returns
/// within it is a flap of the same fault (counted, never acted on again), so a port that flaps
/// 40 times in 24 s costs one drain, one tag entry, one notice and one signal, not 40.
pub const HOLD_DOWN: Duration = Duration::from_secs(120);

/// One fault the watch follows, and its flaps.
#[derive(Debug, Clone)]
struct Followed {
    fault: Fault,
    /// Since when it has been clear (seconds since the epoch), while it is.
    clear_since_s: Option<u64>,
    /// How often it came back within the hold-down.
    flaps: u32,
}

/// The watch's memory: which faults the job started with (the prolog's `fail` findings, never
/// reported again) and which it has seen appear and not clear for [`HOLD_DOWN`].
#[derive(Debug, Clone, Default)]
pub struct Tracker {
    at_start: BTreeSet<String>,
    active: BTreeMap<String, Followed>,
    hold_down_s: u64,
}

impl Tracker {
    /// A tracker that takes `at_start` (the prolog's findings) as the job's starting point; a
    /// fault is cleared as soon as a sample no longer sees it (see [`Tracker::hold_down`]).
    pub fn new(at_start: &[Finding]) -> Self {
        Self {
            at_start: at_start.iter().filter(|f| followed(f)).map(key).collect(),
            active: BTreeMap::new(),
            hold_down_s: 0,
        }
    }

    /// This tracker with a hold-down: a fault is cleared only once it has stayed clear for
    /// `d`, and one that returns before is a flap of the same fault.
    pub fn hold_down(mut self, d: Duration) -> Self {
        self.hold_down_s = d.as_secs();
        self
    }

    /// How often the fault `key` flapped (came back within the hold-down).
    pub fn flaps(&self, key: &str) -> u32 {
        self.active.get(key).map_or(0, |f| f.flaps)
    }

    /// The changes one sample's findings make, with no clock (no hold-down: a test's or a
    /// caller's that never flaps).
    pub fn observe(&mut self, findings: &[Finding], tools_ran: bool) -> Vec<Change> {
        self.observe_at(findings, tools_ran, 0)
    }

    /// The changes one sample's findings make at `now_s`. `tools_ran`: whether the sample ran
    /// the tools (else their checks are neither found nor cleared).
    pub fn observe_at(&mut self, findings: &[Finding], tools_ran: bool, now_s: u64) -> Vec<Change> {
        let judged = |check: &str| tools_ran || !TOOL_CHECKS.contains(&check);
        let now: BTreeMap<String, Fault> = findings
            .iter()
            .filter(|f| followed(f) && judged(&f.check))
            .map(|f| (key(f), Fault::of(f)))
            .collect();
        let mut out = Vec::new();
        let mut gone = Vec::new();
        for (k, f) in &mut self.active {
            if !judged(&f.fault.check) {
                continue;
            }
            if now.contains_key(k) {
                if f.clear_since_s.take().is_some() {
                    f.flaps += 1;
                    tracing::info!(
                        "watch: {} came back within the hold-down ({} flaps); not acted on again",
                        f.fault.check,
                        f.flaps
                    );
                }
                continue;
            }
            let since = *f.clear_since_s.get_or_insert(now_s);
            if now_s.saturating_sub(since) >= self.hold_down_s {
                gone.push(k.clone());
            }
        }
        for k in gone {
            if let Some(f) = self.active.remove(&k) {
                out.push(Change::Cleared(f.fault));
            }
        }
        // A fault the job started with that cleared is forgotten: its return is news.
        self.at_start
            .retain(|k| !judged(k.split('|').next().unwrap_or("")) || now.contains_key(k));
        for (k, f) in now {
            if self.at_start.contains(&k) || self.active.contains_key(&k) {
                continue;
            }
            self.active.insert(
                k,
                Followed {
                    fault: f.clone(),
                    clear_since_s: None,
                    flaps: 0,
                },
            );
            out.push(Change::Appeared(f));
        }
        out
    }

    /// Faults cleared but still in their hold-down.
    pub fn holding(&self) -> usize {
        self.active
            .values()
            .filter(|f| f.clear_since_s.is_some())
            .count()
    }
}

/// How long the watch of the node at `index` of a job of `nodes` nodes waits before it acts on
/// a fault: a fabric-wide event fires every node's watch in the same second, and each acting
/// watch makes a few Slurm calls (the guard's read, the drain, its re-check, the tag's read and
/// write). Spread evenly by the node's place in the job over `nodes` × 10 ms, at most 10 s, a
/// 1,000-node job's herd becomes about 100 acting watches a second instead of 1,000 in one.
pub fn act_delay(index: usize, nodes: usize) -> Duration {
    let spread_ms = (nodes as u64 * 10).min(10_000);
    if nodes <= 1 {
        return Duration::ZERO;
    }
    Duration::from_millis(spread_ms * index as u64 / nodes as u64)
}

/// Moves `baseline`'s value of every counter that went down in `now` (counters cleared, driver
/// reloaded, a port retrained) to the new value, so later rises are counted from the reset
/// instead of being hidden below the old total. The baseline's time stays the job's start.
pub fn rebase(baseline: &mut CounterSnapshot, now: &CounterSnapshot) {
    for (port, after) in &now.ports {
        let Some(before) = baseline.ports.get_mut(port) else {
            continue;
        };
        for (set_before, set_after) in [
            (&mut before.counters, &after.counters),
            (&mut before.hw_counters, &after.hw_counters),
        ] {
            for (name, v) in set_after {
                if let Some(old) = set_before.get_mut(name)
                    && *v < *old
                {
                    *old = *v;
                }
            }
        }
    }
    for (dev, after) in &now.netdevs {
        let Some(before) = baseline.netdevs.get_mut(dev) else {
            continue;
        };
        for (name, v) in &after.ethtool {
            if let Some(old) = before.ethtool.get_mut(name)
                && *v < *old
            {
                *old = *v;
            }
        }
    }
}

/// One sample of the node.
#[derive(Debug, Clone)]
pub struct Sample {
    /// The probe's report against the job's baseline.
    pub report: Report,
    /// Whether the external tools ran for it.
    pub tools_ran: bool,
}

/// Where samples come from.
pub trait Sampler {
    /// Takes one sample; `None` when nothing it reads changed since the last one (the last
    /// sample's findings stand).
    fn sample(&mut self) -> Option<Sample>;
}

/// The real sampler: the probe's gather and checks in this process, against the prolog's
/// snapshot (rebased when a counter resets), the per-hour bounds over the sliding hour of its
/// [`window::CounterRing`]; the external tools every [`TOOLS_EVERY`] samples on a real node (a
/// fixture tree's saved tool outputs are read every sample).
#[derive(Debug)]
pub struct ProbeSampler {
    input: ProbeInput,
    tools: crate::probe::gather::ToolSource,
    tools_every: u32,
    n: u32,
    ring: window::CounterRing,
    clock: window::Clock,
    /// Whether the watch has said that its clock went back behind the prolog's snapshot.
    said_clock_back: bool,
}

impl ProbeSampler {
    /// A sampler of `input` (whose baseline is the prolog's snapshot).
    pub fn new(input: ProbeInput) -> Self {
        let tools = input.roots.tools.clone();
        let tools_every = match tools {
            crate::probe::gather::ToolSource::Run => TOOLS_EVERY,
            _ => 1,
        };
        let ring = input.baseline.as_ref().map_or_else(Default::default, |b| {
            window::CounterRing::starting_at(&b.counters, &input.expect)
        });
        Self {
            input,
            tools,
            tools_every,
            n: 0,
            ring,
            clock: window::Clock::System,
            said_clock_back: false,
        }
    }

    /// The same sampler, its counters dated by `clock`.
    pub fn on_clock(mut self, clock: window::Clock) -> Self {
        self.clock = clock;
        self
    }

    /// How many counter snapshots its sliding window holds.
    pub fn window_entries(&self) -> usize {
        self.ring.len()
    }
}

impl Sampler for ProbeSampler {
    fn sample(&mut self) -> Option<Sample> {
        let tools_ran = self.n.is_multiple_of(self.tools_every);
        self.n = self.n.wrapping_add(1);
        self.input.roots.tools = if tools_ran {
            self.tools.clone()
        } else {
            crate::probe::gather::ToolSource::Unavailable(
                "not run this sample (the watch runs tools every few samples)".into(),
            )
        };
        let now_ms = self.clock.now_unix_ms();
        if let Some(b) = &self.input.baseline
            && b.counters.taken_unix_ms > now_ms
            && !std::mem::replace(&mut self.said_clock_back, true)
        {
            tracing::warn!(
                "watch: the clock is {} ms behind the prolog's snapshot (stepped back?): counters are judged against it all the same, as if no time had passed",
                b.counters.taken_unix_ms - now_ms
            );
        }
        let with = crate::probe::RunWith {
            taken_unix_ms: Some(now_ms),
            rate_window: self.ring.window_start(now_ms),
        };
        let report = crate::probe::run_with(&self.input, with);
        if let Some(b) = &mut self.input.baseline {
            rebase(&mut b.counters, &report.counters);
            self.ring.rebase(&report.counters);
            self.ring.record(&report.counters, &self.input.expect);
        }
        Some(Sample { report, tools_ran })
    }
}

/// The watch's sampler: the few files that can make a `fail` read in place every sample
/// ([`vitals`]), the probe's whole gather and checks ([`ProbeSampler`], tools included) only
/// when one of them changed, every [`vitals::FULL_EVERY`] samples, and the first time.
#[derive(Debug)]
pub struct QuickSampler {
    full: ProbeSampler,
    vitals: Option<vitals::Vitals>,
    since_full: u32,
    /// Full samples taken.
    pub full_samples: u64,
    /// Runs right after each full gather: a test's change that lands between the gather's
    /// reads and the next sample.
    #[cfg(test)]
    pub after_gather: Option<AfterGather>,
}

/// A test's hook into [`QuickSampler`]: runs right after each full gather.
#[cfg(test)]
pub struct AfterGather(pub Box<dyn FnMut()>);

#[cfg(test)]
impl std::fmt::Debug for AfterGather {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AfterGather")
    }
}

impl QuickSampler {
    /// A sampler of `input` (whose baseline is the prolog's snapshot).
    pub fn new(input: ProbeInput) -> Self {
        let mut full = ProbeSampler::new(input);
        // Tools run with every full sample: those are rare enough.
        full.tools_every = 1;
        Self {
            full,
            vitals: None,
            since_full: 0,
            full_samples: 0,
            #[cfg(test)]
            after_gather: None,
        }
    }

    /// The same sampler, its counters dated by `clock`.
    pub fn on_clock(mut self, clock: window::Clock) -> Self {
        self.full = self.full.on_clock(clock);
        self
    }

    /// The prolog's snapshot that samples are judged against (rebased on resets): a harness
    /// on an emulated clock (the false-drain soak) moves its time before each sample.
    pub fn baseline_mut(&mut self) -> Option<&mut Baseline> {
        self.full.input.baseline.as_mut()
    }

    /// How many files a quick sample reads (0 before the first sample).
    pub fn files_read_in_place(&self) -> usize {
        self.vitals.as_ref().map_or(0, vitals::Vitals::len)
    }

    /// How many counter snapshots its sliding window holds.
    pub fn window_entries(&self) -> usize {
        self.full.window_entries()
    }
}

impl Sampler for QuickSampler {
    fn sample(&mut self) -> Option<Sample> {
        self.since_full += 1;
        let due = match &mut self.vitals {
            None => true,
            Some(v) => self.since_full >= vitals::FULL_EVERY || v.changed(),
        };
        if !due {
            return None;
        }
        self.since_full = 0;
        self.full_samples += 1;
        // Opened again with each full sample: a file replaced rather than rewritten (a driver
        // reload, a swapped fixture tree) is read from its new self from now on. Opened (and
        // read) *before* the gather: a change that lands after the gather read a file is then
        // a change at the next sample. Opened after it, such a change became the files' first
        // read and went unseen until the next full sample, a minute later (CI saw it: a
        // counter raised just as a job's watch took its first sample).
        let now_ms = self.full.clock.now_unix_ms();
        let bases = self.full.input.baseline.as_ref().and_then(|b| {
            Some(vitals::Bases {
                job: &b.counters,
                window: self.full.ring.window_start(now_ms)?,
            })
        });
        let vitals = vitals::Vitals::open(
            &self.full.input.roots.sysfs,
            // The full sampler's own tool source: it sets the input's to "not run" between
            // its tool runs.
            &self.full.tools,
            &self.full.input.expect,
            bases,
        );
        let sample = self.full.sample();
        #[cfg(test)]
        if let Some(AfterGather(after_gather)) = &mut self.after_gather {
            after_gather();
        }
        self.vitals = vitals;
        sample
    }
}

/// How the watch acts: gives `f` a job step with fresh seams and a fresh deadline (`timeout=`
/// from now), once per action.
pub trait Act {
    /// Runs `f` on a job step made for this action.
    fn with_step(&self, setup: &Setup, f: &mut dyn FnMut(&JobStep<'_>));
}

/// What the watch does between samples and when to stop.
pub trait Pace {
    /// Waits `d`.
    fn sleep(&mut self, d: Duration);
    /// Now, in seconds since the epoch (the hold-down's clock).
    fn now_s(&self) -> u64 {
        now_unix()
    }
    /// Whether the watch should end (its pid file gone, its job gone).
    fn should_stop(&mut self) -> bool;
    /// Whether a `slurmstepd` of the job runs on this host, asked right before the watch acts
    /// (`false` sends the question to slurmctld): a watch whose epilog never stopped it (the
    /// epilog failed, timed out, or never ran) must not drain a node, or tag a job, for what it
    /// sees after its job ended.
    fn job_still_here(&mut self) -> bool {
        true
    }
    /// slurmctld was asked whether the job runs (the next question waits another
    /// [`JOB_GONE_AFTER`]).
    fn asked_slurm(&mut self) {}
    /// Whether no `slurmstepd` of the job has been seen on this host for [`JOB_GONE_AFTER`]:
    /// the loop then asks slurmctld whether the job still runs (a node of a batch job that runs
    /// no step here has no `slurmstepd` without `PrologFlags=Contain`).
    fn job_unseen_for_long(&mut self) -> bool {
        false
    }
}

/// The watch's notice file, created once by root in the job's verified spool folder
/// ([`crate::record::JobDir::create_root_file`]: relative to the folder's descriptor,
/// `O_CREAT|O_EXCL|O_NOFOLLOW`) and written only through that descriptor.
#[derive(Debug)]
pub struct NoticeFile {
    file: std::fs::File,
    path: PathBuf,
}

impl NoticeFile {
    /// Creates the notice file of `node` (mode 0644, root's) in the job's spool folder `dir`;
    /// fails if anything is already there.
    pub fn create(dir: &crate::record::JobDir, node: &str) -> std::io::Result<Self> {
        let name = fabric_proto::notice::notice_name(node);
        let file = dir.create_root_file(&name, 0o644)?;
        Ok(Self {
            file,
            path: dir.path().join(name),
        })
    }

    /// Appends one notice with one `write(2)`.
    pub fn append(&mut self, n: &FabricNotice) -> std::io::Result<()> {
        self.file.write_all(n.to_line().as_bytes())
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// What one watch did, for its last log line and the tests.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WatchSummary {
    /// Samples taken.
    pub samples: u64,
    /// Samples that found something changed and ran the whole gather.
    pub full_samples: u64,
    /// Faults that appeared.
    pub appeared: Vec<String>,
    /// Faults that cleared.
    pub cleared: Vec<String>,
    /// Whether the node was drained.
    pub drained: bool,
    /// Whether the watch requeued the job (it asked; `on_fault=requeue`).
    pub requeued: bool,
    /// Whether it ended because its job was gone when something changed.
    pub job_gone: bool,
}

/// Whether the watch's job still runs, asked before it acts: a `slurmstepd` of the job on this
/// host says so at no cost; without one (a node of a batch job that runs no step here yet, or a
/// job that ended while its epilog never stopped the watch) slurmctld is asked (one call). When
/// slurmctld cannot answer, the job is taken as running: the drain path says what it can.
fn job_still_runs(setup: &Setup, act: &dyn Act, pace: &mut dyn Pace) -> bool {
    if pace.job_still_here() {
        return true;
    }
    pace.asked_slurm();
    let job = setup.inv.job_id;
    let mut running = true;
    act.with_step(setup, &mut |step| {
        running = match step.seams.slurm.job_running(job) {
            Ok(r) => r,
            Err(e) => {
                step.say(&format!(
                    "watch: cannot ask slurmctld whether job {job} still runs ({e}); acting as if it does"
                ));
                true
            }
        };
    });
    running
}

/// After a drain: requeues the job when it asked (`fabric-run --on-fabric-fault=requeue`, its
/// [`fabric_proto::notice::requeue_wish_path`] file) and the admin allows it
/// (`on_fault=requeue`); says why not otherwise. Root requeues only this job, by the id of its
/// own invocation. Whether it was requeued.
fn requeue_if_asked(step: &JobStep<'_>, setup: &Setup) -> bool {
    let job = setup.inv.job_id;
    // Looked at relative to the job's verified folder: a folder swapped for a link to another
    // job's is never walked through.
    let asked =
        crate::record::JobDir::open(&setup.plugin.spool_dir, &job.to_string(), setup.inv.job_uid)
            .ok()
            .flatten()
            .is_some_and(|dir| {
                dir.holds_regular_file(&fabric_proto::notice::requeue_wish_name(&setup.inv.node))
            });
    if !asked {
        return false;
    }
    if setup.plugin.on_fault != fabric_proto::plugin_args::OnFault::Requeue {
        step.say(&format!(
            "watch: job {job} asked to be requeued on a fabric fault; not done: plugstack.conf allows it with on_fault=requeue"
        ));
        return false;
    }
    // By the job's exact name (`A_T` for an array task): the first task of an array has the
    // array's own id, and `scontrol requeue <that id>` would requeue every task of the array.
    let name = match step.seams.slurm.admin_comment(job) {
        Ok(c) => c.job,
        Err(e) => {
            step.say(&format!(
                "watch: job {job} asked to be requeued; not done: its exact name cannot be read ({e})"
            ));
            return false;
        }
    };
    match step.seams.slurm.requeue_named(&name) {
        Ok(()) => {
            step.say(&format!(
                "watch: requeued job {job}, as it asked (on_fault=requeue): it starts again on other nodes"
            ));
            true
        }
        Err(e) => {
            step.say(&format!(
                "watch: the requeue of job {job} failed ({e}); it runs on"
            ));
            false
        }
    }
}

/// The watch's loop: sample, compare, act, until `pace` says stop.
///
/// `started_at_s` is the prolog's time (the job's start on this node), for "how long into the
/// job"; `at_start` the prolog's findings.
#[allow(clippy::too_many_arguments)]
pub fn run(
    setup: &Setup,
    interval: Duration,
    started_at_s: u64,
    at_start: &[Finding],
    sampler: &mut dyn Sampler,
    act: &dyn Act,
    pace: &mut dyn Pace,
    mut notice: Option<&mut NoticeFile>,
    metrics: Option<&Path>,
) -> WatchSummary {
    let node = setup.inv.node.clone();
    let job = setup.inv.job_id;
    let _span = tracing::info_span!("watch", job, node = %node).entered();
    let mut tracker = Tracker::new(at_start).hold_down(HOLD_DOWN);
    let mut summary = WatchSummary::default();
    let mut events = EventLog::start(events_path(&setup.state_dir, job));
    loop {
        if pace.should_stop() {
            break;
        }
        if pace.job_unseen_for_long() && !job_still_runs(setup, act, pace) {
            tracing::info!("watch: job {job} no longer runs on {node}; ending");
            summary.job_gone = true;
            break;
        }
        let t0 = Instant::now();
        let sample = sampler.sample();
        summary.samples += 1;
        let Some(sample) = sample else {
            pace.sleep(interval.saturating_sub(t0.elapsed()));
            continue;
        };
        summary.full_samples += 1;
        let changes = tracker.observe_at(&sample.report.findings, sample.tools_ran, pace.now_s());
        if !changes.is_empty() && !job_still_runs(setup, act, pace) {
            tracing::warn!(
                "watch: job {job} no longer runs on {node}; ending without acting on what changed"
            );
            summary.job_gone = true;
            break;
        }
        let seen_s = now_unix();
        let my_place = setup.nodes.iter().position(|n| *n == node).unwrap_or(0);
        let delay = act_delay(my_place, setup.nodes.len());
        if !delay.is_zero() && changes.iter().any(|c| matches!(c, Change::Appeared(_))) {
            pace.sleep(delay);
        }
        for change in changes {
            let now = seen_s;
            match change {
                Change::Appeared(fault) => {
                    let into = now.saturating_sub(started_at_s);
                    let found = if fault.warn { Found::Warn } else { Found::Fail };
                    let action = policy::decide(Phase::Watch, found, &setup.plugin);
                    if !fault.warn
                        && let Some(m) = metrics
                    {
                        bump_metrics(&setup.state_dir, m, &node, &fault.check);
                    }
                    summary.appeared.push(fault.check.clone());
                    let mut ev = WatchEvent {
                        check: fault.check.clone(),
                        message: fabric_proto::tag::scrub_text(&fault.message, 160),
                        seen_at_s: now,
                        into_job_s: into,
                        cleared_at_s: None,
                        drained: false,
                        requeued: false,
                        warn: fault.warn,
                    };
                    if action.tag {
                        // Kept on the node before acting: the epilog puts it into the tag even
                        // when the job ends before this watch's own write lands.
                        events.record(&fault.key, &ev);
                    }
                    let mut drained = false;
                    let mut requeued = false;
                    act.with_step(setup, &mut |step| {
                        step.say(&format!(
                            "watch: {}: {} ({}s into job {job}; policy={} → {})",
                            fault.check,
                            fault.message,
                            into,
                            setup.plugin.policy.as_str(),
                            action.words()
                        ));
                        if action.drain {
                            drained = step
                                .drain_self(
                                    &fault.check,
                                    &fabric_proto::during::drain_message(
                                        fabric_proto::during::SeenBy::Watch,
                                        job,
                                        &fault.message,
                                    ),
                                )
                                .out_of_service();
                        }
                        if drained && !summary.requeued {
                            requeued = requeue_if_asked(step, setup);
                        }
                        if action.tag {
                            ev.drained = drained;
                            ev.requeued = requeued;
                            if drained || requeued {
                                events.record(&fault.key, &ev);
                            }
                            let w = write_tag_to(step, Target::LiveOnly, |prev| {
                                let mut t = prev.unwrap_or_default();
                                super::tag_update::add_watch_event(&mut t, &node, ev.clone());
                                t
                            });
                            if w == TagWrite::NotWritten {
                                step.say("watch: the live tag was not written; the epilog records the fault");
                            }
                        }
                    });
                    summary.drained |= drained;
                    summary.requeued |= requeued;
                    if action.tell_job
                        && let Some(n) = notice.as_deref_mut()
                    {
                        let mut msg =
                            FabricNotice::new(job, &node, &fault.check, &fault.message, now);
                        msg.into_job_s = into;
                        msg.drained = drained;
                        msg.requeued = requeued;
                        msg.warn = fault.warn;
                        if let Err(e) = n.append(&msg) {
                            tracing::warn!("cannot write the notice {}: {e}", n.path().display());
                        }
                    }
                }
                Change::Cleared(fault) => {
                    summary.cleared.push(fault.check.clone());
                    let found = if fault.warn { Found::Warn } else { Found::Fail };
                    let action = policy::decide(Phase::Watch, found, &setup.plugin);
                    act.with_step(setup, &mut |step| {
                        step.say(&format!(
                            "watch: {} cleared: {} (recorded; a node the watch drained is resumed only by the usual etiquette)",
                            fault.check, fault.message
                        ));
                        // Only an event the watch kept is in the tag to be marked (past the
                        // tag's share, nothing is written).
                        if action.tag
                            && let Some(ev) = events.clear(&fault.key, now)
                        {
                            write_tag_to(step, Target::LiveOnly, |prev| {
                                let mut t = prev.unwrap_or_default();
                                super::tag_update::clear_watch_event(&mut t, &node, &ev, now);
                                t
                            });
                        }
                    });
                }
            }
        }
        pace.sleep(interval.saturating_sub(t0.elapsed()));
    }
    summary
}

/// Adds one fault of `check` to the node's watch counters (`<state_dir>/watch-faults.json`,
/// kept across jobs under a lock, since several jobs' watches may share a node) and rewrites
/// the textfile `path` from them.
pub fn bump_metrics(state_dir: &Path, path: &Path, node: &str, check: &str) {
    use rustix::fs::{FlockOperation, flock};
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(state_dir.join("watch-faults.lock"));
    let _held = lock
        .ok()
        .filter(|f| flock(f, FlockOperation::LockExclusive).is_ok());
    let counts_path = state_dir.join("watch-faults.json");
    let mut counts: BTreeMap<String, u64> = std::fs::read_to_string(&counts_path)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default();
    *counts.entry(check.to_owned()).or_default() += 1;
    if let Ok(text) = serde_json::to_vec(&counts)
        && let Err(e) = crate::probe::output::write_atomic(&counts_path, &text)
    {
        tracing::warn!("cannot write {}: {e}", counts_path.display());
    }
    write_metrics(path, node, &counts);
}

/// Writes the watch's counters for node_exporter's textfile collector (atomically: a temporary
/// file renamed over the old one): `fabric_check_watch_faults_total{node,check}`.
pub fn write_metrics(path: &Path, node: &str, counts: &BTreeMap<String, u64>) {
    let mut text = String::from(
        "# HELP fabric_check_watch_faults_total Faults the in-job watch saw appear while a job ran, by check.\n\
         # TYPE fabric_check_watch_faults_total counter\n",
    );
    for (check, n) in counts {
        text.push_str(&format!(
            "fabric_check_watch_faults_total{{node=\"{node}\",check=\"{check}\"}} {n}\n"
        ));
    }
    if let Err(e) = crate::probe::output::write_atomic(path, text.as_bytes()) {
        tracing::warn!("cannot write {}: {e}", path.display());
    }
}

/// The watch's pid file for `job` in a node's state folder.
pub fn pid_path(state_dir: &Path, job: u32) -> PathBuf {
    state_dir.join(format!("watch-{job}.pid"))
}

/// A process's start time (clock ticks since boot, field 22 of `/proc/<pid>/stat`); `None` when
/// it is gone or a zombie.
pub fn start_time(proc_root: &Path, pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(proc_root.join(pid.to_string()).join("stat")).ok()?;
    // The command name is in parentheses and may hold spaces: fields follow the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    // A zombie has ended; only its parent's wait is left.
    if fields.next()? == "Z" {
        return None;
    }
    fields.nth(18)?.parse().ok()
}

/// What a pid file names: `pid start_time`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PidFile {
    /// The watch's pid (also its process group).
    pub pid: u32,
    /// Its start time, so that a reused pid is never signalled.
    pub start: u64,
}

impl PidFile {
    /// Reads a pid file (`None` when absent or not ours).
    pub fn read(path: &Path) -> Option<Self> {
        let text = std::fs::read_to_string(path).ok()?;
        let mut w = text.split_whitespace();
        Some(Self {
            pid: w.next()?.parse().ok()?,
            start: w.next()?.parse().ok()?,
        })
    }

    /// Writes it (atomically).
    pub fn write(self, path: &Path) -> std::io::Result<()> {
        crate::probe::output::write_atomic(
            path,
            format!("{} {}\n", self.pid, self.start).as_bytes(),
        )
    }

    /// Whether the process it names is alive and is the one that wrote it.
    pub fn is_alive(self, proc_root: &Path) -> bool {
        start_time(proc_root, self.pid) == Some(self.start)
    }
}

/// How the epilog's stop of the watch went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopped {
    /// No watch was started for this job on this node.
    NoWatch,
    /// The watch was running and was ended.
    Ended,
    /// The watch had died before the epilog (killed, crashed): faults after that were not seen.
    Lost,
}

/// The epilog's half: removes the pid file (so a watch between samples ends by itself), sends
/// the watch SIGTERM (the watch alone: a Slurm call it is making, a drain's settle step, is
/// left to finish), waits up to `grace` for it to go, then SIGKILLs its whole process group.
pub fn stop(state_dir: &Path, proc_root: &Path, job: u32, grace: Duration) -> Stopped {
    use nix::sys::signal::{Signal, kill, killpg};
    use nix::unistd::Pid;
    let path = pid_path(state_dir, job);
    let Some(pf) = PidFile::read(&path) else {
        return Stopped::NoWatch;
    };
    let _ = std::fs::remove_file(&path);
    if !pf.is_alive(proc_root) {
        return Stopped::Lost;
    }
    let Ok(raw) = i32::try_from(pf.pid) else {
        return Stopped::Lost;
    };
    let pid = Pid::from_raw(raw);
    let _ = kill(pid, Signal::SIGTERM);
    let until = Instant::now() + grace;
    while Instant::now() < until {
        if !pf.is_alive(proc_root) {
            return Stopped::Ended;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    if pf.is_alive(proc_root) {
        let _ = killpg(pid, Signal::SIGKILL);
    }
    Stopped::Ended
}

/// Whether a `slurmstepd` of `job` runs on this host: a process of root's (the real uid of its
/// `/proc/<pid>/status`) named `slurmstepd` whose command line reads `slurmstepd: [<job>.…]`.
/// The job's user can name a process so, and set its `comm`; they cannot make it root's, so a
/// process of theirs never keeps an orphaned watch alive.
pub fn job_has_stepd(proc_root: &Path, job: u32) -> bool {
    let want = format!("slurmstepd: [{job}.");
    let Ok(dir) = std::fs::read_dir(proc_root) else {
        return true;
    };
    dir.flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
        })
        .any(|e| {
            std::fs::read(e.path().join("cmdline"))
                .is_ok_and(|c| c.windows(want.len()).any(|w| w == want.as_bytes()))
                && is_roots_slurmstepd(&e.path())
        })
}

/// Whether the process of `/proc/<pid>` (`pid_dir`) is named `slurmstepd` and runs as root
/// (real uid 0, from its `status`).
fn is_roots_slurmstepd(pid_dir: &Path) -> bool {
    let Ok(status) = std::fs::read_to_string(pid_dir.join("status")) else {
        return false;
    };
    let field = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .map(str::trim)
    };
    let real_uid = field("Uid:").and_then(|v| v.split_whitespace().next());
    field("Name:") == Some("slurmstepd") && real_uid == Some("0")
}

/// The real pace: sleeps, stops when the pid file is gone or no longer names this process, and
/// says when no `slurmstepd` of the job has been seen for [`JOB_GONE_AFTER`].
#[derive(Debug)]
pub struct RealPace {
    /// The pid file.
    pub pid_path: PathBuf,
    /// This process.
    pub me: PidFile,
    /// `/proc`.
    pub proc_root: PathBuf,
    /// The job.
    pub job: u32,
    /// When a `slurmstepd` of the job was last seen.
    pub last_seen: Instant,
    /// When `/proc` was last scanned.
    pub last_scan: Instant,
    /// Set by the SIGTERM handler (the epilog's stop): the watch ends within a slice of its
    /// sleep and writes its last line, instead of dying in the middle of a sleep.
    pub term: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

/// The longest the watch sleeps at once (SIGTERM cuts a sleep short).
pub const SLEEP_SLICE: Duration = Duration::from_secs(1);

impl Pace for RealPace {
    fn sleep(&mut self, d: Duration) {
        use nix::sys::time::TimeSpec;
        use nix::time::{ClockId, ClockNanosleepFlags, clock_nanosleep};
        let until = Instant::now() + d;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() || self.term.load(std::sync::atomic::Ordering::Relaxed) {
                return;
            }
            // One wake-up per interval (a sliced sleep cost more CPU than the sample itself):
            // the SIGTERM handler interrupts it, since nanosleep is never restarted after a
            // handler (signal(7)); a signal that lands just before the call waits this sleep.
            let _ = clock_nanosleep(
                ClockId::CLOCK_MONOTONIC,
                ClockNanosleepFlags::empty(),
                &TimeSpec::from_duration(left.min(SLEEP_SLICE)),
            );
        }
    }

    fn should_stop(&mut self) -> bool {
        if self.term.load(std::sync::atomic::Ordering::Relaxed) {
            return true;
        }
        if PidFile::read(&self.pid_path) != Some(self.me) {
            return true;
        }
        false
    }

    fn asked_slurm(&mut self) {
        self.last_seen = Instant::now();
    }

    fn job_unseen_for_long(&mut self) -> bool {
        if self.last_scan.elapsed() >= JOB_SCAN_EVERY {
            self.last_scan = Instant::now();
            if job_has_stepd(&self.proc_root, self.job) {
                self.last_seen = Instant::now();
            }
        }
        self.last_seen.elapsed() >= JOB_GONE_AFTER
    }

    fn job_still_here(&mut self) -> bool {
        let here = job_has_stepd(&self.proc_root, self.job);
        if here {
            self.last_seen = Instant::now();
        }
        here
    }
}

/// The watch's log (its lines, relayed by the epilog into the slurmd log).
pub fn log_path(state_dir: &Path, job: u32) -> PathBuf {
    state_dir.join(format!("watch-{job}.log"))
}

/// The watch's events of `job` kept on the node (`<state_dir>/watch-<job>.events`, one JSON
/// [`WatchEvent`] a line, root's): what it saw, written before it acts, so that the epilog puts
/// every event into the tag even when the job ended before the watch's own tag write landed.
pub fn events_path(state_dir: &Path, job: u32) -> PathBuf {
    state_dir.join(format!("watch-{job}.events"))
}

/// The most of an events file the epilog reads.
const MAX_EVENTS_BYTES: u64 = 64 * 1024;

/// The watch's half of [`events_path`]: each event when it appears, again when the watch
/// drained or requeued for it, and when it cleared; at most [`fabric_proto::tag::MAX_WATCH_EVENTS`]
/// events (the tag keeps the first ones), so a flapping link cannot fill the disk.
#[derive(Debug)]
struct EventLog {
    path: PathBuf,
    /// The open event of each fault, by [`Fault::key`] (two ports failing one check at once are
    /// two events).
    open: BTreeMap<String, WatchEvent>,
    kept: usize,
}

impl EventLog {
    /// Starts over (a requeued job runs again under its id).
    fn start(path: PathBuf) -> Self {
        let _ = std::fs::remove_file(&path);
        Self {
            path,
            open: BTreeMap::new(),
            kept: 0,
        }
    }

    /// A new event of the fault `key`, or a new state of its open event.
    fn record(&mut self, key: &str, ev: &WatchEvent) {
        let known = self
            .open
            .get(key)
            .is_some_and(|o| super::tag_update::same_watch_event(o, ev));
        if !known {
            if self.kept >= fabric_proto::tag::MAX_WATCH_EVENTS {
                return;
            }
            self.kept += 1;
        }
        self.open.insert(key.to_owned(), ev.clone());
        self.append(ev);
    }

    /// The open event of the fault `key` cleared at `at_s`; that event as it was open, when
    /// there was one.
    fn clear(&mut self, key: &str, at_s: u64) -> Option<WatchEvent> {
        let open = self.open.remove(key)?;
        let mut ev = open.clone();
        ev.cleared_at_s = Some(at_s);
        self.append(&ev);
        Some(open)
    }

    fn append(&self, ev: &WatchEvent) {
        use std::os::unix::fs::OpenOptionsExt;
        let Ok(mut line) = serde_json::to_string(ev) else {
            return;
        };
        line.push('\n');
        let written = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o600)
            .custom_flags(fabric_proto::record::O_NOFOLLOW)
            .open(&self.path)
            .and_then(|mut f| f.write_all(line.as_bytes()));
        if let Err(e) = written {
            tracing::warn!("cannot keep the event in {}: {e}", self.path.display());
        }
    }
}

/// The events an events file holds ([`events_path`]): the last state of each
/// ([`super::tag_update::same_watch_event`]), in the order they appeared, at most
/// [`fabric_proto::tag::MAX_WATCH_EVENTS`]; lines that do not read are skipped.
pub fn read_events(path: &Path) -> Vec<WatchEvent> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let mut text = String::new();
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(fabric_proto::record::O_NOFOLLOW)
        .open(path);
    let Ok(f) = opened else {
        return Vec::new();
    };
    let _ = f.take(MAX_EVENTS_BYTES).read_to_string(&mut text);
    let mut out: Vec<WatchEvent> = Vec::new();
    for mut ev in text
        .lines()
        .filter_map(|l| serde_json::from_str::<WatchEvent>(l).ok())
    {
        ev.check = fabric_proto::tag::scrub_text(&ev.check, 64);
        ev.message = fabric_proto::tag::scrub_text(&ev.message, 160);
        match out
            .iter()
            .position(|o| super::tag_update::same_watch_event(o, &ev))
        {
            Some(i) => out[i] = ev,
            None if out.len() < fabric_proto::tag::MAX_WATCH_EVENTS => out.push(ev),
            None => {}
        }
    }
    out
}

/// The most of the watch's log the epilog relays (its last lines).
pub const MAX_RELAYED_LOG_BYTES: usize = 8 * 1024;

/// How many watches of jobs other than `job` run on this node now: the pid files in
/// `state_dir` ([`pid_path`]) whose process is alive ([`PidFile::is_alive`]); a file left by a
/// watch that died does not count.
pub fn live_watches(state_dir: &Path, proc_root: &Path, job: u32) -> usize {
    let Ok(dir) = std::fs::read_dir(state_dir) else {
        return 0;
    };
    dir.flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .and_then(|n| n.strip_prefix("watch-")?.strip_suffix(".pid"))
                .and_then(|j| j.parse::<u32>().ok())
                .is_some_and(|j| j != job)
                && PidFile::read(&e.path()).is_some_and(|pf| pf.is_alive(proc_root))
        })
        .count()
}

/// Why the prolog starts no watch for this job although `watch_interval=` asks for one:
/// `max_watches=` watches of other jobs already run on this node (each is root's, charged to
/// no job). `None` when there is room (or the watch is off).
pub fn no_room(step: &JobStep<'_>) -> Option<String> {
    let setup = step.setup;
    setup.plugin.watch_interval?;
    let max = setup.plugin.max_watches;
    let live = live_watches(&setup.state_dir, Path::new("/proc"), setup.inv.job_id);
    (live >= max as usize).then(|| {
        format!(
            "job {} is not watched: {live} in-job watches already run on this node (max_watches={max}); faults during the job are found by its epilog",
            setup.inv.job_id
        )
    })
}

/// The prolog's half: starts the watch for this job and node through the runner, unless
/// `watch_interval=0` (the prolog asked [`no_room`] first). Says what it did.
pub fn start(step: &JobStep<'_>) {
    if step.setup.plugin.watch_interval.is_none() {
        return;
    }
    let mut inv = step.setup.inv.clone();
    inv.script = fabric_proto::invocation::Script::Watch;
    let log = log_path(&step.setup.state_dir, inv.job_id);
    match step.seams.runner.start_watch(&inv.to_argv(), &log) {
        Ok(pid) => step.say(&format!("watch started (pid {pid})")),
        Err(e) => step.say(&format!(
            "cannot start the in-job watch ({e}); faults during job {} are found at its end",
            inv.job_id
        )),
    }
}

/// The epilog's half: stops the watch ([`stop`]), relays the end of its log, and returns the
/// events it kept ([`read_events`]) for the epilog's tag write.
pub fn finish(step: &JobStep<'_>) -> Vec<WatchEvent> {
    let state = &step.setup.state_dir;
    let job = step.job_id();
    let grace = step.setup.budget().watch_stop(step.deadline());
    let stopped = stop(state, Path::new("/proc"), job, grace);
    let log = log_path(state, job);
    if let Ok(text) = std::fs::read(&log) {
        let from = text.len().saturating_sub(MAX_RELAYED_LOG_BYTES);
        let tail = String::from_utf8_lossy(&text[from..]);
        for line in tail.lines().skip(usize::from(from > 0)) {
            step.say(line);
        }
    }
    let _ = std::fs::remove_file(&log);
    match stopped {
        Stopped::NoWatch | Stopped::Ended => {}
        Stopped::Lost => step.say(&format!(
            "the in-job watch of job {job} ended before the epilog (killed?): faults after that were found only now"
        )),
    }
    let events_at = events_path(state, job);
    let events = read_events(&events_at);
    let _ = std::fs::remove_file(&events_at);
    events
}

/// Loads what the watch starts from: the prolog's snapshot (the baseline and the findings the
/// job started with).
pub fn load_start(
    snapshot: &Path,
) -> Result<(Baseline, Vec<Finding>), crate::probe::BaselineError> {
    let base = Baseline::load(snapshot)?;
    #[derive(serde::Deserialize)]
    struct Findings {
        #[serde(default)]
        findings: Vec<Finding>,
    }
    let findings = std::fs::read_to_string(snapshot)
        .ok()
        .and_then(|t| serde_json::from_str::<Findings>(&t).ok())
        .map(|f| f.findings)
        .unwrap_or_default();
    Ok((base, findings))
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod window_tests;
