//! Fakes of the drill's seams for its unit tests: a cluster on a virtual clock and an injector
//! that tells it when a fault went in.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::Path;
use std::rc::Rc;
use std::time::Duration;

use fabric_proto::tag::{JobTag, NodeResult};
use fabric_proto::verdict::Verdict;

use crate::class::FaultClass;
use crate::cluster::{Cluster, ClusterError, JOB_NAME, QueuedJob};
use crate::inject::{InjectError, Injector};
use crate::journal::{Journal, Undo};
use crate::observe::{JobView, NodeView};
use crate::plan::{JobSpec, Round};

/// The faults injected so far: node and class, in order.
pub(crate) type Injections = Rc<RefCell<Vec<(String, FaultClass)>>>;

/// A test's hook into [`FakeCluster::sleep`].
pub(crate) type AfterSleep = Box<dyn FnMut(&FakeCluster)>;

/// A cluster on a virtual clock: a job runs for `job_ms` (3 s unless set); the node the injector faulted last is
/// drained with `reason` `detect_ms` after the fault (and `also_drain` with it).
#[derive(Default)]
pub(crate) struct FakeCluster {
    pub now: u64,
    pub nodes: Vec<NodeView>,
    pub jobs: Vec<(u32, u64, JobSpec)>,
    pub faulted: Option<(String, u64)>,
    pub detect_ms: u64,
    pub reason: String,
    pub also_drain: Option<String>,
    pub resumed: Vec<String>,
    pub cancelled: Vec<u32>,
    /// The nodes the reservation holds; `None`: there is none.
    pub reservation: Option<Vec<String>>,
    /// Jobs of others, each seen once this many faults were injected: id, user, name.
    pub foreign: Vec<(usize, String, String, String)>,
    /// Once this many faults were injected, the reservation holds these nodes instead.
    pub reservation_later: Option<(usize, Vec<String>)>,
    /// Partitions and their nodes (all nodes when a partition is not listed).
    pub partitions: BTreeMap<String, Vec<String>>,
    /// How long a job runs, virtual ms (0: 3 s).
    pub job_ms: u64,
    /// Someone else drains this node once this many faults were injected, with this reason.
    pub other_drain: Option<(String, usize, String)>,
    /// The nodes `health` ran on, in order.
    pub healths: Vec<String>,
    /// Runs after each sleep, on the cluster as it is then (a test's signal mid-round).
    pub after_sleep: Option<AfterSleep>,
    /// Jobs submitted held and not yet released.
    pub held: Vec<u32>,
    /// Jobs released, in order.
    pub released: Vec<u32>,
    injections: Injections,
    seen: usize,
}

