//! A whole drill as one call: a [`SessionSpec`] (where the nodes come from, the job user, the
//! classes and sizes, the seed, the state folder, the prices) becomes a [`Session`] that runs
//! open → undo what a stopped drill left pending → check the nodes → set up → rounds → restore →
//! score. The binary (`fabric-check drill`) maps its arguments to the spec and prints.
//!
//! Every Slurm call goes through the [`Cluster`] seam: on a real cluster or the testbed that is
//! [`SlurmCluster`], whose every call is bounded; the tests run a whole session on the fakes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use fabric_proto::hostlist::{Hostlist, HostlistError};

use crate::class::{self, FaultClass, NodeKind, UnknownClass};
use crate::cluster::{Cluster, ClusterError, SlurmCluster};
use crate::gate::{GateError, Gates, Place};
use crate::grade::{Size, SizeError, Thresholds};
use crate::inject::{
    self, InjectError, Injector, Loads, NodeExecInjector, TestbedInjector, replay,
};
use crate::job_age::JobAge;
use crate::journal::{Journal, JournalError, Pending};
use crate::plan::{DrillNode, Plan, PlanError, PlanSpec};
use crate::run::{Drill, RunConfig};
use crate::score::{self, Prices, RoundOutcome, Scores};
use crate::stragglers::{self, levers::Lever};

/// Where a real cluster's drill keeps its restore journal unless the spec says otherwise.
pub const DEFAULT_STATE_DIR: &str = "/var/lib/fabric-check/drill";

/// Why a session could not open or run. Each says what to do.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The testbed's state folder is missing.
    #[error("no testbed folder: run `scripts/testbed up` first, or set FABRIC_TESTBED_DIR")]
    NoTestbed(#[source] std::io::Error),
    /// The testbed's control script is missing.
    #[error("no testbed script at {}: pass --testbed-script", .path.display())]
    NoTestbedScript {
        /// The script named.
        path: PathBuf,
        /// Why it cannot be used.
        #[source]
        source: std::io::Error,
    },
    /// The user database could not be read.
    #[error("cannot look up user {0}")]
    UserLookup(String, #[source] nix::Error),
    /// No such job user.
    #[error("no user named {0}: name an existing user with --job-user")]
    NoUser(String),
    /// A node list that is not a hostlist.
    #[error("{0:?} is not a Slurm hostlist (n[1-4], gpu01,gpu02)")]
    NotAHostlist(String, #[source] HostlistError),
    /// A hostlist too large to expand.
    #[error("cannot expand {0:?}")]
    CannotExpand(String, #[source] HostlistError),
    /// Neither the testbed nor a reservation.
    #[error(
        "name the drill's nodes: --testbed, or --reservation NAME on a real cluster (idle nodes held for the drill)"
    )]
    NoNodes,
    /// A node the reservation does not hold.
    #[error(
        "node {node} is not in reservation {reservation}: the drill changes only nodes its reservation holds"
    )]
    NotInReservation {
        /// The node.
        node: String,
        /// The reservation.
        reservation: String,
    },
    /// A real cluster without a shared work folder.
    #[error(
        "--work-dir DIR is needed on a real cluster: a folder the nodes share, for the rounds' job scripts and checkpoints"
    )]
    NoWorkDir,
    /// A file or folder the session needs.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// A class id that is not one.
    #[error(transparent)]
    Class(#[from] UnknownClass),
    /// A Slurm call.
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    /// A gate refused.
    #[error(transparent)]
    Gate(#[from] GateError),
    /// The restore journal.
    #[error(transparent)]
    Journal(#[from] JournalError),
    /// An injection or an undo.
    #[error(transparent)]
    Inject(#[from] InjectError),
    /// The plan cannot be drawn.
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// A `--size` that does not fit.
    #[error("--size: {0}")]
    Size(#[from] SizeError),
    /// A `--size` for a class the drill does not run.
    #[error(
        "--size {0}=...: the drill does not run class {0}; add it to --classes or drop the size"
    )]
    SizeForAbsentClass(String),
    /// Graded sizes asked for on a real cluster.
    #[error(
        "graded faults (--graded, --size) run on the testbed only: a real cluster's congestion cap is a fixed rate and its counters cannot be raised; drop them here"
    )]
    GradedOnTestbedOnly,
    /// `--job-age-s` on a real cluster.
    #[error(
        "--job-age-s runs on the testbed only: it writes a file into each node's root-owned state folder, which a real cluster's nodes keep for their own jobs; drop it here"
    )]
    JobAgeOnTestbedOnly,
    /// A `--size` list that fits no class the drill runs.
    #[error(
        "--size {0}: no class the drill runs takes sizes of this kind; write CLASS=SIZES (congestion=50%, error_counters=2x, link_flap=2)"
    )]
    SizeFitsNoClass(String),
    /// A straggler drill asked for on a real cluster.
    #[error(
        "the straggler drill (--stragglers) runs on the testbed only: it caps a node's CPU through a cgroup and shapes its path in the testbed's network namespaces; use --testbed"
    )]
    StragglersOnTestbedOnly,
    /// A straggler plan that cannot be drawn.
    #[error("--stragglers: {0}")]
    StragglerPlan(String),
}

