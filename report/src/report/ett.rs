//! Effective training time, in the terms buyers compare clusters by (definitions and sources in
//! `docs/cost-model.md`, "Effective training time"): per job ([`JobEtt`], from the job's
//! accounting times and the tag's run summary) and per group ([`EttAcc`] → [`EttReport`]).
//!
//! A job without `fabric-run` records (no run summary, or one written before the summary carried
//! [`fabric_proto::tag::EttFacts`]) is **not measured**: it adds to
//! [`EttReport::jobs_not_measured`], never a zero to any figure.

use serde::{Serialize, Serializer};

use fabric_proto::tag::{RunSummary, Verdict};

/// How long after a failure a fabric fault seen by the watch still counts as its cause: the
/// watch polls every few seconds, and NCCL's own detection of a dead link takes about 34 s.
pub const FAULT_GRACE_S: f64 = 60.0;

/// What a figure that could not be measured is written as, in every form.
pub const NOT_MEASURED: &str = "not measured";

/// Writes `None` as [`NOT_MEASURED`], never as `0` or `null`.
pub fn measured<S: Serializer, T: Serialize>(v: &Option<T>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        Some(x) => x.serialize(s),
        None => s.serialize_str(NOT_MEASURED),
    }
}

/// What the tag says about the fabric during the job: the times (Unix seconds) of the in-job
/// watch's `fail` findings on the job's nodes, and whether the job's tag judged the fabric
/// `fail` (its probe, or the epilog's judgement of the counters during the job).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FabricEvidence {
    /// `seen_at_s` of each `fail` watch event of the tag's `during`.
    pub fault_times_s: Vec<u64>,
    /// The tag's verdict is `fail`, or a `during` entry's is.
    pub judged_fail: bool,
}

impl FabricEvidence {
    /// The evidence in a tag's verdict and `during` entries.
    pub fn of(verdict: Option<Verdict>, during: &[fabric_proto::tag::DuringJob]) -> Self {
        Self {
            fault_times_s: during
                .iter()
                .flat_map(|d| d.watch.iter())
                .filter(|e| !e.warn)
                .map(|e| e.seen_at_s)
                .collect(),
            judged_fail: verdict == Some(Verdict::Fail)
                || during.iter().any(|d| d.verdict == Verdict::Fail),
        }
    }
}

/// What caused a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Cause {
    /// A fabric fault: see [`JobEtt::of`].
    Fabric,
    /// Anything else.
    Other,
}

/// One failure of a job.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Failure {
    /// When it failed, Unix seconds.
    pub at_s: f64,
    /// From the failure to the first step after the restore, seconds.
    #[serde(serialize_with = "measured")]
    pub recover_s: Option<f64>,
    /// Steps since the last checkpoint, lost.
    pub lost_steps: u64,
    /// Their step time, seconds.
    pub lost_s: f64,
    /// Its cause.
    pub cause: Cause,
}

/// One job's effective-training-time figures.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JobEtt {
    /// Step time whose progress was kept, over the allocation's elapsed time, in percent.
    #[serde(serialize_with = "measured")]
    pub ett_pct: Option<f64>,
    /// Step time whose progress was kept, seconds.
    pub kept_s: f64,
    /// Allocation (elapsed) seconds.
    pub allocation_s: u64,
    /// From submission (queue wait, prolog, start-up) to the first step, seconds.
    #[serde(serialize_with = "measured")]
    pub time_to_start_s: Option<f64>,
    /// Failures counted (the list holds the first 16).
    pub failures_n: u64,
    /// Of which a fabric fault caused.
    pub fabric_failures: u64,
    /// Steps lost at failures (since the last checkpoint), over the listed failures.
    pub lost_steps: u64,
    /// Their step time, seconds (over all failures).
    pub lost_s: f64,
    /// The failures.
    pub failures: Vec<Failure>,
}

