//! Fakes of the job step's seams, for tests here and in other crates (feature `test-fakes`):
//! a Slurm that records calls and can be slow, fail, or answer a re-check differently; a probe
//! runner with canned answers; a rendezvous with canned peers; a relay that keeps the lines.

use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::deadline::Deadline;
use crate::jobstep::{
    JobStep, Meet, MeetRequest, ProbeRunError, ProbeRunner, Relay, Seams, Setup,
    runner::{CollectiveRequest, ProbeRequest},
};
use crate::probe::Report;
use crate::slurm::{JobComment, JobRecord, NodeInfo, Slurm, SlurmError};
use fabric_base::exec::ExecError;
use fabric_net::collective;
use fabric_net::rendezvous::{Gathered, RendezvousError};
use fabric_proto::fabric_option::FabricMode;
use fabric_proto::invocation::{Invocation, Script};
use fabric_proto::tag::Verdict;
use fabric_proto::verdict::{Finding, Severity};

/// One call the fake Slurm saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    /// `sinfo`.
    Nodes,
    /// `scontrol show node`.
    NodeAddrs,
    /// `scontrol update ... State=DRAIN`.
    Drain {
        /// The node.
        node: String,
        /// The reason.
        reason: String,
    },
    /// `scontrol update ... State=RESUME`.
    Resume(String),
    /// `requeue(job)`.
    Requeue(u32),
    /// `shrink(job, nodes)`.
    Shrink {
        /// The job, as named.
        job: String,
        /// The hostlist it keeps.
        nodes: String,
    },
    /// `job_running(job)`.
    JobRunning(u32),
    /// `job_nodes(job)`.
    JobNodes(u32),
    /// Reading `AdminComment`.
    AdminComment,
    /// Writing it to the live job.
    SetAdminComment(String),
    /// Writing it to the database.
    SetAdminCommentDb(String),
}

/// A scripted answer to one `nodes()` call.
#[derive(Debug, Clone)]
pub enum NodesAnswer {
    /// These nodes.
    Nodes(Vec<NodeInfo>),
    /// A failure with this text.
    Fail(String),
}

#[derive(Debug, Default)]
struct SlurmState {
    nodes: Vec<NodeInfo>,
    comment: String,
    job_name: Option<String>,
    written_to: Vec<String>,
    sacctmgr_lowercases: bool,
    job_finished: bool,
    calls: Vec<Call>,
    delay: Duration,
    deadline: Option<Deadline>,
    /// What `call_limit` says (the job step's least per-call limit unless set).
    call_limit: Option<Duration>,
    /// Set while a [`Capped`] view runs a call.
    cap: Option<Duration>,
    failing: Vec<&'static str>,
    drain_times_out_after_applying: bool,
    nodes_answers: BTreeMap<usize, NodesAnswer>,
    nodes_calls: usize,
    clock: u32,
    job_records: Vec<JobRecord>,
    asked_job_records: Vec<Vec<String>>,
    /// The job's nodes as slurmctld lists them (`job_nodes`); a shrink that lands sets them.
    job_nodes: Option<String>,
}

/// A Slurm in memory.
#[derive(Debug, Default)]
pub struct FakeSlurm {
    state: RefCell<SlurmState>,
}

/// An idle node.
pub fn idle(name: &str) -> NodeInfo {
    NodeInfo {
        name: name.into(),
        state: "idle".into(),
        reason: String::new(),
        reason_time: String::new(),
    }
}

/// A node drained by fabric-check at `time`.
pub fn drained_by_us(name: &str, time: &str) -> NodeInfo {
    NodeInfo {
        name: name.into(),
        state: "drained".into(),
        reason: "fabric-check: ib.port_state: x".into(),
        reason_time: time.into(),
    }
}

impl FakeSlurm {
    /// A cluster of idle nodes with these names.
    pub fn with_nodes(names: &[&str]) -> Self {
        let s = Self::default();
        s.state.borrow_mut().nodes = names.iter().map(|n| idle(n)).collect();
        s
    }

    /// slurmctld lists the job on these nodes (a hostlist) until a shrink lands.
    pub fn with_job_nodes(self, nodes: &str) -> Self {
        self.state.borrow_mut().job_nodes = Some(nodes.to_owned());
        self
    }

    /// Accounting holds these job records (what `job_records` answers from).
    pub fn set_job_records(&self, records: Vec<JobRecord>) {
        self.state.borrow_mut().job_records = records;
    }

    /// The job lists `job_records` was asked for, call by call.
    pub fn asked_job_records(&self) -> Vec<Vec<String>> {
        self.state.borrow().asked_job_records.clone()
    }

    /// The job's `AdminComment` starts as `text`.
    pub fn comment(self, text: &str) -> Self {
        self.state.borrow_mut().comment = text.into();
        self
    }

