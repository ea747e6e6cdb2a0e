//! The drill's scores, computed from the rounds' outcomes alone (pure; unit-tested on fakes).
//!
//! - An **injection** is a round of a fault class (not a control) whose fault was injected.
//! - It is **detected** when some detector signalled its node (a warn or fail verdict, or a
//!   drain) at or after the injection (Slurm's whole-second times count at the end of their
//!   second, [`CLOCK_SLACK_MS`]). Its **time to detect** runs from the injection to the first such signal, and the
//!   **detector** is that signal's.
//! - Every signal on another node of the round, or on the node of a control round, is a **false
//!   positive** (counted once per round and node); a false positive that is a drain is a **false
//!   drain**.
//! - **Recall** = detected / injections; **precision** = detected / (detected + false positives).
//! - The job's cost: requeues, step time against the clean rounds' median, checkpoint time
//!   under `fabric-run`, and GPU-hours lost (the node-time of jobs that did not complete, times
//!   the GPUs per node) at the cost file's capacity price per GPU-hour.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::class::{FaultClass, Moment};
use crate::grade::{ClassCurve, GradedSummary, Size, SizePoint};
use crate::observe::{Detector, Signal, Strength};
use crate::plan::Round;

/// A signal this long before the injection still counts. Zero: signals read from Slurm's
/// whole-second times are placed at the end of their second ([`crate::observe::tag_signals`]),
/// so none lands before the event it reports.
pub const CLOCK_SLACK_MS: u64 = 0;

/// What the job of a round cost and measured.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct JobCost {
    /// The job id.
    pub id: u32,
    /// Final state.
    pub state: String,
    /// Slurm requeues (a prolog that drained its node requeues the job).
    pub requeues: u32,
    /// Elapsed seconds of the job.
    pub elapsed_s: f64,
    /// Nodes.
    pub nnodes: u32,
    /// `fabric-run`'s median step time, when the job ran under it.
    pub step_p50_s: Option<f64>,
    /// `fabric-run`'s checkpoint seconds.
    pub ckpt_total_s: Option<f64>,
    /// `fabric-run`'s retries.
    pub retries: u64,
    /// Whether the job completed (exit 0, not cancelled by the drill).
    pub completed: bool,
}

/// One round as it happened.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RoundOutcome {
    /// The planned round.
    pub round: Round,
    /// When the fault was injected (for controls: when the round's load began), Unix ms;
    /// `None` when the injection failed.
    pub injected_at_ms: Option<u64>,
    /// Every signal seen during the round, on any node.
    pub signals: Vec<Signal>,
    /// The round's job.
    pub job: Option<JobCost>,
    /// Why the round could not run as planned.
    pub error: Option<String>,
    /// A graded `congestion` round: the share of its peers' bandwidth its node's path carried
    /// through the cap, measured, percent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured_pct: Option<f64>,
}

/// Time-to-detect figures, seconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Ttd {
    /// Median.
    pub p50_s: Option<f64>,
    /// 95th percentile.
    pub p95_s: Option<f64>,
    /// Largest.
    pub max_s: Option<f64>,
    /// Every sample, for the charts.
    pub samples_s: Vec<f64>,
}

impl Ttd {
    fn of(mut samples: Vec<f64>) -> Ttd {
        samples.sort_by(f64::total_cmp);
        Ttd {
            p50_s: fabric_base::stats::percentile_of_sorted(&samples, 50.0),
            p95_s: fabric_base::stats::percentile_of_sorted(&samples, 95.0),
            max_s: samples.last().copied(),
            samples_s: samples,
        }
    }
}

