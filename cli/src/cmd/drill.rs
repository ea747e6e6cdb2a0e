//! `fabric-check drill`: inject fabric faults on a set of nodes, watch what fabric-check says and
//! does, restore, and score recall, precision, false drains, time to detect and the jobs' cost
//! (the `fabric-drill` crate; docs/drill.md). With `--workload`, the admin's own job script per
//! fabric, clean and faulted, side by side.

use std::path::PathBuf;

use anyhow::{Context, bail};
use fabric_drill::class::{self, FaultClass, NodeKind};
use fabric_drill::cluster::{Cluster, SlurmCluster};
use fabric_drill::gate::{Gates, Place};
use fabric_drill::inject::{Injector, Loads, NodeExecInjector, TestbedInjector, replay};
use fabric_drill::journal::Journal;
use fabric_drill::plan::{DrillNode, Plan, PlanSpec};
use fabric_drill::run::{Drill, RunConfig};
use fabric_drill::score::{self, Prices, RoundOutcome};
use fabric_drill::{render, workload};
use fabric_proto::hostlist::Hostlist;

/// Where a real cluster's drill keeps its restore journal unless `--state-dir` says otherwise.
const DEFAULT_STATE_DIR: &str = "/var/lib/fabric-check/drill";

/// Output formats.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum Format {
    /// A text table and the findings.
    Table,
    /// The `fabric-check/drill/v1` JSON document.
    Json,
    /// Prometheus text-format gauges.
    Prometheus,
}

/// Arguments of `fabric-check drill`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The project's testbed: its virtual nodes, fixture trees and network namespaces
    /// (state folder from $FABRIC_TESTBED_DIR, else .testbed).
    #[arg(long, conflicts_with_all = ["reservation", "node_exec"])]
    pub testbed: bool,
    /// The testbed's control script (for stopping and starting a node's slurmd).
    #[arg(long, default_value = "scripts/testbed")]
    pub testbed_script: PathBuf,
    /// Nodes to drill on (a Slurm hostlist); on a real cluster they must be in --reservation.
    #[arg(long)]
    pub nodes: Option<String>,
    /// The Slurm reservation that holds the drill's idle nodes (real cluster); before it starts
    /// and before every injection the drill checks that it still holds the nodes and that no
    /// job the drill did not submit runs on them.
    #[arg(long)]
    pub reservation: Option<String>,
    /// The fabric of every node on a real cluster (on the testbed: the `roce` partition's nodes
    /// are RoCE, the others InfiniBand).
    #[arg(long, value_enum, default_value = "roce")]
    pub kind: KindArg,
    /// Seed of the plan (default: from the clock; printed so the drill can be repeated).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Rounds per fault class.
    #[arg(long, alias = "rounds", default_value_t = 5)]
    pub per_class: usize,
    /// How long a `during` round's job runs, seconds; its fault goes in at a point of it drawn
    /// from the seed (15-75 %), so the in-job watch, not the job's end, must find it.
    #[arg(long, default_value_t = 60.0, value_parser = parse_during_job_s)]
    pub during_job_s: f64,
    /// Clean control rounds (no fault), interleaved.
    #[arg(long, default_value_t = 4)]
    pub controls: usize,
    /// Classes to run, comma-separated (default: every class that can run here).
    #[arg(long, value_delimiter = ',')]
    pub classes: Vec<String>,
    /// Let CLASS change real hardware or a daemon on a real cluster (repeatable).
    #[arg(long, value_name = "CLASS")]
    pub allow_hardware: Vec<String>,
    /// Real cluster: the words that run a command on a node, `{node}` replaced (`ssh {node}`).
    #[arg(long, value_name = "WORDS")]
    pub node_exec: Option<String>,
    /// Real cluster: the RoCE/IB netdev the network classes change.
    #[arg(long, default_value = "eth0")]
    pub interface: String,
    /// Real cluster: the lossless priority (PFC, ECN).
    #[arg(long, default_value_t = 3)]
    pub priority: u8,
    /// Print the plan and change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Undo every change a stopped drill left (its restore journal), then exit.
    #[arg(long)]
    pub restore: bool,
    /// Folder of the restore journal.
    #[arg(long)]
    pub state_dir: Option<PathBuf>,
    /// Folder for the rounds' job scripts and checkpoints (shared with the nodes on a real
    /// cluster).
    #[arg(long)]
    pub work_dir: Option<PathBuf>,
    /// Folder put first on the jobs' PATH (where fabric-run is).
    #[arg(long)]
    pub job_path: Option<PathBuf>,
    /// Submit the jobs as this user (through setpriv; the drill runs as root).
    #[arg(long)]
    pub job_user: Option<String>,
    /// Output format.
    #[arg(long, value_enum, default_value = "table")]
    pub format: Format,
    /// Also write the HTML section (with charts) to FILE.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// Cost file (as for `report`) to price the GPU-hours the faults cost.
    #[arg(long, value_name = "FILE")]
    pub cost: Option<PathBuf>,
    /// GPUs per node (for GPU-hours lost).
    #[arg(long, default_value_t = 8)]
    pub gpus_per_node: u32,
    /// Print, last, the one-line summary `drill: classes C, injections N, ...`.
    #[arg(long)]
    pub summary_line: bool,
    /// Step 3: the admin's own job script, run under fabric-run on each of --partitions.
    #[arg(long, value_name = "SCRIPT")]
    pub workload: Option<PathBuf>,
    /// Partitions (fabrics) the workload runs on, comma-separated.
    #[arg(long, value_delimiter = ',', requires = "workload")]
    pub partitions: Vec<String>,
    /// Workload runs per fabric, clean and again with a fault injected.
    #[arg(short = 'n', long = "runs", default_value_t = 3, requires = "workload")]
    pub runs: usize,
    /// The workload script's node count (its exact count; default: the script's own).
    #[arg(long = "workload-nodes", requires = "workload")]
    pub workload_nodes: Option<usize>,
    /// The fault of the workload's faulted runs.
    #[arg(long, default_value = "port_down", requires = "workload")]
    pub workload_fault: String,
}

