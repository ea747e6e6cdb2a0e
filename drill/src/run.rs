//! The drill's loop: for each round of the plan, inject at its moment, run the round's job as a
//! user would, watch every node of the drill, restore, resume what the round drained, and wait
//! until the nodes are back in service.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use fabric_proto::job_state::JobState;

use crate::class::{FaultClass, Moment};
use crate::cluster::Cluster;
use crate::inject::{Injector, restore};
use crate::journal::Journal;
use crate::observe::{NodeView, Signal, drain_signal, tag_signals};
use crate::plan::{JobSpec, Plan, Round};
use crate::score::{JobCost, RoundOutcome};

/// How the drill runs its rounds.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// Where each round's job folder goes (its checkpoints and script).
    pub work_dir: PathBuf,
    /// The uid the jobs run as, which must be able to write its folder.
    pub job_uid: Option<u32>,
    /// Folder put first on the job's `PATH` (where `fabric-run` is), if any.
    pub bin_dir: Option<PathBuf>,
    /// Steps of the round's job, and seconds per step.
    pub steps: u32,
    /// Seconds per step.
    pub step_s: f64,
    /// How long after the job starts a `during` fault is injected.
    pub during_delay: Duration,
    /// How long the drill keeps watching after the job ended (the epilog's drain).
    pub settle: Duration,
    /// The longest a round may take before its job is cancelled.
    pub round_timeout: Duration,
    /// How often the nodes are polled.
    pub poll: Duration,
    /// The drill's nodes (watched and resumed).
    pub nodes: Vec<String>,
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
            settle: Duration::from_secs(2),
            round_timeout: Duration::from_secs(90),
            poll: Duration::from_millis(250),
            nodes,
        }
    }
}

