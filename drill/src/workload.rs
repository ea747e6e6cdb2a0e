//! Step 3 of the acceptance guide: the admin's own job script, under `fabric-run`, at its exact
//! node count on each named fabric (partition), K times clean and K times with a fault injected
//! on one of the fabric's nodes just before the job; then, per fabric side by side: step time
//! p50/p95, checkpoint time, retries, recovery time after the injected failure, accepted runs,
//! and cost per accepted run (the report's cost model, `fabric_report::cost`).
//!
//! The script is what each rank runs (`python train.py ...`): the drill submits
//! `srun fabric-run --checkpoint-dir DIR --step-regex '^step ([0-9]+)' -- sh SCRIPT` with
//! `--fabric-check` on `--nodes N`. A faulted run's fault is put back, and its node resumed, as
//! soon as fabric-check took the node out (or the job ended), so the requeued job can finish;
//! its recovery time runs from the injection to the start of the attempt that ran.
//!
//! The workload passes through the same [`Gates`] as the round loop: its fault class must be
//! allowed here, its jobs and its fault use only the drill's nodes (`--nodes`, the reservation)
//! of each partition, the start check and the check before every injection apply, and a node
//! taken out by anything but fabric-check is left as it is and stops the workload.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use fabric_proto::job_state::JobState;
use serde::{Deserialize, Serialize};

use crate::class::{FaultClass, Moment};
use crate::cluster::Cluster;
use crate::folder;
use crate::gate::{self, GateError, Gates};
use crate::inject::{Injector, restore};
use crate::journal::Journal;
use crate::plan::{DrillNode, JobSpec, Round};

/// What to run.
#[derive(Debug, Clone)]
pub struct WorkloadSpec {
    /// The admin's script (each rank's command).
    pub script: PathBuf,
    /// The fabrics (partitions).
    pub partitions: Vec<String>,
    /// Runs per fabric, clean and again faulted.
    pub runs: usize,
    /// Node count (default: the script's `#SBATCH -N`/`--nodes`, else 1).
    pub nodes: Option<usize>,
    /// The fault of the faulted runs.
    pub fault: FaultClass,
    /// Where the runs' folders go.
    pub work_dir: PathBuf,
    /// The jobs' uid.
    pub job_uid: Option<u32>,
    /// Folder first on the jobs' PATH.
    pub bin_dir: Option<PathBuf>,
    /// The drill's nodes and their kinds (the fault goes to one of a partition's).
    pub drill_nodes: Vec<DrillNode>,
    /// `--spares K`: the faulted runs once more, each job asking for K spare nodes
    /// (`--fabric-check-spares=K`), side by side with those without; 0 for none.
    pub spares: u32,
}

/// One run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkloadRun {
    /// The partition.
    pub partition: String,
    /// With a fault injected.
    pub faulted: bool,
    /// The job id.
    pub job: u32,
    /// Final state.
    pub state: String,
    /// Elapsed seconds (last attempt).
    pub elapsed_s: f64,
    /// Nodes.
    pub nnodes: u32,
    /// `fabric-run`'s median step time.
    pub step_p50_s: Option<f64>,
    /// Checkpoint seconds.
    pub ckpt_total_s: Option<f64>,
    /// `fabric-run` retries.
    pub retries: u64,
    /// Slurm requeues.
    pub requeues: u32,
    /// Accepted (fabric-run's verdict: finished, correct, on time).
    pub accepted: bool,
    /// Injection to the start of the attempt that ran, seconds.
    pub recovery_s: Option<f64>,
    /// Whether fabric-check took the faulted node out.
    pub drained: bool,
    /// Spare nodes the job asked for (0: none).
    #[serde(default)]
    pub spares: u32,
    /// Submission to the start of the attempt that ran, seconds (a requeue waits in it).
    #[serde(default)]
    pub queued_s: Option<f64>,
}