/// `--kind`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum KindArg {
    /// InfiniBand.
    Ib,
    /// RoCE v2.
    Roce,
}

struct Setup {
    cluster: SlurmCluster,
    gates: Gates,
    injector: Box<dyn Injector>,
    journal_path: PathBuf,
    nodes: Vec<DrillNode>,
    cfg: RunConfig,
    testbed: Option<TestbedInfo>,
}

struct TestbedInfo {
    dir: PathBuf,
}

/// `--during-job-s`: a number of seconds a job can be asked to last.
fn parse_during_job_s(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if (1.0..=86_400.0).contains(&v) => Ok(v),
        _ => Err(format!(
            "{s:?} is not a job length in seconds between 1 and 86400 (the issue's realistic length is 60 or more)"
        )),
    }
}

fn testbed_dir() -> PathBuf {
    std::env::var_os("FABRIC_TESTBED_DIR").map_or_else(|| PathBuf::from(".testbed"), PathBuf::from)
}

fn uid_of(user: &str) -> anyhow::Result<u32> {
    let u = nix::unistd::User::from_name(user)
        .with_context(|| format!("cannot look up user {user}"))?
        .with_context(|| format!("no user named {user}: name an existing user with --job-user"))?;
    Ok(u.uid.as_raw())
}

fn submit_prefix(user: &str, uid: u32) -> Vec<String> {
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

fn expand(list: &str) -> anyhow::Result<Vec<String>> {
    let mut out = Vec::new();
    for part in split_top(list) {
        let h = Hostlist::parse(&part)
            .with_context(|| format!("{part:?} is not a Slurm hostlist (n[1-4], gpu01,gpu02)"))?;
        out.extend(
            h.expand()
                .with_context(|| format!("cannot expand {part:?}"))?,
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

fn testbed_roce_nodes() -> Vec<String> {
    std::process::Command::new("sinfo")
        .args(["-h", "-p", "roce", "-N", "-o", "%N"])
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

fn setup(a: &Args) -> anyhow::Result<Setup> {
    let mut cluster = SlurmCluster::new();
    if a.testbed {
        let dir = testbed_dir().canonicalize().context(
            "no testbed folder: run `scripts/testbed up` first, or set FABRIC_TESTBED_DIR",
        )?;
        let script = a.testbed_script.canonicalize().with_context(|| {
            format!(
                "no testbed script at {}: pass --testbed-script",
                a.testbed_script.display()
            )
        })?;
        let user = a.job_user.clone().unwrap_or_else(|| "fabric".into());
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
        let names = match &a.nodes {
            Some(n) => expand(n)?,
            None => {
                let count: usize = std::fs::read_to_string(dir.join("etc/node-count"))
                    .ok()
                    .and_then(|s| s.trim().parse().ok())
                    .unwrap_or(4);
                (1..=count).map(|i| format!("n{i}")).collect()
            }
        };
        let roce = testbed_roce_nodes();
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
        cfg.during_job_s = a.during_job_s;
        cfg.job_uid = Some(uid);
        cfg.bin_dir = Some(dir.join("bin"));
        let mut injector = TestbedInjector::new(dir.clone(), script);
        injector.loads.job_uid = Some(uid);
        let state = a
            .state_dir
            .clone()
            .unwrap_or_else(|| dir.join("state/drill"));
        std::fs::create_dir_all(dir.join("jobs/drill"))?;
        Ok(Setup {
            cluster,
            gates,
            injector: Box::new(injector),
            journal_path: state.join("journal.jsonl"),
            nodes,
            cfg,
            testbed: Some(TestbedInfo { dir }),
        })
    } else {
        let Some(res) = &a.reservation else {
            bail!(
                "name the drill's nodes: --testbed, or --reservation NAME on a real cluster (idle nodes held for the drill)"
            );
        };
        let held = cluster.reservation_nodes(res)?;
        let names = match &a.nodes {
            Some(n) => {
                let names = expand(n)?;
                if let Some(out) = names.iter().find(|n| !held.contains(n)) {
                    bail!(
                        "node {out} is not in reservation {res}: the drill changes only nodes its reservation holds"
                    );
                }
                names
            }
            None => held,
        };
        cluster.reservation = Some(res.clone());
        if let Some(u) = &a.job_user {
            cluster.submit_prefix = submit_prefix(u, uid_of(u)?);
        }
        let prefix: Vec<String> = a
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
        let kind = match a.kind {
            KindArg::Ib => NodeKind::Ib,
            KindArg::Roce => NodeKind::Roce,
        };
        let nodes = names
            .iter()
            .map(|n| DrillNode {
                name: n.clone(),
                kind,
            })
            .collect();
        let Some(work) = a.work_dir.clone() else {
            bail!(
                "--work-dir DIR is needed on a real cluster: a folder the nodes share, for the rounds' job scripts and checkpoints"
            );
        };
        let gates = Gates::cluster(names.clone(), res.clone(), allowed(a)?);
        let mut cfg = RunConfig::new(work, names);
        cfg.during_job_s = a.during_job_s;
        cfg.job_uid = match &a.job_user {
            Some(u) => Some(uid_of(u)?),
            None => None,
        };
        cfg.bin_dir = a.job_path.clone();
        let mut loads = Loads::remote(prefix.clone());
        loads.job_uid = cfg.job_uid;
        let state = a
            .state_dir
            .clone()
            .unwrap_or_else(|| PathBuf::from(DEFAULT_STATE_DIR));
        Ok(Setup {
            cluster,
            gates,
            injector: Box::new(NodeExecInjector {
                prefix,
                interface: a.interface.clone(),
                priority: a.priority,
                congestion_rate: "1gbit".into(),
                loads,
            }),
            journal_path: state.join("journal.jsonl"),
            nodes,
            cfg,
            testbed: None,
        })
    }
}

/// The classes `--allow-hardware` names.
fn allowed(a: &Args) -> anyhow::Result<Vec<FaultClass>> {
    a.allow_hardware
        .iter()
        .map(|c| FaultClass::parse(c).map_err(Into::into))
        .collect()
}

/// The classes to run: `--classes`, else every class that can run here; refuses, on a real
/// cluster, a testbed-only class and a hardware class without `--allow-hardware` (the gates'
/// rule, [`Place::class`]).
fn classes(a: &Args) -> anyhow::Result<Vec<FaultClass>> {
    let place = if a.testbed {
        Place::Testbed
    } else {
        Place::Cluster {
            allowed: allowed(a)?,
        }
    };
    if a.classes.is_empty() {
        return Ok(class::ALL
            .iter()
            .copied()
            .filter(|c| place.class(*c).is_ok())
            .collect());
    }
    let wanted: Vec<FaultClass> = a
        .classes
        .iter()
        .map(|c| FaultClass::parse(c))
        .collect::<Result<_, _>>()?;
    for c in &wanted {
        place.class(*c)?;
    }
    Ok(wanted)
}

/// `fabric-check drill`.
pub fn run(a: Args) -> anyhow::Result<i32> {
    if a.restore && !a.testbed && a.reservation.is_none() {
        return restore_without_reservation(&a);
    }
    let mut s = setup(&a)?;
    // A drill that was stopped leaves its journal: undo what it changed first.
    let mut journal = Journal::open(&s.journal_path)?;
    if undo_stopped_drill(&a, &mut s, &mut journal)? {
        return Ok(0);
    }
    if let Some(w) = &a.workload {
        return run_workload(&a, &mut s, w, &mut journal);
    }
    let classes = classes(&a)?;
    let seed = a.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_secs())
    });
    let plan = Plan::draw(&PlanSpec {
        nodes: s.nodes.clone(),
        classes,
        per_class: a.per_class,
        controls: a.controls,
        seed,
    })?;
    if a.dry_run {
        print!("{}", plan.describe());
        return Ok(0);
    }
    let names: Vec<String> = s.nodes.iter().map(|n| n.name.clone()).collect();
    s.gates.start(&mut s.cluster)?;
    eprintln!(
        "fabric-check drill: seed {seed}, {} rounds on {}",
        plan.rounds.len(),
        names.join(",")
    );
    // On the testbed the nodes of the `roce` partition get RoCE trees for the drill.
    let mut setup_ids = Vec::new();
    if let Some(tb) = &s.testbed {
        let mut inj = TestbedInjector::new(tb.dir.clone(), PathBuf::new());
        for n in s.nodes.iter().filter(|n| n.kind == NodeKind::Roce) {
            setup_ids.push(inj.write_tree(&n.name, "setup", "roce8-healthy", &mut journal)?);
        }
    }
    let prices = prices(&a)?;
    let outcomes = {
        let mut drill = Drill {
            cluster: &mut s.cluster,
            injector: s.injector.as_mut(),
            journal: &mut journal,
            gates: &mut s.gates,
            cfg: s.cfg.clone(),
        };
        drill.run(&plan, |o| {
            eprintln!("{}", round_line(o));
        })
    };
    if !setup_ids.is_empty() {
        fabric_drill::inject::restore(s.injector.as_mut(), &mut journal, &setup_ids)?;
    }
    journal.compact()?;
    let scores = score::score(seed, &outcomes, &prices);
    match a.format {
        Format::Table => print!("{}", render::table(&scores)),
        Format::Json => print!("{}", render::json(&scores)),
        Format::Prometheus => print!("{}", render::prometheus(&scores)),
    }
    if let Some(h) = &a.html {
        std::fs::write(h, render::html(&scores))
            .with_context(|| format!("cannot write {}", h.display()))?;
    }
    if a.summary_line {
        println!("{}", score::summary_line(&scores));
    }
    Ok(report_gates(&s.gates))
}

/// Says, last, which of the drill's nodes it left out of service (not its doing) and why the
/// gates stopped it; the exit status: 1 when they stopped it, else 0.
fn report_gates(gates: &Gates) -> i32 {
    for (node, why) in gates.kept_out() {
        eprintln!(
            "fabric-check drill: {node} is out of service ({why}) and the drill did not take it out: it stays so; check it, then `fabric-check resume {node}`"
        );
    }
    match gates.stopped() {
        Some(e) => {
            eprintln!("fabric-check drill: stopped: {e}. Everything it changed is restored.");
            1
        }
        None => 0,
    }
}

/// `--restore` outside a drill: replays the journal. Its undos are complete in themselves, so
/// no reservation is needed.
fn restore_without_reservation(a: &Args) -> anyhow::Result<i32> {
    let path = a
        .state_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(DEFAULT_STATE_DIR))
        .join("journal.jsonl");
    let mut journal = Journal::open(&path)?;
    let mut inj = NodeExecInjector {
        prefix: Vec::new(),
        interface: a.interface.clone(),
        priority: a.priority,
        congestion_rate: String::new(),
        loads: Loads::default(),
    };
    let n = replay(&mut inj, &mut journal)?;
    journal.compact()?;
    println!("restored {n} change(s) from {}", path.display());
    Ok(0)
}

/// Undoes what a stopped drill left in its journal. With `--restore` that is all: it names the
/// drill's nodes left out of service and says so (`true`).
fn undo_stopped_drill(a: &Args, s: &mut Setup, journal: &mut Journal) -> anyhow::Result<bool> {
    let pending = journal.pending()?;
    if !pending.is_empty() || a.restore {
        for p in &pending {
            eprintln!(
                "fabric-check drill: undoing {} on {} (journal entry {})",
                p.what, p.node, p.id
            );
        }
        let n = replay(s.injector.as_mut(), journal)?;
        journal.compact()?;
        if a.restore {
            println!("restored {n} change(s) from {}", journal.path().display());
            // What the stopped drill's faults drained stays drained: name it, resume nothing.
            let names: Vec<String> = s.nodes.iter().map(|n| n.name.clone()).collect();
            if let Ok(views) = s.cluster.nodes() {
                for v in views
                    .iter()
                    .filter(|v| names.contains(&v.name) && v.out_of_service())
                {
                    println!(
                        "{} is {} ({}): if the drill did it, `fabric-check resume {}`",
                        v.name, v.state, v.reason, v.name
                    );
                }
            }
            return Ok(true);
        }
    }
    Ok(false)
}

/// The line each round ends with: what was injected where, and what caught it.
fn round_line(o: &RoundOutcome) -> String {
    let r = score::score_round(o);
    format!(
        "round {:>3} {:<17} {:<4} {:<6} {}{}",
        o.round.index,
        o.round.class.id(),
        o.round.node,
        o.round.moment.id(),
        match (&r.hit, r.ttd_s) {
            (Some(h), Some(t)) =>
                format!("caught by {} ({}) in {t:.1} s", h.detector.id(), h.check),
            _ if o.round.class.is_control() => "control".into(),
            _ => "MISSED".into(),
        },
        if r.false_nodes.is_empty() {
            String::new()
        } else {
            let what: Vec<String> = o
                .signals
                .iter()
                .filter(|s| r.false_nodes.contains_key(&s.node))
                .map(|s| {
                    format!(
                        "{} {} {} ({:?})",
                        s.node,
                        s.detector.id(),
                        s.check,
                        s.strength
                    )
                })
                .collect();
            format!("; false positives: {}", what.join(", "))
        } + &o
            .error
            .as_ref()
            .map(|e| format!("; error: {e}"))
            .unwrap_or_default()
    )
}

fn prices(a: &Args) -> anyhow::Result<Prices> {
    let mut p = Prices {
        gpus_per_node: a.gpus_per_node,
        per_gpu_h: None,
    };
    if let Some(path) = &a.cost {
        let file = fabric_report::cost::CostFile::load(path)?;
        if let Some((_, entry)) = file.fabric.iter().next() {
            let b = fabric_report::cost::compute(
                &file.currency,
                entry,
                fabric_report::cost::gpu_s_to_h(3600),
                &fabric_report::cost::UsageFigures::default(),
            );
            let per: f64 = b.capacity_cost_per_gpu_h.to_string().parse().unwrap_or(0.0);
            p.per_gpu_h = Some((per, file.currency.clone()));
        }
    }
    Ok(p)
}

fn run_workload(
    a: &Args,
    s: &mut Setup,
    script: &std::path::Path,
    journal: &mut Journal,
) -> anyhow::Result<i32> {
    if a.partitions.is_empty() {
        bail!("--workload needs --partitions a,b: the fabrics to run it on");
    }
    let fault = FaultClass::parse(&a.workload_fault)?;
    let spec = workload::WorkloadSpec {
        script: script
            .canonicalize()
            .with_context(|| format!("no job script at {}", script.display()))?,
        partitions: a.partitions.clone(),
        runs: a.runs,
        nodes: a.workload_nodes,
        fault,
        work_dir: s.cfg.work_dir.join("workload"),
        job_uid: s.cfg.job_uid,
        bin_dir: s.cfg.bin_dir.clone(),
        drill_nodes: s.nodes.clone(),
    };
    if a.dry_run {
        print!("{}", workload::describe(&spec, &mut s.cluster, &s.gates)?);
        return Ok(0);
    }
    let cost = match &a.cost {
        Some(p) => Some(fabric_report::cost::CostFile::load(p)?),
        None => None,
    };
    let result = workload::run(
        &spec,
        &mut s.cluster,
        s.injector.as_mut(),
        journal,
        &mut s.gates,
        a.gpus_per_node,
        cost.as_ref(),
    )?;
    journal.compact()?;
    match a.format {
        Format::Json => println!("{}", serde_json::to_string_pretty(&result)?),
        _ => print!("{}", workload::table(&result)),
    }
    Ok(report_gates(&s.gates))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct T {
        #[command(flatten)]
        a: Args,
    }

    fn args(words: &[&str]) -> Args {
        let mut v = vec!["drill"];
        v.extend_from_slice(words);
        T::parse_from(v).a
    }

    #[test]
    fn on_a_real_cluster_only_classes_without_hardware_run_unless_allowed_by_name() {
        let a = args(&["--reservation", "drill"]);
        let c: Vec<&str> = classes(&a).unwrap().iter().map(|c| c.id()).collect();
        assert_eq!(c, vec!["checkpoint_burst", "background_load", "clean"]);
        let a = args(&["--reservation", "drill", "--allow-hardware", "mtu_drift"]);
        let c: Vec<&str> = classes(&a).unwrap().iter().map(|c| c.id()).collect();
        assert!(c.contains(&"mtu_drift") && !c.contains(&"ecn_off"), "{c:?}");
    }

    #[test]
    fn a_hardware_class_named_without_its_allow_flag_is_refused_with_the_flag_to_add() {
        let a = args(&["--reservation", "drill", "--classes", "ecn_off,clean"]);
        let e = classes(&a).unwrap_err().to_string();
        assert!(e.contains("--allow-hardware ecn_off"), "{e}");
        let a = args(&["--reservation", "drill", "--classes", "link_flap"]);
        let e = classes(&a).unwrap_err().to_string();
        assert!(e.contains("only on the testbed"), "{e}");
        let a = args(&["--testbed", "--classes", "nope"]);
        assert!(
            classes(&a)
                .unwrap_err()
                .to_string()
                .contains("unknown drill class")
        );
    }

    #[test]
    fn the_testbed_runs_every_class_by_default() {
        let a = args(&["--testbed"]);
        assert_eq!(classes(&a).unwrap().len(), class::ALL.len());
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
}