/// The scores of one class.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ClassScore {
    /// Class id.
    pub class: String,
    /// A control (must not drain).
    pub control: bool,
    /// Rounds run.
    pub rounds: usize,
    /// Injections (0 for controls).
    pub injections: usize,
    /// Injections detected.
    pub detected: usize,
    /// Of those, the faulted node drained.
    pub drained: usize,
    /// detected / injections.
    pub recall: Option<f64>,
    /// detected / (detected + false positives).
    pub precision: Option<f64>,
    /// Signals on nodes without a fault.
    pub false_positives: usize,
    /// Drains of nodes without a fault.
    pub false_drains: usize,
    /// Time to detect.
    pub ttd: Ttd,
    /// Detections per detector.
    pub detectors: BTreeMap<String, usize>,
    /// Injections missed, per moment.
    pub missed_at: BTreeMap<String, usize>,
    /// Rounds per moment.
    pub moments: BTreeMap<String, usize>,
    /// Requeues of the rounds' jobs.
    pub requeues: u32,
    /// Median step time of the rounds' `fabric-run` jobs minus the clean rounds' median, seconds.
    pub step_time_change_s: Option<f64>,
    /// Checkpoint seconds of the rounds' `fabric-run` jobs, median.
    pub ckpt_p50_s: Option<f64>,
    /// GPU-hours lost (jobs that did not complete).
    pub gpu_h_lost: f64,
    /// Their cost at the cost file's price, when one was given.
    pub cost_lost: Option<f64>,
    /// Rounds that could not run as planned.
    pub errors: usize,
}

/// The whole drill's scores.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Scores {
    /// Schema id.
    pub schema: String,
    /// The plan's seed.
    pub seed: u64,
    /// Fault classes injected at least once.
    pub classes: usize,
    /// Injections.
    pub injections: usize,
    /// Detected.
    pub detected: usize,
    /// Control rounds.
    pub controls: usize,
    /// Overall recall.
    pub recall: Option<f64>,
    /// Overall precision.
    pub precision: Option<f64>,
    /// False positives.
    pub false_positives: usize,
    /// False drains.
    pub false_drains: usize,
    /// Time to detect over every detected injection.
    pub ttd: Ttd,
    /// Time to detect by the moment of the injection (`before`, `during`, `idle`); the classes
    /// only Slurm can see count apart (`during_by_slurm`, [`moment_key`]).
    #[serde(default)]
    pub ttd_by_moment: BTreeMap<String, Ttd>,
    /// Per class, in the order of [`crate::class::ALL`].
    pub per_class: Vec<ClassScore>,
    /// What to change, in words.
    pub findings: Vec<String>,
    /// Currency of `cost_lost`.
    pub currency: Option<String>,
    /// Graded rounds' curves, per class: recall by size ([`crate::grade`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub graded: Vec<ClassCurve>,
    /// Their headline figures, when any round was graded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub graded_summary: Option<GradedSummary>,
}

/// The schema id of the JSON output.
pub const SCHEMA: &str = "fabric-check/drill/v1";

/// Prices for the job cost.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Prices {
    /// GPUs per node.
    pub gpus_per_node: u32,
    /// Capacity cost per GPU-hour and its currency, from the cost file.
    pub per_gpu_h: Option<(f64, String)>,
}

/// How one round scored.
#[derive(Debug, Clone, PartialEq)]
pub struct RoundScore {
    /// The first signal on the faulted node (fault rounds).
    pub hit: Option<Signal>,
    /// Time to detect, seconds.
    pub ttd_s: Option<f64>,
    /// The faulted node was drained.
    pub drained: bool,
    /// Nodes with a signal but no fault, and whether one was a drain.
    pub false_nodes: BTreeMap<String, bool>,
}

/// Scores one round.
pub fn score_round(o: &RoundOutcome) -> RoundScore {
    let control = o.round.is_control();
    let injected = o.injected_at_ms;
    let mut hit: Option<&Signal> = None;
    let mut drained = false;
    let mut false_nodes: BTreeMap<String, bool> = BTreeMap::new();
    for s in &o.signals {
        let on_target = s.node == o.round.node && !control;
        if on_target {
            let Some(t0) = injected else { continue };
            if s.at_ms + CLOCK_SLACK_MS < t0 {
                continue;
            }
            drained |= s.strength == Strength::Drain;
            if hit.is_none_or(|h| s.at_ms < h.at_ms) {
                hit = Some(s);
            }
        } else {
            let e = false_nodes.entry(s.node.clone()).or_insert(false);
            *e |= s.strength == Strength::Drain;
        }
    }
    let ttd_s = match (hit, injected) {
        (Some(h), Some(t0)) => Some(h.at_ms.saturating_sub(t0) as f64 / 1000.0),
        _ => None,
    };
    RoundScore {
        hit: hit.cloned(),
        ttd_s,
        drained,
        false_nodes,
    }
}

fn ratio(a: usize, b: usize) -> Option<f64> {
    (b > 0).then(|| a as f64 / b as f64)
}

