//! The straggler round loop on fakes: a cluster on a virtual clock whose "watch" names a node
//! some seconds after its control file (or a fake lever) slowed it, and says the workload's when
//! every node is slow together.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::Duration;

use fabric_proto::check_id::{JOB_STRAGGLER, JOB_WORKLOAD_SLOW};
use fabric_proto::tag::{DuringJob, JobTag, WatchEvent};
use fabric_proto::verdict::Verdict;

use super::levers::Lever;
use super::plan::{Kind, Plan, Round};
use super::run::{Config, Drill};
use super::score::{self, Outcome};
use super::trainer::{Control, Status};
use crate::cluster::{Cluster, ClusterError, JOB_NAME, QueuedJob};
use crate::gate::Gates;
use crate::inject::InjectError;
use crate::journal::{Journal, Undo};
use crate::observe::{JobView, NodeView};
use crate::plan::JobSpec;

const NODES: [&str; 4] = ["n1", "n2", "n3", "n4"];

fn nodes() -> Vec<String> {
    NODES.map(String::from).to_vec()
}

/// Nodes a fake lever slowed now.
type Slowed = Rc<RefCell<BTreeSet<String>>>;

/// A hook run after each of the fake cluster's sleeps.
type Hook = Box<dyn FnMut(&Fake)>;

/// A cluster on a virtual clock. A submitted job runs at once (its trainers write their
/// status), until cancelled; a node slow (its control file's factor above 1, or a fake lever's)
/// for `name_after_ms` gets a `job.straggler` in the live tag, unless every node is slow: then the
/// first node's row says `job.workload_slow`.
struct Fake {
    now: u64,
    jobs: Vec<(u32, PathBuf)>,
    cancelled: Vec<u32>,
    name_after_ms: u64,
    slowed: Slowed,
    slow_since: BTreeMap<String, u64>,
    tag: JobTag,
    /// The control files' contents each time one changed: (virtual ms, node, text).
    controls: Vec<(u64, String, String)>,
    pid: u32,
    after_sleep: Option<Hook>,
}

impl Fake {
    fn new(name_after_ms: u64, slowed: Slowed) -> Fake {
        Fake {
            now: 1_000_000,
            jobs: Vec::new(),
            cancelled: Vec::new(),
            name_after_ms,
            slowed,
            slow_since: BTreeMap::new(),
            tag: JobTag::default(),
            controls: Vec::new(),
            pid: 4242,
            after_sleep: None,
        }
    }

    fn running(&self) -> Option<(u32, PathBuf)> {
        self.jobs
            .last()
            .filter(|(id, _)| !self.cancelled.contains(id))
            .cloned()
    }

    fn tick(&mut self) {
        let Some((_, dir)) = self.running() else {
            return;
        };
        let mut slow = self.slowed.borrow().clone();
        for n in NODES {
            let text = std::fs::read_to_string(dir.join(format!("ctl-{n}"))).unwrap_or_default();
            if self
                .controls
                .iter()
                .rev()
                .find(|c| c.1 == n)
                .is_none_or(|c| c.2 != text)
            {
                self.controls.push((self.now, n.to_owned(), text.clone()));
            }
            if Control::parse(&text).factor > 1.0 {
                slow.insert(n.to_owned());
            }
        }
        self.slow_since.retain(|n, _| slow.contains(n));
        for n in &slow {
            self.slow_since.entry(n.clone()).or_insert(self.now);
        }
        let due: Vec<String> = self
            .slow_since
            .iter()
            .filter(|(_, t)| self.now >= **t + self.name_after_ms)
            .map(|(n, _)| n.clone())
            .collect();
        let event = |check: &str| WatchEvent {
            check: check.into(),
            message: String::new(),
            seen_at_s: 0,
            into_job_s: 0,
            cleared_at_s: None,
            drained: false,
            requeued: false,
            warn: true,
        };
        let (node, check) = if due.len() == NODES.len() {
            ("n1".to_owned(), JOB_WORKLOAD_SLOW)
        } else if let Some(n) = due.first() {
            (n.clone(), JOB_STRAGGLER)
        } else {
            return;
        };
        if !self.tag.during.iter().any(|d| d.node == node) {
            self.tag.during.push(DuringJob {
                node,
                rises: BTreeMap::new(),
                verdict: Verdict::Warn,
                watch: vec![event(check)],
            });
        }
    }
}

