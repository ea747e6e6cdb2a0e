//! `fabric-check drill`: inject fabric faults on a set of nodes, watch what fabric-check says and
//! does, restore, and score recall, precision, false drains, time to detect and the jobs' cost
//! (the `fabric-drill` crate; docs/drill.md). With `--workload`, the admin's own job script per
//! fabric, clean and faulted, side by side. The drill itself is [`fabric_drill::session`]: this
//! maps the arguments to its spec and prints.

use std::path::PathBuf;

use anyhow::{Context, bail};
use fabric_drill::class::{FaultClass, NodeKind};
use fabric_drill::gate::Gates;
use fabric_drill::grade::Thresholds;
use fabric_drill::score::{self, Prices, RoundOutcome};
use fabric_drill::session::{
    self, Event, ReservationSpec, Session, SessionError, SessionSpec, SizeArg, Source, TestbedSpec,
};
use fabric_drill::{render, stragglers, workload};

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
    /// Rounds per fault class (with --graded or --size: per size of a graded class).
    #[arg(long, alias = "rounds", default_value_t = 5)]
    pub per_class: usize,
    /// Graded faults: run every graded class (congestion, error_counters, pause_storm,
    /// cnp_storm, link_flap; or those of --classes) at each of its sizes (its defaults, or --size), and
    /// report recall by size, the sizes below a threshold counted as controls that must stay
    /// quiet.
    #[arg(long)]
    pub graded: bool,
    /// Sizes of a graded class, `[CLASS=]SIZE[,SIZE...]` (repeatable): the bandwidth left on
    /// the node's path in percent of its peers' (`congestion=75%,50%`), a multiple of the
    /// counters' threshold (`error_counters=0.5x,2x`, `cnp_storm=2x`), a flap count (`link_flap=1,2`). Without
    /// CLASS: every class the drill runs whose sizes are of that kind.
    #[arg(long, value_name = "[CLASS=]SIZES", value_parser = parse_size)]
    pub size: Vec<SizeArg>,
    /// How long a `during` round's job runs, seconds; its fault goes in at a point of it drawn
    /// from the seed (15-75 %), so the in-job watch, not the job's end, must find it.
    #[arg(long, default_value_t = 60.0, value_parser = parse_during_job_s)]
    pub during_job_s: f64,
    /// Dates each `during` round's job back S seconds for the in-job watch, so that the round's
    /// fault is met late in a long job: the job is submitted held, a root-owned file naming it
    /// (`drill-job-age.json`, expiring in ten minutes) goes into each of its nodes' state
    /// folder, and the job is released; the watch reads the file as it opens and takes the job's
    /// start as S seconds earlier; the round's end removes the files. Whole seconds, 1 to
    /// 604800 (a day: 86400). Testbed only.
    #[arg(long, value_name = "S", value_parser = parse_job_age_s,
          conflicts_with_all = ["reservation", "workload", "restore"])]
    pub job_age_s: Option<u64>,
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
    /// The straggler drill (testbed only): one node's steps slowed (`step_sleep`,
    /// `cpu_capped`, `path_shaped`) at each size of --slowdowns, --per-class rounds each, the
    /// controls (`all_slow`, `rotating`, `checkpoint_burst`) --straggler-controls times each
    /// and --controls clean rounds; scores recall, time to name, and what the controls and clean
    /// jobs were wrongly told. --classes picks among those.
    #[arg(long, conflicts_with_all = ["graded", "size", "workload", "reservation"])]
    pub stragglers: bool,
    /// With --stragglers: the slowdowns, times the usual step (`1.1,1.25,1.5,2`).
    #[arg(long, value_delimiter = ',', value_parser = parse_slowdown, requires = "stragglers")]
    pub slowdowns: Vec<u32>,
    /// With --stragglers: rounds of each control.
    #[arg(long, default_value_t = 2)]
    pub straggler_controls: usize,
    /// Run the faulted runs once more with K spare nodes (`--fabric-check-spares=K`; the
    /// cluster's plugstack must allow it with `spares_max=`), side by side with those without.
    #[arg(long, value_name = "K", default_value_t = 0, requires = "workload", value_parser = clap::value_parser!(u32).range(0..=64))]
    pub spares: u32,
}

/// `--kind`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum KindArg {
    /// InfiniBand.
    Ib,
    /// RoCE v2.
    Roce,
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

/// `--job-age-s`: whole seconds, 1 to a week.
fn parse_job_age_s(s: &str) -> Result<u64, String> {
    fabric_proto::drill_age::parse_age_s(s)
}

/// `--slowdowns`: a multiple of the usual step, more than 1.
fn parse_slowdown(s: &str) -> Result<u32, String> {
    fabric_drill::stragglers::plan::parse_factor(s)
}

