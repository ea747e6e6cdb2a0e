//! The gates every change of the drill passes through (docs/drill.md, "The gates on a real
//! cluster").
//!
//! [`Gates`] holds what the drill may touch and what it must not: the classes it may inject here
//! ([`Place`]: on a real cluster, no testbed-only class and no class that changes hardware or a
//! daemon without `--allow-hardware CLASS`), its nodes (`--nodes`, all held by its reservation),
//! the ids of the jobs it submitted (a job is the drill's only when its id is one of these, never
//! because of its name), and the first refusal, which stops the drill for good.
//!
//! [`Gates::start`] runs once before anything changes; [`inject`] is the only way the round loop
//! ([`crate::run`]) and the workload ([`crate::workload`]) inject, and before **every** injection
//! it checks again: the class, the round's nodes among the drill's and still in the
//! reservation, no job the drill did not submit on any of its nodes, and the round's nodes in
//! service. A refusal is latched: the caller restores what it changed and reports why it stopped.
//! [`Gates::submit`] is the only way the drill submits, so that it knows its own jobs.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use crate::class::FaultClass;
use crate::cluster::{Cluster, ClusterError, QueuedJob};
use crate::halt::Halt;
use crate::inject::{InjectError, Injector};
use crate::journal::Journal;
use crate::observe::NodeView;
use crate::plan::{JobSpec, Round};
pub use crate::refusal::GateError;

/// Where the drill runs, and so which classes it may inject.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    /// The project's testbed: every class (its faults are fixture trees and its own netns).
    Testbed,
    /// A real cluster: no testbed-only class; a class that changes hardware or a daemon only
    /// when named by `--allow-hardware`.
    Cluster {
        /// The classes `--allow-hardware` names.
        allowed: Vec<FaultClass>,
    },
}

impl Place {
    /// Whether `class` may be injected here.
    pub fn class(&self, class: FaultClass) -> Result<(), GateError> {
        match self {
            Place::Testbed => Ok(()),
            Place::Cluster { allowed } => {
                if class.testbed_only() {
                    Err(GateError::TestbedOnly(class.id()))
                } else if class.touches_hardware() && !allowed.contains(&class) {
                    Err(GateError::NeedsAllowHardware(class.id()))
                } else {
                    Ok(())
                }
            }
        }
    }
}

/// What the drill may touch, the jobs it submitted, and why it stopped (see the module docs).
#[derive(Debug)]
pub struct Gates {
    place: Place,
    nodes: Vec<String>,
    reservation: Option<String>,
    own_jobs: BTreeSet<u32>,
    started: bool,
    stopped: Option<GateError>,
    kept_out: BTreeMap<String, String>,
    resumed: BTreeSet<String>,
    halt: Halt,
    /// How long a node slurmctld is re-checking (`idle*` just after a resume) may take to answer
    /// before it counts as out of service.
    pub recheck_wait: Duration,
}

fn list(v: &[String]) -> String {
    v.join(",")
}

fn held(v: &NodeView) -> bool {
    v.state.contains("drain") || v.state.contains("down") || v.state.contains("fail")
}

impl Gates {
    /// The testbed's gates: every class, its virtual `nodes`, no reservation.
    pub fn testbed(nodes: Vec<String>) -> Gates {
        Gates::new(Place::Testbed, nodes, None)
    }

    /// A real cluster's gates: `nodes` (all in `reservation`), the classes `allowed` by
    /// `--allow-hardware`.
    pub fn cluster(nodes: Vec<String>, reservation: String, allowed: Vec<FaultClass>) -> Gates {
        Gates::new(Place::Cluster { allowed }, nodes, Some(reservation))
    }

    fn new(place: Place, nodes: Vec<String>, reservation: Option<String>) -> Gates {
        Gates {
            place,
            nodes,
            reservation,
            own_jobs: BTreeSet::new(),
            started: false,
            stopped: None,
            kept_out: BTreeMap::new(),
            resumed: BTreeSet::new(),
            halt: Halt::default(),
            recheck_wait: Duration::from_secs(30),
        }
    }

    /// Where the drill runs.
    pub fn place(&self) -> &Place {
        &self.place
    }

    /// The drill's nodes.
    pub fn nodes(&self) -> &[String] {
        &self.nodes
    }

    /// Whether `class` may be injected here.
    pub fn class(&self, class: FaultClass) -> Result<(), GateError> {
        self.place.class(class)
    }

    /// Whether job `id` is one this drill submitted.
    pub fn is_own(&self, id: u32) -> bool {
        self.own_jobs.contains(&id)
    }

