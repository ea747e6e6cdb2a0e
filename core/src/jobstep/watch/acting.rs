//! The watch's acting: its loop ([`run`]: sample, compare, act), the job step of each action
//! ([`Act`]), the drain, the live tag, the requeue the job asked for, and the job told.

use std::path::Path;
use std::time::{Duration, Instant};

use super::life::Pace;
use super::outputs::{EventLog, NoticeFile, bump_metrics, events_path};
use super::sampling::Sampler;
use super::tracker::{Change, HOLD_DOWN, Tracker};
use crate::jobstep::policy::{self, Found, Phase};
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
    // This node's wait before it acts: its place in the job, fixed for the job's life.
    let delay = act_delay(
        setup.nodes.iter().position(|n| *n == node).unwrap_or(0),
        setup.nodes.len(),
    );
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
        let now = now_unix();
        if !delay.is_zero() && changes.iter().any(|c| matches!(c, Change::Appeared(_))) {
            pace.sleep(delay);
        }
        for change in changes {
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
                                crate::jobstep::tag_update::add_watch_event(&mut t, &node, ev.clone());
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
                                crate::jobstep::tag_update::clear_watch_event(&mut t, &node, &ev, now);
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