impl JobEtt {
    /// The figures of a job that ran `allocation_s` seconds after being submitted at `submit_s`
    /// (0: unknown), from its run summary; `None` (not measured) without one that carries the
    /// timeline. A failure is the fabric's when `fabric-run` saw the watch's fault notice in the
    /// failed attempt, or the watch saw a `fail` on one of the job's nodes after the failure
    /// before it and at most [`FAULT_GRACE_S`] after this one, or, for the job's last failure,
    /// when the tag judged the fabric `fail`.
    pub fn of(
        allocation_s: u64,
        submit_s: i64,
        run: Option<&RunSummary>,
        evidence: &FabricEvidence,
    ) -> Option<Self> {
        let facts = run?.ett.as_ref()?;
        let mut prev = f64::NEG_INFINITY;
        let last = facts.failures.len().saturating_sub(1);
        let failures: Vec<Failure> = facts
            .failures
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let seen = evidence
                    .fault_times_s
                    .iter()
                    .any(|&t| (t as f64) > prev && (t as f64) <= f.at_s + FAULT_GRACE_S);
                let fabric = f.fabric_notice
                    || seen
                    || (i == last && facts.failures_n as usize == i + 1 && evidence.judged_fail);
                prev = f.at_s;
                Failure {
                    at_s: f.at_s,
                    recover_s: f.recover_s,
                    lost_steps: f.lost_steps,
                    lost_s: f.lost_s,
                    cause: if fabric { Cause::Fabric } else { Cause::Other },
                }
            })
            .collect();
        Some(Self {
            ett_pct: (allocation_s > 0)
                .then(|| (facts.kept_s / allocation_s as f64 * 100.0).min(100.0)),
            kept_s: facts.kept_s,
            allocation_s,
            time_to_start_s: facts
                .first_step_at_s
                .filter(|_| submit_s > 0)
                .map(|t| (t - submit_s as f64).max(0.0)),
            failures_n: facts.failures_n,
            fabric_failures: failures.iter().filter(|f| f.cause == Cause::Fabric).count() as u64,
            lost_steps: failures.iter().map(|f| f.lost_steps).sum(),
            lost_s: facts.lost_s,
            failures,
        })
    }

    /// The `jobs` table's cell: `ETT 87.5%, 2 failures (1 fabric)`, or [`NOT_MEASURED`].
    pub fn cell(ett: Option<&Self>) -> String {
        let Some(e) = ett else {
            return format!("ETT {NOT_MEASURED}");
        };
        let mut s = match e.ett_pct {
            Some(p) => format!("ETT {p:.1}%"),
            None => format!("ETT {NOT_MEASURED}"),
        };
        if e.failures_n > 0 {
            s.push_str(&format!(
                ", {} failure{} ({} fabric)",
                e.failures_n,
                if e.failures_n == 1 { "" } else { "s" },
                e.fabric_failures
            ));
        }
        s
    }
}

/// A group's effective-training-time sums, mergeable across threads. Time sums are
/// node-seconds: a job on more nodes weighs more.
#[derive(Debug, Clone, Default)]
pub struct EttAcc {
    /// Finished jobs with a timeline.
    pub measured: u64,
    /// Finished jobs without one.
    pub not_measured: u64,
    /// Σ kept step time × nodes.
    pub kept_node_s: f64,
    /// Σ elapsed × nodes, of the measured jobs.
    pub alloc_node_s: f64,
    /// Σ (lost step time + time to recover) × nodes, of fabric-caused failures.
    pub fabric_lost_node_s: f64,
    /// Σ lost step time × nodes.
    pub lost_node_s: f64,
    /// Steps lost.
    pub lost_steps: u64,
    /// Failures.
    pub failures: u64,
    /// Of which the fabric's.
    pub fabric_failures: u64,
    /// Time to start of each measured job that has one, seconds.
    pub start_s: Vec<f32>,
    /// Time to recover of each failure that recovered, seconds.
    pub recover_s: Vec<f32>,
}

impl EttAcc {
    /// Adds a finished job on `nnodes` nodes.
    pub fn add(&mut self, ett: Option<&JobEtt>, nnodes: u32) {
        let Some(e) = ett else {
            self.not_measured += 1;
            return;
        };
        let n = f64::from(nnodes.max(1));
        self.measured += 1;
        self.kept_node_s += e.kept_s * n;
        self.alloc_node_s += e.allocation_s as f64 * n;
        self.lost_node_s += e.lost_s * n;
        self.lost_steps += e.lost_steps;
        self.failures += e.failures_n;
        self.fabric_failures += e.fabric_failures;
        for f in e.failures.iter().filter(|f| f.cause == Cause::Fabric) {
            self.fabric_lost_node_s += (f.lost_s + f.recover_s.unwrap_or(0.0)) * n;
        }
        self.start_s.extend(e.time_to_start_s.map(|s| s as f32));
        self.recover_s.extend(
            e.failures
                .iter()
                .filter_map(|f| f.recover_s.map(|s| s as f32)),
        );
    }

    /// Adds another accumulator's sums.
    pub fn merge(&mut self, o: EttAcc) {
        self.measured += o.measured;
        self.not_measured += o.not_measured;
        self.kept_node_s += o.kept_node_s;
        self.alloc_node_s += o.alloc_node_s;
        self.fabric_lost_node_s += o.fabric_lost_node_s;
        self.lost_node_s += o.lost_node_s;
        self.lost_steps += o.lost_steps;
        self.failures += o.failures;
        self.fabric_failures += o.fabric_failures;
        self.start_s.extend(o.start_s);
        self.recover_s.extend(o.recover_s);
    }