/// One fabric's figures.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FabricFigures {
    /// The partition.
    pub partition: String,
    /// Spare nodes its jobs asked for (a column of its own; 0: none).
    #[serde(default)]
    pub spares: u32,
    /// Clean runs.
    pub clean_runs: usize,
    /// Faulted runs.
    pub faulted_runs: usize,
    /// Median of the runs' median step times, clean runs.
    pub step_p50_s: Option<f64>,
    /// 95th percentile of the runs' median step times, clean runs.
    pub step_p95_s: Option<f64>,
    /// The same over the faulted runs.
    pub faulted_step_p50_s: Option<f64>,
    /// Median checkpoint seconds per run.
    pub ckpt_p50_s: Option<f64>,
    /// Retries over all runs.
    pub retries: u64,
    /// Requeues over all runs.
    pub requeues: u32,
    /// Median recovery after the injected failure, seconds.
    pub recovery_p50_s: Option<f64>,
    /// Median time from submission to the start of the attempt that ran, clean runs (the
    /// faulted ones where the column has no clean run: a spares column).
    #[serde(default)]
    pub queued_p50_s: Option<f64>,
    /// The same over the faulted runs.
    #[serde(default)]
    pub faulted_queued_p50_s: Option<f64>,
    /// Faulted runs whose node fabric-check took out.
    pub faults_caught: usize,
    /// Accepted runs.
    pub accepted: usize,
    /// Cost per accepted run over the runs' window, when a cost file has the fabric.
    pub cost_per_accepted_run: Option<String>,
    /// The same over the faulted runs alone: comparable between a fabric's column and its
    /// spares column, which has no clean runs.
    #[serde(default)]
    pub faulted_cost_per_accepted_run: Option<String>,
}

/// The whole step-3 result.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkloadResult {
    /// Schema id.
    pub schema: String,
    /// The fault of the faulted runs.
    pub fault: String,
    /// Per fabric.
    pub fabrics: Vec<FabricFigures>,
    /// Every run.
    pub runs: Vec<WorkloadRun>,
    /// Why the gates stopped the workload before its last run (its runs so far are above).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped: Option<String>,
}

/// A workload that could not run.
#[derive(Debug, thiserror::Error)]
#[error("workload: {0}")]
pub struct WorkloadError(pub String);

/// The script's node count from `#SBATCH -N n` / `--nodes=n`.
pub fn script_nodes(text: &str) -> Option<usize> {
    for l in text.lines() {
        let Some(rest) = l.trim().strip_prefix("#SBATCH") else {
            continue;
        };
        let words: Vec<&str> = rest.split_whitespace().collect();
        for (i, w) in words.iter().enumerate() {
            let v = if let Some(v) = w.strip_prefix("--nodes=") {
                Some(v)
            } else if *w == "-N" || *w == "--nodes" {
                words.get(i + 1).copied()
            } else {
                w.strip_prefix("-N").filter(|v| !v.is_empty())
            };
            if let Some(n) = v.and_then(|v| v.split('-').next()?.parse().ok()) {
                return Some(n);
            }
        }
    }
    None
}

/// The batch script of one run.
pub fn wrapper(spec: &WorkloadSpec, dir: &Path) -> String {
    let mut s = String::from("#!/bin/sh\n# fabric-check drill --workload\n");
    if let Some(b) = &spec.bin_dir {
        let _ = writeln!(s, "export PATH='{}':$PATH", b.display());
    }
    let _ = writeln!(s, "cd '{}' || exit 1", dir.display());
    let _ = writeln!(
        s,
        "srun fabric-run --checkpoint-dir '{}' --checkpoint-quiet 300ms --step-regex '^step ([0-9]+)' -- sh '{}'",
        dir.display(),
        spec.script.display()
    );
    s
}

fn figures(partition: &str, spares: u32, runs: &[WorkloadRun]) -> FabricFigures {
    let mine: Vec<&WorkloadRun> = runs
        .iter()
        .filter(|r| r.partition == partition && r.spares == spares)
        .collect();
    let queued = |faulted: bool| {
        let q: Vec<f64> = mine
            .iter()
            .filter(|r| r.faulted == faulted)
            .filter_map(|r| r.queued_s)
            .collect();
        fabric_base::stats::median(&q)
    };
    let clean: Vec<f64> = mine
        .iter()
        .filter(|r| !r.faulted)
        .filter_map(|r| r.step_p50_s)
        .collect();
    let faulted: Vec<f64> = mine
        .iter()
        .filter(|r| r.faulted)
        .filter_map(|r| r.step_p50_s)
        .collect();
    let ckpt: Vec<f64> = mine.iter().filter_map(|r| r.ckpt_total_s).collect();
    let rec: Vec<f64> = mine.iter().filter_map(|r| r.recovery_s).collect();
    use fabric_base::stats::{median, percentile};
    FabricFigures {
        partition: partition.to_owned(),
        spares,
        queued_p50_s: queued(false),
        faulted_queued_p50_s: queued(true),
        clean_runs: mine.iter().filter(|r| !r.faulted).count(),
        faulted_runs: mine.iter().filter(|r| r.faulted).count(),
        step_p50_s: median(&clean),
        step_p95_s: percentile(&clean, 95.0),
        faulted_step_p50_s: median(&faulted),
        ckpt_p50_s: median(&ckpt),
        retries: mine.iter().map(|r| r.retries).sum(),
        requeues: mine.iter().map(|r| r.requeues).sum(),
        recovery_p50_s: median(&rec),
        faults_caught: mine.iter().filter(|r| r.faulted && r.drained).count(),
        accepted: mine.iter().filter(|r| r.accepted).count(),
        cost_per_accepted_run: None,
        faulted_cost_per_accepted_run: None,
    }
}

