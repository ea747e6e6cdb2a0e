//! Folding job records into per-group figures, then into the report (definitions in
//! `docs/cost-model.md`).
//!
//! Every job record lands in exactly one class, so no GPU-second is counted twice:
//!
//! | class | which records | counted as |
//! |---|---|---|
//! | live | RUNNING, PENDING, SUSPENDED | skipped (not finished) |
//! | requeued attempt | REQUEUED, PREEMPTED | waste |
//! | failed | FAILED, TIMEOUT, NODE_FAIL, OUT_OF_MEMORY, BOOT_FAIL, DEADLINE, or COMPLETED with a run summary that is not accepted | waste |
//! | cancelled | CANCELLED | neither useful nor waste (a person chose to stop it) |
//! | finished | COMPLETED otherwise | useful, minus the retry share below |
//!
//! Retry waste inside a finished job: `fabric-run` relaunched the command `retries` times; the
//! summary has the total wall time only, so the attempts are taken as equally long and
//! `retries / (retries + 1)` of the job's GPU time is waste (an estimate, labelled as such).

use std::collections::BTreeMap;

use rust_decimal::Decimal;
use rust_decimal::prelude::FromPrimitive;
use serde::Serialize;

use super::decimal::widen;
use super::{GroupBy, InputNotes, JobRecord, JobState, TagState};
use crate::cost::{self, CostBreakdown, CostFile, UsageFigures};
use fabric_proto::tag::Verdict;

/// The fewest node-hours a group needs before its drains are given per 1000 node-hours. A rate
/// per thousand from fewer than a hundred node-hours extrapolates more than tenfold: one drain
/// in the testbed's 26-second window reads as 450,000 per 1000 node-hours, true arithmetic that
/// tells a buyer nothing. Below it the report gives the count and says why there is no rate.
pub const MIN_NODE_H_FOR_RATE: u32 = 100;

fn is_zero_u64(n: &u64) -> bool {
    *n == 0
}

/// What to fold and how.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// The grouping field.
    pub group_by: GroupBy,
    /// The window `[start, end)` in Unix seconds; jobs are clipped to it. None: the span of the
    /// data (earliest start to latest end).
    pub window: Option<(i64, i64)>,
}

/// GPU time, with the part from jobs whose TRES carry no GPU kept as node time until the cost
/// file says how many GPUs a node has.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct GpuTime {
    /// GPU-seconds of jobs with `gres/gpu` in their TRES.
    pub gpu_s: u64,
    /// Node-seconds of jobs without.
    pub nogpu_node_s: u64,
}

impl GpuTime {
    fn add(&mut self, gpus: Option<u32>, nnodes: u32, secs: u64) {
        match gpus {
            Some(g) => self.gpu_s += u64::from(g) * secs,
            None => self.nogpu_node_s += u64::from(nnodes) * secs,
        }
    }
    fn merge(&mut self, o: &Self) {
        self.gpu_s += o.gpu_s;
        self.nogpu_node_s += o.nogpu_node_s;
    }
    /// GPU-seconds, counting `gpus_per_node` for jobs without GPU TRES (0 when unknown).
    pub fn resolve(&self, gpus_per_node: Option<u32>) -> u64 {
        self.gpu_s + self.nogpu_node_s * u64::from(gpus_per_node.unwrap_or(0))
    }
}

/// Seconds (as a tag's run summary writes them) to whole milliseconds; a negative, non-finite or
/// missing duration counts as 0, one past `u64` as `u64::MAX`. Sums of integers are the same in
/// any order, so the report does not depend on how jobs were split among threads.
fn ms(secs: f64) -> u64 {
    if secs.is_finite() && secs > 0.0 {
        // `as` saturates.
        (secs * 1000.0).round() as u64
    } else {
        0
    }
}