    /// The job is named `name` in Slurm's commands (`8_3` for an array task, `9+0` for a het
    /// leader); by default its job id.
    pub fn job_named(self, name: &str) -> Self {
        self.state.borrow_mut().job_name = Some(name.into());
        self
    }

    /// `sacctmgr` lower-cases what it stores, as Slurm 22.05's does for `AdminComment` (every
    /// release turns `"` and `'` into backticks; this fake always does).
    pub fn sacctmgr_of_22_05(self) -> Self {
        self.state.borrow_mut().sacctmgr_lowercases = true;
        self
    }

    /// The job names the comment was written to, in order.
    pub fn written_to(&self) -> Vec<String> {
        self.state.borrow().written_to.clone()
    }

    /// The job ends now (for a test that writes while it runs and then after it ended).
    pub fn finish(&self) {
        self.state.borrow_mut().job_finished = true;
    }

    /// The job has finished: `scontrol update JobId` fails, `sacctmgr` works.
    pub fn job_finished(self) -> Self {
        self.state.borrow_mut().job_finished = true;
        self
    }

    /// Every call takes `d` (a hang when long), but, like the real adapter, not past `deadline`.
    pub fn slow(self, d: Duration, deadline: Deadline) -> Self {
        {
            let mut s = self.state.borrow_mut();
            s.delay = d;
            s.deadline = Some(deadline);
        }
        self
    }

    /// Says each call may take `d` ([`Slurm::call_limit`]; the fake's slow calls still run to
    /// the deadline unless a [`Slurm::capped`] view bounds them).
    pub fn call_limit(self, d: Duration) -> Self {
        self.state.borrow_mut().call_limit = Some(d);
        self
    }

    /// Calls of `method` (`nodes`, `drain`, `resume`, `admin_comment`, `set_admin_comment`,
    /// `set_admin_comment_db`, `node_addrs`) fail.
    pub fn failing(self, method: &'static str) -> Self {
        self.state.borrow_mut().failing.push(method);
        self
    }

    /// `drain` is applied by slurmctld but the client times out.
    pub fn drain_applies_but_times_out(self) -> Self {
        self.state.borrow_mut().drain_times_out_after_applying = true;
        self
    }

    /// The `n`th `nodes()` call (from 0) gets `answer` instead of the state.
    pub fn answer_nodes_call(self, n: usize, answer: NodesAnswer) -> Self {
        self.state.borrow_mut().nodes_answers.insert(n, answer);
        self
    }

    /// Sets one node's state and reason.
    pub fn set_node(&self, node: NodeInfo) {
        let mut s = self.state.borrow_mut();
        if let Some(n) = s.nodes.iter_mut().find(|n| n.name == node.name) {
            *n = node;
        } else {
            s.nodes.push(node);
        }
    }

    /// The calls so far.
    pub fn calls(&self) -> Vec<Call> {
        self.state.borrow().calls.clone()
    }

    /// One node as it is now.
    pub fn node(&self, name: &str) -> Option<NodeInfo> {
        self.state
            .borrow()
            .nodes
            .iter()
            .find(|n| n.name == name)
            .cloned()
    }

    /// The job's `AdminComment` now.
    pub fn current_comment(&self) -> String {
        self.state.borrow().comment.clone()
    }

    /// Waits like a slow call; `Err` when the wait hit the deadline.
    fn wait(&self, program: &str) -> Result<(), SlurmError> {
        let (delay, deadline, cap) = {
            let s = self.state.borrow();
            (s.delay, s.deadline, s.cap)
        };
        if delay.is_zero() {
            return Ok(());
        }
        let limit = deadline.map_or(delay, |d| d.remaining());
        let limit = cap.map_or(limit, |c| limit.min(c));
        if limit.is_zero() {
            return Err(SlurmError::NoTimeLeft {
                command: program.into(),
            });
        }
        std::thread::sleep(delay.min(limit));
        if delay > limit {
            return Err(SlurmError::Exec(ExecError::Timeout {
                program: program.into(),
                limit_ms: limit.as_millis(),
            }));
        }
        Ok(())
    }

    fn call(&self, method: &'static str, call: Call) -> Result<(), SlurmError> {
        self.state.borrow_mut().calls.push(call);
        if self.state.borrow().failing.contains(&method) {
            return Err(SlurmError::Failed {
                command: method.into(),
                code: 1,
                stderr: "slurm_load_partitions: Unable to contact slurm controller".into(),
            });
        }
        self.wait(method)
    }
}

impl Slurm for FakeSlurm {
    fn job_records(&self, jobs: &[String]) -> Result<Vec<JobRecord>, SlurmError> {
        let mut s = self.state.borrow_mut();
        s.asked_job_records.push(jobs.to_vec());
        Ok(s.job_records
            .iter()
            .filter(|r| jobs.contains(&r.job))
            .cloned()
            .collect())
    }