/// `--size`: `[CLASS=]SIZE[,SIZE...]`.
fn parse_size(s: &str) -> Result<SizeArg, String> {
    SizeArg::parse(s).map_err(|e| e.to_string())
}

/// The allowance of every default threshold (what a graded counter fault is a multiple of):
/// the smallest of its bounds, a per-hour bound counted as one hour (the checks never scale it
/// below an hour, and a drill's intervals are shorter).
pub fn thresholds() -> Thresholds {
    let allowance = |t: &fabric_core::config::Threshold| {
        [
            t.warn_delta,
            t.fail_delta,
            t.warn_per_hour.map(|r| r.floor() as u64),
            t.fail_per_hour.map(|r| r.floor() as u64),
        ]
        .into_iter()
        .flatten()
        .min()
    };
    Thresholds(
        fabric_core::config::default_thresholds()
            .iter()
            .filter_map(|(k, t)| allowance(t).map(|a| (k.clone(), a)))
            .collect(),
    )
}

/// The session's spec from the arguments.
fn spec(a: &Args) -> Result<SessionSpec, SessionError> {
    let source = if a.testbed {
        Source::Testbed(TestbedSpec {
            dir: session::testbed_dir(),
            script: a.testbed_script.clone(),
            nodes: a.nodes.clone(),
        })
    } else if let Some(res) = &a.reservation {
        Source::Reservation(ReservationSpec {
            name: res.clone(),
            nodes: a.nodes.clone(),
            kind: match a.kind {
                KindArg::Ib => NodeKind::Ib,
                KindArg::Roce => NodeKind::Roce,
            },
            node_exec: a.node_exec.clone(),
            interface: a.interface.clone(),
            priority: a.priority,
            allow_hardware: a.allow_hardware.clone(),
            work_dir: a.work_dir.clone(),
            job_path: a.job_path.clone(),
        })
    } else {
        return Err(SessionError::NoNodes);
    };
    Ok(SessionSpec {
        source,
        job_user: a.job_user.clone(),
        classes: a.classes.clone(),
        per_class: a.per_class,
        controls: a.controls,
        seed: a.seed,
        during_job_s: a.during_job_s,
        state_dir: a.state_dir.clone(),
        graded: a.graded,
        sizes: a.size.clone(),
        thresholds: thresholds(),
        job_age_s: a.job_age_s,
    })
}

/// Says what the session does as it goes, on stderr.
fn tell(e: Event<'_>) {
    match e {
        Event::Undoing(p) => eprintln!(
            "fabric-check drill: undoing {} on {} (journal entry {})",
            p.what, p.node, p.id
        ),
        Event::Started {
            seed,
            rounds,
            nodes,
        } => eprintln!(
            "fabric-check drill: seed {seed}, {rounds} rounds on {}",
            nodes.join(",")
        ),
        Event::Round(o) => eprintln!("{}", round_line(o)),
        Event::StragglerRound(o) => eprintln!("{}", stragglers::score::round_line(o)),
        Event::Note(n) => eprintln!("fabric-check drill: {n}"),
    }
}

/// `fabric-check drill`.
pub fn run(a: Args) -> anyhow::Result<i32> {
    if a.restore && !a.testbed && a.reservation.is_none() {
        // Its undos are complete in themselves, so no reservation is needed.
        let (n, path) = session::restore_journal(a.state_dir.as_deref(), &a.interface, a.priority)?;
        println!("restored {n} change(s) from {}", path.display());
        return Ok(0);
    }
    let mut s = Session::open(&spec(&a)?)?;
    // SIGINT, SIGTERM and SIGHUP stop the rounds; the drill restores, then exits (SIGKILL
    // leaves the journal for --restore).
    match fabric_drill::halt::Halt::on_signals() {
        Ok(halt) => s.gates.stop_on(halt),
        Err(e) => eprintln!(
            "fabric-check drill: cannot catch SIGINT/SIGTERM/SIGHUP ({e}): a signal ends it without restoring; `fabric-check drill --restore` then does"
        ),
    }
    // A drill that was stopped leaves its journal: undo what it changed first.
    if s.has_pending()? || a.restore {
        let n = s.undo_pending(&mut tell)?;
        if a.restore {
            say_restored(&mut s, n);
            return Ok(0);
        }
    }
    if let Some(w) = &a.workload {
        return run_workload(&a, &mut s, w);
    }
    if a.stragglers {
        return run_stragglers(&a, &mut s);
    }
    let seed = s.seed();
    let plan = s.plan(seed)?;
    if a.dry_run {
        print!("{}", plan.describe());
        return Ok(0);
    }
    let prices = prices(&a)?;
    if let Some(age) = a.job_age_s {
        eprintln!(
            "fabric-check drill: each `during` round's job is dated back {age} s for its watch"
        );
    }
    let scores = s.drill(&plan, &prices, &mut tell)?;
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
        // A graded drill: a line per class, and last the benchmark's `drill-graded:` line.
        for l in render::graded_lines(&scores) {
            println!("{l}");
        }
    }
    Ok(report_gates(&s.gates))
}