/// A straggler drill's own settings (`--stragglers`; docs/drill.md, "Stragglers").
#[derive(Debug, Clone, PartialEq)]
pub struct StragglerSpec {
    /// The classes and controls to run (empty: every one).
    pub kinds: Vec<stragglers::plan::Kind>,
    /// The sizes of each class, thousandths of the usual step (empty: 1.1×, 1.25×, 1.5×, 2×).
    pub sizes: Vec<u32>,
    /// Rounds per class and size.
    pub per_size: usize,
    /// Rounds per control.
    pub per_control: usize,
    /// Clean rounds.
    pub clean: usize,
}

/// One `--size` argument: `[CLASS=]SIZE[,SIZE...]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SizeArg {
    /// The class it is for; `None`: every class the drill runs whose sizes are of this kind.
    pub class: Option<String>,
    /// The sizes.
    pub sizes: Vec<Size>,
}

impl SizeArg {
    /// Parses `[CLASS=]SIZE[,SIZE...]` (`congestion=75%,50%`, `2x`).
    pub fn parse(s: &str) -> Result<SizeArg, SizeError> {
        match s.split_once('=') {
            Some((c, list)) => Ok(SizeArg {
                class: Some(c.trim().to_owned()),
                sizes: Size::parse_list(list)?,
            }),
            None => Ok(SizeArg {
                class: None,
                sizes: Size::parse_list(s)?,
            }),
        }
    }
}

/// The sizes each of `classes` runs at: with `graded`, every graded class at its `--size` or
/// its default sizes; without, only the classes a `--size` names or fits. Refuses a size of the
/// wrong kind, one for a class not run, and a class-less list that fits none.
pub fn resolve_sizes(
    classes: &[FaultClass],
    graded: bool,
    args: &[SizeArg],
) -> Result<BTreeMap<FaultClass, Vec<Size>>, SessionError> {
    let mut out: BTreeMap<FaultClass, Vec<Size>> = BTreeMap::new();
    for a in args {
        let text = a
            .sizes
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(",");
        match &a.class {
            Some(id) => {
                let c = FaultClass::parse(id)?;
                if !classes.contains(&c) {
                    return Err(SessionError::SizeForAbsentClass(id.clone()));
                }
                for z in &a.sizes {
                    c.check_size(*z)?;
                }
                out.entry(c).or_default().extend(&a.sizes);
            }
            None => {
                let kind = a.sizes.first().map(|z| z.kind());
                if let Some(z) = a.sizes.iter().find(|z| Some(z.kind()) != kind) {
                    return Err(SizeError::Malformed(format!(
                        "{text} (mixes kinds at {z}: give each class its own --size CLASS=...)"
                    ))
                    .into());
                }
                let fits: Vec<FaultClass> = classes
                    .iter()
                    .copied()
                    .filter(|c| c.grading().map(|g| g.kind) == kind)
                    .collect();
                if fits.is_empty() {
                    return Err(SessionError::SizeFitsNoClass(text));
                }
                for c in fits {
                    out.entry(c).or_default().extend(&a.sizes);
                }
            }
        }
    }
    if graded {
        for c in classes {
            if let Some(g) = c.grading() {
                out.entry(*c).or_insert_with(|| g.defaults.to_vec());
            }
        }
    }
    for v in out.values_mut() {
        v.sort();
        v.dedup();
    }
    Ok(out)
}

/// Where the drill's nodes come from.
#[derive(Debug, Clone)]
pub enum Source {
    /// The project's testbed.
    Testbed(TestbedSpec),
    /// A real cluster's reservation.
    Reservation(ReservationSpec),
}

/// The testbed's nodes.
#[derive(Debug, Clone)]
pub struct TestbedSpec {
    /// The testbed's state folder.
    pub dir: PathBuf,
    /// The testbed's control script.
    pub script: PathBuf,
    /// The nodes (a Slurm hostlist); `None`: every node of the testbed.
    pub nodes: Option<String>,
}

/// A real cluster's nodes, held by a reservation.
#[derive(Debug, Clone)]
pub struct ReservationSpec {
    /// The reservation.
    pub name: String,
    /// The nodes (a Slurm hostlist, all in the reservation); `None`: all it holds.
    pub nodes: Option<String>,
    /// The fabric of every node.
    pub kind: NodeKind,
    /// The words that run a command on a node, `{node}` replaced; `None`: `ssh {node}`.
    pub node_exec: Option<String>,
    /// The netdev the network classes change.
    pub interface: String,
    /// The lossless priority.
    pub priority: u8,
    /// The class ids that may change real hardware or a daemon.
    pub allow_hardware: Vec<String>,
    /// A folder the nodes share, for the rounds' job scripts and checkpoints.
    pub work_dir: Option<PathBuf>,
    /// Folder put first on the jobs' `PATH`.
    pub job_path: Option<PathBuf>,
}