/// Cost per accepted run of one fabric's runs: the cost model over the runs' own window (their
/// elapsed time), GPU time of runs not accepted as waste.
pub fn cost_per_run(
    file: &fabric_report::cost::CostFile,
    partition: &str,
    spares: u32,
    runs: &[WorkloadRun],
    gpus_per_node: u32,
) -> Option<String> {
    cost_of(file, partition, spares, runs, gpus_per_node, |_| true)
}

/// [`cost_per_run`] over the faulted runs alone.
pub fn faulted_cost_per_run(
    file: &fabric_report::cost::CostFile,
    partition: &str,
    spares: u32,
    runs: &[WorkloadRun],
    gpus_per_node: u32,
) -> Option<String> {
    cost_of(file, partition, spares, runs, gpus_per_node, |r| r.faulted)
}

fn cost_of(
    file: &fabric_report::cost::CostFile,
    partition: &str,
    spares: u32,
    runs: &[WorkloadRun],
    gpus_per_node: u32,
    keep: impl Fn(&WorkloadRun) -> bool,
) -> Option<String> {
    let (_, entry) = file.entry_for(partition)?;
    let mine: Vec<&WorkloadRun> = runs
        .iter()
        .filter(|r| r.partition == partition && r.spares == spares && keep(r))
        .collect();
    if mine.is_empty() {
        return None;
    }
    let gpu_s = |r: &WorkloadRun| {
        (r.elapsed_s * f64::from(r.nnodes.max(1)) * f64::from(gpus_per_node)) as u64
    };
    let window_s: u64 = mine.iter().map(|r| r.elapsed_s as u64).sum::<u64>().max(1);
    let usage = fabric_report::cost::UsageFigures {
        allocated_gpu_s: mine.iter().map(|r| gpu_s(r)).sum(),
        waste_gpu_s: mine.iter().filter(|r| !r.accepted).map(|r| gpu_s(r)).sum(),
        drains: mine.iter().filter(|r| r.drained).count() as u64,
        accepted_runs: mine.iter().filter(|r| r.accepted).count() as u64,
        accepted_outputs: None,
        spare_gpu_s: 0,
    };
    let b = fabric_report::cost::compute(
        &file.currency,
        entry,
        fabric_report::cost::gpu_s_to_h(window_s),
        &usage,
    );
    b.per_accepted_run
        .map(|d| format!("{:.2} {}", d.round_dp(2), file.currency))
}

/// The drill's nodes of `partition`, in the partition's order: the workload's jobs and faults
/// go nowhere else.
fn members(
    spec: &WorkloadSpec,
    cluster: &mut dyn Cluster,
    gates: &Gates,
    partition: &str,
    n: usize,
) -> Result<Vec<String>, WorkloadError> {
    let all = cluster
        .nodes_of(partition)
        .map_err(|e| WorkloadError(e.to_string()))?;
    let mine: Vec<String> = all
        .into_iter()
        .filter(|m| gates.nodes().contains(m))
        .collect();
    if mine.len() < n {
        return Err(WorkloadError(format!(
            "partition {partition} has {} of the drill's nodes ({}), the script {} needs {n}: name more of its nodes with --nodes (all in the reservation), or set --workload-nodes",
            mine.len(),
            gates.nodes().join(","),
            spec.script.display()
        )));
    }
    Ok(mine)
}

fn node_count(spec: &WorkloadSpec) -> Result<usize, WorkloadError> {
    let text = std::fs::read_to_string(&spec.script)
        .map_err(|e| WorkloadError(format!("cannot read {}: {e}", spec.script.display())))?;
    Ok(spec.nodes.or_else(|| script_nodes(&text)).unwrap_or(1))
}