    /// The first refusal, once the drill stopped.
    pub fn stopped(&self) -> Option<&GateError> {
        self.stopped.as_ref()
    }

    /// The gates stop the drill when `halt` is raised (a signal), at the next look
    /// ([`Gates::halted`]).
    pub fn stop_on(&mut self, halt: Halt) {
        self.halt = halt;
    }

    /// Whether a signal asked the drill to stop; the first time, it is latched as the drill's
    /// stop ([`Gates::stopped`]). The drill asks between its steps and inside its waits.
    pub fn halted(&mut self) -> bool {
        match self.halt.signal() {
            Some(sig) => {
                self.stop(GateError::Signalled(crate::halt::signal_name(sig)));
                true
            }
            None => false,
        }
    }

    /// Notes a node the drill resumed (its own fault drained it).
    pub fn note_resumed(&mut self, node: &str) {
        self.resumed.insert(node.to_owned());
    }

    /// The nodes the drill resumed after its own faults drained them.
    pub fn resumed(&self) -> &BTreeSet<String> {
        &self.resumed
    }

    /// Stops the drill (the first reason is kept); returns the reason kept.
    pub fn stop(&mut self, why: GateError) -> GateError {
        self.stopped.get_or_insert(why).clone()
    }

    /// Notes a drill node left out of service that the drill did not take out: it stays so.
    pub fn keep_out(&mut self, node: &str, why: String) {
        if !self.kept_out.contains_key(node) {
            tracing::warn!(
                "{node} is out of service ({why}) and the drill did not take it out: it stays so"
            );
            self.kept_out.insert(node.to_owned(), why);
        }
    }

    /// The drill's nodes left out of service that the drill did not take out, with their state.
    pub fn kept_out(&self) -> &BTreeMap<String, String> {
        &self.kept_out
    }

    /// Submits `job` (into `partition` when given) and remembers its id as the drill's own.
    pub fn submit(
        &mut self,
        cluster: &mut dyn Cluster,
        script: &Path,
        job: &JobSpec,
        partition: Option<&str>,
    ) -> Result<u32, ClusterError> {
        let id = match partition {
            Some(p) => cluster.submit_to(script, job, p)?,
            None => cluster.submit(script, job)?,
        };
        self.own_jobs.insert(id);
        Ok(id)
    }

    /// Submits `job` held ([`Cluster::submit_held`]) and remembers its id as the drill's own.
    pub fn submit_held(
        &mut self,
        cluster: &mut dyn Cluster,
        script: &Path,
        job: &JobSpec,
    ) -> Result<u32, ClusterError> {
        let id = cluster.submit_held(script, job)?;
        self.own_jobs.insert(id);
        Ok(id)
    }

    /// The check before anything changes (once; later calls repeat the first answer): every
    /// node in the reservation, no job the drill did not submit on them, every one in service.
    pub fn start(&mut self, cluster: &mut dyn Cluster) -> Result<(), GateError> {
        if let Some(e) = &self.stopped {
            return Err(e.clone());
        }
        if self.started {
            return Ok(());
        }
        let nodes = self.nodes.clone();
        let r = self
            .reserved(cluster, &nodes)
            .and_then(|()| self.no_foreign_jobs(cluster))
            .and_then(|()| self.in_service(cluster, &nodes));
        match r {
            Ok(()) => {
                self.started = true;
                Ok(())
            }
            Err(e) => Err(self.stop(e)),
        }
    }

    /// The check before one injection: the class, the round's nodes among the drill's and in
    /// its reservation, no job the drill did not submit on any of its nodes, the round's nodes in
    /// service. A refusal stops the drill.
    pub fn before_injection(
        &mut self,
        cluster: &mut dyn Cluster,
        round: &Round,
    ) -> Result<(), GateError> {
        self.halted();
        if let Some(e) = &self.stopped {
            return Err(e.clone());
        }
        let mut touched = vec![round.node.clone()];
        if let Some(job) = &round.job {
            touched.extend(job.nodes.iter().filter(|n| **n != round.node).cloned());
        }
        let r = self
            .class(round.class)
            .and_then(|()| self.touchable(cluster, &touched));
        r.map_err(|e| self.stop(e))
    }

    /// The check before a change the round loop's classes do not make (a straggler round's
    /// slowdown, [`crate::stragglers`]): [`Gates::before_injection`] without the class. `nodes`
    /// among the drill's and still in its reservation, no job the drill did not submit on any
    /// of its nodes, `nodes` in service. A refusal stops the drill.
    pub fn before_change(
        &mut self,
        cluster: &mut dyn Cluster,
        nodes: &[String],
    ) -> Result<(), GateError> {
        self.halted();
        if let Some(e) = &self.stopped {
            return Err(e.clone());
        }
        let r = self.touchable(cluster, nodes);
        r.map_err(|e| self.stop(e))
    }