/// Everything a session needs, as plain values.
#[derive(Debug, Clone)]
pub struct SessionSpec {
    /// Where the nodes come from.
    pub source: Source,
    /// The user the jobs are submitted as; on the testbed `None` means `fabric`.
    pub job_user: Option<String>,
    /// The class ids to run; empty: every class that can run here.
    pub classes: Vec<String>,
    /// Rounds per fault class.
    pub per_class: usize,
    /// Clean control rounds.
    pub controls: usize,
    /// The plan's seed; `None`: from the clock.
    pub seed: Option<u64>,
    /// How long a `during` round's job runs, seconds.
    pub during_job_s: f64,
    /// Folder of the restore journal; `None`: the testbed's, or [`DEFAULT_STATE_DIR`].
    pub state_dir: Option<PathBuf>,
    /// `--graded`: the graded classes (by default: every one that can run here), each at every
    /// size, [`SessionSpec::per_class`] rounds per size.
    pub graded: bool,
    /// `--size` arguments.
    pub sizes: Vec<SizeArg>,
    /// The thresholds in force, that a graded counter fault is a multiple of.
    pub thresholds: Thresholds,
    /// `--job-age-s`: each `during` round's job dated back this many seconds for its watch
    /// (testbed only; [`crate::job_age`]).
    pub job_age_s: Option<u64>,
}