/// Running totals for one group; merge two with [`GroupAcc::merge`].
#[derive(Debug, Clone, Default)]
pub struct GroupAcc {
    /// Records seen (finished or not).
    pub records: u64,
    /// Records skipped because the job has not ended.
    pub live: u64,
    /// Finished records with a run summary (the acceptance-rate denominator).
    pub runs: u64,
    /// Accepted and on time.
    pub accepted: u64,
    /// Accepted but late.
    pub late: u64,
    /// Accepted outputs summed over accepted runs; None when no run counted outputs.
    pub outputs: Option<u64>,
    /// GPU time allocated (clipped to the window).
    pub allocated: GpuTime,
    /// GPU time of failed jobs.
    pub failed: GpuTime,
    /// GPU time of requeued or preempted attempts.
    pub requeued: GpuTime,
    /// Estimated GPU time of wrapper retries inside finished jobs.
    pub retry: GpuTime,
    /// GPU time of cancelled jobs.
    pub cancelled: GpuTime,
    /// Node-seconds allocated.
    pub node_s: u64,
    /// Sum of queue waits (start − eligible), seconds, over started jobs.
    pub wait_s: u64,
    /// Started jobs with a known eligible time.
    pub wait_n: u64,
    /// Node drains recorded in tags.
    pub drains: u64,
    /// Drains by first failing check.
    pub drain_reasons: BTreeMap<String, u64>,
    /// Drains by day (days since 1970-01-01).
    pub drains_by_day: BTreeMap<i64, u64>,
    /// Drains by day and first failing check.
    pub drains_by_day_check: BTreeMap<(i64, String), u64>,
    /// Usage by the day a job ended (for the cost over time).
    pub by_day: BTreeMap<i64, DayUsage>,
    /// Per-run median step times, seconds.
    pub step_p50_s: Vec<f32>,
    /// Per-run p95 step times, seconds.
    pub step_p95_s: Vec<f32>,
    /// Checkpoint write milliseconds over runs with a summary.
    pub ckpt_ms: u64,
    /// Wall milliseconds of those runs.
    pub run_ms: u64,
    /// Wrapper retries.
    pub retries: u64,
    /// Requeues (tag or `restart_cnt`, whichever is larger per job).
    pub requeues: u64,
    /// Jobs that spare nodes saved from a requeue (shrunk past a failed node).
    pub spares_saved: u64,
    /// Node-seconds jobs held spare nodes they then gave up (the prolog's time on each).
    pub spare_node_s: u64,
    /// The same as GPU time (the job's GPUs per node, else the cost file's), for the cost.
    pub spare: GpuTime,
    /// Jobs whose probe verdict was fail or error.
    pub verdicts: BTreeMap<Verdict, u64>,
    /// Records per state.
    pub states: BTreeMap<JobState, u64>,
    /// Records without a tag.
    pub tag_absent: u64,
    /// Records whose tag could not be decoded.
    pub tag_unreadable: u64,
    /// Earliest start seen.
    pub first_start_s: i64,
    /// Latest end seen.
    pub last_end_s: i64,
    /// Effective training time.
    pub ett: super::ett::EttAcc,
}

/// One day's share of a group's usage: the jobs that ended that day (UTC).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct DayUsage {
    /// GPU time allocated.
    pub allocated: GpuTime,
    /// GPU time wasted (failed, requeued, retries).
    pub waste: GpuTime,
    /// Accepted runs.
    pub accepted: u64,
    /// Node drains (by probe day).
    pub drains: u64,
}

impl DayUsage {
    fn merge(&mut self, o: &Self) {
        self.allocated.merge(&o.allocated);
        self.waste.merge(&o.waste);
        self.accepted += o.accepted;
        self.drains += o.drains;
    }
}

impl GroupAcc {
    fn wasted(&self) -> GpuTime {
        let mut w = self.failed;
        w.merge(&self.requeued);
        w.merge(&self.retry);
        w
    }

    /// Adds one record.
    pub fn add(&mut self, job: &JobRecord, window: Option<(i64, i64)>) {
        let (allocated, waste, accepted) = (self.allocated, self.wasted(), self.accepted);
        self.add_record(job, window);
        let end = if job.end_s > 0 {
            job.end_s
        } else {
            job.start_s + job.elapsed_s as i64
        };
        if end > 0 && !job.state.is_live() {
            let w = self.wasted();
            let d = self.by_day.entry(end.div_euclid(86_400)).or_default();
            d.allocated.gpu_s += self.allocated.gpu_s - allocated.gpu_s;
            d.allocated.nogpu_node_s += self.allocated.nogpu_node_s - allocated.nogpu_node_s;
            d.waste.gpu_s += w.gpu_s - waste.gpu_s;
            d.waste.nogpu_node_s += w.nogpu_node_s - waste.nogpu_node_s;
            d.accepted += self.accepted - accepted;
        }
    }