fn median(v: &[f64]) -> Option<f64> {
    fabric_base::stats::median(v)
}

/// Scores every round.
pub fn score(seed: u64, outcomes: &[RoundOutcome], prices: &Prices) -> Scores {
    let clean_steps: Vec<f64> = outcomes
        .iter()
        .filter(|o| o.round.class == FaultClass::Clean)
        .filter_map(|o| o.job.as_ref()?.step_p50_s)
        .collect();
    let clean_step = median(&clean_steps);
    let mut per_class = Vec::new();
    let mut all_ttd = Vec::new();
    let mut by_moment: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    let (mut inj, mut det, mut fp, mut fd, mut controls) = (0, 0, 0, 0, 0);
    let mut classes = BTreeSet::new();
    for class in crate::class::ALL {
        let rounds: Vec<&RoundOutcome> = outcomes
            .iter()
            .filter(|o| o.round.class == *class)
            .collect();
        if rounds.is_empty() {
            continue;
        }
        let mut cs = ClassScore {
            class: class.id().to_owned(),
            control: class.is_control(),
            rounds: rounds.len(),
            ..ClassScore::default()
        };
        let mut ttd = Vec::new();
        let mut steps = Vec::new();
        let mut ckpts = Vec::new();
        for o in &rounds {
            if o.error.is_some() {
                cs.errors += 1;
            }
            let rs = score_round(o);
            *cs.moments
                .entry(o.round.moment.id().to_owned())
                .or_default() += 1;
            if !o.round.is_control() && o.injected_at_ms.is_some() {
                cs.injections += 1;
                if let Some(h) = &rs.hit {
                    cs.detected += 1;
                    *cs.detectors.entry(h.detector.id().to_owned()).or_default() += 1;
                    ttd.extend(rs.ttd_s);
                    by_moment
                        .entry(moment_key(*class, o.round.moment))
                        .or_default()
                        .extend(rs.ttd_s);
                } else {
                    *cs.missed_at
                        .entry(o.round.moment.id().to_owned())
                        .or_default() += 1;
                }
                cs.drained += usize::from(rs.drained);
            }
            cs.false_positives += rs.false_nodes.len();
            cs.false_drains += rs.false_nodes.values().filter(|d| **d).count();
            if let Some(j) = &o.job {
                cs.requeues += j.requeues;
                steps.extend(j.step_p50_s);
                ckpts.extend(j.ckpt_total_s);
                if !j.completed {
                    cs.gpu_h_lost +=
                        j.elapsed_s * f64::from(j.nnodes.max(1)) * f64::from(prices.gpus_per_node)
                            / 3600.0;
                }
            }
        }
        cs.recall = ratio(cs.detected, cs.injections);
        cs.precision = ratio(cs.detected, cs.detected + cs.false_positives);
        if cs.control && cs.false_positives == 0 {
            // Nothing said about a control round: nothing wrong said.
            cs.precision = Some(1.0);
        }
        cs.step_time_change_s = match (median(&steps), clean_step) {
            (Some(s), Some(c)) if *class != FaultClass::Clean => Some(s - c),
            _ => None,
        };
        cs.ckpt_p50_s = median(&ckpts);
        cs.cost_lost = prices.per_gpu_h.as_ref().map(|(p, _)| p * cs.gpu_h_lost);
        all_ttd.extend(ttd.iter().copied());
        cs.ttd = Ttd::of(ttd);
        inj += cs.injections;
        det += cs.detected;
        fp += cs.false_positives;
        fd += cs.false_drains;
        if cs.control {
            controls += cs.rounds;
        } else if cs.injections > 0 {
            classes.insert(class.id());
        }
        per_class.push(cs);
    }
    let mut s = Scores {
        schema: SCHEMA.to_owned(),
        seed,
        classes: classes.len(),
        injections: inj,
        detected: det,
        controls,
        recall: ratio(det, inj),
        precision: ratio(det, det + fp),
        false_positives: fp,
        false_drains: fd,
        ttd: Ttd::of(all_ttd),
        ttd_by_moment: by_moment
            .into_iter()
            .map(|(m, v)| (m, Ttd::of(v)))
            .collect(),
        per_class,
        findings: Vec::new(),
        currency: prices.per_gpu_h.as_ref().map(|(_, c)| c.clone()),
        graded: Vec::new(),
        graded_summary: None,
    };
    s.findings = findings(&s);
    (s.graded, s.graded_summary) = curves(outcomes);
    for c in &s.graded {
        for p in c.points.iter().filter(|p| p.control && p.detected > 0) {
            s.findings.push(format!(
                "{} at {} (below its threshold): {} of {} rounds signalled, {} drained: the default fires at a size the checks call healthy",
                c.class, p.size, p.detected, p.injections, p.drained
            ));
        }
    }
    s
}