    fn nodes(&self) -> Result<Vec<NodeInfo>, SlurmError> {
        self.call("nodes", Call::Nodes)?;
        let mut s = self.state.borrow_mut();
        let n = s.nodes_calls;
        s.nodes_calls += 1;
        match s.nodes_answers.remove(&n) {
            Some(NodesAnswer::Nodes(v)) => Ok(v),
            Some(NodesAnswer::Fail(e)) => Err(SlurmError::Failed {
                command: "sinfo".into(),
                code: 1,
                stderr: e,
            }),
            None => Ok(s.nodes.clone()),
        }
    }

    fn node_addrs(&self, nodes: &[String]) -> Result<Vec<(String, String)>, SlurmError> {
        self.call("node_addrs", Call::NodeAddrs)?;
        Ok(nodes
            .iter()
            .map(|n| (n.clone(), "127.0.0.1".to_owned()))
            .collect())
    }

    fn drain(&self, node: &str, reason: &str) -> Result<(), SlurmError> {
        let call = Call::Drain {
            node: node.into(),
            reason: reason.into(),
        };
        let times_out = self.state.borrow().drain_times_out_after_applying;
        let r = self.call("drain", call);
        if r.is_ok() || times_out {
            let mut s = self.state.borrow_mut();
            s.clock += 1;
            let time = format!("2026-12-01T10:00:{:02}", s.clock % 60);
            if let Some(n) = s.nodes.iter_mut().find(|n| n.name == node) {
                n.state = "drained".into();
                n.reason = reason.into();
                n.reason_time = time;
            }
        }
        if times_out && r.is_ok() {
            return Err(SlurmError::Exec(ExecError::Timeout {
                program: "scontrol".into(),
                limit_ms: 5000,
            }));
        }
        r
    }

    fn requeue(&self, job_id: u32) -> Result<(), SlurmError> {
        self.call("requeue", Call::Requeue(job_id))
    }

    fn shrink(&self, job: &str, nodes: &str) -> Result<(), SlurmError> {
        self.call(
            "shrink",
            Call::Shrink {
                job: job.to_owned(),
                nodes: nodes.to_owned(),
            },
        )?;
        self.state.borrow_mut().job_nodes = Some(nodes.to_owned());
        Ok(())
    }

    fn job_nodes(&self, job_id: u32) -> Result<Option<String>, SlurmError> {
        self.call("job_nodes", Call::JobNodes(job_id))?;
        Ok(self.state.borrow().job_nodes.clone())
    }

    fn job_running(&self, job_id: u32) -> Result<bool, SlurmError> {
        self.call("job_running", Call::JobRunning(job_id))?;
        Ok(!self.state.borrow().job_finished)
    }

    fn resume(&self, node: &str) -> Result<(), SlurmError> {
        self.call("resume", Call::Resume(node.into()))?;
        if let Some(n) = self
            .state
            .borrow_mut()
            .nodes
            .iter_mut()
            .find(|n| n.name == node)
        {
            n.state = "idle".into();
            n.reason.clear();
            n.reason_time.clear();
        }
        Ok(())
    }

    fn admin_comment(&self, job_id: u32) -> Result<JobComment, SlurmError> {
        self.call("admin_comment", Call::AdminComment)?;
        let s = self.state.borrow();
        Ok(JobComment {
            job: s.job_name.clone().unwrap_or_else(|| job_id.to_string()),
            text: s.comment.clone(),
        })
    }

    fn set_admin_comment(&self, job: &str, text: &str) -> Result<(), SlurmError> {
        self.call("set_admin_comment", Call::SetAdminComment(text.into()))?;
        if self.state.borrow().job_finished {
            return Err(SlurmError::Failed {
                command: "scontrol update".into(),
                code: 1,
                stderr: "Job has already finished".into(),
            });
        }
        let mut s = self.state.borrow_mut();
        s.written_to.push(job.into());
        s.comment = text.into();
        Ok(())
    }

    fn set_admin_comment_db(&self, job: &str, text: &str) -> Result<(), SlurmError> {
        self.call("set_admin_comment_db", Call::SetAdminCommentDb(text.into()))?;
        let mut s = self.state.borrow_mut();
        s.written_to.push(job.into());
        // sacctmgr's strip_quotes (src/sacctmgr/common.c), and 22.05's make_lower.
        let stored = text.replace(['"', '\''], "`");
        s.comment = if s.sacctmgr_lowercases {
            stored.to_lowercase()
        } else {
            stored
        };
        Ok(())
    }

    fn call_limit(&self) -> Duration {
        self.state
            .borrow()
            .call_limit
            .unwrap_or(crate::deadline::MIN_SLURM_CALL)
    }

    fn capped(&self, cap: Duration) -> Box<dyn Slurm + '_> {
        Box::new(Capped { inner: self, cap })
    }
}