    /// The group's figures: each [`NOT_MEASURED`] when no job of the group was.
    pub fn finish(mut self) -> EttReport {
        let some = self.measured > 0;
        let pct = |num: f64, den: f64| (den > 0.0).then(|| num / den * 100.0);
        let median = |v: &mut Vec<f32>| {
            v.sort_by(f32::total_cmp);
            let wide: Vec<f64> = v.iter().map(|x| super::decimal::widen(*x)).collect();
            fabric_base::stats::median(&wide)
        };
        EttReport {
            jobs_measured: self.measured,
            jobs_not_measured: self.not_measured,
            ett_pct: pct(self.kept_node_s, self.alloc_node_s).filter(|_| some),
            time_to_start_p50_s: median(&mut self.start_s),
            time_to_start_n: self.start_s.len() as u64,
            time_to_recover_p50_s: median(&mut self.recover_s),
            time_to_recover_n: self.recover_s.len() as u64,
            failures: some.then_some(self.failures),
            fabric_failures: some.then_some(self.fabric_failures),
            other_failures: some.then_some(self.failures - self.fabric_failures),
            fabric_failure_share_pct: pct(self.fabric_failures as f64, self.failures as f64),
            lost_steps: some.then_some(self.lost_steps),
            lost_node_h: some.then_some(self.lost_node_s / 3600.0),
            fabric_lost_pct: pct(self.fabric_lost_node_s, self.alloc_node_s).filter(|_| some),
        }
    }
}