/// `--restore`: how many changes were undone, and the drill's nodes left out of service. What
/// the stopped drill's faults drained stays drained: it names them and resumes nothing.
fn say_restored(s: &mut Session, n: usize) {
    println!("restored {n} change(s) from {}", s.journal.path().display());
    let names = s.node_names();
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
}

/// Says, last, which of the drill's nodes it left out of service (not its doing) and why the
/// gates stopped it; the exit status: 1 when they stopped it, else 0.
fn report_gates(gates: &Gates) -> i32 {
    for node in gates.resumed() {
        eprintln!("fabric-check drill: {node} was drained by the drill's own fault and is resumed");
    }
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

/// The line each round ends with: what was injected where, and what caught it.
fn round_line(o: &RoundOutcome) -> String {
    let r = score::score_round(o);
    format!(
        "round {:>3} {:<17} {:<4} {:<6} {}{}{}",
        o.round.index,
        o.round.class.id(),
        o.round.node,
        o.round.moment.id(),
        o.round
            .size
            .map(|z| format!(
                "size {z}{} ",
                o.measured_pct
                    .map(|m| format!(" (measured {m:.0}%)"))
                    .unwrap_or_default()
            ))
            .unwrap_or_default(),
        match (&r.hit, r.ttd_s) {
            (Some(h), Some(t)) =>
                format!("caught by {} ({}) in {t:.1} s", h.detector.id(), h.check),
            _ if o.round.is_control() => "control".into(),
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

/// `--stragglers`: the plan, the rounds, the table and, with `--summary-line`, the
/// `drill-stragglers:` line last.
fn run_stragglers(a: &Args, s: &mut Session) -> anyhow::Result<i32> {
    let kinds = a
        .classes
        .iter()
        .map(|c| stragglers::plan::Kind::parse(c))
        .collect::<Result<Vec<_>, _>>()
        .map_err(anyhow::Error::msg)?;
    let spec = session::StragglerSpec {
        kinds,
        sizes: a.slowdowns.clone(),
        per_size: a.per_class,
        per_control: a.straggler_controls,
        clean: a.controls,
    };
    let seed = s.seed();
    let plan = s.straggler_plan(&spec, seed)?;
    if a.dry_run {
        print!("{}", plan.describe());
        return Ok(0);
    }
    let scores = s.stragglers(&plan, &mut tell)?;
    match a.format {
        Format::Json => println!("{}", serde_json::to_string_pretty(&scores)?),
        _ => print!("{}", stragglers::score::table(&scores)),
    }
    if a.summary_line {
        println!("{}", stragglers::score::summary_line(&scores));
    }
    Ok(report_gates(&s.gates))
}

/// Arguments of `fabric-check drill-trainer` (hidden): the synthetic trainer a straggler
/// round runs on every node, as the job user, under `fabric-run`.
#[derive(Debug, clap::Args)]
pub struct TrainerArgs {
    /// The round's folder (its control files).
    #[arg(long)]
    pub control: PathBuf,
    /// The job's own folder (the trainer's status and checkpoints).
    #[arg(long)]
    pub out: PathBuf,
    /// This node (default: $SLURMD_NODENAME).
    #[arg(long)]
    pub node: Option<String>,
    /// A step's usual length, milliseconds.
    #[arg(long, default_value_t = 500)]
    pub step_ms: u64,
    /// CPU time each step burns, milliseconds.
    #[arg(long, default_value_t = 50)]
    pub busy_ms: u64,
    /// Bytes each step sends over the node's path (through the drill's relay).
    #[arg(long, default_value_t = 0)]
    pub transfer_bytes: usize,
    /// Bytes a checkpoint writes.
    #[arg(long, default_value_t = 1 << 20)]
    pub ckpt_bytes: usize,
    /// How long a checkpoint pauses, milliseconds.
    #[arg(long, default_value_t = 3000)]
    pub ckpt_ms: u64,
    /// The longest the trainer runs, seconds.
    #[arg(long, default_value_t = 240)]
    pub max_s: u64,
}

/// `fabric-check drill-trainer`.
pub fn trainer(a: TrainerArgs) -> anyhow::Result<i32> {
    let node = match a.node.or_else(|| std::env::var("SLURMD_NODENAME").ok()) {
        Some(n) => n,
        None => bail!("--node NODE is needed outside a Slurm task (no SLURMD_NODENAME)"),
    };
    if node.is_empty() || node.contains('/') {
        bail!("{node:?} is not a node name");
    }
    let spec = stragglers::trainer::TrainerSpec {
        control: a.control,
        out: a.out,
        node,
        step_ms: a.step_ms,
        busy_ms: a.busy_ms.min(a.step_ms),
        transfer_bytes: a.transfer_bytes.min(64 << 20),
        ckpt_bytes: a.ckpt_bytes.min(1 << 30),
        ckpt_ms: a.ckpt_ms,
        max_s: a.max_s,
    };
    let stdout = std::io::stdout();
    stragglers::trainer::run(&spec, &mut stdout.lock())?;
    Ok(0)
}

fn run_workload(a: &Args, s: &mut Session, script: &std::path::Path) -> anyhow::Result<i32> {
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
        spares: a.spares,
    };
    if a.dry_run {
        print!(
            "{}",
            workload::describe(&spec, s.cluster.as_mut(), &s.gates)?
        );
        return Ok(0);
    }
    let cost = match &a.cost {
        Some(p) => Some(fabric_report::cost::CostFile::load(p)?),
        None => None,
    };
    let result = workload::run(
        &spec,
        s.cluster.as_mut(),
        s.injector.as_mut(),
        &mut s.journal,
        &mut s.gates,
        a.gpus_per_node,
        cost.as_ref(),
    )?;
    s.journal.compact()?;
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
    use fabric_drill::class;
    use fabric_drill::gate::Place;

    /// The classes the arguments choose, where they say the drill runs.
    fn classes(a: &Args) -> Result<Vec<FaultClass>, SessionError> {
        let place = if a.testbed {
            Place::Testbed
        } else {
            Place::Cluster {
                allowed: session::parse_classes(&a.allow_hardware)?,
            }
        };
        session::choose_classes(&place, &a.classes)
    }

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
    fn the_graded_multiples_are_of_the_default_thresholds_a_per_hour_bound_counted_as_an_hour() {
        let t = thresholds();
        assert_eq!(t.allowance("symbol_error"), Ok(120));
        assert_eq!(t.allowance("link_downed"), Ok(0));
        assert_eq!(t.allowance("rx_prio_pause"), Ok(1_000_000));
        assert_eq!(t.allowance("rx_prio_pause_duration"), Ok(60_000_000));
    }

    #[test]
    fn a_bad_size_is_refused_naming_the_value_and_the_forms() {
        let e = T::try_parse_from(["drill", "--testbed", "--size", "congestion=half"])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("\"half\"") && e.contains("50%") && e.contains("0.5x"),
            "{e}"
        );
        let a = args(&["--testbed", "--graded", "--size", "link_flap=1,2"]);
        assert!(a.graded);
        assert_eq!(a.size[0].class.as_deref(), Some("link_flap"));
    }

    #[test]
    fn a_job_age_is_whole_seconds_up_to_a_week_on_the_testbed_and_a_bad_one_says_the_range() {
        let a = args(&["--testbed", "--job-age-s", "86400"]);
        assert_eq!(a.job_age_s, Some(86_400));
        assert_eq!(spec(&a).unwrap().job_age_s, Some(86_400));
        for bad in ["0", "1.5", "a-day", "604801"] {
            let e = T::try_parse_from(["drill", "--testbed", "--job-age-s", bad])
                .unwrap_err()
                .to_string();
            assert!(
                e.contains(&format!(
                    "{bad:?} is not a job age in whole seconds between 1 and 604800"
                )),
                "{e}"
            );
        }
        let e = T::try_parse_from(["drill", "--reservation", "drill", "--job-age-s", "60"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("--reservation"), "{e}");
    }

    #[test]
    fn the_straggler_drill_takes_its_slowdowns_as_multiples_and_refuses_graded_sizes_beside_it() {
        let a = args(&["--testbed", "--stragglers", "--slowdowns", "1.25,2x"]);
        assert!(a.stragglers);
        assert_eq!(a.slowdowns, vec![1250, 2000]);
        let e = T::try_parse_from(["drill", "--testbed", "--stragglers", "--slowdowns", "1"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a slowdown"), "{e}");
        assert!(T::try_parse_from(["drill", "--testbed", "--stragglers", "--graded"]).is_err());
        assert!(T::try_parse_from(["drill", "--testbed", "--slowdowns", "2"]).is_err());
    }

    #[test]
    fn the_testbed_runs_every_class_by_default() {
        let a = args(&["--testbed"]);
        assert_eq!(classes(&a).unwrap().len(), class::ALL.len());
    }
}
