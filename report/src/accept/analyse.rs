//! From runs to the acceptance report: per-size statistics across runs, outliers, checks.
//!
//! Definitions (also in `docs/cost-model.md`, section "Acceptance"):
//!
//! * Figures are kept per collective: one summary per (collective, size, type, op, root), so a
//!   log with several tests in turn never mixes all_reduce with sendrecv at a size.
//! * A size's figures use the out-of-place result when it exists, else the in-place one.
//! * Mean, min and max are taken over runs; time min/avg/max are the minimum, mean and maximum
//!   of the runs' average times; p95/p99 are the worst over runs (from `-I 1` output).
//! * Coefficient of variation = population standard deviation / mean of busbw over runs, percent.
//! * An outlier run at a size has busbw more than `outlier_drop_pct` below the median of the runs
//!   (needs three runs or more, so the median means something).
//! * An outlier rank has a mean per-iteration time more than `max_rank_skew_pct` above the median
//!   rank's (needs the JSON's `per_process_max_times_us`).

use std::collections::BTreeMap;

use serde::Serialize;

use super::bom::{self, BomReport, NodeBom};
use super::questions::{self, Answer};
use super::thresholds::Thresholds;
use super::{Measure, NcclRun, Problem, SizeRow, fmt_size};

/// What goes in.
#[derive(Debug, Clone, Default)]
pub struct Inputs {
    /// Parsed runs.
    pub runs: Vec<NcclRun>,
    /// Problems met while reading.
    pub problems: Vec<Problem>,
    /// Pinned BOMs.
    pub boms: Vec<NodeBom>,
    /// Probe outputs, flattened like BOMs.
    pub probes: Vec<NodeBom>,
    /// Node count the runs must use.
    pub expect_nodes: Option<u32>,
    /// GPUs per node the runs must use.
    pub expect_gpus_per_node: Option<u32>,
    /// Thresholds.
    pub thresholds: Thresholds,
}

/// One run, briefly.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunInfo {
    /// File.
    pub file: String,
    /// `text` or `json`.
    pub form: &'static str,
    /// Test binary.
    pub test: Option<String>,
    /// The collective: named by the output, else told from the rows (see
    /// [`NcclRun::collective`]).
    pub collective: Option<String>,
    /// Version line.
    pub version: Option<String>,
    /// Ranks: the highest rank listed plus one.
    pub ranks: usize,
    /// Distinct hosts.
    pub hosts: usize,
    /// Result rows.
    pub rows: usize,
    /// Average busbw, GB/s: the footer's, else the mean over the rows read.
    pub avg_busbw_gbps: Option<f64>,
    /// `footer` or `rows`.
    pub avg_busbw_from: &'static str,
}

/// Figures for one (collective, size, type, op, root) across runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SizeSummary {
    /// The runs' collective (see [`NcclRun::collective`]); None when unknown.
    pub collective: Option<String>,
    /// Bytes.
    pub size_b: u64,
    /// Data type.
    pub dtype: String,
    /// Reduction.
    pub redop: String,
    /// Root.
    pub root: Option<i64>,
    /// Runs with this size.
    pub runs: usize,
    /// Mean busbw, GB/s.
    pub busbw_mean_gbps: f64,
    /// Lowest busbw, GB/s.
    pub busbw_min_gbps: f64,
    /// Highest busbw, GB/s.
    pub busbw_max_gbps: f64,
    /// Mean in-place busbw, GB/s.
    pub busbw_in_place_mean_gbps: Option<f64>,
    /// Mean algbw, GB/s.
    pub algbw_mean_gbps: f64,
    /// Fastest run's average time, µs.
    pub time_min_us: f64,
    /// Mean of the runs' average times, µs.
    pub time_avg_us: f64,
    /// Slowest run's average time, µs.
    pub time_max_us: f64,
    /// Worst p95 over runs, µs.
    pub p95_us: Option<f64>,
    /// Worst p99 over runs, µs.
    pub p99_us: Option<f64>,
    /// Wrong elements summed over runs and both halves (None when never checked).
    pub wrong: Option<f64>,
    /// Coefficient of variation of busbw over runs, percent (None with one run).
    pub cv_pct: Option<f64>,
    /// Files of the outlier runs.
    pub outlier_runs: Vec<String>,
}

