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
                } else if !v.state.starts_with("idle") {
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

    /// Runs every round; `each` sees each outcome as it comes.
    pub fn run(&mut self, plan: &Plan, mut each: impl FnMut(&RoundOutcome)) -> Vec<RoundOutcome> {
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