/// A group's effective-training-time figures (`ett` of each group in the report's JSON).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EttReport {
    /// Finished jobs with `fabric-run` records.
    pub jobs_measured: u64,
    /// Finished jobs without.
    pub jobs_not_measured: u64,
    /// Σ kept step node-time over Σ allocated node-time of the measured jobs, percent.
    #[serde(serialize_with = "measured")]
    pub ett_pct: Option<f64>,
    /// Median time to start, seconds.
    #[serde(serialize_with = "measured")]
    pub time_to_start_p50_s: Option<f64>,
    /// Jobs in that median.
    pub time_to_start_n: u64,
    /// Median time to recover after a failure, seconds.
    #[serde(serialize_with = "measured")]
    pub time_to_recover_p50_s: Option<f64>,
    /// Failures in that median (those that recovered).
    pub time_to_recover_n: u64,
    /// Failures.
    #[serde(serialize_with = "measured")]
    pub failures: Option<u64>,
    /// Of which a fabric fault caused.
    #[serde(serialize_with = "measured")]
    pub fabric_failures: Option<u64>,
    /// Of which anything else.
    #[serde(serialize_with = "measured")]
    pub other_failures: Option<u64>,
    /// Fabric failures over failures, percent.
    #[serde(serialize_with = "measured")]
    pub fabric_failure_share_pct: Option<f64>,
    /// Steps lost at failures.
    #[serde(serialize_with = "measured")]
    pub lost_steps: Option<u64>,
    /// Their step node-hours.
    #[serde(serialize_with = "measured")]
    pub lost_node_h: Option<f64>,
    /// Node-time lost to fabric failures (lost steps and time to recover) over allocated
    /// node-time, percent.
    #[serde(serialize_with = "measured")]
    pub fabric_lost_pct: Option<f64>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use fabric_proto::tag::{EttFacts, RunFailure};

    fn run(facts: EttFacts) -> RunSummary {
        RunSummary {
            ett: Some(facts),
            ..RunSummary::default()
        }
    }

    fn failure(at_s: f64, recover_s: Option<f64>, lost_steps: u64, lost_s: f64) -> RunFailure {
        RunFailure {
            at_s,
            recover_s,
            lost_steps,
            lost_s,
            fabric_notice: false,
        }
    }

    fn two_failures() -> RunSummary {
        run(EttFacts {
            first_step_at_s: Some(1_150.0),
            kept_s: 800.0,
            lost_s: 60.0,
            failures_n: 2,
            failures: vec![
                failure(1_400.0, Some(90.0), 4, 40.0),
                failure(1_700.0, Some(30.0), 2, 20.0),
            ],
        })
    }

    #[test]
    fn effective_training_time_is_the_kept_step_time_over_the_allocation() {
        let e = JobEtt::of(
            1_000,
            1_000,
            Some(&two_failures()),
            &FabricEvidence::default(),
        )
        .unwrap();
        assert_eq!(e.ett_pct, Some(80.0));
        assert_eq!(e.time_to_start_s, Some(150.0));
        assert_eq!((e.failures_n, e.lost_steps, e.lost_s), (2, 6, 60.0));
        assert_eq!(e.failures[0].recover_s, Some(90.0));
    }

    #[test]
    fn a_failure_after_a_watch_fault_on_the_jobs_nodes_is_the_fabrics_and_the_other_is_not() {
        let evidence = FabricEvidence {
            fault_times_s: vec![1_380],
            judged_fail: false,
        };
        let e = JobEtt::of(1_000, 1_000, Some(&two_failures()), &evidence).unwrap();
        let causes: Vec<Cause> = e.failures.iter().map(|f| f.cause).collect();
        assert_eq!(causes, [Cause::Fabric, Cause::Other]);
        assert_eq!(e.fabric_failures, 1);
    }

    #[test]
    fn a_fault_seen_long_after_a_failure_is_not_its_cause_but_a_fail_verdict_is_the_last_ones() {
        let late = FabricEvidence {
            fault_times_s: vec![1_400 + 61],
            judged_fail: false,
        };
        let e = JobEtt::of(1_000, 1_000, Some(&two_failures()), &late).unwrap();
        // 1461 is after the first failure's grace, and within the second's window.
        let causes: Vec<Cause> = e.failures.iter().map(|f| f.cause).collect();
        assert_eq!(causes, [Cause::Other, Cause::Fabric]);
        let judged = FabricEvidence {
            fault_times_s: vec![],
            judged_fail: true,
        };
        let e = JobEtt::of(1_000, 1_000, Some(&two_failures()), &judged).unwrap();
        let causes: Vec<Cause> = e.failures.iter().map(|f| f.cause).collect();
        assert_eq!(causes, [Cause::Other, Cause::Fabric]);
    }

    #[test]
    fn a_failure_whose_attempt_saw_the_watchs_notice_is_the_fabrics() {
        let mut r = two_failures();
        r.ett.as_mut().unwrap().failures[1].fabric_notice = true;
        let e = JobEtt::of(1_000, 0, Some(&r), &FabricEvidence::default()).unwrap();
        assert_eq!(e.failures[1].cause, Cause::Fabric);
        assert_eq!(e.time_to_start_s, None, "no submit time, no time to start");
    }

    #[test]
    fn a_job_without_records_is_not_measured_and_says_so_never_zero() {
        assert_eq!(JobEtt::of(1_000, 1, None, &FabricEvidence::default()), None);
        let old = RunSummary::default();
        assert_eq!(
            JobEtt::of(1_000, 1, Some(&old), &FabricEvidence::default()),
            None
        );
        assert_eq!(JobEtt::cell(None), "ETT not measured");
        let mut acc = EttAcc::default();
        acc.add(None, 4);
        let r = acc.finish();
        assert_eq!(r.jobs_not_measured, 1);
        let json = serde_json::to_value(&r).unwrap();
        for k in [
            "ett_pct",
            "failures",
            "fabric_failure_share_pct",
            "time_to_start_p50_s",
        ] {
            assert_eq!(json[k], NOT_MEASURED, "{k}: {json}");
        }
    }

    #[test]
    fn a_groups_figures_weigh_each_job_by_its_nodes_and_share_the_failures_by_cause() {
        let evidence = FabricEvidence {
            fault_times_s: vec![1_380],
            judged_fail: false,
        };
        let a = JobEtt::of(1_000, 1_000, Some(&two_failures()), &evidence).unwrap();
        let clean = run(EttFacts {
            first_step_at_s: Some(1_050.0),
            kept_s: 1_000.0,
            ..EttFacts::default()
        });
        let b = JobEtt::of(1_000, 1_000, Some(&clean), &evidence).unwrap();
        let mut acc = EttAcc::default();
        acc.add(Some(&a), 3);
        acc.add(Some(&b), 1);
        acc.add(None, 8);
        let r = acc.finish();
        // (800·3 + 1000·1) / (1000·3 + 1000·1) = 85 %
        assert_eq!(r.ett_pct, Some(85.0));
        assert_eq!(
            (r.failures, r.fabric_failures, r.other_failures),
            (Some(2), Some(1), Some(1))
        );
        assert_eq!(r.fabric_failure_share_pct, Some(50.0));
        // The fabric's failure: (40 s lost + 90 s to recover) · 3 nodes of 4000 node-s.
        assert_eq!(r.fabric_lost_pct, Some(9.75));
        assert_eq!(r.time_to_start_p50_s, Some(100.0));
        assert_eq!(r.time_to_recover_p50_s, Some(60.0));
        assert_eq!((r.jobs_measured, r.jobs_not_measured), (2, 1));
    }
}