impl Cluster for Fake {
    fn nodes(&mut self) -> Result<Vec<NodeView>, ClusterError> {
        Ok(NODES
            .iter()
            .map(|n| NodeView {
                name: (*n).into(),
                state: "idle".into(),
                reason: String::new(),
            })
            .collect())
    }
    fn submit(&mut self, script: &Path, _: &JobSpec) -> Result<u32, ClusterError> {
        let id = 500 + self.jobs.len() as u32;
        let dir = script.parent().unwrap().to_owned();
        // Every node's trainer starts and tells its pid and usual times.
        for n in NODES {
            let st = Status {
                pid: self.pid,
                steps: 20,
                base_ms: 500.0,
                busy_wall_ms: 50.0,
                busy_cpu_ms: 50.0,
                transfer_ms: 2.0,
            };
            std::fs::write(dir.join(format!("job/trainer-{n}")), st.render()).unwrap();
        }
        self.jobs.push((id, dir));
        self.tag = JobTag::default();
        self.slow_since.clear();
        Ok(id)
    }
    fn submit_to(&mut self, s: &Path, j: &JobSpec, _: &str) -> Result<u32, ClusterError> {
        self.submit(s, j)
    }
    fn submit_held(&mut self, s: &Path, j: &JobSpec) -> Result<u32, ClusterError> {
        self.submit(s, j)
    }
    fn release(&mut self, _: u32) -> Result<(), ClusterError> {
        Ok(())
    }
    fn nodes_of(&mut self, _: &str) -> Result<Vec<String>, ClusterError> {
        Ok(nodes())
    }
    fn queue_state(&mut self, id: u32) -> Result<Option<String>, ClusterError> {
        Ok((self.running().map(|r| r.0) == Some(id)).then(|| "RUNNING".into()))
    }
    fn job(&mut self, id: u32) -> Result<JobView, ClusterError> {
        Ok(JobView {
            id,
            ..JobView::default()
        })
    }
    fn live_tag(&mut self, _: u32) -> Result<Option<JobTag>, ClusterError> {
        Ok(Some(self.tag.clone()))
    }
    fn cancel(&mut self, id: u32) -> Result<(), ClusterError> {
        self.cancelled.push(id);
        Ok(())
    }
    fn resume(&mut self, _: &str) -> Result<(), ClusterError> {
        Ok(())
    }
    fn health(&mut self, _: &str) -> Result<i32, ClusterError> {
        Ok(0)
    }
    fn jobs_on(&mut self, _: &[String]) -> Result<Vec<QueuedJob>, ClusterError> {
        Ok(self
            .running()
            .map(|(id, _)| QueuedJob {
                id: id.to_string(),
                user: "fabric".into(),
                name: JOB_NAME.into(),
            })
            .into_iter()
            .collect())
    }
    fn reservation_nodes(&mut self, _: &str) -> Result<Vec<String>, ClusterError> {
        Ok(nodes())
    }
    fn now_ms(&self) -> u64 {
        self.now
    }
    fn sleep(&mut self, d: Duration) {
        self.now += d.as_millis() as u64;
        self.tick();
        if let Some(mut h) = self.after_sleep.take() {
            h(self);
            self.after_sleep = Some(h);
        }
    }
}

/// Records caps and shapes; the node it slowed stays slow until its undo.
#[derive(Default)]
struct FakeLever {
    slowed: Slowed,
    caps: Vec<(String, Vec<u32>, (u64, u64))>,
    shapes: Vec<(String, u64)>,
    undone: Vec<String>,
    blocked: Option<(Kind, String)>,
}

impl FakeLever {
    fn slow(&mut self, node: &str, what: &str, j: &mut Journal) -> Result<Vec<u64>, InjectError> {
        self.slowed.borrow_mut().insert(node.to_owned());
        Ok(vec![j.record(
            node,
            what,
            Undo::Run {
                argv: vec!["true".into()],
            },
        )?])
    }
}