/// What a session tells as it goes.
#[derive(Debug)]
pub enum Event<'a> {
    /// A stopped drill's change is being undone.
    Undoing(&'a Pending),
    /// The rounds start.
    Started {
        /// The plan's seed.
        seed: u64,
        /// How many rounds.
        rounds: usize,
        /// The drill's nodes.
        nodes: &'a [String],
    },
    /// A round ended.
    Round(&'a RoundOutcome),
    /// A straggler round ended.
    StragglerRound(&'a stragglers::score::Outcome),
    /// Something the drill found out as it set up (how a class is injected here, or why not).
    Note(String),
}

/// One drill on its nodes: the cluster, the injector, the journal, the gates.
pub struct Session {
    /// The cluster (Slurm's commands, bounded; or a fake).
    pub cluster: Box<dyn Cluster>,
    /// What the drill may touch.
    pub gates: Gates,
    /// The injector.
    pub injector: Box<dyn Injector>,
    /// The restore journal.
    pub journal: Journal,
    /// The drill's nodes and their kinds.
    pub nodes: Vec<DrillNode>,
    /// How the rounds run.
    pub cfg: RunConfig,
    /// The testbed's state folder, on the testbed.
    pub testbed: Option<PathBuf>,
    /// The classes the spec asked for (ids; empty: every class that can run here).
    pub classes: Vec<String>,
    /// Rounds per fault class.
    pub per_class: usize,
    /// Clean control rounds.
    pub controls: usize,
    /// `--graded`.
    pub graded: bool,
    /// `--size` arguments.
    pub sizes: Vec<SizeArg>,
    /// The plan's seed, if the spec gave one.
    pub seed: Option<u64>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("nodes", &self.nodes)
            .field("journal", &self.journal.path())
            .finish_non_exhaustive()
    }
}

/// The testbed's state folder: `$FABRIC_TESTBED_DIR`, else `.testbed`.
pub fn testbed_dir() -> PathBuf {
    std::env::var_os("FABRIC_TESTBED_DIR").map_or_else(|| PathBuf::from(".testbed"), PathBuf::from)
}

/// The uid of `user`.
pub fn uid_of(user: &str) -> Result<u32, SessionError> {
    let u = nix::unistd::User::from_name(user)
        .map_err(|e| SessionError::UserLookup(user.to_owned(), e))?
        .ok_or_else(|| SessionError::NoUser(user.to_owned()))?;
    Ok(u.uid.as_raw())
}

/// The words that submit as `user` (root changing to the job user).
pub fn submit_prefix(user: &str, uid: u32) -> Vec<String> {
    vec![
        "/usr/bin/setpriv".into(),
        format!("--reuid={uid}"),
        format!("--regid={uid}"),
        "--init-groups".into(),
        "/usr/bin/env".into(),
        format!("HOME=/home/{user}"),
        format!("USER={user}"),
        format!("LOGNAME={user}"),
    ]
}

/// The node names of a Slurm node list (`n[1-3],gpu07`).
pub fn expand(list: &str) -> Result<Vec<String>, SessionError> {
    let mut out = Vec::new();
    for part in split_top(list) {
        let h = Hostlist::parse(&part).map_err(|e| SessionError::NotAHostlist(part.clone(), e))?;
        out.extend(
            h.expand()
                .map_err(|e| SessionError::CannotExpand(part.clone(), e))?,
        );
    }
    Ok(out)
}

/// Splits `a,b[1-3],c` at the commas outside brackets.
fn split_top(s: &str) -> Vec<String> {
    let (mut out, mut cur, mut depth) = (Vec::new(), String::new(), 0);
    for ch in s.chars() {
        match ch {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                out.push(std::mem::take(&mut cur));
                continue;
            }
            _ => {}
        }
        cur.push(ch);
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// The classes `ids` name.
pub fn parse_classes(ids: &[String]) -> Result<Vec<FaultClass>, SessionError> {
    ids.iter()
        .map(|c| FaultClass::parse(c).map_err(Into::into))
        .collect()
}

/// The classes to run at `place`: `wanted`, else every class that can run there; refuses, on a
/// real cluster, a testbed-only class and a hardware class without `--allow-hardware` (the
/// gates' rule, [`Place::class`]).
pub fn choose_classes(place: &Place, wanted: &[String]) -> Result<Vec<FaultClass>, SessionError> {
    if wanted.is_empty() {
        return Ok(class::ALL
            .iter()
            .copied()
            .filter(|c| place.class(*c).is_ok())
            .collect());
    }
    let wanted = parse_classes(wanted)?;
    for c in &wanted {
        place.class(*c)?;
    }
    Ok(wanted)
}

impl Session {
    /// Opens the session `spec` describes, over Slurm's commands (each call bounded), and its
    /// restore journal.
    pub fn open(spec: &SessionSpec) -> Result<Session, SessionError> {
        let parts = match &spec.source {
            Source::Testbed(t) => open_testbed(spec, t)?,
            Source::Reservation(r) => open_reservation(spec, r)?,
        };
        let journal = Journal::open(&parts.journal_path)?;
        Ok(Session {
            cluster: Box::new(parts.cluster),
            gates: parts.gates,
            injector: parts.injector,
            journal,
            nodes: parts.nodes,
            cfg: parts.cfg,
            testbed: parts.testbed,
            classes: spec.classes.clone(),
            per_class: spec.per_class,
            controls: spec.controls,
            graded: spec.graded,
            sizes: spec.sizes.clone(),
            seed: spec.seed,
        })
    }

    /// The drill's node names.
    pub fn node_names(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.name.clone()).collect()
    }

    /// Undoes every change a stopped drill left pending in the journal (telling each first);
    /// how many.
    pub fn undo_pending(&mut self, on: &mut dyn FnMut(Event<'_>)) -> Result<usize, SessionError> {
        let pending = self.journal.pending()?;
        for p in &pending {
            on(Event::Undoing(p));
        }
        let n = replay(self.injector.as_mut(), &mut self.journal)?;
        self.journal.compact()?;
        Ok(n)
    }

    /// Whether a stopped drill left changes in the journal.
    pub fn has_pending(&self) -> Result<bool, SessionError> {
        Ok(!self.journal.pending()?.is_empty())
    }

    /// The seed: the spec's, else from the clock.
    pub fn seed(&self) -> u64 {
        self.seed.unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_secs())
        })
    }

    /// The plan for `seed`: the spec's classes (refused where they may not run), sizes and nodes.
    pub fn plan(&self, seed: u64) -> Result<Plan, SessionError> {
        let mut classes = choose_classes(self.gates.place(), &self.classes)?;
        if self.graded && self.classes.is_empty() {
            classes.retain(|c| c.grading().is_some());
        }
        let sizes = resolve_sizes(&classes, self.graded, &self.sizes)?;
        if !sizes.is_empty() && *self.gates.place() != Place::Testbed {
            return Err(SessionError::GradedOnTestbedOnly);
        }
        Ok(Plan::draw(&PlanSpec {
            nodes: self.nodes.clone(),
            classes,
            per_class: self.per_class,
            controls: self.controls,
            seed,
            sizes,
        })?)
    }

    /// Runs `plan`: checks the nodes, sets them up, runs the rounds, restores, scores.
    pub fn drill(
        &mut self,
        plan: &Plan,
        prices: &Prices,
        on: &mut dyn FnMut(Event<'_>),
    ) -> Result<Scores, SessionError> {
        let names = self.node_names();
        self.gates.start(self.cluster.as_mut())?;
        on(Event::Started {
            seed: plan.seed,
            rounds: plan.rounds.len(),
            nodes: &names,
        });
        let setup_ids = self.set_up()?;
        let outcomes = {
            let mut drill = Drill {
                cluster: self.cluster.as_mut(),
                injector: self.injector.as_mut(),
                journal: &mut self.journal,
                gates: &mut self.gates,
                cfg: self.cfg.clone(),
            };
            drill.run(plan, |o| on(Event::Round(o)))
        };
        if !setup_ids.is_empty() {
            inject::restore(self.injector.as_mut(), &mut self.journal, &setup_ids)?;
        }
        // Stopped by a signal: whatever is still pending (a restore the round could not finish)
        // is undone now, before the drill exits.
        if self.gates.halted() {
            self.undo_pending(on)?;
        }
        self.journal.compact()?;
        Ok(score::score(plan.seed, &outcomes, prices))
    }

    /// The straggler drill's plan for `seed` (the testbed only).
    pub fn straggler_plan(
        &self,
        spec: &StragglerSpec,
        seed: u64,
    ) -> Result<stragglers::plan::Plan, SessionError> {
        use stragglers::plan::{DEFAULT_SIZES, Kind, Plan, PlanSpec};
        if self.testbed.is_none() || *self.gates.place() != Place::Testbed {
            return Err(SessionError::StragglersOnTestbedOnly);
        }
        let kinds = if spec.kinds.is_empty() {
            Kind::ALL.to_vec()
        } else {
            spec.kinds.clone()
        };
        Plan::draw(&PlanSpec {
            nodes: self.node_names(),
            kinds,
            sizes: if spec.sizes.is_empty() {
                DEFAULT_SIZES.to_vec()
            } else {
                spec.sizes.clone()
            },
            per_size: spec.per_size,
            per_control: spec.per_control,
            clean: spec.clean,
            seed,
            inject_after_ms: (25_000, 30_000),
        })
        .map_err(SessionError::StragglerPlan)
    }

    /// Runs a straggler plan on the testbed: checks the nodes, sets up the levers (the CPU
    /// controller, the path relays), runs the rounds, restores, scores.
    pub fn stragglers(
        &mut self,
        plan: &stragglers::plan::Plan,
        on: &mut dyn FnMut(Event<'_>),
    ) -> Result<stragglers::score::Scores, SessionError> {
        use stragglers::plan::Kind;
        let Some(dir) = self.testbed.clone() else {
            return Err(SessionError::StragglersOnTestbedOnly);
        };
        let names = self.node_names();
        self.gates.start(self.cluster.as_mut())?;
        on(Event::Started {
            seed: plan.seed,
            rounds: plan.rounds.len(),
            nodes: &names,
        });
        let mut cfg = stragglers::run::Config::new(self.cfg.work_dir.clone(), names.clone());
        cfg.job_uid = self.cfg.job_uid;
        cfg.bin_dir = self.cfg.bin_dir.clone();
        cfg.records_dir = Some(dir.join("runs"));
        let mut lever = stragglers::levers::TestbedLever::open(
            &dir,
            &names,
            cfg.transfer_bytes,
            &mut self.journal,
        );
        match lever.cgroup() {
            Ok(cg) => on(Event::Note(format!(
                "cpu_capped: {} under {}",
                cg.version(),
                cg.root().display()
            ))),
            Err(why) => on(Event::Note(format!("cpu_capped is blocked: {why}"))),
        }
        if let Some(why) = lever.blocked(Kind::PathShaped) {
            on(Event::Note(format!("path_shaped is blocked: {why}")));
        }
        let outcomes = stragglers::run::Drill {
            cluster: self.cluster.as_mut(),
            lever: &mut lever,
            journal: &mut self.journal,
            gates: &mut self.gates,
            cfg,
        }
        .run(plan, |o| on(Event::StragglerRound(o)));
        let closed = lever.close(&mut self.journal);
        if self.gates.halted() {
            self.undo_pending(on)?;
        }
        closed?;
        self.journal.compact()?;
        Ok(stragglers::score::score(plan.seed, &outcomes))
    }

    /// On the testbed, the nodes of the `roce` partition get RoCE trees for the drill; the
    /// journal entries to undo at the end.
    fn set_up(&mut self) -> Result<Vec<u64>, SessionError> {
        let mut ids = Vec::new();
        if let Some(dir) = &self.testbed {
            let mut inj = TestbedInjector::new(dir.clone(), PathBuf::new());
            for n in self.nodes.iter().filter(|n| n.kind == NodeKind::Roce) {
                ids.push(inj.write_tree(
                    &n.name,
                    "setup",
                    NodeKind::Roce.healthy_fixture(),
                    &mut self.journal,
                )?);
            }
        }
        Ok(ids)
    }
}

/// What opening a source gives.
struct Parts {
    cluster: SlurmCluster,
    gates: Gates,
    injector: Box<dyn Injector>,
    journal_path: PathBuf,
    nodes: Vec<DrillNode>,
    cfg: RunConfig,
    testbed: Option<PathBuf>,
}

fn open_testbed(spec: &SessionSpec, t: &TestbedSpec) -> Result<Parts, SessionError> {
    let mut cluster = SlurmCluster::new();
    let dir = t.dir.canonicalize().map_err(SessionError::NoTestbed)?;
    let script = t
        .script
        .canonicalize()
        .map_err(|source| SessionError::NoTestbedScript {
            path: t.script.clone(),
            source,
        })?;
    let user = spec.job_user.clone().unwrap_or_else(|| "fabric".into());
    let uid = uid_of(&user)?;
    cluster.submit_prefix = submit_prefix(&user, uid);
    cluster.health_cmd = vec![
        dir.join("bin/fabric-check").display().to_string(),
        "health".into(),
        "--plugstack".into(),
        dir.join("etc/plugstack.conf").display().to_string(),
        "--node".into(),
        "{node}".into(),
    ];
    let names = match &t.nodes {
        Some(n) => expand(n)?,
        None => {
            let count: usize = std::fs::read_to_string(dir.join("etc/node-count"))
                .ok()
                .and_then(|s| s.trim().parse().ok())
                .unwrap_or(4);
            (1..=count).map(|i| format!("n{i}")).collect()
        }
    };
    // The `roce` partition's nodes are RoCE, the others InfiniBand; no such partition: none.
    let roce = cluster.nodes_of("roce").unwrap_or_default();
    let nodes = names
        .iter()
        .map(|n| DrillNode {
            name: n.clone(),
            kind: if roce.contains(n) {
                NodeKind::Roce
            } else {
                NodeKind::Ib
            },
        })
        .collect();
    let gates = Gates::testbed(names.clone());
    let mut cfg = RunConfig::new(dir.join("jobs/drill"), names);
    cfg.during_job_s = spec.during_job_s;
    cfg.job_age = spec.job_age_s.map(|age_s| JobAge {
        age_s,
        plugstack: dir.join("etc/plugstack.conf"),
    });
    cfg.job_uid = Some(uid);
    cfg.bin_dir = Some(dir.join("bin"));
    let mut injector = TestbedInjector::new(dir.clone(), script);
    injector.loads.job_uid = Some(uid);
    injector.thresholds = spec.thresholds.clone();
    let state = spec
        .state_dir
        .clone()
        .unwrap_or_else(|| dir.join("state/drill"));
    std::fs::create_dir_all(dir.join("jobs/drill"))?;
    Ok(Parts {
        cluster,
        gates,
        injector: Box::new(injector),
        journal_path: state.join("journal.jsonl"),
        nodes,
        cfg,
        testbed: Some(dir),
    })
}

fn open_reservation(spec: &SessionSpec, r: &ReservationSpec) -> Result<Parts, SessionError> {
    if spec.job_age_s.is_some() {
        return Err(SessionError::JobAgeOnTestbedOnly);
    }
    let mut cluster = SlurmCluster::new();
    let res = &r.name;
    let held = cluster.reservation_nodes(res)?;
    let names = match &r.nodes {
        Some(n) => {
            let names = expand(n)?;
            if let Some(out) = names.iter().find(|n| !held.contains(n)) {
                return Err(SessionError::NotInReservation {
                    node: out.clone(),
                    reservation: res.clone(),
                });
            }
            names
        }
        None => held,
    };
    cluster.reservation = Some(res.clone());
    if let Some(u) = &spec.job_user {
        cluster.submit_prefix = submit_prefix(u, uid_of(u)?);
    }
    let prefix: Vec<String> = r
        .node_exec
        .as_deref()
        .unwrap_or("ssh {node}")
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    // `idle` rounds run the node's own health check where it runs: on the node.
    cluster.health_cmd = prefix.clone();
    cluster
        .health_cmd
        .extend(["fabric-check".to_owned(), "health".to_owned()]);
    let nodes = names
        .iter()
        .map(|n| DrillNode {
            name: n.clone(),
            kind: r.kind,
        })
        .collect();
    let Some(work) = r.work_dir.clone() else {
        return Err(SessionError::NoWorkDir);
    };
    let gates = Gates::cluster(
        names.clone(),
        res.clone(),
        parse_classes(&r.allow_hardware)?,
    );
    let mut cfg = RunConfig::new(work, names);
    cfg.during_job_s = spec.during_job_s;
    cfg.job_uid = match &spec.job_user {
        Some(u) => Some(uid_of(u)?),
        None => None,
    };
    cfg.bin_dir = r.job_path.clone();
    let mut loads = Loads::remote(prefix.clone());
    loads.job_uid = cfg.job_uid;
    let state = spec
        .state_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(DEFAULT_STATE_DIR));
    Ok(Parts {
        cluster,
        gates,
        injector: Box::new(NodeExecInjector {
            prefix,
            interface: r.interface.clone(),
            priority: r.priority,
            congestion_rate: "1gbit".into(),
            loads,
        }),
        journal_path: state.join("journal.jsonl"),
        nodes,
        cfg,
        testbed: None,
    })
}