/// A rank slower than its peers.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OutlierRank {
    /// File.
    pub file: String,
    /// Process index (the rank when one GPU per process).
    pub rank: usize,
    /// Its host, when the rank list says.
    pub host: Option<String>,
    /// Sizes where it was an outlier.
    pub sizes: usize,
    /// Worst excess over the median rank, percent.
    pub worst_skew_pct: f64,
}

/// One pass/fail/open check.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Check {
    /// Stable id.
    pub id: String,
    /// `pass`, `warn` (usable with a caveat), `fail` or `open` (not decidable from the inputs).
    pub status: &'static str,
    /// What was seen.
    pub observed: String,
    /// What was required.
    pub expected: String,
}

/// The acceptance report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AcceptReport {
    /// Schema id.
    pub schema: &'static str,
    /// `fail` when a check failed, `warn` when one warned (a truncated but usable input),
    /// else `pass`.
    pub verdict: &'static str,
    /// Runs read.
    pub runs: Vec<RunInfo>,
    /// Per-size figures.
    pub sizes: Vec<SizeSummary>,
    /// Slow ranks.
    pub outlier_ranks: Vec<OutlierRank>,
    /// BOM comparison (when BOMs were given).
    pub bom: Option<BomReport>,
    /// Checks.
    pub checks: Vec<Check>,
    /// Purchase questions.
    pub questions: Vec<Answer>,
    /// Input problems.
    pub problems: Vec<Problem>,
}

fn primary(r: &SizeRow) -> Option<&Measure> {
    r.out_of_place.as_ref().or(r.in_place.as_ref())
}