    fn add_record(&mut self, job: &JobRecord, window: Option<(i64, i64)>) {
        self.records += 1;
        *self.states.entry(job.state).or_insert(0) += 1;
        if job.state.is_live() {
            self.live += 1;
            return;
        }
        let secs = match window {
            None => job.elapsed_s,
            Some((w0, w1)) if job.start_s > 0 => {
                let end = if job.end_s > 0 {
                    job.end_s
                } else {
                    job.start_s + job.elapsed_s as i64
                };
                let overlap = (end.min(w1) - job.start_s.max(w0)).max(0) as u64;
                overlap.min(job.elapsed_s.max(overlap))
            }
            Some(_) => 0,
        };
        if job.start_s > 0 {
            if self.first_start_s == 0 || job.start_s < self.first_start_s {
                self.first_start_s = job.start_s;
            }
            if job.eligible_s > 0 && job.start_s >= job.eligible_s {
                self.wait_s += (job.start_s - job.eligible_s) as u64;
                self.wait_n += 1;
            }
        }
        self.last_end_s = self.last_end_s.max(job.end_s);
        self.allocated.add(job.gpus, job.nnodes, secs);
        self.node_s += u64::from(job.nnodes) * secs;
        if job.state == JobState::Resizing {
            // The allocation before a shrink: its time is the job's, its tag is the final
            // record's (counted there, once).
            return;
        }

        let tag = match &job.tag {
            TagState::Present(t) => Some(t.as_ref()),
            TagState::Absent => {
                self.tag_absent += 1;
                None
            }
            TagState::Unreadable(_) => {
                self.tag_unreadable += 1;
                None
            }
        };
        let run = tag.and_then(|t| t.run.as_ref());
        let evidence = tag.map(|t| t.fabric.clone()).unwrap_or_default();
        let ett = super::ett::JobEtt::of(job.elapsed_s, job.submit_s, run, &evidence);
        self.ett.add(ett.as_ref(), job.nnodes);
        let mut requeues = u64::from(job.restarts);
        if let Some(t) = tag {
            if let Some(sp) = &t.spares {
                self.spares_saved += u64::from(sp.saved());
                let spare_s = sp.spare_node_s.round() as u64;
                self.spare_node_s += spare_s;
                // Per node: the job's GPUs over its nodes (after the shrink, the kept ones).
                let per_node = job.gpus.map(|g| g / job.nnodes.max(1));
                self.spare.add(per_node, 1, spare_s);
            }
            if let Some(v) = t.verdict {
                *self.verdicts.entry(v).or_insert(0) += 1;
            }
            let day = t
                .probed_at
                .map_or(job.start_s, |p| p as i64)
                .div_euclid(86_400);
            for (_, reason) in &t.drained {
                self.drains += 1;
                *self.drain_reasons.entry(reason.clone()).or_insert(0) += 1;
                *self.drains_by_day.entry(day).or_insert(0) += 1;
                *self
                    .drains_by_day_check
                    .entry((day, reason.clone()))
                    .or_insert(0) += 1;
                self.by_day.entry(day).or_default().drains += 1;
            }
        }
        match job.state {
            JobState::Requeued | JobState::Preempted => {
                self.requeued.add(job.gpus, job.nnodes, secs);
                return;
            }
            JobState::Cancelled => {
                self.cancelled.add(job.gpus, job.nnodes, secs);
            }
            s if s.is_failure() => self.failed.add(job.gpus, job.nnodes, secs),
            _ => {}
        }
        if let Some(run) = run {
            self.runs += 1;
            requeues = requeues.max(run.requeues);
            self.retries += run.retries;
            if let Some(p) = run.step_p50_s {
                self.step_p50_s.push(p as f32);
            }
            if let Some(p) = run.step_p95_s {
                self.step_p95_s.push(p as f32);
            }
            self.ckpt_ms = self.ckpt_ms.saturating_add(ms(run.ckpt_total_s));
            self.run_ms = self.run_ms.saturating_add(ms(run.duration_s));
            if job.state == JobState::Completed {
                if run.accepted && run.on_time {
                    self.accepted += 1;
                    if let Some(o) = run.outputs {
                        self.outputs = Some(self.outputs.unwrap_or(0) + o);
                    }
                } else if run.accepted {
                    self.late += 1;
                } else {
                    self.failed.add(job.gpus, job.nnodes, secs);
                }
                if run.accepted && run.retries > 0 {
                    let waste = secs * run.retries / (run.retries + 1);
                    self.retry.add(job.gpus, job.nnodes, waste);
                }
            }
        }
        self.requeues += requeues;
    }