/// Mildest first: a bandwidth share from the largest, a multiple or a flap count from the
/// smallest.
fn mildness(s: Size) -> i64 {
    match s {
        Size::BandwidthPct(p) => -i64::from(p),
        Size::ThresholdMilli(m) => i64::from(m),
        Size::Flaps(n) => i64::from(n),
    }
}

/// The detection curve of every graded class: per size, the rounds, how many signalled on
/// their node (a detection at a fault size, a false positive at a control size), how many
/// drained it, the signals elsewhere, and for bandwidth the share measured through the cap.
pub fn curves(outcomes: &[RoundOutcome]) -> (Vec<ClassCurve>, Option<GradedSummary>) {
    let mut out = Vec::new();
    for class in crate::class::ALL {
        let mut by_size: BTreeMap<(i64, Size), Vec<&RoundOutcome>> = BTreeMap::new();
        for o in outcomes.iter().filter(|o| o.round.class == *class) {
            if let Some(z) = o.round.size {
                by_size.entry((mildness(z), z)).or_default().push(o);
            }
        }
        if by_size.is_empty() {
            continue;
        }
        let mut curve = ClassCurve {
            class: class.id().to_owned(),
            kind: class.grading().map(|g| g.kind),
            points: Vec::new(),
        };
        for ((_, size), rounds) in by_size {
            let mut p = SizePoint {
                size: size.to_string(),
                control: size.is_control(),
                rounds: rounds.len(),
                ..SizePoint::default()
            };
            let mut measured = Vec::new();
            for o in rounds {
                let Some(t0) = o.injected_at_ms else { continue };
                p.injections += 1;
                measured.extend(o.measured_pct);
                let on_node: Vec<&Signal> = o
                    .signals
                    .iter()
                    .filter(|s| s.node == o.round.node && s.at_ms + CLOCK_SLACK_MS >= t0)
                    .collect();
                let drained = on_node.iter().any(|s| s.strength == Strength::Drain);
                if !on_node.is_empty() {
                    p.detected += 1;
                    p.drained += usize::from(drained);
                    if p.control {
                        p.false_positives += 1;
                        p.false_drains += usize::from(drained);
                    }
                }
                let elsewhere = score_round(o);
                for (node, drain) in &elsewhere.false_nodes {
                    if *node != o.round.node {
                        p.false_positives += 1;
                        p.false_drains += usize::from(*drain);
                    }
                }
            }
            if p.control {
                p.quiet = ratio(p.injections - p.detected, p.injections);
            } else {
                p.recall = ratio(p.detected, p.injections);
            }
            p.measured_pct = median(&measured);
            curve.points.push(p);
        }
        out.push(curve);
    }
    if out.is_empty() {
        return (out, None);
    }
    let controls: Vec<&SizePoint> = out
        .iter()
        .flat_map(|c| &c.points)
        .filter(|p| p.control)
        .collect();
    let (ctl_inj, ctl_quiet) = controls.iter().fold((0, 0), |(i, q), p| {
        (i + p.injections, q + p.injections - p.detected)
    });
    let summary = GradedSummary {
        classes: out.len(),
        sizes: out.iter().map(|c| c.points.len()).sum(),
        recall_at_half_bw: out
            .iter()
            .filter(|c| c.class == FaultClass::Congestion.id())
            .flat_map(|c| &c.points)
            .find(|p| p.size == Size::BandwidthPct(50).to_string())
            .and_then(|p| p.recall),
        quiet_below_threshold: ratio(ctl_quiet, ctl_inj),
        false_drains: out
            .iter()
            .flat_map(|c| &c.points)
            .map(|p| p.false_drains)
            .sum(),
    };
    (out, Some(summary))
}

/// The target the issue sets for a time to detect, seconds.
pub const TTD_GOAL_S: f64 = 15.0;