/// The project's median ([`fabric_base::stats::median`]); NaN when no value is finite.
fn median(v: &[f64]) -> f64 {
    fabric_base::stats::median(v).unwrap_or(f64::NAN)
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

/// Population CV in percent.
pub fn cv_pct(v: &[f64]) -> Option<f64> {
    if v.len() < 2 {
        return None;
    }
    let m = mean(v);
    if m == 0.0 {
        return None;
    }
    let var = v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / v.len() as f64;
    Some(var.sqrt() / m * 100.0)
}

type Key = (Option<String>, u64, String, String, Option<i64>);

impl SizeSummary {
    /// The collective as the report prints it.
    pub fn collective_name(&self) -> &str {
        self.collective.as_deref().unwrap_or("collective unknown")
    }
}

/// Builds the report.
pub fn analyse(inp: &Inputs) -> AcceptReport {
    let t = &inp.thresholds;
    let sizes = size_summaries(inp);
    let (outlier_ranks, rank_data) = find_outlier_ranks(inp);

    let bom_report = (!inp.boms.is_empty()).then(|| bom::compare(&inp.boms, &t.bom.ignore));

    let mut checks = Checks(Vec::new());
    inputs_check(inp, &mut checks);
    scale_checks(inp, &mut checks);
    correctness_check(inp, &sizes, &mut checks);
    busbw_checks(t, &sizes, &mut checks);
    variation_checks(t, &sizes, &mut checks);
    rank_check(t, &outlier_ranks, rank_data, &mut checks);
    bom_checks(inp, bom_report.as_ref(), &mut checks);
    let Checks(checks) = checks;
    let verdict = if checks.iter().any(|c| c.status == "fail") {
        "fail"
    } else if checks.iter().any(|c| c.status == "warn") {
        "warn"
    } else {
        "pass"
    };
    AcceptReport {
        schema: "fabric-check/accept/v1",
        verdict,
        runs: inp
            .runs
            .iter()
            .map(|r| RunInfo {
                file: r.file.clone(),
                form: r.form,
                test: r.test.clone(),
                version: r.version.clone(),
                ranks: r.rank_count(),
                collective: r.collective(),
                avg_busbw_from: if r.avg_busbw_from_footer {
                    "footer"
                } else {
                    "rows"
                },
                hosts: r.hosts().len(),
                rows: r.rows.len(),
                avg_busbw_gbps: r.avg_busbw_gbps,
            })
            .collect(),
        sizes,
        outlier_ranks,
        bom: bom_report,
        checks,
        questions: questions::answer(&inp.boms, &inp.probes, &inp.runs, inp.expect_nodes),
        problems: inp.problems.clone(),
    }
}

/// The checks in the order the report lists them.
struct Checks(Vec<Check>);

impl Checks {
    fn add(&mut self, id: String, status: &'static str, observed: String, expected: String) {
        self.0.push(Check {
            id,
            status,
            observed,
            expected,
        });
    }
}

/// `inputs.readable`: every run file complete and well-formed.
fn inputs_check(inp: &Inputs, checks: &mut Checks) {
    checks.add(
        "inputs.readable".into(),
        if inp.problems.is_empty() {
            "pass"
        } else if inp.problems.iter().all(Problem::is_warning) {
            "warn"
        } else {
            "fail"
        },
        match inp.problems.iter().find(|p| p.is_warning()) {
            Some(first) if inp.problems.iter().all(Problem::is_warning) => format!(
                "{} problem(s) in {} run file(s), all usable as far as they go; first: {first}",
                inp.problems.len(),
                inp.runs.len()
            ),
            _ => format!(
                "{} problem(s) in {} run file(s)",
                inp.problems.len(),
                inp.runs.len()
            ),
        },
        "every input complete and well-formed".into(),
    );
}

/// `scale.nodes` and `scale.gpus`: the hosts and ranks of every run against `--nodes` and
/// `--gpus-per-node`.
fn scale_checks(inp: &Inputs, checks: &mut Checks) {
    let host_counts: Vec<usize> = inp.runs.iter().map(|r| r.hosts().len()).collect();
    match inp.expect_nodes {
        None => checks.add(
            "scale.nodes".into(),
            "open",
            format!("{host_counts:?} hosts per run"),
            "give --nodes N to check the exact node count".into(),
        ),
        Some(_) if host_counts.iter().all(|h| *h == 0) => checks.add(
            "scale.nodes".into(),
            "open",
            "no rank lines in the outputs".into(),
            "keep nccl-tests' header in the outputs".into(),
        ),
        Some(n) if inp.runs.iter().any(|r| !r.device_list_complete()) => checks.add(
            "scale.nodes".into(),
            // Too few hosts in an elided or cut device list prove nothing; too many do.
            if host_counts.iter().any(|h| *h as u32 > n) {
                "fail"
            } else {
                "open"
            },
            format!("{host_counts:?} hosts among the ranks listed; a device list is incomplete"),
            format!("{n} in every run (keep the whole device list in the outputs)"),
        ),
        Some(n) => checks.add(
            "scale.nodes".into(),
            if host_counts.iter().all(|h| *h as u32 == n) {
                "pass"
            } else {
                "fail"
            },
            format!("{host_counts:?} hosts per run"),
            format!("{n} in every run"),
        ),
    }
    let rank_counts: Vec<usize> = inp.runs.iter().map(NcclRun::rank_count).collect();
    match (inp.expect_nodes, inp.expect_gpus_per_node) {
        (Some(n), Some(g)) if rank_counts.iter().any(|c| *c > 0) => checks.add(
            "scale.gpus".into(),
            if rank_counts.iter().all(|c| *c as u32 == n * g) {
                "pass"
            } else {
                "fail"
            },
            format!("{rank_counts:?} ranks per run"),
            format!("{} ({} nodes × {} GPUs)", n * g, n, g),
        ),
        _ => checks.add(
            "scale.gpus".into(),
            "open",
            format!("{rank_counts:?} ranks per run"),
            "give --nodes and --gpus-per-node".into(),
        ),
    }
}

/// `correctness.wrong` (with `zero_wrong`): no wrong element and no out-of-bounds value, in
/// runs whose results were checked. A run with validation off (`-c 0`: `#wrong` `N/A` on every
/// row) still prints `Out of bounds values : 0 OK`, which then says nothing: its correctness is
/// unknown, and while any run's is, the check is `open`, not `pass`.
fn correctness_check(inp: &Inputs, sizes: &[SizeSummary], checks: &mut Checks) {
    let t = &inp.thresholds;
    if !t.zero_wrong {
        return;
    }
    let wrong_total: f64 = sizes.iter().filter_map(|s| s.wrong).sum();
    let oob: u64 = inp.runs.iter().filter_map(|r| r.out_of_bounds).sum();
    let unchecked: Vec<&str> = inp
        .runs
        .iter()
        .filter(|r| !r.validated())
        .map(|r| r.file.as_str())
        .collect();
    let checked = inp.runs.len() - unchecked.len();
    let figures = format!("{wrong_total} wrong elements, {oob} out-of-bounds values");
    let (status, observed) = if wrong_total > 0.0 || oob > 0 {
        ("fail", figures)
    } else if unchecked.is_empty() && checked > 0 {
        ("pass", figures)
    } else {
        let mut o = format!(
            "correctness unknown, not passed: #wrong is N/A on every row of {} of {} run(s), so validation was off (-c 0) and their `Out of bounds values : 0 OK` says nothing; rerun with -c 1: {}",
            unchecked.len(),
            inp.runs.len(),
            unchecked.join(", ")
        );
        if checked > 0 {
            o.push_str(&format!("; the {checked} checked run(s): {figures}"));
        }
        ("open", o)
    };
    checks.add("correctness.wrong".into(), status, observed, "0".into());
}

/// `busbw.min@SIZE`: the lowest mean bus bandwidth at each size a minimum is set for.
fn busbw_checks(t: &Thresholds, sizes: &[SizeSummary], checks: &mut Checks) {
    for mb in &t.min_busbw {
        let bytes = mb.bytes().unwrap_or(0);
        let at: Vec<&SizeSummary> = sizes.iter().filter(|s| s.size_b == bytes).collect();
        let id = format!("busbw.min@{}", fmt_size(bytes));
        if at.is_empty() {
            checks.add(
                id,
                "fail",
                "no result at this size".into(),
                format!("≥ {} GB/s (run with -e ≥ {})", mb.gbps, fmt_size(bytes)),
            );
        } else {
            let lowest = at
                .iter()
                .copied()
                .reduce(|a, b| {
                    if b.busbw_mean_gbps < a.busbw_mean_gbps {
                        b
                    } else {
                        a
                    }
                })
                .unwrap_or(at[0]);
            let gbps = lowest.busbw_mean_gbps;
            checks.add(
                id,
                if gbps >= mb.gbps { "pass" } else { "fail" },
                format!(
                    "{gbps:.2} GB/s mean over {} run(s) of {}",
                    lowest.runs,
                    lowest.collective_name()
                ),
                format!("≥ {} GB/s", mb.gbps),
            );
        }
    }
}

/// `variation.cv` and `variation.outlier_runs`: how much the runs differ at each size.
fn variation_checks(t: &Thresholds, sizes: &[SizeSummary], checks: &mut Checks) {
    if let Some(max) = t.max_cv_pct {
        let min_b = t.cv_min_bytes();
        let cvs: Vec<(&SizeSummary, f64)> = sizes
            .iter()
            .filter(|s| s.size_b >= min_b)
            .filter_map(|s| s.cv_pct.map(|c| (s, c)))
            .collect();
        match cvs
            .iter()
            .copied()
            .reduce(|a, b| if b.1 > a.1 { b } else { a })
        {
            None => checks.add(
                "variation.cv".into(),
                "open",
                "fewer than two runs per size".into(),
                format!("≤ {max}% (repeat the run)"),
            ),
            Some((size, worst)) => checks.add(
                "variation.cv".into(),
                if worst <= max { "pass" } else { "fail" },
                format!(
                    "worst {worst:.2}% at {} {}",
                    size.collective_name(),
                    fmt_size(size.size_b)
                ),
                format!("≤ {max}% at sizes ≥ {}", fmt_size(min_b)),
            ),
        }
    }
    let mut outlier_files: Vec<&str> = sizes
        .iter()
        .flat_map(|s| s.outlier_runs.iter().map(String::as_str))
        .collect();
    outlier_files.sort();
    outlier_files.dedup();
    if let Some(max) = t.max_outlier_runs {
        let max_runs = sizes.iter().map(|s| s.runs).max().unwrap_or(0);
        if max_runs < 3 {
            checks.add(
                "variation.outlier_runs".into(),
                "open",
                format!("{max_runs} run(s)"),
                "three or more runs to find outliers".into(),
            );
        } else {
            checks.add(
                "variation.outlier_runs".into(),
                if outlier_files.len() as u64 <= max {
                    "pass"
                } else {
                    "fail"
                },
                if outlier_files.is_empty() {
                    "none".into()
                } else {
                    outlier_files.join(", ")
                },
                format!(
                    "≤ {max} runs more than {}% below the median",
                    t.outlier_drop_pct
                ),
            );
        }
    }
}

/// `ranks.outliers`: no rank slower than the median rank by more than the skew allowed.
fn rank_check(t: &Thresholds, outlier_ranks: &[OutlierRank], rank_data: bool, checks: &mut Checks) {
    checks.add(
        "ranks.outliers".into(),
        if !rank_data {
            "open"
        } else if outlier_ranks.is_empty() {
            "pass"
        } else {
            "fail"
        },
        if !rank_data {
            "no per-rank timing (needs -J output with -I 1 on several processes)".into()
        } else {
            format!("{} slow rank(s)", outlier_ranks.len())
        },
        format!(
            "no rank more than {}% slower than the median rank",
            t.max_rank_skew_pct
        ),
    );
}

/// `bom.consistent` and `bom.covers_hosts`: the nodes' bills of materials agree and cover
/// every host in the runs.
fn bom_checks(inp: &Inputs, bom_report: Option<&BomReport>, checks: &mut Checks) {
    match &bom_report {
        None => checks.add(
            "bom.consistent".into(),
            "open",
            "no BOMs given".into(),
            "pass --bom for every node".into(),
        ),
        Some(b) if b.nodes.len() < 2 => checks.add(
            "bom.consistent".into(),
            "open",
            "one BOM".into(),
            "BOMs of two or more nodes".into(),
        ),
        Some(b) => checks.add(
            "bom.consistent".into(),
            if b.drift.is_empty() { "pass" } else { "fail" },
            format!(
                "{} of {} fields differ across {} nodes",
                b.drift.len(),
                b.compared,
                b.nodes.len()
            ),
            "identical on every node (identity keys excepted)".into(),
        ),
    }
    let hosts: std::collections::BTreeSet<&str> = inp
        .runs
        .iter()
        .flat_map(|r| r.devices.iter().map(|d| d.host.as_str()))
        .collect();
    if let Some(b) = &bom_report
        && !hosts.is_empty()
    {
        let missing: Vec<&str> = hosts
            .iter()
            .copied()
            .filter(|h| !b.nodes.iter().any(|n| n == h))
            .collect();
        checks.add(
            "bom.covers_hosts".into(),
            if missing.is_empty() { "pass" } else { "fail" },
            if missing.is_empty() {
                format!("{} hosts, all pinned", hosts.len())
            } else {
                format!("no BOM for {}", missing.join(", "))
            },
            "a pinned BOM for every host in the runs".into(),
        );
    }
}

/// One summary per (collective, size, dtype, redop, root) over every run that measured it,
/// with the runs whose bus bandwidth fell below the median by more than `outlier_drop_pct`.
fn size_summaries(inp: &Inputs) -> Vec<SizeSummary> {
    let t = &inp.thresholds;
    let mut by_key: BTreeMap<Key, Vec<(&str, &SizeRow)>> = BTreeMap::new();
    for run in &inp.runs {
        let collective = run.collective();
        for r in &run.rows {
            by_key
                .entry((
                    collective.clone(),
                    r.size_b,
                    r.dtype.clone(),
                    r.redop.clone(),
                    r.root,
                ))
                .or_default()
                .push((run.file.as_str(), r));
        }
    }
    let mut sizes = Vec::new();
    for ((collective, size_b, dtype, redop, root), rows) in &by_key {
        let m: Vec<(&str, &Measure)> = rows
            .iter()
            .filter_map(|(f, r)| primary(r).map(|m| (*f, m)))
            .collect();
        if m.is_empty() {
            continue;
        }
        let bus: Vec<f64> = m.iter().map(|(_, x)| x.busbw_gbps).collect();
        let times: Vec<f64> = m.iter().map(|(_, x)| x.time_us).collect();
        let ip: Vec<f64> = rows
            .iter()
            .filter_map(|(_, r)| r.in_place.as_ref().map(|x| x.busbw_gbps))
            .collect();
        let worst = |g: fn(&super::IterStats) -> Option<f64>| {
            m.iter()
                .filter_map(|(_, x)| x.iter.as_ref().and_then(g))
                .reduce(f64::max)
        };
        let wrongs: Vec<f64> = rows
            .iter()
            .flat_map(|(_, r)| [r.out_of_place.as_ref(), r.in_place.as_ref()])
            .flatten()
            .filter_map(|x| x.wrong)
            .collect();
        let med = median(&bus);
        let outlier_runs = if m.len() >= 3 {
            m.iter()
                .filter(|(_, x)| x.busbw_gbps < med * (1.0 - t.outlier_drop_pct / 100.0))
                .map(|(f, _)| f.to_string())
                .collect()
        } else {
            Vec::new()
        };
        sizes.push(SizeSummary {
            collective: collective.clone(),
            size_b: *size_b,
            dtype: dtype.clone(),
            redop: redop.clone(),
            root: *root,
            runs: m.len(),
            busbw_mean_gbps: mean(&bus),
            busbw_min_gbps: bus.iter().copied().fold(f64::INFINITY, f64::min),
            busbw_max_gbps: bus.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            busbw_in_place_mean_gbps: (!ip.is_empty()).then(|| mean(&ip)),
            algbw_mean_gbps: mean(&m.iter().map(|(_, x)| x.algbw_gbps).collect::<Vec<_>>()),
            time_min_us: times.iter().copied().fold(f64::INFINITY, f64::min),
            time_avg_us: mean(&times),
            time_max_us: times.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            p95_us: worst(|s| s.p95_us),
            p99_us: worst(|s| s.p99_us),
            wrong: (!wrongs.is_empty()).then(|| wrongs.iter().sum()),
            cv_pct: cv_pct(&bus),
            outlier_runs,
        });
    }
    sizes
}

/// The ranks slower than their run's median by more than `max_rank_skew_pct` at some size, and
/// whether any run had per-rank times at all.
fn find_outlier_ranks(inp: &Inputs) -> (Vec<OutlierRank>, bool) {
    let t = &inp.thresholds;
    let mut ranks: BTreeMap<(String, usize), OutlierRank> = BTreeMap::new();
    let mut rank_data = false;
    for run in &inp.runs {
        for r in &run.rows {
            for x in [r.out_of_place.as_ref(), r.in_place.as_ref()]
                .into_iter()
                .flatten()
            {
                if x.per_process_mean_us.len() < 2 {
                    continue;
                }
                rank_data = true;
                let med = median(&x.per_process_mean_us);
                for (i, v) in x.per_process_mean_us.iter().enumerate() {
                    let skew = (v / med - 1.0) * 100.0;
                    if skew > t.max_rank_skew_pct {
                        let e = ranks
                            .entry((run.file.clone(), i))
                            .or_insert_with(|| OutlierRank {
                                file: run.file.clone(),
                                rank: i,
                                host: run
                                    .devices
                                    .iter()
                                    .find(|d| d.rank as usize == i)
                                    .map(|d| d.host.clone()),
                                sizes: 0,
                                worst_skew_pct: 0.0,
                            });
                        e.sizes += 1;
                        e.worst_skew_pct = e.worst_skew_pct.max(skew);
                    }
                }
            }
        }
    }
    (ranks.into_values().collect(), rank_data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cv_is_the_population_deviation_over_the_mean() {
        // mean 100, deviations ±10 → σ = 10 → 10 %.
        assert!((cv_pct(&[90.0, 110.0]).unwrap() - 10.0).abs() < 1e-9);
        assert_eq!(cv_pct(&[5.0]), None);
    }
}