    /// Adds another accumulator's totals.
    pub fn merge(&mut self, o: GroupAcc) {
        self.records += o.records;
        self.live += o.live;
        self.runs += o.runs;
        self.accepted += o.accepted;
        self.late += o.late;
        self.outputs = match (self.outputs, o.outputs) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
        };
        self.allocated.merge(&o.allocated);
        self.failed.merge(&o.failed);
        self.requeued.merge(&o.requeued);
        self.retry.merge(&o.retry);
        self.cancelled.merge(&o.cancelled);
        self.node_s += o.node_s;
        self.wait_s += o.wait_s;
        self.wait_n += o.wait_n;
        self.drains += o.drains;
        for (k, v) in o.drain_reasons {
            *self.drain_reasons.entry(k).or_insert(0) += v;
        }
        for (k, v) in o.drains_by_day {
            *self.drains_by_day.entry(k).or_insert(0) += v;
        }
        for (k, v) in o.drains_by_day_check {
            *self.drains_by_day_check.entry(k).or_insert(0) += v;
        }
        for (k, v) in o.by_day {
            self.by_day.entry(k).or_default().merge(&v);
        }
        self.step_p50_s.extend(o.step_p50_s);
        self.step_p95_s.extend(o.step_p95_s);
        self.ckpt_ms = self.ckpt_ms.saturating_add(o.ckpt_ms);
        self.run_ms = self.run_ms.saturating_add(o.run_ms);
        self.retries += o.retries;
        self.requeues += o.requeues;
        self.spares_saved += o.spares_saved;
        self.spare_node_s += o.spare_node_s;
        self.spare.merge(&o.spare);
        for (k, v) in o.verdicts {
            *self.verdicts.entry(k).or_insert(0) += v;
        }
        for (k, v) in o.states {
            *self.states.entry(k).or_insert(0) += v;
        }
        self.tag_absent += o.tag_absent;
        self.tag_unreadable += o.tag_unreadable;
        if o.first_start_s > 0 && (self.first_start_s == 0 || o.first_start_s < self.first_start_s)
        {
            self.first_start_s = o.first_start_s;
        }
        self.last_end_s = self.last_end_s.max(o.last_end_s);
        self.ett.merge(o.ett);
    }
}

/// Accumulators for every group.
#[derive(Debug, Clone, Default)]
pub struct Acc {
    /// By group value.
    pub groups: BTreeMap<String, GroupAcc>,
}

impl Acc {
    /// Adds one record under its group.
    pub fn add(&mut self, job: JobRecord, opts: &Options) {
        let key = job.field(opts.group_by);
        match self.groups.get_mut(key) {
            Some(g) => g.add(&job, opts.window),
            None => {
                let mut g = GroupAcc::default();
                g.add(&job, opts.window);
                self.groups.insert(key.to_string(), g);
            }
        }
    }

    /// Merges per-thread accumulators.
    pub fn merge_all(accs: Vec<Acc>) -> Acc {
        let mut out = Acc::default();
        for a in accs {
            for (k, g) in a.groups {
                out.groups.entry(k).or_default().merge(g);
            }
        }
        out
    }
}

/// The report's window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Window {
    /// Start, Unix seconds.
    pub start_s: i64,
    /// End, Unix seconds.
    pub end_s: i64,
    /// Length, hours.
    pub hours: Decimal,
    /// `given` (from --start/--end) or `data` (span of the jobs).
    pub source: &'static str,
}

/// A value with the sample it was computed from.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Sampled {
    /// The value (None when the sample is empty); `-0.0` is written as `0.0`.
    #[serde(serialize_with = "unsigned_zero")]
    pub value: Option<f64>,
    /// Sample size.
    pub n: u64,
}