/// What [`run`] would do, changing nothing (`--dry-run`): per partition, the job's nodes and
/// where the fault would go; refused as [`run`] would refuse it.
pub fn describe(
    spec: &WorkloadSpec,
    cluster: &mut dyn Cluster,
    gates: &Gates,
) -> Result<String, WorkloadError> {
    gates
        .class(spec.fault)
        .map_err(|e| WorkloadError(e.to_string()))?;
    let n = node_count(spec)?;
    let mut out = format!(
        "workload {} on {n} node(s), {} run(s) clean and {} with {} per fabric\n",
        spec.script.display(),
        spec.runs,
        spec.runs,
        spec.fault.id()
    );
    let k = spec.spares as usize;
    for p in &spec.partitions {
        let m = members(spec, cluster, gates, p, n + k)?;
        let _ = writeln!(
            out,
            "  {p}: jobs on {}, the fault on {}",
            m[..n].join(","),
            m[0]
        );
        if k > 0 {
            let _ = writeln!(
                out,
                "  {p}, {} run(s) more with {k} spare(s): jobs on {} (--fabric-check-spares={k}), the fault on {}",
                spec.runs,
                m[..n + k].join(","),
                m[n + k - 1]
            );
        }
    }
    Ok(out)
}

/// Runs the workload on every partition, through `gates` (see the module docs). When the gates
/// stop it, the runs so far are returned with [`WorkloadResult::stopped`] saying why.
pub fn run(
    spec: &WorkloadSpec,
    cluster: &mut dyn Cluster,
    injector: &mut dyn Injector,
    journal: &mut Journal,
    gates: &mut Gates,
    gpus_per_node: u32,
    cost: Option<&fabric_report::cost::CostFile>,
) -> Result<WorkloadResult, WorkloadError> {
    gates
        .class(spec.fault)
        .map_err(|e| WorkloadError(e.to_string()))?;
    let n = node_count(spec)?;
    gates
        .start(cluster)
        .map_err(|e| WorkloadError(e.to_string()))?;
    let mut runs = Vec::new();
    let mut k = 0;
    let mut sets = vec![(false, 0), (true, 0)];
    if spec.spares > 0 {
        sets.push((true, spec.spares));
    }
    'fabrics: for p in &spec.partitions {
        let members = members(spec, cluster, gates, p, n + spec.spares as usize)?;
        for &(faulted, spares) in &sets {
            for _ in 0..spec.runs {
                k += 1;
                let dir = folder::prepare(&spec.work_dir, &format!("run-{k:03}"), spec.job_uid)
                    .map_err(|e| WorkloadError(e.to_string()))?;
                match one_run(
                    spec, cluster, injector, journal, gates, p, &members, n, faulted, spares, &dir,
                ) {
                    Ok(r) => runs.push(r),
                    Err(_) if gates.stopped().is_some() => break 'fabrics,
                    Err(e) => return Err(e),
                }
            }
        }
    }
    let mut fabrics: Vec<FabricFigures> = Vec::new();
    for p in &spec.partitions {
        fabrics.push(figures(p, 0, &runs));
        if spec.spares > 0 {
            fabrics.push(figures(p, spec.spares, &runs));
        }
    }
    if let Some(file) = cost {
        for f in &mut fabrics {
            f.cost_per_accepted_run =
                cost_per_run(file, &f.partition, f.spares, &runs, gpus_per_node);
            f.faulted_cost_per_accepted_run =
                faulted_cost_per_run(file, &f.partition, f.spares, &runs, gpus_per_node);
        }
    }
    Ok(WorkloadResult {
        schema: "fabric-check/drill-workload/v1".into(),
        fault: spec.fault.id().into(),
        fabrics,
        runs,
        stopped: gates.stopped().map(ToString::to_string),
    })
}

