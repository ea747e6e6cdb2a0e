//! The drill's loop: for each round of the plan, inject at its moment (through the gates, see
//! [`crate::gate`]), run the round's job as a user would, watch every node of the drill, restore,
//! resume what the round's own fault took out, and wait until the nodes are back in service. A
//! refusal of the gates stops the loop; what was changed is restored all the same.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use fabric_proto::job_state::JobState;

use crate::class::{FaultClass, Moment};
use crate::cluster::Cluster;
use crate::folder;
use crate::gate::{self, Gates};
use crate::inject::{Injector, restore};
use crate::job_age::JobAge;
use crate::journal::Journal;
use crate::observe::{NodeView, Signal, drain_signal, tag_signals};
use crate::plan::{JobSpec, Plan, Round};
use crate::score::{JobCost, RoundOutcome};

/// How the drill runs its rounds.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// Where each round's folder goes: `round-NNN/` (root's: the job script) with `job/` inside
    /// (the job user's: its working and checkpoint folder); see [`crate::folder`].
    pub work_dir: PathBuf,
    /// The uid the jobs run as, given the job's folder.
    pub job_uid: Option<u32>,
    /// Folder put first on the job's `PATH` (where `fabric-run` is), if any.
    pub bin_dir: Option<PathBuf>,
    /// Steps of the round's job, and seconds per step.
    pub steps: u32,
    /// Seconds per step.
    pub step_s: f64,
    /// The shortest wait after a `during` round's job starts before its fault goes in.
    pub during_delay: Duration,
    /// How long a `during` round's job runs, seconds: long enough that the fault lands in a
    /// running job at a point drawn by the plan ([`crate::plan::Round::during_at_permille`]),
    /// as in a real training job, and the epilog's end-of-job look is not what finds it.
    pub during_job_s: f64,
    /// How long the drill keeps watching after the job ended (the epilog's drain).
    pub settle: Duration,
    /// The longest a round may take before its job is cancelled.
    pub round_timeout: Duration,
    /// How often the nodes are polled.
    pub poll: Duration,
    /// The drill's nodes (watched and resumed).
    pub nodes: Vec<String>,
    /// `--job-age-s`: a `during` round's job is submitted held, dated back on its nodes for
    /// its watch, then released ([`crate::job_age`]); `None`: jobs keep their real start.
    pub job_age: Option<JobAge>,
}

impl RunConfig {
    /// Defaults for `nodes`, with job folders under `work_dir`.
    pub fn new(work_dir: PathBuf, nodes: Vec<String>) -> RunConfig {
        RunConfig {
            work_dir,
            job_uid: None,
            bin_dir: None,
            steps: 6,
            step_s: 0.4,
            during_delay: Duration::from_millis(500),
            during_job_s: 60.0,
            settle: Duration::from_secs(2),
            round_timeout: Duration::from_secs(90),
            poll: Duration::from_millis(250),
            nodes,
            job_age: None,
        }
    }
}

impl RunConfig {
    /// The steps of a round's job: [`RunConfig::steps`], or enough to last
    /// [`RunConfig::during_job_s`] for a `during` round.
    pub fn steps_for(&self, moment: Moment) -> u32 {
        match moment {
            Moment::During => ((self.during_job_s / self.step_s).ceil() as u32).max(self.steps),
            _ => self.steps,
        }
    }

    /// How long after a `during` round's job starts its fault goes in.
    pub fn during_wait(&self, round: &Round) -> Duration {
        let at = Duration::from_secs_f64(
            self.during_job_s * f64::from(round.during_at_permille.unwrap_or(0)) / 1000.0,
        );
        at.max(self.during_delay)
    }

    /// The longest a round may take: [`RunConfig::round_timeout`], and for a `during` round at
    /// least its job's length and a minute more.
    pub fn timeout_for(&self, moment: Moment) -> Duration {
        match moment {
            Moment::During => self
                .round_timeout
                .max(Duration::from_secs_f64(self.during_job_s + 60.0)),
            _ => self.round_timeout,
        }
    }
}

/// The batch script of a round's job: `steps` steps of `sleep`, a checkpoint file every third
/// step into `ckpt`, under `fabric-run` when the job asks for it.
pub fn job_script(job: &JobSpec, cfg: &RunConfig, steps: u32, ckpt: &Path, title: &str) -> String {
    let body = format!(
        "i=1; while [ $i -le {steps} ]; do sleep {step}; echo \"step $i\"; \
         if [ $((i % 3)) -eq 0 ]; then head -c 1048576 /dev/zero > ckpt-$SLURM_PROCID-$i; fi; \
         i=$((i+1)); done",
        step = cfg.step_s
    );
    let mut s = format!("#!/bin/sh\n# {title}\n");
    if let Some(b) = &cfg.bin_dir {
        s.push_str(&format!("export PATH='{}':$PATH\n", b.display()));
    }
    s.push_str(&format!("cd '{}' || exit 1\n", ckpt.display()));
    if job.fabric_run {
        s.push_str(&format!(
            "srun fabric-run --checkpoint-dir '{}' --checkpoint-quiet 200ms --step-regex '^step ([0-9]+)' -- sh -c '{}'\n",
            ckpt.display(),
            body
        ));
    } else {
        s.push_str(&format!("srun sh -c '{body}'\n"));
    }
    s
}