/// What to change, one sentence each: missed injections (and at which moment), classes caught
/// only by the epilog or only by health, slow detection, and every false positive.
pub fn findings(s: &Scores) -> Vec<String> {
    let mut out = Vec::new();
    for c in &s.per_class {
        if c.control {
            if c.false_positives > 0 {
                out.push(format!(
                    "{}: {} false positive(s), {} false drain(s) in a control that must not drain: raise the threshold that fired or exempt this load",
                    c.class, c.false_positives, c.false_drains
                ));
            }
            continue;
        }
        if c.injections > c.detected {
            let at: Vec<String> = c
                .missed_at
                .iter()
                .map(|(m, n)| format!("{n} {m}"))
                .collect();
            out.push(format!(
                "{}: missed {} of {} injections ({}): lower its threshold or add a check that sees it",
                c.class,
                c.injections - c.detected,
                c.injections,
                at.join(", ")
            ));
        }
        // One detector for rounds at several moments: the others never got there first.
        if c.detected > 0 && c.detectors.len() == 1 && c.moments.len() > 1 {
            let (d, _) = c.detectors.iter().next().expect("one detector");
            if d == "epilog" || d == "health" || d == "slurm" {
                out.push(format!(
                    "{} caught only by the {}: {:.1} s median",
                    c.class,
                    d,
                    c.ttd.p50_s.unwrap_or(0.0)
                ));
            }
        }
        if let Some(p95) = c.ttd.p95_s
            && p95 > TTD_GOAL_S
        {
            out.push(format!(
                "{}: p95 time to detect {:.1} s, above the {TTD_GOAL_S} s goal",
                c.class, p95
            ));
        }
        if c.false_positives > 0 {
            out.push(format!(
                "{}: {} false positive(s) on nodes without the fault ({} drains)",
                c.class, c.false_positives, c.false_drains
            ));
        }
        if c.detected > c.drained && c.drained == 0 && c.detected > 0 {
            out.push(format!(
                "{}: recorded in the job tag ({} of {}) but never drained: by design for a warn-level check; a fail threshold would take the node out",
                c.class, c.detected, c.injections
            ));
        }
    }
    if out.is_empty() {
        out.push("every injection caught, no false positives: nothing to change".to_owned());
    }
    out
}

/// The moments rounds of a class ran at (for the text table).
pub fn moments_of(outcomes: &[RoundOutcome], class: FaultClass) -> BTreeSet<Moment> {
    outcomes
        .iter()
        .filter(|o| o.round.class == class)
        .map(|o| o.round.moment)
        .collect()
}

/// The key of [`Scores::ttd_by_moment`] a class's detections at `moment` count under: the
/// moment's id, or `<moment>_by_slurm` for a class only Slurm can see (a node gone: no probe or
/// watch runs there, so its time is Slurm's `SlurmdTimeout`, not the fabric checks').
pub fn moment_key(class: FaultClass, moment: Moment) -> String {
    if class.spec().seen_only_by_slurm {
        format!("{}_by_slurm", moment.id())
    } else {
        moment.id().to_owned()
    }
}

/// The one line `scripts/bench-drill` ends with; `p95_during_s` is `none` when no fault
/// injected during a job was detected. It counts the classes the fabric checks can see
/// ([`moment_key`]): a node removed mid-job is Slurm's to find, and is in its class's row.
pub fn summary_line(s: &Scores) -> String {
    let during = s
        .ttd_by_moment
        .get(Moment::During.id())
        .and_then(|t| t.p95_s)
        .map_or_else(|| "none".to_owned(), |p| format!("{p:.1}"));
    format!(
        "drill: classes {}, injections {}, recall {:.3}, precision {:.3}, false_drains {}, p95_detect_s {:.1}, p95_during_s {during}",
        s.classes,
        s.injections,
        s.recall.unwrap_or(0.0),
        s.precision.unwrap_or(0.0),
        s.false_drains,
        s.ttd.p95_s.unwrap_or(0.0)
    )
}