/// One group's figures (one column of the side-by-side table).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GroupReport {
    /// The group value (partition name...).
    pub name: String,
    /// The cost entry used, if any.
    pub cost_entry: Option<String>,
    /// Job records read.
    pub records: u64,
    /// Records skipped as not finished.
    pub live: u64,
    /// Runs judged (finished, with a run summary).
    pub runs: u64,
    /// Accepted runs (accepted and on time).
    pub accepted_runs: u64,
    /// Accepted but late.
    pub late_runs: u64,
    /// Accepted outputs, when counted.
    pub accepted_outputs: Option<u64>,
    /// `accepted_runs / runs`, percent.
    pub acceptance_rate_pct: Sampled,
    /// GPU-hours allocated in the window.
    pub allocated_gpu_h: Decimal,
    /// GPU-hours of failed jobs.
    pub failed_gpu_h: Decimal,
    /// GPU-hours of requeued or preempted attempts.
    pub requeued_gpu_h: Decimal,
    /// Estimated GPU-hours of wrapper retries.
    pub retry_gpu_h: Decimal,
    /// Failed + requeued + retry.
    pub waste_gpu_h: Decimal,
    /// Waste as a percentage of allocated GPU-hours.
    pub waste_pct: Option<Decimal>,
    /// GPU-hours of cancelled jobs.
    pub cancelled_gpu_h: Decimal,
    /// Allocated − waste.
    pub useful_gpu_h: Decimal,
    /// Installed GPU-hours (needs a cost entry).
    pub capacity_gpu_h: Option<Decimal>,
    /// Capacity − allocated (needs a cost entry).
    pub idle_gpu_h: Option<Decimal>,
    /// Useful / capacity, percent (needs a cost entry).
    pub useful_utilisation_pct: Option<Decimal>,
    /// Mean queue wait, hours.
    pub mean_queue_wait_h: Sampled,
    /// Node-hours allocated.
    pub node_h: Decimal,
    /// Node drains recorded in tags.
    pub drains: u64,
    /// Drains per 1000 allocated node-hours; `None` when the group has fewer than
    /// [`MIN_NODE_H_FOR_RATE`] node-hours (too few to carry a rate per thousand).
    pub drains_per_1000_node_h: Option<Decimal>,
    /// Drain reasons, most frequent first.
    pub top_drain_reasons: Vec<(String, u64)>,
    /// Drains per day (`YYYY-MM-DD`).
    pub drains_by_day: Vec<(String, u64)>,
    /// Drains per day and first failing check: `(YYYY-MM-DD, check, drains)`.
    pub drains_by_day_and_check: Vec<(String, String, u64)>,
    /// Cost per accepted run period by period (needs a cost entry; empty without).
    pub cost_over_time: Vec<PeriodCost>,
    /// Effective training time, time to start and to recover, failures by cause.
    pub ett: super::ett::EttReport,
    /// Median over runs of each run's median step time, seconds.
    pub step_p50_s: Sampled,
    /// Median over runs of each run's p95 step time, seconds.
    pub step_p95_s: Sampled,
    /// Checkpoint seconds / run wall seconds, percent.
    pub checkpoint_share_pct: Sampled,
    /// Wrapper retries.
    pub retries: u64,
    /// Jobs that spare nodes saved from a requeue (`--fabric-check-spares`); left out of the
    /// JSON when none.
    #[serde(skip_serializing_if = "is_zero_u64")]
    pub spares_saved: u64,
    /// Node-hours of spare nodes held (the prolog) and given back; left out when none.
    #[serde(skip_serializing_if = "Decimal::is_zero")]
    pub spare_node_h: Decimal,
    /// Slurm requeues.
    pub requeues: u64,
    /// Probe verdicts of tagged jobs.
    pub verdicts: BTreeMap<Verdict, u64>,
    /// Records per state.
    pub states: BTreeMap<JobState, u64>,
    /// Records without a tag.
    pub untagged: u64,
    /// Records with an unreadable tag.
    pub unreadable_tags: u64,
    /// True when GPU counts came from the cost file's `gpus_per_node`.
    pub gpus_from_cost_file: bool,
    /// The cost breakdown (needs a cost entry).
    pub cost: Option<CostBreakdown>,
    /// Per-run step p50 samples (for the distribution chart).
    #[serde(skip)]
    pub step_samples_s: Vec<f32>,
}

/// One period of the cost over time: the spend of its hours and the usage of the jobs that
/// ended in it, priced like the whole window (docs/cost-model.md).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PeriodCost {
    /// First day, `YYYY-MM-DD` (UTC).
    pub start: String,
    /// Length in days.
    pub days: u32,
    /// Accepted runs that ended in it.
    pub accepted_runs: u64,
    /// Total cost of the period, to the cent.
    pub total: Decimal,
    /// `total / accepted_runs`, to the cent (None when no run was accepted).
    pub per_accepted_run: Option<Decimal>,
}

/// Days per period of the cost over time: a day for windows up to two weeks, a week up to
/// half a year, 30 days beyond.
pub fn period_days(window_days: i64) -> i64 {
    match window_days {
        ..=14 => 1,
        15..=183 => 7,
        _ => 30,
    }
}

/// The whole report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// Schema id of the JSON form.
    pub schema: &'static str,
    /// The grouping field.
    pub group_by: GroupBy,
    /// The window.
    pub window: Window,
    /// Currency of the cost figures.
    pub currency: String,
    /// One entry per group value, by name.
    pub groups: Vec<GroupReport>,
    /// Whether the input was read whole.
    pub inputs: Inputs,
}

/// How well the accounting input read: `readable` is `pass` when every record was read as it
/// stands, `warn` when lines were skipped or read with trailing columns empty (the figures
/// then leave those jobs out or read them partly; `warnings` says which).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Inputs {
    /// `pass` or `warn`.
    pub readable: &'static str,
    /// Lines left out because they could not be read.
    pub skipped_lines: u64,
    /// Lines read with missing trailing columns taken as empty.
    pub padded_lines: u64,
    /// What a person should know, naming the input and the first lines.
    pub warnings: Vec<String>,
}

impl Default for Inputs {
    fn default() -> Self {
        Self {
            readable: "pass",
            skipped_lines: 0,
            padded_lines: 0,
            warnings: Vec::new(),
        }
    }
}

impl Report {
    /// Records what reading `source_name` left out or padded (see [`InputNotes`]).
    pub fn note_input(&mut self, source_name: &str, notes: &InputNotes) {
        self.inputs.skipped_lines += notes.skipped;
        self.inputs.padded_lines += notes.padded;
        for w in notes.warnings() {
            self.inputs.warnings.push(format!("{source_name}: {w}"));
        }
        if !notes.is_clean() {
            self.inputs.readable = "warn";
        }
    }
}