impl Lever for FakeLever {
    fn cap_cpu(
        &mut self,
        node: &str,
        pids: &[u32],
        cap: (u64, u64),
        j: &mut Journal,
    ) -> Result<Vec<u64>, InjectError> {
        self.caps.push((node.to_owned(), pids.to_vec(), cap));
        self.slow(node, "cpu_capped", j)
    }
    fn shape_path(
        &mut self,
        node: &str,
        rate_bps: u64,
        _: u64,
        j: &mut Journal,
    ) -> Result<Vec<u64>, InjectError> {
        self.shapes.push((node.to_owned(), rate_bps));
        self.slow(node, "path_shaped", j)
    }
    fn path_port(&self, _: &str) -> Option<u16> {
        Some(40_000)
    }
    fn blocked(&self, kind: Kind) -> Option<String> {
        self.blocked
            .as_ref()
            .filter(|(k, _)| *k == kind)
            .map(|(_, w)| w.clone())
    }
    fn undo(&mut self, node: &str, _: &Undo) -> Result<(), InjectError> {
        self.undone.push(node.to_owned());
        self.slowed.borrow_mut().remove(node);
        Ok(())
    }
}

fn round(index: usize, kind: Kind, node: &str, permille: u32) -> Round {
    Round {
        index,
        kind,
        node: node.into(),
        factor_permille: permille,
        inject_after_ms: 25_000,
    }
}

/// A fake `/proc` where pid 4242 is the trainer of the job user `uid`.
fn fake_proc(dir: &Path, uid: u32, cmdline: &str) -> PathBuf {
    let p = dir.join("proc/4242");
    std::fs::create_dir_all(&p).unwrap();
    std::fs::write(
        p.join("status"),
        format!("Name:\tfabric-check\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n"),
    )
    .unwrap();
    std::fs::write(p.join("cmdline"), cmdline).unwrap();
    dir.join("proc")
}

struct Bench {
    dir: tempfile::TempDir,
    cluster: Fake,
    lever: FakeLever,
    journal: Journal,
    gates: Gates,
    cfg: Config,
}

fn bench(name_after_ms: u64) -> Bench {
    let dir = tempfile::tempdir().unwrap();
    let lever = FakeLever::default();
    let cluster = Fake::new(name_after_ms, lever.slowed.clone());
    let journal = Journal::open(&dir.path().join("state/journal.jsonl")).unwrap();
    let mut cfg = Config::new(dir.path().join("work"), nodes());
    cfg.job_uid = Some(1500);
    cfg.proc_dir = fake_proc(dir.path(), 1500, "fabric-check\0drill-trainer\0");
    Bench {
        dir,
        cluster,
        lever,
        journal,
        gates: Gates::testbed(nodes()),
        cfg,
    }
}

impl Bench {
    fn run(&mut self, plan: &Plan) -> Vec<Outcome> {
        Drill {
            cluster: &mut self.cluster,
            lever: &mut self.lever,
            journal: &mut self.journal,
            gates: &mut self.gates,
            cfg: self.cfg.clone(),
        }
        .run(plan, |_| {})
    }

    fn one(&mut self, r: Round) -> Outcome {
        let mut o = self.run(&Plan {
            seed: 1,
            rounds: vec![r],
        });
        assert_eq!(o.len(), 1, "{:?}", self.gates.stopped());
        o.remove(0)
    }

    fn factors_of(&self, node: &str) -> Vec<f64> {
        self.cluster
            .controls
            .iter()
            .filter(|c| c.1 == node)
            .map(|c| Control::parse(&c.2).factor)
            .collect()
    }
}