/// A probe runner with canned answers.
#[derive(Debug)]
pub struct FakeRunner {
    answers: RefCell<VecDeque<Result<Report, ProbeRunError>>>,
    delay: Duration,
    collective: Result<collective::Report, ProbeRunError>,
    /// Each probe request with the limit it got.
    pub probes: RefCell<Vec<(ProbeRequest, Duration)>>,
    /// Each collective request.
    pub collectives: RefCell<Vec<CollectiveRequest>>,
    /// Each watch started: its words and log file.
    pub watches: RefCell<Vec<(Vec<String>, std::path::PathBuf)>>,
}

impl FakeRunner {
    /// Answers each probe with the next of `answers` (the last one repeats).
    pub fn answering(answers: Vec<Result<Report, ProbeRunError>>) -> Self {
        Self {
            answers: RefCell::new(answers.into()),
            delay: Duration::ZERO,
            collective: Err(ProbeRunError::CannotRun {
                what: "collective",
                reason: "no collective in this test".into(),
            }),
            probes: RefCell::new(Vec::new()),
            collectives: RefCell::new(Vec::new()),
            watches: RefCell::new(Vec::new()),
        }
    }

    /// Each probe takes `d` (killed at its limit, as the real runner does).
    pub fn slow(mut self, d: Duration) -> Self {
        self.delay = d;
        self
    }

    /// The collective's answer.
    pub fn collective(mut self, answer: Result<collective::Report, ProbeRunError>) -> Self {
        self.collective = answer;
        self
    }
}

impl ProbeRunner for FakeRunner {
    fn start_watch(&self, argv: &[String], log: &std::path::Path) -> std::io::Result<u32> {
        self.watches
            .borrow_mut()
            .push((argv.to_vec(), log.to_owned()));
        Ok(0)
    }

    fn probe(&self, req: &ProbeRequest, limit: Duration) -> Result<Report, ProbeRunError> {
        self.probes.borrow_mut().push((req.clone(), limit));
        if limit.is_zero() {
            return Err(ProbeRunError::NoTimeLeft { what: "probe" });
        }
        std::thread::sleep(self.delay.min(limit));
        if self.delay > limit {
            return Err(ProbeRunError::Timeout {
                what: "probe",
                limit_ms: limit.as_millis(),
            });
        }
        let answer = {
            let mut a = self.answers.borrow_mut();
            if a.len() > 1 {
                a.pop_front()
            } else {
                a.front().cloned()
            }
        };
        let answer = answer.unwrap_or(Err(ProbeRunError::CannotRun {
            what: "probe",
            reason: "no canned answer".into(),
        }));
        if let (Ok(r), Some(save)) = (&answer, &req.save) {
            let _ = std::fs::write(save, serde_json::to_vec(r).unwrap_or_default());
        }
        answer
    }

    fn collective(
        &self,
        req: &CollectiveRequest,
        _limit: Duration,
    ) -> Result<collective::Report, ProbeRunError> {
        self.collectives.borrow_mut().push(req.clone());
        self.collective.clone()
    }
}

/// A rendezvous with canned peers.
#[derive(Debug, Default)]
pub struct FakeMeet {
    /// The other nodes' payloads (absent nodes are missing).
    pub peers: BTreeMap<String, Value>,
    /// Fail the rendezvous with this text.
    pub fail: Option<String>,
    /// Take this long (bounded by the request's deadline).
    pub delay: Duration,
    /// Each request with the payload sent.
    pub sent: RefCell<Vec<(MeetRequest, Value)>>,
}

impl Meet for FakeMeet {
    fn gather(&self, req: &MeetRequest, payload: Value) -> Result<Gathered, RendezvousError> {
        self.sent.borrow_mut().push((req.clone(), payload.clone()));
        let left = req.deadline.saturating_duration_since(Instant::now());
        std::thread::sleep(self.delay.min(left));
        if let Some(f) = &self.fail {
            return Err(RendezvousError::Timeout(f.clone()));
        }
        let n = req.nodes.len();
        let len = serde_json::to_vec(&payload).map_or(0, |p| p.len());
        if req.rank != 0 && !fabric_net::rendezvous::payload_fits(len) {
            // As the real follower refuses to send it.
            return Err(RendezvousError::Config(format!(
                "this node's payload is {len} bytes; a join may have at most {} bytes",
                fabric_net::rendezvous::MAX_JOIN_BYTES
            )));
        }
        let mut payloads = vec![None; n];
        payloads[req.rank] = Some(payload);
        if req.rank != 0 {
            return Ok(Gathered {
                my_rank: req.rank,
                port: fabric_net::rendezvous::DEFAULT_BASE_PORT,
                payloads,
                missing: vec![],
                rejected: vec![],
            });
        }
        let mut missing = Vec::new();
        for (i, node) in req.nodes.iter().enumerate().skip(1) {
            match self.peers.get(node) {
                Some(v) => payloads[i] = Some(v.clone()),
                None => missing.push(node.clone()),
            }
        }
        Ok(Gathered {
            my_rank: 0,
            port: fabric_net::rendezvous::DEFAULT_BASE_PORT,
            payloads,
            missing,
            rejected: vec![],
        })
    }
}