    /// `touched` among the drill's nodes and in its reservation, no foreign job, in service.
    fn touchable(&self, cluster: &mut dyn Cluster, touched: &[String]) -> Result<(), GateError> {
        match touched.iter().find(|n| !self.nodes.contains(n)) {
            Some(n) => Err(GateError::NotADrillNode {
                node: n.clone(),
                nodes: list(&self.nodes),
            }),
            None => Ok(()),
        }
        .and_then(|()| self.reserved(cluster, touched))
        .and_then(|()| self.no_foreign_jobs(cluster))
        .and_then(|()| self.in_service(cluster, touched))
    }

    fn reserved(&self, cluster: &mut dyn Cluster, nodes: &[String]) -> Result<(), GateError> {
        let Some(res) = &self.reservation else {
            return Ok(());
        };
        let held = cluster
            .reservation_nodes(res)
            .map_err(|e| GateError::Reservation {
                reservation: res.clone(),
                why: e.to_string(),
            })?;
        let out: Vec<String> = nodes
            .iter()
            .filter(|n| !held.contains(n))
            .cloned()
            .collect();
        if out.is_empty() {
            Ok(())
        } else {
            Err(GateError::Reservation {
                reservation: res.clone(),
                why: format!("it does not hold {} (any more)", list(&out)),
            })
        }
    }

    fn no_foreign_jobs(&self, cluster: &mut dyn Cluster) -> Result<(), GateError> {
        let jobs = cluster
            .jobs_on(&self.nodes)
            .map_err(|e| GateError::Unchecked {
                what: "the jobs on the drill's nodes",
                error: e.to_string(),
            })?;
        let foreign: Vec<String> = jobs
            .iter()
            .filter(|j| !j.plain_id().is_some_and(|id| self.is_own(id)))
            .map(|j: &QueuedJob| format!("job {} of {} named {:?}", j.id, j.user, j.name))
            .collect();
        if foreign.is_empty() {
            Ok(())
        } else {
            Err(GateError::ForeignJobs(foreign))
        }
    }

    /// Every one of `nodes` in service; a node slurmctld is re-checking (`idle*` just after a
    /// resume, neither drained nor down) gets [`Gates::recheck_wait`].
    fn in_service(&self, cluster: &mut dyn Cluster, nodes: &[String]) -> Result<(), GateError> {
        let unchecked = |e: ClusterError| GateError::Unchecked {
            what: "the drill's nodes' states",
            error: e.to_string(),
        };
        let step = Duration::from_millis(500);
        let mut views = cluster.nodes().map_err(unchecked)?;
        let mut waited = Duration::ZERO;
        while waited < self.recheck_wait
            && views
                .iter()
                .any(|v| nodes.contains(&v.name) && v.out_of_service() && !held(v))
        {
            cluster.sleep(step);
            waited += step;
            views = cluster.nodes().map_err(unchecked)?;
        }
        let mut out: Vec<String> = views
            .iter()
            .filter(|v| nodes.contains(&v.name) && v.out_of_service())
            .map(|v| format!("{} ({}: {})", v.name, v.state, v.reason))
            .collect();
        out.extend(
            nodes
                .iter()
                .filter(|n| !views.iter().any(|v| &v.name == *n))
                .map(|n| format!("{n} (not known to Slurm)")),
        );
        if out.is_empty() {
            Ok(())
        } else {
            Err(GateError::OutOfService(out))
        }
    }
}