fn h(s: u64) -> Decimal {
    cost::gpu_s_to_h(s)
}

/// Serialises `-0.0` as `0.0`: a figure that comes to nothing has no sign.
fn unsigned_zero<S: serde::Serializer>(v: &Option<f64>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        Some(x) if *x == 0.0 => s.serialize_some(&0.0f64),
        Some(x) => s.serialize_some(x),
        None => s.serialize_none(),
    }
}

/// Sorts `v` in place (so the samples come out in the same order whatever threads read them)
/// and takes the project's median of it ([`fabric_base::stats`]), each
/// sample widened by its decimal form ([`widen`]).
fn median(v: &mut [f32]) -> Option<f64> {
    v.sort_by(f32::total_cmp);
    let wide: Vec<f64> = v.iter().map(|x| widen(*x)).collect();
    fabric_base::stats::median(&wide)
}

fn pct(num: Decimal, den: Decimal) -> Option<Decimal> {
    (!den.is_zero()).then(|| num * Decimal::from(100) / den)
}

/// Turns accumulators into the report, pricing each group with its cost entry.
pub fn finish(acc: Acc, opts: &Options, costs: Option<&CostFile>) -> Report {
    let (start_s, end_s, source) = match opts.window {
        Some((a, b)) => (a, b, "given"),
        None => {
            let a = acc
                .groups
                .values()
                .map(|g| g.first_start_s)
                .filter(|s| *s > 0)
                .min()
                .unwrap_or(0);
            let b = acc.groups.values().map(|g| g.last_end_s).max().unwrap_or(0);
            (a, b.max(a), "data")
        }
    };
    let window_h = Decimal::from(end_s - start_s) / Decimal::from(3600);
    let currency = costs.map_or_else(|| "USD".to_string(), |c| c.currency.clone());
    let groups = acc
        .groups
        .into_iter()
        .map(|(name, mut g)| {
            let entry = costs.and_then(|c| c.entry_for(&name));
            let gpn = entry.and_then(|(_, e)| e.gpus_per_node);
            let allocated_s = g.allocated.resolve(gpn);
            let waste_s = g.failed.resolve(gpn) + g.requeued.resolve(gpn) + g.retry.resolve(gpn);
            let allocated_gpu_h = h(allocated_s);
            let waste_gpu_h = h(waste_s);
            let node_h = Decimal::from(g.node_s) / Decimal::from(3600);
            let cost = entry.map(|(_, e)| {
                cost::compute(
                    &currency,
                    e,
                    window_h,
                    &UsageFigures {
                        allocated_gpu_s: allocated_s,
                        waste_gpu_s: waste_s,
                        drains: g.drains,
                        accepted_runs: g.accepted,
                        accepted_outputs: g.outputs,
                        spare_gpu_s: g.spare.resolve(gpn),
                    },
                )
            });
            let cost_over_time = entry
                .map(|(_, e)| cost_over_time(&currency, e, &g.by_day, start_s, end_s, gpn))
                .unwrap_or_default();
            let mut reasons: Vec<(String, u64)> = g.drain_reasons.into_iter().collect();
            reasons.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
            let n50 = g.step_p50_s.len() as u64;
            // Sorted by the median: the samples come out in the same order whatever threads
            // read them.
            let p50 = median(&mut g.step_p50_s);
            let step_samples_s = g.step_p50_s.clone();
            let n95 = g.step_p95_s.len() as u64;
            GroupReport {
                cost_entry: entry.map(|(n, _)| n.to_string()),
                records: g.records,
                live: g.live,
                runs: g.runs,
                accepted_runs: g.accepted,
                late_runs: g.late,
                accepted_outputs: g.outputs,
                acceptance_rate_pct: Sampled {
                    value: (g.runs > 0).then(|| g.accepted as f64 * 100.0 / g.runs as f64),
                    n: g.runs,
                },
                allocated_gpu_h,
                failed_gpu_h: h(g.failed.resolve(gpn)),
                requeued_gpu_h: h(g.requeued.resolve(gpn)),
                retry_gpu_h: h(g.retry.resolve(gpn)),
                waste_gpu_h,
                waste_pct: pct(waste_gpu_h, allocated_gpu_h),
                cancelled_gpu_h: h(g.cancelled.resolve(gpn)),
                useful_gpu_h: (allocated_gpu_h - waste_gpu_h).max(Decimal::ZERO),
                capacity_gpu_h: cost.as_ref().map(|c| c.capacity_gpu_h),
                idle_gpu_h: cost.as_ref().map(|c| c.idle_gpu_h),
                useful_utilisation_pct: cost
                    .as_ref()
                    .and_then(|c| pct(c.useful_gpu_h, c.capacity_gpu_h)),
                mean_queue_wait_h: Sampled {
                    value: (g.wait_n > 0).then(|| g.wait_s as f64 / g.wait_n as f64 / 3600.0),
                    n: g.wait_n,
                },
                node_h,
                drains: g.drains,
                drains_per_1000_node_h: (node_h >= Decimal::from(MIN_NODE_H_FOR_RATE))
                    .then(|| Decimal::from(g.drains) * Decimal::from(1000) / node_h),
                top_drain_reasons: reasons,
                drains_by_day: g
                    .drains_by_day
                    .into_iter()
                    .map(|(d, n)| (super::sacct_text::utc_date(d), n))
                    .collect(),
                drains_by_day_and_check: g
                    .drains_by_day_check
                    .into_iter()
                    .map(|((d, c), n)| (super::sacct_text::utc_date(d), c, n))
                    .collect(),
                cost_over_time,
                ett: std::mem::take(&mut g.ett).finish(),
                step_p50_s: Sampled { value: p50, n: n50 },
                step_p95_s: Sampled {
                    value: median(&mut g.step_p95_s),
                    n: n95,
                },
                checkpoint_share_pct: Sampled {
                    value: (g.run_ms > 0).then(|| g.ckpt_ms as f64 * 100.0 / g.run_ms as f64),
                    n: g.runs,
                },
                retries: g.retries,
                spares_saved: g.spares_saved,
                spare_node_h: Decimal::from(g.spare_node_s) / Decimal::from(3600),
                requeues: g.requeues,
                verdicts: g.verdicts,
                states: g.states,
                untagged: g.tag_absent,
                unreadable_tags: g.tag_unreadable,
                gpus_from_cost_file: g.allocated.nogpu_node_s > 0 && gpn.is_some(),
                cost,
                step_samples_s,
                name,
            }
        })
        .collect();
    Report {
        schema: "fabric-check/report/v1",
        group_by: opts.group_by,
        window: Window {
            start_s,
            end_s,
            hours: window_h,
            source,
        },
        currency,
        groups,
        inputs: Inputs::default(),
    }
}