/// The lines a job step said.
#[derive(Debug, Default)]
pub struct Lines(RefCell<Vec<String>>);

impl Relay for Lines {
    fn line(&self, text: &str) {
        self.0.borrow_mut().push(text.to_owned());
    }
}

impl Lines {
    /// Every line, joined by newlines.
    pub fn text(&self) -> String {
        self.0.borrow().join("\n")
    }

    /// Whether some line contains `needle`.
    pub fn has(&self, needle: &str) -> bool {
        self.0.borrow().iter().any(|l| l.contains(needle))
    }

    /// How many lines contain `needle`.
    pub fn count(&self, needle: &str) -> usize {
        self.0
            .borrow()
            .iter()
            .filter(|l| l.contains(needle))
            .count()
    }
}

/// A probe document with this verdict: `fail` carries an `ib.port_state` failure, `warn` an
/// `ib.mtu` warning, `error` the probe's own error.
pub fn report(node: &str, verdict: Verdict) -> Report {
    let mut r = Report::error(node, 2.0, "test".into());
    r.error = None;
    r.verdict = Verdict::Pass;
    match verdict {
        Verdict::Pass => {}
        Verdict::Warn => r.push(Finding::new(
            "ib.mtu",
            Severity::Warn,
            Some("mlx5_0"),
            Some(1),
            Value::from(2048),
            Value::from(4096),
            "mlx5_0 port 1 MTU is 2048".into(),
        )),
        Verdict::Fail => r.push(Finding::new(
            "ib.port_state",
            Severity::Fail,
            Some("mlx5_3"),
            Some(1),
            Value::from("DOWN"),
            Value::from("ACTIVE"),
            "mlx5_3 port 1 is DOWN".into(),
        )),
        Verdict::Error => {
            r.verdict = Verdict::Error;
            r.error = Some("cannot read sysfs".into());
        }
    }
    r
}

/// A job step's setup in `dir`: job 7 of uid `job_uid` on `nodes` (a hostlist), this `node`,
/// with these extra plugin words (state and spool folders are under `dir`).
pub fn setup(dir: &Path, script: Script, nodes: &str, node: &str, words: &[&str]) -> Setup {
    let mut plugin_args = vec![
        format!("state_dir={}/state/%n", dir.display()),
        format!("spool_dir={}/spool", dir.display()),
    ];
    plugin_args.extend(words.iter().map(|w| (*w).to_owned()));
    let inv = Invocation {
        script,
        job_id: 7,
        node: node.into(),
        nodes: nodes.into(),
        option: FabricMode::Quick,
        job_uid: Some(nix::unistd::getuid().as_raw()),
        step_id: None,
        spares: 0,
        plugin_args,
    };
    Setup::resolve(inv, Instant::now(), &Lines::default()).expect("a valid test setup")
}

/// The seams of a test job step.
pub fn seams<'a>(
    slurm: &'a FakeSlurm,
    runner: &'a FakeRunner,
    meet: &'a FakeMeet,
    lines: &'a Lines,
) -> Seams<'a> {
    Seams {
        slurm,
        runner,
        meet,
        relay: lines,
    }
}

/// A job step on `setup` and `seams`.
pub fn step<'a>(setup: &'a Setup, seams: Seams<'a>) -> JobStep<'a> {
    JobStep { setup, seams }
}

/// What one call of a [`ClusterSlurm`] does besides its work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// It works.
    None,
    /// It fails before touching anything (slurmctld unreachable).
    Fail,
    /// `drain` only: slurmctld applies it, but the client times out.
    AppliedThenTimeout,
}