/// Detections of one detector over all classes.
pub fn detector_total(s: &Scores, d: Detector) -> usize {
    s.per_class
        .iter()
        .filter_map(|c| c.detectors.get(d.id()))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::class::NodeKind;
    use crate::plan::JobSpec;

    fn round(class: FaultClass, node: &str, moment: Moment) -> Round {
        Round {
            index: 1,
            class,
            node: node.into(),
            kind: NodeKind::Ib,
            moment,
            job: Some(JobSpec {
                nodes: vec![node.into(), "n9".into()],
                full: false,
                fabric_run: true,
                spares: 0,
            }),
            during_at_permille: None,
            size: None,
        }
    }

    fn sig(node: &str, at_ms: u64, d: Detector, s: Strength) -> Signal {
        Signal {
            node: node.into(),
            at_ms,
            detector: d,
            strength: s,
            check: "x".into(),
            job: None,
        }
    }

    fn outcome(class: FaultClass, node: &str, at: u64, signals: Vec<Signal>) -> RoundOutcome {
        RoundOutcome {
            round: round(class, node, Moment::Before),
            injected_at_ms: Some(at),
            signals,
            job: None,
            error: None,
            measured_pct: None,
        }
    }

    fn graded(class: FaultClass, size: &str, signals: Vec<Signal>) -> RoundOutcome {
        let mut o = outcome(class, "n1", 10_000, signals);
        o.round.size = Some(Size::parse(size).unwrap());
        o
    }

    #[test]
    fn a_graded_drill_scores_recall_by_size_and_a_signal_below_the_threshold_as_a_false_positive() {
        let hit = |s| vec![sig("n1", 11_000, Detector::Prolog, s)];
        let outcomes = vec![
            graded(FaultClass::ErrorCounters, "0.5x", vec![]),
            graded(FaultClass::ErrorCounters, "0.5x", vec![]),
            graded(FaultClass::ErrorCounters, "1x", hit(Strength::Drain)),
            graded(FaultClass::ErrorCounters, "2x", hit(Strength::Drain)),
            graded(FaultClass::ErrorCounters, "2x", vec![]),
            graded(FaultClass::ErrorCounters, "10x", hit(Strength::Fail)),
        ];
        let s = score(1, &outcomes, &Prices::default());
        let c = &s.graded[0];
        assert_eq!(c.class, "error_counters");
        let sizes: Vec<&str> = c.points.iter().map(|p| p.size.as_str()).collect();
        assert_eq!(sizes, vec!["0.5x", "1x", "2x", "10x"]);
        assert_eq!(c.points[0].quiet, Some(1.0));
        assert_eq!(c.points[1].quiet, Some(0.0));
        assert_eq!(
            (c.points[1].false_positives, c.points[1].false_drains),
            (1, 1)
        );
        assert_eq!(c.points[2].recall, Some(0.5));
        assert_eq!(c.points[3].recall, Some(1.0));
        // The control sizes stay out of recall and count against precision and false drains.
        let cs = &s.per_class[0];
        assert_eq!((cs.injections, cs.detected), (3, 2));
        assert_eq!((cs.false_positives, cs.false_drains), (1, 1));
        let g = s.graded_summary.as_ref().unwrap();
        assert_eq!((g.classes, g.sizes, g.false_drains), (1, 4, 1));
        assert_eq!(g.quiet_below_threshold, Some(2.0 / 3.0));
        assert_eq!(g.recall_at_half_bw, None);
        assert!(
            s.findings
                .iter()
                .any(|f| f.contains("error_counters at 1x")),
            "{:?}",
            s.findings
        );
    }

    #[test]
    fn the_bandwidth_curve_runs_from_the_mildest_cap_and_keeps_the_measured_share() {
        let mut a = graded(
            FaultClass::Congestion,
            "50%",
            vec![sig("n1", 12_000, Detector::Collective, Strength::Drain)],
        );
        a.measured_pct = Some(48.0);
        let mut b = graded(FaultClass::Congestion, "50%", vec![]);
        b.measured_pct = Some(52.0);
        let c = graded(FaultClass::Congestion, "100%", vec![]);
        let d = graded(
            FaultClass::Congestion,
            "10%",
            vec![sig("n1", 12_000, Detector::Collective, Strength::Drain)],
        );
        let s = score(1, &[a, b, c, d], &Prices::default());
        let sizes: Vec<&str> = s.graded[0].points.iter().map(|p| p.size.as_str()).collect();
        assert_eq!(sizes, vec!["100%", "50%", "10%"]);
        assert_eq!(s.graded[0].points[1].measured_pct, Some(50.0));
        let g = s.graded_summary.unwrap();
        assert_eq!(g.recall_at_half_bw, Some(0.5));
        assert_eq!(g.quiet_below_threshold, Some(1.0));
        assert_eq!(g.false_drains, 0);
    }

    #[test]
    fn a_drill_without_sizes_has_no_curve() {
        let o = outcome(FaultClass::PortDown, "n1", 10_000, vec![]);
        let s = score(1, &[o], &Prices::default());
        assert!(s.graded.is_empty() && s.graded_summary.is_none());
        assert!(!render_json_has_graded(&s));
    }

    fn render_json_has_graded(s: &Scores) -> bool {
        serde_json::to_string(s).unwrap().contains("graded")
    }

    #[test]
    fn the_first_signal_on_the_faulted_node_detects_it_and_times_it() {
        let o = outcome(
            FaultClass::PortDown,
            "n1",
            10_000,
            vec![
                sig("n1", 14_000, Detector::Prolog, Strength::Drain),
                sig("n1", 12_500, Detector::Prolog, Strength::Fail),
            ],
        );
        let r = score_round(&o);
        assert_eq!(r.ttd_s, Some(2.5));
        assert!(r.drained);
        assert_eq!(r.hit.unwrap().strength, Strength::Fail);
        assert!(r.false_nodes.is_empty());
    }

    #[test]
    fn a_signal_before_the_injection_does_not_count() {
        let early = outcome(
            FaultClass::PortDown,
            "n1",
            10_000,
            vec![sig("n1", 9_999, Detector::Prolog, Strength::Fail)],
        );
        assert!(score_round(&early).hit.is_none());
        let at = outcome(
            FaultClass::PortDown,
            "n1",
            10_000,
            vec![sig("n1", 10_000, Detector::Prolog, Strength::Fail)],
        );
        assert_eq!(score_round(&at).ttd_s, Some(0.0));
    }

    #[test]
    fn a_node_removed_mid_job_is_timed_apart_from_the_faults_the_fabric_checks_can_see() {
        let mut gone = outcome(
            FaultClass::NodeRemoved,
            "n3",
            1_000_000,
            vec![sig("n3", 1_030_000, Detector::Slurm, Strength::Drain)],
        );
        gone.round.moment = Moment::During;
        let mut down = outcome(
            FaultClass::PortDown,
            "n2",
            2_000_000,
            vec![sig("n2", 2_001_000, Detector::Watch, Strength::Drain)],
        );
        down.round.moment = Moment::During;
        let s = score(1, &[gone, down], &Prices::default());
        assert_eq!(s.ttd_by_moment["during"].p95_s, Some(1.0));
        assert_eq!(s.ttd_by_moment["during_by_slurm"].p95_s, Some(30.0));
        assert!(
            summary_line(&s).ends_with("p95_during_s 1.0"),
            "{}",
            summary_line(&s)
        );
        assert_eq!(
            s.ttd.max_s,
            Some(30.0),
            "the overall figure keeps every class"
        );
    }

    #[test]
    fn signals_on_other_nodes_and_in_controls_are_false_positives_and_drains_false_drains() {
        let o = outcome(
            FaultClass::EcnOff,
            "n3",
            0,
            vec![
                sig("n3", 1_000, Detector::Epilog, Strength::Drain),
                sig("n4", 1_000, Detector::Prolog, Strength::Warn),
                sig("n2", 1_000, Detector::Prolog, Strength::Drain),
                sig("n2", 1_200, Detector::Prolog, Strength::Fail),
            ],
        );
        let c = outcome(
            FaultClass::CheckpointBurst,
            "n1",
            0,
            vec![sig("n1", 500, Detector::Epilog, Strength::Drain)],
        );
        let s = score(1, &[o, c], &Prices::default());
        assert_eq!(s.injections, 1);
        assert_eq!(s.detected, 1);
        assert_eq!(
            s.false_positives, 3,
            "n4, n2 in the fault round and n1 in the control"
        );
        assert_eq!(s.false_drains, 2);
        assert_eq!(s.precision, Some(0.25));
        assert_eq!(s.recall, Some(1.0));
        let ctl = s
            .per_class
            .iter()
            .find(|c| c.class == "checkpoint_burst")
            .unwrap();
        assert_eq!(ctl.injections, 0);
        assert_eq!(ctl.false_drains, 1);
        assert!(
            s.findings
                .iter()
                .any(|f| f.starts_with("checkpoint_burst: 1 false positive"))
        );
    }

    #[test]
    fn recall_percentiles_detectors_and_findings_per_class() {
        let mut rounds = Vec::new();
        for (i, t) in [2_000u64, 4_000, 6_000, 20_000].iter().enumerate() {
            let mut o = outcome(
                FaultClass::EcnOff,
                "n3",
                1_000_000 * i as u64,
                vec![sig(
                    "n3",
                    1_000_000 * i as u64 + t,
                    Detector::Epilog,
                    Strength::Drain,
                )],
            );
            o.round.moment = Moment::During;
            rounds.push(o);
        }
        let mut missed = outcome(FaultClass::EcnOff, "n3", 9_000_000, vec![]);
        missed.round.moment = Moment::Idle;
        rounds.push(missed);
        let s = score(1, &rounds, &Prices::default());
        let c = &s.per_class[0];
        assert_eq!((c.injections, c.detected), (5, 4));
        assert_eq!(c.recall, Some(0.8));
        assert_eq!(c.precision, Some(1.0));
        assert_eq!(c.ttd.max_s, Some(20.0));
        assert_eq!(c.ttd.p50_s, Some(5.0));
        assert_eq!(c.detectors.get("epilog"), Some(&4));
        assert_eq!(c.missed_at.get("idle"), Some(&1));
        assert_eq!(s.classes, 1);
        let f = s.findings.join("\n");
        assert!(
            f.contains("ecn_off: missed 1 of 5 injections (1 idle)"),
            "{f}"
        );
        assert!(
            f.contains("ecn_off caught only by the epilog: 5.0 s median"),
            "{f}"
        );
        assert!(f.contains("ecn_off: p95 time to detect"), "{f}");
        assert_eq!(
            summary_line(&s),
            format!(
                "drill: classes 1, injections 5, recall 0.800, precision 1.000, false_drains 0, p95_detect_s {:.1}, p95_during_s {:.1}",
                s.ttd.p95_s.unwrap(),
                s.ttd_by_moment["during"].p95_s.unwrap()
            )
        );
        // Every detection here was of a fault injected during a job.
        assert_eq!(s.ttd_by_moment["during"], s.ttd);
        assert!(
            !s.ttd_by_moment.contains_key("idle"),
            "the idle round was missed"
        );
    }

    #[test]
    fn a_failed_injection_is_not_counted_as_a_miss() {
        let mut o = outcome(FaultClass::PortDown, "n1", 0, vec![]);
        o.injected_at_ms = None;
        o.error = Some("could not write the tree".into());
        let s = score(1, &[o], &Prices::default());
        assert_eq!(s.injections, 0);
        assert_eq!(s.per_class[0].errors, 1);
    }

    #[test]
    fn job_cost_counts_requeues_step_time_change_and_lost_gpu_hours_at_the_price() {
        let job = |step: f64, completed: bool, requeues: u32| JobCost {
            id: 1,
            state: "x".into(),
            requeues,
            elapsed_s: 1800.0,
            nnodes: 2,
            step_p50_s: Some(step),
            ckpt_total_s: Some(1.0),
            retries: 0,
            completed,
        };
        let mut clean = outcome(FaultClass::Clean, "n1", 0, vec![]);
        clean.job = Some(job(0.5, true, 0));
        let mut bad = outcome(
            FaultClass::Congestion,
            "n1",
            0,
            vec![sig("n1", 100, Detector::Collective, Strength::Drain)],
        );
        bad.job = Some(job(0.8, false, 1));
        let prices = Prices {
            gpus_per_node: 8,
            per_gpu_h: Some((2.0, "USD".into())),
        };
        let s = score(1, &[clean, bad], &prices);
        let c = s
            .per_class
            .iter()
            .find(|c| c.class == "congestion")
            .unwrap();
        assert_eq!(c.requeues, 1);
        assert!((c.step_time_change_s.unwrap() - 0.3).abs() < 1e-9);
        assert_eq!(c.gpu_h_lost, 8.0, "half an hour on 2 nodes of 8 GPUs");
        assert_eq!(c.cost_lost, Some(16.0));
        assert_eq!(s.currency.as_deref(), Some("USD"));
        assert_eq!(s.controls, 1);
    }
}