/// The window cut into [`period_days`] periods (the last one may be shorter), each priced with
/// the entry over its own hours and the usage of the jobs that ended in it.
fn cost_over_time(
    currency: &str,
    entry: &cost::FabricCost,
    by_day: &BTreeMap<i64, DayUsage>,
    start_s: i64,
    end_s: i64,
    gpus_per_node: Option<u32>,
) -> Vec<PeriodCost> {
    if end_s <= start_s {
        return Vec::new();
    }
    let (d0, d1) = (start_s.div_euclid(86_400), (end_s - 1).div_euclid(86_400));
    let step = period_days(d1 - d0 + 1);
    let mut out = Vec::new();
    let mut p0 = d0;
    while p0 <= d1 {
        let p1 = (p0 + step - 1).min(d1);
        let mut u = DayUsage::default();
        for (_, d) in by_day.range(p0..=p1) {
            u.merge(d);
        }
        // The period's hours inside the window.
        let from = (p0 * 86_400).max(start_s);
        let to = ((p1 + 1) * 86_400).min(end_s);
        let hours = Decimal::from(to - from) / Decimal::from(3600);
        let c = cost::compute(
            currency,
            entry,
            hours,
            &UsageFigures {
                allocated_gpu_s: u.allocated.resolve(gpus_per_node),
                waste_gpu_s: u.waste.resolve(gpus_per_node),
                drains: u.drains,
                accepted_runs: u.accepted,
                accepted_outputs: None,
                spare_gpu_s: 0,
            },
        );
        out.push(PeriodCost {
            start: super::sacct_text::utc_date(p0),
            days: (p1 - p0 + 1) as u32,
            accepted_runs: u.accepted,
            total: c.total.round_dp(2).normalize(),
            per_accepted_run: c.per_accepted_run.map(|d| d.round_dp(2).normalize()),
        });
        p0 = p1 + 1;
    }
    out
}