/// Chooses each call's delay and fault from the method's name (`nodes`, `drain`, `resume`, ...).
pub type FaultPlan = Box<dyn FnMut(&'static str) -> (Duration, Fault)>;

#[derive(Debug)]
struct ClusterState {
    nodes: Vec<NodeInfo>,
    comment: String,
}

/// A cluster's node states shared by threads (a storm of prologs, epilogs and health runs on
/// many nodes at once), each thread seeing it through its own [`ClusterSlurm`]. Reason times
/// tick in virtual seconds of `second` real time, so the settle step runs at test speed.
#[derive(Debug, Clone)]
pub struct SharedCluster {
    state: std::sync::Arc<std::sync::Mutex<ClusterState>>,
    started: Instant,
    second: Duration,
}

impl SharedCluster {
    /// Idle nodes with these names; reason times resolve to `second`.
    pub fn new(names: &[&str], second: Duration) -> Self {
        Self {
            state: std::sync::Arc::new(std::sync::Mutex::new(ClusterState {
                nodes: names.iter().map(|n| idle(n)).collect(),
                comment: String::new(),
            })),
            started: Instant::now(),
            second,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ClusterState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Every node as it is now.
    pub fn nodes(&self) -> Vec<NodeInfo> {
        self.lock().nodes.clone()
    }

    /// Node `name` as it is now (`None` when the cluster has no such node).
    pub fn node(&self, name: &str) -> Option<NodeInfo> {
        self.lock().nodes.iter().find(|n| n.name == name).cloned()
    }

    /// The virtual wall clock, as `sinfo` prints a reason time.
    fn now_text(&self) -> String {
        let s = (self.started.elapsed().as_nanos() / self.second.as_nanos().max(1)) as u64;
        format!(
            "2026-12-01T{:02}:{:02}:{:02}",
            (s / 3600) % 24,
            (s / 60) % 60,
            s % 60
        )
    }

    /// One node's view, with its faults chosen by `plan`, each call bounded at 500 ms, and no
    /// call past `deadline`.
    pub fn view(&self, plan: FaultPlan, deadline: Deadline) -> ClusterSlurm {
        self.view_bounded(plan, deadline, Duration::from_millis(500))
    }

    /// [`SharedCluster::view`] with each call bounded at `call_limit` (as the real adapter's
    /// per-call limit): a call slower than its bound times out.
    pub fn view_bounded(
        &self,
        plan: FaultPlan,
        deadline: Deadline,
        call_limit: Duration,
    ) -> ClusterSlurm {
        ClusterSlurm {
            cluster: self.clone(),
            plan: RefCell::new(plan),
            deadline,
            call_limit,
            cap: std::cell::Cell::new(None),
        }
    }
}

/// One node's Slurm client over a [`SharedCluster`]: each call is delayed and faulted as its
/// [`FaultPlan`] says, and, like the real adapter, times out at the deadline.
pub struct ClusterSlurm {
    cluster: SharedCluster,
    plan: RefCell<FaultPlan>,
    deadline: Deadline,
    call_limit: Duration,
    cap: std::cell::Cell<Option<Duration>>,
}

impl std::fmt::Debug for ClusterSlurm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClusterSlurm")
    }
}

impl ClusterSlurm {
    /// Runs one call: waits its delay (cut at the deadline), then `work` unless it fails first.
    /// A call cut by the deadline times out; `drain` may have been applied all the same.
    fn call<T>(
        &self,
        method: &'static str,
        work: impl FnOnce(&mut ClusterState) -> T,
    ) -> Result<T, SlurmError> {
        let (delay, fault) = (self.plan.borrow_mut())(method);
        let left = self.deadline.remaining();
        if left.is_zero() {
            return Err(SlurmError::NoTimeLeft {
                command: method.into(),
            });
        }
        let left = left
            .min(self.call_limit)
            .min(self.cap.get().unwrap_or(Duration::MAX));
        if left.is_zero() {
            return Err(SlurmError::NoTimeLeft {
                command: method.into(),
            });
        }
        std::thread::sleep(delay.min(left));
        let timed_out = delay > left;
        if fault == Fault::Fail {
            return Err(SlurmError::Failed {
                command: method.into(),
                code: 1,
                stderr: "Unable to contact slurm controller (connect failure)".into(),
            });
        }
        if timed_out && fault != Fault::AppliedThenTimeout {
            return Err(SlurmError::Exec(ExecError::Timeout {
                program: method.into(),
                limit_ms: left.as_millis(),
            }));
        }
        let out = work(&mut self.cluster.lock());
        if timed_out || fault == Fault::AppliedThenTimeout {
            return Err(SlurmError::Exec(ExecError::Timeout {
                program: method.into(),
                limit_ms: left.as_millis(),
            }));
        }
        Ok(out)
    }
}

impl Slurm for ClusterSlurm {
    fn nodes(&self) -> Result<Vec<NodeInfo>, SlurmError> {
        self.call("nodes", |s| s.nodes.clone())
    }

    fn node_addrs(&self, nodes: &[String]) -> Result<Vec<(String, String)>, SlurmError> {
        self.call("node_addrs", |_| {
            nodes
                .iter()
                .map(|n| (n.clone(), "127.0.0.1".to_owned()))
                .collect()
        })
    }

    fn drain(&self, node: &str, reason: &str) -> Result<(), SlurmError> {
        let cluster = self.cluster.clone();
        self.call("drain", |s| {
            if let Some(n) = s.nodes.iter_mut().find(|n| n.name == node) {
                n.state = "drained".into();
                n.reason = reason.into();
                n.reason_time = cluster.now_text();
            }
        })
    }

    fn resume(&self, node: &str) -> Result<(), SlurmError> {
        self.call("resume", |s| {
            if let Some(n) = s.nodes.iter_mut().find(|n| n.name == node) {
                n.state = "idle".into();
                n.reason.clear();
                n.reason_time.clear();
            }
        })
    }

    fn admin_comment(&self, job_id: u32) -> Result<JobComment, SlurmError> {
        self.call("admin_comment", |s| JobComment::plain(job_id, &s.comment))
    }

    fn set_admin_comment(&self, _job: &str, text: &str) -> Result<(), SlurmError> {
        self.call("set_admin_comment", |s| s.comment = text.into())
    }

    /// Accounting that knows every job asked: ended long ago (`COMPLETED`, end 0), holding the
    /// last `AdminComment` written to the cluster (one comment for all jobs, as
    /// [`Slurm::admin_comment`] answers). A node's tag ledger is then trimmed by `health` as
    /// on a cluster whose accounting answers.
    fn job_records(&self, jobs: &[String]) -> Result<Vec<JobRecord>, SlurmError> {
        self.call("job_records", |s| {
            jobs.iter()
                .map(|j| JobRecord {
                    job: j.clone(),
                    state: "COMPLETED".into(),
                    end_s: Some(0),
                    comment: s.comment.clone(),
                })
                .collect()
        })
    }

    fn set_admin_comment_db(&self, _job: &str, text: &str) -> Result<(), SlurmError> {
        self.call("set_admin_comment_db", |s| s.comment = text.into())
    }

    fn reason_time_resolution(&self) -> Duration {
        self.cluster.second
    }

    fn call_limit(&self) -> Duration {
        self.call_limit
    }

    fn capped(&self, cap: Duration) -> Box<dyn Slurm + '_> {
        Box::new(Capped { inner: self, cap })
    }
}