impl FakeCluster {
    pub fn new(detect_ms: u64, reason: &str) -> FakeCluster {
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

    /// An injector whose faults this cluster sees.
    pub fn injector(&self) -> FakeInjector {
        FakeInjector {
            injected: self.injections.clone(),
            undone: 0,
        }
    }

    fn drain(&mut self, node: &str, reason: &str) {
        for v in &mut self.nodes {
            if v.name == node && v.reason.is_empty() {
                v.state = "drained".into();
                v.reason = reason.to_owned();
            }
        }
    }

    fn tick(&mut self) {
        let injected = self.injections.borrow().clone();
        if injected.len() > self.seen {
            self.seen = injected.len();
            let (node, class) = injected.last().cloned().expect("one");
            if !class.is_control() {
                self.faulted = Some((node, self.now));
            }
        }
        if let Some((n, t)) = self.faulted.clone()
            && self.now >= t.saturating_add(self.detect_ms)
        {
            let reason = self.reason.clone();
            self.drain(&n, &reason);
            if let Some(extra) = self.also_drain.clone() {
                self.drain(&extra, &reason);
            }
        }
        if let Some((n, after, reason)) = self.other_drain.clone()
            && self.injections.borrow().len() >= after
        {
            self.drain(&n, &reason);
        }
    }

    fn job_len(&self) -> u64 {
        if self.job_ms == 0 { 3000 } else { self.job_ms }
    }

    fn running(&self, id: u32) -> bool {
        self.jobs
            .iter()
            .find(|j| j.0 == id)
            .is_some_and(|(_, t, _)| {
                !self.cancelled.contains(&id)
                    && !self.held.contains(&id)
                    && self.now <= t + self.job_len()
            })
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
    fn submit_held(&mut self, s: &Path, job: &JobSpec) -> Result<u32, ClusterError> {
        let id = self.submit(s, job)?;
        self.held.push(id);
        Ok(id)
    }
    fn release(&mut self, id: u32) -> Result<(), ClusterError> {
        self.held.retain(|h| *h != id);
        self.released.push(id);
        // It starts now.
        let now = self.now;
        if let Some(j) = self.jobs.iter_mut().find(|j| j.0 == id) {
            j.1 = now;
        }
        Ok(())
    }
    fn nodes_of(&mut self, partition: &str) -> Result<Vec<String>, ClusterError> {
        Ok(self
            .partitions
            .get(partition)
            .cloned()
            .unwrap_or_else(|| self.nodes.iter().map(|n| n.name.clone()).collect()))
    }
    fn queue_state(&mut self, id: u32) -> Result<Option<String>, ClusterError> {
        if self.held.contains(&id) {
            return Ok(Some("PENDING".into()));
        }
        Ok(self.running(id).then(|| "RUNNING".into()))
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
    fn live_tag(&mut self, id: u32) -> Result<Option<JobTag>, ClusterError> {
        Ok(self.job(id)?.tag)
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
    fn health(&mut self, node: &str) -> Result<i32, ClusterError> {
        self.healths.push(node.to_owned());
        Ok(2)
    }
    fn jobs_on(&mut self, _: &[String]) -> Result<Vec<QueuedJob>, ClusterError> {
        let mut out: Vec<QueuedJob> = self
            .jobs
            .iter()
            .filter(|j| self.running(j.0))
            .map(|j| QueuedJob {
                id: j.0.to_string(),
                user: "root".into(),
                name: JOB_NAME.into(),
            })
            .collect();
        out.extend(
            self.foreign
                .iter()
                .filter(|f| f.0 <= self.injections.borrow().len())
                .map(|(_, id, user, name)| QueuedJob {
                    id: id.clone(),
                    user: user.clone(),
                    name: name.clone(),
                }),
        );
        Ok(out)
    }
    fn reservation_nodes(&mut self, name: &str) -> Result<Vec<String>, ClusterError> {
        if let Some((after, nodes)) = &self.reservation_later
            && self.injections.borrow().len() >= *after
        {
            return Ok(nodes.clone());
        }
        self.reservation.clone().ok_or_else(|| ClusterError {
            command: format!("scontrol show reservation {name}"),
            message: format!("no reservation {name}"),
        })
    }
    fn now_ms(&self) -> u64 {
        self.now
    }
    fn sleep(&mut self, d: Duration) {
        self.now += d.as_millis() as u64;
        if let Some(mut after) = self.after_sleep.take() {
            after(self);
            self.after_sleep = Some(after);
        }
    }
}

/// Tells its cluster when a fault went in and records undos.
#[derive(Default)]
pub(crate) struct FakeInjector {
    injected: Injections,
    pub undone: usize,
}

impl FakeInjector {
    /// The log of faults injected, shared: it goes on filling after the injector moved.
    pub fn clone_log(&self) -> Injections {
        self.injected.clone()
    }

    /// The faults injected so far (controls are not faults).
    pub fn injected(&self) -> Vec<(String, FaultClass)> {
        self.injected.borrow().clone()
    }
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
        self.injected
            .borrow_mut()
            .push((round.node.clone(), round.class));
        Ok(vec![journal.record(
            &round.node,
            round.class.id(),
            Undo::Run {
                argv: vec!["true".into()],
            },
        )?])
    }
    fn undo(&mut self, _: &str, _: &Undo) -> Result<(), InjectError> {
        self.undone += 1;
        Ok(())
    }
}

/// A stand-in `bin/fabric-fixtures` in the testbed folder `tb`: makes the folder it is given with
/// one file, `marker`, naming the scenario.
pub(crate) fn stand_in_fixture_writer(tb: &Path) {
    std::fs::create_dir_all(tb.join("bin")).unwrap();
    let fx = tb.join("bin/fabric-fixtures");
    std::fs::write(
        &fx,
        "#!/bin/sh\nmkdir -p \"$2\" && echo \"$1\" > \"$2/marker\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&fx, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
}