/// The longest the drill waits at once before it looks whether a signal asked it to stop.
pub const HALT_SLICE: Duration = Duration::from_millis(250);

/// The drill.
pub struct Drill<'a> {
    /// The cluster.
    pub cluster: &'a mut dyn Cluster,
    /// The injector.
    pub injector: &'a mut dyn Injector,
    /// The restore journal.
    pub journal: &'a mut Journal,
    /// What the drill may touch; every injection and submission passes through them.
    pub gates: &'a mut Gates,
    /// How.
    pub cfg: RunConfig,
}

impl std::fmt::Debug for Drill<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Drill").field("cfg", &self.cfg).finish()
    }
}

/// Watches drains during a round: the first time each node is seen out of service.
#[derive(Debug, Default)]
struct Watch {
    seen: BTreeMap<String, Signal>,
    health_ran: bool,
}

impl Watch {
    fn look(&mut self, views: &[NodeView], nodes: &[String], now_ms: u64) {
        for v in views.iter().filter(|v| nodes.contains(&v.name)) {
            if self.seen.contains_key(&v.name) {
                continue;
            }
            if let Some(s) = drain_signal(v, now_ms, self.health_ran) {
                self.seen.insert(v.name.clone(), s);
            }
        }
    }
}

impl Drill<'_> {
    fn look(&mut self, w: &mut Watch) {
        if let Ok(v) = self.cluster.nodes() {
            let now = self.cluster.now_ms();
            w.look(&v, &self.cfg.nodes, now);
        }
    }

    /// Injects `round`'s fault through the gates (the only way a round injects).
    fn inject(&mut self, round: &Round, job_dir: &Path) -> Result<Vec<u64>, String> {
        gate::inject(
            self.gates,
            self.cluster,
            self.injector,
            self.journal,
            round,
            job_dir,
        )
        .map_err(|e| e.to_string())
    }

    /// Waits `d` in slices of at most [`HALT_SLICE`], cut short when a signal asks the drill to
    /// stop; whether it was.
    fn pause(&mut self, d: Duration) -> bool {
        let until = self.cluster.now_ms().saturating_add(d.as_millis() as u64);
        loop {
            if self.gates.halted() {
                return true;
            }
            let left = until.saturating_sub(self.cluster.now_ms());
            if left == 0 {
                return false;
            }
            self.cluster
                .sleep(Duration::from_millis(left).min(HALT_SLICE));
        }
    }

    fn wait_running(&mut self, id: u32, w: &mut Watch) -> Result<(), String> {
        let polls = (60_000 / self.cfg.poll.as_millis().max(1)) as usize;
        for _ in 0..polls {
            if self.gates.halted() {
                return Err(format!("stopped before job {id} ran"));
            }
            match self.cluster.queue_state(id) {
                Ok(Some(s)) if s == "RUNNING" => return Ok(()),
                Ok(None) => return Err(format!("job {id} ended before it ran")),
                _ => {}
            }
            self.look(w);
            self.pause(self.cfg.poll);
        }
        Err(format!("job {id} did not start within 60 s"))
    }

    /// Runs one round.
    pub fn round(&mut self, round: &Round) -> RoundOutcome {
        let mut out = RoundOutcome {
            round: round.clone(),
            injected_at_ms: None,
            signals: Vec::new(),
            job: None,
            error: None,
            measured_pct: None,
        };
        let dir = match folder::prepare(
            &self.cfg.work_dir,
            &format!("round-{:03}", round.index),
            self.cfg.job_uid,
        ) {
            Ok(d) => d,
            Err(e) => {
                out.error = Some(e.to_string());
                return out;
            }
        };
        let ckpt = dir.job_dir.clone();
        let mut w = Watch::default();
        let mut ids = Vec::new();
        let mut job_id = None;
        let title = format!(
            "fabric-check drill round {}: {} on {} ({})",
            round.index,
            round.class.id(),
            round.node,
            round.moment.id()
        );
        let submit = |d: &mut Self, job: &JobSpec, held: bool| -> Result<u32, String> {
            let script = dir
                .write_script(
                    "job.sh",
                    &job_script(job, &d.cfg, d.cfg.steps_for(round.moment), &ckpt, &title),
                )
                .map_err(|e| e.to_string())?;
            if held {
                d.gates.submit_held(d.cluster, &script, job)
            } else {
                d.gates.submit(d.cluster, &script, job, None)
            }
            .map_err(|e| e.to_string())
        };
        let start = self.cluster.now_ms();
        let step: Result<(), String> = (|| {
            match (round.moment, &round.job) {
                (Moment::Before, Some(job)) => {
                    ids = self.inject(round, &ckpt)?;
                    out.injected_at_ms = Some(self.cluster.now_ms());
                    job_id = Some(submit(self, job, false)?);
                }
                (Moment::During, Some(job)) => {
                    let age = self.cfg.job_age.clone();
                    let id = submit(self, job, age.is_some())?;
                    job_id = Some(id);
                    if let Some(age) = age {
                        // Dated back before it can start: its watch reads the files as it
                        // opens. Their undos are the round's, so its end removes them.
                        let now_s = self.cluster.now_ms() / 1000;
                        let dated = age
                            .write(&job.nodes, id, now_s, self.journal, &mut ids)
                            .map_err(|e| format!("dating job {id} back: {e}"))
                            .and_then(|()| self.cluster.release(id).map_err(|e| e.to_string()));
                        if let Err(e) = dated {
                            let _ = self.cluster.cancel(id);
                            return Err(e);
                        }
                    }
                    self.wait_running(id, &mut w)?;
                    if self.pause(self.cfg.during_wait(round)) {
                        return Err("stopped before its fault went in".into());
                    }
                    ids.extend(self.inject(round, &ckpt)?);
                    out.injected_at_ms = Some(self.cluster.now_ms());
                }
                (_, _) => {
                    ids = self.inject(round, &ckpt)?;
                    out.injected_at_ms = Some(self.cluster.now_ms());
                    w.health_ran = true;
                    let code = self
                        .cluster
                        .health(&round.node)
                        .map_err(|e| e.to_string())?;
                    tracing::debug!(node = %round.node, code, "health ran");
                }
            }
            Ok(())
        })();
        if let Err(e) = step {
            out.error = Some(e);
        }
        out.measured_pct = self.injector.take_measured_pct();
        // Stopped by the gates (or a signal): the round's job goes too, so the nodes are handed
        // back.
        self.gates.halted();
        if self.gates.stopped().is_some()
            && let Some(id) = job_id
        {
            let _ = self.cluster.cancel(id);
        }
        // Watch until the job is over (cancelling it once the faulted node is out of service
        // and the job waits for it), then a little longer for the epilog.
        let mut ended_at = None;
        loop {
            self.look(&mut w);
            let now = self.cluster.now_ms();
            if self.gates.halted() {
                if let Some(id) = job_id {
                    let _ = self.cluster.cancel(id);
                }
                if let Some(e) = self.gates.stopped() {
                    out.error.get_or_insert_with(|| e.to_string());
                }
                break;
            }
            if now.saturating_sub(start) > self.cfg.timeout_for(round.moment).as_millis() as u64 {
                if let Some(id) = job_id {
                    let _ = self.cluster.cancel(id);
                }
                out.error
                    .get_or_insert_with(|| "the round ran past its time limit".into());
                break;
            }
            match (job_id, ended_at) {
                (None, None) => ended_at = Some(now),
                (Some(id), None) => match self.cluster.queue_state(id) {
                    Ok(None) => ended_at = Some(now),
                    // A removed node cannot end its part of the job: once Slurm saw it go,
                    // the drill puts it back so the job can finish.
                    Ok(Some(_))
                        if round.class == FaultClass::NodeRemoved
                            && w.seen.contains_key(&round.node) =>
                    {
                        ended_at = Some(now);
                    }
                    Ok(Some(state)) => {
                        let target_out = w.seen.contains_key(&round.node);
                        if target_out && JobState::parse(&state) == JobState::parse("PENDING") {
                            // Requeued by its prolog's drain: it would wait for the node.
                            let _ = self.cluster.cancel(id);
                        }
                    }
                    Err(_) => {}
                },
                (_, Some(t)) => {
                    if now.saturating_sub(t) >= self.cfg.settle.as_millis() as u64 {
                        break;
                    }
                }
            }
            self.pause(self.cfg.poll);
        }
        if let Err(e) = restore(self.injector, self.journal, &ids) {
            out.error.get_or_insert_with(|| format!("restore: {e}"));
        } else if out.injected_at_ms.is_some()
            && round.class.raises_counters()
            && !self.gates.halted()
        {
            // The restore put lower counters back, which no real node does. Until a probe saved
            // them, the node's baseline is the faulted tree's, and the same fault injected there
            // again would be a rise of zero: a probe of the healthy tree (`health`, idle now)
            // saves it, as the node's next job would.
            if let Err(e) = self.cluster.health(&round.node) {
                tracing::warn!(node = %round.node, "re-baselining after a counter fault: {e}");
            }
        }
        out.signals.extend(w.seen.into_values());
        if let Some(id) = job_id {
            let view = self.job_view(id);
            out.signals.extend(tag_signals(&view));
            let run = view.tag.as_ref().and_then(|t| t.run.clone());
            out.job = Some(JobCost {
                id,
                state: view.state.clone(),
                requeues: view.requeues,
                elapsed_s: view.elapsed_s,
                nnodes: view.nnodes,
                step_p50_s: run.as_ref().and_then(|r| r.step_p50_s),
                ckpt_total_s: run.as_ref().map(|r| r.ckpt_total_s),
                retries: run.as_ref().map_or(0, |r| r.retries),
                completed: view.state.starts_with("COMPLETED"),
            });
        }
        // A fault at a control size is still the drill's own change: a drain it caused is
        // scored as a false drain and then resumed like any drain the drill's faults caused.
        let injected = out.injected_at_ms.is_some() && !round.class.is_control();
        self.heal(round, injected);
        out
    }

    /// The job's accounting record once it has ended and its tag is in (at most ~15 s).
    fn job_view(&mut self, id: u32) -> crate::observe::JobView {
        let mut last = crate::observe::JobView {
            id,
            ..Default::default()
        };
        for _ in 0..60 {
            if let Ok(v) = self.cluster.job(id) {
                let ended = JobState::parse(&v.state).has_ended();
                let tagged = v.tag.is_some();
                last = v;
                if ended && tagged {
                    break;
                }
                if ended && last.state.starts_with("CANCELLED") && last.elapsed_s == 0.0 {
                    break;
                }
            }
            // Stopped: what the record says now is scored; its tag is not waited for.
            if self.gates.halted() {
                break;
            }
            self.cluster.sleep(Duration::from_millis(250));
        }
        last
    }

    /// Resumes what the round's own fault took out (its node, drained by fabric-check after the
    /// injection, which the gates saw in service; for `node_removed`, out of service at all), then
    /// waits until the drill's nodes are idle again. Any other node out of service (an admin's
    /// drain, fabric-check's drain of a node the drill did not fault: a real fault, or a false
    /// drain) stays as it is, noted in the gates ([`Gates::kept_out`]).
    fn heal(&mut self, round: &Round, injected: bool) {
        let stopped = self.gates.stopped().is_some();
        for _ in 0..240 {
            let Ok(views) = self.cluster.nodes() else {
                self.cluster.sleep(Duration::from_millis(250));
                continue;
            };
            let mut busy = false;
            for v in views.iter().filter(|v| self.cfg.nodes.contains(&v.name)) {
                let faulted = injected && v.name == round.node;
                let removed = faulted && round.class == FaultClass::NodeRemoved;
                let held = v.state.contains("drain")
                    || v.state.contains("down")
                    || v.state.contains("fail");
                if v.out_of_service() && faulted && (v.ours() || removed) {
                    if self.cluster.resume(&v.name).is_ok() {
                        self.gates.note_resumed(&v.name);
                    }
                    busy = true;
                } else if held {
                    self.gates
                        .keep_out(&v.name, format!("{}: {}", v.state, v.reason));
                } else if v.state.ends_with('*') || (!stopped && !v.state.starts_with("idle")) {
                    // `idle*`: slurmctld re-checks a node it resumed; wait until it answered.
                    // Once stopped, a node busy with someone else's job is not waited for.
                    busy = true;
                }
            }
            if !busy {
                return;
            }
            self.cluster.sleep(Duration::from_millis(250));
        }
        tracing::warn!("the drill's nodes did not all come back to idle within 60 s");
    }

    /// One clean job across every drill node before the first round, so that each node's
    /// saved counters (the probe's baseline) are those of the tree the drill starts from.
    pub fn warm_up(&mut self) -> Result<(), String> {
        let job = JobSpec {
            nodes: self.cfg.nodes.clone(),
            full: false,
            fabric_run: false,
            spares: 0,
        };
        let dir = folder::prepare(&self.cfg.work_dir, "warm-up", self.cfg.job_uid)
            .map_err(|e| e.to_string())?;
        let script = dir
            .write_script(
                "job.sh",
                &job_script(
                    &job,
                    &self.cfg,
                    self.cfg.steps,
                    &dir.job_dir,
                    "fabric-check drill warm-up",
                ),
            )
            .map_err(|e| e.to_string())?;
        let id = self
            .gates
            .submit(self.cluster, &script, &job, None)
            .map_err(|e| e.to_string())?;
        let start = self.cluster.now_ms();
        while self.cluster.now_ms().saturating_sub(start) < 120_000 {
            if let Ok(None) = self.cluster.queue_state(id) {
                return Ok(());
            }
            if self.pause(self.cfg.poll) {
                let _ = self.cluster.cancel(id);
                return Err(format!("stopped: the warm-up job {id} is cancelled"));
            }
        }
        let _ = self.cluster.cancel(id);
        Err(format!("the warm-up job {id} did not end within 120 s"))
    }

    /// Runs every round; `each` sees each outcome as it comes. Starts with the gates' check
    /// ([`Gates::start`]) and stops at their first refusal: the round refused (before its
    /// injection) is not among the outcomes, and [`Gates::stopped`] says why.
    pub fn run(&mut self, plan: &Plan, mut each: impl FnMut(&RoundOutcome)) -> Vec<RoundOutcome> {
        let mut out = Vec::new();
        if self.gates.start(self.cluster).is_err() {
            return out;
        }
        if let Err(e) = self.warm_up() {
            tracing::warn!("{e}");
        }
        for r in &plan.rounds {
            if self.gates.halted() {
                break;
            }
            let o = self.round(r);
            if self.gates.stopped().is_some() {
                break;
            }
            each(&o);
            out.push(o);
        }
        let _ = self.journal.compact();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::class::NodeKind;
    use crate::fakes::FakeCluster;
    use crate::plan::Plan;
    use crate::score::score;

    fn round(class: FaultClass, moment: Moment) -> Round {
        Round {
            index: 1,
            class,
            node: "n2".into(),
            kind: NodeKind::Ib,
            moment,
            job: (moment != Moment::Idle).then(|| JobSpec {
                nodes: vec!["n2".into(), "n1".into()],
                full: false,
                fabric_run: false,
                spares: 0,
            }),
            during_at_permille: None,
            size: None,
        }
    }

    fn three_nodes() -> Vec<String> {
        vec!["n1".into(), "n2".into(), "n3".into()]
    }

    fn drill_round(c: &mut FakeCluster, r: &Round) -> (RoundOutcome, usize, usize) {
        drill_round_in(c, r, &mut Gates::testbed(three_nodes()))
    }

    fn drill_round_in(
        c: &mut FakeCluster,
        r: &Round,
        gates: &mut Gates,
    ) -> (RoundOutcome, usize, usize) {
        let dir = tempfile::tempdir().unwrap();
        let mut j = Journal::open(&dir.path().join("j.jsonl")).unwrap();
        let mut inj = c.injector();
        let cfg = RunConfig::new(dir.path().join("work"), three_nodes());
        let o = {
            let mut d = Drill {
                cluster: c,
                injector: &mut inj,
                journal: &mut j,
                gates,
                cfg,
            };
            d.round(r)
        };
        let pending = j.pending().unwrap().len();
        (o, inj.undone, pending)
    }

    #[test]
    fn a_fault_drained_by_the_prolog_is_detected_timed_restored_and_its_node_resumed() {
        let mut c = FakeCluster::new(1500, "fabric-check: ib.port_state: mlx5_3 port 1 down");
        let (o, undone, pending) =
            drill_round(&mut c, &round(FaultClass::PortDown, Moment::Before));
        assert_eq!(o.error, None);
        let rs = crate::score::score_round(&o);
        let hit = rs.hit.expect("detected");
        assert_eq!(hit.detector, crate::observe::Detector::Prolog);
        assert!(
            rs.ttd_s.unwrap() >= 1.5 && rs.ttd_s.unwrap() < 2.0,
            "{:?}",
            rs.ttd_s
        );
        assert!(rs.false_nodes.is_empty());
        assert_eq!((undone, pending), (1, 0), "restored and journaled as done");
        assert_eq!(c.resumed, vec!["n2".to_owned()]);
        assert!(c.nodes.iter().all(|n| n.state == "idle"));
    }

    #[test]
    fn a_partner_drained_in_the_same_round_is_a_false_drain() {
        let mut c = FakeCluster::new(500, "fabric-check: roce.ecn: during job 100: ecn off");
        c.also_drain = Some("n1".into());
        let (o, _, _) = drill_round(&mut c, &round(FaultClass::EcnOff, Moment::During));
        let s = score(1, &[o], &crate::score::Prices::default());
        assert_eq!(s.detected, 1);
        assert_eq!(s.false_drains, 1);
        assert_eq!(s.precision, Some(0.5));
        assert_eq!(s.per_class[0].detectors.get("epilog"), Some(&1));
    }

    #[test]
    fn a_restored_counter_fault_is_followed_by_a_health_probe_of_its_node_and_a_state_fault_is_not()
    {
        let mut c = FakeCluster::new(500, "fabric-check: ib.counters");
        let _ = drill_round(&mut c, &round(FaultClass::ErrorCounters, Moment::Before));
        assert_eq!(
            c.healths,
            vec!["n2".to_owned()],
            "the healthy tree re-baselined"
        );
        let mut c = FakeCluster::new(500, "fabric-check: ib.port_state");
        let _ = drill_round(&mut c, &round(FaultClass::PortDown, Moment::Before));
        assert!(c.healths.is_empty(), "{:?}", c.healths);
    }

    #[test]
    fn a_missed_fault_is_still_restored_and_a_clean_control_scores_clean() {
        let mut c = FakeCluster::new(u64::MAX / 4, "");
        let (o, undone, pending) = drill_round(&mut c, &round(FaultClass::PfcOff, Moment::Before));
        assert!(crate::score::score_round(&o).hit.is_none());
        assert_eq!((undone, pending), (1, 0));
        let mut c = FakeCluster::new(0, "");
        let (o, _, _) = drill_round(&mut c, &round(FaultClass::Clean, Moment::During));
        let s = score(1, &[o], &crate::score::Prices::default());
        assert_eq!((s.false_positives, s.false_drains), (0, 0));
        assert_eq!(s.per_class[0].precision, Some(1.0));
    }

    #[test]
    fn an_idle_fault_is_credited_to_health() {
        let mut c = FakeCluster::new(0, "fabric-check: ib.port_rate: mlx5_5 at 200 Gb/sec");
        let (o, _, _) = drill_round(&mut c, &round(FaultClass::RateDowngrade, Moment::Idle));
        let rs = crate::score::score_round(&o);
        assert_eq!(rs.hit.unwrap().detector, crate::observe::Detector::Health);
    }

    #[test]
    fn a_during_rounds_job_lasts_its_configured_length_and_its_fault_goes_in_at_the_drawn_point() {
        let cfg = RunConfig::new(PathBuf::from("/w"), vec!["n1".into()]);
        assert_eq!(cfg.steps_for(Moment::Before), cfg.steps);
        assert_eq!(cfg.steps_for(Moment::During), 150, "60 s of 0.4 s steps");
        let mut r = round(FaultClass::EcnOff, Moment::During);
        r.during_at_permille = Some(250);
        assert_eq!(cfg.during_wait(&r), Duration::from_secs(15));
        r.during_at_permille = None;
        assert_eq!(
            cfg.during_wait(&r),
            cfg.during_delay,
            "never before the job runs"
        );
        assert!(cfg.timeout_for(Moment::During) >= Duration::from_secs(120));
        assert_eq!(cfg.timeout_for(Moment::Idle), cfg.round_timeout);
    }

    /// A plugstack in `dir` whose nodes n1 and n2 keep their state in `dir/state/<node>`.
    fn state_folders(dir: &Path) -> PathBuf {
        for n in ["n1", "n2"] {
            std::fs::create_dir_all(dir.join("state").join(n)).unwrap();
        }
        let plugstack = dir.join("plugstack.conf");
        std::fs::write(
            &plugstack,
            format!(
                "required /x/spank_fabric_check.so state_dir={}/state/%n\n",
                dir.display()
            ),
        )
        .unwrap();
        plugstack
    }

    /// The drill's file on `node` under `dir`.
    fn job_age_file(dir: &Path, node: &str) -> PathBuf {
        dir.join("state")
            .join(node)
            .join(fabric_proto::drill_age::FILE_NAME)
    }

    #[test]
    fn a_during_rounds_job_dated_back_is_held_until_its_nodes_files_are_written_and_they_are_undone_with_the_round()
     {
        let dir = tempfile::tempdir().unwrap();
        let plugstack = state_folders(dir.path());
        let mut c = FakeCluster::new(500, "fabric-check: ib.counters: during job 100 (watch)");
        let mut j = Journal::open(&dir.path().join("j.jsonl")).unwrap();
        let mut inj = c.injector();
        let mut cfg = RunConfig::new(dir.path().join("work"), three_nodes());
        cfg.job_age = Some(JobAge {
            age_s: 86_400,
            plugstack,
        });
        cfg.during_job_s = 2.0;
        // When the job is released, each of its nodes holds the file naming it.
        let seen_at_release = {
            let mut gates = Gates::testbed(three_nodes());
            let mut d = Drill {
                cluster: &mut c,
                injector: &mut inj,
                journal: &mut j,
                gates: &mut gates,
                cfg,
            };
            let o = d.round(&round(FaultClass::ErrorCounters, Moment::During));
            assert_eq!(o.error, None);
            assert!(crate::score::score_round(&o).hit.is_some(), "detected");
            ["n1", "n2"].map(|n| {
                serde_json::from_slice::<fabric_proto::drill_age::DrillJobAge>(
                    &std::fs::read(job_age_file(dir.path(), n)).unwrap(),
                )
                .unwrap()
            })
        };
        assert_eq!(c.released, vec![100], "submitted held, then released");
        assert!(c.held.is_empty());
        for f in seen_at_release {
            assert_eq!((f.job, f.age_s), (100, 86_400));
        }
        // The fault and the two files: undone with the round (the fake's undo only counts).
        assert_eq!(inj.undone, 3);
        assert!(j.pending().unwrap().is_empty());
    }

    /// The fake injector, whose `Remove` undos really remove.
    struct Removing {
        fake: crate::fakes::FakeInjector,
        loads: crate::inject::Loads,
    }

    impl Injector for Removing {
        fn inject(
            &mut self,
            round: &Round,
            ckpt: &Path,
            journal: &mut Journal,
        ) -> Result<Vec<u64>, crate::inject::InjectError> {
            self.fake.inject(round, ckpt, journal)
        }
        fn undo(
            &mut self,
            node: &str,
            undo: &crate::journal::Undo,
        ) -> Result<(), crate::inject::InjectError> {
            match undo {
                crate::journal::Undo::Remove { .. } => self.loads.undo(node, undo),
                _ => self.fake.undo(node, undo),
            }
        }
    }

    #[test]
    fn a_drill_stopped_while_its_dated_back_job_runs_removes_the_files_from_the_jobs_nodes() {
        let dir = tempfile::tempdir().unwrap();
        let plugstack = state_folders(dir.path());
        let mut c = FakeCluster::new(500, "fabric-check: ib.counters: during job 100 (watch)");
        // SIGTERM (asked, not raised) once the dated-back job was released.
        let halt = crate::halt::Halt::default();
        let asked = halt.clone();
        c.after_sleep = Some(Box::new(move |c: &FakeCluster| {
            if !c.released.is_empty() {
                asked.ask(signal_hook::consts::SIGTERM);
            }
        }));
        let mut gates = Gates::testbed(three_nodes());
        gates.stop_on(halt);
        let mut inj = Removing {
            fake: c.injector(),
            loads: crate::inject::Loads::default(),
        };
        let mut j = Journal::open(&dir.path().join("j.jsonl")).unwrap();
        let mut cfg = RunConfig::new(dir.path().join("work"), three_nodes());
        cfg.job_age = Some(JobAge {
            age_s: 86_400,
            plugstack,
        });
        let o = Drill {
            cluster: &mut c,
            injector: &mut inj,
            journal: &mut j,
            gates: &mut gates,
            cfg,
        }
        .round(&round(FaultClass::ErrorCounters, Moment::During));
        assert!(
            o.error
                .is_some_and(|e| e.contains("SIGTERM") || e.contains("stopped"))
        );
        assert_eq!(o.injected_at_ms, None, "no fault went in after the signal");
        assert!(c.cancelled.contains(&100), "its job is cancelled");
        for n in ["n1", "n2"] {
            assert!(
                !job_age_file(dir.path(), n).exists(),
                "{n}'s file is removed"
            );
        }
        assert!(j.pending().unwrap().is_empty());
    }

    #[test]
    fn the_job_script_runs_under_fabric_run_only_when_asked() {
        let cfg = RunConfig::new("/w".into(), vec![]);
        let mut job = JobSpec {
            nodes: vec!["n1".into()],
            full: false,
            fabric_run: true,
            spares: 0,
        };
        let s = job_script(&job, &cfg, cfg.steps, Path::new("/w/round-001"), "t");
        assert!(
            s.contains("srun fabric-run --checkpoint-dir '/w/round-001'"),
            "{s}"
        );
        job.fabric_run = false;
        let s = job_script(&job, &cfg, cfg.steps, Path::new("/w/round-001"), "t");
        assert!(s.contains("srun sh -c 'i=1;"), "{s}");
        assert!(!s.contains("fabric-run"), "{s}");
    }

    fn idle_round(index: usize, class: FaultClass, node: &str) -> Round {
        Round {
            index,
            class,
            node: node.into(),
            kind: NodeKind::Roce,
            moment: Moment::Idle,
            job: None,
            during_at_permille: None,
            size: None,
        }
    }

    /// Runs `plan` on `c` with `gates`: the outcomes, the faults injected, the entries left
    /// pending in the journal.
    fn drill_plan(
        c: &mut FakeCluster,
        gates: &mut Gates,
        plan: &Plan,
    ) -> (Vec<RoundOutcome>, Vec<(String, FaultClass)>, usize) {
        let dir = tempfile::tempdir().unwrap();
        let mut j = Journal::open(&dir.path().join("j.jsonl")).unwrap();
        let mut inj = c.injector();
        let outcomes = Drill {
            cluster: c,
            injector: &mut inj,
            journal: &mut j,
            gates,
            cfg: RunConfig::new(dir.path().join("work"), three_nodes()),
        }
        .run(plan, |_| {});
        let pending = j.pending().unwrap().len();
        (outcomes, inj.injected(), pending)
    }

    fn three_rounds() -> Plan {
        Plan {
            seed: 1,
            rounds: vec![
                idle_round(1, FaultClass::MtuDrift, "n2"),
                idle_round(2, FaultClass::MtuDrift, "n3"),
                idle_round(3, FaultClass::MtuDrift, "n1"),
            ],
        }
    }

    #[test]
    fn a_job_that_appears_mid_drill_stops_the_drill_before_its_next_injection_and_all_is_restored()
    {
        let mut c = FakeCluster::new(500, "fabric-check: roce.mtu: ens4np0 at 1500");
        c.reservation = Some(three_nodes());
        // Alice's job lands on the drill's nodes once the first fault went in.
        c.foreign
            .push((1, "900".into(), "alice".into(), "train".into()));
        let mut gates = Gates::cluster(three_nodes(), "drill".into(), vec![FaultClass::MtuDrift]);
        let (outcomes, injected, pending) = drill_plan(&mut c, &mut gates, &three_rounds());
        assert_eq!(injected, vec![("n2".to_owned(), FaultClass::MtuDrift)]);
        assert_eq!(
            outcomes.len(),
            1,
            "the refused round is not a round of the drill"
        );
        assert_eq!(pending, 0, "what the first round changed was restored");
        let e = gates.stopped().expect("stopped").to_string();
        assert!(e.contains("job 900 of alice"), "{e}");
        assert_eq!(c.resumed, vec!["n2".to_owned()], "its own drain resumed");
    }

    #[test]
    fn a_reservation_that_stops_holding_a_node_mid_drill_stops_the_drill_before_it_injects_there() {
        let mut c = FakeCluster::new(500, "fabric-check: roce.mtu: ens4np0 at 1500");
        c.reservation = Some(three_nodes());
        c.reservation_later = Some((1, vec!["n1".into(), "n2".into()]));
        let mut gates = Gates::cluster(three_nodes(), "drill".into(), vec![FaultClass::MtuDrift]);
        let (outcomes, injected, pending) = drill_plan(&mut c, &mut gates, &three_rounds());
        assert_eq!(injected, vec![("n2".to_owned(), FaultClass::MtuDrift)]);
        assert_eq!((outcomes.len(), pending), (1, 0));
        let e = gates.stopped().expect("stopped").to_string();
        assert!(e.contains("reservation drill: it does not hold n3"), "{e}");
    }

    #[test]
    fn the_drill_resumes_the_node_its_fault_drained_and_leaves_an_admins_drain_as_it_is() {
        let mut c = FakeCluster::new(500, "fabric-check: ib.port_state: mlx5_3 port 1 down");
        // The admin takes n3 out while the round runs.
        c.other_drain = Some(("n3".into(), 1, "bad DIMM [admin]".into()));
        let mut gates = Gates::testbed(three_nodes());
        drill_round_in(
            &mut c,
            &round(FaultClass::PortDown, Moment::Idle),
            &mut gates,
        );
        assert_eq!(c.resumed, vec!["n2".to_owned()]);
        assert_eq!(c.nodes[2].state, "drained", "the admin's drain stays");
        assert_eq!(
            gates.kept_out().get("n3").map(String::as_str),
            Some("drained: bad DIMM [admin]")
        );
    }

    #[test]
    fn a_fabric_check_drain_of_a_node_the_drill_did_not_fault_stays_drained() {
        let mut c = FakeCluster::new(500, "fabric-check: roce.ecn: during job 100: ecn off");
        // n1 is drained by fabric-check too: a real fault there, or a false drain.
        c.also_drain = Some("n1".into());
        let mut gates = Gates::testbed(three_nodes());
        drill_round_in(
            &mut c,
            &round(FaultClass::EcnOff, Moment::During),
            &mut gates,
        );
        assert_eq!(c.resumed, vec!["n2".to_owned()]);
        assert_eq!(c.nodes[0].state, "drained");
        assert!(gates.kept_out().contains_key("n1"));
        // A control round drains nothing of its own: a drain there stays too.
        let mut c = FakeCluster::new(0, "");
        c.other_drain = Some((
            "n2".into(),
            0,
            "fabric-check: ib.port_state: mlx5_0 port 1 down".into(),
        ));
        drill_round(&mut c, &round(FaultClass::Clean, Moment::Before));
        assert!(c.resumed.is_empty(), "{:?}", c.resumed);
    }

    #[test]
    fn a_rounds_job_script_is_never_written_through_a_link_left_in_an_earlier_round_folder() {
        let dir = tempfile::tempdir().unwrap();
        let work = dir.path().join("work");
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        std::fs::create_dir_all(work.join("round-001")).unwrap();
        std::os::unix::fs::symlink(&victim, work.join("round-001/job.sh")).unwrap();
        let mut c = FakeCluster::new(u64::MAX / 4, "");
        let mut j = Journal::open(&dir.path().join("j.jsonl")).unwrap();
        let mut inj = c.injector();
        let mut gates = Gates::testbed(three_nodes());
        let o = Drill {
            cluster: &mut c,
            injector: &mut inj,
            journal: &mut j,
            gates: &mut gates,
            cfg: RunConfig::new(work.clone(), three_nodes()),
        }
        .round(&round(FaultClass::Clean, Moment::Before));
        assert_eq!(o.error, None);
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        let script = std::fs::read_to_string(work.join("round-001/job.sh")).unwrap();
        assert!(
            script.contains(&format!("cd '{}'", work.join("round-001/job").display())),
            "the job works in its own folder: {script}"
        );
    }
}