/// Replays the journal at `state_dir` (or [`DEFAULT_STATE_DIR`]) with no reservation: its undos
/// are complete in themselves. How many, and the journal's path.
pub fn restore_journal(
    state_dir: Option<&Path>,
    interface: &str,
    priority: u8,
) -> Result<(usize, PathBuf), SessionError> {
    let path = state_dir
        .map_or_else(|| PathBuf::from(DEFAULT_STATE_DIR), Path::to_path_buf)
        .join("journal.jsonl");
    let mut journal = Journal::open(&path)?;
    let mut inj = NodeExecInjector {
        prefix: Vec::new(),
        interface: interface.to_owned(),
        priority,
        congestion_rate: String::new(),
        loads: Loads::default(),
    };
    let n = replay(&mut inj, &mut journal)?;
    journal.compact()?;
    Ok((n, path))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fakes::FakeCluster;
    use crate::journal::Undo;

    #[test]
    fn graded_classes_run_their_defaults_unless_a_size_names_them_and_a_misfit_size_is_refused() {
        use crate::grade::Size;
        let classes = vec![
            FaultClass::ErrorCounters,
            FaultClass::Congestion,
            FaultClass::PortDown,
        ];
        let arg = |s: &str| SizeArg::parse(s).unwrap();
        let m = resolve_sizes(&classes, true, &[arg("congestion=50%,75%")]).unwrap();
        assert_eq!(
            m[&FaultClass::Congestion],
            vec![Size::BandwidthPct(50), Size::BandwidthPct(75)]
        );
        assert_eq!(
            m[&FaultClass::ErrorCounters],
            FaultClass::ErrorCounters
                .grading()
                .unwrap()
                .defaults
                .to_vec()
        );
        assert!(!m.contains_key(&FaultClass::PortDown));
        // Without --graded only what a size fits is graded; a bare list goes to its kind.
        let m = resolve_sizes(&classes, false, &[arg("2x,10x")]).unwrap();
        assert_eq!(
            m.keys().copied().collect::<Vec<_>>(),
            vec![FaultClass::ErrorCounters]
        );
        let e = resolve_sizes(&classes, false, &[arg("3")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("--size 3") && e.contains("CLASS=SIZES"), "{e}");
        let e = resolve_sizes(&classes, false, &[arg("congestion=2x")])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("congestion takes") && e.contains("\"2x\""),
            "{e}"
        );
        let e = resolve_sizes(&classes, false, &[arg("link_flap=2")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("does not run class link_flap"), "{e}");
        let e = SizeArg::parse("congestion=half").unwrap_err().to_string();
        assert!(e.contains("\"half\"") && e.contains("50%"), "{e}");
    }

    #[test]
    fn node_lists_split_at_commas_outside_brackets() {
        assert_eq!(
            split_top("n[1-3],gpu07,a[1,3]"),
            vec!["n[1-3]", "gpu07", "a[1,3]"]
        );
        assert_eq!(expand("n[1-2],m1").unwrap(), vec!["n1", "n2", "m1"]);
        assert!(expand("n[1-").is_err());
    }

    /// A session of `port_down` rounds (one a class, one control) on n1 to n3 of `cluster`, its
    /// work in `dir`, its journal at `journal`, seed 7.
    fn session_on_the_fakes(
        dir: &Path,
        cluster: FakeCluster,
        injector: Box<dyn Injector>,
        journal: &Path,
    ) -> Session {
        let names: Vec<String> = ["n1", "n2", "n3"].iter().map(|n| (*n).into()).collect();
        let mut cfg = RunConfig::new(dir.join("work"), names.clone());
        cfg.during_job_s = 3.0;
        Session {
            cluster: Box::new(cluster),
            gates: Gates::testbed(names.clone()),
            injector,
            journal: Journal::open(journal).unwrap(),
            nodes: names
                .iter()
                .map(|n| DrillNode {
                    name: n.clone(),
                    kind: NodeKind::Ib,
                })
                .collect(),
            cfg,
            testbed: None,
            classes: vec!["port_down".into()],
            per_class: 1,
            controls: 1,
            graded: false,
            sizes: Vec::new(),
            seed: Some(7),
        }
    }

    #[test]
    fn a_whole_session_on_the_fakes_undoes_what_was_pending_runs_its_rounds_restores_and_scores() {
        let dir = tempfile::tempdir().unwrap();
        let journal_path = dir.path().join("state/journal.jsonl");
        // A stopped drill left one change behind.
        {
            let mut j = Journal::open(&journal_path).unwrap();
            j.record(
                "n2",
                "port_down",
                Undo::Run {
                    argv: vec!["true".into()],
                },
            )
            .unwrap();
        }
        let cluster = FakeCluster::new(500, "fabric-check: ib.port_state");
        let injector = Box::new(cluster.injector());
        let mut session = session_on_the_fakes(dir.path(), cluster, injector, &journal_path);
        session.classes = vec!["port_down".into(), "clean".into()];
        let mut told = Vec::new();
        let mut on = |e: Event<'_>| {
            told.push(match e {
                Event::Undoing(p) => format!("undo {} {}", p.what, p.node),
                Event::Started { seed, rounds, .. } => format!("start {seed} {rounds}"),
                Event::Round(o) => format!("round {} {}", o.round.class.id(), o.round.moment.id()),
                Event::StragglerRound(o) => format!("straggler round {}", o.round.index),
                Event::Note(n) => n,
            });
        };
        assert!(session.has_pending().unwrap());
        assert_eq!(session.undo_pending(&mut on).unwrap(), 1);
        assert!(!session.has_pending().unwrap());
        let seed = session.seed();
        let plan = session.plan(seed).unwrap();
        let prices = Prices {
            gpus_per_node: 8,
            per_gpu_h: None,
        };
        let scores = session.drill(&plan, &prices, &mut on).unwrap();
        assert_eq!(told[0], "undo port_down n2");
        assert_eq!(told[1], format!("start 7 {}", plan.rounds.len()));
        assert_eq!(told.len(), 2 + plan.rounds.len(), "{told:?}");
        assert!(
            told.iter().any(|t| t.starts_with("round port_down")),
            "{told:?}"
        );
        assert!(!session.has_pending().unwrap(), "every fault is restored");
        assert!(session.gates.stopped().is_none());
        assert_eq!(scores.seed, 7);
        let port_down = scores
            .per_class
            .iter()
            .find(|c| c.class == "port_down")
            .expect("port_down is scored");
        assert!(port_down.injections >= 1, "{port_down:?}");
        assert_eq!(port_down.detected, port_down.injections, "{port_down:?}");
    }

    /// Faults the testbed's fixture trees and tells the fake cluster, which drains the node.
    struct TreesAndCluster {
        trees: TestbedInjector,
        cluster: crate::fakes::FakeInjector,
    }

    impl Injector for TreesAndCluster {
        fn inject(
            &mut self,
            round: &crate::plan::Round,
            ckpt: &Path,
            journal: &mut Journal,
        ) -> Result<Vec<u64>, crate::inject::InjectError> {
            let mut ids = self.trees.inject(round, ckpt, journal)?;
            ids.extend(self.cluster.inject(round, ckpt, journal)?);
            Ok(ids)
        }
        fn undo(&mut self, node: &str, undo: &Undo) -> Result<(), crate::inject::InjectError> {
            match undo {
                Undo::Rename { .. } => self.trees.undo(node, undo),
                _ => self.cluster.undo(node, undo),
            }
        }
    }

    /// Each node's tree, by file: what a fixture tree holds.
    fn trees(tb: &Path) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        for n in ["n1", "n2", "n3"] {
            for e in std::fs::read_dir(tb.join("nodes").join(n))
                .unwrap()
                .flatten()
            {
                let marker = e.path().join("marker");
                let text = std::fs::read_to_string(&marker).unwrap_or_default();
                out.insert(format!("{n}/{}", e.file_name().to_string_lossy()), text);
            }
        }
        out
    }

    #[test]
    fn a_drill_stopped_by_sigterm_mid_round_restores_every_tree_resumes_what_it_drained_and_runs_no_more_rounds()
     {
        let dir = tempfile::tempdir().unwrap();
        let tb = dir.path().join("testbed");
        for n in ["n1", "n2", "n3"] {
            std::fs::create_dir_all(tb.join("nodes").join(n).join("sysfs")).unwrap();
            std::fs::write(tb.join("nodes").join(n).join("sysfs/marker"), "healthy").unwrap();
        }
        crate::fakes::stand_in_fixture_writer(&tb);
        let before = trees(&tb);

        let mut cluster = FakeCluster::new(500, "fabric-check: ib.port_state");
        // SIGTERM arrives once the first fault is in and has drained its node.
        let mut sent = false;
        cluster.after_sleep = Some(Box::new(move |c: &FakeCluster| {
            let drained = c.nodes.iter().any(|v| v.state == "drained");
            if drained && !sent {
                sent = true;
                nix::sys::signal::raise(nix::sys::signal::Signal::SIGTERM).unwrap();
            }
        }));
        let injector = TreesAndCluster {
            trees: TestbedInjector::new(tb.clone(), tb.join("testbed")),
            cluster: cluster.injector(),
        };
        let injected = injector.cluster.clone_log();
        let journal = dir.path().join("state/journal.jsonl");
        let mut session = session_on_the_fakes(dir.path(), cluster, Box::new(injector), &journal);
        (session.per_class, session.controls) = (4, 0);
        session
            .gates
            .stop_on(crate::halt::Halt::on_signals().unwrap());
        let plan = session.plan(7).unwrap();
        assert!(plan.rounds.len() >= 4);
        let prices = Prices {
            gpus_per_node: 8,
            per_gpu_h: None,
        };
        let mut rounds = 0;
        session
            .drill(&plan, &prices, &mut |e| {
                if let Event::Round(_) = e {
                    rounds += 1;
                }
            })
            .unwrap();
        assert_eq!(
            session.gates.stopped(),
            Some(&GateError::Signalled("SIGTERM".into()))
        );
        assert_eq!(
            rounds, 0,
            "the stopped round is not scored, and no other ran"
        );
        assert_eq!(injected.borrow().len(), 1, "one fault went in");
        assert_eq!(trees(&tb), before, "every tree as the drill found it");
        assert!(!session.has_pending().unwrap(), "nothing left to undo");
        let views = session.cluster.nodes().unwrap();
        assert!(views.iter().all(|v| v.state == "idle"), "{views:?}");
        assert_eq!(
            session.gates.resumed().len(),
            1,
            "the node its fault drained is resumed"
        );
    }

    #[test]
    fn on_a_real_cluster_only_classes_without_hardware_run_unless_allowed_by_name() {
        let place = Place::Cluster { allowed: vec![] };
        let c: Vec<&str> = choose_classes(&place, &[])
            .unwrap()
            .iter()
            .map(|c| c.id())
            .collect();
        assert_eq!(c, vec!["checkpoint_burst", "background_load", "clean"]);
    }

    #[test]
    fn a_real_cluster_refuses_graded_sizes_before_anything_runs() {
        let dir = tempfile::tempdir().unwrap();
        let names: Vec<String> = ["n1", "n2", "n3"].iter().map(|n| (*n).into()).collect();
        let cluster = FakeCluster::new(500, "fabric-check: collective.slow_node");
        let injector = cluster.injector();
        let mut session = Session {
            cluster: Box::new(cluster),
            gates: Gates::cluster(names.clone(), "drill".into(), vec![FaultClass::Congestion]),
            injector: Box::new(injector),
            journal: Journal::open(&dir.path().join("journal.jsonl")).unwrap(),
            nodes: names
                .iter()
                .map(|n| DrillNode {
                    name: n.clone(),
                    kind: NodeKind::Roce,
                })
                .collect(),
            cfg: RunConfig::new(dir.path().join("work"), names.clone()),
            testbed: None,
            classes: vec!["congestion".into()],
            per_class: 1,
            controls: 0,
            graded: true,
            sizes: Vec::new(),
            seed: Some(3),
        };
        let e = session.plan(3).unwrap_err().to_string();
        assert!(e.contains("testbed only"), "{e}");
        // The same drill at the class's fixed size is planned.
        session.graded = false;
        assert_eq!(session.plan(3).unwrap().rounds.len(), 1);
    }
}
