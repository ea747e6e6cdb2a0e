//! The watch's acting: its loop ([`run`]: sample, compare, act), the job step of each action
//! ([`Act`]), the drain, the live tag, the requeue the job asked for, and the job told.
//!
//! The loop's stages are the methods of its state, a `Watch`: `turn` (one sample: stop when
//! told or when the job is gone, sample, compare, act, wait), `act_on` (what changed, after
//! the node's [`act_delay`]), `appeared` (a fault: counted and kept, then `drain_and_tag`, the
//! job step that says, drains, requeues and writes the live tag, and `tell_job`) and `cleared`.

use std::path::Path;
use std::time::{Duration, Instant};

use super::life::Pace;
use super::outputs::{EventLog, NoticeFile, bump_metrics, events_path};
use super::sampling::Sampler;
use super::tracker::{Change, Fault, HOLD_DOWN, Tracker};
use crate::jobstep::policy::{self, Action, Found, Phase};
use crate::jobstep::tag_write::{TagWrite, Target, write_tag_to};
use crate::jobstep::{JobStep, Setup, now_unix};
use fabric_proto::notice::FabricNotice;
use fabric_proto::tag::WatchEvent;
use fabric_proto::verdict::Finding;

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

/// How the watch acts: gives `f` a job step with fresh seams and a fresh deadline (`timeout=`
/// from now), once per action.
pub trait Act {
    /// Runs `f` on a job step made for this action.
    fn with_step(&self, setup: &Setup, f: &mut dyn FnMut(&JobStep<'_>));

    /// The same way of acting, for another thread of the watch (its straggler figures,
    /// `crate::jobstep::stragglers`); `None` where there is none (then that thread does not run).
    fn detached(&self) -> Option<Box<dyn Act + Send>> {
        None
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
pub(super) fn job_still_runs(setup: &Setup, act: &dyn Act, pace: &mut dyn Pace) -> bool {
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
pub(super) fn requeue_if_asked(step: &JobStep<'_>, setup: &Setup) -> bool {
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
/// job"; `at_start` the prolog's findings. Its stages are the module's.
#[allow(clippy::too_many_arguments)]
pub fn run(
    setup: &Setup,
    interval: Duration,
    started_at_s: u64,
    at_start: &[Finding],
    sampler: &mut dyn Sampler,
    act: &dyn Act,
    pace: &mut dyn Pace,
    notice: Option<&mut NoticeFile>,
    metrics: Option<&Path>,
) -> WatchSummary {
    let node = setup.inv.node.clone();
    // This node's wait before it acts: its place in the job, fixed for the job's life.
    let delay = act_delay(
        setup.nodes.iter().position(|n| *n == node).unwrap_or(0),
        setup.nodes.len(),
    );
    let job = setup.inv.job_id;
    let _span = tracing::info_span!("watch", job, node = %node).entered();
    let mut tracker = Tracker::new(at_start).hold_down(HOLD_DOWN);
    let mut watch = Watch {
        setup,
        act,
        node,
        job,
        started_at_s,
        delay,
        notice,
        metrics,
        events: EventLog::start(events_path(&setup.state_dir, job)),
        summary: WatchSummary::default(),
    };
    while watch.turn(sampler, &mut tracker, pace, interval) {}
    watch.summary
}

/// What the watch's stages share from turn to turn: its job and node, where it acts and
/// writes, and what it did so far.
struct Watch<'a> {
    /// The job's and the plugin's settings.
    setup: &'a Setup,
    /// How it acts (a job step per action).
    act: &'a dyn Act,
    /// This node.
    node: String,
    /// The job.
    job: u32,
    /// The prolog's time (the job's start on this node).
    started_at_s: u64,
    /// This node's wait before it acts on a fault ([`act_delay`]).
    delay: Duration,
    /// The job's notice file, when it has one.
    notice: Option<&'a mut NoticeFile>,
    /// The metrics file, when there is one.
    metrics: Option<&'a Path>,
    /// The events kept on the node for the epilog.
    events: EventLog,
    /// What the watch did.
    summary: WatchSummary,
}

impl Watch<'_> {
    /// One turn of the loop: ends it when `pace` says stop or the job no longer runs; otherwise
    /// samples, compares with what was seen ([`Tracker`]), acts on what changed
    /// ([`Watch::act_on`]) and waits out the interval. Whether the loop goes on.
    fn turn(
        &mut self,
        sampler: &mut dyn Sampler,
        tracker: &mut Tracker,
        pace: &mut dyn Pace,
        interval: Duration,
    ) -> bool {
        if pace.should_stop() {
            return false;
        }
        if pace.job_unseen_for_long() && !job_still_runs(self.setup, self.act, pace) {
            let (job, node) = (self.job, &self.node);
            tracing::info!("watch: job {job} no longer runs on {node}; ending");
            self.summary.job_gone = true;
            return false;
        }
        let t0 = Instant::now();
        let sample = sampler.sample();
        self.summary.samples += 1;
        let Some(sample) = sample else {
            pace.sleep(interval.saturating_sub(t0.elapsed()));
            return true;
        };
        self.summary.full_samples += 1;
        let changes = tracker.observe_at(&sample.report.findings, sample.tools_ran, pace.now_s());
        if !changes.is_empty() && !job_still_runs(self.setup, self.act, pace) {
            let (job, node) = (self.job, &self.node);
            tracing::warn!(
                "watch: job {job} no longer runs on {node}; ending without acting on what changed"
            );
            self.summary.job_gone = true;
            return false;
        }
        self.act_on(changes, pace);
        pace.sleep(interval.saturating_sub(t0.elapsed()));
        true
    }

    /// Acts on what changed, after this node's wait ([`act_delay`]) when a fault appeared.
    fn act_on(&mut self, changes: Vec<Change>, pace: &mut dyn Pace) {
        let now = now_unix();
        if !self.delay.is_zero() && changes.iter().any(|c| matches!(c, Change::Appeared(_))) {
            pace.sleep(self.delay);
        }
        for change in changes {
            match change {
                Change::Appeared(fault) => self.appeared(&fault, now),
                Change::Cleared(fault) => self.cleared(&fault, now),
            }
        }
    }

    /// A fault that appeared at `now`: counted (a `fail` in the metrics too), its event kept on
    /// the node before acting when the policy tags, acted on ([`Watch::drain_and_tag`]), and
    /// the job told when the policy says so ([`Watch::tell_job`]).
    fn appeared(&mut self, fault: &Fault, now: u64) {
        let into = now.saturating_sub(self.started_at_s);
        let found = if fault.warn { Found::Warn } else { Found::Fail };
        let action = policy::decide(Phase::Watch, found, &self.setup.plugin);
        if !fault.warn
            && let Some(m) = self.metrics
        {
            bump_metrics(&self.setup.state_dir, m, &self.node, &fault.check);
        }
        self.summary.appeared.push(fault.check.clone());
        let ev = WatchEvent {
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
            self.events.record(&fault.key, &ev);
        }
        let (drained, requeued) = self.drain_and_tag(fault, action, ev);
        self.summary.drained |= drained;
        self.summary.requeued |= requeued;
        if action.tell_job {
            self.tell_job(fault, into, now, drained, requeued);
        }
    }

    /// The job step of a fault that appeared: says it and what the policy does; drains the
    /// node where it says so, then requeues the job when it asked ([`requeue_if_asked`]);
    /// writes the live tag where it tags (the event kept again when drained or requeued).
    /// Whether the node was drained, and whether the job was requeued.
    fn drain_and_tag(&mut self, fault: &Fault, action: Action, mut ev: WatchEvent) -> (bool, bool) {
        let (act, setup, job, node) = (self.act, self.setup, self.job, &self.node);
        let (events, already_requeued) = (&mut self.events, self.summary.requeued);
        let mut drained = false;
        let mut requeued = false;
        act.with_step(setup, &mut |step| {
            step.say(&format!(
                "watch: {}: {} ({}s into job {job}; policy={} → {})",
                fault.check,
                fault.message,
                ev.into_job_s,
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
            if drained && !already_requeued {
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
                    crate::jobstep::tag_update::add_watch_event(&mut t, node, ev.clone());
                    t
                });
                if w == TagWrite::NotWritten {
                    step.say("watch: the live tag was not written; the epilog records the fault");
                }
            }
        });
        (drained, requeued)
    }

    /// Tells the job through its notice file (when it has one) of a fault that appeared `into`
    /// seconds into it, and of what was done.
    fn tell_job(&mut self, fault: &Fault, into: u64, now: u64, drained: bool, requeued: bool) {
        let Some(n) = self.notice.as_deref_mut() else {
            return;
        };
        let mut msg = FabricNotice::new(self.job, &self.node, &fault.check, &fault.message, now);
        msg.into_job_s = into;
        msg.drained = drained;
        msg.requeued = requeued;
        msg.warn = fault.warn;
        if let Err(e) = n.append(&msg) {
            tracing::warn!("cannot write the notice {}: {e}", n.path().display());
        }
    }

    /// A fault that cleared at `now`: counted and said; where the policy tags, the event the
    /// watch kept is marked cleared, on the node and in the live tag.
    fn cleared(&mut self, fault: &Fault, now: u64) {
        self.summary.cleared.push(fault.check.clone());
        let found = if fault.warn { Found::Warn } else { Found::Fail };
        let action = policy::decide(Phase::Watch, found, &self.setup.plugin);
        let (act, setup, node, events) = (self.act, self.setup, &self.node, &mut self.events);
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
                    crate::jobstep::tag_update::clear_watch_event(&mut t, node, &ev, now);
                    t
                });
            }
        });
    }
}