/// Converts a float to a Decimal for display arithmetic (None for non-finite).
pub fn dec(v: f64) -> Option<Decimal> {
    Decimal::from_f64(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_become_whole_milliseconds_and_odd_ones_count_as_none() {
        assert_eq!(ms(1.2345), 1235);
        assert_eq!(ms(0.0004), 0);
        assert_eq!(ms(-3.0), 0);
        assert_eq!(ms(f64::NAN), 0);
        assert_eq!(ms(f64::INFINITY), 0);
        assert_eq!(ms(1e300), u64::MAX);
        // 0.1 + 0.2 in any order: the same integer.
        assert_eq!(ms(0.1) + ms(0.2), ms(0.2) + ms(0.1));
        assert_eq!(ms(0.1) + ms(0.2), 300);
    }

    #[test]
    fn a_job_saved_by_spares_is_counted_once_with_its_spare_node_seconds_and_its_resize_record_adds_only_time()
     {
        let tag = super::super::tag_state(
            r#"fabric-check/v1 {"verdict":"fail","nnodes":4,"nodes":{"n3":{"verdict":"fail","checks":["ib.port_state"],"drained":true}},"spares":{"asked":1,"kept":"n[1-2,4]","outcome":"shrunk","failed":[{"node":"n3","checks":["ib.port_state"]}],"spare_node_s":2.4}}"#,
        );
        let rec = |state, nnodes, start_s, end_s| JobRecord {
            job_id: "7".into(),
            partition: "p".into(),
            account: String::new(),
            user: "u".into(),
            cluster: "c".into(),
            qos: String::new(),
            state,
            submit_s: 100,
            eligible_s: 100,
            start_s,
            end_s,
            elapsed_s: (end_s - start_s) as u64,
            nnodes,
            gpus: None,
            restarts: 0,
            tag: tag.clone(),
            detail: None,
        };
        let mut g = GroupAcc::default();
        g.add(&rec(JobState::Resizing, 4, 100, 102), None);
        g.add(&rec(JobState::Completed, 3, 102, 112), None);
        assert_eq!(g.spares_saved, 1);
        assert_eq!(g.spare_node_s, 2);
        assert_eq!(g.drains, 1, "the tag's drain counts once");
        assert_eq!(g.node_s, 4 * 2 + 3 * 10, "both records' node time");
        assert_eq!(g.requeues, 0);
        // Without GPU TRES the spare time waits for the cost file's GPUs per node.
        assert_eq!(g.spare.resolve(Some(8)), 2 * 8);
    }

    #[test]
    fn the_spare_nodes_hold_is_priced_as_a_share_of_capacity_and_only_where_jobs_used_spares() {
        let file = CostFile::parse(
            "[fabric.p]\ngpus = 16\ngpus_per_node = 8\n[fabric.p.running]\nrack_power_and_space = 16\n",
            "cost.toml",
        )
        .unwrap();
        let entry = &file.fabric["p"];
        let usage = |spare_gpu_s| UsageFigures {
            allocated_gpu_s: 3600,
            spare_gpu_s,
            ..UsageFigures::default()
        };
        // 16 per hour over 16 GPUs: 1 per GPU-hour; 2 spare node-seconds × 8 GPUs = 16 GPU-s.
        let b = cost::compute("USD", entry, Decimal::from(1), &usage(16));
        let line = b
            .lines
            .iter()
            .find(|l| l.item == "spare_nodes_held")
            .unwrap();
        assert_eq!(line.kind, "share");
        assert_eq!(line.amount, Decimal::from(16) / Decimal::from(3600));
        let b = cost::compute("USD", entry, Decimal::from(1), &usage(0));
        assert!(b.lines.iter().all(|l| l.item != "spare_nodes_held"));
    }

    #[test]
    fn day_numbers_round_trip_to_dates() {
        use super::super::sacct_text::{parse_time, utc_date};
        assert_eq!(utc_date(0), "1970-01-01");
        assert_eq!(utc_date(19_844), "2024-05-01");
        assert_eq!(utc_date(-1), "1969-12-31");
        assert_eq!(parse_time("2024-05-01T00:00:00").unwrap() / 86_400, 19_844);
    }
}

#[cfg(test)]
mod float_tests {
    use super::*;

    #[test]
    fn f32_samples_widen_to_their_decimal_form() {
        assert_ne!(f64::from(1.2f32), 1.2, "the noise this avoids");
        assert_eq!(widen(1.2f32), 1.2);
        assert_eq!(widen(0.1f32).to_string(), "0.1");
        assert_eq!(median(&mut [1.2, 3.4, 2.2]), Some(2.2));
        assert_eq!(median(&mut [1.2, 1.4]), Some((1.2 + 1.4) / 2.0));
    }

    #[test]
    fn negative_zero_is_written_without_its_sign() {
        let z = Sampled {
            value: Some(-0.0),
            n: 3,
        };
        assert_eq!(serde_json::to_string(&z).unwrap(), r#"{"value":0.0,"n":3}"#);
        let neg = Sampled {
            value: Some(-2.5),
            n: 1,
        };
        assert_eq!(
            serde_json::to_string(&neg).unwrap(),
            r#"{"value":-2.5,"n":1}"#
        );
    }
}