/// A fake whose calls a [`Capped`] view can bound.
trait CapCalls: Slurm {
    /// Bounds every call by `cap` from now on (`None`: only its own bounds).
    fn set_cap(&self, cap: Option<Duration>);
}

impl CapCalls for FakeSlurm {
    fn set_cap(&self, cap: Option<Duration>) {
        self.state.borrow_mut().cap = cap;
    }
}

impl CapCalls for ClusterSlurm {
    fn set_cap(&self, cap: Option<Duration>) {
        self.cap.set(cap);
    }
}

/// A fake seen through [`Slurm::capped`]: each call runs with the cap set, as the real
/// adapter's copy with a shorter per-call limit would.
struct Capped<'a, S: CapCalls> {
    inner: &'a S,
    cap: Duration,
}

impl<S: CapCalls> Capped<'_, S> {
    fn with<T>(&self, call: impl FnOnce(&S) -> T) -> T {
        self.inner.set_cap(Some(self.cap));
        let out = call(self.inner);
        self.inner.set_cap(None);
        out
    }
}

impl<S: CapCalls> Slurm for Capped<'_, S> {
    fn nodes(&self) -> Result<Vec<NodeInfo>, SlurmError> {
        self.with(|s| s.nodes())
    }
    fn node_addrs(&self, nodes: &[String]) -> Result<Vec<(String, String)>, SlurmError> {
        self.with(|s| s.node_addrs(nodes))
    }
    fn drain(&self, node: &str, reason: &str) -> Result<(), SlurmError> {
        self.with(|s| s.drain(node, reason))
    }
    fn resume(&self, node: &str) -> Result<(), SlurmError> {
        self.with(|s| s.resume(node))
    }
    fn admin_comment(&self, job_id: u32) -> Result<JobComment, SlurmError> {
        self.with(|s| s.admin_comment(job_id))
    }
    fn set_admin_comment(&self, job: &str, text: &str) -> Result<(), SlurmError> {
        self.with(|s| s.set_admin_comment(job, text))
    }
    fn set_admin_comment_db(&self, job: &str, text: &str) -> Result<(), SlurmError> {
        self.with(|s| s.set_admin_comment_db(job, text))
    }
    fn job_records(&self, jobs: &[String]) -> Result<Vec<JobRecord>, SlurmError> {
        self.with(|s| s.job_records(jobs))
    }
    fn requeue(&self, job_id: u32) -> Result<(), SlurmError> {
        self.with(|s| s.requeue(job_id))
    }
    fn shrink(&self, job: &str, nodes: &str) -> Result<(), SlurmError> {
        self.with(|s| s.shrink(job, nodes))
    }
    fn job_nodes(&self, job_id: u32) -> Result<Option<String>, SlurmError> {
        self.with(|s| s.job_nodes(job_id))
    }
    fn requeue_named(&self, job: &str) -> Result<(), SlurmError> {
        self.with(|s| s.requeue_named(job))
    }
    fn job_running(&self, job_id: u32) -> Result<bool, SlurmError> {
        self.with(|s| s.job_running(job_id))
    }
    fn reason_time_resolution(&self) -> Duration {
        self.inner.reason_time_resolution()
    }
    fn call_limit(&self) -> Duration {
        self.cap.min(self.inner.call_limit())
    }
    fn capped(&self, cap: Duration) -> Box<dyn Slurm + '_> {
        Box::new(Capped {
            inner: self.inner,
            cap: cap.min(self.cap),
        })
    }
}