#[test]
fn a_step_sleep_round_slows_only_its_node_through_its_control_file_and_is_named_and_timed() {
    let mut b = bench(22_000);
    let o = b.one(round(1, Kind::StepSleep, "n3", 1500));
    assert_eq!(o.error, None);
    assert_eq!(b.factors_of("n3"), vec![1.0, 1.5]);
    for n in ["n1", "n2", "n4"] {
        assert_eq!(b.factors_of(n), vec![1.0], "{n} stays at its usual step");
    }
    let r = score::score_round(&o);
    assert!(r.named, "{o:?}");
    let t = r.ttn_s.unwrap();
    assert!((22.0..=23.5).contains(&t), "{t}");
    assert!(r.wrongly_named.is_empty());
    assert_eq!(b.cluster.cancelled, vec![500], "the job is cancelled");
    // Named: the round ends early, well before its 45 s watch window.
    let inj = o.injected_at_ms.unwrap();
    assert!(b.cluster.now < inj + 30_000, "{}", b.cluster.now - inj);
    let script = std::fs::read_to_string(b.dir.path().join("work/stragglers-001/job.sh")).unwrap();
    assert!(
        script.contains("fabric-run --step-regex '^step ([0-9]+)'")
            && script.contains("drill-trainer"),
        "{script}"
    );
}

#[test]
fn a_slow_node_never_named_in_the_window_is_a_miss_after_the_whole_wait() {
    let mut b = bench(60_000);
    let o = b.one(round(1, Kind::StepSleep, "n2", 1100));
    let inj = o.injected_at_ms.unwrap();
    assert!(!score::score_round(&o).named);
    assert!(b.cluster.now >= inj + 45_000, "watched the whole window");
}

#[test]
fn a_cpu_capped_round_caps_the_job_users_trainer_at_the_computed_quota_and_restores_it() {
    let mut b = bench(20_000);
    let o = b.one(round(1, Kind::CpuCapped, "n2", 1500));
    assert_eq!(o.error, None);
    assert_eq!(
        b.lever.caps,
        vec![("n2".to_owned(), vec![4242], (1667, 10_000))]
    );
    assert!(score::score_round(&o).named);
    assert_eq!(b.lever.undone, vec!["n2".to_owned()], "restored");
    assert!(b.journal.pending().unwrap().is_empty());
    assert!(o.how.unwrap().contains("quota 1667/10000"));
}

#[test]
fn a_trainer_pid_that_is_not_the_job_users_process_is_never_capped() {
    let mut b = bench(20_000);
    b.cfg.proc_dir = fake_proc(b.dir.path(), 0, "fabric-check\0drill-trainer\0");
    let o = b.one(round(1, Kind::CpuCapped, "n2", 1500));
    assert!(b.lever.caps.is_empty());
    assert!(o.injected_at_ms.is_none(), "not scored");
    assert!(o.error.unwrap().contains("not the job user's"));
    let mut b = bench(20_000);
    b.cfg.proc_dir = fake_proc(b.dir.path(), 1500, "sleep\x00100\x00");
    let o = b.one(round(1, Kind::CpuCapped, "n2", 1500));
    assert!(b.lever.caps.is_empty());
    assert!(o.error.unwrap().contains("does not run the trainer"));
}

#[test]
fn a_path_shaped_round_shapes_its_node_at_the_rate_that_stretches_its_transfer() {
    let mut b = bench(20_000);
    let o = b.one(round(1, Kind::PathShaped, "n4", 2000));
    assert_eq!(o.error, None);
    // (256 KiB - 16 KiB) * 8 bits over 2 + 500 ms.
    assert_eq!(b.lever.shapes, vec![("n4".to_owned(), 3_916_494)]);
    let port = std::fs::read_to_string(b.dir.path().join("work/stragglers-001/path-n4")).unwrap();
    assert_eq!(port.trim(), "40000", "the trainer finds its relay");
}

#[test]
fn a_blocked_class_submits_no_job_and_is_not_scored() {
    let mut b = bench(20_000);
    b.lever.blocked = Some((Kind::PathShaped, "no namespaces".into()));
    let o = b.one(round(1, Kind::PathShaped, "n1", 1500));
    assert!(b.cluster.jobs.is_empty());
    assert_eq!(o.error.as_deref(), Some("blocked: no namespaces"));
    let s = score::score(1, &[o]);
    assert_eq!(s.recall_at_125pct, None);
    assert_eq!(s.classes, 0);
}