#[allow(clippy::too_many_arguments)]
fn one_run(
    spec: &WorkloadSpec,
    cluster: &mut dyn Cluster,
    injector: &mut dyn Injector,
    journal: &mut Journal,
    gates: &mut Gates,
    partition: &str,
    members: &[String],
    n: usize,
    faulted: bool,
    spares: u32,
    dir: &folder::RunDir,
) -> Result<WorkloadRun, WorkloadError> {
    let err = |e: &dyn std::fmt::Display| WorkloadError(e.to_string());
    let script = dir
        .write_script("job.sh", &wrapper(spec, &dir.job_dir))
        .map_err(|e| err(&e))?;
    let job = JobSpec {
        nodes: members.iter().take(n + spares as usize).cloned().collect(),
        full: false,
        fabric_run: true,
        spares,
    };
    // With spares the fault goes to the job's last node: its first is the batch host, whose
    // failure spares cannot absorb (the job falls back to a requeue, docs/operations.md).
    let target = if spares > 0 {
        job.nodes.last().cloned().unwrap_or_default()
    } else {
        members[0].clone()
    };
    let mut ids = Vec::new();
    let mut t_inj = None;
    if faulted {
        let kind = spec
            .drill_nodes
            .iter()
            .find(|d| d.name == target)
            .map_or(crate::class::NodeKind::Roce, |d| d.kind);
        let round = Round {
            index: 0,
            class: spec.fault,
            node: target.clone(),
            kind,
            moment: Moment::Before,
            job: Some(job.clone()),
            during_at_permille: None,
            size: None,
        };
        ids = gate::inject(gates, cluster, injector, journal, &round, &dir.job_dir)
            .map_err(|e| err(&e))?;
        t_inj = Some(cluster.now_ms());
    }
    let submitted = cluster.now_ms();
    let id = match gates.submit(cluster, &script, &job, Some(partition)) {
        Ok(id) => id,
        Err(e) => {
            restore(injector, journal, &ids).map_err(|e| err(&e))?;
            return Err(err(&e));
        }
    };
    let mut drained = false;
    let mut drained_at = None;
    let mut mended = false;
    let start = cluster.now_ms();
    loop {
        if cluster.now_ms().saturating_sub(start) > 600_000 {
            let _ = cluster.cancel(id);
            break;
        }
        let state = cluster.queue_state(id);
        if let Ok(None) = state {
            break;
        }
        if faulted
            && drained_at.is_none()
            && let Ok(v) = cluster.nodes()
            && let Some(t) = v.iter().find(|v| v.name == target)
            && t.out_of_service()
        {
            if !(t.ours() || spec.fault == FaultClass::NodeRemoved) {
                // Not fabric-check's doing: an admin's drain, or Slurm's for another cause. The
                // fault goes, the node stays as it is, and the workload stops.
                let why = gates.stop(GateError::TakenOut {
                    node: target.clone(),
                    why: format!("{}: {}", t.state, t.reason),
                });
                let _ = cluster.cancel(id);
                restore(injector, journal, &ids).map_err(|e| err(&e))?;
                return Err(err(&why));
            }
            drained = true;
            drained_at = Some(cluster.now_ms());
        }
        // The admin mends the node once the job went back to the queue (or 10 s after the
        // drain): the fault goes, the node comes back, the requeued job runs.
        if let Some(at) = drained_at
            && !ids.is_empty()
            && (matches!(&state, Ok(Some(s)) if s == "PENDING")
                || cluster.now_ms().saturating_sub(at) > 10_000)
        {
            restore(injector, journal, &ids).map_err(|e| err(&e))?;
            ids.clear();
            let _ = cluster.resume(&target);
            mended = true;
        }
        cluster.sleep(Duration::from_millis(500));
    }
    restore(injector, journal, &ids).map_err(|e| err(&e))?;
    if drained && !mended {
        // The job ended before the mend: what fabric-check took out for this fault comes back.
        let _ = cluster.resume(&target);
    }
    let mut view = cluster.job(id).map_err(|e| err(&e))?;
    for _ in 0..40 {
        if JobState::parse(&view.state).has_ended()
            && view.tag.as_ref().is_some_and(|t| t.run.is_some())
        {
            break;
        }
        cluster.sleep(Duration::from_millis(250));
        view = cluster.job(id).map_err(|e| err(&e))?;
    }
    let run = view.tag.as_ref().and_then(|t| t.run.clone());
    Ok(WorkloadRun {
        partition: partition.to_owned(),
        faulted,
        job: id,
        state: view.state.clone(),
        elapsed_s: view.elapsed_s,
        nnodes: view.nnodes,
        step_p50_s: run.as_ref().and_then(|r| r.step_p50_s),
        ckpt_total_s: run.as_ref().map(|r| r.ckpt_total_s),
        retries: run.as_ref().map_or(0, |r| r.retries),
        requeues: view.requeues,
        accepted: run.as_ref().is_some_and(|r| r.accepted),
        recovery_s: t_inj
            .filter(|_| view.start_ms > 0)
            .map(|t| view.start_ms.saturating_sub(t) as f64 / 1000.0),
        drained,
        spares,
        queued_s: (view.start_ms > 0)
            .then(|| view.start_ms.saturating_sub(submitted) as f64 / 1000.0),
    })
}

/// One cell of the side-by-side table.
type FabricCell = fn(&FabricFigures) -> String;

fn opt(v: Option<f64>, d: usize) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:.d$}"))
}