/// The records → summary → tag path with whatever a job wrote, through the real epilogs on
/// the fakes: a two-node job whose prolog tagged n1 `fail` and n2 `pass`; on both nodes the
/// job's user left `records` as its `fabric-run` records and `step_results` as its step gate
/// results; n2's epilog probe finds a fault during the job (root's evidence, sent to the
/// leader n1 with the job's files in one payload). Returns the stored `AdminComment`, or what
/// broke the properties: the tag is within its bound, one segment, decodes, and holds root's
/// verdict for every node and n2's counter evidence. `dir` must be empty and is used for the
/// spool and state folders. (The core property test and the `records_tag` fuzz target.)
pub fn job_files_through_the_tag(
    dir: &Path,
    records: &[u8],
    step_results: &[u8],
) -> Result<String, String> {
    use crate::jobstep::{epilog, payload::PrologPayload, prolog};
    use fabric_proto::tag::{self, MARKER, MAX_TAG_BYTES};
    let slurm = FakeSlurm::with_nodes(&["n1", "n2"]);
    let lines = Lines::default();
    let peer = |verdict| {
        serde_json::to_value(PrologPayload {
            result: crate::jobstep::node_result(&report("n2", verdict)),
            notes: vec![],
            collective: None,
            fingerprint: None,
        })
        .map_err(|e| e.to_string())
    };
    std::fs::create_dir_all(dir.join("spool")).map_err(|e| e.to_string())?;
    let s = setup(dir, Script::Prolog, "n[1-2]", "n1", &["policy=warn"]);
    let meet = FakeMeet {
        peers: [("n2".to_owned(), peer(Verdict::Pass)?)].into(),
        ..FakeMeet::default()
    };
    let runner = FakeRunner::answering(vec![Ok(report("n1", Verdict::Fail))]);
    prolog::run(&step(&s, seams(&slurm, &runner, &meet, &lines)));
    let spool = dir.join("spool/7");
    for node in ["n1", "n2"] {
        std::fs::write(spool.join(format!("{node}.jsonl")), records).map_err(|e| e.to_string())?;
        std::fs::write(spool.join(format!("{node}.steps.jsonl")), step_results)
            .map_err(|e| e.to_string())?;
    }
    // n2, a follower: its own probe finds a fault during the job.
    let s = setup(dir, Script::Epilog, "n[1-2]", "n2", &["policy=warn"]);
    std::fs::write(
        s.state_dir.join("job-7.json"),
        serde_json::to_vec(&report("n2", Verdict::Pass)).map_err(|e| e.to_string())?,
    )
    .map_err(|e| e.to_string())?;
    let to_leader = FakeMeet::default();
    let runner = FakeRunner::answering(vec![Ok(report("n2", Verdict::Fail))]);
    epilog::run(&step(&s, seams(&slurm, &runner, &to_leader, &lines)));
    let sent = to_leader
        .sent
        .borrow()
        .last()
        .map(|(_, p)| p.clone())
        .ok_or("n2 sent nothing")?;
    // n1, the leader.
    let s = setup(dir, Script::Epilog, "n[1-2]", "n1", &["policy=warn"]);
    let meet = FakeMeet {
        peers: [("n2".to_owned(), sent)].into(),
        ..FakeMeet::default()
    };
    let runner = FakeRunner::answering(vec![Ok(report("n1", Verdict::Pass))]);
    epilog::run(&step(&s, seams(&slurm, &runner, &meet, &lines)));

    let comment = slurm.current_comment();
    let fail = |why: String| Err(format!("{why}\n{comment}\n{}", lines.text()));
    if comment.matches(MARKER).count() != 1 {
        return fail("not exactly one segment".into());
    }
    let segment = &comment[comment.find(MARKER).unwrap_or(0) + MARKER.len()..];
    if segment.len() > MAX_TAG_BYTES {
        return fail(format!("{} bytes", segment.len()));
    }
    let t = match tag::extract(&comment) {
        Some(Ok(t)) => t,
        other => return fail(format!("no readable tag: {other:?}")),
    };
    let verdicts = (
        t.verdict,
        t.result_of("n1").map(|r| r.verdict),
        t.result_of("n2").map(|r| r.verdict),
    );
    if verdicts
        != (
            Some(Verdict::Fail),
            Some(Verdict::Fail),
            Some(Verdict::Pass),
        )
    {
        return fail(format!("root's verdicts changed: {verdicts:?}"));
    }
    if !t
        .during
        .iter()
        .any(|d| d.node == "n2" && d.verdict == Verdict::Fail)
    {
        return fail("n2's evidence during the job is gone".into());
    }
    if slurm
        .calls()
        .iter()
        .any(|c| matches!(c, Call::Drain { .. }))
    {
        return fail("a drain".into());
    }
    Ok(comment)
}