#[test]
fn a_rotating_control_moves_its_slow_node_each_period_round_robin() {
    let mut b = bench(60_000);
    let o = b.one(round(1, Kind::Rotating, "n3", 1500));
    assert_eq!(o.error, None);
    // 45 s watched, a new slow node every 10 s: n3, n4, n1, n2, n3.
    let order: Vec<String> = b
        .cluster
        .controls
        .iter()
        .filter(|c| Control::parse(&c.2).factor > 1.0)
        .map(|c| c.1.clone())
        .collect();
    assert_eq!(order, ["n3", "n4", "n1", "n2", "n3"]);
    // Never two slow at once (as the files stand after each of the fake's looks).
    let mut now: BTreeMap<String, f64> = BTreeMap::new();
    let times: BTreeSet<u64> = b.cluster.controls.iter().map(|c| c.0).collect();
    for t in times {
        for (_, n, text) in b.cluster.controls.iter().filter(|c| c.0 == t) {
            now.insert(n.clone(), Control::parse(text).factor);
        }
        assert!(now.values().filter(|f| **f > 1.0).count() <= 1, "{now:?}");
    }
}

#[test]
fn a_checkpoint_burst_asks_every_node_for_two_checkpoints_twenty_seconds_apart() {
    let mut b = bench(60_000);
    let o = b.one(round(1, Kind::CheckpointBurst, "n1", 1000));
    assert_eq!(o.error, None);
    for n in NODES {
        let asks: Vec<(u64, u32)> = b
            .cluster
            .controls
            .iter()
            .filter(|c| c.1 == n)
            .map(|c| (c.0, Control::parse(&c.2).checkpoint))
            .collect();
        assert_eq!(asks.iter().map(|a| a.1).collect::<Vec<_>>(), [0, 1, 2]);
        let gap = asks[2].0 - asks[1].0;
        assert!((20_000..=21_500).contains(&gap), "{gap}");
    }
}

#[test]
fn a_whole_drill_on_the_fakes_names_its_faults_and_blames_no_node_for_every_node_slowing() {
    let mut b = bench(22_000);
    let plan = Plan {
        seed: 9,
        rounds: vec![
            round(1, Kind::StepSleep, "n2", 2000),
            round(2, Kind::AllSlow, "n1", 1500),
            round(3, Kind::Clean, "n1", 1000),
            round(4, Kind::CpuCapped, "n4", 1250),
        ],
    };
    let outcomes = b.run(&plan);
    assert_eq!(outcomes.len(), 4);
    let s = score::score(9, &outcomes);
    assert_eq!(s.recall_at_125pct, Some(1.0));
    assert_eq!(s.workload_blamed_on_node, 0);
    let all = s.controls.iter().find(|c| c.class == "all_slow").unwrap();
    assert_eq!(all.workload_said, 1, "{s:?}");
    assert_eq!(s.false_flags_per_100_clean_jobs, Some(0.0));
    assert!(
        score::summary_line(&s).starts_with("drill-stragglers: classes 2, recall_at_125pct 1.000")
    );
    assert!(b.journal.pending().unwrap().is_empty());
}

#[test]
fn a_drill_stopped_by_a_signal_while_a_cap_is_on_restores_it_and_runs_no_more_rounds() {
    let mut b = bench(60_000);
    let halt = crate::halt::Halt::default();
    b.gates.stop_on(halt.clone());
    let slowed = b.lever.slowed.clone();
    b.cluster.after_sleep = Some(Box::new(move |_| {
        if !slowed.borrow().is_empty() {
            halt.ask(signal_hook::consts::SIGTERM);
        }
    }));
    let plan = Plan {
        seed: 1,
        rounds: vec![
            round(1, Kind::CpuCapped, "n3", 2000),
            round(2, Kind::StepSleep, "n1", 2000),
        ],
    };
    let outcomes = b.run(&plan);
    assert!(outcomes.is_empty(), "the stopped round is not scored");
    assert!(b.gates.stopped().unwrap().to_string().contains("SIGTERM"));
    assert_eq!(b.lever.undone, vec!["n3".to_owned()], "the cap is undone");
    assert!(b.journal.pending().unwrap().is_empty());
    assert_eq!(b.cluster.jobs.len(), 1, "no second round");
    assert_eq!(b.cluster.cancelled, vec![500]);
}