/// Injects `round`'s fault through the gates: the only way the drill injects. A refusal stops
/// the drill ([`Gates::stopped`]) and injects nothing.
pub fn inject(
    gates: &mut Gates,
    cluster: &mut dyn Cluster,
    injector: &mut dyn Injector,
    journal: &mut Journal,
    round: &Round,
    job_dir: &Path,
) -> Result<Vec<u64>, InjectError> {
    gates.before_injection(cluster, round)?;
    injector.inject(round, job_dir, journal)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::class::{Moment, NodeKind};
    use crate::fakes::{FakeCluster, FakeInjector};

    fn round(class: FaultClass, node: &str) -> Round {
        Round {
            index: 1,
            class,
            node: node.into(),
            kind: NodeKind::Roce,
            moment: Moment::Idle,
            job: None,
            during_at_permille: None,
            size: None,
        }
    }

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn a_job_named_fabric_drill_that_this_drill_did_not_submit_is_someone_elses() {
        let mut c = FakeCluster::new(u64::MAX / 4, "");
        c.reservation = Some(names(&["n1", "n2", "n3"]));
        let mut g = Gates::cluster(names(&["n1", "n2", "n3"]), "drill".into(), vec![]);
        g.start(&mut c).unwrap();
        // The drill's own job runs on n1; mallory names hers as the drill names its jobs.
        let spec = JobSpec {
            nodes: names(&["n1"]),
            full: false,
            fabric_run: false,
            spares: 0,
        };
        let own = g.submit(&mut c, Path::new("/x"), &spec, None).unwrap();
        c.foreign
            .push((0, "777".into(), "mallory".into(), "fabric-drill".into()));
        let e = g
            .before_injection(&mut c, &round(FaultClass::Clean, "n2"))
            .unwrap_err();
        let GateError::ForeignJobs(jobs) = &e else {
            panic!("{e}")
        };
        assert_eq!(jobs.len(), 1, "only mallory's: {jobs:?}");
        assert!(
            jobs[0].contains("777") && jobs[0].contains("mallory"),
            "{e}"
        );
        assert!(!jobs[0].contains(&own.to_string()), "{e}");
        assert_eq!(g.stopped(), Some(&e), "a refusal stops the drill for good");
    }

    #[test]
    fn the_drill_does_not_start_while_someone_elses_job_runs_or_a_node_is_out_of_service() {
        let mut c = FakeCluster::new(u64::MAX / 4, "");
        c.foreign
            .push((0, "55".into(), "alice".into(), "train".into()));
        let mut g = Gates::testbed(names(&["n1", "n2", "n3"]));
        let e = g.start(&mut c).unwrap_err().to_string();
        assert!(e.contains("job 55 of alice"), "{e}");
        let mut c = FakeCluster::new(u64::MAX / 4, "");
        c.nodes[2].state = "drained".into();
        c.nodes[2].reason = "bad DIMM [admin]".into();
        let mut g = Gates::testbed(names(&["n1", "n2", "n3"]));
        let e = g.start(&mut c).unwrap_err().to_string();
        assert!(e.contains("n3 (drained: bad DIMM [admin])"), "{e}");
    }

    #[test]
    fn an_injection_outside_the_drills_nodes_or_its_reservation_is_refused_and_nothing_is_injected()
    {
        let dir = tempfile::tempdir().unwrap();
        let mut j = Journal::open(&dir.path().join("j.jsonl")).unwrap();
        let mut inj = FakeInjector::default();
        let mut c = FakeCluster::new(u64::MAX / 4, "");
        c.reservation = Some(names(&["n1", "n2"]));
        let mut g = Gates::cluster(
            names(&["n1", "n2"]),
            "drill".into(),
            vec![FaultClass::PortDown],
        );
        g.start(&mut c).unwrap();
        let e = inject(
            &mut g,
            &mut c,
            &mut inj,
            &mut j,
            &round(FaultClass::PortDown, "n3"),
            dir.path(),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("node n3 is not one of the drill's nodes"), "{e}");
        // The reservation shrank since the start: n2 is no longer held.
        let mut c = FakeCluster::new(u64::MAX / 4, "");
        c.reservation = Some(names(&["n1", "n2"]));
        let mut g = Gates::cluster(
            names(&["n1", "n2"]),
            "drill".into(),
            vec![FaultClass::PortDown],
        );
        g.start(&mut c).unwrap();
        c.reservation = Some(names(&["n1"]));
        let e = inject(
            &mut g,
            &mut c,
            &mut inj,
            &mut j,
            &round(FaultClass::PortDown, "n2"),
            dir.path(),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("reservation drill: it does not hold n2"), "{e}");
        assert!(inj.injected().is_empty(), "{:?}", inj.injected());
    }

    #[test]
    fn on_a_real_cluster_a_class_is_injected_only_when_it_may_be() {
        let p = Place::Cluster {
            allowed: vec![FaultClass::MtuDrift],
        };
        assert_eq!(p.class(FaultClass::MtuDrift), Ok(()));
        assert_eq!(p.class(FaultClass::Clean), Ok(()));
        assert_eq!(
            p.class(FaultClass::PortDown),
            Err(GateError::NeedsAllowHardware("port_down"))
        );
        assert_eq!(
            p.class(FaultClass::LinkFlap),
            Err(GateError::TestbedOnly("link_flap"))
        );
        assert_eq!(Place::Testbed.class(FaultClass::LinkFlap), Ok(()));
    }
}