/// The batch script of a round's job: steps of `sleep`, a checkpoint file every third step into
/// `ckpt`, under `fabric-run` when the job asks for it.
pub fn job_script(job: &JobSpec, cfg: &RunConfig, ckpt: &Path, title: &str) -> String {
    let body = format!(
        "i=1; while [ $i -le {steps} ]; do sleep {step}; echo \"step $i\"; \
         if [ $((i % 3)) -eq 0 ]; then head -c 1048576 /dev/zero > ckpt-$SLURM_PROCID-$i; fi; \
         i=$((i+1)); done",
        steps = cfg.steps,
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

/// The drill.
pub struct Drill<'a> {
    /// The cluster.
    pub cluster: &'a mut dyn Cluster,
    /// The injector.
    pub injector: &'a mut dyn Injector,
    /// The restore journal.
    pub journal: &'a mut Journal,
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

    fn wait_running(&mut self, id: u32, w: &mut Watch) -> Result<(), String> {
        let polls = (60_000 / self.cfg.poll.as_millis().max(1)) as usize;
        for _ in 0..polls {
            match self.cluster.queue_state(id) {
                Ok(Some(s)) if s == "RUNNING" => return Ok(()),
                Ok(None) => return Err(format!("job {id} ended before it ran")),
                _ => {}
            }
            self.look(w);
            self.cluster.sleep(self.cfg.poll);
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
        };
        let ckpt = self.cfg.work_dir.join(format!("round-{:03}", round.index));
        if let Err(e) = prepare_dir(&ckpt, self.cfg.job_uid) {
            out.error = Some(e);
            return out;
        }
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
        let submit = |d: &mut Self, job: &JobSpec| -> Result<u32, String> {
            let script = ckpt.join("job.sh");
            std::fs::write(&script, job_script(job, &d.cfg, &ckpt, &title))
                .map_err(|e| format!("cannot write {}: {e}", script.display()))?;
            d.cluster.submit(&script, job).map_err(|e| e.to_string())
        };
        let start = self.cluster.now_ms();
        let step: Result<(), String> = (|| {
            match (round.moment, &round.job) {
                (Moment::Before, Some(job)) => {
                    ids = self
                        .injector
                        .inject(round, &ckpt, self.journal)
                        .map_err(|e| e.to_string())?;
                    out.injected_at_ms = Some(self.cluster.now_ms());
                    job_id = Some(submit(self, job)?);
                }
                (Moment::During, Some(job)) => {
                    let id = submit(self, job)?;
                    job_id = Some(id);
                    self.wait_running(id, &mut w)?;
                    self.cluster.sleep(self.cfg.during_delay);
                    ids = self
                        .injector
                        .inject(round, &ckpt, self.journal)
                        .map_err(|e| e.to_string())?;
                    out.injected_at_ms = Some(self.cluster.now_ms());
                }
                (_, _) => {
                    ids = self
                        .injector
                        .inject(round, &ckpt, self.journal)
                        .map_err(|e| e.to_string())?;
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
        // Watch until the job is over (cancelling it once the faulted node is out of service
        // and the job waits for it), then a little longer for the epilog.
        let mut ended_at = None;
        loop {
            self.look(&mut w);
            let now = self.cluster.now_ms();
            if now.saturating_sub(start) > self.cfg.round_timeout.as_millis() as u64 {
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
            self.cluster.sleep(self.cfg.poll);
        }
        if let Err(e) = restore(self.injector, self.journal, &ids) {
            out.error.get_or_insert_with(|| format!("restore: {e}"));
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
        self.heal(round);
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
            self.cluster.sleep(Duration::from_millis(250));
        }
        last
    }

    /// Resumes every drill node out of service, then waits until all are idle again.
    fn heal(&mut self, round: &Round) {
        for _ in 0..240 {
            let Ok(views) = self.cluster.nodes() else {
                self.cluster.sleep(Duration::from_millis(250));
                continue;
            };
            let mine: Vec<&NodeView> = views
                .iter()
                .filter(|v| self.cfg.nodes.contains(&v.name))
                .collect();
            let mut busy = false;
            for v in &mine {
                let removed = round.class == FaultClass::NodeRemoved && v.name == round.node;
                if v.out_of_service() && (v.ours() || removed || v.state.contains("drain")) {
                    let _ = self.cluster.resume(&v.name);
                    busy = true;
                } else if !v.state.starts_with("idle") || v.state.ends_with('*') {
                    // `idle*`: slurmctld re-checks a node it resumed; wait until it answered.
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
        };
        let dir = self.cfg.work_dir.join("warm-up");
        prepare_dir(&dir, self.cfg.job_uid)?;
        let script = dir.join("job.sh");
        std::fs::write(
            &script,
            job_script(&job, &self.cfg, &dir, "fabric-check drill warm-up"),
        )
        .map_err(|e| format!("cannot write {}: {e}", script.display()))?;
        let id = self
            .cluster
            .submit(&script, &job)
            .map_err(|e| e.to_string())?;
        let start = self.cluster.now_ms();
        while self.cluster.now_ms().saturating_sub(start) < 120_000 {
            if let Ok(None) = self.cluster.queue_state(id) {
                return Ok(());
            }
            self.cluster.sleep(self.cfg.poll);
        }
        let _ = self.cluster.cancel(id);
        Err(format!("the warm-up job {id} did not end within 120 s"))
    }

    /// Runs every round; `each` sees each outcome as it comes.
    pub fn run(&mut self, plan: &Plan, mut each: impl FnMut(&RoundOutcome)) -> Vec<RoundOutcome> {
        if let Err(e) = self.warm_up() {
            tracing::warn!("{e}");
        }
        let mut out = Vec::new();
        for r in &plan.rounds {
            let o = self.round(r);
            each(&o);
            out.push(o);
        }
        let _ = self.journal.compact();
        out
    }
}

fn prepare_dir(dir: &Path, uid: Option<u32>) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    if let Some(uid) = uid {
        nix::unistd::chown(
            dir,
            Some(nix::unistd::Uid::from_raw(uid)),
            Some(nix::unistd::Gid::from_raw(uid)),
        )
        .map_err(|e| format!("cannot give {} to uid {uid}: {e}", dir.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::class::NodeKind;
    use crate::cluster::ClusterError;
    use crate::inject::InjectError;
    use crate::journal::Undo;
    use crate::observe::JobView;
    use crate::score::score;
    use fabric_proto::tag::{JobTag, NodeResult};
    use fabric_proto::verdict::Verdict;

    /// A cluster on a virtual clock: a job runs for `run_ms`; a node the fake injector faulted
    /// is drained by the detector the test names, `detect_ms` after the fault.
    #[derive(Default)]
    struct FakeCluster {
        now: u64,
        nodes: Vec<NodeView>,
        jobs: Vec<(u32, u64, JobSpec)>,
        faulted: Option<(String, u64)>,
        detect_ms: u64,
        reason: String,
        also_drain: Option<String>,
        resumed: Vec<String>,
        cancelled: Vec<u32>,
    }

    impl FakeCluster {
        fn new(detect_ms: u64, reason: &str) -> FakeCluster {
            FakeCluster {
                now: 1_000_000,
                nodes: ["n1", "n2", "n3"]
                    .iter()
                    .map(|n| NodeView {
                        name: (*n).into(),
                        state: "idle".into(),
                        reason: String::new(),
                    })
                    .collect(),
                detect_ms,
                reason: reason.into(),
                ..FakeCluster::default()
            }
        }

        fn tick(&mut self) {
            if let Some((n, t)) = &self.faulted
                && self.now >= t + self.detect_ms
            {
                let (n, reason) = (n.clone(), self.reason.clone());
                let extra = self.also_drain.clone();
                for v in &mut self.nodes {
                    if (v.name == n || Some(&v.name) == extra.as_ref()) && v.reason.is_empty() {
                        v.state = "drained".into();
                        v.reason = reason.clone();
                    }
                }
            }
        }
    }

    impl Cluster for FakeCluster {
        fn nodes(&mut self) -> Result<Vec<NodeView>, ClusterError> {
            self.tick();
            Ok(self.nodes.clone())
        }
        fn submit(&mut self, _: &Path, job: &JobSpec) -> Result<u32, ClusterError> {
            let id = 100 + self.jobs.len() as u32;
            self.jobs.push((id, self.now, job.clone()));
            Ok(id)
        }
        fn submit_to(&mut self, s: &Path, job: &JobSpec, _: &str) -> Result<u32, ClusterError> {
            self.submit(s, job)
        }
        fn nodes_of(&mut self, _: &str) -> Result<Vec<String>, ClusterError> {
            Ok(self.nodes.iter().map(|n| n.name.clone()).collect())
        }
        fn queue_state(&mut self, id: u32) -> Result<Option<String>, ClusterError> {
            let (_, t, _) = self.jobs.iter().find(|j| j.0 == id).cloned().unwrap();
            if self.cancelled.contains(&id) || self.now > t + 3000 {
                Ok(None)
            } else {
                Ok(Some("RUNNING".into()))
            }
        }
        fn job(&mut self, id: u32) -> Result<JobView, ClusterError> {
            let (_, t, spec) = self.jobs.iter().find(|j| j.0 == id).cloned().unwrap();
            let mut tag = JobTag {
                probed_at: Some(t / 1000),
                ..JobTag::default()
            };
            for n in &spec.nodes {
                tag.nodes.insert(
                    n.clone(),
                    NodeResult {
                        verdict: Verdict::Pass,
                        checks: vec![],
                        probe_ms: None,
                        drained: false,
                    },
                );
            }
            Ok(JobView {
                id,
                state: "COMPLETED".into(),
                elapsed_s: 3.0,
                nnodes: spec.nodes.len() as u32,
                end_ms: t + 3000,
                tag: Some(tag),
                ..JobView::default()
            })
        }
        fn cancel(&mut self, id: u32) -> Result<(), ClusterError> {
            self.cancelled.push(id);
            Ok(())
        }
        fn resume(&mut self, node: &str) -> Result<(), ClusterError> {
            self.resumed.push(node.into());
            self.faulted = None;
            for v in &mut self.nodes {
                if v.name == node {
                    v.state = "idle".into();
                    v.reason.clear();
                }
            }
            Ok(())
        }
        fn health(&mut self, _: &str) -> Result<i32, ClusterError> {
            Ok(2)
        }
        fn foreign_jobs(&mut self, _: &[String]) -> Result<Vec<String>, ClusterError> {
            Ok(vec![])
        }
        fn now_ms(&self) -> u64 {
            self.now
        }
        fn sleep(&mut self, d: Duration) {
            self.now += d.as_millis() as u64;
        }
    }

    /// Tells the fake cluster when a fault went in (through a shared cell) and records undos.
    struct FakeInjector {
        injected: std::rc::Rc<std::cell::RefCell<Vec<(String, u64)>>>,
        undone: usize,
    }

    impl Injector for FakeInjector {
        fn inject(
            &mut self,
            round: &Round,
            _: &Path,
            journal: &mut Journal,
        ) -> Result<Vec<u64>, InjectError> {
            if round.class.is_control() {
                return Ok(vec![]);
            }
            self.injected.borrow_mut().push((round.node.clone(), 0));
            Ok(vec![journal.record(
                &round.node,
                round.class.id(),
                Undo::Run {
                    argv: vec!["true".into()],
                },
            )?])
        }
        fn undo(&mut self, _: &Undo) -> Result<(), InjectError> {
            self.undone += 1;
            Ok(())
        }
    }

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
            }),
        }
    }

    fn drill_round(c: &mut FakeCluster, r: &Round) -> (RoundOutcome, usize, usize) {
        let dir = tempfile::tempdir().unwrap();
        let mut j = Journal::open(&dir.path().join("j.jsonl")).unwrap();
        let injected = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
        let mut inj = FakeInjector {
            injected: injected.clone(),
            undone: 0,
        };
        // The fault "starts" at the cluster's clock when the injector runs: emulate it by
        // arming the cluster before the round (the fake drains `detect_ms` after that).
        if !r.class.is_control() {
            c.faulted = Some((r.node.clone(), c.now));
        }
        let cfg = RunConfig::new(
            dir.path().join("work"),
            vec!["n1".into(), "n2".into(), "n3".into()],
        );
        let o = {
            let mut d = Drill {
                cluster: c,
                injector: &mut inj,
                journal: &mut j,
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
    fn the_job_script_runs_under_fabric_run_only_when_asked() {
        let cfg = RunConfig::new("/w".into(), vec![]);
        let mut job = JobSpec {
            nodes: vec!["n1".into()],
            full: false,
            fabric_run: true,
        };
        let s = job_script(&job, &cfg, Path::new("/w/round-001"), "t");
        assert!(
            s.contains("srun fabric-run --checkpoint-dir '/w/round-001'"),
            "{s}"
        );
        job.fabric_run = false;
        let s = job_script(&job, &cfg, Path::new("/w/round-001"), "t");
        assert!(s.contains("srun sh -c 'i=1;"), "{s}");
        assert!(!s.contains("fabric-run"), "{s}");
    }
}