/// The fabrics side by side, one column each.
pub fn table(r: &WorkloadResult) -> String {
    let mut out = format!("workload per fabric (faulted runs: {})\n", r.fault);
    let _ = write!(out, "{:<26}", "");
    for f in &r.fabrics {
        let name = if f.spares > 0 {
            format!("{} +{} spare", f.partition, f.spares)
        } else {
            f.partition.clone()
        };
        let _ = write!(out, " {name:>14}");
    }
    out.push('\n');
    let rows: [(&str, FabricCell); 14] = [
        ("runs clean / faulted", |f| {
            format!("{} / {}", f.clean_runs, f.faulted_runs)
        }),
        ("step time p50 s (clean)", |f| opt(f.step_p50_s, 3)),
        ("step time p95 s (clean)", |f| opt(f.step_p95_s, 3)),
        ("step time p50 s (faulted)", |f| {
            opt(f.faulted_step_p50_s, 3)
        }),
        ("checkpoint s p50", |f| opt(f.ckpt_p50_s, 2)),
        ("retries", |f| f.retries.to_string()),
        ("requeues", |f| f.requeues.to_string()),
        ("recovery s p50", |f| opt(f.recovery_p50_s, 1)),
        ("submit to start s (clean)", |f| opt(f.queued_p50_s, 1)),
        ("submit to start s (fault)", |f| {
            opt(f.faulted_queued_p50_s, 1)
        }),
        ("faults caught", |f| {
            format!("{} of {}", f.faults_caught, f.faulted_runs)
        }),
        ("accepted runs", |f| f.accepted.to_string()),
        ("cost per accepted run", |f| {
            f.cost_per_accepted_run
                .clone()
                .unwrap_or_else(|| "-".into())
        }),
        ("  of the faulted runs", |f| {
            f.faulted_cost_per_accepted_run
                .clone()
                .unwrap_or_else(|| "-".into())
        }),
    ];
    for (name, get) in rows {
        let _ = write!(out, "{name:<26}");
        for f in &r.fabrics {
            let _ = write!(out, " {:>14}", get(f));
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fakes::FakeCluster;

    #[test]
    fn the_node_count_comes_from_the_scripts_sbatch_lines() {
        assert_eq!(script_nodes("#!/bin/sh\n#SBATCH -N 4\npython x"), Some(4));
        assert_eq!(script_nodes("#SBATCH --nodes=2-3"), Some(2));
        assert_eq!(script_nodes("#SBATCH -N8 --time=1"), Some(8));
        assert_eq!(script_nodes("#SBATCH --nodes 16"), Some(16));
        assert_eq!(script_nodes("# no directives\nsrun -N 4 x"), None);
    }

    fn run(p: &str, faulted: bool, step: f64, accepted: bool, rec: Option<f64>) -> WorkloadRun {
        WorkloadRun {
            partition: p.into(),
            faulted,
            elapsed_s: 3600.0,
            nnodes: 2,
            step_p50_s: Some(step),
            ckpt_total_s: Some(2.0),
            retries: 1,
            accepted,
            recovery_s: rec,
            drained: faulted,
            ..WorkloadRun::default()
        }
    }

    #[test]
    fn fabrics_are_figured_side_by_side_and_priced_per_accepted_run() {
        let runs = vec![
            run("ib", false, 0.5, true, None),
            run("ib", false, 0.7, true, None),
            run("ib", true, 0.9, false, Some(12.0)),
            run("roce", false, 0.6, true, None),
            run("roce", true, 0.6, true, Some(20.0)),
        ];
        let ib = figures("ib", 0, &runs);
        assert_eq!((ib.clean_runs, ib.faulted_runs, ib.accepted), (2, 1, 2));
        assert_eq!(ib.step_p50_s, Some(0.6));
        assert_eq!(ib.faulted_step_p50_s, Some(0.9));
        assert_eq!(ib.recovery_p50_s, Some(12.0));
        assert_eq!(ib.retries, 3);
        let file = fabric_report::cost::CostFile::parse(
            "currency = \"EUR\"\n[fabric.ib]\ngpus = 16\n[fabric.ib.running]\nrack_power_and_space = 10\n",
            "cost.toml",
        )
        .unwrap();
        // 3 h of window at 10 EUR/h, 2 accepted runs.
        assert_eq!(
            cost_per_run(&file, "ib", 0, &runs, 8).as_deref(),
            Some("15.00 EUR")
        );
        assert_eq!(cost_per_run(&file, "roce", 0, &runs, 8), None);
        // The faulted run alone: 1 h of window and no accepted run, so no figure.
        assert_eq!(faulted_cost_per_run(&file, "ib", 0, &runs, 8), None);
        let mut accepted = runs.clone();
        accepted[2].accepted = true;
        assert_eq!(
            faulted_cost_per_run(&file, "ib", 0, &accepted, 8).as_deref(),
            Some("10.00 EUR"),
            "1 h at 10 EUR/h over the one faulted run"
        );
        let r = WorkloadResult {
            schema: String::new(),
            fault: "port_down".into(),
            fabrics: vec![ib, figures("roce", 0, &runs)],
            runs,
            stopped: None,
        };
        let t = table(&r);
        assert!(t.lines().next().unwrap().contains("port_down"));
        assert!(t.contains("accepted runs"), "{t}");
        assert!(
            t.lines().any(|l| l.starts_with("recovery s p50")
                && l.contains("12.0")
                && l.contains("20.0")),
            "{t}"
        );
    }

    #[test]
    fn the_wrapper_runs_the_script_under_fabric_run_on_every_node() {
        let spec = WorkloadSpec {
            script: "/w/train.sh".into(),
            partitions: vec![],
            runs: 1,
            nodes: None,
            fault: FaultClass::PortDown,
            work_dir: "/w".into(),
            job_uid: None,
            bin_dir: Some("/opt/fc/bin".into()),
            drill_nodes: vec![],
            spares: 0,
        };
        let w = wrapper(&spec, Path::new("/w/run-001"));
        assert!(w.contains("export PATH='/opt/fc/bin':$PATH"));
        assert!(w.contains("srun fabric-run --checkpoint-dir '/w/run-001'"));
        assert!(w.ends_with("-- sh '/w/train.sh'\n"));
    }

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| (*s).to_owned()).collect()
    }

    fn spec(dir: &Path, fault: FaultClass) -> WorkloadSpec {
        let script = dir.join("train.sh");
        std::fs::write(&script, "#!/bin/sh\n#SBATCH -N 1\necho step 1\n").unwrap();
        WorkloadSpec {
            script,
            partitions: vec!["ib".into()],
            runs: 1,
            nodes: None,
            fault,
            work_dir: dir.join("work"),
            job_uid: None,
            bin_dir: None,
            drill_nodes: vec![],
            spares: 0,
        }
    }

    /// Runs the workload on `c` through `gates`: its result, the faults injected, the journal's
    /// entries left pending.
    fn workload(
        c: &mut FakeCluster,
        gates: &mut Gates,
        fault: FaultClass,
    ) -> (
        Result<WorkloadResult, WorkloadError>,
        Vec<(String, FaultClass)>,
        usize,
    ) {
        workload_with_spares(c, gates, fault, 0)
    }

    fn workload_with_spares(
        c: &mut FakeCluster,
        gates: &mut Gates,
        fault: FaultClass,
        spares: u32,
    ) -> (
        Result<WorkloadResult, WorkloadError>,
        Vec<(String, FaultClass)>,
        usize,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let mut j = Journal::open(&dir.path().join("j.jsonl")).unwrap();
        let mut inj = c.injector();
        let r = super::run(
            &WorkloadSpec {
                spares,
                ..spec(dir.path(), fault)
            },
            c,
            &mut inj,
            &mut j,
            gates,
            8,
            None,
        );
        (r, inj.injected(), j.pending().unwrap().len())
    }

    #[test]
    fn the_workload_refuses_a_fault_class_this_cluster_does_not_allow_before_it_runs_anything() {
        for (fault, says) in [
            (FaultClass::PortDown, "--allow-hardware port_down"),
            (FaultClass::LinkFlap, "only on the testbed"),
        ] {
            let mut c = FakeCluster::new(500, "fabric-check: ib.port_state: down");
            c.reservation = Some(names(&["n1", "n2", "n3"]));
            let mut gates = Gates::cluster(names(&["n1", "n2", "n3"]), "drill".into(), vec![]);
            let (r, injected, _) = workload(&mut c, &mut gates, fault);
            let e = r.unwrap_err().to_string();
            assert!(e.contains(says), "{e}");
            assert!(injected.is_empty() && c.jobs.is_empty(), "nothing ran");
        }
    }

    #[test]
    fn the_workload_runs_and_injects_only_on_the_drills_nodes_never_on_the_partitions_first_node() {
        let mut c = FakeCluster::new(500, "fabric-check: ib.port_state: mlx5_0 port 1 down");
        c.partitions.insert("ib".into(), names(&["n1", "n2", "n3"]));
        c.reservation = Some(names(&["n2", "n3"]));
        let mut gates = Gates::cluster(
            names(&["n2", "n3"]),
            "drill".into(),
            vec![FaultClass::PortDown],
        );
        let (r, injected, pending) = workload(&mut c, &mut gates, FaultClass::PortDown);
        let r = r.unwrap();
        assert_eq!(r.stopped, None);
        assert_eq!(injected, vec![("n2".to_owned(), FaultClass::PortDown)]);
        assert_eq!(pending, 0);
        assert_eq!(c.jobs.len(), 2);
        for (_, _, job) in &c.jobs {
            assert_eq!(job.nodes, names(&["n2"]), "{job:?}");
        }
        assert_eq!(c.resumed, vec!["n2".to_owned()], "its own drain, resumed");
    }

    #[test]
    fn with_spares_the_faulted_runs_run_again_asking_for_spares_with_the_fault_off_the_batch_host()
    {
        let mut c = FakeCluster::new(500, "fabric-check: ib.port_state: mlx5_0 port 1 down");
        c.partitions.insert("ib".into(), names(&["n1", "n2", "n3"]));
        c.reservation = Some(names(&["n2", "n3"]));
        let mut gates = Gates::cluster(
            names(&["n2", "n3"]),
            "drill".into(),
            vec![FaultClass::PortDown],
        );
        let (r, injected, pending) =
            workload_with_spares(&mut c, &mut gates, FaultClass::PortDown, 1);
        let r = r.unwrap();
        assert_eq!(pending, 0);
        assert_eq!(c.jobs.len(), 3, "clean, faulted, faulted with a spare");
        let spare_jobs: Vec<_> = c.jobs.iter().filter(|(_, _, j)| j.spares == 1).collect();
        assert_eq!(spare_jobs.len(), 1);
        assert_eq!(spare_jobs[0].2.nodes, names(&["n2", "n3"]), "one node more");
        assert_eq!(
            injected,
            vec![
                ("n2".to_owned(), FaultClass::PortDown),
                ("n3".to_owned(), FaultClass::PortDown)
            ],
            "with a spare the fault goes to the job's last node, never its batch host"
        );
        let cols: Vec<(String, u32, usize)> = r
            .fabrics
            .iter()
            .map(|f| (f.partition.clone(), f.spares, f.faulted_runs))
            .collect();
        assert_eq!(
            cols,
            vec![("ib".to_owned(), 0, 1), ("ib".to_owned(), 1, 1)],
            "the spares runs are a column of their own"
        );
        assert!(table(&r).contains("ib +1 spare"), "{}", table(&r));
        let args = crate::cluster::sbatch_args(&spare_jobs[0].2, None, Some("ib"));
        assert!(
            args.contains(&"--fabric-check-spares=1".to_owned()),
            "{args:?}"
        );
        assert!(args.contains(&"--nodes=2".to_owned()), "{args:?}");
    }

    #[test]
    fn the_workload_does_not_start_while_someone_elses_job_runs_on_its_nodes_or_one_is_out() {
        let mut c = FakeCluster::new(500, "");
        c.foreign
            .push((0, "41".into(), "bob".into(), "fabric-drill".into()));
        let mut gates = Gates::testbed(names(&["n1", "n2", "n3"]));
        let (r, injected, _) = workload(&mut c, &mut gates, FaultClass::PortDown);
        let e = r.unwrap_err().to_string();
        assert!(e.contains("job 41 of bob"), "{e}");
        assert!(injected.is_empty() && c.jobs.is_empty());
        let mut c = FakeCluster::new(500, "");
        c.nodes[0].state = "drained".into();
        c.nodes[0].reason = "cable [admin]".into();
        let mut gates = Gates::testbed(names(&["n1", "n2", "n3"]));
        let (r, injected, _) = workload(&mut c, &mut gates, FaultClass::PortDown);
        let e = r.unwrap_err().to_string();
        assert!(e.contains("n1 (drained: cable [admin])"), "{e}");
        assert!(injected.is_empty() && c.jobs.is_empty());
    }

    #[test]
    fn the_workload_leaves_a_node_someone_else_took_out_and_stops_with_its_fault_restored() {
        let mut c = FakeCluster::new(u64::MAX / 4, "");
        // A long job: time enough for the old 10 s mend, which resumed whatever took the node.
        c.job_ms = 30_000;
        c.other_drain = Some(("n1".into(), 1, "bad DIMM [admin]".into()));
        let mut gates = Gates::testbed(names(&["n1", "n2", "n3"]));
        let (r, injected, pending) = workload(&mut c, &mut gates, FaultClass::PortDown);
        let r = r.unwrap();
        assert_eq!(injected.len(), 1);
        assert_eq!(pending, 0, "the fault was restored");
        assert!(
            c.resumed.is_empty(),
            "the admin's drain stays: {:?}",
            c.resumed
        );
        let why = r.stopped.expect("stopped");
        assert!(
            why.contains("n1 was taken out by something other than fabric-check"),
            "{why}"
        );
        assert_eq!(r.runs.len(), 1, "the clean run before it");
        assert!(
            c.cancelled.contains(&101),
            "the faulted run's job: {:?}",
            c.cancelled
        );
    }
}
